//! Dense 1-D convolution, plain and transposed, in f32 on AVX-512 F or AVX2 + FMA, without an
//! im2col matrix.
//!
//! `y[t] = bias + Σ_k x[src(t, k)] · W_k`: a 12×32 register tile of `y` is summed over every
//! tap and input channel by FMAs whose A operand is broadcast straight from the input rows
//! (a per-block copy of the rows the block reads, followed by a zero row that padding taps read;
//! a table gives, per tile, tap and row, where the source row starts) and whose B operand is a
//! filter panel packed once per call. The im2col path writes every input row K times and the
//! GEMM then packs that matrix again; here each input row is copied about once, and each
//! output is written once.
//!
//! Each output sums its products in (tap, channel) order after zero and then adds the bias, so
//! the result does not depend on the blocking or the thread count.
//!
//! On AVX2 + FMA without AVX-512 the same packed panels and blocking run a second form of the
//! tile kernel: each 12×32 tile as four 6×16 sub-tiles (12 accumulators in the 16 AVX2
//! registers), every output summing the same products in the same order, so the bits are the
//! AVX-512 form's. There it takes only convolutions of at least 32 input and 16 output channels
//! ([`applies`]); the rest, and CPUs with neither, take the im2col + `gemm` crate path
//! (`super::grouped`).
//!
//! A transposed convolution is one such convolution per output phase ([`conv_transpose1d_dense`]):
//! the same tile kernel, its outputs every `stride`-th row.

use rayon::prelude::*;

use super::fourier::transpose_taps;
use super::tiled::SharedOut;
use super::{rows_read, tap_offsets};
use crate::cpu::bf16::gemm::from_bf16;
use crate::cpu::scratch::{with_scratch, with_scratch_usize, with_shared_scratch};
pub(super) use crate::cpu::simd::Isa;
use crate::spec::{Conv1dSpec, ConvTranspose1dSpec};

/// Rows of the register tile: 12 rows × 2 vectors of 16 lanes = 24 accumulators, which with
/// the two B vectors and the broadcast A value fits the 32 AVX-512 registers.
const MR: usize = 12;
/// Columns of the register tile (output channels per filter panel).
const NR: usize = 32;
/// Input rows one task reads: about this many bytes (plus the taps' reach), so that they and
/// one filter panel (`K·c_in·NR` floats, ≤ 400 KiB for Kokoro's shapes) stay in L2 while
/// every panel's tiles read them.
const X_BLOCK_BYTES: usize = 256 * 1024;

/// Whether the direct kernel takes a dense convolution (plain or transposed) of these channel
/// counts on `isa`. On AVX-512 every one. On AVX2 only from [`AVX2_MIN_C_IN`] input and
/// [`AVX2_MIN_C_OUT`] output channels: below those the im2col matrix and the `gemm` crate were
/// as fast or faster on a Zen 2 (`conv_time`: 22 input channels 0.87–0.9× at k12 stride 6 and
/// 0.9–1.0× at k1; one output channel 0.4×, where a 32-wide filter panel is almost all
/// padding), and from them the direct kernel was 1.05–1.3× (Kokoro's decoder, F0/N blocks,
/// text encoder, `conv_post` and first upsampler).
pub(super) fn applies(isa: Isa, c_in: usize, c_out: usize) -> bool {
    match isa {
        Isa::Avx512(_) => true,
        Isa::Avx2(_) => c_in >= AVX2_MIN_C_IN && c_out >= AVX2_MIN_C_OUT,
    }
}

/// Fewest input channels the AVX2 direct kernel takes (see [`applies`]).
const AVX2_MIN_C_IN: usize = 32;
/// Fewest output channels the AVX2 direct kernel takes (see [`applies`]).
const AVX2_MIN_C_OUT: usize = 16;

