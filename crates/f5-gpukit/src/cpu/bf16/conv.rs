//! Dense 1-D convolution with a bf16 filter bank on the AVX-512 BF16 kernel.
//!
//! The same blocked im2col as the f32 path (`cpu::conv`): one cache-sized block of output rows
//! per task, its im2col rows built in f32 by the shared helper, then multiplied — here by the
//! bf16 micro-kernel of [`gemm`](super::gemm): the im2col values are rounded to bf16 while they
//! are packed into micro-tiles, the filters were rounded once at upload, products are summed in
//! f32 and the output stays f32. The output rows start as the bias (or zero) and the sums are
//! added to them, as the f32 path does.
//!
//! The filters `[c_out, c_in, K]` are packed once per call into the kernel's B panels in (tap,
//! channel) row order, matching the im2col columns, and shared by every block.
//!
//! Only dense convolutions (`groups == 1`: Kokoro's generator and decoder convs) take this path.
//! Grouped and depthwise ones have a handful of taps per output and no GEMM worth the rounding;
//! the backend runs them in f32 (model code should upload those filters with `upload`).

use rayon::prelude::*;

use super::gemm::{micro_kernel, to_bf16, Avx512Bf16, KC_PAIRS, MR, NR};
use crate::cpu::conv::{im2col_rows, rows_per_block};
use crate::cpu::scratch::with_scratch;
use crate::spec::Conv1dSpec;

/// `y = conv(x, w) + bias` for a dense (`groups == 1`) convolution with bf16 filters `w`
/// (`[c_out, c_in, K]` bf16 bits). `spec` must have been validated against the operands.
pub(crate) fn conv1d_dense(cpu: Avx512Bf16, spec: &Conv1dSpec, x: &[f32], w: &[u16], bias: Option<&[f32]>, y: &mut [f32]) {
    debug_assert_eq!(spec.groups, 1, "conv1d_dense takes dense convolutions only");
    let Conv1dSpec { batch, n, c_in, c_out, kernel, .. } = *spec;
    let n_out = spec.n_out();
    if n_out == 0 || c_out == 0 {
        return;
    }
    match bias {
        Some(bv) => y[..batch * n_out * c_out].par_chunks_mut(c_out).for_each(|r| r.copy_from_slice(&bv[..c_out])),
        None => y[..batch * n_out * c_out].fill(0.0),
    }
    let kc = kernel * c_in;
    if kc == 0 {
        return;
    }
    let kp = kc.div_ceil(2);
    let panels = c_out.div_ceil(NR);
    let panel_len = kp * NR;
    let mut packed = vec![0u32; panels * panel_len];
    packed.par_chunks_mut(panel_len).enumerate().for_each(|(jp, panel)| pack_filters(spec, w, jp * NR, panel));
    let packed = &packed[..];
    let rb = rows_per_block(n_out, kc, rayon::current_num_threads());
    for b in 0..batch {
        let xb = &x[b * n * c_in..(b + 1) * n * c_in];
        let yb = &mut y[b * n_out * c_out..(b + 1) * n_out * c_out];
        yb.par_chunks_mut(rb * c_out).enumerate().for_each(|(blk, yblk)| {
            let rows = yblk.len() / c_out;
            with_scratch(rows * kc, |col| {
                im2col_rows(spec, xb, 0, blk * rb, col);
                let tiles = rows.div_ceil(MR);
                let mut a = vec![0u32; tiles * kp * MR];
                for (t, tile) in a.chunks_mut(kp * MR).enumerate() {
                    pack_rows(cpu, col, kc, t * MR, rows, tile);
                }
                for kb in (0..kp).step_by(KC_PAIRS) {
                    let pairs = KC_PAIRS.min(kp - kb);
                    for jp in 0..panels {
                        let bp = &packed[jp * panel_len + kb * NR..jp * panel_len + (kb + pairs) * NR];
                        let (j0, cols) = (jp * NR, (c_out - jp * NR).min(NR));
                        for (t, at) in a.chunks(kp * MR).enumerate() {
                            let mut acc = [0.0f32; MR * NR];
                            micro_kernel(cpu, pairs, &at[kb * MR..(kb + pairs) * MR], bp, &mut acc);
                            let r0 = t * MR;
                            for r in 0..(rows - r0).min(MR) {
                                let yrow = &mut yblk[(r0 + r) * c_out + j0..(r0 + r) * c_out + j0 + cols];
                                for (d, &s) in yrow.iter_mut().zip(&acc[r * NR..r * NR + cols]) {
                                    *d += s;
                                }
                            }
                        }
                    }
                }
            });
        });
    }
}

