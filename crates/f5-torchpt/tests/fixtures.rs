//! The project's reference checkpoints under `fixtures/` (written by `fixtures/generate.py`
//! with the reference implementation). Expected name sets and shapes follow the layouts the
//! reference modules register (F5-TTS `DiT`, Vocos `VocosBackbone` + `ISTFTHead`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use f5_torchpt::{Checkpoint, DType, Format, Scalar};

fn repo_path(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").join(relative)
}

fn open(relative: &str) -> Checkpoint {
    let path = repo_path(relative);
    assert!(path.exists(), "missing fixture file {relative} (expected at {}; written by fixtures/generate.py)", path.display());
    Checkpoint::open(&path).unwrap_or_else(|e| panic!("{e}"))
}

type Layout = BTreeMap<String, Vec<usize>>;

/// DiT tensor names and shapes (without any `ema_model.` prefix), as `DiT.__init__` registers
/// them, for `dim`, `depth`, `text_dim`, `conv_layers`, `ff_mult = 2`, `dim_head`, 100 mels and
/// 2546 text embeddings.
fn dit_layout(dim: usize, depth: usize, text_dim: usize, conv_layers: usize, dim_head: usize) -> Layout {
    let mut l = Layout::new();
    let mut add = |name: String, shape: &[usize]| {
        l.insert(format!("transformer.{name}"), shape.to_vec());
    };
    add("time_embed.time_mlp.0.weight".into(), &[dim, 256]);
    add("time_embed.time_mlp.0.bias".into(), &[dim]);
    add("time_embed.time_mlp.2.weight".into(), &[dim, dim]);
    add("time_embed.time_mlp.2.bias".into(), &[dim]);
    add("text_embed.text_embed.weight".into(), &[2546, text_dim]);
    let inter = text_dim * 2;
    for i in 0..conv_layers {
        let p = format!("text_embed.text_blocks.{i}");
        add(format!("{p}.dwconv.weight"), &[text_dim, 1, 7]);
        add(format!("{p}.dwconv.bias"), &[text_dim]);
        add(format!("{p}.norm.weight"), &[text_dim]);
        add(format!("{p}.norm.bias"), &[text_dim]);
        add(format!("{p}.pwconv1.weight"), &[inter, text_dim]);
        add(format!("{p}.pwconv1.bias"), &[inter]);
        add(format!("{p}.grn.gamma"), &[1, 1, inter]);
        add(format!("{p}.grn.beta"), &[1, 1, inter]);
        add(format!("{p}.pwconv2.weight"), &[text_dim, inter]);
        add(format!("{p}.pwconv2.bias"), &[text_dim]);
    }
    add("input_embed.proj.weight".into(), &[dim, 100 + 100 + text_dim]);
    add("input_embed.proj.bias".into(), &[dim]);
    for k in [0, 2] {
        add(format!("input_embed.conv_pos_embed.conv1d.{k}.weight"), &[dim, dim / 16, 31]);
        add(format!("input_embed.conv_pos_embed.conv1d.{k}.bias"), &[dim]);
    }
    add("rotary_embed.inv_freq".into(), &[dim_head / 2]);
    for b in 0..depth {
        let p = format!("transformer_blocks.{b}");
        add(format!("{p}.attn_norm.linear.weight"), &[6 * dim, dim]);
        add(format!("{p}.attn_norm.linear.bias"), &[6 * dim]);
        for proj in ["to_q", "to_k", "to_v", "to_out.0"] {
            add(format!("{p}.attn.{proj}.weight"), &[dim, dim]);
            add(format!("{p}.attn.{proj}.bias"), &[dim]);
        }
        add(format!("{p}.ff.ff.0.0.weight"), &[2 * dim, dim]);
        add(format!("{p}.ff.ff.0.0.bias"), &[2 * dim]);
        add(format!("{p}.ff.ff.2.weight"), &[dim, 2 * dim]);
        add(format!("{p}.ff.ff.2.bias"), &[dim]);
    }
    add("norm_out.linear.weight".into(), &[2 * dim, dim]);
    add("norm_out.linear.bias".into(), &[2 * dim]);
    add("proj_out.weight".into(), &[100, dim]);
    add("proj_out.bias".into(), &[100]);
    l
}

