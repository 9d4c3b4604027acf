//! The host runtime, shaped like PyTorch: a [`Runtime`] that owns the
//! simulated machine, kernels compiled from `.tl` files, tensors placed
//! over a SIP's PEs by a [`DpPolicy`], launches that fan out over the PEs
//! holding the tensors' shards, and (in [`distributed`]) collectives that
//! run the algorithms of `ccl.yaml`, with [`spawn`] running one closure per
//! rank on one machine.
//!
//! Launches are asynchronous: `launch` queues the work and returns; a host
//! read (`to_ndarray`), a host write (`copy_from`) and `synchronize` first
//! run every queued launch that touches the tensor, and everything queued
//! before it, so a read never sees stale data. Host copies cost simulated
//! time over PCIe, the IO chiplet and the NoC, like any transfer.
//!
//! **Architecture invariant:** the host layer drives `sim` through its
//! public API (placements, launches, reports); `sim` knows nothing of it.

pub mod distributed;
mod element;
pub mod spawn;

pub use distributed::ProcessGroup;
pub use element::Element;
pub use spawn::{spawn, Ctx, SpawnError};

use crate::sim::{self, Communicator, Launch, Machine, Placement};
use crate::topology::schema::Positive;
use crate::topology::{PeCoord, Space, Topology};
use kernbench_compiler::datapath::{elem, jit::Jit, RtValue};
use kernbench_compiler::diag::{render_human, ColorMode, SourceMap};
use kernbench_compiler::ir::Function;
use kernbench_compiler::sema::{self, DType, Elem, Konst};
use ndarray::{ArrayD, IxDyn};
use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// What went wrong, as a user reads it.
#[derive(Clone, Debug, PartialEq)]
pub struct HostError {
    pub message: String,
    /// The operation was stopped because another rank failed (not a root
    /// cause).
    pub stopped: bool,
    /// Inside [`spawn`]: the rank whose queued launch failed, when another
    /// rank's wait ran it (the root cause is that rank's).
    pub rank: Option<u32>,
}

impl HostError {
    pub fn new(message: impl Into<String>) -> HostError {
        HostError {
            message: message.into(),
            stopped: false,
            rank: None,
        }
    }

    pub fn stopped(message: impl Into<String>) -> HostError {
        HostError {
            stopped: true,
            ..HostError::new(message)
        }
    }
}

impl fmt::Display for HostError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for HostError {}

pub type Result<T> = std::result::Result<T, HostError>;

/// How a tensor is split over its PEs (PyTorch/Megatron names).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dist {
    /// A full copy on every PE.
    Replicate,
    /// Rows (axis 0) split into one block per PE.
    RowWise,
    /// Columns (the other axes, flattened) split into one block per PE.
    ColumnWise,
    /// A `rows × cols` grid of tiles, one per PE (row-major over the PEs).
    Tiled { rows: u32, cols: u32 },
}

/// Which PEs of the device's SIP hold a tensor, and how it is split: the
/// PEs `pe .. pe + num_pes` of each of the cubes `cube .. cube + num_cubes`
/// (cube-major), in memory `space`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DpPolicy {
    pub cube: u32,
    pub pe: u32,
    pub num_cubes: u32,
    pub num_pes: u32,
    pub dist: Dist,
    pub space: Space,
}

impl Default for DpPolicy {
    /// One PE: `(cube 0, pe 0)`, in HBM.
    fn default() -> Self {
        DpPolicy {
            cube: 0,
            pe: 0,
            num_cubes: 1,
            num_pes: 1,
            dist: Dist::Replicate,
            space: Space::Hbm,
        }
    }
}

impl DpPolicy {
    fn with(dist: Dist, num_cubes: u32, num_pes: u32) -> DpPolicy {
        DpPolicy {
            num_cubes,
            num_pes,
            dist,
            ..DpPolicy::default()
        }
    }

    pub fn replicate(num_cubes: u32, num_pes: u32) -> DpPolicy {
        DpPolicy::with(Dist::Replicate, num_cubes, num_pes)
    }

    pub fn row_wise(num_cubes: u32, num_pes: u32) -> DpPolicy {
        DpPolicy::with(Dist::RowWise, num_cubes, num_pes)
    }

    pub fn column_wise(num_cubes: u32, num_pes: u32) -> DpPolicy {
        DpPolicy::with(Dist::ColumnWise, num_cubes, num_pes)
    }

    pub fn tiled(rows: u32, cols: u32, num_cubes: u32, num_pes: u32) -> DpPolicy {
        DpPolicy::with(Dist::Tiled { rows, cols }, num_cubes, num_pes)
    }

    /// The same PEs starting at another cube and PE.
    pub fn at(self, cube: u32, pe: u32) -> DpPolicy {
        DpPolicy { cube, pe, ..self }
    }

    pub fn in_space(self, space: Space) -> DpPolicy {
        DpPolicy { space, ..self }
    }

    /// The PEs of this policy on SIP `sip`.
    pub fn pes(&self, topo: &Topology, sip: u32) -> Result<Vec<PeCoord>> {
        if self.num_cubes == 0 || self.num_pes == 0 {
            return Err(HostError::new("a DpPolicy needs at least one cube and one PE"));
        }
        let cubes_end = self.cube.saturating_add(self.num_cubes);
        let pes_end = self.pe.saturating_add(self.num_pes);
        if cubes_end > topo.cubes_per_sip() || pes_end > topo.pes_per_cube() {
            return Err(HostError::new(format!(
                "DpPolicy cubes {}..{} × PEs {}..{} do not exist on a SIP of {} cubes × {} PEs",
                self.cube,
                cubes_end,
                self.pe,
                pes_end,
                topo.cubes_per_sip(),
                topo.pes_per_cube()
            )));
        }
        Ok((self.cube..self.cube + self.num_cubes)
            .flat_map(|cube| (self.pe..self.pe + self.num_pes).map(move |pe| PeCoord { sip, cube, pe }))
            .collect())
    }
}

