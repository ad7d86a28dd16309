//! Dense 1-D convolution of wide kernels by FFT (overlap-save), in f32.
//!
//! Directly, a `K`-tap convolution costs `K·c_in·c_out` multiply-adds per output row. Over a
//! tile of [`TILE`] = 64 input rows the DFT turns it into one complex product per frequency:
//! [`BINS`] = 33 bins of `c_in·c_out` complex multiply-adds (three real ones each, [`PARTS`]) for
//! the tile's `65 − K` valid outputs, `99 / (65 − K)·c_in·c_out` per row: 1.8 against 11 for
//! `K = 11` and 1.7 against 7 for `K = 7`. Kokoro's generator spends most of its time in such convolutions
//! (`K` = 7 and 11 over 128 and 256 channels), already at the f32 FMA roof when run directly, so
//! fewer multiplications is what is left to gain there.
//!
//! The work, per chunk of tiles:
//! 1. each tile's spectrum: a radix-2 FFT whose every butterfly is a loop over channels (the
//!    channels-last rows stay rows), with the two halves of the channels packed as the real and
//!    imaginary parts of one complex transform — a real signal's spectrum is Hermitian, so both
//!    halves' spectra come apart from one transform;
//! 2. per bin, three real GEMMs over every tile of the chunk (Gauss's products, [`PARTS`]):
//!    each tile's `Re U + Im U`, `Re U` and `Im U` rows times `Re W`, `Im W − Re W` and
//!    `Re W + Im W` (`tiles × c_in` by `c_in × c_out`), where `W` is the filters' spectrum,
//!    computed once per call (on a call of one chunk, bin by bin just before each bin's
//!    products, so it is never held whole); the three products pair up into `U·W` in step 3;
//! 3. each tile's inverse transform (the output channels' halves packed the same way), whose
//!    first `65 − K` rows are outputs, plus the bias.
//!
//! Each tile's spectrum and products are one contiguous block (`[tile][part][bin][channels]`),
//! the GEMMs reading and writing their rows a block apart: steps 1 and 3 then write and stream
//! one block per tile, where a bin-major layout had them scatter and gather 33 rows over the
//! chunk (those two steps took a third of the path's time).
//!
//! A dilated convolution is `d` undilated ones over the input's `d` interleaved phases (the rows
//! `≡ r mod d`), so each tile reads every `d`-th row and its outputs land every `d`-th row.
//!
//! Numerics: the FFTs' roundings are relative to a tile's norm rather than to each output's
//! terms, so an output much smaller than its neighbours carries a larger relative error than the
//! direct sum's; over whole signals the relative L2 error measured 2–3e-7 (the tests bound it).
//! Gauss's products round each operand once more (`Re U + Im U`, `Im W − Re W`, `Re W + Im W`):
//! 2.1–2.9e-7 against 1.8–2.3e-7 with four products.

use rayon::prelude::*;

use super::super::scratch::{with_scratch, with_shared_scratch};
use super::tiled::{for_each_chunk, Around, SharedOut};
use crate::cpu::seq::RowPrep;
use crate::cpu::simd::dispatch;
use crate::spec::{Conv1dSpec, GemmSpec, MatLayout, PadMode};

/// Input rows per tile: a power of two, the FFT's length.
pub(crate) const TILE: usize = 64;
/// Frequencies of a real tile's spectrum that are not conjugates of others: `0..=TILE / 2`.
const BINS: usize = TILE / 2 + 1;
/// Real products per complex one in each bin's products `U·W`, and so operand parts per bin:
/// Gauss's three (for `(a + ib)(c + id)`: `k1 = (a + b)·c`, `k2 = a·(d − c)`, `k3 = b·(c + d)`,
/// the real part `k1 − k3` and the imaginary part `k1 + k2`), a quarter fewer multiplications
/// than the schoolbook four, for a filter spectrum half as large again and a rounding more on
/// each operand. Measured against the four products (in one GEMM per bin, `[Re U; Im U]` times
/// `[Re W | Im W]`) on Kokoro's k7 shapes, 55 to 700 tiles of 128 and 256 channels: 1.06–1.11×.
const PARTS: usize = 3;

/// Widest kernel taken: at least 32 valid outputs per tile.
const MAX_KERNEL: usize = TILE / 2 + 1;
/// Spectrum values held per chunk (input and output spectra together, 16 MB), unless that is
/// fewer than [`MIN_CHUNK_TILES`] tiles: bounds the scratch on long inputs while keeping each
/// bin's GEMMs over 160+ tiles, so its filters are reused (chunks of 2 and 4 MB measured 5–20%
/// slower on 128 channels, 8 MB about the same).
const CHUNK_VALUES: usize = 1 << 22;
/// Fewest tiles per chunk: each chunk reads the whole filter spectrum (26 MB at 256 × 256
/// channels, more than a 2-core VM's share of L3), once per bin GEMM over the chunk's tiles, so
/// with too few tiles that read is what bounds the products. At 256 channels 16 MB holds 82
/// tiles; 160 (32 MB) measured 1.17–1.22× on `conv_time`'s 256-channel k7/k11 shapes on a Zen 2
/// EPYC, and more the same again. At 128 channels 16 MB already holds 165.
const MIN_CHUNK_TILES: usize = 160;

