//! One weight source for every model: canonical names, shape checks, optional tensors,
//! weight-norm folding, mapped pages dropped once copied.

use std::collections::HashMap;
use std::path::Path;

use f5_gpukit::{Backend, Conv1dSpec};
use f5_torchpt::Checkpoint;

use crate::{NnError, Result};

/// A checkpoint's tensors under canonical names.
///
/// Canonical names drop every `module` path component (PyTorch `DataParallel` wraps a model as
/// `.module`: Kokoro's release stores `bert.module.embeddings…`) and read the
/// `parametrizations.weight.original0`/`original1` naming of `torch.nn.utils.parametrizations.weight_norm`
/// as the classic `weight_g`/`weight_v`. So one model loads the release layout, the same weights
/// with the prefix stripped, and the parametrization-style names alike.
pub struct Weights {
    ckpt: Checkpoint,
    /// Canonical name → name in the file.
    names: HashMap<String, String>,
    label: String,
    /// How the weights loaded now go up (see [`Weights::set_storage`]).
    storage: WeightStorage,
}

/// How [`Weights`] uploads the weights that layers multiply by (GEMM weights, convolution
/// filters, LSTM recurrences), per group of layers: set with [`Weights::set_storage`] before
/// loading them. Biases and norms always go up as plain f32.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WeightStorage {
    /// GEMM weights ([`Scope::gemm_weight`], `Linear`, `Conv1d::load_weight`) through
    /// [`Backend::upload_weight`], so a backend may compute them in lower precision (bf16 on the
    /// bf16 CPU backend); the rest (`Conv1d::load`, LSTM recurrences) as plain f32.
    #[default]
    Fast,
    /// Every such weight as plain f32 ([`Backend::upload`]): for the layers whose outputs a
    /// model needs more exactly than bf16's 2⁻⁸ gives.
    F32,
    /// Computed in f32 like [`WeightStorage::F32`], stored compactly where the backend can:
    /// through [`Backend::upload_weight_compact`] (f16 storage on the bf16 CPU backend, half the
    /// memory; plain f32 elsewhere). For such layers when their outputs were measured to
    /// tolerate f16 rounding of the weights.
    F32Compact,
    /// `Linear` weights (a 2-D [`Scope::gemm_weight`], [`Scope::upload_linear_weight`]) through
    /// [`Backend::upload_linear_weight_near_f32`]: computed to about 16 significant bits where a
    /// backend has a faster way than f32 arithmetic (the bf16 CPU backend on AMX: two bf16 parts
    /// per value, ~2⁻¹⁴ per product), exactly f32 elsewhere; everything else as
    /// [`WeightStorage::F32`]. For layers measured to need more than bf16 and not all of f32.
    NearF32,
}

/// The canonical form of a tensor name (see [`Weights`]).
pub fn canonical(name: &str) -> String {
    let parts: Vec<&str> = name.split('.').filter(|p| *p != "module").collect();
    let joined = parts.join(".");
    if let Some(stem) = joined.strip_suffix(".parametrizations.weight.original0") {
        return format!("{stem}.weight_g");
    }
    if let Some(stem) = joined.strip_suffix(".parametrizations.weight.original1") {
        return format!("{stem}.weight_v");
    }
    joined
}

