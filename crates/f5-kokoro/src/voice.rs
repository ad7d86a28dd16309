//! Voice packs: one 256-float style per utterance length, `[510, 1, 256]`.

use std::path::Path;

use crate::KokoroError;

/// A voice pack: row `i` is the style for an utterance of `i + 1` phonemes; the first half of a
/// row conditions the decoder (acoustics), the second half the prosody predictor.
#[derive(Clone, Debug, PartialEq)]
pub struct VoicePack {
    data: Vec<f32>,
    rows: usize,
    dim: usize,
}

impl VoicePack {
    /// From raw rows (`rows × dim` values).
    pub fn from_rows(data: Vec<f32>, dim: usize) -> Result<Self, KokoroError> {
        if dim == 0 || data.is_empty() || !data.len().is_multiple_of(dim) {
            return Err(KokoroError::Voice(format!("{} values are not whole rows of {dim}", data.len())));
        }
        if let Some(i) = data.iter().position(|v| !v.is_finite()) {
            return Err(KokoroError::Voice(format!("value {i} of the pack is {}", data[i])));
        }
        Ok(VoicePack { rows: data.len() / dim, data, dim })
    }

    /// Reads a pack: `NAME.pt` (a `torch.save` of one `[510, 1, 256]` tensor, as the Hugging Face
    /// release ships voices) or raw little-endian f32 (`.bin`, any other extension).
    pub fn open(path: &Path, dim: usize) -> Result<Self, KokoroError> {
        let at = |m: String| KokoroError::Voice(format!("{}: {m}", path.display()));
        let is_pt = path.extension().is_some_and(|e| e == "pt" || e == "pth");
        let data = if is_pt {
            let ckpt = f5_torchpt::Checkpoint::open(path)?;
            let names: Vec<&str> = ckpt.names().collect();
            let [name] = names.as_slice() else {
                return Err(at(format!("a voice file holds one tensor; this one holds {}", names.len())));
            };
            let shape = ckpt.meta(name)?.shape().to_vec();
            if shape.last() != Some(&dim) {
                return Err(at(format!("tensor of shape {shape:?}; a voice pack is [rows, 1, {dim}]")));
            }
            ckpt.read_f32(name)?
        } else {
            let bytes = std::fs::read(path).map_err(|e| at(e.to_string()))?;
            if !bytes.len().is_multiple_of(4 * dim) || bytes.is_empty() {
                return Err(at(format!("{} bytes are not whole rows of {dim} f32", bytes.len())));
            }
            bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect()
        };
        Self::from_rows(data, dim).map_err(|e| at(e.to_string()))
    }

    /// The element-wise weighted mean of several packs (`af_bella(2)+af_sky(1)`): weights are
    /// normalised to sum to 1.
    pub fn mix(parts: &[(VoicePack, f32)]) -> Result<Self, KokoroError> {
        let Some((first, _)) = parts.first() else { return Err(KokoroError::Voice("no voice to mix".into())) };
        let total: f32 = parts.iter().map(|p| p.1).sum();
        if parts.iter().any(|p| !p.1.is_finite() || p.1 <= 0.0) || total.is_nan() || total <= 0.0 {
            return Err(KokoroError::Voice("mix weights must be positive numbers".into()));
        }
        if let Some((p, _)) = parts.iter().find(|(p, _)| p.rows != first.rows || p.dim != first.dim) {
            return Err(KokoroError::Voice(format!("cannot mix a {}×{} pack with a {}×{} one", first.rows, first.dim, p.rows, p.dim)));
        }
        let mut data = vec![0.0f32; first.data.len()];
        for (pack, w) in parts {
            let w = w / total;
            data.iter_mut().zip(&pack.data).for_each(|(d, &v)| *d += w * v);
        }
        Ok(VoicePack { data, rows: first.rows, dim: first.dim })
    }

    /// Style rows in the pack (510: one per phoneme count a forward can take).
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// The style for an utterance of `phonemes` characters: row `phonemes − 1`, counted as the
    /// reference counts (every character of the phoneme string, before vocabulary filtering).
    pub fn style(&self, phonemes: usize) -> Result<&[f32], KokoroError> {
        if phonemes == 0 || phonemes > self.rows {
            return Err(KokoroError::Input(format!("a voice pack has styles for 1..={} phonemes, not {phonemes}", self.rows)));
        }
        Ok(&self.data[(phonemes - 1) * self.dim..phonemes * self.dim])
    }
}

/// A voice request: `name`, or a weighted mix `a+b`, `a(2)+b(1)` (weights default to 1).
pub fn parse_voice_mix(spec: &str) -> Result<Vec<(String, f32)>, KokoroError> {
    let bad = |m: String| KokoroError::Voice(format!("voice {spec:?}: {m}"));
    let mut out = Vec::new();
    for part in spec.split('+') {
        let part = part.trim();
        let (name, weight) = match part.strip_suffix(')').and_then(|p| p.split_once('(')) {
            Some((n, w)) => (n.trim(), w.trim().parse::<f32>().map_err(|_| bad(format!("weight {w:?} is not a number")))?),
            None => (part, 1.0),
        };
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
            return Err(bad(format!("{name:?} is not a voice name (letters, digits, _ and -)")));
        }
        if !(weight.is_finite() && weight > 0.0) {
            return Err(bad(format!("weight {weight} must be positive")));
        }
        out.push((name.to_string(), weight));
    }
    Ok(out)
}
