//! Dense transposed 1-D convolution with a bf16 filter bank on the AVX-512 BF16 GEMM.
//!
//! The same GEMM + col2im as the f32 path (`cpu::conv`): per item, the input rows times the
//! filters give, for every input row, each tap's contribution to its output row; each output row
//! then adds up the contributions that land on it. Here the GEMM is [`gemm::gemm_fast`] with a
//! bf16 B operand: the inputs are rounded to bf16 while they are packed, the filters were
//! rounded once at upload, products are summed in f32 and the contributions stay f32.
//!
//! The filters `[c_in, c_out, K]` are reordered once per call to `[c_in, K·c_out]` in (tap,
//! channel) column order (still bf16, no widening), so one tap's outputs for one input row are a
//! contiguous run that the gather adds with the f32 SIMD `axpy`.
//!
//! The input rows go through the GEMM in chunks, to bound the contribution matrix; every output
//! row starts as the bias (or zero) and adds its taps in ascending input-row order (chunks in
//! order, rows within a chunk in order), the order of the f32 path.
//!
//! Only dense convolutions (`groups == 1`: Kokoro's generator upsamplers) take this path; the
//! backend runs grouped and depthwise ones in f32.

use rayon::prelude::*;

use super::gemm::{self, Avx512Bf16, Operand};
use crate::spec::{ConvTranspose1dSpec, GemmSpec, MatLayout};
use crate::Result;

/// Contribution values per GEMM chunk (16 MiB of f32): large enough that the GEMM has many
/// rows per call, small enough to stay far below the model's activations.
const CHUNK_VALUES: usize = 1 << 22;

/// `y = conv_transpose(x, w) + bias` for a dense (`groups == 1`) transposed convolution with bf16
/// filters `w` (`[c_in, c_out, K]` bf16 bits). `spec` must have been validated against the
/// operands. `packed_b` is the GEMM's scratch.
pub(crate) fn conv_transpose1d_dense(
    cpu: Avx512Bf16,
    spec: &ConvTranspose1dSpec,
    x: &[f32],
    w: &[u16],
    bias: Option<&[f32]>,
    y: &mut [f32],
    packed_b: &mut Vec<u32>,
) -> Result<()> {
    conv_transpose1d_chunked(cpu, spec, x, w, bias, y, packed_b, CHUNK_VALUES)
}

/// [`conv_transpose1d_dense`] with the chunk size given (at least one input row per chunk), so
/// that the tests can cross chunk boundaries with small shapes.
#[allow(clippy::too_many_arguments)]
pub(super) fn conv_transpose1d_chunked(
    cpu: Avx512Bf16,
    spec: &ConvTranspose1dSpec,
    x: &[f32],
    w: &[u16],
    bias: Option<&[f32]>,
    y: &mut [f32],
    packed_b: &mut Vec<u32>,
    chunk_values: usize,
) -> Result<()> {
    debug_assert_eq!(spec.groups, 1, "conv_transpose1d_dense takes dense convolutions only");
    let ConvTranspose1dSpec { batch, n, c_in, c_out, kernel, stride, pad, .. } = *spec;
    let n_out = spec.n_out();
    if n_out == 0 || c_out == 0 {
        return Ok(());
    }
    let y = &mut y[..batch * n_out * c_out];
    match bias {
        Some(bv) => y.par_chunks_mut(c_out).for_each(|r| r.copy_from_slice(&bv[..c_out])),
        None => y.fill(0.0),
    }
    if n == 0 || c_in == 0 {
        return Ok(());
    }
    let kc = kernel * c_out;
    let mut wp = vec![0u16; c_in * kc];
    wp.par_chunks_mut(kc).enumerate().for_each(|(ci, row)| {
        for co in 0..c_out {
            for k in 0..kernel {
                row[k * c_out + co] = w[(ci * c_out + co) * kernel + k];
            }
        }
    });
    let chunk = (chunk_values / kc).clamp(1, n);
    let mut cols = vec![0.0f32; chunk * kc];
    for b in 0..batch {
        let xb = &x[b * n * c_in..(b + 1) * n * c_in];
        let yb = &mut y[b * n_out * c_out..(b + 1) * n_out * c_out];
        for i0 in (0..n).step_by(chunk) {
            let m = chunk.min(n - i0);
            let gemm_spec = GemmSpec {
                m,
                n: kc,
                k: c_in,
                batch: 1,
                a: MatLayout::row_major(c_in).at(i0 * c_in),
                b: MatLayout::row_major(kc),
                c: MatLayout::row_major(kc),
                beta: 0.0,
            };
            gemm::gemm_fast(cpu, &gemm_spec, Operand::F32(xb), Operand::Bf16(&wp), None, &mut cols, packed_b)?;
            // Output rows this chunk reaches: i·stride + k − pad for i in i0..i0+m, k in 0..K.
            let o_lo = (i0 * stride).saturating_sub(pad);
            let o_hi = ((i0 + m - 1) * stride + kernel).saturating_sub(pad).min(n_out);
            if o_lo >= o_hi {
                continue;
            }
            let cols = &cols[..m * kc];
            yb[o_lo * c_out..o_hi * c_out].par_chunks_mut(c_out).enumerate().for_each(|(r, yrow)| {
                let p = o_lo + r + pad;
                // Input rows i with k = p − i·stride in 0..K, kept to this chunk, ascending.
                let lo = (p + 1).saturating_sub(kernel).div_ceil(stride).max(i0);
                let hi = (p / stride).min(i0 + m - 1);
                for i in lo..=hi {
                    let k = p - i * stride;
                    let at = (i - i0) * kc + k * c_out;
                    crate::cpu::simd::axpy(1.0, &cols[at..at + c_out], yrow);
                }
            });
        }
    }
    Ok(())
}
