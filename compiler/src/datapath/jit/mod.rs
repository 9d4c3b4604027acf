//! The Cranelift JIT data path: each group of a plan compiled to one
//! native function specialized on its shapes and dtypes, cached by the
//! group's signature (operations, types, shapes) so later launches of the
//! same specialization compile nothing.
//!
//! Covered natively: fused elementwise chains (arithmetic, comparisons,
//! casts, `where`, `arange`, splat/broadcast, pointer arithmetic, masked
//! loads and stores), reductions, `trans` and `dot`. `atomic_add` and the
//! `tl.gemm` composite run on the reference interpreter (they are rare and
//! memory-bound).

mod codegen;
mod dot;
mod dot_avx;
mod runtime;
mod vector;

use super::interp::Interpreter;
use super::{affine, elem, DataPath, ExecError, ExecErrorKind, Group, GroupId, Memory, Outputs, Plan, RtValue, Tensor};
use crate::ir::{Function, Op, Type};
use crate::sema::types::{DType, Elem};
use codegen::{helper_signatures, Gen, HelperRefs};
use cranelift_codegen::ir::{types, AbiParam, UserFuncName};
use cranelift_codegen::settings::{self, Configurable};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
use cranelift_jit::{JITBuilder, JITModule};
use cranelift_module::{default_libcall_names, FuncId, Linkage, Module};
use runtime::JitCtx;
use std::collections::HashMap;
use std::rc::Rc;

/// How `run` calls a compiled group.
#[derive(Clone, Copy, Debug)]
enum Kind {
    /// Inputs and outputs passed as they are.
    Direct,
    /// A float `dot`: operands widened to f32 first, the f32 result
    /// converted to the output dtype after.
    DotF32,
    /// Executed by the reference interpreter.
    Interp,
}

struct Compiled {
    ptr: *const u8,
    kind: Kind,
}

/// One group of the plan last prepared.
struct Prepared {
    ptr: *const u8,
    kind: Kind,
    /// The group's cache key.
    key: String,
    /// How far the group may be evaluated as formulas.
    symbolic: affine::Symbolic,
    /// Whether a member is an `arange`: the only formula that needs no
    /// input formula or scalar to start from.
    has_arange: bool,
    /// Whether compiled code may take affine inputs as formulas (an
    /// elementwise group); otherwise they are materialized.
    takes_affine: bool,
    /// Code compiled for affine inputs: (bit k set: input k affine, code).
    variants: Vec<(u64, *const u8)>,
}

type GroupFn = unsafe extern "C" fn(*const u64, *mut JitCtx) -> u32;

pub struct Jit {
    module: JITModule,
    helpers: Vec<(&'static str, FuncId)>,
    cache: HashMap<String, Compiled>,
    /// For the plan last prepared, by group index (so running a group
    /// does no lookup).
    prepared: Vec<Prepared>,
    /// For the plan last prepared: each group's segment caches (three
    /// words per load or store) and the memory layout they were filled
    /// under (see `Memory::layout_epoch`).
    segment_caches: Vec<(Option<u64>, Vec<u64>)>,
    fctx: FunctionBuilderContext,
    interp: Interpreter,
    /// Where compiled code writes outputs that are handed on as formulas
    /// (eight bytes per element: enough for any dtype).
    scratch: Vec<u64>,
    /// Functions compiled so far (for statistics and benchmarks).
    pub compiled_count: usize,
    /// Group outputs handed over as formulas, and group runs skipped
    /// because every output was one (statistics, and for the tests).
    pub formula_outputs: usize,
    pub formula_only_runs: usize,
    /// Of `formula_outputs`, the masks.
    pub mask_formula_outputs: usize,
    /// Float `dot` groups call the 256-bit kernel of `dot_avx` (hosts with
    /// AVX) rather than Cranelift's 128-bit loops.
    native_dot: bool,
    /// Cranelift's verifier checks every function (see [`Jit::verifying`]).
    verify: bool,
}

impl Default for Jit {
    fn default() -> Self {
        Jit::new()
    }
}

impl Jit {
    /// A JIT for the host CPU. Cranelift's IR verifier runs in debug
    /// builds only (it costs a fifth of the compile time); see
    /// [`Jit::verifying`].
    ///
    /// # Panics
    /// When the host CPU is not supported by Cranelift (not x86-64 or
    /// aarch64) — a build-time property, not a user input.
    pub fn new() -> Jit {
        Jit::build(cfg!(debug_assertions))
    }

