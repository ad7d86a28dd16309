//! The operand checks of every op whose shape is a few plain numbers, in one place: both
//! backends call these before touching memory, so they refuse the same bad shapes with the same
//! words. Ops with a shape struct validate through it (`crate::spec`). Every product is checked.
//! Each function returns the element count the op works on, so a backend need not recompute it.

use crate::spec::{operand, product};
use crate::{shape_err, Result};

pub(crate) fn layer_norm(rows: usize, d: usize, x: usize, out: usize, affine: Option<(usize, usize)>) -> Result<usize> {
    let op = "layer_norm";
    let total = product(op, &[rows, d])?;
    operand(op, "x", x, total)?;
    operand(op, "out", out, total)?;
    if let Some((w, b)) = affine {
        operand(op, "weight", w, d)?;
        operand(op, "bias", b, d)?;
    }
    Ok(total)
}

pub(crate) fn adaln_modulate(
    rows: usize,
    d: usize,
    x: usize,
    out: usize,
    modulation: usize,
    shift_off: usize,
    scale_off: usize,
) -> Result<usize> {
    let op = "adaln_modulate";
    let total = product(op, &[rows, d])?;
    operand(op, "x", x, total)?;
    operand(op, "out", out, total)?;
    operand(op, "modulation (shift)", modulation, end(op, shift_off, d)?)?;
    operand(op, "modulation (scale)", modulation, end(op, scale_off, d)?)?;
    Ok(total)
}

pub(crate) fn gated_add(rows: usize, d: usize, x: usize, y: usize, gates: usize, gate_off: usize) -> Result<usize> {
    let op = "gated_add";
    let total = product(op, &[rows, d])?;
    operand(op, "x", x, total)?;
    operand(op, "y", y, total)?;
    operand(op, "gates", gates, end(op, gate_off, d)?)?;
    Ok(total)
}

pub(crate) fn grn(batch: usize, n: usize, d: usize, x: usize, gamma: usize, beta: usize) -> Result<usize> {
    let op = "grn";
    let total = product(op, &[batch, n, d])?;
    operand(op, "x", x, total)?;
    operand(op, "gamma", gamma, d)?;
    operand(op, "beta", beta, d)?;
    Ok(total)
}

pub(crate) fn merge_heads(batch: usize, n: usize, heads: usize, hd: usize, src: usize, dst: usize) -> Result<usize> {
    let op = "merge_heads";
    let total = product(op, &[batch, n, heads, hd])?;
    operand(op, "src", src, total)?;
    operand(op, "dst", dst, total)?;
    Ok(total)
}

pub(crate) fn elementwise(op: &'static str, len: usize, x: usize) -> Result<usize> {
    operand(op, "x", x, len)?;
    Ok(len)
}

pub(crate) fn cfg_combine(half: usize, pred: usize, out: usize) -> Result<usize> {
    let op = "cfg_combine";
    operand(op, "pred", pred, product(op, &[half, 2])?)?;
    operand(op, "out", out, half)?;
    Ok(half)
}

pub(crate) fn axpy(len: usize, x: usize, y: usize) -> Result<usize> {
    operand("axpy", "x", x, len)?;
    operand("axpy", "y", y, len)?;
    Ok(len)
}

pub(crate) fn mask_rows(rows: usize, d: usize, x: usize, keep: usize) -> Result<usize> {
    let op = "mask_rows";
    let total = product(op, &[rows, d])?;
    operand(op, "x", x, total)?;
    operand(op, "keep", keep, rows)?;
    Ok(total)
}

/// Returns the total width `Σ w_i`.
pub(crate) fn concat_features(parts: &[(usize, usize)], rows: usize, out: usize) -> Result<usize> {
    feature_parts("concat_features", "out", parts, rows, out)
}

/// Returns the total width `Σ w_i`.
pub(crate) fn split_features(x: usize, rows: usize, parts: &[(usize, usize)]) -> Result<usize> {
    feature_parts("split_features", "x", parts, rows, x)
}

/// `[rows, w_i]` parts (their lengths and widths) of a `[rows, Σ w_i]` buffer named `whole`.
fn feature_parts(op: &'static str, whole: &str, parts: &[(usize, usize)], rows: usize, len: usize) -> Result<usize> {
    let width = parts.iter().try_fold(0usize, |acc, p| acc.checked_add(p.1)).ok_or_else(|| shape_err(op, "total width overflows"))?;
    operand(op, whole, len, product(op, &[rows, width])?)?;
    for (i, &(have, w)) in parts.iter().enumerate() {
        operand(op, &format!("part {i}"), have, product(op, &[rows, w])?)?;
    }
    Ok(width)
}