/// Vocos `pytorch_model.bin` names and shapes for `dim`, `intermediate`, `layers`
/// (83 entries for the released 512/1536/8 model).
fn vocos_layout(dim: usize, intermediate: usize, layers: usize) -> Layout {
    let mut l = Layout::new();
    let mut add = |name: String, shape: &[usize]| {
        l.insert(name, shape.to_vec());
    };
    add("feature_extractor.mel_spec.spectrogram.window".into(), &[1024]);
    add("feature_extractor.mel_spec.mel_scale.fb".into(), &[513, 100]);
    add("backbone.embed.weight".into(), &[dim, 100, 7]);
    add("backbone.embed.bias".into(), &[dim]);
    add("backbone.norm.weight".into(), &[dim]);
    add("backbone.norm.bias".into(), &[dim]);
    for i in 0..layers {
        let p = format!("backbone.convnext.{i}");
        add(format!("{p}.gamma"), &[dim]);
        add(format!("{p}.dwconv.weight"), &[dim, 1, 7]);
        add(format!("{p}.dwconv.bias"), &[dim]);
        add(format!("{p}.norm.weight"), &[dim]);
        add(format!("{p}.norm.bias"), &[dim]);
        add(format!("{p}.pwconv1.weight"), &[intermediate, dim]);
        add(format!("{p}.pwconv1.bias"), &[intermediate]);
        add(format!("{p}.pwconv2.weight"), &[dim, intermediate]);
        add(format!("{p}.pwconv2.bias"), &[dim]);
    }
    add("backbone.final_layer_norm.weight".into(), &[dim]);
    add("backbone.final_layer_norm.bias".into(), &[dim]);
    add("head.out.weight".into(), &[1026, dim]);
    add("head.out.bias".into(), &[1026]);
    add("head.istft.window".into(), &[1024]);
    l
}

fn layout_of(ckpt: &Checkpoint, prefix: &str) -> Layout {
    ckpt.names()
        .filter_map(|name| {
            let short = name.strip_prefix(prefix)?;
            Some((short.to_string(), ckpt.meta(name).ok()?.shape().to_vec()))
        })
        .collect()
}

fn bits(ckpt: &Checkpoint, name: &str) -> Vec<u32> {
    ckpt.read_f32(name).unwrap_or_else(|e| panic!("{e}")).iter().map(|v| v.to_bits()).collect()
}

/// The `.pt` (`{"ema_model_state_dict": sd, "update": 1234}`) and the `.safetensors` (`sd`)
/// of one tiny model hold the same tensors, byte for byte.
fn pt_matches_safetensors(dir: &str, depth: usize) {
    let st = open(&format!("{dir}/model.safetensors"));
    let pt = open(&format!("{dir}/model.pt"));
    assert_eq!(st.format(), Format::Safetensors);
    assert_eq!(pt.format(), Format::TorchZip);

    let mut want = dit_layout(64, depth, 16, 2, 32).into_iter().map(|(k, v)| (format!("ema_model.{k}"), v)).collect::<Layout>();
    want.insert("initted".into(), vec![]);
    want.insert("step".into(), vec![]);
    assert_eq!(layout_of(&st, ""), want, "{dir}/model.safetensors layout");

    let prefix = "ema_model_state_dict.";
    assert_eq!(pt.len(), st.len(), "no tensors outside the EMA state dict");
    assert_eq!(layout_of(&pt, prefix), want, "{dir}/model.pt layout");
    for name in st.names() {
        let pt_name = format!("{prefix}{name}");
        let (a, b) = (st.meta(name).expect("st"), pt.meta(&pt_name).expect("pt"));
        assert_eq!(a.dtype(), b.dtype(), "{name}");
        assert!(b.is_contiguous(), "{name}: state_dict tensors are contiguous");
        assert_eq!(st.raw_bytes(name).expect("st"), pt.raw_bytes(&pt_name).expect("pt"), "{name}: bytes differ");
        assert_eq!(bits(&st, name), bits(&pt, &pt_name), "{name}");
    }
    assert_eq!(st.meta("initted").expect("initted").dtype(), DType::Bool);
    assert_eq!(st.meta("step").expect("step").dtype(), DType::I64);
    assert_eq!(st.read_f32("step").expect("step"), vec![1234.0]);
    assert_eq!(st.read_f32("initted").expect("initted"), vec![1.0]);
    assert_eq!(pt.scalar("update"), Some(&Scalar::Int(1234)));
    // The weights are f32 and the big ones are borrowed straight from the map.
    let emb = "ema_model.transformer.text_embed.text_embed.weight";
    assert_eq!(st.meta(emb).expect("emb").dtype(), DType::F32);
    assert!(matches!(st.f32_view(emb).expect("view"), std::borrow::Cow::Borrowed(_)));
    let pt_emb = format!("{prefix}{emb}");
    assert!(matches!(pt.f32_view(&pt_emb).expect("view"), std::borrow::Cow::Borrowed(_)));
}

#[test]
fn tiny_v1_pt_and_safetensors_agree() {
    pt_matches_safetensors("fixtures/models/f5-tiny-v1", 2);
}

#[test]
fn tiny_v0_pt_and_safetensors_agree() {
    pt_matches_safetensors("fixtures/models/f5-tiny-v0", 1);
}

