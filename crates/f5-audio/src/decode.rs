//! Decoding audio files to float samples the way `torchaudio.load` returns them, and to the
//! integer PCM view pydub works on.
//!
//! WAV goes through hound (integer PCM 8/16/24/32-bit, 32-bit float, WAVE_FORMAT_EXTENSIBLE);
//! anything hound cannot read, and MP3/FLAC/Ogg Vorbis, goes through symphonia. Integer samples
//! become `x / 2^(bits-1)` (8-bit WAV is unsigned and is centred first), which is what torchaudio's
//! backends produce: the scale is a power of two, so the conversion is exact.

use std::io::Cursor;
use std::path::Path;

use symphonia::core::audio::GenericAudioBufferRef;
use symphonia::core::codecs::audio::AudioDecoderOptions;
use symphonia::core::errors::Error as SymphoniaError;
use symphonia::core::formats::probe::Hint;
use symphonia::core::formats::{FormatOptions, TrackType};
use symphonia::core::io::MediaSourceStream;
use symphonia::core::meta::MetadataOptions;

use crate::error::{AudioError, Result};
use crate::resample::MAX_SAMPLE_RATE;

/// More channels than this in a reference clip means a corrupt header, not real audio.
pub const MAX_CHANNELS: u32 = 64;
/// Upper bound on decoded samples (all channels) so a lying header or a decompression bomb
/// cannot exhaust memory: 2^30 samples is over 6 hours of 48 kHz stereo.
pub const MAX_DECODED_SAMPLES: u64 = 1 << 30;

/// How the samples were stored in the source file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SampleEncoding {
    /// Signed (or, for 8-bit WAV, unsigned) integers of this many bits.
    Int {
        /// Bits per sample (8, 16, 24 or 32).
        bits: u16,
    },
    /// IEEE floats of this many bits.
    Float {
        /// Bits per sample (32 or 64).
        bits: u16,
    },
    /// A lossy codec (MP3, Vorbis) whose decoder yields floats.
    Lossy,
}

/// Decoded audio, one `Vec` per channel, samples in [-1, 1] for integer sources.
#[derive(Debug, Clone)]
pub struct DecodedAudio {
    /// Samples per second, as the file declared.
    pub sample_rate: u32,
    /// The samples, one `Vec` per channel, all of one length.
    pub channels: Vec<Vec<f32>>,
    /// How the file stored them (integer sources round-trip exactly; see `wav_ints`).
    pub encoding: SampleEncoding,
    /// Integer samples exactly as stored, interleaved, for integer WAV sources. pydub's silence
    /// logic needs the integers (its RMS truncates to an integer).
    pub(crate) wav_ints: Option<Vec<i32>>,
}

impl DecodedAudio {
    /// Channels in the file (1 for mono).
    pub fn channel_count(&self) -> usize {
        self.channels.len()
    }

    /// Frames (samples per channel).
    pub fn len(&self) -> usize {
        self.channels.first().map_or(0, Vec::len)
    }

    /// Whether there is no sample at all.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `torch.mean(audio, dim=0)`: the per-frame mean over channels (a copy for mono).
    pub fn to_mono(&self) -> Vec<f32> {
        mix_to_mono(&self.channels)
    }
}

/// Mean over channels per frame. With two channels this is `(a + b) / 2` rounded once, which is
/// what torch's float32 mean yields.
pub fn mix_to_mono(channels: &[Vec<f32>]) -> Vec<f32> {
    match channels {
        [] => Vec::new(),
        [only] => only.clone(),
        _ => {
            let n = channels.iter().map(Vec::len).min().unwrap_or(0);
            let count = channels.len() as f64;
            (0..n)
                .map(|i| {
                    let sum: f64 = channels.iter().map(|c| f64::from(c[i])).sum();
                    (sum / count) as f32
                })
                .collect()
        }
    }
}

/// Largest audio file [`decode_file`] reads: far beyond any real recording, small enough that a
/// wrong path (a disk image, `/dev/zero` behind a symlink) fails at once instead of filling memory.
pub const MAX_FILE_BYTES: u64 = 1 << 30;

/// Reads and decodes an audio file (a regular file of at most [`MAX_FILE_BYTES`]).
pub fn decode_file(path: &Path) -> Result<DecodedAudio> {
    let bytes = read_regular_file(path, MAX_FILE_BYTES)?;
    let ext = path.extension().and_then(|e| e.to_str());
    decode_bytes(&bytes, &path.display().to_string(), ext)
}

