//! pydub 0.25.1's silence handling, reproduced on integer samples, and the audio half of F5's
//! `preprocess_ref_audio_text` built on it.
//!
//! pydub measures everything in milliseconds of the source rate and computes loudness with
//! `audioop.rms`, which sums squares in double precision and truncates the root to an integer.
//! Thresholds are compared against that integer, so the exact integer samples matter: the
//! segment type here stores them as pydub does (24-bit WAV is widened to 4 bytes by putting the
//! three bytes on top and a sign-fill byte (0x00 or 0xFF) below, i.e. `x·256 + (x < 0 ? 255 : 0)`).

use crate::decode::{DecodedAudio, SampleEncoding};
use crate::error::{AudioError, Result};

/// Audio as pydub's `AudioSegment` holds it: interleaved signed integers of `sample_width` bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PcmSegment {
    samples: Vec<i32>,
    channels: usize,
    frame_rate: u32,
    sample_width: u8,
}

/// Python's `round()` on a float (half to even).
fn py_round(x: f64) -> i64 {
    x.round_ties_even() as i64
}

impl PcmSegment {
    /// A segment of interleaved integer `samples`; refuses channel counts, rates and widths
    /// pydub would not hold, so the silence rules never divide by zero.
    pub fn new(samples: Vec<i32>, channels: usize, frame_rate: u32, sample_width: u8) -> Result<Self> {
        if channels == 0 || channels > crate::decode::MAX_CHANNELS as usize {
            return Err(AudioError::BadChannelCount {
                what: "PCM segment".into(),
                channels: channels as u32,
                max: crate::decode::MAX_CHANNELS,
            });
        }
        crate::decode::check_rate(frame_rate, "PCM segment")?;
        if !matches!(sample_width, 1 | 2 | 4) {
            return Err(AudioError::UnsupportedFormat {
                what: "PCM segment".into(),
                detail: format!("sample width {sample_width} bytes (pydub uses 1, 2 or 4)"),
            });
        }
        if !samples.len().is_multiple_of(channels) {
            return Err(AudioError::ChannelMismatch {
                detail: format!("{} samples is not a whole number of {channels}-channel frames", samples.len()),
            });
        }
        Ok(Self { samples, channels, frame_rate, sample_width })
    }

    /// `AudioSegment.silent(duration_ms)`: mono 16-bit zeros at 11 025 Hz.
    pub fn silent(duration_ms: u32) -> Self {
        let frames = (11025.0 * (f64::from(duration_ms) / 1000.0)) as usize;
        Self { samples: vec![0; frames], channels: 1, frame_rate: 11025, sample_width: 2 }
    }

    /// The integers pydub would hold after `AudioSegment.from_file`. WAV integers are taken as
    /// stored; other sources are converted from floats the way ffmpeg does for pydub
    /// (`lrintf(x·2^15)` to 16-bit, 32-bit for float WAV), which is close but, for lossy codecs,
    /// not guaranteed bit-identical (the decoders differ).
    pub fn from_decoded(audio: &DecodedAudio) -> Result<Self> {
        let channels = audio.channel_count();
        let (width, ints): (u8, Vec<i32>) = match (audio.encoding, audio.wav_ints.as_ref()) {
            (SampleEncoding::Int { bits: 24 }, Some(raw)) => (4, raw.iter().map(|&x| (x << 8) | if x < 0 { 0xFF } else { 0 }).collect()),
            (SampleEncoding::Int { bits }, Some(raw)) => {
                let width = match bits {
                    8 => 1,
                    16 => 2,
                    _ => 4,
                };
                (width, raw.clone())
            }
            (SampleEncoding::Int { bits }, None) if bits > 16 => (4, interleave_scaled(audio, 2_147_483_648.0, i32::MIN, i32::MAX)),
            (SampleEncoding::Float { .. }, _) => (4, interleave_scaled(audio, 2_147_483_648.0, i32::MIN, i32::MAX)),
            _ => (2, interleave_scaled(audio, 32768.0, -32768, 32767)),
        };
        Self::new(ints, channels, audio.sample_rate, width)
    }

    /// Channels per frame.
    pub fn channels(&self) -> usize {
        self.channels
    }

    /// Frames per second.
    pub fn frame_rate(&self) -> u32 {
        self.frame_rate
    }

    /// Bytes per sample (pydub's `sample_width`): sets the full-scale value dBFS is measured against.
    pub fn sample_width(&self) -> u8 {
        self.sample_width
    }

