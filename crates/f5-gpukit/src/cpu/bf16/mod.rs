//! The CPU backend with bf16 GEMM weights: [`CpuBf16Backend`].
//!
//! Weights uploaded with [`Backend::upload_weight`] are stored once, as bf16 (half the memory of
//! f32; no f32 copy is kept), and every GEMM with such an operand runs on the AVX-512 BF16
//! kernel of [`gemm`]: the other operand is rounded to bf16 while it is packed, products are
//! summed in f32, and C stays f32. Where the AMX bf16 tiles run, a `Linear`-layout GEMM of at
//! least 16 rows runs the same arithmetic on them ([`linear_amx`]). Attention also computes in bf16 with f32 accumulation
//! ([`attention`]: q, k, v and the softmax weights rounded to bf16, exact f32 softmax); a dense
//! `conv1d` with a bf16 filter bank runs on a tile kernel of the same arithmetic that reads the
//! taps straight from a bf16 copy of the input ([`conv`]), and a dense `conv_transpose1d` runs
//! as one such convolution over its output phases ([`conv_transpose`]). Without AMX tiles, a
//! dense bank of [`FFT_OVER_BF16_FROM_TAPS`] taps or more that the f32 FFT path takes is widened
//! to f32 per call and runs there instead: fewer multiply-adds than the direct sum, by more
//! than the bf16 products' doubled rate gains.
//! Everything else is the f32 [`CpuBackend`], which this type wraps: its buffers are the same
//! `Vec<f32>`, its thread pool is the same pool.
//!
//! A bf16 weight is a GEMM, `conv1d` or `conv_transpose1d` operand only. It can be read back (`download`, `read`, `copy` out of
//! it give its bf16 values as f32) and written (`write`, `fill`, `copy` into it round to bf16),
//! and every other op refuses it with a shape error naming the op: model code that used a weight
//! outside a GEMM or convolution would otherwise silently need the f32 copy this backend does not keep.
//!
//! Where the CPU lacks AVX-512 BF16, or the bf16 dot products do not pay
//! ([`CpuBf16Backend::bf16_dot_products`]: Intel cores without AMX-BF16, whose `vdpbf16ps`
//! issues once a cycle — the f32 FMA's rate in products, so the kernels' conversions make them
//! slower than f32, measured 0.25–0.6× on a 2-core Xeon),
//! the weights stay bf16 in memory and each GEMM, attention, `conv1d` and `conv_transpose1d`
//! that reads one widens it exactly to f32 in scratch memory and runs the f32 backend's kernels
//! (FFT, Winograd, few-row and direct convolutions): f32 arithmetic on the bf16-rounded
//! weights, with the activations kept in f32. `F5_CPU_BF16_DOT=on` or `off` overrides the choice
//! where the CPU has AVX-512 BF16. So the backend runs on every CPU, and its int8 mode on every
//! CPU with AVX-512 VNNI (Cascade Lake and later Xeons, Zen 4 and later). Attention has no AMX
//! kernel, so on Intel cores with AMX it computes in f32 ([`CpuBf16Backend::bf16_attention`]):
//! the bf16 kernel measured 0.54–0.78× the f32 one there.
//!
//! A weight uploaded with [`Backend::upload_weight_compact`] (layers that must compute in f32)
//! is stored as IEEE f16, half the memory of f32, and widened exactly to f32 for each `gemm`,
//! `conv1d`, `conv_transpose1d` or `lstm` that reads it (into a buffer freed after the op, which
//! the allocator hands to the next one: no scratch is held for it), so those ops compute exactly
//! what the f32 backend computes on the f16-rounded values. A weight with a value beyond f16's
//! range (65504) is kept in f32 instead.
//!
//! A `Linear` weight uploaded with [`Backend::upload_linear_weight_near_f32`] (layers that need
//! more than bf16 but not all of f32) is, where the AMX bf16 tiles run, split into two bf16
//! parts per value and packed for the tiles ([`linear_amx`]): `gemm` in the `Linear`
//! layout multiplies it in three bf16 products per f32 product (~2⁻¹⁴ relative each, 2.3–3.5×
//! the f32 GEMM's speed on ALBERT's shapes), every other op reads `hi + lo`. Without the tiles
//! it is a plain f32 buffer.
//!
//! The int8 mode ([`CpuBf16Backend::with_int8_convs`], AVX-512 VNNI as well): dense convolutions
//! whose filters were uploaded with `upload_weight_int8` run on the int8 kernel of [`conv_int8`]
//! (per-channel int8 filters, per-row int8 activations, exact i32 sums per tap); the weight keeps
//! its int8 form after first use (`CpuBuf`'s second field), and a write to it drops that.

pub(crate) mod attention;

/// The f32 operands of an instance norm: the affine pair and the style, each optional.
type NormOperands<'a> = (Option<(&'a [f32], &'a [f32])>, Option<&'a [f32]>);

/// [`NormOperands`] read from the backend's buffers (refusing a bf16 one for `op`).
fn norm_operands<'a>(op: &'static str, affine: Option<(&'a CpuBuf, &'a CpuBuf)>, style: Option<&'a CpuBuf>) -> Result<NormOperands<'a>> {
    let affine = match affine {
        Some((w, b)) => Some((w.f32(op)?.as_slice(), b.f32(op)?.as_slice())),
        None => None,
    };
    Ok((affine, style.map(|s| s.f32(op).map(|v| v.as_slice())).transpose()?))
}

pub(crate) mod amx;
#[cfg(test)]
mod attention_tests;
pub(crate) mod conv;
pub(crate) mod conv_bf16_amx;
pub(crate) mod conv_int8;
pub(crate) mod conv_int8_amx;
pub(crate) mod conv_transpose;
#[cfg(test)]
mod conv_transpose_tests;
pub(crate) mod gemm;
pub(crate) mod linear_amx;
#[cfg(test)]
mod linear_amx_tests;
#[cfg(test)]
mod test_rng;
#[cfg(test)]
mod tests;

use std::borrow::Cow;
use std::sync::{Arc, Mutex, OnceLock};

use rayon::prelude::*;

use half::f16;
use half::slice::HalfFloatSliceExt;

use crate::cpu::conv::BlockOutput;
use crate::cpu::scratch::with_shared_scratch;
use crate::cpu::seq::{ChannelStats, ChunkStats, KnownStats, RowNorm, STATS_ROWS};
use crate::spec::{
    AttentionSpec, Conv1dSpec, ConvTranspose1dSpec, GemmSpec, InstanceNormSpec, InterpolateSpec, LstmSpec, Pad1dSpec, RopeSpec, StftSpec,
};
use crate::{shape_err, Activation, Backend, CpuBackend, Device, KitError, Result};
use conv_int8::Avx512Vnni;
use gemm::{Avx512Bf16, Operand};

/// `None` where this CPU runs the bf16 dot-product kernels, else the name of the instruction
/// set extension it lacks (`avx512_bf16`, as `/proc/cpuinfo` spells it). [`CpuBf16Backend`]
/// runs either way: without them it widens its bf16 weights to f32 per op.
pub fn cpu_bf16_missing_feature() -> Option<&'static str> {
    Avx512Bf16::detect().err()
}

/// `None` where this CPU runs the int8 convolution mode ([`CpuBf16Backend::with_int8_convs`]:
/// AVX-512 VNNI), else the name of the first extension it lacks.
pub fn cpu_int8_missing_feature() -> Option<&'static str> {
    Avx512Vnni::detect().err()
}

/// Outputs of at least this many bytes carry their statistics out of a fused convolution
/// ([`CpuBf16Backend::fused_conv`]): those that outgrow the caches, where the norm reading them
/// would otherwise read them from memory once more just for the statistics (Kokoro's
/// generator at its last rate: 80 MB per activation on the long input). Smaller ones stay in
/// cache for that read, and their blocks keep the kernels' own sizes.
const STATS_FROM_BYTES: usize = 4 << 20;

/// A buffer of [`CpuBf16Backend`]: f32 values, a GEMM weight stored as bf16, an f32-computed
/// weight stored as f16 ([`Backend::upload_weight_compact`]), or a dense convolution's filter
/// bank held only packed for its kernel: in bf16 ([`Backend::upload_conv_filters`]) or in int8
/// ([`Backend::upload_conv_filters_int8`] in the int8 mode). A filter bank
/// uploaded with `upload_weight_int8` in the int8 mode also keeps, once a dense convolution has
/// used it, its int8 form (the second field: `None` for every other buffer). An activation a
/// fused convolution wrote may carry its rows' per-channel statistics (the third field), for the
/// instance norm that reads it next; every write to the buffer drops them.
#[derive(Clone, Debug)]
pub struct CpuBuf(Repr, Option<OnceLock<Box<conv_int8::PackedFilters>>>, Option<Box<KnownStats>>);

