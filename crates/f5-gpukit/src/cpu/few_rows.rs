//! f32 GEMM for products with few rows whose B is k-contiguous (AVX-512 F + VL, or AVX2 + FMA
//! for the broadcast kernel): B read in place.
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
//! A task owns a fixed-width block of columns (the broadcast kernel's also a fixed group of two
//! row panels, so that products with few columns still give every thread work), and within it
//! runs panels of columns (rows of W, which stay in L1) over each of its row tiles of A (which
//! stay in L2). k is cut into blocks of a length chosen from the shape alone, so the sums — and
//! the result's bits — never depend on the thread count. Where a k block ends, the block's sums
//! are stored (the first block, when C is overwritten) or added to C.
//!
//! A dense convolution with few output rows is the broadcast kernel's product too ([`conv1d`]):
//! its filter bank `[c_out, c_in, K]` is the weight read in place, and the panels hold the
//! input values each output row reads per channel and tap.
//!
//! On a CPU with AVX2 and FMA but not AVX-512 ([`Isa::Avx2`]), the broadcast kernel runs on the
//! same panels as two halves of 16 rows (two 8-lane vectors each) and 6 columns at a time, which
//! fits the 16 AVX2 registers; each output still sums the same products in the same order (FMA
//! chains of [`SUB_K`] steps, then one add into its running sum), so the bits equal the AVX-512
//! kernel's. There the GEMM takes only products of [`BROADCAST_MIN_ROWS`] to [`AVX2_MAX_ROWS`]
//! rows (the lane-sum kernel is AVX-512 only, and past two panels the `gemm` crate's packed
//! kernel was faster); without it, these products packed the whole weight per call (the `gemm`
//! crate's B panels, or a convolution's im2col filters and then those panels).

use rayon::prelude::*;

use crate::cpu::conv::source_row;
use crate::cpu::scratch::with_shared_scratch;
use crate::cpu::simd::Avx512F;
pub(crate) use crate::cpu::simd::Isa;
use crate::spec::{Conv1dSpec, GemmSpec};

// On AVX-512 both kernels run; on AVX2 the broadcast kernel only (the bits are the AVX-512
// kernel's, see the module docs).
impl Isa {
    /// The rows [`gemm`] takes on this instruction set: AVX2 has no lane-sum kernel, and its
    /// broadcast kernel beats the `gemm` crate only up to [`AVX2_MAX_ROWS`].
    fn rows(self) -> std::ops::RangeInclusive<usize> {
        match self {
            Isa::Avx512(_) => 1..=MAX_ROWS,
            Isa::Avx2(_) => BROADCAST_MIN_ROWS..=AVX2_MAX_ROWS,
        }
    }
}

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
/// Columns the AVX2 form of the broadcast kernel takes at a time: 6 × 2 accumulators per 16-row
/// half, two A vectors and the broadcast value in the 16 AVX2 registers. Divides [`BNR`].
const AVX2_STRIP: usize = 6;
/// Columns of C per task of the broadcast kernel, fixed like [`COL_BLOCK`].
const BROADCAST_COL_BLOCK: usize = 4 * BNR;
/// Row panels per task of the broadcast kernel: the tasks split rows as well as columns, so a
/// product with few columns (Kokoro's 256-channel convolutions) still has several tasks per
/// thread to balance.
const PANELS_PER_TASK: usize = 2;
/// Products each register sum of the broadcast kernel runs serially before it is added to the
/// tile's running sum: a rounding chain of at most `SUB_K + kc/SUB_K` additions per k block,
/// against `kc/16 + 4` for the lane sums (equal near k = 1,000), at one add per 64 FMAs.
const SUB_K: usize = 64;
/// From this many rows the broadcast kernel beats the lane sums (fewer rows leave most of a
/// 32-row panel as padding).
pub(crate) const BROADCAST_MIN_ROWS: usize = 24;
/// Dense convolutions with up to this many output rows run as the broadcast kernel's product
/// ([`conv1d`]) rather than the direct kernel, which packs the filters on every call.
pub(crate) const MAX_CONV_ROWS: usize = 320;
/// Up to this many rows the in-place kernels beat packing (measured on the Zen 4 the Kokoro
/// figures come from: `cargo run --release -p f5-gpukit --example bf16_gemm -- --rows M`).
pub(crate) const MAX_ROWS: usize = 192;
/// The most rows the AVX2 form of [`gemm`] takes: two panels. On a Zen 2 EPYC (`bf16_gemm
/// --rows M --shapes albert`, against the `gemm` crate) ALBERT's products at 58 rows ran
/// 0.89–1.20× alone and made the whole short forward 1–3 % faster, but at 72 rows (a third
/// panel a quarter full) 0.65–0.88×, and at 96–160 rows three of the four shapes were behind.
pub(crate) const AVX2_MAX_ROWS: usize = 2 * PANEL_ROWS;