/// One shard of a tensor: where it lives and which part of the logical
/// tensor (viewed as `rows × cols`, `cols` the other axes flattened) it
/// holds, stored row-major.
#[derive(Clone, Debug, PartialEq)]
pub struct Shard {
    pub pe: PeCoord,
    pub placement: Placement,
    pub base: u64,
    pub rows: Range<usize>,
    pub cols: Range<usize>,
}

/// A tensor on the machine (a handle; the runtime owns the memory, and
/// frees it once the last handle is dropped and no queued launch takes
/// it).
#[derive(Clone, Debug)]
pub struct Tensor {
    id: usize,
    shape: Vec<usize>,
    dtype: DType,
    policy: DpPolicy,
    sip: u32,
    shards: Arc<Vec<Shard>>,
    /// Shared by the handle's clones; the last one's drop tells the
    /// runtime (whose graveyard it holds: that names the runtime that
    /// made the tensor).
    life: Arc<Life>,
}

/// Tensors whose last handle is gone, by id with their shards' bases, for
/// the runtime to free (handles may be dropped on any thread, and after
/// the runtime).
type Graveyard = Arc<std::sync::Mutex<Vec<(usize, Vec<u64>)>>>;

/// What the last handle of a tensor hands its runtime when dropped.
#[derive(Debug)]
struct Life {
    id: usize,
    bases: Vec<u64>,
    graveyard: Graveyard,
}

impl Drop for Life {
    fn drop(&mut self) {
        if let Ok(mut g) = self.graveyard.lock() {
            g.push((self.id, std::mem::take(&mut self.bases)));
        }
    }
}

impl Tensor {
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    pub fn dtype(&self) -> DType {
        self.dtype
    }

    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    pub fn policy(&self) -> DpPolicy {
        self.policy
    }

    /// The SIP (device) holding it.
    pub fn device(&self) -> u32 {
        self.sip
    }

    /// Its shards in PE order, with their structural coordinates.
    pub fn placement(&self) -> &[Shard] {
        &self.shards
    }

    fn rows_cols(&self) -> (usize, usize) {
        let rows = self.shape.first().copied().unwrap_or(1);
        (rows, self.numel() / rows.max(1))
    }
}

/// A compiled kernel specialization.
#[derive(Clone)]
pub struct Kernel {
    pub func: Arc<Function>,
    pub sources: Arc<SourceMap>,
}

impl Kernel {
    pub fn name(&self) -> &str {
        &self.func.name
    }
}

/// A kernel argument.
#[derive(Clone, Debug)]
pub enum Arg<'a> {
    Tensor(&'a Tensor),
    I32(i32),
    I64(i64),
    F32(f32),
    Bool(bool),
}

struct Pending {
    kernel: Kernel,
    groups: Vec<Communicator>,
    args: Vec<Vec<RtValue>>,
    grid: [u32; 3],
    grid_per_pe: bool,
    ipcq: Option<crate::topology::schema::Ipcq>,
    packet_bytes: Option<u64>,
    /// Tensors it may write (every tensor argument).
    touches: Vec<usize>,
    /// Inside `spawn`, the rank that queued it (not for a group's
    /// collective).
    owner: Option<u32>,
    /// The one SIP it uses, if one (see [`one_device`]).
    device: Option<u32>,
    /// What a failure adds: a collective's registry settings (see
    /// [`crate::ccl::Registry::settings_note`]).
    note: Option<String>,
}

/// The IPCQ slots of a launch across ranks (buffer space and backpressure
/// stay the topology's): a message takes as many slots as it needs, at
/// most its queue's slots, `n_slots` or, for a queue whose ends are on
/// different SIPs, `n_slots_across_sips` (its credits take a SIP link's
/// round trip to come back).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueSlots {
    pub n_slots: u64,
    pub n_slots_across_sips: u64,
    pub slot_size_bytes: u64,
}

/// Where a launch runs and with what (see [`Runtime::pe_args`]).
struct PeArgs<'t> {
    pes: Vec<PeCoord>,
    /// Per PE, its argument values.
    per_pe: Vec<Vec<RtValue>>,
    /// The tensor arguments' ids.
    touches: Vec<usize>,
    tensors: Vec<&'t Tensor>,
}

/// The one SIP that the PEs of `groups` and the shards of `tensors` are
/// all on, if there is one: a launch confined to it runs on that SIP's
/// clock (see [`sim::Launch::device`]).
fn one_device(groups: &[Communicator], tensors: &[&Tensor]) -> Option<u32> {
    let mut sips = groups
        .iter()
        .flat_map(|c| c.pes.iter().map(|p| p.sip))
        .chain(tensors.iter().map(|t| t.sip));
    let first = sips.next()?;
    sips.all(|s| s == first).then_some(first)
}

/// What one executed launch took.
#[derive(Clone, Debug)]
pub struct LaunchRecord {
    pub kernel: String,
    pub pes: usize,
    pub start_ps: u64,
    pub end_ps: u64,
    /// The threads it ran on (see [`Runtime::set_threads`]).
    pub threads: usize,
    /// The one SIP it ran on, on that SIP's clock; `None` when it may
    /// reach several (it waited for every SIP).
    pub device: Option<u32>,
}

