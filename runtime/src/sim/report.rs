//! What a simulated run reports: total time, per-engine busy time over the
//! PEs, bytes and achieved bandwidth per link class, the most contended
//! links; a Chrome trace (one process per PE, one thread per engine, link
//! occupancy as counter tracks); and the run's errors rendered like
//! compiler diagnostics (a failing operation, a deadlock).

use super::{Engine, LinkId, SimError, TcmCause, LINK_CLASSES};
use crate::topology::PeCoord;
use codespan_reporting::diagnostic as cs;
use codespan_reporting::term;
use kernbench_compiler::diag::{ColorMode, SourceMap};
use kernbench_compiler::ir::{Function, Inst, Op};
use serde_json::json;
use std::collections::{BTreeMap, HashMap};

/// One operation on one engine, for the trace.
#[derive(Clone, Debug)]
pub struct Slice {
    pub rank: u32,
    pub engine: Engine,
    /// The engine's busy interval.
    pub start_ps: u64,
    pub end_ps: u64,
    /// When the operation's effect completed (a transfer's last byte).
    pub done_ps: u64,
    pub inst: Inst,
}

#[derive(Clone, Debug)]
pub struct PeStat {
    pub pe: PeCoord,
    pub rank: u32,
    pub end_ps: u64,
    /// Busy time per engine ([`Engine::NAMES`] order; the issue unit last).
    pub busy_ps: [u64; Engine::COUNT + 1],
    /// When tracing, the issue unit's busy spans `[start, end)` in order
    /// (back-to-back dispatches merged).
    pub issue_spans: Vec<(u64, u64)>,
    /// When tracing, each stall of the issue unit in order: its clock then,
    /// the instruction it could not go past, and why.
    pub issue_stalls: Vec<(u64, Inst, &'static str)>,
}

#[derive(Clone, Debug)]
pub struct LinkStat {
    pub id: LinkId,
    pub busy_ps: u64,
    pub bytes: u64,
    /// How long transfers waited for the link, summed over them: a link
    /// no two transfers wanted at once has none, however busy.
    pub wait_ps: u64,
}

#[derive(Clone, Debug)]
pub struct Report {
    pub kernel: String,
    /// When every PE started (after the launch's host path).
    pub start_ps: u64,
    /// When the last PE finished.
    pub end_ps: u64,
    pub pes: Vec<PeStat>,
    /// Every link that carried bytes.
    pub links: Vec<LinkStat>,
    pub events: u64,
    pub slices: Vec<Slice>,
    /// Link reservations (when tracing): link, start, end.
    pub link_intervals: Vec<(LinkId, u64, u64)>,
    /// The threads the launch ran on (its shards; no result depends on it).
    pub threads: usize,
    /// Messages left in their receivers' slots when the run ended, by
    /// sender and receiver rank.
    pub unreceived: Vec<Unreceived>,
}

/// Messages one rank sent another that the receiver never received: the
/// run ended with them in its slots. Legal, but in a kernel almost always
/// a receive too few (or a send too many).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unreceived {
    pub from: PeCoord,
    pub from_rank: u32,
    pub to: PeCoord,
    pub to_rank: u32,
    pub messages: u64,
    pub bytes: u64,
    /// The `tl.send` of the first of them.
    pub sent_by: Inst,
}

impl Report {
    /// The kernel's time: from the common start to the last PE's end.
    pub fn elapsed_ps(&self) -> u64 {
        self.end_ps - self.start_ps
    }

    /// Per engine (and the issue unit): (min, mean, max) busy % over PEs.
    pub fn engine_busy(&self) -> Vec<(&'static str, f64, f64, f64)> {
        let total = self.elapsed_ps().max(1) as f64;
        (0..=Engine::COUNT)
            .map(|e| {
                // In integer picoseconds, then one rounding each: the mean
                // of rounded shares could fall an ulp outside [min, max].
                let busy = self.pes.iter().map(|p| p.busy_ps[e]);
                let pct = |ps: f64| 100.0 * ps / total;
                let min = pct(busy.clone().min().unwrap_or(0) as f64);
                let max = pct(busy.clone().max().unwrap_or(0) as f64);
                let sum: u128 = busy.map(u128::from).sum();
                let mean = pct(sum as f64 / self.pes.len().max(1) as f64).clamp(min, max);
                (Engine::NAMES[e], min, mean, max)
            })
            .collect()
    }

    /// Per link class: (bytes, busy ps summed, links used).
    pub fn link_classes(&self) -> BTreeMap<usize, (u64, u64, usize)> {
        let mut m: BTreeMap<usize, (u64, u64, usize)> = BTreeMap::new();
        for l in &self.links {
            let e = m.entry(l.id.class()).or_default();
            e.0 += l.bytes;
            e.1 += l.busy_ps;
            e.2 += 1;
        }
        m
    }

    /// The busiest links, most first (ties in link order).
    pub fn busiest_links(&self, n: usize) -> Vec<&LinkStat> {
        let mut v: Vec<&LinkStat> = self.links.iter().collect();
        v.sort_by_key(|l| (std::cmp::Reverse(l.busy_ps), l.id));
        v.truncate(n);
        v
    }

