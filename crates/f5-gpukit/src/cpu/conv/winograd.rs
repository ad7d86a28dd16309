//! Dense 3-tap 1-D convolution by Winograd's minimal filtering F(4, 3), in f32.
//!
//! Directly, four outputs of a 3-tap convolution cost 12 multiply-adds per channel pair; F(4, 3)
//! makes them from 6: the six input rows a tile of four outputs sees are mixed into six rows
//! (`Bᵀ`, additions and small integer factors), each multiplied by one mix of the three taps
//! (`G`, made once per call), and the six products mixed back into four outputs (`Aᵀ`). The six
//! products are six GEMMs over every tile at once (`tiles × c_in` by `c_in × c_out`), so half the
//! direct sum's multiplications run in a GEMM kernel at its roof. Kokoro's generator and its F0/N
//! and AdaIN blocks run many such convolutions (the k3 residual blocks at 128 and 256 channels),
//! which the FFT path (`fourier`) does not pay for at three taps.
//!
//! The transforms use the interpolation points 0, ±1, ±2 and ∞ (Lavin and Gray's F(4, 3)).
//! A dilation `d` is `d` undilated convolutions over the input's interleaved phases, as in the
//! FFT path: tile column `j` holds every phase's outputs `4j .. 4j + 4`.
//!
//! Numerics: the points ±2 scale some terms by up to 8 before they cancel, so an output's
//! rounding error is that of a sum of terms several times its own size; over whole signals the
//! relative L2 error measured 4–6e-7 against an f64 direct sum (the tests bound it).

use rayon::prelude::*;

use super::super::gemm_raw;
use super::super::scratch::{with_scratch, with_shared_scratch};
use super::tiled::{for_each_chunk, Around, SharedOut};
use crate::cpu::simd::dispatch;
use crate::spec::{Conv1dSpec, GemmSpec, MatLayout, PadMode};

/// Outputs per tile.
const OUT: usize = 4;
/// Input rows per tile and products per channel pair: `OUT + 3 − 1`.
const POINTS: usize = 6;
/// Most filter pairs (`c_in·c_out`) taken: the transformed filters are `6·c_in·c_out` floats
/// (twice the weights), made per call and their scratch kept; 512 × 512 is 6 MB.
const MAX_FILTER_PAIRS: usize = 512 * 512;
/// Transformed values held per chunk (inputs and products, 8 MB): bounds the scratch on long
/// inputs while keeping each GEMM over a thousand tiles or more at Kokoro's channel counts.
const CHUNK_VALUES: usize = 1 << 21;
/// Tiles per GEMM task: enough rows for the GEMM kernel's blocking, and enough tasks (six
/// points × blocks) for every thread.
const TASK_TILES: usize = 256;

/// Whether [`conv1d_winograd`] computes `spec` and pays: it [`computes`] it, over at least
/// [`MIN_ROWS`] outputs.
pub(crate) fn suits(spec: &Conv1dSpec) -> bool {
    computes(spec) && spec.n_out() >= MIN_ROWS
}

/// Whether [`conv1d_winograd`] computes `spec`: dense, stride 1, zero padding, 3 taps, at least
/// 32 channels each way (narrower GEMMs do not reach the kernel's roof), at most
/// [`MAX_FILTER_PAIRS`], and at least 16 tiles of outputs per phase.
fn computes(spec: &Conv1dSpec) -> bool {
    let Conv1dSpec { c_in, c_out, kernel, groups, stride, dilation, .. } = *spec;
    groups == 1
        && stride == 1
        && dilation >= 1
        && spec.pad_mode == PadMode::Zeros
        && kernel == 3
        && c_in >= 32
        && c_out >= 32
        && c_in * c_out <= MAX_FILTER_PAIRS
        && spec.n_out() >= 16 * OUT * dilation
}

