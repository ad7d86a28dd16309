//! A zeroed buffer from `LineAligned` (and so the CPU backend's `alloc`) costs memory only where
//! it is written: Kokoro's generator allocates a scratch buffer per stage that its fused kernels
//! never write (80 MB at the long input's last stage), and writing zeros into every page up
//! front made all of it resident. Linux only (resident memory from `/proc/self/statm`); one test
//! in its own binary, so no other test allocates while it measures.

#[cfg(target_os = "linux")]
mod linux {
    use f5_gpukit::{Backend, CpuBackend, LineAligned};

    #[global_allocator]
    static ALLOCATOR: LineAligned = LineAligned;

    /// Resident bytes of this process.
    fn resident() -> usize {
        let statm = std::fs::read_to_string("/proc/self/statm").expect("/proc/self/statm");
        let pages: usize = statm.split_whitespace().nth(1).and_then(|p| p.parse().ok()).expect("resident pages");
        pages * 4096
    }

    const MB: usize = 1 << 20;

    #[test]
    fn a_zeroed_buffer_is_resident_where_written_only() {
        // Past glibc's largest mmap threshold: a mapping of its own, fresh whatever ran before.
        let values = 64 * MB / 4;
        let before = resident();
        let mut v = vec![0f32; values];
        let allocated = resident();
        assert_eq!(v.as_ptr() as usize % LineAligned::LINE, 0);
        // A page or two (the block's header) and the test's own noise, not 64 MB.
        assert!(allocated < before + 4 * MB, "a zeroed 64 MB block made {} MB resident", (allocated - before) / MB);
        // Writing a quarter of it makes that quarter resident, and it reads back; the rest is zero.
        v[..values / 4].fill(1.5);
        let written = resident();
        assert!(written >= allocated + 15 * MB, "a written 16 MB made {} MB resident", (written - allocated) / MB);
        assert!(v[..values / 4].iter().all(|&x| x == 1.5) && v[values / 4..].iter().step_by(1021).all(|&x| x == 0.0));
        drop(v);

        // The CPU backend's buffers are such blocks: zero, on a line, resident where written.
        let kit = CpuBackend::with_threads(1).expect("backend");
        let before = resident();
        let buf = kit.alloc(values).expect("alloc");
        assert!(resident() < before + 4 * MB, "CpuBackend::alloc of 64 MB made it resident");
        assert_eq!(buf.as_ptr() as usize % LineAligned::LINE, 0);
        assert!(buf.len() == values && buf.iter().step_by(997).all(|&x| x == 0.0));
    }
}
