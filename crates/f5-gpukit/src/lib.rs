//! The numeric kit of f5: devices, buffers and one method per numeric operation the models need
//! (the F5-TTS DiT, the Vocos vocoder, Kokoro's StyleTTS2 + ISTFTNet). Layers and weight loading
//! live one level up, in `f5-nn`.
//!
//! Model code is written once, generic over [`Backend`], and runs unchanged on every backend:
//! [`CpuBackend`] (always available: multi-threaded with rayon, GEMMs through the `gemm` crate)
//! and, with the `cuda` feature, a CUDA backend whose kernels each have the CPU op as their twin.
//!
//! Conventions shared by every op, so that a backend cannot quietly disagree:
//! - every buffer holds `f32`, row-major; activations are `[rows, features]` with the CFG batch
//!   stacked along the rows (`[batch·n, d]`), attention tensors are `[batch·heads, n, head_dim]`;
//! - sizes are passed explicitly and a buffer may be longer than an op needs (scratch is reused
//!   across utterances of different lengths); an op reads and writes only the prefix or the
//!   strided window it is told about, and refuses with [`KitError::Shape`] a buffer that is too
//!   short instead of reading past it;
//! - outputs never alias inputs unless the op says it works in place.
//!
//! ```
//! use f5_gpukit::{Backend, CpuBackend, Activation};
//! # fn main() -> Result<(), f5_gpukit::KitError> {
//! let kit = CpuBackend::new();
//! let mut x = kit.upload(&[-1.0, 0.0, 1.0])?;
//! kit.activation(Activation::Silu, &mut x, 3)?;
//! let y = kit.download(&x)?;
//! assert!((y[2] - 0.7310586).abs() < 1e-6);
//! # Ok(()) }
//! ```

#![warn(missing_docs)]

pub(crate) mod check;
mod cpu;
#[cfg(feature = "cuda")]
pub mod cuda;
pub mod host;
mod spec;

pub use cpu::bf16::{cpu_bf16_missing_feature, cpu_int8_missing_feature, CpuBf16Backend, CpuBuf};
pub use cpu::line_alloc::LineAligned;
pub use cpu::CpuBackend;
#[cfg(feature = "cuda")]
pub use cuda::{CudaBackend, CudaBuf, CudaOptions, WeightPrecision};
pub use spec::{
    Activation, AttentionSpec, Conv1dSpec, ConvTranspose1dSpec, GemmSpec, InstanceNormSpec, InterpolateSpec, LstmSpec, MatLayout,
    Pad1dSpec, PadMode, RopeSpec, StftSpec, StridedRows,
};

use std::fmt;

/// Where a model's weights and activations live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Device {
    /// The CPU backend, using the given number of threads (0 = all cores).
    Cpu {
        /// Worker threads (0 = all cores).
        threads: usize,
    },
    /// A CUDA device by ordinal.
    Cuda(usize),
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Device::Cpu { threads: 0 } => write!(f, "cpu"),
            Device::Cpu { threads } => write!(f, "cpu ({threads} threads)"),
            Device::Cuda(i) => write!(f, "cuda:{i}"),
        }
    }
}

impl std::str::FromStr for Device {
    type Err = KitError;

    /// Accepts `cpu`, `cpu:N` (N threads), `cuda` and `cuda:N`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || KitError::Device(format!("unknown device {s:?}: expected cpu, cpu:THREADS, cuda or cuda:ORDINAL"));
        let (kind, num) = match s.split_once(':') {
            Some((k, n)) => (k, Some(n.parse::<usize>().map_err(|_| bad())?)),
            None => (s, None),
        };
        match kind {
            "cpu" => Ok(Device::Cpu { threads: num.unwrap_or(0) }),
            "cuda" | "gpu" => Ok(Device::Cuda(num.unwrap_or(0))),
            _ => Err(bad()),
        }
    }
}

