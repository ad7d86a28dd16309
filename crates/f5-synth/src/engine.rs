//! One interface for every model family.
//!
//! The CLI, the daemon and the listen-back gate talk to a [`SpeechEngine`] and nothing else: what
//! a family can do (speak text in a voice, stream the samples as they are final, list its named
//! voices, say its rate and languages and whether it clones a recording). A family is chosen in
//! exactly one place, [`crate::open_engine`], when a model is opened; a third family adds one
//! implementation of this trait and one arm there.

use std::sync::Arc;

use f5_verify::{ChunkScore, GateStatus, TotalScore};

use crate::synth::{Audio, ChunkReport, Progress};
use crate::voice::Voice;
use crate::SynthError;

/// What a model family offers, known without speaking.
#[derive(Clone, Debug, PartialEq)]
pub struct EngineInfo {
    /// Short family name: `f5` or `kokoro`.
    pub family: &'static str,
    /// Output sample rate of [`SpeechEngine::speak`].
    pub sample_rate: u32,
    /// Whether the voice is a recording and its transcript (F5 clones), rather than a name.
    pub clones_from_recording: bool,
    /// Languages of the text it reads, as the `--lang` codes it accepts (empty: any it can spell).
    pub languages: Vec<&'static str>,
    /// Whether it can report when each word is spoken.
    pub word_timestamps: bool,
}

/// The voice of one synthesis: a prepared recording (families that clone) or a name.
#[derive(Clone, Debug)]
pub enum VoiceRef {
    /// A reference recording and its transcript, prepared ([`Voice::load`]).
    Recording(Arc<Voice>),
    /// A named voice of the model, a voice file, or a weighted mix such as `af_bella(2)+af_sky`.
    Named(String),
}

impl VoiceRef {
    /// Refuses a voice of the wrong kind for `info`'s family, naming what it takes instead.
    pub(crate) fn check(&self, info: &EngineInfo) -> Result<(), SynthError> {
        match (self, info.clones_from_recording) {
            (VoiceRef::Recording(_), true) | (VoiceRef::Named(_), false) => Ok(()),
            (VoiceRef::Named(name), true) => Err(SynthError::Options(format!(
                "{} clones a voice from a recording and its transcript; {name:?} is a name, not a recording (give --ref and --ref-text, or a voice from the store)",
                info.family
            ))),
            (VoiceRef::Recording(_), false) => Err(SynthError::Options(format!(
                "{} speaks in named voices and does not clone a recording; name one of its voices instead",
                info.family
            ))),
        }
    }
}

/// Options of one synthesis, for any family.
///
/// Options that only one family understands are `None`/`false` unless asked for; a family refuses
/// one it cannot honour ([`SpeechEngine::speak`] names it) instead of ignoring it. Build with
/// `SpeakOptions::default()` and set fields: new options are added without breaking callers.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct SpeakOptions {
    /// Speaking rate: > 1 faster, < 1 slower.
    pub speed: f64,
    /// Seed of the noise; `None` draws one (reported in [`Spoken::seed`]).
    pub seed: Option<u64>,
    /// Cross-fade between chunks in seconds; `None` is the family's default (F5 0.15 s, Kokoro a
    /// plain join, as the reference pipelines do).
    pub cross_fade: Option<f64>,
    /// Listen-back gate: regenerations of a misheard chunk, and the highest word error rate kept.
    pub retries: u32,
    /// Listen-back gate: the highest word error rate a chunk is kept with.
    pub max_wer: f64,
    /// F5: ODE steps (default 32).
    pub nfe: Option<usize>,
    /// F5: classifier-free guidance strength (default 2).
    pub cfg: Option<f32>,
    /// F5: sway sampling coefficient (default −1; 0 turns it off).
    pub sway: Option<f32>,
    /// F5: total duration in seconds, reference included, instead of the estimate.
    pub fix_duration: Option<f64>,
    /// F5: this project's rule for short lines ([`crate::short_fix`]).
    pub short_fix: bool,
    /// Kokoro: the front end's language (`en-us`, `en-gb`, `es`, `fr`, `hi`, `it`, `pt-br`);
    /// `None` takes it from the voice's first letter, as the reference does.
    pub lang: Option<String>,
    /// Kokoro: the text is already phonemes; the front end is skipped.
    pub phonemes: bool,
    /// Report when each word is spoken ([`Spoken::words`]).
    pub word_timestamps: bool,
    /// Split-on-fail (on by default; acts only with a transcriber): a chunk still misheard after
    /// its retries is cut into sentences, each generated and checked on its own.
    pub split_on_fail: bool,
    /// Kokoro: speak the text's first sentence (or the first clause of a long one) as a chunk of
    /// its own and the rest of the first chunk in growing pieces (`G2p::stream_chunks`), so the
    /// first audio waits for one short forward. For streamed answers; off, the text is spoken
    /// in the reference pipeline's chunks of up to 510 phonemes (fewer joins, fewer forwards).
    pub quick_start: bool,
}

