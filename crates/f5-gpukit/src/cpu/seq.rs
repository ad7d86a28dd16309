//! The sequence ops a second model family needs (Kokoro: StyleTTS2 + ISTFTNet): the LSTM
//! recurrence, instance norm with style modulation, Snake, resampling along time, padding and
//! the f64 running sum. All on channels-last `[batch, n, c]`.

use rayon::prelude::*;

use super::simd;
use crate::spec::{InstanceNormSpec, InterpolateSpec, LstmSpec, Pad1dSpec};

/// One direction of the LSTM recurrence. Each step is one matrix-vector product
/// (`W_hh [4H, H]` times `h`, [`simd::gemv_rows_acc`]) and one vectorised cell update, on the
/// calling thread: at Kokoro's size (H = 256) a step is a few microseconds, less than handing
/// it to the pool would cost, so parallelism comes from running a BiLSTM's two directions side by
/// side instead (f5-nn's `BiLstm`). Nothing is allocated per step.
pub fn lstm(spec: &LstmSpec, lengths: &[usize], gates_x: &[f32], w_hh: &[f32], state0: Option<(&[f32], &[f32])>, out: &mut [f32]) {
    let LstmSpec { batch, n, hidden: h, reverse, out: rows } = *spec;
    if h == 0 || n == 0 {
        return;
    }
    let g4 = 4 * h;
    let w_hh = &w_hh[..g4 * h];
    let mut gates = vec![0.0f32; g4];
    let mut hs = vec![0.0f32; h];
    let mut cs = vec![0.0f32; h];
    for b in 0..batch {
        let len = lengths[b];
        match state0 {
            Some((h0, c0)) => {
                hs.copy_from_slice(&h0[b * h..(b + 1) * h]);
                cs.copy_from_slice(&c0[b * h..(b + 1) * h]);
            }
            None => {
                hs.fill(0.0);
                cs.fill(0.0);
            }
        }
        for step in 0..len {
            let t = if reverse { len - 1 - step } else { step };
            gates.copy_from_slice(&gates_x[(b * n + t) * g4..(b * n + t + 1) * g4]);
            simd::gemv_rows_acc(w_hh, &hs, &mut gates);
            simd::lstm_cell(&gates, &mut cs, &mut hs);
            let at = rows.offset + (b * n + t) * rows.row_stride;
            out[at..at + h].copy_from_slice(&hs);
        }
        for t in len..n {
            let at = rows.offset + (b * n + t) * rows.row_stride;
            out[at..at + h].fill(0.0);
        }
    }
}

/// Rows per partial sum of the instance-norm statistics: fixed, so the f64 sums (and the
/// result's bits) do not depend on the thread count.
const STATS_ROWS: usize = 512;

/// Per-channel sums over the rows of `x` (`[rows, c]`): `add(sums, block)` per block of
/// [`STATS_ROWS`] rows, run in parallel, then the blocks' sums added in block order.
fn channel_sums(x: &[f32], c: usize, add: impl Fn(&mut [f64], &[f32]) + Sync) -> Vec<f64> {
    let blocks: Vec<Vec<f64>> = x
        .par_chunks(c * STATS_ROWS)
        .map(|block| {
            let mut sums = vec![0.0f64; c];
            add(&mut sums, block);
            sums
        })
        .collect();
    let mut total = vec![0.0f64; c];
    for block in &blocks {
        for (t, &v) in total.iter_mut().zip(block) {
            *t += v;
        }
    }
    total
}

/// A Snake to apply to each row as it is written: `(α, the row function)`.
pub type SnakeAfter<'a> = (&'a [f32], SnakeRow);

/// One row of Snake: `(row, α, 1/α)`.
pub type SnakeRow = fn(&mut [f32], &[f32], &[f32]);

