//! `spawn(nprocs, f)`: runs `f(rank, ctx)` once per rank, each on its own
//! thread, all on one simulated machine (rank r's device is SIP r).
//!
//! The ranks never touch the machine themselves: every `Ctx` call is a
//! request to the runtime, which serves them in rounds — it waits until
//! every running rank is blocked in a request, then serves the ranks'
//! own requests in rank order, and runs a collective only when every rank
//! has called it (a rendezvous). Rounds make the simulation deterministic
//! whatever the threads' timing.
//!
//! When a rank fails (its `f` returns an error or panics), every other
//! rank's pending and later requests fail as *stopped*, the queued launches
//! are dropped, and `spawn` returns the root-cause errors (those of ranks
//! that failed by themselves, not because they were stopped). A panic is
//! caught only where panics unwind: a binary built with `panic = "abort"`
//! (this workspace's `dist` profile) stops at the first one.

use super::{Arg, DpPolicy, Element, HostError, Kernel, QueueSlots, Result, Runtime, Tensor};
use crate::ccl::{Collective, ReduceOp};
use kernbench_compiler::ir::print_function;
use kernbench_compiler::sema::{DType, Konst};
use ndarray::{ArrayD, IxDyn};
use std::fmt;
use std::path::PathBuf;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;

/// What the ranks of a failed `spawn` reported.
#[derive(Clone, Debug)]
pub struct SpawnError {
    /// (rank, error) of every rank that failed by itself, in rank order.
    pub failures: Vec<(u32, HostError)>,
}