impl Default for SpeakOptions {
    fn default() -> Self {
        let gate = f5_verify::Gate::default();
        SpeakOptions {
            speed: 1.0,
            seed: None,
            cross_fade: None,
            retries: gate.retries(),
            max_wer: gate.max_wer(),
            nfe: None,
            cfg: None,
            sway: None,
            fix_duration: None,
            short_fix: false,
            lang: None,
            phonemes: false,
            word_timestamps: false,
            split_on_fail: true,
            quick_start: false,
        }
    }
}

setters!(SpeakOptions {
    with_speed => speed: f64,
    with_seed => seed: Option<u64>,
    with_cross_fade => cross_fade: Option<f64>,
    with_retries => retries: u32,
    with_max_wer => max_wer: f64,
    with_nfe => nfe: Option<usize>,
    with_cfg => cfg: Option<f32>,
    with_sway => sway: Option<f32>,
    with_fix_duration => fix_duration: Option<f64>,
    with_short_fix => short_fix: bool,
    with_lang => lang: Option<String>,
    with_phonemes => phonemes: bool,
    with_word_timestamps => word_timestamps: bool,
    with_split_on_fail => split_on_fail: bool,
    with_quick_start => quick_start: bool,
});

impl SpeakOptions {
    /// The options among `named` that are set, by their command-line names.
    pub(crate) fn refuse_set(&self, family: &str, named: &[(&str, bool)]) -> Result<(), SynthError> {
        let set: Vec<&str> = named.iter().filter(|(_, on)| *on).map(|(n, _)| *n).collect();
        if set.is_empty() {
            return Ok(());
        }
        Err(SynthError::Options(format!("{} {} not apply to {family} models", set.join(", "), if set.len() == 1 { "does" } else { "do" })))
    }
}

/// When one word is spoken.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct WordTime {
    /// The word as the text spelled it.
    pub word: String,
    /// Seconds from the start of the whole result.
    pub start: f64,
    /// Seconds from the start of the whole result at which the word ends.
    pub end: f64,
}

/// What a streamed synthesis reports once its last samples were handed over.
#[derive(Clone, Debug)]
pub struct Spoken {
    /// The seed the noise came from (drawn when none was asked for): give it back to repeat the result.
    pub seed: u64,
    /// What happened to each chunk, in order: text, length, time, the listen-back verdict.
    pub chunks: Vec<ChunkReport>,
    /// The generated mels `[frames, mel_channels]` of all chunks (families that make one; else empty).
    pub mel: Vec<f32>,
    /// Word timings when asked for and the family has them.
    pub words: Vec<WordTime>,
}

/// A model family, loaded on one device, ready to speak.
pub trait SpeechEngine: Send {
    /// What the family offers.
    fn info(&self) -> &EngineInfo;

    /// One line about the loaded model, for a person.
    fn describe(&self) -> String;

    /// The named voices this model has (none for families that clone).
    fn voices(&self) -> Vec<String>;

    /// Speaks `text` in `voice`, chunk by chunk, handing samples to `sink` as soon as no later
    /// chunk can change them (after the cross-fade). Returns the seed, the chunk reports and,
    /// when asked, word timings.
    fn speak(
        &self,
        voice: &VoiceRef,
        text: &str,
        opts: &SpeakOptions,
        progress: &mut dyn FnMut(Progress<'_>),
        sink: &mut dyn FnMut(&[f64]),
    ) -> Result<Spoken, SynthError>;

    /// Whether chunks will be listened to, as a line a person can read.
    fn gate_status(&self, opts: &SpeakOptions) -> GateStatus;

    /// Turns the listen-back gate on.
    fn set_listen_back(&mut self, listen: crate::ListenBack);
}

/// Speaks into memory: [`SpeechEngine::speak`] with the samples collected.
pub fn speak_to_memory(
    engine: &dyn SpeechEngine,
    voice: &VoiceRef,
    text: &str,
    opts: &SpeakOptions,
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<Audio, SynthError> {
    let mut samples = Vec::new();
    let spoken = engine.speak(voice, text, opts, progress, &mut |s| samples.extend(s.iter().map(|&v| v as f32)))?;
    let score: TotalScore = spoken.chunks.iter().map(|c| &c.score).collect();
    Ok(Audio { samples, mel: spoken.mel, seed: spoken.seed, chunks: spoken.chunks, score, words: spoken.words })
}

/// A chunk's report with the gate's verdict, for families whose chunks have no frames to report.
pub(crate) fn plain_report(text: &str, frames: usize, samples: usize, seconds: f64, score: ChunkScore) -> ChunkReport {
    ChunkReport { text: text.to_string(), frames, short_fix_frames: 0, generated_frames: frames, samples, seconds, score, split: None }
}
