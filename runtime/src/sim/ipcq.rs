//! Inter-PE communication queues (IPCQ): one queue per ordered pair of
//! PEs that talk, with `n_slots` slots of `slot_size` bytes in the
//! receiver's buffer space. A message takes `ceil(bytes / slot_size)`
//! slots; the sender needs that many credits to start, and the receiver
//! returns them only after it has copied the message out of its slots.
//! Messages are matched in order: the k-th receive a rank issues from a
//! peer takes the k-th message that peer sent it, so queues are matched by
//! the peer's identity, never by a direction name.
//!
//! `tl.barrier` moves its tokens over *control* queues: a second queue per
//! ordered pair, kept apart from the data queue so that a token never
//! takes the place of a message a receive is waiting for.
//!
//! A queue between PEs of two logical processes (two SIPs of a launch run
//! in windows, `events.rs`) is kept as two halves, one in each: the
//! sender's (credits, messages sent) and the receiver's (messages
//! arrived, receives issued). Messages and credits travel between them as
//! hand-offs, never by one side touching the other's half.

use super::fabric::Route;
use kernbench_compiler::datapath::RtValue;
use rustc_hash::FxHashMap as HashMap;
use std::collections::VecDeque;
use std::rc::Rc;

/// A message in its queue. One cache line, aligned (40 bytes at any
/// offset would often take two): its send writes it, its receive reads
/// it, each cold on a launch of thousands of PEs.
#[repr(align(64))]
pub struct Msg {
    pub data: RtValue,
    pub bytes: u64,
    pub slots: u32,
    /// The `tl.send` that sent it (its value's type is the message's).
    pub sent_by: kernbench_compiler::ir::Inst,
    /// When its last packet arrives in the receiver's slots (known when
    /// its send starts, which is when the message enters the queue).
    pub arrived_ps: u64,
}

/// A queue's state: three cache lines, aligned (at any offset it would
/// span four more often than not). A send and its receive each read most
/// of it, cold on a launch of thousands of PEs.
#[repr(align(64))]
pub struct Queue {
    /// The sender and the receiver (PE indices of the launch).
    pub src: u32,
    pub dst: u32,
    /// Which side of the queue this is.
    pub half: Half,
    /// A control queue (barrier tokens).
    pub control: bool,
    /// Messages sent so far (the next send's message number).
    pub sent: u64,
    /// Credits at the sender, not counting those still travelling back.
    pub credits: u32,
    /// The queue's slots (more across SIPs when the IPCQ says so).
    pub n_slots: u32,
    /// Credits travelling back to the sender: when each batch arrives and
    /// how many, in order of arrival (they are returned in consumption
    /// order over one route).
    pub returning: VecDeque<(u64, u32)>,
    /// The sender's send engine waits for this queue's credits: a return
    /// must kick it.
    pub sender_waiting: bool,
    /// Messages `first_msg ..` not yet consumed, in send order.
    pub msgs: VecDeque<Msg>,
    pub first_msg: u64,
    /// Receives issued so far (the next receive claims this message).
    pub recvs_issued: u64,
    /// How long a credit takes back from the receiver to the sender, once
    /// asked (a route's latency: the same for every message).
    pub credit_latency_ps: Option<u64>,
    /// The routes into the receiver's slots (from the sender's core) and
    /// out of them (to the receiver's core), once asked: the same for
    /// every message.
    pub routes: [Option<Rc<Route>>; 2],
    /// The receiver's receive engine is held by the receive of this
    /// message, not sent yet, which may start no earlier than the given
    /// time (its dispatch, and when the engine is free: neither changes
    /// while it waits). Kept here so that the send, when it starts, finds
    /// it without reaching into the receiver's engine.
    pub waiting_recv: Option<(u64, u64)>,
    /// A control queue's receiver waits for token `msg` (its send has not
    /// started): the send fills the slot with the token's arrival.
    pub token_waiter: Option<(u64, Rc<super::pe::Slot>)>,
}

