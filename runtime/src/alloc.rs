//! The allocator `tlc` and the simulator benchmark run with: mimalloc,
//! with a last-in-first-out cache of small blocks in front of it.
//!
//! Why the cache: the simulator allocates and frees a few small objects
//! per event (result slots, blocks, formulas), and with thousands of PEs
//! nearly everything it touches is cold. mimalloc hands out a page's
//! freed blocks only after the page's current free list runs dry, so a
//! block comes back long after it was freed, out of cache, and the
//! allocation's first touch misses. Here the block freed last is the next
//! one given out, still in cache (a thread-caching allocator's habit).
//!
//! Blocks up to [`MAX_CACHED_BYTES`] with alignment up to 8 are rounded to
//! a class of 8-byte steps (mimalloc's own steps there) and always come
//! from mimalloc at the class's size and 8-byte alignment, so any cached
//! block of a class fits any request of that class. Each class keeps at
//! most [`MAX_PER_CLASS`] blocks, as an intrusive list per thread (the
//! link is written in the freed block itself); past that, frees go to
//! mimalloc. At most 1.1 MB are cached per thread; a thread that ends
//! gives them back with [`flush_thread_cache`].
//!
//! Measured and not kept (1,024 PEs under an 8 MiB LL,
//! docs/architecture.md, Performance): caching blocks up to 256 bytes
//! changed nothing (4.21 M LL read misses against 4.25 M); power-of-two
//! classes, naturally aligned so that no block spans two cache lines, were
//! worse, the larger blocks costing more lines than the straddling did
//! (4.86 M against 4.16 M, and 0.65 % more instructions).

use std::alloc::{GlobalAlloc, Layout};
use std::cell::Cell;
use std::ptr;

/// Largest block size served from the cache.
pub const MAX_CACHED_BYTES: usize = 128;
/// Blocks kept per size class and thread.
pub const MAX_PER_CLASS: u32 = 1024;

/// Bytes between classes, and their alignment: a block holds at least the
/// link to the next.
const CLASS_STEP: usize = std::mem::size_of::<*mut u8>();
const CLASSES: usize = MAX_CACHED_BYTES / CLASS_STEP;

/// One size class's cached blocks on a thread: the first (its first word
/// links the next) and how many there are.
#[derive(Clone, Copy)]
struct FreeList {
    head: *mut u8,
    len: u32,
}

thread_local! {
    static CACHE: [Cell<FreeList>; CLASSES] =
        const { [const { Cell::new(FreeList { head: ptr::null_mut(), len: 0 }) }; CLASSES] };
}

/// Gives the calling thread's cached blocks back to mimalloc. A thread
/// that ends calls it last (`host::spawn`'s ranks do): what a thread
/// caches is not freed when it exits, and a thread-local destructor, which
/// could do it, is not something a global allocator may rely on (std's
/// fallback for registering one allocates). A no-op where this allocator
/// is not the global one.
pub fn flush_thread_cache() {
    let _ = CACHE.try_with(|cache| {
        for (c, cell) in cache.iter().enumerate() {
            let mut block = cell.get().head;
            cell.set(FreeList {
                head: ptr::null_mut(),
                len: 0,
            });
            while !block.is_null() {
                // SAFETY: a cached block of class `c`: its first word links
                // the next, and mimalloc gave it with the class layout.
                unsafe {
                    let next = block.cast::<*mut u8>().read();
                    mimalloc::MiMalloc.dealloc(block, class_layout(c));
                    block = next;
                }
            }
        }
    });
}

/// mimalloc with a LIFO cache of small blocks (see the module docs).
pub struct Allocator;

/// The size class of `layout`, if the cache serves it.
#[inline]
fn class_of(layout: &Layout) -> Option<usize> {
    let size = layout.size();
    (size != 0 && size <= MAX_CACHED_BYTES && layout.align() <= CLASS_STEP).then(|| (size - 1) / CLASS_STEP)
}

/// The layout mimalloc sees for every block of class `c`.
#[inline]
fn class_layout(c: usize) -> Layout {
    // SAFETY: a non-zero multiple of 8, at most `MAX_CACHED_BYTES`, with a
    // power-of-two alignment that divides it.
    unsafe { Layout::from_size_align_unchecked((c + 1) * CLASS_STEP, CLASS_STEP) }
}

