//! The f32 matrix product that compiled `dot` groups call on x86-64 hosts
//! with AVX: 256-bit vectors, which Cranelift does not generate (its x86
//! SIMD is 128-bit), so the same arithmetic runs at twice the width.
//!
//! It computes exactly what the interpreter defines (and what the
//! generated kernel in `dot.rs` computes): each output element is the
//! accumulator plus the products `a[i,k]·b[k,j]` added for k = 0, 1, 2, …
//! in order, every product and every sum rounded to f32 (separate
//! multiply and add, never fused; Rust does not contract `x + y * z`
//! either). Vectors run across columns, never across the sum. NaN results
//! are stored canonical. No GEMM crate can be used here: their summation
//! orders (blocked, fused) differ from this one bit for bit.

use crate::datapath::elem;

/// Whether compiled `dot` groups should call [`kb_dot_f32`] on this host.
pub fn available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// `out[m,n] = init + a[m,k] @ b[k,n]` over row-major f32 buffers (`init`
/// null: zeros). Called from compiled code only where [`available`].
///
/// # Safety
/// `a`, `b`, `out` (and `init` unless null) point to `m·k`, `k·n` and
/// `m·n` valid f32s; `out` does not overlap the others; the host has AVX.
pub unsafe extern "C" fn kb_dot_f32(
    a: *const f32,
    b: *const f32,
    init: *const f32,
    out: *mut f32,
    m: i64,
    n: i64,
    k: i64,
) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: as this function's contract.
    unsafe {
        avx::dot(a, b, init, out, m as usize, n as usize, k as usize)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (a, b, init, out, m, n, k);
        unreachable!("available() is false off x86-64")
    }
}

/// The operands of one product (see [`kb_dot_f32`]).
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
struct Panel {
    a: *const f32,
    b: *const f32,
    init: *const f32,
    out: *mut f32,
    n: usize,
    k: usize,
}

#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
impl Panel {
    /// Output element `(i, j)` the plain way: the edges of the vector
    /// blocks.
    ///
    /// # Safety
    /// As [`kb_dot_f32`], with `i < m`, `j < n`.
    #[inline]
    unsafe fn element(&self, i: usize, j: usize) {
        let (n, k) = (self.n, self.k);
        // SAFETY: every index is inside the buffers the caller vouches for.
        unsafe {
            let mut s = if self.init.is_null() {
                0.0
            } else {
                *self.init.add(i * n + j)
            };
            for kk in 0..k {
                s += *self.a.add(i * k + kk) * *self.b.add(kk * n + j);
            }
            *self.out.add(i * n + j) = elem::canon(s);
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx {
    use super::Panel;
    use crate::datapath::elem::CANONICAL_NAN_F32;
    use std::arch::x86_64::*;

    /// Rows per register block: 6 rows × 2 registers of accumulators, two
    /// of `b` and one broadcast of `a` fill 15 of the 16 registers.
    const MR: usize = 6;

    /// # Safety
    /// As [`super::kb_dot_f32`].
    #[target_feature(enable = "avx")]
    pub unsafe fn dot(a: *const f32, b: *const f32, init: *const f32, out: *mut f32, m: usize, n: usize, k: usize) {
        let p = Panel { a, b, init, out, n, k };
        let mut i = 0;
        while i < m {
            let rows = (m - i).min(MR);
            // SAFETY: rows i .. i + rows are inside the buffers.
            unsafe {
                match rows {
                    6 => p.rows::<6>(i),
                    5 => p.rows::<5>(i),
                    4 => p.rows::<4>(i),
                    3 => p.rows::<3>(i),
                    2 => p.rows::<2>(i),
                    _ => p.rows::<1>(i),
                }
            }
            i += rows;
        }
    }

    impl Panel {
        /// Rows `i .. i + R` of the output: 16 columns at a time, then 8,
        /// then one by one.
        ///
        /// # Safety
        /// `i + R <= m`, and the buffers as [`super::kb_dot_f32`].
        #[target_feature(enable = "avx")]
        unsafe fn rows<const R: usize>(&self, i: usize) {
            let mut j = 0;
            // SAFETY: each block reads and writes columns j .. j + 8·H < n.
            unsafe {
                while j + 16 <= self.n {
                    self.block::<R, 2>(i, j);
                    j += 16;
                }
                if j + 8 <= self.n {
                    self.block::<R, 1>(i, j);
                    j += 8;
                }
                for r in i..i + R {
                    for c in j..self.n {
                        self.element(r, c);
                    }
                }
            }
        }

        /// The R × 8H block of the output at row `i`, column `j`, its
        /// accumulators in registers for the whole sum.
        ///
        /// # Safety
        /// `i + R <= m`, `j + 8·H <= n`, and the buffers as
        /// [`super::kb_dot_f32`].
        #[inline]
        #[target_feature(enable = "avx")]
        unsafe fn block<const R: usize, const H: usize>(&self, i: usize, j: usize) {
            let (n, k) = (self.n, self.k);
            // SAFETY: rows i .. i + R and columns j .. j + 8H of init/out,
            // rows i .. i + R of a and columns j .. j + 8H of b are inside
            // the buffers.
            unsafe {
                let mut acc = [[_mm256_setzero_ps(); H]; R];
                if !self.init.is_null() {
                    for (r, row) in acc.iter_mut().enumerate() {
                        for (h, x) in row.iter_mut().enumerate() {
                            *x = _mm256_loadu_ps(self.init.add((i + r) * n + j + 8 * h));
                        }
                    }
                }
                let mut pa = self.a.add(i * k);
                let mut pb = self.b.add(j);
                for _ in 0..k {
                    let mut bv = [_mm256_setzero_ps(); H];
                    for (h, x) in bv.iter_mut().enumerate() {
                        *x = _mm256_loadu_ps(pb.add(8 * h));
                    }
                    for (r, row) in acc.iter_mut().enumerate() {
                        let av = _mm256_broadcast_ss(&*pa.add(r * k));
                        for (h, x) in row.iter_mut().enumerate() {
                            *x = _mm256_add_ps(*x, _mm256_mul_ps(av, bv[h]));
                        }
                    }
                    pa = pa.add(1);
                    pb = pb.add(n);
                }
                let nan = _mm256_set1_ps(f32::from_bits(CANONICAL_NAN_F32));
                for (r, row) in acc.iter().enumerate() {
                    for (h, x) in row.iter().enumerate() {
                        let is_nan = _mm256_cmp_ps::<_CMP_UNORD_Q>(*x, *x);
                        let y = _mm256_blendv_ps(*x, nan, is_nan);
                        _mm256_storeu_ps(self.out.add((i + r) * n + j + 8 * h), y);
                    }
                }
            }
        }
    }
}