    /// The most contended links: those transfers waited for longest,
    /// most first (ties: the busier, then link order); only links some
    /// transfer waited for.
    pub fn contended_links(&self, n: usize) -> Vec<&LinkStat> {
        let mut v: Vec<&LinkStat> = self.links.iter().filter(|l| l.wait_ps > 0).collect();
        v.sort_by_key(|l| (std::cmp::Reverse(l.wait_ps), std::cmp::Reverse(l.busy_ps), l.id));
        v.truncate(n);
        v
    }
}

/// Picoseconds as µs with three decimals, rounded half up from the
/// integer (through `f64`, 305,500 ps printed 0.305).
fn us(ps: u64) -> String {
    let ns = ps / 1000 + u64::from(ps % 1000 >= 500);
    format!("{}.{:03}", ns / 1000, ns % 1000)
}

/// A duration in µs to the ns, or below 1 µs exactly in ns or ps (a
/// `--time-limit 1ps` was "0.000 us").
fn duration(ps: u64) -> String {
    match ps {
        // Whole milliseconds and seconds as written (a time limit).
        1_000_000_000_000.. if ps % 1_000_000_000_000 == 0 => format!("{} s", ps / 1_000_000_000_000),
        1_000_000_000.. if ps % 1_000_000_000 == 0 => format!("{} ms", ps / 1_000_000_000),
        1_000_000.. => format!("{} us", us(ps)),
        _ if ps % 1000 == 0 => format!("{} ns", ps / 1000),
        _ => format!("{ps} ps"),
    }
}

/// Bytes per picosecond × 1000 = GB/s.
fn gbps(bytes: u64, ps: u64) -> f64 {
    if ps == 0 {
        0.0
    } else {
        bytes as f64 * 1000.0 / ps as f64
    }
}

pub fn summary_text(r: &Report) -> String {
    let n = r.pes.len();
    let mut o = format!(
        "simulated time {} us for `{}` on {n} PE{} (start at {} us after the host's launch; {} events)\n",
        us(r.elapsed_ps()),
        r.kernel,
        if n == 1 { "" } else { "s" },
        us(r.start_ps),
        r.events
    );
    o.push_str("engine busy %        min     mean      max\n");
    for (name, min, mean, max) in r.engine_busy() {
        o.push_str(&format!("  {name:<12} {min:>8.1} {mean:>8.1} {max:>8.1}\n"));
    }
    let classes = r.link_classes();
    if !classes.is_empty() {
        o.push_str("link class          bytes   links  GB/s over the run  GB/s per link while busy\n");
        for (class, (bytes, busy, links)) in &classes {
            o.push_str(&format!(
                "  {:<13} {bytes:>12} {links:>7} {:>18.1} {:>25.1}\n",
                LINK_CLASSES[*class],
                gbps(*bytes, r.elapsed_ps()),
                gbps(*bytes, *busy)
            ));
        }
        let contended = r.contended_links(5);
        if contended.is_empty() {
            o.push_str("most contended links: none (no transfer waited for a link)\n");
        } else {
            o.push_str("most contended links (transfers' summed wait for the link; busy % of the run)\n");
            for l in contended {
                o.push_str(&format!(
                    "  {:>10} us waited  {:>6.1}% busy  {} ({} bytes)\n",
                    us(l.wait_ps),
                    100.0 * l.busy_ps as f64 / r.elapsed_ps().max(1) as f64,
                    l.id.describe(),
                    l.bytes
                ));
            }
        }
        o.push_str("busiest links (busy % of the run)\n");
        for l in r.busiest_links(5) {
            o.push_str(&format!(
                "  {:>6.1}%  {} ({} bytes)\n",
                100.0 * l.busy_ps as f64 / r.elapsed_ps().max(1) as f64,
                l.id.describe(),
                l.bytes
            ));
        }
    }
    o
}

pub fn summary_json(r: &Report) -> serde_json::Value {
    let engines: Vec<serde_json::Value> = r
        .engine_busy()
        .into_iter()
        .map(
            |(n, min, mean, max)| json!({"engine": n, "busy_pct_min": min, "busy_pct_mean": mean, "busy_pct_max": max}),
        )
        .collect();
    let classes: Vec<serde_json::Value> = r
        .link_classes()
        .into_iter()
        .map(|(c, (bytes, busy, n))| {
            json!({"class": LINK_CLASSES[c], "bytes": bytes, "busy_ps": busy, "links": n,
                   "gb_per_s": gbps(bytes, r.elapsed_ps()), "gb_per_s_per_link_busy": gbps(bytes, busy)})
        })
        .collect();
    let link = |l: &LinkStat| {
        json!({"link": l.id.describe(), "class": l.id.class_name(), "busy_ps": l.busy_ps, "bytes": l.bytes,
               "wait_ps": l.wait_ps})
    };
    let top: Vec<serde_json::Value> = r.busiest_links(5).into_iter().map(link).collect();
    let contended: Vec<serde_json::Value> = r.contended_links(5).into_iter().map(link).collect();
    json!({
        "kernel": r.kernel,
        "time_ps": r.elapsed_ps(),
        "start_ps": r.start_ps,
        "end_ps": r.end_ps,
        "pes": r.pes.len(),
        "events": r.events,
        "engines": engines,
        "link_classes": classes,
        "top_links": top,
        "contended_links": contended,
        "unreceived": r.unreceived.iter().map(|u| json!({
            "from_rank": u.from_rank, "to_rank": u.to_rank, "messages": u.messages, "bytes": u.bytes,
        })).collect::<Vec<_>>(),
    })
}

