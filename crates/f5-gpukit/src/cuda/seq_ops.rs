//! The CUDA side of the sequence ops (transposed and strided/dilated/padded convolutions, the
//! LSTM recurrence, instance norm, Snake, resampling, padding, cumsum, STFT/iSTFT and the
//! parameterised activations), all in `kernels/seq.cu`. Operands arrive validated by the trait
//! methods in `mod.rs`; each function here only turns the shape into a launch.

use cudarc::driver::LaunchConfig;

use super::kernels::DevPtr;
use super::{each, u, CudaBackend, CudaBuf, MAX_BLOCKS};
use crate::spec::{product, Conv1dSpec, ConvTranspose1dSpec, InstanceNormSpec, InterpolateSpec, LstmSpec, Pad1dSpec, StftSpec};
use crate::{shape_err, Activation, PadMode, Result};

/// Threads of the LSTM block: 16 warps share the `4·hidden` gate rows of a step.
const LSTM_THREADS: u32 = 512;
/// Dynamic shared memory a block may use without opting in (h, c and the gates live there).
const DEFAULT_SMEM_BYTES: usize = 48 << 10;

/// `PadMode` as the kernels' `int` (see `pad_source` in kernels/seq.cu).
fn pad_mode(mode: PadMode) -> i32 {
    match mode {
        PadMode::Zeros => 0,
        PadMode::Reflect => 1,
        PadMode::Replicate => 2,
    }
}

/// `(pointer, has_bias)` kernel arguments for an optional bias.
fn optional(kit: &CudaBackend, buf: Option<&CudaBuf>) -> (DevPtr, i32) {
    match buf {
        Some(b) => (kit.at(b, 0), 1),
        None => (DevPtr::NULL, 0),
    }
}

pub(super) fn activation(kit: &CudaBackend, act: Activation, x: &mut CudaBuf, len: usize) -> Result<()> {
    let (px, n) = (kit.at(x, 0), u(len));
    match act {
        Activation::LeakyRelu(slope) => kit.k().leaky_relu(each(len), px, n, slope),
        Activation::Sigmoid => kit.k().sigmoid_act(each(len), px, n),
        Activation::Tanh => kit.k().tanh_act(each(len), px, n),
        Activation::Sin => kit.k().sin_act(each(len), px, n),
        Activation::Exp => kit.k().exp_act(each(len), px, n),
        Activation::Scale(a) => kit.k().scale_act(each(len), px, n, a),
        // The four fixed activations have their own kernels in elementwise.cu (mod.rs).
        Activation::GeluErf | Activation::GeluTanh | Activation::Silu | Activation::Mish => {
            Err(crate::KitError::Device(format!("activation {act:?} must go through elementwise.cu")))
        }
    }
}

/// Strided, dilated or reflect/replicate-padded convolutions (the stride-1 zero-padded ones keep
/// the tiled kernels of `conv.cu`).
pub(super) fn conv1d_general(
    kit: &CudaBackend,
    spec: &Conv1dSpec,
    x: &CudaBuf,
    w: &CudaBuf,
    bias: Option<&CudaBuf>,
    y: &mut CudaBuf,
) -> Result<()> {
    let Conv1dSpec { batch, n, c_in, c_out, kernel, pad, groups, stride, dilation, pad_mode: mode } = *spec;
    let n_out = spec.n_out();
    let total = product("conv1d", &[batch, n_out, c_out])?;
    let (pb, has_bias) = optional(kit, bias);
    kit.k().conv1d_general(
        each(total),
        kit.at(x, 0),
        kit.at(w, 0),
        pb,
        kit.at(y, 0),
        u(batch),
        u(n),
        u(c_in),
        u(c_out),
        u(kernel),
        u(pad),
        u(groups),
        u(n_out),
        u(stride),
        u(dilation),
        pad_mode(mode),
        has_bias,
    )
}

