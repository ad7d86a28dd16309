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

/// Rows per chunk of the instance-norm statistics (96 KiB of rows at 128 channels, so a chunk
/// read once from memory is read again from L2): fixed, so the f64 statistics (and the result's
/// bits) do not depend on the thread count. A multiple of every convolution kernel's tile rows
/// (32 on the AMX tiles, 12 on AVX-512), so a convolution whose blocks of output rows are whole
/// chunks can form its output's statistics block by block ([`ChunkStats::of`] on each chunk,
/// then [`ChannelStats::merge`]) to the bits this norm computes.
pub(crate) const STATS_ROWS: usize = 192;

/// One chunk's per-channel statistics: its rows, their mean and sum of squared deviations
/// around it (`M2`), in f64.
#[derive(Clone, Debug, Default)]
pub(crate) struct ChunkStats {
    rows: usize,
    mean: Vec<f64>,
    m2: Vec<f64>,
}

impl ChunkStats {
    /// The rows of `block` (`[rows, c]`, in cache): two passes, the mean and then the squared
    /// deviations around it (no cancellation however large the mean).
    pub(crate) fn of(block: &[f32], c: usize) -> Self {
        let rows = block.len() / c;
        let mut mean = vec![0.0f64; c];
        simd::add_rows_f64(&mut mean, block);
        mean.iter_mut().for_each(|m| *m /= rows as f64);
        let mut m2 = vec![0.0f64; c];
        simd::add_squared_deviations_f64(&mut m2, block, &mean);
        ChunkStats { rows, mean, m2 }
    }
}

/// One batch item's per-channel statistics over all its rows: the mean and `M2` (the biased
/// variance is `M2 / rows`), in f64.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ChannelStats {
    pub(crate) mean: Vec<f64>,
    pub(crate) m2: Vec<f64>,
}

impl ChannelStats {
    /// The chunks of one item's rows, in row order, merged in that order by Chan et al.'s
    /// pairwise update (`M2 = M2_a + M2_b + δ²·n_a·n_b/n`, δ the difference of the means).
    pub(crate) fn merge(chunks: impl IntoIterator<Item = ChunkStats>, c: usize) -> Self {
        let mut chunks = chunks.into_iter();
        let Some(ChunkStats { rows: mut n, mut mean, mut m2 }) = chunks.next() else {
            return ChannelStats { mean: vec![0.0; c], m2: vec![0.0; c] };
        };
        for ChunkStats { rows: nb, mean: mean_b, m2: m2_b } in chunks {
            let total = n + nb;
            let wb = nb as f64 / total as f64;
            for j in 0..c {
                let delta = mean_b[j] - mean[j];
                mean[j] += delta * wb;
                m2[j] += m2_b[j] + delta * delta * (n as f64) * wb;
            }
            n = total;
        }
        ChannelStats { mean, m2 }
    }

    /// The rows of `x` (`[rows, c]`): chunks of [`STATS_ROWS`] rows in parallel, each while it
    /// is in cache, so the rows are read from memory once instead of twice (at the generator's
    /// last rate one activation is 80 MB), then merged in order.
    pub(crate) fn of(x: &[f32], c: usize) -> Self {
        let chunks: Vec<ChunkStats> = x.par_chunks(c * STATS_ROWS).map(|chunk| ChunkStats::of(chunk, c)).collect();
        Self::merge(chunks, c)
    }
}

/// The per-channel statistics of every batch item of a `[batch, n, c]` activation, as the
/// convolution that wrote it formed them: what an instance norm over those rows would compute
/// first, so it can start from them instead of reading the rows once more.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct KnownStats {
    pub(crate) batch: usize,
    pub(crate) n: usize,
    pub(crate) c: usize,
    pub(crate) items: Vec<ChannelStats>,
}

impl KnownStats {
    /// Item `b`'s statistics where these are of the rows `spec` normalises.
    pub(crate) fn for_norm(&self, spec: &InstanceNormSpec, b: usize) -> Option<&ChannelStats> {
        ((self.batch, self.n, self.c) == (spec.batch, spec.n, spec.c)).then(|| self.items.get(b)).flatten()
    }
}

/// A Snake to apply to each row as it is written: `(α, the row function)`.
pub type SnakeAfter<'a> = (&'a [f32], SnakeSine);

/// Which Snake a norm's rows go through: the sine [`simd::snake_row`] takes (the f32
/// backend's, to 2 ulp) or the f32-arithmetic `sin²` of [`simd::snake_row_f32`] (the
/// reduced-precision backends').
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SnakeSine {
    Exact,
    F32,
}

