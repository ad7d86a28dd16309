//! A voice: the reference recording prepared exactly as the reference implementation prepares
//! it, plus its transcript.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::path::Path;
use std::sync::{Arc, Mutex};

use f5_audio::level::RmsNormalization;
use f5_audio::DecodedAudio;

use crate::SynthError;

/// Below this much audio (after trimming) a reference carries too little voice to clone.
pub const MIN_REFERENCE_SECONDS: f64 = 0.5;

/// A reference recording ready for the model.
#[derive(Debug, Clone)]
pub struct Voice {
    /// The transcript as the model reads it before the new text: sentence end fixed and, for a
    /// Latin ending, the extra space — so the model sees `"<ref>.  <gen>"`.
    pub model_text: String,
    /// The transcript after the sentence-end fix only: the chunk budget counts these bytes.
    pub fixed_transcript: String,
    /// The clipped recording at 24 kHz, mono, loudness-normalised.
    pub wave: Vec<f32>,
    /// Its log-mel `[frames, 100]`.
    pub mel: Vec<f32>,
    /// Frames of `mel`: the part of every chunk's frames the recording takes.
    pub mel_frames: usize,
    /// How the loudness was changed, to give the caller their own loudness back.
    pub loudness: RmsNormalization,
    /// Duration of the clipped recording at its own rate, which sets the chunk budget.
    pub clip_seconds: f64,
    /// Set when the ≤ 12 s rule (or the decode limit) left speech of the recording out, so a
    /// transcript of the whole recording says more than the model hears.
    pub clipped: Option<Clipped>,
}

/// Speech a reference lost to the ≤ 12 s rule.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct Clipped {
    /// Seconds of sound (above −50 dBFS) in the recording as read.
    pub speech_seconds: f64,
    /// Seconds of sound in the part that is kept.
    pub kept_speech_seconds: f64,
    /// Seconds of audio kept (what the model is conditioned on).
    pub kept_seconds: f64,
    /// The file was longer than the decode limit and only its beginning was read at all.
    pub file_cut: bool,
}

impl Clipped {
    /// One line for a person: how much was kept.
    pub fn describe(&self) -> String {
        let more = if self.file_cut { "more than " } else { "" };
        format!(
            "the recording has {more}{:.1} s of speech; only its first {:.1} s are used (a reference is at most 12 s)",
            self.speech_seconds, self.kept_seconds
        )
    }
}

/// Sound the clip may lose without having dropped speech: its edges are trimmed at −42 dBFS,
/// and sound between −50 and −42 dBFS at the ends of the kept part (breaths, room tone, the tail
/// of a word's decay) goes with them. 250 ms is above what that trim takes from the fixtures'
/// whole recordings and below any spoken word.
const CLIP_TOLERANCE_SECONDS: f64 = 0.25;

/// Seconds of sound above −50 dBFS (pauses of 100 ms or more excluded).
fn sound_seconds(audio: &DecodedAudio) -> Result<f64, SynthError> {
    let seg = f5_audio::PcmSegment::from_decoded(audio).map_err(|e| SynthError::Reference(e.to_string()))?;
    let ms: i64 = f5_audio::silence::detect_nonsilent(&seg, 100, -50.0, 10).iter().map(|[a, b]| b - a).sum();
    Ok(ms as f64 / 1000.0)
}

/// F5's sentence-end rule for a reference transcript: without a break after it, the model runs
/// the reference and the new text together as one breath.
pub fn fix_transcript(text: &str) -> String {
    let mut t = text.to_string();
    if !t.ends_with(". ") && !t.ends_with('。') {
        t.push_str(if t.ends_with('.') { " " } else { ". " });
    }
    t
}

/// The transcript as the model reads it and as the chunk budget counts it.
fn model_texts(transcript: &str) -> (String, String) {
    let fixed_transcript = fix_transcript(transcript);
    let mut model_text = fixed_transcript.clone();
    if model_text.chars().last().is_some_and(|c| c.len_utf8() == 1) {
        model_text.push(' ');
    }
    (model_text, fixed_transcript)
}

