//! `LineAligned` as the global allocator of this test binary: large blocks start on a cache line,
//! small ones are left to the system, and resizing across the size limit keeps the contents.

use f5_gpukit::LineAligned;

#[global_allocator]
static ALLOCATOR: LineAligned = LineAligned;

#[test]
fn large_blocks_start_on_a_line_and_resizing_keeps_their_values() {
    // Sizes from the limit up, each an odd number of 16-byte units past it (which the system's
    // own 16-byte alignment would place off a line about three times in four).
    for floats in [256usize, 260, 1_000, 4_100, 70_004, 1 << 20] {
        let held: Vec<Vec<f32>> = (0..8).map(|i| vec![i as f32; floats]).collect();
        for v in &held {
            assert_eq!(v.as_ptr() as usize % LineAligned::LINE, 0, "{floats} floats off a line");
        }
        assert!(held.iter().enumerate().all(|(i, v)| v.iter().all(|&x| x == i as f32)));
    }
    // Growing a small vector past the limit moves it onto a line with its values; shrinking it
    // back below keeps them too.
    let mut v: Vec<u8> = (0..200u8).collect();
    v.reserve_exact(LineAligned::MIN_SIZE * 3);
    assert_eq!(v.as_ptr() as usize % LineAligned::LINE, 0);
    assert!(v.iter().enumerate().all(|(i, &x)| x == i as u8));
    v.shrink_to_fit();
    assert_eq!(v.len(), 200);
    assert!(v.iter().enumerate().all(|(i, &x)| x == i as u8));
    // Large to larger keeps the line.
    let mut w = vec![7u32; 2_000];
    w.reserve_exact(100_000);
    assert_eq!(w.as_ptr() as usize % LineAligned::LINE, 0);
    assert!(w.iter().all(|&x| x == 7) && w.len() == 2_000);
}

#[test]
fn resizing_large_blocks_up_and_down_keeps_the_line_and_the_values() {
    // Each resize may move the block to a C block whose start sits elsewhere relative to a line,
    // so the contents must move with it: sizes that grow past and shrink below each other, with
    // other blocks allocated in between so the C allocator cannot always extend in place.
    let mut v: Vec<u32> = (0..5_000u32).collect();
    let mut others = Vec::new();
    for (step, target) in [9_000usize, 300_000, 7_000, 20_000_000, 4_000, 1_100, 64_000, 300].into_iter().enumerate() {
        others.push(vec![step as u8; 3_000 + 977 * step]);
        let keep = v.len().min(target);
        if target > v.capacity() {
            v.reserve_exact(target - v.len());
        } else {
            v.truncate(keep);
            v.shrink_to(target);
        }
        if v.capacity() * 4 >= LineAligned::MIN_SIZE {
            assert_eq!(v.as_ptr() as usize % LineAligned::LINE, 0, "step {step}: capacity {}", v.capacity());
        }
        assert!(v.iter().enumerate().all(|(i, &x)| x == i as u32), "step {step}: values lost");
        let len = v.len() as u32;
        v.extend(len..target as u32);
    }
    assert!(others.iter().enumerate().all(|(i, o)| o.iter().all(|&b| b == i as u8)));
}

#[test]
fn zeroed_large_blocks_read_zero_even_where_memory_is_reused() {
    // A freed block's memory handed out again by `alloc_zeroed` must read zero, not what the
    // last owner wrote.
    for round in 0..4 {
        let dirty = vec![0xABu8; 3 << 20];
        drop(dirty);
        let clean = vec![0u8; 3 << 20];
        assert!(clean.iter().all(|&b| b == 0), "round {round}");
        assert_eq!(clean.as_ptr() as usize % LineAligned::LINE, 0);
    }
}
