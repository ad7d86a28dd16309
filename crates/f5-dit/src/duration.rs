//! How many mel frames an utterance gets. The estimate IS the alignment: the text is stretched
//! over exactly this many frames, so it must be the reference's arithmetic to the frame.

/// Samples per mel frame at 24 kHz.
pub const HOP: usize = 256;
/// The output rate the released models were trained at; every frame count assumes it.
pub const SAMPLE_RATE: usize = 24_000;

/// Under this many UTF-8 bytes of new text the reference slows the estimate to speed 0.3: a very
/// short line given its linear share of time comes out clipped.
pub const SHORT_TEXT_BYTES: usize = 10;

/// Total frames (reference + new) for one chunk, as `infer_batch_process` computes them.
///
/// `ref_samples` is the 24 kHz reference length; `ref_text_bytes`/`gen_text_bytes` are UTF-8
/// byte lengths (bytes, not characters — an umlaut counts twice, as in the reference), with
/// the reference text already carrying its appended ". " and extra space. `fix_duration`
/// (seconds, reference included) overrides the estimate.
pub fn estimate_frames(ref_samples: usize, ref_text_bytes: usize, gen_text_bytes: usize, speed: f64, fix_duration: Option<f64>) -> usize {
    if let Some(secs) = fix_duration {
        return (secs * SAMPLE_RATE as f64 / HOP as f64).max(0.0) as usize;
    }
    let ref_frames = ref_samples / HOP;
    let speed = if gen_text_bytes < SHORT_TEXT_BYTES { 0.3 } else { speed };
    let ref_bytes = ref_text_bytes.max(1) as f64;
    let extra = ref_frames as f64 / ref_bytes * gen_text_bytes as f64 / speed;
    ref_frames + extra.max(0.0) as usize
}

/// `CFM.sample`'s lower bound on the frame count: at least one frame past both the text and the
/// reference mel (`ref_samples / 256 + 1` frames).
pub fn sampled_frames(estimate: usize, text_tokens: usize, ref_samples: usize) -> usize {
    let cond_frames = ref_samples / HOP + 1;
    estimate.max(text_tokens.max(cond_frames) + 1)
}

/// The per-chunk text budget in bytes: how much text fits beside a reference of this length in
/// the model's ~22 s window at the reference's own speaking rate (`infer_process`'s `max_chars`).
/// `ref_seconds` is the reference clip's duration at its original rate.
pub fn max_chunk_bytes(ref_text_bytes: usize, ref_seconds: f64, speed: f64) -> usize {
    if ref_seconds <= 0.0 {
        return 0;
    }
    (ref_text_bytes as f64 / ref_seconds * (22.0 - ref_seconds) * speed).max(0.0) as usize
}

/// 1.1.22's split of `fix_duration` over k chunks by byte weight: each chunk gets the reference
/// plus its share of the remaining time (plus the cross-fade overlaps), in seconds.
pub fn split_fix_duration(fix_duration: f64, ref_samples: usize, chunk_bytes: &[usize], cross_fade: f64) -> Vec<f64> {
    let ref_sec = (ref_samples / HOP * HOP) as f64 / SAMPLE_RATE as f64;
    let k = chunk_bytes.len();
    if k <= 1 {
        return vec![fix_duration; k];
    }
    let total: usize = chunk_bytes.iter().sum();
    let alloc = (fix_duration - ref_sec) + cross_fade * (k - 1) as f64;
    chunk_bytes.iter().map(|&b| ref_sec + alloc * b as f64 / total.max(1) as f64).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn estimate_follows_reference_arithmetic() {
        // 3 s reference (72000 samples → 281 frames), 40-byte transcript, 60 bytes of new text:
        // 281 + int(281/40·60/1.0) = 281 + 421.
        assert_eq!(estimate_frames(72_000, 40, 60, 1.0, None), 702);
        // Under 10 bytes: speed 0.3 whatever was asked.
        assert_eq!(estimate_frames(72_000, 40, 9, 1.0, None), 281 + (281.0 / 40.0 * 9.0 / 0.3) as usize);
        assert_eq!(estimate_frames(72_000, 40, 9, 2.0, None), estimate_frames(72_000, 40, 9, 1.0, None));
        assert_eq!(estimate_frames(72_000, 40, 60, 1.0, Some(10.0)), 937);
    }

    #[test]
    fn lower_bound_covers_text_and_reference() {
        assert_eq!(sampled_frames(100, 300, 72_000), 301);
        assert_eq!(sampled_frames(100, 10, 72_000), 283);
        assert_eq!(sampled_frames(900, 10, 72_000), 900);
    }

    #[test]
    fn chunk_budget() {
        // 40 bytes over 4 s: 10 B/s × 18 s.
        assert_eq!(max_chunk_bytes(40, 4.0, 1.0), 180);
    }
}
