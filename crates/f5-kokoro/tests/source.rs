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