impl fmt::Display for SpawnError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (k, (r, e)) in self.failures.iter().enumerate() {
            if k > 0 {
                writeln!(f)?;
            }
            write!(f, "rank {r} failed: {e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for SpawnError {}

/// A scalar kernel argument that can cross threads.
#[derive(Clone, Debug)]
enum OwnedArg {
    Tensor(Tensor),
    I32(i32),
    I64(i64),
    F32(f32),
    Bool(bool),
}

enum Request {
    Alloc {
        shape: Vec<usize>,
        dtype: DType,
        policy: DpPolicy,
        contents: super::Contents,
    },
    Read(Tensor),
    Write(Tensor, Vec<u64>),
    Compile {
        file: PathBuf,
        kernel: String,
        constexprs: Vec<(String, Konst)>,
    },
    Launch {
        kernel: Kernel,
        grid: Option<[u32; 3]>,
        args: Vec<OwnedArg>,
    },
    Synchronize,
    Collective {
        c: Collective,
        algorithm: Option<String>,
        op: ReduceOp,
        input: Tensor,
        output: Option<Tensor>,
        root: u32,
        /// An all-gather shard by shard (see
        /// [`Runtime::all_gather_per_shard`]).
        per_shard: bool,
    },
    /// One launch of a kernel across every rank
    /// ([`Ctx::launch_across_ranks`]).
    LaunchAcross {
        kernel: Kernel,
        args: Vec<OwnedArg>,
        slots: Option<QueueSlots>,
    },
    Barrier,
    Send {
        tensor: Tensor,
        dst: u32,
    },
    Recv {
        tensor: Tensor,
        src: u32,
    },
    Done(Result<()>),
}

impl Request {
    /// Requests that need every rank (or a peer).
    fn is_group(&self) -> bool {
        matches!(
            self,
            Request::Collective { .. }
                | Request::LaunchAcross { .. }
                | Request::Barrier
                | Request::Send { .. }
                | Request::Recv { .. }
        )
    }

    fn describe(&self) -> String {
        match self {
            Request::Collective { c, .. } => c.key().to_string(),
            Request::LaunchAcross { kernel, .. } => format!("a launch of `{}` across ranks", kernel.name()),
            Request::Barrier => "barrier".into(),
            Request::Send { dst, .. } => format!("send to rank {dst}"),
            Request::Recv { src, .. } => format!("recv from rank {src}"),
            _ => "a local operation".into(),
        }
    }
}

#[derive(Clone)]
enum Response {
    Unit,
    Tensor(Tensor),
    Data(Vec<u64>),
    Kernel(Kernel),
}

/// A rank's handle on the runtime inside [`spawn`].
pub struct Ctx {
    rank: u32,
    world: u32,
    tx: Sender<(u32, Request)>,
    rx: Receiver<Result<Response>>,
}

impl Ctx {
    fn call(&self, r: Request) -> Result<Response> {
        self.tx
            .send((self.rank, r))
            .map_err(|_| HostError::stopped("the runtime has stopped"))?;
        self.rx
            .recv()
            .map_err(|_| HostError::stopped("the runtime has stopped"))?
    }

    fn tensor(&self, r: Request) -> Result<Tensor> {
        match self.call(r)? {
            Response::Tensor(t) => Ok(t),
            _ => Err(HostError::new("internal: expected a tensor")),
        }
    }

    /// This rank (PyTorch's `get_rank`).
    pub fn get_rank(&self) -> u32 {
        self.rank
    }

    /// The number of ranks (`get_world_size`).
    pub fn get_world_size(&self) -> u32 {
        self.world
    }

    /// Sets up the default process group (a no-op kept for the PyTorch
    /// shape of worker code: `spawn` already made it).
    pub fn init_process_group(&self) -> super::ProcessGroup {
        super::ProcessGroup {
            rank: self.rank,
            world: self.world,
        }
    }

    pub fn zeros(&self, shape: &[usize], dtype: DType, policy: DpPolicy) -> Result<Tensor> {
        self.tensor(Request::Alloc {
            shape: shape.to_vec(),
            dtype,
            policy,
            contents: super::Contents::Zeros,
        })
    }

    pub fn empty(&self, shape: &[usize], dtype: DType, policy: DpPolicy) -> Result<Tensor> {
        self.zeros(shape, dtype, policy)
    }

    pub fn full<T: Element>(&self, shape: &[usize], value: T, policy: DpPolicy) -> Result<Tensor> {
        self.tensor(Request::Alloc {
            shape: shape.to_vec(),
            dtype: T::DTYPE,
            policy,
            contents: super::Contents::Fill(value.to_bits()),
        })
    }

    pub fn from_ndarray<T: Element>(&self, a: &ArrayD<T>, policy: DpPolicy) -> Result<Tensor> {
        self.tensor(Request::Alloc {
            shape: a.shape().to_vec(),
            dtype: T::DTYPE,
            policy,
            contents: super::Contents::Elems(a.iter().map(|x| x.to_bits()).collect()),
        })
    }

    pub fn to_ndarray<T: Element>(&self, t: &Tensor) -> Result<ArrayD<T>> {
        super::check_dtype::<T>(t)?;
        match self.call(Request::Read(t.clone()))? {
            Response::Data(bits) => {
                ArrayD::from_shape_vec(IxDyn(&t.shape), bits.into_iter().map(T::from_bits).collect())
                    .map_err(|e| HostError::new(e.to_string()))
            }
            _ => Err(HostError::new("internal: expected data")),
        }
    }

    pub fn copy_from<T: Element>(&self, t: &Tensor, a: &ArrayD<T>) -> Result<()> {
        super::check_copy(t, a)?;
        self.call(Request::Write(t.clone(), a.iter().map(|x| x.to_bits()).collect()))
            .map(|_| ())
    }

    pub fn compile(&self, file: impl Into<PathBuf>, kernel: &str, constexprs: &[(&str, Konst)]) -> Result<Kernel> {
        let constexprs = constexprs.iter().map(|(n, k)| (n.to_string(), k.clone())).collect();
        match self.call(Request::Compile {
            file: file.into(),
            kernel: kernel.to_string(),
            constexprs,
        })? {
            Response::Kernel(k) => Ok(k),
            _ => Err(HostError::new("internal: expected a kernel")),
        }
    }

    pub fn launch(&self, kernel: &Kernel, grid: Option<[u32; 3]>, args: &[Arg]) -> Result<()> {
        self.call(Request::Launch {
            kernel: kernel.clone(),
            grid,
            args: owned(args),
        })
        .map(|_| ())
    }

    /// One launch of `kernel` across all ranks, for kernels that compute
    /// and communicate together (the async-TP GEMMs of [`crate::tp`]):
    /// every rank calls it with the same kernel and its own arguments
    /// (its tensors on as many PEs as the other ranks'), and the launch
    /// runs once all have. PE k of each rank runs one program; the ranks'
    /// PEs k are its communicator, `tl.rank()` the rank (see
    /// [`Runtime::launch_across`]). `slots`: the queues' slots, else the
    /// topology's.
    pub fn launch_across_ranks(&self, kernel: &Kernel, args: &[Arg], slots: Option<QueueSlots>) -> Result<()> {
        self.call(Request::LaunchAcross {
            kernel: kernel.clone(),
            args: owned(args),
            slots,
        })
        .map(|_| ())
    }

    pub fn synchronize(&self) -> Result<()> {
        self.call(Request::Synchronize).map(|_| ())
    }

    /// All-reduce in place with the registry's default algorithm.
    pub fn all_reduce(&self, t: &Tensor, op: ReduceOp) -> Result<()> {
        self.all_reduce_with(t, op, None)
    }

    /// All-reduce with a named algorithm of the registry.
    pub fn all_reduce_with(&self, t: &Tensor, op: ReduceOp, algorithm: Option<&str>) -> Result<()> {
        let r = Request::Collective {
            c: Collective::AllReduce,
            algorithm: algorithm.map(str::to_string),
            op,
            input: t.clone(),
            output: None,
            root: 0,
            per_shard: false,
        };
        self.call(r).map(|_| ())
    }

    /// `out` (world × the input's elements) gets every rank's `t`.
    pub fn all_gather(&self, out: &Tensor, t: &Tensor) -> Result<()> {
        self.all_gather_with(out, t, None)
    }

    /// All-gather with a named algorithm of the registry.
    pub fn all_gather_with(&self, out: &Tensor, t: &Tensor, algorithm: Option<&str>) -> Result<()> {
        let r = Request::Collective {
            c: Collective::AllGather,
            algorithm: algorithm.map(str::to_string),
            op: ReduceOp::Sum,
            input: t.clone(),
            output: Some(out.clone()),
            root: 0,
            per_shard: false,
        };
        self.call(r).map(|_| ())
    }

    /// All-gather shard by shard, for tensors split over several PEs: the
    /// shard of `out` on each PE gets the ranks' shards of `t` on that PE,
    /// rank after rank (see [`Runtime::all_gather_per_shard`]).
    pub fn all_gather_per_shard(&self, out: &Tensor, t: &Tensor) -> Result<()> {
        let r = Request::Collective {
            c: Collective::AllGather,
            algorithm: None,
            op: ReduceOp::Sum,
            input: t.clone(),
            output: Some(out.clone()),
            root: 0,
            per_shard: true,
        };
        self.call(r).map(|_| ())
    }

    /// `out` gets this rank's part of the reduction of every rank's `t`.
    pub fn reduce_scatter(&self, out: &Tensor, t: &Tensor, op: ReduceOp) -> Result<()> {
        self.reduce_scatter_with(out, t, op, None)
    }

    /// Reduce-scatter with a named algorithm of the registry.
    pub fn reduce_scatter_with(&self, out: &Tensor, t: &Tensor, op: ReduceOp, algorithm: Option<&str>) -> Result<()> {
        let r = Request::Collective {
            c: Collective::ReduceScatter,
            algorithm: algorithm.map(str::to_string),
            op,
            input: t.clone(),
            output: Some(out.clone()),
            root: 0,
            per_shard: false,
        };
        self.call(r).map(|_| ())
    }

    /// Every rank's `t` becomes rank `src`'s.
    pub fn broadcast(&self, t: &Tensor, src: u32) -> Result<()> {
        self.broadcast_with(t, src, None)
    }

    /// Broadcast with a named algorithm of the registry.
    pub fn broadcast_with(&self, t: &Tensor, src: u32, algorithm: Option<&str>) -> Result<()> {
        let r = Request::Collective {
            c: Collective::Broadcast,
            algorithm: algorithm.map(str::to_string),
            op: ReduceOp::Sum,
            input: t.clone(),
            output: None,
            root: src,
            per_shard: false,
        };
        self.call(r).map(|_| ())
    }

    pub fn barrier(&self) -> Result<()> {
        self.call(Request::Barrier).map(|_| ())
    }

    /// Sends `t` to rank `dst`, whose matching `recv` receives it.
    pub fn send(&self, t: &Tensor, dst: u32) -> Result<()> {
        self.check_peer("send to", dst)?;
        self.call(Request::Send { tensor: t.clone(), dst }).map(|_| ())
    }

    /// Receives rank `src`'s `send` into `t`.
    pub fn recv(&self, t: &Tensor, src: u32) -> Result<()> {
        self.check_peer("recv from", src)?;
        self.call(Request::Recv { tensor: t.clone(), src }).map(|_| ())
    }

    /// A send's or receive's peer is another rank of the group.
    fn check_peer(&self, what: &str, peer: u32) -> Result<()> {
        if peer >= self.world {
            return Err(HostError::new(format!(
                "rank {}: {what} rank {peer}: not a rank (world size {})",
                self.rank, self.world
            )));
        }
        if peer == self.rank {
            return Err(HostError::new(format!(
                "rank {}: {what} itself: a rank's send and receive with itself would wait for each other",
                self.rank
            )));
        }
        Ok(())
    }
}

enum RankState {
    Running,
    /// Boxed: a request holds tensors, and the states are moved about.
    Waiting(Box<Request>),
    Finished,
}

/// Runs `f(rank, ctx)` for every rank on `rt`'s machine; rank r's tensors
/// go to SIP r. Requests are served only while no rank is running, so a
/// rank must not wait for another by other means (a lock held across a
/// `Ctx` call, a channel of its own): both would wait forever.
pub fn spawn<F>(rt: &mut Runtime, nprocs: u32, f: F) -> std::result::Result<(), SpawnError>
where
    F: Fn(u32, &Ctx) -> Result<()> + Sync,
{
    if nprocs == 0 || nprocs > rt.topo.sips() {
        return Err(SpawnError {
            failures: vec![(
                0,
                HostError::new(format!(
                    "spawn({nprocs}): one rank per SIP, and the machine has {} SIPs",
                    rt.topo.sips()
                )),
            )],
        });
    }
    let n = nprocs as usize;
    // Requests are served on the requesting rank's device; the caller's
    // is back when spawn returns.
    let device = rt.device;
    let (req_tx, req_rx) = channel::<(u32, Request)>();
    let mut reply: Vec<Sender<Result<Response>>> = Vec::new();
    let mut ctxs = Vec::new();
    for r in 0..nprocs {
        let (tx, rx) = channel();
        reply.push(tx);
        ctxs.push(Ctx {
            rank: r,
            world: nprocs,
            tx: req_tx.clone(),
            rx,
        });
    }
    drop(req_tx);
    let f = &f;
    let mut failures: Vec<(u32, HostError)> = Vec::new();
    std::thread::scope(|scope| {
        // Owned here: should serving a request panic, unwinding drops the
        // senders, every waiting rank's request fails ("stopped"), and the
        // scope can join the ranks and pass the panic on instead of
        // waiting for them forever.
        let reply = reply;
        for ctx in ctxs {
            scope.spawn(move || {
                let rank = ctx.rank;
                let result =
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(rank, &ctx))).unwrap_or_else(|p| {
                        let msg = p
                            .downcast_ref::<&str>()
                            .map(|s| s.to_string())
                            .or_else(|| p.downcast_ref::<String>().cloned())
                            .unwrap_or_else(|| "panicked".into());
                        Err(HostError::new(format!("panicked: {msg}")))
                    });
                let _ = ctx.tx.send((rank, Request::Done(result)));
                // The thread ends: its cached small blocks go back (when
                // `tlc`'s allocator is the global one), after `ctx` is
                // dropped so that what it frees goes back too.
                drop(ctx);
                crate::alloc::flush_thread_cache();
            });
        }
        let mut state: Vec<RankState> = (0..n).map(|_| RankState::Running).collect();
        let mut stopped = false;
        loop {
            // Wait until no rank is running.
            while state.iter().any(|s| matches!(s, RankState::Running)) {
                let Ok((r, req)) = req_rx.recv() else { break };
                state[r as usize] = match req {
                    Request::Done(res) => {
                        if let Err(e) = res {
                            if !e.stopped {
                                // A wait that ran another rank's failed
                                // launch reports that rank's error.
                                failures.push((e.rank.unwrap_or(r), e));
                            }
                            stopped = true;
                        }
                        RankState::Finished
                    }
                    other => RankState::Waiting(Box::new(other)),
                };
            }
            if state.iter().all(|s| matches!(s, RankState::Finished)) {
                break;
            }
            let waiting: Vec<usize> = (0..n).filter(|r| matches!(state[*r], RankState::Waiting(_))).collect();
            if stopped {
                rt.discard_pending();
                for r in waiting {
                    state[r] = RankState::Running;
                    let _ = reply[r].send(Err(HostError::stopped("stopped: another rank failed")));
                }
                continue;
            }
            // The ranks' own requests first, in rank order.
            let local: Vec<usize> = waiting
                .iter()
                .copied()
                .filter(|r| matches!(&state[*r], RankState::Waiting(q) if !q.is_group()))
                .collect();
            if !local.is_empty() {
                for r in local {
                    let RankState::Waiting(q) = std::mem::replace(&mut state[r], RankState::Running) else {
                        continue;
                    };
                    rt.device = r as u32;
                    rt.serving_rank = Some(r as u32);
                    let _ = reply[r].send(serve_local(rt, *q));
                    rt.serving_rank = None;
                }
                continue;
            }
            // Only group requests are left.
            let outcome = serve_group(rt, &mut state, n);
            for (r, res) in outcome {
                state[r] = RankState::Running;
                let _ = reply[r].send(res);
            }
        }
    });
    rt.device = device;
    failures.sort_by_key(|(r, _)| *r);
    if failures.is_empty() {
        Ok(())
    } else {
        rt.discard_pending();
        Err(SpawnError { failures })
    }
}