#[derive(Clone, Debug)]
enum Repr {
    F32(Vec<f32>),
    /// bf16 bits (the upper half of the f32 pattern), one per element.
    Bf16(Vec<u16>),
    /// A weight that computes in f32, stored as IEEE f16 and widened for each op that reads it.
    F16(Vec<f16>),
    /// A dense convolution's filters, quantised and packed for the int8 kernel and held in that
    /// form only (one byte a value, against two for bf16 plus one for a kept int8 copy): read-only,
    /// read back as the values it computes with.
    Int8(Box<conv_int8::PackedFilters>),
    /// A dense convolution's bf16 filters, packed for the bf16 kernel at upload
    /// ([`Backend::upload_conv_filters`]) and held in that form only: read-only, read back as
    /// the bf16 values.
    Bf16Conv(Box<conv::PackedBf16Filters>),
    /// A `Linear` weight whose products stay close to f32, split into bf16 `hi` and `lo` parts
    /// and packed for the AMX bf16 tiles ([`Backend::upload_linear_weight_near_f32`]): read-only,
    /// read back as `hi + lo`.
    Split(Box<linear_amx::SplitLinear>),
}

/// The reduced-precision kernel of a dense convolution ([`CpuBf16Backend::dense_kernel`]).
enum DenseKernel<'w> {
    /// The int8 kernel (VNNI, or the AMX int8 tiles), with the packed int8 filters.
    Int8(Avx512Vnni, Cow<'w, conv_int8::PackedFilters>),
    /// The bf16 kernel (AVX-512 BF16, or the AMX bf16 tiles), with the bf16 filters.
    Bf16(Avx512Bf16, conv::Bf16Filters<'w>),
}

impl CpuBuf {
    fn of(repr: Repr) -> Self {
        CpuBuf(repr, None, None)
    }

    /// The int8 filter bank of this bf16 weight for `spec`, where it was uploaded for int8:
    /// packed on first use and kept, or packed for this call only if the bank kept is for
    /// another shape.
    fn int8_filters(&self, spec: &Conv1dSpec, w: &[u16]) -> Option<Cow<'_, conv_int8::PackedFilters>> {
        let kept = self.1.as_ref()?.get_or_init(|| Box::new(conv_int8::PackedFilters::pack(spec, w)));
        Some(if kept.fits(spec) { Cow::Borrowed(&**kept) } else { Cow::Owned(conv_int8::PackedFilters::pack(spec, w)) })
    }

    /// Forgets what was kept of the values (an int8 bank, the statistics): they changed.
    fn values_changed(&mut self) {
        if let Some(kept) = &mut self.1 {
            *kept = OnceLock::new();
        }
        self.2 = None;
    }

    /// The statistics of the rows `spec` normalises, item `b`, where the op that wrote this
    /// buffer left them.
    fn known_stats(&self, spec: &InstanceNormSpec, b: usize) -> Option<&ChannelStats> {
        self.2.as_ref()?.for_norm(spec, b)
    }

    /// Whether this buffer is a weight held in bf16 only.
    pub fn is_bf16(&self) -> bool {
        matches!(self.0, Repr::Bf16(_))
    }

    /// Whether this buffer is a weight held in f16 ([`Backend::upload_weight_compact`]).
    pub fn is_f16(&self) -> bool {
        matches!(self.0, Repr::F16(_))
    }

    fn len(&self) -> usize {
        match &self.0 {
            Repr::F32(v) => v.len(),
            Repr::Bf16(v) => v.len(),
            Repr::F16(v) => v.len(),
            Repr::Int8(p) => p.len(),
            Repr::Bf16Conv(p) => p.len(),
            Repr::Split(w) => w.len(),
        }
    }

    /// The f32 values for an op that only takes f32 buffers.
    fn f32(&self, op: &'static str) -> Result<&Vec<f32>> {
        match &self.0 {
            Repr::F32(v) => Ok(v),
            Repr::Bf16(_) | Repr::F16(_) | Repr::Int8(_) | Repr::Bf16Conv(_) | Repr::Split(_) => Err(not_f32(op, &self.0)),
        }
    }

    /// The f32 values to write: what was kept of them is dropped.
    fn f32_mut(&mut self, op: &'static str) -> Result<&mut Vec<f32>> {
        self.values_changed();
        match &mut self.0 {
            Repr::F32(v) => Ok(v),
            other => Err(not_f32(op, other)),
        }
    }

    /// A GEMM operand of the bf16 kernel; `None` for an f16 weight, which is widened first.
    fn operand(&self) -> Option<Operand<'_>> {
        match &self.0 {
            Repr::F32(v) => Some(Operand::F32(v)),
            Repr::Bf16(v) => Some(Operand::Bf16(v)),
            Repr::F16(_) | Repr::Int8(_) | Repr::Bf16Conv(_) | Repr::Split(_) => None,
        }
    }

    /// Values `[offset, offset + out.len())` as f32 (bf16 widened exactly).
    fn read_into(&self, op: &'static str, offset: usize, out: &mut [f32]) -> Result<()> {
        let end = offset.checked_add(out.len()).filter(|&e| e <= self.len());
        let end = end.ok_or_else(|| shape_err(op, format!("{}+{} past buffer of {}", offset, out.len(), self.len())))?;
        match &self.0 {
            Repr::F32(v) => out.copy_from_slice(&v[offset..end]),
            Repr::Bf16(v) => {
                for (o, &b) in out.iter_mut().zip(&v[offset..end]) {
                    *o = gemm::from_bf16(b);
                }
            }
            Repr::F16(v) => crate::cpu::simd::widen_f16(&v[offset..end], out),
            Repr::Int8(p) => p.dequantize_into(offset, out),
            Repr::Bf16Conv(p) => {
                let mut bits = vec![0u16; out.len()];
                p.bits_into(offset, &mut bits);
                for (o, b) in out.iter_mut().zip(bits) {
                    *o = gemm::from_bf16(b);
                }
            }
            Repr::Split(w) => w.read_into(offset, out),
        }
        Ok(())
    }

    /// Stores `data` at `offset`, rounding to bf16 in a bf16 buffer.
    fn write_from(&mut self, op: &'static str, offset: usize, data: &[f32]) -> Result<()> {
        let len = self.len();
        let end = offset.checked_add(data.len()).filter(|&e| e <= len);
        let end = end.ok_or_else(|| shape_err(op, format!("{}+{} past buffer of {len}", offset, data.len())))?;
        self.values_changed();
        match &mut self.0 {
            Repr::F32(v) => v[offset..end].copy_from_slice(data),
            Repr::Bf16(v) => {
                for (o, &x) in v[offset..end].iter_mut().zip(data) {
                    *o = gemm::to_bf16(x);
                }
            }
            Repr::F16(v) => v[offset..end].convert_from_f32_slice(data),
            Repr::Int8(_) => return Err(int8_read_only(op)),
            Repr::Bf16Conv(_) => return Err(packed_bf16_read_only(op)),
            Repr::Split(_) => return Err(split_read_only(op)),
        }
        Ok(())
    }
}

/// Whether `spec` is one plain `Linear` product, `y = x·Wᵀ (+ bias)` with every operand at its
/// `GemmSpec::linear` layout (no batch, no accumulation): what the int8 and AMX `Linear`
/// kernels take.
fn is_plain_linear(spec: &GemmSpec) -> bool {
    let linear = GemmSpec::linear(spec.m, spec.k, spec.n);
    spec.batch == 1 && spec.beta == 0.0 && spec.a == linear.a && spec.b == linear.b && spec.c == linear.c
}

/// Whether `len` values are the filters `[c_out, c_in, K]` of the dense convolution `spec`.
fn is_dense_bank(spec: &Conv1dSpec, len: usize) -> bool {
    spec.groups == 1 && spec.c_out.checked_mul(spec.c_in).and_then(|v| v.checked_mul(spec.kernel)) == Some(len)
}

/// `data` rounded to bf16 (to nearest even), as bits.
fn bf16_bits(data: &[f32]) -> Result<Vec<u16>> {
    let mut bits = Vec::new();
    bits.try_reserve_exact(data.len()).map_err(|_| KitError::OutOfMemory(data.len()))?;
    bits.extend(data.iter().map(|&v| gemm::to_bf16(v)));
    Ok(bits)
}

/// A write to a filter bank held only in int8: refused, the values left as they were.
fn int8_read_only(op: &'static str) -> KitError {
    shape_err(op, "operand is an int8 filter bank (upload_conv_filters_int8 in the int8 mode), which is read-only")
}

/// A write to a filter bank held only packed for the bf16 kernel: refused, the values left as
/// they were.
fn packed_bf16_read_only(op: &'static str) -> KitError {
    shape_err(op, "operand is a packed bf16 filter bank (upload_conv_filters on the bf16 CPU backend), which is read-only")
}

/// A write to a split Linear weight: refused, the values left as they were.
fn split_read_only(op: &'static str) -> KitError {
    shape_err(op, "operand is a split Linear weight (upload_linear_weight_near_f32 on the bf16 CPU backend), which is read-only")
}

