//! The per-PE IR: what one program instance executes, after checking and
//! specialization. SSA values in entity-indexed arenas (Cranelift's
//! habit), structured control flow (`for`, `if`, `while` regions with
//! block parameters, as MLIR's `scf`), every instruction tagged with its
//! engine class and source location.
//!
//! **Invariants** (checked by [`verify`]):
//! - every value is defined once, before its uses, in an enclosing region;
//! - block shapes are fully known (the kernel is specialized);
//! - elementwise operations have operands of one shape and (except for
//!   `select`'s condition and the comparison result) one dtype: the
//!   lowering inserts every `splat`, `broadcast` and `cast` explicitly;
//! - a region ends in exactly one terminator, and nothing follows it.

mod builder;
mod hoist;
mod json;
mod print;
mod verify;

pub use builder::Builder;
pub use hoist::hoist_loop_invariants;
pub use json::function_json;
pub use print::print_function;
pub use verify::verify;

use crate::sema::types::{DType, Direction, Elem};
use crate::span::Loc;
use cranelift_entity::{entity_impl, PrimaryMap};
use std::fmt;

/// An SSA value.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Value(u32);
entity_impl!(Value, "%");

/// An instruction.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Inst(u32);
entity_impl!(Inst, "inst");

/// A region: parameters plus a straight-line list of instructions ending
/// in a terminator.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Region(u32);
entity_impl!(Region, "region");

/// The type of an IR value. Shapes are concrete.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Type {
    Scalar(Elem),
    Block(Elem, Vec<u64>),
    Future(DType, Vec<u64>),
}

impl Type {
    #[inline]
    pub fn elem(&self) -> Elem {
        match self {
            Type::Scalar(e) | Type::Block(e, _) => *e,
            Type::Future(d, _) => Elem::Num(*d),
        }
    }

    /// `[]` for scalars.
    #[inline]
    pub fn shape(&self) -> &[u64] {
        match self {
            Type::Scalar(_) => &[],
            Type::Block(_, s) | Type::Future(_, s) => s,
        }
    }

    #[inline]
    pub fn numel(&self) -> u64 {
        self.shape().iter().product()
    }

    #[inline]
    pub fn is_block(&self) -> bool {
        matches!(self, Type::Block(..))
    }

    /// The same shape with another element type.
    pub fn with_elem(&self, elem: Elem) -> Type {
        match self {
            Type::Scalar(_) => Type::Scalar(elem),
            Type::Block(_, s) => Type::Block(elem, s.clone()),
            Type::Future(_, s) => Type::Future(
                match elem {
                    Elem::Num(d) | Elem::Ptr(d) => d,
                },
                s.clone(),
            ),
        }
    }

    pub fn block_or_scalar(elem: Elem, shape: &[u64]) -> Type {
        if shape.is_empty() {
            Type::Scalar(elem)
        } else {
            Type::Block(elem, shape.to_vec())
        }
    }
}

impl fmt::Display for Type {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let dims = |s: &[u64]| s.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", ");
        match self {
            Type::Scalar(e) => write!(f, "{e}"),
            Type::Block(e, s) => write!(f, "block[{e}, {}]", dims(s)),
            Type::Future(d, s) => write!(f, "future[{d}, {}]", dims(s)),
        }
    }
}

/// Which engine of the PE executes an instruction (DESIGN §2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Engine {
    /// The issue unit's scalar core: scalar arithmetic and control flow.
    Scalar,
    /// Memory transfers.
    Dma,
    /// Matrix products.
    Gemm,
    /// Vector/elementwise work on blocks, reductions.
    Math,
    /// Inter-PE communication.
    Comm,
}

impl Engine {
    pub fn name(self) -> &'static str {
        match self {
            Engine::Scalar => "scalar",
            Engine::Dma => "dma",
            Engine::Gemm => "gemm",
            Engine::Math => "math",
            Engine::Comm => "comm",
        }
    }
}

/// A scalar constant, already converted to the value's dtype (an integer
/// dtype holds `Int`, a float dtype `Float` of exactly representable value).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ConstVal {
    Int(i64),
    Float(f64),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BinaryOp {
    Add,
    Sub,
    Mul,
    /// Floats: IEEE division. Integers: truncating (C, Triton).
    Div,
    /// Integers: truncating division (Triton's `//`). Floats: floor(a / b).
    FloorDiv,
    /// Integers: remainder with the sign of the dividend (C). Floats:
    /// `a - floor(a / b) * b` (Triton's, with the sign of the divisor).
    Mod,
    And,
    Or,
    Xor,
    Shl,
    Shr,
    Max,
    Min,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CmpOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UnaryOp {
    Neg,
    /// Logical not of a bool.
    Not,
    /// Bitwise not of an integer.
    Invert,
    Abs,
    Exp,
    Exp2,
    Log,
    Log2,
    Sqrt,
    Rsqrt,
    Sin,
    Cos,
    Sigmoid,
    Floor,
    Ceil,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    Sum,
    Max,
    Min,
    Argmax,
    Argmin,
}

/// The other end of a send or receive.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Peer {
    /// A direction of the communicator layout.
    Dir(Direction),
    /// A rank computed at run time: the instruction's first operand.
    Rank,
}

