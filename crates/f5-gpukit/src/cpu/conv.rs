//! 1-D convolution (plain and transposed) over channels-last activations.
//!
//! Depthwise convolutions (the ConvNeXt blocks: k=7, one filter per channel) run directly,
//! vectorised across channels. Grouped and dense ones (F5's position embedding: k=31, 16 groups
//! of 64; Vocos' input: 100→512, k=7; Kokoro's dilated resblock convs) are a GEMM over an
//! im2col matrix whose row `t` holds the `kernel` input rows the output row `t` sees, back to
//! back — so building it is a run of contiguous copies and the GEMM does all the arithmetic —
//! built and multiplied one cache-sized block of output rows per task. Dense ones (`groups ==
//! 1`) on a CPU with AVX-512 F, or with AVX2 + FMA from 32 input and 16 output channels, skip
//! the im2col: `direct` sums each register tile of the output over all taps straight from the
//! input rows, which measured faster on every Kokoro shape it takes (the im2col writes each
//! input row K times, then the GEMM packs it again; the im2col path remains for grouped
//! convolutions and, on AVX2, for narrower ones: Kokoro's 22-channel source spectrum and its
//! one-channel F0/N projections). Dense transposed convolutions that the direct kernel takes
//! run as one such direct convolution per output phase (`o + pad ≡ r mod stride`); grouped
//! ones, and the rest, are one GEMM into a column matrix (every input row times every tap),
//! after which each output row gathers the taps that land on it.
//!
//! Dense stride-1 convolutions of 5 to 33 taps over at least 32 (even) channels each way, at
//! most 256 × 256 channel pairs (the filters' spectrum is ~10× their size), go through the FFT
//! first (`fourier`, overlap-save over 64-row tiles): for Kokoro's k7/k11 resblock convolutions
//! it does 3–5× fewer multiplications than any direct sum, which is what beats the direct
//! kernel once that one is at the FMA roof. Dense stride-1 3-tap ones (≥ 32 channels each way,
//! at most 512 × 512 pairs, at least 1,024 output rows) go through Winograd's F(4, 3)
//! (`winograd`: half the direct sum's multiplications, as six GEMMs over all tiles).
//! Other dense ones with 24 to 320 output rows (on AVX-512 also no more rows than output
//! channels; Kokoro's text encoder and decoder on a sentence) are the few-row GEMM's broadcast
//! product (`few_rows::conv1d`, AVX-512 or AVX2): the filters read in place as its weight, the
//! input rows packed per 32 output rows, where the direct kernel would pack the whole filter
//! bank on every call for only a few tiles of output.
//! `F5_CPU_FFT_CONV=off`, `F5_CPU_WINOGRAD_CONV=off` and `F5_CPU_FEW_ROWS_CONV=off` keep those
//! on the direct kernel, or the im2col path where that does not apply (to compare, or to rule a path out when chasing a numeric difference).

use rayon::prelude::*;

use super::scratch::{with_scratch, with_shared_scratch};
use super::seq::{ChunkStats, STATS_ROWS};
use super::{few_rows, gemm_raw};
use crate::spec::{Conv1dSpec, ConvTranspose1dSpec, GemmSpec, MatLayout};

mod direct;
#[cfg(test)]
pub(crate) mod f64_reference;
mod fourier;
mod tiled;
mod winograd;
pub(crate) use direct::{merged_taps, padded_row_len};

pub fn conv1d(spec: &Conv1dSpec, x: &[f32], w: &[f32], bias: Option<&[f32]>, y: &mut [f32]) {
    if spec.groups == spec.c_in && spec.c_out == spec.c_in {
        return depthwise(spec, x, w, bias, y);
    }
    if spec.groups == 1 {
        if fft_applies(spec) {
            return fourier::conv1d_fft(spec, x, w, bias, y);
        }
        if winograd_applies(spec) {
            return winograd::conv1d_winograd(spec, x, w, bias, y);
        }
        if let Some(isa) = few_rows::Isa::detect().filter(|&isa| few_rows::conv_applies(isa, spec) && few_rows::conv_enabled()) {
            return few_rows::conv1d(isa, spec, x, w, bias, y);
        }
        if let Some(isa) = direct::Isa::detect().filter(|&isa| direct::applies(isa, spec.c_in, spec.c_out)) {
            return direct::conv1d_dense(isa, spec, x, w, bias, y);
        }
    }
    grouped(spec, x, w, bias, y)
}

pub(crate) use tiled::Around;

