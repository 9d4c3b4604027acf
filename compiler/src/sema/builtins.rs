//! The table of built-in functions: every `tl.*` function with its exact
//! Triton signature (parameter names, order and defaults), plus the few
//! Python built-ins a kernel may call. Typing rules live in `rules.rs`.

use super::types::DType;

/// A parameter default, as written in the signature.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ArgDefault {
    Required,
    /// Required, with None among its values (`tl.argmax(x, axis=None)`:
    /// over every element); a `Required` argument that is None is an
    /// error.
    RequiredOrNone,
    None,
    Bool(bool),
    Int(i64),
    Str(&'static str),
    DType(DType),
}

#[derive(Clone, Copy, Debug)]
pub struct Param {
    pub name: &'static str,
    pub default: ArgDefault,
}

const fn req(name: &'static str) -> Param {
    Param {
        name,
        default: ArgDefault::Required,
    }
}
const fn req_or_none(name: &'static str) -> Param {
    Param {
        name,
        default: ArgDefault::RequiredOrNone,
    }
}
const fn opt(name: &'static str, default: ArgDefault) -> Param {
    Param { name, default }
}

impl Param {
    /// Whether a call must pass it.
    pub fn is_required(&self) -> bool {
        matches!(self.default, ArgDefault::Required | ArgDefault::RequiredOrNone)
    }
}

#[derive(Clone, Copy, Debug)]
pub struct Signature {
    pub params: &'static [Param],
    /// A `*name` parameter collecting extra positional arguments, after
    /// `params`' positional ones (`reshape(input, *shape)`).
    pub varargs: Option<&'static str>,
}

macro_rules! builtins {
    ($( $variant:ident = $ns:ident $name:literal ($($params:expr),*) $(* $var:literal)? , $doc:literal; )*) => {
        /// A built-in function.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum Builtin {
            $($variant,)*
        }

        impl Builtin {
            pub const ALL: &'static [Builtin] = &[$(Builtin::$variant,)*];

            /// The bare name (`load`, `range`).
            pub fn name(self) -> &'static str {
                match self {
                    $(Builtin::$variant => $name,)*
                }
            }

            /// Whether it lives in the `tl` namespace (else a Python built-in).
            pub fn in_tl(self) -> bool {
                match self {
                    $(Builtin::$variant => stringify!($ns) == "tl",)*
                }
            }

            pub fn signature(self) -> Signature {
                match self {
                    $(Builtin::$variant => {
                        const PARAMS: &[Param] = &[$($params),*];
                        #[allow(unused_mut, unused_assignments)]
                        let mut varargs = None;
                        $(varargs = Some($var);)?
                        Signature { params: PARAMS, varargs }
                    })*
                }
            }

            /// One line saying what it does (used by `docs/language.md`).
            pub fn doc(self) -> &'static str {
                match self {
                    $(Builtin::$variant => $doc,)*
                }
            }
        }
    };
}

use ArgDefault as D;

