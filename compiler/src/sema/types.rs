//! The types of `tl` values, compile-time constants, and Triton's rules for
//! combining them: dtype promotion and NumPy broadcasting.

use std::fmt;

/// An element type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    Bool,
    I8,
    I32,
    I64,
    U8,
    U32,
    F16,
    BF16,
    F32,
}

impl DType {
    pub const ALL: [DType; 9] = [
        DType::Bool,
        DType::I8,
        DType::I32,
        DType::I64,
        DType::U8,
        DType::U32,
        DType::F16,
        DType::BF16,
        DType::F32,
    ];

    /// The canonical `tl` spelling.
    pub fn name(self) -> &'static str {
        match self {
            DType::Bool => "bool",
            DType::I8 => "i8",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::U8 => "u8",
            DType::U32 => "u32",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::F32 => "f32",
        }
    }

    /// A dtype by its `tl` name or Triton alias (`float16`, `int32`, …).
    pub fn from_name(name: &str) -> Option<DType> {
        Some(match name {
            "bool" | "int1" => DType::Bool,
            "i8" | "int8" => DType::I8,
            "i32" | "int32" => DType::I32,
            "i64" | "int64" => DType::I64,
            "u8" | "uint8" => DType::U8,
            "u32" | "uint32" => DType::U32,
            "f16" | "float16" => DType::F16,
            "bf16" | "bfloat16" => DType::BF16,
            "f32" | "float32" => DType::F32,
            _ => return None,
        })
    }

    pub fn is_float(self) -> bool {
        matches!(self, DType::F16 | DType::BF16 | DType::F32)
    }

    /// Integers, including `bool` (a 1-bit unsigned integer, as in Triton).
    pub fn is_int(self) -> bool {
        !self.is_float()
    }

    pub fn is_signed(self) -> bool {
        matches!(self, DType::I8 | DType::I32 | DType::I64)
    }

    pub fn bits(self) -> u32 {
        match self {
            DType::Bool => 1,
            DType::I8 | DType::U8 => 8,
            DType::F16 | DType::BF16 => 16,
            DType::I32 | DType::U32 | DType::F32 => 32,
            DType::I64 => 64,
        }
    }

    /// Storage size of one element.
    pub fn size_bytes(self) -> u64 {
        match self {
            DType::Bool | DType::I8 | DType::U8 => 1,
            DType::F16 | DType::BF16 => 2,
            DType::I32 | DType::U32 | DType::F32 => 4,
            DType::I64 => 8,
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What one element of a scalar or block is: a number or a pointer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Elem {
    Num(DType),
    Ptr(DType),
}

impl fmt::Display for Elem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Elem::Num(d) => write!(f, "{d}"),
            Elem::Ptr(d) => write!(f, "ptr[{d}]"),
        }
    }
}

/// One dimension of a block: its extent, or `None` while a constexpr it
/// depends on is unbound.
pub type Dim = Option<u64>;
pub type Shape = Vec<Dim>;

/// Number of elements, if every dimension is known; `u64::MAX` when the
/// product does not fit (a size check must refuse it, not take it for an
/// unknown one).
pub fn numel(shape: &[Dim]) -> Option<u64> {
    let n = shape
        .iter()
        .try_fold(1u128, |acc, d| d.map(|d| acc.saturating_mul(u128::from(d))))?;
    Some(u64::try_from(n).unwrap_or(u64::MAX))
}

pub fn shape_string(shape: &[Dim]) -> String {
    let dims: Vec<String> = shape
        .iter()
        .map(|d| d.map_or("?".to_string(), |d| d.to_string()))
        .collect();
    format!("[{}]", dims.join(", "))
}

/// A shape as a Python tuple literal: `(64,)`, `(16, 32)`.
pub fn shape_tuple(shape: &[Dim]) -> String {
    let dims: Vec<String> = shape
        .iter()
        .map(|d| d.map_or("?".to_string(), |d| d.to_string()))
        .collect();
    if dims.len() == 1 {
        format!("({},)", dims[0])
    } else {
        format!("({})", dims.join(", "))
    }
}

