//! Dense transposed 1-D convolution with a bf16 filter bank, as one ordinary bf16 convolution.
//!
//! Before the crop, output row `q = t·s + r` (stride `s`, `0 ≤ r < s`) receives input row
//! `t − j` through tap `r + j·s`, for every `j` whose tap exists. So the `s` output rows of group
//! `t` are, together, one output row of an ordinary convolution over consecutive input rows:
//! `J = ⌈K/s⌉` taps (padding `J − 1`), `s·c_out` output channels, channel `r·c_out + co` holding
//! phase `r`'s filters (zero where `r + j·s ≥ K`). Channels-last, that row *is* the group's `s`
//! rows of `c_out` values, in order: no shuffle. It runs on the bf16 convolution kernel
//! ([`super::conv`]: the AMX tiles where the CPU has them), whose groups lie inside the cropped
//! output are written there in place, and the few groups the crop cuts (at either end) go
//! through a small buffer.
//!
//! The filters `[c_in, c_out, K]` are reordered once per call into that `[s·c_out, c_in, J]`
//! bank (still bf16, no widening). The GEMM + col2im path this replaces multiplied every input
//! row by every tap into a contribution matrix twice the output's size, then added those up row
//! by row; on a Xeon with AMX it took Kokoro's upsamplers at ~200 GFLOP/s, against ~1,300–1,500
//! for this shape on the tiles (`conv_time`, 2 threads).
//!
//! Arithmetic: the inputs are rounded to bf16 as the convolution converts them, the filters were
//! rounded once at upload, each output sums its products (exact in f32) over (tap, channel) in
//! f32 and then adds the bias. Output rows no tap reaches (`output_padding`, or a kernel shorter
//! than the stride) are the bias.
//!
//! Only dense transposed convolutions (`groups == 1`: Kokoro's generator upsamplers) take this
//! path; the backend runs grouped and depthwise ones in f32.

use rayon::prelude::*;

use super::conv;
use super::conv_bf16_amx::AmxBf16;
use super::gemm::Avx512Bf16;
use crate::cpu::conv::BlockOutput;
use crate::spec::{Conv1dSpec, ConvTranspose1dSpec};

/// `y = conv_transpose(x, w) + bias` for a dense (`groups == 1`) transposed convolution with
/// bf16 filters `w` (`[c_in, c_out, K]` bf16 bits), on the AMX tiles where `tiles` is given.
/// `spec` must have been validated against the operands.
pub(crate) fn conv_transpose1d_dense(
    cpu: Avx512Bf16,
    tiles: Option<AmxBf16>,
    spec: &ConvTranspose1dSpec,
    x: &[f32],
    w: &[u16],
    bias: Option<&[f32]>,
    y: &mut [f32],
) {
    debug_assert_eq!(spec.groups, 1, "conv_transpose1d_dense takes dense convolutions only");
    let ConvTranspose1dSpec { batch, n, c_in, c_out, kernel, stride, pad, .. } = *spec;
    let n_out = spec.n_out();
    if n_out == 0 || c_out == 0 {
        return;
    }
    let y = &mut y[..batch * n_out * c_out];
    let fill_bias = |rows: &mut [f32]| match bias {
        Some(bv) => rows.par_chunks_mut(c_out).for_each(|r| r.copy_from_slice(&bv[..c_out])),
        None => rows.fill(0.0),
    };
    if n == 0 || c_in == 0 || kernel == 0 || stride == 0 {
        fill_bias(y);
        return;
    }
    let taps = kernel.div_ceil(stride);
    let wide = stride * c_out;
    let grouped = Conv1dSpec::new(batch, n, c_in, wide, taps).pad(taps - 1);
    let groups = grouped.n_out();
    let filters = phase_filters(spec, w);
    let wide_bias: Option<Vec<f32>> = bias.map(|bv| bv[..c_out].repeat(stride));
    conv::with_packed_filters(cpu, tiles, &grouped, conv::Bf16Filters::Bits(&filters), wide_bias.as_deref(), |rows| {
        for b in 0..batch {
            let xb = &x[b * n * c_in..(b + 1) * n * c_in];
            let yb = &mut y[b * n_out * c_out..(b + 1) * n_out * c_out];
            // Groups whose `stride` rows all land inside the crop: `t·s ≥ pad` and
            // `t·s + s − pad ≤ n_out`. They are written in place.
            let first = pad.div_ceil(stride).min(groups);
            let last = ((n_out + pad) / stride).clamp(first, groups);
            if first < last {
                rows.run(xb, None, first, BlockOutput::default(), &mut yb[(first * stride - pad) * c_out..(last * stride - pad) * c_out]);
            }
            // The groups the crop cuts, through a buffer, keeping the rows inside it.
            for cut in [0..first, last..groups] {
                if cut.is_empty() {
                    continue;
                }
                let mut part = vec![0.0f32; cut.len() * wide];
                rows.run(xb, None, cut.start, BlockOutput::default(), &mut part);
                for (i, row) in part.chunks_exact(c_out).enumerate() {
                    if let Some(o) = (cut.start * stride + i).checked_sub(pad).filter(|&o| o < n_out) {
                        yb[o * c_out..(o + 1) * c_out].copy_from_slice(row);
                    }
                }
            }
            // Rows past every group (output padding): no tap reaches them.
            let covered = (groups * stride).saturating_sub(pad).min(n_out);
            fill_bias(&mut yb[covered * c_out..]);
        }
    });
}

