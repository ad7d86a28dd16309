//! The CUDA side of the sequence ops (transposed and strided/dilated/padded convolutions, the
//! LSTM recurrence, instance norm, Snake, resampling, padding, cumsum, STFT/iSTFT and the
//! parameterised activations). Operands arrive validated by the trait methods in `mod.rs`.
//!
//! Not yet implemented on CUDA: each op refuses with a device error naming itself, so a model
//! that needs one fails at its first call with a clear message rather than computing garbage.

use super::{CudaBackend, CudaBuf};
use crate::spec::{Conv1dSpec, ConvTranspose1dSpec, InstanceNormSpec, InterpolateSpec, LstmSpec, Pad1dSpec, StftSpec};
use crate::{Activation, KitError, Result};

fn not_yet(op: &str) -> KitError {
    KitError::Device(format!("{op} is not implemented on the CUDA backend yet"))
}

pub(super) fn activation(_kit: &CudaBackend, act: Activation, _x: &mut CudaBuf, _len: usize) -> Result<()> {
    Err(not_yet(&format!("activation {act:?}")))
}

pub(super) fn conv1d_general(
    _kit: &CudaBackend,
    _spec: &Conv1dSpec,
    _x: &CudaBuf,
    _w: &CudaBuf,
    _bias: Option<&CudaBuf>,
    _y: &mut CudaBuf,
) -> Result<()> {
    Err(not_yet("conv1d with stride, dilation or non-zero padding"))
}

pub(super) fn conv_transpose1d(
    _kit: &CudaBackend,
    _spec: &ConvTranspose1dSpec,
    _x: &CudaBuf,
    _w: &CudaBuf,
    _bias: Option<&CudaBuf>,
    _y: &mut CudaBuf,
) -> Result<()> {
    Err(not_yet("conv_transpose1d"))
}

pub(super) fn lstm(
    _kit: &CudaBackend,
    _spec: &LstmSpec,
    _lengths: &[usize],
    _gates_x: &CudaBuf,
    _w_hh: &CudaBuf,
    _state0: Option<(&CudaBuf, &CudaBuf)>,
    _out: &mut CudaBuf,
) -> Result<()> {
    Err(not_yet("lstm"))
}

pub(super) fn instance_norm(
    _kit: &CudaBackend,
    _spec: &InstanceNormSpec,
    _x: &CudaBuf,
    _affine: Option<(&CudaBuf, &CudaBuf)>,
    _style: Option<&CudaBuf>,
    _out: &mut CudaBuf,
) -> Result<()> {
    Err(not_yet("instance_norm"))
}

pub(super) fn snake(_kit: &CudaBackend, _x: &mut CudaBuf, _total: usize, _c: usize, _alpha: &CudaBuf) -> Result<()> {
    Err(not_yet("snake"))
}

pub(super) fn upsample_nearest(
    _kit: &CudaBackend,
    _x: &CudaBuf,
    _total: usize,
    _n: usize,
    _c: usize,
    _factor: usize,
    _out: &mut CudaBuf,
) -> Result<()> {
    Err(not_yet("upsample_nearest"))
}

pub(super) fn interpolate_linear(_kit: &CudaBackend, _spec: &InterpolateSpec, _x: &CudaBuf, _out: &mut CudaBuf) -> Result<()> {
    Err(not_yet("interpolate_linear"))
}

pub(super) fn pad1d(_kit: &CudaBackend, _spec: &Pad1dSpec, _x: &CudaBuf, _out: &mut CudaBuf) -> Result<()> {
    Err(not_yet("pad1d"))
}

pub(super) fn cumsum(_kit: &CudaBackend, _x: &CudaBuf, _batch: usize, _n: usize, _c: usize, _out: &mut CudaBuf) -> Result<()> {
    Err(not_yet("cumsum"))
}

pub(super) fn stft(_kit: &CudaBackend, _spec: &StftSpec, _signal: &CudaBuf, _mag: &mut CudaBuf, _phase: &mut CudaBuf) -> Result<()> {
    Err(not_yet("stft"))
}

pub(super) fn istft(_kit: &CudaBackend, _spec: &StftSpec, _mag: &CudaBuf, _phase: &CudaBuf, _signal: &mut CudaBuf) -> Result<()> {
    Err(not_yet("istft"))
}
