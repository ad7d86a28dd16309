//! [`LineAligned`]: the system allocator, with every block of 1 KiB or more starting on a 64-byte
//! cache line, and on Linux the blocks over 32 MiB backed by transparent huge pages.
//!
//! On Linux the blocks of 1 KiB or more come from the C allocator's `malloc`/`calloc`, each a
//! little larger than asked, its start moved onto a line (the C block's address kept just before
//! it). Asking the system for a line-aligned block instead (`posix_memalign`) cannot say that the
//! memory is fresh, so a zeroed one was zeroed by writing every byte, which made all its pages
//! resident at once; `calloc` maps fresh memory unwritten, and such a block costs memory only
//! where it is written.
//!
//! The CPU kernels read activations and weights a 512-bit vector at a time. The system allocator
//! aligns large blocks to 16 bytes, so from most buffers every such load straddles two cache
//! lines and costs two L1 accesses. The kit's own scratch and packed filters are aligned
//! whatever the allocator ([`LineVec`](super::lines::LineVec)); activations and weights are
//! `Vec`s the allocator places. Installed as the global allocator, this one places them on lines
//! too. Measured on a 2-core Ice Lake server VM, 2 threads, with the kit's own buffers already
//! aligned: Kokoro's int8 forward of 58 tokens took 0.97–1.02 s of CPU time instead of
//! 1.04–1.07 s, of 512 tokens 7.6–7.8 s instead of 8.1–8.5 s.

//!
//! Huge pages: a forward allocates its activations fresh (Kokoro's 32 s input: ~165 blocks of a
//! megabyte or more, 1.3 GB in all, up to 80 MB each), and the system maps large blocks anew on
//! every allocation, so each 4 KiB page of them faults on first touch: ~200,000 faults a forward.
//! Where Linux offers transparent huge pages only on request (`madvise`, the common default),
//! this allocator asks for them on every block of more than [`LineAligned::HUGE_ABOVE`] bytes
//! (the 2 MiB-aligned part of it), so those blocks fault a 2 MiB page at a time and their TLB
//! entries cover 512 times as much. Only blocks that glibc always maps afresh and unmaps when
//! freed (past its largest mmap threshold, 32 MiB), as a precaution: smaller ones a warm
//! process serves from its heap, whose reused ranges would keep their huge pages between
//! requests. (`f5 serve`, int8, three nine-sentence requests, peak RSS after them: 642–645 MiB
//! with this, 604–658 MiB without huge pages, the spread of the runs; one run asking on blocks
//! from 4 MiB reached 663.) Measured on a 2-core Xeon VM (model 207), Kokoro int8 on its 32 s
//! input, three alternated runs with `F5_HUGE_PAGES=off` and without: page faults per process
//! 1.13–1.15 M → 0.52–0.57 M, CPU time per forward 4.12–4.36 → 3.90–4.04 s, best forward
//! 2.15–2.30 → 2.00–2.13 s (asking from 4 MiB: 0.33–0.36 M faults, the same times; the 3.8 s
//! input's buffers are a tenth as large: within noise there). `F5_HUGE_PAGES=off` turns the
//! request off for the process.

use std::alloc::{GlobalAlloc, Layout, System};

/// The system allocator with blocks of at least [`LineAligned::MIN_SIZE`] bytes aligned to a
/// 64-byte cache line (smaller ones as the system places them, so that small objects pay no
/// padding). Install it with `#[global_allocator]` in a binary that runs the CPU backend (the
/// `f5` binary does):
///
/// ```
/// #[global_allocator]
/// static ALLOCATOR: f5_gpukit::LineAligned = f5_gpukit::LineAligned;
///
/// let v = vec![0f32; 4096];
/// assert_eq!(v.as_ptr() as usize % 64, 0);
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct LineAligned;

impl LineAligned {
    /// Blocks from this many bytes start on a line.
    pub const MIN_SIZE: usize = 1024;
    /// The alignment those blocks get: a cache line.
    pub const LINE: usize = super::lines::LINE;

