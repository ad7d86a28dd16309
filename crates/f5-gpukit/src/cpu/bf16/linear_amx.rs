//! `Linear` layers (`y = x·Wᵀ + b`, the weight `[out, inp]` as PyTorch stores it) on the AMX
//! bf16 tiles, in two forms:
//!
//! - **bf16 weights** ([`linear_bf16`]): the arithmetic of the bf16 GEMM module ([`super::gemm`]:
//!   each input rounded to bf16, products exact in f32, summed in f32) in the tiles' order. The
//!   weight is packed per call into the panels below (its `hi` parts only, as that module packs
//!   its B), and one `tdpbf16ps` does 8,192 multiply-adds: many times the AVX-512 BF16 kernel's
//!   rate on the same core, which on Intel cores issues once a cycle.
//! - **split weights** ([`linear`]): f32 Linear layers at close to f32's accuracy ("split
//!   bf16"), for the layers a model needs more exactly than bf16's 8 bits (Kokoro's ALBERT,
//!   whose outputs steer the durations and F0) where the CPU's f32 FMAs would otherwise run them
//!   at a fraction of the tiles' rate.
//!
//! Each f32 value `v` is held as two bf16 values, `hi = bf16(v)` and `lo = bf16(v − hi)` (both
//! rounded to nearest even; `v − hi` is exact in f32). They carry 16 of its 24 significant bits:
//! `|v − hi − lo| ≤ 2⁻¹⁶·|v|`. A product `a·w` is computed as `a_hi·w_hi + a_lo·w_hi +
//! a_hi·w_lo`: three `tdpbf16ps` products, each exact in f32, summed in f32 with the rest of the
//! dot product. The dropped `a_lo·w_lo` and the two representation errors leave each product
//! within `3·2⁻¹⁶ + 2⁻³²` of the exact one, relative (against bf16's `2⁻⁷`); the sum adds f32's
//! own rounding. On the int8-derived Kokoro weights this keeps F0 and N at the f32 path's
//! error against PyTorch (see the model's docs).
//!
//! Layout. The weight `[out, inp]` (a `Linear`'s, as PyTorch stores it) is split and packed once,
//! at upload, into panels of [`NR`] output features: `[pairs][NR]` dwords of `hi` pairs
//! `(w[j, 2p], w[j, 2p + 1])`, then the same of `lo` pairs — the B operand layout
//! `tdpbf16ps` takes, two 16-column tiles per step. `pairs` is `⌈inp/2⌉` rounded up to 16 (one
//! 64-byte tile row), padded with zero pairs. Per GEMM the input rows are split into `hi` and
//! `lo` pair rows once (`[rows][hi pairs | lo pairs]`, padded with zero pairs and zero rows to a
//! whole tile), and the tile kernel computes 32 × 32 outputs per panel: per 16-pair step it loads
//! the `lo` A tiles and `hi` B tiles (4 products), the `hi` A tiles (4 more) and the `lo` B
//! tiles (4 more) — 8 tile loads for 12 products.
//!
//! A bf16 weight's panels hold the `hi` pairs only, the input rows are rounded to `hi` pairs
//! only, and a step is one A × B product (4 `tdpbf16ps`, 4 tile loads).
//!
//! Threads take blocks of up to [`CHUNK_ROWS`] rows × a run of panels: a panel (≤ 256 KiB at
//! `inp` = 2048) stays in the core's L2 while the block's row tiles read it, and the block's
//! converted rows stay there across its panels.

use rayon::prelude::*;

use super::amx::{AmxBf16, TILE_ROWS};
use super::gemm::{from_bf16, to_bf16, Avx512Bf16, NR};
use crate::cpu::lines::LineVec;
use crate::cpu::scratch::with_shared_scratch_u32;

/// Rows of the tile kernel: two 16-row A tiles.
const MR: usize = 2 * TILE_ROWS;
/// Pairs per tile step (one 64-byte tile row).
const STEP_PAIRS: usize = 16;
/// Rows per task block: four row tiles.
const CHUNK_ROWS: usize = 4 * MR;

