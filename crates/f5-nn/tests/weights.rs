//! The loader's naming rules, weight-norm folding and refusals, on small safetensors files
//! written here; and the layers against the kit ops they compose.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use f5_gpukit::{Backend, Conv1dSpec, ConvTranspose1dSpec, CpuBackend};
use f5_nn::{BiLstm, Conv1d, ConvTranspose1d, NnError, Weights};
use safetensors::tensor::{Dtype, TensorView};

fn write(dir: &Path, name: &str, tensors: &[(&str, Vec<usize>, Vec<f32>)]) -> PathBuf {
    let bytes: Vec<(String, Vec<usize>, Vec<u8>)> =
        tensors.iter().map(|(n, s, d)| (n.to_string(), s.clone(), d.iter().flat_map(|v| v.to_le_bytes()).collect())).collect();
    let views: BTreeMap<String, TensorView<'_>> =
        bytes.iter().map(|(n, s, b)| (n.clone(), TensorView::new(Dtype::F32, s.clone(), b).expect("view"))).collect();
    let path = dir.join(name);
    safetensors::serialize_to_file(&views, None, &path).expect("write safetensors");
    path
}

fn seq(n: usize, scale: f32) -> Vec<f32> {
    (0..n).map(|i| ((i * 37 % 11) as f32 - 5.0) * scale).collect()
}