#[test]
fn tiny_vocos_bin_has_the_vocos_layout() {
    let ckpt = open("fixtures/models/vocos-tiny/pytorch_model.bin");
    assert_eq!(ckpt.format(), Format::TorchZip);
    let want = vocos_layout(64, 192, 2);
    assert_eq!(want.len(), 83 - 6 * 9, "83 for 8 layers, 9 fewer per missing layer");
    assert_eq!(layout_of(&ckpt, ""), want);
    for name in ckpt.names() {
        assert_eq!(ckpt.meta(name).expect("meta").dtype(), DType::F32, "{name}");
        let values = ckpt.read_f32(name).expect("read");
        assert!(values.iter().all(|v| v.is_finite()), "{name}");
    }
    // The analysis window is torch.hann_window(1024) (periodic): w[0] = 0, w[512] = 1.
    let window = ckpt.read_f32("head.istft.window").expect("window");
    assert_eq!((window[0], window[512]), (0.0, 1.0));
    assert_eq!(ckpt.scalars().count(), 0);
}

#[test]
fn malicious_reduce_is_refused_and_never_runs() {
    let relative = "fixtures/malicious/evil_reduce.pt";
    let path = repo_path(relative);
    assert!(path.exists(), "missing fixture file {relative}");
    let marker = Path::new("/tmp/f5-fixture-pwned");
    let e = Checkpoint::open(&path).expect_err("must be refused");
    let (module, name) = e.forbidden_global().expect("refused for its global");
    assert!(matches!((module, name), ("posix" | "os", "system")), "refused global {module}.{name}");
    let message = e.to_string();
    assert!(message.contains("posix.system") || message.contains("os.system"), "{message}");
    assert!(message.contains("evil_reduce.pt"), "{message}");
    assert!(!marker.exists(), "{} exists after loading", marker.display());
}

/// The full-size random models `cargo xtask fixtures --full-size` writes to `target/refmodels/`
/// (1.4 GB; never committed, so not part of the default run).
#[test]
#[ignore = "needs target/refmodels from `cargo xtask fixtures --full-size`"]
fn full_size_models_have_the_released_layouts() {
    let vocos = open("target/refmodels/vocos-full/pytorch_model.bin");
    assert_eq!(vocos.len(), 83);
    assert_eq!(layout_of(&vocos, ""), vocos_layout(512, 1536, 8));
    let dit = open("target/refmodels/f5-v1-base/model_1250000.safetensors");
    assert_eq!(dit.len(), 366);
    let mut want = dit_layout(1024, 22, 512, 4, 64).into_iter().map(|(k, v)| (format!("ema_model.{k}"), v)).collect::<Layout>();
    want.insert("initted".into(), vec![]);
    want.insert("step".into(), vec![]);
    assert_eq!(layout_of(&dit, ""), want);
    for name in dit.names().filter(|n| n.starts_with("ema_model.")) {
        assert_eq!(dit.meta(name).expect("meta").dtype(), DType::F32, "{name}");
        assert!(matches!(dit.f32_view(name).expect("view"), std::borrow::Cow::Borrowed(_)), "{name}");
    }
}

/// Evicting a tensor's mapped pages must not change what is read afterwards, from either
/// container: the kernel gives the file's bytes back on the next touch. Every tensor is read,
/// evicted (its neighbours' shared boundary pages go too), and read again bit for bit.
#[test]
fn evicted_tensors_read_back_unchanged() {
    for rel in ["fixtures/models/f5-tiny-v1/model.safetensors", "fixtures/models/f5-tiny-v1/model.pt"] {
        let mut ckpt = open(rel);
        let names: Vec<String> = ckpt.names().map(str::to_string).collect();
        let before: Vec<Vec<u32>> = names.iter().map(|n| bits(&ckpt, n)).collect();
        for name in &names {
            ckpt.evict(name);
        }
        ckpt.evict("no such tensor");
        for (name, want) in names.iter().zip(&before) {
            assert_eq!(&bits(&ckpt, name), want, "{rel}: {name} changed after eviction");
        }
    }
}

/// A valid `torch.save` archive that zip 9.1–9.8 refuse ("Invalid Central Directory header"),
/// read by Python's zipfile and by PyTorch: the zip dependency is pinned to a version that reads it.
#[test]
fn reads_a_torch_archive_that_newer_zip_releases_refuse() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/kokoro/models/kokoro-small/kokoro-small-stripped.pth");
    let ckpt = f5_torchpt::Checkpoint::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(ckpt.len(), 548);
    assert_eq!(ckpt.meta("bert.embeddings.word_embeddings.weight").unwrap().shape()[0], 178);
}