/// Whether [`gemm`] takes this product on `isa`: one batch item, A rows and B columns
/// contiguous along k, C rows contiguous and apart, at most [`MAX_ROWS`] rows (on AVX2
/// [`BROADCAST_MIN_ROWS`] to [`AVX2_MAX_ROWS`]), and enough k to fill a vector.
pub(crate) fn applies(isa: Isa, spec: &GemmSpec) -> bool {
    let (a, b, c) = (&spec.a, &spec.b, &spec.c);
    let c_rows_apart = spec.m == 1 || c.row_stride >= spec.n;
    spec.batch == 1
        && isa.rows().contains(&spec.m)
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

/// k elements per block of the broadcast kernel: a task reads [`PANELS_PER_TASK`] panels, so
/// their rows, not all of A's, are what must stay in L2. Longer blocks mean fewer passes that
/// add a tile into C.
fn broadcast_k_block(k: usize) -> usize {
    k_block(PANELS_PER_TASK * PANEL_ROWS, k)
}

/// A `*mut f32` shared by the tasks, which write disjoint columns of C.
#[derive(Clone, Copy)]
struct SharedC(*mut f32);
// SAFETY: only used by `gemm`, whose tasks write disjoint elements of C.
unsafe impl Send for SharedC {}
unsafe impl Sync for SharedC {}

/// `C = beta·C + A·B` (no bias: the caller adds it) for a spec that [`applies`] on `isa` and
/// was validated against the slices; runs on the current rayon pool.
pub(crate) fn gemm(isa: Isa, spec: &GemmSpec, a: &[f32], b: &[f32], c: &mut [f32]) {
    debug_assert!(applies(isa, spec));
    let (m, n, k) = (spec.m, spec.n, spec.k);
    // The last element any row/column reaches, checked once (validate() proved it already).
    assert!(spec.c.offset + (m - 1) * spec.c.row_stride + n - 1 < c.len(), "gemm C outside its buffer");
    assert!(spec.a.offset + (m - 1) * spec.a.row_stride + k <= a.len(), "gemm A outside its buffer");
    assert!(spec.b.offset + (n - 1) * spec.b.col_stride + k <= b.len(), "gemm B outside its buffer");
    match isa {
        Isa::Avx512(cpu) if m < BROADCAST_MIN_ROWS => gemm_lanes(cpu, spec, a, b, c),
        _ => gemm_broadcast(isa, spec, a, b, c),
    }
}

/// Where a product's sums go: C's first element and row stride (columns are contiguous), and
/// whether the first k block overwrites C (else every block adds to it).
#[derive(Clone, Copy)]
struct Target {
    offset: usize,
    row_stride: usize,
    overwrite: bool,
}

/// Writes one k block's sums of a tile into C: `sum(r, j)` is the sum for row `i0 + r` and
/// column `j0 + j`, stored where `first` (the first k block of an overwrite) and added
/// otherwise; `bias` (given on the last k block only) is added after.
///
/// # Safety
/// Rows `i0..i0 + rows` and columns `j0..j0 + cols` lie inside C, and no other task writes them.
#[allow(clippy::too_many_arguments)]
unsafe fn write_tile(
    out: &SharedC,
    target: Target,
    i0: usize,
    rows: usize,
    j0: usize,
    cols: usize,
    first: bool,
    bias: Option<&[f32]>,
    sum: impl Fn(usize, usize) -> f32,
) {
    for r in 0..rows {
        let row = target.offset + (i0 + r) * target.row_stride + j0;
        for j in 0..cols {
            // SAFETY: the caller's contract.
            unsafe {
                let d = out.0.add(row + j);
                let v = if first { sum(r, j) } else { *d + sum(r, j) };
                *d = match bias {
                    Some(bias) => v + bias[j0 + j],
                    None => v,
                };
            }
        }
    }
}

/// The 4×6 lane-sum kernel's GEMM (fewer than [`BROADCAST_MIN_ROWS`] rows).
fn gemm_lanes(cpu: Avx512F, spec: &GemmSpec, a: &[f32], b: &[f32], c: &mut [f32]) {
    let (m, n, k) = (spec.m, spec.n, spec.k);
    let kc = k_block(m, k);
    let out = SharedC(c.as_mut_ptr());
    let target = Target { offset: spec.c.offset, row_stride: spec.c.row_stride, overwrite: spec.beta == 0.0 };
    (0..n.div_ceil(COL_BLOCK)).into_par_iter().for_each(|blk| {
        // The whole `SharedC` (Sync), not its pointer field, is what the closure captures.
        let out = &out;
        let cols = blk * COL_BLOCK..((blk + 1) * COL_BLOCK).min(n);
        for k0 in (0..k).step_by(kc) {
            let len = kc.min(k - k0);
            let first = k0 == 0 && target.overwrite;
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
                        write_tile(out, target, i0, nr, j0, nc, first, None, |r, j| sums[r][j]);
                    }
                }
            }
        }
    });
}

