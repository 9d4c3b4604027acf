//! The simulated machine's memory: one virtual address space whose
//! allocations (segments) each live in one physical memory — a PE's HBM
//! slice, a cube's SRAM or a PE's TCM — with capacity accounting per
//! memory. Kernels see pointers as virtual addresses; an access outside
//! every segment is a fault the simulator reports at the source line.
//!
//! Allocations made together for every rank of a communicator (sharded or
//! replicated tensors) form a *symmetric* group: `tl.symm_at(ptr, r)` maps
//! an address in one rank's segment to the same offset in rank `r`'s.

use super::fabric::Endpoint;
use crate::exec::{FlatMemory, RawSegment};
use crate::topology::{PeCoord, Space, Topology};
use kernbench_compiler::datapath::{MemFault, Memory};
use std::collections::HashMap;
use std::fmt;

/// The top 16 bits of the address `tl.symm_at` gives a lane of a block
/// whose pointer no symmetric buffer holds (a lane a mask may turn off),
/// over the pointer's own 48 bits: no allocation reaches this high, so an
/// access through it is out of bounds, and [`SimMemory::describe_miss`]
/// says where it came from.
const NOT_SYMMETRIC_TAG: u64 = 0x5359 << 48;

/// The address `tl.symm_at` gives a lane whose pointer `addr` no
/// symmetric buffer holds (see [`NOT_SYMMETRIC_TAG`]).
pub fn not_symmetric(addr: u64) -> u64 {
    if addr >> 48 == 0 {
        addr | NOT_SYMMETRIC_TAG
    } else {
        addr // already outside every allocation
    }
}

/// The pointer a [`not_symmetric`] address was made from.
pub fn symm_at_origin(addr: u64) -> Option<u64> {
    (addr >> 48 == NOT_SYMMETRIC_TAG >> 48).then_some(addr & ((1 << 48) - 1))
}

/// Where an allocation lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Placement {
    /// A PE's slice of its cube's HBM.
    Hbm(PeCoord),
    /// A cube's shared SRAM.
    Sram { sip: u32, cube: u32 },
    /// A PE's TCM scratchpad.
    Tcm(PeCoord),
}

impl Placement {
    pub fn space(self) -> Space {
        match self {
            Placement::Hbm(_) => Space::Hbm,
            Placement::Sram { .. } => Space::Sram,
            Placement::Tcm(_) => Space::Tcm,
        }
    }

    pub fn sip(self) -> u32 {
        match self {
            Placement::Hbm(p) | Placement::Tcm(p) => p.sip,
            Placement::Sram { sip, .. } => sip,
        }
    }

    /// The memory `space` nearest to PE `pe`.
    pub fn near(space: Space, pe: PeCoord) -> Placement {
        match space {
            Space::Hbm => Placement::Hbm(pe),
            Space::Sram => Placement::Sram {
                sip: pe.sip,
                cube: pe.cube,
            },
            Space::Tcm => Placement::Tcm(pe),
        }
    }

    pub fn endpoint(self) -> Endpoint {
        match self {
            Placement::Hbm(p) => Endpoint::Hbm(p),
            Placement::Sram { sip, cube } => Endpoint::Sram { sip, cube },
            Placement::Tcm(p) => Endpoint::Tcm(p),
        }
    }
}

impl fmt::Display for Placement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Placement::Hbm(p) => write!(f, "HBM slice of {p}"),
            Placement::Sram { sip, cube } => write!(f, "SRAM of (sip {sip}, cube {cube})"),
            Placement::Tcm(p) => write!(f, "TCM of {p}"),
        }
    }
}

/// What the machine knows about one segment.
#[derive(Clone, Debug)]
pub struct SegmentInfo {
    pub placement: Placement,
    /// The symmetric group and this segment's rank in it.
    pub symmetric: Option<(u32, u32)>,
}

/// An allocation that did not fit.
#[derive(Clone, Debug, PartialEq)]
pub struct OutOfMemory {
    pub name: String,
    pub need_bytes: u64,
    pub placement: Placement,
    pub used_bytes: u64,
    pub capacity_bytes: u64,
}

impl fmt::Display for OutOfMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "`{}` ({} bytes) does not fit in the {}: {} of {} bytes are in use",
            self.name, self.need_bytes, self.placement, self.used_bytes, self.capacity_bytes
        )
    }
}

