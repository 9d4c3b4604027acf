//! What compiled code calls back into: the memory resolver behind the
//! segment cache, and the element functions kept in Rust so the JIT and
//! the interpreter share one definition (f16/bf16 conversions,
//! transcendentals, general casts, fused multiply-add).

use super::super::elem;
use super::super::{MemFault, Memory};
use crate::ir::UnaryOp;
use crate::sema::types::DType;

/// Shared between a compiled group and its caller. `#[repr(C)]`: compiled
/// code reads and writes these fields at fixed offsets.
#[repr(C)]
pub struct JitCtx {
    /// The segment cache: accesses inside `[seg_lo, seg_lo + seg_len)` go
    /// straight to `seg_base + (addr - seg_lo)`.
    pub seg_lo: u64,
    pub seg_len: u64,
    pub seg_base: *mut u8,
    /// Set when an access faults.
    pub fault_addr: u64,
    pub fault_bytes: u64,
    pub fault_write: u64,
    /// `*mut &mut dyn Memory`, for [`jit_resolve`].
    pub mem: *mut std::ffi::c_void,
    /// The group's per-instruction segment caches, three words each
    /// (start, limit, host base): read at entry, written back at exit.
    pub caches: *mut u64,
}

pub const OFF_SEG_LO: i32 = 0;
pub const OFF_SEG_LEN: i32 = 8;
pub const OFF_SEG_BASE: i32 = 16;
pub const OFF_CACHES: i32 = 56;

// Compiled code addresses these fields by the offsets above.
const _: () = {
    assert!(std::mem::offset_of!(JitCtx, seg_lo) == OFF_SEG_LO as usize);
    assert!(std::mem::offset_of!(JitCtx, seg_len) == OFF_SEG_LEN as usize);
    assert!(std::mem::offset_of!(JitCtx, seg_base) == OFF_SEG_BASE as usize);
    assert!(std::mem::offset_of!(JitCtx, caches) == OFF_CACHES as usize);
};

impl JitCtx {
    pub fn new(mem: *mut std::ffi::c_void, caches: *mut u64) -> JitCtx {
        JitCtx {
            seg_lo: 0,
            seg_len: 0,
            seg_base: std::ptr::null_mut(),
            fault_addr: 0,
            fault_bytes: 0,
            fault_write: 0,
            mem,
            caches,
        }
    }

    pub fn fault(&self) -> MemFault {
        MemFault {
            addr: self.fault_addr,
            bytes: self.fault_bytes,
            write: self.fault_write != 0,
        }
    }
}

/// Finds the segment holding `[addr, addr + bytes)` and caches it in the
/// context; returns 0, or 1 (fault recorded) when there is none.
///
/// # Safety
/// `ctx` must point to a live `JitCtx` whose `mem` points to a live
/// `&mut dyn Memory` (set up by `Jit::run`, which outlives the call).
pub unsafe extern "C" fn jit_resolve(ctx: *mut JitCtx, addr: u64, bytes: u64, write: u64) -> u32 {
    // SAFETY: guaranteed by the caller (see above).
    let ctx = unsafe { &mut *ctx };
    let mem = unsafe { &mut *(ctx.mem as *mut &mut dyn Memory) };
    if let Some((base, data)) = mem.segment(addr) {
        let off = addr - base;
        if off.checked_add(bytes).is_some_and(|end| end <= data.len() as u64) {
            ctx.seg_lo = base;
            ctx.seg_len = data.len() as u64;
            ctx.seg_base = data.as_mut_ptr();
            return 0;
        }
    }
    ctx.fault_addr = addr;
    ctx.fault_bytes = bytes;
    ctx.fault_write = write;
    1
}

pub extern "C" fn jit_f16_to_f32(b: u32) -> f32 {
    elem::f16_bits_to_f32(b as u16)
}

pub extern "C" fn jit_f32_to_f16(x: f32) -> u32 {
    elem::f32_to_f16_bits(x) as u32
}

pub extern "C" fn jit_bf16_to_f32(b: u32) -> f32 {
    elem::bf16_bits_to_f32(b as u16)
}

pub extern "C" fn jit_f32_to_bf16(x: f32) -> u32 {
    elem::f32_to_bf16_bits(x) as u32
}

/// The index of a transcendental's helper in `HelperRefs::math`.
pub fn transcendental_code(op: UnaryOp) -> Option<u32> {
    Some(match op {
        UnaryOp::Exp => 0,
        UnaryOp::Exp2 => 1,
        UnaryOp::Log => 2,
        UnaryOp::Log2 => 3,
        UnaryOp::Sin => 4,
        UnaryOp::Cos => 5,
        UnaryOp::Sigmoid => 6,
        _ => return None,
    })
}

// One entry point per transcendental: the same functions
// `elem::unary_f32` calls (compiled code canonicalizes NaN after).
pub extern "C" fn jit_expf(x: f32) -> f32 {
    elem::expf(x)
}
pub extern "C" fn jit_exp2f(x: f32) -> f32 {
    libm::exp2f(x)
}
pub extern "C" fn jit_logf(x: f32) -> f32 {
    libm::logf(x)
}
pub extern "C" fn jit_log2f(x: f32) -> f32 {
    libm::log2f(x)
}
pub extern "C" fn jit_sinf(x: f32) -> f32 {
    libm::sinf(x)
}
pub extern "C" fn jit_cosf(x: f32) -> f32 {
    libm::cosf(x)
}
pub extern "C" fn jit_sigmoidf(x: f32) -> f32 {
    1.0 / (1.0 + elem::expf(-x))
}

pub fn dtype_code(d: DType) -> u32 {
    DType::ALL.iter().position(|x| *x == d).unwrap_or(0) as u32
}

fn code_dtype(c: u32) -> DType {
    DType::ALL.get(c as usize).copied().unwrap_or(DType::I32)
}

pub extern "C" fn jit_cast(from: u32, to: u32, bits: u64) -> u64 {
    elem::cast(code_dtype(from), code_dtype(to), bits)
}

pub extern "C" fn jit_fma_f32(a: f32, b: f32, c: f32) -> f32 {
    elem::canon(libm::fmaf(a, b, c))
}

/// Every symbol compiled code may call, for the JIT builder.
pub fn symbols() -> Vec<(&'static str, *const u8)> {
    vec![
        ("kb_resolve", jit_resolve as *const u8),
        ("kb_f16_to_f32", jit_f16_to_f32 as *const u8),
        ("kb_f32_to_f16", jit_f32_to_f16 as *const u8),
        ("kb_bf16_to_f32", jit_bf16_to_f32 as *const u8),
        ("kb_f32_to_bf16", jit_f32_to_bf16 as *const u8),
        ("kb_cast", jit_cast as *const u8),
        ("kb_fma_f32", jit_fma_f32 as *const u8),
        ("kb_expf", jit_expf as *const u8),
        ("kb_exp2f", jit_exp2f as *const u8),
        ("kb_logf", jit_logf as *const u8),
        ("kb_log2f", jit_log2f as *const u8),
        ("kb_sinf", jit_sinf as *const u8),
        ("kb_cosf", jit_cosf as *const u8),
        ("kb_sigmoidf", jit_sigmoidf as *const u8),
        ("kb_dot_f32", super::dot_avx::kb_dot_f32 as *const u8),
    ]
}
