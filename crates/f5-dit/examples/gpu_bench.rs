//! The GPU check's measurements, as one JSON document: the tiny F5 model's sampling on CUDA
//! against the CPU backend, one forward of the real `f5_dit::F5Model` built from a random
//! checkpoint of a small architecture on both backends, and the timing of `F5Model::forward` at
//! full size (F5-TTS v1 Base: dim 1024, 16 heads × 64, ff 2048, 22 layers, text 512 with 4
//! ConvNeXt blocks, conv position embedding k=31 in 16 groups, CFG batch 2) from a random
//! safetensors checkpoint built in memory and loaded by the same loader as a released one, in
//! f32 and with bf16 weights, eager and replayed from a CUDA graph.
//!
//! ```sh
//! cargo run --release -p f5-dit --features cuda --example gpu_bench -- --json out.json
//! ```
//!
//! Options: `--tiny PATH` (tiny F5 checkpoint; default the fixture), `--frames 1000,2000`,
//! `--iters 10`, `--warmup 2`, `--steps 32`, `--json PATH`, `--quick` (small sizes, for a smoke
//! run), `--cpu-only` (no GPU: build the random small model on the CPU backend and run one
//! forward, to check the bench's model building before spending device time). Exits non-zero
//! when a parity check fails; timings are reported, never asserted.

use std::path::{Path, PathBuf};
use std::time::Instant;

use f5_dit::F5Model;
use f5_gpukit::{Backend, CpuBackend, CudaBackend, CudaOptions, WeightPrecision};
use serde_json::{json, Value};

type AnyResult<T> = Result<T, Box<dyn std::error::Error>>;

/// bf16 dense tensor throughput measured on the H200 this check runs on.
const BF16_CEILING_TFLOPS: f64 = 790.0;
/// Mel frames per second of audio (24 kHz, hop 256).
const FRAMES_PER_SECOND: f64 = 24_000.0 / 256.0;

struct Args {
    tiny: PathBuf,
    frames: Vec<usize>,
    iters: usize,
    warmup: usize,
    steps: usize,
    json: Option<PathBuf>,
    quick: bool,
    cpu_only: bool,
}

fn parse_args() -> AnyResult<Args> {
    let mut a = Args {
        tiny: PathBuf::from("fixtures/models/f5-tiny-v1/model.safetensors"),
        frames: vec![1000, 2000],
        iters: 10,
        warmup: 2,
        steps: 32,
        json: None,
        quick: false,
        cpu_only: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--tiny" => a.tiny = PathBuf::from(value()?),
            "--frames" => a.frames = value()?.split(',').map(|s| s.trim().parse()).collect::<Result<_, _>>()?,
            "--iters" => a.iters = value()?.parse()?,
            "--warmup" => a.warmup = value()?.parse()?,
            "--steps" => a.steps = value()?.parse()?,
            "--json" => a.json = Some(PathBuf::from(value()?)),
            "--quick" => a.quick = true,
            "--cpu-only" => a.cpu_only = true,
            other => return Err(format!("unknown option {other}").into()),
        }
    }
    if a.quick {
        a.frames = vec![256];
        a.iters = 2;
        a.warmup = 1;
    }
    a.iters = a.iters.max(1);
    Ok(a)
}

