//! Output formats for synthesized speech: WAV, raw PCM, MP3, Opus in Ogg and FLAC, each as a
//! streaming encoder ([`StreamEncoder`]) whose pieces concatenate into a valid file, and as a
//! whole-file function ([`encode_whole`]) that also writes the sizes a streaming header cannot know.
//!
//! Every format encodes the same 16-bit samples: float input goes through
//! [`f64_to_pcm16`], the rule the WAV writer has always used, before
//! any codec sees it. A format change therefore never changes clipping or rounding, and the lossy
//! encoders are fed exactly what the WAV would hold.
//!
//! Encoders (the crate README says why each was chosen): WAV/PCM written here, FLAC by `flacenc`
//! (pure Rust), MP3 by `rusty_mp3` (pure Rust), Opus by libopus through the `opus` crate, wrapped in
//! Ogg pages by the `ogg` crate. AAC is not offered: no permissively licensed AAC encoder is kept
//! in Rust or C (libfdk-aac's licence grants no patent rights and is not OSI-approved).

mod flac;
mod mp3;
mod opus_ogg;
mod wav;

use std::fmt;
use std::str::FromStr;

use crate::error::{AudioError, Result};
use crate::output::f64_to_pcm16;

pub use flac::FLAC_BLOCK_SIZE;
pub use mp3::{MP3_BITRATE_KBPS_PER_CHANNEL, MP3_SAMPLE_RATES};
pub use opus_ogg::{OGG_SERIAL, OPUS_BITRATE_PER_CHANNEL, OPUS_FRAME_MS, OPUS_SAMPLE_RATES};
pub use wav::{wav_header, WAV_HEADER_LEN, WAV_UNKNOWN_SIZE};

/// An output container/codec. Names follow OpenAI's `response_format` (`wav`, `pcm`, `mp3`,
/// `opus`, `flac`); `pcm` is raw signed 16-bit little-endian samples with no header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AudioFormat {
    /// RIFF WAVE, 16-bit PCM.
    Wav,
    /// Raw signed 16-bit little-endian samples, interleaved, no header (OpenAI's `pcm`).
    Pcm,
    /// MPEG-1/2 Layer III, constant bitrate, with a LAME-style Info tag for gapless decoding.
    Mp3,
    /// Opus in an Ogg container (RFC 7845), 20 ms frames.
    Opus,
    /// FLAC, 16-bit, lossless.
    Flac,
}

/// What every lookup error lists as the known format names.
const KNOWN_NAMES: &str = "wav, pcm, mp3, opus, flac";
/// What every lookup error lists as the known file extensions.
const KNOWN_EXTENSIONS: &str = "wav, wave, pcm, raw, mp3, opus, ogg, oga, flac";
/// Why OpenAI's `aac` is refused by name instead of being reported as unknown.
const AAC_REASON: &str = "no permissively licensed AAC encoder exists for Rust (libfdk-aac's licence grants no \
                          patent rights and is not OSI-approved); use mp3, opus or flac";

impl AudioFormat {
    /// Every format this crate encodes, in OpenAI's documentation order.
    pub const ALL: [AudioFormat; 5] = [AudioFormat::Mp3, AudioFormat::Opus, AudioFormat::Flac, AudioFormat::Wav, AudioFormat::Pcm];

    /// The format by OpenAI `response_format` name (case-insensitive, surrounding spaces ignored).
    /// `aac` is a known OpenAI name this crate cannot encode: it gets
    /// [`AudioError::FormatUnavailable`] saying why, any other unknown name
    /// [`AudioError::UnknownFormat`] listing the known ones.
    pub fn from_name(name: &str) -> Result<Self> {
        match name.trim().to_ascii_lowercase().as_str() {
            "wav" => Ok(Self::Wav),
            "pcm" => Ok(Self::Pcm),
            "mp3" => Ok(Self::Mp3),
            "opus" => Ok(Self::Opus),
            "flac" => Ok(Self::Flac),
            "aac" => Err(AudioError::FormatUnavailable { name: "aac".into(), reason: AAC_REASON }),
            _ => Err(AudioError::UnknownFormat { name: name.to_string(), known: KNOWN_NAMES.into() }),
        }
    }

