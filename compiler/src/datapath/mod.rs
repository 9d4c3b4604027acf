//! The data path: executing block operations on real data.
//!
//! One interface ([`DataPath`]) with two implementations: the Cranelift
//! JIT (`jit`), which compiles each group of fused operations to native
//! code specialized on shapes and dtypes, and the reference interpreter
//! (`interp`), written plainly over ndarray, which is the oracle. Both
//! follow the element semantics of [`elem`] and must agree bit for bit.
//!
//! A [`Group`] is a set of block instructions of one function executed as
//! a unit (see [`fuse`]); its inputs and outputs are IR values. Memory is
//! reached through the [`Memory`] trait, so the functional executor's
//! flat address space and the simulator's memory model both plug in.

pub mod affine;
pub mod elem;
pub mod fuse;
pub mod interp;
#[cfg(feature = "jit")]
pub mod jit;
mod tensor;

pub use fuse::{plan, plan_with, Fusion, Group, GroupId, Plan, Step};
pub use tensor::{elem_size, first_off_lane, Tensor};

use crate::ir::{Function, Inst};
use std::fmt;

/// A run-time value of the executor: a scalar's bits (dtype from the IR
/// type), or a block.
#[derive(Clone, Debug, PartialEq)]
pub enum RtValue {
    Scalar(elem::Bits),
    Block(std::rc::Rc<Tensor>),
    /// A block kept as a formula (the JIT makes these; see [`affine`]).
    Affine(std::rc::Rc<affine::Affine>),
    /// A bool block kept as a formula (see [`affine::Mask`]).
    Mask(std::rc::Rc<affine::Mask>),
}

impl RtValue {
    /// A copy that shares nothing with `self` (its block or formula is
    /// copied, not shared): a value to hand to another thread, which may
    /// then own it alone.
    pub fn deep_clone(&self) -> RtValue {
        match self {
            RtValue::Scalar(b) => RtValue::Scalar(*b),
            RtValue::Block(t) => RtValue::Block(std::rc::Rc::new((**t).clone())),
            RtValue::Affine(a) => RtValue::Affine(std::rc::Rc::new((**a).clone())),
            RtValue::Mask(m) => RtValue::Mask(std::rc::Rc::new((**m).clone())),
        }
    }

    #[inline]
    pub fn scalar(&self) -> elem::Bits {
        match self {
            RtValue::Scalar(b) => *b,
            RtValue::Block(t) => t.get_bits(0),
            RtValue::Affine(a) => a.get_bits(0),
            RtValue::Mask(m) => m.get_bits(0),
        }
    }

    /// The block's elements: stored ones as they are, an affine block's
    /// computed. `None` for a scalar.
    pub fn tensor(&self) -> Option<std::borrow::Cow<'_, Tensor>> {
        match self {
            RtValue::Scalar(_) => None,
            RtValue::Block(t) => Some(std::borrow::Cow::Borrowed(t)),
            RtValue::Affine(a) => Some(std::borrow::Cow::Owned(a.materialize())),
            RtValue::Mask(m) => Some(std::borrow::Cow::Owned(m.materialize())),
        }
    }

    /// A formula's shape; `None` for stored values.
    #[inline]
    pub fn formula_shape(&self) -> Option<&[u64]> {
        match self {
            RtValue::Affine(a) => Some(&a.shape),
            RtValue::Mask(m) => Some(m.shape()),
            RtValue::Scalar(_) | RtValue::Block(_) => None,
        }
    }

    /// A formula under `shape`, still a formula: `None` for stored values
    /// and for reshapes that mix axes (only adding or dropping axes of
    /// extent 1 keeps one formula).
    pub fn reshaped_formula(&self, shape: &[u64]) -> Option<RtValue> {
        match self {
            RtValue::Affine(a) => a.reshape(shape).map(|r| RtValue::Affine(std::rc::Rc::new(r))),
            RtValue::Mask(m) => m.reshape(shape).map(|r| RtValue::Mask(std::rc::Rc::new(r))),
            RtValue::Scalar(_) | RtValue::Block(_) => None,
        }
    }

    /// The same value with any formula stored as elements.
    pub fn stored(&self) -> RtValue {
        match self {
            RtValue::Affine(a) => RtValue::Block(std::rc::Rc::new(a.materialize())),
            RtValue::Mask(m) => RtValue::Block(std::rc::Rc::new(m.materialize())),
            v => v.clone(),
        }
    }
}