fn not_f32(op: &'static str, repr: &Repr) -> KitError {
    shape_err(
        op,
        match repr {
            Repr::Int8(_) => {
                "operand is an int8 filter bank (upload_conv_filters_int8 in the int8 mode); only conv1d with the shape it was packed for and the read calls take it"
            }
            Repr::Bf16Conv(_) => {
                "operand is a packed bf16 filter bank (upload_conv_filters on the bf16 CPU backend); only conv1d, the ops that read weights in f32 and the read calls take it"
            }
            Repr::Split(_) => {
                "operand is a split Linear weight (upload_linear_weight_near_f32 on the bf16 CPU backend); only gemm, the ops that read weights in f32 and the read calls take it"
            }
            Repr::F16(_) => {
                "operand is an f16 weight (upload_weight_compact on the bf16 CPU backend); only gemm, conv1d, conv_transpose1d, lstm's recurrent weights and the copy/read/write calls take it"
            }
            _ => "operand is a bf16 GEMM weight (upload_weight on the bf16 CPU backend); only gemm, conv1d, conv_transpose1d and the copy/read/write calls take it",
        },
    )
}

/// The f32 values of a weight an op reads: an f32 buffer as it is, an f16 one widened into a
/// buffer of its own for the op.
enum Wide<'a> {
    Held(&'a Vec<f32>),
    Owned(Vec<f32>),
}

impl std::ops::Deref for Wide<'_> {
    type Target = Vec<f32>;
    fn deref(&self) -> &Vec<f32> {
        match self {
            Wide::Held(v) => v,
            Wide::Owned(v) => v,
        }
    }
}

impl CpuBf16Backend {
    /// `y = x · Wᵀ + bias` with `W` a split `Linear` weight, in its `Linear` layout and shape,
    /// on the AMX bf16 tiles (`linear_amx`). `None` where that does not apply (another
    /// operand, layout or shape, a batched or accumulating product, the tiles turned off since
    /// the upload): the caller runs the f32 GEMM, which reads the weight as `hi + lo`.
    fn gemm_split(&self, spec: &GemmSpec, a: &CpuBuf, b: &CpuBuf, bias: Option<&Vec<f32>>, c: &mut CpuBuf) -> Option<Result<()>> {
        let (Repr::F32(x), Repr::Split(w), Some(amx), Some(cpu)) = (&a.0, &b.0, self.amx_bf16, self.bf16_dot) else { return None };
        let GemmSpec { m, n, k, .. } = *spec;
        let plain = is_plain_linear(spec);
        if !plain || w.shape() != (n, k) {
            return None;
        }
        let c = match c.f32_mut("gemm") {
            Ok(c) => c,
            Err(e) => return Some(Err(e)),
        };
        if let Err(e) = spec.validate(x.len(), w.len(), c.len(), bias.map(|b| b.len())) {
            return Some(Err(e));
        }
        let bias = bias.map(|b| b.as_slice());
        self.f32.run(|| linear_amx::linear(amx, cpu, w, &x[..m * k], m, bias, &mut c[..m * n]));
        Some(Ok(()))
    }

    /// In the int8 mode, `y = x · Wᵀ + bias` with `W` a weight uploaded for int8 runs on the int8
    /// convolution kernel as a one-tap convolution (a `Linear`'s `[out, in]` weight is a
    /// `[c_out, c_in, 1]` filter bank): per-row int8 activations, per-output-channel int8
    /// weights, exact i32 sums. `None` where that does not apply (another layout, a batched or
    /// accumulating product, an f32 or bf16-only weight): the caller runs the bf16 GEMM.
    fn gemm_int8(&self, spec: &GemmSpec, a: &CpuBuf, b: &CpuBuf, bias: Option<&Vec<f32>>, c: &mut [f32]) -> Option<Result<()>> {
        let vnni = self.int8?;
        let (Repr::F32(x), Repr::Bf16(w)) = (&a.0, &b.0) else { return None };
        let GemmSpec { m, n, k, .. } = *spec;
        let plain = is_plain_linear(spec);
        let conv = Conv1dSpec::new(1, m, k, n, 1);
        if !plain || !conv_int8::supports(&conv) {
            return None;
        }
        let filters = b.int8_filters(&conv, w)?;
        let bias = bias.map(|b| b.as_slice());
        self.f32.run(|| conv_int8::conv1d_dense(vnni, &conv, x, &filters, bias, c));
        Some(Ok(()))
    }
}

/// The CPU backend with GEMM weights in bf16 and the AVX-512 BF16 kernel; see the module docs.
/// Cheap to clone; clones share the thread pool and the packing scratch.
#[derive(Clone)]
pub struct CpuBf16Backend {
    f32: CpuBackend,
    /// Set in the int8 mode: dense convolutions with bf16 filters run on the int8 kernel.
    int8: Option<Avx512Vnni>,
    /// Set where the AMX bf16 tiles may run the dense bf16 convolutions that fit them.
    amx_bf16: Option<conv_bf16_amx::AmxBf16>,
    /// Set where bf16 weights meet the AVX-512 BF16 kernels (the proof that the CPU runs them);
    /// `None` where they are widened to f32 for the f32 kernels (see the module docs).
    bf16_dot: Option<Avx512Bf16>,
    /// Whether attention computes in bf16 (`bf16_dot` set and the AVX-512 BF16 products paying
    /// without tiles: attention has no AMX kernel, so on Intel cores with AMX it stays f32).
    bf16_attention: bool,
    /// The packed B operand, reused by every GEMM (a GEMM that finds it busy packs into its own).
    packed_b: Arc<Mutex<Vec<u32>>>,
    /// Fused convolutions' outputs of this many bytes or more carry their statistics
    /// ([`STATS_FROM_BYTES`]; lower in tests, so small shapes take that path).
    stats_from_bytes: usize,
    /// [`INT8_TILES_FROM_CHANNELS`]; 0 in tests that run the int8 tiles on small shapes.
    int8_tiles_from_channels: usize,
}

impl CpuBf16Backend {
    /// On a private pool of `threads` threads (0 = rayon's global pool). Runs on every CPU:
    /// where it lacks AVX-512 BF16 the weights stay bf16 in memory and are widened to f32 for
    /// the f32 kernels ([`CpuBf16Backend::bf16_dot_products`] is `false`).
    pub fn with_threads(threads: usize) -> Result<Self> {
        let amx_bf16 = conv_bf16_amx::AmxBf16::detect().ok();
        let bf16_dot = Avx512Bf16::detect().ok().filter(|_| bf16_dot_products_pay(amx_bf16.is_some()));
        Ok(CpuBf16Backend {
            f32: CpuBackend::with_threads(threads)?,
            int8: None,
            amx_bf16: amx_bf16.filter(|_| bf16_dot.is_some()),
            bf16_attention: bf16_dot.is_some() && bf16_dot_products_pay(false),
            bf16_dot,
            packed_b: Arc::new(Mutex::new(Vec::new())),
            stats_from_bytes: STATS_FROM_BYTES,
            int8_tiles_from_channels: if narrow_int8_on_bf16_tiles() { INT8_TILES_FROM_CHANNELS } else { 0 },
        })
    }

    /// Like [`CpuBf16Backend::with_threads`], and dense convolutions whose filters were uploaded
    /// with `upload_weight_int8` (`conv1d` with `groups == 1`) compute in int8 on AVX-512
    /// VNNI (`vpdpbusd`): per-output-channel int8 filters, one dynamic int8 scale per input and
    /// batch item, exact i32 sums, f32 output (the kernel's docs give the arithmetic). Everything
    /// else is as in bf16. Refuses, naming the missing extension, on a CPU without AVX-512 VNNI
    /// (AVX-512 BF16 is not needed: without it the rest computes in f32 on widened weights).
    pub fn with_int8_convs(threads: usize) -> Result<Self> {
        let vnni = Avx512Vnni::detect().map_err(|feature| {
            KitError::Device(format!(
                "int8 convolutions on the CPU need the {feature} instruction set extension, which this CPU lacks; use bf16 or f32"
            ))
        })?;
        Ok(CpuBf16Backend { int8: Some(vnni), ..Self::with_threads(threads)? })
    }

    /// Whether dense convolutions with bf16 filters run in int8 ([`CpuBf16Backend::with_int8_convs`]).
    pub fn int8_convs(&self) -> bool {
        self.int8.is_some()
    }

    /// The int8 kernel for a dense convolution of `spec`: in the int8 mode, where it takes the
    /// shape and the AMX bf16 tiles do not beat it. Those accumulate every tap in the tiles,
    /// while the int8 tiles must leave them once per tap to apply each input row's step (see
    /// `conv_int8_amx`); with 128 input channels that pass costs as much as the products, and
    /// the bf16 tiles ran 1.1–1.4× faster (mostly 1.2–1.3×) on every Kokoro shape (`conv_time`,
    /// a Xeon with AMX), with 2.5× less error. From 256 channels on the int8 tiles are as fast
    /// or faster.
    fn int8_kernel(&self, spec: &Conv1dSpec) -> Option<Avx512Vnni> {
        let bf16_tiles_win = self.amx_bf16.is_some() && conv_int8_amx::fits(spec) && spec.c_in < self.int8_tiles_from_channels;
        self.int8.filter(|vnni| conv_int8::supports(spec) && !(vnni.amx() && bf16_tiles_win))
    }