/// Whether [`conv1d`] takes the FFT path for `spec`.
pub(crate) fn fft_applies(spec: &Conv1dSpec) -> bool {
    fft_takes_shape(spec) && fourier::long_enough(spec)
}

/// Whether [`conv1d`] takes the FFT path for a convolution of `spec`'s shape once its input is
/// long enough ([`fft_applies`] but for the length).
pub(crate) fn fft_takes_shape(spec: &Conv1dSpec) -> bool {
    spec.groups == 1 && fourier::suits_shape(spec) && fourier::enabled()
}

/// Whether [`conv1d`] takes the Winograd path for `spec`.
fn winograd_applies(spec: &Conv1dSpec) -> bool {
    spec.groups == 1 && !fft_applies(spec) && winograd::suits(spec) && winograd::enabled()
}

/// Whether [`conv1d`] takes a tiled path for `spec` (FFT or Winograd), where
/// [`conv1d_around`] can map its input rows and add its outputs.
pub(crate) fn around_applies(spec: &Conv1dSpec) -> bool {
    fft_applies(spec) || winograd_applies(spec)
}

/// [`conv1d`] on the tiled path it takes for `spec`, with `around`'s row map and residual add
/// (the same bits as mapping the input whole, convolving, then an `axpy`); `false`, with
/// nothing done, where [`around_applies`] does not hold.
pub(crate) fn conv1d_around(spec: &Conv1dSpec, x: &[f32], w: &[f32], bias: Option<&[f32]>, y: &mut [f32], around: Around<'_>) -> bool {
    if fft_applies(spec) {
        fourier::conv1d_fft_around(spec, x, w, bias, y, around);
    } else if winograd_applies(spec) {
        winograd::conv1d_winograd_around(spec, x, w, bias, y, around);
    } else {
        return false;
    }
    true
}

/// What a dense convolution does with each block of output rows besides computing them.
#[derive(Default)]
pub(crate) struct BlockOutput<'a> {
    /// Add the outputs to what `y` holds (`y += out`, the rounding a separate `axpy` gives)
    /// instead of writing them: each block is computed into scratch and added while it is in
    /// cache, so a residual step never writes the whole convolution's output to memory and
    /// reads it back (at Kokoro's last rate that output is 80 MB, against a block of ~0.5 MB).
    pub(crate) accumulate: bool,
    /// One slot per [`STATS_ROWS`] output rows of the batch item: each block fills its chunks'
    /// per-channel statistics from its rows as written (after the add), while they are in cache,
    /// for the instance norm that reads them next. The blocks are then whole chunks.
    pub(crate) stats: Option<&'a mut [ChunkStats]>,
}

impl BlockOutput<'_> {
    /// `rows` output rows per block as a kernel chose them (a multiple of its tile rows, which
    /// divide [`STATS_ROWS`]), rounded up to whole chunks where statistics are collected.
    pub(crate) fn block_rows(&self, rows: usize) -> usize {
        if self.stats.is_some() {
            rows.div_ceil(STATS_ROWS).max(1) * STATS_ROWS
        } else {
            rows
        }
    }

    /// Runs `block(first_row, out)` for each block of `rows` output rows (`c` values each) of
    /// `y` in parallel, `out` being the block's rows of `y` or, to accumulate, scratch that is
    /// then added to them; then the chunks' statistics where asked for. `rows` must come from
    /// [`BlockOutput::block_rows`].
    pub(crate) fn for_each_block(self, y: &mut [f32], c: usize, rows: usize, block: impl Fn(usize, &mut [f32]) + Sync) {
        let BlockOutput { accumulate, stats } = self;
        let run = |i: usize, yblk: &mut [f32]| {
            if !accumulate {
                return block(i * rows, yblk);
            }
            with_scratch(yblk.len(), |out| {
                block(i * rows, out);
                super::simd::axpy(1.0, out, yblk);
            });
        };
        match stats {
            None => y.par_chunks_mut(rows * c).enumerate().for_each(|(i, yblk)| run(i, yblk)),
            Some(slots) => {
                assert!(rows.is_multiple_of(STATS_ROWS) && slots.len() == (y.len() / c).div_ceil(STATS_ROWS), "statistics chunks");
                y.par_chunks_mut(rows * c).zip(slots.par_chunks_mut(rows / STATS_ROWS)).enumerate().for_each(|(i, (yblk, slots))| {
                    run(i, yblk);
                    for (chunk, slot) in yblk.chunks(c * STATS_ROWS).zip(slots) {
                        *slot = ChunkStats::of(chunk, c);
                    }
                });
            }
        }
    }
}

