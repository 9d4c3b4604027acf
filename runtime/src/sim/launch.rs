//! One launch from start to end: its checks and what the simulator works
//! out once before running ([`Shared`], read by every thread), the shards
//! it runs as, the threads that run them in step, and the report.
//!
//! A launch over several SIPs runs as one logical process per SIP
//! (`events::Lp`), in windows of simulated time. A *shard* is a
//! contiguous range of those processes with their PEs, and everything
//! they touch: their events, queue halves, a copy of the fabric (whose
//! links of their SIPs are theirs to book), a view of the memory (whose
//! segments on their SIPs are theirs to read and write), a data path and
//! the operations' boxes. With `Machine::threads` above one and a data
//! path that can be made again on another thread, each shard runs on a
//! thread of its own; the shards meet between windows to swap what their
//! processes handed each other, and agree on where the next window
//! starts. One shard or several, the processes run the same windows and
//! receive the same hand-offs in the same order (sorted by the process
//! that made them), so the threads change the wall time and nothing else:
//! the same bits, times, event count and report.

use super::agu::Cone;
use super::events::{group_info, in_order_yields, yield_moves, Cross, GroupInfo, ScalarStep, Sim};
use super::fabric::{Fabric, Link, LinkId};
use super::pe::{PeSlab, PeState, Programs};
use super::report::{Blocked, LinkStat, PeStat, Report, Slice};
use super::slots::EnvSlots;
use super::{ipcq_tcm_bytes, peak_live, Communicator, Launch, Machine, MemView, Placement, SimError};
use crate::topology::schema::Ipcq;
use crate::topology::{PeCoord, Topology};
use kernbench_compiler::datapath::{DataPath, Plan, RtValue};
use kernbench_compiler::ir::Function;
use std::collections::HashSet;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};

/// What the simulator works out once for a launch, before running; every
/// shard reads it.
pub(super) struct Shared<'a> {
    pub func: &'a Function,
    /// See [`super::Launch::progress_ps`].
    pub progress_ps: Option<&'a std::sync::atomic::AtomicU64>,
    pub comms: &'a [Communicator],
    pub grid: [u32; 3],
    pub trace: bool,
    /// The launch's plan ([`super::agu::sim_plan`]: each group on one
    /// engine, independent parts apart).
    pub plan: Plan,
    pub groups: Vec<GroupInfo>,
    /// Per instruction (by index), its decoded form when it is pure
    /// scalar arithmetic.
    pub scalar_ops: Vec<Option<ScalarStep>>,
    /// Per instruction: a `yield` whose values may be copied into its
    /// region's carried parameters one by one (see `in_order_yields`).
    pub in_order_yields: Vec<bool>,
    /// Per instruction: a `yield`'s operands that may be moved.
    pub yield_moves: Vec<u64>,
    pub env_slots: EnvSlots,
    /// Per address-generation group, its outputs' cones, and the index of
    /// its first cone in each PE's `cone_memo`.
    pub cones: Vec<Option<Vec<Cone>>>,
    pub cone_base: Vec<usize>,
    pub n_cones: usize,
    /// The launch's PEs in the simulator's order (`order[p]`: PE `p`'s
    /// position in the launch, the groups in order, each in rank order;
    /// the launch's order grouped by logical process, so that a shard's
    /// PEs are a range), and the PE at each position (`pe_at`).
    pub order: Vec<usize>,
    pub pe_at: Vec<u32>,
    /// Each PE's coordinates, rank in its group and group, and each
    /// group's first position in the launch.
    pub coords: Vec<PeCoord>,
    pub ranks: Vec<u32>,
    pub group_of: Vec<u32>,
    pub group_base: Vec<usize>,
    /// The programs each PE runs.
    pub programs: Vec<Programs>,
    /// The logical processes: how many, each PE's, each SIP's, and the
    /// windows' length.
    pub n_lps: usize,
    pub lp_of: Vec<u16>,
    pub lp_of_sip: Vec<u16>,
    pub window_ps: u64,
    /// Per PE: the TCM its live blocks and TCM allocations take.
    pub tcm_base_bytes: Vec<u64>,
    pub ipcq: Ipcq,
    pub dispatch_ps: u64,
    pub dma_setup_ps: u64,
    pub queue_depth: usize,
    pub start_ps: u64,
    /// No event at or after this time runs (the launch's time limit).
    pub stop_ps: u64,
    /// The one SIP the launch may reach ([`super::Launch::device`]).
    pub device: Option<u32>,
}