impl Voice {
    /// Decodes, clips (the reference's silence-aware ≤ 12 s rule, edge trim, +50 ms), mixes to
    /// mono, raises the loudness to `target_rms` when quieter, resamples to 24 kHz and computes
    /// the mel.
    ///
    /// Only the first [`DecodeLimit::REFERENCE`] seconds of the file are decoded (a longer file
    /// counts as clipped: [`Clipped::file_cut`]).
    ///
    /// [`DecodeLimit::REFERENCE`]: f5_audio::decode::DecodeLimit::REFERENCE
    ///
    /// A recording whose speech does not all fit the clip is refused: its transcript no longer
    /// matches what the model hears (see [`Voice::load_kept`] to transcribe the kept part).
    pub fn load(path: &Path, transcript: &str, target_rms: f32) -> Result<Voice, SynthError> {
        let voice = Self::load_kept(path, transcript, target_rms)?;
        voice.require_whole().map_err(|e| match e {
            SynthError::Reference(m) => SynthError::Reference(format!("{}: {m}", path.display())),
            other => other,
        })?;
        Ok(voice)
    }

    /// [`Voice::load`] that keeps a clipped recording, saying so in [`Voice::clipped`]: for a
    /// caller that can give the kept part its own transcript ([`Voice::with_transcript`]).
    /// The file must be a regular file of at most [`crate::store::MAX_AUDIO_BYTES`]: a FIFO, a
    /// device or a huge file is refused before it is read.
    pub fn load_kept(path: &Path, transcript: &str, target_rms: f32) -> Result<Voice, SynthError> {
        let in_file = |m: String| SynthError::Reference(format!("{}: {m}", path.display()));
        let bytes = f5_audio::decode::read_regular_file(path, crate::store::MAX_AUDIO_BYTES as u64).map_err(|e| match e {
            // The read error names the path already.
            f5_audio::AudioError::Io { .. } => SynthError::Reference(e.to_string()),
            other => in_file(other.to_string()),
        })?;
        let ext = path.extension().and_then(|e| e.to_str());
        let limit = f5_audio::decode::DecodeLimit::REFERENCE;
        let decoded = f5_audio::decode::decode_bytes_limited(&bytes, "the recording", ext, limit).map_err(|e| in_file(e.to_string()))?;
        let mut voice = Self::prepare(&decoded.audio, transcript, target_rms).map_err(|e| match e {
            SynthError::Reference(m) => in_file(m),
            other => other,
        })?;
        if decoded.cut {
            let clipped = voice.clipped.get_or_insert(Clipped {
                speech_seconds: 0.0,
                kept_speech_seconds: 0.0,
                kept_seconds: voice.clip_seconds,
                file_cut: true,
            });
            clipped.file_cut = true;
            if clipped.speech_seconds == 0.0 {
                clipped.speech_seconds = limit.max_seconds;
            }
        }
        Ok(voice)
    }

    /// An error when the clip left speech out ([`Voice::clipped`]): the transcript then says more
    /// than the model hears, and the result would be garbled or cut short.
    pub fn require_whole(&self) -> Result<(), SynthError> {
        match &self.clipped {
            None => Ok(()),
            Some(c) => Err(SynthError::Reference(format!(
                "{}, so its transcript no longer matches what is kept: trim the recording to 3–12 s of speech and give what that part says",
                c.describe()
            ))),
        }
    }

    /// The same recording with another transcript (e.g. what a transcriber heard in the kept
    /// part of a clipped recording); it then matches, so [`Voice::clipped`] is cleared.
    pub fn with_transcript(&self, transcript: &str) -> Result<Voice, SynthError> {
        if transcript.trim().is_empty() {
            return Err(SynthError::Reference("the transcript is empty: give the words spoken in the recording".into()));
        }
        let (model_text, fixed_transcript) = model_texts(transcript);
        Ok(Voice { model_text, fixed_transcript, clipped: None, ..self.clone() })
    }

    /// [`Voice::prepare`], refusing a recording whose speech the clip cut ([`Voice::require_whole`]).
    pub fn from_audio(audio: &DecodedAudio, transcript: &str, target_rms: f32) -> Result<Voice, SynthError> {
        let voice = Self::prepare(audio, transcript, target_rms)?;
        voice.require_whole()?;
        Ok(voice)
    }

