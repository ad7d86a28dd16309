//! `f5 synth --spectrogram`: the generated log-mel as a PNG, to see at a glance where speech,
//! pauses and chunk joins are, and whether a chunk came out as noise or was clipped.
//!
//! Time runs left to right, one pixel per frame (256 samples, 10.7 ms); mel bins bottom to top,
//! low frequencies at the bottom, [`BIN_PIXELS`] pixels each. Colours are viridis, which stays
//! readable in grey and to colour-blind eyes. Written row by row: memory for one row only.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

use anyhow::{bail, Context, Result};

/// Pixel rows per mel bin: 100 bins make a 300-pixel-high image.
pub const BIN_PIXELS: usize = 3;

/// The darkest colour stands for this far (natural log) below the loudest value and anything
/// quieter: 8 nats of magnitude ≈ 70 dB. Without a floor the model's silence floor (ln 1e-5)
/// would take most of the scale and speech would be a few bright lines.
pub const DYNAMIC_RANGE: f32 = 8.0;

/// Viridis at nine evenly spaced points, interpolated linearly between them.
const VIRIDIS: [[u8; 3]; 9] = [
    [68, 1, 84],
    [71, 45, 123],
    [59, 82, 139],
    [44, 114, 142],
    [33, 145, 140],
    [40, 174, 128],
    [94, 201, 98],
    [173, 220, 48],
    [253, 231, 37],
];

/// The colour of `t` in [0, 1] (clamped; not a number is the darkest).
pub fn colour(t: f32) -> [u8; 3] {
    let t = if t.is_nan() { 0.0 } else { t.clamp(0.0, 1.0) };
    let x = t * (VIRIDIS.len() - 1) as f32;
    let i = (x.floor() as usize).min(VIRIDIS.len() - 2);
    let f = x - i as f32;
    let (a, b) = (VIRIDIS[i], VIRIDIS[i + 1]);
    let mix = |k: usize| (a[k] as f32 + (b[k] as f32 - a[k] as f32) * f).round() as u8;
    [mix(0), mix(1), mix(2)]
}

/// The range the colours span: the largest finite value and [`DYNAMIC_RANGE`] below it, or the
/// smallest value when that is higher. `None` when nothing is finite.
fn value_range(mel: &[f32]) -> Option<(f32, f32)> {
    let finite = mel.iter().copied().filter(|v| v.is_finite());
    let (lo, hi) = finite.fold(None, |acc: Option<(f32, f32)>, v| Some(acc.map_or((v, v), |(lo, hi)| (lo.min(v), hi.max(v)))))?;
    Some((lo.max(hi - DYNAMIC_RANGE), hi))
}

/// Writes `mel` (`[frames, bins]`, row-major, as the model makes it) to `path` as an RGB PNG of
/// `frames` × `bins · BIN_PIXELS` pixels. Written beside the target and renamed into place, so a
/// failed write leaves no half image.
pub fn write_png(path: &Path, mel: &[f32], bins: usize) -> Result<()> {
    if bins == 0 || mel.is_empty() || !mel.len().is_multiple_of(bins) {
        bail!("{}: no spectrogram to draw ({} values in rows of {bins})", path.display(), mel.len());
    }
    let frames = mel.len() / bins;
    let width = u32::try_from(frames)
        .ok()
        .filter(|&w| w < 1 << 31)
        .with_context(|| format!("{}: {frames} frames is too wide for a PNG", path.display()))?;
    let height = (bins * BIN_PIXELS) as u32;
    let (lo, hi) = value_range(mel).unwrap_or((0.0, 0.0));
    let span = hi - lo;
    let shade = |v: f32| if span > 0.0 && v.is_finite() { colour((v - lo) / span) } else { colour(0.0) };

    let tmp = path.with_extension("png.partial");
    let written = (|| -> Result<()> {
        let file = File::create(&tmp).with_context(|| format!("cannot create {}", tmp.display()))?;
        let mut encoder = png::Encoder::new(BufWriter::new(file), width, height);
        encoder.set_color(png::ColorType::Rgb);
        encoder.set_depth(png::BitDepth::Eight);
        let mut writer = encoder.write_header()?;
        let mut stream = writer.stream_writer()?;
        let mut row = vec![0u8; frames * 3];
        // The top of the image is the highest bin.
        for bin in (0..bins).rev() {
            for (px, frame) in row.chunks_exact_mut(3).zip(mel.chunks_exact(bins)) {
                px.copy_from_slice(&shade(frame[bin]));
            }
            for _ in 0..BIN_PIXELS {
                stream.write_all(&row)?;
            }
        }
        stream.finish()?;
        writer.finish()?;
        Ok(())
    })()
    .with_context(|| format!("cannot write the spectrogram {}", path.display()));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    std::fs::rename(&tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        anyhow::anyhow!("cannot write the spectrogram {}: {e}", path.display())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colour_map_ends_and_middle() {
        assert_eq!(colour(0.0), VIRIDIS[0]);
        assert_eq!(colour(1.0), VIRIDIS[8]);
        assert_eq!(colour(0.5), VIRIDIS[4]);
        assert_eq!(colour(-3.0), VIRIDIS[0]);
        assert_eq!(colour(7.0), VIRIDIS[8]);
        assert_eq!(colour(f32::NAN), VIRIDIS[0]);
        // Halfway between the first two anchors.
        assert_eq!(colour(1.0 / 16.0), [70, 23, 104]);
        // Brightness rises all the way (a perceptual map: louder is always lighter).
        let luma = |c: [u8; 3]| 0.299 * c[0] as f32 + 0.587 * c[1] as f32 + 0.114 * c[2] as f32;
        let steps: Vec<f32> = (0..=64).map(|i| luma(colour(i as f32 / 64.0))).collect();
        assert!(steps.windows(2).all(|w| w[1] >= w[0]), "{steps:?}");
    }

    #[test]
    fn range_has_a_floor() {
        assert_eq!(value_range(&[-11.5, -2.0, 1.0]), Some((-7.0, 1.0)));
        assert_eq!(value_range(&[-3.0, -2.0, 1.0]), Some((-3.0, 1.0)));
        assert_eq!(value_range(&[f32::NAN, 2.0, f32::NEG_INFINITY]), Some((2.0, 2.0)));
        assert_eq!(value_range(&[f32::NAN]), None);
    }
}