/// The machine and everything on it.
pub struct Runtime {
    topo: Topology,
    machine: Machine,
    jit: Jit,
    stdlib: Option<PathBuf>,
    device: u32,
    next_id: usize,
    pending: Vec<Pending>,
    history: Vec<LaunchRecord>,
    registry: Option<crate::ccl::Registry>,
    /// Compiled collective algorithms and built-in kernels, by name, dtype
    /// and reduction.
    collective_kernels: std::collections::HashMap<String, Kernel>,
    /// Tensors whose contents are not defined, by id, with why: a launch
    /// that takes them failed, or was dropped unrun after a failure. A
    /// read of one is an error (not stale data) until `copy_from` writes
    /// it whole.
    undefined: std::collections::HashMap<usize, String>,
    /// Simulated time one launch may take (see [`Runtime::set_time_limit_ps`]).
    time_limit_ps: Option<u64>,
    /// Inside `spawn`, the rank whose own request is being served.
    pub(crate) serving_rank: Option<u32>,
    /// Dropped tensors not freed yet (see [`Runtime::free_dropped`]).
    graveyard: Graveyard,
}

/// A launch's simulated time limit unless set otherwise: `tlc run`'s
/// default, 100 ms, far beyond any kernel or collective of the presets
/// that ends at all.
pub const DEFAULT_TIME_LIMIT_PS: u64 = 100_000_000_000;

/// The stdlib shipped with the sources (or `$KERNBENCH_STDLIB`).
pub fn default_stdlib() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("KERNBENCH_STDLIB") {
        return Some(PathBuf::from(dir));
    }
    let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("../stdlib");
    shipped.is_dir().then(|| shipped.canonicalize().unwrap_or(shipped))
}

/// What a new tensor holds, element by element in row-major order (each
/// element's bits as [`Element::to_bits`] gives them). A fill is one value,
/// not a host buffer of the tensor's size: a shape past every memory is
/// refused by the size checks before anything that large is made.
#[derive(Clone, Debug)]
pub(crate) enum Contents {
    /// Zeros, with no host copy (`zeros`, `empty`).
    Zeros,
    /// One value everywhere, copied from the host (`full`).
    Fill(u64),
    /// Every element, copied from the host (`from_ndarray`).
    Elems(Vec<u64>),
}

impl Contents {
    /// Element `i`'s bits.
    fn at(&self, i: usize) -> u64 {
        match self {
            Contents::Zeros => 0,
            Contents::Fill(bits) => *bits,
            Contents::Elems(bits) => bits[i],
        }
    }

    /// Whether the host sends the data (a copy that takes time).
    fn is_host_copy(&self) -> bool {
        !matches!(self, Contents::Zeros)
    }
}

impl Runtime {
    /// A runtime on a machine (`Topology::default_machine()`, a preset, a
    /// file).
    pub fn new(topo: &Topology) -> Runtime {
        Runtime {
            topo: topo.clone(),
            machine: Machine::new(topo),
            jit: Jit::new(),
            stdlib: default_stdlib(),
            device: 0,
            next_id: 0,
            pending: Vec::new(),
            history: Vec::new(),
            registry: None,
            collective_kernels: std::collections::HashMap::new(),
            undefined: std::collections::HashMap::new(),
            time_limit_ps: Some(DEFAULT_TIME_LIMIT_PS),
            serving_rank: None,
            graveyard: Graveyard::default(),
        }
    }

    pub fn topology(&self) -> &Topology {
        &self.topo
    }

    /// How many threads a launch over several SIPs (a collective across
    /// devices) may run on: 1 unless set. Results do not depend on it.
    pub fn set_threads(&mut self, threads: usize) {
        self.machine.threads = threads.max(1);
    }

    /// The SIP new tensors go to (PyTorch's `set_device`).
    pub fn set_device(&mut self, device: u32) -> Result<()> {
        if device >= self.topo.sips() {
            return Err(HostError::new(format!(
                "device {device} does not exist: the machine has {} SIPs",
                self.topo.sips()
            )));
        }
        self.device = device;
        Ok(())
    }

    pub fn device(&self) -> u32 {
        self.device
    }

    /// Simulated time each launch may take ([`DEFAULT_TIME_LIMIT_PS`]
    /// unless set; `None`: no limit). A launch still running then fails
    /// with where each PE is, instead of running forever.
    pub fn set_time_limit_ps(&mut self, limit_ps: Option<u64>) {
        self.time_limit_ps = limit_ps;
    }

    /// The machine's simulated clock: when every SIP's work so far (what
    /// has run) ended.
    pub fn now_ps(&self) -> u64 {
        self.machine.now_ps()
    }

    /// When SIP `device`'s work so far ended. SIPs run independently (as
    /// GPUs' streams do): a launch on one SIP starts when that SIP's
    /// earlier work ends, beside other SIPs' work; a collective over
    /// several waits for all of them.
    pub fn device_now_ps(&self, device: u32) -> Result<u64> {
        if device >= self.topo.sips() {
            return Err(HostError::new(format!(
                "device {device} does not exist: the machine has {} SIPs",
                self.topo.sips()
            )));
        }
        Ok(self.machine.clock_ps(Some(device)))
    }

    /// Every executed launch, in order.
    pub fn history(&self) -> &[LaunchRecord] {
        &self.history
    }

    /// Compiles kernel `kernel` of a `.tl` file with constexpr bindings;
    /// an error carries the diagnostics as `tlc check` prints them.
    pub fn compile(&self, file: impl AsRef<Path>, kernel: &str, constexprs: &[(&str, Konst)]) -> Result<Kernel> {
        let file = file.as_ref();
        let source = kernbench_compiler::text::read_text(file)
            .map_err(|e| HostError::new(format!("cannot read `{}`: {e}", file.display())))?;
        self.compile_source(
            &file.display().to_string(),
            Some(file.to_path_buf()),
            &source,
            kernel,
            constexprs,
        )
    }

