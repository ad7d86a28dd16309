//! f32 GEMM for products with few rows whose B is k-contiguous (AVX-512 F + VL): B read in place.
//!
//! ALBERT's and the LSTMs' projections of one sentence multiply 50–150 activation rows by a
//! `Linear` weight `[n, k]` (B = Wᵀ, so each column of B is a contiguous row of W). A
//! GotoBLAS-style GEMM packs B into panels on every call; with so few rows to amortise it over,
//! that copy of the whole weight costs about as much as the products (the `gemm` crate ran
//! ALBERT's shapes at ~60 GFLOP/s on a Zen 4, a third of its large-m speed). Here the weight is
//! never copied. Two kernels share the blocking:
//!
//! - From [`BROADCAST_MIN_ROWS`] rows, A (the small operand) is packed once per call into
//!   panels of [`PANEL_ROWS`] rows laid out k-major, and a 32×12 register tile takes, per k, two
//!   vectors of A and one broadcast value from each of 12 rows of W: no lane reductions, and
//!   each W value loaded feeds 32 products. Each output sums [`SUB_K`] products serially in a
//!   register, then adds that partial sum to the tile's running sum, so its rounding stays as
//!   small as a 16-lane sum's.
//! - Below that, where a 32-row panel would be mostly padding, a 4×6 tile keeps one 16-lane
//!   accumulator per output over contiguous k of both operands (lane `l` sums
//!   `q ≡ l (mod 16)`) and reduces each to a scalar at the end of the k block.
//!
//! Each task owns a fixed-width block of columns, and within it runs panels of columns (rows
//! of W, which stay in L1) over every row tile of A (which stays in L2). k is cut into blocks
//! of a length chosen from the shape alone, so the sums — and the result's bits — never
//! depend on the thread count. Where a k block ends, the block's sums are stored (the first
//! block, when C is overwritten) or added to C.

use rayon::prelude::*;

use crate::cpu::scratch::with_shared_scratch;
use crate::cpu::simd::Avx512F;
use crate::spec::GemmSpec;

/// Rows of the register tile.
const MR: usize = 4;
/// Columns of the register tile: 4 × 6 = 24 accumulators, six B vectors and one A vector in
/// the 32 AVX-512 registers.
const NR: usize = 6;
/// Columns of C per task: a multiple of [`NR`], fixed so that the split is the same on any
/// number of threads.
const COL_BLOCK: usize = 16 * NR;
/// Bytes of A one k block may span (`m · kc · 4`), so that it stays in L2 while every panel of
/// the task reads it.
const A_BLOCK_BYTES: usize = 384 * 1024;
/// Rows of A per packed panel of the broadcast kernel: two 16-lane vectors.
const PANEL_ROWS: usize = 32;
/// Columns of the broadcast kernel's tile: 12 × 2 = 24 accumulators, two A vectors and one
/// broadcast W value in the 32 AVX-512 registers.
const BNR: usize = 12;
/// Columns of C per task of the broadcast kernel, fixed like [`COL_BLOCK`].
const BROADCAST_COL_BLOCK: usize = 8 * BNR;
/// Products each register sum of the broadcast kernel runs serially before it is added to the
/// tile's running sum: a rounding chain of at most `SUB_K + kc/SUB_K` additions per k block,
/// against `kc/16 + 4` for the lane sums (equal near k = 1,000), at one add per 64 FMAs.
const SUB_K: usize = 64;
/// From this many rows the broadcast kernel beats the lane sums (fewer rows leave most of a
/// 32-row panel as padding).
pub(crate) const BROADCAST_MIN_ROWS: usize = 24;
/// Up to this many rows the in-place kernels beat packing (measured on the Zen 4 the Kokoro
/// figures come from: `cargo run --release -p f5-gpukit --example bf16_gemm -- --rows M`).
pub(crate) const MAX_ROWS: usize = 192;