    /// The interleaved samples.
    pub fn samples(&self) -> &[i32] {
        &self.samples
    }

    /// Frames (samples per channel).
    pub fn frame_count(&self) -> usize {
        self.samples.len() / self.channels
    }

    /// `len(segment)`: `round(1000 · frames / rate)` milliseconds.
    pub fn len_ms(&self) -> i64 {
        py_round(1000.0 * (self.frame_count() as f64 / f64::from(self.frame_rate)))
    }

    /// `max_possible_amplitude`: 2^(8·width) / 2.
    pub fn max_possible_amplitude(&self) -> f64 {
        f64::from(1u32 << (8 * u32::from(self.sample_width) - 1))
    }

    /// `_parse_position`: a millisecond position to a frame index, `int(ms · rate / 1000)`.
    fn frame_at(&self, ms: i64) -> i64 {
        let ms = if ms < 0 { self.len_ms() - ms.abs() } else { ms };
        (ms as f64 * (f64::from(self.frame_rate) / 1000.0)) as i64
    }

    /// Frame bounds of `segment[start_ms:end_ms]` within the data, and the number of frames pydub
    /// returns (more than `end - start` when it pads past the last frame, 0 for an empty slice).
    fn slice_frames(&self, start_ms: Option<i64>, end_ms: Option<i64>) -> (usize, usize, usize) {
        let len = self.len_ms();
        let start = start_ms.unwrap_or(0).min(len);
        let end = end_ms.unwrap_or(len).min(len);
        let start_f = self.frame_at(start);
        let end_f = self.frame_at(end);
        if end_f <= start_f {
            return (0, 0, 0);
        }
        let total = self.frame_count() as i64;
        let s = start_f.clamp(0, total) as usize;
        let e = (end_f.clamp(0, total) as usize).max(s);
        (s, e, (end_f - start_f) as usize)
    }

    /// `segment[start_ms:end_ms]` with pydub's rules: bounds clamp to `len`, negative positions
    /// count from the end, and a request past the last frame (len rounds up) is padded with
    /// silent frames.
    pub fn slice_ms(&self, start_ms: Option<i64>, end_ms: Option<i64>) -> Self {
        let (s, e, frames) = self.slice_frames(start_ms, end_ms);
        let mut samples = self.samples[s * self.channels..e * self.channels].to_vec();
        samples.resize(frames * self.channels, 0);
        Self { samples, ..*self }
    }

    /// `segment[start_ms:end_ms].rms` without copying the window.
    fn rms_of_slice(&self, start_ms: i64, end_ms: i64) -> u32 {
        let (s, e, frames) = self.slice_frames(Some(start_ms), Some(end_ms));
        // Padding frames are zeros: they only add to the count.
        rms_with_count(&self.samples[s * self.channels..e * self.channels], frames * self.channels)
    }

    /// `audioop.rms`: root of the mean square over all samples of all channels, truncated to an
    /// integer (0 for an empty segment).
    pub fn rms(&self) -> u32 {
        rms_of(&self.samples)
    }

    /// `segment.dBFS`: `20·log(rms / max_amplitude, 10)`, `-inf` when rms is 0.
    pub fn dbfs(&self) -> f64 {
        dbfs_of(self.rms(), self.max_possible_amplitude())
    }

    /// `segment.reverse()`: `audioop.reverse` reverses the sample order (channels swap too, as in
    /// pydub; loudness is unaffected).
    pub fn reverse(&self) -> Self {
        let mut samples = self.samples.clone();
        samples.reverse();
        Self { samples, ..*self }
    }

    /// `self + other` (`append(crossfade=0)`): both are first brought to the larger channel count,
    /// frame rate and sample width (`AudioSegment._sync`), then concatenated.
    pub fn append(&self, other: &Self) -> Result<Self> {
        let channels = self.channels.max(other.channels);
        let rate = self.frame_rate.max(other.frame_rate);
        let width = self.sample_width.max(other.sample_width);
        let a = self.converted(channels, rate, width)?;
        let b = other.converted(channels, rate, width)?;
        let mut samples = a.samples;
        samples.extend_from_slice(&b.samples);
        Ok(Self { samples, channels, frame_rate: rate, sample_width: width })
    }