impl<'a> Shared<'a> {
    /// Checks the launch and works out everything the shards share;
    /// prepares `dp` for the plan.
    fn new(m: &mut Machine, l: &Launch<'a>, dp: &mut dyn DataPath) -> Result<Shared<'a>, SimError> {
        let func = l.func;
        let coords: Vec<PeCoord> = l.groups.iter().flat_map(|c| c.pes.iter().copied()).collect();
        if coords.is_empty() {
            return Err(SimError::Setup("the launch has no PEs".into()));
        }
        if l.args.len() != coords.len() {
            return Err(SimError::Setup(format!(
                "{} argument lists for {} PEs",
                l.args.len(),
                coords.len()
            )));
        }
        let mut seen = HashSet::new();
        if let Some(pe) = coords.iter().find(|c| !seen.insert(**c)) {
            return Err(SimError::Setup(format!("{pe} is in the launch twice")));
        }
        if let Some(pe) = l.device.and_then(|d| coords.iter().find(|c| c.sip != d)) {
            return Err(SimError::Setup(format!(
                "{pe} is not on SIP {}, the one SIP the launch was said to use",
                l.device.unwrap_or_default()
            )));
        }
        let ipcq = l.ipcq.clone().unwrap_or_else(|| m.topo.spec.pe.ipcq.clone());
        // Live blocks, the PE's TCM allocations and one queue's IPCQ slots
        // must fit; each further queue into a PE is checked when it is
        // first used.
        let (plan, address) = super::agu::sim_plan(func);
        let (live, peak_at) = peak_live(func, &address);
        let slot_bytes = ipcq_tcm_bytes(&ipcq);
        let mut tcm_base_bytes = Vec::with_capacity(coords.len());
        for &pe in &coords {
            let tcm = Placement::Tcm(pe);
            let (cap, used) = (m.mem.capacity(tcm), m.mem.used(tcm));
            let need = live + used + slot_bytes;
            if need > cap {
                return Err(SimError::TcmCapacity {
                    kernel: func.name.clone(),
                    pe,
                    need_bytes: need,
                    have_bytes: cap,
                    queues: u32::from(slot_bytes > 0),
                    cause: super::TcmCause::LiveBlocks {
                        live_bytes: live,
                        peak_at,
                    },
                });
            }
            tcm_base_bytes.push(live + used);
        }
        dp.prepare(func, &plan)
            .map_err(|e| SimError::Setup(format!("cannot compile `{}`: {e}", func.name)))?;
        let groups: Vec<GroupInfo> = (0..plan.groups.len())
            .map(|g| group_info(m, func, &plan, g, &address))
            .collect();
        let cones: Vec<Option<Vec<Cone>>> = (0..plan.groups.len())
            .map(|g| match groups[g].address {
                true => super::agu::cones(func, &plan.groups[g]),
                false => None,
            })
            .collect();
        let mut cone_base = Vec::with_capacity(cones.len());
        let mut n_cones = 0;
        for c in &cones {
            cone_base.push(n_cones);
            n_cones += c.as_ref().map_or(0, Vec::len);
        }
        let start_ps = m.clock_ps(l.device) + m.launch_latency_ps(&coords);
        let total = l
            .grid
            .iter()
            .try_fold(1u64, |a, g| a.checked_mul(*g as u64))
            .filter(|n| *n <= u32::MAX as u64);
        let Some(total) = total else {
            return Err(SimError::Setup(format!(
                "a grid of {:?} programs is too large (at most 2^32 - 1)",
                l.grid
            )));
        };
        let env_slots = EnvSlots::assign(func, &plan);
        // In the launch's order first.
        let (mut ranks, mut group_of, mut programs) = (Vec::new(), Vec::new(), Vec::new());
        let mut group_base = Vec::with_capacity(l.groups.len());
        for (g, c) in l.groups.iter().enumerate() {
            group_base.push(ranks.len());
            let world = c.world();
            for r in 0..world {
                ranks.push(r);
                group_of.push(g as u32);
                programs.push(if l.grid_per_pe {
                    Programs {
                        next: 0,
                        step: 1,
                        end: total,
                    }
                } else {
                    Programs {
                        next: r as u64,
                        step: world as u64,
                        end: total,
                    }
                });
            }
        }
        // One logical process per SIP of the machine when the launch spans
        // several and the SIP links take time (the windows' length); one
        // for the whole launch otherwise.
        let n_sips = m.topo.spec.system.sips.0 as usize;
        let window_ps = Topology::ns_to_ps(m.topo.spec.system.sip_link.latency_ns.0);
        let spans_sips = coords.iter().any(|c| c.sip != coords[0].sip);
        let (n_lps, lp_of_sip): (usize, Vec<u16>) = if spans_sips && window_ps > 0 && n_sips <= u16::MAX as usize {
            (n_sips, (0..n_sips as u16).collect())
        } else {
            (1, vec![0; n_sips])
        };
        // The simulator's order of the PEs: the launch's, grouped by logical
        // process (the same when one process, or one communicator in ring
        // order, as `--pes all`).
        let mut order: Vec<usize> = (0..coords.len()).collect();
        order.sort_by_key(|&i| lp_of_sip[coords[i].sip as usize]);
        let mut pe_at = vec![0u32; order.len()];
        for (p, &i) in order.iter().enumerate() {
            pe_at[i] = p as u32;
        }
        let permute = |v: &[u32]| order.iter().map(|&i| v[i]).collect::<Vec<u32>>();
        let (ranks, group_of) = (permute(&ranks), permute(&group_of));
        let programs = order.iter().map(|&i| programs[i]).collect();
        let tcm_base_bytes = order.iter().map(|&i| tcm_base_bytes[i]).collect();
        let coords: Vec<PeCoord> = order.iter().map(|&i| coords[i]).collect();
        let lp_of = coords.iter().map(|c| lp_of_sip[c.sip as usize]).collect();
        let t = &m.topo;
        Ok(Shared {
            progress_ps: l.progress_ps,
            func,
            comms: l.groups,
            grid: l.grid,
            trace: l.trace,
            scalar_ops: func
                .insts
                .keys()
                .map(|i| ScalarStep::decode(func, i, &env_slots.slot_of))
                .collect(),
            in_order_yields: in_order_yields(func),
            yield_moves: yield_moves(func),
            env_slots,
            plan,
            groups,
            cones,
            cone_base,
            n_cones,
            order,
            pe_at,
            coords,
            ranks,
            group_of,
            group_base,
            programs,
            n_lps,
            lp_of,
            lp_of_sip,
            window_ps,
            tcm_base_bytes,
            dispatch_ps: t.cycles_to_ps(t.spec.pe.dispatch_cycles.0),
            dma_setup_ps: t.cycles_to_ps(t.spec.pe.dma.setup_cycles.0),
            queue_depth: t.spec.pe.queue_depth.0 as usize,
            ipcq,
            start_ps,
            stop_ps: l.time_limit_ps.map_or(u64::MAX, |l| start_ps.saturating_add(l)),
            device: l.device,
        })
    }

    /// PE `p`'s state at the start, with its arguments.
    pub fn pe_state(&self, p: usize, args: Vec<RtValue>) -> PeState {
        let c = &self.comms[self.group_of[p] as usize];
        let r = self.ranks[p];
        let (row, col) = c.mesh_pos(r);
        let ctx = crate::exec::ScalarCtx {
            pid: [0; 3],
            grid: self.grid,
            rank: r,
            world: c.world(),
            mesh_id: [row, col],
            mesh_size: c.mesh,
        };
        let mut pe = PeState::new(
            ctx,
            self.programs[p],
            &self.env_slots,
            self.n_cones,
            self.start_ps,
            args,
        );
        if self.trace {
            pe.issue_spans = Some(Vec::new());
            pe.issue_stalls = Some(Vec::new());
        }
        pe
    }

    /// The shards to run on `threads` threads: each a run of logical
    /// processes whose PEs follow each other in the launch, with about as
    /// many PEs each, and their PEs (a range); the processes without PEs
    /// (SIPs a route only crosses) go with the last. One shard when there
    /// is one process, one thread, windows shorter than
    /// [`MIN_THREADED_WINDOW_PS`], or a process's PEs are not all together
    /// (several communicators interleaved over the SIPs). Each shard's
    /// processes in increasing order.
    fn shards(&self, threads: usize) -> Vec<(Range<usize>, Vec<usize>)> {
        let n = self.coords.len();
        let all = vec![(0..n, (0..self.n_lps).collect())];
        // Shards meet at every window: with short windows the meetings
        // would cost more than the threads gain.
        if self.n_lps < 2 || threads < 2 || self.window_ps < MIN_THREADED_WINDOW_PS {
            return all;
        }
        // The processes in the order their PEs come, and where each's end.
        let mut order: Vec<(usize, usize)> = Vec::new();
        for (p, &lp) in self.lp_of.iter().enumerate() {
            let lp = lp as usize;
            if let Some((last, end)) = order.last_mut() {
                if *last == lp {
                    *end = p + 1;
                    continue;
                }
            }
            if order.iter().any(|(l, _)| *l == lp) {
                return all;
            }
            order.push((lp, p + 1));
        }
        let k = threads.min(order.len());
        if k < 2 {
            return all;
        }
        // Cut after the process where the PEs so far pass the next k-th.
        let mut out: Vec<(Range<usize>, Vec<usize>)> = Vec::new();
        let (mut pe0, mut lps) = (0, Vec::new());
        for (i, &(lp, end)) in order.iter().enumerate() {
            lps.push(lp);
            let cut = out.len() + 1 < k && end * k >= n * (out.len() + 1) && i + 1 < order.len();
            if cut || i + 1 == order.len() {
                out.push((pe0..end, std::mem::take(&mut lps)));
                pe0 = end;
            }
        }
        let with_pes: Vec<bool> = (0..self.n_lps).map(|lp| order.iter().any(|(l, _)| *l == lp)).collect();
        if let Some((_, last)) = out.last_mut() {
            last.extend((0..self.n_lps).filter(|lp| !with_pes[*lp]));
        }
        for (_, lps) in &mut out {
            lps.sort_unstable();
        }
        out
    }
}

/// The shortest window worth running on several threads (the presets'
/// SIP links take 500 ns).
const MIN_THREADED_WINDOW_PS: u64 = 100_000;

/// What a shard leaves when its run ends.
pub(super) struct ShardOut {
    /// Its first error (by time, then logical process), if any.
    pub error: Option<(u64, usize, SimError)>,
    pub pes: Vec<PeStat>,
    /// When its last PE finished or its last message from another SIP
    /// arrived.
    pub end_ps: u64,
    pub slices: Vec<Slice>,
    pub events: u64,
    /// The link reservations it recorded (a trace).
    pub intervals: Vec<(LinkId, u64, u64)>,
    /// Its PEs that never finished (with their positions in the launch),
    /// and since when they are stuck.
    pub blocked: Vec<(usize, Blocked)>,
    /// Whether events were left at the time limit.
    pub timed_out: bool,
    pub stuck_ps: u64,
    /// With several shards: the state of the links it owns.
    pub links: Vec<Link>,
    /// Messages its receivers never received.
    pub unreceived: Vec<super::report::Unreceived>,
}

pub(super) fn run(m: &mut Machine, l: &Launch, dp: &mut dyn DataPath) -> Result<Report, SimError> {
    run_partial(m, l, dp).map_err(|(e, _)| e)
}

/// [`run`], and when a deadlock or the time limit stopped the launch, the
/// report of what it did until then (its trace, for one).
pub(super) fn run_partial(
    m: &mut Machine,
    l: &Launch,
    dp: &mut dyn DataPath,
) -> Result<Report, (SimError, Option<Box<Report>>)> {
    let sh = Shared::new(m, l, dp).map_err(|e| (e, None))?;
    m.fabric.reset_stats();
    if l.trace {
        m.fabric.record = Some(Vec::new());
    }
    let saved_packet = m.fabric.packet_bytes;
    if let Some(b) = l.packet_bytes {
        m.fabric.packet_bytes = b.max(1);
    }
    m.fabric.stats_until_ps = sh.stop_ps;
    let maker = dp.maker();
    let shards = match maker {
        Some(_) => sh.shards(m.threads),
        None => sh.shards(1),
    };
    let outs = match (maker, shards.len()) {
        (Some(maker), 2..) => run_threads(m, &sh, l, dp, maker, &shards),
        _ => vec![run_one(m, &sh, l, dp)],
    };
    m.fabric.packet_bytes = saved_packet;
    m.fabric.record = None;
    m.fabric.stats_until_ps = u64::MAX;
    let report = report(m, &sh, outs).inspect_err(|_| {
        // A failed launch may have booked links up to where it stopped:
        // the clocks move past every booking, so that links stay booked
        // in time order.
        let latest = m.fabric.latest_booking_ps();
        m.advance_clock(l.device, latest);
    })?;
    m.advance_clock(l.device, report.end_ps);
    Ok(report)
}

/// The whole launch as one shard, on this thread.
fn run_one(m: &mut Machine, sh: &Shared, l: &Launch, dp: &mut dyn DataPath) -> ShardOut {
    let fabric = std::mem::replace(&mut m.fabric, Fabric::new(&m.topo));
    let segs = m.mem.raw_segments();
    let mem = MemView::new(&m.mem, &segs, None);
    let pes = (0..sh.coords.len())
        .map(|p| sh.pe_state(p, l.args[sh.order[p]].clone()))
        .collect();
    let mut sim = Sim::new(
        sh,
        &m.topo,
        PeSlab::new(0, pes),
        (0..sh.n_lps).collect(),
        dp,
        fabric,
        mem,
    );
    let result = sim.run_alone();
    let out = sim.finish(result, |_| true);
    m.fabric = sim.fabric;
    out
}

/// A hand-off on its way to another shard: the process that made it,
/// the one it is for, and what it is.
struct Mail(u16, u16, Cross);

// SAFETY: the values a `Cross` holds (a handed transfer's message data or
// put operands, an acknowledgement's results) are `RtValue::deep_clone`s
// made for it, shared with nothing, so sending one moves sole ownership of
// those reference-counted blocks to the receiving thread, as sending a
// `Box` would; the rest of a `Cross` is plain data.
unsafe impl Send for Mail {}

/// Launch arguments cloned for another thread.
struct Args(Vec<Vec<RtValue>>);

// SAFETY: `RtValue::deep_clone`s, shared with nothing (see `Mail`).
unsafe impl Send for Args {}

/// A barrier that a panicking thread breaks, so that the others stop
/// instead of waiting for it for good (`std::sync::Barrier` cannot be
/// broken).
struct Gate {
    /// Threads waiting in the current generation, the generation, and
    /// whether a thread left for good.
    state: Mutex<(usize, u64, bool)>,
    turned: Condvar,
    parties: usize,
}

/// The gate was broken: a thread panicked.
struct Broken;

impl Gate {
    fn new(parties: usize) -> Gate {
        Gate {
            state: Mutex::new((0, 0, false)),
            turned: Condvar::new(),
            parties,
        }
    }