/// Whether [`gemm`] takes this product: one batch item, A rows and B columns contiguous along
/// k, C rows contiguous and apart, at most [`MAX_ROWS`] rows, and enough k to fill a vector.
pub(crate) fn applies(spec: &GemmSpec) -> bool {
    let (a, b, c) = (&spec.a, &spec.b, &spec.c);
    let c_rows_apart = spec.m == 1 || c.row_stride >= spec.n;
    spec.batch == 1
        && (1..=MAX_ROWS).contains(&spec.m)
        && spec.n > 0
        && spec.k >= 16
        && a.col_stride == 1
        && b.row_stride == 1
        && c.col_stride == 1
        && c_rows_apart
}

/// k elements per block for `m` rows: all of k when A fits [`A_BLOCK_BYTES`], else a multiple
/// of 16 that does. A function of the shape alone.
fn k_block(m: usize, k: usize) -> usize {
    let fit = (A_BLOCK_BYTES / (4 * m.max(1))) / 16 * 16;
    if k <= fit.max(16) {
        k
    } else {
        fit.max(16)
    }
}

/// A `*mut f32` shared by the tasks, which write disjoint columns of C.
#[derive(Clone, Copy)]
struct SharedC(*mut f32);
// SAFETY: only used by `gemm`, whose tasks write disjoint elements of C.
unsafe impl Send for SharedC {}
unsafe impl Sync for SharedC {}

/// `C = beta·C + A·B` (no bias: the caller adds it) for a spec that [`applies`] and was
/// validated against the slices; runs on the current rayon pool.
pub(crate) fn gemm(cpu: Avx512F, spec: &GemmSpec, a: &[f32], b: &[f32], c: &mut [f32]) {
    debug_assert!(applies(spec));
    let (m, n, k) = (spec.m, spec.n, spec.k);
    // The last element any row/column reaches, checked once (validate() proved it already).
    assert!(spec.c.offset + (m - 1) * spec.c.row_stride + n - 1 < c.len(), "gemm C outside its buffer");
    assert!(spec.a.offset + (m - 1) * spec.a.row_stride + k <= a.len(), "gemm A outside its buffer");
    assert!(spec.b.offset + (n - 1) * spec.b.col_stride + k <= b.len(), "gemm B outside its buffer");
    if m >= BROADCAST_MIN_ROWS {
        gemm_broadcast(cpu, spec, a, b, c);
    } else {
        gemm_lanes(cpu, spec, a, b, c);
    }
}

/// Writes one finished tile's sums into C: `sum(r, j)` is the sum for row `i0 + r` and column
/// `j0 + j`, stored where `first` (the first k block of an overwrite) and added otherwise.
///
/// # Safety
/// Rows `i0..i0 + rows` and columns `j0..j0 + cols` lie inside C (checked by [`gemm`]), and no
/// other task writes them.
#[allow(clippy::too_many_arguments)]
unsafe fn write_tile(
    out: &SharedC,
    spec: &GemmSpec,
    i0: usize,
    rows: usize,
    j0: usize,
    cols: usize,
    first: bool,
    sum: impl Fn(usize, usize) -> f32,
) {
    for r in 0..rows {
        let row = spec.c.offset + (i0 + r) * spec.c.row_stride + j0;
        for j in 0..cols {
            // SAFETY: the caller's contract.
            unsafe {
                let d = out.0.add(row + j);
                *d = if first { sum(r, j) } else { *d + sum(r, j) };
            }
        }
    }
}