/// `g·v/‖v‖` per dim-0 slice, in f64.
fn folded(g: &[f32], v: &[f32]) -> Vec<f32> {
    let per = v.len() / g.len();
    v.chunks(per)
        .zip(g)
        .flat_map(|(s, &gain)| {
            let norm = s.iter().map(|&x| (x as f64).powi(2)).sum::<f64>().sqrt();
            s.iter().map(move |&x| (x as f64 * gain as f64 / norm) as f32).collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn three_layouts_of_one_weight_normed_conv_load_identically() {
    let dir = tempfile::tempdir().unwrap();
    let (g, v, b) = (vec![0.5, -2.0, 3.0], seq(3 * 2 * 5, 0.1), vec![0.1, 0.2, 0.3]);
    let release = write(
        dir.path(),
        "release.safetensors",
        &[
            ("decoder.module.conv.weight_g", vec![3, 1, 1], g.clone()),
            ("decoder.module.conv.weight_v", vec![3, 2, 5], v.clone()),
            ("decoder.module.conv.bias", vec![3], b.clone()),
        ],
    );
    let stripped = write(
        dir.path(),
        "stripped.safetensors",
        &[
            ("decoder.conv.weight_g", vec![3, 1, 1], g.clone()),
            ("decoder.conv.weight_v", vec![3, 2, 5], v.clone()),
            ("decoder.conv.bias", vec![3], b.clone()),
        ],
    );
    let param = write(
        dir.path(),
        "param.safetensors",
        &[
            ("decoder.conv.parametrizations.weight.original0", vec![3, 1, 1], g.clone()),
            ("decoder.conv.parametrizations.weight.original1", vec![3, 2, 5], v.clone()),
            ("decoder.conv.bias", vec![3], b.clone()),
        ],
    );
    let want = folded(&g, &v);
    for path in [release, stripped, param] {
        let mut w = Weights::open(&path).unwrap();
        assert!(w.contains("decoder.conv.weight_g"), "{path:?}: {:?}", w.names());
        let got = w.scope("decoder").host_normed("conv.weight", &[3, 2, 5]).unwrap();
        assert_eq!(got, want, "{path:?}");
        assert_eq!(w.scope("decoder.conv").host("bias", &[3]).unwrap(), b);
    }
}

#[test]
fn conv_transpose_weight_norm_is_over_every_dim_but_the_input_channels() {
    // ConvTranspose1d weights are [in, out/groups, k]; PyTorch's weight_norm (dim 0) keeps one
    // gain per input channel: weight_g is [in, 1, 1]. A norm per output channel would differ.
    let dir = tempfile::tempdir().unwrap();
    let (g, v) = (vec![1.5, 0.25], seq(2 * 3 * 4, 0.2));
    let path =
        write(dir.path(), "ct.safetensors", &[("ups.weight_g", vec![2, 1, 1], g.clone()), ("ups.weight_v", vec![2, 3, 4], v.clone())]);
    let mut w = Weights::open(&path).unwrap();
    let kit = CpuBackend::new();
    let spec = ConvTranspose1dSpec::new(1, 0, 2, 3, 4, 2);
    let layer = ConvTranspose1d::load(&mut w.root(), &kit, "ups", spec, false).unwrap();
    let got = kit.download(&layer.weight).unwrap();
    assert_eq!(got, folded(&g, &v));
    // The wrong axis (per output channel) gives different weights.
    let mut per_out = v.clone();
    for co in 0..3 {
        let norm: f64 =
            (0..2).flat_map(|ci| (0..4).map(move |k| (ci, k))).map(|(ci, k)| (v[(ci * 3 + co) * 4 + k] as f64).powi(2)).sum::<f64>().sqrt();
        for ci in 0..2 {
            for k in 0..4 {
                per_out[(ci * 3 + co) * 4 + k] = (v[(ci * 3 + co) * 4 + k] as f64 / norm) as f32;
            }
        }
    }
    assert_ne!(got, per_out);
}

#[test]
fn optional_missing_misshaped_and_ambiguous_tensors() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "a.safetensors", &[("norm.weight", vec![4], seq(4, 1.0)), ("lin.weight", vec![2, 3], seq(6, 1.0))]);
    let mut w = Weights::open(&path).unwrap();
    // An affine the model never trained may be absent…
    assert!(w.root().host_optional("norm.bias", &[4]).unwrap().is_none());
    // …but present with the wrong shape it is an error naming the tensor and both shapes.
    match w.root().host_optional("norm.weight", &[5]) {
        Err(NnError::Shape { tensor, detail, .. }) => {
            assert_eq!(tensor, "norm.weight");
            assert!(detail.contains("[4]") && detail.contains("[5]"), "{detail}");
        }
        other => panic!("expected a shape error, got {other:?}"),
    }
    match w.root().host("lin.bias", &[2]) {
        Err(NnError::Missing { tensor, .. }) => assert_eq!(tensor, "lin.bias"),
        other => panic!("expected a missing tensor, got {other:?}"),
    }
    // A weight-normed name with only one half is named.
    let path = write(dir.path(), "half.safetensors", &[("c.weight_g", vec![2, 1, 1], vec![1.0, 1.0])]);
    match Weights::open(&path).unwrap().root().host_normed("c.weight", &[2, 1, 3]) {
        Err(NnError::Missing { tensor, .. }) => assert_eq!(tensor, "c.weight_v"),
        other => panic!("expected the missing weight_v, got {other:?}"),
    }
    // Two names that mean the same tensor are refused rather than one silently chosen.
    let path = write(dir.path(), "dup.safetensors", &[("m.module.w", vec![1], vec![1.0]), ("m.w", vec![1], vec![2.0])]);
    assert!(matches!(Weights::open(&path), Err(NnError::Ambiguous { .. })));
}

#[test]
fn a_zero_direction_folds_to_zero_not_nan() {
    // int8-derived checkpoints carry channels quantised to zero: ‖v‖ = 0 there.
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        dir.path(),
        "z.safetensors",
        &[("c.weight_g", vec![2, 1, 1], vec![0.0, 2.0]), ("c.weight_v", vec![2, 1, 2], vec![0.0, 0.0, 3.0, 4.0])],
    );
    let got = Weights::open(&path).unwrap().root().host_normed("c.weight", &[2, 1, 2]).unwrap();
    assert_eq!(got, vec![0.0, 0.0, 1.2, 1.6]);
}