    /// A JIT that checks every function it generates with Cranelift's IR
    /// verifier (the tests use it).
    pub fn verifying() -> Jit {
        Jit::build(true)
    }

    fn build(verify: bool) -> Jit {
        let mut flags = settings::builder();
        for (k, v) in [
            ("opt_level", "speed"),
            ("is_pic", "false"),
            ("use_colocated_libcalls", "false"),
            ("enable_verifier", if verify { "true" } else { "false" }),
        ] {
            flags.set(k, v).expect("a known Cranelift setting");
        }
        let isa = cranelift_native::builder()
            .expect("Cranelift supports this host CPU")
            .finish(settings::Flags::new(flags))
            .expect("host ISA flags are valid");
        let mut builder = JITBuilder::with_isa(isa, default_libcall_names());
        for (name, ptr) in runtime::symbols() {
            builder.symbol(name, ptr);
        }
        let mut module = JITModule::new(builder);
        let call_conv = module.isa().default_call_conv();
        let mut helpers = Vec::new();
        for (name, sig) in helper_signatures(call_conv) {
            if let Ok(id) = module.declare_function(name, Linkage::Import, &sig) {
                helpers.push((name, id));
            }
        }
        Jit {
            module,
            helpers,
            cache: HashMap::new(),
            prepared: Vec::new(),
            segment_caches: Vec::new(),
            fctx: FunctionBuilderContext::new(),
            interp: Interpreter,
            scratch: Vec::new(),
            compiled_count: 0,
            formula_outputs: 0,
            formula_only_runs: 0,
            mask_formula_outputs: 0,
            native_dot: dot_avx::available(),
            verify,
        }
    }

    /// This JIT with float `dot` compiled to Cranelift loops even where
    /// the AVX kernel is available (the tests check both against the
    /// interpreter).
    pub fn generated_dot(mut self) -> Jit {
        self.native_dot = false;
        self.cache.clear();
        self
    }

    /// Whether float `dot` groups call the AVX kernel.
    pub fn native_dot(&self) -> bool {
        self.native_dot
    }

    fn helper(&self, name: &str) -> Option<FuncId> {
        self.helpers.iter().find(|(n, _)| *n == name).map(|(_, id)| *id)
    }

