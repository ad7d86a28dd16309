//! Exact-softmax attention with bf16 inputs and f32 accumulation: the attention of
//! [`super::CpuBf16Backend`].
//!
//! The arithmetic, on every path (per batch·head, query row `i`):
//! - `s_ij = scale · Σ_t bf(q_it)·bf(k_jt)`: q and k rounded to bf16 once (round to nearest,
//!   ties to even), products exact in f32, summed in f32;
//! - `e_ij = exp(s_ij − max_j s_ij)` with the vectorised f32 exp of the f32 path, and
//!   `z_i = Σ_j e_ij` in f32;
//! - `o_ic = (Σ_j bf(e_ij)·bf(v_jc)) · (1/z_i)`: the unnormalised softmax weights (in (0, 1])
//!   rounded to bf16, products summed in f32, the row scaled by the f32 `1/z_i` at the end.
//!
//! [`reference`] computes exactly that with plain loops and runs on every machine; the fast path
//! sums in a different order (pairs added by `vdpbf16ps`, z over 16 lanes), so the two agree to
//! f32 rounding of the accumulations.
//!
//! The fast path keeps the shape of the f32 attention (`cpu/attention.rs`): per batch·head the
//! keys and values are packed once, then each rayon task takes [`QUERY_BLOCK`] query rows:
//! - K is packed as panels of [`PANEL`] keys, `[head_dim/2][PANEL]` dwords holding the bf16 pair
//!   `(k[j, 2p], k[j, 2p+1])`; V as panels of [`PANEL`] columns, `[n/2][PANEL]` dwords holding
//!   `(v[2p, c], v[2p+1, c])`: pairs along the axis each product sums over, the operand layout
//!   `vdpbf16ps` multiplies lane by lane.
//! - The block's queries are rounded to bf16 pairs row by row (`[rows][head_dim/2]`), its scores
//!   `[rows, n]` (f32, in L2) come from the [`ROWS`]×[`PANEL`] micro-kernel (each row's max
//!   taken as they are stored), each row gets its exp and sum, and is rounded to bf16 pairs (`[rows][n/2]`), which the same micro-kernel
//!   multiplies with the V panels into the output.
//! - Odd head_dim or n is zero-padded in both packed operands of a product; rows and columns past
//!   the shape are computed on padding and never stored.
//!
//! Every shape the f32 op accepts runs here (no fallback is needed): any n ≥ 1, any head_dim ≥ 1,
//! any scale; the op has no mask. Scratch comes from the per-thread pool of `cpu/scratch.rs`,
//! so repeated calls of one size allocate nothing.
//!
//! `vdpbf16ps` and `vcvtne2ps2bf16` treat subnormal inputs as zero; the reference does not. The
//! exp never returns a subnormal (it clamps at e^−87.3), and model activations are far above
//! 1e-38, so this does not arise in practice.

use rayon::prelude::*;

#[cfg(test)]
use super::gemm::from_bf16;
use super::gemm::{to_bf16, Avx512Bf16};
use crate::cpu::scratch::with_scratch;
use crate::cpu::simd;
use crate::spec::AttentionSpec;

/// Query rows per task, a whole number of strips. Its f32 scores and bf16 weights (6 bytes per
/// key and row) stay within a 1 MiB L2 beside the packed K and V up to n ≈ 2000.
pub(crate) const QUERY_BLOCK: usize = 16 * ROWS;

/// Rows of the micro-kernel (query rows per strip).
pub(crate) const ROWS: usize = 6;
/// 16-lane vectors per micro-kernel row.
const VECS: usize = 4;
/// Columns of the micro-kernel: keys per K panel (scores) and output columns per V panel.
pub(crate) const PANEL: usize = 16 * VECS;

/// Dwords of the packed K and V of one batch·head.
fn packed_sizes(n: usize, d: usize) -> (usize, usize) {
    (n.div_ceil(PANEL) * d.div_ceil(2) * PANEL, d.div_ceil(PANEL) * n.div_ceil(2) * PANEL)
}

/// An f32 scratch buffer viewed as dwords of bf16 pairs.
fn as_words(buf: &mut [f32]) -> &mut [u32] {
    // SAFETY: f32 and u32 have the same size and alignment and every bit pattern is valid for
    // both; the new slice borrows `buf` mutably for its whole life, so nothing else aliases it.
    unsafe { std::slice::from_raw_parts_mut(buf.as_mut_ptr().cast::<u32>(), buf.len()) }
}

