//! The fabric: where every PE, memory and port sits, the route a transfer
//! takes between two endpoints, and each link as a FIFO server with a
//! reservation (`free_at_ps`).
//!
//! **Physical layout** (documented in `docs/hardware-model.md`):
//! - inside a cube, 4 corner routers on a 2×2 grid (corner `c` at
//!   `x = c % 2, y = c / 2`), joined by directed router links and routed
//!   XY; each PE attaches to its corner router by a directed link pair;
//! - each PE's HBM slice sits behind its own controller of
//!   `pseudo_channels` channels: the PE reaches it through a private port,
//!   other PEs through the owner's corner router; the channel of a byte is
//!   `(address / interleave_bytes) % pseudo_channels`;
//! - the cube's SRAM hangs off corner router 0 through one port;
//! - cubes of a SIP form a `w × h` mesh joined by directed UCIe ports and
//!   routed XY; a transfer leaves a cube eastwards from corner 1,
//!   westwards and northwards from corner 0, southwards from corner 2;
//! - SIPs are joined at their IO-chiplet cube by directed SIP links, along
//!   the ring, torus or mesh of `system.sip_topology`.
//!
//! **Timing of a transfer** (wormhole with store-and-forward of the head
//! packet): the head packet of `h = min(bytes, packet_bytes)` enters link
//! `i` at `e_i = max(arrival_i, free_at_i)` and reaches the next link at
//! `e_i + ser_i(h) + latency_i`; the tail leaves link `i` at
//! `max(e_i + ser_i(bytes), tail_{i-1} + latency_{i-1} + ser_i(h))`. The link itself is
//! busy for `ser_i(bytes)` from `e_i` (packets of other transfers fill the
//! gaps when an upstream link is slower). On an idle path this is exactly
//! `Σ latency_i + Σ ser_i(h) + ser_bottleneck(bytes − h)`: the DESIGN's
//! `latency_sum + bytes / bottleneck_bandwidth` up to the head packet's
//! store-and-forward. Transfers that share a link queue behind each other
//! (FIFO in reservation order), so N flows through one link take about N
//! times as long. All arithmetic is on integers.

use super::divisor::Divisor;
use crate::topology::{PeCoord, SipTopology, Topology};
use rustc_hash::FxHashMap as HashMap;
use std::cell::{Cell, Ref, RefCell};
use std::rc::Rc;

/// A link's identity. Directed links name both ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LinkId {
    /// A PE's link to its corner router (`up`) or back (`!up`).
    PeLink { at: PeCoord, up: bool },
    /// Between two corner routers of a cube.
    RouterHop { sip: u32, cube: u32, from: u8, to: u8 },
    /// UCIe between neighbouring cubes of a SIP.
    Ucie { sip: u32, from: u32, to: u32 },
    /// Between neighbouring SIPs.
    SipLink { from: u32, to: u32 },
    /// One pseudo-channel of a PE's HBM controller.
    HbmChannel { at: PeCoord, channel: u16 },
    /// A cube's SRAM port.
    SramPort { sip: u32, cube: u32 },
    /// A PE's TCM read or write port.
    Tcm { at: PeCoord, write: bool },
    /// The host's PCIe link to a SIP's IO chiplet.
    Pcie { sip: u32 },
}

/// Link classes, in the order reports list them.
pub const LINK_CLASSES: [&str; 9] = [
    "pe<->router",
    "router mesh",
    "ucie",
    "sip link",
    "hbm channel",
    "sram port",
    "tcm read",
    "tcm write",
    "pcie",
];

impl LinkId {
    /// Index into [`LINK_CLASSES`].
    pub fn class(self) -> usize {
        match self {
            LinkId::PeLink { .. } => 0,
            LinkId::RouterHop { .. } => 1,
            LinkId::Ucie { .. } => 2,
            LinkId::SipLink { .. } => 3,
            LinkId::HbmChannel { .. } => 4,
            LinkId::SramPort { .. } => 5,
            LinkId::Tcm { write: false, .. } => 6,
            LinkId::Tcm { write: true, .. } => 7,
            LinkId::Pcie { .. } => 8,
        }
    }

    /// The SIP the link belongs to (a SIP link to the one it leaves).
    pub fn sip(self) -> u32 {
        match self {
            LinkId::PeLink { at, .. } | LinkId::HbmChannel { at, .. } | LinkId::Tcm { at, .. } => at.sip,
            LinkId::RouterHop { sip, .. }
            | LinkId::Ucie { sip, .. }
            | LinkId::SramPort { sip, .. }
            | LinkId::Pcie { sip } => sip,
            LinkId::SipLink { from, .. } => from,
        }
    }

    pub fn class_name(self) -> &'static str {
        LINK_CLASSES[self.class()]
    }

    pub fn describe(self) -> String {
        match self {
            LinkId::PeLink { at, up: true } => format!("PE→router of {at}"),
            LinkId::PeLink { at, up: false } => format!("router→PE of {at}"),
            LinkId::RouterHop { sip, cube, from, to } => {
                format!("router hop corner {from}→{to} in (sip {sip}, cube {cube})")
            }
            LinkId::Ucie { sip, from, to } => format!("UCIe cube {from}→{to} in sip {sip}"),
            LinkId::SipLink { from, to } => format!("SIP link {from}→{to}"),
            LinkId::HbmChannel { at, channel } => format!("HBM pseudo-channel {channel} of {at}"),
            LinkId::SramPort { sip, cube } => format!("SRAM port of (sip {sip}, cube {cube})"),
            LinkId::Tcm { at, write } => format!("TCM {} port of {at}", if write { "write" } else { "read" }),
            LinkId::Pcie { sip } => format!("PCIe host link of sip {sip}"),
        }
    }
}

/// Something a transfer starts or ends at.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Endpoint {
    /// A PE's core (its engines and registers).
    Core(PeCoord),
    /// A PE's TCM scratchpad.
    Tcm(PeCoord),
    /// A PE's HBM slice.
    Hbm(PeCoord),
    /// A cube's shared SRAM.
    Sram { sip: u32, cube: u32 },
}

impl Endpoint {
    pub fn sip(self) -> u32 {
        match self {
            Endpoint::Core(p) | Endpoint::Tcm(p) | Endpoint::Hbm(p) => p.sip,
            Endpoint::Sram { sip, .. } => sip,
        }
    }
}