    /// Blocks of more than this many bytes ask for transparent huge pages (Linux): glibc maps
    /// each such block on its own (past its largest mmap threshold) and unmaps it when freed,
    /// and whole 2 MiB pages lie inside it.
    pub const HUGE_ABOVE: usize = 32 << 20;

    /// The layout the system allocator is asked for: `layout` aligned to a line when it is large.
    fn placed(layout: Layout) -> Layout {
        if layout.size() >= Self::MIN_SIZE && layout.align() < Self::LINE {
            // A power of two no larger than any size of 1 KiB or more: cannot fail.
            layout.align_to(Self::LINE).unwrap_or(layout)
        } else {
            layout
        }
    }
}

// SAFETY: on Linux a block `lined::takes` is served by `lined` (the C allocator, the start moved
// onto a line inside a slightly larger block); every other call is passed on to `System` with the
// layout `placed` gives. Both choices are functions of the caller's layout alone, so a block is
// freed (or resized) by the path that allocated it; `placed` only raises the alignment, which
// every contract here allows.
unsafe impl GlobalAlloc for LineAligned {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        #[cfg(target_os = "linux")]
        if lined::takes(layout) {
            return huge_pages::advise(lined::alloc(layout.size(), false), layout.size());
        }
        // SAFETY: the caller's contract (non-zero size), unchanged by `placed`.
        huge_pages::advise(unsafe { System.alloc(Self::placed(layout)) }, layout.size())
    }

    /// On Linux through `calloc`, which hands out memory the system has just mapped (a large
    /// block, or the heap grown) without writing it: its pages are zero until first written, so
    /// a zeroed buffer costs memory only where it is written. `System` zeroes a block aligned
    /// past 16 bytes by writing every byte, which made every page of it resident at once (a
    /// scratch buffer a fused kernel never writes included) and cost a pass over it.
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        #[cfg(target_os = "linux")]
        if lined::takes(layout) {
            return huge_pages::advise(lined::alloc(layout.size(), true), layout.size());
        }
        // SAFETY: as in `alloc`.
        huge_pages::advise(unsafe { System.alloc_zeroed(Self::placed(layout)) }, layout.size())
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        #[cfg(target_os = "linux")]
        if lined::takes(layout) {
            // SAFETY: `ptr` came from `lined::alloc`, the path `alloc` takes for this layout.
            return unsafe { lined::free(ptr) };
        }
        // SAFETY: `ptr` came from `alloc` with this `layout`, hence from `System` with `placed(layout)`.
        unsafe { System.dealloc(ptr, Self::placed(layout)) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // The caller guarantees `new_size` with `layout.align()` is a valid layout.
        let Ok(new_layout) = Layout::from_size_align(new_size, layout.align()) else {
            return std::ptr::null_mut();
        };
        #[cfg(target_os = "linux")]
        let same_path = match (lined::takes(layout), lined::takes(new_layout)) {
            (true, true) => {
                // SAFETY: `ptr` came from `lined::alloc` (the path for `layout`) and holds
                // `layout.size()` bytes.
                return huge_pages::advise(unsafe { lined::realloc(ptr, layout.size(), new_size) }, new_size);
            }
            (false, false) => Self::placed(new_layout).align() == Self::placed(layout).align(),
            _ => false,
        };
        #[cfg(not(target_os = "linux"))]
        let same_path = Self::placed(new_layout).align() == Self::placed(layout).align();
        if same_path {
            // SAFETY: `ptr` is `System`'s block of layout `placed(layout)`; the new block keeps
            // its alignment.
            return huge_pages::advise(unsafe { System.realloc(ptr, Self::placed(layout), new_size) }, new_size);
        }
        // Across `MIN_SIZE` the block changes path (or, off Linux, alignment, which
        // `System.realloc` keeps): a new block, the contents copied.
        // SAFETY: `new_layout` has a non-zero size (the caller's contract); both blocks hold at
        // least the smaller size, and the old one is freed by the path that allocated it.
        unsafe {
            let moved = self.alloc(new_layout);
            if !moved.is_null() {
                std::ptr::copy_nonoverlapping(ptr, moved, layout.size().min(new_size));
                self.dealloc(ptr, layout);
            }
            moved
        }
    }
}