    /// Waits for every party, or until the gate is broken.
    fn wait(&self) -> Result<(), Broken> {
        let Ok(mut st) = self.state.lock() else {
            return Err(Broken);
        };
        if st.2 {
            return Err(Broken);
        }
        st.0 += 1;
        if st.0 == self.parties {
            st.0 = 0;
            st.1 += 1;
            self.turned.notify_all();
            return Ok(());
        }
        let generation = st.1;
        while st.1 == generation && !st.2 {
            st = match self.turned.wait(st) {
                Ok(st) => st,
                Err(_) => return Err(Broken),
            };
        }
        if st.1 == generation {
            Err(Broken)
        } else {
            Ok(())
        }
    }

    fn break_off(&self) {
        // A poisoned lock is still the lock: break the gate anyway.
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.2 = true;
        self.turned.notify_all();
    }
}

/// Breaks the gate if its thread unwinds from a panic.
struct LeaveOnPanic<'g>(&'g Gate);

impl Drop for LeaveOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.break_off();
        }
    }
}

/// Where the shards meet between windows.
struct Meeting {
    gate: Gate,
    /// Per shard, the hand-offs for its processes.
    mail: Vec<Mutex<Vec<Mail>>>,
    /// Per shard, when its earliest event is due (`u64::MAX`: none).
    next: Vec<AtomicU64>,
    /// The earliest error of the window (time, process), if any.
    failed: Mutex<Option<(u64, usize)>>,
    /// The shard of each process.
    shard_of: Vec<usize>,
}