/// `v` as `(hi, lo)` bf16 bits with `hi + lo` within `2⁻¹⁶·|v|` of `v`; `lo` is zero where
/// `hi` is not finite (±∞, NaN), so the pair stands for `hi` alone.
pub(crate) fn split(v: f32) -> (u16, u16) {
    let hi = to_bf16(v);
    let rest = v - from_bf16(hi);
    (hi, if rest.is_finite() { to_bf16(rest) } else { 0 })
}

/// Pair steps an input of `inp` values takes: `⌈inp/2⌉` rounded up to whole 16-pair steps.
fn padded_pairs(inp: usize) -> usize {
    inp.div_ceil(2).div_ceil(STEP_PAIRS) * STEP_PAIRS
}

/// A `Linear` weight `[out, inp]` split into bf16 `hi` and `lo` parts and packed for the tiles
/// (module docs): the only form the bf16 CPU backend holds it in.
#[derive(Clone, Debug)]
pub(crate) struct SplitLinear {
    out: usize,
    inp: usize,
    /// `[out/NR panels][hi: pairs·NR | lo: pairs·NR]` dwords, on cache lines (tile loads).
    panels: LineVec<u32>,
}

impl SplitLinear {
    /// Splits and packs `w` (`[out, inp]` row-major, `out·inp` values: the caller checked).
    pub(crate) fn pack(w: &[f32], out: usize, inp: usize) -> Self {
        debug_assert_eq!(w.len(), out * inp);
        let pairs = padded_pairs(inp);
        let panel_len = 2 * pairs * NR;
        let mut panels = LineVec::zeroed(out.div_ceil(NR) * panel_len);
        panels.par_chunks_mut(panel_len.max(1)).enumerate().for_each(|(jp, panel)| {
            let (hi, lo) = panel.split_at_mut(pairs * NR);
            for j in 0..NR.min(out - jp * NR) {
                let row = &w[(jp * NR + j) * inp..(jp * NR + j + 1) * inp];
                for (p, two) in row.chunks(2).enumerate() {
                    let (h0, l0) = split(two[0]);
                    let (h1, l1) = two.get(1).map_or((0, 0), |&v| split(v));
                    hi[p * NR + j] = u32::from(h0) | u32::from(h1) << 16;
                    lo[p * NR + j] = u32::from(l0) | u32::from(l1) << 16;
                }
            }
        });
        SplitLinear { out, inp, panels }
    }

    /// `(out, inp)`.
    pub(crate) fn shape(&self) -> (usize, usize) {
        (self.out, self.inp)
    }

    pub(crate) fn len(&self) -> usize {
        self.out * self.inp
    }

    /// Values `offset..offset + dst.len()` (row-major `[out, inp]`) as the kernel computes with
    /// them, `hi + lo`. The range lies inside the weight (the caller checked).
    pub(crate) fn read_into(&self, offset: usize, dst: &mut [f32]) {
        let pairs = padded_pairs(self.inp);
        for (i, d) in (offset..).zip(dst.iter_mut()) {
            let (j, c) = (i / self.inp, i % self.inp);
            let at = (j / NR) * 2 * pairs * NR + (c / 2) * NR + j % NR;
            let half = |dword: u32| (dword >> (16 * (c % 2))) as u16;
            *d = from_bf16(half(self.panels[at])) + from_bf16(half(self.panels[at + pairs * NR]));
        }
    }
}

/// `y[rows, out] = x[rows, inp] · wᵀ (+ bias)` for a split weight, on the tiles, `x` and `y`
/// row-major, on the current rayon pool. The lengths are checked by the caller (`x`:
/// `rows·inp`, `y`: `rows·out`, `bias`: `out`).
pub(crate) fn linear(amx: AmxBf16, cpu: Avx512Bf16, w: &SplitLinear, x: &[f32], rows: usize, bias: Option<&[f32]>, y: &mut [f32]) {
    let (out, inp) = w.shape();
    let panels = Panels { data: &w.panels, out, inp, parts: 2 };
    run(amx, cpu, &panels, x, rows, bias, y);
}

