//! Functional execution: runs every program instance of a launch, one
//! after another, against a [`FlatMemory`]. Scalars and control flow are
//! interpreted here; block operations go to a [`DataPath`] (the Cranelift
//! JIT or the reference interpreter) in the groups of an execution
//! [`Plan`]. No timing: the simulator adds that, reusing the data path.

mod memory;

pub use memory::{FlatMemory, RawSegment, Segment};

use kernbench_compiler::datapath::{elem, DataPath, ExecError, ExecErrorKind, Memory, Plan, RtValue, Step, Tensor};
use kernbench_compiler::ir::{BinaryOp, CmpOp, ConstVal, Function, Inst, Op, Region, Type, UnaryOp, Value};
use kernbench_compiler::sema::types::{DType, Elem};
use smallvec::SmallVec;
use std::rc::Rc;

/// A failure, located in the program instance that hit it.
#[derive(Clone, Debug)]
pub struct RunError {
    pub error: ExecError,
    pub program: [u32; 3],
}

/// A run-time failure, rendered like a compiler diagnostic at the
/// instruction's source line.
pub fn render_run_error(
    func: &Function,
    sources: &kernbench_compiler::diag::SourceMap,
    e: &RunError,
    color: kernbench_compiler::diag::ColorMode,
) -> String {
    use codespan_reporting::diagnostic as cs;
    use codespan_reporting::term;
    let inst = func.inst(e.error.inst);
    let [x, y, z] = e.program;
    let d = cs::Diagnostic::error()
        .with_message(format!(
            "{} (kernel `{}`, program ({x}, {y}, {z}))",
            e.error.kind, func.name
        ))
        .with_labels(vec![cs::Label::primary(inst.loc.file, inst.loc.span.range())
            .with_message(format!("in this `{}`", inst.op.mnemonic()))]);
    let mut buffer = match color {
        kernbench_compiler::diag::ColorMode::Always => term::termcolor::Buffer::ansi(),
        kernbench_compiler::diag::ColorMode::Never => term::termcolor::Buffer::no_color(),
    };
    let _ = term::emit(&mut buffer, &term::Config::default(), sources, &d);
    String::from_utf8_lossy(buffer.as_slice()).into_owned()
}

/// Where a program runs: what `tl.program_id`, `tl.rank` and the mesh
/// built-ins answer.
#[derive(Clone, Copy, Debug)]
pub struct ScalarCtx {
    pub pid: [u32; 3],
    pub grid: [u32; 3],
    pub rank: u32,
    pub world: u32,
    pub mesh_id: [u32; 2],
    pub mesh_size: [u32; 2],
}