/// The spectrum values per chunk for `spec`: [`CHUNK_VALUES`], or [`MIN_CHUNK_TILES`] tiles.
fn chunk_values(spec: &Conv1dSpec) -> usize {
    CHUNK_VALUES.max(MIN_CHUNK_TILES * BINS * PARTS * (spec.c_in + spec.c_out))
}

/// How a call makes the filters' spectrum.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum FilterSpectrum {
    /// Whole, once per call, before the first chunk: every chunk's GEMMs read it. (Calls of
    /// several chunks make it so under either choice; the tests ask for it on one chunk too.)
    #[cfg_attr(not(test), allow(dead_code))]
    Whole,
    /// Where the call is a single chunk (a sentence's every 256-channel convolution), bin by
    /// bin, each into a task's scratch just before that bin's GEMMs: those GEMMs are its only
    /// readers, so it is read from cache, not written to memory and read back, and the scratch
    /// holds one bin (0.8 MB at 256 × 256 channels) where the whole is 26 MB, the largest scratch
    /// buffer of Kokoro's forward on a sentence. Several chunks make it whole.
    PerBinOnOneChunk,
}

/// Most filter pairs (`c_in·c_out`) taken: their spectrum, `3·BINS·c_in·c_out` floats (26 MB at
/// 256 × 256), is made per call and, on a call of several chunks, held whole in scratch kept for
/// the next, so past this it would cost more memory than the weights by far (20× a 5-tap
/// filter's size) for a small gain: at 512 × 512 (Kokoro's text encoder) 104 MB.
const MAX_FILTER_PAIRS: usize = 256 * 256;

/// Whether [`conv1d_fft`] computes `spec` (and pays): dense, stride 1, zero padding, a kernel of
/// 5 taps or more, even channel counts (the halves pair up), at most [`MAX_FILTER_PAIRS`], and
/// enough output rows ([`suits_shape`] and [`long_enough`], which the backends ask apart).
#[cfg(test)]
pub(crate) fn suits(spec: &Conv1dSpec) -> bool {
    suits_shape(spec) && long_enough(spec)
}

/// Whether `spec`'s output fills at least one tile column of every phase.
pub(crate) fn long_enough(spec: &Conv1dSpec) -> bool {
    spec.n_out() >= TILE * spec.dilation
}

/// Whether [`suits`] holds for `spec`'s shape at some input length: everything but the length.
pub(crate) fn suits_shape(spec: &Conv1dSpec) -> bool {
    let Conv1dSpec { c_in, c_out, kernel, groups, stride, dilation, .. } = *spec;
    groups == 1
        && stride == 1
        && dilation >= 1
        && spec.pad_mode == PadMode::Zeros
        && (5..=MAX_KERNEL).contains(&kernel)
        && c_in >= 32
        && c_out >= 32
        && c_in % 2 == 0
        && c_out % 2 == 0
        && c_in * c_out <= MAX_FILTER_PAIRS
}

/// Whether the FFT path is on: `F5_CPU_FFT_CONV=off` (or `0`) keeps every dense convolution on
/// the direct and im2col paths for the process, to compare the two on the same machine.
pub(crate) fn enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| !std::env::var("F5_CPU_FFT_CONV").is_ok_and(|v| v == "off" || v == "0"))
}

/// `e^{−2πik/TILE}` for `k < TILE / 2`: the forward transform's twiddles (the inverse takes
/// their conjugates), rounded once from f64.
fn twiddles() -> ([f32; TILE / 2], [f32; TILE / 2]) {
    let (mut re, mut im) = ([0.0f32; TILE / 2], [0.0f32; TILE / 2]);
    for k in 0..TILE / 2 {
        let a = -2.0 * std::f64::consts::PI * k as f64 / TILE as f64;
        re[k] = a.cos() as f32;
        im[k] = a.sin() as f32;
    }
    (re, im)
}

/// Where row `m` of a tile sits after the FFT's input permutation.
#[inline]
fn bit_reversed(m: usize) -> usize {
    ((m as u32).reverse_bits() >> (32 - TILE.trailing_zeros())) as usize
}

/// `y = conv(x, w) + bias` for a spec that [`suits`]; `x [batch, n, c_in]`, `w [c_out, c_in, K]`
/// (PyTorch's layout), `y [batch, n_out, c_out]`.
pub(crate) fn conv1d_fft(spec: &Conv1dSpec, x: &[f32], w: &[f32], bias: Option<&[f32]>, y: &mut [f32]) {
    conv1d_in_chunks(spec, x, w, bias, y, Around::default(), chunk_values(spec), FilterSpectrum::PerBinOnOneChunk);
}

/// [`conv1d_fft`] with its input rows mapped and its outputs added, as `around` says: so an
/// instance norm + Snake + convolution + residual step reads its input once for the
/// statistics and once here, and writes only `y`, where the three ops apart write and read
/// two more activations.
pub(crate) fn conv1d_fft_around(spec: &Conv1dSpec, x: &[f32], w: &[f32], bias: Option<&[f32]>, y: &mut [f32], around: Around<'_>) {
    conv1d_in_chunks(spec, x, w, bias, y, around, chunk_values(spec), FilterSpectrum::PerBinOnOneChunk);
}