/// Columns `j0..j0 + NR` (output channels) of the filter matrix `B[q, co]`, `q = k·c_in + ci`
/// (the im2col column order), as `[kc/2][NR]` dwords of bf16 pairs `(B[2p], B[2p+1])`; channels
/// past `c_out` and the half pair past an odd `kc` are zero.
fn pack_filters(spec: &Conv1dSpec, w: &[u16], j0: usize, panel: &mut [u32]) {
    let Conv1dSpec { c_in, c_out, kernel, .. } = *spec;
    let kc = kernel * c_in;
    let kp = kc.div_ceil(2);
    // Filter value of column q of output channel co: w[co, ci, k].
    let at = |co: usize, q: usize| w[co * kc + (q % c_in) * kernel + q / c_in] as u32;
    for jj in 0..NR {
        let co = j0 + jj;
        for p in 0..kp {
            let q = 2 * p;
            panel[p * NR + jj] = if co >= c_out {
                0
            } else {
                let hi = if q + 1 < kc { at(co, q + 1) } else { 0 };
                at(co, q) | (hi << 16)
            };
        }
    }
}

/// Rows `r0..r0 + MR` of the f32 im2col block `col` (`rows × kc`) as one A micro-tile,
/// `[kc/2][MR]` dwords of bf16 pairs, each value rounded to bf16 here; rows past `rows` and the
/// half pair past an odd `kc` are zero.
fn pack_rows(cpu: Avx512Bf16, col: &[f32], kc: usize, r0: usize, rows: usize, tile: &mut [u32]) {
    let kp = kc.div_ceil(2);
    for r in 0..MR {
        if r0 + r >= rows {
            for p in 0..kp {
                tile[p * MR + r] = 0;
            }
            continue;
        }
        let row = &col[(r0 + r) * kc..(r0 + r + 1) * kc];
        // Whole runs of 32 values convert 32 at a time; the rest (and other CPUs' tests) below.
        let done = vector_pairs(cpu, row, r, tile);
        for (p, pair) in row.chunks(2).enumerate().skip(done) {
            let lo = to_bf16(pair[0]) as u32;
            let hi = pair.get(1).map_or(0, |&v| to_bf16(v) as u32);
            tile[p * MR + r] = lo | (hi << 16);
        }
    }
}

/// Packs the pairs of `row` that fill whole 32-value runs into column `r` of the tile with
/// `vcvtne2ps2bf16` (round to nearest even, as [`to_bf16`]; it also reads subnormal inputs as
/// zero, which model activations never are); returns how many pairs it packed. This conversion
/// was as costly as the multiply when done one value at a time.
fn vector_pairs(cpu: Avx512Bf16, row: &[f32], r: usize, tile: &mut [u32]) -> usize {
    let runs = row.len() / 32;
    assert!(r < MR && tile.len() > (runs * 16).saturating_sub(1) * MR + r, "tile too short");
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `cpu` proves AVX-512 F and BF16; `row` holds `runs·32` values and the tile the
    // stores (checked above).
    unsafe {
        let _ = cpu;
        x86::pack_runs(row.as_ptr(), runs, r, tile.as_mut_ptr());
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (cpu, tile);
        unreachable!("AVX-512 BF16 token off x86-64")
    }
    runs * 16
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::MR;
    use std::arch::x86_64::*;

    /// # Safety
    /// AVX-512 F and BF16 present; `row` holds `runs·32` floats; `tile` holds index
    /// `(runs·16 − 1)·MR + r`.
    #[target_feature(enable = "avx512f,avx512bf16")]
    pub(super) unsafe fn pack_runs(row: *const f32, runs: usize, r: usize, tile: *mut u32) {
        for c in 0..runs {
            // SAFETY (whole block): within the bounds of the caller's contract.
            unsafe {
                let lo = _mm512_loadu_ps(row.add(32 * c));
                let hi = _mm512_loadu_ps(row.add(32 * c + 16));
                // Low half from `lo`, high half from `hi`: bf16 values in row order, so dword i
                // is the pair (2i, 2i + 1).
                let pairs: __m512i = std::mem::transmute(_mm512_cvtne2ps_pbh(hi, lo));
                let mut dwords = [0u32; 16];
                _mm512_storeu_si512(dwords.as_mut_ptr() as *mut __m512i, pairs);
                for (i, &d) in dwords.iter().enumerate() {
                    *tile.add((16 * c + i) * MR + r) = d;
                }
            }
        }
    }
}

#[cfg(test)]
#[path = "conv_tests.rs"]
mod tests;
