//! The harmonic source against the reference, fed the reference's own F0 (teacher forcing): the
//! source's phase reaches thousands of radians, so any difference in F0 upstream (1e-6 of fp32
//! summation order) is amplified here; only the source's own arithmetic is tested.

mod common;

use common::{fixtures, npy, rel_l2};
use f5_kokoro::source::{SineSource, HARMONICS};
use f5_nn::torch_rand::TorchGenerator;
use f5_nn::Weights;

fn small_source() -> SineSource {
    let mut w = Weights::open(fixtures().join("models/kokoro-small/kokoro-small.pth")).expect("small model");
    let mut s = w.scope("decoder.generator.m_source.l_linear");
    let weight = s.host("weight", &[1, HARMONICS]).unwrap();
    let bias = s.host("bias", &[1]).unwrap()[0];
    SineSource { weight: weight.try_into().unwrap(), bias, upsample: 300 }
}

#[test]
fn har_source_from_the_reference_f0_matches() {
    let dir = fixtures().join("whole_small");
    let f0: Vec<f32> = npy(&dir.join("tiny_heart_s1_F0.npy")).data.iter().map(|&v| v as f32).collect();
    let want = npy(&dir.join("tiny_heart_s1_gen_har_source.npy")).data;
    let got = small_source().generate(&f0, &mut TorchGenerator::new(42), None).unwrap();
    let err = rel_l2(&got, &want);
    eprintln!("har_source rel-L2 {err:.3e}");
    assert!(err < 1e-5, "rel-L2 {err:e}");
}

fn module_source() -> SineSource {
    let mut w = Weights::open(fixtures().join("modules/source.safetensors")).unwrap();
    let weight = w.root().host("l_linear.weight", &[1, HARMONICS]).unwrap();
    let bias = w.root().host("l_linear.bias", &[1]).unwrap()[0];
    SineSource { weight: weight.try_into().unwrap(), bias, upsample: 300 }
}

fn golden_f32(name: &str) -> Vec<f32> {
    npy(&fixtures().join("goldens").join(name)).data.iter().map(|&v| v as f32).collect()
}

/// Negative, sub-threshold and voiced F0 over 6 s: the source module's own golden.
#[test]
fn six_second_source_with_negative_f0_matches() {
    let f0 = golden_f32("source_long6s_f0.npy");
    let mut trace = None;
    let har = module_source().generate(&f0, &mut TorchGenerator::new(8), Some(&mut trace)).unwrap();
    let err = rel_l2(&har, &npy(&fixtures().join("goldens/source_long6s_har_source.npy")).data);
    assert!(err < 1e-5, "har_source rel-L2 {err:e}");
    let sines = trace.unwrap().sine_waves;
    let tail = &sines[sines.len() - 6000 * HARMONICS..];
    let err = rel_l2(tail, &npy(&fixtures().join("goldens/source_long6s_sines_last6000.npy")).data);
    assert!(err < 1e-5, "last 0.25 s of the sines rel-L2 {err:e}");
    let short = golden_f32("source_short_f0.npy");
    let har = module_source().generate(&short, &mut TorchGenerator::new(7), None).unwrap();
    let err = rel_l2(&har, &npy(&fixtures().join("goldens/source_short_har_source.npy")).data);
    assert!(err < 1e-5, "short har_source rel-L2 {err:e}");
}

