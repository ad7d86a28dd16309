//! The sampler's inputs against the reference: `torch.randn` after `torch.manual_seed` must be
//! reproduced bit for bit, and `CFM.sample`'s float32 time grid exactly.

use std::path::PathBuf;

use f5_dit::{time_grid, torch_randn};

fn golden(name: &str) -> (Vec<u64>, Vec<f32>) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/goldens").join(name);
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("golden {} missing ({e}); run `cargo xtask fixtures`", path.display()));
    let npy = npyz::NpyFile::new(&bytes[..]).expect("npy header");
    let shape = npy.shape().to_vec();
    (shape, npy.into_vec::<f32>().expect("f32 data"))
}

#[test]
fn noise_is_bit_exact_for_every_golden_seed_and_length() {
    let mut checked = 0;
    // 17 and 203 frames are not multiples of 4, so 100·frames is not a multiple of 16: the
    // tail re-draw path runs.
    for seed in [0u64, 42, 12345, 4_294_967_303] {
        for frames in [16usize, 17, 100, 203] {
            let (shape, want) = golden(&format!("noise_seed{seed}_frames{frames}.npy"));
            assert_eq!(shape, vec![frames as u64, 100]);
            let got = torch_randn(seed, frames, 100);
            let diff = got.iter().zip(&want).filter(|(a, b)| a.to_bits() != b.to_bits()).count();
            assert_eq!(diff, 0, "seed {seed} frames {frames}: {diff} of {} values differ", want.len());
            checked += 1;
        }
    }
    assert_eq!(checked, 16);
}

#[test]
fn time_grids_match_the_reference_exactly() {
    for (steps, sway, name) in [
        (32, -1.0f32, "tgrid_nfe32_sway-1.npy"),
        (16, -1.0, "tgrid_nfe16_sway-1.npy"),
        (8, -1.0, "tgrid_nfe8_sway-1.npy"),
        (7, -1.0, "tgrid_nfe7_sway-1.npy"),
        (32, 0.0, "tgrid_nfe32_sway0.npy"),
    ] {
        let (_, want) = golden(name);
        let got = time_grid(steps, Some(sway), true);
        assert_eq!(got.len(), want.len(), "{name}");
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g.to_bits(), w.to_bits(), "{name}[{i}]: got {g}, want {w}");
        }
    }
}