/// What a user asks to run a model on: a backend, and whether the GEMM weights are kept
/// in bf16. It exists in every build, so a build without the `cuda` feature can still be asked
/// for CUDA and refuse with the reason (the pipeline's and the daemon's callers match on it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DeviceChoice {
    /// The CPU backend (its thread count is the caller's separate setting).
    #[default]
    Cpu,
    /// The CPU backend with GEMM weights stored in bf16 ([`CpuBf16Backend`]): bf16 dot products
    /// where the CPU has AVX-512 BF16 and they pay, else f32 arithmetic on the widened weights.
    CpuBf16,
    /// [`CpuBf16Backend::with_int8_convs`]: GEMM weights in bf16 and dense convolutions in int8
    /// (AVX-512 VNNI); only parsed where the CPU has AVX-512 VNNI.
    CpuInt8,
    /// The CUDA backend on GPU `ordinal`; `bf16` keeps a bf16 copy of every GEMM weight.
    Cuda {
        /// Which GPU (as `CUDA_VISIBLE_DEVICES` numbers them).
        ordinal: usize,
        /// Keep a bf16 copy of every GEMM weight (faster, half the weight memory traffic).
        bf16: bool,
    },
}

impl DeviceChoice {
    /// Parses a device name (`cpu`, `cuda`, `gpu`, `cuda:N`; any case) and a weight precision
    /// (`f32`/`fp32`/`float32`, `bf16`/`bfloat16`, `int8` on the CPU only). Parsing does not
    /// depend on the build. `cpu` with `int8` is refused, naming the missing extension, on a CPU
    /// without AVX-512 VNNI; `cpu` with `bf16` runs on every CPU.
    pub fn parse(device: &str, precision: &str) -> Result<Self> {
        Self::parse_for_cpu(device, precision, CpuFeatures { int8_missing: cpu_int8_missing_feature })
    }

    /// [`DeviceChoice::parse`] with the CPU feature check passed in, so that the refusal is
    /// tested on any machine.
    fn parse_for_cpu(device: &str, precision: &str, cpu: CpuFeatures) -> Result<Self> {
        let (bf16, int8) = match precision.trim().to_ascii_lowercase().as_str() {
            "f32" | "fp32" | "float32" => (false, false),
            "bf16" | "bfloat16" => (true, false),
            "int8" => (true, true),
            other => return Err(KitError::Device(format!("weight precision {other:?}: use f32, bf16 or (on the CPU) int8"))),
        };
        let device = device.trim().to_ascii_lowercase();
        let choice = match device.as_str() {
            "cpu" => DeviceChoice::Cpu,
            "cuda" | "gpu" => DeviceChoice::Cuda { ordinal: 0, bf16 },
            other => match other.strip_prefix("cuda:") {
                Some(n) => {
                    let ordinal = n
                        .parse::<usize>()
                        .map_err(|_| KitError::Device(format!("{other:?}: the device number after cuda: must be 0, 1, …")))?;
                    DeviceChoice::Cuda { ordinal, bf16 }
                }
                None => return Err(KitError::Device(format!("{other:?}: use cpu, cuda or cuda:N"))),
            },
        };
        if int8 {
            if choice != DeviceChoice::Cpu {
                return Err(KitError::Device("precision int8 runs on the CPU only: use f32 or bf16 on a CUDA device".into()));
            }
            if let Some(feature) = (cpu.int8_missing)() {
                return Err(KitError::Device(format!(
                    "int8 convolutions on the CPU need the {feature} instruction set extension, which this CPU lacks: use bf16 or f32"
                )));
            }
            return Ok(DeviceChoice::CpuInt8);
        }
        if choice == DeviceChoice::Cpu && bf16 {
            return Ok(DeviceChoice::CpuBf16);
        }
        Ok(choice)
    }
}

/// The CPU feature checks [`DeviceChoice::parse`] consults, passed in so that its refusals are
/// tested on any machine.
#[derive(Clone, Copy)]
struct CpuFeatures {
    int8_missing: fn() -> Option<&'static str>,
}

/// Everything an op can refuse.
#[derive(Debug, thiserror::Error)]
pub enum KitError {
    /// An operand is too short for the shape the op was given, or the shape itself is invalid.
    #[error("{op}: {detail}")]
    Shape {
        /// The op that refused.
        op: &'static str,
        /// What was wrong, in numbers.
        detail: String,
    },
    /// The device could not be opened or failed.
    #[error("device: {0}")]
    Device(String),
    /// Host memory for a buffer of this many f32 could not be reserved.
    #[error("cannot allocate a buffer of {0} f32 values")]
    OutOfMemory(usize),
}

