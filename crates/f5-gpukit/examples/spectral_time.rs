//! The CPU backend's short-time Fourier transforms timed alone at the size of Kokoro's 32.5 s
//! input (ISTFTNet's 20-point transform, hop 5: 780,000 samples, 156,001 frames): the source
//! spectrum (`stft`, magnitudes and phases) and the final inverse (`istft` from magnitudes and
//! phases), with the `exp` and `sin` of the generator's head between them. The signal is
//! synthetic (a sine with a little deterministic noise): the cost does not depend on it. Best
//! of `--iters` runs; timings are printed, never asserted.
//!
//! ```sh
//! cargo run --release -p f5-gpukit --example spectral_time -- --threads 2
//! ```
//!
//! Options: `--threads N` (default 2), `--iters N` (default 8), `--samples N` (default 780000).

use std::time::Instant;

use f5_gpukit::{Activation, Backend, CpuBackend, StftSpec};

type AnyResult<T> = Result<T, Box<dyn std::error::Error>>;

/// Large buffers on cache lines, as the `f5` binary has them.
#[global_allocator]
static ALLOCATOR: f5_gpukit::LineAligned = f5_gpukit::LineAligned;

fn main() -> AnyResult<()> {
    let (mut threads, mut iters, mut samples) = (2usize, 8usize, 780_000usize);
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--threads" => threads = value()?.parse()?,
            "--iters" => iters = value()?.parse()?,
            "--samples" => samples = value()?.parse()?,
            other => return Err(format!("unknown option {other:?} (--threads N, --iters N, --samples N)").into()),
        }
    }
    let kit = CpuBackend::with_threads(threads)?;
    let signal: Vec<f32> = (0..samples).map(|i| (i as f32 * 0.01).sin() * 0.3 + ((i * 7919 % 1000) as f32 / 1000.0 - 0.5) * 0.01).collect();
    let spec = StftSpec::for_samples(1, samples, 20, 5);
    let values = spec.frames * spec.bins();
    let (mut mag, mut phase) = (vec![0.0f32; values], vec![0.0f32; values]);
    let mut audio = vec![0.0f32; spec.samples()];
    let (mut best_stft, mut best_head, mut best_istft) = (f64::INFINITY, f64::INFINITY, f64::INFINITY);
    for _ in 0..iters.max(1) {
        let start = Instant::now();
        kit.stft(&spec, &signal, &mut mag, &mut phase)?;
        best_stft = best_stft.min(start.elapsed().as_secs_f64());
        let start = Instant::now();
        kit.activation(Activation::Exp, &mut mag, values)?;
        kit.activation(Activation::Sin, &mut phase, values)?;
        best_head = best_head.min(start.elapsed().as_secs_f64());
        let start = Instant::now();
        kit.istft(&spec, &mag, &phase, &mut audio)?;
        best_istft = best_istft.min(start.elapsed().as_secs_f64());
        std::hint::black_box(&audio);
    }
    println!("{threads} threads, {samples} samples ({} frames of 20, hop 5), best of {} runs", spec.frames, iters.max(1));
    println!("stft {:.1} ms, exp + sin {:.1} ms, istft {:.1} ms", best_stft * 1e3, best_head * 1e3, best_istft * 1e3);
    Ok(())
}