/// Blocks of [`LineAligned::MIN_SIZE`] bytes or more (alignment up to a line) from the C
/// allocator's `malloc`, `calloc` and `realloc`, each asked for [`lined::SLACK`] bytes more: the
/// block handed out starts at the first line boundary at least a pointer's size into the C
/// block, and that pointer's size just before it holds the C block's address, for `free` and
/// `realloc`. So `calloc`'s zeroed memory keeps its untouched pages (see
/// [`GlobalAlloc::alloc_zeroed`] on [`LineAligned`]).
#[cfg(target_os = "linux")]
mod lined {
    use super::LineAligned;
    use std::alloc::Layout;

    /// Room for the C block's address.
    const HEADER: usize = std::mem::size_of::<usize>();
    /// Bytes asked for beyond the block: the header and the most that moving onto a line skips.
    pub(super) const SLACK: usize = HEADER + LineAligned::LINE - 1;

    /// Whether blocks of `layout` are served here: large, and aligned to a line at most (a wider
    /// alignment goes to the system's aligned allocation, as before).
    pub(super) fn takes(layout: Layout) -> bool {
        layout.size() >= LineAligned::MIN_SIZE && layout.align() <= LineAligned::LINE
    }

    /// The first line boundary at least [`HEADER`] bytes past `base`.
    fn start(base: usize) -> usize {
        (base + HEADER).next_multiple_of(LineAligned::LINE)
    }

    /// A block of `size` bytes on a line (zeroed with `zeroed`), or null.
    pub(super) fn alloc(size: usize, zeroed: bool) -> *mut u8 {
        let Some(asked) = size.checked_add(SLACK) else { return std::ptr::null_mut() };
        // SAFETY: plain C allocations of a non-zero size; a null result is passed on.
        let base = unsafe {
            if zeroed {
                libc::calloc(1, asked)
            } else {
                libc::malloc(asked)
            }
        } as *mut u8;
        if base.is_null() {
            return base;
        }
        let at = start(base as usize) - base as usize;
        // SAFETY: `at + size ≤ asked`, so the block and its header (the `HEADER` bytes before it,
        // at or past `base`) lie inside the C block.
        unsafe {
            let block = base.add(at);
            block.sub(HEADER).cast::<usize>().write_unaligned(base as usize);
            block
        }
    }

    /// The C block `block` lies in.
    ///
    /// # Safety
    /// `block` came from [`alloc`] or [`realloc`] and was not freed.
    unsafe fn base(block: *mut u8) -> *mut u8 {
        // SAFETY: the header before every block holds its C block's address.
        unsafe { block.sub(HEADER).cast::<usize>().read_unaligned() as *mut u8 }
    }

    /// Frees `block`.
    ///
    /// # Safety
    /// `block` came from [`alloc`] or [`realloc`] and was not freed.
    pub(super) unsafe fn free(block: *mut u8) {
        // SAFETY: the C block, from malloc/calloc/realloc, freed once.
        unsafe { libc::free(base(block).cast()) }
    }