/// A direction constant of the communicator layout (`tl.NEXT`, …).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Direction {
    Next,
    Prev,
    North,
    South,
    East,
    West,
}

impl Direction {
    /// How many there are (`d as usize` is below it; `West` stays last).
    pub const COUNT: usize = Direction::West as usize + 1;

    pub fn name(self) -> &'static str {
        match self {
            Direction::Next => "NEXT",
            Direction::Prev => "PREV",
            Direction::North => "NORTH",
            Direction::South => "SOUTH",
            Direction::East => "EAST",
            Direction::West => "WEST",
        }
    }
}

/// A compile-time value.
#[derive(Clone, Debug, PartialEq)]
pub enum Konst {
    Int(i64),
    Float(f64),
    Bool(bool),
    DType(DType),
    Str(String),
    None,
    Tuple(Vec<Konst>),
    Direction(Direction),
}

impl Konst {
    pub fn as_int(&self) -> Option<i64> {
        match self {
            Konst::Int(v) => Some(*v),
            Konst::Bool(b) => Some(*b as i64),
            _ => None,
        }
    }

    /// Parses a `-D NAME=VALUE` value: an integer, a float, `True`/`False`,
    /// a dtype name, or else a string.
    pub fn parse_define(text: &str) -> Konst {
        let t = text.trim();
        match int_literal(t) {
            Some(Some(v)) => return Konst::Int(v),
            // Digits past 64 bits stay text (an error where a number is
            // wanted), not a float that looks right.
            Some(None) => return Konst::Str(t.to_string()),
            None => {}
        }
        if let Ok(v) = t.parse::<f64>() {
            return Konst::Float(v);
        }
        match t {
            "True" | "true" => return Konst::Bool(true),
            "False" | "false" => return Konst::Bool(false),
            _ => {}
        }
        if let Some(d) = DType::from_name(t.trim_start_matches("tl.")) {
            return Konst::DType(d);
        }
        Konst::Str(t.to_string())
    }

    /// The type a constant has when used as a value.
    pub fn ty(&self) -> Ty {
        match self {
            Konst::Int(v) => Ty::Scalar(Elem::Num(if i32::try_from(*v).is_ok() {
                DType::I32
            } else {
                DType::I64
            })),
            Konst::Float(_) => Ty::Scalar(Elem::Num(DType::F32)),
            Konst::Bool(_) => Ty::Scalar(Elem::Num(DType::Bool)),
            Konst::DType(_) => Ty::DType,
            Konst::Str(_) => Ty::Str,
            Konst::None => Ty::NoneTy,
            Konst::Tuple(items) => Ty::Tuple(items.iter().map(Konst::ty).collect()),
            Konst::Direction(_) => Ty::Direction,
        }
    }
}

/// `t` as a Python integer literal (`42`, `-7`, `0x1F`, `0o17`, `0b101`,
/// `1_000`): `Some(Some(v))`, or `Some(None)` when it does not fit 64 bits;
/// `None` when it is not one.
pub fn int_literal(t: &str) -> Option<Option<i64>> {
    let (negative, body) = match t.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, t.strip_prefix('+').unwrap_or(t)),
    };
    let lower = body.to_ascii_lowercase();
    let (radix, digits) = match lower.get(..2) {
        Some("0x") => (16, &lower[2..]),
        Some("0o") => (8, &lower[2..]),
        Some("0b") => (2, &lower[2..]),
        _ => (10, lower.as_str()),
    };
    // Underscores only between digits, as Python allows.
    let ok_underscores = !digits.starts_with('_') && !digits.ends_with('_') && !digits.contains("__");
    let clean: String = digits.chars().filter(|&c| c != '_').collect();
    if clean.is_empty() || !ok_underscores || !clean.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    let magnitude = u128::from_str_radix(&clean, radix).ok();
    let value = magnitude.and_then(|m| {
        let m = i128::try_from(m).ok()?;
        i64::try_from(if negative { -m } else { m }).ok()
    });
    Some(value)
}

