//! The CPU backend's results do not depend on how many threads compute them. A GEMM splits
//! few-row products into fixed-width column blocks that run in parallel — on one thread as on
//! many, so each element's sum over k is formed the same way (no split of k across threads, no
//! block width derived from the thread count); instance norm sums its statistics over fixed
//! blocks of rows, added in block order. Reproducible output across machines with different
//! core counts rests on it (and the engine test that compares a one-thread engine with the
//! default synthesizer bit for bit).

use f5_gpukit::{Backend, CpuBackend, GemmSpec, InstanceNormSpec};

fn values(len: usize, seed: u64) -> Vec<f32> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 40) as f32 / (1u64 << 24) as f32 - 0.5
        })
        .collect()
}

fn product(threads: usize, spec: &GemmSpec, a: &[f32], w: &[f32], bias: &[f32]) -> Vec<u32> {
    let kit = CpuBackend::with_threads(threads).expect("a CPU pool");
    let (a, w, bias) = (kit.upload(a).unwrap(), kit.upload_weight(w).unwrap(), kit.upload(bias).unwrap());
    let mut c = kit.alloc(spec.m * spec.n).unwrap();
    kit.gemm(spec, &a, &w, Some(&bias), &mut c).unwrap();
    kit.download(&c).unwrap().iter().map(|v| v.to_bits()).collect()
}

#[test]
fn few_row_and_many_row_products_have_the_same_bits_on_1_2_and_3_threads() {
    // ALBERT's FFN down-projection of a 58-token sentence (split into column blocks on more
    // than one thread), a 300-column one with a partial last block, and a many-row product
    // (left to the gemm crate's own threading).
    for &(m, k, n) in &[(58, 2048, 768), (19, 300, 300), (100, 512, 257), (300, 200, 260)] {
        let spec = GemmSpec::linear(m, k, n);
        let (a, w, bias) = (values(m * k, 1), values(n * k, 2), values(n, 3));
        let one = product(1, &spec, &a, &w, &bias);
        for threads in [2, 3] {
            let many = product(threads, &spec, &a, &w, &bias);
            let differ = one.iter().zip(&many).filter(|(x, y)| x != y).count();
            assert_eq!(differ, 0, "{m}×{k}×{n}: {differ} of {} elements differ between 1 and {threads} threads", one.len());
        }
    }
}

fn normalised(threads: usize, spec: &InstanceNormSpec, x: &[f32], style: &[f32]) -> Vec<u32> {
    let kit = CpuBackend::with_threads(threads).expect("a CPU pool");
    let (x, style) = (kit.upload(x).unwrap(), kit.upload(style).unwrap());
    let mut out = kit.alloc(spec.batch * spec.n * spec.c).unwrap();
    kit.instance_norm(spec, &x, None, Some(&style), &mut out).unwrap();
    kit.download(&out).unwrap().iter().map(|v| v.to_bits()).collect()
}

#[test]
fn instance_norm_has_the_same_bits_on_1_2_and_3_threads() {
    // Long enough for several blocks of rows in the statistics (and a partial last one), with
    // an offset so that the order of the f64 sums shows in the low bits.
    for &(n, c) in &[(3001, 128), (700, 5)] {
        let spec = InstanceNormSpec { batch: 2, n, c, eps: 1e-5 };
        let x: Vec<f32> = values(2 * n * c, 4).iter().map(|v| v + 3.0).collect();
        let style = values(2 * 2 * c, 5);
        let one = normalised(1, &spec, &x, &style);
        for threads in [2, 3] {
            let many = normalised(threads, &spec, &x, &style);
            let differ = one.iter().zip(&many).filter(|(a, b)| a != b).count();
            assert_eq!(differ, 0, "n {n} c {c}: {differ} of {} values differ between 1 and {threads} threads", one.len());
        }
    }
}
