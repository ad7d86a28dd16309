//! `cargo xtask bench kokoro`: Kokoro-82M's forward and its new kit ops, f5 against the reference
//! `kokoro` 0.9.4 `KModel` (and PyTorch's modules) on the same weights, inputs and thread count,
//! warm runs, best of N. Weights: a release-layout checkpoint (`--model`, default
//! `target/refmodels/kokoro-counter.pth`, the full-size counter-generated one that
//! `fixtures/kokoro/generate.py` writes; the int8-derived one from `cargo xtask kokoro-int8` works too).
//!
//! A third column, where `F5_ONNX_PYTHON` names a Python with onnxruntime: kokoro-onnx's int8 model
//! (`kokoro-v1.0.int8.onnx`, beside `--model` or in `target/kokoro-int8/`, which
//! `cargo xtask kokoro-int8` writes) on onnxruntime with the same token ids, style rows, speeds
//! and thread count (`xtask/bench/kokoro_onnx.py`). That model computes in int8, so its speed is
//! what a user of kokoro-onnx gets, not the same arithmetic as the f32 columns.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use f5_gpukit::{Backend, Conv1dSpec, ConvTranspose1dSpec, CpuBackend, CpuBf16Backend};
use f5_kokoro::{Kokoro, KokoroConfig, Trace};
use f5_nn::{BiLstm, Linear, Lstm, Weights};
use serde_json::{json, Value};

pub struct KokoroOpts {
    pub threads: usize,
    pub min_seconds: f64,
    pub write: bool,
    pub model: Option<PathBuf>,
    /// f5's precisions (`f32`, `bf16`, `int8`), each timed on the same inputs; the kit ops run in f32.
    pub precisions: Vec<String>,
}

fn best_of(min_seconds: f64, mut f: impl FnMut() -> Result<()>) -> Result<f64> {
    f()?;
    let (mut best, mut spent, mut reps) = (f64::INFINITY, 0.0, 0);
    while reps < 3 || (spent < min_seconds && reps < 20) {
        let t = Instant::now();
        f()?;
        let dt = t.elapsed().as_secs_f64();
        best = best.min(dt);
        spent += dt;
        reps += 1;
    }
    Ok(best)
}

/// Predicted frames of the short input (`fixtures/kokoro/whole_full/short_heart_s1`, 56
/// phonemes): `cargo xtask bench kit` times Kokoro's ops at this size without loading a model.
pub const SHORT_INPUT_FRAMES: usize = 153;

/// One kit op timed on Kokoro's shapes: (key shared with `xtask/bench/kokoro_ops.py`, label,
/// shape, best seconds).
pub type OpTime = (&'static str, &'static str, String, f64);

/// The ops Kokoro added to the kit, on the f32 CPU backend, on its shapes for `frames`
/// predicted frames: ISTFTNet's first upsampler, a dilated resblock conv, the BiLSTM.
pub fn kokoro_op_times(kit: &CpuBackend, frames: usize, min_seconds: f64) -> Result<Vec<OpTime>> {
    let f = frames.max(1);
    let fill = |n: usize| (0..n).map(|i| ((i * 2654435761) % 1000) as f32 / 1000.0 - 0.5).collect::<Vec<f32>>();
    let ct = ConvTranspose1dSpec::new(1, 2 * f, 512, 256, 20, 10).pad(5);
    let (cx, cw, cb) = (kit.upload(&fill(2 * f * 512))?, kit.upload(&fill(512 * 256 * 20))?, kit.upload(&fill(256))?);
    let mut cy = kit.alloc(ct.n_out() * 256)?;
    let t_ct = best_of(min_seconds, || Ok(kit.conv_transpose1d(&ct, &cx, &cw, Some(&cb), &mut cy)?))?;
    let dc = Conv1dSpec::new(1, 20 * f, 256, 256, 7).dilation(5).pad(15);
    let (dx, dw, db) = (kit.upload(&fill(20 * f * 256))?, kit.upload(&fill(256 * 256 * 7))?, kit.upload(&fill(256))?);
    let mut dy = kit.alloc(dc.n_out() * 256)?;
    let t_dc = best_of(min_seconds, || Ok(kit.conv1d(&dc, &dx, &dw, Some(&db), &mut dy)?))?;
    // BiLSTM 640 → 2×256 over 512 steps: the layer Kokoro runs (both input projections and
    // both recurrences, side by side where the CPU has two threads).
    let n = 512;
    let direction = |reverse: bool| -> Result<Lstm<CpuBackend>> {
        let input_proj = Linear { weight: kit.upload(&fill(1024 * 640))?, bias: Some(kit.upload(&fill(1024))?), out: 1024, inp: 640 };
        Ok(Lstm { input_proj, w_hh: kit.upload(&fill(1024 * 256))?, hidden: 256, reverse })
    };
    let bilstm = BiLstm { forward: direction(false)?, backward: direction(true)? };
    let lx = kit.upload(&fill(n * 640))?;
    let mut lo = kit.alloc(n * 512)?;
    let t_lstm = best_of(min_seconds, || Ok(bilstm.apply(kit, &lx, 1, n, &[n], &mut lo)?))?;
    Ok(vec![
        ("conv_transpose1d", "conv_transpose1d", format!("512→256, k20 s10 p5, {} → {} rows", 2 * f, ct.n_out()), t_ct),
        ("conv1d_dilated", "conv1d dilated", format!("256→256, k7 d5, {} rows", 20 * f), t_dc),
        ("bilstm", "BiLSTM", "640→2×256, 512 steps (projection + recurrence)".to_string(), t_lstm),
    ])
}