    fn converted(&self, channels: usize, rate: u32, width: u8) -> Result<Self> {
        let mut seg = self.clone();
        if seg.channels != channels {
            if seg.channels != 1 {
                return Err(AudioError::ChannelMismatch {
                    detail: format!("cannot join {}-channel and {channels}-channel audio", seg.channels),
                });
            }
            // `set_channels` from mono duplicates the channel.
            seg.samples = seg.samples.iter().flat_map(|&s| std::iter::repeat_n(s, channels)).collect();
            seg.channels = channels;
        }
        if seg.frame_rate != rate {
            seg.samples = ratecv(&seg.samples, seg.channels, seg.sample_width, seg.frame_rate, rate);
            seg.frame_rate = rate;
        }
        if seg.sample_width != width {
            // `audioop.lin2lin` widening: shift left by the byte difference.
            let shift = 8 * u32::from(width - seg.sample_width);
            seg.samples = seg.samples.iter().map(|&s| s << shift).collect();
            seg.sample_width = width;
        }
        Ok(seg)
    }

    /// Float channels as `torchaudio.load` reads the WAV pydub exports from this segment:
    /// `x / 2^(8·width − 1)`.
    pub fn to_float_channels(&self) -> Vec<Vec<f32>> {
        let scale = 1.0 / self.max_possible_amplitude();
        let mut out = vec![Vec::with_capacity(self.frame_count()); self.channels];
        for (i, &s) in self.samples.iter().enumerate() {
            out[i % self.channels].push((f64::from(s) * scale) as f32);
        }
        out
    }
}

fn interleave_scaled(audio: &DecodedAudio, scale: f64, lo: i32, hi: i32) -> Vec<i32> {
    let frames = audio.len();
    let mut out = Vec::with_capacity(frames * audio.channel_count());
    for i in 0..frames {
        for ch in &audio.channels {
            let v = (f64::from(ch[i]) * scale).round_ties_even();
            out.push(v.clamp(f64::from(lo), f64::from(hi)) as i32);
        }
    }
    out
}

fn rms_of(samples: &[i32]) -> u32 {
    rms_with_count(samples, samples.len())
}

/// `audioop.rms` over `samples` followed by `count - len` zeros: squares summed in order in f64,
/// the root truncated to an integer.
fn rms_with_count(samples: &[i32], count: usize) -> u32 {
    if count == 0 {
        return 0;
    }
    let mut sum = 0.0f64;
    for &s in samples {
        let v = f64::from(s);
        sum += v * v;
    }
    (sum / count as f64).sqrt() as u32
}

/// `ratio_to_db`: `20 * math.log(ratio, 10)`, which CPython evaluates as `ln(ratio) / ln(10)`.
fn dbfs_of(rms: u32, max_amplitude: f64) -> f64 {
    if rms == 0 {
        return f64::NEG_INFINITY;
    }
    let ratio = f64::from(rms) / max_amplitude;
    20.0 * (ratio.ln() / 10f64.ln())
}

/// `db_to_float(db) * max_amplitude`: the RMS threshold a window is compared against.
fn silence_threshold(db: f64, max_amplitude: f64) -> f64 {
    10f64.powf(db / 20.0) * max_amplitude
}

/// `audioop.ratecv(data, width, nchannels, inrate, outrate, None)` with the default weights
/// (1, 0): linear interpolation on samples scaled to 32 bits.
fn ratecv(samples: &[i32], channels: usize, width: u8, in_rate: u32, out_rate: u32) -> Vec<i32> {
    let g = {
        let (mut a, mut b) = (in_rate, out_rate);
        while b != 0 {
            (a, b) = (b, a % b);
        }
        a
    };
    let inrate = i64::from(in_rate / g);
    let outrate = i64::from(out_rate / g);
    let shift = 32 - 8 * u32::from(width);
    let mut prev = vec![0i64; channels];
    let mut cur = vec![0i64; channels];
    let mut d = -outrate;
    let mut out = Vec::new();
    let mut frames = samples.chunks_exact(channels);
    loop {
        while d < 0 {
            let Some(frame) = frames.next() else { return out };
            for (c, &s) in frame.iter().enumerate() {
                prev[c] = cur[c];
                cur[c] = i64::from(s) << shift;
            }
            d += outrate;
        }
        while d >= 0 {
            for c in 0..channels {
                let v = ((prev[c] as f64) * (d as f64) + (cur[c] as f64) * ((outrate - d) as f64)) / outrate as f64;
                out.push(((v as i64) >> shift) as i32);
            }
            d -= inrate;
        }
    }
}

