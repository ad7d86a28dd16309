//! The PyTorch zip container: `<prefix>/data.pkl` plus one stored entry per storage.

use std::collections::{BTreeMap, HashMap};
use std::io::Cursor;
use std::ops::Range;
use std::path::Path;
use std::rc::Rc;

use zip::CompressionMethod;

use crate::pickle::{self, StorageKind, StorageRef, TensorRef, Value};
use crate::{DType, Error, Result, Scalar, TensorInfo};

/// Upper bound on values visited while flattening, as a multiple of the pickle length. A
/// genuine checkpoint visits each value once; shared references in a hostile file could
/// otherwise make the walk exponential.
const VISITS_PER_PICKLE_BYTE: usize = 4;

/// A stored zip entry: its data bytes in the file.
struct Entry {
    data: Range<usize>,
    compression: CompressionMethod,
    compressed_size: u64,
    size: u64,
}

pub(crate) struct Parsed {
    pub tensors: BTreeMap<String, TensorInfo>,
    pub scalars: BTreeMap<String, Scalar>,
}

/// Reads the table of a torch zip checkpoint held in `bytes` (the whole file).
pub(crate) fn parse(path: &Path, bytes: &[u8]) -> Result<Parsed> {
    let zip_err = |detail: String| Error::Zip { path: path.to_path_buf(), detail };
    let mut archive = zip::ZipArchive::new(Cursor::new(bytes)).map_err(|e| zip_err(format!("cannot read the central directory: {e}")))?;

    let mut entries: HashMap<String, Entry> = HashMap::with_capacity(archive.len().min(1 << 16));
    for index in 0..archive.len() {
        let file = archive.by_index_raw(index).map_err(|e| zip_err(format!("entry #{index}: {e}")))?;
        let name = file.name().map_err(|e| zip_err(format!("entry #{index} has a bad name: {e}")))?.into_owned();
        let start = file.data_start().ok_or_else(|| zip_err(format!("entry `{name}` has no data offset")))?;
        let compressed_size = file.compressed_size();
        let end = start.checked_add(compressed_size).filter(|&end| end <= bytes.len() as u64).ok_or_else(|| {
            zip_err(format!(
                "entry `{name}` ({compressed_size} bytes at {start}) runs past the end of \
                     the {}-byte file",
                bytes.len()
            ))
        })?;
        let entry = Entry {
            // Both ends are ≤ bytes.len(), so they fit in usize.
            data: start as usize..end as usize,
            compression: file.compression(),
            compressed_size,
            size: file.size(),
        };
        entries.insert(name, entry);
    }

    let mut pickles = entries.keys().filter(|name| *name == "data.pkl" || name.ends_with("/data.pkl"));
    let pkl_name = match (pickles.next(), pickles.next()) {
        (Some(name), None) => name.clone(),
        (None, _) => return Err(zip_err("no `data.pkl` record".into())),
        (Some(a), Some(b)) => return Err(zip_err(format!("more than one pickle record (`{a}`, `{b}`)"))),
    };
    let prefix = pkl_name.strip_suffix("data.pkl").unwrap_or_default().to_string();

    if let Some(order) = entries.get(&format!("{prefix}byteorder")) {
        let order = stored(path, &format!("{prefix}byteorder"), order, bytes)?;
        if order != b"little" {
            return Err(zip_err(format!(
                "byte order `{}` is not supported (only little-endian)",
                String::from_utf8_lossy(order.get(..order.len().min(16)).unwrap_or_default())
            )));
        }
    }

    let pkl_entry = entries.get(&pkl_name).ok_or_else(|| zip_err("data.pkl vanished".into()))?;
    let pkl = stored(path, &pkl_name, pkl_entry, bytes)?;
    let root = pickle::unpickle(pkl).map_err(|source| Error::Pickle { path: path.to_path_buf(), source })?;

    let mut flat = Flattener {
        path,
        budget: pkl.len().saturating_mul(VISITS_PER_PICKLE_BYTE).max(1024),
        tensors: Vec::new(),
        scalars: BTreeMap::new(),
    };
    flat.visit(&root, String::new(), 0)?;

    let mut tensors = BTreeMap::new();
    for (name, tensor) in flat.tensors {
        let info = locate(path, &name, &tensor, &prefix, &entries, bytes)?;
        if tensors.insert(name.clone(), info).is_some() {
            return Err(Error::Tensor { path: path.to_path_buf(), tensor: name, detail: "two entries flatten to this name".into() });
        }
    }
    Ok(Parsed { tensors, scalars: flat.scalars })
}

