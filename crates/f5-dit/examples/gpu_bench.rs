//! The GPU check's measurements, as one JSON document: the tiny F5 model's sampling on CUDA
//! against the CPU backend, a DiT-shaped forward (the F5 v1 Base op sequence) on both backends at
//! a small size, and the timing of that forward at full size (dim 1024, 16 heads × 64, ff 2048,
//! 22 layers, conv position embedding k=31 in 16 groups, CFG batch 2) with random weights, in
//! f32 and with bf16 weights, eager and replayed from a CUDA graph.
//!
//! ```sh
//! cargo run --release -p f5-dit --features cuda --example gpu_bench -- --json out.json
//! ```
//!
//! Options: `--tiny PATH` (tiny F5 checkpoint; default the fixture), `--frames 1000,2000`,
//! `--iters 10`, `--warmup 2`, `--steps 32`, `--json PATH`, `--quick` (small sizes, for a smoke
//! run). Exits non-zero when a parity check fails; timings are reported, never asserted.

use std::path::PathBuf;
use std::time::Instant;

use f5_gpukit::{
    Activation, AttentionSpec, Backend, Conv1dSpec, CpuBackend, CudaBackend, CudaOptions, GemmSpec, RopeSpec, StridedRows, WeightPrecision,
};
use f5_nn::Linear;
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

// ── the DiT-shaped forward ───────────────────────────────────────────────────────────────────

#[derive(Clone, Copy)]
struct Shape {
    dim: usize,
    heads: usize,
    ff: usize,
    depth: usize,
    mel: usize,
    conv_k: usize,
    conv_groups: usize,
}

const F5_V1_BASE: Shape = Shape { dim: 1024, heads: 16, ff: 2048, depth: 22, mel: 100, conv_k: 31, conv_groups: 16 };
const SMALL: Shape = Shape { dim: 256, heads: 4, ff: 512, depth: 2, mel: 100, conv_k: 31, conv_groups: 16 };
const HEAD_DIM: usize = 64;

struct Layer<B: Backend> {
    qkv: Linear<B>,
    out: Linear<B>,
    ff1: Linear<B>,
    ff2: Linear<B>,
    modulation: B::Buf,
}

/// Random weights in F5's layout, and scratch for `rows × n` frames.
struct Dit<B: Backend> {
    s: Shape,
    rows: usize,
    n: usize,
    input: Linear<B>,
    conv: [(B::Buf, B::Buf); 2],
    layers: Vec<Layer<B>>,
    out_mod: B::Buf,
    proj_out: Linear<B>,
    // state
    x: B::Buf,
    base: B::Buf,
    cos: B::Buf,
    sin: B::Buf,
    h: B::Buf,
    hn: B::Buf,
    xproj: B::Buf,
    conv_buf: B::Buf,
    qkv: B::Buf,
    q: B::Buf,
    k: B::Buf,
    v: B::Buf,
    att: B::Buf,
    merged: B::Buf,
    ffb: B::Buf,
    pred: B::Buf,
    guided: B::Buf,
}

fn linear<B: Backend>(kit: &B, rng: &mut Rng, out: usize, inp: usize) -> AnyResult<Linear<B>> {
    let scale = 1.0 / (inp as f32).sqrt();
    Ok(Linear { weight: kit.upload_weight(&rng.vec(out * inp, scale))?, bias: Some(kit.upload(&rng.vec(out, 0.1))?), out, inp })
}

impl<B: Backend> Dit<B> {
    fn new(kit: &B, s: Shape, rows: usize, n: usize, seed: u64) -> AnyResult<Self> {
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let d = s.dim;
        let bn = rows * n;
        let input = linear(kit, &mut rng, d, s.mel)?;
        let conv_w = |rng: &mut Rng| -> AnyResult<(B::Buf, B::Buf)> {
            let fan_in = d / s.conv_groups * s.conv_k;
            Ok((kit.upload_weight(&rng.vec(d * fan_in, 1.0 / (fan_in as f32).sqrt()))?, kit.upload(&rng.vec(d, 0.1))?))
        };
        let conv = [conv_w(&mut rng)?, conv_w(&mut rng)?];
        let mut layers = Vec::new();
        for _ in 0..s.depth {
            layers.push(Layer {
                qkv: linear(kit, &mut rng, 3 * d, d)?,
                out: linear(kit, &mut rng, d, d)?,
                ff1: linear(kit, &mut rng, s.ff, d)?,
                ff2: linear(kit, &mut rng, d, s.ff)?,
                modulation: kit.upload(&rng.vec(6 * d, 0.3))?,
            });
        }
        let half = HEAD_DIM / 2;
        let (mut cos, mut sin) = (Vec::with_capacity(n * half), Vec::with_capacity(n * half));
        for p in 0..n {
            for j in 0..half {
                let a = p as f32 / 10000f32.powf(2.0 * j as f32 / HEAD_DIM as f32);
                cos.push(a.cos());
                sin.push(a.sin());
            }
        }
        Ok(Dit {
            s,
            rows,
            n,
            input,
            conv,
            layers,
            out_mod: kit.upload(&rng.vec(2 * d, 0.3))?,
            proj_out: linear(kit, &mut rng, s.mel, d)?,
            x: kit.upload(&rng.vec(n * s.mel, 1.0))?,
            base: kit.upload(&rng.vec(bn * d, 1.0))?,
            cos: kit.upload(&cos)?,
            sin: kit.upload(&sin)?,
            h: kit.alloc(bn * d)?,
            hn: kit.alloc(bn * d)?,
            xproj: kit.alloc(n * d)?,
            conv_buf: kit.alloc(bn * d)?,
            qkv: kit.alloc(bn * 3 * d)?,
            q: kit.alloc(bn * d)?,
            k: kit.alloc(bn * d)?,
            v: kit.alloc(bn * d)?,
            att: kit.alloc(bn * d)?,
            merged: kit.alloc(bn * d)?,
            ffb: kit.alloc(bn * s.ff)?,
            pred: kit.alloc(bn * s.mel)?,
            guided: kit.alloc(n * s.mel)?,
        })
    }

