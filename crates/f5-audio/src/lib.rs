//! Audio front end and back end of the F5-TTS engine, as plain DSP on `&[f32]`:
//! decoding reference audio ([`decode`]), torchaudio-compatible resampling ([`resample`](mod@resample)),
//! loudness normalisation ([`level`]), the Vocos log-mel spectrogram ([`mel`]), pydub-compatible
//! silence trimming of references ([`silence`]), chunk cross-fading plus WAV writing
//! ([`output`]), and streaming output in WAV, PCM, MP3, Opus and FLAC ([`encode`]). Each piece
//! that has a Python counterpart reproduces the official pipeline's numbers, not just its idea.

#![warn(missing_docs)]

pub mod decode;
pub mod encode;
/// The crate's one error type.
pub mod error;
pub mod level;
pub mod mel;
pub mod output;
pub mod resample;
pub mod silence;

pub use decode::{decode_bytes, decode_file, mix_to_mono, DecodedAudio, SampleEncoding};
pub use encode::{encode_whole, encode_whole_f64, AudioFormat, StreamEncoder};
pub use error::{AudioError, Result};
pub use level::{limit_peak, normalize_rms, rms, RmsNormalization, TARGET_RMS};
pub use mel::{log_mel_spectrogram, mel_frame_count, MelSpectrogram};
pub use output::{cross_fade_append, join_chunks, write_wav_f32, write_wav_pcm16};
pub use resample::{resample, resample_to_24k, SincResampler};
pub use silence::{clip_reference, clip_reference_decoded, PcmSegment};

/// The model's sample rate.
pub const TARGET_SAMPLE_RATE: u32 = 24_000;

/// F5's reference conditioning up to the mel: mono mix, RMS raised to 0.1 if below, resample to
/// 24 kHz. Returns the 24 kHz wave and the normalisation to undo on the output.
pub fn prepare_reference(audio: &DecodedAudio) -> Result<(Vec<f32>, RmsNormalization)> {
    let mut mono = audio.to_mono();
    let norm = normalize_rms(&mut mono, TARGET_RMS);
    let wave = resample_to_24k(&mono, audio.sample_rate)?;
    Ok((wave, norm))
}