/// The ops' table beside PyTorch's seconds (`reference`: key → seconds), "—" where not measured.
pub fn kokoro_ops_table(md: &mut String, ops: &[OpTime], reference: Option<&Value>) -> Result<()> {
    writeln!(md, "| op | shape | f5-gpukit | PyTorch | f5 / PyTorch speed |")?;
    writeln!(md, "|---|---|---|---|---|")?;
    for (key, what, shape, secs) in ops {
        let r = reference.and_then(|r| r[*key].as_f64());
        writeln!(
            md,
            "| {what} | {shape} | {:.2} ms | {} | {} |",
            secs * 1e3,
            r.map_or("—".into(), |r| format!("{:.2} ms", r * 1e3)),
            r.map_or("—".into(), |r| format!("{:.2}×", r / secs))
        )?;
    }
    Ok(())
}

fn npy_f32(path: &Path) -> Result<Vec<f64>> {
    let bytes = std::fs::read(path).with_context(|| path.display().to_string())?;
    let arr = npyz::NpyFile::new(&bytes[..])?;
    Ok(match arr.dtype() {
        npyz::DType::Plain(t) if t.type_char() == npyz::TypeChar::Int => arr.into_vec::<i64>()?.into_iter().map(|v| v as f64).collect(),
        _ => arr.into_vec::<f32>()?.into_iter().map(|v| v as f64).collect(),
    })
}

