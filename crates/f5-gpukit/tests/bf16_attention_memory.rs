//! The bf16 attention of `CpuBf16Backend` must, like the f32 one, never hold the scores of every
//! head at once (32·2000·2000·4 B = 512 MB at n = 2000 with 32 batch·head slices), and allocates
//! nothing per call beyond the per-thread scratch it reuses. A counting allocator records the
//! peak of live heap bytes during one call (this test binary has only this one test, so nothing
//! else allocates meanwhile apart from the rayon workers running the op itself).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use f5_gpukit::{cpu_bf16_missing_feature, AttentionSpec, Backend, CpuBf16Backend};

struct Counting;
static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let now = LIVE.fetch_add(layout.size(), Ordering::SeqCst) + layout.size();
            PEAK.fetch_max(now, Ordering::SeqCst);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::SeqCst);
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn bf16_attention_peak_memory_is_far_below_all_scores() {
    if let Some(missing) = cpu_bf16_missing_feature() {
        println!("bf16 attention memory: not run (this CPU lacks {missing})");
        return;
    }
    let (bh, n, d) = (32usize, 2000usize, 64usize);
    let kit = CpuBf16Backend::with_threads(2).expect("pool");
    let len = bh * n * d;
    let fill =
        |seed: u32| -> Vec<f32> { (0..len as u32).map(|i| ((i.wrapping_mul(2654435761) ^ seed) % 1000) as f32 / 1000.0 - 0.5).collect() };
    let (q, k, v) = (kit.upload(&fill(1)).unwrap(), kit.upload(&fill(2)).unwrap(), kit.upload(&fill(3)).unwrap());
    let mut out = kit.alloc(len).unwrap();
    let spec = AttentionSpec { batch_heads: bh, n, head_dim: d, scale: 0.125 };
    kit.attention(&spec, &q, &k, &v, &mut out).unwrap(); // warm the pool's threads and scratch
    let before = LIVE.load(Ordering::SeqCst);
    PEAK.store(before, Ordering::SeqCst);
    kit.attention(&spec, &q, &k, &v, &mut out).unwrap();
    let extra = PEAK.load(Ordering::SeqCst) - before;
    let all_scores = bh * n * n * 4;
    let one_head_scores = n * n * 4;
    eprintln!(
        "bf16 attention n={n} bh={bh}: peak extra {:.1} MiB (all scores would be {:.0} MiB)",
        extra as f64 / 1048576.0,
        all_scores as f64 / 1048576.0
    );
    // At most: packed K and V (bf16, together the size of K in f32: len·4 B) where the call lands
    // on a worker whose scratch was too small, plus a [96, n] block's scores and weights per
    // thread; under one head's full score matrix plus that, and far under all of them.
    assert!(extra < one_head_scores + len * 4, "peak extra {extra} B");
    assert!(extra < all_scores / 16, "peak extra {extra} B");
}