impl fmt::Display for Konst {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Konst::Int(v) => write!(f, "{v}"),
            Konst::Float(v) => write!(f, "{v:?}"),
            Konst::Bool(b) => f.write_str(if *b { "True" } else { "False" }),
            Konst::DType(d) => write!(f, "{d}"),
            Konst::Str(s) => write!(f, "{s:?}"),
            Konst::None => f.write_str("None"),
            Konst::Tuple(items) => {
                let parts: Vec<String> = items.iter().map(|k| k.to_string()).collect();
                if parts.len() == 1 {
                    write!(f, "({},)", parts[0])
                } else {
                    write!(f, "({})", parts.join(", "))
                }
            }
            Konst::Direction(d) => write!(f, "tl.{}", d.name()),
        }
    }
}

/// Identifies a function (kernel or helper) of the checked program.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FuncId(pub u32);

/// Identifies a loaded module.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ModId(pub u32);

/// Something with attributes: `tl`, `triton`, or an imported module.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Namespace {
    Tl,
    Triton,
    Module(ModId),
}

/// The static type of a value.
#[derive(Clone, Debug, PartialEq)]
pub enum Ty {
    /// Not known: an earlier error, an unbound constexpr, or an unannotated
    /// helper parameter checked without a call site. Never reported on.
    Unknown,
    Scalar(Elem),
    Block(Elem, Shape),
    /// What `tl.recv_async` returns; `tl.wait` turns it into a block.
    Future(DType, Shape),
    Tuple(Vec<Ty>),
    /// A dtype used as a value (`f16`, `x.dtype`).
    DType,
    Str,
    NoneTy,
    Direction,
    Namespace(Namespace),
    Func(FuncId),
    Builtin(super::builtins::Builtin),
    /// `x.to` before it is called.
    ToMethod(Box<Ty>),
}

impl Ty {
    pub fn num(d: DType) -> Ty {
        Ty::Scalar(Elem::Num(d))
    }

    /// The element type of a scalar or block.
    pub fn elem(&self) -> Option<Elem> {
        match self {
            Ty::Scalar(e) | Ty::Block(e, _) => Some(*e),
            _ => None,
        }
    }

    /// The numeric dtype of a scalar or block of numbers.
    pub fn dtype(&self) -> Option<DType> {
        match self.elem() {
            Some(Elem::Num(d)) => Some(d),
            _ => None,
        }
    }

    /// Shape of a scalar (`[]`) or block.
    pub fn shape(&self) -> Option<&[Dim]> {
        match self {
            Ty::Scalar(_) => Some(&[]),
            Ty::Block(_, s) => Some(s),
            _ => None,
        }
    }

    pub fn is_block(&self) -> bool {
        matches!(self, Ty::Block(..))
    }

    pub fn is_unknown(&self) -> bool {
        matches!(self, Ty::Unknown)
    }

    /// A scalar or block with the given element and shape (`[]` → scalar).
    pub fn with_shape(elem: Elem, shape: Shape) -> Ty {
        if shape.is_empty() {
            Ty::Scalar(elem)
        } else {
            Ty::Block(elem, shape)
        }
    }

    /// Whether two types are the same up to unknown parts.
    pub fn compatible(&self, other: &Ty) -> bool {
        match (self, other) {
            (Ty::Unknown, _) | (_, Ty::Unknown) => true,
            (Ty::Block(a, sa), Ty::Block(b, sb)) => {
                a == b && sa.len() == sb.len() && sa.iter().zip(sb).all(|(x, y)| x.is_none() || y.is_none() || x == y)
            }
            (Ty::Future(a, sa), Ty::Future(b, sb)) => a == b && sa.len() == sb.len(),
            (Ty::Tuple(a), Ty::Tuple(b)) => a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.compatible(y)),
            (a, b) => a == b,
        }
    }

    /// A short description for messages: `block[f32, 64]`, `ptr[f16]`, `i32`.
    pub fn describe(&self) -> String {
        self.to_string()
    }
}