/// The 32×12 broadcast kernel's GEMM (at least [`BROADCAST_MIN_ROWS`] rows): A packed into
/// k-major panels once, shared read-only by every task.
fn gemm_broadcast(isa: Isa, spec: &GemmSpec, a: &[f32], b: &[f32], c: &mut [f32]) {
    let (m, k) = (spec.m, spec.k);
    let pack = |p: usize, panel: &mut [f32]| {
        let rows = PANEL_ROWS.min(m - p * PANEL_ROWS);
        for (q, slot) in panel.chunks_exact_mut(PANEL_ROWS).enumerate() {
            for (r, v) in slot.iter_mut().enumerate() {
                *v = if r < rows { a[spec.a.offset + (p * PANEL_ROWS + r) * spec.a.row_stride + q] } else { 0.0 };
            }
        }
    };
    let target = Target { offset: spec.c.offset, row_stride: spec.c.row_stride, overwrite: spec.beta == 0.0 };
    let weight = Weight { values: b, offset: spec.b.offset, stride: spec.b.col_stride };
    broadcast_product(isa, (m, spec.n, k), pack, weight, target, None, c);
}

/// A weight read in place as the B operand: column `j` of B is `values[offset + j·stride ..]`,
/// contiguous along k.
#[derive(Clone, Copy)]
struct Weight<'a> {
    values: &'a [f32],
    offset: usize,
    stride: usize,
}