/// Deterministic uniform values in [-scale, scale].
struct Rng(u64);
impl Rng {
    fn vec(&mut self, n: usize, scale: f32) -> Vec<f32> {
        (0..n)
            .map(|_| {
                self.0 ^= self.0 << 13;
                self.0 ^= self.0 >> 7;
                self.0 ^= self.0 << 17;
                (((self.0 >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0) * scale
            })
            .collect()
    }
}

/// `(max |a − b|, Σ(a − b)² / Σ b²)`.
fn compare(got: &[f32], want: &[f32]) -> (f64, f64) {
    let (mut max, mut num, mut den) = (0.0f64, 0.0f64, 0.0f64);
    for (&g, &w) in got.iter().zip(want) {
        let d = (g as f64 - w as f64).abs();
        max = if d.is_nan() { f64::NAN } else { max.max(d) };
        num += d * d;
        den += (w as f64) * (w as f64);
    }
    (max, num / den.max(f64::MIN_POSITIVE))
}

// ── the real model from a random checkpoint ──────────────────────────────────────────────────

/// The architecture of a random F5 checkpoint: everything `F5Config::infer` reads from shapes.
#[derive(Clone, Copy)]
struct Arch {
    dim: usize,
    depth: usize,
    ff: usize,
    text_dim: usize,
    conv_layers: usize,
}

/// F5-TTS v1 Base: dim 1024, 22 layers, 16 heads × 64, ff 2048, text 512 with 4 ConvNeXt blocks.
const F5_V1_BASE: Arch = Arch { dim: 1024, depth: 22, ff: 2048, text_dim: 512, conv_layers: 4 };
const SMALL: Arch = Arch { dim: 256, depth: 2, ff: 512, text_dim: 128, conv_layers: 1 };
const HEAD_DIM: usize = 64;
const MEL: usize = 100;
const TEXT_ROWS: usize = 2546;
const CONV_POS_KERNEL: usize = 31;
const CONV_POS_GROUPS: usize = 16;
const PREFIX: &str = "ema_model.transformer.";

/// Every tensor of an F5 v1 checkpoint of this architecture, `(name, shape)`, in the layout the
/// released checkpoints use (so the model is built by the same loader as a real one).
fn tensor_list(a: Arch) -> Vec<(String, Vec<usize>)> {
    let (d, td) = (a.dim, a.text_dim);
    let mut t: Vec<(String, Vec<usize>)> = Vec::new();
    let mut add = |name: String, shape: &[usize]| t.push((format!("{PREFIX}{name}"), shape.to_vec()));
    fn linear(add: &mut dyn FnMut(String, &[usize]), name: &str, out: usize, inp: usize) {
        add(format!("{name}.weight"), &[out, inp]);
        add(format!("{name}.bias"), &[out]);
    }
    linear(&mut add, "time_embed.time_mlp.0", d, 256);
    linear(&mut add, "time_embed.time_mlp.2", d, d);
    add("text_embed.text_embed.weight".into(), &[TEXT_ROWS, td]);
    for i in 0..a.conv_layers {
        let p = format!("text_embed.text_blocks.{i}");
        add(format!("{p}.dwconv.weight"), &[td, 1, 7]);
        add(format!("{p}.dwconv.bias"), &[td]);
        add(format!("{p}.norm.weight"), &[td]);
        add(format!("{p}.norm.bias"), &[td]);
        linear(&mut add, &format!("{p}.pwconv1"), 2 * td, td);
        add(format!("{p}.grn.gamma"), &[1, 1, 2 * td]);
        add(format!("{p}.grn.beta"), &[1, 1, 2 * td]);
        linear(&mut add, &format!("{p}.pwconv2"), td, 2 * td);
    }
    linear(&mut add, "input_embed.proj", d, 2 * MEL + td);
    for c in [0, 2] {
        add(format!("input_embed.conv_pos_embed.conv1d.{c}.weight"), &[d, d / CONV_POS_GROUPS, CONV_POS_KERNEL]);
        add(format!("input_embed.conv_pos_embed.conv1d.{c}.bias"), &[d]);
    }
    add("rotary_embed.inv_freq".into(), &[HEAD_DIM / 2]);
    for i in 0..a.depth {
        let p = format!("transformer_blocks.{i}");
        linear(&mut add, &format!("{p}.attn_norm.linear"), 6 * d, d);
        for which in ["to_q", "to_k", "to_v"] {
            linear(&mut add, &format!("{p}.attn.{which}"), d, d);
        }
        linear(&mut add, &format!("{p}.attn.to_out.0"), d, d);
        linear(&mut add, &format!("{p}.ff.ff.0.0"), a.ff, d);
        linear(&mut add, &format!("{p}.ff.ff.2"), d, a.ff);
    }
    linear(&mut add, "norm_out.linear", 2 * d, d);
    linear(&mut add, "proj_out", MEL, d);
    t
}

/// A safetensors file (in memory) with random weights: uniform in ±1/√fan_in for matrices (so
/// activations stay O(1) through 22 layers), ±0.1 for vectors, the real rotary frequencies.
fn random_checkpoint(a: Arch, seed: u64) -> AnyResult<f5_torchpt::Checkpoint> {
    let tensors = tensor_list(a);
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let mut header = serde_json::Map::new();
    let mut offset = 0usize;
    for (name, shape) in &tensors {
        let bytes = 4 * shape.iter().product::<usize>();
        header.insert(name.clone(), json!({ "dtype": "F32", "shape": shape, "data_offsets": [offset, offset + bytes] }));
        offset += bytes;
    }
    let header = serde_json::to_vec(&Value::Object(header))?;
    let mut file = Vec::with_capacity(8 + header.len() + offset);
    file.extend_from_slice(&(header.len() as u64).to_le_bytes());
    file.extend_from_slice(&header);
    for (name, shape) in &tensors {
        let count: usize = shape.iter().product();
        let values = if name.ends_with("inv_freq") {
            (0..count).map(|j| (1.0 / 10000f64.powf((2 * j) as f64 / HEAD_DIM as f64)) as f32).collect()
        } else if shape.len() >= 2 && shape[0] > 1 {
            let fan_in: usize = shape[1..].iter().product();
            rng.vec(count, 1.0 / (fan_in as f32).sqrt())
        } else {
            rng.vec(count, 0.1)
        };
        for v in values {
            file.extend_from_slice(&v.to_le_bytes());
        }
    }
    Ok(f5_torchpt::Checkpoint::from_bytes(format!("random-f5-{}x{}.safetensors", a.dim, a.depth), file)?)
}

/// `f5_dit::F5Model` of a random checkpoint, built by the real loader.
fn random_model<B: Backend>(a: Arch, kit: B, seed: u64) -> AnyResult<F5Model<B>> {
    let ckpt = random_checkpoint(a, seed)?;
    // A directory with no training config beside it: the architecture comes from the shapes.
    let config = f5_dit::F5Config::infer(&ckpt, Path::new("/nonexistent/random.safetensors"), &f5_dit::Overrides::default())?;
    Ok(F5Model::from_checkpoint(ckpt, config, kit)?)
}

/// One utterance's state for `n` frames with CFG (batch 2): a quarter of the frames as
/// reference, one text token per four frames, one flow time, a random noisy mel.
struct Utterance<B: Backend> {
    prep: f5_dit::internals::Prepared<B>,
    mods: f5_dit::internals::Modulations<B>,
    x: B::Buf,
}

fn utterance<B: Backend>(model: &F5Model<B>, n: usize, seed: u64) -> AnyResult<Utterance<B>> {
    let kit = model.kit();
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let ids: Vec<u32> = (0..n / 4).map(|i| 1 + (i as u32 * 37) % (TEXT_ROWS as u32 - 1)).collect();
    let cond = rng.vec((n / 4) * MEL, 1.0);
    let prep = model.prepare(&ids, &cond, n, true)?;
    let mods = model.modulations(&[0.3])?;
    let x = kit.upload(&rng.vec(n * MEL, 1.0))?;
    Ok(Utterance { prep, mods, x })
}

impl<B: Backend> Utterance<B> {
    fn forward(&mut self, model: &F5Model<B>) -> Result<(), f5_dit::DitError> {
        model.forward(&mut self.prep, &self.mods, 0, &self.x, None)
    }
}

/// Multiply-adds ×2 of one forward at batch 2: GEMMs, attention (q·kᵀ and p·v), the grouped
/// convs and the input/output projections.
fn flops(a: Arch, n: usize) -> f64 {
    let rows = 2usize;
    let (n, bn) = (n as f64, (rows * n) as f64);
    let (d, ff) = (a.dim as f64, a.ff as f64);
    let heads = a.dim / HEAD_DIM;
    let per_layer_gemm = 2.0 * bn * (d * 3.0 * d + d * d + 2.0 * d * ff);
    let per_layer_attn = 4.0 * (rows * heads) as f64 * n * n * HEAD_DIM as f64;
    let conv = 2.0 * 2.0 * bn * d * (d / CONV_POS_GROUPS as f64) * CONV_POS_KERNEL as f64;
    let io = 2.0 * n * MEL as f64 * d + 2.0 * bn * d * MEL as f64;
    a.depth as f64 * (per_layer_gemm + per_layer_attn) + conv + io
}

fn median(mut v: Vec<f32>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v.get(v.len() / 2).copied().unwrap_or(f32::NAN) as f64
}

// ── parts of the report ──────────────────────────────────────────────────────────────────────

/// The tiny F5 model's sampling (2 s reference of silence-level mel, 40 tokens, 8 steps, seed 42).
fn sample_tiny<B: Backend>(model: &f5_dit::F5Model<B>) -> AnyResult<(Vec<f32>, f64)> {
    use f5_dit::{duration, Noise, SampleOptions};
    let t = Instant::now();
    let ref_samples = 2 * duration::SAMPLE_RATE;
    let ref_frames = ref_samples / duration::HOP + 1;
    let reference = vec![-5.0f32; ref_frames * model.config().mel_dim];
    let ids: Vec<u32> = (0..40).map(|i| 10 + i % 60).collect();
    let frames = duration::sampled_frames(duration::estimate_frames(ref_samples, 30, 40, 1.0, None), ids.len(), ref_samples);
    let opts = SampleOptions::default().with_steps(8);
    let mel = model.sample(&ids, &reference, frames, Noise::Seed(42), &opts, &mut |_, _| {})?;
    Ok((mel, t.elapsed().as_secs_f64()))
}

/// The tiny F5 checkpoint sampled on both backends (same seed and schedule).
fn tiny_model(args: &Args) -> AnyResult<Value> {
    use f5_dit::Overrides;
    let cpu = F5Model::open(&args.tiny, CpuBackend::new(), &Overrides::default())?;
    let gpu = F5Model::open(&args.tiny, CudaBackend::new(0)?, &Overrides::default())?;
    let (want, cpu_s) = sample_tiny(&cpu).map_err(|e| format!("cpu: {e}"))?;
    let (got, gpu_s) = sample_tiny(&gpu).map_err(|e| format!("cuda: {e}"))?;
    let (max_abs, nmse) = compare(&got, &want);
    // f32 on both sides, different summation orders, 8 Euler steps through a random model: the
    // outputs agree to ~1e-6 relative; 1e-8 NMSE still flags any real kernel error (O(1)).
    let ok = nmse <= 1e-8;
    Ok(json!({ "check": "tiny_f5_sample", "steps": 8, "values": want.len(), "max_abs": max_abs, "nmse": nmse,
               "cpu_s": cpu_s, "cuda_s": gpu_s, "ok": ok }))
}

/// The real model at a small size from one random checkpoint, CPU vs CUDA, f32 and bf16
/// weights: one CFG forward (text encoders, conv position embedding, every block, output).
fn small_forward() -> AnyResult<Vec<Value>> {
    let n = 200;
    let cpu_model = random_model(SMALL, CpuBackend::new(), 7)?;
    let mut reference = utterance(&cpu_model, n, 8)?;
    reference.forward(&cpu_model)?;
    let want = cpu_model.kit().download(&reference.prep.pred)?;
    let mut out = Vec::new();
    for (precision, limit) in [(WeightPrecision::F32, 1e-8), (WeightPrecision::Bf16, 1e-3)] {
        let model = random_model(SMALL, CudaBackend::with_options(0, CudaOptions { weights: precision })?, 7)?;
        let mut utt = utterance(&model, n, 8)?;
        utt.forward(&model)?;
        let got = model.kit().download(&utt.prep.pred)?;
        let (max_abs, nmse) = compare(&got[..want.len()], &want);
        // f32: summation order only. bf16: 8-bit mantissas in every GEMM input, ~1e-4 NMSE.
        out.push(json!({ "check": "f5_forward_small", "precision": format!("{precision:?}"), "rows": 2, "n": n,
                         "dim": SMALL.dim, "depth": SMALL.depth,
                         "max_abs": max_abs, "nmse": nmse, "limit": limit, "ok": nmse <= limit }));
    }
    Ok(out)
}

/// Full-size timing of `F5Model::forward`: eager and graph, f32 and bf16 weights, at every
/// frame count.
fn full_size(args: &Args) -> AnyResult<Vec<Value>> {
    let mut out = Vec::new();
    let arch = if args.quick { SMALL } else { F5_V1_BASE };
    for precision in [WeightPrecision::Bf16, WeightPrecision::F32] {
        let t_load = Instant::now();
        let model = random_model(arch, CudaBackend::with_options(0, CudaOptions { weights: precision })?, 11)?;
        let load_s = t_load.elapsed().as_secs_f64();
        let gpu = model.kit().clone();
        for &n in &args.frames {
            let mut utt = utterance(&model, n, 12)?;
            for _ in 0..args.warmup {
                utt.forward(&model)?;
            }
            gpu.synchronize()?;
            let mut eager = Vec::new();
            for _ in 0..args.iters {
                eager.push(gpu.time_ms(|| utt.forward(&model).map_err(|e| f5_gpukit::KitError::Device(e.to_string())))?);
            }
            let graph = gpu.capture(|| utt.forward(&model).map_err(|e| f5_gpukit::KitError::Device(e.to_string())));
            let graph_ms = match &graph {
                Ok(g) => {
                    g.replay()?;
                    let mut t = Vec::new();
                    for _ in 0..args.iters {
                        t.push(gpu.time_ms(|| g.replay())?);
                    }
                    Some(median(t))
                }
                Err(_) => None,
            };
            let eager_ms = median(eager);
            let best = graph_ms.unwrap_or(eager_ms).min(eager_ms);
            let flops = flops(arch, n);
            let audio_s = n as f64 / FRAMES_PER_SECOND;
            let synth_s = args.steps as f64 * best / 1e3;
            let (free, total) = gpu.memory()?;
            out.push(json!({
                "check": "f5_forward_full", "model": "f5_dit::F5Model (random weights)",
                "precision": format!("{precision:?}"), "rows": 2, "n": n,
                "depth": arch.depth, "dim": arch.dim, "load_s": load_s,
                "eager_ms": eager_ms, "graph_ms": graph_ms,
                "graph_error": graph.as_ref().err().map(|e| e.to_string()),
                "tflop_per_forward": flops / 1e12, "tflops_achieved": flops / (best / 1e3) / 1e12,
                "fraction_of_bf16_ceiling": flops / (best / 1e3) / 1e12 / BF16_CEILING_TFLOPS,
                "steps": args.steps, "synthesis_s": synth_s, "audio_s": audio_s, "rtf": synth_s / audio_s,
                "rtf_note": "DiT forwards only (CFG batch 2); no vocoder, no text front end",
                "device_mem_used_gb": (total - free) as f64 / 1e9,
            }));
            eprintln!("{}", out.last().map(|v| v.to_string()).unwrap_or_default());
        }
    }
    Ok(out)
}

fn main() {
    let code = match run() {
        Ok(true) => 0,
        Ok(false) => 1,
        Err(e) => {
            eprintln!("gpu_bench: {e}");
            2
        }
    };
    std::process::exit(code);
}

/// The CPU half of `small_forward`, with no device: the random checkpoint loads through the real
/// loader and one CFG forward produces finite values.
fn cpu_only() -> AnyResult<bool> {
    let t = Instant::now();
    let model = random_model(SMALL, CpuBackend::new(), 7)?;
    let mut utt = utterance(&model, 200, 8)?;
    utt.forward(&model)?;
    let pred = model.kit().download(&utt.prep.pred)?;
    let finite = pred.iter().all(|v| v.is_finite());
    let rms = (pred.iter().map(|&v| (v as f64).powi(2)).sum::<f64>() / pred.len().max(1) as f64).sqrt();
    let report = json!({ "check": "cpu_only_small_forward", "params": model.config().params, "values": pred.len(),
                         "rms": rms, "finite": finite, "seconds": t.elapsed().as_secs_f64(), "ok": finite && rms > 0.0 });
    println!("{report}");
    Ok(finite && rms > 0.0)
}

fn run() -> AnyResult<bool> {
    let args = parse_args()?;
    if args.cpu_only {
        return cpu_only();
    }
    let gpu = CudaBackend::new(0)?;
    let mut report = vec![json!({
        "check": "device", "name": gpu.name()?, "kernels": format!("{:?}", gpu.kernel_source()),
        "memory_total_gb": gpu.memory()?.1 as f64 / 1e9,
    })];
    drop(gpu);
    let mut ok = true;
    let mut record = |name: &str, r: AnyResult<Vec<Value>>, report: &mut Vec<Value>| match r {
        Ok(v) => {
            for item in v {
                eprintln!("{item}");
                ok &= item.get("ok").and_then(Value::as_bool).unwrap_or(true);
                report.push(item);
            }
        }
        Err(e) => {
            eprintln!("{name}: {e}");
            ok = false;
            report.push(json!({ "check": name, "error": e.to_string(), "ok": false }));
        }
    };
    record("tiny_f5_sample", tiny_model(&args).map(|v| vec![v]), &mut report);
    record("f5_forward_small", small_forward(), &mut report);
    record("f5_forward_full", full_size(&args), &mut report);
    let doc = serde_json::to_string_pretty(&Value::Array(report))?;
    match &args.json {
        Some(p) => std::fs::write(p, &doc)?,
        None => println!("{doc}"),
    }
    Ok(ok)
}