/// A link's parameters and state. Times are integer picoseconds.
/// One cache line each: a transfer books several links, each cold once a
/// launch has thousands of PEs, and a link across two lines costs two
/// misses.
#[derive(Clone, Debug)]
#[repr(align(64))]
pub struct Link {
    pub id: LinkId,
    /// Bandwidth in bytes per microsecond (bytes/ns × 1000), so that
    /// `ser(b) = ceil(b * 10^6 / bw)` ps stays integral.
    pub bw_bytes_per_us: u64,
    pub latency_ps: u64,
    pub free_at_ps: u64,
    pub busy_ps: u64,
    pub bytes: u64,
    /// How long transfers waited for it, summed (its contention).
    pub wait_ps: u64,
}

// A field added to `Link` must keep it to one line.
const _: () = assert!(std::mem::size_of::<Link>() == 64);

impl Link {
    /// Counts the part before `stop` of a use that arrived at `arrive`
    /// and held the link over `[start, end)` moving `bytes` (out of line:
    /// only a run stopped by its time limit has uses past the stop).
    #[cold]
    #[inline(never)]
    fn count_until(
        &mut self,
        stop: u64,
        (arrive, start, end): (u64, u64, u64),
        bytes: u64,
        record: &mut Option<Vec<(u32, u64, u64)>>,
        index: u32,
    ) {
        self.wait_ps += start.min(stop) - arrive.min(stop);
        if start >= stop {
            return;
        }
        let kept = stop - start;
        self.busy_ps += kept;
        self.bytes += (u128::from(bytes) * u128::from(kept) / u128::from(end - start)) as u64;
        if let Some(r) = record {
            r.push((index, start, stop));
        }
    }
}

/// `ceil(bytes / bandwidth)` in picoseconds.
#[inline]
pub fn ser_ps(bytes: u64, bw_bytes_per_us: u64) -> u64 {
    let bw = bw_bytes_per_us.max(1);
    // In u64 whenever the product fits (any transfer below 18 TB): the
    // same quotient without a 128-bit division.
    match bytes.checked_mul(1_000_000) {
        Some(p) => p.div_ceil(bw),
        None => (bytes as u128 * 1_000_000).div_ceil(bw as u128) as u64,
    }
}

/// Bytes/ns as an integer bytes/µs.
pub fn bw_per_us(bytes_per_ns: f64) -> u64 {
    (bytes_per_ns * 1000.0).round().max(1.0) as u64
}

/// One stage of a route.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    Link(u32),
    /// A PE's HBM controller: `channels` consecutive links from `first`;
    /// the bytes split over them by address.
    Hbm {
        first: u32,
        owner: PeCoord,
    },
}

/// The stages a transfer crosses, in the direction data flows.
#[derive(Clone, Debug, Default)]
pub struct Route {
    pub stages: Stages,
    /// The per-stage costs of the last byte count booked over it, when
    /// every stage is a link (see [`Fabric::link_costs`]).
    costs: RefCell<LinkCosts>,
}

impl Route {
    fn new(stages: Stages) -> Route {
        Route {
            stages,
            costs: RefCell::default(),
        }
    }
}

/// A route's per-stage (serialization of all bytes, of the head, latency)
/// for `bytes` (`None`: none yet). A link's costs depend only on the byte
/// count and its fixed bandwidth and latency, and a kernel sends the same
/// size over the same route again and again: booking then reads them
/// instead of looking each stage's up (0.8 % of the instructions of the
/// 256-PE ring benchmark).
#[derive(Clone, Debug, Default)]
struct LinkCosts {
    bytes: Option<u64>,
    per_stage: smallvec::SmallVec<[(u64, u64, u64); 6]>,
}

/// A route's stages, inline for the usual short route: every transfer
/// walks them, and with thousands of PEs a separate allocation is one
/// more cache miss per transfer.
pub type Stages = smallvec::SmallVec<[Stage; 6]>;

/// The result of scheduling a transfer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transfer {
    /// When the head entered the first link.
    pub start_ps: u64,
    /// When the tail left the first stage (the sender may move on).
    pub injected_ps: u64,
    /// When the last byte arrived.
    pub end_ps: u64,
}

/// Where a transfer being reserved stands before stage `stage`: its head
/// reaches that stage at `arrive_ps`, its tail left the stage before at
/// `prev_tail_ps` (none before the first), and its first stage's start
/// and injection once booked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Progress {
    pub stage: usize,
    pub arrive_ps: u64,
    pub prev_tail_ps: Option<u64>,
    pub start_ps: Option<u64>,
    pub injected_ps: u64,
}

impl Progress {
    /// The transfer's times so far: its start and injection, and when
    /// its tail reaches the next stage (or leaves the last).
    fn so_far(&self) -> Transfer {
        Transfer {
            start_ps: self.start_ps.unwrap_or(self.arrive_ps),
            injected_ps: self.injected_ps,
            end_ps: self.prev_tail_ps.unwrap_or(self.arrive_ps),
        }
    }

    /// A transfer about to enter its first stage at `t0`.
    pub fn at_start(t0: u64) -> Progress {
        Progress {
            stage: 0,
            arrive_ps: t0,
            prev_tail_ps: None,
            start_ps: None,
            injected_ps: t0,
        }
    }
}

/// What [`Fabric::reserve_within`] booked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Booked {
    /// The whole route: the transfer's times.
    Done(Transfer),
    /// Up to a stage on another SIP: the times so far (`end_ps`: when the
    /// tail reaches that stage), and where the transfer stands there.
    HandOff(Transfer, Progress),
}

/// An idle-path cost, broken down.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PathCost {
    /// Sum of link latencies.
    pub latency_ps: u64,
    /// Store-and-forward of the head packet over every link.
    pub head_ps: u64,
    /// The rest of the bytes at the bottleneck.
    pub stream_ps: u64,
    /// The slowest stage's bandwidth for these bytes (an HBM stage's is
    /// its busiest pseudo-channel's share): exact, not the bytes over the
    /// integer serialization time, which rounds up (1 byte at 25.6 GB/s
    /// takes 40 ps, not 39.06).
    pub bottleneck_bytes_per_us: u64,
    /// Latency per link class (indexed like [`LINK_CLASSES`]).
    pub latency_by_class_ps: [u64; 9],
}

impl PathCost {
    pub fn total_ps(&self) -> u64 {
        self.latency_ps + self.head_ps + self.stream_ps
    }
}

/// A fabric's links, for a copy on another thread ([`Fabric::seed`]).
pub struct FabricSeed {
    topo: Topology,
    links: Vec<Link>,
    index: HashMap<LinkId, u32>,
    packet_bytes: u64,
    record: bool,
    stats_until_ps: u64,
}

