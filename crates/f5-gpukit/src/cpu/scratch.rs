//! Reusable per-thread scratch space. The ops that need temporary memory (attention's packed
//! keys and score tiles, the convolutions' repacked filters, im2col matrices and bf16 input
//! blocks) run on every step of the sampler, or ~100 times per Kokoro forward, with the same
//! sizes; taking their buffers from here means they allocate (and zero) only the first time a
//! size is seen, not on every call and every block.
//!
//! Every buffer handed out starts on a 64-byte boundary, a cache line: the kernels read them a
//! 512-bit vector at a time, and a vector that straddles two lines costs two L1 accesses. The
//! allocator's own alignment (16 bytes) put every packed panel of the few-row GEMM across lines,
//! which cost it about a fifth of its speed.
//!
//! A thread's pool holds as many buffers as that thread's deepest nesting, so a buffer every
//! worker thread may end up asking for is held once per thread. The convolutions' packed filter
//! banks (megabytes each, packed once per call by whichever thread runs the op) come from the
//! process-wide pools instead ([`with_shared_scratch`]): held once per op running at the same
//! time, not once per thread.

use std::cell::RefCell;
use std::sync::Mutex;
use std::thread::LocalKey;

use crate::cpu::lines::LINE;

type Pool<T> = RefCell<Vec<Vec<T>>>;

thread_local! {
    static POOL: Pool<f32> = const { RefCell::new(Vec::new()) };
    static POOL_U32: Pool<u32> = const { RefCell::new(Vec::new()) };
    static POOL_USIZE: Pool<usize> = const { RefCell::new(Vec::new()) };
}

static SHARED: Mutex<Vec<Vec<f32>>> = Mutex::new(Vec::new());
static SHARED_U32: Mutex<Vec<Vec<u32>>> = Mutex::new(Vec::new());

/// Runs `f` on a buffer of exactly `len` values whose contents are left over from an earlier
/// use: `f` must write every value before it reads it. Nested calls on one thread get
/// distinct buffers; each thread keeps at most as many buffers as its deepest nesting.
pub fn with_scratch<R>(len: usize, f: impl FnOnce(&mut [f32]) -> R) -> R {
    with_pool(&POOL, len, f)
}

/// [`with_scratch`] for 32-bit words (the bf16 kernels' packed pairs), from its own pool.
pub fn with_scratch_u32<R>(len: usize, f: impl FnOnce(&mut [u32]) -> R) -> R {
    with_pool(&POOL_U32, len, f)
}

/// [`with_scratch`] for offsets and indices, from its own pool.
pub fn with_scratch_usize<R>(len: usize, f: impl FnOnce(&mut [usize]) -> R) -> R {
    with_pool(&POOL_USIZE, len, f)
}

/// [`with_scratch`] from the process-wide pool: for buffers any worker thread may ask for, so
/// that each is held once per concurrent use rather than once per thread.
pub fn with_shared_scratch<R>(len: usize, f: impl FnOnce(&mut [f32]) -> R) -> R {
    with_shared(&SHARED, len, f)
}

/// [`with_shared_scratch`] for 32-bit words.
pub fn with_shared_scratch_u32<R>(len: usize, f: impl FnOnce(&mut [u32]) -> R) -> R {
    with_shared(&SHARED_U32, len, f)
}

fn with_pool<T: Copy + Default + 'static, R>(pool: &'static LocalKey<Pool<T>>, len: usize, f: impl FnOnce(&mut [T]) -> R) -> R {
    // The buffer is taken out of the pool while `f` runs (not borrowed in place), so a nested
    // call, or a task rayon runs on this thread while `f` waits, finds the pool usable.
    let mut buf = pool.with(|pool| take(&mut pool.borrow_mut(), len + slack::<T>()));
    let start = line_start(&buf);
    let result = f(&mut buf[start..start + len]);
    pool.with(|pool| pool.borrow_mut().push(buf));
    result
}

fn with_shared<T: Copy + Default, R>(pool: &Mutex<Vec<Vec<T>>>, len: usize, f: impl FnOnce(&mut [T]) -> R) -> R {
    // As `with_pool`: the lock is held only to take and to give back, never while `f` runs.
    // A panic elsewhere cannot leave the list half-changed, so a poisoned lock is used as is.
    let mut buf = take(&mut pool.lock().unwrap_or_else(|poison| poison.into_inner()), len + slack::<T>());
    let start = line_start(&buf);
    let result = f(&mut buf[start..start + len]);
    pool.lock().unwrap_or_else(|poison| poison.into_inner()).push(buf);
    result
}

/// Elements a buffer holds beyond the request, so that a start on a line boundary always fits.
fn slack<T>() -> usize {
    (LINE / std::mem::size_of::<T>()).saturating_sub(1)
}

/// The index of `buf`'s first element on a line boundary (within [`slack`] of the start: the
/// allocator aligns to at least the element's size).
fn line_start<T>(buf: &[T]) -> usize {
    let size = std::mem::size_of::<T>();
    let misalign = buf.as_ptr() as usize % LINE;
    if misalign == 0 {
        0
    } else {
        ((LINE - misalign) / size).min(slack::<T>())
    }
}