    /// `block` (of `old` bytes) resized to `new` bytes, its first `min(old, new)` bytes kept;
    /// null, with `block` untouched, where the C allocator has no room.
    ///
    /// # Safety
    /// `block` came from [`alloc`] or [`realloc`], holds `old` bytes, and was not freed.
    pub(super) unsafe fn realloc(block: *mut u8, old: usize, new: usize) -> *mut u8 {
        let Some(asked) = new.checked_add(SLACK) else { return std::ptr::null_mut() };
        // SAFETY: the caller's contract.
        let old_base = unsafe { base(block) };
        let was_at = block as usize - old_base as usize;
        // SAFETY: a C block; on failure it is left as it was (and so is `block`).
        let new_base = unsafe { libc::realloc(old_base.cast(), asked) } as *mut u8;
        if new_base.is_null() {
            return new_base;
        }
        let at = start(new_base as usize) - new_base as usize;
        // SAFETY: the C block now holds `asked` bytes with the contents where they were
        // (`was_at` in); both `was_at` and `at` leave room for `min(old, new)` bytes and the
        // header inside it. The contents move first (the ranges may overlap), then the header
        // is written before the new start, outside them.
        unsafe {
            let moved = new_base.add(at);
            if at != was_at {
                std::ptr::copy(new_base.add(was_at), moved, old.min(new));
            }
            moved.sub(HEADER).cast::<usize>().write_unaligned(new_base as usize);
            moved
        }
    }
}

/// The request for transparent huge pages on large blocks.
mod huge_pages {
    /// A huge page (x86-64 and AArch64 with 4 KiB base pages).
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    pub(super) const PAGE: usize = 2 << 20;

    /// The 2 MiB-aligned pages inside `size` bytes at `at`: `(start, len)`, `len` 0 if none.
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    pub(super) fn inside(at: usize, size: usize) -> (usize, usize) {
        let Some(start) = at.checked_next_multiple_of(PAGE) else { return (at, 0) };
        let end = at.saturating_add(size) / PAGE * PAGE;
        (start, end.saturating_sub(start))
    }

    /// Asks Linux to back the huge pages inside the block `ptr` of `size` bytes with transparent
    /// huge pages, where it is over [`super::LineAligned::HUGE_ABOVE`] and the request is on;
    /// returns `ptr`. A refusal (no THP support, a kernel that says no) changes nothing.
    #[cfg(target_os = "linux")]
    pub(super) fn advise(ptr: *mut u8, size: usize) -> *mut u8 {
        if ptr.is_null() || size <= super::LineAligned::HUGE_ABOVE || !on() {
            return ptr;
        }
        let (start, len) = inside(ptr as usize, size);
        if len > 0 {
            // SAFETY: the range lies inside the block just allocated, which this process owns;
            // MADV_HUGEPAGE only sets how its pages are backed, never their contents.
            unsafe { libc::madvise(start as *mut libc::c_void, len, libc::MADV_HUGEPAGE) };
        }
        ptr
    }

    #[cfg(not(target_os = "linux"))]
    pub(super) fn advise(ptr: *mut u8, _size: usize) -> *mut u8 {
        ptr
    }