    /// Compiles `group`; bit k of `affine_inputs` set: input k arrives as
    /// an affine formula (elementwise groups only).
    fn compile(&mut self, func: &Function, group: &Group, affine_inputs: u64) -> Result<(FuncId, Kind), String> {
        let first = func.inst(group.insts[0]);
        let kind = match &first.op {
            Op::AtomicAdd { .. } | Op::Gemm { .. } => return Err("interp".into()),
            Op::Dot { .. }
                if func.ty(first.args[0]).elem() != Elem::Num(DType::I8)
                    && dtype_of(func.ty(first.args[0])).is_float() =>
            {
                Kind::DotF32
            }
            _ => Kind::Direct,
        };
        let mut sig = self.module.make_signature();
        sig.params.push(AbiParam::new(types::I64));
        sig.params.push(AbiParam::new(types::I64));
        sig.returns.push(AbiParam::new(types::I32));
        let name = format!("group{}", self.compiled_count);
        let id = self
            .module
            .declare_function(&name, Linkage::Local, &sig)
            .map_err(|e| e.to_string())?;
        let mut ctx = self.module.make_context();
        ctx.func.signature = sig;
        ctx.func.name = UserFuncName::user(0, id.as_u32());
        let refs = {
            let mut get = |n: &str| -> Result<cranelift_codegen::ir::FuncRef, String> {
                let hid = self.helper(n).ok_or_else(|| format!("helper {n} missing"))?;
                Ok(self.module.declare_func_in_func(hid, &mut ctx.func))
            };
            HelperRefs {
                resolve: get("kb_resolve")?,
                f16_to_f32: get("kb_f16_to_f32")?,
                f32_to_f16: get("kb_f32_to_f16")?,
                bf16_to_f32: get("kb_bf16_to_f32")?,
                f32_to_bf16: get("kb_f32_to_bf16")?,
                cast: get("kb_cast")?,
                fma_f32: get("kb_fma_f32")?,
                dot_f32: get("kb_dot_f32")?,
                math: [
                    get(codegen::MATH_HELPERS[0])?,
                    get(codegen::MATH_HELPERS[1])?,
                    get(codegen::MATH_HELPERS[2])?,
                    get(codegen::MATH_HELPERS[3])?,
                    get(codegen::MATH_HELPERS[4])?,
                    get(codegen::MATH_HELPERS[5])?,
                    get(codegen::MATH_HELPERS[6])?,
                ],
            }
        };
        let config = self.module.target_config();
        {
            let builder = FunctionBuilder::new(&mut ctx.func, &mut self.fctx);
            let mut gen = Gen::new(func, group, builder, refs, affine_inputs);
            gen.native_dot = self.native_dot;
            match &first.op {
                Op::Reduce { op, axis, .. } => gen.reduce(*op, *axis),
                Op::Trans { perm } => gen.trans(perm),
                Op::Dot { has_acc } => {
                    let (m, k) = (
                        func.ty(first.args[0]).shape()[0] as i64,
                        func.ty(first.args[0]).shape()[1] as i64,
                    );
                    let n = func.ty(first.args[1]).shape()[1] as i64;
                    let a = gen.inputs[&first.args[0]];
                    let b = gen.inputs[&first.args[1]];
                    let acc = has_acc.then(|| gen.inputs[&first.args[2]]);
                    let out = gen.outputs.get(&first.results[0]).copied();
                    if let Some(out) = out {
                        match kind {
                            Kind::DotF32 => gen.dot_f32(a, b, acc, out, (m, n, k)),
                            _ => gen.dot_int(
                                a,
                                b,
                                acc,
                                out,
                                (m, n, k),
                                dtype_of(func.ty(first.args[0])),
                                dtype_of(func.ty(first.results[0])),
                            ),
                        }
                    }
                }
                _ => gen.elementwise(),
            }
            gen.finish(config);
        }
        // Developers: `KERNBENCH_JIT_DISASM=1` prints each compiled
        // group's machine code to stderr.
        let disasm = std::env::var_os("KERNBENCH_JIT_DISASM").is_some();
        ctx.set_disasm(disasm);
        self.module
            .define_function(id, &mut ctx)
            .map_err(|e| format!("{e:?}"))?;
        if let Some(text) = ctx.compiled_code().and_then(|c| c.vcode.as_ref()).filter(|_| disasm) {
            eprintln!("; {name}\n{text}");
        }
        self.module.clear_context(&mut ctx);
        self.compiled_count += 1;
        Ok((id, kind))
    }