    /// One velocity evaluation with CFG, the op sequence of f5-dit's forward.
    fn forward(&mut self, kit: &B) -> f5_gpukit::Result<()> {
        let Shape { dim: d, heads, ff, mel, conv_k, conv_groups, .. } = self.s;
        let (n, rows) = (self.n, self.rows);
        let bn = rows * n;
        let eps = 1e-6;
        kit.gemm(&GemmSpec::linear(n, mel, d), &self.x, &self.input.weight, self.input.bias.as_ref(), &mut self.xproj)?;
        kit.copy(&self.base, 0, &mut self.h, 0, bn * d)?;
        for r in 0..rows {
            kit.copy(&self.xproj, 0, &mut self.hn, r * n * d, n * d)?;
        }
        kit.axpy(1.0, &self.hn, &mut self.h, bn * d)?;
        let spec = Conv1dSpec::new(rows, n, d, d, conv_k).pad(conv_k / 2).groups(conv_groups);
        kit.conv1d(&spec, &self.h, &self.conv[0].0, Some(&self.conv[0].1), &mut self.conv_buf)?;
        kit.activation(Activation::Mish, &mut self.conv_buf, bn * d)?;
        kit.conv1d(&spec, &self.conv_buf, &self.conv[1].0, Some(&self.conv[1].1), &mut self.hn)?;
        kit.activation(Activation::Mish, &mut self.hn, bn * d)?;
        kit.axpy(1.0, &self.hn, &mut self.h, bn * d)?;
        let attn = AttentionSpec { batch_heads: rows * heads, n, head_dim: HEAD_DIM, scale: 1.0 / (HEAD_DIM as f32).sqrt() };
        for l in &self.layers {
            let m = &l.modulation;
            kit.adaln_modulate(&self.h, bn, d, eps, m, 0, d, &mut self.hn)?;
            l.qkv.apply(kit, &self.hn, bn, &mut self.qkv)?;
            let split = |part: usize, rope_heads: usize| RopeSpec {
                batch: rows,
                n,
                heads,
                head_dim: HEAD_DIM,
                rope_heads,
                src: StridedRows { offset: part * d, row_stride: 3 * d },
            };
            kit.split_heads_rope(&split(0, heads), &self.qkv, &self.cos, &self.sin, &mut self.q)?;
            kit.split_heads_rope(&split(1, heads), &self.qkv, &self.cos, &self.sin, &mut self.k)?;
            kit.split_heads_rope(&split(2, 0), &self.qkv, &self.cos, &self.sin, &mut self.v)?;
            kit.attention(&attn, &self.q, &self.k, &self.v, &mut self.att)?;
            kit.merge_heads(&self.att, rows, n, heads, HEAD_DIM, &mut self.merged)?;
            l.out.apply(kit, &self.merged, bn, &mut self.hn)?;
            kit.gated_add(&mut self.h, &self.hn, bn, d, m, 2 * d)?;
            kit.adaln_modulate(&self.h, bn, d, eps, m, 3 * d, 4 * d, &mut self.hn)?;
            l.ff1.apply(kit, &self.hn, bn, &mut self.ffb)?;
            kit.activation(Activation::GeluTanh, &mut self.ffb, bn * ff)?;
            l.ff2.apply(kit, &self.ffb, bn, &mut self.conv_buf)?;
            kit.gated_add(&mut self.h, &self.conv_buf, bn, d, m, 5 * d)?;
        }
        kit.adaln_modulate(&self.h, bn, d, eps, &self.out_mod, d, 0, &mut self.hn)?;
        self.proj_out.apply(kit, &self.hn, bn, &mut self.pred)?;
        if rows == 2 {
            kit.cfg_combine(&self.pred, n * mel, 2.0, &mut self.guided)?;
        }
        Ok(())
    }

    /// Attention alone, as many calls as one forward makes: how much of it is attention.
    fn attention_only(&mut self, kit: &B) -> f5_gpukit::Result<()> {
        let attn = AttentionSpec { batch_heads: self.rows * self.s.heads, n: self.n, head_dim: HEAD_DIM, scale: 0.125 };
        for _ in 0..self.s.depth {
            kit.attention(&attn, &self.q, &self.k, &self.v, &mut self.att)?;
        }
        Ok(())
    }