/// Results of the kit's ops.
pub type Result<T, E = KitError> = std::result::Result<T, E>;

pub(crate) fn shape_err(op: &'static str, detail: impl Into<String>) -> KitError {
    KitError::Shape { op, detail: detail.into() }
}

/// One implementation of every op. See the crate docs for the conventions.
///
/// The buffer type is associated rather than boxed so that a model generic over `B: Backend`
/// compiles to direct calls: dispatch happens once, where the device is chosen.
pub trait Backend: Send + Sync {
    /// A device buffer of `f32`.
    type Buf: Send + Sync;

    /// Which device this backend runs on (for logs and for choosing tolerances).
    fn device(&self) -> Device;

    // ── buffers ────────────────────────────────────────────────────────────────────────────
    /// A zero-filled buffer of `len` values.
    fn alloc(&self, len: usize) -> Result<Self::Buf>;
    /// A new buffer holding a copy of `data` (host → device).
    fn upload(&self, data: &[f32]) -> Result<Self::Buf>;
    /// Uploads model weights, which live as long as the model and are only read. A backend may
    /// keep an extra lower-precision copy for faster GEMMs (the CUDA backend's bf16 option);
    /// everything else reads them like any buffer. Defaults to [`Backend::upload`].
    fn upload_weight(&self, data: &[f32]) -> Result<Self::Buf> {
        self.upload(data)
    }
    /// Uploads a convolution filter bank that a backend may compute in int8 (the CPU bf16
    /// backend's int8 mode, [`CpuBf16Backend::with_int8_convs`]: per-row int8 activations).
    /// Models use it only for convolutions whose inputs were measured to tolerate that; a backend
    /// without such a mode treats it as [`Backend::upload_weight`], the default.
    fn upload_weight_int8(&self, data: &[f32]) -> Result<Self::Buf> {
        self.upload_weight(data)
    }
    /// Uploads the filter bank `[c_out, c_in, K]` of the dense convolution `spec` (its batch and
    /// length do not matter) as [`Backend::upload_weight`] does, where a backend may keep it only
    /// in the form its convolution kernel reads, because it knows the shape now (the CPU bf16
    /// backend: packed for its bf16 kernel once, not on every call). Such a buffer is read-only:
    /// writes and fills are refused, reads give the values it computes with, and `conv1d` of
    /// that shape runs on it as it would on `upload_weight`'s (other ops read its values). Defaults to
    /// [`Backend::upload_weight`].
    fn upload_conv_filters(&self, data: &[f32], spec: &Conv1dSpec) -> Result<Self::Buf> {
        let _ = spec;
        self.upload_weight(data)
    }
    /// Uploads the filter bank `[c_out, c_in, K]` of the dense convolution `spec` (its batch and
    /// length do not matter) for int8 as [`Backend::upload_weight_int8`] does, where a backend
    /// may keep only the int8 form because it knows the shape now (the CPU bf16 backend's int8
    /// mode: one byte a value instead of bf16's two plus the int8 copy). Such a buffer is
    /// read-only: writes and fills are refused, reads give the values it computes with, and only
    /// `conv1d` of that shape takes it. Defaults to [`Backend::upload_weight_int8`].
    fn upload_conv_filters_int8(&self, data: &[f32], spec: &Conv1dSpec) -> Result<Self::Buf> {
        let _ = spec;
        self.upload_weight_int8(data)
    }
    /// Uploads model weights whose products must stay f32 (layers measured to need more than
    /// bf16's 8 bits) but whose storage may be compact: a backend may keep them as IEEE f16 (11
    /// significant bits, the rounding of `torch.Tensor.half()`) and widen them to f32 for each op
    /// that reads them (the CPU bf16 backend does, for `gemm`, `conv1d`, `conv_transpose1d` and
    /// `lstm`'s recurrent weights), halving their memory at the cost of that rounding. Defaults to
    /// [`Backend::upload`]: exact f32.
    fn upload_weight_compact(&self, data: &[f32]) -> Result<Self::Buf> {
        self.upload(data)
    }
    /// Uploads a `Linear` layer's weight `[out, inp]` (PyTorch's layout) whose products must stay
    /// close to f32 (layers measured to need more than bf16's 8 bits), where a backend may hold it
    /// in a form it multiplies faster at about 16 significant bits: the CPU bf16 backend on AMX
    /// splits each value into two bf16 parts, `hi + lo`, and computes `gemm` in the `Linear`
    /// layout ([`GemmSpec::linear`] with this `inp` and `out`) as three bf16 products summed in
    /// f32, within ~2⁻¹⁴ of each exact product instead of bf16's 2⁻⁷. Such a buffer is
    /// read-only: writes and fills are refused, and every other op (or another layout) reads
    /// the values it computes with. Refuses `data` that is not `out·inp` values. Defaults to
    /// [`Backend::upload`]: exact f32.
    fn upload_linear_weight_near_f32(&self, data: &[f32], out: usize, inp: usize) -> Result<Self::Buf> {
        if out.checked_mul(inp) != Some(data.len()) {
            return Err(shape_err("upload_linear_weight_near_f32", format!("{} values for a {out}×{inp} weight", data.len())));
        }
        self.upload(data)
    }
    /// Runs host-side work of a model (Kokoro's sine source) on the threads this backend
    /// computes with, so that rayon's parallel iterators inside `work` use as many threads as
    /// the backend's own ops: the CPU backends install their pool; the default runs `work` on
    /// the caller's thread (rayon's global pool), which is what a device backend does.
    fn on_host_threads<R: Send>(&self, work: impl FnOnce() -> R + Send) -> R
    where
        Self: Sized,
    {
        work()
    }
    /// A host copy of the whole buffer (device → host).
    fn download(&self, buf: &Self::Buf) -> Result<Vec<f32>>;
    /// Values the buffer holds.
    fn len(&self, buf: &Self::Buf) -> usize;
    /// Host → device into `buf[offset..offset + data.len()]`.
    fn write(&self, buf: &mut Self::Buf, offset: usize, data: &[f32]) -> Result<()>;
    /// Device → host from `buf[offset..offset + out.len()]`.
    fn read(&self, buf: &Self::Buf, offset: usize, out: &mut [f32]) -> Result<()>;
    /// `dst[dst_off..+len] = src[src_off..+len]`.
    fn copy(&self, src: &Self::Buf, src_off: usize, dst: &mut Self::Buf, dst_off: usize, len: usize) -> Result<()>;
    /// `buf[offset..offset + len] = value`.
    fn fill(&self, buf: &mut Self::Buf, offset: usize, len: usize, value: f32) -> Result<()>;

