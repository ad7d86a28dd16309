//! Container-level tests on archives and safetensors files built in memory.

use std::io::{Cursor, Write};

use proptest::prelude::*;
use zip::write::SimpleFileOptions;
use zip::{CompressionMethod, ZipWriter};

use crate::pickle::op;
use crate::pickle::tests::P;
use crate::*;

/// Writes a torch-style archive: stored entries, 64-byte aligned, under `prefix/`.
fn torch_zip(prefix: &str, pickle: &[u8], storages: &[(&str, Vec<u8>)]) -> Vec<u8> {
    let mut zip = ZipWriter::new(Cursor::new(Vec::new()));
    let options = SimpleFileOptions::default().compression_method(CompressionMethod::Stored).with_alignment(64);
    zip.start_file(format!("{prefix}/data.pkl"), options).expect("start");
    zip.write_all(pickle).expect("write");
    zip.start_file(format!("{prefix}/byteorder"), options).expect("start");
    zip.write_all(b"little").expect("write");
    for (key, bytes) in storages {
        zip.start_file(format!("{prefix}/data/{key}"), options).expect("start");
        zip.write_all(bytes).expect("write");
    }
    zip.finish().expect("finish").into_inner()
}

fn f32_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// `{"model": OrderedDict(w f32[2,3], wt = w.t() view, b bf16[3], tail = w.view(-1)[4:6]),
///   "ema": {"inner": {"x": f32[] on storage 0 offset 5}}, "step": 10000, "lr": 0.5}`
fn sample_pickle() -> Vec<u8> {
    P::proto2()
        .op(op::EMPTY_DICT)
        .op(op::MARK)
        .s("model")
        .ordered_dict()
        .op(op::MARK)
        .s("w")
        .tensor("FloatStorage", "0", 6, 0, &[2, 3], &[3, 1])
        .s("wt")
        .tensor("FloatStorage", "0", 6, 0, &[3, 2], &[1, 3])
        .s("b")
        .tensor("BFloat16Storage", "1", 3, 0, &[3], &[1])
        .s("tail")
        .tensor("FloatStorage", "0", 6, 4, &[2], &[1])
        .op(op::SETITEMS)
        .s("ema")
        .op(op::EMPTY_DICT)
        .s("inner")
        .op(op::EMPTY_DICT)
        .s("x")
        .tensor("FloatStorage", "0", 6, 5, &[], &[])
        .op(op::SETITEM)
        .op(op::SETITEM)
        .s("step")
        .int(10000)
        .s("lr")
        .op(op::BINFLOAT)
        .raw(&0.5f64.to_be_bytes())
        .op(op::SETITEMS)
        .stop()
}