/// A memory access that did not hit allocated memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemFault {
    pub addr: u64,
    pub bytes: u64,
    pub write: bool,
}

/// Byte-addressed memory as the data path sees it.
pub trait Memory {
    fn read(&mut self, addr: u64, out: &mut [u8]) -> Result<(), MemFault>;
    fn write(&mut self, addr: u64, data: &[u8]) -> Result<(), MemFault>;
    /// The allocation containing `addr`: its first address and its bytes.
    /// Compiled code keeps the last one and checks bounds against it.
    fn segment(&mut self, addr: u64) -> Option<(u64, &mut [u8])>;

    /// `Some(e)` promises that the host buffers [`Memory::segment`] hands
    /// out stay where they are, with the same bounds, for as long as the
    /// memory reports `e`, and that no other memory in the process ever
    /// reports `e`. The JIT then keeps its segment caches from one call
    /// to the next. `None` (the default): no such promise.
    fn layout_epoch(&self) -> Option<u64> {
        None
    }
}

/// Why executing a block operation failed; `inst` locates it in the source.
#[derive(Clone, Debug, PartialEq)]
pub struct ExecError {
    pub inst: Inst,
    pub kind: ExecErrorKind,
}

#[derive(Clone, Debug, PartialEq)]
pub enum ExecErrorKind {
    /// An access outside every allocation.
    OutOfBounds(MemFault),
    DivisionByZero,
    AssertionFailed(String),
    /// The data path cannot execute this (e.g. communication outside the
    /// simulator).
    Unsupported(String),
}

impl fmt::Display for ExecErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExecErrorKind::OutOfBounds(m) => write!(
                f,
                "{} of {} byte{} at address {:#x} is outside every allocation",
                if m.write { "write" } else { "read" },
                m.bytes,
                if m.bytes == 1 { "" } else { "s" },
                m.addr
            ),
            ExecErrorKind::DivisionByZero => f.write_str("integer division by zero"),
            ExecErrorKind::AssertionFailed(m) if m.is_empty() => f.write_str("device assertion failed"),
            ExecErrorKind::AssertionFailed(m) => write!(f, "device assertion failed: {m}"),
            ExecErrorKind::Unsupported(m) => f.write_str(m),
        }
    }
}

/// Executes groups of block operations.
pub trait DataPath {
    fn name(&self) -> &'static str;

    /// Whether it hands blocks on as formulas ([`affine`]): then a caller
    /// may evaluate groups with [`affine::eval_group`] itself. The
    /// interpreter does not, which keeps it an independent oracle.
    fn formulas(&self) -> bool {
        false
    }

    /// Prepares every group of `plan` (compiling them, for the JIT).
    fn prepare(&mut self, func: &Function, plan: &Plan) -> Result<(), String>;

    /// How to make another data path like this one, for a thread of its
    /// own (prepared there: a data path stays on the thread that made
    /// it); `None` when there is no such way.
    fn maker(&self) -> Option<fn() -> Box<dyn DataPath>> {
        None
    }

    /// Runs group `g`: `inputs` are the values of `plan.groups[g].inputs`;
    /// returns the values of its `outputs`.
    fn run(
        &mut self,
        func: &Function,
        plan: &Plan,
        g: GroupId,
        inputs: &[&RtValue],
        mem: &mut dyn Memory,
    ) -> Result<Outputs, ExecError>;
}

/// A group's output values: one or two nearly always, so inline (a group
/// runs for every block operation the simulator performs).
pub type Outputs = smallvec::SmallVec<[RtValue; 2]>;