const _: () = assert!(std::mem::size_of::<Msg>() == 64);
const _: () = assert!(std::mem::size_of::<Queue>() == 192);

/// Which side of a queue a [`Queue`] holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Half {
    /// Sender and receiver in one logical process: the whole queue.
    Both,
    /// The sender's side (credits, messages sent).
    Send,
    /// The receiver's side (messages arrived, receives issued).
    Recv,
}

impl Queue {
    pub fn msg(&self, m: u64) -> Option<&Msg> {
        m.checked_sub(self.first_msg).and_then(|k| self.msgs.get(k as usize))
    }

    /// When message `m`'s last packet reaches the receiver's slots, once
    /// its send has started (`None` before); a receive of it starts no
    /// earlier.
    pub fn arrival_ps(&self, m: u64) -> Option<u64> {
        self.msg(m).map(|x| x.arrived_ps)
    }

    /// Credits at the sender at time `now_ps` (those back by then are
    /// counted in).
    pub fn credits_at(&mut self, now_ps: u64) -> u32 {
        while let Some(&(t, n)) = self.returning.front() {
            if t > now_ps {
                break;
            }
            self.credits += n;
            self.returning.pop_front();
        }
        self.credits
    }

    /// Credits the sender will hold at `now_ps`, counting those back by
    /// then, without taking them in (for the diagnostics, which only read).
    pub fn credits_by(&self, now_ps: u64) -> u32 {
        let back: u32 = self
            .returning
            .iter()
            .take_while(|&&(t, _)| t <= now_ps)
            .map(|&(_, n)| n)
            .sum();
        self.credits + back
    }

    /// When the sender has `need` credits counting those travelling back;
    /// `None` when even all of them are too few.
    pub fn credits_back_by(&self, need: u32) -> Option<u64> {
        let mut have = self.credits;
        for &(t, n) in &self.returning {
            have += n;
            if have >= need {
                return Some(t);
            }
        }
        None
    }

    /// Drops consumed messages from the front (receives consume in order).
    pub fn consume(&mut self, m: u64) {
        if m == self.first_msg {
            self.msgs.pop_front();
            self.first_msg += 1;
        }
    }
}

#[derive(Default)]
pub struct Queues {
    pub queues: Vec<Queue>,
    /// By sender, receiver, whether it is a control queue, and side.
    index: HashMap<(u32, u32, bool, Half), u32>,
    /// Slots of a queue within a SIP, and of one across SIPs.
    n_slots: u32,
    n_slots_across_sips: u32,
}

impl Queues {
    pub fn new(n_slots: u32, n_slots_across_sips: u32) -> Queues {
        Queues {
            queues: Vec::new(),
            index: HashMap::default(),
            n_slots,
            n_slots_across_sips,
        }
    }

    /// Side `half` of the data queue (`control`: the barrier's control
    /// queue) from PE `src` to PE `dst` (launch indices), created on first
    /// use, with the slots of a queue `across_sips` or not; whether it is
    /// new.
    pub fn get(&mut self, src: u32, dst: u32, control: bool, half: Half, across_sips: bool) -> (u32, bool) {
        if let Some(&q) = self.index.get(&(src, dst, control, half)) {
            return (q, false);
        }
        let n_slots = if across_sips {
            self.n_slots_across_sips
        } else {
            self.n_slots
        };
        let q = self.queues.len() as u32;
        self.queues.push(Queue {
            src,
            dst,
            half,
            control,
            sent: 0,
            credits: n_slots,
            n_slots,
            returning: VecDeque::new(),
            sender_waiting: false,
            msgs: VecDeque::new(),
            first_msg: 0,
            recvs_issued: 0,
            credit_latency_ps: None,
            routes: [None, None],
            waiting_recv: None,
            token_waiter: None,
        });
        self.index.insert((src, dst, control, half), q);
        (q, true)
    }

    /// The queue already made for this key, if any.
    pub fn find(&self, src: u32, dst: u32, control: bool, half: Half) -> Option<u32> {
        self.index.get(&(src, dst, control, half)).copied()
    }
}