/// Takes the smallest buffer of `pool` that holds `len` values, else the largest grown to
/// exactly `len`, so one big request does not make every later small one hold a big buffer.
fn take<T: Copy + Default>(pool: &mut Vec<Vec<T>>, len: usize) -> Vec<T> {
    let fit = (0..pool.len()).filter(|&i| pool[i].len() >= len).min_by_key(|&i| pool[i].len());
    let pick = fit.or_else(|| (0..pool.len()).max_by_key(|&i| pool[i].len()));
    let mut buf = pick.map(|i| pool.swap_remove(i)).unwrap_or_default();
    if buf.len() < len {
        // Exactly `len`: `resize` alone may double the capacity, and the buffer is kept.
        buf.reserve_exact(len - buf.len());
        buf.resize(len, T::default());
    }
    buf
}

#[cfg(test)]
mod tests {
    use super::{with_scratch, with_scratch_u32, with_shared, with_shared_scratch_u32};
    use std::sync::Mutex;

    #[test]
    fn nested_requests_get_distinct_buffers_and_sizes_are_exact() {
        with_scratch(10, |outer| {
            outer.fill(1.0);
            with_scratch(20, |inner| {
                assert_eq!(inner.len(), 20);
                inner.fill(2.0);
            });
            assert!(outer.iter().all(|&v| v == 1.0), "the inner request reused the outer buffer");
        });
        // Both buffers are back in the pool: a later request of either size allocates nothing
        // new and still gets exactly the length it asked for.
        with_scratch(5, |b| assert_eq!(b.len(), 5));
        with_scratch(20, |b| assert_eq!(b.len(), 20));
    }

    #[test]
    fn the_word_pool_is_separate_and_reuses_its_buffers() {
        let first = with_scratch_u32(64, |b| {
            b.fill(7);
            with_scratch_u32(8, |inner| {
                inner.fill(9);
                assert_eq!(inner.len(), 8);
            });
            assert!(b.iter().all(|&v| v == 7), "the inner request reused the outer buffer");
            b.as_ptr() as usize
        });
        // The same size again gets the same allocation back, contents left over.
        with_scratch_u32(64, |b| {
            assert_eq!(b.as_ptr() as usize, first, "a request of a pooled size allocated anew");
            assert!(b.iter().all(|&v| v == 7));
        });
    }

    #[test]
    fn the_shared_pool_serves_every_thread_from_one_buffer() {
        // A pool of the test's own: the process-wide ones are shared with the convolutions that
        // other tests run at the same time, and a larger request of theirs may take and grow
        // the buffer between this test's two requests.
        static POOL: Mutex<Vec<Vec<u32>>> = Mutex::new(Vec::new());
        const LEN: usize = 77_777;
        let first = with_shared(&POOL, LEN, |b| {
            assert_eq!(b.len(), LEN);
            b.fill(3);
            b.as_ptr() as usize
        });
        // Another thread gets the same allocation back (a thread-local pool would allocate anew).
        let (same, kept) =
            std::thread::spawn(move || with_shared(&POOL, LEN, |b| (b.as_ptr() as usize == first, b.iter().all(|&v| v == 3))))
                .join()
                .expect("the other thread");
        assert!(same && kept, "the other thread did not get the shared buffer back");
        // Nested requests still get distinct buffers.
        with_shared(&POOL, LEN, |outer| {
            with_shared(&POOL, LEN, |inner| assert_ne!(outer.as_ptr(), inner.as_ptr()));
        });
        // The public entry points are this mechanism over the process-wide pools.
        with_shared_scratch_u32(LEN, |b| assert_eq!(b.len(), LEN));
    }

    #[test]
    fn every_buffer_starts_on_a_cache_line() {
        // Sizes that leave the allocator's pointer at every 16-byte offset from a line, nested so
        // that several allocations are live at once; each element type's pool.
        for len in [1usize, 3, 17, 1000, 4099, 70_001] {
            with_scratch(len, |a| {
                assert_eq!((a.as_ptr() as usize % 64, a.len()), (0, len));
                with_scratch(len + 5, |b| assert_eq!((b.as_ptr() as usize % 64, b.len()), (0, len + 5)));
            });
            with_scratch_u32(len, |a| assert_eq!((a.as_ptr() as usize % 64, a.len()), (0, len)));
            super::with_scratch_usize(len, |a| assert_eq!((a.as_ptr() as usize % 64, a.len()), (0, len)));
            super::with_shared_scratch(len, |a| assert_eq!((a.as_ptr() as usize % 64, a.len()), (0, len)));
        }
    }

    #[test]
    fn a_grown_buffer_holds_exactly_what_was_asked() {
        let mut pool: Vec<Vec<f32>> = vec![vec![0.0; 10]];
        let buf = super::take(&mut pool, 1000);
        assert_eq!((buf.len(), buf.capacity()), (1000, 1000));
    }
}