/// Dense, grouped and depthwise transposed convolutions: one gather per output value.
pub(super) fn conv_transpose1d(
    kit: &CudaBackend,
    spec: &ConvTranspose1dSpec,
    x: &CudaBuf,
    w: &CudaBuf,
    bias: Option<&CudaBuf>,
    y: &mut CudaBuf,
) -> Result<()> {
    let ConvTranspose1dSpec { batch, n, c_in, c_out, kernel, stride, pad, groups, .. } = *spec;
    let n_out = spec.n_out();
    if n == 0 {
        return Ok(()); // n_out is 0 too: nothing to write
    }
    let total = product("conv_transpose1d", &[batch, n_out, c_out])?;
    let (pb, has_bias) = optional(kit, bias);
    kit.k().conv_transpose1d(
        each(total),
        kit.at(x, 0),
        kit.at(w, 0),
        pb,
        kit.at(y, 0),
        u(batch),
        u(n),
        u(c_in),
        u(c_out),
        u(kernel),
        u(stride),
        u(pad),
        u(groups),
        u(n_out),
        has_bias,
    )
}

/// The LSTM recurrence: one block per item looping over its own steps.
///
/// `lengths` live on the host, so they are copied to the device for every call (like the
/// embedding's ids). That copy reads host memory when the op is queued: inside a captured graph
/// it would be recorded with the lengths of the capture, so [`CudaBackend::capture`] refuses
/// graphs that contain this op.
pub(super) fn lstm(
    kit: &CudaBackend,
    spec: &LstmSpec,
    lengths: &[usize],
    gates_x: &CudaBuf,
    w_hh: &CudaBuf,
    state0: Option<(&CudaBuf, &CudaBuf)>,
    out: &mut CudaBuf,
) -> Result<()> {
    let op = "lstm";
    let LstmSpec { batch, n, hidden, reverse, out: rows } = *spec;
    if batch == 0 || n == 0 || hidden == 0 {
        return Ok(());
    }
    let smem = product(op, &[6, hidden, 4])?;
    if smem > DEFAULT_SMEM_BYTES {
        return Err(shape_err(
            op,
            format!("hidden {hidden} needs {smem} bytes of shared memory; the CUDA kernel has {DEFAULT_SMEM_BYTES}"),
        ));
    }
    kit.refuse_in_capture(op, "copies the host-side lengths to the device")?;
    let host: Vec<u64> = lengths.iter().map(|&l| l as u64).collect();
    let mut dev_lengths = kit.device_alloc::<u64>(host.len(), "LSTM lengths")?;
    kit.stream.memcpy_htod(&host, &mut dev_lengths).map_err(super::dev_err("LSTM lengths upload"))?;
    let (h0, c0, has_state) = match state0 {
        Some((h, c)) => (kit.at(h, 0), kit.at(c, 0), 1),
        None => (DevPtr::NULL, DevPtr::NULL, 0),
    };
    let cfg =
        LaunchConfig { grid_dim: (batch.min(MAX_BLOCKS) as u32, 1, 1), block_dim: (LSTM_THREADS, 1, 1), shared_mem_bytes: smem as u32 };
    kit.k().lstm_seq(
        cfg,
        kit.at(gates_x, 0),
        kit.at(w_hh, 0),
        h0,
        c0,
        DevPtr(kit.addr(&dev_lengths, 0, 8)),
        kit.at(out, 0),
        u(batch),
        u(n),
        u(hidden),
        i32::from(reverse),
        u(rows.offset),
        u(rows.row_stride),
        has_state,
    )
    // `dev_lengths` is freed stream-ordered, after the kernel has read it.
}

