//! The full-size model on counter weights: every element a pure function of (seed, tensor
//! index, element index), so the reference and this crate build the same 81.8 M parameters
//! from `fixtures/kokoro/manifest_full.json` without committing 327 MB (the fixture README
//! gives the rule). Shared by the full-size test and the GPU example.

use std::collections::BTreeMap;
use std::path::Path;

use f5_gpukit::Backend;
use f5_kokoro::{Kokoro, KokoroConfig};
use f5_nn::Weights;

type AnyResult<T> = Result<T, Box<dyn std::error::Error>>;

fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Element `e` of tensor `i`: `f32(offset + scale·(2u − 1))`, `u = (splitmix64(seed ^ i<<40 ^ e) >> 40) / 2²⁴`.
pub fn counter_value(seed: u64, i: u64, e: u64, offset: f64, scale: f64) -> f32 {
    let u = (splitmix64(seed ^ (i << 40) ^ e) >> 40) as f64 / 16_777_216.0;
    (offset + scale * (2.0 * u - 1.0)) as f32
}

pub fn read_manifest(path: &Path) -> AnyResult<serde_json::Value> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(serde_json::from_str(&text)?)
}

/// The counter checkpoint as safetensors bytes, with its tensor and parameter counts.
pub fn counter_checkpoint(manifest: &serde_json::Value) -> AnyResult<(Vec<u8>, usize, usize)> {
    let seed = manifest["counter_weights"]["seed"].as_u64().ok_or("manifest: no counter seed")?;
    let mut tensors: Vec<(String, Vec<usize>, Vec<u8>)> = Vec::new();
    let mut params = 0usize;
    for entry in manifest["entries"].as_array().ok_or("manifest: no entries")? {
        let i = entry["index"].as_u64().ok_or("manifest: entry without index")?;
        let name = entry["name"].as_str().ok_or("manifest: entry without name")?.to_string();
        let shape: Vec<usize> = entry["shape"]
            .as_array()
            .ok_or("manifest: entry without shape")?
            .iter()
            .filter_map(|v| v.as_u64())
            .map(|v| v as usize)
            .collect();
        let (offset, scale) = (entry["offset"].as_f64().ok_or("no offset")?, entry["scale"].as_f64().ok_or("no scale")?);
        let n: usize = shape.iter().product();
        params += n;
        let bytes: Vec<u8> = (0..n as u64).flat_map(|e| counter_value(seed, i, e, offset, scale).to_le_bytes()).collect();
        tensors.push((name, shape, bytes));
    }
    let count = tensors.len();
    let views = tensors
        .iter()
        .map(|(n, s, b)| Ok((n.clone(), safetensors::tensor::TensorView::new(safetensors::tensor::Dtype::F32, s.clone(), b)?)))
        .collect::<Result<BTreeMap<_, _>, safetensors::SafeTensorError>>()?;
    Ok((safetensors::serialize(&views, None)?, count, params))
}

/// The full-size model from counter checkpoint bytes on any backend.
pub fn counter_model<B: Backend>(bytes: Vec<u8>, config: &Path, kit: B) -> AnyResult<Kokoro<B>> {
    let ckpt = f5_torchpt::Checkpoint::from_bytes("kokoro-counter.safetensors", bytes)?;
    let mut w = Weights::from_checkpoint(ckpt)?;
    let config = KokoroConfig::open(config)?;
    Ok(Kokoro::from_weights(&mut w, config, kit)?)
}
