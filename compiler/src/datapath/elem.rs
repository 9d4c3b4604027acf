//! Element semantics: what every operation does to one element of each
//! dtype. This is the definition the reference interpreter, the executor's
//! scalar arithmetic and the JIT's helper calls all share, so they agree
//! bit for bit.
//!
//! - Integers wrap (two's complement); division and remainder truncate
//!   (C, Triton); division by zero is an error; `MIN / -1` wraps.
//! - Shift amounts are taken modulo the bit width; `>>` is arithmetic for
//!   signed types and logical for unsigned ones.
//! - `bool` is a 1-bit unsigned integer: arithmetic is modulo 2.
//! - Floats round to nearest, ties to even. f16/bf16 operations compute in
//!   f32 and round once (exact for + − × ÷ and sqrt). Every NaN a float
//!   operation produces is the canonical quiet NaN, so results do not
//!   depend on the CPU's NaN propagation.
//! - Transcendentals never use the platform's libm, so results are the
//!   same on every machine: `exp` (and `sigmoid`) is [`expf`] below, the
//!   others come from the `libm` crate (a port of musl's).
//! - Conversions to f16/bf16 go through f32; float → integer conversions
//!   truncate and saturate, NaN giving 0 (Rust's `as`).
//! - `max`/`min` ignore a NaN operand (IEEE maxNum) and order −0 < +0.

use crate::ir::{BinaryOp, CmpOp, UnaryOp};
use crate::sema::types::DType;
use half::{bf16, f16};

/// Why an element operation failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ElemError {
    DivisionByZero,
}

pub const CANONICAL_NAN_F32: u32 = 0x7fc0_0000;

#[inline]
pub fn canon(x: f32) -> f32 {
    if x.is_nan() {
        f32::from_bits(CANONICAL_NAN_F32)
    } else {
        x
    }
}

/// f32 → f16, round to nearest even (NaN canonical).
#[inline]
pub fn f32_to_f16_bits(x: f32) -> u16 {
    f16::from_f32(canon(x)).to_bits()
}

#[inline]
pub fn f16_bits_to_f32(b: u16) -> f32 {
    f16::from_bits(b).to_f32()
}

#[inline]
pub fn f32_to_bf16_bits(x: f32) -> u16 {
    bf16::from_f32(canon(x)).to_bits()
}

#[inline]
pub fn bf16_bits_to_f32(b: u16) -> f32 {
    bf16::from_bits(b).to_f32()
}

/// A scalar of any dtype, as the bits its storage holds (zero-extended).
/// Pointers are plain `u64` addresses.
pub type Bits = u64;

/// The value of `bits` of dtype `d` as f32 (floats) — exact.
#[inline]
pub fn to_f32(d: DType, bits: Bits) -> f32 {
    match d {
        DType::F32 => f32::from_bits(bits as u32),
        DType::F16 => f16_bits_to_f32(bits as u16),
        DType::BF16 => bf16_bits_to_f32(bits as u16),
        _ => to_i64(d, bits) as f32,
    }
}

#[inline]
pub fn from_f32(d: DType, x: f32) -> Bits {
    match d {
        DType::F32 => canon(x).to_bits() as u64,
        DType::F16 => f32_to_f16_bits(x) as u64,
        DType::BF16 => f32_to_bf16_bits(x) as u64,
        _ => cast_f32_to_int(d, x),
    }
}

/// Sign- or zero-extends integer bits of dtype `d`.
#[inline]
pub fn to_i64(d: DType, bits: Bits) -> i64 {
    match d {
        DType::Bool => (bits & 1) as i64,
        DType::I8 => bits as u8 as i8 as i64,
        DType::U8 => bits as u8 as i64,
        DType::I32 => bits as u32 as i32 as i64,
        DType::U32 => bits as u32 as i64,
        DType::I64 => bits as i64,
        _ => to_f32(d, bits) as i64,
    }
}

/// Truncates an i64 to dtype `d`'s width (wrapping), as stored bits.
#[inline]
pub fn from_i64(d: DType, v: i64) -> Bits {
    match d {
        DType::Bool => (v & 1) as u64,
        DType::I8 | DType::U8 => v as u8 as u64,
        DType::I32 | DType::U32 => v as u32 as u64,
        DType::I64 => v as u64,
        DType::F32 | DType::F16 | DType::BF16 => from_f32(d, v as f32),
    }
}