    /// The code of prepared group `g` for affine inputs `formulas`,
    /// compiled on first use (`None` if it does not compile: the caller
    /// then passes elements).
    fn variant(&mut self, func: &Function, group: &Group, g: GroupId, formulas: u64) -> Option<*const u8> {
        let p = &self.prepared[g];
        if let Some(&(_, ptr)) = p.variants.iter().find(|(m, _)| *m == formulas) {
            return Some(ptr);
        }
        let key = match formulas {
            0 => p.key.clone(),
            _ => format!("{}|affine:{formulas:x}", p.key),
        };
        let ptr = match self.cache.get(&key) {
            Some(c) => c.ptr,
            None => {
                let (id, kind) = self.compile(func, group, formulas).ok()?;
                self.module.finalize_definitions().ok()?;
                let ptr = self.module.get_finalized_function(id);
                self.cache.insert(key, Compiled { ptr, kind });
                ptr
            }
        };
        self.prepared[g].variants.push((formulas, ptr));
        if formulas == 0 {
            // The plain code is what most runs use: no lookup next time.
            self.prepared[g].ptr = ptr;
        }
        Some(ptr)
    }
}

/// Whether compiled code for `group` may take affine inputs as formulas
/// (an elementwise group; reductions, `trans` and `dot` get elements).
fn takes_affine(func: &Function, group: &Group) -> bool {
    !matches!(
        func.inst(group.insts[0]).op,
        Op::Reduce { .. } | Op::Trans { .. } | Op::Dot { .. } | Op::AtomicAdd { .. } | Op::Gemm { .. }
    )
}

/// Whether some input of `group` is a block formulas describe (integers
/// or pointers).
fn may_get_formulas(func: &Function, group: &Group) -> bool {
    group.inputs.iter().any(|v| match func.ty(*v) {
        Type::Block(Elem::Ptr(_), _) => true,
        Type::Block(Elem::Num(d), _) => matches!(d, DType::I32 | DType::U32 | DType::I64),
        _ => false,
    })
}

fn dtype_of(t: &Type) -> DType {
    match t.elem() {
        Elem::Num(d) => d,
        Elem::Ptr(_) => DType::I64,
    }
}

/// The cache key of a group: its operations, attributes, types and the
/// wiring between them, with values renumbered locally.
fn group_key(func: &Function, group: &Group) -> String {
    let mut ids: HashMap<crate::ir::Value, String> = HashMap::new();
    let mut key = String::new();
    for (k, v) in group.inputs.iter().enumerate() {
        ids.insert(*v, format!("i{k}"));
        key.push_str(&format!("i{k}:{};", func.ty(*v)));
    }
    for (n, &i) in group.insts.iter().enumerate() {
        let d = func.inst(i);
        let args: Vec<&str> = d
            .args
            .iter()
            .map(|a| ids.get(a).map(String::as_str).unwrap_or("?"))
            .collect();
        let tys: Vec<String> = d.results.iter().map(|r| func.ty(*r).to_string()).collect();
        key.push_str(&format!("{:?}({})->{};", d.op, args.join(","), tys.join(",")));
        for (q, r) in d.results.iter().enumerate() {
            ids.insert(*r, format!("v{n}.{q}"));
        }
    }
    let outs: Vec<&str> = group
        .outputs
        .iter()
        .map(|o| ids.get(o).map(String::as_str).unwrap_or("?"))
        .collect();
    key.push_str(&format!("out({})", outs.join(",")));
    key
}

/// An f16/bf16 block widened to f32 (exactly; the hardware F16C path where
/// available). Other dtypes are passed to compiled code as they are.
fn widened(t: &Tensor) -> Option<Tensor> {
    use half::slice::{HalfBitsSliceExt, HalfFloatSliceExt};
    let d = t.dtype();
    if !matches!(d, DType::F16 | DType::BF16) {
        return None;
    }
    let n = t.numel();
    // SAFETY: tensor storage is 8-byte aligned and holds `n` 2-byte
    // elements; u16 has no invalid bit patterns.
    let bits: &[u16] = unsafe { std::slice::from_raw_parts(t.as_ptr() as *const u16, n) };
    let mut out = Tensor::zeros(Elem::Num(DType::F32), &t.shape);
    // SAFETY: as above, for `n` f32 elements of the new tensor.
    let dst: &mut [f32] = unsafe { std::slice::from_raw_parts_mut(out.as_mut_ptr() as *mut f32, n) };
    if d == DType::F16 {
        bits.reinterpret_cast::<half::f16>().convert_to_f32_slice(dst);
    } else {
        bits.reinterpret_cast::<half::bf16>().convert_to_f32_slice(dst);
    }
    Some(out)
}

/// Active lanes of a mask that switches off only a tail: `Some(k)` when
/// lanes `0..k` are on and the rest off (`n` without a mask).
fn prefix_lanes(mask: Option<&RtValue>, n: usize) -> Option<usize> {
    match mask {
        None => Some(n),
        Some(RtValue::Scalar(m)) => Some(if m & 1 != 0 { n } else { 0 }),
        Some(RtValue::Affine(_)) => None,
        Some(RtValue::Mask(m)) => match m.lanes_on()? {
            on if on.count == 0 => Some(0),
            on if on.first == 0 && on.last + 1 == on.count => Some((on.count as usize).min(n)),
            _ => None,
        },
        Some(RtValue::Block(t)) => {
            let b = t.bytes();
            let k = crate::datapath::first_off_lane(b);
            b[k..].iter().all(|x| x & 1 == 0).then_some(k.min(n))
        }
    }
}

/// A lone load or store whose pointers are consecutive elements and whose
/// mask switches off at most a tail is a copy between memory and the
/// block: done here with `memcpy`, bit-identical to the compiled loop
/// (which it would otherwise run lane by lane). `None` when the group is
/// not such a copy or the bytes are not all in one allocation (the
/// compiled code then runs, and reports the fault).
fn contiguous_copy(func: &Function, group: &Group, inputs: &[&RtValue], mem: &mut dyn Memory) -> Option<Outputs> {
    let [i] = group.insts[..] else { return None };
    let d = func.inst(i);
    if !matches!(d.op, Op::Load { .. } | Op::Store { .. }) {
        return None;
    }
    let input = |v: crate::ir::Value| group.inputs.iter().position(|x| *x == v).map(|k| inputs[k]);
    let size = super::elem_size(match func.ty(d.args[0]).elem() {
        Elem::Ptr(t) => Elem::Num(t),
        e => e,
    });
    let (first, lanes) = match input(d.args[0])? {
        RtValue::Block(ptrs) => {
            let words = ptrs.words()?;
            let first = *words.first()?;
            let mut next = first;
            let mut consecutive = true;
            for w in words {
                consecutive &= *w == next;
                next = next.wrapping_add(size as u64);
            }
            (consecutive.then_some(first)?, words.len())
        }
        RtValue::Affine(a) if a.numel() > 0 && a.is_consecutive(size as i64) => (a.base() as u64, a.numel()),
        _ => return None,
    };
    let (mask, write) = match d.op {
        Op::Load { has_mask, .. } => (has_mask.then(|| d.args[1]), false),
        Op::Store { has_mask } => (has_mask.then(|| d.args[2]), true),
        _ => return None,
    };
    let mask = match mask {
        Some(m) => Some(input(m)?),
        None => None,
    };
    let active = prefix_lanes(mask, lanes)?;
    let bytes = active * size;
    if write {
        let value = input(d.args[1])?.tensor()?;
        if bytes > 0 {
            let (base, seg) = mem.segment(first)?;
            let off = usize::try_from(first - base).ok()?;
            seg.get_mut(off..off.checked_add(bytes)?)?
                .copy_from_slice(value.bytes().get(..bytes)?);
        }
        return Some(Outputs::new());
    }
    let ty = func.ty(d.results[0]);
    let shape: smallvec::SmallVec<[usize; 4]> = ty.shape().iter().map(|&x| x as usize).collect();
    let mut out = Tensor::zeros(ty.elem(), &shape);
    if bytes > 0 {
        let (base, seg) = mem.segment(first)?;
        let off = usize::try_from(first - base).ok()?;
        out.bytes_mut()[..bytes].copy_from_slice(seg.get(off..off.checked_add(bytes)?)?);
    }
    if active < lanes {
        if let Op::Load { has_other: true, .. } = d.op {
            match input(d.args[2])? {
                RtValue::Scalar(b) => {
                    for k in active..lanes {
                        out.set_bits(k, *b);
                    }
                }
                o => out.bytes_mut()[bytes..].copy_from_slice(o.tensor()?.bytes().get(bytes..)?),
            }
        }
    }
    let r = d.results[0];
    Some(if group.outputs.contains(&r) {
        smallvec::smallvec![RtValue::Block(Rc::new(out))]
    } else {
        Outputs::new()
    })
}

impl DataPath for Jit {
    fn name(&self) -> &'static str {
        "jit"
    }

