//! Reusable per-thread scratch space. The ops that need temporary memory (attention's packed
//! keys and score tiles, the convolutions' repacked filters, im2col matrices and bf16 input
//! blocks) run on every step of the sampler, or ~100 times per Kokoro forward, with the same
//! sizes; taking their buffers from here means they allocate (and zero) only the first time a
//! size is seen, not on every call and every block.

use std::cell::RefCell;
use std::thread::LocalKey;

type Pool<T> = RefCell<Vec<Vec<T>>>;

thread_local! {
    static POOL: Pool<f32> = const { RefCell::new(Vec::new()) };
    static POOL_U32: Pool<u32> = const { RefCell::new(Vec::new()) };
    static POOL_USIZE: Pool<usize> = const { RefCell::new(Vec::new()) };
}

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

fn with_pool<T: Copy + Default + 'static, R>(pool: &'static LocalKey<Pool<T>>, len: usize, f: impl FnOnce(&mut [T]) -> R) -> R {
    // The buffer is taken out of the pool while `f` runs (not borrowed in place), so a nested
    // call, or a task rayon runs on this thread while `f` waits, finds the pool usable.
    let mut buf = pool.with(|pool| {
        let mut pool = pool.borrow_mut();
        // The smallest buffer that fits, else the largest (grown below), so one big request
        // does not make every later small one hold a big buffer as well.
        let fit = (0..pool.len()).filter(|&i| pool[i].len() >= len).min_by_key(|&i| pool[i].len());
        let pick = fit.or_else(|| (0..pool.len()).max_by_key(|&i| pool[i].len()));
        pick.map(|i| pool.swap_remove(i)).unwrap_or_default()
    });
    if buf.len() < len {
        buf.resize(len, T::default());
    }
    let result = f(&mut buf[..len]);
    pool.with(|pool| pool.borrow_mut().push(buf));
    result
}

#[cfg(test)]
mod tests {
    use super::{with_scratch, with_scratch_u32};

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
}