pub struct Fabric {
    topo: Topology,
    pub links: Vec<Link>,
    index: HashMap<LinkId, u32>,
    routes: HashMap<(Endpoint, Endpoint), Rc<Route>>,
    pub packet_bytes: u64,
    /// Statistics (busy time, bytes, waits, recorded intervals) count only
    /// what happens before this time: a launch stopped by its time limit
    /// reports up to there, not the rest of the transfers it had booked.
    pub stats_until_ps: u64,
    channels: u32,
    /// By the channel count and by the interleave.
    channels_div: Divisor,
    interleave: Divisor,
    /// When set, each reservation's (link, start, end) is recorded (trace).
    pub record: Option<Vec<(u32, u64, u64)>>,
    ser: SerMemo,
}

/// Serialization times already computed, by byte count and bandwidth. A
/// run books the same few sizes on the same few link classes millions of
/// times, and each is a 64-bit division (tens of cycles); a hit here is a
/// hash and two compares. It only caches [`ser_ps`], so results are the
/// same bits.
struct SerMemo([Cell<(u64, u64, u64)>; 64]);

impl SerMemo {
    fn new() -> SerMemo {
        // (0 bytes, 1 B/us) takes 0 ps: every entry starts out true.
        SerMemo(std::array::from_fn(|_| Cell::new((0, 1, 0))))
    }

    /// The entry a key lives in.
    #[inline]
    fn entry_of(bytes: u64, bw_bytes_per_us: u64) -> usize {
        ((bytes ^ bw_bytes_per_us.rotate_left(29)).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 58) as usize
    }

    #[inline]
    fn ser_ps(&self, bytes: u64, bw_bytes_per_us: u64) -> u64 {
        let entry = &self.0[Self::entry_of(bytes, bw_bytes_per_us)];
        let (b, bw, ser) = entry.get();
        if b == bytes && bw == bw_bytes_per_us {
            return ser;
        }
        let ser = ser_ps(bytes, bw_bytes_per_us);
        entry.set((bytes, bw_bytes_per_us, ser));
        ser
    }
}

impl Fabric {
    pub fn new(topo: &Topology) -> Fabric {
        let c = &topo.spec.pe.hbm_controller;
        Fabric {
            topo: topo.clone(),
            links: Vec::new(),
            index: HashMap::default(),
            routes: HashMap::default(),
            packet_bytes: topo.spec.fabric.packet_bytes.0,
            stats_until_ps: u64::MAX,
            channels: c.pseudo_channels.0 as u32,
            channels_div: Divisor::new(c.pseudo_channels.0),
            interleave: Divisor::new(c.interleave_bytes.0),
            record: None,
            ser: SerMemo::new(),
        }
    }

    /// What another thread needs to make a copy of this fabric (its links
    /// as they stand; routes are found again there).
    pub fn seed(&self) -> FabricSeed {
        FabricSeed {
            topo: self.topo.clone(),
            links: self.links.clone(),
            index: self.index.clone(),
            packet_bytes: self.packet_bytes,
            record: self.record.is_some(),
            stats_until_ps: self.stats_until_ps,
        }
    }

    /// A fabric like the one `seed` was taken from.
    pub fn from_seed(seed: &FabricSeed) -> Fabric {
        let mut f = Fabric::new(&seed.topo);
        f.links = seed.links.clone();
        f.index = seed.index.clone();
        f.packet_bytes = seed.packet_bytes;
        f.record = seed.record.then(Vec::new);
        f.stats_until_ps = seed.stats_until_ps;
        f
    }

    /// Takes the state of `links` (from a copy of this fabric), creating
    /// those it does not have yet.
    pub fn absorb(&mut self, links: impl IntoIterator<Item = Link>) {
        for l in links {
            let i = self.link_index(l.id);
            self.links[i as usize] = l;
        }
    }

    /// Zeroes every link's statistics (busy time, bytes), keeping the
    /// reservations: a new launch on a machine that keeps running.
    pub fn reset_stats(&mut self) {
        for l in &mut self.links {
            l.busy_ps = 0;
            l.bytes = 0;
            l.wait_ps = 0;
        }
    }

    fn spec(&self, id: LinkId) -> (f64, f64) {
        let s = &self.topo.spec;
        match id {
            LinkId::PeLink { .. } | LinkId::RouterHop { .. } => (
                s.cube.router.link_bandwidth_bytes_per_ns.0,
                s.cube.router.hop_latency_ns.0,
            ),
            LinkId::Ucie { .. } => (self.topo.ucie_bandwidth_bytes_per_ns(), s.sip.ucie.latency_ns.0),
            LinkId::SipLink { .. } => (
                s.system.sip_link.bandwidth_bytes_per_ns.0,
                s.system.sip_link.latency_ns.0,
            ),
            LinkId::HbmChannel { .. } => {
                let c = &s.pe.hbm_controller;
                (c.channel_bandwidth_bytes_per_ns.0 * c.efficiency.0, c.latency_ns.0)
            }
            LinkId::SramPort { .. } => (s.cube.sram.bandwidth_bytes_per_ns.0, s.cube.sram.latency_ns.0),
            LinkId::Tcm { write: false, .. } => (s.pe.tcm.read_bandwidth_bytes_per_ns.0, s.pe.tcm.latency_ns.0),
            LinkId::Tcm { write: true, .. } => (s.pe.tcm.write_bandwidth_bytes_per_ns.0, s.pe.tcm.latency_ns.0),
            LinkId::Pcie { .. } => (s.host.pcie.bandwidth_bytes_per_ns.0, s.host.pcie.latency_ns.0),
        }
    }

    /// The dense index of a link, creating it on first use.
    pub fn link_index(&mut self, id: LinkId) -> u32 {
        if let Some(&i) = self.index.get(&id) {
            return i;
        }
        let (bw, lat) = self.spec(id);
        let i = self.links.len() as u32;
        self.links.push(Link {
            id,
            bw_bytes_per_us: bw_per_us(bw),
            latency_ps: Topology::ns_to_ps(lat),
            free_at_ps: 0,
            busy_ps: 0,
            bytes: 0,
            wait_ps: 0,
        });
        self.index.insert(id, i);
        i
    }

    /// The dense index of a link that exists.
    pub fn link_index_of(&self, id: LinkId) -> Option<u32> {
        self.index.get(&id).copied()
    }

    fn corner(&self, pe: u32) -> u8 {
        let per = self.topo.spec.cube.pe_layout.pe_per_corner.0 as u32;
        (pe / per).min(3) as u8
    }

    /// Router hops between two corners of one cube (XY on the 2×2 grid).
    fn corner_path(&mut self, sip: u32, cube: u32, from: u8, to: u8, out: &mut Stages) {
        let (mut x, mut y) = (from % 2, from / 2);
        let (tx, ty) = (to % 2, to / 2);
        while x != tx {
            let nx = if tx > x { x + 1 } else { x - 1 };
            let l = self.link_index(LinkId::RouterHop {
                sip,
                cube,
                from: y * 2 + x,
                to: y * 2 + nx,
            });
            out.push(Stage::Link(l));
            x = nx;
        }
        while y != ty {
            let ny = if ty > y { y + 1 } else { y - 1 };
            let l = self.link_index(LinkId::RouterHop {
                sip,
                cube,
                from: y * 2 + x,
                to: ny * 2 + x,
            });
            out.push(Stage::Link(l));
            y = ny;
        }
    }

