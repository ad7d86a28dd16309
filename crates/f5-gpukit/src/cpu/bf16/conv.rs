//! Dense 1-D convolution with a bf16 filter bank on AVX-512 BF16 (`vdpbf16ps`).
//!
//! A dense convolution is a sum over taps of GEMMs: `y[t] = bias + Σ_k x[src(t, k)] · W_k`, with
//! `W_k` the `[c_in, c_out]` filter matrix of tap `k`. The micro-kernel here computes an
//! [`MR`]×[`NR`] tile of `y` over all taps at once, reading each tap's A rows straight from a
//! bf16 copy of the input rows: there is no im2col matrix. Per cache-sized block of output rows
//! (one rayon task each) the input rows the block sees are rounded to bf16 pairs once (32
//! values per `vcvtne2ps2bf16`, written with whole-vector stores); a table then gives, per
//! 12-row tile and tap, where each output row's source row lies in that copy, or a zero row
//! where the tap falls on zero padding. A K-tap convolution thus converts each input row
//! about once instead of writing it K times into an f32 im2col and then packing it again.
//!
//! The filters `[c_out, c_in, K]` are packed into panels of [`NR`] output channels,
//! `[K][c_in/2][NR]` dwords of bf16 pairs `(w[co, 2j, k], w[co, 2j+1, k])` — the operand layout
//! `vdpbf16ps` multiplies lane by lane: once at upload where the backend knows the convolution's
//! shape then ([`PackedBf16Filters`], held in that form only), else once per call into scratch
//! reused across calls. An odd `c_in` gets a zero channel appended to the input copy and zero
//! weights, so every tap's channels start on a pair boundary.
//!
//! Arithmetic: the inputs are rounded to bf16 (round to nearest even; `vcvtne2ps2bf16` reads
//! subnormal inputs as zero, which model activations never are), the filters were rounded once
//! at upload, products are summed in f32 over (tap, channel) and the output is `bias + sum` in
//! f32, written once.
//!
//! Only dense convolutions (`groups == 1`: Kokoro's generator and decoder convs) take this path.
//! Grouped and depthwise ones have a handful of taps per output and no GEMM worth the rounding;
//! the backend runs them in f32 (model code should upload those filters with `upload`).

use rayon::prelude::*;

use super::conv_bf16_amx::{self as amx, AmxBf16};
use super::gemm::{Avx512Bf16, MR, NR};
use crate::cpu::conv::{merged_taps, padded_row_len, rows_read, tap_offsets, BlockOutput};
use crate::cpu::lines::LineVec;
use crate::cpu::scratch::{with_scratch, with_scratch_u32, with_scratch_usize, with_shared_scratch_u32};
use crate::cpu::seq::RowPrep;
use crate::spec::Conv1dSpec;

/// The bf16 copy of the input rows one task converts: about this many bytes (plus the taps'
/// reach), so that it and one filter panel (`K·c_in/2·NR` dwords, ≤ 200 KiB for Kokoro's
/// shapes) stay in the core's L2 cache while every panel's tiles read them.
const X_BLOCK_BYTES: usize = 256 * 1024;

/// `y = conv(x, w) + bias` for a dense (`groups == 1`) convolution with bf16 filters `w`
/// (`[c_out, c_in, K]` bf16 bits, or packed at upload). `spec` must have been validated against the operands. With
/// `tiles`, a convolution that [fits](super::conv_bf16_amx::fits) them runs on the AMX kernel
/// (the same operands and packing).
pub(crate) fn conv1d_dense(
    cpu: Avx512Bf16,
    tiles: Option<AmxBf16>,
    spec: &Conv1dSpec,
    x: &[f32],
    w: Bf16Filters<'_>,
    bias: Option<&[f32]>,
    y: &mut [f32],
) {
    let Conv1dSpec { batch, n, c_in, c_out, .. } = *spec;
    let n_out = spec.n_out();
    if n_out == 0 || c_out == 0 {
        return;
    }
    with_packed_filters(cpu, tiles, spec, w, bias, |rows| {
        for b in 0..batch {
            rows.run(
                &x[b * n * c_in..(b + 1) * n * c_in],
                None,
                0,
                BlockOutput::default(),
                &mut y[b * n_out * c_out..(b + 1) * n_out * c_out],
            );
        }
    });
}

