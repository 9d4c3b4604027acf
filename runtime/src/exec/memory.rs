//! A flat virtual address space for functional execution: named
//! allocations at fixed, well-separated addresses. An access that is not
//! entirely inside one allocation is a fault (reported with the source
//! location by the executor), never a crash and never silent garbage.

use kernbench_compiler::datapath::{MemFault, Memory};

/// Where the first allocation starts, and the unmapped gap between
/// allocations (so an overrun of one does not land in the next).
const BASE_ADDR: u64 = 0x1000_0000;
const GAP_BYTES: u64 = 1 << 20;
const ALIGN_BYTES: u64 = 4096;

/// One allocation. One cache line, aligned, with the fields an access
/// reads first: every simulated memory operation looks its segment up,
/// and on a launch of thousands of PEs (a segment each) most are cold.
#[repr(C, align(64))]
pub struct Segment {
    pub base: u64,
    pub data: Vec<u8>,
    /// The owner's label for the allocation (the simulator's placement).
    pub tag: u32,
    pub name: String,
}

const _: () = assert!(std::mem::size_of::<Segment>() == 64);

/// A segment's bytes by raw pointer: how the threads of one simulated
/// launch reach memory at once, each only the segments of its own SIPs
/// (`sim::memory::MemView`). Valid while the memory makes no allocation,
/// which it cannot while the launch holds it.
#[derive(Clone, Copy, Debug)]
pub struct RawSegment {
    pub base: u64,
    pub ptr: *mut u8,
    pub len: usize,
    pub tag: u32,
}

// SAFETY: a `RawSegment` is an address and a length; whoever reads or
// writes through it must make sure no two threads touch one segment's
// bytes at once (`MemView` hands a thread only its own SIPs' segments).
unsafe impl Send for RawSegment {}
// SAFETY: as above; sharing the pointer itself reads nothing.
unsafe impl Sync for RawSegment {}

pub struct FlatMemory {
    /// Sorted by base address. Only `alloc` changes the list, and no
    /// segment's buffer is ever resized while it is listed (`release`
    /// empties it for good).
    segs: Vec<Segment>,
    /// `segs[k].base`, packed, for the search of an address the granule
    /// table does not place: a search over these 8-byte entries touches a
    /// few cache lines where one over the 64-byte segments touches one per
    /// step.
    bases: Vec<u64>,
    /// For each 1 MiB granule from [`BASE_ADDR`], the segment it overlaps
    /// ([`NO_SEGMENT`]: none). The gap between segments is a granule, so
    /// no granule overlaps two, and an address's segment is found with one
    /// load instead of a search (every simulated access looks one up).
    granules: Vec<u32>,
    /// This memory's current layout (see [`Memory::layout_epoch`]): a
    /// fresh number from [`NEXT_EPOCH`] at creation and at every `alloc`.
    epoch: u64,
}

/// log2 of a granule of [`FlatMemory::granules`]: the gap between
/// segments, so that no granule overlaps two.
const GRANULE_SHIFT: u32 = GAP_BYTES.trailing_zeros();
const _: () = assert!(1 << GRANULE_SHIFT == GAP_BYTES);
const NO_SEGMENT: u32 = u32::MAX;

/// Layout epochs, unique across every memory of the process.
static NEXT_EPOCH: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

