//! Loading: the four layouts of one checkpoint, voice packs in both forms, mixes, and the
//! refusals that name what is wrong.

mod common;

use common::fixtures;
use f5_gpukit::{Backend, CpuBackend};
use f5_kokoro::{parse_voice_mix, Kokoro, KokoroConfig, KokoroError, Trace, VoicePack};
use f5_nn::Weights;

const LAYOUTS: [&str; 4] =
    ["kokoro-small.pth", "kokoro-small-stripped.pth", "kokoro-small-parametrizations.pth", "kokoro-small.safetensors"];

fn shared_voices() -> std::path::PathBuf {
    std::env::var_os("KOKORO_SHARED")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| fixtures().join("../../../shared/kokoro"))
        .join("voices")
}

#[test]
fn four_layouts_give_identical_tensors_and_audio() {
    let dir = fixtures().join("models/kokoro-small");
    let mut reference: Option<Vec<(String, Vec<f32>)>> = None;
    for layout in LAYOUTS {
        let mut w = Weights::open(dir.join(layout)).unwrap_or_else(|e| panic!("{layout}: {e}"));
        let names: Vec<String> = w.names().iter().map(|s| s.to_string()).collect();
        let mut tensors = Vec::new();
        for name in names.iter().filter(|n| !n.ends_with("_g") && !n.ends_with("_v")) {
            let shape = w.shape(name).unwrap().to_vec();
            tensors.push((name.clone(), w.root().host(name, &shape).unwrap()));
        }
        for stem in names.iter().filter_map(|n| n.strip_suffix(".weight_v")) {
            let shape = w.shape(&format!("{stem}.weight_v")).unwrap().to_vec();
            tensors.push((format!("{stem}.weight"), w.root().host_normed(&format!("{stem}.weight"), &shape).unwrap()));
        }
        tensors.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(tensors.len(), 548 - 89, "{layout}: 548 tensors with 89 weight-norm pairs folded");
        match &reference {
            None => reference = Some(tensors),
            Some(r) => assert!(r == &tensors, "{layout}: tensors differ from {}", LAYOUTS[0]),
        }
    }
    // And the models built from them speak identically.
    let config = KokoroConfig::open(&dir.join("config.json")).unwrap();
    let voice = VoicePack::open(&shared_voices().join("af_heart.bin"), 256).unwrap();
    let mut first: Option<Vec<f32>> = None;
    for layout in LAYOUTS {
        let mut w = Weights::open(dir.join(layout)).unwrap();
        let m = Kokoro::from_weights(&mut w, config.clone(), CpuBackend::new()).unwrap();
        let out = m.speak("həlˈO.", &voice, 1.0, 3).unwrap();
        match &first {
            None => first = Some(out.audio),
            Some(a) => assert!(a == &out.audio, "{layout}: audio differs"),
        }
    }
}

#[test]
fn every_shared_voice_pack_reads_and_the_pt_form_equals_the_bin() {
    let mut n = 0;
    for entry in std::fs::read_dir(shared_voices()).expect("the shared voice packs") {
        let path = entry.unwrap().path();
        let pack = VoicePack::open(&path, 256).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert_eq!(pack.rows(), 510, "{}", path.display());
        n += 1;
    }
    assert_eq!(n, 54);
    let bin = VoicePack::open(&shared_voices().join("af_heart.bin"), 256).unwrap();
    let pt = VoicePack::open(&fixtures().join("voices/af_heart.pt"), 256).unwrap();
    assert_eq!(bin, pt);
    // Row len − 1 for len phonemes.
    assert_eq!(bin.style(1).unwrap().len(), 256);
    assert!(bin.style(510).is_ok() && bin.style(511).is_err() && bin.style(0).is_err());
}

#[test]
fn voice_mixes_are_weighted_means() {
    let v = shared_voices();
    let a = VoicePack::open(&v.join("af_bella.bin"), 256).unwrap();
    let b = VoicePack::open(&v.join("af_sky.bin"), 256).unwrap();
    assert_eq!(parse_voice_mix("af_bella(2)+af_sky(1)").unwrap(), vec![("af_bella".to_string(), 2.0), ("af_sky".to_string(), 1.0)]);
    assert_eq!(parse_voice_mix("af_bella+af_sky").unwrap(), vec![("af_bella".to_string(), 1.0), ("af_sky".to_string(), 1.0)]);
    for bad in ["", "af_bella+", "af_bella(x)", "af_bella(-1)", "../etc(1)"] {
        assert!(parse_voice_mix(bad).is_err(), "{bad:?} accepted");
    }
    let mix = VoicePack::mix(&[(a.clone(), 2.0), (b.clone(), 1.0)]).unwrap();
    for row in [0, 100, 509] {
        let (ra, rb, rm) = (a.style(row + 1).unwrap(), b.style(row + 1).unwrap(), mix.style(row + 1).unwrap());
        for i in 0..256 {
            let want = (2.0 * ra[i] as f64 + rb[i] as f64) / 3.0;
            assert!((rm[i] as f64 - want).abs() < 1e-6, "row {row} value {i}");
        }
    }
    assert!(VoicePack::mix(&[]).is_err());
}