/// A Chrome trace (chrome://tracing, Perfetto): one process per PE, one
/// thread per engine, each operation a slice named by its source line;
/// every busy link's occupancy as a counter track, busiest first (only the
/// `max_links` busiest with a limit). Times in µs.
///
/// Written event by event to `out` (buffer it), as compact JSON: a large
/// run has millions of events, and the whole trace as one
/// `serde_json::Value` took about 25 times its text's size in memory
/// (8.5 GB for a 329 MB trace).
pub fn write_trace_json(
    r: &Report,
    func: &Function,
    sources: &SourceMap,
    max_links: Option<usize>,
    out: &mut impl std::io::Write,
) -> std::io::Result<()> {
    let mut events = TraceEvents { out, first: true };
    events.out.write_all(br#"{"displayTimeUnit":"ns","traceEvents":["#)?;
    for (k, p) in r.pes.iter().enumerate() {
        events.push(
            json!({"ph": "M", "name": "process_name", "pid": k, "args": {"name": format!("rank {} {}", p.rank, p.pe)}}),
        )?;
        for (e, name) in Engine::NAMES.iter().chain(&["issue stalls"]).enumerate() {
            events.push(json!({"ph": "M", "name": "thread_name", "pid": k, "tid": e, "args": {"name": name}}))?;
        }
    }
    let t = |ps: u64| ps as f64 / 1e6;
    let chains = fused_chains(func, sources);
    // The issue unit's thread: when it dispatched (scalars, control flow,
    // operations handed to the engines), in spans between its stalls; and
    // under it a thread of the stalls, each from where the issue unit
    // stopped to its next dispatch (or its end), named by the instruction
    // it could not go past, with why.
    for (k, p) in r.pes.iter().enumerate() {
        for &(s, e) in &p.issue_spans {
            events.push(json!({
                "ph": "X", "name": "issue", "pid": k, "tid": Engine::COUNT,
                "ts": t(s), "dur": t(e - s),
            }))?;
        }
        let spans = &p.issue_spans;
        for (n, &(at, inst, why)) in p.issue_stalls.iter().enumerate() {
            // Inside a busy span: the stall cleared at once (the issue
            // unit runs ahead of the clock) and dispatch went on.
            let i = spans.partition_point(|&(s, _)| s <= at);
            if i > 0 && spans[i - 1].1 > at {
                continue;
            }
            // Until the next dispatch, or the next stall (a new reason), or
            // the PE's end; a PE the run stopped (a deadlock, the time
            // limit) is stuck until the stop.
            let gap_end = spans
                .get(i)
                .map_or(if p.end_ps > at { p.end_ps } else { r.end_ps }, |&(s, _)| s);
            let until = p.issue_stalls.get(n + 1).map_or(gap_end, |&(t, _, _)| t.min(gap_end));
            if until <= at {
                continue;
            }
            // A stall at a fused chain is named as the MATH thread names
            // its slice (the chain is keyed by the member that labels it).
            let d = func.inst(inst);
            let name = match chains.get(&inst) {
                Some(c) => c.name.clone(),
                None => format!("{} {}", d.op.mnemonic(), sources.at_short(d.loc)),
            };
            events.push(json!({
                "ph": "X", "name": name,
                "pid": k, "tid": Engine::COUNT + 1, "ts": t(at), "dur": t(until - at),
                "args": {"why": why},
            }))?;
        }
    }
    for s in &r.slices {
        let d = func.inst(s.inst);
        let chain = chains.get(&s.inst);
        let mut args = json!({"source": sources.snippet(d.loc.file, d.loc.span).trim()});
        let name = match chain {
            Some(c) => {
                args["fused"] = c.members.clone().into();
                c.name.clone()
            }
            None => format!("{} {}", d.op.mnemonic(), sources.at_short(d.loc)),
        };
        events.push(json!({
            "ph": "X", "name": name,
            "pid": s.rank, "tid": s.engine.index(),
            "ts": t(s.start_ps), "dur": t(s.end_ps - s.start_ps),
            "args": args,
        }))?;
    }
    // Counter tracks for the busy links: 1 while a transfer holds it. The
    // intervals are sorted once by (link, time), busiest link first.
    let links_pid = r.pes.len();
    events.push(json!({"ph": "M", "name": "process_name", "pid": links_pid, "args": {"name": "links"}}))?;
    let shown: Vec<LinkId> = r
        .busiest_links(max_links.unwrap_or(usize::MAX))
        .iter()
        .filter(|l| l.busy_ps > 0)
        .map(|l| l.id)
        .collect();
    let rank: HashMap<LinkId, usize> = shown.iter().enumerate().map(|(k, id)| (*id, k)).collect();
    let names: Vec<String> = shown.iter().map(|id| id.describe()).collect();
    let mut intervals: Vec<(usize, u64, u64)> = r
        .link_intervals
        .iter()
        .filter_map(|(l, s, e)| rank.get(l).map(|k| (*k, *s, *e)))
        .collect();
    intervals.sort_unstable();
    for (k, s, e) in intervals {
        let name = &names[k];
        events.push(json!({"ph": "C", "name": name, "pid": links_pid, "ts": t(s), "args": {"busy": 1}}))?;
        events.push(json!({"ph": "C", "name": name, "pid": links_pid, "ts": t(e), "args": {"busy": 0}}))?;
    }
    events.out.write_all(b"]}")
}

/// The trace's event array as it is written: each event after a comma
/// but the first.
struct TraceEvents<'w, W: std::io::Write> {
    out: &'w mut W,
    first: bool,
}

