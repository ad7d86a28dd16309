//! The safetensors container: `u64` header length, JSON header, packed little-endian data.

use std::collections::BTreeMap;
use std::path::Path;

use safetensors::tensor::Metadata;
use safetensors::Dtype;

use crate::{DType, Error, Result, TensorInfo};

/// Largest header read. Real checkpoints' headers are a few hundred kilobytes (about 100 bytes
/// per tensor); parsing JSON costs several times its size in memory, so the cap is far below the
/// safetensors crate's 100 MB. Checked before anything is parsed.
pub(crate) const MAX_HEADER_BYTES: u64 = 16 << 20;
/// Most tensors a header may describe: F5 has under a thousand, the largest public models tens
/// of thousands. Counted in the raw header before it is parsed, since each parsed entry costs a
/// map node, a name and a shape (a million tiny entries took close to a gigabyte).
pub(crate) const MAX_TENSORS: usize = 100_000;

/// Cheap sniff: the JSON header's `{` right after the 8-byte length. The length itself is not
/// judged here, so that a lying length is reported as a bad safetensors header rather than as
/// an unknown format.
pub(crate) fn looks_like_safetensors(bytes: &[u8]) -> bool {
    bytes.get(8) == Some(&b'{')
}

/// Reads and checks the header of a safetensors file held in `bytes` (the whole file).
///
/// The length arithmetic is done here with checked operations rather than through
/// `SafeTensors::read_metadata`, whose final size comparison can overflow on a header whose
/// offsets sum past `usize::MAX`; the JSON itself is still parsed and validated (offsets
/// contiguous, sizes matching shape × dtype) by the safetensors crate's `Metadata`.
pub(crate) fn parse(path: &Path, bytes: &[u8]) -> Result<BTreeMap<String, TensorInfo>> {
    let st_err = |detail: String| Error::Safetensors { path: path.to_path_buf(), detail };
    let mut len_bytes = [0u8; 8];
    len_bytes.copy_from_slice(bytes.get(..8).ok_or_else(|| st_err("file shorter than the 8-byte header length".into()))?);
    let header_len = u64::from_le_bytes(len_bytes);
    let available = bytes.len() as u64 - 8;
    if header_len > MAX_HEADER_BYTES || header_len > available {
        return Err(st_err(format!(
            "header length {header_len} exceeds the {available} bytes after it (or the \
             {MAX_HEADER_BYTES}-byte limit)"
        )));
    }
    // Both ≤ bytes.len().
    let data_start = 8 + header_len as usize;
    let header = bytes.get(8..data_start).ok_or_else(|| st_err("header outside the file".into()))?;
    // Every tensor entry has a `data_offsets` key; a count of that word bounds the entries from
    // above (a metadata string holding the word only makes the bound stricter).
    let entries = header.windows(OFFSETS_KEY.len()).filter(|w| *w == OFFSETS_KEY).count();
    if entries > MAX_TENSORS {
        return Err(st_err(format!("header describes {entries} tensors; the limit is {MAX_TENSORS}")));
    }
    let metadata: Metadata = serde_json::from_slice(header).map_err(|e| st_err(format!("header is not valid safetensors JSON: {e}")))?;
    let data_len = bytes.len() - data_start;
    if metadata.data_len() != data_len {
        return Err(st_err(format!("header describes {} data bytes but the file holds {data_len}", metadata.data_len())));
    }

    let mut tensors = BTreeMap::new();
    for (name, info) in metadata.tensors() {
        let tensor_err = |detail: String| Error::Tensor { path: path.to_path_buf(), tensor: name.clone(), detail };
        let dtype = convert_dtype(info.dtype).ok_or_else(|| tensor_err(format!("dtype {:?} is not supported", info.dtype)))?;
        let (start, end) = info.data_offsets;
        if start > end || end > data_len {
            return Err(tensor_err(format!("data offsets [{start}, {end}) lie outside the {data_len} data bytes")));
        }
        let storage = data_start + start..data_start + end;
        let shape = info.shape.clone();
        let strides = row_major_strides(&shape);
        let info = TensorInfo::checked(dtype, shape, strides, 0, storage).map_err(tensor_err)?;
        tensors.insert(name, info);
    }
    Ok(tensors)
}

const OFFSETS_KEY: &[u8] = b"\"data_offsets\"";

fn row_major_strides(shape: &[usize]) -> Vec<usize> {
    let mut strides = vec![1usize; shape.len()];
    let mut acc = 1usize;
    for (stride, &size) in strides.iter_mut().zip(shape).rev() {
        *stride = acc;
        // The product of the shape was validated by Metadata; saturate anyway.
        acc = acc.saturating_mul(size);
    }
    strides
}

fn convert_dtype(dtype: Dtype) -> Option<DType> {
    Some(match dtype {
        Dtype::F32 => DType::F32,
        Dtype::F16 => DType::F16,
        Dtype::BF16 => DType::BF16,
        Dtype::F64 => DType::F64,
        Dtype::I64 => DType::I64,
        Dtype::I32 => DType::I32,
        Dtype::I16 => DType::I16,
        Dtype::I8 => DType::I8,
        Dtype::U8 => DType::U8,
        Dtype::BOOL => DType::Bool,
        _ => return None,
    })
}
