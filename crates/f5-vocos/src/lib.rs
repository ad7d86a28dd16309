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

#![warn(missing_docs)]

pub mod config;
mod istft;
mod model;

pub use config::{HopSource, VocosConfig};
pub use istft::{hann_periodic, istft, IstftPlan};
pub use model::{Spectrum, Vocos};

/// Everything that can go wrong loading or running the vocoder.
#[derive(Debug, thiserror::Error)]
pub enum VocosError {
    /// The weights file could not be read.
    #[error(transparent)]
    Checkpoint(#[from] f5_torchpt::Error),
    /// The backend refused an operation.
    #[error(transparent)]
    Kit(#[from] f5_gpukit::KitError),
    /// A tensor the architecture needs is not in the file.
    #[error("checkpoint {path} has no tensor `{tensor}`")]
    Missing {
        /// The weights file.
        path: String,
        /// The tensor's full name.
        tensor: String,
    },
    /// A tensor is shaped unlike the architecture says.
    #[error("tensor `{tensor}`: {detail}")]
    Shape {
        /// The tensor's full name.
        tensor: String,
        /// What was expected and what was found.
        detail: String,
    },
    /// `config.yaml` is unreadable or contradicts the weights.
    #[error("vocoder configuration: {0}")]
    Config(String),
    /// A mel spectrogram or spectrum the vocoder cannot decode; the message says why.
    #[error("{0}")]
    Input(String),
    /// A mel value is NaN or infinite: the acoustic model diverged, and the vocoder would spread
    /// it over the whole wave.
    #[error("mel frame {frame} channel {channel} is {value}: the vocoder needs finite log-magnitudes")]
    NonFinite {
        /// The frame, from 0.
        frame: usize,
        /// The mel channel.
        channel: usize,
        /// The value found there (NaN or ±inf).
        value: f32,
    },
    /// The inverse STFT cannot be planned for these sizes.
    #[error("inverse STFT: {0}")]
    Istft(String),
}

/// The README's example, compiled as a doctest so it cannot rot.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
