//! Attention time of the CPU backend, f32 (`CpuBackend`) against bf16 (`CpuBf16Backend`:
//! q, k, v and the softmax weights in bf16, `vdpbf16ps`, f32 accumulation), on the shapes of the
//! full-size F5 DiT (16 heads × 64, CFG batch 2, so 32 batch·heads, n frames), and the error of
//! the bf16 output against f32.
//!
//! ```sh
//! cargo run --release -p f5-gpukit --example bf16_attention -- --threads 2
//! ```
//!
//! Options: `--threads N` (default 2), `--frames 1000,1500,2000`, `--rounds R` (default 5). The
//! two precisions run alternately in one process, `R` rounds of one call each after a warm-up,
//! and the best time of each is printed, so that other work on a shared machine disturbs both
//! alike. Timings are printed, never asserted.

use std::time::Instant;

use f5_gpukit::{AttentionSpec, Backend, CpuBackend, CpuBf16Backend};

type AnyResult<T> = Result<T, Box<dyn std::error::Error>>;

/// Gaussian-ish values (sum of 12 uniforms − 6) times `scale`, deterministic.
fn normal(len: usize, seed: u64, scale: f32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut unit = move || {
        s ^= s >> 12;
        s ^= s << 25;
        s ^= s >> 27;
        (s.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64
    };
    (0..len).map(|_| ((0..12).map(|_| unit()).sum::<f64>() - 6.0) as f32 * scale).collect()
}

fn timed(f: impl FnOnce() -> AnyResult<()>) -> AnyResult<f64> {
    let t = Instant::now();
    f()?;
    Ok(t.elapsed().as_secs_f64())
}

/// Large buffers on cache lines, as the `f5` binary has them (the CPU kernels' vector loads
/// straddle two lines from the system allocator's 16-byte alignment).
#[global_allocator]
static ALLOCATOR: f5_gpukit::LineAligned = f5_gpukit::LineAligned;

fn main() -> AnyResult<()> {
    let (mut threads, mut frames, mut rounds) = (2usize, vec![1000usize, 1500, 2000], 5usize);
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--threads" => threads = value.parse()?,
            "--frames" => frames = value.split(',').map(str::parse).collect::<Result<_, _>>()?,
            "--rounds" => rounds = value.parse()?,
            _ => return Err(format!("unknown option {flag}").into()),
        }
    }
    let f32_kit = CpuBackend::with_threads(threads)?;
    // The bf16 kernel itself, also where the backend would keep attention in f32 by default
    // (Intel cores: `CpuBf16Backend::bf16_attention`).
    let bf16_kit = CpuBf16Backend::with_threads(threads)?.with_bf16_dot_products(true);
    if !bf16_kit.bf16_attention() {
        return Err("this CPU lacks AVX-512 BF16: there is no bf16 attention kernel to time".into());
    }
    let (bh, d) = (32usize, 64usize);
    println!("{threads} threads, {bh} batch·heads × head_dim {d}, best of {rounds} alternated rounds; GFLOP/s = 4·bh·n²·d / time");
    println!("{:<16} {:>14} {:>14} {:>8} {:>12}", "bh×n×d", "f32 ms (GF/s)", "bf16 ms (GF/s)", "speed-up", "rel-L2 bf16");
    for n in frames {
        let len = bh * n * d;
        // Unit-variance q and k with the model's 1/√64 scale: scores of a few units, a softmax
        // neither uniform nor one-hot.
        let (q, k, v) = (normal(len, 1, 1.0), normal(len, 2, 1.0), normal(len, 3, 1.0));
        let spec = AttentionSpec { batch_heads: bh, n, head_dim: d, scale: 1.0 / (d as f32).sqrt() };
        let (qa, ka, va) = (f32_kit.upload(&q)?, f32_kit.upload(&k)?, f32_kit.upload(&v)?);
        let mut oa = f32_kit.alloc(len)?;
        let (qb, kb, vb) = (bf16_kit.upload(&q)?, bf16_kit.upload(&k)?, bf16_kit.upload(&v)?);
        let mut ob = bf16_kit.alloc(len)?;
        let (mut t32, mut t16) = (f64::INFINITY, f64::INFINITY);
        for round in 0..=rounds {
            let a = timed(|| Ok(f32_kit.attention(&spec, &qa, &ka, &va, &mut oa)?))?;
            let b = timed(|| Ok(bf16_kit.attention(&spec, &qb, &kb, &vb, &mut ob)?))?;
            // Round 0 warms the caches and the scratch pools.
            if round > 0 {
                t32 = t32.min(a);
                t16 = t16.min(b);
            }
        }
        let (y32, y16) = (f32_kit.download(&oa)?, bf16_kit.download(&ob)?);
        let num: f64 = y32.iter().zip(&y16).map(|(&a, &b)| (a as f64 - b as f64).powi(2)).sum();
        let den: f64 = y32.iter().map(|&a| (a as f64).powi(2)).sum();
        let flops = 4.0 * (bh * n * n * d) as f64;
        println!(
            "{:<16} {:>6.1} ({:>5.0}) {:>6.1} ({:>5.0}) {:>7.2}× {:>12.2e}",
            format!("{bh}×{n}×{d}"),
            t32 * 1e3,
            flops / t32 / 1e9,
            t16 * 1e3,
            flops / t16 / 1e9,
            t32 / t16,
            (num / den).sqrt()
        );
    }
    Ok(())
}