/// [`conv1d_fft_around`] with at most `chunk_values` spectrum values per chunk (at least one
/// tile column's), so the tests can cross chunk boundaries on small inputs, and the filters'
/// spectrum made as `spectrum` says.
#[allow(clippy::too_many_arguments)]
fn conv1d_in_chunks(
    spec: &Conv1dSpec,
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    y: &mut [f32],
    around: Around<'_>,
    chunk_values: usize,
    spectrum: FilterSpectrum,
) {
    let Conv1dSpec { c_in, c_out, kernel, dilation: d, .. } = *spec;
    let n_out = spec.n_out();
    if n_out == 0 || c_out == 0 {
        return;
    }
    let valid = TILE - kernel + 1;
    // Tile columns: column j holds each phase's outputs j·valid .. (j + 1)·valid, which are the
    // output rows d·valid·j .. d·valid·(j + 1).
    let columns = n_out.div_ceil(d).div_ceil(valid);
    let per_tile = BINS * PARTS * (c_in + c_out);
    let chunk_columns = (chunk_values / (per_tile * d)).clamp(1, columns);
    let tw = twiddles();
    let per_bin = c_in * PARTS * c_out;
    let per_bin_spectrum = spectrum == FilterSpectrum::PerBinOnOneChunk && spec.batch == 1 && chunk_columns == columns;
    // The whole spectrum, or every input channel's taps as rows over the output channels, which
    // each bin's spectrum is made from.
    let held = if per_bin_spectrum { c_in * kernel * c_out } else { BINS * per_bin };
    with_shared_scratch(held, |wspec| {
        if per_bin_spectrum {
            wspec.par_chunks_mut(SPECTRUM_CHANNELS * kernel * c_out).enumerate().for_each(|(blk, taps)| {
                let ci0 = blk * SPECTRUM_CHANNELS;
                transpose_taps(&w[ci0 * kernel..], c_in * kernel, taps.len() / c_out, taps);
            });
        } else {
            filter_spectrum(spec, w, wspec);
        }
        let wspec = &*wspec;
        let chunk_tiles = chunk_columns * d;
        with_shared_scratch(chunk_tiles * per_tile, |spectra| {
            let (s_in, s_out) = spectra.split_at_mut(chunk_tiles * BINS * PARTS * c_in);
            for_each_chunk(spec, x, y, columns, chunk_columns, |b, xb, yb, j0, j1| {
                let tiles = (j1 - j0) * d;
                // 1. Input spectra, `[tile][Re + Im | Re | Im][bin][c_in]`: each tile's spectrum
                //    one contiguous block, written in place by its task.
                let s_in = &mut s_in[..tiles * BINS * PARTS * c_in];
                s_in.par_chunks_mut(BINS * PARTS * c_in).enumerate().for_each(|(i, block)| {
                    let (j, r) = (j0 + i / d, i % d);
                    let prep = around.prep.map(|p| move |row: &[f32], out: &mut [f32]| p(b, row, out));
                    let prep = prep.as_ref().map(|p| p as RowPrep<'_>);
                    with_scratch(TILE * c_in + c_in, |work| input_spectrum(spec, xb, r, j * valid, &tw, prep, work, block));
                });
                // 2. Per bin and part, every tile's row of that part (`tiles` rows, one tile
                //    block apart) times the filters' matching part, into `[tile][k1 | k2 | k3]
                //    [bin][c_out]`: each tile's products again one contiguous block, which step 3
                //    streams through instead of gathering rows spread over the chunk.
                //    With the spectrum made per bin, one task a bin: its operands into the
                //    task's scratch, then its three products.
                let s_in = &*s_in;
                let s_out = &mut s_out[..tiles * BINS * PARTS * c_out];
                let dst = SharedOut(s_out.as_mut_ptr(), s_out.len());
                let product = |f: usize, part: usize, operands: &[f32], at: usize| {
                    let g = GemmSpec {
                        m: tiles,
                        n: c_out,
                        k: c_in,
                        batch: 1,
                        a: MatLayout::row_major(PARTS * BINS * c_in).at((part * BINS + f) * c_in),
                        b: MatLayout::row_major(PARTS * c_out).at(at + part * c_out),
                        c: MatLayout::row_major(PARTS * BINS * c_out).at((part * BINS + f) * c_out),
                        beta: 0.0,
                    };
                    // SAFETY: the spec addresses `tiles` rows of `c_out` values, one tile block
                    // apart from (part, bin)'s offset, inside `s_out` ([`SharedOut::gemm`]
                    // checks) and disjoint from every other task's; A and B are other buffers.
                    unsafe { dst.gemm(&g, s_in, operands) };
                };
                if per_bin_spectrum {
                    let coefficients = spectrum_coefficients(kernel);
                    (0..BINS).into_par_iter().for_each(|f| {
                        with_scratch(per_bin, |operands| {
                            bin_operands(spec, wspec, &coefficients, f, operands);
                            (0..PARTS).for_each(|part| product(f, part, operands, 0));
                        })
                    });
                } else {
                    (0..BINS * PARTS).into_par_iter().for_each(|task| {
                        let f = task / PARTS;
                        product(f, task % PARTS, wspec, f * per_bin);
                    });
                }
                // 3. Inverse transforms, one tile column (all d phases: whole output rows) each.
                let s_out = &*s_out;
                let rows0 = j0 * valid * d;
                let rows1 = (j1 * valid * d).min(n_out);
                yb[rows0 * c_out..rows1 * c_out].par_chunks_mut(valid * d * c_out).enumerate().for_each(|(jj, rows)| {
                    with_scratch(TILE * c_out, |work| {
                        for r in 0..d {
                            let tile = jj * d + r;
                            output_tile(s_out, tile, c_out, &tw, work);
                            // Phase r's outputs in this column: rows r, r + d, … of `rows`.
                            let (re, im) = work.split_at(TILE * (c_out / 2));
                            store_phase_rows(re, im, rows, (r, d), valid, bias.map(|bv| &bv[..c_out]), around.accumulate);
                        }
                    });
                });
            });
        });
    });
}

/// Input channels per task of [`filter_spectrum`]: their filters (`16·K·c_out` values) stay in
/// cache while all the bins are computed from them.
const SPECTRUM_CHANNELS: usize = 16;

/// Per bin and tap, the filter spectrum's coefficients: cosines, then sines.
type Coefficients = ([[f32; MAX_KERNEL]; BINS], [[f32; MAX_KERNEL]; BINS]);

/// `e^{+2πifk/TILE} / TILE` for every bin `f` and tap `k < kernel`, as cosines and sines, each
/// rounded once from f64: the filter spectrum's coefficients.
fn spectrum_coefficients(kernel: usize) -> Coefficients {
    let mut cos = [[0.0f32; MAX_KERNEL]; BINS];
    let mut sin = [[0.0f32; MAX_KERNEL]; BINS];
    for f in 0..BINS {
        for k in 0..kernel {
            // f·k mod TILE keeps the angle exact before the f64 trigonometry.
            let a = 2.0 * std::f64::consts::PI * ((f * k) % TILE) as f64 / TILE as f64;
            cos[f][k] = (a.cos() / TILE as f64) as f32;
            sin[f][k] = (a.sin() / TILE as f64) as f32;
        }
    }
    (cos, sin)
}

/// Bin `f`'s GEMM operands (as [`filter_spectrum`] makes each bin's, the same values) into
/// `out` (`c_in × 3c_out`), from every input channel's taps as rows over the output channels
/// (`taps`: `[c_in][kernel][c_out]`, [`transpose_taps`]).
/// `coefficients` are [`spectrum_coefficients`]'s.
fn bin_operands(spec: &Conv1dSpec, taps: &[f32], coefficients: &Coefficients, f: usize, out: &mut [f32]) {
    let Conv1dSpec { c_in, c_out, kernel, .. } = *spec;
    // `filter_bins` reads the first row of the tables for the first (only) bin it is given.
    let (mut cos_f, mut sin_f) = ([[0.0f32; MAX_KERNEL]; BINS], [[0.0f32; MAX_KERNEL]; BINS]);
    (cos_f[0], sin_f[0]) = (coefficients.0[f], coefficients.1[f]);
    let row = PARTS * c_out;
    let mut bin = [&mut out[..c_in * row]];
    for ci in 0..c_in {
        filter_bins(&taps[ci * kernel * c_out..(ci + 1) * kernel * c_out], kernel, &cos_f, &sin_f, &mut bin, ci * row);
    }
}

/// The filters' spectrum, scaled by `1 / TILE` (the inverse transform's factor), as each bin's
/// GEMM operands `[Re W | Im W − Re W | Re W + Im W]` (`c_in × 3c_out`, [`PARTS`]), bin after bin. `W[f][ci][co] = Σ_k
/// w[co][ci][k]·e^{+2πifk/TILE}`: the conjugate of the filter's DFT, because a convolution
/// layer correlates (`y[s] = Σ_k w[k]·x[s + k]`).
fn filter_spectrum(spec: &Conv1dSpec, w: &[f32], out: &mut [f32]) {
    let Conv1dSpec { c_in, c_out, kernel, .. } = *spec;
    let (cos, sin) = spectrum_coefficients(kernel);
    let row = PARTS * c_out;
    let out = &mut out[..BINS * c_in * row];
    // Task `blk` owns, in every bin, the rows of its block of input channels (contiguous within
    // the bin): its slices are handed to it, and `filter_bins` writes each row in place.
    let blocks = c_in.div_ceil(SPECTRUM_CHANNELS);
    let mut per_block: Vec<Vec<&mut [f32]>> = (0..blocks).map(|_| Vec::with_capacity(BINS)).collect();
    for bin in out.chunks_exact_mut(c_in * row) {
        for (rows, part) in per_block.iter_mut().zip(bin.chunks_mut(SPECTRUM_CHANNELS * row)) {
            rows.push(part);
        }
    }
    per_block.into_par_iter().enumerate().for_each(|(blk, mut bins)| {
        let ci0 = blk * SPECTRUM_CHANNELS;
        let cis = SPECTRUM_CHANNELS.min(c_in - ci0);
        with_scratch(cis * kernel * c_out, |taps| {
            transpose_taps(&w[ci0 * kernel..], c_in * kernel, cis * kernel, taps);
            for ci in 0..cis {
                filter_bins(&taps[ci * kernel * c_out..(ci + 1) * kernel * c_out], kernel, &cos, &sin, &mut bins, ci * row);
            }
        });
    });
}

/// Output channels per pass of [`transpose_taps`]'s portable form: one cache line of each row
/// it writes.
const TRANSPOSE_LANES: usize = 16;

/// `taps[i·c_out + co] = w[co·stride + i]` for `i < run` and every output channel `co` (`c_out =
/// taps.len() / run`): a block of input channels' filters (`run` = channels × taps, contiguous
/// in each output channel's filter) as rows over the output channels. With AVX2, 8 × 8 blocks
/// transposed in registers (eight row loads and eight row stores where the portable form moves
/// each value on its own: a call's transposes were 2 % of a sentence's forward on a Zen 2).
pub(super) fn transpose_taps(w: &[f32], stride: usize, run: usize, taps: &mut [f32]) {
    let c_out = taps.len() / run.max(1);
    assert!(c_out == 0 || (c_out - 1) * stride + run <= w.len(), "filters shorter than the transpose reads");
    #[cfg(target_arch = "x86_64")]
    if crate::cpu::simd::has_avx2() {
        // SAFETY: the CPU has AVX2; the reads are within `w` (asserted above) and the writes
        // within `taps` (`run·c_out` values).
        unsafe { x86::transpose_taps_avx2(w, stride, run, c_out, taps) };
        return;
    }
    transpose_taps_portable(w, stride, run, c_out, taps);
}

/// [`transpose_taps`] value by value, sixteen output channels at a time, so each row is written
/// a whole cache line at once while the sixteen filters read stay in L1; writing channel by
/// channel (a store every `4·c_out` bytes) cost as much as the spectrum's arithmetic on a short
/// input.
fn transpose_taps_portable(w: &[f32], stride: usize, run: usize, c_out: usize, taps: &mut [f32]) {
    for co0 in (0..c_out).step_by(TRANSPOSE_LANES) {
        let lanes = TRANSPOSE_LANES.min(c_out - co0);
        let src: [&[f32]; TRANSPOSE_LANES] =
            std::array::from_fn(|l| if l < lanes { &w[(co0 + l) * stride..(co0 + l) * stride + run] } else { &[] });
        for i in 0..run {
            let dst = &mut taps[i * c_out + co0..i * c_out + co0 + lanes];
            for (d, s) in dst.iter_mut().zip(&src) {
                *d = s[i];
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    /// [`super::transpose_taps`] in 8 × 8 blocks: eight output channels' runs of eight values
    /// loaded as rows, transposed in registers (unpack, shuffle, lane permute), stored as
    /// eight rows of `taps`; the edges value by value.
    ///
    /// # Safety
    /// AVX2 is available; `(c_out − 1)·stride + run ≤ w.len()` and `run·c_out ≤ taps.len()`.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn transpose_taps_avx2(w: &[f32], stride: usize, run: usize, c_out: usize, taps: &mut [f32]) {
        assert!(run * c_out <= taps.len());
        let (full_co, full_i) = (c_out / 8 * 8, run / 8 * 8);
        let (src, dst) = (w.as_ptr(), taps.as_mut_ptr());
        for co0 in (0..full_co).step_by(8) {
            for i0 in (0..full_i).step_by(8) {
                // SAFETY: rows co0 .. co0 + 8 < c_out, values i0 .. i0 + 8 ≤ run of each: within
                // `w` by the caller's bound; the stores are rows i0 .. i0 + 8 < run, channels
                // co0 .. co0 + 8 ≤ c_out of `taps`.
                unsafe {
                    let r: [__m256; 8] = std::array::from_fn(|l| _mm256_loadu_ps(src.add((co0 + l) * stride + i0)));
                    let t0 = _mm256_unpacklo_ps(r[0], r[1]);
                    let t1 = _mm256_unpackhi_ps(r[0], r[1]);
                    let t2 = _mm256_unpacklo_ps(r[2], r[3]);
                    let t3 = _mm256_unpackhi_ps(r[2], r[3]);
                    let t4 = _mm256_unpacklo_ps(r[4], r[5]);
                    let t5 = _mm256_unpackhi_ps(r[4], r[5]);
                    let t6 = _mm256_unpacklo_ps(r[6], r[7]);
                    let t7 = _mm256_unpackhi_ps(r[6], r[7]);
                    let u0 = _mm256_shuffle_ps::<0x44>(t0, t2);
                    let u1 = _mm256_shuffle_ps::<0xEE>(t0, t2);
                    let u2 = _mm256_shuffle_ps::<0x44>(t1, t3);
                    let u3 = _mm256_shuffle_ps::<0xEE>(t1, t3);
                    let u4 = _mm256_shuffle_ps::<0x44>(t4, t6);
                    let u5 = _mm256_shuffle_ps::<0xEE>(t4, t6);
                    let u6 = _mm256_shuffle_ps::<0x44>(t5, t7);
                    let u7 = _mm256_shuffle_ps::<0xEE>(t5, t7);
                    let rows = [
                        _mm256_permute2f128_ps::<0x20>(u0, u4),
                        _mm256_permute2f128_ps::<0x20>(u1, u5),
                        _mm256_permute2f128_ps::<0x20>(u2, u6),
                        _mm256_permute2f128_ps::<0x20>(u3, u7),
                        _mm256_permute2f128_ps::<0x31>(u0, u4),
                        _mm256_permute2f128_ps::<0x31>(u1, u5),
                        _mm256_permute2f128_ps::<0x31>(u2, u6),
                        _mm256_permute2f128_ps::<0x31>(u3, u7),
                    ];
                    for (j, row) in rows.into_iter().enumerate() {
                        _mm256_storeu_ps(dst.add((i0 + j) * c_out + co0), row);
                    }
                }
            }
        }
        // The edges: the last values of every run, and the channels past the last block of 8.
        for co in 0..c_out {
            let from = if co < full_co { full_i } else { 0 };
            for i in from..run {
                taps[i * c_out + co] = w[co * stride + i];
            }
        }
    }
}

/// Output channels [`filter_bins`] keeps in registers at once.
const SPECTRUM_LANES: usize = 16;

dispatch! {
    /// One input channel's rows of every bin's operands, `[Re W | Im W − Re W | Re W + Im W]`,
    /// at `at` in each bin's slice of `bins`, from its `[k][co]` filters and each bin's `cos`/`sin` per tap:
    /// sixteen output channels at a time, their sums held in registers over the taps, the two
    /// combinations formed once the row's real and imaginary parts are written.
    pub fn filter_bins(taps: &[f32], kernel: usize, cos: &[[f32; MAX_KERNEL]; BINS], sin: &[[f32; MAX_KERNEL]; BINS], bins: &mut [&mut [f32]], at: usize) {
        let c_out = taps.len() / kernel;
        for (f, bin) in bins.iter_mut().enumerate() {
            let row = &mut bin[at..at + PARTS * c_out];
            let (re, rest) = row.split_at_mut(c_out);
            let (im, sum) = rest.split_at_mut(c_out);
            let (cf, sf) = (&cos[f], &sin[f]);
            let mut co = 0;
            while co + SPECTRUM_LANES <= c_out {
                let (mut r, mut i) = ([0.0f32; SPECTRUM_LANES], [0.0f32; SPECTRUM_LANES]);
                for k in 0..kernel {
                    let v = &taps[k * c_out + co..k * c_out + co + SPECTRUM_LANES];
                    for l in 0..SPECTRUM_LANES {
                        r[l] += cf[k] * v[l];
                        i[l] += sf[k] * v[l];
                    }
                }
                re[co..co + SPECTRUM_LANES].copy_from_slice(&r);
                im[co..co + SPECTRUM_LANES].copy_from_slice(&i);
                co += SPECTRUM_LANES;
            }
            for c in co..c_out {
                let (mut r, mut i) = (0.0f32, 0.0f32);
                for k in 0..kernel {
                    r += cf[k] * taps[k * c_out + c];
                    i += sf[k] * taps[k * c_out + c];
                }
                re[c] = r;
                im[c] = i;
            }
            for ((r, i), s) in re.iter().zip(im.iter_mut()).zip(sum.iter_mut()) {
                *s = *r + *i;
                *i -= *r;
            }
        }
    }
}

/// The spectrum of phase `r`'s tile starting at its row `s0` (input rows `r + d·(s0 + m) −
/// pad`, zeros off the input), as `[Re + Im | Re | Im][bin][c_in]` in `block`. `work` holds
/// `TILE·c_in + c_in`. Each input row goes through `prep` first where given.
#[allow(clippy::too_many_arguments)]
fn input_spectrum(
    spec: &Conv1dSpec,
    xb: &[f32],
    r: usize,
    s0: usize,
    tw: &([f32; TILE / 2], [f32; TILE / 2]),
    prep: Option<RowPrep<'_>>,
    work: &mut [f32],
    block: &mut [f32],
) {
    let Conv1dSpec { n, c_in, pad, dilation: d, .. } = *spec;
    let h = c_in / 2;
    let (work, mapped) = work.split_at_mut(TILE * c_in);
    let (re, im) = work.split_at_mut(TILE * h);
    for m in 0..TILE {
        let at = bit_reversed(m) * h;
        let (dr, di) = (&mut re[at..at + h], &mut im[at..at + h]);
        match (r + d * (s0 + m)).checked_sub(pad).filter(|&src| src < n) {
            Some(src) => {
                let mut x = &xb[src * c_in..(src + 1) * c_in];
                if let Some(prep) = prep {
                    prep(x, &mut mapped[..c_in]);
                    x = &mapped[..c_in];
                }
                dr.copy_from_slice(&x[..h]);
                di.copy_from_slice(&x[h..]);
            }
            None => {
                dr.fill(0.0);
                di.fill(0.0);
            }
        }
    }
    fft_rows(re, im, h, &tw.0, &tw.1, false);
    split_halves(re, im, h, block);
}

dispatch! {
    /// In place, the DFT of `TILE` rows of `h` complex values (`re`, `im`: `[TILE][h]`, rows in
    /// bit-reversed order), forward (`e^{−2πi…}`) or inverse (conjugate twiddles, no scaling):
    /// radix-2, decimation in time, every butterfly a loop over the row.
    pub fn fft_rows(re: &mut [f32], im: &mut [f32], h: usize, tw_re: &[f32], tw_im: &[f32], inverse: bool) {
        let sign = if inverse { -1.0f32 } else { 1.0 };
        let mut half = 1;
        while half < TILE {
            let step = TILE / (2 * half);
            for g in (0..TILE).step_by(2 * half) {
                for k in 0..half {
                    let (wr, wi) = (tw_re[k * step], sign * tw_im[k * step]);
                    let (a, b) = (g + k, g + k + half);
                    let (re_lo, re_hi) = re.split_at_mut(b * h);
                    let (im_lo, im_hi) = im.split_at_mut(b * h);
                    let (ra, rb) = (&mut re_lo[a * h..(a + 1) * h], &mut re_hi[..h]);
                    let (ia, ib) = (&mut im_lo[a * h..(a + 1) * h], &mut im_hi[..h]);
                    for (((ra, rb), ia), ib) in ra.iter_mut().zip(rb.iter_mut()).zip(ia.iter_mut()).zip(ib.iter_mut()) {
                        let tr = wr * *rb - wi * *ib;
                        let ti = wr * *ib + wi * *rb;
                        *rb = *ra - tr;
                        *ib = *ia - ti;
                        *ra += tr;
                        *ia += ti;
                    }
                }
            }
            half *= 2;
        }
    }
}

dispatch! {
    /// From the transform `Z` of `lo + i·hi` (two real signals of `h` channels), both spectra
    /// for bins `0..=TILE/2`: `LO[f] = (Z[f] + conj Z[−f]) / 2`, `HI[f] = (Z[f] − conj Z[−f]) / 2i`,
    /// written as rows of `[LO | HI]` per bin (channels in their order), one in each third of
    /// `block`: the sums of the real and imaginary parts, the real parts, the imaginary parts.
    pub fn split_halves(re: &[f32], im: &[f32], h: usize, block: &mut [f32]) {
        let (sum_rows, rest) = block.split_at_mut(BINS * 2 * h);
        let (re_rows, im_rows) = rest.split_at_mut(BINS * 2 * h);
        let rows = re_rows.chunks_exact_mut(2 * h).zip(im_rows.chunks_exact_mut(2 * h));
        for (f, (re_out, im_out)) in rows.enumerate() {
            let g = (TILE - f) % TILE;
            let (zr, zi) = (&re[f * h..(f + 1) * h], &im[f * h..(f + 1) * h]);
            let (cr, ci) = (&re[g * h..(g + 1) * h], &im[g * h..(g + 1) * h]);
            let (re_lo, re_hi) = re_out.split_at_mut(h);
            let (im_lo, im_hi) = im_out.split_at_mut(h);
            for i in 0..h {
                re_lo[i] = 0.5 * (zr[i] + cr[i]);
                im_lo[i] = 0.5 * (zi[i] - ci[i]);
                re_hi[i] = 0.5 * (zi[i] + ci[i]);
                im_hi[i] = 0.5 * (cr[i] - zr[i]);
            }
            let sums = &mut sum_rows[f * 2 * h..(f + 1) * 2 * h];
            for ((s, r), i) in sums.iter_mut().zip(&*re_out).zip(&*im_out) {
                *s = r + i;
            }
        }
    }
}

dispatch! {
    /// Phase `r`'s outputs of one tile column (`phase = (r, d)`, `d` the dilation) into `rows`
    /// (whole output rows of `c_out = 2·h` channels; `re`/`im` the inverse transform's
    /// `[TILE][h]` halves): output `s < valid` into row `r + d·s` while it lies inside `rows`,
    /// its low channels from `re` and its high ones from `im`, plus the bias; added to the row
    /// (`row + (out + bias)`) where `accumulate`, else written. A function of its own so the
    /// loops run at the CPU's vector width, each half a plain slice (a chained iterator over
    /// both stayed scalar: ~4 % of an f32 Kokoro forward).
    pub fn store_phase_rows(re: &[f32], im: &[f32], rows: &mut [f32], phase: (usize, usize), valid: usize, bias: Option<&[f32]>, accumulate: bool) {
        let (r, d) = phase;
        let h = re.len() / TILE;
        let c_out = 2 * h;
        for s in 0..valid {
            let local = r + d * s;
            if (local + 1) * c_out > rows.len() {
                break;
            }
            let (dst_lo, dst_hi) = rows[local * c_out..(local + 1) * c_out].split_at_mut(h);
            for (dst, out, bias) in [(dst_lo, &re[s * h..(s + 1) * h], bias.map(|b| &b[..h])), (dst_hi, &im[s * h..(s + 1) * h], bias.map(|b| &b[h..]))] {
                match (accumulate, bias) {
                    (true, Some(bv)) => dst.iter_mut().zip(out.iter().zip(bv)).for_each(|(v, (o, b))| *v += o + b),
                    (true, None) => dst.iter_mut().zip(out).for_each(|(v, o)| *v += o),
                    (false, Some(bv)) => dst.iter_mut().zip(out.iter().zip(bv)).for_each(|(v, (o, b))| *v = o + b),
                    (false, None) => dst.copy_from_slice(out),
                }
            }
        }
    }
}

/// Tile `tile`'s output rows from its products (`s_out`'s tile block `[k1 | k2 | k3][bin][c_out]`,
/// [`PARTS`]): the inverse transform of `LO + i·HI` (the two halves of the channels), leaving
/// `work = [Re: TILE × c_out/2 | Im: TILE × c_out/2]`, rows in order, the low half's outputs in
/// the real part and the high half's in the imaginary part.
fn output_tile(s_out: &[f32], tile: usize, c_out: usize, tw: &([f32; TILE / 2], [f32; TILE / 2]), work: &mut [f32]) {
    let h = c_out / 2;
    let (re, im) = work.split_at_mut(TILE * h);
    let size = BINS * PARTS * c_out;
    let block = &s_out[tile * size..(tile + 1) * size];
    // Bin f and its mirror TILE − f (a real signal's spectrum: Y[TILE − f] = conj Y[f]) from
    // one read of bin f's products; bins 0 and TILE/2 are their own mirrors.
    for f in 0..BINS {
        let row = |part: usize| &block[(part * BINS + f) * c_out..(part * BINS + f + 1) * c_out];
        let (k1, k2, k3) = (row(0), row(1), row(2));
        let at = bit_reversed(f) * h;
        let mirror = (TILE - f) % TILE;
        if mirror == f {
            join_halves(k1, k2, k3, &mut re[at..at + h], &mut im[at..at + h], None);
        } else {
            let to = bit_reversed(mirror) * h;
            let (re_f, re_m) = two_rows(re, at, to, h);
            let (im_f, im_m) = two_rows(im, at, to, h);
            join_halves(k1, k2, k3, re_f, im_f, Some((re_m, im_m)));
        }
    }
    fft_rows(re, im, h, &tw.0, &tw.1, true);
}

/// Rows `a` and `b` (`a ≠ b`, `h` values each) of `rows`, both mutable.
fn two_rows(rows: &mut [f32], a: usize, b: usize, h: usize) -> (&mut [f32], &mut [f32]) {
    if a < b {
        let (lo, hi) = rows.split_at_mut(b);
        (&mut lo[a..a + h], &mut hi[..h])
    } else {
        let (lo, hi) = rows.split_at_mut(a);
        (&mut hi[..h], &mut lo[b..b + h])
    }
}

dispatch! {
    /// `Z = LO + i·HI` for one bin, its spectrum over the channels being `Y = U·W`, `Re Y =
    /// k1 − k3` and `Im Y = k1 + k2` ([`PARTS`]), into `zr`/`zi`; and, where given, the mirror
    /// bin's `Z` from the conjugates of both halves into `mirror`.
    pub fn join_halves(k1: &[f32], k2: &[f32], k3: &[f32], zr: &mut [f32], zi: &mut [f32], mirror: Option<(&mut [f32], &mut [f32])>) {
        let h = zr.len();
        // Every slice cut to exactly `h`, so the loops index without bounds checks (and vectorise).
        let (k1_lo, k1_hi, k2_lo, k2_hi, k3_lo, k3_hi) = (&k1[..h], &k1[h..2 * h], &k2[..h], &k2[h..2 * h], &k3[..h], &k3[h..2 * h]);
        let zi = &mut zi[..h];
        // LO + i·HI with LO = a + ib, HI = c + id: (a − d) + i(b + c); from the conjugates,
        // (a + d) + i(c − b).
        match mirror {
            Some((mr, mi)) => {
                let (mr, mi) = (&mut mr[..h], &mut mi[..h]);
                for i in 0..h {
                    let (a, c) = (k1_lo[i] - k3_lo[i], k1_hi[i] - k3_hi[i]);
                    let (b, d) = (k1_lo[i] + k2_lo[i], k1_hi[i] + k2_hi[i]);
                    zr[i] = a - d;
                    zi[i] = b + c;
                    mr[i] = a + d;
                    mi[i] = c - b;
                }
            }
            None => {
                for i in 0..h {
                    let (a, c) = (k1_lo[i] - k3_lo[i], k1_hi[i] - k3_hi[i]);
                    let (b, d) = (k1_lo[i] + k2_lo[i], k1_hi[i] + k2_hi[i]);
                    zr[i] = a - d;
                    zi[i] = b + c;
                }
            }
        }
    }
}

#[cfg(test)]
#[path = "fourier_tests.rs"]
mod tests;