pub struct SimMemory {
    flat: FlatMemory,
    /// Indexed by the flat segment's tag.
    info: Vec<SegmentInfo>,
    used: HashMap<Placement, u64>,
    /// Symmetric groups: the base address of each rank's segment.
    groups: Vec<Vec<u64>>,
    hbm_slice_bytes: u64,
    sram_bytes: u64,
    tcm_bytes: u64,
}

impl SimMemory {
    pub fn new(topo: &Topology) -> SimMemory {
        let s = &topo.spec;
        SimMemory {
            flat: FlatMemory::new(),
            info: Vec::new(),
            used: HashMap::new(),
            groups: Vec::new(),
            hbm_slice_bytes: topo.hbm_slice_bytes(),
            sram_bytes: s.cube.sram.capacity_bytes.0,
            tcm_bytes: s.pe.tcm.capacity_bytes.0,
        }
    }

    pub fn capacity(&self, p: Placement) -> u64 {
        match p {
            Placement::Hbm(_) => self.hbm_slice_bytes,
            Placement::Sram { .. } => self.sram_bytes,
            Placement::Tcm(_) => self.tcm_bytes,
        }
    }

    pub fn used(&self, p: Placement) -> u64 {
        self.used.get(&p).copied().unwrap_or(0)
    }

    /// Allocates `data` in one memory and returns its address.
    pub fn alloc(&mut self, name: &str, p: Placement, data: Vec<u8>) -> Result<u64, OutOfMemory> {
        self.alloc_in_group(name, p, data, None)
    }

    /// Allocates one segment per rank (same size each) as a symmetric
    /// group; returns the base addresses in rank order.
    pub fn alloc_symmetric(&mut self, name: &str, parts: Vec<(Placement, Vec<u8>)>) -> Result<Vec<u64>, OutOfMemory> {
        // Check every part first so a failure leaves nothing allocated.
        let mut need: HashMap<Placement, u64> = HashMap::new();
        for (p, d) in &parts {
            *need.entry(*p).or_insert(0) += d.len() as u64;
        }
        let mut places: Vec<_> = need.into_iter().collect();
        places.sort();
        for (p, n) in places {
            if self.used(p) + n > self.capacity(p) {
                return Err(OutOfMemory {
                    name: name.into(),
                    need_bytes: n,
                    placement: p,
                    used_bytes: self.used(p),
                    capacity_bytes: self.capacity(p),
                });
            }
        }
        let g = self.groups.len() as u32;
        self.groups.push(Vec::new());
        let mut bases = Vec::with_capacity(parts.len());
        for (rank, (p, d)) in parts.into_iter().enumerate() {
            let a = self.alloc_in_group(&format!("{name}[{rank}]"), p, d, Some((g, rank as u32)))?;
            bases.push(a);
        }
        self.groups[g as usize] = bases.clone();
        Ok(bases)
    }

    fn alloc_in_group(
        &mut self,
        name: &str,
        p: Placement,
        data: Vec<u8>,
        symmetric: Option<(u32, u32)>,
    ) -> Result<u64, OutOfMemory> {
        let need = data.len() as u64;
        let (used, cap) = (self.used(p), self.capacity(p));
        if used + need > cap {
            return Err(OutOfMemory {
                name: name.into(),
                need_bytes: need,
                placement: p,
                used_bytes: used,
                capacity_bytes: cap,
            });
        }
        *self.used.entry(p).or_insert(0) += need;
        let tag = self.info.len() as u32;
        self.info.push(SegmentInfo {
            placement: p,
            symmetric,
        });
        Ok(self.flat.alloc_tagged(name, data, tag))
    }

    /// Frees the allocation at `base`: its bytes no longer count against
    /// its memory's capacity, and an access to it faults. False when no
    /// allocation starts there (or it was freed already).
    pub fn free(&mut self, base: u64) -> bool {
        let Some((b, info)) = self.lookup(base) else {
            return false;
        };
        if b != base {
            return false;
        }
        let p = info.placement;
        let Some(freed) = self.flat.release(base) else {
            return false;
        };
        if let Some(u) = self.used.get_mut(&p) {
            *u = u.saturating_sub(freed as u64);
        }
        true
    }

    /// The segment holding `addr`: (base, info).
    pub fn lookup(&self, addr: u64) -> Option<(u64, &SegmentInfo)> {
        let s = self.flat.segment_at(addr)?;
        Some((s.base, self.info.get(s.tag as usize)?))
    }

    pub fn placement_of(&self, addr: u64) -> Option<Placement> {
        self.lookup(addr).map(|(_, i)| i.placement)
    }