/// Per-channel statistics in f64 (two passes), like the CPU twin.
pub(super) fn instance_norm(
    kit: &CudaBackend,
    spec: &InstanceNormSpec,
    x: &CudaBuf,
    affine: Option<(&CudaBuf, &CudaBuf)>,
    style: Option<&CudaBuf>,
    out: &mut CudaBuf,
) -> Result<()> {
    let InstanceNormSpec { batch, n, c, eps } = *spec;
    if batch == 0 || n == 0 || c == 0 {
        return Ok(());
    }
    let (pw, pbias, has_affine) = match affine {
        Some((w, b)) => (kit.at(w, 0), kit.at(b, 0), 1),
        None => (DevPtr::NULL, DevPtr::NULL, 0),
    };
    let (ps, has_style) = optional(kit, style);
    let cfg = LaunchConfig {
        grid_dim: (super::grid_dim("instance_norm", "channel tiles", c.div_ceil(32), i32::MAX as usize)?, batch.min(65_535) as u32, 1),
        block_dim: (32, 8, 1),
        shared_mem_bytes: 0,
    };
    kit.k().instance_norm(cfg, kit.at(x, 0), kit.at(out, 0), u(batch), u(n), u(c), eps, pw, pbias, ps, has_affine, has_style)
}

pub(super) fn snake(kit: &CudaBackend, x: &mut CudaBuf, total: usize, c: usize, alpha: &CudaBuf) -> Result<()> {
    kit.k().snake(each(total), kit.at(x, 0), kit.at(alpha, 0), u(total), u(c))
}

pub(super) fn upsample_nearest(
    kit: &CudaBackend,
    x: &CudaBuf,
    total: usize,
    n: usize,
    c: usize,
    factor: usize,
    out: &mut CudaBuf,
) -> Result<()> {
    kit.k().upsample_nearest(each(total), kit.at(x, 0), kit.at(out, 0), u(total), u(n), u(c), u(factor))
}

pub(super) fn interpolate_linear(kit: &CudaBackend, spec: &InterpolateSpec, x: &CudaBuf, out: &mut CudaBuf) -> Result<()> {
    let InterpolateSpec { batch, n_in, n_out, c, ratio } = *spec;
    let total = product("interpolate_linear", &[batch, n_out, c])?;
    kit.k().interpolate_linear(each(total), kit.at(x, 0), kit.at(out, 0), u(batch), u(n_in), u(n_out), u(c), ratio)
}

pub(super) fn pad1d(kit: &CudaBackend, spec: &Pad1dSpec, x: &CudaBuf, out: &mut CudaBuf) -> Result<()> {
    let Pad1dSpec { batch, n, c, left, mode, .. } = *spec;
    let n_out = spec.n_out();
    let total = product("pad1d", &[batch, n_out, c])?;
    kit.k().pad1d(each(total), kit.at(x, 0), kit.at(out, 0), u(batch), u(n), u(c), u(left), u(n_out), pad_mode(mode))
}

/// One thread per (item, channel) column, accumulating in f64.
pub(super) fn cumsum(kit: &CudaBackend, x: &CudaBuf, batch: usize, n: usize, c: usize, out: &mut CudaBuf) -> Result<()> {
    if n == 0 {
        return Ok(());
    }
    let columns = product("cumsum", &[batch, c])?;
    kit.k().cumsum_f64(each(columns), kit.at(x, 0), kit.at(out, 0), u(batch), u(n), u(c))
}

pub(super) fn stft(kit: &CudaBackend, spec: &StftSpec, signal: &CudaBuf, mag: &mut CudaBuf, phase: &mut CudaBuf) -> Result<()> {
    let StftSpec { batch, frames, n_fft, hop } = *spec;
    let total = product("stft", &[batch, frames, spec.bins()])?;
    kit.k().stft_direct(each(total), kit.at(signal, 0), kit.at(mag, 0), kit.at(phase, 0), u(batch), u(frames), u(n_fft), u(hop))
}

pub(super) fn istft(kit: &CudaBackend, spec: &StftSpec, mag: &CudaBuf, phase: &CudaBuf, signal: &mut CudaBuf) -> Result<()> {
    let StftSpec { batch, frames, n_fft, hop } = *spec;
    let total = product("istft", &[batch, spec.samples()])?;
    kit.k().istft_direct(each(total), kit.at(mag, 0), kit.at(phase, 0), kit.at(signal, 0), u(batch), u(frames), u(n_fft), u(hop))
}

// lstm_seq splits its block into whole warps.
const _: () = assert!(LSTM_THREADS.is_multiple_of(32), "the LSTM block must be whole warps");