#[test]
fn conv_layer_runs_the_folded_weight() {
    let dir = tempfile::tempdir().unwrap();
    let (g, v, b) = (vec![0.7, 1.3], seq(2 * 3 * 3, 0.3), vec![0.5, -0.5]);
    let path = write(
        dir.path(),
        "c.safetensors",
        &[("c.weight_g", vec![2, 1, 1], g.clone()), ("c.weight_v", vec![2, 3, 3], v.clone()), ("c.bias", vec![2], b.clone())],
    );
    let kit = CpuBackend::new();
    let mut w = Weights::open(&path).unwrap();
    let conv = Conv1d::load(&mut w.root(), &kit, "c", Conv1dSpec::new(1, 0, 3, 2, 3).pad(1).dilation(1), true).unwrap();
    let n = 5;
    let x = seq(n * 3, 0.5);
    let mut y = kit.alloc(conv.n_out(n) * 2).unwrap();
    assert_eq!(conv.apply(&kit, &kit.upload(&x).unwrap(), 1, n, &mut y).unwrap(), n);
    let wf = folded(&g, &v);
    let y = kit.download(&y).unwrap();
    for t in 0..n {
        for co in 0..2 {
            let mut acc = b[co] as f64;
            for ci in 0..3 {
                for k in 0..3 {
                    let s = t as isize + k as isize - 1;
                    if (0..n as isize).contains(&s) {
                        acc += wf[(co * 3 + ci) * 3 + k] as f64 * x[s as usize * 3 + ci] as f64;
                    }
                }
            }
            assert!((y[t * 2 + co] as f64 - acc).abs() < 1e-5, "t {t} co {co}");
        }
    }
}

#[test]
fn bilstm_on_a_padded_batch_equals_each_item_alone() {
    let dir = tempfile::tempdir().unwrap();
    let (inp, h) = (5, 4);
    let mut tensors = Vec::new();
    for sfx in ["", "_reverse"] {
        tensors.push((format!("lstm.weight_ih_l0{sfx}"), vec![4 * h, inp], seq(4 * h * inp, 0.07)));
        tensors.push((format!("lstm.weight_hh_l0{sfx}"), vec![4 * h, h], seq(4 * h * h, 0.05)));
        tensors.push((format!("lstm.bias_ih_l0{sfx}"), vec![4 * h], seq(4 * h, 0.02)));
        tensors.push((format!("lstm.bias_hh_l0{sfx}"), vec![4 * h], seq(4 * h, -0.03)));
    }
    let refs: Vec<(&str, Vec<usize>, Vec<f32>)> = tensors.iter().map(|(n, s, d)| (n.as_str(), s.clone(), d.clone())).collect();
    let path = write(dir.path(), "l.safetensors", &refs);
    let kit = CpuBackend::new();
    let lstm = BiLstm::load(&mut Weights::open(&path).unwrap().root(), &kit, "lstm", inp, h).unwrap();
    // Two items of lengths 7 and 3 padded to 7 with garbage past the short one's end.
    let n = 7;
    let mut x = seq(2 * n * inp, 0.4);
    x[(n + 3) * inp..].iter_mut().for_each(|v| *v = 9.0);
    let mut out = kit.alloc(2 * n * 2 * h).unwrap();
    lstm.apply(&kit, &kit.upload(&x).unwrap(), 2, n, &[7, 3], &mut out).unwrap();
    let batched = kit.download(&out).unwrap();
    for (b, len) in [(0usize, 7usize), (1, 3)] {
        let item = &x[b * n * inp..(b * n + len) * inp];
        let mut alone = kit.alloc(len * 2 * h).unwrap();
        lstm.apply(&kit, &kit.upload(item).unwrap(), 1, len, &[len], &mut alone).unwrap();
        let alone = kit.download(&alone).unwrap();
        assert_eq!(&batched[b * n * 2 * h..(b * n + len) * 2 * h], &alone[..], "item {b}: padding changed the result");
        assert!(batched[(b * n + len) * 2 * h..(b + 1) * n * 2 * h].iter().all(|&v| v == 0.0), "item {b}: positions past its length are 0");
    }
}