/// `y = conv(x, w) + bias` for a dense (`groups == 1`) convolution; `spec` validated.
pub(super) fn conv1d_dense(isa: Isa, spec: &Conv1dSpec, x: &[f32], w: &[f32], bias: Option<&[f32]>, y: &mut [f32]) {
    debug_assert_eq!(spec.groups, 1, "conv1d_dense takes dense convolutions only");
    let Conv1dSpec { batch, n, c_in, c_out, kernel, .. } = *spec;
    let n_out = spec.n_out();
    if n_out == 0 || c_out == 0 {
        return;
    }
    let panel_len = kernel * c_in * NR;
    let panels = c_out.div_ceil(NR);
    with_shared_scratch(panels * panel_len, |packed| {
        packed.par_chunks_mut(panel_len.max(1)).enumerate().for_each(|(jp, panel)| pack_filters(spec, w, jp * NR, panel));
        let packed = &*packed;
        let rb = rows_per_block(spec, rayon::current_num_threads());
        for b in 0..batch {
            let xb = &x[b * n * c_in..(b + 1) * n * c_in];
            let yb = &mut y[b * n_out * c_out..(b + 1) * n_out * c_out];
            yb.par_chunks_mut(rb * c_out).enumerate().for_each(|(blk, yblk)| conv_block(isa, spec, xb, packed, bias, blk * rb, yblk));
        }
    });
}

/// Output rows per task: a multiple of [`MR`] whose input rows fit [`X_BLOCK_BYTES`], and few
/// enough that every thread gets about four blocks.
fn rows_per_block(spec: &Conv1dSpec, threads: usize) -> usize {
    let row_bytes = 4 * spec.c_in.max(1);
    let reach = spec.dilation * spec.kernel.saturating_sub(1);
    let fit = (X_BLOCK_BYTES / row_bytes).saturating_sub(reach) / spec.stride.max(1);
    let share = spec.n_out().div_ceil(4 * threads.max(1));
    fit.min(share).div_ceil(MR).max(1) * MR
}

/// Output channels `j0..j0 + NR` of the filters `[c_out, c_in, K]` as `[K][c_in][NR]`;
/// channels past `c_out` are zero. Every value of `panel` is written.
///
/// The panel is written in runs of `NR` values, one per (tap, channel), each value from one of
/// the `NR` filters; channels outer and taps inner, so the `NR` filters are each read front to
/// back and the writes go to `K` sequential streams. Writing filter by filter instead (stride
/// `NR` in the panel) touched a fresh panel line for every value, and packing then cost about
/// as much as the arithmetic of the decoder's 1,090 → 1,024-channel convolutions.
fn pack_filters(spec: &Conv1dSpec, w: &[f32], j0: usize, panel: &mut [f32]) {
    let Conv1dSpec { c_in, c_out, kernel, .. } = *spec;
    let cols = c_out.saturating_sub(j0).min(NR);
    let per_filter = c_in * kernel;
    let filters = &w[j0 * per_filter..(j0 + cols) * per_filter];
    let panel = &mut panel[..kernel * c_in * NR];
    for ci in 0..c_in {
        for k in 0..kernel {
            let at = ci * kernel + k;
            let run = &mut panel[(k * c_in + ci) * NR..(k * c_in + ci + 1) * NR];
            for (jj, v) in run[..cols].iter_mut().enumerate() {
                *v = filters[jj * per_filter + at];
            }
            run[cols..].fill(0.0);
        }
    }
}

/// Output rows `t0..t0 + yblk.len() / c_out` of one batch item: copies the input rows they
/// read, tabulates each tile's source rows, and runs the tile kernel over every filter panel
/// (outer: one panel stays in L2) and tile (inner).
fn conv_block(isa: Isa, spec: &Conv1dSpec, xb: &[f32], packed: &[f32], bias: Option<&[f32]>, t0: usize, yblk: &mut [f32]) {
    let Conv1dSpec { c_in, c_out, kernel, .. } = *spec;
    let rows = yblk.len() / c_out;
    let tiles = rows.div_ceil(MR);
    let (lo, hi) = rows_read(spec, t0, rows);
    let row_len = padded_row_len(c_in);
    // The rows this block reads, each padded to `row_len`, then a zero row that padding taps
    // (and a partial last tile's spare rows) read.
    let zero_at = (hi - lo) * row_len;
    with_scratch(zero_at + row_len, |copy| {
        for (dst, src) in copy[..zero_at].chunks_mut(row_len).zip(xb[lo * c_in..hi * c_in].chunks(c_in.max(1))) {
            dst[..c_in].copy_from_slice(src);
        }
        copy[zero_at..].fill(0.0);
        let copy = &*copy;
        with_scratch_usize(tiles * kernel * MR, |offsets| {
            tap_offsets(spec, t0, rows, MR, lo, row_len, zero_at, offsets);
            let panel_len = kernel * c_in * NR;
            for jp in 0..c_out.div_ceil(NR) {
                let (j0, cols) = (jp * NR, (c_out - jp * NR).min(NR));
                let panel = &packed[jp * panel_len..(jp + 1) * panel_len];
                let bias = bias.map(|b| &b[j0..j0 + cols]);
                for ti in 0..tiles {
                    let r0 = ti * MR;
                    let tile_rows = (rows - r0).min(MR);
                    let out = &mut yblk[r0 * c_out + j0..(r0 + tile_rows - 1) * c_out + j0 + cols];
                    let offs = &offsets[ti * kernel * MR..(ti + 1) * kernel * MR];
                    if merged_taps(offs, MR, c_in, row_len) {
                        tile_kernel(isa, 1, kernel * c_in, &offs[..MR], copy, panel, bias, out, c_out, tile_rows);
                    } else {
                        tile_kernel(isa, kernel, c_in, offs, copy, panel, bias, out, c_out, tile_rows);
                    }
                }
            }
        })
    })
}

