//! F5-TTS's diffusion transformer and its flow-matching sampler, written once against
//! [`f5_gpukit::Backend`], so the same model runs on every backend of the kit.
//!
//! ```no_run
//! use f5_dit::{F5Model, Noise, Overrides, SampleOptions};
//! use f5_gpukit::CpuBackend;
//!
//! # fn main() -> Result<(), f5_dit::DitError> {
//! let model = F5Model::open("model_1250000.safetensors", CpuBackend::new(), &Overrides::default())?;
//! let mel_dim = model.config.mel_dim;
//! let reference_mel = vec![0.0f32; 300 * mel_dim]; // the reference recording's log-mel
//! let ids = vec![0u32; 120]; // vocabulary ids of reference transcript + new text
//! let mel = model.sample(&ids, &reference_mel, 700, Noise::Seed(42), &SampleOptions::default(), &mut |_, _| {})?;
//! assert_eq!(mel.len(), 700 * mel_dim);
//! # Ok(()) }
//! ```

pub mod config;
pub mod duration;
mod model;
mod sample;
pub mod schedule;

pub use config::{F5Config, Overrides, TraitSource, Variant};
/// The torch CPU generator lives with the shared layers (Kokoro draws from it too).
pub use f5_nn::torch_rand::{torch_randn, TorchGenerator};
pub use model::{text_positions, timestep_features, F5Model, Modulations, Prepared, Trace};
pub use sample::{Noise, SampleOptions, Solver};
pub use schedule::time_grid;

/// Everything that can go wrong loading or running the model.
#[derive(Debug, thiserror::Error)]
pub enum DitError {
    #[error(transparent)]
    Checkpoint(#[from] f5_torchpt::Error),
    #[error(transparent)]
    Kit(#[from] f5_gpukit::KitError),
    #[error("checkpoint has no tensor `{tensor}`")]
    Missing { tensor: String },
    #[error("tensor `{tensor}`: {detail}")]
    Shape { tensor: String, detail: String },
    #[error("model architecture: {0}")]
    Config(String),
    #[error("{0}")]
    Input(String),
}
