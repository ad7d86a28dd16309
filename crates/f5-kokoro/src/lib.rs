//! Kokoro-82M (StyleTTS2 + ISTFTNet) on the f5 kit: phonemes and a 256-float voice style in,
//! 24 kHz audio out — the reference `kokoro` 0.9.4 `KModel`, stage for stage.
//!
//! ```no_run
//! use f5_kokoro::{CpuBackend, Kokoro, VoicePack};
//! # fn main() -> Result<(), f5_kokoro::KokoroError> {
//! let model = Kokoro::open("kokoro-dir", CpuBackend::new())?;
//! let voice = VoicePack::open("af_heart.pt".as_ref(), 256)?;
//! let out = model.speak("həlˈoʊ wˈɜːld", &voice, 1.0, 0)?;
//! println!("{} samples at 24 kHz, {} frames", out.audio.len(), out.durations.iter().sum::<usize>());
//! # Ok(()) }
//! ```
//!
//! The stages follow the reference's segmentation (`albert`, `prosody`, `text_encoder`,
//! `source`, `decoder`); a [`Trace`] receives every intermediate tensor for tests.

#![warn(missing_docs)]
mod albert;
mod blocks;
pub mod config;
mod decoder;
mod inspect;
mod model;
mod prosody;
pub mod source;
mod text_encoder;
pub mod voice;

pub use config::KokoroConfig;
/// The backends a model runs on, re-exported so that `cargo add f5-kokoro` alone opens a model.
pub use f5_gpukit::{CpuBackend, CpuBf16Backend, KitError};
/// The CUDA backend (with the `cuda` feature).
#[cfg(feature = "cuda")]
pub use f5_gpukit::{CudaBackend, CudaOptions};
pub use inspect::{inspect, KokoroSummary};
pub use model::{Aligned, Kokoro, Speech};
pub use prosody::frames_from_logits;
pub use voice::{parse_voice_mix, VoicePack};

use f5_gpukit::Backend;

/// What loading or running Kokoro can fail with.
#[derive(Debug, thiserror::Error)]
pub enum KokoroError {
    /// The weights file could not be read (missing, not a checkpoint, unsafe pickle, ...).
    #[error(transparent)]
    Checkpoint(#[from] f5_torchpt::Error),
    /// The backend refused an operation (out of device memory, a driver error).
    #[error(transparent)]
    Kit(#[from] f5_gpukit::KitError),
    /// A tensor is missing or shaped unlike `config.json` says.
    #[error(transparent)]
    Weights(#[from] f5_nn::NnError),
    /// config.json is unreadable or describes an impossible model.
    #[error("{0}")]
    Config(String),
    /// A voice pack or voice name is unusable.
    #[error("{0}")]
    Voice(String),
    /// The phonemes, speed or seed given cannot be spoken.
    #[error("{0}")]
    Input(String),
}

/// The source excitation's spectrum `[frames, n_fft/2 + 1]` each, row-major, as another
/// implementation computed it — for feeding the generator the reference's own excitation in a
/// parity test. (Frames 0 and last of an STFT with reflect padding are exactly real, so their
/// negative bins sit on the ±π branch cut, where the sign of an FFT's rounding noise decides the
/// phase; a network fed one side or the other diverges from there.) For parity tests only:
/// hidden from the documented API.
#[doc(hidden)]
pub struct SourceSpectrum {
    /// Magnitudes, `[frames, n_fft/2 + 1]`.
    pub magnitude: Vec<f32>,
    /// Phases in radians, same layout.
    pub phase: Vec<f32>,
}

/// Receives named intermediate tensors of a forward (host copies), for tests and inspection.
/// `Trace::off()` costs nothing: no tensor is downloaded.
pub struct Trace<'a>(Option<&'a mut TraceSink<'a>>);

/// Where a [`Trace`] sends each stage: its name and a host copy.
pub type TraceSink<'s> = dyn FnMut(&str, Vec<f32>) + 's;

impl<'a> Trace<'a> {
    /// No tracing: the forward downloads nothing extra.
    pub fn off() -> Self {
        Trace(None)
    }

    /// Sends every stage to `sink`; costs a download per stage.
    pub fn to(sink: &'a mut TraceSink<'a>) -> Self {
        Trace(Some(sink))
    }

    pub(crate) fn wants(&self) -> bool {
        self.0.is_some()
    }

    pub(crate) fn emit<B: Backend>(&mut self, kit: &B, name: &str, buf: &B::Buf) -> Result<(), KokoroError> {
        if let Some(sink) = self.0.as_mut() {
            sink(name, kit.download(buf)?);
        }
        Ok(())
    }

    pub(crate) fn emit_host(&mut self, name: &str, data: Vec<f32>) {
        if let Some(sink) = self.0.as_mut() {
            sink(name, data);
        }
    }
}

/// The README's example, compiled as a doctest so it cannot rot.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