/// Fewest output rows taken: the filter transform, made per call, is `6·c_in·c_out` scalar
/// mixes, as much time as F(4, 3) saves in the GEMMs over several hundred rows (Kokoro's F0/N
/// blocks: 512 channels over a short input's 150–300 rows).
const MIN_ROWS: usize = 1024;

/// Whether the Winograd path is on: `F5_CPU_WINOGRAD_CONV=off` (or `0`) keeps 3-tap dense
/// convolutions on the direct and im2col paths for the process, to compare the two.
pub(crate) fn enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| !std::env::var("F5_CPU_WINOGRAD_CONV").is_ok_and(|v| v == "off" || v == "0"))
}

/// `y = conv(x, w) + bias` for a spec that [`suits`]; `x [batch, n, c_in]`, `w [c_out, c_in, 3]`
/// (PyTorch's layout), `y [batch, n_out, c_out]`.
pub(crate) fn conv1d_winograd(spec: &Conv1dSpec, x: &[f32], w: &[f32], bias: Option<&[f32]>, y: &mut [f32]) {
    conv1d_in_chunks(spec, x, w, bias, y, Around::default(), CHUNK_VALUES);
}

/// [`conv1d_winograd`] with its input rows mapped and its outputs added, as `around` says (the
/// FFT path's `conv1d_fft_around` for three taps): an instance norm + Snake + convolution
/// (+ residual) then writes only its output, where the ops apart write the normalised input
/// whole, an activation's size (80 MB at Kokoro's last rate on a long input). The mapped rows
/// are made a chunk at a time, each row once, into scratch the size of the chunk's input
/// (a tile's six rows overlap its neighbours' by two, so mapping them as each tile gathers
/// them would map every row 1.5 times).
pub(crate) fn conv1d_winograd_around(spec: &Conv1dSpec, x: &[f32], w: &[f32], bias: Option<&[f32]>, y: &mut [f32], around: Around<'_>) {
    conv1d_in_chunks(spec, x, w, bias, y, around, CHUNK_VALUES);
}

/// Input rows mapped per task of a chunk's [`Around::prep`].
const PREP_ROWS: usize = 64;

