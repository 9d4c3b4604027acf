//! Where each IR value lives in a PE's environment: values whose live
//! ranges do not overlap share an entry, the way a register allocator
//! shares registers.
//!
//! **Why.** The issue unit keeps one entry per value it may read. With an
//! entry per IR value, a PE of a large kernel (the stdlib's all-reduce
//! inlines a few thousand values) holds tens of KiB of entries, and the
//! ones a loop body touches are spread over many cache lines among those
//! of code that never runs. With thousands of PEs the simulator is bound
//! by those misses (docs/architecture.md, Performance). Sharing entries
//! packs what is live at any point into a few hundred bytes.
//!
//! **Live ranges.** The plan's steps (instructions, and fused groups
//! where the plan issues them) are numbered in the order the issue unit
//! walks them, nested regions inside their step's span. A value lives
//! from its definition to its last use, with three conservative rules
//! that make sharing safe for the way the issue unit moves values:
//! - a use inside an instruction's regions (a loop body, an `if` arm) of
//!   a value defined before that instruction keeps the value alive to the
//!   instruction's end, since a loop body reads it again on every
//!   iteration;
//! - a region's parameters live over the whole region: a `yield` writes
//!   them while it still reads its operands, one after the other;
//! - an instruction's results are defined at its start, so the results of
//!   an `if` or a loop never share an entry with a value inside it that
//!   the closing `yield` still reads while writing them.
//!
//! A definition and a use at the same position overlap, so an
//! instruction's results never share an entry with its own operands.
//! Renaming is untouched: operations capture their operands' values when
//! issued (see [`super::pe`]), so an entry may be reused once the issue
//! unit has passed the last use.

use kernbench_compiler::datapath::{Plan, Step};
use kernbench_compiler::ir::{Function, Region, Value};
use std::collections::BTreeSet;
use std::sync::Arc;

/// The definition position of a value no step defines.
const NEVER: u32 = u32::MAX;

/// The environment entry of every IR value (shared by every PE of a
/// launch), and how many entries a PE needs.
pub struct EnvSlots {
    /// Shared by every PE (and the threads of a launch).
    pub slot_of: Arc<[u32]>,
    pub count: usize,
    /// Per group, the inputs it may move (see [`last_use_moves`]).
    pub group_moves: Vec<u64>,
}

/// What one step of the plan reads and defines, and the regions it holds.
fn step_parts<'a>(func: &'a Function, plan: &'a Plan, step: Step) -> (&'a [Value], &'a [Value], &'a [Region]) {
    match step {
        Step::Inst(i) | Step::Relabel(i) | Step::Control(i) => {
            let d = func.inst(i);
            (&d.args, &d.results, &d.regions)
        }
        Step::Group(g) => {
            let group = &plan.groups[g];
            (&group.inputs, &group.outputs, &[])
        }
    }
}

/// Positions of the walk over the plan's steps (the order the issue unit
/// reads and writes the environment in; a fused group reads its inputs
/// and defines its outputs where the plan puts it): where each value is
/// defined and last used, and each step's span.
struct Walk<'f> {
    func: &'f Function,
    plan: &'f Plan,
    pos: u32,
    def: Vec<u32>,
    end: Vec<u32>,
    /// `[start, end]` of each step, in walk order.
    spans: Vec<(u32, u32)>,
}

impl<'f> Walk<'f> {
    fn new(func: &'f Function, plan: &'f Plan) -> Self {
        let n = func.values.len();
        let mut w = Walk {
            func,
            plan,
            pos: 0,
            def: vec![NEVER; n],
            end: vec![0; n],
            spans: Vec::new(),
        };
        w.number(func.body);
        let mut k = 0;
        w.uses(func.body, &mut Vec::new(), &mut k);
        w
    }

    /// Numbers region `r`'s steps; defines its parameters.
    fn number(&mut self, r: Region) {
        let (func, plan) = (self.func, self.plan);
        let start = self.next();
        let params = &func.region(r).params;
        for p in params {
            self.def[p.as_u32() as usize] = start;
        }
        for &step in plan.steps.get(r).map_or(&[][..], Vec::as_slice) {
            let (_, results, regions) = step_parts(func, plan, step);
            let at = self.next();
            for v in results {
                self.def[v.as_u32() as usize] = at;
            }
            let k = self.spans.len();
            self.spans.push((at, at));
            for &rr in regions {
                self.number(rr);
            }
            if !regions.is_empty() {
                self.spans[k].1 = self.next();
            }
        }
        let end = self.next();
        for p in params {
            self.live_to(*p, end);
        }
    }

    fn next(&mut self) -> u32 {
        let p = self.pos;
        self.pos += 1;
        p
    }

    fn live_to(&mut self, v: Value, at: u32) {
        let e = &mut self.end[v.as_u32() as usize];
        *e = (*e).max(at);
    }

