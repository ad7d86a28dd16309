//! `cargo xtask bench …`: figures for `docs/benchmarks.md`, ours and the reference's measured in
//! the same run on the same machine. Never asserts on time.

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use f5_dit::{F5Model, Overrides};
use f5_gpukit::{AttentionSpec, Backend, CpuBackend, CpuBf16Backend, GemmSpec};
use serde_json::Value;

use crate::machine;

/// The DiT's Linear shapes at ~21 s of audio (M = 2000 rows): out/qkv-sized and the FF pair.
const GEMM_SHAPES: [(usize, usize, usize); 4] = [(2000, 1024, 1024), (2000, 1024, 2048), (2000, 1024, 3072), (2000, 2048, 1024)];
/// (batch·heads, n, head_dim): one CFG batch of two × 16 heads.
const ATTENTION_SHAPES: [(usize, usize, usize); 2] = [(32, 1000, 64), (32, 2000, 64)];

struct Opts {
    threads: usize,
    min_seconds: f64,
    write: bool,
    /// `bench synth` only: step counts and runs per side.
    nfes: Vec<usize>,
    runs: usize,
    /// `bench synth`, `kokoro`, `kokoro-process`: f5's precisions, each against the same reference runs.
    precisions: Vec<String>,
    /// `bench kokoro` only: the release-layout checkpoint.
    model: Option<std::path::PathBuf>,
}

pub fn run(root: &Path, args: &[String]) -> Result<()> {
    let what = args.first().map(String::as_str);
    let mut opts = Opts {
        threads: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        min_seconds: 2.0,
        write: true,
        nfes: vec![16, 32],
        runs: 3,
        precisions: vec!["f32".to_string()],
        model: None,
    };
    let mut it = args.iter().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--threads" => opts.threads = it.next().context("--threads needs a number")?.parse()?,
            "--min-seconds" => opts.min_seconds = it.next().context("--min-seconds needs a number")?.parse()?,
            "--no-write" => opts.write = false,
            "--nfe" => {
                let list = it.next().context("--nfe needs a list such as 16,32")?;
                opts.nfes = list.split(',').map(|x| x.trim().parse::<usize>()).collect::<Result<_, _>>().context("--nfe")?;
            }
            "--precision" => {
                let list = it.next().context("--precision needs a list such as f32,bf16")?;
                opts.precisions = list.split(',').map(|x| x.trim().to_string()).filter(|x| !x.is_empty()).collect();
            }
            "--runs" => opts.runs = it.next().context("--runs needs a number")?.parse()?,
            "--model" => opts.model = Some(it.next().context("--model needs a path")?.into()),
            other => bail!("bench: unknown option {other:?}"),
        }
    }
    match what {
        Some("kit") => kit(root, &opts),
        Some("dit") => dit(root, &opts),
        Some("vocos") => vocos(root, &opts),
        Some("text") => text(root, &opts),
        Some("kokoro") => crate::bench_kokoro::run(
            root,
            &crate::bench_kokoro::KokoroOpts {
                threads: opts.threads,
                min_seconds: opts.min_seconds,
                write: opts.write,
                model: opts.model.clone(),
                precisions: opts.precisions.clone(),
            },
        ),
        Some("kokoro-process") => crate::bench_kokoro_process::run(
            root,
            &crate::bench_kokoro_process::ProcessOpts {
                threads: opts.threads,
                runs: opts.runs.max(1),
                write: opts.write,
                model_dir: opts.model.clone(),
                precisions: opts.precisions.clone(),
            },
        ),
        Some("synth") => crate::bench_synth::run(
            root,
            &crate::bench_synth::SynthOpts {
                threads: opts.threads,
                nfes: opts.nfes.clone(),
                precisions: opts.precisions.clone(),
                runs: opts.runs.max(1),
                write: opts.write,
            },
        ),
        _ => {
            bail!("usage: cargo xtask bench kit|dit|vocos|text|synth|kokoro|kokoro-process [--threads N] [--min-seconds S] [--nfe 16,32] [--precision f32,bf16] [--runs 3] [--model PATH] [--no-write]")
        }
    }
}