/// [`conv1d_winograd_around`] with at most `chunk_values` transformed values per chunk (at least
/// one tile column's), so the tests can cross chunk boundaries on small inputs.
fn conv1d_in_chunks(spec: &Conv1dSpec, x: &[f32], w: &[f32], bias: Option<&[f32]>, y: &mut [f32], around: Around<'_>, chunk_values: usize) {
    let Conv1dSpec { c_in, c_out, dilation: d, .. } = *spec;
    let n_out = spec.n_out();
    if n_out == 0 || c_out == 0 {
        return;
    }
    let columns = n_out.div_ceil(d).div_ceil(OUT);
    let per_tile = POINTS * (c_in + c_out);
    let chunk_columns = (chunk_values / (per_tile * d)).clamp(1, columns);
    with_shared_scratch(POINTS * c_in * c_out, |filters| {
        filter_transform(spec, w, filters);
        let filters = &*filters;
        let chunk_tiles = chunk_columns * d;
        // With a row map, room for a chunk's mapped input rows (its tiles' span).
        let mapped_len = if around.prep.is_some() { most_chunk_input_rows(spec, chunk_columns) * c_in } else { 0 };
        with_shared_scratch(chunk_tiles * per_tile + mapped_len, |work| {
            let (work, mapped) = work.split_at_mut(chunk_tiles * per_tile);
            let (u, m) = work.split_at_mut(chunk_tiles * POINTS * c_in);
            for_each_chunk(spec, x, y, columns, chunk_columns, |b, xb, yb, j0, j1| {
                let tiles = (j1 - j0) * d;
                // 0. With a row map, the chunk's input rows mapped, each once: the tiles then
                //    gather from those (row `first` of the input at the start).
                let (rows, first) = match around.prep {
                    Some(prep) => {
                        let span = chunk_input_rows(spec, j0, j1);
                        let mapped = &mut mapped[..span.len() * c_in];
                        mapped.par_chunks_mut(PREP_ROWS * c_in).enumerate().for_each(|(task, out)| {
                            let row0 = span.start + task * PREP_ROWS;
                            for (i, row) in out.chunks_exact_mut(c_in).enumerate() {
                                prep(b, &xb[(row0 + i) * c_in..(row0 + i + 1) * c_in], row);
                            }
                        });
                        (&*mapped, span.start)
                    }
                    None => (xb, 0),
                };
                // 1. Transformed inputs, `[tile][point][c_in]`, tile i = column · d + phase.
                let u = &mut u[..tiles * POINTS * c_in];
                u.par_chunks_mut(POINTS * c_in).enumerate().for_each(|(i, out)| {
                    let (j, r) = (j0 + i / d, i % d);
                    input_tile(spec, rows, first, r, j * OUT, out);
                });
                // 2. Per point, every tile's row times that point's filters, into
                //    `[point][tile][c_out]`; each task a block of one point's tiles.
                let u = &*u;
                let m = &mut m[..POINTS * tiles * c_out];
                let mut tasks = Vec::with_capacity(POINTS * tiles.div_ceil(TASK_TILES));
                for (p, point) in m.chunks_mut(tiles * c_out).enumerate() {
                    for (blk, block) in point.chunks_mut(TASK_TILES * c_out).enumerate() {
                        tasks.push((p, blk * TASK_TILES, block));
                    }
                }
                tasks.into_par_iter().for_each(|(p, t0, block)| {
                    let g = GemmSpec {
                        m: block.len() / c_out,
                        n: c_out,
                        k: c_in,
                        batch: 1,
                        a: MatLayout::row_major(POINTS * c_in).at(t0 * POINTS * c_in + p * c_in),
                        b: MatLayout::row_major(c_out).at(p * c_in * c_out),
                        c: MatLayout::row_major(c_out),
                        beta: 0.0,
                    };
                    gemm_raw(&g, u, filters, block, false);
                });
                // 3. Output transforms, one tile column (all d phases: whole output rows) each,
                //    the bias added on the way.
                let m = &*m;
                let rows0 = j0 * OUT * d;
                let rows1 = (j1 * OUT * d).min(n_out);
                let no_bias: &[f32] = &[];
                let bias = bias.map_or(no_bias, |bv| &bv[..c_out]);
                yb[rows0 * c_out..rows1 * c_out].par_chunks_mut(OUT * d * c_out).enumerate().for_each(|(jj, rows)| {
                    // The last column may end before some phases' first row.
                    for r in 0..d.min(rows.len() / c_out) {
                        let tile = jj * d + r;
                        let at = |p: usize| &m[(p * tiles + tile) * c_out..(p * tiles + tile + 1) * c_out];
                        let products = [at(0), at(1), at(2), at(3), at(4), at(5)];
                        // Phase r's outputs in this column: rows r, r + d, … of `rows`.
                        let dst = &mut rows[r * c_out..];
                        if dst.len() >= (OUT - 1) * d * c_out + c_out {
                            output_rows(&products, bias, dst, d * c_out, around.accumulate);
                        } else {
                            // The last column's phase ends early: through a scratch tile.
                            with_scratch(OUT * c_out, |outs| {
                                output_rows(&products, bias, outs, c_out, false);
                                for (s, out) in outs.chunks_exact(c_out).enumerate() {
                                    if s * d * c_out < dst.len() {
                                        let dst = &mut dst[s * d * c_out..s * d * c_out + c_out];
                                        if around.accumulate {
                                            dst.iter_mut().zip(out).for_each(|(v, o)| *v += o);
                                        } else {
                                            dst.copy_from_slice(out);
                                        }
                                    }
                                }
                            });
                        }
                    }
                });
            });
        });
    });
}

/// Input channels per task of [`filter_transform`].
const FILTER_BLOCK: usize = 16;