/// The input row that tap `k` of output row `t` reads, or `None` where it falls on zero padding.
#[inline]
pub(crate) fn source_row(spec: &Conv1dSpec, t: usize, k: usize) -> Option<usize> {
    spec.pad_mode.source(t * spec.stride + k * spec.dilation, spec.pad, spec.n)
}

/// A depthwise filter bank `[c, 1, K]` as `[K, c]`, so the inner loops of both depthwise
/// convolutions run along contiguous channels.
fn taps_by_channel(w: &[f32], c: usize, kernel: usize) -> Vec<f32> {
    let mut wt = vec![0.0f32; kernel * c];
    for ch in 0..c {
        for k in 0..kernel {
            wt[k * c + ch] = w[ch * kernel + k];
        }
    }
    wt
}

fn depthwise(spec: &Conv1dSpec, x: &[f32], w: &[f32], bias: Option<&[f32]>, y: &mut [f32]) {
    let Conv1dSpec { batch, n, c_in: c, kernel, .. } = *spec;
    let n_out = spec.n_out();
    if c == 0 || n_out == 0 {
        return;
    }
    let wt = taps_by_channel(w, c, kernel);
    for b in 0..batch {
        let xb = &x[b * n * c..(b + 1) * n * c];
        let yb = &mut y[b * n_out * c..(b + 1) * n_out * c];
        yb.par_chunks_mut(c * 32).enumerate().for_each(|(chunk, rows)| {
            for (i, yrow) in rows.chunks_mut(c).enumerate() {
                let t = chunk * 32 + i;
                match bias {
                    Some(bv) => yrow.copy_from_slice(&bv[..c]),
                    None => yrow.fill(0.0),
                }
                for k in 0..kernel {
                    if let Some(s) = source_row(spec, t, k) {
                        super::simd::gated_add_row(yrow, &xb[s * c..(s + 1) * c], &wt[k * c..(k + 1) * c]);
                    }
                }
            }
        });
    }
}

/// The input rows `lo..hi` that output rows `t0..t0 + rows` read (`lo == hi` if none). For
/// the direct (im2col-free) dense kernels, which copy these rows per block.
pub(crate) fn rows_read(spec: &Conv1dSpec, t0: usize, rows: usize) -> (usize, usize) {
    let (mut lo, mut hi) = (usize::MAX, 0);
    for t in t0..t0 + rows {
        for k in 0..spec.kernel {
            if let Some(s) = source_row(spec, t, k) {
                lo = lo.min(s);
                hi = hi.max(s + 1);
            }
        }
    }
    (lo.min(hi), hi)
}

/// The A operand of the direct dense kernels, per `mr`-row tile of output rows `t0..t0 + rows`,
/// per tap, per row: `offsets[(tile·K + k)·mr + r]` is where the input row that row reads at
/// tap `k` starts in a copy of input rows `lo..` of `row_len` values each, or `zero_at` (a zero
/// row) where the tap falls on zero padding or the row lies past the block.
#[allow(clippy::too_many_arguments)]
pub(crate) fn tap_offsets(
    spec: &Conv1dSpec,
    t0: usize,
    rows: usize,
    mr: usize,
    lo: usize,
    row_len: usize,
    zero_at: usize,
    offsets: &mut [usize],
) {
    for (ti, tile) in offsets.chunks_mut(spec.kernel * mr).enumerate() {
        for (k, tap) in tile.chunks_mut(mr).enumerate() {
            for (r, off) in tap.iter_mut().enumerate() {
                let i = ti * mr + r;
                let s = if i < rows { source_row(spec, t0 + i, k) } else { None };
                *off = s.map_or(zero_at, |s| (s - lo) * row_len);
            }
        }
    }
}

/// The im2col block one task builds and multiplies: about this many values (1 MiB), so the
/// block stays in the core's L2 cache between being written and being read by the GEMM.
const IM2COL_BLOCK_VALUES: usize = 256 * 1024;

/// Output rows per task: as many as fit one im2col block, but at least 16 (the GEMM's row
/// tiles) and few enough that every thread gets about four blocks.
fn rows_per_block(n_out: usize, kc: usize, threads: usize) -> usize {
    let fit = (IM2COL_BLOCK_VALUES / kc.max(1)).max(16);
    let share = n_out.div_ceil(4 * threads.max(1)).max(16);
    fit.min(share)
}