    /// Clips, normalises and computes the mel of `audio`, noting in [`Voice::clipped`] when
    /// speech was left out.
    pub fn prepare(audio: &DecodedAudio, transcript: &str, target_rms: f32) -> Result<Voice, SynthError> {
        if transcript.trim().is_empty() {
            return Err(SynthError::Reference("the transcript is empty: give the words spoken in the recording".into()));
        }
        let clipped = f5_audio::clip_reference_decoded(audio).map_err(|e| SynthError::Reference(e.to_string()))?;
        let clip_seconds = clipped.len() as f64 / clipped.sample_rate as f64;
        let mut mono = clipped.to_mono();
        if f5_audio::level::rms(&mono) == 0.0 {
            return Err(SynthError::Reference("the recording is silent".into()));
        }
        // The clip adds 50 ms of silence after trimming; less than MIN of audio besides it is
        // not enough voice.
        if clip_seconds - 0.05 < MIN_REFERENCE_SECONDS {
            return Err(SynthError::Reference(format!(
                "only {:.2} s of sound after trimming silence; a reference needs at least {MIN_REFERENCE_SECONDS} s (3–12 s works best)",
                (clip_seconds - 0.05).max(0.0)
            )));
        }
        let loudness = f5_audio::level::normalize_rms(&mut mono, target_rms);
        let wave = f5_audio::resample_to_24k(&mono, clipped.sample_rate).map_err(|e| SynthError::Reference(e.to_string()))?;
        let mel = f5_audio::MelSpectrogram::new().log_mel(&wave).map_err(|e| SynthError::Reference(e.to_string()))?;
        let mel_frames = mel.len() / f5_audio::mel::N_MELS;
        let (model_text, fixed_transcript) = model_texts(transcript);
        let speech_seconds = sound_seconds(audio)?;
        let kept_speech_seconds = sound_seconds(&clipped)?;
        let clipped = (speech_seconds - kept_speech_seconds > CLIP_TOLERANCE_SECONDS).then_some(Clipped {
            speech_seconds,
            kept_speech_seconds,
            kept_seconds: clip_seconds,
            file_cut: false,
        });
        Ok(Voice { model_text, fixed_transcript, wave, mel, mel_frames, loudness, clip_seconds, clipped })
    }

    /// The per-chunk text budget in UTF-8 bytes (`infer_process`'s `max_chars`).
    pub fn max_chunk_bytes(&self, speed: f64) -> usize {
        f5_dit::duration::max_chunk_bytes(self.fixed_transcript.len(), self.clip_seconds, speed)
    }
}

/// Voices by content: the same recording and transcript (and loudness target) load once.
///
/// The cache keeps at most `capacity` voices and forgets the least recently used one first: a
/// long-running server sees an unbounded stream of uploads and replaced recordings, and each
/// prepared voice holds up to 12 s of 24 kHz audio plus its mel (about 1.6 MB).
pub struct VoiceCache {
    capacity: usize,
    entries: Mutex<CacheEntries>,
}

#[derive(Default)]
struct CacheEntries {
    /// Each voice with the tick of its last use.
    voices: HashMap<u64, (Arc<Voice>, u64)>,
    tick: u64,
}

impl CacheEntries {
    fn touch(&mut self, key: u64) -> Option<Arc<Voice>> {
        self.tick += 1;
        let tick = self.tick;
        self.voices.get_mut(&key).map(|(voice, used)| {
            *used = tick;
            voice.clone()
        })
    }
}

impl Default for VoiceCache {
    fn default() -> Self {
        Self::with_capacity(Self::DEFAULT_CAPACITY)
    }
}

impl VoiceCache {
    /// Enough for the voices a server actually rotates through, at most about 100 MB.
    pub const DEFAULT_CAPACITY: usize = 64;

    /// A cache that keeps at most `capacity` voices (at least one).
    pub fn with_capacity(capacity: usize) -> Self {
        VoiceCache { capacity: capacity.max(1), entries: Mutex::new(CacheEntries::default()) }
    }

    /// How many voices are held now.
    /// Voices held now (at most the capacity).
    pub fn len(&self) -> usize {
        self.lock().voices.len()
    }

