//! The writer (`save`, `save_state_dicts`, `save_tensor`): what it writes reads back through this
//! crate's reader bit for bit, and — when `F5_REF_PYTHON` names a Python with torch — through
//! `torch.load(weights_only=True)` with the same values.

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::process::Command;

use f5_torchpt::{save, save_state_dicts, save_tensor, Checkpoint, DType, Error, F32Tensor, Format, SaveValue};

/// A scratch folder per test, removed at the end of the test that made it.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("f5-torchpt-write-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("scratch dir");
        Scratch(dir)
    }
    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Distinct, non-trivial values (negative, fractional, a subnormal, -0.0) so a swapped,
/// shifted or byte-swapped record cannot match.
fn values(n: usize, seed: f32) -> Vec<f32> {
    (0..n)
        .map(|i| match i % 7 {
            5 => f32::from_bits(0x0000_0123), // subnormal
            6 => -0.0,
            _ => ((i as f32 + seed) * 0.618_034).sin() * (1.0 + i as f32 / 3.0),
        })
        .collect()
}

/// (flat name, shape, values) of a two-level checkpoint shaped like Kokoro's release layout,
/// with a 0-d tensor, an empty one and a rank-4 one.
fn sample() -> Vec<(String, String, Vec<usize>, Vec<f32>)> {
    let shapes: [(&str, &str, Vec<usize>); 7] = [
        ("bert", "module.embeddings.weight", vec![17, 8]),
        ("bert", "module.pooler.bias", vec![8]),
        ("decoder", "module.generator.conv_post.weight_g", vec![22, 1, 1]),
        ("decoder", "module.generator.conv_post.weight_v", vec![22, 128, 7]),
        ("decoder", "module.scale", vec![]),
        ("decoder", "module.empty", vec![0, 3]),
        ("predictor", "module.F0.0.conv1.weight", vec![2, 3, 4, 5]),
    ];
    shapes
        .into_iter()
        .enumerate()
        .map(|(i, (module, key, shape))| {
            let n = shape.iter().product();
            (module.to_string(), key.to_string(), shape, values(n, i as f32))
        })
        .collect()
}