impl fmt::Display for Ty {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Ty::Unknown => f.write_str("{unknown}"),
            Ty::Scalar(e) => write!(f, "{e}"),
            Ty::Block(e, s) => {
                let dims: Vec<String> = s.iter().map(|d| d.map_or("?".into(), |d| d.to_string())).collect();
                write!(f, "block[{e}, {}]", dims.join(", "))
            }
            Ty::Future(d, s) => {
                let dims: Vec<String> = s.iter().map(|d| d.map_or("?".into(), |d| d.to_string())).collect();
                write!(f, "future[{d}, {}]", dims.join(", "))
            }
            Ty::Tuple(items) => {
                let parts: Vec<String> = items.iter().map(|t| t.to_string()).collect();
                write!(f, "tuple({})", parts.join(", "))
            }
            Ty::DType => f.write_str("dtype"),
            Ty::Str => f.write_str("str"),
            Ty::NoneTy => f.write_str("None"),
            Ty::Direction => f.write_str("direction"),
            Ty::Namespace(Namespace::Tl) => f.write_str("module `tl`"),
            Ty::Namespace(Namespace::Triton) => f.write_str("module `triton`"),
            Ty::Namespace(Namespace::Module(_)) => f.write_str("module"),
            Ty::Func(_) => f.write_str("function"),
            Ty::Builtin(b) => write!(f, "built-in `{}`", b.name()),
            Ty::ToMethod(_) => f.write_str("method `to`"),
        }
    }
}

/// Integer promotion (Triton's `integer_promote_impl`): the wider type
/// wins; between signed and unsigned of the same width, the unsigned one.
fn integer_promote(a: DType, b: DType) -> DType {
    if a == b {
        return a;
    }
    if a == DType::Bool {
        return b;
    }
    if b == DType::Bool {
        return a;
    }
    match (a.is_signed(), b.is_signed()) {
        (sa, sb) if sa == sb => {
            if a.bits() >= b.bits() {
                a
            } else {
                b
            }
        }
        (false, true) => {
            if a.bits() >= b.bits() {
                a
            } else {
                b
            }
        }
        _ => {
            if b.bits() >= a.bits() {
                b
            } else {
                a
            }
        }
    }
}

/// Triton's kinds, ordered: a weak scalar of a kind no higher than the
/// other operand's does not take part in promotion.
fn kind(d: DType) -> u8 {
    match d {
        DType::Bool => 0,
        DType::U8 | DType::U32 => 1,
        DType::I8 | DType::I32 | DType::I64 => 2,
        DType::F16 | DType::BF16 | DType::F32 => 3,
    }
}

/// Why two operands have no common type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PromoteError(pub String);

/// The dtype an arithmetic operation computes in: Triton's
/// `computation_type_impl`, rule for rule.
///
/// 0. A *weak* operand (a Python scalar or constexpr) whose kind
///    (bool < unsigned < signed < float) is no higher than the other's
///    adopts the other operand's type (`x_f16 * 2.0` is f16, `x_i8 + 1` is
///    i8); for `/`, `//` and `%` on f16/bf16 that type is f32.
/// 1. Either f32 → f32.
/// 2. Either f16 → f16 (f32 for `/`, `//`, `%`).
/// 3. Either bf16 → bf16 if both are, else f32 (f32 for `/`, `//`, `%`).
/// 4. Both integers → the wider; at equal width the unsigned one;
///    `/`, `//`, `%` between signed and unsigned are an error.
pub fn promote(a: DType, a_weak: bool, b: DType, b_weak: bool, div_or_mod: bool) -> Result<DType, PromoteError> {
    if a_weak != b_weak {
        let (scalar, tensor) = if a_weak { (a, b) } else { (b, a) };
        if kind(scalar) <= kind(tensor) {
            if div_or_mod && matches!(tensor, DType::F16 | DType::BF16) {
                return Ok(DType::F32);
            }
            return Ok(tensor);
        }
    }
    if a == DType::F32 || b == DType::F32 {
        return Ok(DType::F32);
    }
    if a == DType::F16 || b == DType::F16 {
        return Ok(if div_or_mod { DType::F32 } else { DType::F16 });
    }
    if a == DType::BF16 || b == DType::BF16 {
        return Ok(if !div_or_mod && a == b { DType::BF16 } else { DType::F32 });
    }
    if div_or_mod && a != DType::Bool && b != DType::Bool && a.is_signed() != b.is_signed() {
        return Err(PromoteError(format!("{a} and {b} have different signedness")));
    }
    Ok(integer_promote(a, b))
}