    /// The corner a cube's port towards a neighbour in direction
    /// `(dx, dy)` sits at.
    fn port_corner(dx: i32, dy: i32) -> u8 {
        match (dx, dy) {
            (1, _) => 1,
            (_, 1) => 2,
            _ => 0,
        }
    }

    /// From corner `c0` of `cube0` to corner `c1` of `cube1` in one SIP.
    fn cube_path(&mut self, sip: u32, (cube0, c0): (u32, u8), (cube1, c1): (u32, u8), out: &mut Stages) {
        let (w, _) = self.topo.cube_grid();
        let (mut x, mut y) = ((cube0 % w) as i32, (cube0 / w) as i32);
        let (tx, ty) = ((cube1 % w) as i32, (cube1 / w) as i32);
        let mut corner = c0;
        while (x, y) != (tx, ty) {
            let (dx, dy) = if x != tx {
                ((tx - x).signum(), 0)
            } else {
                (0, (ty - y).signum())
            };
            let here = (y * w as i32 + x) as u32;
            self.corner_path(sip, here, corner, Self::port_corner(dx, dy), out);
            let (nx, ny) = (x + dx, y + dy);
            let next = (ny * w as i32 + nx) as u32;
            let l = self.link_index(LinkId::Ucie {
                sip,
                from: here,
                to: next,
            });
            out.push(Stage::Link(l));
            corner = Self::port_corner(-dx, -dy);
            x = nx;
            y = ny;
        }
        self.corner_path(sip, cube1, corner, c1, out);
    }

    /// SIP links from `s0` to `s1`: X then Y over the SIP grid, the short
    /// way round when it wraps (ring, torus).
    fn sip_path(&mut self, s0: u32, s1: u32, out: &mut Stages) {
        let [gw, gh] = self.topo.spec.system.sip_grid;
        let (w, h) = (gw.0 as i32, gh.0 as i32);
        let wrap = self.topo.spec.system.sip_topology != SipTopology::Mesh2d;
        let (mut x, mut y) = (s0 as i32 % w, s0 as i32 / w);
        let (tx, ty) = (s1 as i32 % w, s1 as i32 / w);
        let step = |from: i32, to: i32, n: i32| -> i32 {
            let fwd = (to - from).rem_euclid(n);
            if !wrap {
                (to - from).signum()
            } else if fwd <= n - fwd {
                1
            } else {
                -1
            }
        };
        while x != tx {
            let nx = (x + step(x, tx, w)).rem_euclid(w);
            let l = self.link_index(LinkId::SipLink {
                from: (y * w + x) as u32,
                to: (y * w + nx) as u32,
            });
            out.push(Stage::Link(l));
            x = nx;
        }
        while y != ty {
            let ny = (y + step(y, ty, h)).rem_euclid(h);
            let l = self.link_index(LinkId::SipLink {
                from: (y * w + x) as u32,
                to: (ny * w + x) as u32,
            });
            out.push(Stage::Link(l));
            y = ny;
        }
    }

    /// Router-level path between corner routers anywhere in the machine.
    fn router_path(&mut self, (sip0, cube0, c0): (u32, u32, u8), (sip1, cube1, c1): (u32, u32, u8), out: &mut Stages) {
        if sip0 == sip1 {
            self.cube_path(sip0, (cube0, c0), (cube1, c1), out);
            return;
        }
        let io = self.topo.spec.sip.io_chiplet_cube as u32;
        self.cube_path(sip0, (cube0, c0), (io, 0), out);
        self.sip_path(sip0, sip1, out);
        self.cube_path(sip1, (io, 0), (cube1, c1), out);
    }

    fn hbm_stage(&mut self, owner: PeCoord) -> Stage {
        let first = self.link_index(LinkId::HbmChannel { at: owner, channel: 0 });
        for ch in 1..self.channels {
            // Channels are created together so they are consecutive.
            let i = self.link_index(LinkId::HbmChannel {
                at: owner,
                channel: ch as u16,
            });
            debug_assert_eq!(i, first + ch);
        }
        Stage::Hbm { first, owner }
    }

    /// Where an endpoint attaches to the router network: (sip, cube, corner).
    fn attach(&self, e: Endpoint) -> (u32, u32, u8) {
        match e {
            Endpoint::Core(p) | Endpoint::Tcm(p) | Endpoint::Hbm(p) => (p.sip, p.cube, self.corner(p.pe)),
            Endpoint::Sram { sip, cube } => (sip, cube, 0),
        }
    }

    /// The route data takes from `from` to `to` (cached).
    pub fn route(&mut self, from: Endpoint, to: Endpoint) -> Rc<Route> {
        if let Some(r) = self.routes.get(&(from, to)) {
            return r.clone();
        }
        let r = Rc::new(self.compute_route(from, to));
        self.routes.insert((from, to), r.clone());
        r
    }

    /// The route between PE `core`'s core and `far`: towards `far` when
    /// `to_far` (a write), from it otherwise (a read).
    pub fn core_route(&mut self, core: PeCoord, far: Endpoint, to_far: bool) -> Rc<Route> {
        if to_far {
            self.route(Endpoint::Core(core), far)
        } else {
            self.route(far, Endpoint::Core(core))
        }
    }

    fn compute_route(&mut self, from: Endpoint, to: Endpoint) -> Route {
        use Endpoint as E;
        let mut s = Stages::new();
        // Private ports of one PE: its TCM and its own HBM slice.
        match (from, to) {
            (E::Core(a), E::Tcm(b)) | (E::Tcm(b), E::Core(a)) if a == b => {
                let write = matches!(to, E::Tcm(_));
                s.push(Stage::Link(self.link_index(LinkId::Tcm { at: a, write })));
                return Route::new(s);
            }
            (E::Core(a), E::Hbm(b)) | (E::Hbm(b), E::Core(a)) if a == b => {
                s.push(self.hbm_stage(a));
                return Route::new(s);
            }
            _ => {}
        }
        self.leave(from, &mut s);
        let (a, b) = (self.attach(from), self.attach(to));
        self.router_path(a, b, &mut s);
        self.enter(to, &mut s);
        Route::new(s)
    }