    /// Multiply-adds ×2 of one forward: GEMMs, attention (q·kᵀ and p·v) and the grouped convs.
    fn flops(&self) -> f64 {
        let Shape { dim: d, heads, ff, depth, mel, conv_k, conv_groups } = self.s;
        let (n, bn) = (self.n as f64, (self.rows * self.n) as f64);
        let (d, ff) = (d as f64, ff as f64);
        let per_layer_gemm = 2.0 * bn * (d * 3.0 * d + d * d + 2.0 * d * ff);
        let per_layer_attn = 4.0 * (self.rows * heads) as f64 * n * n * HEAD_DIM as f64;
        let conv = 2.0 * 2.0 * bn * d * (d / conv_groups as f64) * conv_k as f64;
        let io = 2.0 * n * mel as f64 * d + 2.0 * bn * d * mel as f64;
        depth as f64 * (per_layer_gemm + per_layer_attn) + conv + io
    }
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
    let reference = vec![-5.0f32; ref_frames * model.config.mel_dim];
    let ids: Vec<u32> = (0..40).map(|i| 10 + i % 60).collect();
    let frames = duration::sampled_frames(duration::estimate_frames(ref_samples, 30, 40, 1.0, None), ids.len(), ref_samples);
    let opts = SampleOptions { steps: 8, ..SampleOptions::default() };
    let mel = model.sample(&ids, &reference, frames, Noise::Seed(42), &opts, &mut |_, _| {})?;
    Ok((mel, t.elapsed().as_secs_f64()))
}

/// The tiny F5 checkpoint sampled on both backends (same seed and schedule).
fn tiny_model(args: &Args) -> AnyResult<Value> {
    use f5_dit::{F5Model, Overrides};
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

/// The DiT-shaped forward at a small size, CPU vs CUDA, f32 and bf16 weights.
fn small_forward() -> AnyResult<Vec<Value>> {
    let (rows, n) = (2, 200);
    let cpu = CpuBackend::new();
    let mut reference = Dit::new(&cpu, SMALL, rows, n, 7)?;
    reference.forward(&cpu)?;
    let want = cpu.download(&reference.guided)?;
    let mut out = Vec::new();
    for (precision, limit) in [(WeightPrecision::F32, 1e-8), (WeightPrecision::Bf16, 1e-3)] {
        let gpu = CudaBackend::with_options(0, CudaOptions { weights: precision })?;
        let mut dit = Dit::new(&gpu, SMALL, rows, n, 7)?;
        dit.forward(&gpu)?;
        let got = gpu.download(&dit.guided)?;
        let (max_abs, nmse) = compare(&got, &want);
        // f32: summation order only. bf16: 8-bit mantissas in every GEMM input, ~1e-4 NMSE.
        out.push(json!({ "check": "dit_forward_small", "precision": format!("{precision:?}"), "rows": rows, "n": n,
                         "max_abs": max_abs, "nmse": nmse, "limit": limit, "ok": nmse <= limit }));
    }
    Ok(out)
}

/// Full-size timing: eager and graph, f32 and bf16 weights, at every frame count.
fn full_size(args: &Args) -> AnyResult<Vec<Value>> {
    let mut out = Vec::new();
    for precision in [WeightPrecision::Bf16, WeightPrecision::F32] {
        let gpu = CudaBackend::with_options(0, CudaOptions { weights: precision })?;
        for &n in &args.frames {
            let shape = if args.quick { SMALL } else { F5_V1_BASE };
            let mut dit = Dit::new(&gpu, shape, 2, n, 11)?;
            for _ in 0..args.warmup {
                dit.forward(&gpu)?;
            }
            gpu.synchronize()?;
            let mut eager = Vec::new();
            for _ in 0..args.iters {
                eager.push(gpu.time_ms(|| dit.forward(&gpu))?);
            }
            let attention_ms = median((0..args.iters.min(3)).map(|_| gpu.time_ms(|| dit.attention_only(&gpu))).collect::<Result<_, _>>()?);
            let graph = gpu.capture(|| dit.forward(&gpu));
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
            let flops = dit.flops();
            let audio_s = n as f64 / FRAMES_PER_SECOND;
            let synth_s = args.steps as f64 * best / 1e3;
            let (free, total) = gpu.memory()?;
            out.push(json!({
                "check": "dit_forward_full", "precision": format!("{precision:?}"), "rows": 2, "n": n,
                "depth": shape.depth, "dim": shape.dim,
                "eager_ms": eager_ms, "graph_ms": graph_ms,
                "graph_error": graph.as_ref().err().map(|e| e.to_string()),
                "attention_ms": attention_ms,
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

fn run() -> AnyResult<bool> {
    let args = parse_args()?;
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
    record("dit_forward_small", small_forward(), &mut report);
    record("dit_forward_full", full_size(&args), &mut report);
    let doc = serde_json::to_string_pretty(&Value::Array(report))?;
    match &args.json {
        Some(p) => std::fs::write(p, &doc)?,
        None => println!("{doc}"),
    }
    Ok(ok)
}