/// NumPy broadcasting of two shapes; `Err` names the first axis (counted
/// from the left of the longer shape) that does not fit.
pub fn broadcast(a: &[Dim], b: &[Dim]) -> Result<Shape, usize> {
    let n = a.len().max(b.len());
    let mut out = vec![None; n];
    for i in 0..n {
        let da = if i + a.len() >= n { a[i + a.len() - n] } else { Some(1) };
        let db = if i + b.len() >= n { b[i + b.len() - n] } else { Some(1) };
        out[i] = match (da, db) {
            (Some(1), d) | (d, Some(1)) => d,
            (Some(x), Some(y)) if x == y => Some(x),
            (Some(_), Some(_)) => return Err(i),
            _ => None,
        };
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use DType::*;

    fn p(a: DType, aw: bool, b: DType, bw: bool, div: bool) -> DType {
        promote(a, aw, b, bw, div).unwrap()
    }

    #[test]
    fn defines_read_python_integer_literals() {
        assert_eq!(Konst::parse_define("0x10"), Konst::Int(16));
        assert_eq!(Konst::parse_define("-0b101"), Konst::Int(-5));
        assert_eq!(Konst::parse_define("0o17"), Konst::Int(15));
        assert_eq!(Konst::parse_define("1_024"), Konst::Int(1024));
        assert_eq!(Konst::parse_define("-9223372036854775808"), Konst::Int(i64::MIN));
        // Past 64 bits: text (refused where a number is wanted), not 1e20.
        assert_eq!(
            Konst::parse_define("99999999999999999999"),
            Konst::Str("99999999999999999999".into())
        );
        assert_eq!(int_literal("9223372036854775808"), Some(None));
        assert_eq!(Konst::parse_define("2.5"), Konst::Float(2.5));
        assert_eq!(Konst::parse_define("1e3"), Konst::Float(1000.0));
        assert_eq!(Konst::parse_define("0x"), Konst::Str("0x".into()));
        assert_eq!(Konst::parse_define("1__0"), Konst::Str("1__0".into()));
    }

    #[test]
    fn promotion_follows_triton() {
        assert_eq!(p(F16, false, F32, false, false), F32);
        assert_eq!(p(F16, false, BF16, false, false), F16);
        assert_eq!(p(BF16, false, I32, false, false), F32);
        assert_eq!(p(BF16, false, BF16, false, false), BF16);
        assert_eq!(p(F16, false, F16, false, true), F32);
        assert_eq!(p(F16, false, F32, true, false), F16);
        assert_eq!(p(F16, false, F32, true, true), F32);
        assert_eq!(p(I32, false, F32, true, false), F32);
        assert_eq!(p(I8, false, I32, true, false), I8);
        assert_eq!(p(U8, false, I32, true, false), I32);
        assert_eq!(p(I8, false, I32, false, false), I32);
        assert_eq!(p(I32, false, U32, false, false), U32);
        assert_eq!(p(I64, false, U32, false, false), I64);
        assert_eq!(p(Bool, false, Bool, false, false), Bool);
        assert_eq!(p(Bool, false, I32, true, false), I32);
        assert_eq!(p(F16, false, I64, false, false), F16);
        assert!(promote(I32, false, U32, false, true).is_err());
    }

    #[test]
    fn broadcasting_follows_numpy() {
        let s = |v: &[u64]| v.iter().map(|&d| Some(d)).collect::<Vec<_>>();
        assert_eq!(broadcast(&s(&[64, 1]), &s(&[1, 32])), Ok(s(&[64, 32])));
        assert_eq!(broadcast(&s(&[8]), &s(&[4, 8])), Ok(s(&[4, 8])));
        assert_eq!(broadcast(&s(&[]), &s(&[4])), Ok(s(&[4])));
        assert_eq!(broadcast(&s(&[3]), &s(&[4])), Err(0));
        assert_eq!(broadcast(&[None], &s(&[4])), Ok(vec![None]));
    }
}