    // ── linear algebra ─────────────────────────────────────────────────────────────────────
    /// `C = beta·C + A·B (+ bias)` for `spec.batch` strided matrices; see [`GemmSpec`].
    fn gemm(&self, spec: &GemmSpec, a: &Self::Buf, b: &Self::Buf, bias: Option<&Self::Buf>, c: &mut Self::Buf) -> Result<()>;

    /// `softmax(q·kᵀ·scale)·v` per `[n, head_dim]` slice of `[batch·heads, n, head_dim]` tensors,
    /// without ever holding the scores of all heads at once.
    fn attention(&self, spec: &AttentionSpec, q: &Self::Buf, k: &Self::Buf, v: &Self::Buf, out: &mut Self::Buf) -> Result<()>;

    // ── normalisation and modulation ───────────────────────────────────────────────────────
    /// LayerNorm over the last axis of `[rows, d]`, with optional affine `(weight, bias)`.
    fn layer_norm(
        &self,
        x: &Self::Buf,
        rows: usize,
        d: usize,
        eps: f32,
        affine: Option<(&Self::Buf, &Self::Buf)>,
        out: &mut Self::Buf,
    ) -> Result<()>;

    /// adaLN: `LayerNorm(x)·(1 + scale) + shift` (no affine), with `shift`/`scale` the `d`-vectors
    /// at `modulation[shift_off..]`/`modulation[scale_off..]`, shared by every row. One fused pass
    /// instead of norm, multiply and add over the activation.
    #[allow(clippy::too_many_arguments)]
    fn adaln_modulate(
        &self,
        x: &Self::Buf,
        rows: usize,
        d: usize,
        eps: f32,
        modulation: &Self::Buf,
        shift_off: usize,
        scale_off: usize,
        out: &mut Self::Buf,
    ) -> Result<()>;