    /// Whether a dense convolution of `spec` with bf16 filters runs faster on the f32 backend's
    /// FFT path, its filters widened per call, than on the AVX-512 BF16 kernel: from
    /// [`FFT_OVER_BF16_FROM_TAPS`] taps, where the FFT takes the shape and length and no AMX
    /// tiles run.
    fn fft_beats_bf16_kernel(&self, spec: &Conv1dSpec) -> bool {
        self.long_filters_for_fft(spec) && crate::cpu::conv::fft_applies(spec)
    }

    /// [`CpuBf16Backend::fft_beats_bf16_kernel`] for the shape alone, as an upload knows it (a
    /// filter bank serves every length): such banks stay plain bf16, not packed for the bf16
    /// kernel, which packs them per call on an input too short for the FFT.
    fn long_filters_for_fft(&self, spec: &Conv1dSpec) -> bool {
        self.amx_bf16.is_none() && spec.kernel >= FFT_OVER_BF16_FROM_TAPS && crate::cpu::conv::fft_takes_shape(spec)
    }

    /// The reduced-precision kernel a dense convolution with these filters runs on, as
    /// `conv1d` and the fused AdaIN + Snake + convolution both choose it: int8 filters (held in
    /// int8, or a bf16 weight uploaded for int8) on the int8 mode where it takes the shape, else
    /// a bf16 weight on the bf16 kernel where the bf16 dot products pay. `None`: f32 arithmetic
    /// (or, for filters held only in int8, a shape they were not packed for).
    fn dense_kernel<'w>(&self, spec: &Conv1dSpec, weight: &'w CpuBuf) -> Option<DenseKernel<'w>> {
        let int8 = self.int8_kernel(spec);
        match &weight.0 {
            Repr::Int8(filters) => int8.filter(|_| filters.fits(spec)).map(|vnni| DenseKernel::Int8(vnni, Cow::Borrowed(&**filters))),
            Repr::Bf16Conv(filters) => {
                self.bf16_dot.filter(|_| filters.fits(spec)).map(|cpu| DenseKernel::Bf16(cpu, conv::Bf16Filters::Packed(filters)))
            }
            // Packed (once, kept) only for a bank of the spec's size: a wrong length is left to
            // the caller's validation, which names it, rather than read past.
            Repr::Bf16(w) => match int8
                .filter(|_| w.len() == spec.c_out * spec.c_in * spec.kernel)
                .and_then(|vnni| Some((vnni, weight.int8_filters(spec, w)?)))
            {
                Some((vnni, filters)) => Some(DenseKernel::Int8(vnni, filters)),
                None => self
                    .bf16_dot
                    .filter(|_| spec.groups == 1 && !self.fft_beats_bf16_kernel(spec))
                    .map(|cpu| DenseKernel::Bf16(cpu, conv::Bf16Filters::Bits(w))),
            },
            Repr::F32(_) | Repr::F16(_) | Repr::Split(_) => None,
        }
    }

    /// The fused AdaIN + Snake + convolution, where the filters are int8 ones this backend's
    /// int8 mode takes for `conv`, or bf16 ones its bf16 kernel takes (the kernels `conv1d`
    /// would pick): the item's instance-norm statistics first (or those the op that wrote `x`
    /// left on it), then each row the convolution reads is normalised, snaked and converted
    /// (quantised to int8 or rounded to bf16) in one go (`conv_int8::conv1d_item` or the bf16
    /// `DenseRows::run` with a [`RowNorm`](crate::cpu::seq::RowNorm) row function), so the
    /// normalised rows never go through memory. The bits are those of `instance_norm_snake`
    /// then `conv1d`: the same row functions, in the same order, on the same rows. The output is
    /// written to `y` or, with `accumulate`, added to it block by block; on an output of
    /// [`STATS_FROM_BYTES`] or more its rows' statistics are formed block by block too and left
    /// on `y`. `scratch_len` is the length of the buffer the unfused ops would normalise into,
    /// checked as they would check it. Where the CPU takes neither kernel (no AVX-512 BF16), bf16
    /// filters are widened to f32 and the f32 backend's tiled paths fuse the same way
    /// ([`CpuBackend::norm_snake_conv_tiled`], this backend's Snake), so the normalised rows are
    /// not written there either (at Kokoro's generator's last rate an activation's size: 9.4 MB
    /// on a sentence, 80 MB on a long input); no statistics are left on `y` then. `Ok(false)`
    /// (nothing done, `y` untouched) where the filters or the shape take none of these.
    #[allow(clippy::too_many_arguments)]
    fn fused_conv(
        &self,
        op: &'static str,
        norm: &InstanceNormSpec,
        x: &CpuBuf,
        affine: Option<(&CpuBuf, &CpuBuf)>,
        style: Option<&CpuBuf>,
        alpha: &CpuBuf,
        conv: &Conv1dSpec,
        weight: &CpuBuf,
        bias: Option<&CpuBuf>,
        scratch_len: usize,
        accumulate: bool,
        y: &mut CpuBuf,
    ) -> Result<bool> {
        if norm.n == 0 || norm.c == 0 {
            return Ok(false);
        }
        let kernel = self.dense_kernel(conv, weight);
        // Neither kernel (the bf16 products do not pay here): bf16 filters widened onto the f32
        // backend's tiled paths, where one takes the shape.
        let widened = match (&kernel, &weight.0) {
            (Some(_), _) => None,
            (None, Repr::Bf16(w)) if crate::cpu::conv::around_applies(conv) => Some(&w[..]),
            (None, _) => return Ok(false),
        };
        let filters_len = match &kernel {
            Some(DenseKernel::Int8(_, filters)) => filters.len(),
            Some(DenseKernel::Bf16(_, w)) => w.len(),
            None => weight.len(),
        };
        let (affine, style) = norm_operands(op, affine, style)?;
        let (xv, alpha) = (x.f32(op)?, alpha.f32(op)?);
        let bias = bias.map(|b| b.f32(op)).transpose()?.map(|b| b.as_slice());
        let snake: Option<crate::cpu::seq::SnakeAfter<'_>> = Some((alpha, crate::cpu::seq::SnakeSine::F32));
        let row_norm = |b: usize, xb: &[f32]| match x.known_stats(norm, b) {
            Some(stats) => RowNorm::from_stats(norm, b, stats, affine, style, snake),
            None => RowNorm::of(norm, b, xb, affine, style, snake),
        };
        if let Some(w) = widened {
            let out = y.f32_mut(op)?;
            return self.with_widened(w, |wide| {
                self.f32.norm_snake_conv_tiled(norm, xv, affine, style, alpha, row_norm, conv, wide, bias, scratch_len, accumulate, out)
            });
        }
        let Some(kernel) = kernel else { return Ok(false) };
        let InstanceNormSpec { batch, n, c, .. } = *norm;
        let (n_out, c_out) = (conv.n_out(), conv.c_out);
        let out_len = batch * n_out * c_out;
        let out = y.f32_mut(op)?;
        crate::check::fused_norm_snake_conv(norm, conv, xv, affine, style, alpha, scratch_len, filters_len, bias, out.len())?;
        if accumulate {
            crate::check::axpy(out_len, out_len, out.len())?;
        }
        let item = |b: usize| {
            let xb = &xv[b * n * c..(b + 1) * n * c];
            (xb, row_norm(b, xb))
        };
        let collect = c_out > 0 && n_out * c_out * 4 >= self.stats_from_bytes;
        let mut chunks: Vec<Vec<ChunkStats>> =
            if collect { (0..batch).map(|_| vec![ChunkStats::default(); n_out.div_ceil(STATS_ROWS)]).collect() } else { Vec::new() };
        // One item's statistics slots at a time (none where they are not collected).
        fn output(accumulate: bool, chunks: &mut [Vec<ChunkStats>], b: usize) -> BlockOutput<'_> {
            BlockOutput { accumulate, stats: chunks.get_mut(b).map(|v| &mut v[..]) }
        }
        let outputs = out[..out_len].chunks_mut((n_out * c_out).max(1));
        self.f32.run(|| match &kernel {
            DenseKernel::Int8(vnni, filters) => {
                for (b, yb) in outputs.enumerate() {
                    let (xb, rows) = item(b);
                    let prep = |row: &[f32], mapped: &mut [f32]| rows.row(row, mapped);
                    conv_int8::conv1d_item(*vnni, conv, xb, filters, bias, Some(&prep), output(accumulate, &mut chunks, b), yb);
                }
            }
            DenseKernel::Bf16(cpu, w) => conv::with_packed_filters(*cpu, self.amx_bf16, conv, *w, bias, |dense| {
                for (b, yb) in outputs.enumerate() {
                    let (xb, rows) = item(b);
                    let prep = |row: &[f32], mapped: &mut [f32]| rows.row(row, mapped);
                    dense.run(xb, Some(&prep), 0, output(accumulate, &mut chunks, b), yb);
                }
            }),
        });
        if collect {
            let items = chunks.into_iter().map(|item| ChannelStats::merge(item, c_out)).collect();
            y.2 = Some(Box::new(KnownStats { batch, n: n_out, c: c_out, items }));
        }
        Ok(true)
    }

    /// Whether dense convolutions run on the AMX tiles: the bf16 ones whose input channels come
    /// in multiples of 32 (`tdpbf16ps`: the same products, summed in the tiles' order) where the
    /// CPU has AMX-BF16, and in the int8 mode the int8 ones in multiples of 64 (`tdpbusd`: the
    /// AVX-512 VNNI kernel's results bit for bit) where it has AMX-INT8. They do where Linux
    /// grants the tile state and the environment does not set `F5_CPU_AMX=off`.
    pub fn amx_convs(&self) -> bool {
        self.amx_bf16.is_some() || self.int8.is_some_and(|v| v.amx())
    }

    /// This backend with every convolution on the AVX-512 kernels, never the AMX tiles: to
    /// compare the two on one machine.
    pub fn without_amx(self) -> Self {
        CpuBf16Backend { int8: self.int8.map(|v| v.without_amx()), amx_bf16: None, ..self }
    }

    /// This backend with dense int8 convolutions on the int8 AMX tiles from `channels` input
    /// channels on (0: wherever they fit), where it has both kinds of tiles.
    #[cfg(test)]
    pub(crate) fn with_int8_tiles_from_channels(self, channels: usize) -> Self {
        CpuBf16Backend { int8_tiles_from_channels: channels, ..self }
    }

    /// This backend with fused convolutions' outputs carrying their statistics from `bytes` on.
    #[cfg(test)]
    pub(crate) fn with_stats_from_bytes(self, bytes: usize) -> Self {
        CpuBf16Backend { stats_from_bytes: bytes, ..self }
    }

    /// Whether GEMMs, attention and convolutions with a bf16 weight compute with AVX-512 BF16
    /// dot products (or AMX tiles) on bf16-rounded activations; `false` where the weight is
    /// widened to f32 for the f32 kernels instead. Chosen at construction from the CPU (see the
    /// module docs) unless `F5_CPU_BF16_DOT` is `on` or `off`.
    pub fn bf16_dot_products(&self) -> bool {
        self.bf16_dot.is_some()
    }

    /// Whether attention computes in bf16 (`cpu/bf16/attention.rs`), else in f32: with the bf16
    /// dot products where they pay without AMX tiles (attention has no tile kernel, and on Intel
    /// cores `vdpbf16ps` is slower than f32 FMAs: 0.54–0.78× the f32 attention measured on a
    /// Xeon with AMX), or where [`CpuBf16Backend::with_bf16_dot_products`] or
    /// `F5_CPU_BF16_DOT=on` asked for them.
    pub fn bf16_attention(&self) -> bool {
        self.bf16_attention && self.bf16_dot.is_some()
    }

    /// This backend with the bf16 dot products (attention's too) on or off whether they pay or
    /// not: to compare the two on one machine. `on` takes effect only where the CPU has AVX-512 BF16
    /// ([`cpu_bf16_missing_feature`] is `None`); elsewhere the weights stay widened.
    pub fn with_bf16_dot_products(self, on: bool) -> Self {
        let bf16_dot = if on { Avx512Bf16::detect().ok() } else { None };
        let amx_bf16 = if on { conv_bf16_amx::AmxBf16::detect().ok().filter(|_| bf16_dot.is_some()) } else { None };
        CpuBf16Backend { bf16_dot, amx_bf16, bf16_attention: bf16_dot.is_some(), ..self }
    }

    /// Threads the ops run on.
    pub fn threads(&self) -> usize {
        self.f32.threads()
    }

    /// Runs `f` on the bf16 values `w` widened (exactly) to f32 in shared scratch memory: the
    /// f32 kernels' view of a bf16 weight where the bf16 dot products do not pay.
    fn with_widened<R>(&self, w: &[u16], f: impl FnOnce(&[f32]) -> R) -> R {
        with_shared_scratch(w.len(), |wide| {
            self.f32.run(|| {
                wide.par_chunks_mut(WIDEN_CHUNK).zip(w.par_chunks(WIDEN_CHUNK)).for_each(|(out, bits)| {
                    for (o, &b) in out.iter_mut().zip(bits) {
                        *o = gemm::from_bf16(b);
                    }
                })
            });
            f(wide)
        })
    }

    /// Runs `f` on `buf`'s values as f32 for `op`: a bf16 weight widened in scratch memory, an
    /// f16 one widened into a buffer of the op's, an f32 buffer as it is.
    fn with_f32_values<R>(&self, op: &'static str, buf: &CpuBuf, f: impl FnOnce(&[f32]) -> Result<R>) -> Result<R> {
        match &buf.0 {
            Repr::Bf16(w) => self.with_widened(w, f),
            _ => f(&self.wide(op, buf)?),
        }
    }

    /// `buf`'s values as f32 for `op`: an f16 weight widened (exactly), a split one as `hi + lo`,
    /// an f32 buffer as it is; a bf16 weight is refused (the ops that take those handle them
    /// before asking). The widened
    /// copy is freed with the op rather than kept: a kept scratch would hold the largest weight's
    /// f32 size for the model's lifetime, while a freed one is reused by the allocator.
    fn wide<'a>(&self, op: &'static str, buf: &'a CpuBuf) -> Result<Wide<'a>> {
        if !matches!(buf.0, Repr::F16(_) | Repr::Split(_) | Repr::Bf16Conv(_)) {
            return buf.f32(op).map(Wide::Held);
        }
        let mut out = Vec::new();
        out.try_reserve_exact(buf.len()).map_err(|_| KitError::OutOfMemory(buf.len()))?;
        out.resize(buf.len(), 0.0);
        match &buf.0 {
            // On the pool's threads: the op waits for it.
            Repr::F16(v) => self.f32.run(|| {
                out.par_chunks_mut(WIDEN_CHUNK).zip(v.par_chunks(WIDEN_CHUNK)).for_each(|(o, h)| crate::cpu::simd::widen_f16(h, o))
            }),
            _ => buf.read_into(op, 0, &mut out)?,
        }
        Ok(Wide::Owned(out))
    }
}