/// The frame-rate phase (the reference's cumsum inside SineGen) computed three ways: as the
/// source does (floor-mod, f64 running sum) it equals the golden; seed fix 3 (truncating mod) and
/// the phase accumulator (an f32 running sum) each miss it.
#[test]
fn floor_mod_and_f64_phase_sum_are_what_the_golden_holds() {
    let f0 = golden_f32("source_long6s_f0.npy");
    let want = npy(&fixtures().join("goldens/source_long6s_cumsum.npy")).data;
    let phase = |truncate: bool, f32_sum: bool| -> Vec<f32> {
        // rad at the two samples the 1/300 linear downsample reads per frame (300k+149, 300k+150:
        // both inside frame k's nearest-upsampled F0), averaged as fma(a, 0.5, b·0.5).
        let mut acc64 = [0.0f64; HARMONICS];
        let mut acc32 = [0.0f32; HARMONICS];
        let mut out = Vec::with_capacity(f0.len() * HARMONICS);
        for &f in &f0 {
            for k in 0..HARMONICS {
                let v = (f * (k + 1) as f32) / 24_000.0;
                let rad = if truncate { v - v.trunc() } else { v - v.floor() };
                let r = rad.mul_add(0.5, rad * 0.5);
                acc64[k] += r as f64;
                acc32[k] += r;
                out.push(if f32_sum { acc32[k] } else { acc64[k] as f32 });
            }
        }
        out
    };
    let exact = rel_l2(&phase(false, false), &want);
    assert!(exact < 1e-6, "floor-mod with an f64 sum: rel-L2 {exact:e}");
    let trunc = rel_l2(&phase(true, false), &want);
    assert!(trunc > 1e-3, "a truncating mod must miss the golden (negative F0): rel-L2 {trunc:e}");
    // The f32 sum drifts by ulps of the running total; after ×2π×300 the phase is ~10⁶ rad, where
    // those ulps are hundredths of a radian in every sine. Compare element by element.
    let f32_sum = phase(false, true);
    let worst = f32_sum.iter().zip(&want).map(|(&g, &w)| (g as f64 - w).abs()).fold(0.0, f64::max);
    let worst_exact = phase(false, false).iter().zip(&want).map(|(&g, &w)| (g as f64 - w).abs()).fold(0.0, f64::max);
    assert_eq!(worst_exact, 0.0, "the f64 sum is the reference's, bit for bit");
    assert!(worst * 2.0 * std::f64::consts::PI * 300.0 > 1e-2, "an f32 running sum must drift visibly (max |Δ| {worst:e} cycles/300)");
}

/// Seed fix 4: a true inverse STFT (interior bins doubled, the Hann² envelope divided out) is
/// what torch.istft computes; the conv-basis approximation fails the same golden.
#[test]
fn istft_matches_torch_istft() {
    use f5_gpukit::{Activation, Backend, CpuBackend, StftSpec};
    let g = |n: &str| npy(&fixtures().join("goldens").join(n));
    let (a, b) = (g("istft_a.npy"), g("istft_b.npy"));
    let (bins, frames) = (a.shape[1], a.shape[2]);
    let to_rows = |x: &common::Golden| -> Vec<f32> { common::channels_last(x).iter().map(|&v| v as f32).collect() };
    let kit = CpuBackend::new();
    let mut mag = kit.upload(&to_rows(&a)).unwrap();
    let mut phase = kit.upload(&to_rows(&b)).unwrap();
    kit.activation(Activation::Exp, &mut mag, bins * frames).unwrap();
    kit.activation(Activation::Sin, &mut phase, bins * frames).unwrap();
    let spec = StftSpec { batch: 1, frames, n_fft: 20, hop: 5 };
    let mut out = kit.alloc(spec.samples()).unwrap();
    kit.istft(&spec, &mag, &phase, &mut out).unwrap();
    let got = kit.download(&out).unwrap();
    let want = g("istft_audio.npy").data;
    let err = rel_l2(&got, &want);
    assert!(err < 1e-5, "istft rel-L2 {err:e}");
    // The approximation: no interior doubling, no envelope division.
    let (m, p) = (kit.download(&mag).unwrap(), kit.download(&phase).unwrap());
    let mut ola = vec![0.0f64; 20 + 5 * (frames - 1)];
    for f in 0..frames {
        for t in 0..20 {
            let w = 0.5 - 0.5 * (2.0 * std::f64::consts::PI * t as f64 / 20.0).cos();
            let mut acc = 0.0;
            for k in 0..bins {
                let (mk, pk) = (m[f * bins + k] as f64, p[f * bins + k] as f64);
                let ang = 2.0 * std::f64::consts::PI * (k * t) as f64 / 20.0;
                acc += mk * (pk.cos() * ang.cos() - pk.sin() * ang.sin());
            }
            ola[f * 5 + t] += acc / 20.0 * w;
        }
    }
    let approx: Vec<f32> = ola[10..10 + spec.samples()].iter().map(|&v| v as f32).collect();
    let err = rel_l2(&approx, &want);
    assert!(err > 1e-2, "the approximate inverse must fail the golden: rel-L2 {err:e}");
}