    fn formulas(&self) -> bool {
        true
    }

    fn maker(&self) -> Option<fn() -> Box<dyn DataPath>> {
        Some(if self.verify {
            || Box::new(Jit::verifying())
        } else {
            || Box::new(Jit::new())
        })
    }

    fn prepare(&mut self, func: &Function, plan: &Plan) -> Result<(), String> {
        let mut pending: Vec<(String, FuncId, Kind)> = Vec::new();
        let mut keys = Vec::new();
        for group in &plan.groups {
            let key = group_key(func, group);
            // A group that may be handed formulas is compiled on first use,
            // for the inputs it then has (so nothing is compiled twice).
            let deferred = takes_affine(func, group) && may_get_formulas(func, group);
            if !deferred && !self.cache.contains_key(&key) && !pending.iter().any(|p| p.0 == key) {
                match self.compile(func, group, 0) {
                    Ok((id, kind)) => pending.push((key.clone(), id, kind)),
                    Err(e) if e == "interp" => {
                        self.cache.insert(
                            key.clone(),
                            Compiled {
                                ptr: std::ptr::null(),
                                kind: Kind::Interp,
                            },
                        );
                    }
                    Err(e) => return Err(e),
                }
            }
            keys.push((key, deferred));
        }
        if !pending.is_empty() {
            self.module.finalize_definitions().map_err(|e| e.to_string())?;
            for (key, id, kind) in pending {
                let ptr = self.module.get_finalized_function(id);
                self.cache.insert(key, Compiled { ptr, kind });
            }
        }
        self.prepared = keys
            .into_iter()
            .zip(&plan.groups)
            .map(|((key, deferred), group)| {
                let (ptr, kind) = match self.cache.get(&key) {
                    Some(c) => (c.ptr, c.kind),
                    None if deferred => (std::ptr::null(), Kind::Direct),
                    None => (std::ptr::null(), Kind::Interp),
                };
                Prepared {
                    ptr,
                    kind,
                    key,
                    symbolic: affine::symbolic(func, group),
                    has_arange: group
                        .insts
                        .iter()
                        .any(|i| matches!(func.inst(*i).op, Op::Arange { .. })),
                    takes_affine: matches!(kind, Kind::Direct) && takes_affine(func, group),
                    variants: Vec::new(),
                }
            })
            .collect();
        self.segment_caches = plan
            .groups
            .iter()
            .map(|g| {
                let memory = g
                    .insts
                    .iter()
                    .filter(|i| matches!(func.inst(**i).op, Op::Load { .. } | Op::Store { .. }))
                    .count();
                (None, vec![0; 3 * memory])
            })
            .collect();
        Ok(())
    }

