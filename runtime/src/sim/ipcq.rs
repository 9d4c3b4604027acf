//! Inter-PE communication queues (IPCQ): one queue per ordered pair of
//! PEs that talk, with `n_slots` slots of `slot_size` bytes in the
//! receiver's buffer space. A message takes `ceil(bytes / slot_size)`
//! slots; the sender needs that many credits to start, and the receiver
//! returns them only after it has copied the message out of its slots.
//! Messages are matched in order: the k-th receive a rank issues from a
//! peer takes the k-th message that peer sent it, so queues are matched by
//! the peer's identity, never by a direction name.

use super::fabric::Route;
use kernbench_compiler::datapath::RtValue;
use rustc_hash::FxHashMap as HashMap;
use std::collections::VecDeque;
use std::rc::Rc;

pub struct Msg {
    pub data: RtValue,
    pub bytes: u64,
    pub slots: u32,
    /// When its last packet arrived in the receiver's slots.
    pub arrived_ps: Option<u64>,
}

pub struct Queue {
    /// The sender and the receiver (PE indices of the launch).
    pub src: u32,
    pub dst: u32,
    pub credits: u32,
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
}

impl Queue {
    pub fn msg(&self, m: u64) -> Option<&Msg> {
        m.checked_sub(self.first_msg).and_then(|k| self.msgs.get(k as usize))
    }

    /// Whether message `m` is in the receiver's slots: a receive of it can
    /// start (not yet sent, or still in flight: it cannot).
    pub fn arrived(&self, m: u64) -> bool {
        self.msg(m).is_some_and(|x| x.arrived_ps.is_some())
    }

    pub fn msg_mut(&mut self, m: u64) -> Option<&mut Msg> {
        m.checked_sub(self.first_msg)
            .and_then(move |k| self.msgs.get_mut(k as usize))
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
    index: HashMap<(u32, u32), u32>,
    n_slots: u32,
}

impl Queues {
    pub fn new(n_slots: u32) -> Queues {
        Queues {
            queues: Vec::new(),
            index: HashMap::default(),
            n_slots,
        }
    }

    /// The queue from PE `src` to PE `dst` (launch indices), created on
    /// first use.
    pub fn get(&mut self, src: u32, dst: u32) -> u32 {
        if let Some(&q) = self.index.get(&(src, dst)) {
            return q;
        }
        let q = self.queues.len() as u32;
        self.queues.push(Queue {
            src,
            dst,
            credits: self.n_slots,
            msgs: VecDeque::new(),
            first_msg: 0,
            recvs_issued: 0,
            credit_latency_ps: None,
            routes: [None, None],
        });
        self.index.insert((src, dst), q);
        q
    }

    pub fn n_slots(&self) -> u32 {
        self.n_slots
    }
}
