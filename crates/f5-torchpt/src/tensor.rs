use std::ops::Range;

/// Element types both containers can hold and this crate can convert to `f32`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[allow(missing_docs)] // torch/safetensors dtype names
pub enum DType {
    F32,
    F16,
    BF16,
    F64,
    I64,
    I32,
    I16,
    I8,
    U8,
    Bool,
}

impl DType {
    /// Bytes per element.
    pub fn size_bytes(self) -> usize {
        match self {
            DType::F64 | DType::I64 => 8,
            DType::F32 | DType::I32 => 4,
            DType::F16 | DType::BF16 | DType::I16 => 2,
            DType::I8 | DType::U8 | DType::Bool => 1,
        }
    }

    /// Converts one little-endian element. `bytes` must hold exactly `size_bytes()` bytes;
    /// integers above 2^24 in magnitude lose precision, as `as f32` does.
    fn element_to_f32(self, bytes: &[u8]) -> f32 {
        fn arr<const N: usize>(bytes: &[u8]) -> [u8; N] {
            let mut out = [0u8; N];
            if let Some(src) = bytes.get(..N) {
                out.copy_from_slice(src);
            }
            out
        }
        match self {
            DType::F32 => f32::from_le_bytes(arr(bytes)),
            DType::F16 => f16_le(arr(bytes)),
            DType::BF16 => bf16_le(arr(bytes)),
            DType::F64 => f64::from_le_bytes(arr(bytes)) as f32,
            DType::I64 => i64::from_le_bytes(arr(bytes)) as f32,
            DType::I32 => i32::from_le_bytes(arr(bytes)) as f32,
            DType::I16 => f32::from(i16::from_le_bytes(arr(bytes))),
            DType::I8 => f32::from(i8::from_le_bytes(arr(bytes))),
            DType::U8 => f32::from(u8::from_le_bytes(arr(bytes))),
            DType::Bool => f32::from(u8::from(arr::<1>(bytes)[0] != 0)),
        }
    }

    /// Converts a packed little-endian run of elements.
    ///
    /// One loop per type, so that the type is matched once per run rather than per element:
    /// the compiler then turns the common runs (f32, f16, bf16) into vector code. Kokoro's f32
    /// checkpoint (82 M weights) took ~0.27 s of CPU time through a match per element, a fifth
    /// of a short `f5 synth` command's, and takes ~0.04 s this way, most of it reading the
    /// mapped file's pages.
    pub(crate) fn slice_to_f32(self, bytes: &[u8], out: &mut Vec<f32>) {
        fn run<const N: usize>(bytes: &[u8], out: &mut Vec<f32>, convert: impl Fn([u8; N]) -> f32) {
            let (elements, _) = bytes.as_chunks::<N>();
            out.extend(elements.iter().map(|&element| convert(element)));
        }
        match self {
            DType::F32 => run(bytes, out, f32::from_le_bytes),
            DType::F16 => run(bytes, out, f16_le),
            DType::BF16 => run(bytes, out, bf16_le),
            _ => {
                let size = self.size_bytes();
                out.extend(bytes.chunks_exact(size).map(|element| self.element_to_f32(element)));
            }
        }
    }
}

/// A little-endian IEEE half as f32 (exact).
fn f16_le(bytes: [u8; 2]) -> f32 {
    half::f16::from_le_bytes(bytes).to_f32()
}

/// A little-endian bfloat16 as f32 (exact).
fn bf16_le(bytes: [u8; 2]) -> f32 {
    half::bf16::from_le_bytes(bytes).to_f32()
}

/// A non-tensor leaf of a torch checkpoint (`step`, `update`, hyper-parameters, …).
#[derive(Debug, Clone, PartialEq)]
#[allow(missing_docs)] // the Python type of the leaf
pub enum Scalar {
    Int(i64),
    Float(f64),
    Bool(bool),
    Str(String),
}