    fn run(
        &mut self,
        func: &Function,
        plan: &Plan,
        g: GroupId,
        inputs: &[&RtValue],
        mem: &mut dyn Memory,
    ) -> Result<Outputs, ExecError> {
        let group = &plan.groups[g];
        let Some(p) = self.prepared.get(g) else {
            return self.interp.run(func, plan, g, inputs, mem);
        };
        let (mut ptr, kind) = (p.ptr, p.kind);
        if let Kind::Interp = kind {
            return self.interp.run(func, plan, g, inputs, mem);
        }
        // The usual compute group (a combine, a scale): compiled, touching no
        // memory, with no `arange` and only stored blocks for inputs. No
        // formula can come of it and no input needs converting, so it runs
        // straight; on a failure the general path below runs it again (it
        // wrote nothing) and finds which.
        if matches!(kind, Kind::Direct)
            && !ptr.is_null()
            && !p.has_arange
            && self.segment_caches[g].1.is_empty()
            && inputs.iter().all(|v| matches!(v, RtValue::Block(_)))
        {
            let caches = self.segment_caches[g].1.as_mut_ptr();
            if let Some(r) = run_plain(func, group, ptr, inputs, mem, caches) {
                return Ok(r);
            }
        }
        // Outputs that are formulas: all of them, and the group need not
        // run; or some, which replace what the run computes (so later
        // groups get formulas).
        let mut formulas_out = Vec::new();
        // With only stored blocks for inputs, formulas can start only at an
        // `arange`.
        let may_start = p.has_arange || inputs.iter().any(|v| !matches!(v, RtValue::Block(_)));
        if p.symbolic != affine::Symbolic::Nothing && may_start {
            formulas_out = affine::eval_group(func, group, inputs);
            self.formula_outputs += formulas_out.iter().flatten().count();
            self.mask_formula_outputs += formulas_out
                .iter()
                .filter(|f| matches!(f, Some(RtValue::Mask(_))))
                .count();
            if p.symbolic == affine::Symbolic::All && formulas_out.iter().all(Option::is_some) {
                self.formula_only_runs += 1;
                return Ok(formulas_out.into_iter().flatten().collect());
            }
        }
        if let Some(r) = contiguous_copy(func, group, inputs, mem) {
            return Ok(r);
        }
        // Affine inputs go to code compiled for them as formulas where the
        // group is elementwise (and the code compiles), else as elements.
        let mut formulas = 0u64;
        if p.takes_affine {
            for (k, v) in inputs.iter().enumerate().take(64) {
                if let RtValue::Affine(_) = v {
                    formulas |= 1 << k;
                }
            }
        }
        if formulas != 0 || ptr.is_null() {
            let code = match self.variant(func, group, g, formulas) {
                None if formulas != 0 => {
                    formulas = 0;
                    self.variant(func, group, g, 0)
                }
                code => code,
            };
            match code {
                Some(v) => ptr = v,
                None => {
                    return Err(ExecError {
                        inst: group.insts[0],
                        kind: ExecErrorKind::Unsupported("the JIT cannot compile this group".into()),
                    })
                }
            }
        }
        // Inputs: scalars as bits, blocks as data pointers (f32 copies for
        // a float dot), formulas as pointers to their words.
        let mut keep: Vec<Tensor> = Vec::new();
        let mut words: smallvec::SmallVec<[u64; 16]> = smallvec::SmallVec::new();
        for (k, v) in inputs.iter().enumerate() {
            match v {
                RtValue::Scalar(b) => words.push(*b),
                RtValue::Block(t) => match (kind, widened(t)) {
                    (Kind::DotF32, Some(w)) => {
                        words.push(w.as_ptr() as u64);
                        keep.push(w);
                    }
                    _ => words.push(t.as_ptr() as u64),
                },
                RtValue::Affine(a) if k < 64 && formulas >> k & 1 != 0 => words.push(a.words.as_ptr() as u64),
                RtValue::Affine(a) => {
                    let t = a.materialize();
                    words.push(t.as_ptr() as u64);
                    keep.push(t);
                }
                RtValue::Mask(m) => {
                    let t = m.materialize();
                    words.push(t.as_ptr() as u64);
                    keep.push(t);
                }
            }
        }
        // Outputs that will be handed on as formulas are written to
        // scratch space the JIT keeps (one region each), not to new blocks.
        let has_formula = |k: usize| formulas_out.get(k).is_some_and(Option::is_some);
        let mut scratch_words = 0;
        for (k, o) in group.outputs.iter().enumerate() {
            if has_formula(k) {
                scratch_words += func.ty(*o).numel().max(1) as usize;
            }
        }
        if self.scratch.len() < scratch_words {
            self.scratch.resize(scratch_words, 0);
        }
        let mut outs: smallvec::SmallVec<[Tensor; 2]> = group
            .outputs
            .iter()
            .enumerate()
            .map(|(k, o)| {
                let t = func.ty(*o);
                let elem = match kind {
                    Kind::DotF32 => Elem::Num(DType::F32),
                    _ => t.elem(),
                };
                match has_formula(k) {
                    true => Tensor::zeros(elem, &[0]),
                    false => new_output(t, elem),
                }
            })
            .collect();
        let mut scratch_at = 0;
        for (k, o) in outs.iter_mut().enumerate() {
            if has_formula(k) {
                // SAFETY: `scratch` holds at least `scratch_words` u64s;
                // each formula output gets numel of them, eight bytes per
                // element of at most eight.
                words.push(unsafe { self.scratch.as_mut_ptr().add(scratch_at) } as u64);
                scratch_at += func.ty(group.outputs[k]).numel().max(1) as usize;
            } else {
                words.push(o.as_mut_ptr() as u64);
            }
        }
        // The segment caches persist from call to call while the memory
        // promises an unchanged layout; otherwise they start empty.
        let epoch = mem.layout_epoch();
        let (filled_under, caches) = &mut self.segment_caches[g];
        if epoch.is_none() || *filled_under != epoch {
            caches.fill(0);
            *filled_under = epoch;
        }
        let mut mref: &mut dyn Memory = mem;
        let mut ctx = JitCtx::new(
            &mut mref as *mut &mut dyn Memory as *mut std::ffi::c_void,
            caches.as_mut_ptr(),
        );
        // SAFETY: `ptr` is a finalized function of this module with the
        // `GroupFn` signature; `words` holds one valid entry per input and
        // output, block pointers into live tensors sized by the IR types the
        // code was compiled for; `ctx.mem` points to `mref`, alive here;
        // `ctx.caches` holds three words per load or store of the group,
        // each cache empty or naming a segment of the current layout.
        let code = unsafe {
            let f: GroupFn = std::mem::transmute::<*const u8, GroupFn>(ptr);
            f(words.as_ptr(), &mut ctx)
        };
        drop(keep);
        if code != 0 {
            let inst = group.insts[(code - 1) as usize];
            let kind = match func.inst(inst).op {
                Op::Load { .. } | Op::Store { .. } => ExecErrorKind::OutOfBounds(ctx.fault()),
                _ => ExecErrorKind::DivisionByZero,
            };
            // Compiled code stops at the first failing lane; which error a
            // group reports is defined by instruction order (the
            // interpreter's), so ask it. (A group with a store has no load,
            // so the lanes already stored cannot change what it finds.)
            let jit_error = ExecError { inst, kind };
            return match self.interp.run(func, plan, g, inputs, mem) {
                Err(e) => Err(e),
                Ok(_) => Err(jit_error),
            };
        }
        let mut results = Outputs::with_capacity(outs.len());
        for (k, (o, t)) in group.outputs.iter().zip(outs).enumerate() {
            if let Some(Some(a)) = formulas_out.get_mut(k).map(Option::take) {
                results.push(a);
                continue;
            }
            let ty = func.ty(*o);
            let t = match kind {
                // The f32 sums (NaNs canonical), rounded to the output
                // dtype.
                Kind::DotF32 => {
                    let d = dtype_of(ty);
                    if d == DType::F32 {
                        t
                    } else {
                        let mut out = Tensor::zeros(ty.elem(), &t.shape);
                        for i in 0..t.numel() {
                            out.set_bits(i, elem::from_f32(d, f32::from_bits(t.get_bits(i) as u32)));
                        }
                        out
                    }
                }
                _ => t,
            };
            results.push(output_value(ty, t));
        }
        Ok(results)
    }
}