/// Input channels from which, in the int8 mode on a CPU with both kinds of AMX tiles, a dense
/// convolution runs on the int8 tiles rather than the bf16 ones (`int8_kernel`).
const INT8_TILES_FROM_CHANNELS: usize = 256;

/// Whether narrow int8 convolutions go to the bf16 tiles (`int8_kernel`):
/// `F5_CPU_INT8_ON_BF16_TILES=off` (or `0`) keeps them on the int8 tiles, for measuring the two.
fn narrow_int8_on_bf16_tiles() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| !std::env::var("F5_CPU_INT8_ON_BF16_TILES").is_ok_and(|v| v == "off" || v == "0"))
}

/// The smallest magnitude f16 rounds to infinity: halfway from its largest finite value,
/// 65504, to 2¹⁶, a tie that rounds to the even 2¹⁶. Compared directly (the conversion per
/// value, to test the range, took ~25 ms of Kokoro's load).
const F16_OVERFLOW: f32 = 65520.0;

/// Rows from which a bf16 `Linear` GEMM runs on the AMX tiles (`linear_amx::linear_bf16`)
/// rather than the AVX-512 BF16 kernel: one 16-row A tile. Below that the tiles would multiply
/// mostly zero rows, and the weight's per-call packing is not repaid.
const AMX_LINEAR_MIN_ROWS: usize = 16;

/// Taps from which a dense convolution with bf16 filters runs on the f32 backend's FFT path (its
/// filters widened per call) rather than the AVX-512 BF16 kernel, where no AMX tiles take it.
/// The FFT's multiply-adds per output grow with the log of its tile, the direct sum's with the
/// taps: on a Zen 4 (256-bit units, 2 threads, `conv_time`) the FFT on f32 ran 1.25–1.5× the bf16
/// kernel at 11 taps on every Kokoro generator shape (128 and 256 channels), about even at 7
/// (0.91–1.06×), and the bf16 kernel won at 3 against Winograd (1.3–2.1×).
const FFT_OVER_BF16_FROM_TAPS: usize = 11;

/// bf16 values widened per task by [`CpuBf16Backend::with_widened`].
const WIDEN_CHUNK: usize = 1 << 15;

/// Whether the AVX-512 BF16 kernels (or the AMX tiles, `amx_bf16`) beat f32 arithmetic on the
/// widened weights here: `F5_CPU_BF16_DOT=on`/`off` decides where set; else they do with AMX
/// and on every CPU but Intel's (Zen 4 and 5 issue two `vdpbf16ps` a cycle: the bf16 kernels
/// measured 2× f32 there), and not on Intel cores without AMX.
fn bf16_dot_products_pay(amx_bf16: bool) -> bool {
    match std::env::var("F5_CPU_BF16_DOT").as_deref() {
        Ok("on" | "1") => true,
        Ok("off" | "0") => false,
        _ => amx_bf16 || !cpu_is_intel(),
    }
}

/// Whether CPUID's vendor string is "GenuineIntel".
fn cpu_is_intel() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: CPUID leaf 0 exists on every x86-64 CPU.
        #[allow(unused_unsafe)]
        let id = unsafe { std::arch::x86_64::__cpuid(0) };
        let vendor = [id.ebx.to_le_bytes(), id.edx.to_le_bytes(), id.ecx.to_le_bytes()].concat();
        vendor == b"GenuineIntel"
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