builtins! {
    ProgramId = tl "program_id" (req("axis")), "index of this program along grid axis `axis` (0, 1 or 2)";
    NumPrograms = tl "num_programs" (req("axis")), "number of programs along grid axis `axis`";
    Arange = tl "arange" (req("start"), req("end")), "block `[start, end)` of i32; bounds are constexprs";
    Zeros = tl "zeros" (req("shape"), req("dtype")), "block of zeros";
    Full = tl "full" (req("shape"), req("value"), req("dtype")), "block filled with `value`";
    Load = tl "load" (req("pointer"), opt("mask", D::None), opt("other", D::None)), "read memory at a pointer or block of pointers; masked-off lanes read `other`";
    Store = tl "store" (req("pointer"), req("value"), opt("mask", D::None)), "write memory at a pointer or block of pointers; masked-off lanes are not written";
    Dot = tl "dot" (req("input"), req("other"), opt("acc", D::None), opt("out_dtype", D::DType(DType::F32))), "matrix product of 2-D blocks, accumulated in `out_dtype` (plus `acc`)";
    Sum = tl "sum" (req("input"), opt("axis", D::None), opt("keep_dims", D::Bool(false)), opt("dtype", D::None)), "sum along `axis` (all axes when None)";
    Max = tl "max" (req("input"), opt("axis", D::None), opt("return_indices", D::Bool(false)), opt("return_indices_tie_break_left", D::Bool(true)), opt("keep_dims", D::Bool(false))), "maximum along `axis`";
    Min = tl "min" (req("input"), opt("axis", D::None), opt("return_indices", D::Bool(false)), opt("return_indices_tie_break_left", D::Bool(true)), opt("keep_dims", D::Bool(false))), "minimum along `axis`";
    Argmax = tl "argmax" (req("input"), req_or_none("axis"), opt("tie_break_left", D::Bool(true)), opt("keep_dims", D::Bool(false))), "index (i32) of the maximum along `axis`";
    Argmin = tl "argmin" (req("input"), req_or_none("axis"), opt("tie_break_left", D::Bool(true)), opt("keep_dims", D::Bool(false))), "index (i32) of the minimum along `axis`";
    Exp = tl "exp" (req("x")), "e**x";
    Exp2 = tl "exp2" (req("x")), "2**x";
    Log = tl "log" (req("x")), "natural logarithm";
    Log2 = tl "log2" (req("x")), "base-2 logarithm";
    Sqrt = tl "sqrt" (req("x")), "square root";
    Rsqrt = tl "rsqrt" (req("x")), "1 / sqrt(x)";
    Abs = tl "abs" (req("x")), "absolute value";
    Sin = tl "sin" (req("x")), "sine";
    Cos = tl "cos" (req("x")), "cosine";
    Sigmoid = tl "sigmoid" (req("x")), "1 / (1 + exp(-x))";
    Floor = tl "floor" (req("x")), "round toward -inf";
    Ceil = tl "ceil" (req("x")), "round toward +inf";
    Maximum = tl "maximum" (req("x"), req("y")), "elementwise maximum";
    Minimum = tl "minimum" (req("x"), req("y")), "elementwise minimum";
    Where = tl "where" (req("condition"), req("x"), req("y")), "`x` where `condition` holds, else `y`";
    Clamp = tl "clamp" (req("x"), req("min"), req("max")), "`x` limited to `[min, max]`";
    Fma = tl "fma" (req("x"), req("y"), req("z")), "x * y + z, rounded once";
    Softmax = tl "softmax" (req("x"), opt("ieee_rounding", D::Bool(false))), "softmax along the last axis";
    Cdiv = tl "cdiv" (req("x"), req("div")), "ceiling division";
    Reshape = tl "reshape" (req("input")) * "shape", "same elements, new shape";
    Trans = tl "trans" (req("input")) * "dims", "transpose (2-D), or permute axes by `dims`";
    BroadcastTo = tl "broadcast_to" (req("input")) * "shape", "broadcast to `shape`";
    StaticRange = tl "static_range" (req("arg1"), opt("arg2", D::None), opt("step", D::None)), "like `range`, unrolled at compile time";
    StaticAssert = tl "static_assert" (req("cond"), opt("msg", D::Str(""))), "compile-time assertion on constexprs";
    DeviceAssert = tl "device_assert" (req("cond"), opt("msg", D::Str(""))), "run-time assertion";
    DevicePrint = tl "device_print" (req("prefix")) * "args", "print values at run time";
    AtomicAdd = tl "atomic_add" (req("pointer"), req("val"), opt("mask", D::None), opt("sem", D::None), opt("scope", D::None)), "atomically add `val` at `pointer`; returns the old values";
    Gemm = tl "gemm" (req("a"), req("b"), req("out"), req("M"), req("N"), req("K"), opt("a_in", D::Str("hbm")), opt("b_in", D::Str("hbm"))), "the PE's hardware-tiled GEMM: out[M, N] = a[M, K] @ b[K, N], streamed DMA → GEMM → MATH → DMA";
    Rank = tl "rank" (), "this program's rank in the launch's communicator";
    WorldSize = tl "world_size" (), "number of ranks in the communicator";
    MeshId = tl "mesh_id" (req("axis")), "this rank's coordinate in the communicator's 2-D mesh (0: row, 1: column)";
    MeshSize = tl "mesh_size" (req("axis")), "extent of the communicator's 2-D mesh along `axis`";
    Send = tl "send" (req("dst"), req("value")), "send a block to a rank or direction over the IPCQ";
    Recv = tl "recv" (req("src"), req("shape"), req("dtype")), "receive a block (blocking)";
    RecvAsync = tl "recv_async" (req("src"), req("shape"), req("dtype")), "start receiving a block; returns a future";
    Wait = tl "wait" (req("future")), "the block of a `recv_async` future";
    SymmAt = tl "symm_at" (req("pointer"), req("rank")), "the same offset in `rank`'s copy of a symmetric buffer";
    Notify = tl "notify" (req("sig_ptr"), req("rank"), opt("value", D::Int(1))), "set a signal word at `rank` (orders earlier puts)";
    WaitUntil = tl "wait_until" (req("sig_ptr"), req("value")), "block until the local signal word equals `value`";
    Barrier = tl "barrier" (), "wait until every rank of the communicator arrives";
    PyRange = py "range" (req("arg1"), opt("arg2", D::None), opt("step", D::None)), "a run-time loop range";
    PyFloat = py "float" (req("x")), "a float constant (`float(\"inf\")`, `float(\"nan\")`)";
    PyInt = py "int" (req("x")), "an integer constant";
    PyMin = py "min" (req("a"), req("b")), "the smaller of two constants";
    PyMax = py "max" (req("a"), req("b")), "the larger of two constants";
    PyLen = py "len" (req("x")), "length of a constant tuple";
}

