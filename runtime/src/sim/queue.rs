//! The simulator's event queue: events in order of time, ties broken by
//! the order they were scheduled in.
//!
//! A radix heap on times. It relies on the simulator never scheduling into
//! the past (every time pushed is at least the last time popped), which
//! holds for a discrete-event loop. An entry sits in the bucket numbered by
//! the highest bit in which its time differs from the last popped time;
//! bucket 0 holds the entries at that time, in a FIFO. Popping from an
//! empty bucket 0 empties the lowest non-empty bucket by moving its entries
//! to lower buckets relative to its minimum time. Each entry moves down at
//! most 64 times in all (in practice a few: pending events are close in
//! time), a few integer operations each: cheaper than a binary heap's
//! comparisons and moves for the thousands of pending events of a large
//! launch.
//!
//! Scheduling order at equal times holds because entries with equal times
//! are always in the same bucket (the bucket is a function of the time and
//! the last popped time), every push appends, and moving a bucket keeps
//! its order.

use std::collections::VecDeque;

/// Pending items of type `T`, popped by increasing time, in scheduling
/// order at equal times.
pub struct EventQueue<T> {
    /// The items at time `last`, in scheduling order.
    now: VecDeque<T>,
    /// `later[b - 1]` holds the entries whose highest bit of time differing
    /// from `last` is bit `b - 1`, in scheduling order among equal times.
    later: Vec<Vec<(u64, T)>>,
    /// Bit `b - 1` set when `later[b - 1]` is not empty (finds the lowest
    /// one without scanning).
    nonempty: u64,
    last: u64,
}

impl<T> Default for EventQueue<T> {
    fn default() -> Self {
        EventQueue {
            now: VecDeque::new(),
            later: (0..64).map(|_| Vec::new()).collect(),
            nonempty: 0,
            last: 0,
        }
    }
}

impl<T> EventQueue<T> {
    fn put(&mut self, t_ps: u64, item: T) {
        let d = t_ps ^ self.last;
        if d == 0 {
            self.now.push_back(item);
        } else {
            let b = 63 - d.leading_zeros() as usize;
            self.later[b].push((t_ps, item));
            self.nonempty |= 1 << b;
        }
    }

    /// Schedules `item` at time `t_ps`, which must not be before the time
    /// of the last item popped.
    pub fn push(&mut self, t_ps: u64, item: T) {
        debug_assert!(t_ps >= self.last, "an event scheduled in the past");
        // An item for the past would break the order; it runs now.
        self.put(t_ps.max(self.last), item);
    }

    /// Brings the earliest items into the FIFO for their time, which
    /// becomes the last popped time (nothing can be scheduled before them
    /// any more), if that time is before `limit`; false when there are
    /// none before it (and then nothing moves).
    fn refill_before(&mut self, limit: u64) -> bool {
        if !self.now.is_empty() {
            return self.last < limit;
        }
        if self.nonempty == 0 {
            return false;
        }
        let b = self.nonempty.trailing_zeros() as usize;
        let Some(min) = self.later[b].iter().map(|(t, _)| *t).min() else {
            return false;
        };
        if min >= limit {
            return false;
        }
        let mut moving = std::mem::take(&mut self.later[b]);
        self.nonempty &= !(1 << b);
        self.last = min;
        for (t, item) in moving.drain(..) {
            self.put(t, item);
        }
        // Keep the allocation for the next time this bucket fills.
        self.later[b] = moving;
        true
    }

    /// The earliest item and its time.
    #[cfg(test)]
    pub fn pop(&mut self) -> Option<(u64, T)> {
        self.pop_before(u64::MAX)
    }

    /// The earliest item and its time, if it is due before `limit`.
    #[inline]
    pub fn pop_before(&mut self, limit: u64) -> Option<(u64, T)> {
        if !self.refill_before(limit) {
            return None;
        }
        let item = self.now.pop_front()?;
        Some((self.last, item))
    }

    /// The time of the earliest item, leaving the queue as it is (items
    /// may still be scheduled before it, from the last popped time on).
    pub fn peek_time(&self) -> Option<u64> {
        if !self.now.is_empty() {
            return Some(self.last);
        }
        // The lowest bucket holds the earliest items.
        let b = (self.nonempty != 0).then(|| self.nonempty.trailing_zeros() as usize)?;
        self.later[b].iter().map(|(t, _)| *t).min()
    }

    /// The `k`-th item due at the time of the last pop, after those
    /// popped: what comes next unless it is empty, for prefetching.
    #[inline]
    pub fn peek_now(&self, k: usize) -> Option<&T> {
        self.now.get(k)
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.now.len() + self.later.iter().map(Vec::len).sum::<usize>()
    }

    #[cfg(test)]
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BinaryHeap;

    /// Against a binary heap of (time, sequence): a pseudo-random schedule
    /// of pushes at and after the current time, with many equal times,
    /// interleaved with pops.
    #[test]
    fn pops_in_time_then_scheduling_order() {
        let mut q = EventQueue::default();
        let mut reference = BinaryHeap::new();
        let mut seq = 0u64;
        let mut now = 0u64;
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for step in 0..20_000u32 {
            let r = next();
            if r % 3 != 0 || q.is_empty() {
                // Often at the present, sometimes far ahead.
                let dt = match r % 5 {
                    0 | 1 => 0,
                    2 => r >> 60,
                    3 => r >> 40,
                    _ => r >> 20,
                };
                seq += 1;
                q.push(now + dt, step);
                reference.push(std::cmp::Reverse((now + dt, seq, step)));
            } else {
                let predicted = (q.peek_now(0).copied(), q.peek_now(1).copied());
                let got = q.pop();
                if let Some(next) = predicted.0 {
                    // Items due now come first, in order.
                    assert_eq!(got.map(|(_, item)| item), Some(next), "peek_now(0) is the next pop");
                    assert_eq!(q.peek_now(0).copied(), predicted.1);
                }
                let std::cmp::Reverse((t, _, want)) = reference.pop().expect("same length");
                assert_eq!(got, Some((t, want)));
                now = t;
            }
            assert_eq!(q.len(), reference.len());
        }
        while let Some(std::cmp::Reverse((t, _, want))) = reference.pop() {
            assert_eq!(q.pop(), Some((t, want)));
        }
        assert_eq!(q.pop(), None);
    }
}