    /// Whether no voice is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The entries even after a panicking holder poisoned the lock: a map and a counter, never
    /// left half-updated between statements.
    fn lock(&self) -> std::sync::MutexGuard<'_, CacheEntries> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The voice made of a recording's `bytes` (container named by `extension`) and its
    /// transcript, prepared once and then shared. At most [`DecodeLimit::REFERENCE`] of the
    /// recording is decoded. Errors say "the recording", never where it is stored.
    ///
    /// [`DecodeLimit::REFERENCE`]: f5_audio::decode::DecodeLimit::REFERENCE
    pub fn load(&self, bytes: &[u8], extension: Option<&str>, transcript: &str, target_rms: f32) -> Result<Arc<Voice>, SynthError> {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        bytes.hash(&mut h);
        transcript.hash(&mut h);
        target_rms.to_bits().hash(&mut h);
        let key = h.finish();
        if let Some(v) = self.lock().touch(key) {
            return Ok(v);
        }
        let limit = f5_audio::decode::DecodeLimit::REFERENCE;
        let audio = f5_audio::decode::decode_bytes_limited(bytes, "the recording", extension, limit)
            .map_err(|e| SynthError::Reference(e.to_string()))?;
        let voice = Arc::new(Voice::from_audio(&audio.audio, transcript, target_rms)?);
        let mut entries = self.lock();
        entries.tick += 1;
        let tick = entries.tick;
        entries.voices.insert(key, (voice.clone(), tick));
        while entries.voices.len() > self.capacity {
            // A linear scan: the capacity is small and a miss costs a decode and a mel anyway.
            let Some(oldest) = entries.voices.iter().min_by_key(|(_, (_, used))| *used).map(|(k, _)| *k) else { break };
            entries.voices.remove(&oldest);
        }
        Ok(voice)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transcript_fix_matches_the_reference_rule() {
        assert_eq!(fix_transcript("Hello there"), "Hello there. ");
        assert_eq!(fix_transcript("Hello there."), "Hello there. ");
        assert_eq!(fix_transcript("Hello there. "), "Hello there. ");
        assert_eq!(fix_transcript("你好。"), "你好。");
        assert_eq!(fix_transcript("Really?"), "Really?. ");
    }

    fn reference() -> Vec<u8> {
        std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/audio/ref_22050.wav")).expect("fixture")
    }

    /// A full cache forgets the voice used longest ago, not the one just used, and never holds
    /// more than its capacity. The transcript is part of the key, so one recording with three
    /// transcripts makes three voices.
    #[test]
    fn voice_cache_evicts_the_least_recently_used() {
        let cache = VoiceCache::with_capacity(2);
        let wav = reference();
        let path = (wav.as_slice(), Some("wav"));
        let a = cache.load(path.0, path.1, "Transcript A.", 0.1).expect("voice a");
        let b = cache.load(path.0, path.1, "Transcript B.", 0.1).expect("voice b");
        assert_eq!(cache.len(), 2);
        // A hit is the same prepared voice.
        assert!(Arc::ptr_eq(&a, &cache.load(path.0, path.1, "Transcript A.", 0.1).expect("a again")));
        // A third voice pushes out b, the one used longest ago.
        let c = cache.load(path.0, path.1, "Transcript C.", 0.1).expect("voice c");
        assert_eq!(cache.len(), 2, "the cache stays within its capacity");
        assert!(Arc::ptr_eq(&a, &cache.load(path.0, path.1, "Transcript A.", 0.1).expect("a kept")), "a, used recently, is kept");
        assert!(Arc::ptr_eq(&c, &cache.load(path.0, path.1, "Transcript C.", 0.1).expect("c kept")));
        let b_again = cache.load(path.0, path.1, "Transcript B.", 0.1).expect("b reloaded");
        assert!(!Arc::ptr_eq(&b, &b_again), "b was evicted and prepared afresh");
        assert_eq!(b.wave, b_again.wave, "a reload prepares the same voice");
        assert_eq!(cache.len(), 2);
    }

    #[test]
    fn voice_cache_default_is_bounded() {
        let cache = VoiceCache::default();
        let wav = reference();
        let path = (wav.as_slice(), Some("wav"));
        for i in 0..VoiceCache::DEFAULT_CAPACITY + 3 {
            cache.load(path.0, path.1, &format!("Transcript {i}."), 0.1).expect("voice");
        }
        assert_eq!(cache.len(), VoiceCache::DEFAULT_CAPACITY);
    }
}