fn grouped(spec: &Conv1dSpec, x: &[f32], w: &[f32], bias: Option<&[f32]>, y: &mut [f32]) {
    let Conv1dSpec { c_in, c_out, kernel, groups, .. } = *spec;
    let n_out = spec.n_out();
    let (cin_g, cout_g) = (c_in / groups, c_out / groups);
    let kc = kernel * cin_g;
    if n_out == 0 || c_out == 0 {
        return;
    }
    // Weights [c_out, cin_g, K] → per group [K·cin_g, cout_g] in (k, ci) row order, matching
    // the im2col columns. Fully written before it is read.
    with_shared_scratch(groups * kc * cout_g, |wp| grouped_into(spec, x, w, bias, y, wp));
}

/// Output channels one repacking pass moves together: one 64-byte line of packed weights.
const PACK_CHANNELS: usize = 16;

/// Weights `[c_out, cin_g, K]` → per group `[K·cin_g, cout_g]`, the rows in (k, ci) order. This
/// runs on every call (Kokoro's generator: ~100 convolutions of up to 256·256·11 weights per
/// forward), so it is a blocked transpose spread over the pool: each task owns a run of packed
/// rows and fills them sixteen channels at a time, so writes fill whole cache lines and reads
/// walk sixteen filters forwards instead of striding across all of them per value.
fn pack_filters(spec: &Conv1dSpec, w: &[f32], wp: &mut [f32]) {
    let Conv1dSpec { c_in, c_out, kernel, groups, .. } = *spec;
    let (cin_g, cout_g) = (c_in / groups, c_out / groups);
    let kc = kernel * cin_g;
    let rows_per_task = kc.div_ceil(4 * rayon::current_num_threads().max(1)).max(8);
    wp[..groups * kc * cout_g].par_chunks_mut(rows_per_task * cout_g).enumerate().for_each(|(task, chunk)| {
        // Sixteen filters at a time across all of the task's rows: their values stay in cache
        // while every row takes its sixteen, instead of each row walking all the filters.
        for co0 in (0..cout_g).step_by(PACK_CHANNELS) {
            let width = PACK_CHANNELS.min(cout_g - co0);
            for (i, row) in chunk.chunks_mut(cout_g).enumerate() {
                let r = task * rows_per_task + i;
                let (g, kci) = (r / kc, r % kc);
                let (k, ci) = (kci / cin_g, kci % cin_g);
                let first = (g * cout_g + co0) * kc + ci * kernel + k;
                for (j, v) in row[co0..co0 + width].iter_mut().enumerate() {
                    *v = w[first + j * kc];
                }
            }
        }
    });
}

/// Blocks of output rows, one task each: the task writes the im2col rows of its block into
/// its own thread's scratch (still in cache when the GEMM reads them) and runs a one-thread
/// GEMM per group into its rows of `y`. Compared with one im2col matrix for the whole input
/// and one pool-wide GEMM, this never holds `n_out × K·c_in` values (hundreds of MB for
/// Kokoro's generator) and never streams them through memory.
fn grouped_into(spec: &Conv1dSpec, x: &[f32], w: &[f32], bias: Option<&[f32]>, y: &mut [f32], wp: &mut [f32]) {
    let Conv1dSpec { batch, n, c_in, c_out, kernel, groups, .. } = *spec;
    let n_out = spec.n_out();
    let (cin_g, cout_g) = (c_in / groups, c_out / groups);
    let kc = kernel * cin_g;
    pack_filters(spec, w, wp);
    let wp = &*wp;
    let rb = rows_per_block(n_out, kc, rayon::current_num_threads());
    for b in 0..batch {
        let xb = &x[b * n * c_in..(b + 1) * n * c_in];
        let yb = &mut y[b * n_out * c_out..(b + 1) * n_out * c_out];
        yb.par_chunks_mut(rb * c_out).enumerate().for_each(|(blk, yblk)| {
            let t0 = blk * rb;
            let rows = yblk.len() / c_out;
            match bias {
                Some(bv) => yblk.chunks_mut(c_out).for_each(|r| r.copy_from_slice(&bv[..c_out])),
                None => yblk.fill(0.0),
            }
            with_scratch(rows * kc, |col| {
                for g in 0..groups {
                    im2col_rows(spec, xb, g, t0, col);
                    let spec = GemmSpec {
                        m: rows,
                        n: cout_g,
                        k: kc,
                        batch: 1,
                        a: MatLayout::row_major(kc),
                        b: MatLayout::row_major(cout_g).at(g * kc * cout_g),
                        c: MatLayout::row_major(c_out).at(g * cout_g),
                        beta: 1.0,
                    };
                    gemm_raw(&spec, col, wp, yblk, false);
                }
            });
        });
    }
}