    /// Gated residual, in place: `x[r, :] += gate ⊙ y[r, :]`, `gate = gates[gate_off..gate_off + d]`.
    #[allow(clippy::too_many_arguments)]
    fn gated_add(&self, x: &mut Self::Buf, y: &Self::Buf, rows: usize, d: usize, gates: &Self::Buf, gate_off: usize) -> Result<()>;

    /// Global response normalisation of ConvNeXt-V2 over the SEQUENCE axis, in place, for
    /// `[batch, n, d]`: `G = ‖x‖₂ over n`, `N = G / (mean_d G + eps)`, `x = γ·(x·N) + β + x`.
    #[allow(clippy::too_many_arguments)]
    fn grn(&self, x: &mut Self::Buf, batch: usize, n: usize, d: usize, gamma: &Self::Buf, beta: &Self::Buf, eps: f32) -> Result<()>;

    // ── attention plumbing ─────────────────────────────────────────────────────────────────
    /// `[batch, n, heads·hd]` rows (read through `spec.src`) → `[batch·heads, n, hd]`, rotating
    /// interleaved pairs `(x[2j], x[2j+1])` by the angle whose cos/sin are `cos[p, j]`/`sin[p, j]`
    /// (tables `[n, hd/2]`) for the first `spec.rope_heads` heads.
    fn split_heads_rope(&self, spec: &RopeSpec, src: &Self::Buf, cos: &Self::Buf, sin: &Self::Buf, dst: &mut Self::Buf) -> Result<()>;

    /// `[batch·heads, n, hd]` → `[batch, n, heads·hd]`.
    #[allow(clippy::too_many_arguments)]
    fn merge_heads(&self, src: &Self::Buf, batch: usize, n: usize, heads: usize, hd: usize, dst: &mut Self::Buf) -> Result<()>;

    // ── convolution ────────────────────────────────────────────────────────────────────────
    /// 1-D convolution over the sequence axis of channels-last `[batch, n, c_in]` activations
    /// with a PyTorch weight `[c_out, c_in/groups, kernel]`: depthwise, grouped or dense, any
    /// stride, dilation and padding mode; see [`Conv1dSpec`].
    fn conv1d(&self, spec: &Conv1dSpec, x: &Self::Buf, weight: &Self::Buf, bias: Option<&Self::Buf>, y: &mut Self::Buf) -> Result<()>;

    /// Transposed 1-D convolution (`nn.ConvTranspose1d`) of channels-last `[batch, n, c_in]` with
    /// a PyTorch weight `[c_in, c_out/groups, kernel]` into `[batch, n_out, c_out]`; see
    /// [`ConvTranspose1dSpec`].
    fn conv_transpose1d(
        &self,
        spec: &ConvTranspose1dSpec,
        x: &Self::Buf,
        weight: &Self::Buf,
        bias: Option<&Self::Buf>,
        y: &mut Self::Buf,
    ) -> Result<()>;

    // ── recurrence ─────────────────────────────────────────────────────────────────────────
    /// The sequential part of one LSTM direction, exact for each item's own length; see
    /// [`LstmSpec`]. `state0` is the initial `(h, c)`, each `[batch, hidden]` (zeros if `None`).
    fn lstm(
        &self,
        spec: &LstmSpec,
        lengths: &[usize],
        gates_x: &Self::Buf,
        w_hh: &Self::Buf,
        state0: Option<(&Self::Buf, &Self::Buf)>,
        out: &mut Self::Buf,
    ) -> Result<()>;

    // ── sequence normalisation and resampling ──────────────────────────────────────────────
    /// Instance norm over the rows of every channel of every item (see [`InstanceNormSpec`]),
    /// then the optional affine `weight·y + bias` (`[c]` each), then the optional style
    /// modulation `(1 + γ)·y + β` with `γ = style[b·2c..b·2c + c]`, `β = style[b·2c + c..(b+1)·2c]`
    /// per item — StyleTTS2's AdaIN, whose `fc(s)` writes γ then β.
    fn instance_norm(
        &self,
        spec: &InstanceNormSpec,
        x: &Self::Buf,
        affine: Option<(&Self::Buf, &Self::Buf)>,
        style: Option<&Self::Buf>,
        out: &mut Self::Buf,
    ) -> Result<()>;