pub fn run(root: &Path, o: &KokoroOpts) -> Result<()> {
    let model_path = o.model.clone().unwrap_or_else(|| root.join("target/refmodels/kokoro-counter.pth"));
    if !model_path.is_file() {
        bail!(
            "{}: no checkpoint. Make the counter-generated one with fixtures/kokoro/generate.py (see fixtures/kokoro/README.md) or pass --model",
            model_path.display()
        );
    }
    let shared = std::env::var_os("KOKORO_SHARED").map(PathBuf::from).unwrap_or_else(|| root.join("../shared/kokoro"));
    let config_path = shared.join("config.json");
    let config = KokoroConfig::open(&config_path)?;
    let kit = CpuBackend::with_threads(o.threads)?;
    for p in &o.precisions {
        if !matches!(p.as_str(), "f32" | "bf16" | "int8") {
            bail!("--precision {p:?}: use f32, bf16, int8 or a list (f32,bf16,int8)");
        }
    }

    // Cases: the fixtures' full-size inputs (a 56-phoneme sentence, and the 510-phoneme limit).
    let dir = root.join("fixtures/kokoro/whole_full");
    let mut cases = Vec::new();
    for (name, prefix, speed) in [("short (56 phonemes)", "short_heart_s1", 1.0f32), ("long (510 phonemes)", "long510_mix_s0.8", 0.8)] {
        let ids: Vec<u32> = npy_f32(&dir.join(format!("{prefix}_ids.npy")))?.iter().map(|&v| v as u32).collect();
        let style: Vec<f32> = npy_f32(&dir.join(format!("{prefix}_ref_s.npy")))?.iter().map(|&v| v as f32).collect();
        cases.push((name, ids, style, speed));
    }
    // Per precision, per case: (label, case name, seconds, samples, first-half seconds).
    let mut ours = Vec::new();
    let mut frames_short = 0;
    for precision in &o.precisions {
        // One model at a time, so each precision's run has the machine's memory to itself.
        let mut w = Weights::open(&model_path)?;
        let timed = if precision == "bf16" || precision == "int8" {
            let kit =
                if precision == "int8" { CpuBf16Backend::with_int8_convs(o.threads)? } else { CpuBf16Backend::with_threads(o.threads)? };
            let model = Kokoro::from_weights(&mut w, config.clone(), kit)?;
            drop(w);
            time_cases(&model, &cases, o.min_seconds, &mut frames_short)?
        } else {
            let model = Kokoro::from_weights(&mut w, config.clone(), kit.clone())?;
            drop(w);
            time_cases(&model, &cases, o.min_seconds, &mut frames_short)?
        };
        ours.extend(timed.into_iter().map(|(name, secs, samples, half)| (precision.clone(), name, secs, samples, half)));
    }

    // The new ops on Kokoro's shapes, for `frames_short` predicted frames.
    let f = frames_short.max(1);
    let op_times = kokoro_op_times(&kit, f, o.min_seconds)?;

    // The reference, same inputs and threads.
    let case_json: Vec<Value> =
        cases.iter().map(|(n, ids, style, speed)| json!({"name": n, "ids": ids, "style": style, "speed": speed})).collect();
    let py = crate::reference_python();
    let output = Command::new(&py)
        .current_dir(root)
        .args(["xtask/bench/kokoro_reference.py", "--threads", &o.threads.to_string(), "--model"])
        .arg(&model_path)
        .arg("--config")
        .arg(&config_path)
        .args(["--cases", &serde_json::to_string(&case_json)?, "--frames", &f.to_string(), "--min-seconds", &o.min_seconds.to_string()])
        .output()
        .with_context(|| format!("cannot run {py}; set F5_REF_PYTHON to a python with torch, transformers and kokoro==0.9.4"))?;
    let reference: Option<Value> = if output.status.success() {
        serde_json::from_slice(&output.stdout).ok()
    } else {
        eprintln!("reference failed: {}", String::from_utf8_lossy(&output.stderr));
        None
    };

    let onnx = run_onnx(root, &model_path, o, &case_json);

    let mut md = String::new();
    let machine = crate::machine::describe();
    writeln!(
        md,
        "Machine: {machine}. Command: `cargo xtask bench kokoro --threads {} --precision {}`; weights `{}` (full-size release layout, 81.8 M parameters, stored fp32), warm runs, best of ≥ 3. f5 bf16: `CpuBf16Backend` (the decoder's big GEMM and convolution weights in bf16, f32 sums; the first half computing in f32, its weights past ALBERT stored as f16, ALBERT's Linears as split-bf16 products on the AMX tiles where the CPU has them); f5 int8: the same with the generator's residual-block convolutions in int8 (`CpuBf16Backend::with_int8_convs`: per-channel int8 filters, per-row int8 activations, exact i32 sums per tap).",
        o.threads,
        o.precisions.join(","),
        model_path.file_name().and_then(|n| n.to_str()).unwrap_or("?")
    )?;
    if let Some(r) = &reference {
        writeln!(
            md,
            "Reference: kokoro 0.9.4 `KModel.forward_with_tokens`, torch {} on {} threads.",
            r["torch"].as_str().unwrap_or("?"),
            o.threads
        )?;
    } else {
        writeln!(md, "Reference: not measured in this run (see the command's output).")?;
    }
    match &onnx {
        Ok(r) => writeln!(
            md,
            "onnxruntime: kokoro-onnx's `kokoro-v1.0.int8.onnx` (int8 weights and int8 matmuls/convolutions: the model these weights are dequantised from), onnxruntime {} ({}, session called directly), intra-op threads {}, inter-op 1.",
            r["onnxruntime"].as_str().unwrap_or("?"),
            onnx_inputs(r["kokoro_onnx"].as_str()),
            o.threads
        )?,
        Err(why) => writeln!(md, "onnxruntime: not measured in this run ({why}).")?,
    }
    writeln!(md)?;
    writeln!(md, "| input | audio | f5 | f5 RTF | reference | reference RTF | f5 / reference speed | onnxruntime int8 | onnxruntime RTF | f5 / onnxruntime speed |")?;
    writeln!(md, "|---|---|---|---|---|---|---|---|---|---|")?;
    for (precision, name, secs, samples, _) in &ours {
        let audio = *samples as f64 / 24_000.0;
        let r = reference.as_ref().and_then(|r| r["cases"][name.as_str()]["seconds"].as_f64());
        let x = onnx.as_ref().ok().and_then(|r| r["cases"][name.as_str()]["seconds"].as_f64());
        writeln!(
            md,
            "| {name} | {audio:.2} s | {secs:.3} s ({precision}) | {:.3} | {} | {} | {} | {} | {} | {} |",
            secs / audio,
            r.map_or("—".into(), |r| format!("{r:.3} s")),
            r.map_or("—".into(), |r| format!("{:.3}", r / audio)),
            r.map_or("—".into(), |r| format!("{:.2}×", r / secs)),
            x.map_or("—".into(), |x| format!("{x:.3} s")),
            x.map_or("—".into(), |x| format!("{:.3}", x / audio)),
            x.map_or("—".into(), |x| format!("{:.2}×", x / secs))
        )?;
    }
    writeln!(md)?;
    writeln!(md, "The first half alone (ALBERT, durations, alignment, F0/N, text encoder: `Kokoro::align` vs the same lines of `forward_with_tokens`):")?;
    writeln!(md)?;
    writeln!(md, "| input | f5 | reference | f5 / reference speed |")?;
    writeln!(md, "|---|---|---|---|")?;
    for (precision, name, _, _, half) in &ours {
        let r = reference.as_ref().and_then(|r| r["cases"][name.as_str()]["first_half"].as_f64());
        writeln!(
            md,
            "| {name} | {:.3} s ({precision}) | {} | {} |",
            half,
            r.map_or("—".into(), |r| format!("{r:.3} s")),
            r.map_or("—".into(), |r| format!("{:.2}×", r / half))
        )?;
    }
    writeln!(md)?;
    writeln!(md, "Kit ops on Kokoro's shapes ({f} predicted frames, the short input's):")?;
    writeln!(md)?;
    kokoro_ops_table(&mut md, &op_times, reference.as_ref().map(|r| &r["ops"]))?;
    print!("{md}");
    if o.write {
        let path = root.join("docs/benchmarks.md");
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let heading = "## Kokoro-82M (`cargo xtask bench kokoro`)";
        if !text.contains(heading) {
            std::fs::write(&path, format!("{}\n{heading}\n\nf5's Kokoro forward against the reference `KModel` on the same release-layout weights and inputs, warm runs in one process each.\n", text.trim_end()))?;
        }
        crate::bench::write_section(&path, &format!("kokoro-{}t", o.threads), &md)?;
    }
    Ok(())
}