/// A dense bf16 convolution whose filters are packed: [`DenseRows::run`] computes any run of
/// one batch item's output rows, so a caller can place runs of rows where it needs them (the
/// transposed convolution writes most of its rows straight into its output).
pub(crate) struct DenseRows<'a> {
    cpu: Avx512Bf16,
    tiles: Option<AmxBf16>,
    spec: &'a Conv1dSpec,
    packed: &'a [u32],
    bias: Option<&'a [f32]>,
    /// Output rows per task.
    rows_per_block: usize,
}

impl DenseRows<'_> {
    /// Output rows `t0..t0 + y.len() / c_out` of the item whose input rows are `xb` (`n·c_in`
    /// values), each input row mapped by `prep` (when given) before it is converted, in
    /// parallel blocks, written to `y` or added to it, with their statistics where `output`
    /// asks ([`BlockOutput`]). Each output's sum does not depend on the blocking, so a row is
    /// the same whichever run computes it.
    pub(crate) fn run(&self, xb: &[f32], prep: Option<RowPrep<'_>>, t0: usize, output: BlockOutput<'_>, y: &mut [f32]) {
        let DenseRows { cpu, spec, packed, bias, .. } = *self;
        let c_out = spec.c_out;
        debug_assert!(xb.len() == spec.n * spec.c_in && y.len().is_multiple_of(c_out) && t0 + y.len() / c_out <= spec.n_out());
        // The statistics' chunks are counted from the item's first row.
        debug_assert!(output.stats.is_none() || t0 == 0, "statistics of a run that starts past row 0");
        let rb = output.block_rows(self.rows_per_block);
        match self.tiles {
            #[cfg(target_arch = "x86_64")]
            Some(tiles) => {
                let convert = |x: &[f32], c_in: usize, row_len: usize, dst: &mut [u32]| convert_rows(cpu, x, c_in, row_len, dst, prep);
                output.for_each_block(y, c_out, rb, |first, out| amx::conv_block(tiles, convert, spec, xb, packed, bias, t0 + first, out));
            }
            #[cfg(not(target_arch = "x86_64"))]
            Some(_) => unreachable!("AMX token off x86-64"),
            None => output.for_each_block(y, c_out, rb, |first, out| conv_block(cpu, spec, xb, packed, bias, prep, t0 + first, out)),
        }
    }
}

/// The filters of a dense bf16 convolution as a caller holds them.
#[derive(Clone, Copy)]
pub(crate) enum Bf16Filters<'a> {
    /// `[c_out, c_in, K]` bf16 bits, packed per call.
    Bits(&'a [u16]),
    /// Packed at upload for the convolution's shape.
    Packed(&'a PackedBf16Filters),
}

impl Bf16Filters<'_> {
    /// Values in the bank, `c_out · c_in · K` for a bank of the convolution's size.
    pub(crate) fn len(&self) -> usize {
        match self {
            Bf16Filters::Bits(w) => w.len(),
            Bf16Filters::Packed(p) => p.len(),
        }
    }
}

/// The kernel a dense bf16 convolution runs on and its panels' pairs per tap: the AMX tiles
/// where they are given and [fit](super::conv_bf16_amx::fits) the convolution, their panels
/// padded with zero pairs to whole 16-pair steps; else AVX-512 BF16 over `⌈c_in/2⌉` pairs.
fn panel_layout(spec: &Conv1dSpec, tiles: Option<AmxBf16>) -> (Option<AmxBf16>, usize) {
    let tiles = tiles.filter(|_| amx::fits(spec));
    let pairs = if tiles.is_some() { amx::padded_pairs(spec.c_in) } else { spec.c_in.div_ceil(2) };
    (tiles, pairs)
}

/// A dense convolution's bf16 filters packed once, at upload, as [`with_packed_filters`] would
/// pack them on every call (the same panels, for the kernel the backend runs), and held in that
/// form only: the bf16 bank's bytes, plus the padding to whole panels. On a short input the
/// per-call packing of a 1,024-channel bank cost about as much as the convolution itself.
#[derive(Clone, Debug)]
pub(crate) struct PackedBf16Filters {
    /// `(c_out, c_in, kernel)` the bank was packed for.
    shape: (usize, usize, usize),
    /// Pairs per tap in a panel (see [`panel_layout`]).
    pairs: usize,
    /// On a cache line, as the per-call scratch is: the kernels load a line of it per vector.
    panels: LineVec<u32>,
}