fn write_sample(path: &Path, sample: &[(String, String, Vec<usize>, Vec<f32>)]) {
    let mut dicts: Vec<(String, Vec<(String, F32Tensor<'_>)>)> = Vec::new();
    for (module, key, shape, data) in sample {
        if dicts.last().map(|(m, _)| m != module).unwrap_or(true) {
            dicts.push((module.clone(), Vec::new()));
        }
        if let Some((_, sd)) = dicts.last_mut() {
            sd.push((key.clone(), F32Tensor::new(shape.clone(), data)));
        }
    }
    save_state_dicts(path, dicts).unwrap_or_else(|e| panic!("{e}"));
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn state_dicts_read_back_bit_for_bit() {
    let scratch = Scratch::new("dicts");
    let path = scratch.path("model.pth");
    let sample = sample();
    write_sample(&path, &sample);
    let ckpt = Checkpoint::open(&path).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(ckpt.format(), Format::TorchZip);
    assert_eq!(ckpt.len(), sample.len());
    for (module, key, shape, data) in &sample {
        let name = format!("{module}.{key}");
        let info = ckpt.meta(&name).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(info.dtype(), DType::F32, "{name}");
        assert_eq!(info.shape(), &shape[..], "{name}");
        let read = ckpt.read_f32(&name).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(bits(&read), bits(data), "{name}");
        if !data.is_empty() {
            // 64-byte aligned records: the reader borrows straight from the map
            let view = ckpt.f32_view(&name).unwrap_or_else(|e| panic!("{e}"));
            assert!(matches!(view, Cow::Borrowed(_)), "{name}: record not aligned");
        }
    }
    // nothing but the final file is left behind
    let names: Vec<_> = std::fs::read_dir(&scratch.0).expect("dir").filter_map(|e| e.ok()).map(|e| e.file_name()).collect();
    assert_eq!(names, vec![std::ffi::OsString::from("model.pth")]);
}

#[test]
fn a_bare_tensor_reads_back_under_the_empty_name() {
    let scratch = Scratch::new("bare");
    let path = scratch.path("af_test.pt");
    let data = values(510 * 256, 3.0);
    save_tensor(&path, F32Tensor::new([510, 1, 256], &data)).unwrap_or_else(|e| panic!("{e}"));
    let ckpt = Checkpoint::open(&path).unwrap_or_else(|e| panic!("{e}"));
    let names: Vec<&str> = ckpt.names().collect();
    assert_eq!(names.len(), 1);
    let name = names[0].to_string();
    assert_eq!(ckpt.meta(&name).unwrap_or_else(|e| panic!("{e}")).shape(), &[510, 1, 256]);
    assert_eq!(bits(&ckpt.read_f32(&name).unwrap_or_else(|e| panic!("{e}"))), bits(&data));
}

/// More than 256 memo entries (LONG_BINPUT/LONG_BINGET) and more than one SETITEMS batch.
#[test]
fn many_tensors_use_long_memo_indices_and_batches() {
    let scratch = Scratch::new("many");
    let path = scratch.path("many.pth");
    let data: Vec<Vec<f32>> = (0..1203).map(|i| values(1 + i % 5, i as f32)).collect();
    let sd: Vec<(String, SaveValue<'_>)> =
        data.iter().enumerate().map(|(i, d)| (format!("t{i}"), SaveValue::Tensor(F32Tensor::new([d.len()], d)))).collect();
    save(&path, &SaveValue::Dict(sd)).unwrap_or_else(|e| panic!("{e}"));
    let ckpt = Checkpoint::open(&path).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(ckpt.len(), data.len());
    for (i, d) in data.iter().enumerate() {
        assert_eq!(bits(&ckpt.read_f32(&format!("t{i}")).unwrap_or_else(|e| panic!("{e}"))), bits(d), "t{i}");
    }
}

#[test]
fn a_shape_that_does_not_match_the_data_is_refused_and_nothing_is_written() {
    let scratch = Scratch::new("bad");
    let path = scratch.path("bad.pt");
    let data = vec![1.0f32; 5];
    let err = save_tensor(&path, F32Tensor::new([2, 3], &data)).expect_err("6 elements declared, 5 given");
    assert!(matches!(err, Error::Write { .. }), "{err}");
    assert!(err.to_string().contains("[2, 3]"), "{err}");
    assert!(!path.exists());
}

/// torch itself reads what we write, with its safe (`weights_only`) unpickler, to the same
/// values. Needs `F5_REF_PYTHON` (a Python with torch); skipped with a message otherwise.
#[test]
fn torch_load_reads_it() {
    let Ok(python) = std::env::var("F5_REF_PYTHON") else {
        eprintln!("skipped: set F5_REF_PYTHON to a Python with torch to check torch.load reads the writer's files");
        return;
    };
    let scratch = Scratch::new("torch");
    let path = scratch.path("model.pth");
    let sample = sample();
    write_sample(&path, &sample);
    let voice_path = scratch.path("voice.pt");
    let voice = values(510 * 256, 9.0);
    save_tensor(&voice_path, F32Tensor::new([510, 1, 256], &voice)).unwrap_or_else(|e| panic!("{e}"));
    let script = r#"
import json, sys, torch
def flat(prefix, v, out):
    if isinstance(v, dict):
        for k, x in v.items():
            flat(f"{prefix}{k}.", x, out)
    else:
        out[prefix[:-1]] = {"dtype": str(v.dtype), "shape": list(v.shape), "values": v.flatten().tolist(),
                            "contiguous": v.is_contiguous()}
    return out
ckpt = torch.load(sys.argv[1], map_location="cpu", weights_only=True)
assert type(ckpt) is dict and all(type(v) is dict for v in ckpt.values()), type(ckpt)
voice = torch.load(sys.argv[2], map_location="cpu", weights_only=True)
mapped = torch.load(sys.argv[1], map_location="cpu", weights_only=True, mmap=True)
print(json.dumps({"ckpt": flat("", ckpt, {}), "voice": flat("", {"v": voice}, {})["v"],
                  "keys": [[m, list(sd)] for m, sd in ckpt.items()], "mmap": len(flat("", mapped, {}))}))
"#;
    let out = Command::new(&python).arg("-c").arg(script).arg(&path).arg(&voice_path).output().expect("run python");
    assert!(out.status.success(), "torch.load failed:\n{}", String::from_utf8_lossy(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let f32s = |v: &serde_json::Value| -> Vec<u32> {
        v.as_array().expect("values").iter().map(|x| (x.as_f64().expect("number") as f32).to_bits()).collect()
    };
    for (module, key, shape, data) in &sample {
        let got = &json["ckpt"][format!("{module}.{key}")];
        assert_eq!(got["dtype"], "torch.float32", "{module}.{key}");
        assert_eq!(got["contiguous"], true, "{module}.{key}");
        let got_shape: Vec<usize> = serde_json::from_value(got["shape"].clone()).expect("shape");
        assert_eq!(&got_shape, shape, "{module}.{key}");
        assert_eq!(f32s(&got["values"]), bits(data), "{module}.{key}");
    }
    // dict order is insertion order, as the writer was given it
    let keys: Vec<(String, Vec<String>)> = serde_json::from_value(json["keys"].clone()).expect("keys");
    let mut expected: Vec<(String, Vec<String>)> = Vec::new();
    for (module, key, _, _) in &sample {
        match expected.last_mut() {
            Some((m, ks)) if m == module => ks.push(key.clone()),
            _ => expected.push((module.clone(), vec![key.clone()])),
        }
    }
    assert_eq!(keys, expected);
    assert_eq!(json["mmap"], sample.len());
    assert_eq!(json["voice"]["shape"], serde_json::json!([510, 1, 256]));
    assert_eq!(f32s(&json["voice"]["values"]), bits(&voice));
}