/// The launch as several shards, one per thread: this one runs the first
/// with `dp`, the others make their own with `maker`.
fn run_threads(
    m: &mut Machine,
    sh: &Shared,
    l: &Launch,
    dp: &mut dyn DataPath,
    maker: fn() -> Box<dyn DataPath>,
    shards: &[(Range<usize>, Vec<usize>)],
) -> Vec<ShardOut> {
    let seed = m.fabric.seed();
    let segs = m.mem.raw_segments();
    let mut shard_of = vec![0; sh.n_lps];
    for (k, (_, lps)) in shards.iter().enumerate() {
        for &lp in lps {
            shard_of[lp] = k;
        }
    }
    let owns: Vec<Vec<bool>> = (0..shards.len())
        .map(|k| sh.lp_of_sip.iter().map(|&lp| shard_of[lp as usize] == k).collect())
        .collect();
    let meeting = Meeting {
        gate: Gate::new(shards.len()),
        mail: (0..shards.len()).map(|_| Mutex::new(Vec::new())).collect(),
        next: (0..shards.len()).map(|_| AtomicU64::new(u64::MAX)).collect(),
        failed: Mutex::new(None),
        shard_of,
    };
    let args: Vec<Args> = shards
        .iter()
        .map(|(pes, _)| {
            Args(
                pes.clone()
                    .map(|p| l.args[sh.order[p]].iter().map(RtValue::deep_clone).collect())
                    .collect(),
            )
        })
        .collect();
    let (topo, mem) = (&m.topo, &m.mem);
    let (seed, segs, meeting, owns) = (&seed, &segs, &meeting, &owns);
    let mut outs: Vec<ShardOut> = std::thread::scope(|s| {
        let mut args = args.into_iter();
        let first_args = args.next().map(|a| a.0).unwrap_or_default();
        let handles: Vec<_> = shards
            .iter()
            .enumerate()
            .skip(1)
            .zip(args)
            .map(|((k, (pes, lps)), args)| {
                let (pes, lps) = (pes.clone(), lps.clone());
                s.spawn(move || {
                    let args = args;
                    let mut dp = maker();
                    let prepared = dp.prepare(sh.func, &sh.plan);
                    let mem = MemView::new(mem, segs, Some(&owns[k]));
                    let states = pes.clone().zip(args.0).map(|(p, a)| sh.pe_state(p, a)).collect();
                    let sim = Sim::new(
                        sh,
                        topo,
                        PeSlab::new(pes.start, states),
                        lps,
                        &mut *dp,
                        Fabric::from_seed(seed),
                        mem,
                    );
                    let out = run_shard(sim, meeting, k, prepared.err());
                    crate::alloc::flush_thread_cache();
                    out
                })
            })
            .collect();
        let (pes, lps) = shards[0].clone();
        let mem = MemView::new(mem, segs, Some(&owns[0]));
        let states = pes.clone().zip(first_args).map(|(p, a)| sh.pe_state(p, a)).collect();
        let sim = Sim::new(
            sh,
            topo,
            PeSlab::new(pes.start, states),
            lps,
            dp,
            Fabric::from_seed(seed),
            mem,
        );
        let mut outs = vec![run_shard(sim, meeting, 0, None)];
        let mut panicked = None;
        for h in handles {
            // A shard's thread panics only on a bug. It then broke the
            // gate, the others have stopped, and its panic goes on once
            // all are joined: as on one thread (a panic on this thread
            // does the same through the scope).
            match h.join() {
                Ok(out) => outs.push(out),
                Err(payload) => panicked = panicked.or(Some(payload)),
            }
        }
        if let Some(payload) = panicked {
            std::panic::resume_unwind(payload);
        }
        outs
    });
    for out in &mut outs {
        m.fabric.absorb(std::mem::take(&mut out.links));
    }
    outs
}