impl SnakeSine {
    /// Snake in place on one row: `(row, α, 1/α)`.
    pub(crate) fn row(self, x: &mut [f32], alpha: &[f32], inv_alpha: &[f32]) {
        match self {
            SnakeSine::Exact => simd::snake_row(x, alpha, inv_alpha),
            SnakeSine::F32 => simd::snake_row_f32(x, alpha, inv_alpha),
        }
    }
}

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
    let InstanceNormSpec { batch, n, c, .. } = *spec;
    if n == 0 || c == 0 {
        return;
    }
    for b in 0..batch {
        let xb = &x[b * n * c..(b + 1) * n * c];
        let rows = RowNorm::of(spec, b, xb, affine, style, snake);
        let ob = &mut out[b * n * c..(b + 1) * n * c];
        ob.par_chunks_mut(c * 16).zip(xb.par_chunks(c * 16)).for_each(|(o, xi)| {
            for (orow, xrow) in o.chunks_mut(c).zip(xi.chunks(c)) {
                rows.row(xrow, orow);
            }
        });
    }
}

/// A function each input row of a convolution goes through before the convolution converts
/// it (to int8 or bf16): `(row, out)`, `c_in` values each. The fused AdaIN + Snake +
/// convolution passes [`RowNorm::row`] here, so the normalised rows exist only a row at a time.
pub(crate) type RowPrep<'a> = &'a (dyn Fn(&[f32], &mut [f32]) + Sync);

/// One batch item's instance norm (with AdaIN's style, and Snake when given) as a function of
/// each row alone, once the item's statistics are known: [`instance_norm`] applies it to every
/// row, and a consumer that reads the rows anyway (the int8 convolution, which quantises each
/// row as it reads it) can apply it there instead, to the same bits, without the normalised
/// rows ever going through memory.
pub(crate) struct RowNorm<'a> {
    mean: Vec<f32>,
    scale: Vec<f32>,
    shift: Vec<f32>,
    /// `(α, 1/α, which Snake)`.
    snake: Option<(&'a [f32], Vec<f32>, SnakeSine)>,
}

impl<'a> RowNorm<'a> {
    /// Item `b` of `spec`, whose rows are `xb` (`n·c` values): per-channel statistics in f64
    /// ([`ChannelStats::of`]: two passes per cached chunk, the chunks merged in order), then
    /// `y = (x − mean)·a + d` per channel, folding normalisation, affine and style into one
    /// scale and shift; the mean is subtracted first, so a large offset cancels exactly.
    pub(crate) fn of(
        spec: &InstanceNormSpec,
        b: usize,
        xb: &[f32],
        affine: Option<(&[f32], &[f32])>,
        style: Option<&[f32]>,
        snake: Option<SnakeAfter<'a>>,
    ) -> Self {
        Self::from_stats(spec, b, &ChannelStats::of(xb, spec.c), affine, style, snake)
    }

    /// [`RowNorm::of`] from item `b`'s statistics, known already (the same bits as computing
    /// them from the rows).
    pub(crate) fn from_stats(
        spec: &InstanceNormSpec,
        b: usize,
        stats: &ChannelStats,
        affine: Option<(&[f32], &[f32])>,
        style: Option<&[f32]>,
        snake: Option<SnakeAfter<'a>>,
    ) -> Self {
        let InstanceNormSpec { n, c, eps, .. } = *spec;
        let ChannelStats { mean, m2: var } = stats;
        let mut scale = vec![0.0f32; c];
        let mut shift = vec![0.0f32; c];
        for j in 0..c {
            let rstd = 1.0 / (var[j] / n as f64 + eps as f64).sqrt();
            let (w, bias) = affine.map_or((1.0, 0.0), |(w, bb)| (w[j] as f64, bb[j] as f64));
            let (gamma, beta) = style.map_or((0.0, 0.0), |s| (s[b * 2 * c + j] as f64, s[b * 2 * c + c + j] as f64));
            scale[j] = ((1.0 + gamma) * w * rstd) as f32;
            shift[j] = ((1.0 + gamma) * bias + beta) as f32;
        }
        // 1/α once, as the separate Snake pass computes it.
        let snake = snake.map(|(alpha, row)| (&alpha[..c], alpha[..c].iter().map(|&a| 1.0 / a).collect(), row));
        RowNorm { mean: mean.iter().map(|&m| m as f32).collect(), scale, shift, snake }
    }

