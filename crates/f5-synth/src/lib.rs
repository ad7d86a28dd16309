//! The speech pipeline: one engine interface ([`SpeechEngine`], opened by [`open_engine`]) over
//! both model families. For F5-TTS, a reference recording, its transcript and new text in; the new text in
//! that voice out, at 24 kHz — with every rule the reference implementation applies around the
//! model (reference clipping, loudness, transcript fix, chunking by byte budget, duration
//! estimate, one noise stream across chunks, vocoder, loudness back, cross-fade).

mod engine;
mod f5_engine;
mod kokoro_engine;
mod open;
pub mod short_fix;
pub mod split_on_fail;
pub mod store;
mod synth;
mod voice;

pub use engine::{speak_to_memory, EngineInfo, SpeakOptions, SpeechEngine, Spoken, VoiceRef, WordTime};
pub use open::{open_engine, DeviceOptions, KokoroVoices, ModelFiles, VoiceFetcher};

pub use f5_verify::{ChunkScore, GateStatus, TotalScore};
pub use store::{valid_id, VoiceEntry, VoiceStore};
pub use synth::{
    random_seed, remove_long_silences, trailing_pause_ms, Audio, ChunkReport, CrossFader, ListenBack, Progress, SplitReport, SynthOptions,
    Synthesizer, SAMPLE_RATE,
};
pub use voice::{fix_transcript, Clipped, Voice, VoiceCache, MIN_REFERENCE_SECONDS};

impl SynthError {
    /// Whether the request was at fault (options, text, voice name, input the model refuses),
    /// rather than the files or the machine: a server answers these to the client as they are,
    /// and keeps the others (which may name its files) to its log.
    pub fn is_caller_error(&self) -> bool {
        match self {
            SynthError::Options(_) | SynthError::Text(_) | SynthError::NotFound(_) | SynthError::FrontEnd(_) => true,
            SynthError::Kokoro(e) => matches!(e, f5_kokoro::KokoroError::Input(_)),
            _ => false,
        }
    }
}

/// Everything that can go wrong in a synthesis; each message says what to change.
#[derive(Debug, thiserror::Error)]
pub enum SynthError {
    #[error("reference recording: {0}")]
    Reference(String),
    #[error("{0}")]
    Options(String),
    #[error(transparent)]
    Text(#[from] f5_text::TextError),
    #[error(transparent)]
    Model(#[from] f5_dit::DitError),
    #[error(transparent)]
    Vocoder(#[from] f5_vocos::VocosError),
    #[error("voice store: {0}")]
    Store(String),
    #[error("{0}")]
    NotFound(String),
    #[error(transparent)]
    Kokoro(#[from] f5_kokoro::KokoroError),
    #[error("text front end: {0}")]
    FrontEnd(#[from] f5_g2p::G2pError),
    #[error("{0}")]
    Device(String),
}

/// The README's examples, compiled as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