fn serve_local(rt: &mut Runtime, q: Request) -> Result<Response> {
    match q {
        Request::Alloc {
            shape,
            dtype,
            policy,
            contents,
        } => rt
            .shards("tensor", &shape, dtype, policy, &contents)
            .map(Response::Tensor),
        Request::Read(t) => rt.read_bits(&t).map(Response::Data),
        Request::Write(t, bits) => rt.write_bits(&t, &bits).map(|_| Response::Unit),
        Request::Compile {
            file,
            kernel,
            constexprs,
        } => {
            let c: Vec<(&str, Konst)> = constexprs.iter().map(|(n, k)| (n.as_str(), k.clone())).collect();
            rt.compile(&file, &kernel, &c).map(Response::Kernel)
        }
        Request::Launch { kernel, grid, args } => rt.launch(&kernel, grid, &borrowed(&args)).map(|_| Response::Unit),
        Request::Synchronize => rt.synchronize().map(|_| Response::Unit),
        _ => Err(HostError::new("internal: not a local request")),
    }
}

/// Serves the group requests when every running rank is in one: a
/// collective or barrier all called, or matching send/recv pairs.
fn serve_group(rt: &mut Runtime, state: &mut [RankState], n: usize) -> Vec<(usize, Result<Response>)> {
    let waiting: Vec<usize> = (0..n).filter(|r| matches!(state[*r], RankState::Waiting(_))).collect();
    let req = |r: usize| match &state[r] {
        RankState::Waiting(q) => Some(&**q),
        _ => None,
    };
    let all_err = |msg: String| {
        waiting
            .iter()
            .map(|r| (*r, Err(HostError::new(msg.clone()))))
            .collect::<Vec<_>>()
    };
    // Point-to-point pairs.
    let mut pairs = Vec::new();
    for &a in &waiting {
        if let Some(Request::Send { dst, .. }) = req(a) {
            let b = *dst as usize;
            if b < n && matches!(req(b), Some(Request::Recv { src, .. }) if *src as usize == a) {
                pairs.push((a, b));
            }
        }
    }
    if !pairs.is_empty() {
        let mut out = Vec::new();
        for (a, b) in pairs {
            let (Some(Request::Send { tensor: ta, .. }), Some(Request::Recv { tensor: tb, .. })) = (req(a), req(b))
            else {
                continue;
            };
            let res = rt.send_recv(ta, tb, [a as u32, b as u32]).map(|_| Response::Unit);
            out.push((a, res.clone().map(|_| Response::Unit)));
            out.push((b, res));
        }
        return out;
    }
    if waiting.len() < n {
        let finished: Vec<String> = (0..n).filter(|r| !waiting.contains(r)).map(|r| r.to_string()).collect();
        let what = req(waiting[0]).map(Request::describe).unwrap_or_default();
        return all_err(format!(
            "rank {} called {what}, but rank(s) {} already finished",
            waiting[0],
            finished.join(", ")
        ));
    }
    // Every rank waits in a send or receive and no two pair up.
    if (0..n).all(|r| matches!(req(r), Some(Request::Send { .. } | Request::Recv { .. }))) {
        let each: Vec<String> = (0..n)
            .map(|r| format!("rank {r} in {}", req(r).map(Request::describe).unwrap_or_default()))
            .collect();
        return all_err(format!(
            "every rank waits in a send or receive and none pair up ({}): a deadlock",
            each.join(", ")
        ));
    }
    let first = req(0).map(Request::describe).unwrap_or_default();
    if let Some(r) = (1..n).find(|r| req(*r).map(Request::describe).unwrap_or_default() != first) {
        let other = req(r).map(Request::describe).unwrap_or_default();
        return all_err(format!(
            "rank 0 called {first} while rank {r} called {other}: the ranks' collectives must match"
        ));
    }
    let res: Result<Response> = match req(0) {
        Some(Request::Barrier) => rt
            .barrier_across(&(0..n as u32).collect::<Vec<_>>())
            .map(|_| Response::Unit),
        Some(Request::LaunchAcross { kernel, slots, .. }) => {
            let mut per_rank = Vec::with_capacity(n);
            let mut mismatch = None;
            for r in 0..n {
                if let Some(Request::LaunchAcross {
                    kernel: k2,
                    args,
                    slots: s2,
                }) = req(r)
                {
                    // The same specialization: the same IR (each rank
                    // compiles its own copy).
                    let same = Arc::ptr_eq(&k2.func, &kernel.func)
                        || print_function(&k2.func, &k2.sources) == print_function(&kernel.func, &kernel.sources);
                    if !same || s2 != slots {
                        mismatch = Some(r);
                    }
                    per_rank.push(borrowed(args));
                }
            }
            match mismatch {
                Some(r) => Err(HostError::new(format!(
                    "rank {r} launched another kernel (or other queue parameters) across ranks than rank 0's `{}`",
                    kernel.name()
                ))),
                None => rt.launch_across(kernel, &per_rank, *slots).map(|_| Response::Unit),
            }
        }
        Some(Request::Collective {
            c,
            algorithm,
            op,
            root,
            per_shard,
            ..
        }) => {
            let (c, algorithm, op, root, per_shard) = (*c, algorithm.clone(), *op, *root, *per_shard);
            let mut inputs = Vec::new();
            let mut outputs = Vec::new();
            let mut mismatch = None;
            for r in 0..n {
                if let Some(Request::Collective {
                    input,
                    output,
                    algorithm: a2,
                    op: o2,
                    root: r2,
                    per_shard: p2,
                    ..
                }) = req(r)
                {
                    if *a2 != algorithm || *o2 != op || *r2 != root || *p2 != per_shard {
                        mismatch = Some(r);
                    }
                    inputs.push(input);
                    if let Some(o) = output {
                        outputs.push(o);
                    }
                }
            }
            match mismatch {
                Some(r) => Err(HostError::new(format!(
                    "rank {r}'s {c} differs from rank 0's (algorithm, reduction, root or shard by shard)"
                ))),
                None if per_shard => rt.all_gather_per_shard(&inputs, &outputs).map(|_| Response::Unit),
                None => rt
                    .collective(c, algorithm.as_deref(), op, &inputs, &outputs, root)
                    .map(|_| Response::Unit),
            }
        }
        _ => Err(HostError::new("internal: not a group request")),
    };
    (0..n).map(|r| (r, res.clone())).collect()
}

/// Arguments as a request carries them to the thread that serves it.
fn owned(args: &[Arg]) -> Vec<OwnedArg> {
    args.iter()
        .map(|a| match a {
            Arg::Tensor(t) => OwnedArg::Tensor((*t).clone()),
            Arg::I32(x) => OwnedArg::I32(*x),
            Arg::I64(x) => OwnedArg::I64(*x),
            Arg::F32(x) => OwnedArg::F32(*x),
            Arg::Bool(x) => OwnedArg::Bool(*x),
        })
        .collect()
}

fn borrowed(args: &[OwnedArg]) -> Vec<Arg<'_>> {
    args.iter()
        .map(|a| match a {
            OwnedArg::Tensor(t) => Arg::Tensor(t),
            OwnedArg::I32(x) => Arg::I32(*x),
            OwnedArg::I64(x) => Arg::I64(*x),
            OwnedArg::F32(x) => Arg::F32(*x),
            OwnedArg::Bool(x) => Arg::Bool(*x),
        })
        .collect()
}