/// The 4×6 lane-sum kernel's GEMM (fewer than [`BROADCAST_MIN_ROWS`] rows).
fn gemm_lanes(cpu: Avx512F, spec: &GemmSpec, a: &[f32], b: &[f32], c: &mut [f32]) {
    let (m, n, k) = (spec.m, spec.n, spec.k);
    let kc = k_block(m, k);
    let out = SharedC(c.as_mut_ptr());
    (0..n.div_ceil(COL_BLOCK)).into_par_iter().for_each(|blk| {
        // The whole `SharedC` (Sync), not its pointer field, is what the closure captures.
        let out = &out;
        let cols = blk * COL_BLOCK..((blk + 1) * COL_BLOCK).min(n);
        for k0 in (0..k).step_by(kc) {
            let len = kc.min(k - k0);
            let first = k0 == 0 && spec.beta == 0.0;
            for j0 in cols.clone().step_by(NR) {
                let nc = NR.min(cols.end - j0);
                for i0 in (0..m).step_by(MR) {
                    let nr = MR.min(m - i0);
                    let mut sums = [[0.0f32; NR]; MR];
                    // SAFETY: rows i0..i0+nr of A and columns j0..j0+nc of B, over k0..k0+len,
                    // lie inside the slices (the asserts in `gemm` bound the last row and
                    // column); this task alone owns columns `cols` of C.
                    unsafe {
                        let ap = a.as_ptr().add(spec.a.offset + i0 * spec.a.row_stride + k0);
                        let bp = b.as_ptr().add(spec.b.offset + j0 * spec.b.col_stride + k0);
                        tile_dispatch(cpu, nr, nc, len, ap, spec.a.row_stride, bp, spec.b.col_stride, &mut sums);
                        write_tile(out, spec, i0, nr, j0, nc, first, |r, j| sums[r][j]);
                    }
                }
            }
        }
    });
}

/// The 32×12 broadcast kernel's GEMM (at least [`BROADCAST_MIN_ROWS`] rows): A packed into
/// k-major panels once, shared read-only by every task.
fn gemm_broadcast(cpu: Avx512F, spec: &GemmSpec, a: &[f32], b: &[f32], c: &mut [f32]) {
    let (m, n, k) = (spec.m, spec.n, spec.k);
    let kc = k_block(m, k);
    let panels = m.div_ceil(PANEL_ROWS);
    let out = SharedC(c.as_mut_ptr());
    with_shared_scratch(panels * k * PANEL_ROWS, |packed| {
        packed.par_chunks_mut(k * PANEL_ROWS).enumerate().for_each(|(p, panel)| {
            let rows = PANEL_ROWS.min(m - p * PANEL_ROWS);
            for (q, slot) in panel.chunks_exact_mut(PANEL_ROWS).enumerate() {
                for (r, v) in slot.iter_mut().enumerate() {
                    *v = if r < rows { a[spec.a.offset + (p * PANEL_ROWS + r) * spec.a.row_stride + q] } else { 0.0 };
                }
            }
        });
        let packed = &*packed;
        (0..n.div_ceil(BROADCAST_COL_BLOCK)).into_par_iter().for_each(|blk| {
            let out = &out;
            let cols = blk * BROADCAST_COL_BLOCK..((blk + 1) * BROADCAST_COL_BLOCK).min(n);
            for k0 in (0..k).step_by(kc) {
                let len = kc.min(k - k0);
                let first = k0 == 0 && spec.beta == 0.0;
                for j0 in cols.clone().step_by(BNR) {
                    let nc = BNR.min(cols.end - j0);
                    for p in 0..panels {
                        let rows = PANEL_ROWS.min(m - p * PANEL_ROWS);
                        let mut sums = [[0.0f32; PANEL_ROWS]; BNR];
                        // SAFETY: panel p holds k·PANEL_ROWS packed values, of which k0..k0+len
                        // are read; columns j0..j0+nc of B over k0..k0+len lie inside `b` (the
                        // asserts in `gemm`); this task alone owns columns `cols` of C.
                        unsafe {
                            let ap = packed.as_ptr().add((p * k + k0) * PANEL_ROWS);
                            let bp = b.as_ptr().add(spec.b.offset + j0 * spec.b.col_stride + k0);
                            broadcast_dispatch(cpu, nc, len, ap, bp, spec.b.col_stride, &mut sums);
                            write_tile(out, spec, p * PANEL_ROWS, rows, j0, nc, first, |r, j| sums[j][r]);
                        }
                    }
                }
            }
        });
    });
}