impl Weights {
    /// Opens a `.safetensors` or PyTorch zip checkpoint (memory-mapped; nothing is copied yet).
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        Self::from_checkpoint(Checkpoint::open(path)?)
    }

    /// Wraps an opened checkpoint, indexing its names canonically.
    pub fn from_checkpoint(ckpt: Checkpoint) -> Result<Self> {
        let label = ckpt.path().display().to_string();
        let mut names = HashMap::new();
        let mut all: Vec<&str> = ckpt.names().collect();
        all.sort_unstable();
        for name in all {
            let canon = canonical(name);
            if let Some(first) = names.insert(canon.clone(), name.to_string()) {
                return Err(NnError::Ambiguous { path: label, first, second: name.to_string(), canonical: canon });
            }
        }
        Ok(Weights { ckpt, names, label, storage: WeightStorage::Fast })
    }

    /// How the weights loaded from now on go up (until set again); see [`WeightStorage`].
    /// E.g. Kokoro's prosody loads as [`WeightStorage::F32Compact`]: its F0 drives a sine phase
    /// over the whole utterance and moves 3–10 % with bf16 weights, ~1e-4 with f16-stored ones.
    pub fn set_storage(&mut self, storage: WeightStorage) {
        self.storage = storage;
    }

    /// The file the weights are read from (for metadata a model reads besides tensors).
    pub fn checkpoint(&self) -> &Checkpoint {
        &self.ckpt
    }

    /// Every canonical tensor name, sorted.
    pub fn names(&self) -> Vec<&str> {
        let mut v: Vec<&str> = self.names.keys().map(String::as_str).collect();
        v.sort_unstable();
        v
    }

    /// Whether a tensor of this canonical name is in the file (optional tensors).
    pub fn contains(&self, name: &str) -> bool {
        self.names.contains_key(name)
    }

    /// The shape of a tensor, if the file has it.
    pub fn shape(&self, name: &str) -> Option<&[usize]> {
        let actual = self.names.get(name)?;
        self.ckpt.meta(actual).ok().map(|m| m.shape())
    }

    /// A view of every tensor (an empty prefix).
    pub fn root(&mut self) -> Scope<'_> {
        Scope { w: self, prefix: String::new() }
    }

    /// A view of the tensors under `prefix.` — a sub-module's names as the sub-module sees them.
    pub fn scope(&mut self, prefix: &str) -> Scope<'_> {
        Scope { w: self, prefix: prefix.to_string() }
    }

    fn missing(&self, tensor: &str) -> NnError {
        NnError::Missing { path: self.label.clone(), tensor: tensor.to_string() }
    }

    fn shape_err(&self, tensor: &str, detail: String) -> NnError {
        NnError::Shape { path: self.label.clone(), tensor: tensor.to_string(), detail }
    }

    /// A host copy of a tensor checked against `shape`; its mapped pages are dropped at once, so
    /// the file and the copies are never resident together.
    fn read(&mut self, name: &str, shape: &[usize]) -> Result<Option<Vec<f32>>> {
        let Some(actual) = self.names.get(name).cloned() else { return Ok(None) };
        let found = self.ckpt.meta(&actual)?.shape().to_vec();
        if found != shape {
            return Err(self.shape_err(name, format!("found {found:?}, the architecture needs {shape:?}")));
        }
        let data = self.ckpt.read_f32(&actual)?;
        self.ckpt.evict(&actual);
        Ok(Some(data))
    }

    /// A weight that may be stored weight-normed: `name` itself, or `name_g`/`name_v` folded
    /// into `g·v/‖v‖` with the norm over every dimension but 0 (per output channel of a Conv1d,
    /// per input channel of a ConvTranspose1d — whose `weight_g` is `[in, 1, 1]`). A slice whose
    /// `v` is all zero folds to zeros (PyTorch would give NaN there; such channels carry nothing).
    fn read_normed(&mut self, name: &str, shape: &[usize]) -> Result<Option<Vec<f32>>> {
        if let Some(w) = self.read(name, shape)? {
            return Ok(Some(w));
        }
        let (gn, vn) = (format!("{name}_g"), format!("{name}_v"));
        if !self.names.contains_key(&gn) && !self.names.contains_key(&vn) {
            return Ok(None);
        }
        let rows = shape.first().copied().unwrap_or(1);
        let mut g_shape = vec![1usize; shape.len().max(1)];
        g_shape[0] = rows;
        let g = self.read(&gn, &g_shape)?.ok_or_else(|| self.missing(&gn))?;
        let mut v = self.read(&vn, shape)?.ok_or_else(|| self.missing(&vn))?;
        let per = v.len().checked_div(rows).unwrap_or(0);
        if per > 0 {
            for (slice, &gain) in v.chunks_mut(per).zip(&g) {
                let norm = slice.iter().map(|&x| (x as f64) * (x as f64)).sum::<f64>().sqrt();
                let f = if norm > 0.0 { gain as f64 / norm } else { 0.0 };
                slice.iter_mut().for_each(|x| *x = (*x as f64 * f) as f32);
            }
        }
        Ok(Some(v))
    }
}

