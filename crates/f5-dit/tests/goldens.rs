//! The DiT against the reference implementation, stage by stage, on the tiny random-weight
//! checkpoints in `fixtures/` (v1 and v0 traits, safetensors and `.pt`).
//!
//! Tolerance: rel-L2 ≤ 1e-5 for single forwards (the reference and this engine sum in different
//! orders in f32 and use different exp/tanh/erf approximations, each ~1e-7 relative; a wrong
//! formula anywhere is off by far more than 1e-3), ≤ 1e-4 for a whole 8-step sample, where those
//! differences pass through 16 forwards and the CFG extrapolation (×3).

use std::path::PathBuf;

use f5_dit::{F5Model, Noise, Overrides, SampleOptions, Solver, Variant};
use f5_gpukit::{Backend, CpuBackend};

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures")
}

fn npy_f32(name: &str) -> Vec<f32> {
    let path = fixtures().join("goldens").join(name);
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    npyz::NpyFile::new(&bytes[..]).unwrap().into_vec::<f32>().unwrap()
}

fn npy_ids(name: &str) -> Vec<u32> {
    let path = fixtures().join("goldens").join(name);
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    npyz::NpyFile::new(&bytes[..]).unwrap().into_vec::<i64>().unwrap().into_iter().map(|v| u32::try_from(v).expect("id")).collect()
}

fn rel_l2(got: &[f32], want: &[f32]) -> f64 {
    assert_eq!(got.len(), want.len(), "length");
    let num: f64 = got.iter().zip(want).map(|(a, b)| (*a as f64 - *b as f64).powi(2)).sum();
    let den: f64 = want.iter().map(|b| (*b as f64).powi(2)).sum();
    (num / den.max(1e-30)).sqrt()
}

#[track_caller]
fn check(what: &str, got: &[f32], want: &[f32], tol: f64) {
    let e = rel_l2(got, want);
    eprintln!("{what}: rel-L2 {e:.2e}");
    assert!(e <= tol, "{what}: rel-L2 {e:.3e} > {tol:e}");
}

fn open(v: &str, file: &str) -> F5Model<CpuBackend> {
    F5Model::open(fixtures().join(format!("models/f5-tiny-{v}/{file}")), CpuBackend::new(), &Overrides::default()).expect("open tiny model")
}

const N: usize = 311;

fn stages(v: &str, file: &str) {
    let model = open(v, file);
    let c = model.config();
    let (d, mel) = (c.dim, c.mel_dim);
    let kit = model.kit();
    let ids = npy_ids(&format!("{v}_text_ids.npy"));
    let cond = npy_f32(&format!("{v}_cond.npy"));
    let x = npy_f32(&format!("{v}_x.npy"));

    let tc = kit.download(&model.text_embed(&ids, N, false).unwrap()).unwrap();
    check(&format!("{v}/{file} text_embed cond"), &tc[..N * c.text_dim], &npy_f32(&format!("{v}_text_embed_cond.npy")), 1e-5);
    let tu = kit.download(&model.text_embed(&ids, N, true).unwrap()).unwrap();
    check(&format!("{v}/{file} text_embed uncond"), &tu[..N * c.text_dim], &npy_f32(&format!("{v}_text_embed_uncond.npy")), 1e-5);

    for t in ["0.25", "0.8"] {
        let tv: f32 = t.parse().unwrap();
        let te = kit.download(&model.time_embed(&[tv]).unwrap()).unwrap();
        check(&format!("{v}/{file} time_embed t={t}"), &te[..d], &npy_f32(&format!("{v}_time_embed_t{t}.npy")), 1e-5);

        let mods = model.modulations(&[tv]).unwrap();
        let mut prep = model.prepare(&ids, &cond, N, true).unwrap();
        let xb = kit.upload(&x).unwrap();
        let mut traced: Vec<(String, Vec<f32>)> = Vec::new();
        let mut sink = |name: &str, v: Vec<f32>| traced.push((name.to_string(), v));
        model.forward(&mut prep, &mods, 0, &xb, Some(&mut sink)).unwrap();
        let get = |name: &str| traced.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone()).unwrap();
        if t == "0.25" {
            let ie = get("input_embed");
            check(&format!("{v}/{file} input_embed cond"), &ie[..N * d], &npy_f32(&format!("{v}_input_embed_cond_t0.25.npy")), 1e-5);
            check(&format!("{v}/{file} input_embed uncond"), &ie[N * d..], &npy_f32(&format!("{v}_input_embed_uncond_t0.25.npy")), 1e-5);
            check(&format!("{v}/{file} block0"), &get("block0"), &npy_f32(&format!("{v}_block0_out_t0.25.npy")), 1e-5);
        }
        let out = kit.download(&prep.pred).unwrap();
        check(&format!("{v}/{file} forward t={t}"), &out[..2 * N * mel], &npy_f32(&format!("{v}_forward_t{t}.npy")), 1e-5);
    }
}