/// Best time of repeated runs after one warm-up: at least 3 runs, then until `min_seconds`
/// have been spent (at most 50). The minimum is the figure least disturbed by other work.
fn best_of(min_seconds: f64, mut f: impl FnMut()) -> f64 {
    f();
    let (mut best, mut spent, mut reps) = (f64::INFINITY, 0.0, 0);
    while reps < 3 || (spent < min_seconds && reps < 50) {
        let t = Instant::now();
        f();
        let dt = t.elapsed().as_secs_f64();
        best = best.min(dt);
        spent += dt;
        reps += 1;
    }
    best
}

fn fill(len: usize, seed: u32) -> Vec<f32> {
    (0..len as u32).map(|i| ((i.wrapping_mul(2_654_435_761) ^ seed.wrapping_mul(40503)) % 2001) as f32 / 1000.0 - 1.0).collect()
}

fn kit(root: &Path, o: &Opts) -> Result<()> {
    let kit = CpuBackend::with_threads(o.threads)?;
    let busy = machine::wait_idle(0.10, Duration::from_secs(120));
    eprintln!("bench kit: {} threads, machine {:.0}% busy before the run", o.threads, busy * 100.0);

    let mut ours_nt = Vec::new();
    let mut ours_nn = Vec::new();
    for &(m, k, n) in &GEMM_SHAPES {
        let a = kit.upload(&fill(m * k, 1))?;
        let w = kit.upload(&fill(n * k, 2))?;
        let bias = kit.upload(&fill(n, 3))?;
        let mut c = kit.alloc(m * n)?;
        let flop = 2.0 * (m * k * n) as f64;
        // NT: a PyTorch Linear weight [n, k] used in place, with bias — what the DiT runs.
        let nt = GemmSpec::linear(m, k, n);
        let s = best_of(o.min_seconds, || kit.gemm(&nt, &a, &w, Some(&bias), &mut c).expect("gemm"));
        ours_nt.push(flop / s / 1e9);
        let nn = GemmSpec { b: f5_gpukit::MatLayout::row_major(n), ..nt };
        let s = best_of(o.min_seconds, || kit.gemm(&nn, &a, &w, Some(&bias), &mut c).expect("gemm"));
        ours_nn.push(flop / s / 1e9);
        eprintln!("  gemm {m}×{k}×{n}: NT {:.0} GFLOP/s, NN {:.0} GFLOP/s", ours_nt.last().unwrap_or(&0.0), ours_nn.last().unwrap_or(&0.0));
    }
    let mut ours_attn = Vec::new();
    // The bf16 attention (`--precision bf16`), where this CPU has AVX-512 BF16 (elsewhere
    // `--precision bf16` runs the f32 attention measured above).
    let bf16_kit = CpuBf16Backend::with_threads(o.threads)
        .map_err(|e| eprintln!("  bf16 attention not measured: {e}"))
        .ok()
        .map(|k| k.with_bf16_dot_products(true))
        .filter(|k| {
            let dot = k.bf16_dot_products();
            if !dot {
                eprintln!("  bf16 attention not measured: this CPU lacks AVX-512 BF16");
            }
            dot
        });
    let mut ours_attn_bf16 = Vec::new();
    for &(bh, n, d) in &ATTENTION_SHAPES {
        let len = bh * n * d;
        let (q, k, v) = (kit.upload(&fill(len, 4))?, kit.upload(&fill(len, 5))?, kit.upload(&fill(len, 6))?);
        let mut out = kit.alloc(len)?;
        let spec = AttentionSpec { batch_heads: bh, n, head_dim: d, scale: 0.125 };
        let s = best_of(o.min_seconds, || kit.attention(&spec, &q, &k, &v, &mut out).expect("attention"));
        ours_attn.push(s);
        let s16 = match &bf16_kit {
            Some(kb) => {
                let (q, k, v) = (kb.upload(&fill(len, 4))?, kb.upload(&fill(len, 5))?, kb.upload(&fill(len, 6))?);
                let mut out = kb.alloc(len)?;
                Some(best_of(o.min_seconds, || kb.attention(&spec, &q, &k, &v, &mut out).expect("bf16 attention")))
            }
            None => None,
        };
        ours_attn_bf16.push(s16);
        eprintln!("  attention {bh}×{n}×{d}: {:.0} ms, bf16 {}", s * 1e3, s16.map_or("–".into(), |t| format!("{:.0} ms", t * 1e3)));
    }

    // The ops Kokoro added to the kit, on its shapes (the short input's frames).
    let frames = crate::bench_kokoro::SHORT_INPUT_FRAMES;
    let kokoro_ops = crate::bench_kokoro::kokoro_op_times(&kit, frames, o.min_seconds)?;
    for (_, what, shape, secs) in &kokoro_ops {
        eprintln!("  {what} {shape}: {:.2} ms", secs * 1e3);
    }

    let reference = run_reference(root, o).unwrap_or_else(|e| {
        eprintln!("reference side not measured: {e:#}");
        Value::Null
    });
    let busy_after = machine::busy_fraction();

    let mut md = String::new();
    let command = format!("cargo xtask bench kit --threads {}", o.threads);
    preamble(&mut md, &command, &format!("best of ≥3 runs, ≥{} s per cell", o.min_seconds), busy, busy_after)?;
    if let Some(v) = reference.get("versions") {
        writeln!(md, "Reference: numpy {}, torch {}.", v["numpy"].as_str().unwrap_or("?"), v["torch"].as_str().unwrap_or("not installed"))?;
    }
    writeln!(md)?;
    writeln!(md, "| f32 GEMM M×K×N | f5-gpukit NT (Linear weight [out, in] in place, + bias) | f5-gpukit NN (weight pre-transposed [in, out], + bias) | numpy `a @ w.T` | torch `F.linear` | f5 NT / torch |")?;
    writeln!(md, "|---|---|---|---|---|---|")?;
    for (i, &(m, k, n)) in GEMM_SHAPES.iter().enumerate() {
        let key = format!("{m}x{k}x{n}");
        let np = reference.get("numpy").and_then(|x| x.get(&key)).and_then(Value::as_f64);
        let th = reference.get("torch").and_then(|x| x.get(&key)).and_then(Value::as_f64);
        let ratio = th.map(|t| format!("{:.0} %", 100.0 * ours_nt[i] / t)).unwrap_or_else(|| "–".into());
        writeln!(
            md,
            "| {m}×{k}×{n} | {:.0} GFLOP/s | {:.0} GFLOP/s | {} | {} | {ratio} |",
            ours_nt[i],
            ours_nn[i],
            fmt_gf(np),
            fmt_gf(th)
        )?;
    }
    writeln!(md)?;
    writeln!(
        md,
        "| attention (batch·heads × n × head_dim) | f5-gpukit | f5-gpukit bf16 (`CpuBf16Backend`) | torch SDPA | f5 / torch time |"
    )?;
    writeln!(md, "|---|---|---|---|---|")?;
    for (i, &(bh, n, d)) in ATTENTION_SHAPES.iter().enumerate() {
        let flop = 4.0 * (bh * n * n * d) as f64;
        let key = format!("{bh}x{n}x{d}");
        let th = reference.get("torch_sdpa").and_then(|x| x.get(&key)).and_then(|x| x.get("seconds")).and_then(Value::as_f64);
        let cmp = th.map(|t| format!("{:.2}×", ours_attn[i] / t)).unwrap_or_else(|| "–".into());
        let th_s = th.map(|t| format!("{:.0} ms ({:.0} GFLOP/s)", t * 1e3, flop / t / 1e9)).unwrap_or_else(|| "–".into());
        let bf16 = ours_attn_bf16[i].map_or("–".into(), |t| format!("{:.0} ms ({:.0} GFLOP/s)", t * 1e3, flop / t / 1e9));
        writeln!(
            md,
            "| {bh}×{n}×{d} | {:.0} ms ({:.0} GFLOP/s) | {bf16} | {th_s} | {cmp} |",
            ours_attn[i] * 1e3,
            flop / ours_attn[i] / 1e9
        )?;
    }
    writeln!(md)?;
    writeln!(
        md,
        "Kokoro's ops on its shapes ({frames} predicted frames, the short input's; f32, PyTorch's `nn` modules on the same thread count):"
    )?;
    writeln!(md)?;
    crate::bench_kokoro::kokoro_ops_table(&mut md, &kokoro_ops, reference.get("kokoro_ops"))?;
    println!("{md}");
    record(root, o, &format!("kit-{}t", o.threads), &md, !reference.is_null())?;
    Ok(())
}