    /// The format a file name extension asks for (case-insensitive, a leading dot allowed):
    /// `wav`/`wave`, `pcm`/`raw`, `mp3`, `opus`/`ogg`/`oga` (Opus is the only Ogg codec written
    /// here), `flac`. `aac`/`m4a` get [`AudioError::FormatUnavailable`].
    pub fn from_extension(extension: &str) -> Result<Self> {
        let ext = extension.trim().trim_start_matches('.').to_ascii_lowercase();
        match ext.as_str() {
            "wav" | "wave" => Ok(Self::Wav),
            "pcm" | "raw" => Ok(Self::Pcm),
            "mp3" => Ok(Self::Mp3),
            "opus" | "ogg" | "oga" => Ok(Self::Opus),
            "flac" => Ok(Self::Flac),
            "aac" | "m4a" => Err(AudioError::FormatUnavailable { name: ext, reason: AAC_REASON }),
            _ => Err(AudioError::UnknownExtension { extension: extension.to_string(), known: KNOWN_EXTENSIONS.into() }),
        }
    }

    /// The OpenAI `response_format` name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Wav => "wav",
            Self::Pcm => "pcm",
            Self::Mp3 => "mp3",
            Self::Opus => "opus",
            Self::Flac => "flac",
        }
    }

    /// The usual file extension, without a dot.
    pub fn extension(self) -> &'static str {
        // The names double as the conventional extensions.
        self.name()
    }

    /// The `Content-Type` OpenAI's speech endpoint answers with for this format.
    pub fn mime_type(self) -> &'static str {
        match self {
            Self::Wav => "audio/wav",
            Self::Pcm => "audio/pcm",
            Self::Mp3 => "audio/mpeg",
            Self::Opus => "audio/opus",
            Self::Flac => "audio/flac",
        }
    }

    /// Whether decoding gives back exactly the 16-bit samples that were encoded.
    pub fn is_lossless(self) -> bool {
        matches!(self, Self::Wav | Self::Pcm | Self::Flac)
    }
}

impl fmt::Display for AudioFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for AudioFormat {
    type Err = AudioError;
    fn from_str(s: &str) -> Result<Self> {
        Self::from_name(s)
    }
}

/// Float to the 16-bit sample every format encodes: the WAV writer's rule
/// ([`f64_to_pcm16`]), widened from f32 exactly.
pub fn f32_to_pcm16(x: f32) -> i16 {
    f64_to_pcm16(f64::from(x))
}

/// One format's encoder state behind [`StreamEncoder`].
enum Codec {
    Wav(wav::WavStream),
    Pcm,
    Flac(Box<flac::FlacStream>),
    Mp3(Box<mp3::Mp3Stream>),
    Opus(Box<opus_ogg::OpusStream>),
}

/// A streaming encoder: each [`push`](Self::push) returns the bytes that are final so far and
/// [`finish`](Self::finish) the rest; all returned pieces concatenated are a valid file of the
/// format, whatever sizes the pushes had.
///
/// How much a push holds back until more samples arrive (never more than one codec frame):
/// WAV and PCM nothing; FLAC up to [`FLAC_BLOCK_SIZE`] - 1 samples; Opus up to one 20 ms frame;
/// MP3 up to one frame (576 samples at 16–24 kHz) plus the encoder's look-ahead. At 32, 44.1 and
/// 48 kHz `rusty_mp3` assembles its bit reservoir at the end, so MP3 at those rates returns
/// everything from `finish` (still a valid stream; the model's 24 kHz streams frame by frame).
///
/// Headers that depend on the total length cannot be right in a stream: WAV sizes are
/// [`WAV_UNKNOWN_SIZE`], FLAC's STREAMINFO leaves total samples, MD5 and frame sizes as
/// "unknown" (0), and an MP3 stream has no Info tag (so its decoders play the encoder delay and
/// end padding). A writer that can seek puts [`header_fixup`](Self::header_fixup) over the start
/// of the file after `finish`; [`encode_whole`] gives exact headers in memory.
pub struct StreamEncoder {
    format: AudioFormat,
    sample_rate: u32,
    channels: u16,
    codec: Codec,
    /// Samples per channel received so far.
    frames_in: u64,
    finished: bool,
    /// Reused conversion buffer (16-bit samples of the current push).
    pcm: Vec<i16>,
}