/// `C (+)= P·B (+ bias)` for `(m, n, k)`, where `pack(p, panel)` writes every value of panel
/// `p` (`k` steps of [`PANEL_ROWS`] values: `panel[q·32 + r]` is row `p·32 + r` at `q`, zero
/// past `m`). The panels are packed once, in parallel, and shared read-only by the column
/// tasks. The caller has checked that C's rows and B's columns lie inside their slices.
fn broadcast_product(
    isa: Isa,
    (m, n, k): (usize, usize, usize),
    pack: impl Fn(usize, &mut [f32]) + Sync,
    weight: Weight<'_>,
    target: Target,
    bias: Option<&[f32]>,
    c: &mut [f32],
) {
    let kc = broadcast_k_block(k);
    let panels = m.div_ceil(PANEL_ROWS);
    let out = SharedC(c.as_mut_ptr());
    with_shared_scratch(panels * k * PANEL_ROWS, |packed| {
        packed.par_chunks_mut(k * PANEL_ROWS).enumerate().for_each(|(p, panel)| pack(p, panel));
        let packed = &*packed;
        let groups = panels.div_ceil(PANELS_PER_TASK);
        (0..n.div_ceil(BROADCAST_COL_BLOCK) * groups).into_par_iter().for_each(|task| {
            let out = &out;
            let (blk, group) = (task / groups, task % groups);
            let cols = blk * BROADCAST_COL_BLOCK..((blk + 1) * BROADCAST_COL_BLOCK).min(n);
            let own_panels = group * PANELS_PER_TASK..((group + 1) * PANELS_PER_TASK).min(panels);
            for k0 in (0..k).step_by(kc) {
                let len = kc.min(k - k0);
                let first = k0 == 0 && target.overwrite;
                let bias = bias.filter(|_| k0 + len == k);
                for j0 in cols.clone().step_by(BNR) {
                    let nc = BNR.min(cols.end - j0);
                    for p in own_panels.clone() {
                        let rows = PANEL_ROWS.min(m - p * PANEL_ROWS);
                        let mut sums = [[0.0f32; PANEL_ROWS]; BNR];
                        // SAFETY: panel p holds k·PANEL_ROWS packed values, of which k0..k0+len
                        // are read; columns j0..j0+nc of B over k0..k0+len lie inside the
                        // weight and C's rows and columns inside `c` (the caller's check); this
                        // task alone owns rows `own_panels` of columns `cols` of C.
                        unsafe {
                            let ap = packed.as_ptr().add((p * k + k0) * PANEL_ROWS);
                            let bp = weight.values.as_ptr().add(weight.offset + j0 * weight.stride + k0);
                            broadcast_dispatch(isa, nc, len, ap, bp, weight.stride, &mut sums);
                            write_tile(out, target, p * PANEL_ROWS, rows, j0, nc, first, bias, |r, j| sums[j][r]);
                        }
                    }
                }
            }
        });
    });
}

/// Whether [`conv1d`] takes this convolution on `isa`: dense, with [`BROADCAST_MIN_ROWS`] to
/// [`MAX_CONV_ROWS`] output rows per batch item, and at least one vector of `c_in·K`; on
/// AVX-512 also no more rows than output channels. That limit is against the direct kernel:
/// this path packs `rows·c_in·K` input values per call where the direct kernel packs
/// `c_out·c_in·K` filter values (measured on `conv_time`: 1024 and 512 channels at 153 rows
/// 1.3–1.6× the direct kernel, 256 channels at 306 rows 0.6–0.8×). On AVX2 the direct kernel's
/// form did no better under the row limit (`conv_time` on a Zen 2 EPYC: 256 channels at 306
/// rows the same speed, 1024 and 512 channels at 153 rows and 512 at 58 rows 0.35–0.6× this
/// path), so there it has no such condition; against the im2col path this one was 1.18–1.21×
/// at 256 channels and 306 rows, 1.4–2.1× at 512 and 153, 3.2× at 1024 and 153.
pub(crate) fn conv_applies(isa: Isa, spec: &Conv1dSpec) -> bool {
    let max_rows = match isa {
        Isa::Avx512(_) => MAX_CONV_ROWS.min(spec.c_out),
        Isa::Avx2(_) => MAX_CONV_ROWS,
    };
    spec.groups == 1 && (BROADCAST_MIN_ROWS..=max_rows).contains(&spec.n_out()) && spec.c_out > 0 && spec.c_in * spec.kernel >= 16
}

