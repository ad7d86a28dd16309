//! Zero-copy weight loading from safetensors files and PyTorch zip checkpoints
//! (`torch.save` output: `.pt`, `.pth`, `pytorch_model.bin`).
//!
//! [`Checkpoint::open`] memory-maps the file, recognises the container by its first bytes and
//! builds a table from flat tensor names to [`TensorInfo`] (dtype, shape, strides, storage
//! offset and byte range in the map). Tensor data is read straight from the map, converted to
//! `f32` on request.
//!
//! Torch checkpoints are pickles. This crate never runs Python and never calls anything a
//! file names: its unpickler knows a short allow-list of globals (tensor rebuild functions,
//! storage classes, container types) and refuses every other one by name, so a checkpoint
//! with a `__reduce__` payload (`os.system`, `builtins.eval`, …) is an error, not an exploit.
//!
//! Nested dicts are flattened with `.`, so the EMA weights of an F5-TTS `.pt` are named
//! `ema_model_state_dict.ema_model.transformer.…`. Non-tensor leaves (`step`, `update`,
//! hyper-parameters) that are ints, floats, bools or strings are kept as [`Scalar`]s; `None`,
//! bytes and other leaves are skipped.
//!
//! ```
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let dir = std::env::temp_dir().join(format!("f5-torchpt-doc-{}", std::process::id()));
//! # std::fs::create_dir_all(&dir)?;
//! # let path = dir.join("model.safetensors");
//! # let header = br#"{"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}}"#;
//! # let mut file = (header.len() as u64).to_le_bytes().to_vec();
//! # file.extend_from_slice(header);
//! # for v in [1.0f32, 2.0, 3.0, 4.0] { file.extend_from_slice(&v.to_le_bytes()); }
//! # std::fs::write(&path, file)?;
//! use f5_torchpt::{Checkpoint, DType};
//!
//! let ckpt = Checkpoint::open(&path)?;
//! for name in ckpt.names() {
//!     let info = ckpt.meta(name)?;
//!     println!("{name}: {:?} {:?}", info.dtype(), info.shape());
//! }
//! assert_eq!(ckpt.meta("w")?.dtype(), DType::F32);
//! // Borrowed straight from the map when the tensor is contiguous, aligned f32.
//! let w = ckpt.f32_view("w")?;
//! assert_eq!(&w[..], &[1.0, 2.0, 3.0, 4.0]);
//! // Always an owned, row-major f32 copy, whatever the dtype and strides.
//! assert_eq!(ckpt.read_f32("w")?, vec![1.0, 2.0, 3.0, 4.0]);
//! # std::fs::remove_dir_all(&dir)?;
//! # Ok(())
//! # }
//! ```

#![forbid(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

mod error;
mod pickle;
mod st;
mod tensor;
mod torch;
mod write;

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};

pub use error::{Error, Result};
pub use pickle::{PickleError, PickleErrorKind};
pub use tensor::{DType, Scalar, TensorInfo};
pub use write::{save, save_state_dicts, save_tensor, F32Tensor, SaveValue};

/// The container a checkpoint was read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// A safetensors file.
    Safetensors,
    /// A `torch.save` zip archive.
    TorchZip,
}

/// The bytes of the file: a read-only map, or an owned buffer for [`Checkpoint::from_bytes`].
enum Backing {
    Mapped(memmap2::Mmap),
    Owned(Vec<u8>),
}

impl Backing {
    fn bytes(&self) -> &[u8] {
        match self {
            Backing::Mapped(map) => map,
            Backing::Owned(vec) => vec,
        }
    }
}

/// An opened weight file: the name table plus the mapped bytes the tensors point into.
pub struct Checkpoint {
    path: PathBuf,
    backing: Backing,
    format: Format,
    tensors: BTreeMap<String, TensorInfo>,
    scalars: BTreeMap<String, Scalar>,
}