    /// Snake, in place on `[rows, c]`: `x + sin²(α·x)/α` with a per-channel `α` (`[c]`),
    /// computed as `x + (1/α)·sin(α·x)²` like the reference.
    fn snake(&self, x: &mut Self::Buf, rows: usize, c: usize, alpha: &Self::Buf) -> Result<()>;

    /// [`Backend::instance_norm`] then [`Backend::snake`] with `alpha` (`[c]`) on its output:
    /// AdaIN + Snake, the pair before every convolution of Kokoro's generator, with the same
    /// result as the two ops. A backend may fuse them into one pass over the output (the CPU
    /// backends do: each block of rows is snaked while it is in cache, which saves a read and a
    /// write of a buffer that at the generator's rate is ~9 MB); the default runs the two ops.
    fn instance_norm_snake(
        &self,
        spec: &InstanceNormSpec,
        x: &Self::Buf,
        affine: Option<(&Self::Buf, &Self::Buf)>,
        style: Option<&Self::Buf>,
        alpha: &Self::Buf,
        out: &mut Self::Buf,
    ) -> Result<()> {
        self.instance_norm(spec, x, affine, style, out)?;
        self.snake(out, spec.batch * spec.n, spec.c, alpha)
    }

    /// [`Backend::instance_norm_snake`] of `x` into `t`, then [`Backend::conv1d`] of `t` into
    /// `y`: AdaIN + Snake + convolution, the unit Kokoro's generator repeats. `norm` and `conv`
    /// must agree on the batch, the rows and the channels (`norm.c == conv.c_in`). `t` must hold
    /// `[batch, n, c]`; it is scratch, and what it holds afterwards is unspecified: a backend may
    /// never write it. The CPU backends don't where the convolution is one of their fused kinds
    /// (the f32 FFT and Winograd paths, the bf16 and int8 kernels): they normalise and snake
    /// (and in int8 quantise) each row as the convolution reads it, so the normalised rows never
    /// go through memory, with the same result as the two ops. The default runs the two ops
    /// through `t`.
    #[allow(clippy::too_many_arguments)]
    fn instance_norm_snake_conv1d(
        &self,
        norm: &InstanceNormSpec,
        x: &Self::Buf,
        affine: Option<(&Self::Buf, &Self::Buf)>,
        style: Option<&Self::Buf>,
        alpha: &Self::Buf,
        conv: &Conv1dSpec,
        weight: &Self::Buf,
        bias: Option<&Self::Buf>,
        t: &mut Self::Buf,
        y: &mut Self::Buf,
    ) -> Result<()> {
        check::norm_then_conv(norm, conv)?;
        self.instance_norm_snake(norm, x, affine, style, alpha, t)?;
        self.conv1d(conv, t, weight, bias, y)
    }

    /// As [`Backend::instance_norm_snake_conv1d`], but the convolution's output is added to `y`
    /// (`y += conv(snake(instance_norm(x)))`, the residual step of Kokoro's generator blocks)
    /// and `x` is consumed: what `x` and `t` hold afterwards is unspecified. Both must have room
    /// for the convolution's output (`batch·n_out·c_out` values, which a 'same' convolution
    /// from `c` to `c` channels has). So the residual step needs no buffer besides its input,
    /// its scratch and `y`. The default runs `instance_norm_snake` into `t`, `conv1d` into `x`
    /// and `axpy` into `y`; the CPU bf16 and int8 kernels normalise each row as the convolution
    /// reads it and add each block of outputs to `y` while it is in cache (writing neither the
    /// normalised rows nor the convolution's output), with the same result.
    #[allow(clippy::too_many_arguments)]
    fn instance_norm_snake_conv1d_add(
        &self,
        norm: &InstanceNormSpec,
        x: &mut Self::Buf,
        affine: Option<(&Self::Buf, &Self::Buf)>,
        style: Option<&Self::Buf>,
        alpha: &Self::Buf,
        conv: &Conv1dSpec,
        weight: &Self::Buf,
        bias: Option<&Self::Buf>,
        t: &mut Self::Buf,
        y: &mut Self::Buf,
    ) -> Result<()> {
        check::norm_then_conv(norm, conv)?;
        self.instance_norm_snake(norm, x, affine, style, alpha, t)?;
        self.conv1d(conv, t, weight, bias, x)?;
        self.axpy(1.0, x, y, conv.batch * conv.n_out() * conv.c_out)
    }

