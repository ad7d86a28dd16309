//! Writing `torch.save`-compatible checkpoints of f32 tensors, so tools can produce `.pt`/`.pth`
//! files that PyTorch (`torch.load`, also with `weights_only=True`) and this crate's reader both
//! open, without Python.
//!
//! The container is what `torch.save` writes since 1.6: a zip archive, every record stored
//! (uncompressed) under one prefix folder, holding
//! `data.pkl` (a protocol-2 pickle of the object, tensors as `torch._utils._rebuild_tensor_v2`
//! calls whose storages are persistent ids `('storage', torch.FloatStorage, KEY, 'cpu', NUMEL)`),
//! `data/KEY` (each storage's little-endian bytes, aligned to 64 bytes in the file as torch aligns
//! them, so a memory map sees aligned f32), `byteorder`, `version`, `.format_version` and
//! `.storage_alignment`. The pickle uses only opcodes and globals that `torch.load`'s
//! `weights_only` unpickler and this crate's allow-list accept.

use std::fs::File;
use std::io::{BufWriter, Seek, Write};
use std::path::{Path, PathBuf};

use zip::write::SimpleFileOptions;
use zip::{CompressionMethod, ZipWriter};

use crate::{Error, Result};

/// One value of the object to save: a tensor or a dict of values (as a state dict, or a dict of
/// state dicts such as Kokoro's release checkpoint). Dicts keep their insertion order, as
/// Python dicts do.
#[derive(Debug, Clone)]
pub enum SaveValue<'a> {
    /// A contiguous row-major f32 tensor.
    Tensor(F32Tensor<'a>),
    /// A `dict` from string keys to values, in this order.
    Dict(Vec<(String, SaveValue<'a>)>),
}

/// A contiguous row-major f32 tensor to write: `data.len()` must equal the product of `shape`
/// (1 for a 0-d tensor).
#[derive(Debug, Clone)]
pub struct F32Tensor<'a> {
    /// Sizes, outermost first.
    pub shape: Vec<usize>,
    /// Elements in row-major order.
    pub data: &'a [f32],
}

impl<'a> F32Tensor<'a> {
    /// A tensor of `shape` over `data`.
    pub fn new(shape: impl Into<Vec<usize>>, data: &'a [f32]) -> Self {
        F32Tensor { shape: shape.into(), data }
    }
}

/// Alignment of every storage record's bytes in the file (what torch writes and records in
/// `.storage_alignment`).
const STORAGE_ALIGNMENT: u16 = 64;
/// Python's pickler emits `SETITEMS` in batches of this many pairs; torch's unpickler accepts any
/// batch size, but keeping Python's makes our pickles read like torch's own in `pickletools`.
const SETITEMS_BATCH: usize = 1000;
/// The archive's top folder. `torch.save` uses the file's stem there; the reader only needs all
/// records under one folder, and a fixed name keeps odd file names out of the archive.
const ARCHIVE_PREFIX: &str = "archive";

/// Writes `value` to `path` as `torch.save(value, path)` would, atomically: the archive is written
/// next to `path` under a temporary name and renamed over it when complete, so an interrupted
/// write never leaves a truncated checkpoint under the real name.
pub fn save(path: impl AsRef<Path>, value: &SaveValue<'_>) -> Result<()> {
    let path = path.as_ref();
    let mut tensors = Vec::new();
    let pickle = pickle_value(path, value, &mut tensors)?;
    let tmp = temporary_sibling(path);
    let write_err = |detail: String| Error::Write { path: path.to_path_buf(), detail };
    let result = (|| -> Result<()> {
        let file = File::create(&tmp).map_err(|source| Error::Io { path: tmp.clone(), source })?;
        let mut zip = ZipWriter::new(BufWriter::with_capacity(1 << 20, file));
        let small = SimpleFileOptions::default().compression_method(CompressionMethod::Stored);
        let record = |zip: &mut ZipWriter<_>, name: &str, bytes: &[u8], options: SimpleFileOptions| -> Result<()> {
            zip.start_file(format!("{ARCHIVE_PREFIX}/{name}"), options).map_err(|e| write_err(format!("record {name}: {e}")))?;
            zip.write_all(bytes).map_err(|e| write_err(format!("record {name}: {e}")))
        };
        record(&mut zip, "data.pkl", &pickle, small)?;
        record(&mut zip, ".format_version", b"1", small)?;
        record(&mut zip, ".storage_alignment", STORAGE_ALIGNMENT.to_string().as_bytes(), small)?;
        record(&mut zip, "byteorder", b"little", small)?;
        for (key, tensor) in tensors.iter().enumerate() {
            let bytes = tensor.data.len() * 4;
            let options = small.with_alignment(STORAGE_ALIGNMENT).large_file(bytes as u64 >= u64::from(u32::MAX));
            let name = format!("data/{key}");
            zip.start_file(format!("{ARCHIVE_PREFIX}/{name}"), options).map_err(|e| write_err(format!("record {name}: {e}")))?;
            write_f32_le(&mut zip, tensor.data).map_err(|e| write_err(format!("record {name}: {e}")))?;
        }
        record(&mut zip, "version", b"3\n", small)?;
        let mut out = zip.finish().map_err(|e| write_err(format!("cannot finish the archive: {e}")))?;
        out.flush().map_err(|source| Error::Io { path: tmp.clone(), source })?;
        out.get_ref().sync_all().map_err(|source| Error::Io { path: tmp.clone(), source })?;
        Ok(())
    })();
    match result {
        Ok(()) => std::fs::rename(&tmp, path).map_err(|source| Error::Io { path: path.to_path_buf(), source }),
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(e)
        }
    }
}