/// `y = conv_transpose(x, w) + bias` for a dense (`groups == 1`) transposed convolution;
/// `spec` validated (stride and kernel ≥ 1).
///
/// Output row `o` with `o + pad = q·stride + r` receives input row `q − j` through tap
/// `r + j·stride` for every `j` whose tap exists: for each phase `r` that is an ordinary
/// convolution over consecutive input rows with `⌈(K − r)/stride⌉` taps, whose outputs are
/// every `stride`-th row. So each phase runs the dense tile kernel above (the output stride is
/// `stride` rows) with its own filter panels, packed once per call; nothing is multiplied that
/// is not added into an output, and nothing is gathered afterwards. The GEMM + col2im path it
/// replaces (kept for grouped filters and where [`applies`] says no) multiplied every input row by
/// every tap into a contribution matrix, then added those up row by row.
pub(super) fn conv_transpose1d_dense(
    isa: Isa,
    spec: &ConvTranspose1dSpec,
    x: &[f32],
    w: TransposedFilters<'_>,
    bias: Option<&[f32]>,
    y: &mut [f32],
) {
    debug_assert_eq!(spec.groups, 1, "conv_transpose1d_dense takes dense convolutions only");
    let ConvTranspose1dSpec { batch, n, c_in, c_out, kernel, stride, .. } = *spec;
    let n_out = spec.n_out();
    if n_out == 0 || c_out == 0 || stride == 0 {
        return;
    }
    let panels = c_out.div_ceil(NR);
    // Every phase's panels get room for the most taps a phase has (phase 0's).
    let panel_len = kernel.div_ceil(stride) * c_in * NR;
    with_shared_scratch(stride * panels * panel_len, |packed| {
        pack_transposed_filters(spec, w, panel_len, packed);
        let packed = &*packed;
        // Blocks of whole `stride·MR`-row groups, so each phase's tiles in a block are full;
        // about two blocks per thread (each block reads every phase's panels, so fewer
        // blocks read them fewer times), and the input rows a block reads within the L2 budget.
        let group = stride * MR;
        let fit = (X_BLOCK_BYTES / (4 * c_in.max(1))).saturating_sub(kernel.div_ceil(stride)).max(MR) * stride;
        let share = n_out.div_ceil(2 * rayon::current_num_threads().max(1));
        let rb = fit.min(share).div_ceil(group).max(1) * group;
        for b in 0..batch {
            let xb = &x[b * n * c_in..(b + 1) * n * c_in];
            let yb = &mut y[b * n_out * c_out..(b + 1) * n_out * c_out];
            yb.par_chunks_mut(rb * c_out)
                .enumerate()
                .for_each(|(blk, yblk)| transposed_block(isa, spec, xb, packed, panel_len, bias, blk * rb, yblk));
        }
    });
}

/// The taps phase `r` of a transposed convolution has: `k = r, r + stride, …` below `K`.
fn phase_taps(spec: &ConvTranspose1dSpec, r: usize) -> usize {
    spec.kernel.saturating_sub(r).div_ceil(spec.stride)
}