    /// The normalised (and snaked) row `out` of the input row `x` (`c` values each).
    pub(crate) fn row(&self, x: &[f32], out: &mut [f32]) {
        match &self.snake {
            // One pass over the row instead of three (normalise, check the range, Snake).
            Some((alpha, inv_alpha, SnakeSine::F32)) => {
                simd::normalize_snake_row_f32(out, x, (&self.mean, &self.scale, &self.shift), alpha, inv_alpha)
            }
            Some((alpha, inv_alpha, SnakeSine::Exact)) => {
                simd::normalize_snake_row(out, x, (&self.mean, &self.scale, &self.shift), alpha, inv_alpha)
            }
            None => simd::normalize_row(out, x, &self.mean, &self.scale, &self.shift),
        }
    }
}

pub fn snake(x: &mut [f32], c: usize, alpha: &[f32]) {
    snake_rows(x, c, alpha, SnakeSine::Exact);
}

/// [`snake`] with `sin²` in f32 arithmetic ([`simd::snake_row_f32`]): for the reduced-precision
/// backends.
pub fn snake_f32_sin(x: &mut [f32], c: usize, alpha: &[f32]) {
    snake_rows(x, c, alpha, SnakeSine::F32);
}

/// Snake over channels-last rows of `c`, 16 rows a task, each row by `row` with `1/α` computed
/// once here.
fn snake_rows(x: &mut [f32], c: usize, alpha: &[f32], sine: SnakeSine) {
    if c == 0 {
        return;
    }
    let alpha = &alpha[..c];
    let inv_alpha: Vec<f32> = alpha.iter().map(|&a| 1.0 / a).collect();
    x.par_chunks_mut(c * 16).for_each(|rows| {
        for row in rows.chunks_mut(c) {
            sine.row(row, alpha, &inv_alpha);
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

#[cfg(test)]
mod tests {
    use super::{ChannelStats, STATS_ROWS};

    /// Mean and `M2` of each channel, exactly enough: two passes in f64 over the whole column.
    fn two_pass(x: &[f32], c: usize) -> (Vec<f64>, Vec<f64>) {
        let n = x.len() / c;
        let mean: Vec<f64> = (0..c).map(|j| (0..n).map(|t| x[t * c + j] as f64).sum::<f64>() / n as f64).collect();
        let m2 = (0..c).map(|j| (0..n).map(|t| (x[t * c + j] as f64 - mean[j]).powi(2)).sum()).collect();
        (mean, m2)
    }

    /// Per-block statistics merged in order agree with the whole-column two passes to f64's
    /// rounding, over blocks whose means drift apart (a ramp) on a large offset (3·10⁶, where the
    /// data's variance is ~10⁻⁵ of the squares); the one-pass `Σx² − n·mean²` on the same f64
    /// sums misses by far more, so the bound tells the two apart.
    #[test]
    fn block_statistics_merged_in_order_match_two_passes_over_the_whole_column() {
        let (n, c) = (3 * STATS_ROWS + 137, 3);
        let mut s = 0x2545_F491_4F6C_DD1Du64;
        let x: Vec<f32> = (0..n * c)
            .map(|i| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                let noise = (s >> 11) as f64 / (1u64 << 53) as f64 * 20.0 - 10.0;
                let (t, j) = (i / c, i % c);
                (3.0e6 * (j + 1) as f64 + 0.05 * t as f64 + noise) as f32
            })
            .collect();
        let ChannelStats { mean, m2 } = ChannelStats::of(&x, c);
        let (want_mean, want_m2) = two_pass(&x, c);
        for j in 0..c {
            assert!(((mean[j] - want_mean[j]) / want_mean[j]).abs() < 1e-14, "channel {j}: mean {} vs {}", mean[j], want_mean[j]);
            assert!(((m2[j] - want_m2[j]) / want_m2[j]).abs() < 1e-10, "channel {j}: M2 {} vs {}", m2[j], want_m2[j]);
            let (sum, sum_sq) = x.iter().skip(j).step_by(c).fold((0.0f64, 0.0f64), |(a, b), &v| (a + v as f64, b + (v as f64).powi(2)));
            let one_pass = sum_sq - sum * sum / n as f64;
            assert!(((one_pass - want_m2[j]) / want_m2[j]).abs() > 1e-10, "channel {j}: the one-pass form should miss the bound");
        }
    }
}