    /// Whether the request is on: unless `F5_HUGE_PAGES` is `off` or `0`, read once. Read with
    /// `getenv`, which does not allocate: this runs inside the allocator.
    #[cfg(target_os = "linux")]
    fn on() -> bool {
        use std::sync::atomic::{AtomicU8, Ordering};
        const UNKNOWN: u8 = 0;
        const ON: u8 = 1;
        const OFF: u8 = 2;
        static STATE: AtomicU8 = AtomicU8::new(UNKNOWN);
        match STATE.load(Ordering::Relaxed) {
            ON => true,
            OFF => false,
            _ => {
                // SAFETY: a NUL-terminated name; the value, if any, is read before returning.
                let value = unsafe { libc::getenv(c"F5_HUGE_PAGES".as_ptr()) };
                let off = !value.is_null() && {
                    // SAFETY: getenv's result points at a NUL-terminated string.
                    let v = unsafe { std::ffi::CStr::from_ptr(value) }.to_bytes();
                    v == b"off" || v == b"0"
                };
                STATE.store(if off { OFF } else { ON }, Ordering::Relaxed);
                !off
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::huge_pages::{inside, PAGE};
    use super::LineAligned;
    use std::alloc::{GlobalAlloc, Layout, System};

    #[test]
    fn huge_pages_requested_are_the_whole_ones_inside_the_block() {
        assert_eq!(inside(0, 3 * PAGE), (0, 3 * PAGE));
        assert_eq!(inside(16, 3 * PAGE), (PAGE, 2 * PAGE), "a block off the boundary loses its partial ends");
        assert_eq!(inside(PAGE - 16, PAGE + 32), (PAGE, PAGE));
        assert_eq!(inside(16, PAGE), (PAGE, 0), "nothing whole inside");
        // Any block the request is made for holds whole pages, wherever it starts.
        for at in [1, 4096, PAGE - 1, PAGE + 4112] {
            assert!(inside(at, LineAligned::HUGE_ABOVE + 1).1 >= PAGE, "at {at}");
        }
        assert_eq!(inside(usize::MAX - 8, 64).1, 0, "no overflow at the top of the address space");
    }

    /// The `VmFlags` of the mapping holding `addr`, from `/proc/self/smaps`.
    #[cfg(target_os = "linux")]
    fn vm_flags(addr: usize) -> Option<String> {
        let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
        let mut within = false;
        for line in smaps.lines() {
            let head = line.split_whitespace().next().unwrap_or("");
            if let Some((lo, hi)) = head.split_once('-').filter(|_| !head.ends_with(':')) {
                let (lo, hi) = (usize::from_str_radix(lo, 16).ok()?, usize::from_str_radix(hi, 16).ok()?);
                within = (lo..hi).contains(&addr);
            } else if within && line.starts_with("VmFlags:") {
                return Some(line.to_string());
            }
        }
        None
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn large_blocks_are_marked_for_huge_pages_and_the_system_allocators_are_not() {
        if !std::path::Path::new("/sys/kernel/mm/transparent_hugepage/enabled").exists() {
            println!("SKIP: this kernel has no transparent huge pages");
            return;
        }
        if std::env::var("F5_HUGE_PAGES").is_ok_and(|v| v == "off" || v == "0") {
            println!("SKIP: F5_HUGE_PAGES is off");
            return;
        }
        // Past glibc's largest mmap threshold, so each block is a mapping of its own.
        let layout = Layout::from_size_align(40 << 20, 8).expect("layout");
        // SAFETY: a non-zero size; each block is freed below with its layout.
        let (ours, theirs) = unsafe { (LineAligned.alloc(layout), System.alloc(layout)) };
        assert!(!ours.is_null() && !theirs.is_null());
        let probe = |p: *mut u8| inside(p as usize, layout.size()).0;
        let (ours_flags, theirs_flags) = (vm_flags(probe(ours)), vm_flags(probe(theirs)));
        // SAFETY: allocated above with these layouts.
        unsafe {
            LineAligned.dealloc(ours, layout);
            System.dealloc(theirs, layout);
        }
        let (ours_flags, theirs_flags) = (ours_flags.expect("our block's mapping"), theirs_flags.expect("the mapping"));
        // `hg`: MADV_HUGEPAGE was applied to the mapping.
        assert!(ours_flags.split_whitespace().any(|f| f == "hg"), "LineAligned's 40 MiB block: {ours_flags}");
        assert!(!theirs_flags.split_whitespace().any(|f| f == "hg"), "the system's own block: {theirs_flags}");
        // A block at the threshold (which glibc may serve from its heap) is left as it is.
        let at = Layout::from_size_align(LineAligned::HUGE_ABOVE, 8).expect("layout");
        // SAFETY: a non-zero size; freed below with its layout.
        let block = unsafe { LineAligned.alloc(at) };
        assert!(!block.is_null());
        let flags = vm_flags(inside(block as usize, at.size()).0);
        // SAFETY: allocated above with this layout.
        unsafe { LineAligned.dealloc(block, at) };
        let flags = flags.expect("the block's mapping");
        assert!(!flags.split_whitespace().any(|f| f == "hg"), "a block of HUGE_ABOVE bytes: {flags}");
    }
}
