//! Files written by real `torch.save` / `safetensors.torch.save_file` (see `tests/data/make.py`,
//! which also wrote the expected values in `expected.json` from torch itself).

use std::path::{Path, PathBuf};

use f5_torchpt::{Checkpoint, DType, Error, Format, Scalar};
use serde_json::Value as Json;

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data").join(name)
}

fn open(name: &str) -> Checkpoint {
    let path = data(name);
    assert!(path.exists(), "missing test file {} (regenerate with tests/data/make.py)", path.display());
    Checkpoint::open(&path).unwrap_or_else(|e| panic!("{e}"))
}

fn expected() -> Json {
    let text = std::fs::read_to_string(data("expected.json")).expect("expected.json");
    serde_json::from_str(&text).expect("valid json")
}

fn dtype_of(torch_name: &str) -> DType {
    match torch_name {
        "float32" => DType::F32,
        "float16" => DType::F16,
        "bfloat16" => DType::BF16,
        "float64" => DType::F64,
        "int64" => DType::I64,
        "int32" => DType::I32,
        "int16" => DType::I16,
        "int8" => DType::I8,
        "uint8" => DType::U8,
        "bool" => DType::Bool,
        other => panic!("unexpected dtype {other}"),
    }
}

fn usizes(v: &Json) -> Vec<usize> {
    v.as_array().expect("array").iter().map(|x| x.as_u64().expect("uint") as usize).collect()
}

/// Checks every tensor against torch's own description. Values compare exactly: each one is
/// representable in f32 (f16/bf16/f32 sources, small integers, and f64 values compared after
/// the same f64→f32 rounding `read_f32` documents).
fn check_against(ckpt: &Checkpoint, table: &Json, prefix: &str, check_layout: bool) {
    let table = table.as_object().expect("object");
    let names: Vec<String> = ckpt.names().filter_map(|n| n.strip_prefix(prefix)).map(str::to_string).collect();
    let mut want: Vec<String> = table.keys().cloned().collect();
    want.sort();
    assert_eq!(names, want, "tensor names");
    for (name, spec) in table {
        let full = format!("{prefix}{name}");
        let info = ckpt.meta(&full).expect("meta");
        assert_eq!(info.dtype(), dtype_of(spec["dtype"].as_str().expect("dtype")), "{full}");
        assert_eq!(info.shape(), usizes(&spec["shape"]), "{full} shape");
        if check_layout {
            assert_eq!(info.strides(), usizes(&spec["strides"]), "{full} strides");
            assert_eq!(info.storage_offset() as u64, spec["storage_offset"].as_u64().expect("offset"), "{full} offset");
        }
        let want: Vec<f32> = spec["values"].as_array().expect("values").iter().map(|v| v.as_f64().expect("number") as f32).collect();
        let got = ckpt.read_f32(&full).expect("read");
        assert_eq!(
            got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            want.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            "{full} values"
        );
        assert_eq!(&ckpt.f32_view(&full).expect("view")[..], &got[..], "{full} view");
    }
}

#[test]
fn protocol_2_default_save_matches_torch() {
    let ckpt = open("basic_p2.pt");
    assert_eq!(ckpt.format(), Format::TorchZip);
    check_against(&ckpt, &expected()["basic"], "", true);
}

#[test]
fn protocol_4_save_matches_torch() {
    check_against(&open("basic_p4.pt"), &expected()["basic"], "", true);
}

#[test]
fn non_tensor_leaves_become_scalars() {
    for file in ["basic_p2.pt", "basic_p4.pt"] {
        let ckpt = open(file);
        let scalars: Vec<(&str, &Scalar)> = ckpt.scalars().collect();
        assert_eq!(
            scalars,
            vec![
                ("flag", &Scalar::Bool(true)),
                ("lr", &Scalar::Float(1e-4)),
                ("name", &Scalar::Str("tiny".into())),
                ("step", &Scalar::Int(1_250_000)),
            ],
            "{file}: `nothing` (None) is skipped"
        );
    }
}