    /// The stages from endpoint `from` to its router (a PE's TCM is
    /// behind its TCM read port and its router link).
    fn leave(&mut self, from: Endpoint, s: &mut Stages) {
        use Endpoint as E;
        match from {
            E::Core(p) => s.push(Stage::Link(self.link_index(LinkId::PeLink { at: p, up: true }))),
            E::Tcm(p) => {
                s.push(Stage::Link(self.link_index(LinkId::Tcm { at: p, write: false })));
                s.push(Stage::Link(self.link_index(LinkId::PeLink { at: p, up: true })));
            }
            E::Hbm(p) => s.push(self.hbm_stage(p)),
            E::Sram { sip, cube } => s.push(Stage::Link(self.link_index(LinkId::SramPort { sip, cube }))),
        }
    }

    /// The stages from its router into endpoint `to` (a PE's TCM through
    /// its router link, then its TCM write port).
    fn enter(&mut self, to: Endpoint, s: &mut Stages) {
        use Endpoint as E;
        match to {
            E::Core(p) => s.push(Stage::Link(self.link_index(LinkId::PeLink { at: p, up: false }))),
            E::Tcm(p) => {
                s.push(Stage::Link(self.link_index(LinkId::PeLink { at: p, up: false })));
                s.push(Stage::Link(self.link_index(LinkId::Tcm { at: p, write: true })));
            }
            E::Hbm(p) => s.push(self.hbm_stage(p)),
            E::Sram { sip, cube } => s.push(Stage::Link(self.link_index(LinkId::SramPort { sip, cube }))),
        }
    }

    /// The route between the host and a memory of SIP `sip`: PCIe to the
    /// IO chiplet, then the NoC from the IO cube's corner 0 (data flows
    /// towards the memory when `to_device`).
    pub fn host_route(&mut self, sip: u32, mem: Endpoint, to_device: bool) -> Route {
        let io = self.topo.spec.sip.io_chiplet_cube as u32;
        let pcie = Stage::Link(self.link_index(LinkId::Pcie { sip }));
        let at = self.attach(mem);
        let mut s = Stages::new();
        // Into and out of the memory as from any other router.
        if to_device {
            s.push(pcie);
            self.router_path((sip, io, 0), at, &mut s);
            self.enter(mem, &mut s);
        } else {
            self.leave(mem, &mut s);
            self.router_path(at, (sip, io, 0), &mut s);
            s.push(pcie);
        }
        Route::new(s)
    }

    /// The links of a route (an HBM stage counts as all its channels).
    pub fn route_links(&self, r: &Route) -> Vec<LinkId> {
        let mut out = Vec::new();
        for st in &r.stages {
            match *st {
                Stage::Link(i) => out.push(self.links[i as usize].id),
                Stage::Hbm { first, .. } => {
                    for ch in 0..self.channels {
                        out.push(self.links[(first + ch) as usize].id);
                    }
                }
            }
        }
        out
    }

    pub fn channels(&self) -> u32 {
        self.channels
    }

    /// When the last booking of any link ends.
    pub fn latest_booking_ps(&self) -> u64 {
        self.links.iter().map(|l| l.free_at_ps).max().unwrap_or(0)
    }

    /// Bytes per pseudo-channel of `len` contiguous bytes from `addr`.
    pub fn split_contiguous(&self, addr: u64, len: u64, out: &mut [u64]) {
        out.iter_mut().for_each(|b| *b = 0);
        let (il, n) = (self.interleave.get(), self.channels as u64);
        let mut a = addr;
        let end = addr.saturating_add(len);
        while a < end {
            let chunk = self.chunk_of(a);
            let chunk_start = chunk * il;
            // From an interleave boundary, n whole chunks give every channel
            // one chunk, whichever channel they start at.
            if a == chunk_start && end - a >= il * n {
                let rounds = (end - a) / (il * n);
                out.iter_mut().for_each(|b| *b += rounds * il);
                a += rounds * il * n;
                continue;
            }
            let take = (chunk_start + il).min(end) - a;
            out[self.channel_of_chunk(chunk)] += take;
            a += take;
        }
    }

    /// The channel a byte address maps to.
    pub fn channel_of(&self, addr: u64) -> usize {
        self.channel_of_chunk(self.chunk_of(addr))
    }

    /// The interleave chunk holding `addr`.
    #[inline]
    fn chunk_of(&self, addr: u64) -> u64 {
        self.interleave.div(addr)
    }

    #[inline]
    fn channel_of_chunk(&self, chunk: u64) -> usize {
        self.channels_div.rem(chunk) as usize
    }

    /// Per-stage (entry, serialization of all bytes, of the head, latency)
    /// for a stage, without reserving.
    fn stage_params(&self, st: Stage, bytes: u64, head: u64, hbm: &[u64]) -> (u64, u64, u64, u64) {
        match st {
            Stage::Link(i) => {
                let l = &self.links[i as usize];
                let ser = self.ser.ser_ps(bytes, l.bw_bytes_per_us);
                let head_ser = if head == bytes {
                    ser
                } else {
                    self.ser.ser_ps(head, l.bw_bytes_per_us)
                };
                (l.free_at_ps, ser, head_ser, l.latency_ps)
            }
            Stage::Hbm { first, .. } => {
                let mut free = 0;
                let mut ser = 0;
                let mut lat = 0;
                for (ch, &b) in hbm.iter().enumerate() {
                    if b == 0 {
                        continue;
                    }
                    let l = &self.links[first as usize + ch];
                    free = free.max(l.free_at_ps);
                    ser = ser.max(self.ser.ser_ps(b, l.bw_bytes_per_us));
                    lat = l.latency_ps;
                }
                if lat == 0 {
                    lat = self.links[first as usize].latency_ps;
                }
                // The head packet moves at the share of the slowest channel.
                let head_ser = if bytes == 0 {
                    0
                } else {
                    (ser as u128 * head as u128).div_ceil(bytes as u128) as u64
                };
                (free, ser, head_ser, lat)
            }
        }
    }

    /// The cost of `bytes` over `route` on an idle machine. `hbm`: bytes
    /// per pseudo-channel when the route has an HBM stage.
    pub fn idle_cost(&self, route: &Route, bytes: u64, hbm: &[u64]) -> PathCost {
        let head = bytes.min(self.packet_bytes);
        let mut c = PathCost {
            bottleneck_bytes_per_us: u64::MAX,
            ..Default::default()
        };
        let mut bottleneck_ser = 0u64;
        for &st in &route.stages {
            let (_, ser, head_ser, lat) = self.stage_params(st, bytes, head, hbm);
            c.latency_ps += lat;
            c.head_ps += head_ser;
            let class = match st {
                Stage::Link(i) => self.links[i as usize].id.class(),
                Stage::Hbm { .. } => 4,
            };
            c.latency_by_class_ps[class] += lat;
            if ser >= bottleneck_ser {
                bottleneck_ser = ser;
                c.stream_ps = ser.saturating_sub(head_ser);
            }
            if bytes > 0 {
                c.bottleneck_bytes_per_us = c.bottleneck_bytes_per_us.min(self.stage_bw(st, bytes, hbm));
            }
        }
        c
    }

