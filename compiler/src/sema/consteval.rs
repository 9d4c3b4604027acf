//! Constant folding with Python's semantics (constexprs are Python values):
//! `//` and `%` floor, `/` gives a float, integers are 64-bit and overflow
//! is an error rather than a wrap.

use super::types::Konst;
use crate::syntax::ast::{BinOp, CmpOp, UnOp};

/// A folded result: `None` when the operation does not apply to these
/// constants (the type rules report it), `Some(Err(why))` when it applies
/// but fails (E0315).
pub type Folded = Option<Result<Konst, String>>;

#[derive(Clone, Copy)]
enum Num {
    I(i64),
    F(f64),
}

fn num(k: &Konst) -> Option<Num> {
    match k {
        Konst::Int(v) => Some(Num::I(*v)),
        Konst::Bool(b) => Some(Num::I(*b as i64)),
        Konst::Float(v) => Some(Num::F(*v)),
        _ => None,
    }
}

fn as_f(n: Num) -> f64 {
    match n {
        Num::I(v) => v as f64,
        Num::F(v) => v,
    }
}

fn overflow(op: BinOp) -> Result<Konst, String> {
    Err(format!("integer overflow in constant `{}`", op.symbol()))
}

/// `x ** y` in floats, as Python refuses it: 0 to a negative power, and a
/// result too large for a float from finite operands.
fn float_pow(x: f64, y: f64) -> Result<Konst, String> {
    if x == 0.0 && y < 0.0 {
        return Err("0 cannot be raised to a negative power".into());
    }
    let r = x.powf(y);
    if r.is_infinite() && x.is_finite() && y.is_finite() {
        return Err("float overflow in constant `**`".into());
    }
    Ok(Konst::Float(r))
}

pub fn binary(op: BinOp, a: &Konst, b: &Konst) -> Folded {
    let (x, y) = (num(a)?, num(b)?);
    let both_bool = matches!((a, b), (Konst::Bool(_), Konst::Bool(_)));
    Some(match (x, y) {
        (Num::I(x), Num::I(y)) => {
            let r = match op {
                BinOp::Add => x.checked_add(y),
                BinOp::Sub => x.checked_sub(y),
                BinOp::Mul => x.checked_mul(y),
                BinOp::Div => {
                    if y == 0 {
                        return Some(Err("division by zero".into()));
                    }
                    return Some(Ok(Konst::Float(x as f64 / y as f64)));
                }
                BinOp::FloorDiv | BinOp::Mod => {
                    if y == 0 {
                        return Some(Err(format!(
                            "{} by zero",
                            if op == BinOp::Mod { "modulo" } else { "division" }
                        )));
                    }
                    let (q, r) = (x.checked_div(y), x.checked_rem(y));
                    match (q, r) {
                        (Some(q), Some(r)) => {
                            // Python floors: adjust when signs differ.
                            let adjust = r != 0 && ((r < 0) != (y < 0));
                            if op == BinOp::FloorDiv {
                                Some(if adjust { q - 1 } else { q })
                            } else {
                                Some(if adjust { r + y } else { r })
                            }
                        }
                        _ => None,
                    }
                }
                BinOp::Pow => {
                    if y < 0 {
                        return Some(float_pow(x as f64, y as f64));
                    }
                    u32::try_from(y).ok().and_then(|y| x.checked_pow(y))
                }
                BinOp::Shl | BinOp::Shr => {
                    if !(0..64).contains(&y) {
                        return Some(Err(format!("shift amount {y} is out of range 0..64")));
                    }
                    if op == BinOp::Shl {
                        // x · 2^y exactly (|x| < 2^63 and y < 64 fit i128):
                        // `1 << 63` does not fit, `-1 << 63` does.
                        i64::try_from(i128::from(x) << y).ok()
                    } else {
                        Some(x >> y)
                    }
                }
                BinOp::BitAnd => Some(x & y),
                BinOp::BitOr => Some(x | y),
                BinOp::BitXor => Some(x ^ y),
            };
            match r {
                Some(v) if both_bool && matches!(op, BinOp::BitAnd | BinOp::BitOr | BinOp::BitXor) => {
                    Ok(Konst::Bool(v != 0))
                }
                Some(v) => Ok(Konst::Int(v)),
                None => overflow(op),
            }
        }
        (x, y) => {
            let (x, y) = (as_f(x), as_f(y));
            match op {
                BinOp::Add => Ok(Konst::Float(x + y)),
                BinOp::Sub => Ok(Konst::Float(x - y)),
                BinOp::Mul => Ok(Konst::Float(x * y)),
                BinOp::Div => {
                    if y == 0.0 {
                        Err("division by zero".into())
                    } else {
                        Ok(Konst::Float(x / y))
                    }
                }
                BinOp::FloorDiv => {
                    if y == 0.0 {
                        Err("division by zero".into())
                    } else {
                        Ok(Konst::Float((x / y).floor()))
                    }
                }
                BinOp::Mod => {
                    if y == 0.0 {
                        Err("modulo by zero".into())
                    } else {
                        // As the run time computes it (language.md): with
                        // `//` above, `a == (a // b) * b + a % b` holds
                        // for folded constants too, and infinities give
                        // what a run gives (NaN).
                        Ok(Konst::Float(x - (x / y).floor() * y))
                    }
                }
                BinOp::Pow => float_pow(x, y),
                // Bitwise operators on floats are a type error, reported by
                // the type rules.
                _ => return None,
            }
        }
    })
}