/// The largest channel count the encoders are set up for (mono speech, or stereo).
pub const MAX_OUTPUT_CHANNELS: u16 = 2;

impl StreamEncoder {
    /// An encoder for `channels` (1 or 2) interleaved channels at `sample_rate` Hz. Rates a codec
    /// cannot carry are refused here, before any audio is produced: MP3 takes the nine MPEG
    /// Layer III rates ([`MP3_SAMPLE_RATES`]), Opus 8, 12, 16, 24 or 48 kHz
    /// ([`OPUS_SAMPLE_RATES`]), FLAC up to 96 kHz (`flacenc`'s limit); WAV/PCM any rate up to
    /// 1 MHz.
    pub fn new(format: AudioFormat, sample_rate: u32, channels: u16) -> Result<Self> {
        Self::with_mode(format, sample_rate, channels, false)
    }

    /// [`new`](Self::new) for one channel, the model's output.
    pub fn mono(format: AudioFormat, sample_rate: u32) -> Result<Self> {
        Self::new(format, sample_rate, 1)
    }

    /// `whole_file`: the caller wants one file at `finish` (MP3 then keeps its Info tag).
    fn with_mode(format: AudioFormat, sample_rate: u32, channels: u16, whole_file: bool) -> Result<Self> {
        if channels == 0 || channels > MAX_OUTPUT_CHANNELS {
            return Err(AudioError::EncoderSetting {
                format: format.name().into(),
                what: "channel count",
                value: u64::from(channels),
                supported: format!("1 to {MAX_OUTPUT_CHANNELS}"),
            });
        }
        crate::decode::check_rate(sample_rate, "output sample rate")?;
        let codec = match format {
            AudioFormat::Wav => Codec::Wav(wav::WavStream::new(sample_rate, channels)),
            AudioFormat::Pcm => Codec::Pcm,
            AudioFormat::Flac => Codec::Flac(Box::new(flac::FlacStream::new(sample_rate, channels)?)),
            AudioFormat::Mp3 => Codec::Mp3(Box::new(mp3::Mp3Stream::new(sample_rate, channels, whole_file)?)),
            AudioFormat::Opus => Codec::Opus(Box::new(opus_ogg::OpusStream::new(sample_rate, channels)?)),
        };
        Ok(Self { format, sample_rate, channels, codec, frames_in: 0, finished: false, pcm: Vec::new() })
    }

    /// The format this encoder writes.
    pub fn format(&self) -> AudioFormat {
        self.format
    }

    /// The rate it encodes at (samples are not resampled).
    pub fn sample_rate(&self) -> u32 {
        self.sample_rate
    }

    /// Channels per frame of the interleaved input.
    pub fn channels(&self) -> u16 {
        self.channels
    }

    /// Samples per channel pushed so far.
    pub fn frames_pushed(&self) -> u64 {
        self.frames_in
    }

    /// Encodes interleaved float samples (nominal range [-1, 1]; beyond it they clip, NaN is
    /// silence) and returns the bytes that are final so far (possibly none). The length must be a
    /// whole number of frames (a multiple of the channel count).
    pub fn push(&mut self, samples: &[f32]) -> Result<Vec<u8>> {
        self.check_push(samples.len())?;
        let mut pcm = std::mem::take(&mut self.pcm);
        pcm.clear();
        pcm.extend(samples.iter().map(|&x| f32_to_pcm16(x)));
        let out = self.push_pcm16_inner(&pcm);
        self.pcm = pcm;
        out
    }

    /// [`push`](Self::push) for float64 samples, as [`crate::join_chunks`] produces them: each is
    /// converted by [`f64_to_pcm16`] directly, so the WAV is the one [`crate::write_wav_pcm16`]
    /// writes to the bit (rounding to f32 first could move a sample by one step).
    pub fn push_f64(&mut self, samples: &[f64]) -> Result<Vec<u8>> {
        self.check_push(samples.len())?;
        let mut pcm = std::mem::take(&mut self.pcm);
        pcm.clear();
        pcm.extend(samples.iter().map(|&x| f64_to_pcm16(x)));
        let out = self.push_pcm16_inner(&pcm);
        self.pcm = pcm;
        out
    }

