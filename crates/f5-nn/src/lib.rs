//! Weights by name and the layers every f5 model is built from, on the f5 kit.
//!
//! [`Weights`] gives a model its tensors by canonical name with shape checks (see the crate
//! README for the naming rules); the layers ([`Linear`], [`LayerNorm`], [`Conv1d`],
//! [`ConvTranspose1d`], [`Lstm`], [`BiLstm`], [`ConvNeXtBlock`]) load themselves from it and run
//! on any [`f5_gpukit::Backend`]. Activations are channels-last `[batch, n, channels]`, as in the kit.

#![warn(missing_docs)]

mod layers;
pub mod torch_rand;
mod weights;

pub use layers::{BiLstm, Conv1d, ConvNeXtBlock, ConvNeXtScratch, ConvTranspose1d, LayerNorm, Linear, Lstm};
pub use weights::{canonical, Scope, WeightStorage, Weights};

/// What loading weights or running a layer can fail with.
#[derive(Debug, thiserror::Error)]
pub enum NnError {
    /// The checkpoint has no tensor of this (canonical) name.
    #[error("{path}: no tensor {tensor}")]
    Missing {
        /// The checkpoint file.
        path: String,
        /// The canonical name looked for.
        tensor: String,
    },
    /// The tensor exists with a shape the architecture cannot use.
    #[error("{path}: tensor {tensor}: {detail}")]
    Shape {
        /// The checkpoint file.
        path: String,
        /// The tensor's canonical name.
        tensor: String,
        /// What was expected and what was found.
        detail: String,
    },
    /// Two names in the file map to one canonical name (e.g. `a.module.w` and `a.w`).
    #[error("{path}: tensors {first} and {second} are both {canonical}")]
    Ambiguous {
        /// The checkpoint file.
        path: String,
        /// One of the names in the file.
        first: String,
        /// The other.
        second: String,
        /// The name both map to.
        canonical: String,
    },
    /// A model directory without exactly one checkpoint to load.
    #[error("{dir}: {detail}")]
    NoCheckpoint {
        /// The directory.
        dir: String,
        /// None there, or which several were found.
        detail: String,
    },
    /// The file could not be read as a checkpoint.
    #[error(transparent)]
    Checkpoint(#[from] f5_torchpt::Error),
    /// The backend refused an upload or an operation.
    #[error(transparent)]
    Kit(#[from] f5_gpukit::KitError),
}

/// Results of loading and running layers.
pub type Result<T, E = NnError> = std::result::Result<T, E>;

/// The checkpoint inside a model directory: the first of `named` that exists, else the one file
/// whose extension is in `extensions` (several such files are refused: the caller must pick).
pub fn checkpoint_in(dir: &std::path::Path, named: &[&str], extensions: &[&str]) -> Result<std::path::PathBuf> {
    let err = |detail: String| NnError::NoCheckpoint { dir: dir.display().to_string(), detail };
    if let Some(p) = named.iter().map(|n| dir.join(n)).find(|p| p.is_file()) {
        return Ok(p);
    }
    let listing = std::fs::read_dir(dir).map_err(|e| err(e.to_string()))?;
    let mut found: Vec<std::path::PathBuf> = listing
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file() && p.extension().and_then(|e| e.to_str()).is_some_and(|e| extensions.contains(&e)))
        .collect();
    found.sort();
    let wanted = named.iter().map(|n| n.to_string()).chain(extensions.iter().map(|e| format!("*.{e}"))).collect::<Vec<_>>().join(" or ");
    match found.len() {
        1 => Ok(found.remove(0)),
        0 => Err(err(format!("no {wanted} in this directory"))),
        _ => Err(err(format!("several checkpoints ({found:?}); pass the one to load"))),
    }
}

/// The README's example, compiled as a doctest so it cannot rot.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