    /// [`Runtime::compile`] from text.
    pub fn compile_source(
        &self,
        name: &str,
        path: Option<PathBuf>,
        source: &str,
        kernel: &str,
        constexprs: &[(&str, Konst)],
    ) -> Result<Kernel> {
        let options = sema::Options {
            defines: constexprs.iter().map(|(n, k)| (n.to_string(), k.clone())).collect(),
            stdlib_root: self.stdlib.clone(),
        };
        let mut s = sema::Session::new(options);
        s.add_file(name, path, source.to_string());
        let (out, ir) = s.lower(kernel);
        match ir {
            Ok(func) => Ok(Kernel {
                func: Arc::new(func),
                sources: Arc::new(out.sources),
            }),
            Err(e) => {
                let text = render_human(&out.diagnostics, &out.sources, ColorMode::Never);
                Err(HostError::new(if text.trim().is_empty() {
                    e
                } else {
                    format!("{e}\n{text}")
                }))
            }
        }
    }

    fn shards(
        &mut self,
        name: &str,
        shape: &[usize],
        dtype: DType,
        policy: DpPolicy,
        data: &Contents,
    ) -> Result<Tensor> {
        self.free_dropped();
        let pes = policy.pes(&self.topo, self.device)?;
        let n = pes.len();
        let rows = shape.first().copied().unwrap_or(1);
        let esz = dtype.size_bytes() as usize;
        // Checked before any host buffer is made: a shape past what a
        // memory holds is an error, not gigabytes of host memory first (or
        // a product that wraps around).
        let too_big = || {
            HostError::new(format!(
                "`{name}`: shape {shape:?} of {dtype} is larger than any memory"
            ))
        };
        let numel: usize = shape
            .iter()
            .try_fold(1usize, |a, &d| a.checked_mul(d))
            .filter(|n| n.checked_mul(esz).is_some())
            .ok_or_else(too_big)?;
        let cols = numel / rows.max(1);
        let split = |len: usize, parts: usize, what: &str| -> Result<Vec<Range<usize>>> {
            if parts == 0 || len % parts != 0 {
                return Err(HostError::new(format!(
                    "`{name}`: {len} {what} do not split into {parts} equal parts for a {:?} policy over {n} PEs",
                    policy.dist
                )));
            }
            let k = len / parts;
            Ok((0..parts).map(|i| i * k..(i + 1) * k).collect())
        };
        let parts: Vec<(Range<usize>, Range<usize>)> = match policy.dist {
            Dist::Replicate => vec![(0..rows, 0..cols); n],
            Dist::RowWise => split(rows, n, "rows")?.into_iter().map(|r| (r, 0..cols)).collect(),
            Dist::ColumnWise => split(cols, n, "columns")?.into_iter().map(|c| (0..rows, c)).collect(),
            Dist::Tiled { rows: tr, cols: tc } => {
                let tiles = u64::from(tr) * u64::from(tc);
                if tiles != n as u64 {
                    return Err(HostError::new(format!(
                        "`{name}`: a {tr}×{tc} tiling needs {tiles} PEs, the policy has {n}"
                    )));
                }
                let (rs, cs) = (split(rows, tr as usize, "rows")?, split(cols, tc as usize, "columns")?);
                rs.iter()
                    .flat_map(|r| cs.iter().map(move |c| (r.clone(), c.clone())))
                    .collect()
            }
        };
        let placements: Vec<Placement> = pes.iter().map(|p| Placement::near(policy.space, *p)).collect();
        for (pl, (r, c)) in placements.iter().zip(&parts) {
            let bytes = (r.len() * c.len() * esz) as u64;
            let capacity = self.machine.mem.capacity(*pl);
            if bytes > capacity {
                return Err(HostError::new(format!(
                    "`{name}`: a shard of {bytes} bytes does not fit {pl}, which holds {capacity}"
                )));
            }
        }
        let bytes_of = |(r, c): &(Range<usize>, Range<usize>)| -> Vec<u8> {
            let mut out = Vec::with_capacity(r.len() * c.len() * esz);
            for row in r.clone() {
                for col in c.clone() {
                    let b = data.at(row * cols + col);
                    out.extend_from_slice(&b.to_le_bytes()[..esz]);
                }
            }
            out
        };
        let contents: Vec<(Placement, Vec<u8>)> = placements
            .iter()
            .zip(&parts)
            .map(|(pl, part)| (*pl, bytes_of(part)))
            .collect();
        let sizes_equal = contents.windows(2).all(|w| w[0].1.len() == w[1].1.len());
        let lens: Vec<u64> = contents.iter().map(|(_, d)| d.len() as u64).collect();
        let bases = if sizes_equal {
            self.machine
                .mem
                .alloc_symmetric(name, contents)
                .map_err(|e| HostError::new(e.to_string()))?
        } else {
            let mut v = Vec::new();
            for (k, (pl, d)) in contents.into_iter().enumerate() {
                v.push(
                    self.machine
                        .mem
                        .alloc(&format!("{name}[{k}]"), pl, d)
                        .map_err(|e| HostError::new(e.to_string()))?,
                );
            }
            v
        };
        if data.is_host_copy() {
            // The host's copy over PCIe, shard by shard.
            let mut end = self.machine.clock_ps(Some(self.device));
            for ((pl, len), base) in placements.iter().zip(&lens).zip(&bases) {
                end = end.max(self.machine.host_copy(*pl, *base, *len, true));
            }
            self.machine.advance_clock(Some(self.device), end);
        }
        let shards: Vec<Shard> = pes
            .iter()
            .zip(placements)
            .zip(bases)
            .zip(parts)
            .map(|(((pe, placement), base), (rows, cols))| Shard {
                pe: *pe,
                placement,
                base,
                rows,
                cols,
            })
            .collect();
        self.next_id += 1;
        Ok(Tensor {
            id: self.next_id,
            shape: shape.to_vec(),
            dtype,
            policy,
            sip: self.device,
            life: Arc::new(Life {
                id: self.next_id,
                bases: shards.iter().map(|s| s.base).collect(),
                graveyard: self.graveyard.clone(),
            }),
            shards: Arc::new(shards),
        })
    }