    /// [`push`](Self::push) for samples already in 16 bits.
    pub fn push_pcm16(&mut self, samples: &[i16]) -> Result<Vec<u8>> {
        self.check_push(samples.len())?;
        self.push_pcm16_inner(samples)
    }

    fn check_push(&self, len: usize) -> Result<()> {
        if self.finished {
            return Err(AudioError::EncoderFinished { format: self.format.name().into() });
        }
        if !len.is_multiple_of(usize::from(self.channels)) {
            return Err(AudioError::PartialFrame { format: self.format.name().into(), len, channels: self.channels });
        }
        Ok(())
    }

    fn push_pcm16_inner(&mut self, pcm: &[i16]) -> Result<Vec<u8>> {
        let out = match &mut self.codec {
            Codec::Wav(w) => Ok(w.push(pcm)),
            Codec::Pcm => Ok(wav::pcm16_le_bytes(pcm)),
            Codec::Flac(f) => f.push(pcm),
            Codec::Mp3(m) => m.push(pcm),
            Codec::Opus(o) => o.push(pcm),
        }?;
        self.frames_in += (pcm.len() / usize::from(self.channels)) as u64;
        Ok(out)
    }

    /// Ends the stream: encodes what is held back (zero-padded to a codec frame where the format
    /// needs whole frames, with the padding marked for removal where the format can say so) and
    /// returns the last bytes. Afterwards `push` and `finish` fail with
    /// [`AudioError::EncoderFinished`].
    pub fn finish(&mut self) -> Result<Vec<u8>> {
        if self.finished {
            return Err(AudioError::EncoderFinished { format: self.format.name().into() });
        }
        self.finished = true;
        match &mut self.codec {
            // A WAV stream with no samples still needs its header to be a file.
            Codec::Wav(w) => Ok(w.finish()),
            Codec::Pcm => Ok(Vec::new()),
            Codec::Flac(f) => f.finish(),
            Codec::Mp3(m) => m.finish(),
            Codec::Opus(o) => o.finish(),
        }
    }

    /// After [`finish`](Self::finish): the bytes to write over the start of the file (offset 0)
    /// so that its header states what a stream could not know — WAV's RIFF and data sizes, FLAC's
    /// STREAMINFO (total samples, MD5, frame sizes). `None` before `finish`; for PCM (no header);
    /// for Opus (Ogg's granule positions are exact as streamed); for MP3 (a stream has no Info tag
    /// to complete, see [`encode_whole`] for a gapless file); and for a WAV too long for 32-bit
    /// sizes (the "unknown" sizes then stay, as ffmpeg writes them).
    pub fn header_fixup(&self) -> Option<Vec<u8>> {
        if !self.finished {
            return None;
        }
        match &self.codec {
            Codec::Wav(w) => w.final_header(),
            Codec::Flac(f) => f.final_header(),
            Codec::Pcm | Codec::Mp3(_) | Codec::Opus(_) => None,
        }
    }
}

/// Encodes a whole signal (interleaved f32) into one file with exact headers: the streaming
/// encoder's output with [`StreamEncoder::header_fixup`] applied, and for MP3 the completed Info
/// tag in front (so gapless decoders give back exactly the input's length).
pub fn encode_whole(format: AudioFormat, samples: &[f32], sample_rate: u32, channels: u16) -> Result<Vec<u8>> {
    let mut enc = StreamEncoder::with_mode(format, sample_rate, channels, true)?;
    let mut out = enc.push(samples)?;
    out.extend(enc.finish()?);
    apply_fixup(&enc, &mut out);
    Ok(out)
}

/// [`encode_whole`] for float64 samples (see [`StreamEncoder::push_f64`]).
pub fn encode_whole_f64(format: AudioFormat, samples: &[f64], sample_rate: u32, channels: u16) -> Result<Vec<u8>> {
    let mut enc = StreamEncoder::with_mode(format, sample_rate, channels, true)?;
    let mut out = enc.push_f64(samples)?;
    out.extend(enc.finish()?);
    apply_fixup(&enc, &mut out);
    Ok(out)
}

fn apply_fixup(enc: &StreamEncoder, out: &mut [u8]) {
    if let Some(header) = enc.header_fixup() {
        // The fixup always has the length of what it replaces, which the stream wrote first.
        if let Some(head) = out.get_mut(..header.len()) {
            head.copy_from_slice(&header);
        }
    }
}
