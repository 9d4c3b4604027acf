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

pub struct Segment {
    pub name: String,
    pub base: u64,
    pub data: Vec<u8>,
    /// The owner's label for the allocation (the simulator's placement).
    pub tag: u32,
}

pub struct FlatMemory {
    /// Sorted by base address. Only `alloc` changes the list, and no
    /// segment's buffer is ever resized or dropped while it is listed.
    segs: Vec<Segment>,
    /// `segs[k].base`, packed: every memory access looks its segment up,
    /// and a search over these 8-byte entries touches a few cache lines
    /// where one over the 64-byte segments touches one per step (with a
    /// segment per PE of a large launch, most of them cold).
    bases: Vec<u64>,
    /// This memory's current layout (see [`Memory::layout_epoch`]): a
    /// fresh number from [`NEXT_EPOCH`] at creation and at every `alloc`.
    epoch: u64,
}

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

    /// The allocation holding `addr`.
    pub fn segment_at(&self, addr: u64) -> Option<&Segment> {
        let s = &self.segs[self.index_of(addr)?];
        (addr - s.base < s.data.len() as u64).then_some(s)
    }

    /// The segment that starts at or below `addr`, if any (whether `addr`
    /// is inside it is the caller's check).
    fn index_of(&self, addr: u64) -> Option<usize> {
        self.bases.partition_point(|&b| b <= addr).checked_sub(1)
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
        // its heap buffer), and every `alloc` takes a new epoch.
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
}