#[test]
fn views_share_one_storage_record() {
    let ckpt = open("basic_p2.pt");
    let base = ckpt.meta("model.f32").expect("f32").storage_range();
    for view in ["model.wt", "model.row1"] {
        assert_eq!(ckpt.meta(view).expect("view").storage_range(), base, "{view}");
    }
    assert!(!ckpt.meta("model.wt").expect("wt").is_contiguous());
    assert!(ckpt.meta("model.row1").expect("row1").is_contiguous());
    assert!(ckpt.raw_bytes("model.permuted").is_err());
}

#[test]
fn contiguous_f32_is_borrowed_from_the_map() {
    let ckpt = open("basic_p2.pt");
    let view = ckpt.f32_view("model.f32").expect("view");
    assert!(matches!(view, std::borrow::Cow::Borrowed(_)), "torch aligns records to 64 bytes");
    let st = open("basic.safetensors");
    let view = st.f32_view("model.f32").expect("view");
    assert!(matches!(view, std::borrow::Cow::Borrowed(_)), "safetensors pads its header to 8");
}

#[test]
fn safetensors_and_torch_zip_agree_bit_for_bit() {
    let pt = open("basic_p2.pt");
    let st = open("basic.safetensors");
    assert_eq!(st.format(), Format::Safetensors);
    assert_eq!(pt.names().collect::<Vec<_>>(), st.names().collect::<Vec<_>>());
    for name in st.names() {
        let (a, b) = (pt.meta(name).expect("pt"), st.meta(name).expect("st"));
        assert_eq!((a.dtype(), a.shape()), (b.dtype(), b.shape()), "{name}");
        let pt_bits: Vec<u32> = pt.read_f32(name).expect("pt").iter().map(|v| v.to_bits()).collect();
        let st_bits: Vec<u32> = st.read_f32(name).expect("st").iter().map(|v| v.to_bits()).collect();
        assert_eq!(pt_bits, st_bits, "{name}");
        if a.is_contiguous() {
            assert_eq!(pt.raw_bytes(name).expect("pt"), st.raw_bytes(name).expect("st"), "{name}");
        }
    }
    // safetensors stores the views made contiguous: same values, row-major layout.
    check_against(&st, &expected()["basic"], "", false);
}

#[test]
fn parameters_are_rebuilt_as_tensors() {
    check_against(&open("params.pt"), &expected()["params"], "", true);
}

fn refusal(name: &str) -> Error {
    match Checkpoint::open(data(name)) {
        Ok(_) => panic!("{name} must be refused"),
        Err(e) => e,
    }
}

#[test]
fn whole_module_pickle_is_refused_naming_the_class() {
    let e = refusal("module.pt");
    assert_eq!(e.forbidden_global(), Some(("torch.nn.modules.linear", "Linear")));
    assert!(e.to_string().contains("module.pt"), "{e}");
}

#[test]
fn os_system_payload_is_refused_and_never_runs() {
    let marker = Path::new("/tmp/f5-torchpt-pwned");
    let e = refusal("evil_os_system.pt");
    assert_eq!(e.forbidden_global(), Some(("posix", "system")));
    assert!(e.to_string().contains("posix.system"), "{e}");
    assert!(!marker.exists(), "{} exists", marker.display());
}

#[test]
fn eval_payload_is_refused() {
    let e = refusal("evil_eval.pt");
    // Protocol 2 spells the builtins module `__builtin__`.
    assert_eq!(e.forbidden_global(), Some(("__builtin__", "eval")));
    assert!(!Path::new("/tmp/f5-torchpt-pwned").exists());
}

#[test]
fn legacy_serialization_is_refused_clearly() {
    let e = refusal("legacy.pt");
    assert!(matches!(e, Error::LegacyTorch { .. }), "{e}");
    assert!(e.to_string().contains("legacy"), "{e}");
}

#[test]
fn truncated_real_archive_is_refused() {
    let bytes = std::fs::read(data("basic_p2.pt")).expect("read");
    for cut in [0, 3, 4, 30, 100, bytes.len() / 2, bytes.len() - 22, bytes.len() - 1] {
        assert!(Checkpoint::from_bytes("cut.pt", bytes[..cut].to_vec()).is_err(), "prefix of {cut} bytes");
    }
}