/// One shard's run on its thread: window after window, meeting the other
/// shards between them. `setup`: why its data path could not be
/// prepared, if it could not (it then stops the launch at the first
/// meeting).
fn run_shard(mut sim: Sim, meeting: &Meeting, k: usize, setup: Option<String>) -> ShardOut {
    let _leave = LeaveOnPanic(&meeting.gate);
    let mut error = setup.map(|e| (sim.start_ps, 0, SimError::Setup(format!("cannot compile: {e}"))));
    if error.is_none() {
        sim.start_programs();
    }
    let mut from = sim.start_ps;
    loop {
        let until = from.saturating_add(sim.window_ps);
        if error.is_none() {
            error = sim.run_window(until);
        }
        // Post the window's hand-offs, then meet.
        let mut batches: Vec<Vec<Mail>> = (0..meeting.mail.len()).map(|_| Vec::new()).collect();
        for (src, dst, what) in sim.outbox.drain(..) {
            batches[meeting.shard_of[dst as usize]].push(Mail(src, dst, what));
        }
        for (to, batch) in batches.into_iter().enumerate() {
            if !batch.is_empty() {
                if let Ok(mut mail) = meeting.mail[to].lock() {
                    mail.extend(batch);
                }
            }
        }
        if let Some((t, lp, _)) = &error {
            if let Ok(mut f) = meeting.failed.lock() {
                if f.is_none_or(|first| (*t, *lp) < first) {
                    *f = Some((*t, *lp));
                }
            }
        }
        if meeting.gate.wait().is_err() {
            return ShardOut::failed(SimError::Setup("another simulator thread panicked".into()));
        }
        if meeting.failed.lock().map(|f| f.is_some()).unwrap_or(true) {
            break;
        }
        // Take this shard's mail in the order the processes made it.
        let mut mail = meeting.mail[k]
            .lock()
            .map(|mut m| std::mem::take(&mut *m))
            .unwrap_or_default();
        mail.sort_by_key(|m| m.0);
        sim.now = until;
        for Mail(_, dst, what) in mail {
            sim.deliver(dst, what);
        }
        let next = sim.next_event_ps().filter(|&t| t < sim.stop_ps);
        meeting.next[k].store(next.unwrap_or(u64::MAX), Ordering::SeqCst);
        if meeting.gate.wait().is_err() {
            return ShardOut::failed(SimError::Setup("another simulator thread panicked".into()));
        }
        let next = meeting
            .next
            .iter()
            .map(|t| t.load(Ordering::SeqCst))
            .min()
            .unwrap_or(u64::MAX);
        // Nobody reads `next` again before the next meeting's first wait,
        // which every shard reaches only after this read.
        if next == u64::MAX {
            break;
        }
        from = next.max(until);
    }
    let owned = sim.my_lps.clone();
    let lp_of_sip = sim.lp_of_sip;
    sim.finish(error.map_or(Ok(()), Err), |id| {
        lp_of_sip
            .get(id.sip() as usize)
            .is_some_and(|&lp| owned.contains(&(lp as usize)))
    })
}