impl<W: std::io::Write> TraceEvents<'_, W> {
    fn push(&mut self, event: serde_json::Value) -> std::io::Result<()> {
        if !std::mem::take(&mut self.first) {
            self.out.write_all(b",")?;
        }
        serde_json::to_writer(&mut *self.out, &event).map_err(std::io::Error::from)
    }
}

/// A rendered diagnostic's headline, without its `error: ` or
/// `error[E…]: ` lead: what every JSON error record gives as `message`.
pub fn first_line(rendered: &str) -> &str {
    let line = rendered.lines().next().unwrap_or_default();
    match line.split_once(": ") {
        Some((lead, rest)) if lead.starts_with("error") => rest,
        _ => line,
    }
}

/// A fused elementwise chain whose computing members come from more than
/// one source line: its trace name and its members' places.
struct FusedChain {
    /// The computing members' mnemonics (`sub+exp+reduce_sum`, or the
    /// first and last of more than three) and the lines (`softmax.tl:10-11`;
    /// the label's place when the members are in several files).
    name: String,
    /// Each computing member as `mnemonic file:line:col`.
    members: Vec<String>,
}

/// The MATH chains of the simulator's plan (`agu::sim_plan`, as the
/// launch makes it) that span several source lines, by label (the member
/// making the result, which their slices and issue stalls carry): one
/// name would otherwise hide the other lines' work (a softmax's `exp`
/// fused into the `sum` of the next line).
fn fused_chains(func: &Function, sources: &SourceMap) -> HashMap<Inst, FusedChain> {
    let (plan, address) = super::agu::sim_plan(func);
    let mut chains = HashMap::new();
    let on_math = |g: &kernbench_compiler::datapath::Group| {
        g.insts
            .first()
            .is_some_and(|&i| super::events::group_engine(&func.inst(i).op).0 == Engine::Math)
    };
    for group in plan.groups.iter().filter(|g| on_math(g)) {
        let members: Vec<Inst> = super::events::computing_members(func, group, &address).collect();
        let (Some(&first), Some(&last)) = (members.first(), members.last()) else {
            continue;
        };
        let line_of = |i: Inst| {
            let loc = func.inst(i).loc;
            (loc.file, sources.line_col(loc.file, loc.span.lo).0)
        };
        let lines: Vec<_> = members.iter().map(|&i| line_of(i)).collect();
        if lines.iter().all(|l| *l == lines[0]) {
            continue;
        }
        let label = func.inst(last).loc;
        let place = if lines.iter().all(|(f, _)| *f == label.file) {
            let lo = lines.iter().map(|(_, l)| *l).min().unwrap_or(0);
            let hi = lines.iter().map(|(_, l)| *l).max().unwrap_or(0);
            let name = sources.name(label.file);
            format!("{}:{lo}-{hi}", name.rsplit('/').next().unwrap_or(name))
        } else {
            sources.at_short(label)
        };
        let mnemonic = |i: Inst| func.inst(i).op.mnemonic();
        // Named by what computes: a splat or broadcast only widens a
        // scalar for the others.
        let computing: Vec<String> = members
            .iter()
            .filter(|&&i| !matches!(func.inst(i).op, Op::Splat | Op::Broadcast))
            .map(|&i| mnemonic(i).to_string())
            .collect();
        let ops = match computing.as_slice() {
            [] => format!("{}…{}", mnemonic(first), mnemonic(last)),
            few @ ([_] | [_, _] | [_, _, _]) => few.join("+"),
            [head, .., tail] => format!("{head}+…+{tail}"),
        };
        chains.insert(
            last,
            FusedChain {
                name: format!("{ops} {place}"),
                members: members
                    .iter()
                    .map(|&i| format!("{} {}", mnemonic(i), sources.at_short(func.inst(i).loc)))
                    .collect(),
            },
        );
    }
    chains
}

/// Why a PE could not go on when the machine stopped.
#[derive(Clone, Debug, PartialEq)]
pub enum WaitReason {
    /// A send waits for credits: the queue to `to_rank` is full.
    QueueFull { to_rank: u32, used: u32, slots: u32 },
    /// A receive waits for a message from `from_rank`.
    NoData { from_rank: u32 },
    /// Waiting at `tl.barrier` for the token of round `round` (of
    /// `rounds`) from `from_rank`.
    Barrier { from_rank: u32, round: u32, rounds: u32 },
    /// `tl.wait_until` on a signal word that never gets the value it
    /// waits for: what the word holds when the machine stopped (none if
    /// it cannot be read) and that value, both as the word's dtype.
    Signal { holds: Option<i64>, want: i64 },
    /// Waiting for one of its own operations that cannot start.
    Other,
}