/// What a scalar step did.
pub enum Scalar {
    /// Produced this value.
    Value(elem::Bits),
    /// An effect that produced nothing (an assertion that held, a print).
    Done,
    /// A communication operation: the caller's business.
    Communication(&'static str),
}

/// A pure scalar instruction (a constant, a built-in, arithmetic, a
/// comparison, a cast, `select`, `fma`, a pointer offset) decoded once:
/// the operation and the dtypes it works in. [`PureScalar::eval`] computes
/// it from its operands' bits; the simulator's issue unit decodes every
/// instruction at launch and evaluates on the bits it holds, and
/// [`scalar_op`] decodes and evaluates in one go.
#[derive(Clone, Copy, Debug)]
pub enum PureScalar {
    Const(elem::Bits),
    ProgramId(usize),
    NumPrograms(usize),
    Rank,
    WorldSize,
    MeshId(usize),
    MeshSize(usize),
    Binary(BinaryOp, DType),
    Cmp(CmpOp, DType),
    Unary(UnaryOp, DType),
    Cast {
        from: DType,
        to: DType,
        bitcast: bool,
    },
    Select,
    Fma(DType),
    /// The pointee's size and the offset's dtype.
    PtrAdd {
        size: u64,
        offset: DType,
    },
}

impl PureScalar {
    /// The decoded form of `i`; `None` when it is not a pure scalar
    /// instruction.
    pub fn decode(func: &Function, i: Inst) -> Option<PureScalar> {
        let d = func.inst(i);
        let rt = || d.results.first().map(|r| dtype(func.ty(*r))).unwrap_or(DType::I32);
        let arg_dt = |k: usize| d.args.get(k).map(|a| dtype(func.ty(*a)));
        Some(match &d.op {
            Op::Const(c) => PureScalar::Const(match c {
                ConstVal::Int(v) => elem::const_int(rt(), *v),
                ConstVal::Float(v) => elem::const_float(rt(), *v),
            }),
            Op::ProgramId(x) => PureScalar::ProgramId(*x as usize % 3),
            Op::NumPrograms(x) => PureScalar::NumPrograms(*x as usize % 3),
            Op::Rank => PureScalar::Rank,
            Op::WorldSize => PureScalar::WorldSize,
            Op::MeshId(x) => PureScalar::MeshId(*x as usize % 2),
            Op::MeshSize(x) => PureScalar::MeshSize(*x as usize % 2),
            Op::Binary(op) => PureScalar::Binary(*op, arg_dt(0)?),
            Op::Cmp(op) => PureScalar::Cmp(*op, arg_dt(0)?),
            Op::Unary(op) => PureScalar::Unary(*op, arg_dt(0)?),
            Op::Cast { bitcast } => PureScalar::Cast {
                from: arg_dt(0)?,
                to: rt(),
                bitcast: *bitcast,
            },
            Op::Select => PureScalar::Select,
            Op::Fma => PureScalar::Fma(arg_dt(0)?),
            Op::PtrAdd => PureScalar::PtrAdd {
                size: match func.ty(*d.args.first()?).elem() {
                    Elem::Ptr(p) => p.size_bytes(),
                    Elem::Num(_) => 1,
                },
                offset: arg_dt(1)?,
            },
            _ => return None,
        })
    }