#[test]
fn a_missing_or_misshaped_tensor_is_named() {
    // Build a checkpoint lacking one tensor and one with a wrong shape, via safetensors.
    let dir = fixtures().join("models/kokoro-small");
    let config = KokoroConfig::open(&dir.join("config.json")).unwrap();
    let ckpt = f5_torchpt::Checkpoint::open(dir.join("kokoro-small.safetensors")).unwrap();
    let names: Vec<String> = ckpt.names().map(str::to_string).collect();
    let tmp = std::env::temp_dir().join(format!("f5-kokoro-load-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    for (case, victim) in [("missing", "predictor.duration_proj.linear_layer.bias"), ("shape", "text_encoder.embedding.weight")] {
        let mut data: Vec<(String, Vec<usize>, Vec<u8>)> = Vec::new();
        for n in &names {
            let meta = ckpt.meta(n).unwrap();
            let mut shape = meta.shape().to_vec();
            let mut vals = ckpt.read_f32(n).unwrap();
            if n == victim && case == "missing" {
                continue;
            }
            if n == victim && case == "shape" {
                shape[0] -= 1;
                vals.truncate(shape.iter().product());
            }
            data.push((n.clone(), shape, vals.iter().flat_map(|v| v.to_le_bytes()).collect()));
        }
        let views: std::collections::BTreeMap<String, safetensors::tensor::TensorView<'_>> = data
            .iter()
            .map(|(n, s, b)| (n.clone(), safetensors::tensor::TensorView::new(safetensors::tensor::Dtype::F32, s.clone(), b).unwrap()))
            .collect();
        let path = tmp.join(format!("{case}.safetensors"));
        safetensors::serialize_to_file(&views, None, &path).unwrap();
        let mut w = Weights::open(&path).unwrap();
        let err = Kokoro::from_weights(&mut w, config.clone(), CpuBackend::new()).err().expect("a broken checkpoint was accepted");
        let msg = err.to_string();
        assert!(matches!(err, KokoroError::Weights(_)), "{case}: {err:?}");
        assert!(msg.contains(victim), "{case}: the error must name {victim}: {msg}");
    }
    let _ = std::fs::remove_dir_all(&tmp);
}

#[test]
fn bad_input_is_refused_with_the_reason() {
    let dir = fixtures().join("models/kokoro-small");
    let m = Kokoro::open(dir.join("kokoro-small.pth"), CpuBackend::new()).unwrap();
    let voice = VoicePack::open(&shared_voices().join("af_heart.bin"), 256).unwrap();
    let err = |p: &str, speed: f32| m.speak(p, &voice, speed, 0).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(err("", 1.0).contains("no phonemes"));
    assert!(err("123", 1.0).contains("none of the"));
    assert!(err("həlˈO", 0.0).contains("speed"));
    assert!(err("həlˈO", f32::NAN).contains("speed"));
    // 511 phonemes: one past the limit (never a smaller cap: 510 is accepted).
    let long: String = "ə".repeat(511);
    assert!(err(&long, 1.0).contains("510"), "{}", err(&long, 1.0));
    let tokens = m.tokens(&"ə".repeat(510)).unwrap();
    assert_eq!(tokens.len(), 512);
    // Characters outside the vocabulary are dropped, as the reference drops them.
    assert_eq!(m.tokens("h1ə").unwrap(), m.tokens("hə").unwrap());
    let style = voice.style(1).unwrap();
    assert!(m.forward(&[0, 999, 0], style, 1.0, 0, Trace::off()).is_err());
    assert!(m.forward(&[0, 5, 0], &style[..10], 1.0, 0, Trace::off()).is_err());
    let _ = m.kit().device();
}

#[test]
fn inspect_recognises_kokoro_in_every_layout_and_nothing_else() {
    let dir = fixtures().join("models/kokoro-small");
    for layout in LAYOUTS {
        let ckpt = f5_torchpt::Checkpoint::open(dir.join(layout)).unwrap();
        let s = f5_kokoro::inspect(&ckpt).unwrap_or_else(|| panic!("{layout} not recognised"));
        assert_eq!((s.tensors, s.params), (548, 134_734), "{layout}");
        assert_eq!((s.hidden_dim, s.n_token, s.style_dim), (8, 178, 128), "{layout}");
    }
    let f5 = f5_torchpt::Checkpoint::open(fixtures().join("../models/f5-tiny-v1/model.safetensors")).unwrap();
    assert!(f5_kokoro::inspect(&f5).is_none(), "an F5 checkpoint is not Kokoro");
}