impl ShardOut {
    fn failed(e: SimError) -> ShardOut {
        ShardOut {
            error: Some((0, 0, e)),
            pes: Vec::new(),
            end_ps: 0,
            slices: Vec::new(),
            events: 0,
            intervals: Vec::new(),
            blocked: Vec::new(),
            timed_out: false,
            stuck_ps: 0,
            links: Vec::new(),
            unreceived: Vec::new(),
        }
    }
}

/// The report of a launch from its shards' outcomes (in shard order,
/// which is PE order), or its error: the earliest of the shards' errors,
/// or a deadlock naming every blocked PE, or the time limit; with the
/// last two, the report up to where the launch stopped (ending there).
fn report(m: &Machine, sh: &Shared, mut outs: Vec<ShardOut>) -> Result<Report, (SimError, Option<Box<Report>>)> {
    let first = outs
        .iter()
        .enumerate()
        .filter_map(|(k, o)| o.error.as_ref().map(|(t, lp, _)| (*t, *lp, k)))
        .min();
    if let Some((_, _, k)) = first {
        if let Some((_, _, e)) = outs.swap_remove(k).error {
            return Err((e, None));
        }
    }
    // In the launch's order.
    let mut blocked: Vec<(usize, Blocked)> = outs.iter().flat_map(|o| o.blocked.iter().cloned()).collect();
    blocked.sort_by_key(|(at, _)| *at);
    let mut blocked: Vec<Blocked> = blocked.into_iter().map(|(_, b)| b).collect();
    // Every PE whose program has not finished is blocked somewhere: a peer
    // that is not has finished (known only now, with every shard's).
    let unfinished: std::collections::HashSet<PeCoord> = blocked.iter().map(|b| b.pe).collect();
    for b in &mut blocked {
        b.peer_finished = b.peer.is_some_and(|p| !unfinished.contains(&p));
    }
    let stopped = if outs.iter().any(|o| o.timed_out) {
        Some((
            SimError::TimeLimit {
                limit_ps: sh.stop_ps - sh.start_ps,
                running: blocked,
            },
            sh.stop_ps,
        ))
    } else if !blocked.is_empty() {
        let time_ps = outs.iter().map(|o| o.stuck_ps).max().unwrap_or(sh.start_ps);
        Some((SimError::Deadlock { time_ps, blocked }, time_ps))
    } else {
        None
    };
    let (windowed, threads) = (sh.n_lps > 1, outs.len());
    let mut slices: Vec<Slice> = Vec::new();
    let mut link_intervals = Vec::new();
    let (mut pes, mut events, mut end) = (Vec::new(), 0, sh.start_ps);
    let mut unreceived = Vec::new();
    for o in outs {
        unreceived.extend(o.unreceived);
        slices.extend(o.slices);
        link_intervals.extend(o.intervals);
        pes.extend(o.pes);
        events += o.events;
        end = end.max(o.end_ps);
    }
    // One order whatever the shards.
    unreceived.sort_by_key(|u| (u.from_rank, u.to_rank, u.from, u.to));
    // PEs and trace processes by their positions in the launch.
    if sh.order.iter().enumerate().any(|(p, &i)| p != i) {
        let mut by_position: Vec<Option<PeStat>> = vec![None; pes.len()];
        for (p, stat) in pes.into_iter().enumerate() {
            by_position[sh.order[p]] = Some(stat);
        }
        pes = by_position.into_iter().flatten().collect();
        for s in &mut slices {
            s.rank = sh.order[s.rank as usize] as u32;
        }
    }
    if windowed {
        // Each PE's slices in the order it made them, and the links' in
        // order, whatever order the processes and threads ran in.
        slices.sort_by_key(|s| s.rank);
        link_intervals.sort_unstable();
    }
    let mut links: Vec<LinkStat> = m
        .fabric
        .links
        .iter()
        .filter(|l| l.bytes > 0)
        .map(|l| LinkStat {
            id: l.id,
            busy_ps: l.busy_ps,
            bytes: l.bytes,
            wait_ps: l.wait_ps,
        })
        .collect();
    links.sort_by_key(|l| l.id);
    let report = Report {
        kernel: sh.func.name.clone(),
        start_ps: sh.start_ps,
        end_ps: end,
        pes,
        links,
        events,
        slices,
        link_intervals,
        threads,
        unreceived,
    };
    match stopped {
        None => Ok(report),
        Some((e, at_ps)) => Err((
            e,
            Some(Box::new(Report {
                end_ps: report.end_ps.max(at_ps),
                ..report
            })),
        )),
    }
}
