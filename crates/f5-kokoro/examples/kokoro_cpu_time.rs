//! Kokoro-82M's forward on the CPU backend, timed alone (no reference run): the two full-size
//! inputs of `fixtures/kokoro/whole_full` (56 and 510 phonemes), the whole forward and its first
//! half (`align`), best of `--iters` warm runs. For before/after comparisons of the CPU kernels on
//! a machine too busy for the full `cargo xtask bench kokoro`.
//!
//! ```sh
//! cargo run --release -p f5-kokoro --example kokoro_cpu_time -- \
//!     --model target/refmodels/kokoro-counter.pth --config ../shared/kokoro/config.json --threads 2
//! ```
//!
//! Options: `--fixtures DIR` (default `fixtures/kokoro`), `--iters N` (default 5), `--only short|long`,
//! `--stages` (one extra traced run per input: the time between consecutive trace points, which
//! includes copying each traced activation to the host).

use std::path::{Path, PathBuf};
use std::time::Instant;

use f5_kokoro::{CpuBackend, Kokoro, KokoroConfig, Trace};
use f5_nn::Weights;

type AnyResult<T> = Result<T, Box<dyn std::error::Error>>;

/// Output samples per second.
const SAMPLE_RATE: f64 = 24_000.0;

struct Args {
    model: PathBuf,
    config: PathBuf,
    fixtures: PathBuf,
    threads: usize,
    iters: usize,
    only: Option<String>,
    stages: bool,
}

fn parse_args() -> AnyResult<Args> {
    let mut a = Args {
        model: PathBuf::from("target/refmodels/kokoro-counter.pth"),
        config: PathBuf::from("../shared/kokoro/config.json"),
        fixtures: PathBuf::from("fixtures/kokoro"),
        threads: 0,
        iters: 5,
        only: None,
        stages: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--model" => a.model = PathBuf::from(value()?),
            "--config" => a.config = PathBuf::from(value()?),
            "--fixtures" => a.fixtures = PathBuf::from(value()?),
            "--threads" => a.threads = value()?.parse()?,
            "--iters" => a.iters = value()?.parse()?,
            "--only" => a.only = Some(value()?),
            "--stages" => a.stages = true,
            other => return Err(format!("unknown option {other}").into()),
        }
    }
    Ok(a)
}

fn npy_f32(path: &Path) -> AnyResult<Vec<f32>> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let arr = npyz::NpyFile::new(&bytes[..])?;
    Ok(match arr.dtype() {
        npyz::DType::Plain(t) if t.type_char() == npyz::TypeChar::Int => arr.into_vec::<i64>()?.into_iter().map(|v| v as f32).collect(),
        npyz::DType::Plain(t) if t.size_field() == 8 => arr.into_vec::<f64>()?.into_iter().map(|v| v as f32).collect(),
        _ => arr.into_vec::<f32>()?,
    })
}

/// This process's user + system CPU seconds so far (Linux `/proc/self/stat`, 100 ticks a
/// second), or NaN elsewhere: on a shared machine the CPU time a run used moves less with the
/// other load than its wall time does.
fn cpu_seconds() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else { return f64::NAN };
    // Fields after the parenthesised command name: state is field 3, utime 14, stime 15.
    let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else { return f64::NAN };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let tick = |i: usize| fields.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(f64::NAN);
    (tick(11) + tick(12)) / 100.0
}

/// Best wall time of `iters` warm runs, and the mean CPU time per run.
fn best_of(iters: usize, mut f: impl FnMut() -> AnyResult<()>) -> AnyResult<(f64, f64)> {
    f()?; // warm-up: first-touch allocations and scratch growth
    let mut best = f64::INFINITY;
    let cpu0 = cpu_seconds();
    for _ in 0..iters.max(1) {
        let t = Instant::now();
        f()?;
        best = best.min(t.elapsed().as_secs_f64());
    }
    Ok((best, (cpu_seconds() - cpu0) / iters.max(1) as f64))
}

fn main() -> AnyResult<()> {
    let a = parse_args()?;
    let kit = CpuBackend::with_threads(a.threads)?;
    let config = KokoroConfig::open(&a.config)?;
    let mut w = Weights::open(&a.model)?;
    let model = Kokoro::from_weights(&mut w, config, kit)?;
    drop(w);
    let dir = a.fixtures.join("whole_full");
    for (name, prefix, speed) in [("short", "short_heart_s1", 1.0f32), ("long", "long510_mix_s0.8", 0.8)] {
        if a.only.as_deref().is_some_and(|o| o != name) {
            continue;
        }
        let ids: Vec<u32> = npy_f32(&dir.join(format!("{prefix}_ids.npy")))?.iter().map(|&v| v as u32).collect();
        let style = npy_f32(&dir.join(format!("{prefix}_ref_s.npy")))?;
        let mut samples = 0;
        let (whole, whole_cpu) = best_of(a.iters, || {
            samples = model.forward(&ids, &style, speed, 0, Trace::off())?.audio.len();
            Ok(())
        })?;
        let (half, half_cpu) = best_of(a.iters, || {
            model.align(&ids, &style, speed, &mut Trace::off())?;
            Ok(())
        })?;
        let audio = samples as f64 / SAMPLE_RATE;
        println!(
            "{name}: {} ids, {audio:.2} s audio: forward {whole:.3} s (RTF {:.3}, CPU {whole_cpu:.2} s), align {half:.3} s (CPU {half_cpu:.2} s), decode {:.3} s",
            ids.len(),
            whole / audio,
            whole - half
        );
        if a.stages {
            let mut last = Instant::now();
            let mut marks: Vec<(String, f64)> = Vec::new();
            let mut sink = |label: &str, _: Vec<f32>| {
                let now = Instant::now();
                marks.push((label.to_string(), (now - last).as_secs_f64()));
                last = now;
            };
            model.forward(&ids, &style, speed, 0, Trace::to(&mut sink))?;
            for (label, secs) in &marks {
                println!("  {label:<24} {:8.2} ms", secs * 1e3);
            }
        }
    }
    Ok(())
}