/// A memory space named by `tl.gemm`'s `a_in`/`b_in`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Space {
    Hbm,
    Sram,
    Tcm,
}

impl Space {
    pub fn name(self) -> &'static str {
        match self {
            Space::Hbm => "hbm",
            Space::Sram => "sram",
            Space::Tcm => "tcm",
        }
    }
}

/// What an instruction does. Operands are in [`InstData::args`].
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    /// A scalar constant of the result's dtype.
    Const(ConstVal),
    ProgramId(u8),
    NumPrograms(u8),
    Rank,
    WorldSize,
    MeshId(u8),
    MeshSize(u8),
    /// Block `[start, end)` of i32.
    Arange {
        start: i64,
        end: i64,
    },
    /// Scalar → block of the result's shape.
    Splat,
    /// Block → block of the result's shape (NumPy rules, same rank).
    Broadcast,
    /// Same elements in row-major order, new shape.
    Reshape,
    /// Permute axes: result axis `i` is operand axis `perm[i]`.
    Trans {
        perm: Vec<usize>,
    },
    Binary(BinaryOp),
    /// Result: bool of the operands' shape.
    Cmp(CmpOp),
    Unary(UnaryOp),
    /// To the result's dtype; `bitcast` reinterprets bits (equal widths).
    Cast {
        bitcast: bool,
    },
    /// `cond ? a : b` elementwise.
    Select,
    /// `a * b + c` rounded once.
    Fma,
    /// Pointer (scalar or block) plus integer element offsets.
    PtrAdd,
    /// Along `axis`, or all axes when `None`. Argmax/argmin give i32.
    Reduce {
        op: ReduceOp,
        axis: Option<usize>,
        keep_dims: bool,
    },
    /// `a @ b (+ acc)`: operands a, b, and acc when `has_acc`.
    Dot {
        has_acc: bool,
    },
    /// Operands: pointer, then mask and other when present.
    Load {
        has_mask: bool,
        has_other: bool,
    },
    /// Operands: pointer, value, then mask when present.
    Store {
        has_mask: bool,
    },
    /// Operands: pointer, value, then mask when present. Result: old values.
    AtomicAdd {
        has_mask: bool,
    },
    /// Operands: a, b, out (base pointers), M, N, K.
    Gemm {
        a_in: Space,
        b_in: Space,
    },
    /// Operands: [rank when `Peer::Rank`], value.
    Send(Peer),
    /// Operands: [rank]. Result: the block (or a future when `is_async`).
    Recv {
        peer: Peer,
        is_async: bool,
    },
    /// Operand: a future. Result: its block.
    Wait,
    Barrier,
    /// Operands: pointer, rank.
    SymmAt,
    /// Operands: signal pointer, rank, value.
    Notify,
    /// Operands: signal pointer, value.
    WaitUntil,
    /// Operand: a bool (scalar or block); fails the program when false.
    Assert {
        message: String,
    },
    /// Operands: the values to print.
    Print {
        prefix: String,
    },
    /// Operands: lower bound, upper bound, step, then the initial carried
    /// values. Region 0's parameters: induction variable, carried values.
    /// Results: the carried values after the last iteration.
    For,
    /// Operand: the condition. Regions: then, else. Results: the values
    /// both branches yield.
    If,
    /// Operands: initial carried values. Region 0 (`before`, parameters =
    /// carried) ends in `condition`; region 1 (`body`) ends in `yield`.
    While,
    /// Terminators.
    Yield,
    Break,
    Continue,
    Return,
    /// Ends a `while`'s before-region: the condition operand.
    Condition,
}

impl Op {
    pub fn is_terminator(&self) -> bool {
        matches!(self, Op::Yield | Op::Break | Op::Continue | Op::Return | Op::Condition)
    }

    /// Whether the operation has no effect and cannot fail whatever its
    /// operands (integer division can: by zero). Such an instruction may
    /// run earlier than written (`hoist.rs`) or be reordered against
    /// data-path groups (`datapath/fuse.rs`).
    pub fn is_pure_and_infallible(&self) -> bool {
        matches!(
            self,
            Op::Const(_)
                | Op::ProgramId(_)
                | Op::NumPrograms(_)
                | Op::Rank
                | Op::WorldSize
                | Op::MeshId(_)
                | Op::MeshSize(_)
                | Op::Cmp(_)
                | Op::Unary(_)
                | Op::Cast { .. }
                | Op::Select
                | Op::Fma
                | Op::PtrAdd
                | Op::Binary(
                    BinaryOp::Add
                        | BinaryOp::Sub
                        | BinaryOp::Mul
                        | BinaryOp::And
                        | BinaryOp::Or
                        | BinaryOp::Xor
                        | BinaryOp::Shl
                        | BinaryOp::Shr
                        | BinaryOp::Max
                        | BinaryOp::Min
                )
        )
    }