/// Writes a dict of state dicts (`{"bert": {"module.x": tensor, …}, …}`), the layout of
/// checkpoints such as Kokoro's `kokoro-v1_0.pth`.
pub fn save_state_dicts<'a>(path: impl AsRef<Path>, dicts: Vec<(String, Vec<(String, F32Tensor<'a>)>)>) -> Result<()> {
    let value = SaveValue::Dict(
        dicts
            .into_iter()
            .map(|(name, sd)| (name, SaveValue::Dict(sd.into_iter().map(|(k, t)| (k, SaveValue::Tensor(t))).collect())))
            .collect(),
    );
    save(path, &value)
}

/// Writes one bare tensor (`torch.save(tensor, path)`), the format of voice packs.
pub fn save_tensor(path: impl AsRef<Path>, tensor: F32Tensor<'_>) -> Result<()> {
    save(path, &SaveValue::Tensor(tensor))
}

fn temporary_sibling(path: &Path) -> PathBuf {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    path.with_file_name(format!(".{name}.{}.part", std::process::id()))
}

fn write_f32_le<W: Write + Seek>(zip: &mut ZipWriter<W>, data: &[f32]) -> std::io::Result<()> {
    const CHUNK: usize = 1 << 14;
    let mut buf = Vec::with_capacity(CHUNK * 4);
    for chunk in data.chunks(CHUNK) {
        buf.clear();
        for v in chunk {
            buf.extend_from_slice(&v.to_le_bytes());
        }
        zip.write_all(&buf)?;
    }
    Ok(())
}

/// The pickle of `value`; the tensors it references, in storage-key order, go to `tensors`.
fn pickle_value<'v, 'a>(path: &Path, value: &'v SaveValue<'a>, tensors: &mut Vec<&'v F32Tensor<'a>>) -> Result<Vec<u8>> {
    let mut p = Pickler::default();
    p.out.extend_from_slice(&[op::PROTO, 2]);
    p.value(path, value, tensors, 0)?;
    p.out.push(op::STOP);
    Ok(p.out)
}

/// Nesting deeper than this is refused (the reader refuses it too).
const MAX_DEPTH: usize = 64;

mod op {
    pub const PROTO: u8 = 0x80;
    pub const STOP: u8 = b'.';
    pub const MARK: u8 = b'(';
    pub const EMPTY_DICT: u8 = b'}';
    pub const SETITEMS: u8 = b'u';
    pub const EMPTY_TUPLE: u8 = b')';
    pub const TUPLE: u8 = b't';
    pub const TUPLE1: u8 = 0x85;
    pub const TUPLE2: u8 = 0x86;
    pub const TUPLE3: u8 = 0x87;
    pub const BINUNICODE: u8 = b'X';
    pub const BININT: u8 = b'J';
    pub const BININT1: u8 = b'K';
    pub const BININT2: u8 = b'M';
    pub const LONG1: u8 = 0x8a;
    pub const NEWFALSE: u8 = 0x89;
    pub const GLOBAL: u8 = b'c';
    pub const REDUCE: u8 = b'R';
    pub const BINPERSID: u8 = b'Q';
    pub const BINPUT: u8 = b'q';
    pub const LONG_BINPUT: u8 = b'r';
    pub const BINGET: u8 = b'h';
    pub const LONG_BINGET: u8 = b'j';
}

/// A minimal protocol-2 pickler: strings and globals are memoised (`BINPUT`/`BINGET`) the way
/// Python's pickler shares them, so 548 tensors do not repeat `'storage'`, `'cpu'` and the
/// rebuild function's name 548 times.
#[derive(Default)]
struct Pickler {
    out: Vec<u8>,
    memo: std::collections::HashMap<String, u32>,
}

