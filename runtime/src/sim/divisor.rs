//! Division by a number fixed for a whole run (an HBM interleave, a
//! pseudo-channel count, an IPCQ slot count or size).
//!
//! **Why.** These quotients and remainders run for every message and every
//! DMA, and a 64-bit division costs tens of cycles where a shift costs
//! one. The topology's sizes are nearly always powers of two, so the shift
//! is found once, when the run starts; other divisors divide as before.

/// A nonzero divisor, with its shift when it is a power of two.
#[derive(Clone, Copy, Debug)]
pub struct Divisor {
    d: u64,
    /// `log2(d)` when `d` is a power of two.
    shift: Option<u32>,
}

impl Divisor {
    /// `d` must be nonzero (the topology's `Positive` sizes are).
    pub fn new(d: u64) -> Divisor {
        assert!(d > 0, "a divisor must be nonzero");
        Divisor {
            d,
            shift: d.is_power_of_two().then(|| d.trailing_zeros()),
        }
    }

    pub fn get(self) -> u64 {
        self.d
    }

    /// `a / d`, rounded down.
    #[inline]
    pub fn div(self, a: u64) -> u64 {
        match self.shift {
            Some(s) => a >> s,
            None => a / self.d,
        }
    }

    /// `a % d`.
    #[inline]
    pub fn rem(self, a: u64) -> u64 {
        match self.shift {
            Some(_) => a & (self.d - 1),
            None => a % self.d,
        }
    }

    /// `a / d`, rounded up.
    #[inline]
    pub fn div_ceil(self, a: u64) -> u64 {
        match self.shift {
            Some(s) => (a >> s) + (a & (self.d - 1) != 0) as u64,
            None => a.div_ceil(self.d),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Against the operators, for powers of two and others, at the edges
    /// of u64.
    #[test]
    fn divides_like_the_operators() {
        let ds = [1, 2, 3, 7, 64, 1000, 4096, 1 << 40, u64::MAX / 2 + 1, u64::MAX];
        let xs = [0, 1, 2, 63, 64, 65, 4095, 4096, 4097, 1 << 40, u64::MAX - 1, u64::MAX];
        for d in ds {
            let dv = Divisor::new(d);
            assert_eq!(dv.get(), d);
            for a in xs {
                assert_eq!(dv.div(a), a / d, "{a} / {d}");
                assert_eq!(dv.rem(a), a % d, "{a} % {d}");
                assert_eq!(dv.div_ceil(a), a.div_ceil(d), "{a} / {d} rounded up");
            }
        }
    }
}