    /// The allocation holding `addr`: its first and one-past-last address
    /// and its placement (one search, for the simulator's address check).
    pub fn extent_of(&self, addr: u64) -> Option<(u64, u64, Placement)> {
        let s = self.flat.segment_at(addr)?;
        let info = self.info.get(s.tag as usize)?;
        Some((s.base, s.base + s.data.len() as u64, info.placement))
    }

    /// Where an access of `bytes` at `addr` that hit no allocation lies
    /// against the nearest one (by the gap between them), in words for
    /// an error: "4 bytes past the end of `buf[0]` (400 bytes at 0x…, in
    /// the HBM slice of …)". `None` when nothing is allocated.
    pub fn describe_miss(&self, addr: u64, bytes: u64) -> Option<String> {
        if let Some(origin) = symm_at_origin(addr) {
            return Some(format!(
                "the address came from `tl.symm_at` of {origin:#x}, which no symmetric buffer holds (a masked-off \
                 lane may hold such an address; this lane is on)"
            ));
        }
        // A computed address may be anywhere, up to u64::MAX.
        let last = addr.saturating_add(bytes);
        let segs = self.flat.segments();
        let k = segs.partition_point(|s| s.base <= addr);
        let gap = |s: &crate::exec::Segment| {
            let end = s.base + s.data.len() as u64;
            if addr >= end {
                addr - end
            } else {
                s.base.saturating_sub(last)
            }
        };
        let s = [k.checked_sub(1), Some(k)]
            .into_iter()
            .flatten()
            .filter_map(|i| segs.get(i))
            .filter(|s| !s.data.is_empty())
            .min_by_key(|s| gap(s))?;
        let (len, end) = (s.data.len() as u64, s.base + s.data.len() as u64);
        if addr >= s.base && last <= end {
            return None; // Inside it: not a miss.
        }
        let place = self
            .info
            .get(s.tag as usize)
            .map_or(String::new(), |i| format!(", in the {}", i.placement));
        let side = if addr >= end {
            format!("{} bytes past the end of", addr - end)
        } else if addr < s.base {
            format!("{} bytes before the start of", s.base - addr)
        } else {
            // Starts inside, runs off the end.
            format!("{} bytes into (and {} past the end of)", addr - s.base, last - end)
        };
        Some(format!(
            "the access starts {side} `{}` ({len} bytes at {:#x}{place})",
            s.name, s.base
        ))
    }

    /// `addr` in the same symmetric group's segment of `rank`.
    pub fn symmetric_at(&self, addr: u64, rank: u32) -> Option<u64> {
        let (base, info) = self.lookup(addr)?;
        let (g, _) = info.symmetric?;
        let target = *self.groups.get(g as usize)?.get(rank as usize)?;
        Some(target + (addr - base))
    }

    /// A segment's bytes by its base address.
    pub fn bytes_at(&self, base: u64) -> Option<&[u8]> {
        self.flat
            .segment_at(base)
            .filter(|s| s.base == base)
            .map(|s| s.data.as_slice())
    }
}

impl SimMemory {
    /// Every segment's bytes by raw pointer, for [`MemView`]s.
    pub fn raw_segments(&mut self) -> Vec<RawSegment> {
        self.flat.raw_segments()
    }

    /// The placement of segment `tag`.
    fn placement_of_tag(&self, tag: u32) -> Option<Placement> {
        self.info.get(tag as usize).map(|i| i.placement)
    }
}

/// The memory as the simulator sees it during a launch: the layout (read
/// only: nothing is allocated or freed while a launch runs) and the bytes
/// of the segments it owns, reached through raw pointers. The threads of a
/// launch over several SIPs each hold one, owning the segments on their
/// own SIPs: a segment of another SIP is out of reach (`segment` gives
/// nothing, so an access to it fails rather than races), and the
/// simulator never needs one (loads reach only their own SIP; a write into
/// another SIP is done by that SIP's logical process).
pub struct MemView<'a> {
    mem: &'a SimMemory,
    segs: &'a [RawSegment],
    /// The SIPs whose segments this view may touch (`None`: all).
    owns: Option<&'a [bool]>,
}