/// How much audio to decode, chosen by what the audio is for. Compressed audio can expand a
/// thousandfold (a minute of FLAC holding one value is a few kilobytes), so the byte size of an
/// upload says nothing about its decoded size; this bounds the decoded size itself.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DecodeLimit {
    /// Frames beyond this many seconds at the file's own rate are not decoded.
    pub max_seconds: f64,
    /// Samples of all channels together, whatever the rate: bounds the memory of a file with a
    /// very high rate or many channels (4 bytes each).
    pub max_samples: u64,
}

impl DecodeLimit {
    /// A voice reference. The model hears at most 12 s (the silence-aware clip looks a little
    /// further for a pause), so 30 s is plenty; 16 Mi samples is 64 MiB of f32, 30 s of 48 kHz
    /// audio in 11 channels.
    pub const REFERENCE: DecodeLimit = DecodeLimit { max_seconds: 30.0, max_samples: 16 << 20 };

    /// Frames to keep of audio at `rate` with `channels` channels.
    fn frames(&self, rate: u32, channels: usize) -> u64 {
        let by_time = (self.max_seconds.max(0.0) * f64::from(rate)).ceil() as u64;
        let by_memory = self.max_samples / channels.max(1) as u64;
        by_time.min(by_memory).max(1)
    }
}

/// Audio decoded under a [`DecodeLimit`].
#[derive(Debug, Clone)]
pub struct LimitedAudio {
    /// What was decoded (all of it, or the beginning up to the limit).
    pub audio: DecodedAudio,
    /// The file held more than the limit; `audio` is its beginning.
    pub cut: bool,
}

/// Decodes at most `limit` of an in-memory file, allocating no more than the limit allows
/// whatever its header claims. See [`decode_bytes`] for `what` and `extension`.
pub fn decode_bytes_limited(bytes: &[u8], what: &str, extension: Option<&str>, limit: DecodeLimit) -> Result<LimitedAudio> {
    if bytes.is_empty() {
        return Err(AudioError::EmptyInput { what: what.to_string() });
    }
    check_embedded_waves(bytes, what)?;
    let decoded = if is_riff_wave(bytes) && !is_streamed_wave(bytes) {
        match decode_wav_hound(bytes, what, Some(limit)) {
            Ok(d) => d,
            Err(AudioError::UnsupportedFormat { .. }) => decode_symphonia(bytes, what, Some("wav"), Some(limit))?,
            Err(e) => return Err(e),
        }
    } else {
        decode_symphonia(bytes, what, extension, Some(limit))?
    };
    validate(&decoded.audio, what)?;
    Ok(decoded)
}