fn sample_zip() -> Vec<u8> {
    let w = f32_bytes(&[0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
    let b: Vec<u8> = [1.5f32, -2.0, 0.25].iter().flat_map(|v| half::bf16::from_f32(*v).to_le_bytes()).collect();
    torch_zip("ckpt", &sample_pickle(), &[("0", w), ("1", b)])
}

fn open_bytes(bytes: Vec<u8>) -> Result<Checkpoint> {
    Checkpoint::from_bytes("test.pt", bytes)
}

#[test]
fn torch_zip_table_and_values() {
    let ckpt = open_bytes(sample_zip()).expect("valid archive");
    assert_eq!(ckpt.format(), Format::TorchZip);
    let names: Vec<&str> = ckpt.names().collect();
    assert_eq!(names, vec!["ema.inner.x", "model.b", "model.tail", "model.w", "model.wt"]);
    assert_eq!(ckpt.read_f32("model.w").expect("w"), vec![0., 1., 2., 3., 4., 5.]);
    // w.t(): row-major gather of the strided view.
    assert_eq!(ckpt.read_f32("model.wt").expect("wt"), vec![0., 3., 1., 4., 2., 5.]);
    assert_eq!(ckpt.read_f32("model.tail").expect("tail"), vec![4., 5.]);
    assert_eq!(ckpt.read_f32("ema.inner.x").expect("x"), vec![5.]);
    // bf16 values chosen to be exact.
    assert_eq!(ckpt.read_f32("model.b").expect("b"), vec![1.5, -2.0, 0.25]);
    let wt = ckpt.meta("model.wt").expect("meta");
    assert_eq!(wt.shape(), &[3, 2]);
    assert_eq!(wt.strides(), &[1, 3]);
    assert!(!wt.is_contiguous());
    assert_eq!(wt.byte_range(), None);
    // Shared storage: same bytes in the file.
    assert_eq!(ckpt.meta("model.w").expect("w").storage_range(), wt.storage_range());
    assert_eq!(ckpt.meta("model.tail").expect("t").storage_offset(), 4);
    assert_eq!(ckpt.scalar("step"), Some(&Scalar::Int(10000)));
    assert_eq!(ckpt.scalar("lr"), Some(&Scalar::Float(0.5)));
    assert_eq!(ckpt.scalars().count(), 2);
}

#[test]
fn raw_bytes_and_views() {
    let ckpt = open_bytes(sample_zip()).expect("valid archive");
    assert_eq!(ckpt.raw_bytes("model.tail").expect("contiguous"), &f32_bytes(&[4.0, 5.0])[..]);
    let e = ckpt.raw_bytes("model.wt").expect_err("strided");
    assert!(e.to_string().contains("model.wt"), "{e}");
    assert!(e.to_string().contains("not contiguous"), "{e}");
    assert_eq!(&ckpt.f32_view("model.wt").expect("owned")[..], &[0., 3., 1., 4., 2., 5.]);
    let e = ckpt.read_f32("nope").expect_err("missing");
    assert!(matches!(e, Error::NotFound { .. }));
    assert!(e.to_string().contains("test.pt") && e.to_string().contains("`nope`"));
}

#[test]
fn f32_view_borrows_from_the_map() {
    let dir = std::env::temp_dir().join(format!("f5-torchpt-unit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let path = dir.join("sample.pt");
    std::fs::write(&path, sample_zip()).expect("write");
    let ckpt = Checkpoint::open(&path).expect("open");
    let view = ckpt.f32_view("model.w").expect("view");
    assert!(matches!(view, std::borrow::Cow::Borrowed(_)));
    assert_eq!(&view[..], &[0., 1., 2., 3., 4., 5.]);
    drop(ckpt);
    std::fs::remove_dir_all(&dir).expect("cleanup");
}

#[test]
fn any_archive_prefix_is_accepted() {
    let w = f32_bytes(&[7.0]);
    let pickle = P::proto2().tensor("FloatStorage", "k", 1, 0, &[1], &[1]).stop();
    for prefix in ["archive", "model_1250000", "a/b"] {
        let ckpt = open_bytes(torch_zip(prefix, &pickle, &[("k", w.clone())])).expect("valid");
        // A bare tensor at the root is named "".
        assert_eq!(ckpt.read_f32("").expect("root tensor"), vec![7.0]);
    }
}

#[test]
fn forbidden_global_in_archive_names_the_global_and_the_file() {
    let evil = P::proto2().global("posix", "system").s("touch /tmp/f5-torchpt-never").op(op::TUPLE1).op(op::REDUCE).stop();
    let e = open_bytes(torch_zip("evil", &evil, &[])).expect_err("refused");
    assert_eq!(e.forbidden_global(), Some(("posix", "system")));
    let message = e.to_string();
    assert!(message.contains("posix.system"), "{message}");
    assert!(message.contains("test.pt"), "{message}");
    assert!(!std::path::Path::new("/tmp/f5-torchpt-never").exists());
}

#[test]
fn view_past_its_storage_is_refused() {
    // Storage declares 6 elements; view [2,3] at offset 1 needs element 6.
    let pickle = P::proto2().tensor("FloatStorage", "0", 6, 1, &[2, 3], &[3, 1]).stop();
    let e = open_bytes(torch_zip("x", &pickle, &[("0", f32_bytes(&[0.0; 6]))])).expect_err("out of range");
    assert!(matches!(&e, Error::Tensor { tensor, .. } if tensor.is_empty()), "{e}");
    assert!(e.to_string().contains("reaches past its storage"), "{e}");
    // Huge stride that would overflow.
    let pickle = P::proto2().tensor("FloatStorage", "0", 6, 0, &[2, 2], &[i32::MAX, 1]).stop();
    assert!(open_bytes(torch_zip("x", &pickle, &[("0", f32_bytes(&[0.0; 6]))])).is_err());
}

#[test]
fn storage_larger_than_its_record_is_refused() {
    // Declares 100 floats but the record holds 6.
    let pickle = P::proto2().tensor("FloatStorage", "0", 100, 0, &[100], &[1]).stop();
    let e = open_bytes(torch_zip("x", &pickle, &[("0", f32_bytes(&[0.0; 6]))])).expect_err("record too short");
    assert!(e.to_string().contains("declares 100"), "{e}");
}

#[test]
fn missing_storage_record_and_missing_pickle() {
    let pickle = P::proto2().tensor("FloatStorage", "3", 1, 0, &[1], &[1]).stop();
    let e = open_bytes(torch_zip("x", &pickle, &[])).expect_err("no data/3");
    assert!(e.to_string().contains("x/data/3"), "{e}");

    let mut zip = ZipWriter::new(Cursor::new(Vec::new()));
    zip.start_file("x/other", SimpleFileOptions::default()).expect("start");
    zip.write_all(b"hello").expect("write");
    let bytes = zip.finish().expect("finish").into_inner();
    let e = open_bytes(bytes).expect_err("no data.pkl");
    assert!(matches!(e, Error::Zip { .. }), "{e}");
    assert!(e.to_string().contains("data.pkl"), "{e}");
}

#[test]
fn names_that_collide_after_flattening_are_refused() {
    // {"a.b": t, "a": {"b": t}}
    let pickle = P::proto2()
        .op(op::EMPTY_DICT)
        .s("a.b")
        .tensor("FloatStorage", "0", 1, 0, &[1], &[1])
        .op(op::SETITEM)
        .s("a")
        .op(op::EMPTY_DICT)
        .s("b")
        .tensor("FloatStorage", "0", 1, 0, &[1], &[1])
        .op(op::SETITEM)
        .op(op::SETITEM)
        .stop();
    let e = open_bytes(torch_zip("x", &pickle, &[("0", f32_bytes(&[1.0]))])).expect_err("clash");
    assert!(e.to_string().contains("`a.b`"), "{e}");
}

#[test]
fn shared_references_cannot_blow_up_flattening() {
    // t0 = (tensor,), t(n+1) = (t(n), t(n)) for 40 levels: 41 values, 2^40 paths.
    let mut p = P::proto2().tensor("FloatStorage", "0", 1, 0, &[1], &[1]).op(op::TUPLE1).op(op::BINPUT).raw(&[0]);
    for _ in 0..40 {
        p = p.op(op::BINGET).raw(&[0]).op(op::TUPLE2).op(op::BINPUT).raw(&[0]);
    }
    let e = open_bytes(torch_zip("x", &p.stop(), &[("0", f32_bytes(&[1.0]))])).expect_err("too many paths");
    assert!(e.to_string().contains("too many times"), "{e}");
}

#[test]
fn big_endian_archives_are_refused() {
    let mut zip = ZipWriter::new(Cursor::new(Vec::new()));
    let options = SimpleFileOptions::default().compression_method(CompressionMethod::Stored);
    zip.start_file("x/data.pkl", options).expect("start");
    zip.write_all(&P::proto2().op(op::NONE).stop()).expect("write");
    zip.start_file("x/byteorder", options).expect("start");
    zip.write_all(b"big").expect("write");
    let e = open_bytes(zip.finish().expect("finish").into_inner()).expect_err("big endian");
    assert!(e.to_string().contains("byte order"), "{e}");
}

#[test]
fn broadcast_view_larger_than_the_file_is_refused_on_read() {
    // A stride-0 view of 10^9 elements over one float: valid layout, but reading it would
    // allocate far more than the file holds.
    let pickle = P::proto2().tensor("FloatStorage", "0", 1, 0, &[1_000_000_000], &[0]).stop();
    let ckpt = open_bytes(torch_zip("x", &pickle, &[("0", f32_bytes(&[1.0]))])).expect("layout ok");
    let e = ckpt.read_f32("").expect_err("too large");
    assert!(e.to_string().contains("larger than"), "{e}");
    // A small broadcast is fine.
    let pickle = P::proto2().tensor("FloatStorage", "0", 1, 0, &[3, 2], &[0, 0]).stop();
    let ckpt = open_bytes(torch_zip("x", &pickle, &[("0", f32_bytes(&[2.0]))])).expect("ok");
    assert_eq!(ckpt.read_f32("").expect("read"), vec![2.0; 6]);
}

#[test]
fn size_one_dimension_with_huge_stride_reads_correctly() {
    // torch writes arbitrary strides for size-1 dims; they must not overflow the walk.
    let pickle = P::proto2().tensor("FloatStorage", "0", 4, 0, &[2, 1, 2], &[1, i32::MAX, 2]).stop();
    let ckpt = open_bytes(torch_zip("x", &pickle, &[("0", f32_bytes(&[0., 1., 2., 3.]))])).expect("ok");
    assert_eq!(ckpt.read_f32("").expect("read"), vec![0., 2., 1., 3.]);
}

#[test]
fn every_truncation_of_an_archive_is_an_error() {
    let full = sample_zip();
    for cut in 0..full.len() {
        let result = open_bytes(full[..cut].to_vec());
        assert!(result.is_err(), "prefix of {cut} bytes opened");
    }
}

#[test]
fn unknown_and_legacy_formats() {
    let e = open_bytes(b"GIF89a..........".to_vec()).expect_err("gif");
    assert!(matches!(e, Error::UnknownFormat { .. }), "{e}");
    assert!(e.to_string().contains("47 49 46 38"), "{e}");
    assert!(matches!(open_bytes(Vec::new()), Err(Error::UnknownFormat { .. })));
    let mut legacy = b"\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19.".to_vec();
    legacy.extend_from_slice(&[0; 32]);
    let e = open_bytes(legacy).expect_err("legacy");
    assert!(matches!(e, Error::LegacyTorch { .. }), "{e}");
    assert!(e.to_string().contains("legacy"), "{e}");
}

#[test]
fn missing_file_names_the_path() {
    let e = Checkpoint::open("/nonexistent/f5/model.safetensors").expect_err("missing");
    assert!(matches!(e, Error::Io { .. }));
    assert!(e.to_string().contains("/nonexistent/f5/model.safetensors"), "{e}");
}

// ---------------------------------------------------------------- safetensors

fn safetensors_file(header: &str, data: &[u8]) -> Vec<u8> {
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(header.as_bytes());
    bytes.extend_from_slice(data);
    bytes
}

fn sample_safetensors() -> Vec<u8> {
    let mut data = f32_bytes(&[1.0, 2.0, 3.0, 4.0]);
    data.extend(half::f16::from_f32(0.5).to_le_bytes());
    data.extend(half::f16::from_f32(-1.0).to_le_bytes());
    data.extend(3i64.to_le_bytes());
    data.extend(2.5f64.to_le_bytes());
    data.push(1);
    safetensors_file(
        r#"{"__metadata__":{"format":"pt"},
            "a.w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},
            "a.h":{"dtype":"F16","shape":[2],"data_offsets":[16,20]},
            "step":{"dtype":"I64","shape":[],"data_offsets":[20,28]},
            "d":{"dtype":"F64","shape":[1],"data_offsets":[28,36]},
            "flag":{"dtype":"BOOL","shape":[1],"data_offsets":[36,37]}}"#,
        &data,
    )
}

#[test]
fn safetensors_table_and_values() {
    let ckpt = Checkpoint::from_bytes("m.safetensors", sample_safetensors()).expect("valid");
    assert_eq!(ckpt.format(), Format::Safetensors);
    assert_eq!(ckpt.names().collect::<Vec<_>>(), vec!["a.h", "a.w", "d", "flag", "step"]);
    let w = ckpt.meta("a.w").expect("w");
    assert_eq!((w.dtype(), w.shape(), w.strides()), (DType::F32, &[2usize, 2][..], &[2usize, 1][..]));
    assert_eq!(ckpt.read_f32("a.w").expect("w"), vec![1., 2., 3., 4.]);
    assert_eq!(ckpt.read_f32("a.h").expect("h"), vec![0.5, -1.0]);
    assert_eq!(ckpt.read_f32("step").expect("step"), vec![3.0]);
    assert_eq!(ckpt.read_f32("d").expect("d"), vec![2.5]);
    assert_eq!(ckpt.read_f32("flag").expect("flag"), vec![1.0]);
    assert_eq!(ckpt.raw_bytes("a.h").expect("raw").len(), 4);
    assert_eq!(ckpt.scalars().count(), 0);
}

#[test]
fn safetensors_lying_headers_are_refused() {
    let good = sample_safetensors();
    // Header length past EOF, and a huge one: reported as a bad safetensors header.
    for len in [good.len() as u64, u64::MAX, 1 << 40] {
        let mut bad = good.clone();
        bad[..8].copy_from_slice(&len.to_le_bytes());
        let e = open_bytes(bad).expect_err("lying length");
        assert!(matches!(e, Error::Safetensors { .. }), "{e}");
        assert!(e.to_string().contains("header length"), "{e}");
    }
    // Offsets beyond the data.
    let bad = safetensors_file(r#"{"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}"#, &[0; 8]);
    let e = Checkpoint::from_bytes("m.safetensors", bad).expect_err("short data");
    assert!(e.to_string().contains("m.safetensors"), "{e}");
    // Offsets inconsistent with the shape.
    let bad = safetensors_file(r#"{"w":{"dtype":"F32","shape":[3],"data_offsets":[0,16]}}"#, &[0; 16]);
    assert!(open_bytes(bad).is_err());
    // Gaps/overlaps between tensors.
    let bad = safetensors_file(
        r#"{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},
            "b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}}"#,
        &[0; 6],
    );
    assert!(open_bytes(bad).is_err());
    // Offsets whose sum overflows usize (would overflow inside read_metadata).
    let big = 1u64 << 60;
    let mut header = String::from("{");
    for i in 0..16u64 {
        if i > 0 {
            header.push(',');
        }
        let size = if i == 15 { big - 1 } else { big };
        header.push_str(&format!(r#""t{i}":{{"dtype":"U8","shape":[{size}],"data_offsets":[{},{}]}}"#, i * big, i * big + size));
    }
    header.push('}');
    assert!(open_bytes(safetensors_file(&header, &[])).is_err());
    // Unsupported dtype names the tensor.
    let bad = safetensors_file(r#"{"q":{"dtype":"F8_E4M3","shape":[1],"data_offsets":[0,1]}}"#, &[0]);
    let e = open_bytes(bad).expect_err("f8");
    assert!(e.to_string().contains("`q`"), "{e}");
    // Not JSON.
    assert!(open_bytes(safetensors_file("{nope", &[])).is_err());
}

#[test]
fn every_truncation_of_a_safetensors_file_is_an_error() {
    let full = sample_safetensors();
    for cut in 0..full.len() {
        assert!(open_bytes(full[..cut].to_vec()).is_err(), "prefix of {cut}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    #[test]
    fn random_bytes_never_panic(mut data in proptest::collection::vec(any::<u8>(), 0..600), kind in 0u8..3) {
        // Give the sniffers a chance to route the noise into each parser.
        let head: &[u8] = match kind {
            0 => b"PK\x03\x04",
            1 => &[0x40, 0, 0, 0, 0, 0, 0, 0, b'{'],
            _ => &[],
        };
        data.splice(0..0, head.iter().copied());
        if let Ok(ckpt) = open_bytes(data) {
            let names: Vec<String> = ckpt.names().map(str::to_string).collect();
            for name in names {
                let _ = ckpt.read_f32(&name);
            }
        }
    }

    #[test]
    fn mutated_archive_never_panics(
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
    ) {
        let mut data = sample_zip();
        for (at, byte) in edits {
            let i = at.index(data.len());
            data[i] = byte;
        }
        if let Ok(ckpt) = open_bytes(data) {
            let names: Vec<String> = ckpt.names().map(str::to_string).collect();
            for name in names {
                let _ = ckpt.read_f32(&name);
                let _ = ckpt.f32_view(&name);
            }
        }
    }

    #[test]
    fn mutated_safetensors_never_panics(
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
    ) {
        let mut data = sample_safetensors();
        for (at, byte) in edits {
            let i = at.index(data.len());
            data[i] = byte;
        }
        if let Ok(ckpt) = open_bytes(data) {
            let names: Vec<String> = ckpt.names().map(str::to_string).collect();
            for name in names {
                let _ = ckpt.read_f32(&name);
            }
        }
    }
}

/// A header that describes more tensors than any model has, or is larger than any real header,
/// is refused before it is parsed (a million tiny entries used to cost close to a gigabyte).
#[test]
fn oversized_safetensors_headers_are_refused_before_parsing() {
    let file = |header: &str| {
        let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
        bytes.extend_from_slice(header.as_bytes());
        bytes
    };
    let many: Vec<String> =
        (0..crate::st::MAX_TENSORS + 1).map(|i| format!("\"t{i}\":{{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]}}")).collect();
    let header = format!("{{{}}}", many.join(","));
    assert!((header.len() as u64) < crate::st::MAX_HEADER_BYTES, "the count, not the size, must refuse this one");
    let Err(e) = open_bytes(file(&header)) else { panic!("too many tensors accepted") };
    assert!(matches!(e, Error::Safetensors { .. }) && e.to_string().contains("tensors; the limit"), "{e}");
    // One entry fewer than the limit is not refused by the count.
    let fewer = format!("{{{}}}", many[..crate::st::MAX_TENSORS].join(","));
    assert!(open_bytes(file(&fewer)).is_ok());
    let padded = format!("{{\"__metadata__\":{{\"pad\":\"{}\"}}}}", "x".repeat(crate::st::MAX_HEADER_BYTES as usize));
    let Err(e) = open_bytes(file(&padded)) else { panic!("too large a header accepted") };
    assert!(e.to_string().contains("limit"), "{e}");
}