/// A prefix view of [`Weights`]: `scope.tensor("weight", …)` reads `prefix.weight`.
pub struct Scope<'w> {
    w: &'w mut Weights,
    prefix: String,
}

impl Scope<'_> {
    /// The full canonical name of `name` in this scope.
    pub fn name(&self, name: &str) -> String {
        match (self.prefix.is_empty(), name.is_empty()) {
            (true, _) => name.to_string(),
            (false, true) => self.prefix.clone(),
            (false, false) => format!("{}.{name}", self.prefix),
        }
    }

    /// A narrower view: `scope("a").scope("b")` reads `a.b.…`.
    pub fn scope(&mut self, sub: &str) -> Scope<'_> {
        let prefix = self.name(sub);
        Scope { w: self.w, prefix }
    }

    /// Whether `name` under this scope is in the file (optional tensors).
    pub fn contains(&self, name: &str) -> bool {
        self.w.contains(&self.name(name))
    }

    /// The error for a tensor this scope needs and the file lacks.
    pub fn missing(&self, name: &str) -> NnError {
        self.w.missing(&self.name(name))
    }

    /// The shape of `name` under this scope, when present.
    pub fn shape(&self, name: &str) -> Option<&[usize]> {
        self.w.shape(&self.name(name))
    }

    /// A host copy of a required tensor of exactly `shape`.
    pub fn host(&mut self, name: &str, shape: &[usize]) -> Result<Vec<f32>> {
        let full = self.name(name);
        self.w.read(&full, shape)?.ok_or_else(|| self.w.missing(&full))
    }

    /// A tensor the file may lack (an affine the model never trained, a buffer some exporters
    /// drop): `None` if absent, an error if present with the wrong shape.
    pub fn host_optional(&mut self, name: &str, shape: &[usize]) -> Result<Option<Vec<f32>>> {
        let full = self.name(name);
        self.w.read(&full, shape)
    }

    /// A weight stored plainly or weight-normed (`name_g`/`name_v`), folded; see [`Weights`].
    pub fn host_normed(&mut self, name: &str, shape: &[usize]) -> Result<Vec<f32>> {
        let full = self.name(name);
        self.w.read_normed(&full, shape)?.ok_or_else(|| self.w.missing(&full))
    }

    /// A required tensor on the device.
    pub fn tensor<B: Backend>(&mut self, kit: &B, name: &str, shape: &[usize]) -> Result<B::Buf> {
        let data = self.host(name, shape)?;
        Ok(kit.upload(&data)?)
    }

    /// An optional tensor on the device.
    pub fn tensor_optional<B: Backend>(&mut self, kit: &B, name: &str, shape: &[usize]) -> Result<Option<B::Buf>> {
        match self.host_optional(name, shape)? {
            Some(data) => Ok(Some(kit.upload(&data)?)),
            None => Ok(None),
        }
    }

    /// A weight that feeds GEMMs: uploaded through [`Backend::upload_weight`], so a backend may
    /// keep a faster lower-precision copy (a 2-D one, a `Linear`'s `[out, inp]`, as
    /// [`Scope::upload_linear_weight`] uploads it).
    pub fn gemm_weight<B: Backend>(&mut self, kit: &B, name: &str, shape: &[usize]) -> Result<B::Buf> {
        let data = self.host_normed(name, shape)?;
        match *shape {
            [out, inp] => self.upload_linear_weight(kit, &data, out, inp),
            _ => self.upload_gemm_weight(kit, &data),
        }
    }

    /// As [`Scope::gemm_weight`], through [`Backend::upload_weight_int8`]: a backend with an int8
    /// mode may compute the GEMMs with it in int8 (under [`WeightStorage::Fast`], the default;
    /// otherwise as [`Scope::upload_f32_weight`] uploads).
    pub fn gemm_weight_int8<B: Backend>(&mut self, kit: &B, name: &str, shape: &[usize]) -> Result<B::Buf> {
        let data = self.host_normed(name, shape)?;
        self.upload_gemm_weight_int8(kit, &data)
    }

    /// [`Scope::upload_gemm_weight`] through [`Backend::upload_weight_int8`].
    pub fn upload_gemm_weight_int8<B: Backend>(&self, kit: &B, data: &[f32]) -> Result<B::Buf> {
        match self.w.storage {
            WeightStorage::Fast => Ok(kit.upload_weight_int8(data)?),
            _ => self.upload_f32_weight(kit, data),
        }
    }

    /// A dense convolution's filters for `spec` through [`Backend::upload_conv_filters`] under
    /// [`WeightStorage::Fast`] (as a GEMM weight, which a backend may keep packed for its
    /// convolution kernel); otherwise as [`Scope::upload_f32_weight`] uploads.
    pub fn upload_conv_filters<B: Backend>(&self, kit: &B, data: &[f32], spec: &Conv1dSpec) -> Result<B::Buf> {
        match self.w.storage {
            WeightStorage::Fast => Ok(kit.upload_conv_filters(data, spec)?),
            _ => self.upload_f32_weight(kit, data),
        }
    }

    /// A dense convolution's filters for `spec` through [`Backend::upload_conv_filters_int8`]
    /// under [`WeightStorage::Fast`]; otherwise as [`Scope::upload_f32_weight`] uploads.
    pub fn upload_conv_filters_int8<B: Backend>(&self, kit: &B, data: &[f32], spec: &Conv1dSpec) -> Result<B::Buf> {
        match self.w.storage {
            WeightStorage::Fast => Ok(kit.upload_conv_filters_int8(data, spec)?),
            _ => self.upload_f32_weight(kit, data),
        }
    }

    /// Host data that feeds GEMMs (e.g. several tensors fused into one), uploaded as
    /// [`Scope::gemm_weight`] uploads: through [`Backend::upload_weight`] under
    /// [`WeightStorage::Fast`], else as [`Scope::upload_f32_weight`] does.
    pub fn upload_gemm_weight<B: Backend>(&self, kit: &B, data: &[f32]) -> Result<B::Buf> {
        match self.w.storage {
            WeightStorage::Fast => Ok(kit.upload_weight(data)?),
            _ => self.upload_f32_weight(kit, data),
        }
    }

    /// A `Linear` weight `[out, inp]` (several layers' fused into one, say) as
    /// [`Scope::upload_gemm_weight`] uploads it, except under [`WeightStorage::NearF32`]:
    /// through [`Backend::upload_linear_weight_near_f32`].
    pub fn upload_linear_weight<B: Backend>(&self, kit: &B, data: &[f32], out: usize, inp: usize) -> Result<B::Buf> {
        match self.w.storage {
            WeightStorage::NearF32 => Ok(kit.upload_linear_weight_near_f32(data, out, inp)?),
            _ => self.upload_gemm_weight(kit, data),
        }
    }

    /// A weight that computes in f32 (a convolution loaded with `Conv1d::load`, an LSTM's
    /// recurrence): [`Backend::upload_weight_compact`] under [`WeightStorage::F32Compact`], else
    /// [`Backend::upload`].
    pub fn upload_f32_weight<B: Backend>(&self, kit: &B, data: &[f32]) -> Result<B::Buf> {
        match self.w.storage {
            WeightStorage::F32Compact => Ok(kit.upload_weight_compact(data)?),
            _ => Ok(kit.upload(data)?),
        }
    }
}