fn fresh_epoch() -> u64 {
    NEXT_EPOCH.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

impl Default for FlatMemory {
    fn default() -> Self {
        FlatMemory {
            segs: Vec::new(),
            bases: Vec::new(),
            granules: Vec::new(),
            epoch: fresh_epoch(),
        }
    }
}

impl FlatMemory {
    pub fn new() -> Self {
        FlatMemory::default()
    }

    /// Allocates `data` and returns its address.
    pub fn alloc(&mut self, name: &str, data: Vec<u8>) -> u64 {
        self.alloc_tagged(name, data, 0)
    }

    /// Allocates `data` with a tag the caller can look up by address.
    pub fn alloc_tagged(&mut self, name: &str, data: Vec<u8>, tag: u32) -> u64 {
        let base = match self.segs.last() {
            Some(s) => (s.base + s.data.len() as u64 + GAP_BYTES).div_ceil(ALIGN_BYTES) * ALIGN_BYTES,
            None => BASE_ADDR,
        };
        let len = data.len() as u64;
        if len > 0 && u32::try_from(self.segs.len()).is_ok_and(|k| k != NO_SEGMENT) {
            let first = ((base - BASE_ADDR) >> GRANULE_SHIFT) as usize;
            let last = ((base + len - 1 - BASE_ADDR) >> GRANULE_SHIFT) as usize;
            if self.granules.len() <= last {
                self.granules.resize(last + 1, NO_SEGMENT);
            }
            self.granules[first..=last].fill(self.segs.len() as u32);
        }
        self.segs.push(Segment {
            name: name.to_string(),
            base,
            data,
            tag,
        });
        self.bases.push(base);
        self.epoch = fresh_epoch();
        base
    }

    /// Frees the allocation at `base` (its bytes go back to the host):
    /// it stays listed, empty, so that its addresses fault from now on and
    /// are never handed out again. Its length, or `None` when no
    /// allocation starts at `base`.
    pub fn release(&mut self, base: u64) -> Option<usize> {
        let k = self.bases.binary_search(&base).ok()?;
        let freed = std::mem::take(&mut self.segs[k].data).len();
        // A segment cache may point into the freed bytes.
        self.epoch = fresh_epoch();
        Some(freed)
    }

    /// The allocation holding `addr`.
    pub fn segment_at(&self, addr: u64) -> Option<&Segment> {
        let s = &self.segs[self.index_of(addr)?];
        (addr - s.base < s.data.len() as u64).then_some(s)
    }

    /// The segment that starts at or below `addr`, if any (whether `addr`
    /// is inside it is the caller's check).
    /// The index (in [`Self::segments`]) of the segment that would hold
    /// `addr`: the last one starting at or before it (the caller checks
    /// the end).
    pub fn index_of(&self, addr: u64) -> Option<usize> {
        // The granule's segment, when it starts at or below `addr`: the
        // next one starts at least a granule past its end, so past `addr`.
        let granule = (addr.wrapping_sub(BASE_ADDR) >> GRANULE_SHIFT) as usize;
        // The segment's own base, not `bases`: the caller reads the
        // segment next, so this touches one line fewer.
        if let Some(&k) = self.granules.get(granule) {
            if self.segs.get(k as usize).is_some_and(|s| s.base <= addr) {
                return Some(k as usize);
            }
        }
        self.bases.partition_point(|&b| b <= addr).checked_sub(1)
    }

    /// Where each segment's bytes are, in [`Self::segments`]' order, for
    /// access through raw pointers (see [`RawSegment`]).
    pub fn raw_segments(&mut self) -> Vec<RawSegment> {
        self.segs
            .iter_mut()
            .map(|s| RawSegment {
                base: s.base,
                ptr: s.data.as_mut_ptr(),
                len: s.data.len(),
                tag: s.tag,
            })
            .collect()
    }

    pub fn segments(&self) -> &[Segment] {
        &self.segs
    }

    pub fn segment_named(&self, name: &str) -> Option<&Segment> {
        self.segs.iter().find(|s| s.name == name)
    }

    fn find(&mut self, addr: u64, len: u64) -> Option<(&mut Segment, usize)> {
        let idx = self.index_of(addr)?;
        let s = &mut self.segs[idx];
        let off = addr - s.base;
        (off.checked_add(len)? <= s.data.len() as u64).then_some((s, off as usize))
    }
}

impl Memory for FlatMemory {
    fn read(&mut self, addr: u64, out: &mut [u8]) -> Result<(), MemFault> {
        let len = out.len();
        match self.find(addr, len as u64) {
            Some((s, off)) => {
                out.copy_from_slice(&s.data[off..off + len]);
                Ok(())
            }
            None => Err(MemFault {
                addr,
                bytes: len as u64,
                write: false,
            }),
        }
    }

    fn write(&mut self, addr: u64, data: &[u8]) -> Result<(), MemFault> {
        match self.find(addr, data.len() as u64) {
            Some((s, off)) => {
                s.data[off..off + data.len()].copy_from_slice(data);
                Ok(())
            }
            None => Err(MemFault {
                addr,
                bytes: data.len() as u64,
                write: true,
            }),
        }
    }

    fn segment(&mut self, addr: u64) -> Option<(u64, &mut [u8])> {
        let (s, _) = self.find(addr, 0)?;
        Some((s.base, s.data.as_mut_slice()))
    }

    fn layout_epoch(&self) -> Option<u64> {
        // Segments move only when the list grows (a pushed `Segment` keeps
        // its heap buffer) or one is released, and each takes a new epoch.
        Some(self.epoch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accesses_must_fit_one_allocation() {
        let mut m = FlatMemory::new();
        let a = m.alloc("a", vec![1, 2, 3, 4]);
        let b = m.alloc("b", vec![5; 8]);
        assert!(b > a + 4 + GAP_BYTES - 1);
        let mut buf = [0u8; 4];
        assert!(m.read(a, &mut buf).is_ok());
        assert_eq!(buf, [1, 2, 3, 4]);
        assert!(m.read(a + 1, &mut buf).is_err(), "runs past the end");
        assert!(m.read(a - 4, &mut buf).is_err(), "before the first allocation");
        assert!(m.write(b + 4, &[9; 4]).is_ok());
        assert_eq!(m.segment_named("b").map(|s| s.data[7]), Some(9));
    }

    /// A released allocation faults from then on, even where the next
    /// one (placed after it, now empty) reaches back into its old extent,
    /// and the layout takes a new epoch.
    #[test]
    fn released_allocations_fault() {
        let mut m = FlatMemory::new();
        let a = m.alloc("a", vec![1; 3 << 20]);
        let epoch = m.layout_epoch();
        assert_eq!(m.release(a), Some(3 << 20));
        assert_ne!(m.layout_epoch(), epoch);
        assert_eq!(m.release(a + 1), None, "no allocation starts there");
        let mut buf = [0u8; 4];
        assert!(m.read(a, &mut buf).is_err());
        let b = m.alloc("b", vec![2; 3 << 20]);
        assert!(b < a + (3 << 20), "the freed extent is not kept");
        for addr in [a, a + 4, b - 1] {
            assert!(m.read(addr, &mut buf).is_err(), "{addr:#x}");
        }
        assert!(m.read(b + (2 << 20), &mut buf).is_ok());
        assert_eq!(buf, [2; 4]);
    }

    /// The granule table finds what a search of the bases finds, for
    /// addresses inside segments (empty ones and ones of several
    /// granules too), in the gaps, before the first and past the last.
    #[test]
    fn granule_lookup_agrees_with_the_search() {
        let mut m = FlatMemory::new();
        let sizes = [4usize, 0, 3 << 20, 1, 0, (1 << 20) - 5, 1 << 20, 4096, 0, 7];
        for (k, &n) in sizes.iter().enumerate() {
            m.alloc(&format!("s{k}"), vec![k as u8; n]);
        }
        let search = |addr: u64| m.bases.partition_point(|&b| b <= addr).checked_sub(1);
        let mut probes = vec![0, BASE_ADDR - 1, u64::MAX];
        for s in m.segments() {
            let end = s.base + s.data.len() as u64;
            probes.extend([
                s.base - 1,
                s.base,
                s.base + 1,
                end.saturating_sub(1),
                end,
                end + GAP_BYTES / 2,
            ]);
            probes.extend([end + GAP_BYTES - 1, end + GAP_BYTES]);
        }
        for addr in probes {
            assert_eq!(m.index_of(addr), search(addr), "{addr:#x}");
        }
        let last = m.segments().last().map(|s| s.base).unwrap_or(0);
        assert!(m.read(last, &mut [0u8; 7]).is_ok());
        let empty = m.segment_named("s4").map(|s| s.base).unwrap_or(0);
        assert!(
            m.read(empty, &mut []).is_ok(),
            "an empty read at an empty segment, as before"
        );
    }
}