    /// Nearest-neighbour upsampling along the rows: `[batch, n, c]` → `[batch, n·factor, c]`,
    /// every row repeated `factor` times.
    #[allow(clippy::too_many_arguments)]
    fn upsample_nearest(&self, x: &Self::Buf, batch: usize, n: usize, c: usize, factor: usize, out: &mut Self::Buf) -> Result<()>;

    /// Linear interpolation along the rows; see [`InterpolateSpec`].
    fn interpolate_linear(&self, spec: &InterpolateSpec, x: &Self::Buf, out: &mut Self::Buf) -> Result<()>;

    /// Zero, reflection or replication padding along the rows; see [`Pad1dSpec`].
    fn pad1d(&self, spec: &Pad1dSpec, x: &Self::Buf, out: &mut Self::Buf) -> Result<()>;

    /// Running sum along the rows of `[batch, n, c]`, accumulated in f64 and rounded once per
    /// output (PyTorch's CPU `cumsum` of f32 accumulates in double: an f32 running sum drifts
    /// away from it over thousands of rows).
    fn cumsum(&self, x: &Self::Buf, batch: usize, n: usize, c: usize, out: &mut Self::Buf) -> Result<()>;

    // ── spectra ────────────────────────────────────────────────────────────────────────────
    /// `torch.stft` of `[batch, samples]` (see [`StftSpec`]) as magnitude and phase
    /// `[batch, frames, bins]`. The DC and Nyquist bins have an imaginary part of exactly +0,
    /// so their phase is exactly 0 or +π, as in PyTorch.
    fn stft(&self, spec: &StftSpec, signal: &Self::Buf, mag: &mut Self::Buf, phase: &mut Self::Buf) -> Result<()>;

    /// `torch.istft(mag·e^{i·phase})` into `[batch, samples]`: the one-sided inverse DFT (interior
    /// bins counted twice, the imaginary parts of DC and Nyquist ignored), windowed overlap-add,
    /// divided by the summed squared window, `center` trimmed.
    fn istft(&self, spec: &StftSpec, mag: &Self::Buf, phase: &Self::Buf, signal: &mut Self::Buf) -> Result<()>;

    // ── elementwise ────────────────────────────────────────────────────────────────────────
    /// In place over `x[..len]`.
    fn activation(&self, act: Activation, x: &mut Self::Buf, len: usize) -> Result<()>;

    /// Classifier-free guidance on a `[2, half]` prediction (conditional row first):
    /// `out = c + (c − u)·strength`.
    fn cfg_combine(&self, pred: &Self::Buf, half: usize, strength: f32, out: &mut Self::Buf) -> Result<()>;

    /// `y[..len] += a·x[..len]`.
    fn axpy(&self, a: f32, x: &Self::Buf, y: &mut Self::Buf, len: usize) -> Result<()>;

    /// Zero the rows of `[rows, d]` whose `keep[r]` is 0, in place.
    fn mask_rows(&self, x: &mut Self::Buf, rows: usize, d: usize, keep: &Self::Buf) -> Result<()>;

    /// Concatenate `[rows, w_i]` parts along the feature axis into `[rows, Σ w_i]`.
    fn concat_features(&self, parts: &[(&Self::Buf, usize)], rows: usize, out: &mut Self::Buf) -> Result<()>;

    /// The inverse of [`Backend::concat_features`]: `[rows, Σ w_i]` split along the feature axis
    /// into `[rows, w_i]` parts. So one wider op can stand for several narrow ones that read
    /// the same input (Kokoro's `conv_post`, whose log-magnitude and phase halves feed the
    /// inverse STFT as separate activations: 22 output channels cost a CPU convolution about
    /// what 11 do).
    fn split_features(&self, x: &Self::Buf, rows: usize, parts: &mut [(&mut Self::Buf, usize)]) -> Result<()>;

