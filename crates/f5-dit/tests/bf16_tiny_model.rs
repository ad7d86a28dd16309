//! The tiny F5 fixture model sampled end to end on `CpuBf16Backend` against `CpuBackend`:
//! every GEMM weight the model uploads (including the input projection read in two column
//! slices) goes through the bf16 kernel, and nothing else in the model may touch a bf16 weight
//! (the backend would refuse it). Prints the mel's rel-L2 distance to the f32 run.

use std::path::PathBuf;

use f5_dit::{duration, F5Model, Noise, Overrides, SampleOptions};
use f5_gpukit::{cpu_int8_missing_feature, Backend, CpuBackend, CpuBf16Backend};

fn sample<B: Backend>(model: &F5Model<B>) -> Vec<f32> {
    let ref_samples = 2 * duration::SAMPLE_RATE;
    let ref_frames = ref_samples / duration::HOP + 1;
    let reference = vec![-5.0f32; ref_frames * model.config().mel_dim];
    let ids: Vec<u32> = (0..40).map(|i| 10 + i % 60).collect();
    let frames = duration::sampled_frames(duration::estimate_frames(ref_samples, 30, 40, 1.0, None), ids.len(), ref_samples);
    let opts = SampleOptions::default().with_steps(8);
    model.sample(&ids, &reference, frames, Noise::Seed(42), &opts, &mut |_, _| {}).unwrap()
}

#[test]
fn tiny_model_with_bf16_weights_tracks_f32() {
    // On every CPU: without AVX-512 BF16 the weights are widened, still rounded to bf16.
    let ckpt = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/models/f5-tiny-v1/model.safetensors");
    let f32_model = F5Model::open(&ckpt, CpuBackend::with_threads(2).unwrap(), &Overrides::default()).unwrap();
    let bf16_model = F5Model::open(&ckpt, CpuBf16Backend::with_threads(2).unwrap(), &Overrides::default()).unwrap();
    let (want, got) = (sample(&f32_model), sample(&bf16_model));
    assert_eq!(want.len(), got.len());
    let num: f64 = want.iter().zip(&got).map(|(&w, &g)| (w as f64 - g as f64).powi(2)).sum();
    let den: f64 = want.iter().map(|&w| (w as f64).powi(2)).sum();
    let rel_l2 = (num / den).sqrt();
    println!("tiny model on CpuBf16Backend: mel rel-L2 vs f32 = {rel_l2:.2e} ({} values, 8 steps)", want.len());
    // Each bf16 GEMM is ~3e-3 off (inputs rounded to 8 significant bits); the mel, measured at
    // 9e-4 on this fixture, is allowed 10× that. A wrong GEMM (a missing slice of the input
    // projection, a transposed weight) is O(1) off; one that skipped the rounding altogether
    // would agree to ~1e-6, hence the lower bound.
    assert!(rel_l2 < 1e-2 && rel_l2 > 1e-5, "rel-L2 {rel_l2}");
}

#[test]
fn tiny_model_with_int8_block_projections_tracks_f32() {
    if let Some(missing) = cpu_int8_missing_feature() {
        println!("tiny model in the int8 mode: not run (this CPU lacks {missing})");
        return;
    }
    let ckpt = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/models/f5-tiny-v1/model.safetensors");
    let f32_model = F5Model::open(&ckpt, CpuBackend::with_threads(2).unwrap(), &Overrides::default()).unwrap();
    let bf16_model = F5Model::open(&ckpt, CpuBf16Backend::with_threads(2).unwrap(), &Overrides::default()).unwrap();
    let int8_model = F5Model::open(&ckpt, CpuBf16Backend::with_int8_convs(2).unwrap(), &Overrides::default()).unwrap();
    let want = sample(&f32_model);
    let rel = |got: &[f32]| {
        let num: f64 = want.iter().zip(got).map(|(&w, &g)| (w as f64 - g as f64).powi(2)).sum();
        (num / want.iter().map(|&w| (w as f64).powi(2)).sum::<f64>()).sqrt()
    };
    let (bf16, int8) = (rel(&sample(&bf16_model)), rel(&sample(&int8_model)));
    println!("tiny model: mel rel-L2 vs f32 = {bf16:.2e} (bf16), {int8:.2e} (int8 block projections; 8 steps)");
    // Each int8 projection is ~1e-2 off (both operands to 8 bits, the activations per row); the
    // mel is allowed 5e-2. The int8 run must differ from the bf16 one (the mode is on): a model
    // whose projections stayed bf16 would give bf16's figure exactly.
    assert!(int8 < 5e-2, "int8 rel-L2 {int8}");
    assert!(int8 != bf16, "the int8 mode changed nothing");
}