#[inline]
fn cast_f32_to_int(d: DType, x: f32) -> Bits {
    match d {
        DType::Bool => (x != 0.0) as u64,
        DType::I8 => x as i8 as u8 as u64,
        DType::U8 => x as u8 as u64,
        DType::I32 => x as i32 as u32 as u64,
        DType::U32 => x as u32 as u64,
        _ => x as i64 as u64,
    }
}

/// Converts a value of dtype `from` to dtype `to`.
#[inline]
pub fn cast(from: DType, to: DType, bits: Bits) -> Bits {
    if from == to {
        return bits;
    }
    match (from.is_float(), to.is_float()) {
        (true, _) => {
            let x = to_f32(from, bits);
            if to == DType::Bool {
                return (x != 0.0 || x.is_nan()) as u64;
            }
            from_f32(to, x)
        }
        (false, true) => {
            let v = to_i64(from, bits);
            // Unsigned 64-bit values do not exist; every integer fits i64.
            from_f32(to, v as f32)
        }
        (false, false) => {
            if to == DType::Bool {
                return (to_i64(from, bits) != 0) as u64;
            }
            from_i64(to, to_i64(from, bits))
        }
    }
}

/// Reinterprets bits (same width; checked by the front end).
#[inline]
pub fn bitcast(to: DType, bits: Bits) -> Bits {
    let mask = if to.bits() >= 64 {
        u64::MAX
    } else {
        (1u64 << to.bits().max(8)) - 1
    };
    let b = bits & mask;
    if to == DType::Bool {
        b & 1
    } else {
        b
    }
}

/// A constant's bits: `v` (the literal's natural value, i64 or f32)
/// converted to `d`.
pub fn const_int(d: DType, v: i64) -> Bits {
    if d.is_float() {
        from_f32(d, v as f32)
    } else if d == DType::Bool {
        (v != 0) as u64
    } else {
        from_i64(d, v)
    }
}

pub fn const_float(d: DType, v: f64) -> Bits {
    let x = v as f32;
    if d.is_float() {
        from_f32(d, x)
    } else {
        cast(DType::F32, d, x.to_bits() as u64)
    }
}

#[inline]
fn fmaxnum(a: f32, b: f32) -> f32 {
    if a.is_nan() {
        return b;
    }
    if b.is_nan() {
        return a;
    }
    if a > b {
        a
    } else if b > a {
        b
    } else if a.is_sign_positive() {
        a
    } else {
        b
    }
}

#[inline]
fn fminnum(a: f32, b: f32) -> f32 {
    if a.is_nan() {
        return b;
    }
    if b.is_nan() {
        return a;
    }
    if a < b {
        a
    } else if b < a {
        b
    } else if a.is_sign_negative() {
        a
    } else {
        b
    }
}

pub fn binary_f32(op: BinaryOp, a: f32, b: f32) -> f32 {
    canon(match op {
        BinaryOp::Add => a + b,
        BinaryOp::Sub => a - b,
        BinaryOp::Mul => a * b,
        BinaryOp::Div => a / b,
        BinaryOp::FloorDiv => (a / b).floor(),
        // Triton's float `%`: a - floor(a / b) * b, each step rounded.
        BinaryOp::Mod => {
            let q = (a / b).floor();
            let m = canon(q * b);
            a - m
        }
        BinaryOp::Max => fmaxnum(a, b),
        BinaryOp::Min => fminnum(a, b),
        // Bitwise operations on floats are rejected by the front end.
        BinaryOp::And | BinaryOp::Or | BinaryOp::Xor | BinaryOp::Shl | BinaryOp::Shr => f32::NAN,
    })
}

/// An integer binary operation on sign-/zero-extended operands of dtype
/// `d`; the result is truncated to `d` by the caller (`from_i64`).
pub fn binary_int(op: BinaryOp, d: DType, a: i64, b: i64) -> Result<i64, ElemError> {
    let bits = d.bits().max(1);
    let unsigned = !d.is_signed();
    Ok(match op {
        BinaryOp::Add => a.wrapping_add(b),
        BinaryOp::Sub => a.wrapping_sub(b),
        BinaryOp::Mul => a.wrapping_mul(b),
        BinaryOp::Div | BinaryOp::FloorDiv => {
            if b == 0 {
                return Err(ElemError::DivisionByZero);
            }
            if unsigned {
                ((a as u64) / (b as u64)) as i64
            } else {
                // Operands are sign-extended, so `MIN / -1` of a narrow type
                // gives 2^(bits-1), which the caller's truncation wraps.
                a.wrapping_div(b)
            }
        }
        BinaryOp::Mod => {
            if b == 0 {
                return Err(ElemError::DivisionByZero);
            }
            if unsigned {
                ((a as u64) % (b as u64)) as i64
            } else {
                a.wrapping_rem(b)
            }
        }
        BinaryOp::And => a & b,
        BinaryOp::Or => a | b,
        BinaryOp::Xor => a ^ b,
        BinaryOp::Shl => a.wrapping_shl((b as u32) % bits),
        BinaryOp::Shr => {
            let s = (b as u32) % bits;
            if unsigned {
                ((a as u64) >> s) as i64
            } else {
                a >> s
            }
        }
        BinaryOp::Max => a.max(b),
        BinaryOp::Min => a.min(b),
    })
}