    /// Frees the memory of the tensors whose last handle was dropped, but
    /// of those a queued launch still takes (they go when it has run).
    fn free_dropped(&mut self) {
        let dropped = match self.graveyard.lock() {
            Ok(mut g) => std::mem::take(&mut *g),
            Err(_) => return,
        };
        let mut later = Vec::new();
        for (id, bases) in dropped {
            if self.pending.iter().any(|p| p.touches.contains(&id)) {
                later.push((id, bases));
                continue;
            }
            for b in bases {
                self.machine.mem.free(b);
            }
            self.undefined.remove(&id);
        }
        if let Ok(mut g) = self.graveyard.lock() {
            g.extend(later);
        }
    }

    /// A tensor of zeros.
    pub fn zeros(&mut self, shape: &[usize], dtype: DType, policy: DpPolicy) -> Result<Tensor> {
        self.shards("zeros", shape, dtype, policy, &Contents::Zeros)
    }

    /// A tensor whose contents are unspecified (here: zeros, without a
    /// host copy).
    pub fn empty(&mut self, shape: &[usize], dtype: DType, policy: DpPolicy) -> Result<Tensor> {
        self.shards("empty", shape, dtype, policy, &Contents::Zeros)
    }

    /// A tensor filled with `value` (copied from the host).
    pub fn full<T: Element>(&mut self, shape: &[usize], value: T, policy: DpPolicy) -> Result<Tensor> {
        self.shards("full", shape, T::DTYPE, policy, &Contents::Fill(value.to_bits()))
    }

    /// A tensor with the array's contents (copied from the host).
    pub fn from_ndarray<T: Element>(&mut self, a: &ArrayD<T>, policy: DpPolicy) -> Result<Tensor> {
        let data = Contents::Elems(a.iter().map(|x| x.to_bits()).collect());
        self.shards("tensor", a.shape(), T::DTYPE, policy, &data)
    }

    /// Runs every queued launch up to the last one that touches `t` (all
    /// of them when `t` is `None`).
    fn drain(&mut self, t: Option<usize>) -> Result<()> {
        let upto = match t {
            None => self.pending.len(),
            Some(id) => self
                .pending
                .iter()
                .rposition(|p| p.touches.contains(&id))
                .map_or(0, |k| k + 1),
        };
        let todo: Vec<Pending> = self.pending.drain(..upto).collect();
        for (k, p) in todo.iter().enumerate() {
            if let Err(mut e) = self.execute(p) {
                e.rank = p.owner;
                // What was queued after a failed launch is not run; the
                // tensors of both are not defined any more.
                let name = p.kernel.name();
                self.mark_undefined(&p.touches, &format!("the launch of `{name}` that takes it failed"));
                let rest = std::mem::take(&mut self.pending);
                for d in todo[k + 1..].iter().chain(&rest) {
                    let why = format!(
                        "its launch of `{}` was not run: an earlier launch (`{name}`) failed",
                        d.kernel.name()
                    );
                    self.mark_undefined(&d.touches, &why);
                }
                return Err(e);
            }
        }
        Ok(())
    }

    /// Marks tensors `ids` as not defined, for `why`; the first reason
    /// given stays.
    fn mark_undefined(&mut self, ids: &[usize], why: &str) {
        for id in ids {
            self.undefined.entry(*id).or_insert_with(|| why.to_string());
        }
    }

    /// An error when `t` is another runtime's, or its contents are not
    /// defined (see `undefined`); `what` is the operation refused.
    fn check_defined(&self, t: &Tensor, what: &str) -> Result<()> {
        self.check_owned(t, what)?;
        match self.undefined.get(&t.id) {
            Some(why) => Err(HostError::new(format!(
                "{what}: the tensor's contents are not defined: {why} (copy_from writes it anew)"
            ))),
            None => Ok(()),
        }
    }

    /// An error when `t` was made by another runtime: its shards' addresses
    /// are that machine's, and here they would read or write whatever
    /// this one keeps there.
    fn check_owned(&self, t: &Tensor, what: &str) -> Result<()> {
        if Arc::ptr_eq(&t.life.graveyard, &self.graveyard) {
            return Ok(());
        }
        Err(HostError::new(format!(
            "{what}: the tensor ({}{:?}) belongs to another Runtime; a tensor is used only with the runtime that              made it (copy it through the host: to_ndarray there, from_ndarray here)",
            t.dtype, t.shape
        )))
    }

    fn execute(&mut self, p: &Pending) -> Result<sim::Report> {
        let mut launch = Launch::new(&p.kernel.func, &p.groups[0], p.args.clone());
        launch.groups = &p.groups;
        launch.grid = p.grid;
        launch.grid_per_pe = p.grid_per_pe;
        launch.ipcq = p.ipcq.clone();
        launch.packet_bytes = p.packet_bytes;
        launch.time_limit_ps = self.time_limit_ps;
        launch.device = p.device;
        let report = self.machine.run(&launch, &mut self.jit).map_err(|e| {
            let shown = sim::render_sim_error_in(
                &self.machine.mem,
                &p.kernel.func,
                &p.kernel.sources,
                &e,
                ColorMode::Never,
            );
            match &p.note {
                Some(note) => HostError::new(format!("{}\n  = note: {note}", shown.trim_end())),
                None => HostError::new(shown),
            }
        })?;
        // Queues do not outlive a launch: what no receive took is lost,
        // which no caller of a kernel expects.
        if !report.unreceived.is_empty() {
            return Err(HostError::new(sim::render_unreceived(
                &p.kernel.func,
                &p.kernel.sources,
                &report.unreceived,
                true,
                ColorMode::Never,
            )));
        }
        self.history.push(LaunchRecord {
            kernel: p.kernel.name().to_string(),
            pes: report.pes.len(),
            start_ps: report.start_ps,
            end_ps: report.end_ps,
            threads: report.threads,
            device: p.device,
        });
        Ok(report)
    }