impl PackedBf16Filters {
    /// Packs the bf16 filters `w` (`[c_out, c_in, K]` bits, `spec`'s size, `groups == 1`) for
    /// the kernel a convolution of `spec` runs on with `tiles`, on the current rayon pool.
    pub(crate) fn pack(spec: &Conv1dSpec, tiles: Option<AmxBf16>, w: &[u16]) -> Self {
        let Conv1dSpec { c_in, c_out, kernel, .. } = *spec;
        debug_assert!(spec.groups == 1 && w.len() == c_out * c_in * kernel, "a dense bank of the spec's size");
        let (_, pairs) = panel_layout(spec, tiles);
        let panel_len = kernel * pairs * NR;
        let mut panels = LineVec::zeroed(c_out.div_ceil(NR) * panel_len);
        panels.par_chunks_mut(panel_len.max(1)).enumerate().for_each(|(jp, panel)| pack_filters(spec, w, jp * NR, pairs, panel));
        PackedBf16Filters { shape: (c_out, c_in, kernel), pairs, panels }
    }

    /// Values in the bank: `c_out · c_in · kernel`.
    pub(crate) fn len(&self) -> usize {
        self.shape.0 * self.shape.1 * self.shape.2
    }

    /// Whether this bank was packed for the filters of the dense convolution `spec`.
    pub(crate) fn fits(&self, spec: &Conv1dSpec) -> bool {
        spec.groups == 1 && self.shape == (spec.c_out, spec.c_in, spec.kernel)
    }

    /// The bf16 bits of values `offset..offset + out.len()` of the `[c_out, c_in, K]` bank
    /// (within [`PackedBf16Filters::len`]).
    pub(crate) fn bits_into(&self, offset: usize, out: &mut [u16]) {
        let (_, c_in, kernel) = self.shape;
        let panel_len = kernel * self.pairs * NR;
        for (e, o) in (offset..).zip(out.iter_mut()) {
            let (co, ci, k) = (e / (c_in * kernel), e / kernel % c_in, e % kernel);
            let dword = self.panels[co / NR * panel_len + (k * self.pairs + ci / 2) * NR + co % NR];
            *o = (dword >> (16 * (ci % 2))) as u16;
        }
    }
}