impl std::fmt::Debug for Checkpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Checkpoint")
            .field("path", &self.path)
            .field("format", &self.format)
            .field("tensors", &self.tensors.len())
            .field("scalars", &self.scalars.len())
            .finish()
    }
}

/// Legacy torch files start with a pickle (`\x80\x02`) holding torch's magic number.
const LEGACY_TORCH_MAGIC: &[u8] = b"\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19";
const ZIP_MAGIC: &[u8] = b"PK\x03\x04";

impl Checkpoint {
    /// Memory-maps `path` and reads its tensor table.
    ///
    /// The map is read-only and private to this process; as with any memory map, the file
    /// must not be truncated or rewritten while the `Checkpoint` is alive.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let io_err = |source| Error::Io { path: path.to_path_buf(), source };
        let file = File::open(path).map_err(io_err)?;
        // SAFETY: the map is read-only; a concurrent truncation of the file by another process
        // is the documented caller obligation above and is outside what Rust can guard.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io_err)?;
        Self::from_backing(path.to_path_buf(), Backing::Mapped(map))
    }

    /// Reads a checkpoint held in memory. `label` names it in error messages.
    pub fn from_bytes(label: impl Into<PathBuf>, bytes: Vec<u8>) -> Result<Self> {
        Self::from_backing(label.into(), Backing::Owned(bytes))
    }

    fn from_backing(path: PathBuf, backing: Backing) -> Result<Self> {
        let bytes = backing.bytes();
        let (format, tensors, scalars) = if bytes.starts_with(ZIP_MAGIC) {
            let parsed = torch::parse(&path, bytes)?;
            (Format::TorchZip, parsed.tensors, parsed.scalars)
        } else if bytes.starts_with(LEGACY_TORCH_MAGIC) {
            return Err(Error::LegacyTorch { path });
        } else if st::looks_like_safetensors(bytes) {
            (Format::Safetensors, st::parse(&path, bytes)?, BTreeMap::new())
        } else {
            let head = bytes.iter().take(8).map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(" ");
            return Err(Error::UnknownFormat { path, head });
        };
        Ok(Self { path, backing, format, tensors, scalars })
    }

    /// The path (or label) the checkpoint was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Which container the file is.
    pub fn format(&self) -> Format {
        self.format
    }

    /// Tensor names, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tensors.keys().map(String::as_str)
    }

    /// Number of tensors.
    pub fn len(&self) -> usize {
        self.tensors.len()
    }

    /// True when the file holds no tensors.
    pub fn is_empty(&self) -> bool {
        self.tensors.is_empty()
    }

    /// Whether a tensor of that name exists.
    pub fn contains(&self, name: &str) -> bool {
        self.tensors.contains_key(name)
    }

    /// Layout of one tensor.
    pub fn meta(&self, name: &str) -> Result<&TensorInfo> {
        self.tensors.get(name).ok_or_else(|| Error::NotFound { path: self.path.clone(), tensor: name.to_string() })
    }

    /// Non-tensor leaves of a torch checkpoint (empty for safetensors), sorted by name.
    pub fn scalars(&self) -> impl Iterator<Item = (&str, &Scalar)> {
        self.scalars.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// One non-tensor leaf, if present.
    pub fn scalar(&self, name: &str) -> Option<&Scalar> {
        self.scalars.get(name)
    }

    fn tensor_err(&self, name: &str, detail: impl Into<String>) -> Error {
        Error::Tensor { path: self.path.clone(), tensor: name.to_string(), detail: detail.into() }
    }

    /// The packed little-endian bytes of a contiguous tensor, borrowed from the map. Strided
    /// views are refused, since their bytes are not one range; use [`Self::read_f32`].
    pub fn raw_bytes(&self, name: &str) -> Result<&[u8]> {
        let info = self.meta(name)?;
        let range = info.byte_range().ok_or_else(|| {
            self.tensor_err(
                name,
                format!("not contiguous (shape {:?}, strides {:?}); its bytes are not one range", info.shape, info.strides),
            )
        })?;
        self.backing.bytes().get(range).ok_or_else(|| self.tensor_err(name, "bytes lie outside the file"))
    }

    /// The tensor as row-major `f32`, converting from any [`DType`] (f16/bf16/f64 by value,
    /// integers and bools numerically) and gathering strided views. Always a copy.
    pub fn read_f32(&self, name: &str) -> Result<Vec<f32>> {
        let info = self.meta(name)?;
        let bytes = self.backing.bytes();
        let mut out = Vec::new();
        if let Some(range) = info.byte_range() {
            let data = bytes.get(range).ok_or_else(|| self.tensor_err(name, "bytes lie outside the file"))?;
            out.reserve_exact(info.numel());
            info.dtype.slice_to_f32(data, &mut out);
            return Ok(out);
        }
        // A strided view may address fewer bytes than it has elements (stride 0 broadcasts);
        // refuse expansions that would allocate more than the file could plausibly describe.
        let elem = info.dtype.size_bytes();
        if info.numel() > bytes.len() {
            return Err(
                self.tensor_err(name, format!("strided view of {} elements is larger than the {}-byte file", info.numel(), bytes.len()))
            );
        }
        let storage = bytes.get(info.storage_range()).ok_or_else(|| self.tensor_err(name, "storage lies outside the file"))?;
        out.reserve_exact(info.numel());
        let mut missing = false;
        info.for_each_offset(|offset| {
            let element = offset.checked_mul(elem).and_then(|start| storage.get(start..start.checked_add(elem)?));
            match element {
                Some(element) => info.dtype.slice_to_f32(element, &mut out),
                None => missing = true,
            }
        });
        if missing {
            return Err(self.tensor_err(name, "view addresses bytes outside its storage"));
        }
        Ok(out)
    }

    /// Drops this tensor's pages of the memory map from the process's resident memory (the
    /// kernel reads them from the file again if they are touched later). A loader that copies
    /// every tensor into its own buffers calls this after each copy; otherwise the mapped file
    /// stays resident next to the copies and the peak RSS is twice the weights. Best effort: a
    /// checkpoint held in memory, or a kernel that refuses the advice, keeps its pages. Takes
    /// `&mut self` so that no slice borrowed from the map can be alive while its pages go.
    pub fn evict(&mut self, name: &str) {
        let Backing::Mapped(map) = &self.backing else { return };
        let Some(range) = self.tensors.get(name).and_then(|info| info.byte_range().or(Some(info.storage_range()))) else {
            return;
        };
        const PAGE: usize = 4096;
        let start = range.start / PAGE * PAGE;
        let end = range.end.min(map.len());
        if start >= end {
            return;
        }
        #[cfg(unix)]
        // SAFETY: the map is read-only and private and was never written, so the pages the
        // kernel drops hold exactly the file's bytes and come back unchanged on the next read;
        // `&mut self` rules out any live borrow of the map while the advice is given.
        unsafe {
            let _ = map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, start, end - start);
        }
    }

    /// The tensor as `f32`, borrowed from the map when it is already contiguous, aligned,
    /// little-endian `f32` (the common case for both containers), else an owned conversion as
    /// [`Self::read_f32`] makes.
    pub fn f32_view(&self, name: &str) -> Result<Cow<'_, [f32]>> {
        let info = self.meta(name)?;
        if info.dtype == DType::F32 && cfg!(target_endian = "little") {
            if let Some(range) = info.byte_range() {
                if let Some(data) = self.backing.bytes().get(range) {
                    if let Ok(floats) = bytemuck::try_cast_slice::<u8, f32>(data) {
                        return Ok(Cow::Borrowed(floats));
                    }
                }
            }
        }
        self.read_f32(name).map(Cow::Owned)
    }
}

#[cfg(test)]
mod tests;