    /// Waits for every queued launch (and frees the memory of dropped
    /// tensors).
    pub fn synchronize(&mut self) -> Result<()> {
        let r = self.drain(None);
        self.free_dropped();
        r
    }

    /// Launches queued and not run yet.
    pub fn pending_launches(&self) -> usize {
        self.pending.len()
    }

    /// Drops every queued launch (a failed `spawn` stops its ranks' work):
    /// the tensors they take are not defined any more.
    pub fn discard_pending(&mut self) {
        for d in std::mem::take(&mut self.pending) {
            let why = format!("its launch of `{}` was dropped when spawn stopped", d.kernel.name());
            self.mark_undefined(&d.touches, &why);
        }
    }

    /// The tensor's contents on the host (after the work that writes it).
    pub fn to_ndarray<T: Element>(&mut self, t: &Tensor) -> Result<ArrayD<T>> {
        check_dtype::<T>(t)?;
        let out = self.read_elems(t, T::from_bits)?;
        ArrayD::from_shape_vec(IxDyn(&t.shape), out).map_err(|e| HostError::new(e.to_string()))
    }

    /// The tensor's elements as bits, row-major (after the work that
    /// writes it).
    pub(crate) fn read_bits(&mut self, t: &Tensor) -> Result<Vec<u64>> {
        self.read_elems(t, |b| b)
    }

    /// Drains the work that writes `t`, copies its shards to the host
    /// (timed) and converts each element's bits with `conv`.
    fn read_elems<T: Default + Clone>(&mut self, t: &Tensor, conv: impl Fn(u64) -> T) -> Result<Vec<T>> {
        self.check_owned(t, "cannot read it")?;
        self.drain(Some(t.id))?;
        self.check_defined(t, "cannot read it")?;
        let (rows, cols) = t.rows_cols();
        let esz = t.dtype.size_bytes() as usize;
        let mut out = vec![T::default(); rows * cols];
        let mut end = self.machine.clock_ps(Some(t.sip));
        let shards: &[Shard] = if t.policy.dist == Dist::Replicate {
            &t.shards[..1]
        } else {
            &t.shards
        };
        for s in shards {
            let bytes = self.machine.mem.bytes_at(s.base).unwrap_or(&[]);
            let w = s.cols.len();
            for (k, c) in bytes.chunks_exact(esz).enumerate() {
                let (r, col) = (s.rows.start + k / w.max(1), s.cols.start + k % w.max(1));
                let mut b = [0u8; 8];
                b[..esz].copy_from_slice(c);
                out[r * cols + col] = conv(u64::from_le_bytes(b));
            }
            end = end.max(self.machine.host_copy(s.placement, s.base, bytes.len() as u64, false));
        }
        self.machine.advance_clock(Some(t.sip), end);
        Ok(out)
    }

    /// Copies the array into the tensor (after the queued work on it).
    pub fn copy_from<T: Element>(&mut self, t: &Tensor, a: &ArrayD<T>) -> Result<()> {
        check_copy(t, a)?;
        let data: Vec<u64> = a.iter().map(|x| x.to_bits()).collect();
        self.write_bits(t, &data)
    }

    /// Writes row-major element bits (as many as the tensor has elements)
    /// into the tensor's shards, after the queued work on it (timed).
    pub(crate) fn write_bits(&mut self, t: &Tensor, data: &[u64]) -> Result<()> {
        self.check_owned(t, "cannot write it")?;
        self.drain(Some(t.id))?;
        let (_, cols) = t.rows_cols();
        let esz = t.dtype.size_bytes() as usize;
        let mut end = self.machine.clock_ps(Some(t.sip));
        for s in t.shards.iter() {
            let mut bytes = Vec::with_capacity(s.rows.len() * s.cols.len() * esz);
            for r in s.rows.clone() {
                for c in s.cols.clone() {
                    bytes.extend_from_slice(&data[r * cols + c].to_le_bytes()[..esz]);
                }
            }
            use kernbench_compiler::datapath::Memory;
            self.machine
                .mem
                .write(s.base, &bytes)
                .map_err(|f| HostError::new(format!("copy fault at {:#x}", f.addr)))?;
            end = end.max(self.machine.host_copy(s.placement, s.base, bytes.len() as u64, true));
        }
        self.machine.advance_clock(Some(t.sip), end);
        self.undefined.remove(&t.id);
        Ok(())
    }

    /// Queues a launch of `kernel` on the PEs holding the tensor
    /// arguments' shards: every PE runs the whole grid (one program unless
    /// `grid`) on its own shards, and the PEs form the kernel's
    /// communicator (`tl.rank()` is the shard index). Every tensor
    /// argument must be on the same PEs as the first (shard k of each on
    /// PE k), or on one PE (the same pointer for every PE).
    pub fn launch(&mut self, kernel: &Kernel, grid: Option<[u32; 3]>, args: &[Arg]) -> Result<()> {
        let PeArgs {
            pes,
            per_pe,
            touches,
            tensors,
        } = self.pe_args(kernel, args)?;
        let comm = Communicator::new(pes);
        let device = one_device(std::slice::from_ref(&comm), &tensors);
        self.pending.push(Pending {
            kernel: kernel.clone(),
            groups: vec![comm],
            args: per_pe,
            grid: grid.unwrap_or([1, 1, 1]),
            grid_per_pe: true,
            ipcq: None,
            packet_bytes: None,
            touches,
            owner: self.serving_rank,
            device,
            note: None,
        });
        Ok(())
    }

