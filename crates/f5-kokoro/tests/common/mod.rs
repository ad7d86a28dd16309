//! Reading the reference goldens of `fixtures/kokoro` (made by `fixtures/kokoro/generate.py`
//! from kokoro 0.9.4) and comparing stages.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/kokoro")
}

/// A golden: its shape and values as f64 (int64 goldens converted).
pub struct Golden {
    pub shape: Vec<usize>,
    pub data: Vec<f64>,
}

pub fn npy(path: &Path) -> Golden {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let arr = npyz::NpyFile::new(&bytes[..]).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let shape: Vec<usize> = arr.shape().iter().map(|&d| d as usize).collect();
    let data: Vec<f64> = match arr.dtype() {
        npyz::DType::Plain(t) if t.type_char() == npyz::TypeChar::Int => {
            arr.into_vec::<i64>().unwrap().into_iter().map(|v| v as f64).collect()
        }
        npyz::DType::Plain(t) if t.size_field() == 8 => arr.into_vec::<f64>().unwrap(),
        _ => arr.into_vec::<f32>().unwrap().into_iter().map(|v| v as f64).collect(),
    };
    Golden { shape, data }
}

/// The reference's index of goldens (shapes, calls).
pub fn index() -> serde_json::Value {
    let text = std::fs::read_to_string(fixtures().join("index.json")).expect("fixtures/kokoro/index.json");
    serde_json::from_str(&text).expect("index.json")
}

/// ‖a − b‖ / ‖b‖.
pub fn rel_l2(got: &[f32], want: &[f64]) -> f64 {
    assert_eq!(got.len(), want.len(), "lengths differ");
    let num: f64 = got.iter().zip(want).map(|(&g, &w)| (g as f64 - w).powi(2)).sum();
    let den: f64 = want.iter().map(|w| w * w).sum();
    (num / den.max(1e-30)).sqrt()
}

/// `[1, C, T]` (the reference's conv layout) → `[T, C]` (ours).
pub fn channels_last(g: &Golden) -> Vec<f64> {
    let (c, t) = (g.shape[g.shape.len() - 2], g.shape[g.shape.len() - 1]);
    let mut out = vec![0.0; c * t];
    for ci in 0..c {
        for ti in 0..t {
            out[ti * c + ci] = g.data[ci * t + ti];
        }
    }
    out
}

/// Kokoro's real config.json and the 54 voice packs (`KOKORO_SHARED`, else the checkout's
/// sibling `shared/kokoro`).
pub fn shared_kokoro() -> PathBuf {
    std::env::var_os("KOKORO_SHARED")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/kokoro"))
}