/// A blocked PE.
#[derive(Clone, Debug)]
pub struct Blocked {
    pub pe: PeCoord,
    pub rank: u32,
    pub inst: Inst,
    pub reason: WaitReason,
    /// The PE its reason names (the receiver of a full queue, the sender
    /// it waits for, the barrier token's sender), and whether that PE's
    /// program has finished (set once every shard's blocked PEs are known:
    /// a PE not among them has finished).
    pub peer: Option<PeCoord>,
    pub peer_finished: bool,
    /// Where its issue unit waits, when that is not `inst`: the
    /// `tl.wait` of a `tl.recv_async` that never gets its message, or the
    /// operation it cannot queue because that engine's queue is full
    /// (the engine and the queue's depth).
    pub issue_at: Option<(Inst, Option<(Engine, u32)>)>,
}

impl Blocked {
    /// ", and rank r has finished" when the peer it waits on has.
    fn peer_note(&self) -> String {
        let peer_rank = match self.reason {
            WaitReason::QueueFull { to_rank: r, .. }
            | WaitReason::NoData { from_rank: r }
            | WaitReason::Barrier { from_rank: r, .. } => r,
            _ => return String::new(),
        };
        match self.peer_finished {
            true => format!(", and rank {peer_rank} has finished its program"),
            false => String::new(),
        }
    }
}

/// `d` rendered the way rustc renders, with or without colour.
fn emit(sources: &SourceMap, d: &cs::Diagnostic<kernbench_compiler::span::FileId>, color: ColorMode) -> String {
    let mut out = match color {
        ColorMode::Always => term::termcolor::Buffer::ansi(),
        ColorMode::Never => term::termcolor::Buffer::no_color(),
    };
    let _ = term::emit(&mut out, &term::Config::default(), sources, d);
    String::from_utf8_lossy(out.as_slice()).into_owned()
}

/// A primary label on instruction `inst`'s source span: "in this `op`",
/// after `who` when given.
fn label_at(func: &Function, inst: Inst, who: &str) -> cs::Label<kernbench_compiler::span::FileId> {
    let d = func.inst(inst);
    cs::Label::primary(d.loc.file, d.loc.span.range()).with_message(format!("{who}in this `{}`", d.op.mnemonic()))
}

/// How many ranks `entries` name (a PE blocked both sending and
/// receiving has an entry for each).
pub fn ranks_in(entries: &[Blocked]) -> usize {
    let mut ranks: Vec<u32> = entries.iter().map(|b| b.rank).collect();
    ranks.sort_unstable();
    ranks.dedup();
    ranks.len()
}

/// The deadlock diagnostic: every blocked PE, what it waits for, where.
pub fn render_deadlock(
    func: &Function,
    sources: &SourceMap,
    time_ps: u64,
    blocked: &[Blocked],
    color: ColorMode,
) -> String {
    let notes = blocked.iter().map(wait_note).collect();
    let ranks = ranks_in(blocked);
    let d = cs::Diagnostic::error()
        .with_message(format!(
            "deadlock in `{}` at {} us: {} rank{} blocked and nothing left to happen",
            func.name,
            us(time_ps),
            ranks,
            if ranks == 1 { "" } else { "s" }
        ))
        .with_labels(labels_at(func, blocked, "blocked here"))
        .with_notes(capped(notes));
    emit(sources, &d, color)
}

/// A launch that ran past its time limit: where each unfinished PE was.
pub fn render_time_limit(
    func: &Function,
    sources: &SourceMap,
    limit_ps: u64,
    running: &[Blocked],
    color: ColorMode,
) -> String {
    // A PE in a loop that never ends is "waiting for its own operations"
    // only in passing; a PE waiting on another rank says so.
    let notes = running.iter().map(running_note).collect();
    let ranks = ranks_in(running);
    let d = cs::Diagnostic::error()
        .with_message(format!(
            "`{}` did not finish within its time limit of {}: {} rank{} still running",
            func.name,
            duration(limit_ps),
            ranks,
            if ranks == 1 { "" } else { "s" }
        ))
        .with_labels(labels_at(func, running, "here at the limit"))
        .with_notes(capped(notes));
    emit(sources, &d, color)
}

/// A warning (or with `as_error` an error) for the messages a run left
/// unreceived; empty when none.
pub fn render_unreceived(
    func: &Function,
    sources: &SourceMap,
    unreceived: &[Unreceived],
    as_error: bool,
    color: ColorMode,
) -> String {
    if unreceived.is_empty() {
        return String::new();
    }
    let total: u64 = unreceived.iter().map(|u| u.messages).sum();
    let labels = label_each(func, unreceived.iter().map(|u| u.sent_by), |send| {
        let pairs: Vec<&Unreceived> = unreceived.iter().filter(|o| o.sent_by == send).collect();
        match pairs[..] {
            [one] if one.messages == 1 => "this message was never received".to_string(),
            [one] => format!("the first of {} messages never received was sent here", one.messages),
            _ => format!("the first message {} ranks never received was sent here", pairs.len()),
        }
    });
    let notes = unreceived
        .iter()
        .map(|u| {
            format!(
                "rank {} {} sent rank {} {} {} message{} ({} bytes) it never received",
                u.from_rank,
                u.from,
                u.to_rank,
                u.to,
                u.messages,
                if u.messages == 1 { "" } else { "s" },
                u.bytes
            )
        })
        .collect();
    let d = match as_error {
        true => cs::Diagnostic::error(),
        false => cs::Diagnostic::warning(),
    };
    let d = d
        .with_message(format!(
            "`{}` ended with {total} message{} sent and never received",
            func.name,
            if total == 1 { "" } else { "s" }
        ))
        .with_labels(labels)
        .with_notes(capped(notes));
    emit(sources, &d, color)
}

