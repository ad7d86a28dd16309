use std::path::PathBuf;

use crate::PickleError;

/// Everything that can go wrong opening or reading a checkpoint. Each message names the file,
/// and the tensor where there is one.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
#[allow(missing_docs)] // fields: the file, the tensor, a human-readable detail
pub enum Error {
    /// The file could not be opened or mapped.
    #[error("{}: cannot read: {source}", .path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Neither a zip nor a safetensors header at the start of the file.
    #[error(
        "{}: not a PyTorch zip checkpoint or a safetensors file (first bytes: {head})",
        .path.display()
    )]
    UnknownFormat { path: PathBuf, head: String },
    /// A pre-1.6 (`_use_new_zipfile_serialization=False`) torch file.
    #[error(
        "{}: legacy (non-zip) PyTorch serialization is not supported; re-save it with a \
         current torch.save, or convert it to safetensors",
        .path.display()
    )]
    LegacyTorch { path: PathBuf },
    /// The zip container is damaged, or lacks the records a torch checkpoint has.
    #[error("{}: PyTorch zip archive: {detail}", .path.display())]
    Zip { path: PathBuf, detail: String },
    /// `data.pkl` was refused by the allow-list unpickler.
    #[error("{}: data.pkl {source}", .path.display())]
    Pickle {
        path: PathBuf,
        #[source]
        source: PickleError,
    },
    /// The safetensors header is damaged or inconsistent with the file.
    #[error("{}: safetensors: {detail}", .path.display())]
    Safetensors { path: PathBuf, detail: String },
    /// A tensor whose description is inconsistent with its data, or that cannot be read as asked.
    #[error("{}: tensor `{tensor}`: {detail}", .path.display())]
    Tensor { path: PathBuf, tensor: String, detail: String },
    /// A checkpoint could not be written (inconsistent input or a failed record).
    #[error("{}: cannot write: {detail}", .path.display())]
    Write { path: PathBuf, detail: String },
    /// No tensor of that name.
    #[error("{}: no tensor named `{tensor}`", .path.display())]
    NotFound { path: PathBuf, tensor: String },
}

impl Error {
    /// The `(module, name)` of the global a refused pickle tried to use, if that is the error.
    pub fn forbidden_global(&self) -> Option<(&str, &str)> {
        match self {
            Error::Pickle { source, .. } => source.forbidden_global(),
            _ => None,
        }
    }
}

/// Result alias of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