#[test]
fn v1_safetensors_stages() {
    stages("v1", "model.safetensors");
}

#[test]
fn v1_pt_stages() {
    stages("v1", "model.pt");
}

#[test]
fn v0_safetensors_stages() {
    stages("v0", "model.safetensors");
}

#[test]
fn v0_pt_stages() {
    stages("v0", "model.pt");
}

fn sample(v: &str, seed: u64) {
    let model = open(v, "model.safetensors");
    let ids = npy_ids(&format!("{v}_text_ids.npy"));
    let cond = npy_f32(&format!("{v}_cond.npy"));
    let ref_frames = 179;
    let opts =
        SampleOptions::default().with_steps(8).with_cfg_strength(2.0).with_sway(Some(-1.0)).with_solver(Solver::Euler).with_use_epss(true);
    let mut calls = 0;
    let out = model.sample(&ids, &cond[..ref_frames * 100], N, Noise::Seed(seed), &opts, &mut |_, _| calls += 1).unwrap();
    assert_eq!(calls, 8);
    check(&format!("{v} sample nfe8 seed {seed}"), &out, &npy_f32(&format!("{v}_sample_nfe8_seed{seed}.npy")), 1e-4);
}

#[test]
fn v1_sample_matches_cfm_sample() {
    sample("v1", 3);
    sample("v1", 11);
}

#[test]
fn v0_sample_matches_cfm_sample() {
    sample("v0", 3);
}

/// The architecture read from each fixture matches its training config, and the traits that
/// shapes cannot show come from the YAML beside the file.
#[test]
fn architecture_inference() {
    for (v, variant) in [("v1", Variant::V1), ("v0", Variant::V0)] {
        for file in ["model.safetensors", "model.pt"] {
            let model = open(v, file);
            let c = model.config();
            assert_eq!((c.dim, c.heads, c.dim_head, c.text_dim, c.conv_layers, c.mel_dim), (64, 2, 32, 16, 2, 100), "{v}/{file}");
            assert_eq!(c.depth, if v == "v1" { 2 } else { 1 });
            assert_eq!(c.text_rows, 2546);
            assert_eq!((c.conv_pos_kernel, c.conv_pos_groups, c.text_conv_kernel, c.ff_inner), (31, 16, 7, 128));
            assert_eq!(c.variant(), Some(variant), "{v}/{file}");
            assert!(matches!(&c.source, f5_dit::TraitSource::Yaml(p) if p.ends_with("config.yaml")));
            let expected_prefix =
                if file.ends_with(".pt") { "ema_model_state_dict.ema_model.transformer." } else { "ema_model.transformer." };
            assert_eq!(c.prefix, expected_prefix);
        }
    }
}

/// Swapping the v0/v1 traits, or reading the heads wrongly, must break the match with the
/// reference: the traits are real, and the test above would notice a regression.
#[test]
fn wrong_traits_break_the_forward() {
    let ids = npy_ids("v1_text_ids.npy");
    let cond = npy_f32("v1_cond.npy");
    let x = npy_f32("v1_x.npy");
    let want = npy_f32("v1_forward_t0.25.npy");
    let path = fixtures().join("models/f5-tiny-v1/model.safetensors");
    // A head count that contradicts the stored rotary buffer is refused, naming both.
    let err = F5Model::open(&path, CpuBackend::new(), &Overrides::default().with_heads(Some(1))).err().expect("heads=1 accepted");
    assert!(err.to_string().contains("inv_freq"), "{err}");
    for ov in [Overrides::default().with_variant(Some(Variant::V0)), Overrides::default().with_variant(Some(Variant::V1))] {
        let model = F5Model::open(&path, CpuBackend::new(), &ov).unwrap();
        let kit = model.kit();
        let mods = model.modulations(&[0.25]).unwrap();
        let mut prep = model.prepare(&ids, &cond, N, true).unwrap();
        model.forward(&mut prep, &mods, 0, &kit.upload(&x).unwrap(), None).unwrap();
        let out = kit.download(&prep.pred).unwrap();
        let e = rel_l2(&out[..want.len()], &want);
        if ov.variant == Some(Variant::V1) {
            assert!(e <= 1e-5, "explicit v1 on a v1 file must match ({e:e})");
        } else {
            assert!(e > 1e-3, "{ov:?} still matched (rel-L2 {e:e})");
        }
    }
}

