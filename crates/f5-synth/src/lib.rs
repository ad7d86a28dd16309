//! The speech pipeline: one engine interface ([`SpeechEngine`], opened by [`open_engine`]) over
//! both model families. For F5-TTS, a reference recording, its transcript and new text in; the new text in
//! that voice out, at 24 kHz — with every rule the reference implementation applies around the
//! model (reference clipping, loudness, transcript fix, chunking by byte budget, duration
//! estimate, one noise stream across chunks, vocoder, loudness back, cross-fade).

#![warn(missing_docs)]
/// Builder-style setters, one per field: `T::default().with_nfe(8)` keeps working when a field is
/// added, where a struct literal would not (the option structs are `#[non_exhaustive]`).
macro_rules! setters {
    ($ty:ident { $($setter:ident => $field:ident: $t:ty),* $(,)? }) => {
        impl $ty {
            $(
                #[doc = concat!("Sets `", stringify!($field), "` (see the field's documentation).")]
                #[must_use]
                pub fn $setter(mut self, value: $t) -> Self {
                    self.$field = value;
                    self
                }
            )*
        }
    };
}

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

/// What the listen-back gate needs: a transcriber and the language its text is normalised in.
pub use f5_verify::{language_for, Language, Transcribe};
pub use f5_verify::{ChunkScore, GateStatus, TotalScore};
/// The HTTP transcriber (whisper.cpp's server API), with the `http-transcriber` feature.
#[cfg(feature = "http-transcriber")]
pub use f5_verify::{Transcriber, TranscriberConfig};

/// What a caller may state about an F5 checkpoint that its shapes do not show, and the solver.
pub use f5_dit::{Overrides, Solver, Variant};
/// The backends and the device choice, re-exported so that `cargo add f5-synth` alone opens a
/// model ([`open_engine`] for either family, [`Synthesizer::open`] for F5 on a backend of one's
/// own choosing).
pub use f5_gpukit::{Backend, CpuBackend, CpuBf16Backend, DeviceChoice};
/// The CUDA backend (with the `cuda` feature).
#[cfg(feature = "cuda")]
pub use f5_gpukit::{CudaBackend, CudaOptions};
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
#[non_exhaustive]
pub enum SynthError {
    /// The reference recording cannot make a voice (unreadable, silent, too short).
    #[error("reference recording: {0}")]
    Reference(String),
    /// An option is out of range or does not apply to the model's family.
    #[error("{0}")]
    Options(String),
    /// The text or the vocabulary file could not be read or tokenised.
    #[error(transparent)]
    Text(#[from] f5_text::TextError),
    /// The F5 checkpoint could not be opened or run.
    #[error(transparent)]
    Model(#[from] f5_dit::DitError),
    /// The vocoder could not be opened or run.
    #[error(transparent)]
    Vocoder(#[from] f5_vocos::VocosError),
    /// The voice store's files could not be read or written.
    #[error("voice store: {0}")]
    Store(String),
    /// A named voice or stored entry does not exist.
    #[error("{0}")]
    NotFound(String),
    /// The Kokoro model could not be opened or run.
    #[error(transparent)]
    Kokoro(#[from] f5_kokoro::KokoroError),
    /// The text front end (graphemes to phonemes) refused the text.
    #[error("text front end: {0}")]
    FrontEnd(#[from] f5_g2p::G2pError),
    /// The device could not be started (threads, CUDA, a build without it).
    #[error("{0}")]
    Device(String),
    /// The result could not be written (see [`Audio::write_wav`]).
    #[error(transparent)]
    Output(#[from] f5_audio::AudioError),
}

/// The README's examples, compiled as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