impl Backend for CpuBf16Backend {
    type Buf = CpuBuf;

    fn device(&self) -> Device {
        self.f32.device()
    }

    fn alloc(&self, len: usize) -> Result<CpuBuf> {
        Ok(CpuBuf::of(Repr::F32(self.f32.alloc(len)?)))
    }

    fn upload(&self, data: &[f32]) -> Result<CpuBuf> {
        Ok(CpuBuf::of(Repr::F32(self.f32.upload(data)?)))
    }

    /// Stores the weight once, as bf16 (round to nearest even).
    fn upload_weight(&self, data: &[f32]) -> Result<CpuBuf> {
        Ok(CpuBuf::of(Repr::Bf16(bf16_bits(data)?)))
    }

    /// Stored as IEEE f16 (round to nearest even) where every value is within f16's range, else
    /// as f32: widened to f32 by each op that reads it.
    fn upload_weight_compact(&self, data: &[f32]) -> Result<CpuBuf> {
        if data.iter().any(|x| x.is_finite() && x.abs() >= F16_OVERFLOW) {
            return self.upload(data);
        }
        let mut v = Vec::new();
        v.try_reserve_exact(data.len()).map_err(|_| KitError::OutOfMemory(data.len()))?;
        v.resize(data.len(), f16::ZERO);
        v.convert_from_f32_slice(data);
        Ok(CpuBuf::of(Repr::F16(v)))
    }

    /// Where the AMX bf16 tiles run (see [`CpuBf16Backend::amx_convs`]): split into bf16 `hi`
    /// and `lo` parts and packed for the tiles, held in that form only (as many bytes as f32),
    /// so that `gemm` in the `Linear` layout runs it at ~2⁻¹⁶ per product (module
    /// `linear_amx`). Elsewhere exact f32: the tiles are what make it pay.
    fn upload_linear_weight_near_f32(&self, data: &[f32], out: usize, inp: usize) -> Result<CpuBuf> {
        if out.checked_mul(inp) != Some(data.len()) {
            return Err(shape_err("upload_linear_weight_near_f32", format!("{} values for a {out}×{inp} weight", data.len())));
        }
        if self.amx_bf16.is_none() {
            return self.upload(data);
        }
        let packed = self.f32.run(|| linear_amx::SplitLinear::pack(data, out, inp));
        Ok(CpuBuf::of(Repr::Split(Box::new(packed))))
    }

    /// In the int8 mode: stored as bf16, marked so that dense convolutions with it run on the
    /// int8 kernel (its int8 form is made on first use and kept). Otherwise as `upload_weight`.
    fn upload_weight_int8(&self, data: &[f32]) -> Result<CpuBuf> {
        let mut buf = self.upload_weight(data)?;
        if self.int8.is_some() {
            buf.1 = Some(OnceLock::new());
        }
        Ok(buf)
    }

    /// Where the bf16 kernel runs (the bf16 dot products pay on this CPU) and `data` is a dense
    /// bank of `spec`'s size: rounded to bf16 and packed now for that kernel (the AMX tiles'
    /// panels where they take the shape), held in that form only. Otherwise as `upload_weight`.
    fn upload_conv_filters(&self, data: &[f32], spec: &Conv1dSpec) -> Result<CpuBuf> {
        if self.bf16_dot.is_none() || !is_dense_bank(spec, data.len()) || self.long_filters_for_fft(spec) {
            return self.upload_weight(data);
        }
        let bits = bf16_bits(data)?;
        let packed = self.f32.run(|| conv::PackedBf16Filters::pack(spec, self.amx_bf16, &bits));
        Ok(CpuBuf::of(Repr::Bf16Conv(Box::new(packed))))
    }

    /// In the int8 mode, a dense bank the int8 kernel takes is quantised and packed now (from
    /// its bf16 rounding, as `upload_weight_int8`'s is on first use) and held in that form only.
    /// A dense bank the int8 mode does not take (or any, outside it) is `upload_conv_filters`'s;
    /// any other, `upload_weight_int8`'s.
    fn upload_conv_filters_int8(&self, data: &[f32], spec: &Conv1dSpec) -> Result<CpuBuf> {
        let dense = is_dense_bank(spec, data.len());
        if dense && self.int8_kernel(spec).is_none() {
            return self.upload_conv_filters(data, spec);
        }
        if !dense {
            return self.upload_weight_int8(data);
        }
        let bits = bf16_bits(data)?;
        let packed = self.f32.run(|| conv_int8::PackedFilters::pack(spec, &bits));
        Ok(CpuBuf::of(Repr::Int8(Box::new(packed))))
    }

    fn on_host_threads<R: Send>(&self, work: impl FnOnce() -> R + Send) -> R {
        self.f32.on_host_threads(work)
    }

    fn download(&self, buf: &CpuBuf) -> Result<Vec<f32>> {
        let mut out = vec![0.0; buf.len()];
        buf.read_into("download", 0, &mut out)?;
        Ok(out)
    }

    fn len(&self, buf: &CpuBuf) -> usize {
        buf.len()
    }

    fn write(&self, buf: &mut CpuBuf, offset: usize, data: &[f32]) -> Result<()> {
        buf.write_from("write", offset, data)
    }

    fn read(&self, buf: &CpuBuf, offset: usize, out: &mut [f32]) -> Result<()> {
        buf.read_into("read", offset, out)
    }

    fn copy(&self, src: &CpuBuf, src_off: usize, dst: &mut CpuBuf, dst_off: usize, len: usize) -> Result<()> {
        dst.values_changed();
        match (&src.0, &mut dst.0) {
            (Repr::F32(s), Repr::F32(d)) => self.f32.copy(s, src_off, d, dst_off, len),
            _ => {
                let mut staged = vec![0.0; len];
                src.read_into("copy", src_off, &mut staged)?;
                dst.write_from("copy", dst_off, &staged)
            }
        }
    }

    fn fill(&self, buf: &mut CpuBuf, offset: usize, len: usize, value: f32) -> Result<()> {
        buf.values_changed();
        // The range a bf16 or f16 weight is filled over (the f32 op checks its own).
        let have = buf.len();
        let span = offset.checked_add(len).filter(|&e| e <= have).map(|end| offset..end);
        let span = || span.clone().ok_or_else(|| shape_err("fill", format!("{offset}+{len} past buffer of {have}")));
        match &mut buf.0 {
            Repr::F32(v) => self.f32.fill(v, offset, len, value),
            Repr::Bf16(v) => {
                v[span()?].fill(gemm::to_bf16(value));
                Ok(())
            }
            Repr::F16(v) => {
                v[span()?].fill(f16::from_f32(value));
                Ok(())
            }
            Repr::Int8(_) => Err(int8_read_only("fill")),
            Repr::Bf16Conv(_) => Err(packed_bf16_read_only("fill")),
            Repr::Split(_) => Err(split_read_only("fill")),
        }
    }

    /// f32 GEMM (the `gemm` crate) when neither operand is a bf16 weight (an f16 one widened
    /// first), else the bf16 kernel (or, where the bf16 dot products do not pay, the f32 GEMM
    /// on the weight widened).
    fn gemm(&self, spec: &GemmSpec, a: &CpuBuf, b: &CpuBuf, bias: Option<&CpuBuf>, c: &mut CpuBuf) -> Result<()> {
        let bias = bias.map(|b| b.f32("gemm")).transpose()?;
        if let Some(done) = self.gemm_split(spec, a, b, bias, c) {
            return done;
        }
        if !a.is_bf16() && !b.is_bf16() {
            let (a, b) = (self.wide("gemm", a)?, self.wide("gemm", b)?);
            return self.f32.gemm(spec, &a, &b, bias, c.f32_mut("gemm")?);
        }
        let c = c.f32_mut("gemm")?;
        spec.validate(a.len(), b.len(), c.len(), bias.map(|b| b.len()))?;
        if let Some(done) = self.gemm_int8(spec, a, b, bias, c) {
            return done;
        }
        if let (Repr::F32(x), Repr::Bf16(w), Some(amx), Some(cpu)) = (&a.0, &b.0, self.amx_bf16, self.bf16_dot) {
            let GemmSpec { m, n, k, .. } = *spec;
            let plain = is_plain_linear(spec);
            if plain && m >= AMX_LINEAR_MIN_ROWS && w.len() == n * k {
                let bias = bias.map(|b| b.as_slice());
                self.f32.run(|| linear_amx::linear_bf16(amx, cpu, &w[..n * k], (n, k), &x[..m * k], m, bias, &mut c[..m * n]));
                return Ok(());
            }
        }
        let (Some(a_op), Some(b_op)) = (a.operand(), b.operand()) else {
            return Err(shape_err("gemm", "a bf16 GEMM weight and an f16 weight cannot be multiplied together"));
        };
        let Some(cpu) = self.bf16_dot else {
            let bias = bias.map(|b| b.as_slice());
            return self.with_f32_values("gemm", a, |a| self.with_f32_values("gemm", b, |b| self.f32.gemm_slices(spec, a, b, bias, c)));
        };
        let (a, b) = (a_op, b_op);
        let bias = bias.map(|b| b.as_slice());
        self.f32.run(|| match self.packed_b.try_lock() {
            Ok(mut scratch) => gemm::gemm_fast(cpu, spec, a, b, bias, c, &mut scratch),
            Err(_) => gemm::gemm_fast(cpu, spec, a, b, bias, c, &mut Vec::new()),
        })
    }