/// A binary operation on two elements of dtype `d`.
#[inline]
pub fn binary(op: BinaryOp, d: DType, a: Bits, b: Bits) -> Result<Bits, ElemError> {
    if d.is_float() {
        return Ok(from_f32(d, binary_f32(op, to_f32(d, a), to_f32(d, b))));
    }
    let r = binary_int(op, d, to_i64(d, a), to_i64(d, b))?;
    Ok(from_i64(d, r))
}

#[inline]
pub fn compare(op: CmpOp, d: DType, a: Bits, b: Bits) -> bool {
    if d.is_float() {
        return compare_values(op, to_f32(d, a), to_f32(d, b));
    }
    compare_values(op, to_i64(d, a), to_i64(d, b))
}

/// `x op y` for numbers of one type; for floats the unordered comparisons
/// (a NaN is unequal to everything, and neither less nor greater).
#[inline]
pub fn compare_values<T: PartialOrd>(op: CmpOp, x: T, y: T) -> bool {
    match op {
        CmpOp::Eq => x == y,
        CmpOp::Ne => x != y,
        CmpOp::Lt => x < y,
        CmpOp::Le => x <= y,
        CmpOp::Gt => x > y,
        CmpOp::Ge => x >= y,
    }
}

/// `2^(j/32)` for j in 0..32, as f64 bits: a Taylor series of
/// `exp(j·ln2/32)` evaluated at compile time (relative error below 1e-16).
const EXP2_32THS: [u64; 32] = {
    let mut t = [0u64; 32];
    let mut j = 0;
    while j < 32 {
        let x = j as f64 * std::f64::consts::LN_2 / 32.0;
        let (mut term, mut sum, mut k) = (1.0f64, 1.0f64, 1);
        while k < 26 {
            term = term * x / k as f64;
            sum += term;
            k += 1;
        }
        t[j] = sum.to_bits();
        j += 1;
    }
    t
};

/// `e^x` in f32, computed in f64 and rounded once: the result is the
/// correctly rounded one except where the true value lies within about
/// 1e-15 (relative) of a rounding boundary. It is kernbench's definition
/// of `tl.exp`, written here because the `libm` crate's `expf` (a
/// division and several branches per call) was 41% of softmax's time:
/// with this one, softmax 4096² on the JIT went from 232 to 183 ms. The
/// JIT calls this same function, so both data paths agree bit for bit.
///
/// x = (k/32)·ln2 + r with |r| ≤ ln2/64 (ln2 split in two so `k·ln2_hi`
/// is exact); e^x = 2^(k>>5) · 2^((k&31)/32) · e^r, e^r by its Taylor
/// polynomial to r⁵ (error below 3e-15).
pub fn expf(x: f32) -> f32 {
    if x.is_nan() {
        return x;
    }
    // Beyond ln(f32::MAX) ≈ 88.72 the result overflows; below −103.98 it
    // is under half the smallest subnormal. Between, the f64 result is
    // normal and the final rounding handles the f32 edges.
    if x > 89.0 {
        return f32::INFINITY;
    }
    if x < -104.0 {
        return 0.0;
    }
    const LN2_HI: f64 = f64::from_bits(0x3fe6_2e42_fee0_0000); // 32 significant bits
    const LN2_LO: f64 = f64::from_bits(0x3dea_39ef_3579_3c76);
    const INV_STEP: f64 = 32.0 / std::f64::consts::LN_2;
    // Adding and subtracting 1.5·2^52 rounds to the nearest integer.
    const ROUND: f64 = 6_755_399_441_055_744.0;
    let xd = x as f64;
    let kd = (xd * INV_STEP + ROUND) - ROUND;
    let k = kd as i64;
    let r = (xd - kd * (LN2_HI / 32.0)) - kd * (LN2_LO / 32.0);
    let p = 1.0 + r * (1.0 + r * (0.5 + r * (1.0 / 6.0 + r * (1.0 / 24.0 + r * (1.0 / 120.0)))));
    let scale = EXP2_32THS[(k & 31) as usize].wrapping_add(((k >> 5) as u64) << 52);
    (f64::from_bits(scale) * p) as f32
}

