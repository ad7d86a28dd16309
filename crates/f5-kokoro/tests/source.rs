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

#[test]
#[ignore]
fn debug_pieces() {
    let dir = fixtures().join("whole_small");
    let f0: Vec<f32> = npy(&dir.join("tiny_heart_s1_F0.npy")).data.iter().map(|&v| v as f32).collect();
    let mut tr = None;
    let _ = small_source().generate(&f0, &mut TorchGenerator::new(42), Some(&mut tr)).unwrap();
    let tr = tr.unwrap();
    let noise = npy(std::path::Path::new("/tmp/noise_ref.npy")).data;
    eprintln!("noise rel {:e}", rel_l2(&tr.noise, &noise));
    let ph = npy(std::path::Path::new("/tmp/ph_ref.npy")).data;
    let sines: Vec<f64> = ph.iter().map(|&p| ((p as f32).sin() * 0.1) as f64).collect();
    let mine: Vec<f32> = tr
        .sine_waves
        .iter()
        .zip(&tr.noise)
        .zip(tr.uv.iter().flat_map(|&u| std::iter::repeat_n(u, 9)))
        .map(|((s, n), u)| if u > 0.0 { s - n } else { 0.0 })
        .collect();
    let want: Vec<f64> =
        sines.iter().zip(tr.uv.iter().flat_map(|&u| std::iter::repeat_n(u, 9))).map(|(s, u)| if u > 0.0 { *s } else { 0.0 }).collect();
    eprintln!("sines rel {:e}", rel_l2(&mine, &want));
}

#[test]
#[ignore]
fn debug_phase() {
    use f5_gpukit::{Backend, CpuBackend, InterpolateSpec};
    let dir = fixtures().join("whole_small");
    let f0: Vec<f32> = npy(&dir.join("tiny_heart_s1_F0.npy")).data.iter().map(|&v| v as f32).collect();
    let up = 300;
    let len = f0.len() * up;
    let mut rad = vec![0.0f32; len * 9];
    for (t, row) in rad.chunks_mut(9).enumerate() {
        for (k, r) in row.iter_mut().enumerate() {
            let v = (f0[t / up] * (k + 1) as f32) / 24000.0;
            *r = v - v.floor();
        }
    }
    let cpu = CpuBackend::new();
    let down = InterpolateSpec::by_scale(1, len, 9, 1.0 / up as f64);
    let mut r = vec![0.0f32; down.n_out * 9];
    cpu.interpolate_linear(&down, &rad, &mut r).unwrap();
    let rr = npy(std::path::Path::new("/tmp/r_ref.npy")).data;
    eprintln!("r rel {:e} ratio {}", rel_l2(&r, &rr), down.ratio);
    let mut c = vec![0.0f32; r.len()];
    cpu.cumsum(&r, 1, down.n_out, 9, &mut c).unwrap();
    let p: Vec<f32> = c.iter().map(|&c| (c * 2.0) * std::f32::consts::PI * 300.0).collect();
    let upspec = InterpolateSpec::by_scale(1, down.n_out, 9, up as f64);
    let mut pu = vec![0.0f32; len * 9];
    cpu.interpolate_linear(&upspec, &p, &mut pu).unwrap();
    let ph = npy(std::path::Path::new("/tmp/ph_ref.npy")).data;
    eprintln!("phase rel {:e} ratio {}", rel_l2(&pu, &ph), upspec.ratio);
    let worst =
        pu.iter().zip(&ph).enumerate().map(|(i, (&a, &b))| (i, (a as f64 - b).abs())).fold((0, 0.0), |m, x| if x.1 > m.1 { x } else { m });
    eprintln!("worst {:?} got {} want {}", worst, pu[worst.0], ph[worst.0]);
}

#[test]
#[ignore]
fn debug_interp_variants() {
    let ph = npy(std::path::Path::new("/tmp/ph_ref.npy")).data;
    let c = npy(std::path::Path::new("/tmp/c_ref.npy")).data;
    let p: Vec<f32> = c.iter().map(|&c| ((c as f32) * 2.0) * std::f32::consts::PI * 300.0).collect();
    let n_in = p.len() / 9;
    let n_out = n_in * 300;
    let ratio = (1.0f64 / 300.0) as f32;
    for variant in 0..4 {
        let mut bad = 0;
        for t in 0..n_out {
            let src = (ratio * (t as f32 + 0.5) - 0.5).max(0.0);
            let i0 = (src.floor() as usize).min(n_in - 1);
            let i1 = if i0 + 1 < n_in { i0 + 1 } else { i0 };
            let l1 = (src - i0 as f32).clamp(0.0, 1.0);
            let l0 = 1.0 - l1;
            for k in 0..9 {
                let (a, b) = (p[i0 * 9 + k], p[i1 * 9 + k]);
                let v = match variant {
                    0 => l0 * a + l1 * b,
                    1 => a.mul_add(l0, b * l1),
                    2 => b.mul_add(l1, a * l0),
                    _ => (a as f64 * l0 as f64 + b as f64 * l1 as f64) as f32,
                };
                if v as f64 != ph[t * 9 + k] {
                    bad += 1;
                }
            }
        }
        eprintln!("variant {variant}: {bad} mismatches of {}", n_out * 9);
    }
}