    /// Attention in bf16 with f32 accumulation (q, k, v and the softmax weights rounded to bf16,
    /// exact f32 softmax), every shape the f32 op takes (the kernel is `cpu/bf16/attention.rs`);
    /// the f32 attention where that does not pay ([`CpuBf16Backend::bf16_attention`]).
    fn attention(&self, spec: &AttentionSpec, q: &CpuBuf, k: &CpuBuf, v: &CpuBuf, out: &mut CpuBuf) -> Result<()> {
        let op = "attention";
        let (q, k, v, out) = (q.f32(op)?, k.f32(op)?, v.f32(op)?, out.f32_mut(op)?);
        let Some(cpu) = self.bf16_dot.filter(|_| self.bf16_attention) else {
            return self.f32.attention(spec, q, k, v, out);
        };
        spec.validate(q.len(), k.len(), v.len(), out.len())?;
        self.f32.run(|| attention::attention(cpu, spec, q, k, v, out));
        Ok(())
    }

    fn layer_norm(&self, x: &CpuBuf, rows: usize, d: usize, eps: f32, affine: Option<(&CpuBuf, &CpuBuf)>, out: &mut CpuBuf) -> Result<()> {
        let op = "layer_norm";
        let affine = match affine {
            Some((w, b)) => Some((w.f32(op)?, b.f32(op)?)),
            None => None,
        };
        self.f32.layer_norm(x.f32(op)?, rows, d, eps, affine, out.f32_mut(op)?)
    }

    fn adaln_modulate(
        &self,
        x: &CpuBuf,
        rows: usize,
        d: usize,
        eps: f32,
        modulation: &CpuBuf,
        shift_off: usize,
        scale_off: usize,
        out: &mut CpuBuf,
    ) -> Result<()> {
        let op = "adaln_modulate";
        self.f32.adaln_modulate(x.f32(op)?, rows, d, eps, modulation.f32(op)?, shift_off, scale_off, out.f32_mut(op)?)
    }

    fn gated_add(&self, x: &mut CpuBuf, y: &CpuBuf, rows: usize, d: usize, gates: &CpuBuf, gate_off: usize) -> Result<()> {
        let op = "gated_add";
        self.f32.gated_add(x.f32_mut(op)?, y.f32(op)?, rows, d, gates.f32(op)?, gate_off)
    }

    fn grn(&self, x: &mut CpuBuf, batch: usize, n: usize, d: usize, gamma: &CpuBuf, beta: &CpuBuf, eps: f32) -> Result<()> {
        let op = "grn";
        self.f32.grn(x.f32_mut(op)?, batch, n, d, gamma.f32(op)?, beta.f32(op)?, eps)
    }

    fn split_heads_rope(&self, spec: &RopeSpec, src: &CpuBuf, cos: &CpuBuf, sin: &CpuBuf, dst: &mut CpuBuf) -> Result<()> {
        let op = "split_heads_rope";
        self.f32.split_heads_rope(spec, src.f32(op)?, cos.f32(op)?, sin.f32(op)?, dst.f32_mut(op)?)
    }

    fn merge_heads(&self, src: &CpuBuf, batch: usize, n: usize, heads: usize, hd: usize, dst: &mut CpuBuf) -> Result<()> {
        let op = "merge_heads";
        self.f32.merge_heads(src.f32(op)?, batch, n, heads, hd, dst.f32_mut(op)?)
    }

    /// With a bf16 filter bank, a dense convolution (`groups == 1`) runs on the bf16 kernel
    /// (its `conv` module: the input rounded to bf16 once per block, f32 sums and output); a
    /// grouped or depthwise one, and every one where the bf16 dot products do not pay, runs in
    /// f32 on the filters widened from bf16 (into scratch memory, per call). With f32 filters,
    /// the f32 convolution.
    fn conv1d(&self, spec: &Conv1dSpec, x: &CpuBuf, weight: &CpuBuf, bias: Option<&CpuBuf>, y: &mut CpuBuf) -> Result<()> {
        let op = "conv1d";
        let bias_vec = bias.map(|b| b.f32(op)).transpose()?;
        let bias = bias_vec.map(|b| b.as_slice());
        let (x, y) = (x.f32(op)?, y.f32_mut(op)?);
        match (self.dense_kernel(spec, weight), &weight.0) {
            (Some(DenseKernel::Int8(vnni, filters)), _) => {
                spec.validate(x.len(), filters.len(), bias.map(|b| b.len()), y.len())?;
                self.f32.run(|| conv_int8::conv1d_dense(vnni, spec, x, &filters, bias, y));
                Ok(())
            }
            (Some(DenseKernel::Bf16(cpu, w)), _) => {
                spec.validate(x.len(), w.len(), bias.map(|b| b.len()), y.len())?;
                self.f32.run(|| conv::conv1d_dense(cpu, self.amx_bf16, spec, x, w, bias, y));
                Ok(())
            }
            (None, Repr::Int8(filters)) => {
                spec.validate(x.len(), filters.len(), bias.map(|b| b.len()), y.len())?;
                let (c_out, c_in, kernel) = filters.shape();
                Err(shape_err(
                    op,
                    format!(
                        "int8 filters packed for {c_out}×{c_in}×{kernel} (dense), asked for {}×{}×{} with {} groups{}",
                        spec.c_out,
                        spec.c_in,
                        spec.kernel,
                        spec.groups,
                        if self.int8.is_none() { " on a backend without the int8 mode" } else { "" }
                    ),
                ))
            }
            (None, Repr::Bf16(w)) => {
                spec.validate(x.len(), w.len(), bias.map(|b| b.len()), y.len())?;
                self.with_widened(w, |wide| self.f32.run(|| crate::cpu::conv::conv1d(spec, x, wide, bias, y)));
                Ok(())
            }
            (None, Repr::F32(_) | Repr::F16(_) | Repr::Bf16Conv(_) | Repr::Split(_)) => {
                let w = self.wide(op, weight)?;
                self.f32.conv1d(spec, x, &w, bias_vec, y)
            }
        }
    }

    fn activation(&self, act: Activation, x: &mut CpuBuf, len: usize) -> Result<()> {
        self.f32.activation(act, x.f32_mut("activation")?, len)
    }

    fn cfg_combine(&self, pred: &CpuBuf, half: usize, strength: f32, out: &mut CpuBuf) -> Result<()> {
        let op = "cfg_combine";
        self.f32.cfg_combine(pred.f32(op)?, half, strength, out.f32_mut(op)?)
    }

    fn axpy(&self, a: f32, x: &CpuBuf, y: &mut CpuBuf, len: usize) -> Result<()> {
        self.f32.axpy(a, x.f32("axpy")?, y.f32_mut("axpy")?, len)
    }

    fn mask_rows(&self, x: &mut CpuBuf, rows: usize, d: usize, keep: &CpuBuf) -> Result<()> {
        let op = "mask_rows";
        self.f32.mask_rows(x.f32_mut(op)?, rows, d, keep.f32(op)?)
    }

    fn concat_features(&self, parts: &[(&CpuBuf, usize)], rows: usize, out: &mut CpuBuf) -> Result<()> {
        let op = "concat_features";
        let parts = parts.iter().map(|(p, w)| Ok((p.f32(op)?, *w))).collect::<Result<Vec<_>>>()?;
        self.f32.concat_features(&parts, rows, out.f32_mut(op)?)
    }

    fn split_features(&self, x: &CpuBuf, rows: usize, parts: &mut [(&mut CpuBuf, usize)]) -> Result<()> {
        let op = "split_features";
        let mut parts = parts.iter_mut().map(|(p, w)| Ok((p.f32_mut(op)?, *w))).collect::<Result<Vec<_>>>()?;
        self.f32.split_features(x.f32(op)?, rows, &mut parts)
    }

    fn embedding(&self, table: &CpuBuf, dim: usize, ids: &[u32], out: &mut CpuBuf) -> Result<()> {
        let op = "embedding";
        self.f32.embedding(table.f32(op)?, dim, ids, out.f32_mut(op)?)
    }

    fn polar_spectrum(&self, h: &CpuBuf, frames: usize, bins: usize, mag_max: f32, re: &mut CpuBuf, im: &mut CpuBuf) -> Result<()> {
        let op = "polar_spectrum";
        self.f32.polar_spectrum(h.f32(op)?, frames, bins, mag_max, re.f32_mut(op)?, im.f32_mut(op)?)
    }

