//! Functional execution: runs every program instance of a launch, one
//! after another, against a [`FlatMemory`]. Scalars and control flow are
//! interpreted here; block operations go to a [`DataPath`] (the Cranelift
//! JIT or the reference interpreter) in the groups of an execution
//! [`Plan`]. No timing: the simulator adds that, reusing the data path.

mod memory;

pub use memory::{FlatMemory, Segment};

use kernbench_compiler::datapath::{elem, DataPath, ExecError, ExecErrorKind, Memory, Plan, RtValue, Step, Tensor};
use kernbench_compiler::ir::{ConstVal, Function, Inst, Op, Region, Type, Value};
use kernbench_compiler::sema::types::{DType, Elem};
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
}

/// Runs `func` on every point of `grid` with `args` (one per kernel
/// parameter: addresses for pointers, bits for scalars).
pub fn run_grid(
    func: &Function,
    plan: &Plan,
    dp: &mut dyn DataPath,
    mem: &mut dyn Memory,
    grid: [u32; 3],
    args: &[RtValue],
) -> Result<(), RunError> {
    let mut m = Machine {
        func,
        plan,
        dp,
        mem,
        env: vec![None; func.values.len()],
        pid: [0; 3],
        grid,
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
        let params = self.func.region(r).params.clone();
        for (p, a) in params.iter().zip(args) {
            self.set(*p, a.clone());
        }
        let plan = self.plan;
        for step in &plan.steps[r] {
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
        let inputs: Vec<RtValue> = group.inputs.iter().map(|v| self.get(*v)).collect();
        let refs: Vec<&RtValue> = inputs.iter().collect();
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
        let out = match self.get(d.args[0]) {
            RtValue::Block(t) => {
                let mut t = (*t).clone();
                t.shape = shape;
                RtValue::Block(Rc::new(t))
            }
            RtValue::Scalar(b) => {
                let mut t = Tensor::zeros(ty.elem(), &shape);
                t.set_bits(0, b);
                RtValue::Block(Rc::new(t))
            }
        };
        self.set(d.results[0], out);
    }

    /// A scalar instruction (or an effect) on the executor.
    fn inst(&mut self, i: Inst) -> Result<(), ExecError> {
        let d = self.func.inst(i);
        let rt = d.results.first().map(|r| dtype(self.func.ty(*r)));
        let arg_dt = |k: usize| dtype(self.func.ty(d.args[k]));
        let comm = |what: &str| {
            fail(
                i,
                ExecErrorKind::Unsupported(format!(
                    "`{what}` needs peers: functional `tlc run` executes programs one at a time without a communicator"
                )),
            )
        };
        let bits: Option<elem::Bits> = match &d.op {
            Op::Const(c) => {
                let t = rt.unwrap_or(DType::I32);
                Some(match c {
                    ConstVal::Int(v) => elem::const_int(t, *v),
                    ConstVal::Float(v) => elem::const_float(t, *v),
                })
            }
            Op::ProgramId(a) => Some(self.pid[*a as usize % 3] as u64),
            Op::NumPrograms(a) => Some(self.grid[*a as usize % 3] as u64),
            // One program is its own communicator of size 1.
            Op::Rank | Op::MeshId(_) => Some(0),
            Op::WorldSize | Op::MeshSize(_) => Some(1),
            Op::Binary(op) => {
                let t = arg_dt(0);
                let r = elem::binary(*op, t, self.scalar(d.args[0]), self.scalar(d.args[1]));
                Some(r.map_err(|_| fail(i, ExecErrorKind::DivisionByZero))?)
            }
            Op::Cmp(op) => Some(elem::compare(*op, arg_dt(0), self.scalar(d.args[0]), self.scalar(d.args[1])) as u64),
            Op::Unary(op) => Some(elem::unary(*op, arg_dt(0), self.scalar(d.args[0]))),
            Op::Cast { bitcast } => {
                let (from, to) = (arg_dt(0), rt.unwrap_or(DType::I32));
                let x = self.scalar(d.args[0]);
                Some(if *bitcast {
                    elem::bitcast(to, x)
                } else {
                    elem::cast(from, to, x)
                })
            }
            Op::Select => {
                let c = self.scalar(d.args[0]) & 1 != 0;
                Some(self.scalar(d.args[if c { 1 } else { 2 }]))
            }
            Op::Fma => Some(elem::fma(
                arg_dt(0),
                self.scalar(d.args[0]),
                self.scalar(d.args[1]),
                self.scalar(d.args[2]),
            )),
            Op::PtrAdd => {
                let size = match self.func.ty(d.args[0]).elem() {
                    Elem::Ptr(p) => p.size_bytes(),
                    Elem::Num(_) => 1,
                };
                let off = elem::to_i64(arg_dt(1), self.scalar(d.args[1]));
                Some(self.scalar(d.args[0]).wrapping_add((off as u64).wrapping_mul(size)))
            }
            Op::Assert { message } => {
                let ok = match self.get(d.args[0]) {
                    RtValue::Scalar(b) => b & 1 != 0,
                    RtValue::Block(t) => (0..t.numel()).all(|k| t.get_bits(k) & 1 != 0),
                };
                if !ok {
                    return Err(fail(i, ExecErrorKind::AssertionFailed(message.clone())));
                }
                None
            }
            Op::Print { prefix } => {
                let vals: Vec<String> = d
                    .args
                    .iter()
                    .map(|a| format_value(self.func.ty(*a), &self.get(*a)))
                    .collect();
                println!(
                    "pid ({}, {}, {}) {prefix}{}",
                    self.pid[0],
                    self.pid[1],
                    self.pid[2],
                    vals.join(" ")
                );
                None
            }
            Op::Barrier => None,
            Op::Send(_) => return Err(comm("tl.send")),
            Op::Recv { .. } | Op::Wait => return Err(comm("tl.recv")),
            Op::SymmAt | Op::Notify | Op::WaitUntil => return Err(comm("symmetric memory")),
            other => {
                return Err(fail(
                    i,
                    ExecErrorKind::Unsupported(format!("`{}` cannot run on the executor", other.mnemonic())),
                ))
            }
        };
        if let (Some(b), Some(r)) = (bits, d.results.first()) {
            self.set(*r, RtValue::Scalar(b));
        }
        Ok(())
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
        RtValue::Block(tn) => {
            let items: Vec<String> = (0..tn.numel()).map(|k| one(tn.get_bits(k))).collect();
            format!("[{}]", items.join(", "))
        }
    }
}