/// `pydub.silence.detect_silence`: `[start, end]` millisecond ranges whose `min_silence_len` ms
/// windows, tried every `seek_step` ms (plus the last possible start), have RMS ≤ threshold.
pub fn detect_silence(seg: &PcmSegment, min_silence_len: i64, silence_thresh_db: f64, seek_step: i64) -> Vec<[i64; 2]> {
    let seg_len = seg.len_ms();
    if seg_len < min_silence_len || seek_step <= 0 {
        return Vec::new();
    }
    let thresh = silence_threshold(silence_thresh_db, seg.max_possible_amplitude());
    let last_slice_start = seg_len - min_silence_len;
    let mut starts: Vec<i64> = (0..=last_slice_start).step_by(seek_step as usize).collect();
    if last_slice_start % seek_step != 0 {
        starts.push(last_slice_start);
    }
    let silence_starts: Vec<i64> = starts.into_iter().filter(|&i| f64::from(seg.rms_of_slice(i, i + min_silence_len)) <= thresh).collect();
    let Some((&first, rest)) = silence_starts.split_first() else { return Vec::new() };
    let mut ranges = Vec::new();
    let mut prev_i = first;
    let mut range_start = first;
    for &i in rest {
        let continuous = i == prev_i + seek_step;
        let has_gap = i > prev_i + min_silence_len;
        if !continuous && has_gap {
            ranges.push([range_start, prev_i + min_silence_len]);
            range_start = i;
        }
        prev_i = i;
    }
    ranges.push([range_start, prev_i + min_silence_len]);
    ranges
}

/// `pydub.silence.detect_nonsilent`: the complement of [`detect_silence`].
pub fn detect_nonsilent(seg: &PcmSegment, min_silence_len: i64, silence_thresh_db: f64, seek_step: i64) -> Vec<[i64; 2]> {
    let silent = detect_silence(seg, min_silence_len, silence_thresh_db, seek_step);
    let len = seg.len_ms();
    if silent.is_empty() {
        return vec![[0, len]];
    }
    if silent[0] == [0, len] {
        return Vec::new();
    }
    let mut prev_end = 0;
    let mut out = Vec::new();
    for &[start, end] in &silent {
        out.push([prev_end, start]);
        prev_end = end;
    }
    if let Some(&[_, last_end]) = silent.last() {
        if last_end != len {
            out.push([prev_end, len]);
        }
    }
    if out.first() == Some(&[0, 0]) {
        out.remove(0);
    }
    out
}

/// The millisecond ranges `pydub.silence.split_on_silence` cuts (before clamping to the segment):
/// each non-silent range widened by `keep_silence` on both sides, overlaps split at their middle.
pub fn split_on_silence_ranges(
    seg: &PcmSegment,
    min_silence_len: i64,
    silence_thresh_db: f64,
    keep_silence: i64,
    seek_step: i64,
) -> Vec<[i64; 2]> {
    let mut ranges: Vec<[i64; 2]> = detect_nonsilent(seg, min_silence_len, silence_thresh_db, seek_step)
        .into_iter()
        .map(|[s, e]| [s - keep_silence, e + keep_silence])
        .collect();
    for i in 1..ranges.len() {
        let last_end = ranges[i - 1][1];
        let next_start = ranges[i][0];
        if next_start < last_end {
            let mid = (last_end + next_start).div_euclid(2);
            ranges[i - 1][1] = mid;
            ranges[i][0] = mid;
        }
    }
    ranges
}

/// `pydub.silence.split_on_silence(seg, min_silence_len, silence_thresh, keep_silence, seek_step)`.
pub fn split_on_silence(
    seg: &PcmSegment,
    min_silence_len: i64,
    silence_thresh_db: f64,
    keep_silence: i64,
    seek_step: i64,
) -> Vec<PcmSegment> {
    let len = seg.len_ms();
    split_on_silence_ranges(seg, min_silence_len, silence_thresh_db, keep_silence, seek_step)
        .into_iter()
        .map(|[s, e]| seg.slice_ms(Some(s.max(0)), Some(e.min(len))))
        .collect()
}

/// `pydub.silence.detect_leading_silence(sound, silence_threshold, chunk_size)`: milliseconds of
/// leading `chunk_size` windows quieter than the threshold (strictly below).
pub fn detect_leading_silence(seg: &PcmSegment, silence_threshold_db: f64, chunk_size: i64) -> i64 {
    let len = seg.len_ms();
    let chunk = chunk_size.max(1);
    let mut trim = 0;
    while trim < len && dbfs_of(seg.rms_of_slice(trim, trim + chunk), seg.max_possible_amplitude()) < silence_threshold_db {
        trim += chunk;
    }
    trim.min(len)
}