fn fmt_gf(v: Option<f64>) -> String {
    v.map(|x| format!("{x:.0} GFLOP/s")).unwrap_or_else(|| "–".into())
}

fn run_reference(root: &Path, o: &Opts) -> Result<Value> {
    let py = crate::reference_python();
    let shapes: Vec<[usize; 3]> = GEMM_SHAPES.iter().map(|&(m, k, n)| [m, k, n]).collect();
    let attn: Vec<[usize; 3]> = ATTENTION_SHAPES.iter().map(|&(a, b, c)| [a, b, c]).collect();
    let out = Command::new(&py)
        .current_dir(root)
        .arg("xtask/bench/kit_reference.py")
        .args(["--threads", &o.threads.to_string()])
        .args(["--shapes", &serde_json::to_string(&shapes)?])
        .args(["--attention", &serde_json::to_string(&attn)?])
        .args(["--min-seconds", &o.min_seconds.to_string()])
        .args(["--kokoro-frames", &crate::bench_kokoro::SHORT_INPUT_FRAMES.to_string()])
        .output()
        .with_context(|| format!("cannot run {py}; set F5_REF_PYTHON to a python with numpy and torch"))?;
    if !out.status.success() {
        bail!("{}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(serde_json::from_slice(&out.stdout)?)
}

/// Writes a bench's section of docs/benchmarks.md, unless the reference side was not measured:
/// a one-sided table would replace the side-by-side figures already recorded there.
fn record(root: &Path, o: &Opts, name: &str, md: &str, reference_measured: bool) -> Result<()> {
    if !o.write {
        return Ok(());
    }
    if !reference_measured {
        eprintln!("not written to docs/benchmarks.md: the reference side was not measured");
        return Ok(());
    }
    write_section(&root.join("docs/benchmarks.md"), name, md)?;
    eprintln!("written to docs/benchmarks.md");
    Ok(())
}

/// Replaces the text between `<!-- bench:NAME -->` and `<!-- /bench:NAME -->` (appending the
/// pair if absent), so hand-written prose around the tables survives a re-run.
pub fn write_section(path: &Path, name: &str, body: &str) -> Result<()> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|_| "# Benchmarks\n".into());
    let (open, close) = (format!("<!-- bench:{name} -->"), format!("<!-- /bench:{name} -->"));
    let block = format!("{open}\n{body}\n{close}");
    let new = match (text.find(&open), text.find(&close)) {
        (Some(a), Some(b)) if b > a => format!("{}{}{}", &text[..a], block, &text[b + close.len()..]),
        _ => format!("{}\n{}\n", text.trim_end(), block),
    };
    std::fs::write(path, new).with_context(|| format!("cannot write {}", path.display()))
}