/// Whether the few-row convolution is on: `F5_CPU_FEW_ROWS_CONV=off` (or `0`) keeps such
/// convolutions on the direct kernel for the process, to compare the two on the same machine.
pub(crate) fn conv_enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| !std::env::var("F5_CPU_FEW_ROWS_CONV").is_ok_and(|v| v == "off" || v == "0"))
}

/// A dense convolution with few output rows as the broadcast kernel's product: the filters
/// `[c_out, c_in, K]` are B read in place (column `j` is filter `j`, k = `ci·K + tap`), and
/// each panel holds, per (channel, tap), the input value 32 output rows read there (zero on
/// padding). Unlike the direct kernel, nothing of the filters is packed, which at a few
/// hundred rows cost about as much as the arithmetic. For a spec that [`conv_applies`] and
/// was validated against the slices.
pub(crate) fn conv1d(isa: Isa, spec: &Conv1dSpec, x: &[f32], w: &[f32], bias: Option<&[f32]>, y: &mut [f32]) {
    debug_assert!(conv_applies(isa, spec));
    let Conv1dSpec { batch, n, c_in, c_out, kernel, .. } = *spec;
    let n_out = spec.n_out();
    let k = c_in * kernel;
    assert!(
        w.len() >= c_out * k && y.len() >= batch * n_out * c_out && x.len() >= batch * n * c_in,
        "conv1d operands outside their buffers"
    );
    assert!(bias.is_none_or(|b| b.len() >= c_out), "conv1d bias shorter than c_out");
    for b in 0..batch {
        let xb = &x[b * n * c_in..(b + 1) * n * c_in];
        // Per 16 input channels, every row and tap: the panel lines those channels' values go to
        // (16 channels × K taps × 32 rows) stay in L1 while each input row is read once per
        // channel block. Row-major over all channels instead touched the whole panel for each
        // row and took ~40 % of the product's time at 256 channels × 306 rows.
        let pack = |p: usize, panel: &mut [f32]| {
            for c0 in (0..c_in).step_by(16) {
                let c1 = (c0 + 16).min(c_in);
                for r in 0..PANEL_ROWS {
                    let t = p * PANEL_ROWS + r;
                    for tap in 0..kernel {
                        let src = if t < n_out { source_row(spec, t, tap) } else { None };
                        match src {
                            Some(s) => {
                                for (ci, &v) in (c0..c1).zip(&xb[s * c_in + c0..s * c_in + c1]) {
                                    panel[(ci * kernel + tap) * PANEL_ROWS + r] = v;
                                }
                            }
                            None => (c0..c1).for_each(|ci| panel[(ci * kernel + tap) * PANEL_ROWS + r] = 0.0),
                        }
                    }
                }
            }
        };
        let target = Target { offset: b * n_out * c_out, row_stride: c_out, overwrite: true };
        broadcast_product(isa, (n_out, c_out, k), pack, Weight { values: w, offset: 0, stride: k }, target, bias, y);
    }
}