pub fn compare(op: CmpOp, a: &Konst, b: &Konst) -> Option<Konst> {
    if let (Some(x), Some(y)) = (num(a), num(b)) {
        let ord = match (x, y) {
            (Num::I(x), Num::I(y)) => x.partial_cmp(&y),
            (x, y) => as_f(x).partial_cmp(&as_f(y)),
        };
        let r = match op {
            CmpOp::Lt => ord == Some(std::cmp::Ordering::Less),
            CmpOp::Le => matches!(ord, Some(std::cmp::Ordering::Less | std::cmp::Ordering::Equal)),
            CmpOp::Gt => ord == Some(std::cmp::Ordering::Greater),
            CmpOp::Ge => matches!(ord, Some(std::cmp::Ordering::Greater | std::cmp::Ordering::Equal)),
            CmpOp::Eq | CmpOp::Is => ord == Some(std::cmp::Ordering::Equal),
            CmpOp::Ne | CmpOp::IsNot => ord != Some(std::cmp::Ordering::Equal),
        };
        return Some(Konst::Bool(r));
    }
    match op {
        CmpOp::Eq | CmpOp::Is => Some(Konst::Bool(a == b)),
        CmpOp::Ne | CmpOp::IsNot => Some(Konst::Bool(a != b)),
        _ => None,
    }
}

pub fn unary(op: UnOp, a: &Konst) -> Folded {
    Some(match (op, a) {
        (UnOp::Not, k) => Ok(Konst::Bool(!truthy(k)?)),
        (UnOp::Pos, Konst::Int(_) | Konst::Float(_)) => Ok(a.clone()),
        (UnOp::Pos, Konst::Bool(b)) => Ok(Konst::Int(*b as i64)),
        (UnOp::Neg, Konst::Int(v)) => v
            .checked_neg()
            .map(Konst::Int)
            .ok_or_else(|| "integer overflow in constant `-`".to_string()),
        (UnOp::Neg, Konst::Bool(b)) => Ok(Konst::Int(-(*b as i64))),
        (UnOp::Neg, Konst::Float(v)) => Ok(Konst::Float(-v)),
        (UnOp::Invert, Konst::Int(v)) => Ok(Konst::Int(!v)),
        (UnOp::Invert, Konst::Bool(b)) => Ok(Konst::Int(!(*b as i64))),
        _ => return None,
    })
}