/// The filters `[c_in, c_out, K]` as the grouped convolution's bank `[s·c_out, c_in, J]`:
/// output channel `r·c_out + co`, input channel `ci`, slot `m` (which reads input row
/// `t − (J − 1 − m)`) holds tap `r + (J − 1 − m)·s`, or zero where that tap does not exist.
///
/// Through a copy ordered by output channel (`[c_out, c_in, K]`), so that each bank row reads
/// one contiguous filter: read straight from `[c_in, c_out, K]`, every input channel of a bank
/// row was a fresh cache line. The reorder of Kokoro's first upsampler (2.6 M values) took
/// ~5 ms that way and ~4 ms this way, of the op's ~17 ms on the long input; keeping the bank
/// with the weight would save the rest.
fn phase_filters(spec: &ConvTranspose1dSpec, w: &[u16]) -> Vec<u16> {
    let ConvTranspose1dSpec { c_in, c_out, kernel, stride, .. } = *spec;
    let taps = kernel.div_ceil(stride);
    let per_out = c_in * kernel;
    // 16 output channels per task: each input channel's taps for them are one contiguous run.
    let mut by_out = vec![0u16; c_out * per_out];
    by_out.par_chunks_mut(16 * per_out).enumerate().for_each(|(blk, chunk)| {
        let (co0, width) = (16 * blk, chunk.len() / per_out);
        for ci in 0..c_in {
            let runs = &w[(ci * c_out + co0) * kernel..(ci * c_out + co0 + width) * kernel];
            for (j, run) in runs.chunks_exact(kernel).enumerate() {
                chunk[j * per_out + ci * kernel..j * per_out + (ci + 1) * kernel].copy_from_slice(run);
            }
        }
    });
    let mut bank = vec![0u16; stride * c_out * c_in * taps];
    bank.par_chunks_mut(c_in * taps).enumerate().for_each(|(channel, filter)| {
        let (r, co) = (channel / c_out, channel % c_out);
        let source = &by_out[co * per_out..(co + 1) * per_out];
        for (slots, taps_of) in filter.chunks_exact_mut(taps).zip(source.chunks_exact(kernel)) {
            for (m, slot) in slots.iter_mut().enumerate() {
                let k = r + (taps - 1 - m) * stride;
                *slot = if k < kernel { taps_of[k] } else { 0 };
            }
        }
    });
    bank
}
