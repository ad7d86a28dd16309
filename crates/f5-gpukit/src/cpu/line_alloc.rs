//! [`LineAligned`]: the system allocator, with every block of 1 KiB or more starting on a 64-byte
//! cache line.
//!
//! The CPU kernels read activations and weights a 512-bit vector at a time. The system allocator
//! aligns large blocks to 16 bytes, so from most buffers every such load straddles two cache
//! lines and costs two L1 accesses. The kit's own scratch and packed filters are aligned
//! whatever the allocator ([`LineVec`](super::lines::LineVec)); activations and weights are
//! `Vec`s the allocator places. Installed as the global allocator, this one places them on lines
//! too. Measured on a 2-core Ice Lake server VM, 2 threads, with the kit's own buffers already
//! aligned: Kokoro's int8 forward of 58 tokens took 0.97–1.02 s of CPU time instead of
//! 1.04–1.07 s, of 512 tokens 7.6–7.8 s instead of 8.1–8.5 s.

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

// SAFETY: every call is passed on to `System` with the layout `placed` gives, which is a
// function of the caller's layout alone, so a block is freed (or resized) with the very layout it
// was allocated with; `placed` only raises the alignment, which every contract here allows.
unsafe impl GlobalAlloc for LineAligned {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract (non-zero size), unchanged by `placed`.
        unsafe { System.alloc(Self::placed(layout)) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as in `alloc`.
        unsafe { System.alloc_zeroed(Self::placed(layout)) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `alloc` with this `layout`, hence from `System` with `placed(layout)`.
        unsafe { System.dealloc(ptr, Self::placed(layout)) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let old = Self::placed(layout);
        // The caller guarantees `new_size` with `layout.align()` is a valid layout.
        let Ok(new) = Layout::from_size_align(new_size, layout.align()).map(Self::placed) else {
            return std::ptr::null_mut();
        };
        if new.align() == old.align() {
            // SAFETY: `ptr` is `System`'s block of layout `old`; the new block keeps its alignment.
            return unsafe { System.realloc(ptr, old, new_size) };
        }
        // Crossing `MIN_SIZE` changes the alignment, which `System.realloc` keeps: move the block.
        // SAFETY: `new` has a non-zero size (the caller's contract); both blocks hold at least
        // the smaller size, and the old one is freed with the layout it was allocated with.
        unsafe {
            let moved = System.alloc(new);
            if !moved.is_null() {
                std::ptr::copy_nonoverlapping(ptr, moved, layout.size().min(new_size));
                System.dealloc(ptr, old);
            }
            moved
        }
    }
}