    /// Records the uses in region `r`, visiting steps in the order
    /// `number` did (`k` counts them); `enclosing` are the spans of the
    /// steps whose regions contain `r`, outermost first.
    fn uses(&mut self, r: Region, enclosing: &mut Vec<(u32, u32)>, k: &mut usize) {
        let (func, plan) = (self.func, self.plan);
        for &step in plan.steps.get(r).map_or(&[][..], Vec::as_slice) {
            let (args, _, regions) = step_parts(func, plan, step);
            let span = self.spans[*k];
            *k += 1;
            for &a in args {
                self.use_at(a, span.0, enclosing);
            }
            enclosing.push(span);
            for &rr in regions {
                self.uses(rr, enclosing, k);
            }
            enclosing.pop();
        }
    }

    /// A use of `v` at `at`: alive to there, and to the end of the
    /// outermost enclosing step that starts after its definition.
    fn use_at(&mut self, v: Value, at: u32, enclosing: &[(u32, u32)]) {
        // A use of a value no step defines (none in a valid plan) keeps
        // it alive from the start: it must not share an entry.
        let def = &mut self.def[v.as_u32() as usize];
        if *def == NEVER {
            *def = 0;
        }
        let def = *def;
        let to = enclosing
            .iter()
            .find(|(start, _)| *start > def)
            .map_or(at, |(_, end)| (*end).max(at));
        self.live_to(v, to);
    }

    /// `v`'s live range; `None` for a value the issue unit never holds.
    fn range(&self, v: usize) -> Option<(u32, u32)> {
        let def = self.def[v];
        (def != NEVER).then(|| (def, self.end[v].max(def)))
    }
}

/// For each fused group of the walk's plan (by index), the inputs it
/// reads for the last time (bit `k` for input `k`, named once by the
/// group): the issue unit may move them out of the environment into the
/// operation it queues instead of copying them, since no later step reads
/// the entry before a new definition overwrites it.
///
/// **Why.** A copy of a block or a pending result increments a reference
/// count in memory the PE last touched long ago (cold once a launch has
/// thousands of PEs), and the entry's next definition decrements it
/// again; a move touches neither.
///
/// A use inside a region of a value defined outside it lives to the end
/// of the enclosing step (see [`Walk::use_at`]), so a loop body never
/// moves what its next iteration reads again.
fn last_use_moves(w: &Walk) -> Vec<u64> {
    let mut out = vec![0; w.plan.groups.len()];
    // The steps in `Walk::number`'s order: a region's steps, each followed
    // by its own regions' (depth first).
    fn visit(w: &Walk, r: Region, k: &mut usize, out: &mut [u64]) {
        let (func, plan) = (w.func, w.plan);
        for &step in plan.steps.get(r).map_or(&[][..], Vec::as_slice) {
            let (args, _, regions) = step_parts(func, plan, step);
            let at = w.spans[*k].0;
            *k += 1;
            if let Step::Group(g) = step {
                for (j, a) in args.iter().enumerate().take(64) {
                    let once = args.iter().filter(|b| *b == a).count() == 1;
                    if once && w.range(a.as_u32() as usize).is_some_and(|(_, end)| end == at) {
                        out[g] |= 1 << j;
                    }
                }
            }
            for &rr in regions {
                visit(w, rr, k, out);
            }
        }
    }
    visit(w, w.func.body, &mut 0, &mut out);
    out
}