/// F5 1.1.22 `remove_silence_edges(audio, silence_threshold)`: strips leading silence, then the
/// leading silence of the reversed remainder from the end.
pub fn remove_silence_edges(seg: &PcmSegment, silence_threshold_db: f64) -> PcmSegment {
    let start = detect_leading_silence(seg, silence_threshold_db, 10);
    let audio = seg.slice_ms(Some(start), None);
    let end = detect_leading_silence(&audio.reverse(), silence_threshold_db, 10);
    if end > 0 {
        audio.slice_ms(None, Some(audio.len_ms() - end))
    } else {
        audio
    }
}

/// Reference clip limit of `preprocess_ref_audio_text` (ms).
pub const REF_CLIP_MS: i64 = 12_000;

fn accumulate_until_limit(segs: &[PcmSegment]) -> Result<PcmSegment> {
    let mut wave = PcmSegment::silent(0);
    for seg in segs {
        let joined = wave.append(seg)?;
        if wave.len_ms() > 6000 && joined.len_ms() > REF_CLIP_MS {
            break;
        }
        wave = joined;
    }
    Ok(wave)
}

/// The audio half of F5 1.1.22 `preprocess_ref_audio_text` (without the cache and the temp file):
/// 1. split on ≥1000 ms silences at −50 dBFS (keep 1000 ms), append pieces while the result stays
///    ≤ 12 s once past 6 s; 2. if still > 12 s, the same with 100 ms / −40 dBFS; 3. if still > 12 s
///    cut at 12 s; 4. strip edges quieter than −42 dBFS and append 50 ms of silence.
///
/// A fully silent input comes back as 50 ms of silence at 11 025 Hz, as in the reference; callers
/// should reject it (its RMS is 0).
pub fn clip_reference(seg: &PcmSegment) -> Result<PcmSegment> {
    let pieces = split_on_silence(seg, 1000, -50.0, 1000, 10);
    let mut wave = accumulate_until_limit(&pieces)?;
    if wave.len_ms() > REF_CLIP_MS {
        let pieces = split_on_silence(seg, 100, -40.0, 1000, 10);
        wave = accumulate_until_limit(&pieces)?;
    }
    if wave.len_ms() > REF_CLIP_MS {
        wave = wave.slice_ms(None, Some(REF_CLIP_MS));
    }
    remove_silence_edges(&wave, -42.0).append(&PcmSegment::silent(50))
}

/// [`clip_reference`] on decoded audio, returning what `torchaudio.load` reads back from the
/// exported WAV (same channel count; the rate only changes for sources below 11 025 Hz).
pub fn clip_reference_decoded(audio: &DecodedAudio) -> Result<DecodedAudio> {
    let seg = clip_reference(&PcmSegment::from_decoded(audio)?)?;
    let bits = 8 * u16::from(seg.sample_width());
    Ok(DecodedAudio {
        sample_rate: seg.frame_rate(),
        channels: seg.to_float_channels(),
        encoding: SampleEncoding::Int { bits },
        wav_ints: Some(seg.samples().to_vec()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn len_ms_rounds_half_to_even_like_python() {
        // 24 frames at 48 kHz is exactly 0.5 ms → round(0.5) = 0; 72 frames = 1.5 ms → 2.
        let seg = PcmSegment::new(vec![0; 24], 1, 48000, 2).unwrap();
        assert_eq!(seg.len_ms(), 0);
        let seg = PcmSegment::new(vec![0; 72], 1, 48000, 2).unwrap();
        assert_eq!(seg.len_ms(), 2);
    }

    #[test]
    fn rms_truncates_to_integer() {
        // mean square of [3, 4] = 12.5, sqrt = 3.53 → 3
        let seg = PcmSegment::new(vec![3, 4], 1, 8000, 2).unwrap();
        assert_eq!(seg.rms(), 3);
        assert!((seg.dbfs() - 20.0 * (3.0f64 / 32768.0).log10()).abs() < 1e-9);
    }

    #[test]
    fn silent_segment_has_pydub_frame_count() {
        assert_eq!(PcmSegment::silent(50).frame_count(), 551);
        assert_eq!(PcmSegment::silent(0).frame_count(), 0);
    }

    #[test]
    fn ratecv_of_silence_keeps_zeros() {
        let up = ratecv(&[0; 551], 1, 2, 11025, 24000);
        assert!(up.iter().all(|&s| s == 0));
        // 551 frames at 11025 Hz is ≈ 49.98 ms; the 24 kHz result must be ≈ 1199 frames.
        assert!((up.len() as i64 - 1199).abs() <= 2, "{}", up.len());
    }
}