/// The im2col rows of group `g` for output rows `t0..t0 + col.len() / kc` of one batch item
/// `xb` (`[n, c_in]`): row `i` holds, tap after tap, the group's `c_in / groups` channels of the
/// input row that tap reads (zeros on padding), so its columns run in (tap, channel) order.
fn im2col_rows(spec: &Conv1dSpec, xb: &[f32], g: usize, t0: usize, col: &mut [f32]) {
    let Conv1dSpec { c_in, kernel, groups, .. } = *spec;
    let cin_g = c_in / groups;
    let kc = kernel * cin_g;
    if kc == 0 {
        return;
    }
    for (i, crow) in col.chunks_mut(kc).enumerate() {
        for k in 0..kernel {
            let dst = &mut crow[k * cin_g..(k + 1) * cin_g];
            match source_row(spec, t0 + i, k) {
                Some(s) => dst.copy_from_slice(&xb[s * c_in + g * cin_g..s * c_in + (g + 1) * cin_g]),
                None => dst.fill(0.0),
            }
        }
    }
}

pub fn conv_transpose1d(spec: &ConvTranspose1dSpec, x: &[f32], w: &[f32], bias: Option<&[f32]>, y: &mut [f32]) {
    let ConvTranspose1dSpec { batch, n, c_in, c_out, groups, .. } = *spec;
    let n_out = spec.n_out();
    if n_out == 0 || c_out == 0 {
        return;
    }
    if let Some(isa) = direct_transposed(spec) {
        return direct::conv_transpose1d_dense(isa, spec, x, direct::TransposedFilters::F32(w), bias, y);
    }
    for b in 0..batch {
        let yb = &mut y[b * n_out * c_out..(b + 1) * n_out * c_out];
        match bias {
            Some(bv) => yb.par_chunks_mut(c_out).for_each(|r| r.copy_from_slice(&bv[..c_out])),
            None => yb.fill(0.0),
        }
    }
    if n == 0 || c_in == 0 {
        return;
    }
    if c_in == groups && c_out == groups {
        return transpose_depthwise(spec, x, w, y);
    }
    transpose_by_gemm(spec, x, w, y)
}

/// The direct kernel's instruction set where it takes this transposed convolution: dense, with
/// rows and input channels, on a CPU and channel counts it tiles ([`direct::applies`]).
fn direct_transposed(spec: &ConvTranspose1dSpec) -> Option<direct::Isa> {
    let ConvTranspose1dSpec { n, c_in, c_out, groups, .. } = *spec;
    if groups != 1 || n == 0 || c_in == 0 {
        return None;
    }
    direct::Isa::detect().filter(|&isa| direct::applies(isa, c_in, c_out))
}

/// [`conv_transpose1d`] with filters given as bf16 bits, where the direct kernel takes it: the
/// filters are widened exactly as they are packed into its panels, so no f32 copy of the whole
/// bank is made. Returns `false`, having touched nothing, where the direct kernel does not take
/// the convolution; the caller then widens the bank for [`conv_transpose1d`].
pub(crate) fn conv_transpose1d_bf16_filters(spec: &ConvTranspose1dSpec, x: &[f32], w: &[u16], bias: Option<&[f32]>, y: &mut [f32]) -> bool {
    let Some(isa) = direct_transposed(spec) else {
        return false;
    };
    direct::conv_transpose1d_dense(isa, spec, x, direct::TransposedFilters::Bf16(w), bias, y);
    true
}

