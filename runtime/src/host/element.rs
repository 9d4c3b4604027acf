//! Host element types: the Rust types a tensor can be read into and
//! written from (`ndarray` arrays of them), with their `tl` dtype.

use kernbench_compiler::datapath::elem;
use kernbench_compiler::sema::DType;

/// A host element type.
pub trait Element: Copy + Default + 'static {
    const DTYPE: DType;
    /// The element's bits, as the machine stores them (little-endian,
    /// zero-extended).
    fn to_bits(self) -> u64;
    fn from_bits(b: u64) -> Self;
}

macro_rules! int_element {
    ($t:ty, $d:expr) => {
        impl Element for $t {
            const DTYPE: DType = $d;
            fn to_bits(self) -> u64 {
                elem::from_i64($d, self as i64)
            }
            fn from_bits(b: u64) -> Self {
                elem::to_i64($d, b) as $t
            }
        }
    };
}

int_element!(i8, DType::I8);
int_element!(i32, DType::I32);
int_element!(i64, DType::I64);
int_element!(u8, DType::U8);
int_element!(u32, DType::U32);

impl Element for bool {
    const DTYPE: DType = DType::Bool;
    fn to_bits(self) -> u64 {
        self as u64
    }
    fn from_bits(b: u64) -> Self {
        b & 1 != 0
    }
}

impl Element for f32 {
    const DTYPE: DType = DType::F32;
    fn to_bits(self) -> u64 {
        self.to_bits() as u64
    }
    fn from_bits(b: u64) -> Self {
        f32::from_bits(b as u32)
    }
}

impl Element for half::f16 {
    const DTYPE: DType = DType::F16;
    fn to_bits(self) -> u64 {
        self.to_bits() as u64
    }
    fn from_bits(b: u64) -> Self {
        half::f16::from_bits(b as u16)
    }
}

impl Element for half::bf16 {
    const DTYPE: DType = DType::BF16;
    fn to_bits(self) -> u64 {
        self.to_bits() as u64
    }
    fn from_bits(b: u64) -> Self {
        half::bf16::from_bits(b as u16)
    }
}
