//! F5-TTS's diffusion transformer and its flow-matching sampler, written once against
//! [`f5_gpukit::Backend`], so the same model runs on every backend of the kit.
//!
//! The backends and the checkpoint type are re-exported, so `cargo add f5-dit` is all a caller
//! needs.
//!
//! ```no_run
//! use f5_dit::{CpuBackend, F5Model, Noise, Overrides, SampleOptions};
//!
//! # fn main() -> Result<(), f5_dit::DitError> {
//! let model = F5Model::open("model_1250000.safetensors", CpuBackend::new(), &Overrides::default())?;
//! let mel_dim = model.config().mel_dim;
//! let reference_mel = vec![0.0f32; 300 * mel_dim]; // the reference recording's log-mel
//! let ids = vec![0u32; 120]; // vocabulary ids of reference transcript + new text
//! let mel = model.sample(&ids, &reference_mel, 700, Noise::Seed(42), &SampleOptions::default(), &mut |_, _| {})?;
//! assert_eq!(mel.len(), 700 * mel_dim);
//! # Ok(()) }
//! ```

#![warn(missing_docs)]

/// Builder-style setters, one per field: `T::default().with_steps(8)` keeps working when a field
/// is added, where a struct literal would not (the structs are `#[non_exhaustive]`).
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

pub mod config;
pub mod duration;
mod model;
mod sample;
pub mod schedule;

pub use config::{F5Config, Overrides, TraitSource, Variant};
/// The backends a model runs on, re-exported so that `cargo add f5-dit` alone opens a model.
pub use f5_gpukit::{Backend, CpuBackend, CpuBf16Backend, KitError};
/// The CUDA backend (with the `cuda` feature).
#[cfg(feature = "cuda")]
pub use f5_gpukit::{CudaBackend, CudaOptions};
/// The torch CPU generator lives with the shared layers (Kokoro draws from it too).
pub use f5_nn::torch_rand::{torch_randn, TorchGenerator};
/// The checkpoint reader, for [`F5Model::from_checkpoint`] with a configuration built in code.
pub use f5_torchpt::Checkpoint;
pub use model::F5Model;
pub use sample::{Noise, SampleOptions, Solver};
pub use schedule::time_grid;

/// The forward pass in its stages, for the goldens that compare each stage with the reference
/// and for benchmarks that time one forward. Not part of the supported API: the stages change
/// whenever the forward is reorganised for speed. [`F5Model::velocity`] is the supported single
/// forward.
#[doc(hidden)]
pub mod internals {
    pub use crate::model::{text_positions, timestep_features, Modulations, Prepared, Trace};
}

/// Everything that can go wrong loading or running the model.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DitError {
    /// The checkpoint file could not be read (missing, not a checkpoint, unsafe pickle, ...).
    #[error(transparent)]
    Checkpoint(#[from] f5_torchpt::Error),
    /// The backend refused an operation (out of device memory, a driver error).
    #[error(transparent)]
    Kit(#[from] f5_gpukit::KitError),
    /// A tensor the architecture needs is not in the file: a truncated or foreign checkpoint.
    #[error("checkpoint has no tensor `{tensor}`")]
    Missing {
        /// Full name of the absent tensor.
        tensor: String,
    },
    /// A tensor is there but shaped unlike the architecture says.
    #[error("tensor `{tensor}`: {detail}")]
    Shape {
        /// Full name of the tensor.
        tensor: String,
        /// What was expected and what was found.
        detail: String,
    },
    /// The architecture is inconsistent (heads that do not divide the width, a contradicting
    /// training config, a hand-built [`F5Config`] that cannot work).
    #[error("model architecture: {0}")]
    Config(String),
    /// A caller's input does not fit the model (token ids, frame counts, options).
    #[error("{0}")]
    Input(String),
}

/// The README's example, compiled as a doctest so it cannot rot.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