/// `G·g` for every filter pair, `[point][c_in][c_out]` (each point a GEMM's right-hand side).
/// Each task reads a block of input channels' taps contiguously per output channel and writes
/// its `6 × FILTER_BLOCK` rows front to back (a filter-by-filter transpose touched a new cache
/// line per value and cost more than a short input's whole convolution).
fn filter_transform(spec: &Conv1dSpec, w: &[f32], out: &mut [f32]) {
    let Conv1dSpec { c_in, c_out, .. } = *spec;
    let out = &mut out[..POINTS * c_in * c_out];
    let dst = SharedOut(out.as_mut_ptr(), out.len());
    (0..c_in.div_ceil(FILTER_BLOCK)).into_par_iter().for_each(|blk| {
        let ci0 = blk * FILTER_BLOCK;
        let cis = FILTER_BLOCK.min(c_in - ci0);
        with_scratch(POINTS * cis * c_out, |rows| {
            for co in 0..c_out {
                let taps = &w[(co * c_in + ci0) * 3..(co * c_in + ci0 + cis) * 3];
                for (ci, g) in taps.chunks_exact(3).enumerate() {
                    // In f64, so each transformed tap is the exact mix rounded once.
                    let (g0, g1, g2) = (g[0] as f64, g[1] as f64, g[2] as f64);
                    let mixes = [
                        g0 / 4.0,
                        -(g0 + g1 + g2) / 6.0,
                        -(g0 - g1 + g2) / 6.0,
                        g0 / 24.0 + g1 / 12.0 + g2 / 6.0,
                        g0 / 24.0 - g1 / 12.0 + g2 / 6.0,
                        g2,
                    ];
                    for (p, v) in mixes.into_iter().enumerate() {
                        rows[(p * cis + ci) * c_out + co] = v as f32;
                    }
                }
            }
            for p in 0..POINTS {
                let block = &rows[p * cis * c_out..(p + 1) * cis * c_out];
                // SAFETY: rows ci0 .. ci0 + cis of point p belong to this task's block alone.
                unsafe { dst.write((p * c_in + ci0) * c_out, block) };
            }
        });
    });
}

/// The input rows that tile columns `j0 .. j1` read (every phase), within the input: from the
/// first phase's first row of column `j0` to the last phase's last of column `j1 − 1`.
fn chunk_input_rows(spec: &Conv1dSpec, j0: usize, j1: usize) -> std::ops::Range<usize> {
    let Conv1dSpec { n, pad, dilation: d, .. } = *spec;
    let start = (d * OUT * j0).saturating_sub(pad).min(n);
    let end = (d - 1 + d * (OUT * j1.max(1) - OUT + POINTS - 1) + 1).saturating_sub(pad).min(n);
    start..end.max(start)
}

/// The most input rows a chunk of `chunk_columns` tile columns reads ([`chunk_input_rows`]'s
/// longest span): four outputs a column and two rows of overlap, in each of `d` phases.
fn most_chunk_input_rows(spec: &Conv1dSpec, chunk_columns: usize) -> usize {
    (spec.dilation * (OUT * chunk_columns + POINTS - OUT)).min(spec.n)
}

/// `Bᵀ·u` for one tile: phase `r`'s input rows `s0 .. s0 + 6` (zero past either edge) into
/// `out [point][c_in]`, from `rows`, which hold the input's rows from row `first` on.
fn input_tile(spec: &Conv1dSpec, rows: &[f32], first: usize, r: usize, s0: usize, out: &mut [f32]) {
    let Conv1dSpec { n, c_in, pad, dilation: d, .. } = *spec;
    let src = |t: usize| (r + d * (s0 + t)).checked_sub(pad).filter(|&i| i < n).map(|i| i - first);
    if src(0).is_some() && src(POINTS - 1).is_some() {
        // Inside the input (so are the rows in between): no zero rows to make.
        input_rows(&std::array::from_fn(|t| tile_row(rows, &[], src(t), c_in)), out);
    } else {
        with_scratch(c_in, |zeros| {
            zeros.fill(0.0);
            input_rows(&std::array::from_fn(|t| tile_row(rows, zeros, src(t), c_in)), out);
        });
    }
}