/// Calls the broadcast kernel compiled for `cols` columns (at most [`BNR`]).
///
/// # Safety
/// `a` points to `len` packed steps of [`PANEL_ROWS`] floats, `b` to `cols` columns of `len`
/// floats `ldb` apart.
unsafe fn broadcast_dispatch(
    isa: Isa,
    cols: usize,
    len: usize,
    a: *const f32,
    b: *const f32,
    ldb: usize,
    out: &mut [[f32; PANEL_ROWS]; BNR],
) {
    #[cfg(target_arch = "x86_64")]
    if let Isa::Avx2(_) = isa {
        // Strips of AVX2_STRIP columns (the last one narrower), each over both 16-row halves.
        for j0 in (0..cols.min(BNR)).step_by(AVX2_STRIP) {
            // SAFETY: the token proves AVX2 and FMA; each strip ends by `cols.min(BNR)`, and
            // the pointers' reach is the caller's contract.
            unsafe {
                match (cols.min(BNR) - j0).min(AVX2_STRIP) {
                    1 => x86::broadcast_strip_avx2::<1>(len, a, b, ldb, j0, out),
                    2 => x86::broadcast_strip_avx2::<2>(len, a, b, ldb, j0, out),
                    3 => x86::broadcast_strip_avx2::<3>(len, a, b, ldb, j0, out),
                    4 => x86::broadcast_strip_avx2::<4>(len, a, b, ldb, j0, out),
                    5 => x86::broadcast_strip_avx2::<5>(len, a, b, ldb, j0, out),
                    _ => x86::broadcast_strip_avx2::<6>(len, a, b, ldb, j0, out),
                }
            }
        }
        return;
    }
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the token (AVX-512, the only other) proves AVX-512 F and VL; the pointers' reach
    // is the caller's contract.
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
        let _ = (isa, cols, len, a, b, ldb, out);
        unreachable!("x86 instruction-set token off x86-64")
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

    /// [`broadcast_tile`] on AVX2 for columns `j0..j0 + C` of the tile (`C` ≤ [`super::AVX2_STRIP`]): per [`SUB_K`]
    /// steps, each 16-row half of the panel in turn, with two vectors of it and one broadcast
    /// value of each of the `C` rows of W per step: 12 accumulators, two A vectors and the
    /// broadcast in the 16 AVX2 registers. Every output's sum is the AVX-512 kernel's: the
    /// same FMA chain per [`SUB_K`] steps, added to `out` the same way.
    ///
    /// # Safety
    /// AVX2 and FMA; `a` holds `len · PANEL_ROWS` floats and `b` columns `j0..j0 + C` of `len`
    /// floats `ldb` apart; `j0 + C` ≤ [`BNR`].
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn broadcast_strip_avx2<const C: usize>(
        len: usize,
        a: *const f32,
        b: *const f32,
        ldb: usize,
        j0: usize,
        out: &mut [[f32; PANEL_ROWS]; BNR],
    ) {
        let mut q0 = 0;
        while q0 < len {
            let end = (q0 + SUB_K).min(len);
            for half in [0, 16] {
                let mut acc = [[_mm256_setzero_ps(); 2]; C];
                for q in q0..end {
                    // SAFETY: q < len: inside the panel and inside each of the strip's columns.
                    unsafe {
                        let a0 = _mm256_loadu_ps(a.add(q * PANEL_ROWS + half));
                        let a1 = _mm256_loadu_ps(a.add(q * PANEL_ROWS + half + 8));
                        for (j, acc) in acc.iter_mut().enumerate() {
                            let w = _mm256_broadcast_ss(&*b.add((j0 + j) * ldb + q));
                            acc[0] = _mm256_fmadd_ps(a0, w, acc[0]);
                            acc[1] = _mm256_fmadd_ps(a1, w, acc[1]);
                        }
                    }
                }
                for (j, acc) in acc.iter().enumerate() {
                    let row = &mut out[j0 + j][half..half + 16];
                    // SAFETY: `row` is 16 floats: two 8-lane vectors.
                    unsafe {
                        let (lo, hi) = (row.as_mut_ptr(), row.as_mut_ptr().add(8));
                        if q0 == 0 {
                            _mm256_storeu_ps(lo, acc[0]);
                            _mm256_storeu_ps(hi, acc[1]);
                        } else {
                            _mm256_storeu_ps(lo, _mm256_add_ps(_mm256_loadu_ps(lo), acc[0]));
                            _mm256_storeu_ps(hi, _mm256_add_ps(_mm256_loadu_ps(hi), acc[1]));
                        }
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