/// `y[rows, out] = x[rows, inp] · wᵀ (+ bias)` for a bf16 weight `w` (`[out, inp]` bf16 bits),
/// as [`linear`]: the weight packed into shared scratch for this call.
#[allow(clippy::too_many_arguments)]
pub(crate) fn linear_bf16(
    amx: AmxBf16,
    cpu: Avx512Bf16,
    w: &[u16],
    (out, inp): (usize, usize),
    x: &[f32],
    rows: usize,
    bias: Option<&[f32]>,
    y: &mut [f32],
) {
    debug_assert_eq!(w.len(), out * inp);
    let pairs = padded_pairs(inp);
    with_shared_scratch_u32(out.div_ceil(NR) * pairs * NR, |packed| {
        // The bf16 GEMM's own B packing (the weight read transposed), then zero pairs up to a
        // whole tile step.
        let layout = crate::spec::MatLayout::transposed(inp);
        packed.par_chunks_mut((pairs * NR).max(1)).enumerate().for_each(|(jp, panel)| {
            let (used, pad) = panel.split_at_mut(inp.div_ceil(2) * NR);
            super::gemm::pack_b_panel(w, 0, &layout, inp, out, jp * NR, used);
            pad.fill(0);
        });
        run(amx, cpu, &Panels { data: packed, out, inp, parts: 1 }, x, rows, bias, y);
    });
}

/// A weight's packed panels: per panel of [`NR`] output features, `parts` blocks of
/// `[pairs][NR]` dwords (`hi`, then `lo` for a split weight).
struct Panels<'a> {
    data: &'a [u32],
    out: usize,
    inp: usize,
    parts: usize,
}

/// The tile loop of both forms: the input rows converted to `parts` blocks of pairs each, then
/// the tasks of row chunks × panel runs.
fn run(amx: AmxBf16, cpu: Avx512Bf16, w: &Panels<'_>, x: &[f32], rows: usize, bias: Option<&[f32]>, y: &mut [f32]) {
    let (out, inp, parts) = (w.out, w.inp, w.parts);
    if rows == 0 || out == 0 {
        return;
    }
    let pairs = padded_pairs(inp);
    if pairs == 0 {
        // No products: each row is the bias (or zero).
        for row in y.chunks_exact_mut(out) {
            match bias {
                Some(b) => row.copy_from_slice(b),
                None => row.fill(0.0),
            }
        }
        return;
    }
    let row_len = parts * pairs;
    let panel_len = parts * pairs * NR;
    let padded_rows = rows.div_ceil(MR) * MR;
    with_shared_scratch_u32(padded_rows * row_len, |xs| {
        // Convert the input rows (zero pairs past `inp`, zero rows past `rows`).
        xs.par_chunks_mut(MR * row_len).enumerate().for_each(|(blk, dst)| {
            for (r, row) in dst.chunks_exact_mut(row_len).enumerate() {
                let src = blk * MR + r;
                if src < rows {
                    split_row(cpu, &x[src * inp..(src + 1) * inp], row, parts == 2);
                } else {
                    row.fill(0);
                }
            }
        });
        let xs = &*xs;
        let panels = out.div_ceil(NR);
        let chunks = padded_rows.div_ceil(CHUNK_ROWS);
        // Enough tasks for every thread (a few each, as the machine's other work may slow one).
        let groups = (4 * rayon::current_num_threads()).div_ceil(chunks).clamp(1, panels);
        let per_group = panels.div_ceil(groups);
        let y_at = SharedOut(y.as_mut_ptr());
        (0..chunks * groups).into_par_iter().for_each(|task| {
            let (chunk, group) = (task / groups, task % groups);
            let row0 = chunk * CHUNK_ROWS;
            let chunk_rows = (padded_rows - row0).min(CHUNK_ROWS);
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `amx` proves the tiles (and `cpu` AVX-512 BF16); the configuration is
            // released when `_tiles` drops at the end of the task, and the kernel uses no other
            // tile shapes in between.
            let _tiles = unsafe { crate::cpu::bf16::amx::x86::Tiles::load() };
            let mut sums = Sums::zero();
            for jp in group * per_group..((group + 1) * per_group).min(panels) {
                let (j0, width) = (jp * NR, (out - jp * NR).min(NR));
                let panel = &w.data[jp * panel_len..(jp + 1) * panel_len];
                let bias = bias.map(|b| &b[j0..j0 + width]);
                for r0 in (row0..row0 + chunk_rows).step_by(MR) {
                    let valid = (rows.saturating_sub(r0)).min(MR);
                    if valid == 0 {
                        break;
                    }
                    let a = &xs[r0 * row_len..(r0 + MR) * row_len];
                    // SAFETY: the rectangle rows `r0..r0 + valid` × columns `j0..j0 + width`
                    // lies inside `y` (`rows·out` values), and no other task writes it: tasks
                    // cover disjoint (row chunk, panel) pairs.
                    unsafe { tile(amx, a, panel, (pairs, parts), bias, &mut sums, y_at.at(r0 * out + j0), (out, valid, width)) };
                }
            }
        });
    });
}

