//! The F5-TTS pipeline: a reference recording, its transcript and new text in; the new text in
//! that voice out, at 24 kHz — with every rule the reference implementation applies around the
//! model (reference clipping, loudness, transcript fix, chunking by byte budget, duration
//! estimate, one noise stream across chunks, vocoder, loudness back, cross-fade).

pub mod short_fix;
pub mod store;
mod synth;
mod voice;

pub use f5_verify::{ChunkScore, GateStatus, TotalScore};
pub use store::{valid_id, VoiceEntry, VoiceStore};
pub use synth::{
    remove_long_silences, trailing_pause_ms, Audio, ChunkReport, CrossFader, ListenBack, Progress, SynthOptions, Synthesizer, SAMPLE_RATE,
};
pub use voice::{fix_transcript, Voice, VoiceCache, MIN_REFERENCE_SECONDS};

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
}