impl Pickler {
    fn value<'v, 'a>(&mut self, path: &Path, value: &'v SaveValue<'a>, tensors: &mut Vec<&'v F32Tensor<'a>>, depth: usize) -> Result<()> {
        if depth > MAX_DEPTH {
            return Err(Error::Write { path: path.to_path_buf(), detail: format!("nesting deeper than {MAX_DEPTH}") });
        }
        match value {
            SaveValue::Dict(items) => {
                self.out.push(op::EMPTY_DICT);
                for batch in items.chunks(SETITEMS_BATCH) {
                    self.out.push(op::MARK);
                    for (key, item) in batch {
                        self.string(key);
                        self.value(path, item, tensors, depth + 1)?;
                    }
                    self.out.push(op::SETITEMS);
                }
            }
            SaveValue::Tensor(t) => {
                let numel: usize = t.shape.iter().product();
                if numel != t.data.len() {
                    return Err(Error::Write {
                        path: path.to_path_buf(),
                        detail: format!("a tensor of shape {:?} needs {numel} elements, got {}", t.shape, t.data.len()),
                    });
                }
                let key = tensors.len();
                tensors.push(t);
                self.tensor(key, &t.shape, numel);
            }
        }
        Ok(())
    }

    /// `_rebuild_tensor_v2(storage, 0, shape, contiguous strides, False, OrderedDict())`.
    fn tensor(&mut self, key: usize, shape: &[usize], numel: usize) {
        self.global("torch._utils", "_rebuild_tensor_v2");
        self.out.push(op::MARK);
        // the persistent id ('storage', torch.FloatStorage, '<key>', 'cpu', numel)
        self.out.push(op::MARK);
        self.string("storage");
        self.global("torch", "FloatStorage");
        self.string(&key.to_string());
        self.string("cpu");
        self.int(numel as u64);
        self.out.push(op::TUPLE);
        self.out.push(op::BINPERSID);
        self.int(0); // storage offset
        let mut strides = vec![0usize; shape.len()];
        let mut step = 1usize;
        for (stride, &size) in strides.iter_mut().zip(shape).rev() {
            *stride = step;
            step = step.saturating_mul(size.max(1));
        }
        self.int_tuple(shape);
        self.int_tuple(&strides);
        self.out.push(op::NEWFALSE); // requires_grad
        self.global("collections", "OrderedDict"); // backward hooks: OrderedDict()
        self.out.push(op::EMPTY_TUPLE);
        self.out.push(op::REDUCE);
        self.out.push(op::TUPLE);
        self.out.push(op::REDUCE);
    }

    fn int_tuple(&mut self, values: &[usize]) {
        match values.len() {
            0 => self.out.push(op::EMPTY_TUPLE),
            n @ 1..=3 => {
                for &v in values {
                    self.int(v as u64);
                }
                self.out.push([op::TUPLE1, op::TUPLE2, op::TUPLE3][n - 1]);
            }
            _ => {
                self.out.push(op::MARK);
                for &v in values {
                    self.int(v as u64);
                }
                self.out.push(op::TUPLE);
            }
        }
    }

    fn int(&mut self, v: u64) {
        if v < 0x100 {
            self.out.extend_from_slice(&[op::BININT1, v as u8]);
        } else if v < 0x1_0000 {
            self.out.push(op::BININT2);
            self.out.extend_from_slice(&(v as u16).to_le_bytes());
        } else if v <= i32::MAX as u64 {
            self.out.push(op::BININT);
            self.out.extend_from_slice(&(v as u32).to_le_bytes());
        } else {
            // LONG1: little-endian two's complement, with a zero byte on top so it stays positive
            let mut bytes = v.to_le_bytes().to_vec();
            while bytes.len() > 1 && bytes[bytes.len() - 1] == 0 && bytes[bytes.len() - 2] & 0x80 == 0 {
                bytes.pop();
            }
            self.out.extend_from_slice(&[op::LONG1, bytes.len() as u8]);
            self.out.extend_from_slice(&bytes);
        }
    }

    fn string(&mut self, s: &str) {
        let memo_key = format!("s:{s}");
        if self.get(&memo_key) {
            return;
        }
        self.out.push(op::BINUNICODE);
        self.out.extend_from_slice(&(s.len() as u32).to_le_bytes());
        self.out.extend_from_slice(s.as_bytes());
        self.put(memo_key);
    }

    fn global(&mut self, module: &str, name: &str) {
        let memo_key = format!("g:{module}\n{name}");
        if self.get(&memo_key) {
            return;
        }
        self.out.push(op::GLOBAL);
        self.out.extend_from_slice(module.as_bytes());
        self.out.push(b'\n');
        self.out.extend_from_slice(name.as_bytes());
        self.out.push(b'\n');
        self.put(memo_key);
    }

    /// Emits a memo read of `key` if it was stored before.
    fn get(&mut self, key: &str) -> bool {
        let Some(&index) = self.memo.get(key) else { return false };
        if index < 0x100 {
            self.out.extend_from_slice(&[op::BINGET, index as u8]);
        } else {
            self.out.push(op::LONG_BINGET);
            self.out.extend_from_slice(&index.to_le_bytes());
        }
        true
    }

    /// Stores the value just pushed in the next memo slot.
    fn put(&mut self, key: String) {
        let index = self.memo.len() as u32;
        if index < 0x100 {
            self.out.extend_from_slice(&[op::BINPUT, index as u8]);
        } else {
            self.out.push(op::LONG_BINPUT);
            self.out.extend_from_slice(&index.to_le_bytes());
        }
        self.memo.insert(key, index);
    }
}