    /// The result from the operands' bits, `a(k)` being operand `k`.
    pub fn eval(self, a: impl Fn(usize) -> elem::Bits, ctx: &ScalarCtx) -> Result<elem::Bits, ExecErrorKind> {
        Ok(match self {
            PureScalar::Const(b) => b,
            PureScalar::ProgramId(x) => ctx.pid[x] as u64,
            PureScalar::NumPrograms(x) => ctx.grid[x] as u64,
            PureScalar::Rank => ctx.rank as u64,
            PureScalar::WorldSize => ctx.world as u64,
            PureScalar::MeshId(x) => ctx.mesh_id[x] as u64,
            PureScalar::MeshSize(x) => ctx.mesh_size[x] as u64,
            PureScalar::Binary(op, t) => elem::binary(op, t, a(0), a(1)).map_err(|_| ExecErrorKind::DivisionByZero)?,
            PureScalar::Cmp(op, t) => elem::compare(op, t, a(0), a(1)) as u64,
            PureScalar::Unary(op, t) => elem::unary(op, t, a(0)),
            PureScalar::Cast { from, to, bitcast } => {
                if bitcast {
                    elem::bitcast(to, a(0))
                } else {
                    elem::cast(from, to, a(0))
                }
            }
            PureScalar::Select => a(if a(0) & 1 != 0 { 1 } else { 2 }),
            PureScalar::Fma(t) => elem::fma(t, a(0), a(1), a(2)),
            PureScalar::PtrAdd { size, offset } => {
                let off = elem::to_i64(offset, a(1));
                a(0).wrapping_add((off as u64).wrapping_mul(size))
            }
        })
    }
}

/// Whether `tl.device_print` writes to stderr instead of stdout (where
/// Triton's goes): set by a program whose stdout holds something else,
/// such as `tlc … --format json`'s one JSON object.
static DEVICE_PRINT_TO_STDERR: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Sends every later `tl.device_print` to stderr (`true`) or stdout.
pub fn device_print_to_stderr(yes: bool) {
    DEVICE_PRINT_TO_STDERR.store(yes, std::sync::atomic::Ordering::Relaxed);
}

/// Executes one executor (non-data-path) instruction on its argument values.
pub fn scalar_op(func: &Function, i: Inst, args: &[RtValue], ctx: &ScalarCtx) -> Result<Scalar, ExecErrorKind> {
    if let Some(op) = PureScalar::decode(func, i) {
        return op.eval(|k| args[k].scalar(), ctx).map(Scalar::Value);
    }
    let d = func.inst(i);
    match &d.op {
        Op::Assert { message } => {
            let ok = match &args[0] {
                RtValue::Scalar(b) => b & 1 != 0,
                v => v
                    .tensor()
                    .is_none_or(|t| (0..t.numel()).all(|k| t.get_bits(k) & 1 != 0)),
            };
            if !ok {
                return Err(ExecErrorKind::AssertionFailed(message.clone()));
            }
            Ok(Scalar::Done)
        }
        Op::Print { prefix } => {
            let vals: Vec<String> = d
                .args
                .iter()
                .zip(args)
                .map(|(v, x)| format_value(func.ty(*v), x))
                .collect();
            let sep = if prefix.is_empty() || prefix.ends_with(char::is_whitespace) {
                ""
            } else {
                " "
            };
            let line = format!(
                "pid ({}, {}, {}) {prefix}{sep}{}",
                ctx.pid[0],
                ctx.pid[1],
                ctx.pid[2],
                vals.join(" ")
            );
            // A reader that closed the stream stops receiving; the kernel
            // goes on.
            use std::io::Write as _;
            let _ = if DEVICE_PRINT_TO_STDERR.load(std::sync::atomic::Ordering::Relaxed) {
                writeln!(std::io::stderr(), "{line}")
            } else {
                writeln!(std::io::stdout(), "{line}")
            };
            Ok(Scalar::Done)
        }
        Op::Barrier => Ok(Scalar::Communication("tl.barrier")),
        Op::Send(_) => Ok(Scalar::Communication("tl.send")),
        Op::Recv { .. } | Op::Wait => Ok(Scalar::Communication("tl.recv")),
        Op::SymmAt | Op::Notify | Op::WaitUntil => Ok(Scalar::Communication("symmetric memory")),
        other => Err(ExecErrorKind::Unsupported(format!(
            "`{}` cannot run on the executor",
            other.mnemonic()
        ))),
    }
}

/// How a region ended.
enum Flow {
    Yield(Vec<RtValue>),
    Break(Vec<RtValue>),
    Continue(Vec<RtValue>),
    Return,
    Condition(bool),
}

struct Machine<'a> {
    func: &'a Function,
    plan: &'a Plan,
    dp: &'a mut dyn DataPath,
    mem: &'a mut dyn Memory,
    env: Vec<Option<RtValue>>,
    pid: [u32; 3],
    grid: [u32; 3],
    /// Steps (instructions, fused groups) the run may still take.
    steps_left: u64,
    max_steps: u64,
}

/// Runs `func` on every point of `grid` with `args` (one per kernel
/// parameter: addresses for pointers, bits for scalars). With `max_steps`,
/// a run that takes more steps (instructions and fused groups, over the
/// whole grid) stops with an error where it is: this executor has no
/// clock, and a loop that never ends would otherwise run for ever.
pub fn run_grid(
    func: &Function,
    plan: &Plan,
    dp: &mut dyn DataPath,
    mem: &mut dyn Memory,
    grid: [u32; 3],
    args: &[RtValue],
    max_steps: Option<u64>,
) -> Result<(), RunError> {
    let max_steps = max_steps.unwrap_or(u64::MAX);
    let mut m = Machine {
        func,
        plan,
        dp,
        mem,
        env: vec![None; func.values.len()],
        pid: [0; 3],
        grid,
        steps_left: max_steps,
        max_steps,
    };
    for z in 0..grid[2] {
        for y in 0..grid[1] {
            for x in 0..grid[0] {
                m.pid = [x, y, z];
                m.region(func.body, args).map_err(|error| RunError {
                    error,
                    program: [x, y, z],
                })?;
            }
        }
    }
    Ok(())
}

fn dtype(t: &Type) -> DType {
    match t.elem() {
        Elem::Num(d) => d,
        Elem::Ptr(_) => DType::I64,
    }
}

fn fail(inst: Inst, kind: ExecErrorKind) -> ExecError {
    ExecError { inst, kind }
}