    /// Gather rows of an embedding table `[vocab, dim]` by id into `[ids.len(), dim]`.
    fn embedding(&self, table: &Self::Buf, dim: usize, ids: &[u32], out: &mut Self::Buf) -> Result<()>;

    /// The Vocos head's polar → cartesian step on `[frames, 2·bins]` (log-magnitudes first, then
    /// phases): `mag = min(exp(h), mag_max)`, `re = mag·cos(p)`, `im = mag·sin(p)`, each `[frames, bins]`.
    fn polar_spectrum(&self, h: &Self::Buf, frames: usize, bins: usize, mag_max: f32, re: &mut Self::Buf, im: &mut Self::Buf)
        -> Result<()>;
}

/// The README's example, compiled and run as a doctest so it cannot rot.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

#[cfg(test)]
mod tests {
    use super::{CpuFeatures, DeviceChoice};

    #[test]
    fn device_choices_parse_or_explain() {
        assert_eq!(DeviceChoice::parse("cpu", "f32").unwrap(), DeviceChoice::Cpu);
        assert_eq!(DeviceChoice::parse(" CUDA", "BF16").unwrap(), DeviceChoice::Cuda { ordinal: 0, bf16: true });
        assert_eq!(DeviceChoice::parse("gpu", "fp32").unwrap(), DeviceChoice::Cuda { ordinal: 0, bf16: false });
        assert_eq!(DeviceChoice::parse("cuda:3", "f32").unwrap(), DeviceChoice::Cuda { ordinal: 3, bf16: false });
        for (device, precision, needle) in [
            ("cuda:x", "f32", "device number"),
            ("cuda:-1", "f32", "device number"),
            ("tpu", "f32", "use cpu, cuda"),
            ("cpu", "f16", "use f32, bf16"),
        ] {
            let err = DeviceChoice::parse(device, precision).unwrap_err().to_string();
            assert!(err.contains(needle), "{device}/{precision}: {err}");
        }
    }

    #[test]
    fn cpu_bf16_runs_on_every_cpu() {
        // Without AVX-512 BF16 the backend widens its bf16 weights to f32 per op, so nothing
        // refuses bf16 on the CPU, whatever it lacks.
        let lacks = CpuFeatures { int8_missing: || Some("avx512_vnni") };
        assert_eq!(DeviceChoice::parse_for_cpu("cpu", "bfloat16", lacks).unwrap(), DeviceChoice::CpuBf16);
        assert_eq!(DeviceChoice::parse("cpu", "bf16").unwrap(), DeviceChoice::CpuBf16);
        let kit = super::CpuBf16Backend::with_threads(1).expect("the bf16 backend starts on every CPU");
        assert!(!kit.bf16_dot_products() || super::cpu_bf16_missing_feature().is_none(), "dot products need AVX-512 BF16");
        println!("this CPU: bf16 dot products {}", kit.bf16_dot_products());
    }

    #[test]
    fn cpu_int8_follows_the_cpu_features_and_is_cpu_only() {
        let has = CpuFeatures { int8_missing: || None };
        let no_vnni = CpuFeatures { int8_missing: || Some("avx512_vnni") };
        assert_eq!(DeviceChoice::parse_for_cpu("cpu", " INT8", has).unwrap(), DeviceChoice::CpuInt8);
        // bf16 alone is still accepted where only VNNI is missing.
        assert_eq!(DeviceChoice::parse_for_cpu("cpu", "bf16", no_vnni).unwrap(), DeviceChoice::CpuBf16);
        let err = DeviceChoice::parse_for_cpu("cpu", "int8", no_vnni).unwrap_err().to_string();
        assert!(err.contains("avx512_vnni") && err.contains("lacks"), "{err}");
        let err = DeviceChoice::parse_for_cpu("cuda:1", "int8", has).unwrap_err().to_string();
        assert!(err.contains("CPU only"), "{err}");
        let real = DeviceChoice::parse("cpu", "int8");
        assert_eq!(real.is_ok(), super::cpu_int8_missing_feature().is_none(), "{real:?}");
        println!("this CPU: cpu/int8 {}", if real.is_ok() { "accepted" } else { "refused" });
    }
}