/// Row `src` of `rows`, or `zeros` where the row lies in the padding.
fn tile_row<'a>(rows: &'a [f32], zeros: &'a [f32], src: Option<usize>, c_in: usize) -> &'a [f32] {
    match src {
        Some(i) => &rows[i * c_in..(i + 1) * c_in],
        None => zeros,
    }
}

dispatch! {
    /// `Bᵀ·u` over a row of channels: six input rows into six transformed ones (`out [6][c]`).
    pub fn input_rows(u: &[&[f32]; POINTS], out: &mut [f32]) {
        let c = u[0].len();
        let (o0, rest) = out.split_at_mut(c);
        let (o1, rest) = rest.split_at_mut(c);
        let (o2, rest) = rest.split_at_mut(c);
        let (o3, rest) = rest.split_at_mut(c);
        let (o4, o5) = rest.split_at_mut(c);
        let (u0, u1, u2, u3, u4, u5) = (&u[0][..c], &u[1][..c], &u[2][..c], &u[3][..c], &u[4][..c], &u[5][..c]);
        for i in 0..c {
            let (d0, d1, d2, d3, d4, d5) = (u0[i], u1[i], u2[i], u3[i], u4[i], u5[i]);
            o0[i] = 4.0 * d0 - 5.0 * d2 + d4;
            o1[i] = (d3 + d4) - 4.0 * (d1 + d2);
            o2[i] = (d4 - d3) + 4.0 * (d1 - d2);
            o3[i] = (d4 - d2) + 2.0 * (d3 - d1);
            o4[i] = (d4 - d2) - 2.0 * (d3 - d1);
            o5[i] = 4.0 * d1 - 5.0 * d3 + d5;
        }
    }
}

dispatch! {
    /// `Aᵀ·m + bias` over a row of output channels: six products into the four output rows
    /// `out[0..c]`, `out[stride..stride + c]`, … (`bias` empty: none), or, with `accumulate`,
    /// added to what they hold (rounded as the outputs and an `axpy` after them).
    pub fn output_rows(m: &[&[f32]; POINTS], bias: &[f32], out: &mut [f32], stride: usize, accumulate: bool) {
        let c = m[0].len();
        let (y0, rest) = out.split_at_mut(stride);
        let (y1, rest) = rest.split_at_mut(stride);
        let (y2, y3) = rest.split_at_mut(stride);
        let (y0, y1, y2, y3) = (&mut y0[..c], &mut y1[..c], &mut y2[..c], &mut y3[..c]);
        let (m0, m1, m2, m3, m4, m5) = (&m[0][..c], &m[1][..c], &m[2][..c], &m[3][..c], &m[4][..c], &m[5][..c]);
        let zeros = [0.0f32; 1];
        let bias_at = |i: usize| if bias.is_empty() { zeros[0] } else { bias[i] };
        for i in 0..c {
            let (a, b) = (m1[i] + m2[i], m1[i] - m2[i]);
            let (e, f) = (m3[i] + m4[i], m3[i] - m4[i]);
            let bv = bias_at(i);
            let outs = [m0[i] + a + e + bv, b + 2.0 * f + bv, a + 4.0 * e + bv, b + 8.0 * f + m5[i] + bv];
            if accumulate {
                y0[i] += outs[0];
                y1[i] += outs[1];
                y2[i] += outs[2];
                y3[i] += outs[3];
            } else {
                [y0[i], y1[i], y2[i], y3[i]] = outs;
            }
        }
    }
}

#[cfg(test)]
#[path = "winograd_tests.rs"]
mod tests;