    /// Queues one launch of `kernel` across ranks (what
    /// [`Ctx::launch_across_ranks`] runs once every rank has called it):
    /// `per_rank[r]` are rank r's arguments, placed as [`Self::launch`]
    /// takes them, and every rank's tensors are on as many PEs. PE k of
    /// each rank runs one program, and the ranks' PEs k form a
    /// communicator of their own (`tl.rank()` is the rank, `tl.NEXT` the
    /// next rank's PE k), as the host's collectives do shard by shard.
    /// The ranks' tensors must be alike (shape, dtype, number of PEs),
    /// argument by argument; scalars may differ. `slots`: the queues'
    /// slots, else the topology's (its buffer space and backpressure
    /// either way).
    pub fn launch_across(&mut self, kernel: &Kernel, per_rank: &[Vec<Arg>], slots: Option<QueueSlots>) -> Result<()> {
        let ipcq = match slots {
            None => None,
            Some(q) => {
                let bad = || {
                    HostError::new(format!(
                        "`{}` across ranks: {} slots of {} bytes is not a queue a PE can hold",
                        kernel.name(),
                        q.n_slots,
                        q.slot_size_bytes
                    ))
                };
                // The launch checks that the slots fit in TCM; bound them
                // first so that their product cannot overflow.
                let total = u128::from(q.n_slots.max(q.n_slots_across_sips)) * u128::from(q.slot_size_bytes);
                if total > u128::from(self.topo.hbm_slice_bytes()) {
                    return Err(bad());
                }
                Some(crate::topology::schema::Ipcq {
                    n_slots: Positive::new(q.n_slots).ok_or_else(bad)?,
                    n_slots_across_sips: Some(Positive::new(q.n_slots_across_sips).ok_or_else(bad)?),
                    slot_size_bytes: Positive::new(q.slot_size_bytes).ok_or_else(bad)?,
                    ..self.topo.spec.pe.ipcq.clone()
                })
            }
        };
        distributed::refuse_symm_at(
            kernel,
            &format!("`{}`", kernel.name()),
            "Send and receive over the IPCQ instead",
        )?;
        let mut ranks = Vec::with_capacity(per_rank.len());
        for (r, args) in per_rank.iter().enumerate() {
            let a = self
                .pe_args(kernel, args)
                .map_err(|e| HostError::new(format!("rank {r}: {}", e.message)))?;
            if let Some(first) = ranks.first().map(|f: &PeArgs| f.pes.len()) {
                if a.pes.len() != first {
                    return Err(HostError::new(format!(
                        "`{}` across ranks: rank 0's tensors are on {first} PE(s), rank {r}'s on {}",
                        kernel.name(),
                        a.pes.len()
                    )));
                }
            }
            ranks.push(a);
        }
        let Some(first) = ranks.first() else {
            return Err(HostError::new(format!("`{}` across ranks: no ranks", kernel.name())));
        };
        // Every rank's tensors alike, argument by argument, as a
        // collective's: a kernel that walks its ring by its own shapes
        // would otherwise exchange blocks the other ranks do not expect.
        for (r, a) in ranks.iter().enumerate().skip(1) {
            if let Some((t0, t)) = first
                .tensors
                .iter()
                .zip(&a.tensors)
                .find(|(t0, t)| t0.shape != t.shape || t0.dtype != t.dtype || t0.shards.len() != t.shards.len())
            {
                return Err(HostError::new(format!(
                    "`{}` across ranks: rank {r}'s tensor is {}{:?} on {} PE(s), rank 0's {}{:?} on {}; every rank \
                     passes tensors alike",
                    kernel.name(),
                    t.dtype,
                    t.shape,
                    t.shards.len(),
                    t0.dtype,
                    t0.shape,
                    t0.shards.len()
                )));
            }
        }
        let mut groups = Vec::new();
        let mut args = Vec::new();
        for k in 0..first.pes.len() {
            let pes: Vec<PeCoord> = ranks.iter().map(|a| a.pes[k]).collect();
            if let Some(pe) = pes
                .iter()
                .enumerate()
                .find_map(|(i, pe)| pes[..i].contains(pe).then_some(pe))
            {
                return Err(HostError::new(format!(
                    "`{}` across ranks: two ranks' tensors are on PE {pe:?}; each rank runs on PEs of its own",
                    kernel.name()
                )));
            }
            groups.push(Communicator::new(pes));
            args.extend(ranks.iter().map(|a| a.per_pe[k].clone()));
        }
        let tensors: Vec<&Tensor> = ranks.iter().flat_map(|a| a.tensors.iter().copied()).collect();
        let device = one_device(&groups, &tensors);
        self.pending.push(Pending {
            kernel: kernel.clone(),
            grid: [per_rank.len() as u32, 1, 1],
            grid_per_pe: false,
            groups,
            args,
            ipcq,
            packet_bytes: None,
            touches: ranks.iter().flat_map(|a| a.touches.iter().copied()).collect(),
            owner: None,
            device,
            note: None,
        });
        Ok(())
    }

