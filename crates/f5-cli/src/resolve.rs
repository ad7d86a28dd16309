//! Model, vocoder and voice names → files on disk.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

/// A checkpoint file, or a directory holding exactly one `.safetensors`/`.pt`; the vocab is
/// `vocab.txt` beside it unless named.
pub fn model(path: &Path, vocab: Option<&Path>) -> Result<(PathBuf, PathBuf)> {
    let ckpt = if path.is_dir() {
        let mut found: Vec<PathBuf> = std::fs::read_dir(path)
            .with_context(|| format!("cannot list {}", path.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "safetensors" || e == "pt"))
            .collect();
        found.sort();
        // Prefer safetensors when a directory holds both forms of the same model.
        found.sort_by_key(|p| p.extension().is_none_or(|e| e != "safetensors"));
        match found.first() {
            Some(p) => p.clone(),
            None => bail!("{}: no .safetensors or .pt checkpoint in this directory", path.display()),
        }
    } else if path.is_file() {
        path.to_path_buf()
    } else {
        bail!("model {}: no such file or directory", path.display());
    };
    let vocab = match vocab {
        Some(v) => v.to_path_buf(),
        None => {
            let beside = ckpt.parent().map(|d| d.join("vocab.txt")).unwrap_or_else(|| PathBuf::from("vocab.txt"));
            if !beside.is_file() {
                bail!("no vocab.txt beside {}; name one with --vocab", ckpt.display());
            }
            beside
        }
    };
    Ok((ckpt, vocab))
}

/// A vocoder directory (`pytorch_model.bin` or a `.safetensors`) or the weights file itself.
pub fn vocoder(path: &Path) -> Result<PathBuf> {
    if path.is_file() {
        return Ok(path.to_path_buf());
    }
    if path.is_dir() {
        for name in ["pytorch_model.bin", "model.safetensors"] {
            let p = path.join(name);
            if p.is_file() {
                return Ok(p);
            }
        }
        bail!("{}: no pytorch_model.bin or model.safetensors in this directory", path.display());
    }
    bail!("vocoder {}: no such file or directory", path.display())
}

/// A voice directory: `reference.*` audio and `config.json` with the transcript.
pub fn voice_dir(dir: &Path) -> Result<(PathBuf, String)> {
    let config = dir.join("config.json");
    let text = std::fs::read_to_string(&config).with_context(|| format!("voice {}: cannot read config.json", dir.display()))?;
    let v: serde_json::Value = serde_json::from_str(&text).with_context(|| format!("{}: not valid JSON", config.display()))?;
    let transcript = v.get("transcript").or_else(|| v.get("ref_text")).and_then(|t| t.as_str());
    let Some(transcript) = transcript else { bail!("{}: no \"transcript\" field", config.display()) };
    let mut audio: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("cannot list {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.file_stem().is_some_and(|s| s == "reference") && p.extension().is_some_and(|e| e != "json"))
        .collect();
    audio.sort();
    match audio.into_iter().next() {
        Some(a) => Ok((a, transcript.to_string())),
        None => bail!("voice {}: no reference.wav (or reference.mp3/.flac/.ogg)", dir.display()),
    }
}