unsafe impl GlobalAlloc for Allocator {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let Some(c) = class_of(&layout) else {
            // SAFETY: forwarded as given.
            return unsafe { mimalloc::MiMalloc.alloc(layout) };
        };
        let cached = CACHE
            .try_with(|cache| {
                let list = cache[c].get();
                if !list.head.is_null() {
                    // SAFETY: a cached block is at least 8 bytes,
                    // 8-aligned, and its first word links the next.
                    let next = unsafe { list.head.cast::<*mut u8>().read() };
                    cache[c].set(FreeList {
                        head: next,
                        len: list.len - 1,
                    });
                }
                list.head
            })
            .unwrap_or(ptr::null_mut());
        if !cached.is_null() {
            return cached;
        }
        // SAFETY: the class layout has a non-zero size.
        unsafe { mimalloc::MiMalloc.alloc(class_layout(c)) }
    }

    #[inline]
    unsafe fn dealloc(&self, block: *mut u8, layout: Layout) {
        let Some(c) = class_of(&layout) else {
            // SAFETY: allocated by mimalloc with this layout.
            return unsafe { mimalloc::MiMalloc.dealloc(block, layout) };
        };
        let kept = CACHE
            .try_with(|cache| {
                let list = cache[c].get();
                if list.len >= MAX_PER_CLASS {
                    return false;
                }
                // SAFETY: the block is ours now, at least 8 bytes and
                // 8-aligned (it came from this class).
                unsafe { block.cast::<*mut u8>().write(list.head) };
                cache[c].set(FreeList {
                    head: block,
                    len: list.len + 1,
                });
                true
            })
            .unwrap_or(false);
        if !kept {
            // SAFETY: allocated by mimalloc with the class layout.
            unsafe { mimalloc::MiMalloc.dealloc(block, class_layout(c)) };
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if class_of(&layout).is_some() {
            // SAFETY: as `alloc`; the block holds at least `layout.size()`.
            let block = unsafe { self.alloc(layout) };
            if !block.is_null() {
                unsafe { block.write_bytes(0, layout.size()) };
            }
            return block;
        }
        // SAFETY: forwarded as given.
        unsafe { mimalloc::MiMalloc.alloc_zeroed(layout) }
    }

    #[inline]
    unsafe fn realloc(&self, block: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller's layout is valid; the new one keeps its
        // alignment and a non-zero size.
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        match (class_of(&layout), class_of(&new_layout)) {
            // SAFETY: allocated by mimalloc with this layout.
            (None, None) => unsafe { mimalloc::MiMalloc.realloc(block, layout, new_size) },
            (Some(a), Some(b)) if a == b => block,
            _ => {
                // SAFETY: a fresh block for the new size, the overlap
                // copied, the old block freed as it was allocated.
                let fresh = unsafe { self.alloc(new_layout) };
                if !fresh.is_null() {
                    unsafe {
                        ptr::copy_nonoverlapping(block, fresh, layout.size().min(new_size));
                        self.dealloc(block, layout);
                    }
                }
                fresh
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(size: usize, align: usize) -> Layout {
        Layout::from_size_align(size, align).expect("valid layout")
    }

    /// Each class: blocks 8-aligned, the last freed given out first, and
    /// past the cap freed blocks go back to mimalloc (the cache's length
    /// stays at the cap); a flush empties every class.
    #[test]
    fn small_blocks_come_back_last_in_first_out() {
        let a = Allocator;
        for size in [1, 8, 16, 17, 24, 40, 64, 100, 128] {
            let l = layout(size, 8);
            unsafe {
                let x = a.alloc(l);
                let y = a.alloc(l);
                assert!(!x.is_null() && !y.is_null() && x != y);
                assert_eq!(x as usize % 8, 0, "size {size}");
                a.dealloc(x, l);
                a.dealloc(y, l);
                assert_eq!(a.alloc(l), y, "size {size}: the last freed first");
                assert_eq!(a.alloc(l), x, "size {size}");
                a.dealloc(x, l);
                a.dealloc(y, l);
            }
        }
        let l = layout(48, 8);
        let c = class_of(&l).expect("cached");
        let blocks: Vec<*mut u8> = (0..MAX_PER_CLASS + 10).map(|_| unsafe { a.alloc(l) }).collect();
        for &b in &blocks {
            unsafe { a.dealloc(b, l) };
        }
        assert_eq!(CACHE.with(|cache| cache[c].get().len), MAX_PER_CLASS);
        flush_thread_cache();
        assert!(CACHE.with(|cache| cache.iter().all(|l| l.get().len == 0 && l.get().head.is_null())));
        unsafe {
            let x = a.alloc(l);
            a.dealloc(x, l);
            assert_eq!(a.alloc(l), x, "the cache works again after a flush");
            a.dealloc(x, l);
        }
        flush_thread_cache();
    }

    /// Large or over-aligned blocks bypass the cache.
    #[test]
    fn large_and_over_aligned_blocks_bypass_the_cache() {
        assert_eq!(class_of(&layout(MAX_CACHED_BYTES + 1, 8)), None);
        assert_eq!(class_of(&layout(64, 16)), None);
        assert_eq!(class_of(&layout(0, 1)), None);
        assert_eq!(class_of(&layout(MAX_CACHED_BYTES, 8)), Some(CLASSES - 1));
        assert_eq!(class_of(&layout(9, 4)), class_of(&layout(16, 8)));
        let a = Allocator;
        let l = layout(64, 64);
        unsafe {
            let x = a.alloc(l);
            assert_eq!(x as usize % 64, 0);
            a.dealloc(x, l);
        }
    }

    /// A pseudo-random mix of allocations, frees and reallocations across
    /// and inside classes: every live block keeps its own bytes, zeroed
    /// allocations are zero, and no two live blocks overlap.
    #[test]
    fn blocks_keep_their_contents_through_reuse_and_realloc() {
        let a = Allocator;
        let mut live: Vec<(*mut u8, Layout, u8)> = Vec::new();
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let fill = |p: *mut u8, n: usize, tag: u8| unsafe { p.write_bytes(tag, n) };
        let check = |p: *mut u8, n: usize, tag: u8| {
            let bytes = unsafe { std::slice::from_raw_parts(p, n) };
            assert!(bytes.iter().all(|&b| b == tag), "a block lost its contents");
        };
        for step in 0..20_000u32 {
            let r = next();
            let tag = (step % 251) as u8 + 1;
            match r % 4 {
                0 | 1 => {
                    let l = layout(1 + (r >> 8) as usize % 300, [1, 8, 16, 32][(r >> 20) as usize % 4]);
                    let p = if r % 8 == 1 {
                        let p = unsafe { a.alloc_zeroed(l) };
                        check(p, l.size(), 0);
                        p
                    } else {
                        unsafe { a.alloc(l) }
                    };
                    assert!(!p.is_null());
                    assert_eq!(p as usize % l.align(), 0);
                    fill(p, l.size(), tag);
                    live.push((p, l, tag));
                }
                2 if !live.is_empty() => {
                    let (p, l, t) = live.swap_remove((r >> 8) as usize % live.len());
                    check(p, l.size(), t);
                    unsafe { a.dealloc(p, l) };
                }
                3 if !live.is_empty() => {
                    let k = (r >> 8) as usize % live.len();
                    let (p, l, t) = live[k];
                    let new_size = 1 + (r >> 24) as usize % 300;
                    let q = unsafe { a.realloc(p, l, new_size) };
                    assert!(!q.is_null());
                    check(q, l.size().min(new_size), t);
                    let nl = layout(new_size, l.align());
                    fill(q, new_size, tag);
                    live[k] = (q, nl, tag);
                }
                _ => {}
            }
        }
        let mut spans: Vec<(usize, usize)> = live.iter().map(|(p, l, _)| (*p as usize, l.size())).collect();
        spans.sort_unstable();
        assert!(
            spans.windows(2).all(|w| w[0].0 + w[0].1 <= w[1].0),
            "live blocks overlap"
        );
        for (p, l, t) in live {
            check(p, l.size(), t);
            unsafe { a.dealloc(p, l) };
        }
    }
}