    /// A stage's bandwidth for `bytes` (bytes/µs): a link's own; an HBM
    /// stage's is `bytes` over the time of its busiest pseudo-channel
    /// (`hbm`: bytes per channel), so an even split over n channels is
    /// n channels' bandwidth.
    fn stage_bw(&self, st: Stage, bytes: u64, hbm: &[u64]) -> u64 {
        match st {
            Stage::Link(i) => self.links[i as usize].bw_bytes_per_us,
            Stage::Hbm { first, .. } => hbm
                .iter()
                .enumerate()
                .filter(|&(_, &b)| b > 0)
                .map(|(ch, &b)| {
                    let bw = self.links[first as usize + ch].bw_bytes_per_us;
                    (bw as u128 * bytes as u128 / b as u128).min(u64::MAX as u128) as u64
                })
                .min()
                .unwrap_or(u64::MAX),
        }
    }

    /// Reserves `route` for `bytes` from `t0`. `hbm`: bytes per
    /// pseudo-channel when the route has an HBM stage.
    pub fn reserve(&mut self, route: &Route, bytes: u64, hbm: &[u64], t0: u64) -> Transfer {
        match self.reserve_within(route, bytes, hbm, Progress::at_start(t0), None) {
            Booked::Done(t) | Booked::HandOff(t, _) => t,
        }
    }

    /// Link `i` is taken over `[start, end)` by a use that arrived at
    /// `arrive` moving `bytes`: it is free again at `end`, and its
    /// statistics count the use (up to `stats_until_ps`).
    #[inline(always)]
    fn hold_link(&mut self, i: u32, (arrive, start, end): (u64, u64, u64), bytes: u64) {
        let stop = self.stats_until_ps;
        let l = &mut self.links[i as usize];
        l.free_at_ps = end;
        if end <= stop {
            l.busy_ps += end - start;
            l.bytes += bytes;
            l.wait_ps += start - arrive;
            if let Some(r) = &mut self.record {
                r.push((i, start, end));
            }
        } else {
            l.count_until(stop, (arrive, start, end), bytes, &mut self.record, i);
        }
    }

    /// Reserves `route`'s stages from where `from` stands, while `mine`
    /// holds for the SIP of the next stage: the whole route
    /// ([`Booked::Done`]), or up to the first stage on a SIP that is not
    /// ([`Booked::HandOff`], with where the transfer stands there, to be
    /// continued by [`Self::reserve_within`] when its head gets there).
    /// The transfer's start and injection are those of its first stage,
    /// booked by whoever began it.
    pub fn reserve_within(
        &mut self,
        route: &Route,
        bytes: u64,
        hbm: &[u64],
        from: Progress,
        mine: Option<&dyn Fn(u32) -> bool>,
    ) -> Booked {
        let head = bytes.min(self.packet_bytes);
        let costs = self.link_costs(route, bytes, head);
        let Progress {
            stage: first,
            mut arrive_ps,
            mut prev_tail_ps,
            mut start_ps,
            mut injected_ps,
        } = from;
        for (k, &st) in route.stages.iter().enumerate().skip(first) {
            if k > first && mine.is_some_and(|mine| !mine(self.stage_sip(st))) {
                let at = Progress {
                    stage: k,
                    arrive_ps,
                    prev_tail_ps,
                    start_ps,
                    injected_ps,
                };
                return Booked::HandOff(at.so_far(), at);
            }
            let (free, ser, head_ser, lat) = match (&costs, st) {
                (Some(c), Stage::Link(i)) => {
                    let (ser, head_ser, lat) = c[k];
                    (self.links[i as usize].free_at_ps, ser, head_ser, lat)
                }
                _ => self.stage_params(st, bytes, head, hbm),
            };
            let e = arrive_ps.max(free);
            start_ps.get_or_insert(e);
            let tail = match prev_tail_ps {
                Some(pt) => (e + ser).max(pt + head_ser),
                None => e + ser,
            };
            if k == 0 {
                injected_ps = tail;
            }
            match st {
                Stage::Link(i) => {
                    // The link carries this transfer's packets for `ser`;
                    // when an upstream link is slower they arrive spaced
                    // out, and other transfers' packets use the gaps.
                    self.hold_link(i, (arrive_ps, e, e + ser), bytes);
                }
                Stage::Hbm { first, .. } => {
                    for (ch, &b) in hbm.iter().enumerate() {
                        if b == 0 {
                            continue;
                        }
                        let i = first + ch as u32;
                        let busy = self.ser.ser_ps(b, self.links[i as usize].bw_bytes_per_us);
                        self.hold_link(i, (arrive_ps, e, e + busy), b);
                    }
                }
            }
            arrive_ps = e + head_ser + lat;
            prev_tail_ps = Some(tail + lat);
        }
        let done = Progress {
            stage: route.stages.len(),
            arrive_ps,
            prev_tail_ps,
            start_ps,
            injected_ps,
        };
        Booked::Done(done.so_far())
    }

