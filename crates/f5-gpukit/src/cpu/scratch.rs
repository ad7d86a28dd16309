//! Reusable per-thread scratch space. The ops that need temporary memory (attention's packed
//! keys and score tiles, the grouped convolution's repacked filters and im2col matrix) run on
//! every step of the sampler with the same sizes; taking their buffers from here means they
//! allocate (and zero) only the first time a size is seen, not 32 times per utterance.

use std::cell::RefCell;

thread_local! {
    static POOL: RefCell<Vec<Vec<f32>>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` on a buffer of exactly `len` values whose contents are left over from an earlier
/// use: `f` must write every value before it reads it. Nested calls on one thread get
/// distinct buffers; each thread keeps at most as many buffers as its deepest nesting.
pub fn with_scratch<R>(len: usize, f: impl FnOnce(&mut [f32]) -> R) -> R {
    let mut buf = POOL.with(|pool| {
        let mut pool = pool.borrow_mut();
        // The smallest buffer that fits, else the largest (grown below), so one big request
        // does not make every later small one hold a big buffer as well.
        let fit = (0..pool.len()).filter(|&i| pool[i].len() >= len).min_by_key(|&i| pool[i].len());
        let pick = fit.or_else(|| (0..pool.len()).max_by_key(|&i| pool[i].len()));
        pick.map(|i| pool.swap_remove(i)).unwrap_or_default()
    });
    if buf.len() < len {
        buf.resize(len, 0.0);
    }
    let result = f(&mut buf[..len]);
    POOL.with(|pool| pool.borrow_mut().push(buf));
    result
}

#[cfg(test)]
mod tests {
    use super::with_scratch;

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
}