impl<'a> MemView<'a> {
    /// `segs` must be `mem.raw_segments()`, taken after its last
    /// allocation.
    pub fn new(mem: &'a SimMemory, segs: &'a [RawSegment], owns: Option<&'a [bool]>) -> MemView<'a> {
        MemView { mem, segs, owns }
    }

    pub fn capacity(&self, p: Placement) -> u64 {
        self.mem.capacity(p)
    }

    /// Bytes the allocations in `p` take.
    pub fn used(&self, p: Placement) -> u64 {
        self.mem.used(p)
    }

    pub fn lookup(&self, addr: u64) -> Option<(u64, &SegmentInfo)> {
        self.mem.lookup(addr)
    }

    pub fn placement_of(&self, addr: u64) -> Option<Placement> {
        self.mem.placement_of(addr)
    }

    pub fn extent_of(&self, addr: u64) -> Option<(u64, u64, Placement)> {
        self.mem.extent_of(addr)
    }

    pub fn symmetric_at(&self, addr: u64, rank: u32) -> Option<u64> {
        self.mem.symmetric_at(addr, rank)
    }

    /// The length of the segment that starts at `base`.
    pub fn len_at(&self, base: u64) -> Option<u64> {
        self.mem
            .flat
            .segment_at(base)
            .filter(|s| s.base == base)
            .map(|s| s.data.len() as u64)
    }

    /// The segment holding `addr` (up to its end), if this view owns it.
    fn raw(&self, addr: u64) -> Option<RawSegment> {
        let s = *self.segs.get(self.mem.flat.index_of(addr)?)?;
        if addr - s.base > s.len as u64 {
            return None;
        }
        if let Some(owns) = self.owns {
            let sip = self.mem.placement_of_tag(s.tag)?.sip();
            if !owns.get(sip as usize).copied().unwrap_or(false) {
                return None;
            }
        }
        Some(s)
    }
}

impl MemView<'_> {
    /// Copies `out.len()` bytes at `addr` into `out` through a shared
    /// borrow (for reports made after the run stopped); `None` outside the
    /// segments this view owns.
    pub fn peek(&self, addr: u64, out: &mut [u8]) -> Option<()> {
        let s = self.raw(addr)?;
        let off = usize::try_from(addr - s.base).ok()?;
        if off.checked_add(out.len())? > s.len {
            return None;
        }
        // SAFETY: as in `segment`: `s` is a live segment this view owns, and
        // nothing writes it while this shared borrow of the view lasts (the
        // view's writes need it mutably); the range was checked above.
        let bytes = unsafe { std::slice::from_raw_parts(s.ptr.add(off), out.len()) };
        out.copy_from_slice(bytes);
        Some(())
    }

    /// The `len` bytes at `addr`, inside one segment this view owns; the
    /// fault of a read or a `write` of them otherwise.
    fn span(&mut self, addr: u64, len: usize, write: bool) -> Result<&mut [u8], MemFault> {
        let fault = MemFault {
            addr,
            bytes: len as u64,
            write,
        };
        let (base, bytes) = self.segment(addr).ok_or(fault)?;
        let off = (addr - base) as usize;
        bytes.get_mut(off..off + len).ok_or(fault)
    }
}

impl Memory for MemView<'_> {
    fn read(&mut self, addr: u64, out: &mut [u8]) -> Result<(), MemFault> {
        out.copy_from_slice(self.span(addr, out.len(), false)?);
        Ok(())
    }

    fn write(&mut self, addr: u64, data: &[u8]) -> Result<(), MemFault> {
        self.span(addr, data.len(), true)?.copy_from_slice(data);
        Ok(())
    }

    fn segment(&mut self, addr: u64) -> Option<(u64, &mut [u8])> {
        let s = self.raw(addr)?;
        // SAFETY: `s` is a live segment of the memory this view was made
        // from (no allocation or free during the launch), and this view
        // owns it: no other thread reads or writes its bytes while the
        // launch runs, and this thread does so only through this view,
        // borrowed mutably for as long as the slice lives.
        let bytes = unsafe { std::slice::from_raw_parts_mut(s.ptr, s.len) };
        Some((s.base, bytes))
    }
}

/// A view whose writes are held back: reads see memory as it is, and each
/// write is checked and kept, to be made later with [`HeldWrites::apply`].
/// `tl.gemm` runs through it when its input transfers start (it reads A
/// and B then) and its writes of C land when it ends. Only for code that
/// writes through [`Memory::write`] (the interpreter's `tl.gemm`, which
/// reads all of A and B before it writes): a write through
/// [`Memory::segment`]'s slice would not be held.
pub struct HeldWrites<'v, 'a> {
    view: &'v mut MemView<'a>,
    writes: Writes,
}

/// Writes held back: each run of bytes with its first address.
pub type Writes = Vec<(u64, Vec<u8>)>;