/// The fast path on the current rayon pool. `spec` must have been validated against the buffers.
pub(crate) fn attention(cpu: Avx512Bf16, spec: &AttentionSpec, q: &[f32], k: &[f32], v: &[f32], out: &mut [f32]) {
    let AttentionSpec { batch_heads, n, head_dim: d, .. } = *spec;
    let slab = n * d;
    if slab == 0 || batch_heads == 0 {
        return;
    }
    let (k_len, v_len) = packed_sizes(n, d);
    with_scratch(batch_heads * (k_len + v_len), |packed| {
        let packed = as_words(packed);
        packed.par_chunks_mut(k_len + v_len).enumerate().for_each(|(h, dst)| {
            let (kp, vp) = dst.split_at_mut(k_len);
            pack_keys(cpu, &k[h * slab..(h + 1) * slab], n, d, kp);
            pack_values(cpu, &v[h * slab..(h + 1) * slab], n, d, vp);
        });
        let packed = &packed[..];
        out[..batch_heads * slab].par_chunks_mut(slab).enumerate().for_each(|(h, out_head)| {
            let qh = &q[h * slab..(h + 1) * slab];
            let (kp, vp) = packed[h * (k_len + v_len)..(h + 1) * (k_len + v_len)].split_at(k_len);
            out_head.par_chunks_mut(QUERY_BLOCK * d).enumerate().for_each(|(blk, out_blk)| {
                let rows = out_blk.len() / d;
                let q_blk = &qh[blk * QUERY_BLOCK * d..blk * QUERY_BLOCK * d + rows * d];
                query_block(cpu, spec, q_blk, kp, vp, out_blk);
            });
        });
    });
}

/// One block of `out_blk.len() / head_dim` query rows against all keys of its batch·head.
fn query_block(cpu: Avx512Bf16, spec: &AttentionSpec, q_blk: &[f32], kp: &[u32], vp: &[u32], out_blk: &mut [f32]) {
    let (n, d, scale) = (spec.n, spec.head_dim, spec.scale);
    let rows = out_blk.len() / d;
    // A-operand rows padded to whole strips; the pad rows hold stale values whose results are
    // never stored.
    let strips = rows.div_ceil(ROWS);
    let (dp, np) = (d.div_ceil(2), n.div_ceil(2));
    let (qa_len, pa_len) = (strips * ROWS * dp, strips * ROWS * np);
    with_scratch(qa_len + rows * n + pa_len, |buf| {
        let (qa, rest) = buf.split_at_mut(qa_len);
        let (scores, pa) = rest.split_at_mut(rows * n);
        let (qa, pa) = (as_words(qa), as_words(pa));
        for (src, dst) in q_blk.chunks(d).zip(qa.chunks_mut(dp)) {
            round_pairs(cpu, src, dst);
        }
        let mut tile = [[0.0f32; PANEL]; ROWS];
        // Each row's max, taken while its scores are stored (one pass over the scores fewer).
        let mut row_max = [f32::NEG_INFINITY; QUERY_BLOCK];
        for (jp, panel) in kp.chunks(dp * PANEL).enumerate() {
            let cols = (n - jp * PANEL).min(PANEL);
            for s in 0..strips {
                micro_kernel(cpu, dp, &qa[s * ROWS * dp..(s + 1) * ROWS * dp], dp, panel, &mut tile);
                for (r, acc) in tile.iter().enumerate().take(rows - (s * ROWS).min(rows)) {
                    let dst = &mut scores[(s * ROWS + r) * n + jp * PANEL..][..cols];
                    let m = scale_store_max(cpu, acc, scale, dst);
                    row_max[s * ROWS + r] = row_max[s * ROWS + r].max(m);
                }
            }
        }
        let mut inv_sum = [0.0f32; QUERY_BLOCK];
        for (((row, inv), dst), &m) in scores.chunks_mut(n).zip(inv_sum.iter_mut()).zip(pa.chunks_mut(np)).zip(&row_max) {
            *inv = 1.0 / simd::exp_shift_sum_lanes(row, m);
            round_pairs(cpu, row, dst);
        }
        for (cp, panel) in vp.chunks(np * PANEL).enumerate() {
            let cols = (d - cp * PANEL).min(PANEL);
            for s in 0..strips {
                micro_kernel(cpu, np, &pa[s * ROWS * np..(s + 1) * ROWS * np], np, panel, &mut tile);
                for (r, acc) in tile.iter().enumerate().take(rows - (s * ROWS).min(rows)) {
                    let inv = inv_sum[s * ROWS + r];
                    let dst = &mut out_blk[(s * ROWS + r) * d + cp * PANEL..][..cols];
                    for (o, &a) in dst.iter_mut().zip(acc) {
                        *o = a * inv;
                    }
                }
            }
        }
    });
}