pub fn unary_f32(op: UnaryOp, x: f32) -> f32 {
    canon(match op {
        UnaryOp::Neg => -x,
        UnaryOp::Abs => x.abs(),
        UnaryOp::Exp => expf(x),
        UnaryOp::Exp2 => libm::exp2f(x),
        UnaryOp::Log => libm::logf(x),
        UnaryOp::Log2 => libm::log2f(x),
        UnaryOp::Sqrt => x.sqrt(),
        UnaryOp::Rsqrt => 1.0 / x.sqrt(),
        UnaryOp::Sin => libm::sinf(x),
        UnaryOp::Cos => libm::cosf(x),
        UnaryOp::Sigmoid => 1.0 / (1.0 + expf(-x)),
        UnaryOp::Floor => x.floor(),
        UnaryOp::Ceil => x.ceil(),
        UnaryOp::Not | UnaryOp::Invert => f32::NAN,
    })
}

#[inline]
pub fn unary(op: UnaryOp, d: DType, a: Bits) -> Bits {
    if d.is_float() {
        // Negation and abs are sign-bit operations in IEEE 754, but they
        // go through f32 here too: the result is the same value, and NaN
        // inputs become the canonical NaN like every other float result.
        return from_f32(d, unary_f32(op, to_f32(d, a)));
    }
    let x = to_i64(d, a);
    let r = match op {
        UnaryOp::Neg => x.wrapping_neg(),
        UnaryOp::Not => (x == 0) as i64,
        UnaryOp::Invert => !x,
        UnaryOp::Abs => x.wrapping_abs(),
        // Transcendentals on integers are rejected by the front end.
        _ => x,
    };
    from_i64(d, r)
}

/// `a * b + c` with one rounding (floats; integers wrap).
pub fn fma(d: DType, a: Bits, b: Bits, c: Bits) -> Bits {
    if d.is_float() {
        let r = libm::fmaf(to_f32(d, a), to_f32(d, b), to_f32(d, c));
        return from_f32(d, canon(r));
    }
    from_i64(d, to_i64(d, a).wrapping_mul(to_i64(d, b)).wrapping_add(to_i64(d, c)))
}