/// A grouped (or, where the direct kernel does not take it, dense) transposed convolution added into `y`, which holds the
/// bias: one GEMM per block of input rows into a column matrix (every input row times every
/// tap), then each output row adds the taps that land on it.
pub(crate) fn transpose_by_gemm(spec: &ConvTranspose1dSpec, x: &[f32], w: &[f32], y: &mut [f32]) {
    let ConvTranspose1dSpec { batch, n, c_in, c_out, kernel, groups, .. } = *spec;
    let n_out = spec.n_out();
    let (cin_g, cout_g) = (c_in / groups, c_out / groups);
    // Weights [c_in, cout_g, K] → per group [cin_g, K·cout_g] in (k, co) column order, so that
    // the column matrix row of input row i holds tap k's outputs as one contiguous run.
    let kc = kernel * cout_g;
    with_shared_scratch(c_in * kc, |wp| {
        wp.par_chunks_mut(kc).enumerate().for_each(|(ci, row)| {
            for co in 0..cout_g {
                for k in 0..kernel {
                    row[k * cout_g + co] = w[(ci * cout_g + co) * kernel + k];
                }
            }
        });
        let wp = &*wp;
        // Blocks of output rows, one task each: the task multiplies just the input rows its
        // block sees (the ⌈kernel/stride⌉ − 1 rows shared with the next block are computed by
        // both) into a column block in its own cache, then gathers. Each output row still sums
        // its taps in ascending input order, so the result does not depend on the blocking.
        let per_input_row = (IM2COL_BLOCK_VALUES / kc.max(1)).max(4);
        let share = n_out.div_ceil(4 * rayon::current_num_threads().max(1));
        let rb = (per_input_row * spec.stride).min(share).max(spec.stride);
        for b in 0..batch {
            let xb = &x[b * n * c_in..(b + 1) * n * c_in];
            let yb = &mut y[b * n_out * c_out..(b + 1) * n_out * c_out];
            yb.par_chunks_mut(rb * c_out).enumerate().for_each(|(blk, yblk)| {
                let o0 = blk * rb;
                let rows = yblk.len() / c_out;
                let Some((lo, hi)) = input_rows(spec, o0, o0 + rows) else { return };
                let m = hi - lo;
                with_scratch(m * kc, |cols| {
                    for g in 0..groups {
                        let spec_g = GemmSpec {
                            m,
                            n: kc,
                            k: cin_g,
                            batch: 1,
                            a: MatLayout::row_major(c_in).at(lo * c_in + g * cin_g),
                            b: MatLayout::row_major(kc).at(g * cin_g * kc),
                            c: MatLayout::row_major(kc),
                            beta: 0.0,
                        };
                        gemm_raw(&spec_g, xb, wp, cols, false);
                        for (r, yrow) in yblk.chunks_mut(c_out).enumerate() {
                            let dst = &mut yrow[g * cout_g..(g + 1) * cout_g];
                            for (i, k) in taps(spec, o0 + r) {
                                let at = (i - lo) * kc + k * cout_g;
                                super::simd::axpy(1.0, &cols[at..at + cout_g], dst);
                            }
                        }
                    }
                });
            });
        }
    });
}

/// The input rows `lo..hi` whose taps land on output rows `o0..o1`, or `None` if none do.
fn input_rows(spec: &ConvTranspose1dSpec, o0: usize, o1: usize) -> Option<(usize, usize)> {
    if o1 <= o0 || spec.n == 0 {
        return None;
    }
    let lo = (o0 + spec.pad + 1).saturating_sub(spec.kernel).div_ceil(spec.stride);
    let hi = ((o1 - 1 + spec.pad) / spec.stride).min(spec.n - 1) + 1;
    (lo < hi).then_some((lo, hi))
}

/// The (input row, tap) pairs that land on output row `o`: `i·stride + k − pad = o`.
fn taps(spec: &ConvTranspose1dSpec, o: usize) -> impl Iterator<Item = (usize, usize)> {
    let (stride, kernel, n) = (spec.stride, spec.kernel, spec.n);
    let p = o + spec.pad;
    // k = p − i·stride must lie in 0..kernel: i ≥ (p − kernel + 1)/stride (rounded up), i ≤ p/stride.
    let lo = (p + 1).saturating_sub(kernel).div_ceil(stride);
    let hi = (p / stride).min(n.saturating_sub(1));
    (lo..=hi).filter(move |_| n > 0).map(move |i| (i, p - i * stride))
}

/// One filter per channel (Kokoro's `pool`: k3 s2, groups = channels): a direct gather,
/// vectorised across channels.
fn transpose_depthwise(spec: &ConvTranspose1dSpec, x: &[f32], w: &[f32], y: &mut [f32]) {
    let ConvTranspose1dSpec { batch, n, c_in: c, kernel, .. } = *spec;
    let n_out = spec.n_out();
    let wt = taps_by_channel(w, c, kernel);
    for b in 0..batch {
        let xb = &x[b * n * c..(b + 1) * n * c];
        let yb = &mut y[b * n_out * c..(b + 1) * n_out * c];
        yb.par_chunks_mut(c).enumerate().for_each(|(o, yrow)| {
            for (i, k) in taps(spec, o) {
                super::simd::gated_add_row(yrow, &xb[i * c..(i + 1) * c], &wt[k * c..(k + 1) * c]);
            }
        });
    }
}