/// A transposed convolution's filter bank, PyTorch's `[c_in, c_out, K]`: f32 values, or bf16
/// bits (the bf16 backend's weights where its own kernels do not pay), which the packing widens
/// exactly one input channel at a time. Widening the whole bank first made an f32 copy as large
/// as the packed panels (10.5 MB for Kokoro's first upsampler) next to them at the op's peak.
#[derive(Clone, Copy)]
pub(crate) enum TransposedFilters<'a> {
    F32(&'a [f32]),
    Bf16(&'a [u16]),
}

/// Input channels per task of [`pack_transposed_filters`].
const PACK_CHANNELS: usize = 8;

/// Every phase's filter panels into `packed`: for output channels `jp·NR ..` and phase `r`, the
/// panel at `(jp·stride + r)·panel_len`, `[J][c_in][NR]`, tap slot `t` holding filter tap
/// `r + (J − 1 − t)·stride` (slot `t` reads input row `q − J + 1 + t`, so the slots run over
/// ascending input rows); channels past `c_out` and slots past `J` are zero. The filters are
/// PyTorch's `[c_in, c_out, K]`: each input channel's `c_out × K` block is transposed to rows
/// over the output channels (8 × 8 in registers with AVX2), whose runs are then copied into
/// the panels. Value by value, one strided load per value, the packing was a fifth of the
/// first upsampler's time on a sentence. bf16 filters are widened a channel's block at a time
/// into the task's scratch just before its transpose.
fn pack_transposed_filters(spec: &ConvTranspose1dSpec, w: TransposedFilters<'_>, panel_len: usize, packed: &mut [f32]) {
    let ConvTranspose1dSpec { c_in, c_out, kernel, stride, .. } = *spec;
    let panels = c_out.div_ceil(NR);
    packed
        .par_chunks_mut(panel_len.max(1))
        .enumerate()
        .for_each(|(at, panel)| panel[phase_taps(spec, at % stride) * c_in * NR..].fill(0.0));
    let dst = SharedOut(packed.as_mut_ptr(), packed.len());
    let zeros = [0.0f32; NR];
    (0..c_in.div_ceil(PACK_CHANNELS)).into_par_iter().for_each(|blk| {
        let block = kernel * c_out;
        let widened = if matches!(w, TransposedFilters::Bf16(_)) { block } else { 0 };
        with_scratch(block + widened, |scratch| {
            let (rows, wide) = scratch.split_at_mut(block);
            for ci in blk * PACK_CHANNELS..((blk + 1) * PACK_CHANNELS).min(c_in) {
                let filters = match w {
                    TransposedFilters::F32(w) => &w[ci * block..(ci + 1) * block],
                    TransposedFilters::Bf16(bits) => {
                        for (o, &b) in wide.iter_mut().zip(&bits[ci * block..(ci + 1) * block]) {
                            *o = from_bf16(b);
                        }
                        &*wide
                    }
                };
                // rows[k·c_out + co] = w[ci][co][k].
                transpose_taps(filters, kernel, kernel, rows);
                for jp in 0..panels {
                    let (j0, cols) = (jp * NR, (c_out - jp * NR).min(NR));
                    for r in 0..stride {
                        let taps = phase_taps(spec, r);
                        for t in 0..taps {
                            let k = r + (taps - 1 - t) * stride;
                            let at = (jp * stride + r) * panel_len + (t * c_in + ci) * NR;
                            // SAFETY: slot t of input channel ci in panel (jp, r) is written by
                            // this task alone (its block of input channels), within `packed`
                            // (`SharedOut::write` checks); the zero fill above touched only
                            // slots past each phase's taps.
                            unsafe {
                                dst.write(at, &rows[k * c_out + j0..k * c_out + j0 + cols]);
                                dst.write(at + cols, &zeros[cols..]);
                            }
                        }
                    }
                }
            }
        })
    });
}

/// Output rows `o0..o0 + yblk.len() / c_out` of one item of a transposed convolution: copies
/// the input rows they read, then per filter panel, phase and tile of that phase's rows, runs
/// the tile kernel with an output stride of `stride` rows.
#[allow(clippy::too_many_arguments)]
fn transposed_block(
    isa: Isa,
    spec: &ConvTranspose1dSpec,
    xb: &[f32],
    packed: &[f32],
    panel_len: usize,
    bias: Option<&[f32]>,
    o0: usize,
    yblk: &mut [f32],
) {
    let ConvTranspose1dSpec { n, c_in, c_out, stride, pad, .. } = *spec;
    let rows = yblk.len() / c_out;
    let most_taps = spec.kernel.div_ceil(stride);
    // Input rows read: those of the block's first and last phase quotients, back `most_taps − 1`.
    let (q_first, q_last) = ((o0 + pad) / stride, (o0 + rows - 1 + pad) / stride);
    let lo = (q_first + 1).saturating_sub(most_taps).min(n);
    let hi = (q_last + 1).min(n).max(lo);
    let row_len = padded_row_len(c_in);
    let zero_at = (hi - lo) * row_len;
    // Where phase `r`'s tile rows (`q` from `q0`) read slot `t` of `taps`.
    let source = |q: usize, t: usize, taps: usize| -> usize {
        match (q + t + 1).checked_sub(taps) {
            Some(i) if i >= lo && i < hi => (i - lo) * row_len,
            _ => zero_at,
        }
    };
    with_scratch(zero_at + row_len, |copy| {
        for (dst, src) in copy[..zero_at].chunks_mut(row_len).zip(xb[lo * c_in..hi * c_in].chunks(c_in.max(1))) {
            dst[..c_in].copy_from_slice(src);
        }
        copy[zero_at..].fill(0.0);
        let copy = &*copy;
        let panels = c_out.div_ceil(NR);
        with_scratch_usize(most_taps.max(1) * MR, |offsets| {
            for jp in 0..panels {
                let (j0, cols) = (jp * NR, (c_out - jp * NR).min(NR));
                let bias = bias.map(|b| &b[j0..j0 + cols]);
                for r in 0..stride {
                    // This phase's rows in the block: o = q·stride + r − pad in o0..o0 + rows.
                    let q_begin = (o0 + pad).saturating_sub(r).div_ceil(stride);
                    let q_end = (o0 + rows + pad).saturating_sub(r).div_ceil(stride);
                    if q_end <= q_begin {
                        continue;
                    }
                    let taps = phase_taps(spec, r);
                    if taps == 0 {
                        // No tap lands on these rows: they are the bias.
                        for q in q_begin..q_end {
                            let at = (q * stride + r - pad - o0) * c_out + j0;
                            match bias {
                                Some(b) => yblk[at..at + cols].copy_from_slice(b),
                                None => yblk[at..at + cols].fill(0.0),
                            }
                        }
                        continue;
                    }
                    let panel = &packed[(jp * stride + r) * panel_len..(jp * stride + r + 1) * panel_len];
                    let offs = &mut offsets[..taps * MR];
                    for q0 in (q_begin..q_end).step_by(MR) {
                        let tile_rows = (q_end - q0).min(MR);
                        for t in 0..taps {
                            for (i, off) in offs[t * MR..(t + 1) * MR].iter_mut().enumerate() {
                                *off = if i < tile_rows { source(q0 + i, t, taps) } else { zero_at };
                            }
                        }
                        let first = q0 * stride + r - pad - o0;
                        let ldy = stride * c_out;
                        let out = &mut yblk[first * c_out + j0..(first + (tile_rows - 1) * stride) * c_out + j0 + cols];
                        if merged_taps(offs, MR, c_in, row_len) {
                            tile_kernel(isa, 1, taps * c_in, &offs[..MR], copy, panel, bias, out, ldy, tile_rows);
                        } else {
                            tile_kernel(isa, taps, c_in, offs, copy, panel, bias, out, ldy, tile_rows);
                        }
                    }
                }
            }
        })
    })
}

/// The stride, in 4-byte values, of a block's copy of the input rows: `len` values rounded up
/// to a cache line, plus one line where that is a multiple of 2 KiB. A tile's twelve rows at a
/// stride of 4 KiB (1024 f32 channels) all fall in the same L1 set, which holds eight lines,
/// so every broadcast missed L1; the extra line spreads them over different sets. Strides that
/// are not padded let tiles of a dilation-1 convolution read their taps as one run
/// ([`merged_taps`]).
pub(crate) fn padded_row_len(len: usize) -> usize {
    let line = len.div_ceil(16) * 16;
    if line.is_multiple_of(512) {
        line + 16
    } else {
        line
    }
}

/// Whether each row of a tile (`offsets`: `taps·MR` row starts, values per tap `per_tap`, copy
/// stride `row_len`) reads its taps from consecutive rows of the copy with no gap, so that the
/// taps are one run of `taps·per_tap` values from the first tap's start — as the packed filter
/// panel's rows are — and the kernel can run them as one tap with no per-tap overhead. True for
/// dilation 1 away from the padding, where the copy's stride is exactly `per_tap`.
pub(crate) fn merged_taps(offsets: &[usize], mr: usize, per_tap: usize, row_len: usize) -> bool {
    row_len == per_tap
        && offsets.chunks(mr).enumerate().all(|(k, tap)| tap.iter().zip(&offsets[..mr]).all(|(&o, &first)| o == first + k * row_len))
}

/// `out[r·ldy + j] = bias[j] + Σ_k Σ_c x(r, k)[c] · panel[k][c][j]` for rows `r < rows` and the
/// panel's `out` width, `x(r, k)` the `c_in` values of `src` at `offsets[k·MR + r]`.
#[allow(clippy::too_many_arguments)]
fn tile_kernel(
    isa: Isa,
    taps: usize,
    c_in: usize,
    offsets: &[usize],
    src: &[f32],
    panel: &[f32],
    bias: Option<&[f32]>,
    out: &mut [f32],
    ldy: usize,
    rows: usize,
) {
    assert!((1..=MR).contains(&rows), "tile rows");
    let width = out.len().saturating_sub((rows - 1) * ldy);
    assert!((1..=NR).contains(&width) && out.len() == (rows - 1) * ldy + width, "tile shape");
    assert!(bias.is_none_or(|b| b.len() == width), "bias width");
    assert!(offsets.len() == taps * MR && offsets.iter().all(|&o| o + c_in <= src.len()), "A offsets outside the input");
    assert!(panel.len() >= taps * c_in * NR, "filter panel too short");
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `isa` proves the instruction set its kernel needs; every A read lies at an offset
    // checked above, B reads within `taps·c_in·NR`, and the stores within `out` (its shape
    // checked above).
    unsafe {
        let bias = bias.map_or(std::ptr::null(), |b| b.as_ptr());
        let (src, offsets, panel, out) = (src.as_ptr(), offsets.as_ptr(), panel.as_ptr(), out.as_mut_ptr());
        match isa {
            Isa::Avx512(_) => x86::tile_kernel(taps, c_in, src, offsets, panel, bias, out, ldy, rows, width),
            Isa::Avx2(_) => x86::tile_kernel_avx2(taps, c_in, src, offsets, panel, bias, out, ldy, rows, width),
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (isa, src, panel, out);
        unreachable!("x86 token off x86-64")
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{MR, NR};
    use std::arch::x86_64::*;

    /// Mask of the first `n` of 16 lanes (`n` ≥ 16: all).
    #[inline(always)]
    fn lanes(n: usize) -> __mmask16 {
        if n >= 16 {
            0xFFFF
        } else {
            ((1u32 << n) - 1) as __mmask16
        }
    }

    /// The `MR`×`NR` tile over all taps and channels, 24 accumulators in registers; then
    /// `bias + acc` is stored.
    ///
    /// # Safety
    /// AVX-512 F present; `offsets` holds `taps·MR` entries `o` with `o + c_in` floats inside
    /// `src`; `b` holds `taps·c_in·NR` floats; `bias` is null or holds `width` floats; `out`
    /// holds `(rows − 1)·ldy + width` floats, `1 ≤ rows ≤ MR`, `1 ≤ width ≤ NR`.
    #[target_feature(enable = "avx512f")]
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn tile_kernel(
        taps: usize,
        c_in: usize,
        src: *const f32,
        offsets: *const usize,
        b: *const f32,
        bias: *const f32,
        out: *mut f32,
        ldy: usize,
        rows: usize,
        width: usize,
    ) {
        // The output rows' lines, requested for writing now so that the stores at the end do
        // not wait for them (they were measured at a tenth of a k3 tile's time otherwise).
        for r in 0..rows {
            let dst = out.wrapping_add(r * ldy);
            _mm_prefetch::<_MM_HINT_ET0>(dst as *const i8);
            _mm_prefetch::<_MM_HINT_ET0>(dst.wrapping_add(width - 1) as *const i8);
        }
        let mut acc = [[_mm512_setzero_ps(); 2]; MR];
        for k in 0..taps {
            // SAFETY (whole block): offsets and B within the caller's contract.
            unsafe {
                let a: [*const f32; MR] = std::array::from_fn(|r| src.add(*offsets.add(k * MR + r)));
                let bk = b.add(k * c_in * NR);
                for c in 0..c_in {
                    let bp = bk.add(c * NR);
                    let b0 = _mm512_loadu_ps(bp);
                    let b1 = _mm512_loadu_ps(bp.add(16));
                    for (row, ar) in acc.iter_mut().zip(a) {
                        let v = _mm512_set1_ps(*ar.add(c));
                        row[0] = _mm512_fmadd_ps(v, b0, row[0]);
                        row[1] = _mm512_fmadd_ps(v, b1, row[1]);
                    }
                }
            }
        }
        let (m0, m1) = (lanes(width), lanes(width.saturating_sub(16)));
        // SAFETY: bias reads and output stores are masked to the tile's `width` columns and
        // `rows` rows, inside the caller's contract.
        unsafe {
            let (bias0, bias1) = if bias.is_null() {
                (_mm512_setzero_ps(), _mm512_setzero_ps())
            } else {
                (_mm512_maskz_loadu_ps(m0, bias), _mm512_maskz_loadu_ps(m1, bias.wrapping_add(16)))
            };
            let store = |r: usize, row: &[__m512; 2]| {
                let dst = out.add(r * ldy);
                _mm512_mask_storeu_ps(dst, m0, _mm512_add_ps(bias0, row[0]));
                _mm512_mask_storeu_ps(dst.wrapping_add(16), m1, _mm512_add_ps(bias1, row[1]));
            };
            // A whole tile (the common case) with a fixed trip count, so the accumulators are
            // stored from their registers instead of being spilled to the stack first.
            if rows == MR {
                for (r, row) in acc.iter().enumerate() {
                    store(r, row);
                }
            } else {
                // A copy indexed by a run-time count, so that `acc` itself is never indexed
                // that way: that kept it in memory (zeroed by a memset per tile) throughout.
                let partial = acc;
                for (r, row) in partial.iter().enumerate().take(rows) {
                    store(r, row);
                }
            }
        }
    }

    /// Rows of the AVX2 kernel's sub-tile: 6 rows × 2 vectors of 8 lanes = 12 accumulators,
    /// which with the two B vectors and the broadcast A value fits the 16 AVX2 registers.
    const HALF_ROWS: usize = MR / 2;
    /// Columns of the AVX2 kernel's sub-tile: half a filter panel.
    const HALF_COLS: usize = NR / 2;

    /// Mask of the first `n` of 8 lanes (`n` ≥ 8: all), as AVX2's masked loads and stores take it.
    #[inline(always)]
    unsafe fn lanes_avx2(n: usize) -> __m256i {
        let n = n.min(8) as i32;
        // SAFETY: plain AVX2 arithmetic; the callers run with it enabled.
        unsafe { _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)) }
    }

    /// [`tile_kernel`] on AVX2 + FMA: the `MR`×`NR` tile as four 6×16 sub-tiles (row halves
    /// outer, column halves inner), each over all taps and channels in registers. Every output
    /// sums the same products in the same order as the AVX-512 kernel — FMAs from zero over
    /// (tap, channel), then the bias added — so the bits are that kernel's.
    ///
    /// # Safety
    /// AVX2 and FMA present; otherwise [`tile_kernel`]'s contract.
    #[target_feature(enable = "avx2,fma")]
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn tile_kernel_avx2(
        taps: usize,
        c_in: usize,
        src: *const f32,
        offsets: *const usize,
        b: *const f32,
        bias: *const f32,
        out: *mut f32,
        ldy: usize,
        rows: usize,
        width: usize,
    ) {
        for r0 in (0..rows).step_by(HALF_ROWS) {
            for j0 in (0..width).step_by(HALF_COLS) {
                // SAFETY: the sub-tile's rows `r0..` and columns `j0..` lie inside the tile,
                // whose reads and stores the caller's contract covers.
                unsafe {
                    sub_tile_avx2(
                        taps,
                        c_in,
                        src,
                        offsets,
                        b,
                        bias,
                        out,
                        ldy,
                        (r0, (rows - r0).min(HALF_ROWS)),
                        (j0, (width - j0).min(HALF_COLS)),
                    )
                }
            }
        }
    }

    /// Rows `r0 .. r0 + rows` and columns `j0 .. j0 + width` of [`tile_kernel_avx2`]'s tile.
    ///
    /// # Safety
    /// As [`tile_kernel_avx2`], with `r0 + rows ≤ MR` and `j0 + width ≤ NR`, `j0` a multiple of
    /// [`HALF_COLS`] and `r0` of [`HALF_ROWS`].
    #[target_feature(enable = "avx2,fma")]
    #[allow(clippy::too_many_arguments)]
    unsafe fn sub_tile_avx2(
        taps: usize,
        c_in: usize,
        src: *const f32,
        offsets: *const usize,
        b: *const f32,
        bias: *const f32,
        out: *mut f32,
        ldy: usize,
        (r0, rows): (usize, usize),
        (j0, width): (usize, usize),
    ) {
        let mut acc = [[_mm256_setzero_ps(); 2]; HALF_ROWS];
        for k in 0..taps {
            // SAFETY (whole block): offsets and B within the caller's contract; the sub-tile's
            // rows past `rows` read their offsets too, which the caller keeps inside `src`.
            unsafe {
                let a: [*const f32; HALF_ROWS] = std::array::from_fn(|r| src.add(*offsets.add(k * MR + r0 + r)));
                let bk = b.add(k * c_in * NR + j0);
                for c in 0..c_in {
                    let bp = bk.add(c * NR);
                    let b0 = _mm256_loadu_ps(bp);
                    let b1 = _mm256_loadu_ps(bp.add(8));
                    for (row, ar) in acc.iter_mut().zip(a) {
                        let v = _mm256_set1_ps(*ar.add(c));
                        row[0] = _mm256_fmadd_ps(v, b0, row[0]);
                        row[1] = _mm256_fmadd_ps(v, b1, row[1]);
                    }
                }
            }
        }
        // SAFETY: bias reads and output stores are masked to the sub-tile's `width` columns and
        // `rows` rows, inside the caller's contract.
        unsafe {
            // Whole 16-column sub-tiles (all but a narrow panel's last) load and store plainly:
            // AVX2's masked store is microcoded on some cores (tens of cycles on Zen 2).
            let full = width == HALF_COLS;
            let (m0, m1) = (lanes_avx2(width), lanes_avx2(width.saturating_sub(8)));
            let (bias0, bias1) = if bias.is_null() {
                (_mm256_setzero_ps(), _mm256_setzero_ps())
            } else if full {
                (_mm256_loadu_ps(bias.add(j0)), _mm256_loadu_ps(bias.add(j0 + 8)))
            } else {
                (_mm256_maskload_ps(bias.add(j0), m0), _mm256_maskload_ps(bias.wrapping_add(j0 + 8), m1))
            };
            let store = |r: usize, row: &[__m256; 2]| {
                let dst = out.add((r0 + r) * ldy + j0);
                let (v0, v1) = (_mm256_add_ps(bias0, row[0]), _mm256_add_ps(bias1, row[1]));
                if full {
                    _mm256_storeu_ps(dst, v0);
                    _mm256_storeu_ps(dst.add(8), v1);
                } else {
                    _mm256_maskstore_ps(dst, m0, v0);
                    _mm256_maskstore_ps(dst.wrapping_add(8), m1, v1);
                }
            };
            // Whole sub-tiles with a fixed trip count and partial ones through a copy, so the
            // accumulators stay in registers (as in the AVX-512 kernel).
            if rows == HALF_ROWS {
                for (r, row) in acc.iter().enumerate() {
                    store(r, row);
                }
            } else {
                let partial = acc;
                for (r, row) in partial.iter().enumerate().take(rows) {
                    store(r, row);
                }
            }
        }
    }
}

#[cfg(test)]
#[path = "direct_tests.rs"]
mod tests;