    /// The PEs a launch with `args` runs on (those of the first tensor on
    /// several, else of the first tensor, else PE 0 of the device) and
    /// each one's argument values. Every tensor argument must be on the
    /// same PEs as the first (shard k of each on PE k), or on one PE (the
    /// same pointer for every PE).
    fn pe_args<'t>(&self, kernel: &Kernel, args: &[Arg<'t>]) -> Result<PeArgs<'t>> {
        let func = &kernel.func;
        if args.len() != func.params.len() {
            let names: Vec<String> = func.params.iter().map(|p| format!("{}: {}", p.name, p.ty)).collect();
            return Err(HostError::new(format!(
                "kernel `{}` takes {} arguments ({}), {} given",
                func.name,
                func.params.len(),
                names.join(", "),
                args.len()
            )));
        }
        let pes: Vec<PeCoord> = args
            .iter()
            .find_map(|a| match a {
                Arg::Tensor(t) if t.shards.len() > 1 => Some(t.shards.iter().map(|s| s.pe).collect()),
                _ => None,
            })
            .or_else(|| {
                args.iter().find_map(|a| match a {
                    Arg::Tensor(t) => Some(vec![t.shards[0].pe]),
                    _ => None,
                })
            })
            .unwrap_or_else(|| {
                vec![PeCoord {
                    sip: self.device,
                    cube: 0,
                    pe: 0,
                }]
            });
        let mut per_pe: Vec<Vec<RtValue>> = vec![Vec::with_capacity(args.len()); pes.len()];
        let mut touches = Vec::new();
        let mut tensors = Vec::new();
        for (p, a) in func.params.iter().zip(args) {
            match (p.ty.elem(), a) {
                (Elem::Ptr(d), Arg::Tensor(t)) => {
                    self.check_owned(t, &format!("argument `{}`", p.name))?;
                    if d != t.dtype {
                        return Err(HostError::new(format!(
                            "argument `{}` is ptr[{d}], the tensor is {}",
                            p.name, t.dtype
                        )));
                    }
                    let on_same = t.shards.len() == pes.len() && t.shards.iter().zip(&pes).all(|(s, pe)| s.pe == *pe);
                    if !on_same && t.shards.len() != 1 {
                        return Err(HostError::new(format!(
                            "argument `{}` is on other PEs than the launch's ({} shards, the launch runs on {} PEs)",
                            p.name,
                            t.shards.len(),
                            pes.len()
                        )));
                    }
                    self.check_defined(t, &format!("argument `{}`", p.name))?;
                    for (k, v) in per_pe.iter_mut().enumerate() {
                        v.push(RtValue::Scalar(t.shards[if on_same { k } else { 0 }].base));
                    }
                    touches.push(t.id);
                    tensors.push(*t);
                }
                (Elem::Ptr(d), _) => {
                    return Err(HostError::new(format!(
                        "argument `{}` is ptr[{d}]: pass a tensor",
                        p.name
                    )))
                }
                (Elem::Num(d), Arg::Tensor(_)) => {
                    return Err(HostError::new(format!(
                        "argument `{}` is a scalar of type {d}, not a tensor",
                        p.name
                    )))
                }
                (Elem::Num(d), a) => {
                    let b = scalar_arg_bits(&p.name, d, a)?;
                    per_pe.iter_mut().for_each(|v| v.push(RtValue::Scalar(b)));
                }
            }
        }
        Ok(PeArgs {
            pes,
            per_pe,
            touches,
            tensors,
        })
    }

    /// The collective registry: the stdlib's `ccl.yaml`, with `user`
    /// merged over it (compiled lazily on first use).
    pub fn load_registry(&mut self, user: Option<&Path>) -> Result<&crate::ccl::Registry> {
        let root = self
            .stdlib
            .clone()
            .ok_or_else(|| HostError::new("cannot find the stdlib (set KERNBENCH_STDLIB)"))?;
        let mut reg = crate::ccl::Registry::stdlib(&root).map_err(|e| HostError::new(e.to_string()))?;
        if let Some(u) = user {
            reg.merge_file(u).map_err(|e| HostError::new(e.to_string()))?;
        }
        self.registry = Some(reg);
        // An algorithm may have a new definition under the same name.
        self.collective_kernels.clear();
        Ok(self.registry.as_ref().expect("just set"))
    }

    fn registry(&mut self) -> Result<&crate::ccl::Registry> {
        if self.registry.is_none() {
            self.load_registry(None)?;
        }
        Ok(self.registry.as_ref().expect("loaded above"))
    }
}

/// A scalar argument's bits as parameter `name` of dtype `d` takes them,
/// or an error where the value would change: an integer out of the
/// dtype's range (not a silent wrap, as `tlc run`'s arguments), a float
/// for an integer or `bool` parameter (not truncated), anything but 0 or 1
/// for a `bool`, a finite float that the dtype cannot hold (not `inf`).
fn scalar_arg_bits(name: &str, d: DType, a: &Arg) -> Result<u64> {
    let int = match *a {
        Arg::I32(x) => Some(i64::from(x)),
        Arg::I64(x) => Some(x),
        Arg::Bool(x) => Some(i64::from(x)),
        Arg::F32(_) | Arg::Tensor(_) => None,
    };
    if d.is_float() {
        let x = match *a {
            Arg::F32(x) => x,
            _ => int.unwrap_or(0) as f32,
        };
        let bits = elem::from_f32(d, x);
        if x.is_finite() && !elem::to_f32(d, bits).is_finite() {
            return Err(HostError::new(format!("argument `{name}`: {x} does not fit in {d}")));
        }
        return Ok(bits);
    }
    let Some(x) = int else {
        return Err(HostError::new(format!(
            "argument `{name}` is {d}: pass an integer{}, not a float",
            if d == DType::Bool { " or a bool" } else { "" }
        )));
    };
    if d == DType::Bool && !(0..=1).contains(&x) {
        return Err(HostError::new(format!(
            "argument `{name}` is bool: {x} is neither 0 nor 1"
        )));
    }
    if elem::to_i64(d, elem::from_i64(d, x)) != x {
        return Err(HostError::new(format!("argument `{name}`: {x} does not fit in {d}")));
    }
    Ok(elem::from_i64(d, x))
}

/// A host read of `t` as `T` needs the tensor's dtype.
pub(crate) fn check_dtype<T: Element>(t: &Tensor) -> Result<()> {
    if T::DTYPE != t.dtype {
        return Err(HostError::new(format!("the tensor is {}, not {}", t.dtype, T::DTYPE)));
    }
    Ok(())
}

/// A host copy of `a` into `t` needs the tensor's dtype and shape.
pub(crate) fn check_copy<T: Element>(t: &Tensor, a: &ArrayD<T>) -> Result<()> {
    if T::DTYPE != t.dtype || a.shape() != t.shape.as_slice() {
        return Err(HostError::new(format!(
            "cannot copy a {}{:?} array into a {}{:?} tensor",
            T::DTYPE,
            a.shape(),
            t.dtype,
            t.shape
        )));
    }
    Ok(())
}
