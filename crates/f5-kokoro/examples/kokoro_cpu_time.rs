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
//! includes copying each traced activation to the host), `--precision LIST` (comma-separated
//! `f32`, `bf16`, `int8`; `both` = `f32,bf16`; default f32): `bf16` runs on `CpuBf16Backend` (the
//! decoder's Linear weights, its AdaIN blocks' dense convs and the generator's dense convs and
//! upsamplers in bf16; f32 products on them where the CPU lacks AVX-512 BF16), `int8` on
//! `CpuBf16Backend::with_int8_convs` (those dense convs in int8; needs AVX-512 VNNI). With f32 in the list, each other precision is
//! timed back to back with it per input and compared with it (rel-L2 of F0, N, and of the audio
//! of the whole forward and of the decoder alone fed the f32 run's F0, N and features).

use std::path::{Path, PathBuf};
use std::time::Instant;

use f5_gpukit::Backend;
use f5_kokoro::{CpuBackend, CpuBf16Backend, Kokoro, KokoroConfig, Trace};
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
    precision: String,
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
        precision: "f32".into(),
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
            "--precision" => a.precision = value()?,
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

/// What one timed input leaves for the comparison: the traced F0, N and aligned features, the
/// durations, and the audio.
struct Outcome {
    f0: Vec<f32>,
    n: Vec<f32>,
    asr: Vec<f32>,
    durations: Vec<usize>,
    audio: Vec<f32>,
}

/// The rel-L2 difference, printed; "n/a" where a changed duration made the lengths differ.
fn rel_l2(got: &[f32], want: &[f32]) -> String {
    if got.len() != want.len() {
        return format!("n/a ({} vs {} values)", got.len(), want.len());
    }
    let (mut num, mut den) = (0.0f64, 0.0f64);
    for (&g, &w) in got.iter().zip(want) {
        num += (g as f64 - w as f64).powi(2);
        den += (w as f64).powi(2);
    }
    format!("{:.2e}", (num / den.max(1e-300)).sqrt())
}

/// Times `model` on one input (and prints its stages with `--stages`); returns its outputs.
fn time_one<B: Backend>(a: &Args, label: &str, model: &Kokoro<B>, ids: &[u32], style: &[f32], speed: f32) -> AnyResult<Outcome> {
    let mut samples = 0;
    let (whole, whole_cpu) = best_of(a.iters, || {
        samples = model.forward(ids, style, speed, 0, Trace::off())?.audio.len();
        Ok(())
    })?;
    let (half, half_cpu) = best_of(a.iters, || {
        model.align(ids, style, speed, &mut Trace::off())?;
        Ok(())
    })?;
    let audio = samples as f64 / SAMPLE_RATE;
    println!(
        "{label}: {} ids, {audio:.2} s audio: forward {whole:.3} s (RTF {:.3}, CPU {whole_cpu:.2} s), align {half:.3} s (CPU {half_cpu:.2} s), decode {:.3} s",
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
        model.forward(ids, style, speed, 0, Trace::to(&mut sink))?;
        for (label, secs) in &marks {
            println!("  {label:<24} {:8.2} ms", secs * 1e3);
        }
    }
    let (mut f0, mut n, mut asr) = (Vec::new(), Vec::new(), Vec::new());
    let mut sink = |name: &str, data: Vec<f32>| match name {
        "F0" => f0 = data,
        "N" => n = data,
        "asr" => asr = data,
        _ => {}
    };
    let speech = model.forward(ids, style, speed, 0, Trace::to(&mut sink))?;
    Ok(Outcome { f0, n, asr, durations: speech.durations, audio: speech.audio })
}

/// Large buffers on cache lines, as the `f5` binary has them (the CPU kernels' vector loads
/// straddle two lines from the system allocator's 16-byte alignment).
#[global_allocator]
static ALLOCATOR: f5_gpukit::LineAligned = f5_gpukit::LineAligned;

fn main() -> AnyResult<()> {
    let a = parse_args()?;
    let list = if a.precision == "both" { "f32,bf16" } else { a.precision.as_str() };
    let mut run_f32 = false;
    let mut lows: Vec<&str> = Vec::new();
    for p in list.split(',').map(str::trim) {
        match p {
            "f32" => run_f32 = true,
            "bf16" | "int8" => lows.push(p),
            other => return Err(format!("--precision {other}: expected f32, bf16, int8 (comma-separated) or both").into()),
        }
    }
    let config = KokoroConfig::open(&a.config)?;
    let mut w = Weights::open(&a.model)?;
    let m32 = if run_f32 { Some(Kokoro::from_weights(&mut w, config.clone(), CpuBackend::with_threads(a.threads)?)?) } else { None };
    let mut low_models = Vec::new();
    for &p in &lows {
        let kit = if p == "int8" { CpuBf16Backend::with_int8_convs(a.threads)? } else { CpuBf16Backend::with_threads(a.threads)? };
        low_models.push((p, Kokoro::from_weights(&mut w, config.clone(), kit)?));
    }
    drop(w);
    if let Ok(load) = std::fs::read_to_string("/proc/loadavg") {
        println!("load average before: {}", load.trim());
    }
    let dir = a.fixtures.join("whole_full");
    for (name, prefix, speed) in [("short", "short_heart_s1", 1.0f32), ("long", "long510_mix_s0.8", 0.8)] {
        if a.only.as_deref().is_some_and(|o| o != name) {
            continue;
        }
        let ids: Vec<u32> = npy_f32(&dir.join(format!("{prefix}_ids.npy")))?.iter().map(|&v| v as u32).collect();
        let style = npy_f32(&dir.join(format!("{prefix}_ref_s.npy")))?;
        let o32 = m32.as_ref().map(|m| time_one(&a, &format!("{name} f32"), m, &ids, &style, speed)).transpose()?;
        for (p, m) in &low_models {
            let o = time_one(&a, &format!("{name} {p}"), m, &ids, &style, speed)?;
            let Some(o32) = &o32 else { continue };
            let changed = o32.durations.iter().zip(&o.durations).filter(|(x, y)| x != y).count();
            // The decoder alone in this precision, fed the f32 run's F0, N and features: the
            // generator's error.
            let aligned = m.aligned_from_host(o32.durations.clone(), &o32.f0, &o32.n, &o32.asr)?;
            let decoded = m.decode(&aligned, &style, 0, &mut Trace::off())?;
            println!(
                "{name} {p} vs f32: {changed} of {} durations differ; rel-L2 F0 {}, N {}, audio {}; decoder alone: audio {}",
                o32.durations.len(),
                rel_l2(&o.f0, &o32.f0),
                rel_l2(&o.n, &o32.n),
                rel_l2(&o.audio, &o32.audio),
                rel_l2(&decoded, &o32.audio)
            );
        }
    }
    if let Ok(load) = std::fs::read_to_string("/proc/loadavg") {
        println!("load average after: {}", load.trim());
    }
    Ok(())
}
