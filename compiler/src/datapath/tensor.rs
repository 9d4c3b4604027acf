//! Block values: contiguous, row-major elements of one type, stored as raw
//! little-endian bytes in an 8-byte-aligned buffer (so compiled code can
//! address them directly and memory transfers are plain copies).

use super::elem::Bits;
use crate::sema::types::{DType, Elem};
use ndarray::{ArrayD, IxDyn};

#[derive(Clone, PartialEq)]
pub struct Tensor {
    pub elem: Elem,
    /// Inline up to four axes: a block is made for every operation the
    /// simulator runs, and its shape should not cost an allocation.
    pub shape: smallvec::SmallVec<[usize; 4]>,
    words: Vec<u64>,
    nbytes: usize,
}

/// Bytes per element (pointers are 8-byte addresses).
pub fn elem_size(e: Elem) -> usize {
    match e {
        Elem::Num(d) => d.size_bytes() as usize,
        Elem::Ptr(_) => 8,
    }
}

/// The first lane of a bool block (one byte per lane, its low bit the
/// bool) that is off, or `bytes.len()` when all are on: eight lanes a
/// word.
pub fn first_off_lane(bytes: &[u8]) -> usize {
    const LOW_BITS: u64 = 0x0101_0101_0101_0101;
    let mut words = bytes.chunks_exact(8);
    let mut at = 0;
    for w in &mut words {
        let mut word = [0u8; 8];
        word.copy_from_slice(w);
        let on = u64::from_le_bytes(word) & LOW_BITS;
        if on != LOW_BITS {
            // Lane k's bit is bit 8k (little-endian bytes).
            return at + ((!on & LOW_BITS).trailing_zeros() / 8) as usize;
        }
        at += 8;
    }
    let tail = words.remainder();
    at + tail.iter().position(|b| b & 1 == 0).unwrap_or(tail.len())
}

impl std::fmt::Debug for Tensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tensor({} {:?}, {} bytes)", self.elem, self.shape, self.nbytes)
    }
}

/// Element buffers of dropped blocks, kept for the next blocks made on the
/// thread. The simulator makes and drops a block for nearly every
/// data-path operation it runs; at the usual sizes (a few KiB, just above
/// the allocator's per-thread cache) a fresh zeroed allocation and its
/// free cost ~500 instructions, a spare buffer a zero-fill.
mod spare {
    use std::cell::RefCell;

    /// Larger buffers go back to the allocator.
    const MAX_WORDS: usize = 1 << 13;
    const MAX_SPARES: usize = 64;
    /// Smaller ones too: allocating and freeing them is cheaper than the
    /// search here (`tlc`'s allocator keeps blocks up to 128 bytes in a
    /// last-in-first-out cache of its own).
    const MIN_WORDS: usize = 17;

    thread_local! {
        static SPARES: RefCell<Vec<Vec<u64>>> = const { RefCell::new(Vec::new()) };
    }

    /// `n` zero words, in a spare buffer of at most twice that capacity
    /// when there is one.
    pub fn zeroed(n: usize) -> Vec<u64> {
        if n < MIN_WORDS {
            return vec![0; n];
        }
        let found = SPARES.try_with(|s| {
            let mut s = s.try_borrow_mut().ok()?;
            let k = s
                .iter()
                .rposition(|v| v.capacity() >= n && v.capacity() <= 2 * n.max(1))?;
            Some(s.swap_remove(k))
        });
        match found.ok().flatten() {
            Some(mut v) => {
                v.resize(n, 0);
                v
            }
            None => vec![0; n],
        }
    }

    pub fn give(mut v: Vec<u64>) {
        if v.capacity() < MIN_WORDS || v.capacity() > MAX_WORDS {
            return;
        }
        v.clear();
        let _ = SPARES.try_with(|s| {
            if let Ok(mut s) = s.try_borrow_mut() {
                if s.len() < MAX_SPARES {
                    s.push(v);
                }
            }
        });
    }
}

impl Drop for Tensor {
    fn drop(&mut self) {
        spare::give(std::mem::take(&mut self.words));
    }
}