/// Instance norm with AdaIN's style (`Backend::instance_norm`), each output row then passed
/// through `snake` when given, while it is in cache (the same values as a separate Snake pass).
pub fn instance_norm(
    spec: &InstanceNormSpec,
    x: &[f32],
    affine: Option<(&[f32], &[f32])>,
    style: Option<&[f32]>,
    snake: Option<SnakeAfter<'_>>,
    out: &mut [f32],
) {
    let InstanceNormSpec { batch, n, c, eps } = *spec;
    if n == 0 || c == 0 {
        return;
    }
    // 1/α once, as the separate Snake pass computes it.
    let snake = snake.map(|(alpha, row)| (&alpha[..c], alpha[..c].iter().map(|&a| 1.0 / a).collect::<Vec<f32>>(), row));
    for b in 0..batch {
        let xb = &x[b * n * c..(b + 1) * n * c];
        // Per-channel statistics in f64, two passes: the mean first, then the biased variance
        // around it (no cancellation however large the mean). Each pass sums fixed blocks of
        // rows in parallel and adds the blocks' sums in order (at the generator's rate these
        // passes read ~9 MB each and ran on one thread).
        let mut mean = channel_sums(xb, c, simd::add_rows_f64);
        mean.iter_mut().for_each(|m| *m /= n as f64);
        let var = channel_sums(xb, c, |s, rows| simd::add_squared_deviations_f64(s, rows, &mean));
        // y = (x − mean)·a + d per channel, folding normalisation, affine and style into one
        // scale and shift; the mean is subtracted first, so a large offset cancels exactly.
        let mean32: Vec<f32> = mean.iter().map(|&m| m as f32).collect();
        let mut scale = vec![0.0f32; c];
        let mut shift = vec![0.0f32; c];
        for j in 0..c {
            let rstd = 1.0 / (var[j] / n as f64 + eps as f64).sqrt();
            let (w, bias) = affine.map_or((1.0, 0.0), |(w, bb)| (w[j] as f64, bb[j] as f64));
            let (gamma, beta) = style.map_or((0.0, 0.0), |s| (s[b * 2 * c + j] as f64, s[b * 2 * c + c + j] as f64));
            scale[j] = ((1.0 + gamma) * w * rstd) as f32;
            shift[j] = ((1.0 + gamma) * bias + beta) as f32;
        }
        let ob = &mut out[b * n * c..(b + 1) * n * c];
        ob.par_chunks_mut(c * 16).zip(xb.par_chunks(c * 16)).for_each(|(o, xi)| {
            for (orow, xrow) in o.chunks_mut(c).zip(xi.chunks(c)) {
                simd::normalize_row(orow, xrow, &mean32, &scale, &shift);
                if let Some((alpha, inv_alpha, row)) = &snake {
                    row(orow, alpha, inv_alpha);
                }
            }
        });
    }
}

pub fn snake(x: &mut [f32], c: usize, alpha: &[f32]) {
    snake_rows(x, c, alpha, simd::snake_row);
}

/// [`snake`] with `sin²` in f32 arithmetic ([`simd::snake_row_f32`]): for the reduced-precision
/// backends.
pub fn snake_f32_sin(x: &mut [f32], c: usize, alpha: &[f32]) {
    snake_rows(x, c, alpha, simd::snake_row_f32);
}

/// Snake over channels-last rows of `c`, 16 rows a task, each row by `row` with `1/α` computed
/// once here.
fn snake_rows(x: &mut [f32], c: usize, alpha: &[f32], row_fn: fn(&mut [f32], &[f32], &[f32])) {
    if c == 0 {
        return;
    }
    let alpha = &alpha[..c];
    let inv_alpha: Vec<f32> = alpha.iter().map(|&a| 1.0 / a).collect();
    x.par_chunks_mut(c * 16).for_each(|rows| {
        for row in rows.chunks_mut(c) {
            row_fn(row, alpha, &inv_alpha);
        }
    });
}

pub fn upsample_nearest(x: &[f32], batch: usize, n: usize, c: usize, factor: usize, out: &mut [f32]) {
    if c == 0 {
        return;
    }
    out[..batch * n * factor * c].par_chunks_mut(c).enumerate().for_each(|(r, row)| {
        let (b, t) = (r / (n * factor), r % (n * factor));
        let s = (b * n + t / factor) * c;
        row.copy_from_slice(&x[s..s + c]);
    });
}

/// Output rows per parallel task of [`interpolate_linear`]: Kokoro's source interpolates
/// 9-value rows by the hundred thousand, too small to be a task each.
const INTERPOLATE_ROWS_PER_TASK: usize = 1024;

pub fn interpolate_linear(spec: &InterpolateSpec, x: &[f32], out: &mut [f32]) {
    let InterpolateSpec { batch, n_out, c, .. } = *spec;
    if c == 0 || n_out == 0 {
        return;
    }
    out[..batch * n_out * c]
        .par_chunks_mut(c * INTERPOLATE_ROWS_PER_TASK)
        .enumerate()
        .for_each(|(blk, rows)| simd::interpolate_rows(spec, x, blk * INTERPOLATE_ROWS_PER_TASK, rows));
}

pub fn pad1d(spec: &Pad1dSpec, x: &[f32], out: &mut [f32]) {
    let Pad1dSpec { batch, n, c, left, mode, .. } = *spec;
    let n_out = spec.n_out();
    if c == 0 {
        return;
    }
    out[..batch * n_out * c].par_chunks_mut(c).enumerate().for_each(|(r, row)| {
        let (b, p) = (r / n_out, r % n_out);
        match mode.source(p, left, n) {
            Some(s) => row.copy_from_slice(&x[(b * n + s) * c..(b * n + s + 1) * c]),
            None => row.fill(0.0),
        }
    });
}

pub fn cumsum(x: &[f32], batch: usize, n: usize, c: usize, out: &mut [f32]) {
    if c == 0 || n == 0 {
        return;
    }
    out[..batch * n * c].par_chunks_mut(n * c).zip(x[..batch * n * c].par_chunks(n * c)).for_each(|(o, xi)| {
        let mut acc = vec![0.0f64; c];
        for (orow, xrow) in o.chunks_mut(c).zip(xi.chunks(c)) {
            for j in 0..c {
                acc[j] += xrow[j] as f64;
                orow[j] = acc[j] as f32;
            }
        }
    });
}
