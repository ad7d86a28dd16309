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