/// `y`'s start, shared by the tasks; each writes its own rectangle.
#[derive(Clone, Copy)]
struct SharedOut(*mut f32);
// SAFETY: the tasks write disjoint rectangles of the output (see `linear`).
unsafe impl Send for SharedOut {}
// SAFETY: as above.
unsafe impl Sync for SharedOut {}

impl SharedOut {
    /// The output's value `offset` (a method, so that closures capture the `Sync` wrapper).
    fn at(self, offset: usize) -> *mut f32 {
        self.0.wrapping_add(offset)
    }
}

#[cfg(target_arch = "x86_64")]
type Sums = crate::cpu::bf16::amx::x86::F32Sums;
#[cfg(not(target_arch = "x86_64"))]
struct Sums;
#[cfg(not(target_arch = "x86_64"))]
impl Sums {
    fn zero() -> Self {
        Sums
    }
}

/// One row `x` (`inp` values) as `hi` pairs, then (`with_lo`) `lo` pairs, into `dst` (`pairs`
/// dwords each, the pairs past `inp` zero).
fn split_row(cpu: Avx512Bf16, x: &[f32], dst: &mut [u32], with_lo: bool) {
    let pairs = if with_lo { dst.len() / 2 } else { dst.len() };
    assert!(pairs >= x.len().div_ceil(2) && dst.len() == (1 + usize::from(with_lo)) * pairs, "converted row length");
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `cpu` proves AVX-512 F and BF16; the kernel reads `x.len()` values and writes
    // `dst`'s `2·pairs` dwords (checked above).
    unsafe {
        let _ = cpu;
        x86::split_row(x.as_ptr(), x.len(), dst.as_mut_ptr(), pairs, with_lo);
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (cpu, dst);
        unreachable!("AVX-512 BF16 token off x86-64")
    }
}