/// The supported single forward gives the reference's velocity (both guidance rows), and its
/// input checks refuse what would not fit instead of panicking.
#[test]
fn velocity_matches_the_reference_forward() {
    let model = open("v1", "model.safetensors");
    let ids = npy_ids("v1_text_ids.npy");
    let cond = npy_f32("v1_cond.npy");
    let x = npy_f32("v1_x.npy");
    let want = npy_f32("v1_forward_t0.25.npy");
    let both = model.velocity(&ids, &cond, &x[..N * 100], 0.25, true).unwrap();
    assert_eq!(both.len(), 2 * N * 100);
    check("velocity t=0.25", &both, &want, 1e-5);
    let conditional = model.velocity(&ids, &cond, &x[..N * 100], 0.25, false).unwrap();
    check("velocity t=0.25 without guidance", &conditional, &want[..N * 100], 1e-5);
    // The wrong time must not match: the check above can fail.
    let late = model.velocity(&ids, &cond, &x[..N * 100], 0.8, false).unwrap();
    assert!(rel_l2(&late, &want[..N * 100]) > 1e-3);

    for (what, err) in [
        ("ragged x", model.velocity(&ids, &cond, &x[..N * 100 - 1], 0.25, true)),
        ("empty x", model.velocity(&ids, &cond, &[], 0.25, true)),
        ("reference longer than x", model.velocity(&ids, &cond, &x[..10 * 100], 0.25, true)),
        ("NaN time", model.velocity(&ids, &cond, &x[..N * 100], f32::NAN, true)),
        ("id past the vocabulary", model.velocity(&[5000], &cond, &x[..N * 100], 0.25, true)),
    ] {
        assert!(matches!(err, Err(f5_dit::DitError::Input(_))), "{what}: {:?}", err.map(|v| v.len()));
    }
}

/// Per-utterance state from one model handed to another (here a deeper one, whose forward
/// would index blocks the state does not have) is an error, not a panic.
#[test]
fn state_from_another_model_is_refused() {
    let v1 = open("v1", "model.safetensors");
    let v0 = open("v0", "model.safetensors");
    assert_ne!(v1.config().depth, v0.config().depth);
    let ids = npy_ids("v1_text_ids.npy");
    let cond = npy_f32("v1_cond.npy");
    let x = v1.kit().upload(&npy_f32("v1_x.npy")).unwrap();
    let shallow_mods = v0.modulations(&[0.25]).unwrap();
    let mut prep = v1.prepare(&ids, &cond, N, true).unwrap();
    let err = v1.forward(&mut prep, &shallow_mods, 0, &x, None).unwrap_err();
    assert!(matches!(err, f5_dit::DitError::Input(_)), "{err}");
    let mods = v1.modulations(&[0.25]).unwrap();
    let mut foreign_prep = v0.prepare(&ids, &cond, N, true).unwrap();
    assert!(v1.forward(&mut foreign_prep, &mods, 0, &x, None).is_err());
    // The same model's own state still runs.
    v1.forward(&mut prep, &mods, 0, &x, None).unwrap();
}

/// A configuration built in code opens the matching file, and an inconsistent one is refused
/// before any weight is read.
#[test]
fn hand_built_config() {
    let path = fixtures().join("models/f5-tiny-v1/model.safetensors");
    let tiny = f5_dit::F5Config::default()
        .with_dim(64)
        .with_depth(2)
        .with_heads(2)
        .with_dim_head(32)
        .with_ff_inner(128)
        .with_text_dim(16)
        .with_conv_layers(2);
    let ckpt = f5_torchpt::Checkpoint::open(&path).unwrap();
    let model = F5Model::from_checkpoint(ckpt, tiny.clone(), CpuBackend::new()).unwrap();
    let inferred = open("v1", "model.safetensors");
    let (ids, cond, x) = (npy_ids("v1_text_ids.npy"), npy_f32("v1_cond.npy"), npy_f32("v1_x.npy"));
    let a = model.velocity(&ids, &cond, &x[..N * 100], 0.25, false).unwrap();
    let b = inferred.velocity(&ids, &cond, &x[..N * 100], 0.25, false).unwrap();
    assert_eq!(a, b, "same weights, same architecture, same forward");

    for bad in [tiny.clone().with_heads(3), tiny.clone().with_dim_head(31).with_heads(2), tiny.clone().with_conv_pos_groups(0)] {
        let ckpt = f5_torchpt::Checkpoint::open(&path).unwrap();
        let err = F5Model::from_checkpoint(ckpt, bad, CpuBackend::new()).err().expect("bad config accepted");
        assert!(matches!(err, f5_dit::DitError::Config(_)), "{err}");
    }
    // Consistent but unlike the file: a shape error names the tensor.
    let ckpt = f5_torchpt::Checkpoint::open(&path).unwrap();
    let err = F5Model::from_checkpoint(ckpt, tiny.with_ff_inner(256), CpuBackend::new()).err().expect("wrong ff accepted");
    assert!(matches!(err, f5_dit::DitError::Shape { .. }), "{err}");
}