/// Reads a file that must be a regular file of at most `max_bytes`. A FIFO or a device would
/// block or never end (`/dev/zero`), so they are refused before they are opened, and the read
/// itself stops one byte past the limit even if the file grows meanwhile.
pub fn read_regular_file(path: &Path, max_bytes: u64) -> Result<Vec<u8>> {
    use std::io::Read;
    let io = |source: std::io::Error| AudioError::Io { path: path.to_path_buf(), source };
    let meta = std::fs::metadata(path).map_err(io)?;
    if !meta.is_file() {
        return Err(io(std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a regular file (a directory, FIFO or device)")));
    }
    let too_big = |len: u64| {
        io(std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("{len} bytes or more; the limit is {max_bytes} bytes")))
    };
    if meta.len() > max_bytes {
        return Err(too_big(meta.len()));
    }
    let file = std::fs::File::open(path).map_err(io)?;
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(max_bytes.saturating_add(1)).read_to_end(&mut bytes).map_err(io)?;
    if bytes.len() as u64 > max_bytes {
        return Err(too_big(bytes.len() as u64));
    }
    Ok(bytes)
}

fn is_riff_wave(bytes: &[u8]) -> bool {
    bytes.len() >= 12 && &bytes[0..4] == b"RIFF" && &bytes[8..12] == b"WAVE"
}

/// Refuses input holding a WAV header whose `fmt ` chunk declares a channel count no decoder here
/// accepts, before any decoder reads it: symphonia's RIFF reader multiplies the channel count by
/// the sample size in 16 bits and overflows (a panic in checked builds) at 16384 channels or
/// more — an input the fuzzer found. symphonia's probe looks for a format's marker anywhere near
/// the start (that input is an MP3 tag with a RIFF header further in), so every `RIFF….WAVE` in
/// the bytes is checked.
fn check_embedded_waves(bytes: &[u8], what: &str) -> Result<()> {
    let mut from = 0;
    while let Some(found) = bytes[from..].windows(4).position(|w| w == b"RIFF") {
        let at = from + found;
        if bytes.get(at + 8..at + 12) == Some(&b"WAVE"[..]) {
            check_wave_channels(&bytes[at..], what)?;
        }
        from = at + 4;
    }
    Ok(())
}

/// The channel count of one WAV's `fmt ` chunk (see [`check_embedded_waves`]). Only the chunk
/// headers are walked, each bounded by the input.
fn check_wave_channels(bytes: &[u8], what: &str) -> Result<()> {
    let mut at = 12usize;
    while let Some(header) = bytes.get(at..at + 8) {
        let size = u32::from_le_bytes([header[4], header[5], header[6], header[7]]) as usize;
        if &header[0..4] == b"fmt " {
            if let Some(ch) = bytes.get(at + 10..at + 12) {
                let channels = u16::from_le_bytes([ch[0], ch[1]]) as u32;
                if channels == 0 || channels > MAX_CHANNELS {
                    return Err(AudioError::BadChannelCount { what: what.to_string(), channels, max: MAX_CHANNELS });
                }
            }
            return Ok(());
        }
        // Chunks are padded to an even size.
        at = match at.checked_add(8).and_then(|a| a.checked_add(size)).and_then(|a| a.checked_add(size & 1)) {
            Some(next) => next,
            None => return Ok(()),
        };
    }
    Ok(())
}

/// A WAV written as a stream (ffmpeg to a pipe, streaming TTS servers, [`crate::encode`]) states
/// its RIFF size as 0xFFFFFFFF, "until the end". hound takes the sizes literally and refuses the
/// file; symphonia reads such files to their end.
fn is_streamed_wave(bytes: &[u8]) -> bool {
    bytes.get(4..8) == Some(&[0xff; 4][..])
}

/// Decodes an in-memory file. `what` names it in errors; `extension` is a format hint.
pub fn decode_bytes(bytes: &[u8], what: &str, extension: Option<&str>) -> Result<DecodedAudio> {
    if bytes.is_empty() {
        return Err(AudioError::EmptyInput { what: what.to_string() });
    }
    check_embedded_waves(bytes, what)?;
    let decoded = if is_riff_wave(bytes) && !is_streamed_wave(bytes) {
        match decode_wav_hound(bytes, what, None) {
            Ok(d) => d.audio,
            // hound refuses some valid layouts (64-bit float, odd chunk orders); symphonia may not.
            Err(AudioError::UnsupportedFormat { .. }) => decode_symphonia(bytes, what, Some("wav"), None)?.audio,
            Err(e) => return Err(e),
        }
    } else {
        decode_symphonia(bytes, what, extension, None)?.audio
    };
    validate(&decoded, what)?;
    Ok(decoded)
}

fn validate(d: &DecodedAudio, what: &str) -> Result<()> {
    let channels = d.channels.len() as u32;
    if channels == 0 || channels > MAX_CHANNELS {
        return Err(AudioError::BadChannelCount { what: what.to_string(), channels, max: MAX_CHANNELS });
    }
    check_rate(d.sample_rate, what)?;
    if d.is_empty() {
        return Err(AudioError::NoSamples { what: what.to_string() });
    }
    let frames = d.len();
    for (c, ch) in d.channels.iter().enumerate() {
        if ch.len() != frames {
            return Err(AudioError::ChannelMismatch {
                detail: format!("{what}: channel {c} has {} samples, channel 0 has {frames}", ch.len()),
            });
        }
        if let Some(i) = ch.iter().position(|x| !x.is_finite()) {
            return Err(AudioError::NonFiniteSample { what: format!("{what} (channel {c})"), index: i });
        }
    }
    Ok(())
}

pub(crate) fn check_rate(rate: u32, what: &str) -> Result<()> {
    if rate == 0 || rate > MAX_SAMPLE_RATE {
        return Err(AudioError::BadSampleRate { what: what.to_string(), rate: u64::from(rate), max: MAX_SAMPLE_RATE });
    }
    Ok(())
}

fn hound_error(e: hound::Error, what: &str) -> AudioError {
    match e {
        hound::Error::Unsupported => {
            AudioError::UnsupportedFormat { what: what.to_string(), detail: "hound cannot read this WAV layout".into() }
        }
        hound::Error::FormatError(m) if m.contains("zero channels") => {
            AudioError::BadChannelCount { what: what.to_string(), channels: 0, max: MAX_CHANNELS }
        }
        other => AudioError::NotAudio { what: what.to_string(), detail: other.to_string() },
    }
}

fn decode_wav_hound(bytes: &[u8], what: &str, limit: Option<DecodeLimit>) -> Result<LimitedAudio> {
    let reader = hound::WavReader::new(Cursor::new(bytes)).map_err(|e| hound_error(e, what))?;
    let spec = reader.spec();
    let n_ch = u32::from(spec.channels);
    if n_ch == 0 || n_ch > MAX_CHANNELS {
        return Err(AudioError::BadChannelCount { what: what.to_string(), channels: n_ch, max: MAX_CHANNELS });
    }
    check_rate(spec.sample_rate, what)?;
    let n_ch = n_ch as usize;
    // The header's length is only a claim: it sizes nothing beyond what the bytes can hold.
    let claimed = u64::from(reader.duration()).min(bytes.len() as u64);
    let keep_frames = limit.map_or(u64::MAX, |l| l.frames(spec.sample_rate, n_ch));
    let keep_samples = keep_frames.saturating_mul(n_ch as u64).min(usize::MAX as u64) as usize;
    let cut = claimed > keep_frames;
    let per_channel = claimed.min(keep_frames) as usize;
    let mut channels: Vec<Vec<f32>> = (0..n_ch).map(|_| Vec::with_capacity(per_channel)).collect();
    let mut ints = None;
    let encoding = match spec.sample_format {
        hound::SampleFormat::Float => {
            if spec.bits_per_sample != 32 {
                return Err(AudioError::UnsupportedFormat {
                    what: what.to_string(),
                    detail: format!("{}-bit float WAV", spec.bits_per_sample),
                });
            }
            for (i, s) in reader.into_samples::<f32>().take(keep_samples).enumerate() {
                let s = s.map_err(|e| hound_error(e, what))?;
                channels[i % n_ch].push(s);
            }
            SampleEncoding::Float { bits: 32 }
        }
        hound::SampleFormat::Int => {
            let bits = spec.bits_per_sample;
            if !(matches!(bits, 8 | 16 | 24 | 32)) {
                return Err(AudioError::UnsupportedFormat { what: what.to_string(), detail: format!("{bits}-bit integer WAV") });
            }
            // Power-of-two scale: exact in f32 for every bit depth.
            let scale = 1.0f64 / f64::from(1u32 << (bits - 1));
            let mut raw = Vec::with_capacity(per_channel.saturating_mul(n_ch));
            for (i, s) in reader.into_samples::<i32>().take(keep_samples).enumerate() {
                let s = s.map_err(|e| hound_error(e, what))?;
                channels[i % n_ch].push((f64::from(s) * scale) as f32);
                raw.push(s);
            }
            ints = Some(raw);
            SampleEncoding::Int { bits }
        }
    };
    // A truncated final frame (fewer samples than channels) is dropped, as decoders do.
    let frames = channels.iter().map(Vec::len).min().unwrap_or(0);
    for ch in &mut channels {
        ch.truncate(frames);
    }
    if let Some(raw) = ints.as_mut() {
        raw.truncate(frames * n_ch);
    }
    Ok(LimitedAudio { audio: DecodedAudio { sample_rate: spec.sample_rate, channels, encoding, wav_ints: ints }, cut })
}

fn not_audio(what: &str, e: SymphoniaError) -> AudioError {
    AudioError::NotAudio { what: what.to_string(), detail: e.to_string() }
}

fn decode_symphonia(bytes: &[u8], what: &str, extension: Option<&str>, limit: Option<DecodeLimit>) -> Result<LimitedAudio> {
    let mss = MediaSourceStream::new(Box::new(Cursor::new(bytes.to_vec())), Default::default());
    let mut hint = Hint::new();
    if let Some(ext) = extension {
        hint.with_extension(ext);
    }
    let mut format = symphonia::default::get_probe()
        .probe(&hint, mss, FormatOptions::default(), MetadataOptions::default())
        .map_err(|e| not_audio(what, e))?;
    let track = format
        .default_track(TrackType::Audio)
        .ok_or_else(|| AudioError::NotAudio { what: what.to_string(), detail: "no audio track".into() })?;
    let track_id = track.id;
    let params = track
        .codec_params
        .as_ref()
        .and_then(|p| p.audio())
        .ok_or_else(|| AudioError::NotAudio { what: what.to_string(), detail: "track has no audio parameters".into() })?
        .clone();
    let mut decoder = symphonia::default::get_codecs()
        .make_audio_decoder(&params, &AudioDecoderOptions::default())
        .map_err(|e| AudioError::UnsupportedFormat { what: what.to_string(), detail: e.to_string() })?;

    let mut channels: Vec<Vec<f32>> = Vec::new();
    let mut rate = params.sample_rate.unwrap_or(0);
    let mut encoding = SampleEncoding::Lossy;
    let mut total: u64 = 0;
    let mut interleaved: Vec<f32> = Vec::new();
    let mut keep_frames = u64::MAX;
    let mut cut = false;
    loop {
        let packet = match format.next_packet() {
            Ok(Some(p)) => p,
            Ok(None) => break,
            // A truncated stream ends the audio, like ffmpeg does; other errors are real.
            Err(SymphoniaError::IoError(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => break,
            Err(e) => return Err(not_audio(what, e)),
        };
        if packet.track_id != track_id {
            continue;
        }
        let buf = match decoder.decode(&packet) {
            Ok(b) => b,
            // Corrupt frames are skipped (ffmpeg conceals them too).
            Err(SymphoniaError::DecodeError(_)) => continue,
            Err(e) => return Err(not_audio(what, e)),
        };
        let n_ch = buf.spec().channels().count();
        if n_ch == 0 || n_ch as u32 > MAX_CHANNELS {
            return Err(AudioError::BadChannelCount { what: what.to_string(), channels: n_ch as u32, max: MAX_CHANNELS });
        }
        if channels.is_empty() {
            channels = vec![Vec::new(); n_ch];
            rate = buf.spec().rate();
            encoding = encoding_of(&buf, &params);
            if let Some(l) = limit {
                check_rate(rate, what)?;
                keep_frames = l.frames(rate, n_ch);
            }
        } else if channels.len() != n_ch {
            return Err(AudioError::ChannelMismatch {
                detail: format!("{what}: channel count changed from {} to {n_ch} mid-stream", channels.len()),
            });
        }
        total += buf.samples_interleaved() as u64;
        if total > MAX_DECODED_SAMPLES {
            return Err(AudioError::TooLong { what: what.to_string(), samples: total, limit: MAX_DECODED_SAMPLES });
        }
        interleaved.clear();
        buf.copy_to_vec_interleaved(&mut interleaved);
        // Only as many frames as the limit leaves room for are kept; the rest of the stream is
        // not decoded at all.
        let have = channels.first().map_or(0, Vec::len) as u64;
        let room = keep_frames.saturating_sub(have).min(usize::MAX as u64) as usize;
        let take = room.saturating_mul(n_ch).min(interleaved.len());
        for (i, &s) in interleaved.iter().take(take).enumerate() {
            channels[i % n_ch].push(s);
        }
        if take < interleaved.len() {
            cut = true;
            break;
        }
    }
    if channels.is_empty() {
        return Err(AudioError::NoSamples { what: what.to_string() });
    }
    Ok(LimitedAudio { audio: DecodedAudio { sample_rate: rate, channels, encoding, wav_ints: None }, cut })
}

fn encoding_of(buf: &GenericAudioBufferRef<'_>, params: &symphonia::core::codecs::audio::AudioCodecParameters) -> SampleEncoding {
    let bits = params.bits_per_sample.map(|b| b as u16);
    match buf {
        GenericAudioBufferRef::F32(_) | GenericAudioBufferRef::F64(_) => match bits {
            Some(b) if b == 32 || b == 64 => SampleEncoding::Float { bits: b },
            _ => SampleEncoding::Lossy,
        },
        GenericAudioBufferRef::U8(_) | GenericAudioBufferRef::S8(_) => SampleEncoding::Int { bits: bits.unwrap_or(8) },
        GenericAudioBufferRef::U16(_) | GenericAudioBufferRef::S16(_) => SampleEncoding::Int { bits: bits.unwrap_or(16) },
        GenericAudioBufferRef::U24(_) | GenericAudioBufferRef::S24(_) => SampleEncoding::Int { bits: bits.unwrap_or(24) },
        GenericAudioBufferRef::U32(_) | GenericAudioBufferRef::S32(_) => SampleEncoding::Int { bits: bits.unwrap_or(32) },
    }
}