/// `dst[c] = scale·acc[c]` for `c < dst.len()` (≤ [`PANEL`]), returning the largest.
fn scale_store_max(cpu: Avx512Bf16, acc: &[f32; PANEL], scale: f32, dst: &mut [f32]) -> f32 {
    assert!(dst.len() <= PANEL, "scale_store_max: more than a panel");
    #[cfg(target_arch = "x86_64")]
    if dst.len() == PANEL {
        // SAFETY: `cpu` proves AVX-512 F; both hold PANEL floats.
        return unsafe {
            let _ = cpu;
            x86::scale_store_max(acc, scale, dst)
        };
    }
    let _ = cpu;
    let mut m = f32::NEG_INFINITY;
    for (o, &a) in dst.iter_mut().zip(acc) {
        *o = scale * a;
        m = m.max(*o);
    }
    m
}

/// `dst[p] = (bf(src[2p]), bf(src[2p+1]))` as one dword, the second half zero past an odd end.
/// `dst` must hold `src.len().div_ceil(2)` dwords.
pub(crate) fn round_pairs(cpu: Avx512Bf16, src: &[f32], dst: &mut [u32]) {
    assert!(dst.len() >= src.len().div_ceil(2), "round_pairs: destination too short");
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `cpu` proves AVX-512 F and BF16; the length is checked above.
    unsafe {
        let _ = cpu;
        x86::round_pairs(src, dst)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (cpu, src, dst);
        unreachable!("AVX-512 BF16 token off x86-64")
    }
}

/// The scalar tail of [`round_pairs`] from element `2·first_pair` on.
#[inline(always)]
fn round_pairs_tail(src: &[f32], dst: &mut [u32], first_pair: usize) {
    let mut pairs = src[2 * first_pair..].chunks(2);
    for (o, pair) in dst[first_pair..].iter_mut().zip(&mut pairs) {
        let lo = to_bf16(pair[0]) as u32;
        let hi = pair.get(1).map_or(0, |&x| to_bf16(x) as u32);
        *o = lo | (hi << 16);
    }
}

/// Packs one head's keys (`[n, d]` row-major) as `n/PANEL` panels of `[d/2][PANEL]` pairs.
fn pack_keys(cpu: Avx512Bf16, k: &[f32], n: usize, d: usize, dst: &mut [u32]) {
    let dp = d.div_ceil(2);
    // One key's pairs at a time, 16 pairs (a 32-float chunk) per conversion.
    let mut pairs = [0u32; 16];
    for (jp, panel) in dst.chunks_mut(dp * PANEL).enumerate() {
        for jj in 0..PANEL {
            let j = jp * PANEL + jj;
            if j >= n {
                for p in 0..dp {
                    panel[p * PANEL + jj] = 0;
                }
                continue;
            }
            for (c, chunk) in k[j * d..(j + 1) * d].chunks(32).enumerate() {
                let got = chunk.len().div_ceil(2);
                round_pairs(cpu, chunk, &mut pairs[..got]);
                for (i, &w) in pairs[..got].iter().enumerate() {
                    panel[(c * 16 + i) * PANEL + jj] = w;
                }
            }
        }
    }
}

/// Packs one head's values (`[n, d]` row-major) as `d/PANEL` panels of `[n/2][PANEL]` pairs.
fn pack_values(cpu: Avx512Bf16, v: &[f32], n: usize, d: usize, dst: &mut [u32]) {
    let np = n.div_ceil(2);
    for (cp, panel) in dst.chunks_mut(np * PANEL).enumerate() {
        let c0 = cp * PANEL;
        let cols = (d - c0).min(PANEL);
        for (p, out) in panel.chunks_mut(PANEL).enumerate() {
            let lo = &v[2 * p * d + c0..][..cols];
            let hi = if 2 * p + 1 < n { Some(&v[(2 * p + 1) * d + c0..][..cols]) } else { None };
            interleave_pairs(cpu, lo, hi, &mut out[..cols]);
            out[cols..].fill(0);
        }
    }
}

