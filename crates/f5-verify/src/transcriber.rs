//! What the listen-back gate needs from a transcriber, and the audio it is sent.
//!
//! The HTTP client for whisper.cpp's server API is [`crate::Transcriber`] (feature
//! `http-transcriber`, on by default); everything here builds without a network stack.

use std::io::Cursor;

use crate::VerifyError;

/// A clip longer than this is refused before upload: a TTS chunk is seconds long, and the limit
/// keeps a bug upstream from sending hours of audio over the network.
pub const MAX_CLIP_SECONDS: u64 = 600;

/// Anything that turns speech into text; the gate only needs this. [`crate::Transcriber`] is the
/// HTTP one; tests and other back ends can supply their own.
pub trait Transcribe {
    /// What was said in `samples` (mono, `rate` Hz, nominally in [-1, 1]).
    /// `Ok(None)` means the transcriber gave no usable answer (down, busy, empty), so the audio
    /// is unchecked; `Err` means the request itself is wrong and retrying will not help.
    fn transcribe(&self, samples: &[f32], rate: u32) -> Result<Option<String>, VerifyError>;

    /// Where the transcriber is, for status lines.
    fn describe(&self) -> String;
}

/// A 16-bit PCM mono wav of `samples`, clamped to [-1, 1].
pub fn wav_bytes(samples: &[f32], rate: u32) -> Result<Vec<u8>, VerifyError> {
    if rate == 0 {
        return Err(VerifyError::Audio("sample rate is 0".into()));
    }
    if samples.len() as u64 > MAX_CLIP_SECONDS * u64::from(rate) {
        return Err(VerifyError::Audio(format!(
            "{} samples at {rate} Hz is longer than the {MAX_CLIP_SECONDS} s a clip may be",
            samples.len()
        )));
    }
    if let Some(index) = samples.iter().position(|s| !s.is_finite()) {
        return Err(VerifyError::Audio(format!("sample {index} is not a finite number")));
    }
    let spec = hound::WavSpec { channels: 1, sample_rate: rate, bits_per_sample: 16, sample_format: hound::SampleFormat::Int };
    let mut cursor = Cursor::new(Vec::with_capacity(44 + samples.len() * 2));
    {
        let mut writer = hound::WavWriter::new(&mut cursor, spec)?;
        for &s in samples {
            writer.write_sample((s.clamp(-1.0, 1.0) * 32767.0).round() as i16)?;
        }
        writer.finalize()?;
    }
    Ok(cursor.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wav_is_16_bit_mono_and_clamped() {
        let bytes = wav_bytes(&[0.0, 0.5, -1.5, 2.0], 24_000).unwrap_or_default();
        let mut reader = hound::WavReader::new(Cursor::new(bytes)).expect("a wav we just wrote");
        let spec = reader.spec();
        assert_eq!((spec.channels, spec.sample_rate, spec.bits_per_sample), (1, 24_000, 16));
        let samples: Vec<i16> = reader.samples::<i16>().map(|s| s.unwrap_or(i16::MIN)).collect();
        assert_eq!(samples, [0, 16384, -32767, 32767]);
    }

    #[test]
    fn bad_audio_is_refused() {
        assert!(matches!(wav_bytes(&[0.0], 0), Err(VerifyError::Audio(_))));
        assert!(matches!(wav_bytes(&[0.0, f32::NAN], 16_000), Err(VerifyError::Audio(_))));
        assert!(matches!(wav_bytes(&vec![0.0; 601 * 10], 10), Err(VerifyError::Audio(_))));
    }
}
