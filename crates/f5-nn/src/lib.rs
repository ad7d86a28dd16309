//! Weights by name and the layers every f5 model is built from, on the f5 kit.
//!
//! [`Weights`] gives a model its tensors by canonical name with shape checks (see the crate
//! README for the naming rules); the layers ([`Linear`], [`LayerNorm`], [`Conv1d`],
//! [`ConvTranspose1d`], [`Lstm`], [`BiLstm`], [`ConvNeXtBlock`]) load themselves from it and run
//! on any [`f5_gpukit::Backend`]. Activations are channels-last `[batch, n, channels]`, as in the kit.

mod layers;
pub mod torch_rand;
mod weights;

pub use layers::{BiLstm, Conv1d, ConvNeXtBlock, ConvNeXtScratch, ConvTranspose1d, LayerNorm, Linear, Lstm};
pub use weights::{canonical, Scope, Weights};

/// What loading weights or running a layer can fail with.
#[derive(Debug, thiserror::Error)]
pub enum NnError {
    /// The checkpoint has no tensor of this (canonical) name.
    #[error("{path}: no tensor {tensor}")]
    Missing { path: String, tensor: String },
    /// The tensor exists with a shape the architecture cannot use.
    #[error("{path}: tensor {tensor}: {detail}")]
    Shape { path: String, tensor: String, detail: String },
    /// Two names in the file map to one canonical name (e.g. `a.module.w` and `a.w`).
    #[error("{path}: tensors {first} and {second} are both {canonical}")]
    Ambiguous { path: String, first: String, second: String, canonical: String },
    #[error(transparent)]
    Checkpoint(#[from] f5_torchpt::Error),
    #[error(transparent)]
    Kit(#[from] f5_gpukit::KitError),
}

pub type Result<T, E = NnError> = std::result::Result<T, E>;

/// The README's example, compiled as a doctest so it cannot rot.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