/// The full-size random checkpoints `cargo xtask fixtures --full-size` writes.
fn refmodel(root: &Path, rel: &str) -> Result<std::path::PathBuf> {
    let p = root.join("target/refmodels").join(rel);
    if !p.exists() {
        bail!("{} is missing: run `cargo xtask fixtures --full-size` first", p.display());
    }
    Ok(p)
}

/// The reference side of a model bench (xtask/bench/model_reference.py): its JSON report, or
/// `Null` (the table then shows "–") when it could not run, saying why.
fn run_model_reference(root: &Path, args: &[&str]) -> Value {
    let py = crate::reference_python();
    let measured = Command::new(&py)
        .current_dir(root)
        .arg("xtask/bench/model_reference.py")
        .args(args)
        .output()
        .with_context(|| format!("cannot run {py}"))
        .and_then(|out| {
            if !out.status.success() {
                bail!("{}", String::from_utf8_lossy(&out.stderr));
            }
            Ok(serde_json::from_slice::<Value>(&out.stdout)?)
        });
    measured.unwrap_or_else(|e| {
        eprintln!("reference side not measured: {e:#}");
        Value::Null
    })
}

/// The lines every model bench opens with: the machine, and the command with how busy the
/// machine was around the measurement.
fn preamble(md: &mut String, command: &str, how: &str, busy: f64, busy_after: f64) -> std::fmt::Result {
    writeln!(md, "Machine: {}.", machine::describe())?;
    writeln!(md, "Command: `{command}` ({how}; machine {:.0}% busy before, {:.0}% after).", busy * 100.0, busy_after * 100.0)
}