impl Tensor {
    pub fn zeros(elem: Elem, shape: &[usize]) -> Tensor {
        let n: usize = shape.iter().product();
        let nbytes = n * elem_size(elem);
        Tensor {
            elem,
            shape: smallvec::SmallVec::from_slice(shape),
            words: spare::zeroed(nbytes.div_ceil(8)),
            nbytes,
        }
    }

    #[inline]
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    #[inline]
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: `words` owns at least `nbytes` initialized bytes; u8 has no
        // alignment or validity requirements.
        unsafe { std::slice::from_raw_parts(self.words.as_ptr() as *const u8, self.nbytes) }
    }

    #[inline]
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `bytes`, with exclusive access through `&mut self`.
        unsafe { std::slice::from_raw_parts_mut(self.words.as_mut_ptr() as *mut u8, self.nbytes) }
    }

    #[inline]
    pub fn as_ptr(&self) -> *const u8 {
        self.words.as_ptr() as *const u8
    }

    #[inline]
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.words.as_mut_ptr() as *mut u8
    }

    /// The elements as words, for 8-byte element types (pointers, i64) on
    /// this little-endian host: a fast read path for address blocks.
    pub fn words(&self) -> Option<&[u64]> {
        (elem_size(self.elem) == 8 && cfg!(target_endian = "little")).then(|| &self.words[..self.numel()])
    }

    /// Element `i`'s bits, zero-extended.
    pub fn get_bits(&self, i: usize) -> Bits {
        let size = elem_size(self.elem);
        let b = &self.bytes()[i * size..(i + 1) * size];
        let mut w = [0u8; 8];
        w[..size].copy_from_slice(b);
        u64::from_le_bytes(w)
    }

    pub fn set_bits(&mut self, i: usize, bits: Bits) {
        let size = elem_size(self.elem);
        let w = bits.to_le_bytes();
        self.bytes_mut()[i * size..(i + 1) * size].copy_from_slice(&w[..size]);
    }

    /// A tensor from raw little-endian bytes (`bytes.len()` must be
    /// `numel * elem_size`).
    pub fn from_bytes(elem: Elem, shape: &[usize], bytes: &[u8]) -> Option<Tensor> {
        let mut t = Tensor::zeros(elem, shape);
        if t.nbytes != bytes.len() {
            return None;
        }
        t.bytes_mut().copy_from_slice(bytes);
        Some(t)
    }

    /// The elements' bits as an ndarray (the interpreter's working form).
    pub fn to_array(&self) -> ArrayD<Bits> {
        let data: Vec<Bits> = (0..self.numel()).map(|i| self.get_bits(i)).collect();
        ArrayD::from_shape_vec(IxDyn(&self.shape), data).unwrap_or_else(|_| ArrayD::zeros(IxDyn(&[0])))
    }

    pub fn from_array(elem: Elem, a: &ArrayD<Bits>) -> Tensor {
        let mut t = Tensor::zeros(elem, a.shape());
        for (i, b) in a.iter().enumerate() {
            t.set_bits(i, *b);
        }
        t
    }

    /// The numeric dtype (pointers count as i64 addresses).
    pub fn dtype(&self) -> DType {
        match self.elem {
            Elem::Num(d) => d,
            Elem::Ptr(_) => DType::I64,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::first_off_lane;

    /// Against a lane-by-lane scan: every length up to three words and a
    /// tail, the off lane anywhere, bytes whose low bit alone decides.
    #[test]
    fn first_off_lane_agrees_with_a_plain_scan() {
        for len in 0..27 {
            for off in 0..=len {
                for on_byte in [1u8, 3, 0xff] {
                    let mut b = vec![on_byte; len];
                    if off < len {
                        b[off] = if on_byte == 1 { 0 } else { 2 };
                    }
                    let plain = b.iter().position(|x| x & 1 == 0).unwrap_or(len);
                    assert_eq!(first_off_lane(&b), plain, "{b:?}");
                }
            }
        }
    }
}