impl Machine<'_> {
    fn get(&self, v: Value) -> RtValue {
        // The verifier guarantees definitions precede uses.
        self.env[v.as_u32() as usize].clone().unwrap_or(RtValue::Scalar(0))
    }

    fn set(&mut self, v: Value, x: RtValue) {
        self.env[v.as_u32() as usize] = Some(x);
    }

    fn scalar(&self, v: Value) -> elem::Bits {
        self.get(v).scalar()
    }

    fn region(&mut self, r: Region, args: &[RtValue]) -> Result<Flow, ExecError> {
        let func = self.func;
        for (p, a) in func.region(r).params.iter().zip(args) {
            self.set(*p, a.clone());
        }
        let plan = self.plan;
        for step in &plan.steps[r] {
            if self.steps_left == 0 {
                let at = match *step {
                    Step::Inst(i) | Step::Relabel(i) | Step::Control(i) => i,
                    Step::Group(g) => plan.groups[g].insts[0],
                };
                return Err(fail(
                    at,
                    ExecErrorKind::Unsupported(format!(
                        "stopped after {} steps without finishing (`--time-limit` worth of them, one per cycle): \
                         a loop that never ends?",
                        self.max_steps
                    )),
                ));
            }
            self.steps_left -= 1;
            match *step {
                Step::Inst(i) => self.inst(i)?,
                Step::Relabel(i) => self.relabel(i),
                Step::Group(g) => self.group(g)?,
                Step::Control(i) => {
                    if let Some(flow) = self.control(i)? {
                        return Ok(flow);
                    }
                }
            }
        }
        Ok(Flow::Yield(Vec::new()))
    }

    fn group(&mut self, g: usize) -> Result<(), ExecError> {
        let group = &self.plan.groups[g];
        let inputs: SmallVec<[RtValue; 8]> = group.inputs.iter().map(|v| self.get(*v)).collect();
        let refs: SmallVec<[&RtValue; 8]> = inputs.iter().collect();
        let outs = self.dp.run(self.func, self.plan, g, &refs, &mut *self.mem)?;
        for (v, x) in group.outputs.iter().zip(outs) {
            self.set(*v, x);
        }
        Ok(())
    }

    fn relabel(&mut self, i: Inst) {
        let d = self.func.inst(i);
        let ty = self.func.ty(d.results[0]);
        let shape: Vec<usize> = ty.shape().iter().map(|&x| x as usize).collect();
        let v = self.get(d.args[0]);
        // A formula stays one where the reshape only adds or drops axes of
        // extent 1.
        if let Some(r) = v.reshaped_formula(ty.shape()) {
            self.set(d.results[0], r);
            return;
        }
        let out = match v.stored() {
            RtValue::Block(t) => {
                let mut t = Rc::unwrap_or_clone(t);
                t.shape = shape.as_slice().into();
                RtValue::Block(Rc::new(t))
            }
            RtValue::Scalar(b) => {
                let mut t = Tensor::zeros(ty.elem(), &shape);
                t.set_bits(0, b);
                RtValue::Block(Rc::new(t))
            }
            // `stored` leaves no formula.
            formula => formula,
        };
        self.set(d.results[0], out);
    }

    /// A scalar instruction (or an effect) on the executor.
    fn inst(&mut self, i: Inst) -> Result<(), ExecError> {
        let d = self.func.inst(i);
        let args: SmallVec<[RtValue; 4]> = d.args.iter().map(|a| self.get(*a)).collect();
        let ctx = ScalarCtx {
            pid: self.pid,
            grid: self.grid,
            rank: 0,
            world: 1,
            mesh_id: [0, 0],
            mesh_size: [1, 1],
        };
        match scalar_op(self.func, i, &args, &ctx).map_err(|kind| fail(i, kind))? {
            Scalar::Value(b) => {
                if let Some(r) = d.results.first() {
                    self.set(*r, RtValue::Scalar(b));
                }
                Ok(())
            }
            // A launch of one program is a communicator of one.
            Scalar::Done | Scalar::Communication("tl.barrier") => Ok(()),
            Scalar::Communication(what) => Err(fail(
                i,
                ExecErrorKind::Unsupported(format!(
                    "`{what}` needs peers: functional `tlc run` executes programs one at a time; run it on the simulated machine with `--pes`"
                )),
            )),
        }
    }

    fn args_of(&self, i: Inst, from: usize) -> Vec<RtValue> {
        self.func.inst(i).args[from..].iter().map(|a| self.get(*a)).collect()
    }

    /// Control flow; `Some(flow)` when the enclosing region ends here.
    fn control(&mut self, i: Inst) -> Result<Option<Flow>, ExecError> {
        let d = self.func.inst(i);
        match &d.op {
            Op::Yield => Ok(Some(Flow::Yield(self.args_of(i, 0)))),
            Op::Break => Ok(Some(Flow::Break(self.args_of(i, 0)))),
            Op::Continue => Ok(Some(Flow::Continue(self.args_of(i, 0)))),
            Op::Return => Ok(Some(Flow::Return)),
            Op::Condition => Ok(Some(Flow::Condition(self.scalar(d.args[0]) & 1 != 0))),
            Op::If => {
                let c = self.scalar(d.args[0]) & 1 != 0;
                let r = d.regions[if c { 0 } else { 1 }];
                match self.region(r, &[])? {
                    Flow::Yield(vals) => {
                        for (res, v) in d.results.iter().zip(vals) {
                            self.set(*res, v);
                        }
                        Ok(None)
                    }
                    other => Ok(Some(other)),
                }
            }
            Op::For => {
                let t = dtype(self.func.ty(d.args[0]));
                let int = |b| elem::to_i64(t, b);
                let (lb, ub, step) = (
                    int(self.scalar(d.args[0])),
                    int(self.scalar(d.args[1])),
                    int(self.scalar(d.args[2])),
                );
                if step == 0 {
                    return Err(fail(
                        i,
                        ExecErrorKind::Unsupported("`range` step is zero at run time".into()),
                    ));
                }
                let mut carried = self.args_of(i, 3);
                let body = d.regions[0];
                let mut iv = lb;
                while (step > 0 && iv < ub) || (step < 0 && iv > ub) {
                    let mut args = vec![RtValue::Scalar(elem::from_i64(t, iv))];
                    args.extend(carried.iter().cloned());
                    match self.region(body, &args)? {
                        Flow::Yield(v) | Flow::Continue(v) => carried = v,
                        Flow::Break(v) => {
                            carried = v;
                            break;
                        }
                        Flow::Return => return Ok(Some(Flow::Return)),
                        Flow::Condition(_) => {}
                    }
                    iv = iv.saturating_add(step);
                }
                for (res, v) in d.results.iter().zip(carried) {
                    self.set(*res, v);
                }
                Ok(None)
            }
            Op::While => {
                let mut carried = self.args_of(i, 0);
                let (before, body) = (d.regions[0], d.regions[1]);
                loop {
                    match self.region(before, &carried)? {
                        Flow::Condition(true) => {}
                        Flow::Return => return Ok(Some(Flow::Return)),
                        _ => break,
                    }
                    match self.region(body, &carried)? {
                        Flow::Yield(v) | Flow::Continue(v) => carried = v,
                        Flow::Break(v) => {
                            carried = v;
                            break;
                        }
                        Flow::Return => return Ok(Some(Flow::Return)),
                        Flow::Condition(_) => {}
                    }
                }
                for (res, v) in d.results.iter().zip(carried) {
                    self.set(*res, v);
                }
                Ok(None)
            }
            _ => Ok(None),
        }
    }
}

/// A value as `device_print` shows it.
fn format_value(t: &Type, v: &RtValue) -> String {
    let d = dtype(t);
    let one = |b: elem::Bits| {
        if d.is_float() {
            format!("{}", elem::to_f32(d, b))
        } else if matches!(t.elem(), Elem::Ptr(_)) {
            format!("{b:#x}")
        } else {
            format!("{}", elem::to_i64(d, b))
        }
    };
    match v {
        RtValue::Scalar(b) => one(*b),
        v => {
            let Some(tn) = v.tensor() else { return String::new() };
            let items: Vec<String> = (0..tn.numel()).map(|k| one(tn.get_bits(k))).collect();
            format!("[{}]", items.join(", "))
        }
    }
}