/// Where a tensor's elements are in the mapped file and how to walk them.
///
/// Shapes, strides and the storage offset are in elements, as torch reports them. Every
/// `TensorInfo` a [`crate::Checkpoint`] hands out has been checked: the storage range lies
/// inside the file, and every element the view can address lies inside the storage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorInfo {
    pub(crate) dtype: DType,
    pub(crate) shape: Vec<usize>,
    pub(crate) strides: Vec<usize>,
    pub(crate) storage_offset: usize,
    pub(crate) storage: Range<usize>,
}

impl TensorInfo {
    /// Builds a view and checks it against its storage. `storage` is the byte range of the
    /// whole storage in the file (already checked against the file length by the caller).
    pub(crate) fn checked(
        dtype: DType,
        shape: Vec<usize>,
        strides: Vec<usize>,
        storage_offset: usize,
        storage: Range<usize>,
    ) -> Result<Self, String> {
        if shape.len() != strides.len() {
            return Err(format!("shape has {} dims but strides have {}", shape.len(), strides.len()));
        }
        let elem = dtype.size_bytes();
        let storage_elems = storage.len() / elem;
        let numel = shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d)).ok_or("element count overflows")?;
        if numel > 0 {
            let last = shape
                .iter()
                .zip(&strides)
                .try_fold(storage_offset, |acc, (&size, &stride)| (size - 1).checked_mul(stride).and_then(|step| acc.checked_add(step)));
            match last {
                Some(last) if last < storage_elems => {}
                _ => {
                    return Err(format!(
                        "view (offset {storage_offset}, shape {shape:?}, strides {strides:?}) \
                         reaches past its storage of {storage_elems} elements"
                    ))
                }
            }
        }
        Ok(Self { dtype, shape, strides, storage_offset, storage })
    }

    /// Element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Dimensions, outermost first.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// Element strides per dimension (torch's `tensor.stride()`).
    pub fn strides(&self) -> &[usize] {
        &self.strides
    }

    /// First element of the view, counted in elements from the start of its storage.
    pub fn storage_offset(&self) -> usize {
        self.storage_offset
    }

    /// Byte range of the whole backing storage in the file (shared by views of one storage).
    pub fn storage_range(&self) -> Range<usize> {
        self.storage.clone()
    }

    /// Number of elements.
    pub fn numel(&self) -> usize {
        // Checked not to overflow in `checked`.
        self.shape.iter().product()
    }

    /// True when the elements are packed in row-major order, so the data is one byte range.
    pub fn is_contiguous(&self) -> bool {
        let mut expected = 1usize;
        for (&size, &stride) in self.shape.iter().zip(&self.strides).rev() {
            // Size-1 dimensions may carry any stride; torch writes such strides freely.
            if size != 1 && stride != expected {
                return false;
            }
            expected = expected.saturating_mul(size);
        }
        true
    }

    /// The bytes of a contiguous view in the file, or `None` for a strided one.
    pub fn byte_range(&self) -> Option<Range<usize>> {
        if !self.is_contiguous() {
            return None;
        }
        if self.numel() == 0 {
            return Some(self.storage.start..self.storage.start);
        }
        let elem = self.dtype.size_bytes();
        // In bounds: `checked` proved offset + numel - 1 < storage elements.
        let start = self.storage.start + self.storage_offset * elem;
        Some(start..start + self.numel() * elem)
    }

    /// Row-major element offsets (in elements, relative to the storage) of a strided view.
    pub(crate) fn for_each_offset(&self, mut visit: impl FnMut(usize)) {
        if self.numel() == 0 {
            return;
        }
        let rank = self.shape.len();
        let mut index = vec![0usize; rank];
        let mut offset = self.storage_offset;
        loop {
            visit(offset);
            // Odometer increment from the innermost dimension.
            let mut dim = rank;
            loop {
                if dim == 0 {
                    return;
                }
                dim -= 1;
                let (Some(i), Some(&size), Some(&stride)) = (index.get_mut(dim), self.shape.get(dim), self.strides.get(dim)) else {
                    return;
                };
                // Wrapping: a size-1 dimension may carry any stride; the sum comes back in range.
                *i += 1;
                offset = offset.wrapping_add(stride);
                if *i < size {
                    break;
                }
                offset = offset.wrapping_sub(stride.wrapping_mul(size));
                *i = 0;
            }
        }
    }
}