/// At most 16 notes, then how many more.
fn capped(mut notes: Vec<String>) -> Vec<String> {
    let shown = 16;
    if notes.len() > shown {
        let more = notes.len() - shown;
        notes.truncate(shown);
        notes.push(format!("… and {more} more"));
    }
    notes
}

/// One label per distinct instruction the PEs are at: "N ranks {what}";
/// and a secondary one where their issue units wait, when elsewhere (the
/// `tl.wait` of a blocked `tl.recv_async`).
fn labels_at(func: &Function, at: &[Blocked], what: &str) -> Vec<cs::Label<kernbench_compiler::span::FileId>> {
    let mut labels = label_each(func, at.iter().map(|b| b.inst), |inst| {
        let count = at.iter().filter(|o| o.inst == inst).count();
        format!("{count} rank{} {what}", if count == 1 { "" } else { "s" })
    });
    for (w, full) in at.iter().filter_map(|b| b.issue_at) {
        let loc = func.inst(w).loc;
        if labels
            .iter()
            .any(|l| l.file_id == loc.file && l.range == loc.span.range())
        {
            continue;
        }
        let count = at.iter().filter(|o| o.issue_at.map(|x| x.0) == Some(w)).count();
        let (s, waits) = if count == 1 { ("", "waits") } else { ("s", "wait") };
        let why = match full {
            Some((e, depth)) => format!(
                ": the {} engine's queue is full ({depth} operations, the topology's `pe.queue_depth`)",
                e.name()
            ),
            None => String::new(),
        };
        labels.push(
            cs::Label::secondary(loc.file, loc.span.range())
                .with_message(format!("{count} issue unit{s} {waits} here{why}")),
        );
    }
    labels
}

/// One primary label per distinct source span of `insts` (in the order
/// first seen), saying `message(inst)` of the first instruction there.
fn label_each(
    func: &Function,
    insts: impl IntoIterator<Item = Inst>,
    message: impl Fn(Inst) -> String,
) -> Vec<cs::Label<kernbench_compiler::span::FileId>> {
    let mut labels: Vec<cs::Label<kernbench_compiler::span::FileId>> = Vec::new();
    for inst in insts {
        let loc = func.inst(inst).loc;
        if !labels
            .iter()
            .any(|l| l.file_id == loc.file && l.range == loc.span.range())
        {
            labels.push(cs::Label::primary(loc.file, loc.span.range()).with_message(message(inst)));
        }
    }
    labels
}

/// What a blocked PE waits for, in words.
/// What a PE the time limit stopped was doing: a PE in a loop that never
/// ends is "waiting for its own operations" only in passing; a PE
/// waiting on another rank says so.
fn running_note(b: &Blocked) -> String {
    match b.reason {
        WaitReason::Other => format!("rank {} {} was running", b.rank, b.pe),
        _ => wait_note(b),
    }
}

fn wait_note(b: &Blocked) -> String {
    format!("{}{}", wait_words(b), b.peer_note())
}

/// What `b` waits for, without what [`Blocked::peer_note`] adds.
fn wait_words(b: &Blocked) -> String {
    match &b.reason {
        WaitReason::QueueFull { to_rank, used, slots } => {
            format!(
                "rank {} {} is blocked in a send: the queue to rank {to_rank} is full ({used}/{slots} slots)",
                b.rank, b.pe
            )
        }
        WaitReason::NoData { from_rank } => {
            format!(
                "rank {} {} is blocked in a receive: waiting for data from rank {from_rank}",
                b.rank, b.pe
            )
        }
        WaitReason::Barrier {
            from_rank,
            round,
            rounds,
        } => {
            format!(
                "rank {} {} waits at the barrier for the token of rank {from_rank} (round {round} of {rounds})",
                b.rank, b.pe
            )
        }
        WaitReason::Signal { holds, want } => match holds {
            Some(h) => format!(
                "rank {} {} waits for its signal word to hold {want}; it holds {h}, and nothing left to happen sets it",
                b.rank, b.pe
            ),
            None => format!("rank {} {} waits for its signal word to hold {want}", b.rank, b.pe),
        },
        WaitReason::Other => format!("rank {} {} waits for its own operations", b.rank, b.pe),
    }
}

/// [`render_sim_error`] with what the machine's memory adds: for an
/// access that hit no allocation, a note on where it lies against the
/// nearest one ([`super::SimMemory::describe_miss`]), since the address
/// alone tells a user little.
pub fn render_sim_error_in(
    mem: &super::SimMemory,
    func: &Function,
    sources: &SourceMap,
    e: &SimError,
    color: ColorMode,
) -> String {
    let note = match e {
        SimError::Exec {
            error:
                kernbench_compiler::datapath::ExecError {
                    kind: kernbench_compiler::datapath::ExecErrorKind::OutOfBounds(f),
                    ..
                },
            ..
        } => mem.describe_miss(f.addr, f.bytes).map(|d| format!("  = note: {d}\n")),
        _ => None,
    };
    let shown = render_sim_error(func, sources, e, color);
    format!("{}\n{}", shown.trim_end_matches('\n'), note.unwrap_or_default())
}