impl EnvSlots {
    /// Assigns entries to `func`'s values: in order of definition, each
    /// takes the lowest entry free at that point (deterministic, and the
    /// values of one loop body end up next to each other).
    pub fn assign(func: &Function, plan: &Plan) -> EnvSlots {
        let n = func.values.len();
        let w = Walk::new(func, plan);
        // Values the issue unit never holds (those inside a fused group:
        // no step defines or reads them) need no entry; they get entry 0,
        // which they never touch.
        let mut order: Vec<(u32, u32, u32)> = (0..n)
            .filter_map(|v| w.range(v).map(|(def, end)| (def, v as u32, end)))
            .collect();
        order.sort_unstable();
        let mut slot_of = vec![0u32; n];
        let mut free = BTreeSet::new();
        // Live values by (end, slot): the ones ending first are freed first.
        let mut live = BTreeSet::new();
        let mut count = 0u32;
        for (def, v, end) in order {
            while let Some(&(e, s)) = live.first() {
                if e >= def {
                    break;
                }
                live.pop_first();
                free.insert(s);
            }
            let s = free.pop_first().unwrap_or_else(|| {
                count += 1;
                count - 1
            });
            slot_of[v as usize] = s;
            live.insert((end, s));
        }
        EnvSlots {
            slot_of: slot_of.into(),
            count: count as usize,
            group_moves: last_use_moves(&w),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kernbench_compiler::ir::Op;

    /// Lowers kernel `k` of `src` and plans it.
    fn lower(src: &str, k: &str) -> (Function, Plan) {
        use kernbench_compiler::sema;
        let mut s = sema::Session::new(sema::Options::default());
        s.add_file("t.tl", None, src.to_string());
        let (_, ir) = s.lower(k);
        let f = ir.unwrap_or_else(|_| panic!("`{k}` lowers"));
        let plan = kernbench_compiler::datapath::plan(&f, true);
        (f, plan)
    }

    const LOOP: &str = "@kernel\ndef k(p: ptr[i32], n: i32):\n    acc = 0\n    for i in range(n):\n        t = i * 2\n        u = t + 1\n        acc = acc + u\n    tl.store(p, acc)\n";

    /// Values with one entry are never live at once; entries are shared.
    #[test]
    fn shared_entries_never_hold_two_live_values() {
        let (f, plan) = lower(LOOP, "k");
        let s = EnvSlots::assign(&f, &plan);
        let w = Walk::new(&f, &plan);
        let n = f.values.len();
        for a in 0..n {
            for b in a + 1..n {
                let (Some((da, ea)), Some((db, eb))) = (w.range(a), w.range(b)) else {
                    continue;
                };
                if s.slot_of[a] == s.slot_of[b] {
                    assert!(ea < db || eb < da, "values {a} and {b} share an entry while both live");
                }
            }
        }
        assert!(s.count < n, "{} entries for {n} values: nothing shared", s.count);
    }

    /// A group moves the inputs it reads last (a block loaded in the loop
    /// body, the pointers computed there), never one defined before the
    /// loop that every iteration reads again, and nothing it names twice.
    #[test]
    fn groups_move_only_their_last_reads() {
        const SRC: &str = "@kernel\ndef k(p: ptr[i32], n: i32):\n    offs = tl.arange(0, 4)\n    x = tl.load(p + offs)\n    for i in range(n):\n        y = tl.load(p + offs + 4 * i)\n        tl.store(p + offs, x + y)\n    tl.store(p + offs, x * x)\n";
        let (f, _) = lower(SRC, "k");
        let (plan, _) = super::super::agu::sim_plan(&f);
        let moves = EnvSlots::assign(&f, &plan).group_moves;
        let w = Walk::new(&f, &plan);
        let (_, body) = f.insts.iter().find(|(_, d)| d.op == Op::For).expect("a loop");
        let body = body.regions[0];
        // `x`: the load outside the loop.
        let x = f
            .insts
            .iter()
            .find(|(i, d)| matches!(d.op, Op::Load { .. }) && !f.region(body).insts.contains(i))
            .map(|(_, d)| d.results[0]);
        let mut checked = 0;
        for &step in &plan.steps[body] {
            let Step::Group(g) = step else { continue };
            let group = &plan.groups[g];
            for (j, a) in group.inputs.iter().enumerate() {
                let moved = moves[g] >> j & 1 != 0;
                let (def, _) = w.range(a.as_u32() as usize).expect("held by the issue unit");
                let defined_in_body = def > w.spans.iter().find(|(s, e)| e > s).expect("the loop").0;
                // Every input of a group in this body is read once, by one
                // group: moved exactly when it is the body's own.
                assert_eq!(moved, defined_in_body, "input {j} ({a:?}) of group {g}");
                if Some(*a) == x {
                    assert!(
                        !moved,
                        "the block loaded before the loop is read again by the next iteration"
                    );
                    checked += 1;
                }
            }
        }
        assert_eq!(checked, 1, "the loop reads the block loaded before it once");
        assert!(moves.iter().any(|m| *m != 0), "nothing moves at all");
    }

    /// The rules the issue unit relies on: what a loop reads from outside
    /// lives to its end, a loop's parameters over its whole body, and its
    /// results from its start.
    #[test]
    fn loops_keep_what_they_read_and_write() {
        let (f, plan) = lower(LOOP, "k");
        let w = Walk::new(&f, &plan);
        let (_, d) = f.insts.iter().find(|(_, d)| d.op == Op::For).expect("a loop");
        let body = d.regions[0];
        // The loop is the kernel's only step with regions.
        let (start, end) = *w.spans.iter().find(|(s, e)| e > s).expect("the loop's span");
        // `n` (the bound) is read at the start.
        let ub = d.args[1];
        let range = |v: Value| w.range(v.as_u32() as usize).expect("held by the issue unit");
        assert!(range(ub).1 >= start);
        for p in &f.region(body).params {
            assert_eq!(range(*p), (start + 1, end - 1), "parameter {p:?}");
        }
        for r in &d.results {
            assert_eq!(range(*r).0, start, "result {r:?}");
        }
        // The constants the body reads, defined before the loop, live to
        // its end.
        for &step in &plan.steps[body] {
            let (args, _, _) = step_parts(&f, &plan, step);
            for a in args {
                let (def, last) = range(*a);
                if def < start {
                    assert!(
                        last >= end,
                        "{a:?} read in the body dies at {last} before the loop's end {end}"
                    );
                }
            }
        }
    }
}
