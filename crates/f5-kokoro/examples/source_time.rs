//! Kokoro's harmonic-plus-noise source (`SineSource::generate`: F0 → 9 sines + PyTorch-exact
//! noise → one excitation signal) timed alone, at the lengths of the two full-size inputs of
//! `kokoro_cpu_time`: 460 F0 frames (3.83 s of audio, 138,000 samples) and 2,600 (32.5 s,
//! 780,000 samples). The F0 curve is synthetic (voiced 120–230 Hz with unvoiced gaps) and the
//! merge weights fixed: the source's cost does not depend on either. Best of `--iters` runs.
//!
//! ```sh
//! cargo run --release -p f5-kokoro --example source_time -- --threads 2
//! ```
//!
//! Options: `--threads N` (default 2), `--iters N` (default 8).

use std::time::Instant;

use f5_kokoro::source::SineSource;
use f5_nn::torch_rand::TorchGenerator;

type AnyResult<T> = Result<T, Box<dyn std::error::Error>>;

/// Samples per F0 frame in Kokoro's generator (upsampling × iSTFT hop).
const UPSAMPLE: usize = 300;

/// Large buffers on cache lines, as the `f5` binary has them (the CPU kernels' vector loads
/// straddle two lines from the system allocator's 16-byte alignment).
#[global_allocator]
static ALLOCATOR: f5_gpukit::LineAligned = f5_gpukit::LineAligned;

fn main() -> AnyResult<()> {
    let (mut threads, mut iters) = (2usize, 8usize);
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--threads" => threads = value()?.parse()?,
            "--iters" => iters = value()?.parse()?,
            other => return Err(format!("unknown option {other:?} (--threads N, --iters N)").into()),
        }
    }
    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build()?;
    let source = SineSource { weight: [0.1, -0.2, 0.15, 0.05, -0.1, 0.08, 0.02, -0.03, 0.01], bias: 0.01, upsample: UPSAMPLE };
    println!("{threads} threads, best of {} runs", iters.max(1));
    for frames in [460usize, 2600] {
        let f0: Vec<f32> = (0..frames).map(|i| if i % 50 < 40 { 120.0 + (i % 37) as f32 * 3.1 } else { 0.0 }).collect();
        let best = pool.install(|| -> Result<f64, f5_kokoro::KokoroError> {
            let mut best = f64::INFINITY;
            for _ in 0..iters.max(1) {
                let mut rng = TorchGenerator::new(0);
                let start = Instant::now();
                let har = source.generate(&f0, &mut rng, None)?;
                best = best.min(start.elapsed().as_secs_f64());
                std::hint::black_box(har);
            }
            Ok(best)
        })?;
        println!("{frames} F0 frames ({} samples): {:.1} ms", frames * UPSAMPLE, best * 1e3);
    }
    Ok(())
}