/// `out[c] = (bf(lo[c]), bf(hi[c]))`, the second half zero without `hi`.
fn interleave_pairs(cpu: Avx512Bf16, lo: &[f32], hi: Option<&[f32]>, out: &mut [u32]) {
    assert!(lo.len() == out.len() && hi.is_none_or(|h| h.len() == out.len()), "interleave_pairs: lengths differ");
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `cpu` proves AVX-512 F and BF16; lengths checked above.
    unsafe {
        let _ = cpu;
        x86::interleave_pairs(lo, hi, out)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (cpu, lo, hi, out);
        unreachable!("AVX-512 BF16 token off x86-64")
    }
}

/// `tile[r][c] = Σ_p A-pair(r, p) · B-pair(p, c)` for `r < ROWS`, `c < PANEL`: A is `ROWS` rows
/// of `pairs` dwords, `a_stride` apart; B a packed panel `[pairs][PANEL]`.
fn micro_kernel(cpu: Avx512Bf16, pairs: usize, a: &[u32], a_stride: usize, b: &[u32], tile: &mut [[f32; PANEL]; ROWS]) {
    assert!(
        a_stride >= pairs && a.len() >= (ROWS - 1) * a_stride + pairs && b.len() >= pairs * PANEL,
        "attention micro-kernel operands too short"
    );
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `cpu` proves AVX-512 F and BF16; lengths checked above.
    unsafe {
        let _ = cpu;
        x86::micro_kernel(pairs, a.as_ptr(), a_stride, b.as_ptr(), tile)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (cpu, pairs, a, a_stride, b, tile);
        unreachable!("AVX-512 BF16 token off x86-64")
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{round_pairs_tail, to_bf16, PANEL, ROWS, VECS};
    use std::arch::x86_64::*;

    /// # Safety
    /// AVX-512 F and BF16; `dst.len() ≥ src.len().div_ceil(2)`.
    #[target_feature(enable = "avx512f,avx512bf16")]
    pub(super) unsafe fn round_pairs(src: &[f32], dst: &mut [u32]) {
        let full = src.len() / 32;
        for i in 0..full {
            // SAFETY: 32·i + 32 ≤ src.len() and 16·i + 16 ≤ dst.len().
            unsafe {
                let lo = _mm512_loadu_ps(src.as_ptr().add(32 * i));
                let hi = _mm512_loadu_ps(src.as_ptr().add(32 * i + 16));
                // Lanes 0..16 from the second operand, 16..32 from the first: memory order.
                let bh: __m512i = std::mem::transmute(_mm512_cvtne2ps_pbh(hi, lo));
                _mm512_storeu_si512(dst.as_mut_ptr().add(16 * i) as *mut __m512i, bh);
            }
        }
        round_pairs_tail(src, dst, 16 * full);
    }

    /// # Safety
    /// AVX-512 F; `dst` holds `PANEL` floats.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn scale_store_max(acc: &[f32; PANEL], scale: f32, dst: &mut [f32]) -> f32 {
        let s = _mm512_set1_ps(scale);
        let mut m = _mm512_set1_ps(f32::NEG_INFINITY);
        for v in 0..VECS {
            // SAFETY: 16·v + 16 ≤ PANEL, the length of both.
            unsafe {
                let x = _mm512_mul_ps(s, _mm512_loadu_ps(acc.as_ptr().add(16 * v)));
                _mm512_storeu_ps(dst.as_mut_ptr().add(16 * v), x);
                m = _mm512_max_ps(m, x);
            }
        }
        _mm512_reduce_max_ps(m)
    }

    /// # Safety
    /// AVX-512 F and BF16; `lo`, `hi` (if any) and `out` of one length.
    #[target_feature(enable = "avx512f,avx512bf16")]
    pub(super) unsafe fn interleave_pairs(lo: &[f32], hi: Option<&[f32]>, out: &mut [u32]) {
        let full = out.len() / 16;
        for i in 0..full {
            // SAFETY: 16·i + 16 ≤ every length.
            unsafe {
                let l: __m256i = std::mem::transmute(_mm512_cvtneps_pbh(_mm512_loadu_ps(lo.as_ptr().add(16 * i))));
                let mut w = _mm512_cvtepu16_epi32(l);
                if let Some(hi) = hi {
                    let h: __m256i = std::mem::transmute(_mm512_cvtneps_pbh(_mm512_loadu_ps(hi.as_ptr().add(16 * i))));
                    w = _mm512_or_si512(w, _mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(h)));
                }
                _mm512_storeu_si512(out.as_mut_ptr().add(16 * i) as *mut __m512i, w);
            }
        }
        for c in 16 * full..out.len() {
            let h = hi.map_or(0, |h| to_bf16(h[c]) as u32);
            out[c] = to_bf16(lo[c]) as u32 | (h << 16);
        }
    }

    /// The `ROWS`×`PANEL` tile: per pair, `VECS` B vectors and one broadcast A pair per row feed
    /// `vdpbf16ps`, `ROWS·VECS` = 24 accumulators in registers.
    ///
    /// # Safety
    /// AVX-512 F and BF16; `a` holds `(ROWS−1)·a_stride + pairs` dwords, `b` `pairs·PANEL`.
    #[target_feature(enable = "avx512f,avx512bf16")]
    pub(super) unsafe fn micro_kernel(pairs: usize, a: *const u32, a_stride: usize, b: *const u32, tile: &mut [[f32; PANEL]; ROWS]) {
        let mut acc = [[_mm512_setzero_ps(); VECS]; ROWS];
        for p in 0..pairs {
            // SAFETY (whole block): offsets inside the operands by the caller's contract.
            unsafe {
                let bp = b.add(p * PANEL);
                let mut bv = [std::mem::transmute::<__m512i, __m512bh>(_mm512_setzero_si512()); VECS];
                for (v, slot) in bv.iter_mut().enumerate() {
                    *slot = std::mem::transmute::<__m512i, __m512bh>(_mm512_loadu_si512(bp.add(16 * v) as *const __m512i));
                }
                for (r, row) in acc.iter_mut().enumerate() {
                    let pair: __m512bh = std::mem::transmute(_mm512_set1_epi32(*a.add(r * a_stride + p) as i32));
                    for (slot, &bv) in row.iter_mut().zip(&bv) {
                        *slot = _mm512_dpbf16_ps(*slot, pair, bv);
                    }
                }
            }
        }
        for (out, row) in tile.iter_mut().zip(&acc) {
            for (v, &x) in row.iter().enumerate() {
                // SAFETY: out has PANEL = 16·VECS floats.
                unsafe { _mm512_storeu_ps(out.as_mut_ptr().add(16 * v), x) };
            }
        }
    }
}