/// Any simulation error, rendered for a terminal.
pub fn render_sim_error(func: &Function, sources: &SourceMap, e: &SimError, color: ColorMode) -> String {
    match e {
        SimError::Exec {
            pe,
            rank,
            program,
            error,
        } => {
            let [x, y, z] = program;
            let d = cs::Diagnostic::error()
                .with_message(format!(
                    "{} (kernel `{}`, rank {rank} {pe}, program ({x}, {y}, {z}))",
                    error.kind, func.name
                ))
                .with_labels(vec![label_at(func, error.inst, "")]);
            emit(sources, &d, color)
        }
        SimError::Deadlock { time_ps, blocked } => render_deadlock(func, sources, *time_ps, blocked, color),
        SimError::TimeLimit { limit_ps, running } => render_time_limit(func, sources, *limit_ps, running, color),
        SimError::TcmCapacity {
            kernel,
            pe,
            need_bytes,
            have_bytes,
            queues,
            cause,
        } => {
            let message = format!(
                "kernel `{kernel}` needs {need_bytes} bytes of TCM on {pe} (its live blocks, the PE's TCM \
                 allocations and the IPCQ slots of {queues} queue{} into it) but the TCM holds {have_bytes} bytes",
                if *queues == 1 { "" } else { "s" }
            );
            let (inst, what) = match *cause {
                // Where the blocks peak: what to shrink or split.
                TcmCause::LiveBlocks {
                    live_bytes,
                    peak_at: Some(inst),
                } => (inst, format!("{live_bytes} bytes of blocks are live ")),
                TcmCause::LiveBlocks { peak_at: None, .. } => return format!("error: {message}\n"),
                // The send or receive that opened the queue that did not fit.
                TcmCause::Queue { by, rank, inst } => {
                    (inst, format!("rank {rank} {by} opens queue {queues} into {pe} "))
                }
            };
            let d = cs::Diagnostic::error()
                .with_message(message)
                .with_labels(vec![label_at(func, inst, &what)]);
            emit(sources, &d, color)
        }
        SimError::SlotCapacity {
            kernel,
            place,
            need_bytes,
            have_bytes,
            allocated_bytes,
            queues,
            queue_bytes,
            by,
            rank,
            inst,
        } => {
            let d = cs::Diagnostic::error()
                .with_message(format!(
                    "kernel `{kernel}` needs {need_bytes} bytes of the {place} ({allocated_bytes} bytes of tensors \
                     and {} bytes of the IPCQ slots of {queues} queue{} into it, the last one's {queue_bytes}) but \
                     it holds {have_bytes} bytes",
                    need_bytes.saturating_sub(*allocated_bytes),
                    if *queues == 1 { "" } else { "s" }
                ))
                .with_labels(vec![label_at(
                    func,
                    *inst,
                    &format!("rank {rank} {by} opens queue {queues} into the {place} "),
                )])
                .with_notes(vec![
                    "`pe.ipcq.buffer_space` puts each queue's slots in that memory near its receiver: \
                     allocate less there, or move the slots (or the tensors) to another space"
                        .into(),
                ]);
            emit(sources, &d, color)
        }
        SimError::Setup(m) => format!("error: {m}\n"),
    }
}

