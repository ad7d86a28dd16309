//! Listening back to generated speech.
//!
//! A flow-matching TTS model does not always say the words: it drops a short one, runs two
//! together, or mumbles the end of a chunk whose duration was tight, and nothing inside the
//! model signals it. This crate checks from outside: it sends the audio to a transcriber that
//! speaks whisper.cpp's server API ([`Transcriber`]), normalises both texts the same way
//! ([`normalize`]), counts word errors with a rule that forgives compounds written together or
//! apart ([`word_errors`], [`score`]), and runs the regenerate-while-wrong loop ([`Gate`]).
//!
//! ```no_run
//! use f5_verify::{language_for, Gate, Transcriber, Transcribe, TotalScore};
//!
//! let transcriber = Transcriber::new("127.0.0.1:8080", Some("en".into()))?;
//! let gate = Gate::new(2, 0.3)?;
//! println!("{}", gate.status(Some(&transcriber)));
//! let mut total = TotalScore::default();
//! for (i, text) in ["Hello there.", "It is 21 degrees."].iter().enumerate() {
//!     let gated = gate.run(Some(&transcriber as &dyn Transcribe), language_for(Some("en")), text, 24_000, |attempt| {
//!         // the synthesiser derives a seed from (i, attempt) here
//!         Ok::<_, f5_verify::VerifyError>(vec![0.0f32; 24_000])
//!     })?;
//!     total.add(&gated.score);
//! }
//! println!("{total}");
//! # Ok::<(), f5_verify::VerifyError>(())
//! ```

#![warn(missing_docs)]
mod gate;
#[cfg(feature = "http-transcriber")]
mod http_transcriber;
mod normalize;
mod transcriber;
mod wer;

pub use gate::{ChunkScore, Gate, GateStatus, Gated, TotalScore, MAX_GATE_RETRIES};
#[cfg(feature = "http-transcriber")]
pub use http_transcriber::{Transcriber, TranscriberConfig};
pub use normalize::{
    is_cjk_char, is_punctuation, language_for, normalize, number_words, English, Language, PassThrough, Spelling, WrittenNumber,
};
pub use transcriber::{wav_bytes, Transcribe, MAX_CLIP_SECONDS};
pub use wer::{score, wer_of, word_errors, Score, MAX_MERGE};

/// Everything that can go wrong while listening back.
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    /// The transcriber's address cannot be turned into a plain-HTTP endpoint.
    #[error("transcriber address {address:?} is not usable: {reason}")]
    Address {
        /// The address as given.
        address: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A gate or client setting is out of range.
    #[error("verify settings: {0}")]
    Config(String),
    /// The audio cannot be sent (no rate, not finite, too long).
    #[error("audio for the transcriber: {0}")]
    Audio(String),
    /// Encoding the audio as WAV failed.
    #[error("writing the wav for the transcriber: {0}")]
    Wav(#[from] hound::Error),
    /// The transcriber answered with a client error: asking again would not help.
    #[error("transcriber {endpoint} refused the request with HTTP {status}: {body}")]
    Rejected {
        /// The URL the audio was sent to.
        endpoint: String,
        /// The HTTP status.
        status: u16,
        /// The start of the answer's body.
        body: String,
    },
    /// The transcriber answered, but not with `{"text": ...}`.
    #[error("transcriber {endpoint} answered something unusable: {reason}")]
    Answer {
        /// The URL the audio was sent to.
        endpoint: String,
        /// What was wrong with the answer.
        reason: String,
    },
}
