//! The C allocator's setting for commands that synthesise once and exit.
//!
//! glibc's `malloc` serves blocks above its mmap threshold from `mmap` and returns them to the
//! system when freed, but the threshold is dynamic: each freed mmapped block raises it to that
//! block's size (up to 32 MiB), so after the weights load most of the forward's buffers come from
//! the heap, and freed heap blocks that later, larger buffers do not fit stay resident. On
//! Kokoro's short input that held ~40 MiB above what the forward uses at its peak (measured on a
//! 2-core Xeon: 295 → 255 MiB peak RSS in int8, 274 → 247 MiB in bf16, with a fixed 2 MiB
//! threshold). A process that runs one forward touches each buffer's pages for the first time
//! anyway, so mapping the large ones costs little there (~0.05 s of 1.1 s, within run-to-run
//! noise); a warm daemon, which reuses its heap across requests, keeps glibc's default.

/// Blocks of at least this many bytes come from `mmap` and go back to the system when freed.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const MMAP_THRESHOLD: libc::c_int = 2 << 20;

/// Fixes glibc's mmap threshold at [`MMAP_THRESHOLD`] (which also turns its dynamic raising
/// off). Does nothing with another C library or OS. Call before the model loads.
pub fn return_large_blocks_to_the_system() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes allocator parameters; it is safe to call at any time, and a
    // refusal (0) leaves the default in place, which is still correct.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD);
    }
}