/// Deliberate departures from the arithmetic, for tests that show a wrong kernel is caught.
#[cfg(test)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Variant {
    /// Use the keys unrounded.
    pub(crate) keep_k_f32: bool,
    /// Use the softmax weights unrounded.
    pub(crate) keep_p_f32: bool,
    /// Skip the final `1/z` scaling.
    pub(crate) unnormalised: bool,
}

/// The arithmetic of this module with plain loops, keys and head dims in order: the reference
/// the fast path is tested against. Runs on every machine. `spec` must have been validated.
#[cfg(test)]
pub(crate) fn reference(spec: &AttentionSpec, q: &[f32], k: &[f32], v: &[f32], out: &mut [f32]) {
    reference_variant(spec, q, k, v, out, Variant::default())
}

#[cfg(test)]
pub(crate) fn reference_variant(spec: &AttentionSpec, q: &[f32], k: &[f32], v: &[f32], out: &mut [f32], variant: Variant) {
    let AttentionSpec { batch_heads, n, head_dim: d, scale } = *spec;
    let bf = |x: f32| from_bf16(to_bf16(x));
    let mut e = vec![0.0f32; n];
    for h in 0..batch_heads {
        let base = h * n * d;
        for i in 0..n {
            let qi = &q[base + i * d..base + (i + 1) * d];
            for (j, ej) in e.iter_mut().enumerate() {
                let kj = &k[base + j * d..base + (j + 1) * d];
                let mut acc = 0.0f32;
                for (&x, &y) in qi.iter().zip(kj) {
                    acc += bf(x) * if variant.keep_k_f32 { y } else { bf(y) };
                }
                *ej = scale * acc;
            }
            let m = e.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x));
            let mut z = 0.0f32;
            for ej in e.iter_mut() {
                *ej = simd::exp(*ej - m);
                z += *ej;
            }
            let inv = if variant.unnormalised { 1.0 } else { 1.0 / z };
            for c in 0..d {
                let mut acc = 0.0f32;
                for (j, &ej) in e.iter().enumerate() {
                    let p = if variant.keep_p_f32 { ej } else { bf(ej) };
                    acc += p * bf(v[base + j * d + c]);
                }
                out[base + i * d + c] = acc * inv;
            }
        }
    }
}