/// A simulation error as JSON (what `--format json` prints instead of a
/// summary when a run fails): its kind, the diagnostic as text, the
/// figures it gives, and for a deadlock or the time limit every PE that
/// was stuck or running, where and why. `partial` is the report of what
/// the run did until it stopped, when there is one.
pub fn error_json(
    mem: &super::SimMemory,
    func: &Function,
    sources: &SourceMap,
    e: &SimError,
    partial: Option<&Report>,
) -> serde_json::Value {
    let ranks = |at: &[Blocked], running: bool| -> Vec<serde_json::Value> {
        at.iter()
            .map(|b| {
                let reason = match &b.reason {
                    WaitReason::QueueFull { to_rank, used, slots } => {
                        json!({"kind": "queue_full", "to_rank": to_rank, "used_slots": used, "slots": slots})
                    }
                    WaitReason::NoData { from_rank } => json!({"kind": "no_data", "from_rank": from_rank}),
                    WaitReason::Barrier {
                        from_rank,
                        round,
                        rounds,
                    } => json!({"kind": "barrier", "from_rank": from_rank, "round": round, "rounds": rounds}),
                    WaitReason::Signal { holds, want } => json!({"kind": "signal", "holds": holds, "want": want}),
                    WaitReason::Other if running => json!({"kind": "running"}),
                    WaitReason::Other => json!({"kind": "own_operations"}),
                };
                let mut reason = reason;
                if b.peer.is_some() {
                    reason["peer_finished"] = json!(b.peer_finished);
                }
                json!({
                    "rank": b.rank,
                    "pe": b.pe.to_string(),
                    "at": sources.at(func.inst(b.inst).loc),
                    "issue_at": b.issue_at.map(|(w, _)| sources.at(func.inst(w).loc)),
                    "issue_queue_full": b.issue_at.and_then(|(_, full)| full).map(|(e, depth)| json!({"engine": e.name(), "depth": depth})),
                    "op": func.inst(b.inst).op.mnemonic(),
                    "reason": reason,
                    "note": if running { running_note(b) } else { wait_note(b) },
                })
            })
            .collect()
    };
    let mut error = match e {
        SimError::Exec {
            pe,
            rank,
            program,
            error,
        } => json!({
            "kind": "exec", "rank": rank, "pe": pe.to_string(), "program": program,
            "at": sources.at(func.inst(error.inst).loc), "what": error.kind.to_string(),
        }),
        SimError::Deadlock { time_ps, blocked } => {
            json!({"kind": "deadlock", "at_ps": time_ps, "ranks": ranks(blocked, false)})
        }
        SimError::TimeLimit { limit_ps, running } => {
            json!({"kind": "time_limit", "limit_ps": limit_ps, "ranks": ranks(running, true)})
        }
        SimError::TcmCapacity {
            pe,
            need_bytes,
            have_bytes,
            queues,
            cause,
            ..
        } => {
            let mut v = json!({
                "kind": "tcm_capacity", "pe": pe.to_string(), "need_bytes": need_bytes,
                "have_bytes": have_bytes, "queues": queues,
            });
            // Where the blocks peak, or the send or receive that opened
            // the queue that did not fit.
            let at = match *cause {
                TcmCause::LiveBlocks { live_bytes, peak_at } => {
                    v["live_bytes"] = live_bytes.into();
                    peak_at
                }
                TcmCause::Queue { rank, inst, .. } => {
                    v["rank"] = rank.into();
                    Some(inst)
                }
            };
            if let Some(inst) = at {
                v["at"] = sources.at(func.inst(inst).loc).into();
            }
            v
        }
        SimError::SlotCapacity {
            place,
            need_bytes,
            have_bytes,
            allocated_bytes,
            queues,
            queue_bytes,
            rank,
            inst,
            ..
        } => json!({
            "kind": "slot_capacity", "memory": place.to_string(), "need_bytes": need_bytes,
            "have_bytes": have_bytes, "allocated_bytes": allocated_bytes, "queues": queues,
            "queue_bytes": queue_bytes, "rank": rank, "at": sources.at(func.inst(*inst).loc),
        }),
        SimError::Setup(_) => json!({"kind": "setup"}),
    };
    let diagnostic = render_sim_error_in(mem, func, sources, e, ColorMode::Never);
    error["message"] = first_line(&diagnostic).into();
    error["diagnostic"] = diagnostic.trim_end().into();
    let mut v = json!({ "error": error });
    if let Some(r) = partial {
        v["partial"] = summary_json(r);
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Durations keep their precision below a microsecond.
    #[test]
    fn durations_keep_their_precision() {
        assert_eq!(duration(20_000_000), "20.000 us");
        assert_eq!(duration(1_000_000), "1.000 us");
        assert_eq!(duration(999_000), "999 ns");
        assert_eq!(duration(1), "1 ps");
        assert_eq!(duration(0), "0 ns");
        // Rounded half up from the integer, not through a binary fraction.
        assert_eq!(us(305_500), "0.306");
        assert_eq!(us(305_499), "0.305");
        assert_eq!(us(1_999_999_500), "2000.000");
        assert_eq!(duration(2_125_664_500), "2125.665 us");
        assert_eq!(duration(100_000_000_000), "100 ms");
        assert_eq!(duration(2_000_000_000_000), "2 s");
        assert_eq!(duration(100_000_001_000), "100000.001 us");
    }

    /// The mean busy share lies in [min, max], bit for bit when every PE
    /// is as busy (the mean of seven rounded shares of 1/7 was an ulp
    /// above them).
    #[test]
    fn mean_busy_share_lies_between_min_and_max() {
        let pe = |busy: u64| PeStat {
            pe: PeCoord { sip: 0, cube: 0, pe: 0 },
            rank: 0,
            end_ps: 3,
            busy_ps: [busy; Engine::COUNT + 1],
            issue_spans: Vec::new(),
            issue_stalls: Vec::new(),
        };
        for busy in [vec![1, 1, 1], vec![1, 2, 2], vec![0, 3, 1]] {
            let r = Report {
                kernel: "k".into(),
                start_ps: 0,
                end_ps: 3,
                pes: busy.iter().map(|&b| pe(b)).collect(),
                links: Vec::new(),
                events: 0,
                slices: Vec::new(),
                link_intervals: Vec::new(),
                threads: 1,
                unreceived: Vec::new(),
            };
            for (name, min, mean, max) in r.engine_busy() {
                assert!(min <= mean && mean <= max, "{name} {busy:?}: {min} {mean} {max}");
                let exact = 100.0 * busy.iter().sum::<u64>() as f64 / 9.0;
                assert!((mean - exact).abs() < 1e-12, "{name} {busy:?}: {mean} vs {exact}");
            }
        }
        let same = Report {
            kernel: "k".into(),
            start_ps: 0,
            end_ps: 7,
            pes: vec![pe(1); 7],
            links: Vec::new(),
            events: 0,
            slices: Vec::new(),
            link_intervals: Vec::new(),
            threads: 1,
            unreceived: Vec::new(),
        };
        for (_, min, mean, max) in same.engine_busy() {
            assert_eq!((min.to_bits(), max.to_bits()), (mean.to_bits(), mean.to_bits()));
        }
    }
}