/// Python truthiness of a constant.
pub fn truthy(k: &Konst) -> Option<bool> {
    Some(match k {
        Konst::Int(v) => *v != 0,
        Konst::Float(v) => *v != 0.0,
        Konst::Bool(b) => *b,
        Konst::None => false,
        Konst::Str(s) => !s.is_empty(),
        Konst::Tuple(t) => !t.is_empty(),
        Konst::DType(_) | Konst::Direction(_) => true,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fold(op: BinOp, a: i64, b: i64) -> Konst {
        binary(op, &Konst::Int(a), &Konst::Int(b)).unwrap().unwrap()
    }

    #[test]
    fn python_floor_semantics() {
        assert_eq!(fold(BinOp::FloorDiv, -7, 2), Konst::Int(-4));
        assert_eq!(fold(BinOp::Mod, -7, 2), Konst::Int(1));
        assert_eq!(fold(BinOp::Mod, 7, -2), Konst::Int(-1));
        assert_eq!(fold(BinOp::Div, 7, 2), Konst::Float(3.5));
        assert_eq!(fold(BinOp::Pow, 2, 10), Konst::Int(1024));
    }

    /// Float `//` and `%` fold as the run time computes them
    /// (language.md): `a // b` is `floor(a / b)`, `a % b` is
    /// `a - floor(a / b) * b`, so the pair recombines to `a`, and an
    /// infinite divisor gives NaN, as a run does.
    #[test]
    fn float_floor_division_and_modulo_agree() {
        let f = |op, a: f64, b: f64| match binary(op, &Konst::Float(a), &Konst::Float(b)) {
            Some(Ok(Konst::Float(v))) => v,
            other => panic!("{other:?}"),
        };
        assert_eq!(f(BinOp::FloorDiv, 1.0, 0.1), 10.0);
        assert_eq!(f(BinOp::Mod, 1.0, 0.1), 0.0);
        assert_eq!(f(BinOp::Mod, -7.5, 2.0), 0.5);
        assert_eq!(f(BinOp::Mod, 7.5, -2.0), -0.5);
        assert!(f(BinOp::Mod, 5.0, f64::INFINITY).is_nan());
        let z = f(BinOp::Mod, -0.0, 1.0);
        assert!(z == 0.0 && z.is_sign_positive(), "{z}");
    }

    #[test]
    fn overflow_and_zero_division_are_errors() {
        assert!(binary(BinOp::Mul, &Konst::Int(i64::MAX), &Konst::Int(2))
            .unwrap()
            .is_err());
        assert!(binary(BinOp::FloorDiv, &Konst::Int(1), &Konst::Int(0))
            .unwrap()
            .is_err());
        assert!(binary(BinOp::Shl, &Konst::Int(1), &Konst::Int(64)).unwrap().is_err());
        // Python's `<<` is x · 2^y: 2^63 does not fit i64, -2^63 does.
        assert!(binary(BinOp::Shl, &Konst::Int(1), &Konst::Int(63)).unwrap().is_err());
        assert_eq!(fold(BinOp::Shl, -1, 63), Konst::Int(i64::MIN));
        assert_eq!(fold(BinOp::Shl, 1, 62), Konst::Int(1 << 62));
        assert!(binary(BinOp::Shl, &Konst::Int(3), &Konst::Int(62)).unwrap().is_err());
        assert_eq!(fold(BinOp::Shl, -3, 2), Konst::Int(-12));
        // Powers Python refuses.
        assert!(binary(BinOp::Pow, &Konst::Int(0), &Konst::Int(-1)).unwrap().is_err());
        assert!(binary(BinOp::Pow, &Konst::Float(0.0), &Konst::Int(-2))
            .unwrap()
            .is_err());
        assert!(binary(BinOp::Pow, &Konst::Float(2.0), &Konst::Int(10000))
            .unwrap()
            .is_err());
        assert_eq!(fold(BinOp::Pow, 2, -1), Konst::Float(0.5));
    }
}