/// The bytes of an entry that must be stored uncompressed, as torch writes every record.
fn stored<'b>(path: &Path, name: &str, entry: &Entry, bytes: &'b [u8]) -> Result<&'b [u8]> {
    if entry.compression != CompressionMethod::Stored || entry.compressed_size != entry.size {
        return Err(Error::Zip {
            path: path.to_path_buf(),
            detail: format!("entry `{name}` is compressed ({:?}); torch writes records uncompressed", entry.compression),
        });
    }
    bytes
        .get(entry.data.clone())
        .ok_or_else(|| Error::Zip { path: path.to_path_buf(), detail: format!("entry `{name}` lies outside the file") })
}

/// Resolves a tensor's storage to its zip entry and checks the view against it.
fn locate(path: &Path, name: &str, tensor: &TensorRef, prefix: &str, entries: &HashMap<String, Entry>, bytes: &[u8]) -> Result<TensorInfo> {
    let tensor_err = |detail: String| Error::Tensor { path: path.to_path_buf(), tensor: name.to_string(), detail };
    let StorageRef { kind, key, numel } = &*tensor.storage;
    let dtype = match kind {
        StorageKind::Typed(dtype) => *dtype,
        // An untyped storage's numel counts bytes; a tensor over one is read as bytes.
        StorageKind::Untyped => DType::U8,
    };
    let entry_name = format!("{prefix}data/{key}");
    let entry = entries.get(&entry_name).ok_or_else(|| tensor_err(format!("storage record `{entry_name}` is missing")))?;
    let data = stored(path, &entry_name, entry, bytes)?;
    let storage_bytes = numel.checked_mul(dtype.size_bytes() as u64).filter(|&n| n <= data.len() as u64).ok_or_else(|| {
        tensor_err(format!("storage `{key}` declares {numel} {dtype:?} elements but its record holds {} bytes", data.len()))
    })?;
    // ≤ data.len(), so it fits in usize.
    let storage = entry.data.start..entry.data.start + storage_bytes as usize;
    let to_usize = |v: u64, what: &str| usize::try_from(v).map_err(|_| tensor_err(format!("{what} {v} does not fit in memory")));
    let shape = tensor.shape.iter().map(|&d| to_usize(d, "dimension")).collect::<Result<Vec<_>>>()?;
    let strides = tensor.strides.iter().map(|&s| to_usize(s, "stride")).collect::<Result<Vec<_>>>()?;
    let offset = to_usize(tensor.storage_offset, "storage offset")?;
    TensorInfo::checked(dtype, shape, strides, offset, storage).map_err(tensor_err)
}

/// Turns the nested pickle into flat `a.b.c` names, the way state_dict keys read.
struct Flattener<'p> {
    path: &'p Path,
    budget: usize,
    tensors: Vec<(String, Rc<TensorRef>)>,
    scalars: BTreeMap<String, Scalar>,
}

impl Flattener<'_> {
    fn visit(&mut self, value: &Value, name: String, depth: usize) -> Result<()> {
        let too_big = |detail: &str| Error::Zip { path: self.path.to_path_buf(), detail: format!("data.pkl {detail}") };
        self.budget = self.budget.checked_sub(1).ok_or_else(|| too_big("references its values too many times to flatten"))?;
        if depth > pickle::MAX_DEPTH {
            return Err(too_big("nests too deeply (or refers to itself)"));
        }
        let child = |key: &dyn std::fmt::Display| {
            if name.is_empty() {
                key.to_string()
            } else {
                format!("{name}.{key}")
            }
        };
        match value {
            Value::Dict(dict) => {
                for (key, item) in dict.items.borrow().entries.iter() {
                    self.visit(item, child(key), depth + 1)?;
                }
            }
            Value::List(list) => {
                for (index, item) in list.items.borrow().iter().enumerate() {
                    self.visit(item, child(&index), depth + 1)?;
                }
            }
            Value::Tuple(tuple) => {
                for (index, item) in tuple.items.iter().enumerate() {
                    self.visit(item, child(&index), depth + 1)?;
                }
            }
            Value::Tensor(tensor) => self.tensors.push((name, tensor.clone())),
            Value::Int(v) => {
                self.scalars.insert(name, Scalar::Int(*v));
            }
            Value::Float(v) => {
                self.scalars.insert(name, Scalar::Float(*v));
            }
            Value::Bool(v) => {
                self.scalars.insert(name, Scalar::Bool(*v));
            }
            Value::Str(v) => {
                self.scalars.insert(name, Scalar::Str(v.to_string()));
            }
            // Not weights and not useful scalars: skipped.
            Value::None | Value::LargeInt | Value::Bytes(_) | Value::Global(_) | Value::Storage(_) => {}
        }
        Ok(())
    }
}