impl Builtin {
    /// A `tl.name` function.
    pub fn lookup_tl(name: &str) -> Option<Builtin> {
        Builtin::ALL.iter().copied().find(|b| b.in_tl() && b.name() == name)
    }

    /// A Python built-in by name.
    pub fn lookup_py(name: &str) -> Option<Builtin> {
        Builtin::ALL.iter().copied().find(|b| !b.in_tl() && b.name() == name)
    }

    /// How it is written in source: `tl.load`, `range`.
    pub fn qualified(self) -> String {
        if self.in_tl() {
            format!("tl.{}", self.name())
        } else {
            self.name().to_string()
        }
    }

    /// The signature as documentation shows it.
    pub fn signature_string(self) -> String {
        let sig = self.signature();
        let mut parts: Vec<String> = sig
            .params
            .iter()
            .map(|p| match p.default {
                ArgDefault::Required | ArgDefault::RequiredOrNone => p.name.to_string(),
                ArgDefault::None => format!("{}=None", p.name),
                ArgDefault::Bool(b) => format!("{}={}", p.name, if b { "True" } else { "False" }),
                ArgDefault::Int(v) => format!("{}={v}", p.name),
                ArgDefault::Str(s) => format!("{}={s:?}", p.name),
                ArgDefault::DType(d) => format!("{}={d}", p.name),
            })
            .collect();
        if let Some(v) = sig.varargs {
            parts.push(format!("*{v}"));
        }
        format!("{}({})", self.qualified(), parts.join(", "))
    }
}

/// Names in the `tl` namespace that are not functions.
pub fn tl_constant(name: &str) -> Option<super::types::Konst> {
    use super::types::{Direction, Konst};
    Some(match name {
        "NEXT" => Konst::Direction(Direction::Next),
        "PREV" => Konst::Direction(Direction::Prev),
        "NORTH" => Konst::Direction(Direction::North),
        "SOUTH" => Konst::Direction(Direction::South),
        "EAST" => Konst::Direction(Direction::East),
        "WEST" => Konst::Direction(Direction::West),
        _ => return DType::from_name(name).map(Konst::DType),
    })
}

/// Every name visible as `tl.<name>` (for suggestions).
pub fn tl_names() -> Vec<&'static str> {
    let mut names: Vec<&'static str> = Builtin::ALL.iter().filter(|b| b.in_tl()).map(|b| b.name()).collect();
    names.extend(["NEXT", "PREV", "NORTH", "SOUTH", "EAST", "WEST", "constexpr"]);
    names.extend([
        "float16", "bfloat16", "float32", "int8", "int32", "int64", "uint8", "uint32", "int1",
    ]);
    names.extend(DType::ALL.iter().map(|d| d.name()));
    names
}