/// Checks the output size and every id against the table; returns the table's row count.
pub(crate) fn embedding(table: usize, dim: usize, ids: &[u32], out: usize) -> Result<usize> {
    let op = "embedding";
    operand(op, "out", out, product(op, &[ids.len(), dim])?)?;
    let vocab = table.checked_div(dim).unwrap_or(0);
    if let Some((r, &id)) = ids.iter().enumerate().find(|(_, &id)| id as usize >= vocab) {
        return Err(shape_err(op, format!("id {id} at position {r} is outside the table of {vocab} rows")));
    }
    Ok(vocab)
}

pub(crate) fn polar_spectrum(frames: usize, bins: usize, h: usize, re: usize, im: usize) -> Result<usize> {
    let op = "polar_spectrum";
    let half = product(op, &[frames, bins])?;
    operand(op, "h", h, product(op, &[half, 2])?)?;
    operand(op, "re", re, half)?;
    operand(op, "im", im, half)?;
    Ok(half)
}

pub(crate) fn snake(rows: usize, c: usize, x: usize, alpha: usize) -> Result<usize> {
    let op = "snake";
    let total = product(op, &[rows, c])?;
    operand(op, "x", x, total)?;
    operand(op, "alpha", alpha, c)?;
    Ok(total)
}

/// `instance_norm_snake_conv1d`: the convolution reads the norm's rows (same batch, rows and
/// channels).
pub(crate) fn norm_then_conv(norm: &crate::spec::InstanceNormSpec, conv: &crate::spec::Conv1dSpec) -> Result<()> {
    if (conv.batch, conv.n, conv.c_in) == (norm.batch, norm.n, norm.c) {
        return Ok(());
    }
    Err(shape_err(
        "instance_norm_snake_conv1d",
        format!(
            "the norm is over {}×{}×{} and the convolution reads {}×{}×{} (batch × rows × channels)",
            norm.batch, norm.n, norm.c, conv.batch, conv.n, conv.c_in
        ),
    ))
}

/// `instance_norm_snake_conv1d_add`: [`norm_then_conv`], and `x` (which the unfused form
/// convolves into) has room for the convolution's output. Returns the output element count.
pub(crate) fn norm_then_conv_add(norm: &crate::spec::InstanceNormSpec, conv: &crate::spec::Conv1dSpec, x: usize) -> Result<usize> {
    norm_then_conv(norm, conv)?;
    let out = conv.batch * conv.n_out() * conv.c_out;
    if x < out {
        return Err(shape_err("instance_norm_snake_conv1d_add", format!("x has {x} values, less than the convolution's {out} outputs")));
    }
    Ok(out)
}

/// What a fused instance norm + Snake + convolution checks before it runs, so that it fails
/// where the separate ops would: the norm's operands (its output `scratch`, which the fused form
/// may never write), Snake's α, and the convolution from `x` (filters of `weight` values) into
/// `out` values.
#[allow(clippy::too_many_arguments)]
pub(crate) fn fused_norm_snake_conv(
    norm: &crate::spec::InstanceNormSpec,
    conv: &crate::spec::Conv1dSpec,
    x: &[f32],
    affine: Option<(&[f32], &[f32])>,
    style: Option<&[f32]>,
    alpha: &[f32],
    scratch: usize,
    weight: usize,
    bias: Option<&[f32]>,
    out: usize,
) -> Result<()> {
    norm.validate(x.len(), affine.map(|(w, b)| (w.len(), b.len())), style.map(|s| s.len()), scratch)?;
    snake(norm.batch * norm.n, norm.c, scratch, alpha.len())?;
    conv.validate(x.len(), weight, bias.map(|b| b.len()), out)
}

/// Returns the output element count.
pub(crate) fn upsample_nearest(batch: usize, n: usize, c: usize, factor: usize, x: usize, out: usize) -> Result<usize> {
    let op = "upsample_nearest";
    if factor == 0 {
        return Err(shape_err(op, "factor must be ≥ 1"));
    }
    operand(op, "x", x, product(op, &[batch, n, c])?)?;
    let total = product(op, &[batch, n, factor, c])?;
    operand(op, "out", out, total)?;
    Ok(total)
}

pub(crate) fn cumsum(batch: usize, n: usize, c: usize, x: usize, out: usize) -> Result<usize> {
    let op = "cumsum";
    let total = product(op, &[batch, n, c])?;
    operand(op, "x", x, total)?;
    operand(op, "out", out, total)?;
    Ok(total)
}

/// `offset + len`, checked.
fn end(op: &'static str, offset: usize, len: usize) -> Result<usize> {
    offset.checked_add(len).ok_or_else(|| shape_err(op, format!("offset {offset} + {len} overflows")))
}