/// Each case's best warm forward and first half (`align`): (case, seconds, samples, first half).
/// Sets `frames_short` to the first case's predicted frames, for the kit ops' shapes.
fn time_cases<B: Backend>(
    model: &Kokoro<B>,
    cases: &[(&str, Vec<u32>, Vec<f32>, f32)],
    min_seconds: f64,
    frames_short: &mut usize,
) -> Result<Vec<(String, f64, usize, f64)>> {
    let mut timed = Vec::new();
    for (name, ids, style, speed) in cases {
        let mut samples = 0;
        let secs = best_of(min_seconds, || {
            let out = model.forward(ids, style, *speed, 0, Trace::off())?;
            samples = out.audio.len();
            if *frames_short == 0 {
                *frames_short = out.durations.iter().sum::<usize>();
            }
            Ok(())
        })?;
        let half = best_of(min_seconds, || {
            model.align(ids, style, *speed, &mut Trace::off())?;
            Ok(())
        })?;
        timed.push((name.to_string(), secs, samples, half));
    }
    Ok(timed)
}

/// `kokoro-v1.0.int8.onnx` for a bench: beside the f32 weights, else in `target/kokoro-int8/`.
pub(crate) fn onnx_model(root: &Path, beside: &Path) -> Option<PathBuf> {
    let dir = if beside.is_dir() { beside } else { beside.parent()? };
    [dir.join(crate::kokoro_int8::ONNX_FILE), root.join("target/kokoro-int8").join(crate::kokoro_int8::ONNX_FILE)]
        .into_iter()
        .find(|p| p.is_file())
}

/// The onnxruntime column's measurements, or why there are none (a one-line note for the table).
fn run_onnx(root: &Path, model_path: &Path, o: &KokoroOpts, cases: &[Value]) -> Result<Value, String> {
    let py = std::env::var("F5_ONNX_PYTHON").map_err(|_| "F5_ONNX_PYTHON is not set: a Python with onnxruntime".to_string())?;
    let onnx = onnx_model(root, model_path).ok_or_else(|| {
        format!("no {} beside the weights or in target/kokoro-int8: run `cargo xtask kokoro-int8`", crate::kokoro_int8::ONNX_FILE)
    })?;
    let cases = serde_json::to_string(cases).map_err(|e| e.to_string())?;
    let output = Command::new(&py)
        .current_dir(root)
        .args(["xtask/bench/kokoro_onnx.py", "warm", "--threads", &o.threads.to_string(), "--onnx"])
        .arg(&onnx)
        .args(["--cases", &cases, "--min-seconds", &o.min_seconds.to_string()])
        .output()
        .map_err(|e| format!("cannot run {py}: {e}"))?;
    if !output.status.success() {
        eprintln!("onnxruntime side failed: {}", String::from_utf8_lossy(&output.stderr));
        return Err("its script failed; see the command's output".to_string());
    }
    serde_json::from_slice(&output.stdout).map_err(|e| format!("its output is not JSON: {e}"))
}

/// Where the onnxruntime side's inputs come from, for the docs: kokoro-onnx's own when the
/// package is installed (its version named), else the same layout built by the script.
pub(crate) fn onnx_inputs(kokoro_onnx_version: Option<&str>) -> String {
    match kokoro_onnx_version {
        Some(v) => format!("kokoro-onnx {v}'s inputs"),
        None => "kokoro-onnx's input layout, built by the script (the package is not installed)".to_string(),
    }
}