/// One DiT forward with CFG (batch 2) at n = 1000 frames on the full-size random F5TTS_v1_Base,
/// ours and the reference's, in the same run.
fn dit(root: &Path, o: &Opts) -> Result<()> {
    const N: usize = 1000;
    const TEXT: usize = 300;
    const REF: usize = 300;
    let ckpt = refmodel(root, "f5-v1-base/model_1250000.safetensors")?;
    let busy = machine::wait_idle(0.10, Duration::from_secs(120));
    let t0 = Instant::now();
    let model = F5Model::open(&ckpt, CpuBackend::with_threads(o.threads)?, &Overrides::default())?;
    let load = t0.elapsed().as_secs_f64();
    let ids: Vec<u32> = (0..TEXT as u32).map(|i| (i * 7919) % 2545).collect();
    let cond = fill(REF * 100, 7);
    let x = model.kit().upload(&fill(N * 100, 8))?;
    let mods = model.modulations(&[0.5])?;
    let mut prep = model.prepare(&ids, &cond, N, true)?;
    let reps = 3;
    let mut best = f64::INFINITY;
    model.forward(&mut prep, &mods, 0, &x, None)?;
    for _ in 0..reps {
        let t = Instant::now();
        model.forward(&mut prep, &mods, 0, &x, None)?;
        best = best.min(t.elapsed().as_secs_f64());
    }
    eprintln!("  f5 forward: {best:.2} s (load {load:.1} s)");
    let (threads, model, frames, text_len, ref_frames, reps_s) =
        (o.threads.to_string(), ckpt.display().to_string(), N.to_string(), TEXT.to_string(), REF.to_string(), reps.to_string());
    let reference = run_model_reference(
        root,
        &[
            "dit",
            "--threads",
            &threads,
            "--model",
            &model,
            "--frames",
            &frames,
            "--text-len",
            &text_len,
            "--ref-frames",
            &ref_frames,
            "--reps",
            &reps_s,
        ],
    );
    let theirs = reference.get("forward_seconds").and_then(Value::as_f64);
    let busy_after = machine::busy_fraction();
    let mut md = String::new();
    let command = format!("cargo xtask bench dit --threads {}", o.threads);
    preamble(&mut md, &command, &format!("best of {reps} after a warm-up"), busy, busy_after)?;
    writeln!(md, "Weights: full-size random F5TTS_v1_Base (dim 1024, depth 22, 16 heads, 337 M parameters), fp32; one CFG forward = batch 2, n = {N} frames, {TEXT} text tokens, text encoding cached on both sides.")?;
    writeln!(md)?;
    writeln!(
        md,
        "| | f5 (CPU) | PyTorch {} (CPU, official f5-tts 1.1.22) | f5 / PyTorch time |",
        reference.get("torch").and_then(Value::as_str).unwrap_or("–")
    )?;
    writeln!(md, "|---|---|---|---|")?;
    let ratio = theirs.map(|t| format!("{:.2}×", best / t)).unwrap_or_else(|| "–".into());
    writeln!(
        md,
        "| one forward, batch 2, n = {N} | {best:.2} s | {} | {ratio} |",
        theirs.map(|t| format!("{t:.2} s")).unwrap_or_else(|| "–".into())
    )?;
    writeln!(
        md,
        "| 32-step synthesis (forward × 32, estimated) | {:.0} s | {} | |",
        best * 32.0,
        theirs.map(|t| format!("{:.0} s", t * 32.0)).unwrap_or_else(|| "–".into())
    )?;
    writeln!(
        md,
        "| load checkpoint | {load:.1} s | {} | |",
        reference.get("load_seconds").and_then(Value::as_f64).map(|t| format!("{t:.1} s")).unwrap_or_else(|| "–".into())
    )?;
    println!("{md}");
    record(root, o, &format!("dit-{}t", o.threads), &md, theirs.is_some())?;
    Ok(())
}