/// `dst[r·ldy + j] = bias[j] + Σ_p (a_lo·w_hi + a_hi·w_hi + a_hi·w_lo)` (split, `parts` 2) or
/// `bias[j] + Σ_p a_hi·w_hi` (bf16, `parts` 1) for the `valid` first of the 32 converted rows
/// `a` (`parts·pairs` dwords each) and the panel's first `width` columns.
///
/// # Safety
/// `dst` is valid for writes of `valid` rows of `width` values, `ldy` apart, which nothing
/// else accesses meanwhile; the tiles are configured.
#[allow(clippy::too_many_arguments)]
unsafe fn tile(
    amx: AmxBf16,
    a: &[u32],
    panel: &[u32],
    (pairs, parts): (usize, usize),
    bias: Option<&[f32]>,
    sums: &mut Sums,
    dst: *mut f32,
    (ldy, valid, width): (usize, usize, usize),
) {
    assert!((1..=MR).contains(&valid) && (1..=NR).contains(&width) && width <= ldy, "tile shape");
    let row_len = parts * pairs;
    assert!((1..=2).contains(&parts) && a.len() == MR * row_len && pairs.is_multiple_of(STEP_PAIRS), "converted rows");
    assert!(panel.len() == parts * pairs * NR && bias.is_none_or(|b| b.len() == width), "panel, bias");
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `amx` proves the tiles, configured by the caller; every tile load reads inside `a`
    // (32 rows of `row_len` dwords) or `panel` (`2·pairs·NR` dwords), as checked above; the
    // store writes `valid` rows of `width` values at `dst` (the caller's).
    unsafe {
        x86::zero(amx);
        for s in 0..pairs / STEP_PAIRS {
            let q = s * STEP_PAIRS;
            let hi = [a.as_ptr().add(q), a.as_ptr().add(TILE_ROWS * row_len + q)];
            if parts == 2 {
                x86::step(amx, hi, pairs, 4 * row_len, panel.as_ptr().add(q * NR), pairs * NR);
            } else {
                crate::cpu::bf16::amx::x86::step_bf16(hi, [4 * row_len; 2], panel.as_ptr().add(q * NR));
            }
        }
        let bias = bias.map_or(std::ptr::null(), |b| b.as_ptr());
        crate::cpu::bf16::amx::x86::store_f32_sums(sums, bias, dst, ldy, valid, width);
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (amx, sums, dst, ldy, row_len);
        unreachable!("AMX token off x86-64")
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::AmxBf16;
    use crate::cpu::bf16::gemm::NR;
    use std::arch::asm;
    use std::arch::x86_64::*;

    /// Zeroes the C tiles.
    ///
    /// # Safety
    /// The tiles configured.
    pub(super) unsafe fn zero(_amx: AmxBf16) {
        // SAFETY: tile-register writes only.
        unsafe { crate::cpu::bf16::amx::x86::zero_c_tiles() };
    }

    /// One 16-pair step of the 32 × 32 tile: `C += a_lo·w_hi + a_hi·w_hi + a_hi·w_lo`, A tiles
    /// (tmm4–5, rows 0–15 and 16–31) at `hi[h]` (`hi` pairs) and `hi[h] + lo_off` (`lo`
    /// pairs), rows `lda` bytes apart; B tiles (tmm6–7, columns 0–15 and 16–31) at `b` (`hi`)
    /// and `b + b_lo_off` (`lo`), rows `NR` dwords apart.
    ///
    /// # Safety
    /// The tiles configured; each A tile reads 16 rows of 64 bytes at its pointer, each B tile
    /// 16 rows of 64 bytes at its pointer (and 16 dwords on).
    pub(super) unsafe fn step(_amx: AmxBf16, hi: [*const u32; 2], lo_off: usize, lda: usize, b: *const u32, b_lo_off: usize) {
        // SAFETY: the loads lie inside the operands the caller vouches for.
        unsafe {
            asm!(
                // a_lo · w_hi
                "tileloadd tmm4, [{l0} + {lda}*1]",
                "tileloadd tmm6, [{bh0} + {ldb}*1]",
                "tileloadd tmm7, [{bh1} + {ldb}*1]",
                "tdpbf16ps tmm0, tmm4, tmm6",
                "tileloadd tmm5, [{l1} + {lda}*1]",
                "tdpbf16ps tmm1, tmm4, tmm7",
                "tdpbf16ps tmm2, tmm5, tmm6",
                "tdpbf16ps tmm3, tmm5, tmm7",
                // a_hi · w_hi
                "tileloadd tmm4, [{h0} + {lda}*1]",
                "tdpbf16ps tmm0, tmm4, tmm6",
                "tdpbf16ps tmm1, tmm4, tmm7",
                "tileloadd tmm5, [{h1} + {lda}*1]",
                "tdpbf16ps tmm2, tmm5, tmm6",
                "tdpbf16ps tmm3, tmm5, tmm7",
                // a_hi · w_lo
                "tileloadd tmm6, [{bl0} + {ldb}*1]",
                "tileloadd tmm7, [{bl1} + {ldb}*1]",
                "tdpbf16ps tmm0, tmm4, tmm6",
                "tdpbf16ps tmm1, tmm4, tmm7",
                "tdpbf16ps tmm2, tmm5, tmm6",
                "tdpbf16ps tmm3, tmm5, tmm7",
                h0 = in(reg) hi[0],
                h1 = in(reg) hi[1],
                l0 = in(reg) hi[0].wrapping_add(lo_off),
                l1 = in(reg) hi[1].wrapping_add(lo_off),
                bh0 = in(reg) b,
                bh1 = in(reg) b.wrapping_add(16),
                bl0 = in(reg) b.wrapping_add(b_lo_off),
                bl1 = in(reg) b.wrapping_add(b_lo_off + 16),
                lda = in(reg) lda,
                ldb = in(reg) 4 * NR,
                options(nostack, readonly),
            );
        }
    }

    /// `x` (`len` values) as `hi` pairs into `dst[..pairs]` and, `with_lo`, `lo` pairs into
    /// `dst[pairs..2·pairs]`, the pairs past `len` zero.
    ///
    /// # Safety
    /// AVX-512 F and BF16 present; `x` holds `len` values, `dst` `pairs` dwords (`2·pairs` with
    /// `lo`), `2·pairs ≥ len`.
    #[target_feature(enable = "avx512f,avx512bf16")]
    pub(super) unsafe fn split_row(x: *const f32, len: usize, dst: *mut u32, pairs: usize, with_lo: bool) {
        let lanes = |n: usize| if n >= 16 { 0xFFFFu16 } else { ((1u32 << n) - 1) as u16 };
        // bf16 bits (16 of them, in a 256-bit half) back to the f32 values.
        let widen = |half: __m256i| _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(half)));
        let (hi_out, lo_out) = (dst, dst.wrapping_add(pairs));
        let mut c = 0;
        // SAFETY (whole loop): masked loads read only `x[..len]`; the stores write dwords
        // `c/2..c/2 + 16` (below `pairs`) of each half of `dst`.
        unsafe {
            while c < 2 * pairs {
                let left = len.saturating_sub(c);
                let v0 = _mm512_maskz_loadu_ps(lanes(left), x.wrapping_add(c));
                let v1 = _mm512_maskz_loadu_ps(lanes(left.saturating_sub(16)), x.wrapping_add(c + 16));
                let hi = std::mem::transmute::<__m512bh, __m512i>(_mm512_cvtne2ps_pbh(v1, v0));
                _mm512_storeu_si512(hi_out.add(c / 2) as *mut __m512i, hi);
                if !with_lo {
                    c += 32;
                    continue;
                }
                let r0 = _mm512_sub_ps(v0, widen(_mm512_castsi512_si256(hi)));
                let r1 = _mm512_sub_ps(v1, widen(_mm512_extracti64x4_epi64::<1>(hi)));
                // ±∞ or NaN inputs leave a NaN rest: the pair is `hi` alone, as `split` has it.
                let r0 = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask::<_CMP_ORD_Q>(r0, r0), r0);
                let r1 = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask::<_CMP_ORD_Q>(r1, r1), r1);
                let lo = std::mem::transmute::<__m512bh, __m512i>(_mm512_cvtne2ps_pbh(r1, r0));
                _mm512_storeu_si512(lo_out.add(c / 2) as *mut __m512i, lo);
                c += 32;
            }
        }
    }
}