    /// The mnemonic printed in the text form (after the engine prefix).
    pub fn mnemonic(&self) -> String {
        match self {
            Op::Const(_) => "const".into(),
            Op::ProgramId(_) => "program_id".into(),
            Op::NumPrograms(_) => "num_programs".into(),
            Op::Rank => "rank".into(),
            Op::WorldSize => "world_size".into(),
            Op::MeshId(_) => "mesh_id".into(),
            Op::MeshSize(_) => "mesh_size".into(),
            Op::Arange { .. } => "arange".into(),
            Op::Splat => "splat".into(),
            Op::Broadcast => "broadcast".into(),
            Op::Reshape => "reshape".into(),
            Op::Trans { .. } => "trans".into(),
            Op::Binary(b) => format!("{b:?}").to_lowercase(),
            Op::Cmp(c) => format!("cmp_{}", format!("{c:?}").to_lowercase()),
            Op::Unary(u) => format!("{u:?}").to_lowercase(),
            Op::Cast { bitcast: false } => "cast".into(),
            Op::Cast { bitcast: true } => "bitcast".into(),
            Op::Select => "select".into(),
            Op::Fma => "fma".into(),
            Op::PtrAdd => "ptr_add".into(),
            Op::Reduce { op, .. } => format!("reduce_{}", format!("{op:?}").to_lowercase()),
            Op::Dot { .. } => "dot".into(),
            Op::Load { .. } => "load".into(),
            Op::Store { .. } => "store".into(),
            Op::AtomicAdd { .. } => "atomic_add".into(),
            Op::Gemm { .. } => "gemm".into(),
            Op::Send(_) => "send".into(),
            Op::Recv { is_async: false, .. } => "recv".into(),
            Op::Recv { is_async: true, .. } => "recv_async".into(),
            Op::Wait => "wait".into(),
            Op::Barrier => "barrier".into(),
            Op::SymmAt => "symm_at".into(),
            Op::Notify => "notify".into(),
            Op::WaitUntil => "wait_until".into(),
            Op::Assert { .. } => "assert".into(),
            Op::Print { .. } => "print".into(),
            Op::For => "for".into(),
            Op::If => "if".into(),
            Op::While => "while".into(),
            Op::Yield => "yield".into(),
            Op::Break => "break".into(),
            Op::Continue => "continue".into(),
            Op::Return => "return".into(),
            Op::Condition => "condition".into(),
        }
    }
}

#[derive(Clone, Debug)]
pub struct InstData {
    pub op: Op,
    pub args: Vec<Value>,
    pub results: Vec<Value>,
    pub regions: Vec<Region>,
    pub engine: Engine,
    pub loc: Loc,
}

#[derive(Clone, Debug)]
pub struct ValueData {
    pub ty: Type,
}

#[derive(Clone, Debug, Default)]
pub struct RegionData {
    pub params: Vec<Value>,
    pub insts: Vec<Inst>,
}

/// A kernel parameter that survives specialization (constexprs do not).
#[derive(Clone, Debug)]
pub struct Param {
    pub name: String,
    pub ty: Type,
    pub value: Value,
}

/// One specialized kernel.
#[derive(Clone, Debug)]
pub struct Function {
    pub name: String,
    pub params: Vec<Param>,
    /// The constexpr values this specialization was made with, in
    /// parameter order.
    pub constexprs: Vec<(String, crate::sema::Konst)>,
    pub values: PrimaryMap<Value, ValueData>,
    pub insts: PrimaryMap<Inst, InstData>,
    pub regions: PrimaryMap<Region, RegionData>,
    pub body: Region,
}

impl Function {
    #[inline]
    pub fn ty(&self, v: Value) -> &Type {
        &self.values[v].ty
    }

    #[inline]
    pub fn inst(&self, i: Inst) -> &InstData {
        &self.insts[i]
    }

    #[inline]
    pub fn region(&self, r: Region) -> &RegionData {
        &self.regions[r]
    }
}

/// The engine class an operation runs on, from its kind and result types.
pub fn engine_of(op: &Op, result_is_block: bool) -> Engine {
    match op {
        Op::Load { .. } | Op::Store { .. } | Op::AtomicAdd { .. } => Engine::Dma,
        Op::Dot { .. } | Op::Gemm { .. } => Engine::Gemm,
        Op::Send(_) | Op::Recv { .. } | Op::Wait | Op::Barrier | Op::Notify | Op::WaitUntil | Op::SymmAt => {
            Engine::Comm
        }
        Op::Arange { .. } | Op::Splat | Op::Broadcast | Op::Reshape | Op::Trans { .. } | Op::Reduce { .. } => {
            Engine::Math
        }
        Op::Binary(_)
        | Op::Cmp(_)
        | Op::Unary(_)
        | Op::Cast { .. }
        | Op::Select
        | Op::Fma
        | Op::PtrAdd
        | Op::Assert { .. }
        | Op::Print { .. }
            if result_is_block =>
        {
            Engine::Math
        }
        _ => Engine::Scalar,
    }
}