/// A zeroed output of type `ty` with elements `elem` (a scalar is a block
/// of one).
fn new_output(ty: &Type, elem: Elem) -> Tensor {
    let shape: smallvec::SmallVec<[usize; 4]> = ty.shape().iter().map(|&d| d as usize).collect();
    Tensor::zeros(elem, if shape.is_empty() { &[1] } else { &shape })
}

/// What a group hands on for its output of type `ty` computed into `t`.
fn output_value(ty: &Type, t: Tensor) -> RtValue {
    match ty {
        Type::Scalar(_) => RtValue::Scalar(t.get_bits(0)),
        _ => RtValue::Block(Rc::new(t)),
    }
}

/// Runs `code`, compiled for `group` with every input a stored block, on
/// `inputs` (all [`RtValue::Block`]) with the group's segment caches
/// `caches` (none: it has no load or store); `None` when the code reports
/// a failure. What [`Jit::run`]'s general path does for such a group, less
/// its checks for formulas, copies and conversions that cannot apply.
fn run_plain(
    func: &Function,
    group: &Group,
    code: *const u8,
    inputs: &[&RtValue],
    mem: &mut dyn Memory,
    caches: *mut u64,
) -> Option<Outputs> {
    let mut words: smallvec::SmallVec<[u64; 16]> = smallvec::SmallVec::new();
    for v in inputs {
        if let RtValue::Block(t) = v {
            words.push(t.as_ptr() as u64);
        }
    }
    let mut outs: smallvec::SmallVec<[Tensor; 2]> = group
        .outputs
        .iter()
        .map(|o| {
            let t = func.ty(*o);
            new_output(t, t.elem())
        })
        .collect();
    for o in &mut outs {
        words.push(o.as_mut_ptr() as u64);
    }
    let mut mref: &mut dyn Memory = mem;
    let mut ctx = JitCtx::new(&mut mref as *mut &mut dyn Memory as *mut std::ffi::c_void, caches);
    // SAFETY: as in `Jit::run`: `code` is a finalized function of this
    // module with the `GroupFn` signature, compiled for this group with no
    // affine input; `words` holds a pointer to each input block (live in
    // `inputs`, sized by the IR types the code was compiled for) and to
    // each output (live in `outs`, sized by its type); `ctx.mem` points to
    // `mref`, alive here; `ctx.caches` holds the group's (no) caches.
    let failed = unsafe {
        let f: GroupFn = std::mem::transmute::<*const u8, GroupFn>(code);
        f(words.as_ptr(), &mut ctx)
    } != 0;
    if failed {
        return None;
    }
    Some(
        group
            .outputs
            .iter()
            .zip(outs)
            .map(|(o, t)| output_value(func.ty(*o), t))
            .collect(),
    )
}