/// Calls the broadcast kernel compiled for `cols` columns (at most [`BNR`]).
///
/// # Safety
/// `a` points to `len` packed steps of [`PANEL_ROWS`] floats, `b` to `cols` columns of `len`
/// floats `ldb` apart.
unsafe fn broadcast_dispatch(
    cpu: Avx512F,
    cols: usize,
    len: usize,
    a: *const f32,
    b: *const f32,
    ldb: usize,
    out: &mut [[f32; PANEL_ROWS]; BNR],
) {
    let _ = cpu;
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `cpu` proves AVX-512 F and VL; the pointers' reach is the caller's contract.
    unsafe {
        match cols {
            1 => x86::broadcast_tile::<1>(len, a, b, ldb, out),
            2 => x86::broadcast_tile::<2>(len, a, b, ldb, out),
            3 => x86::broadcast_tile::<3>(len, a, b, ldb, out),
            4 => x86::broadcast_tile::<4>(len, a, b, ldb, out),
            5 => x86::broadcast_tile::<5>(len, a, b, ldb, out),
            6 => x86::broadcast_tile::<6>(len, a, b, ldb, out),
            7 => x86::broadcast_tile::<7>(len, a, b, ldb, out),
            8 => x86::broadcast_tile::<8>(len, a, b, ldb, out),
            9 => x86::broadcast_tile::<9>(len, a, b, ldb, out),
            10 => x86::broadcast_tile::<10>(len, a, b, ldb, out),
            11 => x86::broadcast_tile::<11>(len, a, b, ldb, out),
            _ => x86::broadcast_tile::<12>(len, a, b, ldb, out),
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (cols, len, a, b, ldb, out);
        unreachable!("AVX-512 F token off x86-64")
    }
}

/// Calls the tile kernel compiled for `rows`×`cols` (each at most [`MR`]×[`NR`]).
///
/// # Safety
/// `a` points to `rows` rows of `len` floats `lda` apart, `b` to `cols` columns of `len` floats
/// `ldb` apart.
#[allow(clippy::too_many_arguments)]
unsafe fn tile_dispatch(
    cpu: Avx512F,
    rows: usize,
    cols: usize,
    len: usize,
    a: *const f32,
    lda: usize,
    b: *const f32,
    ldb: usize,
    out: &mut [[f32; NR]; MR],
) {
    let _ = cpu;
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `cpu` proves AVX-512 F and VL; the pointers' reach is the caller's contract.
    unsafe {
        macro_rules! by_cols {
            ($r:literal) => {
                match cols {
                    1 => x86::tile::<$r, 1>(len, a, lda, b, ldb, out),
                    2 => x86::tile::<$r, 2>(len, a, lda, b, ldb, out),
                    3 => x86::tile::<$r, 3>(len, a, lda, b, ldb, out),
                    4 => x86::tile::<$r, 4>(len, a, lda, b, ldb, out),
                    5 => x86::tile::<$r, 5>(len, a, lda, b, ldb, out),
                    _ => x86::tile::<$r, 6>(len, a, lda, b, ldb, out),
                }
            };
        }
        match rows {
            1 => by_cols!(1),
            2 => by_cols!(2),
            3 => by_cols!(3),
            _ => by_cols!(4),
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (rows, cols, len, a, lda, b, ldb, out);
        unreachable!("AVX-512 F token off x86-64")
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{BNR, MR, NR, PANEL_ROWS, SUB_K};
    use std::arch::x86_64::*;

    /// `out[r][j] = Σ_q a[r·lda + q] · b[j·ldb + q]` over `q < len`, for `R` rows and `C`
    /// columns: lane `l` of each accumulator sums `q ≡ l (mod 16)` in order, the tail of k
    /// through masked loads, then the lanes are reduced.
    ///
    /// # Safety
    /// AVX-512 F and VL; `a` holds `R` rows and `b` `C` columns of `len` floats at the given strides.
    #[target_feature(enable = "avx512f,avx512vl")]
    pub(super) unsafe fn tile<const R: usize, const C: usize>(
        len: usize,
        a: *const f32,
        lda: usize,
        b: *const f32,
        ldb: usize,
        out: &mut [[f32; NR]; MR],
    ) {
        let mut acc = [_mm512_setzero_ps(); MR * NR];
        // One loop for whole vectors and the tail: masked loads cost what plain ones do.
        let tail: __mmask16 = match len % 16 {
            0 => 0xFFFF,
            rem => ((1u32 << rem) - 1) as __mmask16,
        };
        let steps = len.div_ceil(16);
        for s in 0..steps {
            let q = s * 16;
            let mask = if s + 1 == steps { tail } else { 0xFFFF };
            // SAFETY: the mask keeps every load at q < len of a row or column the caller vouches for.
            unsafe {
                let bv: [__m512; C] = std::array::from_fn(|j| _mm512_maskz_loadu_ps(mask, b.add(j * ldb + q)));
                for r in 0..R {
                    let av = _mm512_maskz_loadu_ps(mask, a.add(r * lda + q));
                    for j in 0..C {
                        acc[r * NR + j] = _mm512_fmadd_ps(av, bv[j], acc[r * NR + j]);
                    }
                }
            }
        }
        for r in 0..R {
            for j in 0..C {
                out[r][j] = _mm512_reduce_add_ps(acc[r * NR + j]);
            }
        }
    }

    /// `out[j][r] = Σ_q a[q·32 + r] · b[j·ldb + q]` over `q < len` for `C` columns: per step two
    /// vectors of the packed panel and one broadcast value of each of `C` rows of W. Each
    /// output sums [`SUB_K`] steps in a register, then adds that to its running sum in `out`.
    ///
    /// # Safety
    /// AVX-512 F and VL; `a` holds `len · PANEL_ROWS` floats and `b` `C` columns of `len`
    /// floats `ldb` apart.
    #[target_feature(enable = "avx512f,avx512vl")]
    pub(super) unsafe fn broadcast_tile<const C: usize>(
        len: usize,
        a: *const f32,
        b: *const f32,
        ldb: usize,
        out: &mut [[f32; PANEL_ROWS]; BNR],
    ) {
        let mut q0 = 0;
        while q0 < len {
            let end = (q0 + SUB_K).min(len);
            let mut acc = [[_mm512_setzero_ps(); 2]; C];
            for q in q0..end {
                // SAFETY: q < len: inside the panel and inside each of the C columns.
                unsafe {
                    let a0 = _mm512_loadu_ps(a.add(q * PANEL_ROWS));
                    let a1 = _mm512_loadu_ps(a.add(q * PANEL_ROWS + 16));
                    for (j, acc) in acc.iter_mut().enumerate() {
                        let w = _mm512_set1_ps(*b.add(j * ldb + q));
                        acc[0] = _mm512_fmadd_ps(a0, w, acc[0]);
                        acc[1] = _mm512_fmadd_ps(a1, w, acc[1]);
                    }
                }
            }
            for (j, acc) in acc.iter().enumerate() {
                let (lo, hi) = out[j].split_at_mut(16);
                // SAFETY: each half of a 32-float row is one 16-lane vector.
                unsafe {
                    let (lo, hi) = (lo.as_mut_ptr(), hi.as_mut_ptr());
                    if q0 == 0 {
                        _mm512_storeu_ps(lo, acc[0]);
                        _mm512_storeu_ps(hi, acc[1]);
                    } else {
                        _mm512_storeu_ps(lo, _mm512_add_ps(_mm512_loadu_ps(lo), acc[0]));
                        _mm512_storeu_ps(hi, _mm512_add_ps(_mm512_loadu_ps(hi), acc[1]));
                    }
                }
            }
            q0 = end;
        }
    }
}

#[cfg(test)]
#[path = "few_rows_tests.rs"]
mod tests;
