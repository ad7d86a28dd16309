//! f32 GEMM for products with few rows whose B is k-contiguous, read in place (AVX-512 F + VL).
//!
//! ALBERT's and the LSTMs' projections of one sentence multiply 50–150 activation rows by a
//! `Linear` weight `[n, k]` (B = Wᵀ, so each column of B is a contiguous row of W). A
//! GotoBLAS-style GEMM packs B into panels on every call; with so few rows to amortise it over,
//! that copy of the whole weight costs about as much as the products (the `gemm` crate ran
//! ALBERT's shapes at ~60 GFLOP/s on a Zen 4, a third of its large-m speed). Both operands here
//! are already contiguous along k, so nothing is packed: a 4×6 register tile keeps one 16-lane
//! accumulator per output, summing lane `l` over `q ≡ l (mod 16)`, and reduces each to a scalar
//! at the end of the k block.
//!
//! Each task owns a fixed-width block of columns ([`COL_BLOCK`]), and within it runs panels of
//! [`NR`] columns (`NR` rows of W, which stay in L1) over every row tile of A (which stays in
//! L2). k is cut into blocks of a length chosen from the shape alone, so the sums — and the
//! result's bits — never depend on the thread count. Where a k block ends, the reduced sums are
//! stored (the first block, when C is overwritten) or added to C.

use rayon::prelude::*;

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
/// Up to this many rows the in-place kernel beats packing (measured on the Zen 4 the Kokoro
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
    let kc = k_block(m, k);
    let blocks = n.div_ceil(COL_BLOCK);
    let out = SharedC(c.as_mut_ptr());
    let c_len = c.len();
    // The last element any row/column reaches, checked once (validate() proved it already).
    let last = spec.c.offset + (m - 1) * spec.c.row_stride + n - 1;
    assert!(last < c_len, "gemm C outside its buffer");
    assert!(spec.a.offset + (m - 1) * spec.a.row_stride + k <= a.len(), "gemm A outside its buffer");
    assert!(spec.b.offset + (n - 1) * spec.b.col_stride + k <= b.len(), "gemm B outside its buffer");
    (0..blocks).into_par_iter().for_each(|blk| {
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
                    // lie inside the slices (the asserts above bound the last row and column).
                    unsafe {
                        let ap = a.as_ptr().add(spec.a.offset + i0 * spec.a.row_stride + k0);
                        let bp = b.as_ptr().add(spec.b.offset + j0 * spec.b.col_stride + k0);
                        tile_dispatch(cpu, nr, nc, len, ap, spec.a.row_stride, bp, spec.b.col_stride, &mut sums);
                    }
                    for (r, row) in sums.iter().enumerate().take(nr) {
                        for (jj, &s) in row.iter().enumerate().take(nc) {
                            let idx = spec.c.offset + (i0 + r) * spec.c.row_stride + j0 + jj;
                            // SAFETY: idx ≤ last < c_len; this task alone owns columns `cols`,
                            // and rows of C do not overlap (`applies`).
                            unsafe {
                                let d = out.0.add(idx);
                                *d = if first { s } else { *d + s };
                            }
                        }
                    }
                }
            }
        }
    });
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
    use super::{MR, NR};
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
}

#[cfg(test)]
#[path = "few_rows_tests.rs"]
mod tests;