/// Vocos decode of 30 s of audio (2813 frames) on the full-size random vocoder.
fn vocos(root: &Path, o: &Opts) -> Result<()> {
    const FRAMES: usize = 2813;
    let dir = refmodel(root, "vocos-full")?;
    let busy = machine::wait_idle(0.10, Duration::from_secs(120));
    let v = f5_vocos::Vocos::open(&dir, CpuBackend::with_threads(o.threads)?)?;
    let mel: Vec<f32> = fill(FRAMES * 100, 9).iter().map(|x| x - 4.0).collect();
    let reps = 5;
    let mut best = f64::INFINITY;
    v.decode(&mel, FRAMES)?;
    for _ in 0..reps {
        let t = Instant::now();
        v.decode(&mel, FRAMES)?;
        best = best.min(t.elapsed().as_secs_f64());
    }
    let audio_s = (FRAMES - 1) as f64 * 256.0 / 24_000.0;
    let (threads, model, frames, reps_s) = (o.threads.to_string(), dir.display().to_string(), FRAMES.to_string(), reps.to_string());
    let reference = run_model_reference(root, &["vocos", "--threads", &threads, "--model", &model, "--frames", &frames, "--reps", &reps_s]);
    let theirs = reference.get("decode_seconds").and_then(Value::as_f64);
    let busy_after = machine::busy_fraction();
    let mut md = String::new();
    let command = format!("cargo xtask bench vocos --threads {}", o.threads);
    preamble(&mut md, &command, &format!("best of {reps} after a warm-up"), busy, busy_after)?;
    writeln!(md, "Weights: full-size random Vocos (charactr/vocos-mel-24khz architecture, 13.5 M parameters); decode of {FRAMES} frames = {audio_s:.1} s of 24 kHz audio.")?;
    writeln!(md)?;
    writeln!(md, "| | f5-vocos (CPU) | vocos 0.1.0 on PyTorch {} (CPU) |", reference.get("torch").and_then(Value::as_str).unwrap_or("–"))?;
    writeln!(md, "|---|---|---|")?;
    writeln!(md, "| decode time | {:.3} s | {} |", best, theirs.map(|t| format!("{t:.3} s")).unwrap_or_else(|| "–".into()))?;
    writeln!(
        md,
        "| seconds of audio per second | {:.0} | {} |",
        audio_s / best,
        theirs.map(|t| format!("{:.0}", audio_s / t)).unwrap_or_else(|| "–".into())
    )?;
    println!("{md}");
    record(root, o, &format!("vocos-{}t", o.threads), &md, theirs.is_some())?;
    Ok(())
}

/// The text front end on 1 MB of mixed Chinese, English and diacritic text (the golden corpus
/// repeated), one thread, ours and the reference's.
fn text(root: &Path, o: &Opts) -> Result<()> {
    let corpus = std::fs::read_to_string(root.join("fixtures/text/corpus.txt")).context("fixtures/text/corpus.txt")?;
    let mut big = String::new();
    while big.len() < 1 << 20 {
        big.push_str(&corpus);
    }
    let path = root.join("target/bench-text-1mb.txt");
    std::fs::write(&path, &big)?;
    let vocab = f5_text::Vocab::load(root.join("fixtures/vocab.txt"))?;
    let lines: Vec<&str> = big.split('\n').collect();
    let busy = machine::wait_idle(0.10, Duration::from_secs(120));
    let mut tokens_total = 0usize;
    let s = best_of(o.min_seconds, || {
        tokens_total = 0;
        for line in &lines {
            let t = f5_text::to_tokens(line).expect("tokens");
            tokens_total += vocab.ids(&t).len();
        }
    });
    let reps = "3".to_string();
    let py = crate::reference_python();
    let reference: Value = Command::new(&py)
        .current_dir(root)
        .args(["xtask/bench/text_reference.py", &path.display().to_string(), "fixtures/vocab.txt", &reps])
        .output()
        .ok()
        .filter(|out| out.status.success())
        .and_then(|out| serde_json::from_slice(&out.stdout).ok())
        .unwrap_or(Value::Null);
    let theirs = reference.get("seconds").and_then(Value::as_f64);
    let mb = big.len() as f64 / 1e6;
    let mut md = String::new();
    writeln!(md, "Machine: {}.", machine::describe())?;
    writeln!(md, "Command: `cargo xtask bench text` (one thread; best of the runs; machine {:.0}% busy before).", busy * 100.0)?;
    writeln!(md, "Input: `fixtures/text/corpus.txt` repeated to {mb:.2} MB ({} lines, {tokens_total} tokens): Chinese with polyphones and sandhi, English, Finnish/German/French, symbols.", lines.len())?;
    writeln!(md)?;
    writeln!(md, "| text → token ids | f5-text | f5-tts 1.1.22 (`convert_char_to_pinyin` + vocab) |")?;
    writeln!(md, "|---|---|---|")?;
    writeln!(
        md,
        "| time | {s:.2} s ({:.1} MB/s) | {} |",
        mb / s,
        theirs.map(|t| format!("{t:.2} s ({:.2} MB/s)", mb / t)).unwrap_or_else(|| "–".into())
    )?;
    println!("{md}");
    record(root, o, "text", &md, theirs.is_some())?;
    Ok(())
}