    /// With a bf16 filter bank, a dense transposed convolution (`groups == 1`) runs on the bf16
    /// convolution kernel, its output phases as one convolution's channels (the
    /// `conv_transpose` module: the inputs rounded to bf16 as they are converted, f32 sums and
    /// output; the AMX tiles where the CPU has them); a grouped or depthwise one, and every one where the
    /// bf16 dot products do not pay, runs in f32 on the filters widened from bf16: as the f32
    /// direct kernel packs them where it takes the shape, else into scratch memory, per call.
    /// With f32 filters, the f32 transposed convolution.
    fn conv_transpose1d(
        &self,
        spec: &ConvTranspose1dSpec,
        x: &CpuBuf,
        weight: &CpuBuf,
        bias: Option<&CpuBuf>,
        y: &mut CpuBuf,
    ) -> Result<()> {
        let op = "conv_transpose1d";
        let bias = bias.map(|b| b.f32(op)).transpose()?;
        let (x, y) = (x.f32(op)?, y.f32_mut(op)?);
        match &weight.0 {
            Repr::F32(_) | Repr::F16(_) | Repr::Int8(_) | Repr::Bf16Conv(_) | Repr::Split(_) => {
                let w = self.wide(op, weight)?;
                self.f32.conv_transpose1d(spec, x, &w, bias, y)
            }
            Repr::Bf16(w) => {
                spec.validate(x.len(), w.len(), bias.map(|b| b.len()), y.len())?;
                let bias = bias.map(|b| b.as_slice());
                if let Some(cpu) = self.bf16_dot.filter(|_| spec.groups == 1) {
                    self.f32.run(|| conv_transpose::conv_transpose1d_dense(cpu, self.amx_bf16, spec, x, w, bias, y));
                    Ok(())
                } else {
                    let packed_from_bits = self.f32.run(|| crate::cpu::conv::conv_transpose1d_bf16_filters(spec, x, w, bias, y));
                    if !packed_from_bits {
                        self.with_widened(w, |wide| self.f32.run(|| crate::cpu::conv::conv_transpose1d(spec, x, wide, bias, y)));
                    }
                    Ok(())
                }
            }
        }
    }

    fn lstm(
        &self,
        spec: &LstmSpec,
        lengths: &[usize],
        gates_x: &CpuBuf,
        w_hh: &CpuBuf,
        state0: Option<(&CpuBuf, &CpuBuf)>,
        out: &mut CpuBuf,
    ) -> Result<()> {
        let op = "lstm";
        let state0 = match state0 {
            Some((h, c)) => Some((h.f32(op)?, c.f32(op)?)),
            None => None,
        };
        let w_hh = self.wide(op, w_hh)?;
        self.f32.lstm(spec, lengths, gates_x.f32(op)?, &w_hh, state0, out.f32_mut(op)?)
    }

    fn instance_norm(
        &self,
        spec: &InstanceNormSpec,
        x: &CpuBuf,
        affine: Option<(&CpuBuf, &CpuBuf)>,
        style: Option<&CpuBuf>,
        out: &mut CpuBuf,
    ) -> Result<()> {
        let (affine, style) = norm_operands("instance_norm", affine, style)?;
        self.f32.instance_norm_on(spec, x.f32("instance_norm")?, affine, style, None, out.f32_mut("instance_norm")?)
    }

    fn instance_norm_snake(
        &self,
        spec: &InstanceNormSpec,
        x: &CpuBuf,
        affine: Option<(&CpuBuf, &CpuBuf)>,
        style: Option<&CpuBuf>,
        alpha: &CpuBuf,
        out: &mut CpuBuf,
    ) -> Result<()> {
        let op = "instance_norm_snake";
        let (affine, style) = norm_operands(op, affine, style)?;
        let (x, alpha) = (x.f32(op)?, alpha.f32(op)?);
        self.f32.instance_norm_on(spec, x, affine, style, Some((alpha, crate::cpu::seq::SnakeSine::F32)), out.f32_mut(op)?)
    }

    /// With int8 filters on the int8 mode or bf16 filters on the bf16 kernel (the generator's
    /// resblock convolutions), fused: each row the convolution reads is normalised, snaked and
    /// converted in one go, from statistics computed first, so `t` is not written and the
    /// normalised rows never go through memory; the bits are the two ops'.
    /// Where the bf16 products do not pay, bf16 filters widened and fused the same way on the
    /// f32 backend's tiled paths (FFT, Winograd), so `t` is not written. Otherwise (f32 or f16
    /// filters, shapes no fused path takes) the two ops through `t`.
    fn instance_norm_snake_conv1d(
        &self,
        norm: &InstanceNormSpec,
        x: &CpuBuf,
        affine: Option<(&CpuBuf, &CpuBuf)>,
        style: Option<&CpuBuf>,
        alpha: &CpuBuf,
        conv: &Conv1dSpec,
        weight: &CpuBuf,
        bias: Option<&CpuBuf>,
        t: &mut CpuBuf,
        y: &mut CpuBuf,
    ) -> Result<()> {
        crate::check::norm_then_conv(norm, conv)?;
        let op = "instance_norm_snake_conv1d";
        let scratch_len = t.f32(op)?.len();
        if self.fused_conv(op, norm, x, affine, style, alpha, conv, weight, bias, scratch_len, false, y)? {
            return Ok(());
        }
        self.instance_norm_snake(norm, x, affine, style, alpha, t)?;
        self.conv1d(conv, t, weight, bias, y)
    }

    /// Where [`Backend::instance_norm_snake_conv1d`] fuses (the bf16 and int8 kernels, or the
    /// f32 backend's tiled paths on widened bf16 filters), fused the same way, each block of
    /// output rows added to `y` while it is in cache (the bits of a separate `axpy`), `x` and
    /// `t` left as they were. Otherwise the default's three ops.
    ///
    /// Writing the whole output to `t` and adding it back cost passes over 80 MB per residual
    /// step at the generator's last rate: Kokoro's long-input forward (2 threads, the AMX Xeon,
    /// alternated runs) took 0.84× the time in int8 and 0.85× in bf16 (medians; 0.88× on the
    /// VNNI kernel), the short input's within the noise.
    fn instance_norm_snake_conv1d_add(
        &self,
        norm: &InstanceNormSpec,
        x: &mut CpuBuf,
        affine: Option<(&CpuBuf, &CpuBuf)>,
        style: Option<&CpuBuf>,
        alpha: &CpuBuf,
        conv: &Conv1dSpec,
        weight: &CpuBuf,
        bias: Option<&CpuBuf>,
        t: &mut CpuBuf,
        y: &mut CpuBuf,
    ) -> Result<()> {
        let op = "instance_norm_snake_conv1d_add";
        let out_len = crate::check::norm_then_conv_add(norm, conv, x.f32(op)?.len())?;
        let scratch_len = t.f32(op)?.len();
        if self.fused_conv(op, norm, x, affine, style, alpha, conv, weight, bias, scratch_len, true, y)? {
            return Ok(());
        }
        self.instance_norm_snake(norm, x, affine, style, alpha, t)?;
        self.conv1d(conv, t, weight, bias, x)?;
        self.axpy(1.0, x, y, out_len)
    }

    /// Snake with `sin²` reduced by π in f32 arithmetic (within 4e-7 of exact; the f32
    /// backend's sine is within 2 ulp, reduced by π/2).
    fn snake(&self, x: &mut CpuBuf, rows: usize, c: usize, alpha: &CpuBuf) -> Result<()> {
        self.f32.snake_f32_sin(x.f32_mut("snake")?, rows, c, alpha.f32("snake")?)
    }

    fn upsample_nearest(&self, x: &CpuBuf, batch: usize, n: usize, c: usize, factor: usize, out: &mut CpuBuf) -> Result<()> {
        let op = "upsample_nearest";
        self.f32.upsample_nearest(x.f32(op)?, batch, n, c, factor, out.f32_mut(op)?)
    }

    fn interpolate_linear(&self, spec: &InterpolateSpec, x: &CpuBuf, out: &mut CpuBuf) -> Result<()> {
        let op = "interpolate_linear";
        self.f32.interpolate_linear(spec, x.f32(op)?, out.f32_mut(op)?)
    }

    fn pad1d(&self, spec: &Pad1dSpec, x: &CpuBuf, out: &mut CpuBuf) -> Result<()> {
        self.f32.pad1d(spec, x.f32("pad1d")?, out.f32_mut("pad1d")?)
    }

    fn cumsum(&self, x: &CpuBuf, batch: usize, n: usize, c: usize, out: &mut CpuBuf) -> Result<()> {
        self.f32.cumsum(x.f32("cumsum")?, batch, n, c, out.f32_mut("cumsum")?)
    }

    fn stft(&self, spec: &StftSpec, signal: &CpuBuf, mag: &mut CpuBuf, phase: &mut CpuBuf) -> Result<()> {
        let op = "stft";
        self.f32.stft(spec, signal.f32(op)?, mag.f32_mut(op)?, phase.f32_mut(op)?)
    }

    fn istft(&self, spec: &StftSpec, mag: &CpuBuf, phase: &CpuBuf, signal: &mut CpuBuf) -> Result<()> {
        let op = "istft";
        self.f32.istft(spec, mag.f32(op)?, phase.f32(op)?, signal.f32_mut(op)?)
    }
}
