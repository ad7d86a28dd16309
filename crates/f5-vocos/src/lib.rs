//! The Vocos vocoder that F5-TTS uses to turn its log-mel spectrograms into 24 kHz audio,
//! written once against [`f5_gpukit::Backend`], with the inverse STFT on the host.
//!
//! The network (a ConvNeXt backbone and a linear head predicting log-magnitude and phase per
//! STFT bin) runs on the kit; the final `torch.istft(center=True)` runs on the CPU through
//! [`IstftPlan`], which reproduces torch's inverse exactly: DC and Nyquist counted once with
//! their imaginary parts dropped, `1/n_fft` scaling, periodic Hann synthesis window, division
//! by the overlap-added squared window (not by a constant), and `n_fft/2` trimmed at each end.
//!
//! ```no_run
//! use f5_gpukit::CpuBackend;
//! use f5_vocos::Vocos;
//!
//! # fn main() -> Result<(), f5_vocos::VocosError> {
//! let vocos = Vocos::open("vocos-mel-24khz", CpuBackend::new())?;
//! let channels = vocos.config().mel_channels;
//! let frames = 200;
//! let mel = vec![-4.0f32; frames * channels]; // [frames, channels], natural-log magnitudes
//! let wave = vocos.decode(&mel, frames)?;
//! assert_eq!(wave.len(), vocos.config().hop * (frames - 1));
//! # Ok(()) }
//! ```

pub mod config;
mod istft;
mod model;

pub use config::{HopSource, VocosConfig};
pub use istft::{hann_periodic, istft, IstftPlan};
pub use model::{Spectrum, Vocos};

/// Everything that can go wrong loading or running the vocoder.
#[derive(Debug, thiserror::Error)]
pub enum VocosError {
    #[error(transparent)]
    Checkpoint(#[from] f5_torchpt::Error),
    #[error(transparent)]
    Kit(#[from] f5_gpukit::KitError),
    #[error("checkpoint {path} has no tensor `{tensor}`")]
    Missing { path: String, tensor: String },
    #[error("tensor `{tensor}`: {detail}")]
    Shape { tensor: String, detail: String },
    #[error("vocoder configuration: {0}")]
    Config(String),
    /// A mel spectrogram or spectrum the vocoder cannot decode; the message says why.
    #[error("{0}")]
    Input(String),
    #[error("mel frame {frame} channel {channel} is {value}: the vocoder needs finite log-magnitudes")]
    NonFinite { frame: usize, channel: usize, value: f32 },
    #[error("inverse STFT: {0}")]
    Istft(String),
}

/// The README's example, compiled as a doctest so it cannot rot.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