/// Runs `body` with the packed filters of a dense convolution (on the AMX kernel where `tiles`
/// is given and the convolution [fits](super::conv_bf16_amx::fits) them): a bank packed at
/// upload for this shape and kernel as it is, bf16 bits packed now into scratch reused across
/// calls. `spec` must have been validated against `w` and `bias`.
pub(crate) fn with_packed_filters<R>(
    cpu: Avx512Bf16,
    tiles: Option<AmxBf16>,
    spec: &Conv1dSpec,
    w: Bf16Filters<'_>,
    bias: Option<&[f32]>,
    body: impl FnOnce(&DenseRows<'_>) -> R,
) -> R {
    debug_assert_eq!(spec.groups, 1, "the bf16 convolution takes dense convolutions only");
    let Conv1dSpec { c_out, kernel, .. } = *spec;
    let (tiles, pairs) = panel_layout(spec, tiles);
    let rows_per_block = rows_per_block(spec, rayon::current_num_threads(), if tiles.is_some() { amx::MR } else { MR });
    let bits = match w {
        Bf16Filters::Packed(p) if p.fits(spec) && p.pairs == pairs => {
            return body(&DenseRows { cpu, tiles, spec, packed: &p.panels, bias, rows_per_block });
        }
        Bf16Filters::Packed(p) => {
            // Packed for another kernel (not one this backend runs): unpacked, then packed
            // as bits are.
            let mut bits = vec![0u16; p.len()];
            p.bits_into(0, &mut bits);
            std::borrow::Cow::Owned(bits)
        }
        Bf16Filters::Bits(w) => std::borrow::Cow::Borrowed(w),
    };
    let panel_len = kernel * pairs * NR;
    let panels = c_out.div_ceil(NR);
    with_shared_scratch_u32(panels * panel_len, |packed| {
        packed.par_chunks_mut(panel_len.max(1)).enumerate().for_each(|(jp, panel)| pack_filters(spec, &bits, jp * NR, pairs, panel));
        body(&DenseRows { cpu, tiles, spec, packed, bias, rows_per_block })
    })
}

/// Output rows per task: a multiple of `multiple` (whole tiles) whose input rows fit
/// [`X_BLOCK_BYTES`] as bf16, and few enough that every thread gets about four blocks.
fn rows_per_block(spec: &Conv1dSpec, threads: usize, multiple: usize) -> usize {
    let row_bytes = 4 * spec.c_in.div_ceil(2).max(1);
    let reach = spec.dilation * spec.kernel.saturating_sub(1);
    let fit = (X_BLOCK_BYTES / row_bytes).saturating_sub(reach) / spec.stride.max(1);
    let share = spec.n_out().div_ceil(4 * threads.max(1));
    fit.min(share).div_ceil(multiple).max(1) * multiple
}

/// Input channel pairs [`pack_filters`] handles at a time: the 32 filters' values for them (and
/// every tap) stay in L1 while each tap's `[pairs][NR]` rows are written front to back.
const PACK_PAIR_BLOCK: usize = 16;

/// Output channels `j0..j0 + NR` of the filters `[c_out, c_in, K]` as `[K][pairs][NR]` dwords
/// of bf16 pairs `(w[co, 2j, k], w[co, 2j + 1, k])`; channels past `c_out`, the half pair past
/// an odd `c_in` and the pairs past `⌈c_in/2⌉` (up to `pairs`, the AMX kernel's padding) are
/// zero. Every dword of `panel` is written.
///
/// Written in the panel's order, a block of [`PACK_PAIR_BLOCK`] pairs at a time (the 32
/// filters' values for it stay in L1): filling the panel filter by filter wrote one dword per
/// 128-byte panel row, a fresh cache line for every value, and cost more than the tile products
/// on a few-row convolution. `conv_time` on a Xeon with AMX, three alternated rounds, bf16
/// GFLOP/s: 1,024 channels k3 × 153 rows 275–334 → 376–531, 512 channels 300–346 → 435–588.
fn pack_filters(spec: &Conv1dSpec, w: &[u16], j0: usize, pairs: usize, panel: &mut [u32]) {
    let Conv1dSpec { c_in, c_out, kernel, .. } = *spec;
    let real_pairs = c_in.div_ceil(2);
    debug_assert!(pairs >= real_pairs && panel.len() >= kernel * pairs * NR);
    let per_filter = c_in * kernel;
    // The filters this panel has (`width` of them, `per_filter` values each from `first`); the
    // columns past them are zero.
    let width = c_out.saturating_sub(j0).min(NR);
    let first = j0 * per_filter;
    let filters = &w[first..first + width * per_filter];
    for k in 0..kernel {
        panel[(k * pairs + real_pairs) * NR..(k + 1) * pairs * NR].fill(0);
    }
    for jb in (0..real_pairs).step_by(PACK_PAIR_BLOCK) {
        let block = jb..(jb + PACK_PAIR_BLOCK).min(real_pairs);
        for k in 0..kernel {
            for j in block.clone() {
                let (row, zero) = panel[(k * pairs + j) * NR..(k * pairs + j + 1) * NR].split_at_mut(width);
                zero.fill(0);
                // The taps of channels 2j and 2j + 1 are contiguous in each filter; an odd
                // c_in has no channel 2j + 1 in its last pair.
                let lo = 2 * j * kernel + k;
                if 2 * j + 1 < c_in {
                    let hi = lo + kernel;
                    for (dst, f) in row.iter_mut().zip(filters.chunks_exact(per_filter)) {
                        *dst = f[lo] as u32 | (f[hi] as u32) << 16;
                    }
                } else {
                    for (dst, f) in row.iter_mut().zip(filters.chunks_exact(per_filter)) {
                        *dst = f[lo] as u32;
                    }
                }
            }
        }
    }
}

/// Output rows `t0..t0 + yblk.len() / c_out` of one batch item: converts the input rows they
/// read to bf16 pairs, tabulates each tile's source rows, and runs the tile kernel over every
/// filter panel (outer: one panel stays in L2) and tile (inner).
#[allow(clippy::too_many_arguments)]
fn conv_block(
    cpu: Avx512Bf16,
    spec: &Conv1dSpec,
    xb: &[f32],
    packed: &[u32],
    bias: Option<&[f32]>,
    prep: Option<RowPrep<'_>>,
    t0: usize,
    yblk: &mut [f32],
) {
    let Conv1dSpec { c_in, c_out, kernel, .. } = *spec;
    let rows = yblk.len() / c_out;
    let tiles = rows.div_ceil(MR);
    let pairs = c_in.div_ceil(2);
    // The input rows this block reads: lo..hi (empty if every tap falls on padding).
    let (lo, hi) = rows_read(spec, t0, rows);
    // Rows padded so that a tile's rows do not share one L1 set (see `padded_row_len`).
    let row_len = padded_row_len(pairs);
    // The converted rows, then one zero row that padding taps (and rows past the block) read.
    let zero_row = (hi - lo) * row_len;
    with_scratch_u32(zero_row + row_len, |xq| {
        convert_rows(cpu, &xb[lo * c_in..hi * c_in], c_in, row_len, &mut xq[..zero_row], prep);
        xq[zero_row..].fill(0);
        let xq = &*xq;
        // Per tile, per tap, per row: where that row's source row starts in `xq`.
        with_scratch_usize(tiles * kernel * MR, |offsets| {
            tap_offsets(spec, t0, rows, MR, lo, row_len, zero_row, offsets);
            let offsets = &*offsets;
            let panel_len = kernel * pairs * NR;
            for jp in 0..c_out.div_ceil(NR) {
                let (j0, cols) = (jp * NR, (c_out - jp * NR).min(NR));
                let panel = &packed[jp * panel_len..(jp + 1) * panel_len];
                let bias = bias.map(|b| &b[j0..j0 + cols]);
                for ti in 0..tiles {
                    let r0 = ti * MR;
                    let tile_rows = (rows - r0).min(MR);
                    let out = &mut yblk[r0 * c_out + j0..(r0 + tile_rows - 1) * c_out + j0 + cols];
                    let offs = &offsets[ti * kernel * MR..(ti + 1) * kernel * MR];
                    let tile = if merged_taps(offs, MR, pairs, row_len) {
                        Tile { taps: 1, pairs: kernel * pairs, offsets: &offs[..MR] }
                    } else {
                        Tile { taps: kernel, pairs, offsets: offs }
                    };
                    tile_kernel(cpu, &tile, xq, panel, bias, out, c_out, tile_rows);
                }
            }
        });
    });
}

/// Where one tile's A operand lies: `offsets[k·MR + r]` is the start, in the bf16 input copy,
/// of the `pairs` dwords that row `r` reads at tap `k`.
struct Tile<'a> {
    taps: usize,
    pairs: usize,
    offsets: &'a [usize],
}