impl<'v, 'a> HeldWrites<'v, 'a> {
    pub fn new(view: &'v mut MemView<'a>) -> Self {
        HeldWrites {
            view,
            writes: Vec::new(),
        }
    }

    /// The writes held, in the order they were made.
    pub fn into_writes(self) -> Writes {
        self.writes
    }

    /// Makes `writes` (from [`Self::into_writes`]; each was checked then).
    pub fn apply(view: &mut MemView<'_>, writes: Writes) -> Result<(), MemFault> {
        for (addr, data) in writes {
            view.write(addr, &data)?;
        }
        Ok(())
    }
}

impl Memory for HeldWrites<'_, '_> {
    fn read(&mut self, addr: u64, out: &mut [u8]) -> Result<(), MemFault> {
        self.view.read(addr, out)
    }

    fn write(&mut self, addr: u64, data: &[u8]) -> Result<(), MemFault> {
        self.view.span(addr, data.len(), true)?;
        // Element by element in order, mostly: one run each.
        match self.writes.last_mut() {
            Some((at, run)) if at.checked_add(run.len() as u64) == Some(addr) => run.extend_from_slice(data),
            _ => self.writes.push((addr, data.to_vec())),
        }
        Ok(())
    }

    fn segment(&mut self, addr: u64) -> Option<(u64, &mut [u8])> {
        self.view.segment(addr)
    }
}

impl Memory for SimMemory {
    fn read(&mut self, addr: u64, out: &mut [u8]) -> Result<(), MemFault> {
        self.flat.read(addr, out)
    }

    fn write(&mut self, addr: u64, data: &[u8]) -> Result<(), MemFault> {
        self.flat.write(addr, data)
    }

    fn segment(&mut self, addr: u64) -> Option<(u64, &mut [u8])> {
        self.flat.segment(addr)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A miss is placed against the allocation it is nearest to, on the
    /// side it is on; an access inside one is no miss.
    #[test]
    fn misses_are_described_against_the_nearest_allocation() {
        let topo = Topology::load("tiny").expect("tiny preset");
        let mut m = SimMemory::new(&topo);
        let pe = PeCoord { sip: 0, cube: 0, pe: 0 };
        assert_eq!(m.describe_miss(0x1000, 4), None);
        let a = m.alloc("a", Placement::Hbm(pe), vec![0; 400]).expect("fits");
        let b = m.alloc("b", Placement::Hbm(pe), vec![0; 100]).expect("fits");
        let said = |addr, bytes| m.describe_miss(addr, bytes).unwrap_or_default();
        assert!(said(a + 408, 4).starts_with("the access starts 8 bytes past the end of `a` (400 bytes at"));
        assert!(said(b - 8, 4).starts_with("the access starts 8 bytes before the start of `b`"));
        assert!(said(a + 398, 4).starts_with("the access starts 398 bytes into (and 2 past the end of) `a`"));
        assert!(said(a, 4).is_empty());
        assert!(said(u64::MAX - 1, 4).contains("past the end of `b`"));
        // A lane `tl.symm_at` could not map says so.
        assert!(said(not_symmetric(b + 100), 4)
            .starts_with(&format!("the address came from `tl.symm_at` of {:#x}", b + 100)));
        assert_eq!(symm_at_origin(not_symmetric(b)), Some(b));
        assert_eq!(symm_at_origin(b), None);
    }

    #[test]
    fn capacity_and_symmetric_groups() {
        let topo = Topology::load("tiny").expect("tiny preset");
        let mut m = SimMemory::new(&topo);
        let pe = |k| PeCoord { sip: 0, cube: 0, pe: k };
        let tcm = m.capacity(Placement::Tcm(pe(0)));
        let e = m
            .alloc("big", Placement::Tcm(pe(0)), vec![0; tcm as usize + 1])
            .expect_err("too big");
        assert_eq!(e.capacity_bytes, tcm);
        let bases = m
            .alloc_symmetric(
                "x",
                (0..4).map(|k| (Placement::Hbm(pe(k)), vec![k as u8; 64])).collect(),
            )
            .expect("fits");
        assert_eq!(m.symmetric_at(bases[1] + 8, 3), Some(bases[3] + 8));
        assert_eq!(m.placement_of(bases[2] + 63), Some(Placement::Hbm(pe(2))));
        assert_eq!(m.placement_of(bases[2] + 64), None);
        assert_eq!(m.used(Placement::Hbm(pe(1))), 64);
    }
}