    /// `route`'s per-stage costs for `bytes` (`head`: its first packet's),
    /// from its memo or worked out into it; `None` when a stage is an HBM
    /// controller, whose cost depends on how the bytes fall on channels.
    fn link_costs<'r>(&self, route: &'r Route, bytes: u64, head: u64) -> Option<Ref<'r, [(u64, u64, u64)]>> {
        if route.costs.borrow().bytes != Some(bytes) {
            if route.stages.iter().any(|st| matches!(st, Stage::Hbm { .. })) {
                return None;
            }
            let mut memo = route.costs.borrow_mut();
            memo.per_stage.clear();
            for &st in &route.stages {
                let (_, ser, head_ser, lat) = self.stage_params(st, bytes, head, &[]);
                memo.per_stage.push((ser, head_ser, lat));
            }
            memo.bytes = Some(bytes);
        }
        Some(Ref::map(route.costs.borrow(), |m| &m.per_stage[..]))
    }

    /// The SIP a stage's links belong to (a SIP link to the SIP it
    /// leaves).
    pub fn stage_sip(&self, st: Stage) -> u32 {
        match st {
            Stage::Link(i) => self.links[i as usize].id.sip(),
            Stage::Hbm { owner, .. } => owner.sip,
        }
    }

    /// Latency from the IO chiplet (corner 0 of the SIP's IO cube) to a
    /// PE's core: the on-chip part of a launch or a host copy.
    pub fn io_latency_ps(&mut self, pe: PeCoord) -> u64 {
        let io = self.topo.spec.sip.io_chiplet_cube as u32;
        let mut s = Stages::new();
        let to = self.attach(Endpoint::Core(pe));
        self.router_path((pe.sip, io, 0), to, &mut s);
        s.push(Stage::Link(self.link_index(LinkId::PeLink { at: pe, up: false })));
        self.stages_latency_ps(&s)
    }

    fn stages_latency_ps(&self, stages: &[Stage]) -> u64 {
        stages
            .iter()
            .map(|st| match *st {
                Stage::Link(i) => self.links[i as usize].latency_ps,
                Stage::Hbm { first, .. } => self.links[first as usize].latency_ps,
            })
            .sum()
    }

    /// Sum of link latencies from `from` to `to` (a control message's time).
    pub fn latency_ps(&mut self, from: Endpoint, to: Endpoint) -> u64 {
        let r = self.route(from, to);
        self.stages_latency_ps(&r.stages)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The u64 path of `ser_ps` against the 128-bit formula, around the
    /// point where `bytes · 10^6` leaves u64 and at awkward bandwidths.
    #[test]
    fn serialization_time_is_the_exact_ceiling() {
        let exact = |b: u64, bw: u64| (b as u128 * 1_000_000).div_ceil(bw.max(1) as u128) as u64;
        let edge = u64::MAX / 1_000_000;
        for b in [0, 1, 255, 256, 4097, 1 << 30, edge - 1, edge, edge + 1, u64::MAX / 2] {
            for bw in [0, 1, 3, 7_999, 204_800, 256_000, u64::MAX] {
                assert_eq!(ser_ps(b, bw), exact(b, bw), "{b} bytes at {bw} B/us");
            }
        }
    }

    /// The memo gives `ser_ps` whether it hits, misses, or two keys share
    /// an entry and evict each other (more keys than its 64 entries, asked
    /// in an order that revisits evicted ones), and at its initial key.
    #[test]
    fn memoized_serialization_time_is_the_same() {
        let memo = SerMemo::new();
        assert_eq!(memo.ser_ps(0, 1), 0);
        // Each byte count at three bandwidths.
        let keys: Vec<(u64, u64)> = (0..300u64)
            .map(|k| (k / 3 * 37 % 4099, [1, 7_999, 204_800][(k % 3) as usize]))
            .collect();
        for round in 0..3 {
            for &(b, bw) in keys.iter().rev().skip(round) {
                assert_eq!(memo.ser_ps(b, bw), ser_ps(b, bw), "{b} bytes at {bw} B/us");
                assert_eq!(memo.ser_ps(b, bw), ser_ps(b, bw), "{b} bytes at {bw} B/us, again");
            }
        }
        assert_eq!(memo.ser_ps(u64::MAX, 0), ser_ps(u64::MAX, 0));
        // Keys that share an entry, asked one after the other: the same
        // byte count at another bandwidth, another count at the same one.
        let (b, bw) = (1024, 204_800);
        let at = SerMemo::entry_of(b, bw);
        let differs = |x: u64, w: u64| ser_ps(x, w) != ser_ps(b, bw);
        let other_bw = (1..)
            .map(|k| bw + 1000 * k)
            .find(|&w| SerMemo::entry_of(b, w) == at && differs(b, w))
            .unwrap();
        let other_b = (1..)
            .map(|k| b + k)
            .find(|&x| SerMemo::entry_of(x, bw) == at && differs(x, bw))
            .unwrap();
        for (x, w) in [(b, bw), (b, other_bw), (b, bw), (other_b, bw), (b, bw)] {
            assert_eq!(memo.ser_ps(x, w), ser_ps(x, w), "{x} bytes at {w} B/us");
        }
    }

    fn pe(sip: u32, cube: u32, pe: u32) -> PeCoord {
        PeCoord { sip, cube, pe }
    }

    fn classes(f: &Fabric, r: &Route) -> Vec<&'static str> {
        f.route_links(r).iter().map(|l| l.class_name()).collect()
    }

    #[test]
    fn lone_transfer_matches_closed_form() {
        let topo = Topology::default_machine();
        let mut f = Fabric::new(&topo);
        let r = f.route(Endpoint::Core(pe(0, 0, 0)), Endpoint::Tcm(pe(0, 5, 3)));
        let bytes = 1 << 20;
        let cost = f.idle_cost(&r, bytes, &[]);
        let t = f.reserve(&r, bytes, &[], 1000);
        assert_eq!(t.end_ps, 1000 + cost.total_ps());
        // The DESIGN's closed form, up to the head packet's store-and-forward.
        let lat: u64 = f
            .route_links(&r)
            .iter()
            .map(|l| f.links[f.index[l] as usize].latency_ps)
            .sum();
        let min_bw = f
            .route_links(&r)
            .iter()
            .map(|l| f.links[f.index[l] as usize].bw_bytes_per_us)
            .min()
            .unwrap();
        let closed = lat + ser_ps(bytes, min_bw);
        let diff = t.end_ps - 1000 - closed;
        assert!(
            diff <= cost.head_ps,
            "extra {diff} ps beyond the head packet's {}",
            cost.head_ps
        );
        assert!(classes(&f, &r).contains(&"ucie"), "remote cube uses UCIe");
        let local = f.route(Endpoint::Core(pe(0, 0, 0)), Endpoint::Tcm(pe(0, 0, 7)));
        assert!(!classes(&f, &local).contains(&"ucie"), "same cube uses no UCIe");
    }

    /// The host reaches a PE's TCM as a PE does: through the PE's router
    /// link and its TCM port (the write port on the way in, the read port
    /// on the way out), after PCIe and the NoC from the IO cube.
    #[test]
    fn host_routes_into_a_tcm_pass_its_port() {
        let topo = Topology::default_machine();
        let mut f = Fabric::new(&topo);
        let at = pe(0, 5, 3);
        let into = f.host_route(0, Endpoint::Tcm(at), true);
        let links = f.route_links(&into);
        assert_eq!(links.first(), Some(&LinkId::Pcie { sip: 0 }));
        assert_eq!(
            links[links.len() - 2..],
            [LinkId::PeLink { at, up: false }, LinkId::Tcm { at, write: true }]
        );
        let out = f.host_route(0, Endpoint::Tcm(at), false);
        let links = f.route_links(&out);
        assert_eq!(
            links[..2],
            [LinkId::Tcm { at, write: false }, LinkId::PeLink { at, up: true }]
        );
        assert_eq!(links.last(), Some(&LinkId::Pcie { sip: 0 }));
        // The core itself has no port.
        let core = f.host_route(0, Endpoint::Core(at), true);
        assert_eq!(f.route_links(&core).last(), Some(&LinkId::PeLink { at, up: false }));
    }

    /// A route's memo of its stage costs books what working them out
    /// books: the same sizes in turn over one route (the memo hit, missed
    /// and refilled), and over fresh copies of it (no memo), on two
    /// fabrics that start alike.
    #[test]
    fn memoized_stage_costs_book_the_same() {
        let topo = Topology::default_machine();
        let (mut with_memo, mut fresh) = (Fabric::new(&topo), Fabric::new(&topo));
        let r = with_memo.route(Endpoint::Core(pe(0, 0, 0)), Endpoint::Tcm(pe(0, 5, 3)));
        let plain = fresh.route(Endpoint::Core(pe(0, 0, 0)), Endpoint::Tcm(pe(0, 5, 3)));
        let mut t0 = 0;
        for bytes in [1024, 1024, 64, 1 << 20, 1024, 1, 0, 1024] {
            let got = with_memo.reserve(&r, bytes, &[], t0);
            let want = fresh.reserve(&Route::new(plain.stages.clone()), bytes, &[], t0);
            assert_eq!(got, want, "{bytes} bytes from {t0} ps");
            t0 += 700;
        }
        assert_eq!(r.costs.borrow().bytes, Some(1024));
    }

    /// Packetization (`fabric.packet_bytes`): a lone transfer over links
    /// of bandwidths b_1..b_n ends after the links' latencies plus, for
    /// the stage that streams all its bytes, `bytes / b_k`, and for every
    /// other stage one head packet `min(bytes, packet) / b_j`, whichever
    /// stage makes that longest (store and forward of the head, then the
    /// stream). Bigger packets cost more on a multi-hop path.
    #[test]
    fn packet_size_sets_the_store_and_forward_term() {
        let bytes = 64 << 10;
        let mut ends = Vec::new();
        for packet in [64u64, 256, 1024, 4096] {
            let yaml = crate::topology::DEFAULT_YAML.replace("packet_bytes: 256", &format!("packet_bytes: {packet}"));
            let topo = Topology::parse("packets.yaml", &yaml).expect("valid variant");
            let mut f = Fabric::new(&topo);
            let r = f.route(Endpoint::Core(pe(0, 0, 0)), Endpoint::Tcm(pe(0, 5, 3)));
            let links: Vec<(u64, u64)> = f
                .route_links(&r)
                .iter()
                .map(|l| {
                    let l = &f.links[f.index[l] as usize];
                    (l.bw_bytes_per_us, l.latency_ps)
                })
                .collect();
            let lat: u64 = links.iter().map(|(_, latency)| latency).sum();
            let head = bytes.min(packet);
            let want = lat
                + (0..links.len())
                    .map(|k| {
                        links
                            .iter()
                            .enumerate()
                            .map(|(j, (bw, _))| ser_ps(if j == k { bytes } else { head }, *bw))
                            .sum::<u64>()
                    })
                    .max()
                    .unwrap_or(0);
            let t = f.reserve(&r, bytes, &[], 1000);
            assert_eq!(t.end_ps - 1000, want, "packet {packet} B over {} links", links.len());
            ends.push(t.end_ps);
        }
        assert!(
            ends.windows(2).all(|w| w[0] < w[1]),
            "bigger packets, later ends: {ends:?}"
        );
    }

    #[test]
    fn flows_sharing_a_link_serialize() {
        let topo = Topology::default_machine();
        let bytes = 1 << 20;
        let mut f = Fabric::new(&topo);
        let mut ends = Vec::new();
        let mut hbm = vec![0; f.channels() as usize];
        for k in 1..=4 {
            let r = f.route(Endpoint::Hbm(pe(0, 0, 0)), Endpoint::Core(pe(0, 0, k)));
            f.split_contiguous(0, bytes, &mut hbm);
            ends.push(f.reserve(&r, bytes, &hbm, 0).end_ps);
        }
        let ratio = ends[3] as f64 / ends[0] as f64;
        assert!(
            (3.5..=4.5).contains(&ratio),
            "four flows into one HBM controller: ratio {ratio}"
        );
    }

    #[test]
    fn hbm_bytes_spread_over_pseudo_channels() {
        let topo = Topology::default_machine();
        let f = Fabric::new(&topo);
        let mut out = vec![0; 8];
        f.split_contiguous(100, 256 * 8 * 3 + 50, &mut out);
        assert_eq!(out.iter().sum::<u64>(), 256 * 8 * 3 + 50);
        f.split_contiguous(0, 256, &mut out);
        assert_eq!(out, vec![256, 0, 0, 0, 0, 0, 0, 0]);
        f.split_contiguous(256 * 8, 512, &mut out);
        assert_eq!(out, vec![256, 256, 0, 0, 0, 0, 0, 0]);
    }

    /// The split (shifts for powers of two, divisions otherwise) against
    /// a byte-by-byte count, over interleaves and channel counts of both
    /// kinds and ranges that start and end mid-chunk or span many rounds.
    #[test]
    fn hbm_split_matches_a_byte_count() {
        for (il, n) in [(256, 8), (64, 4), (96, 8), (256, 6), (100, 3), (1, 1)] {
            let mut topo = Topology::default_machine();
            topo.spec.pe.hbm_controller.interleave_bytes = crate::topology::schema::Positive(il);
            topo.spec.pe.hbm_controller.pseudo_channels = crate::topology::schema::Positive(n);
            let f = Fabric::new(&topo);
            for (addr, len) in [
                (0, 0),
                (0, 1),
                (7, il),
                (il - 1, 2),
                (3, il * n * 3 + 5),
                (il * 5, il * n),
            ] {
                let mut got = vec![0; n as usize];
                f.split_contiguous(addr, len, &mut got);
                let mut want = vec![0; n as usize];
                for a in addr..addr + len {
                    want[((a / il) % n) as usize] += 1;
                    assert_eq!(f.channel_of(a), ((a / il) % n) as usize);
                }
                assert_eq!(got, want, "{len} bytes at {addr}, interleave {il}, {n} channels");
            }
        }
    }

    #[test]
    fn cross_sip_routes_use_sip_links() {
        let topo = Topology::default_machine();
        let mut f = Fabric::new(&topo);
        let r = f.route(Endpoint::Core(pe(0, 5, 0)), Endpoint::Tcm(pe(1, 5, 0)));
        let c = classes(&f, &r);
        assert!(c.contains(&"sip link"));
        let same = f.route(Endpoint::Core(pe(0, 5, 0)), Endpoint::Tcm(pe(0, 6, 0)));
        assert!(!classes(&f, &same).contains(&"sip link"));
    }
}