/// Rounds the rows `x` (`c_in` values each) to bf16 pairs: row `i` of `dst` (a stride of
/// `row_len` dwords) starts with `c_in/2` dwords (the high half of the last one zero when
/// `c_in` is odd); the rest of the stride is left as it was. With `prep`, each row is first
/// mapped by it (into an L1-sized scratch row) and the mapped row is what is rounded.
fn convert_rows(cpu: Avx512Bf16, x: &[f32], c_in: usize, row_len: usize, dst: &mut [u32], prep: Option<RowPrep<'_>>) {
    let pairs = c_in.div_ceil(2);
    if c_in == 0 {
        return;
    }
    let rows = x.len() / c_in;
    assert!(row_len >= pairs && dst.len() == rows * row_len && x.len() == rows * c_in, "converted rows do not match their source");
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `cpu` proves AVX-512 F and BF16; the lengths are checked above (a mapped row is
    // `c_in` floats, converted into its own `row_len` dwords).
    unsafe {
        let _ = cpu;
        match prep {
            None => x86::convert_rows(x.as_ptr(), rows, c_in, row_len, dst.as_mut_ptr()),
            Some(prep) => with_scratch(c_in, |mapped| {
                for (row, out) in x.chunks_exact(c_in).zip(dst.chunks_exact_mut(row_len)) {
                    prep(row, mapped);
                    x86::convert_rows(mapped.as_ptr(), 1, c_in, row_len, out.as_mut_ptr());
                }
            }),
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (cpu, dst, prep);
        unreachable!("AVX-512 BF16 token off x86-64")
    }
}

/// `out[r·ldy + j] = bias[j] + Σ_k Σ_p A(r, k, p) · B(k, p, j)` for rows `r < rows` and columns
/// `j < out`'s width in this panel (`bias.len()` when given, else up to [`NR`]), A read from
/// `xq` at the tile's offsets, B the packed panel `[K][pairs][NR]`.
#[allow(clippy::too_many_arguments)]
fn tile_kernel(
    cpu: Avx512Bf16,
    tile: &Tile<'_>,
    xq: &[u32],
    panel: &[u32],
    bias: Option<&[f32]>,
    out: &mut [f32],
    ldy: usize,
    rows: usize,
) {
    let Tile { taps, pairs, offsets } = *tile;
    // The tile's width: `out` spans (rows − 1) whole strides plus the width.
    assert!((1..=MR).contains(&rows), "tile rows");
    let width = out.len().saturating_sub((rows - 1) * ldy);
    assert!((1..=NR).contains(&width) && out.len() == (rows - 1) * ldy + width, "tile shape");
    assert!(bias.is_none_or(|b| b.len() == width), "bias width");
    assert!(offsets.len() == taps * MR && offsets.iter().all(|&o| o + pairs <= xq.len()), "A offsets outside the input copy");
    assert!(panel.len() >= taps * pairs * NR, "filter panel too short");
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `cpu` proves AVX-512 F and BF16; every A read lies at an offset checked above, B
    // reads within `taps·pairs·NR`, and the stores within `out` (its shape checked above).
    unsafe {
        let _ = cpu;
        let bias = bias.map_or(std::ptr::null(), |b| b.as_ptr());
        x86::tile_kernel(taps, pairs, xq.as_ptr(), offsets.as_ptr(), panel.as_ptr(), bias, out.as_mut_ptr(), ldy, rows, width);
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (cpu, xq, panel, out);
        unreachable!("AVX-512 BF16 token off x86-64")
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

    /// # Safety
    /// AVX-512 F and BF16 present; `x` holds `rows·c_in` floats, `dst` `rows·row_len` dwords,
    /// `row_len ≥ ⌈c_in/2⌉`.
    #[target_feature(enable = "avx512f,avx512bf16")]
    pub(super) unsafe fn convert_rows(x: *const f32, rows: usize, c_in: usize, row_len: usize, dst: *mut u32) {
        for i in 0..rows {
            // SAFETY (whole block): every access lies in row i of x or dst; masked loads and
            // stores touch only their enabled lanes.
            unsafe {
                let (src, out) = (x.add(i * c_in), dst.add(i * row_len));
                let mut c = 0;
                while c + 32 <= c_in {
                    let lo = _mm512_loadu_ps(src.add(c));
                    let hi = _mm512_loadu_ps(src.add(c + 16));
                    // Low half from `lo`, high half from `hi`: dword i is the pair (2i, 2i + 1).
                    _mm512_storeu_si512(
                        out.add(c / 2) as *mut __m512i,
                        std::mem::transmute::<__m512bh, __m512i>(_mm512_cvtne2ps_pbh(hi, lo)),
                    );
                    c += 32;
                }
                if c < c_in {
                    let left = c_in - c;
                    let lo = _mm512_maskz_loadu_ps(lanes(left), src.add(c));
                    let hi = _mm512_maskz_loadu_ps(lanes(left.saturating_sub(16)), src.wrapping_add(c + 16));
                    let words = std::mem::transmute::<__m512bh, __m512i>(_mm512_cvtne2ps_pbh(hi, lo));
                    _mm512_mask_storeu_epi32(out.add(c / 2) as *mut i32, lanes(left.div_ceil(2)), words);
                }
            }
        }
    }

    /// The `MR`×`NR` tile over all taps: per pair, two B vectors and one broadcast A pair per
    /// row feed `vdpbf16ps`, 24 accumulators held in registers; then `bias + acc` is stored.
    ///
    /// # Safety
    /// AVX-512 F and BF16 present; `offsets` holds `taps·MR` entries `o` with `o + pairs` dwords
    /// inside `xq`; `b` holds `taps·pairs·NR` dwords; `bias` is null or holds `width` floats;
    /// `out` holds `(rows − 1)·ldy + width` floats, `1 ≤ rows ≤ MR`, `1 ≤ width ≤ NR`.
    #[target_feature(enable = "avx512f,avx512bf16")]
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn tile_kernel(
        taps: usize,
        pairs: usize,
        xq: *const u32,
        offsets: *const usize,
        b: *const u32,
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
                let a: [*const u32; MR] = std::array::from_fn(|r| xq.add(*offsets.add(k * MR + r)));
                let bk = b.add(k * pairs * NR);
                for p in 0..pairs {
                    let bp = bk.add(p * NR);
                    let b0: __m512bh = std::mem::transmute(_mm512_loadu_si512(bp as *const __m512i));
                    let b1: __m512bh = std::mem::transmute(_mm512_loadu_si512(bp.add(16) as *const __m512i));
                    for (row, ar) in acc.iter_mut().zip(a) {
                        let pair: __m512bh = std::mem::transmute(_mm512_set1_epi32(*ar.add(p) as i32));
                        row[0] = _mm512_dpbf16_ps(row[0], pair, b0);
                        row[1] = _mm512_dpbf16_ps(row[1], pair, b1);
                    }
                }
            }
        }
        let (m0, m1) = (super::x86::lanes(width), super::x86::lanes(width.saturating_sub(16)));
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
}

#[cfg(test)]
#[path = "conv_tests.rs"]
pub(super) mod tests;