/// Folds one lane of a reduction (elements in index order).
///
/// Sums start from the first element and add in order: floats in f32
/// (f16/bf16 widened exactly), rounded to `out` at the end; integers wrap.
/// `max`/`min` fold with the NaN-ignoring rules above. `argmax`/`argmin`
/// give the first index holding the extreme value (i32 bits).
pub fn reduce_lane(op: crate::ir::ReduceOp, d: DType, out: DType, lane: impl Iterator<Item = Bits>) -> Bits {
    use crate::ir::ReduceOp as R;
    let mut lane = lane.peekable();
    let Some(first) = lane.next() else { return 0 };
    match op {
        R::Sum if d.is_float() => {
            let mut acc = to_f32(d, first);
            for x in lane {
                acc = canon(acc + to_f32(d, x));
            }
            from_f32(out, acc)
        }
        R::Sum => {
            let mut acc = to_i64(d, first);
            for x in lane {
                acc = acc.wrapping_add(to_i64(d, x));
            }
            from_i64(out, acc)
        }
        R::Max | R::Min => {
            let bop = if op == R::Max { BinaryOp::Max } else { BinaryOp::Min };
            let mut acc = first;
            for x in lane {
                acc = binary(bop, d, acc, x).unwrap_or(acc);
            }
            acc
        }
        R::Argmax | R::Argmin => {
            let better = |x: Bits, best: Bits| -> bool {
                if d.is_float() {
                    let (a, b) = (to_f32(d, x), to_f32(d, best));
                    // -0 < +0, as `min`/`max` order them (equal floats of
                    // different signs are the two zeros).
                    let zero_tie = a == b
                        && match op == R::Argmax {
                            true => b.is_sign_negative() && !a.is_sign_negative(),
                            false => a.is_sign_negative() && !b.is_sign_negative(),
                        };
                    (b.is_nan() && !a.is_nan()) || zero_tie || if op == R::Argmax { a > b } else { a < b }
                } else {
                    let (a, b) = (to_i64(d, x), to_i64(d, best));
                    if op == R::Argmax {
                        a > b
                    } else {
                        a < b
                    }
                }
            };
            let (mut best, mut best_i) = (first, 0i64);
            for (i, x) in lane.enumerate() {
                if better(x, best) {
                    best = x;
                    best_i = i as i64 + 1;
                }
            }
            from_i64(DType::I32, best_i)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`expf`] against f64 `exp` rounded to f32 (correctly rounded but
    /// for double rounding) over a dense sweep of its whole range: at
    /// most one ulp apart, and nearly always equal.
    #[test]
    fn expf_is_nearly_always_correctly_rounded() {
        let (lo, hi) = ((-104.5f32).to_bits(), (89.5f32).to_bits());
        let mut checked = 0u64;
        let mut differ = 0u64;
        let mut check = |x: f32| {
            let want = (x as f64).exp() as f32;
            let got = super::expf(x);
            checked += 1;
            if got.to_bits() != want.to_bits() {
                differ += 1;
                let ulps = (got.to_bits() as i64 - want.to_bits() as i64).abs();
                assert!(ulps <= 1, "expf({x:e}) = {got:e}, want {want:e}");
            }
        };
        // Negative floats count down in bits from -0 to `lo`.
        for b in (0x8000_0000u32..=lo).step_by(97) {
            check(f32::from_bits(b));
        }
        for b in (0..=hi).step_by(97) {
            check(f32::from_bits(b));
        }
        for x in [
            0.0, -0.0, 1.0, -1.0, 88.72283, 88.72284, -87.33655, -103.97207, -103.97208,
        ] {
            check(x);
        }
        eprintln!("expf: {differ} of {checked} sampled inputs differ by one ulp");
        assert!(differ * 100_000 < checked, "{differ} of {checked} differ");
        assert_eq!(super::expf(f32::INFINITY), f32::INFINITY);
        assert_eq!(super::expf(f32::NEG_INFINITY), 0.0);
        assert!(super::expf(f32::NAN).is_nan());
    }

    #[test]
    fn integer_semantics() {
        assert_eq!(
            binary(BinaryOp::Div, DType::I32, from_i64(DType::I32, -7), 2).map(|b| to_i64(DType::I32, b)),
            Ok(-3)
        );
        assert_eq!(
            binary(BinaryOp::Mod, DType::I32, from_i64(DType::I32, -7), 2).map(|b| to_i64(DType::I32, b)),
            Ok(-1)
        );
        assert_eq!(binary(BinaryOp::Div, DType::I32, 1, 0), Err(ElemError::DivisionByZero));
        let min = from_i64(DType::I32, i32::MIN as i64);
        let m1 = from_i64(DType::I32, -1);
        assert_eq!(
            binary(BinaryOp::Div, DType::I32, min, m1).map(|b| to_i64(DType::I32, b)),
            Ok(i32::MIN as i64)
        );
        assert_eq!(
            binary(BinaryOp::Add, DType::I8, 127, 1).map(|b| to_i64(DType::I8, b)),
            Ok(-128)
        );
        assert_eq!(binary(BinaryOp::Shr, DType::U8, 0x80, 7), Ok(1));
        assert_eq!(binary(BinaryOp::Add, DType::Bool, 1, 1), Ok(0));
    }

    #[test]
    fn float_semantics() {
        let nan = f32::NAN.to_bits() as u64 | 1;
        assert_eq!(binary(BinaryOp::Add, DType::F32, nan, 0), Ok(CANONICAL_NAN_F32 as u64));
        let one = 1.0f32.to_bits() as u64;
        assert_eq!(binary(BinaryOp::Max, DType::F32, nan, one), Ok(one));
        let h = from_f32(DType::F16, 1.0 / 3.0);
        assert_eq!(h, f16::from_f32(1.0 / 3.0).to_bits() as u64);
        assert_eq!(cast(DType::F32, DType::I32, f32::NAN.to_bits() as u64), 0);
        assert_eq!(
            to_i64(DType::I32, cast(DType::F32, DType::I32, 3.9e10f32.to_bits() as u64)),
            i32::MAX as i64
        );
        assert_eq!(
            to_f32(
                DType::F32,
                binary(
                    BinaryOp::Mod,
                    DType::F32,
                    (-7.0f32).to_bits() as u64,
                    2.0f32.to_bits() as u64
                )
                .unwrap()
            ),
            1.0
        );
    }
}
