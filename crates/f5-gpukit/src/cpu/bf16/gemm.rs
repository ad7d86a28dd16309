//! GEMM with bf16 inputs and f32 accumulation on the CPU.
//!
//! The arithmetic, on every path: each input element is rounded to bf16 (round to nearest,
//! ties to even), products of two bf16 values are exact in f32, and they are summed in f32.
//! C is then `acc + bias` (beta 0) or `C + acc` (beta 1), in f32. [`reference`] computes exactly
//! that with plain loops and runs on every machine; the fast path computes the same sums in a
//! different order (k split into [`KC_PAIRS`] blocks, pairs added by `vdpbf16ps`), so the two
//! agree to f32 rounding of the accumulation, and bit for bit where every partial sum is exact.
//!
//! The fast path (x86-64 with AVX-512 BF16, `vdpbf16ps`), GotoBLAS-style:
//! - B is packed once per GEMM (per batch item) into panels of [`NR`] columns, each `[k/2][NR]`
//!   dwords holding the bf16 pair `(B[2p, j], B[2p+1, j])` — the operand layout `vdpbf16ps`
//!   multiplies lane by lane. A bf16 weight is read from its bf16 copy; an f32 operand is
//!   rounded while packing.
//! - Rows of C are cut into blocks of [`MC`] rows (and, when there are too few row blocks to
//!   keep every thread busy, columns into chunks); each block is one rayon task, which packs
//!   its rows of A to bf16 tiles `[k/2][MR]` (converting the f32 activations on the fly) and
//!   runs the [`MR`]×[`NR`] micro-kernel over them, k in blocks of [`KC_PAIRS`] pairs so that
//!   one B micro-panel (`KC_PAIRS·NR` dwords = 32 KiB) and the task's A block stay in L2.
//! - Odd k, and m or n that are not multiples of the tile, are handled by zero padding in the
//!   packed operands and by storing only the valid part of each tile.
//!
//! `vdpbf16ps` treats subnormal bf16 inputs as zero and flushes subnormal results; the
//! reference does not. Neither occurs with model weights and activations (|x| ≥ 1e-38).
//!
//! On a CPU with AMX-BF16 (Sapphire Rapids and later) the backend runs a GEMM in the `Linear`
//! layout with a bf16 weight and at least 16 rows on the tiles instead
//! (`linear_amx::linear_bf16`): the same products in the tiles' order, many times this kernel's
//! rate (6–9× on the DiT's shapes at 2,000 rows on a 2-core Xeon: `vdpbf16ps` issues
//! once a cycle on those cores).

use std::cell::RefCell;

use rayon::prelude::*;

use crate::spec::{GemmSpec, MatLayout};
use crate::{shape_err, Result};

/// Rows of the micro-tile: 12 rows × 2 vectors of 16 lanes = 24 accumulators, which with the
/// two B vectors and the broadcast A pair fits the 32 AVX-512 registers.
pub(crate) const MR: usize = 12;
/// Columns of the micro-tile (two 16-lane vectors).
pub(crate) const NR: usize = 32;
/// Rows of C per task: 4 micro-tiles, an A block of `MC·k` bf16 (96 KiB at k = 1024) per task.
pub(crate) const MC: usize = 4 * MR;
/// Pairs of k per cache block: a B micro-panel of `KC_PAIRS·NR` dwords is 32 KiB.
pub(crate) const KC_PAIRS: usize = 256;

/// f32 → bf16 bits, rounding to nearest with ties to even; NaN stays NaN (made quiet), values
/// beyond the bf16 range become ±inf, as IEEE rounding does.
#[inline(always)]
pub(crate) fn to_bf16(x: f32) -> u16 {
    let bits = x.to_bits();
    if x.is_nan() {
        return ((bits >> 16) as u16) | 0x0040;
    }
    // Adding 0x7FFF plus the lowest kept bit rounds the dropped 16 bits half-to-even; no NaN
    // reaches here, so the sum cannot overflow 32 bits.
    let round = 0x7FFF + ((bits >> 16) & 1);
    ((bits + round) >> 16) as u16
}

/// bf16 bits → the f32 of the same value (exact).
#[inline(always)]
pub(crate) fn from_bf16(b: u16) -> f32 {
    f32::from_bits((b as u32) << 16)
}

/// One GEMM operand as the bf16 path reads it: f32 values rounded when read, or a bf16 copy.
#[derive(Clone, Copy)]
pub(crate) enum Operand<'a> {
    F32(&'a [f32]),
    Bf16(&'a [u16]),
}

/// Reading element `i` of an operand as bf16 bits; one implementation per storage so the
/// packing loops are compiled for each without a branch per element.
pub(crate) trait Bits: Sync {
    fn bits(&self, i: usize) -> u16;
}

impl Bits for [f32] {
    #[inline(always)]
    fn bits(&self, i: usize) -> u16 {
        to_bf16(self[i])
    }
}

impl Bits for [u16] {
    #[inline(always)]
    fn bits(&self, i: usize) -> u16 {
        self[i]
    }
}

/// The arithmetic of this module with plain loops, in k order: the reference the fast path is
/// tested against. `spec` must have been validated against the operand lengths.
pub(crate) fn reference(spec: &GemmSpec, a: Operand<'_>, b: Operand<'_>, bias: Option<&[f32]>, c: &mut [f32]) {
    match (a, b) {
        (Operand::F32(a), Operand::F32(b)) => reference_on(spec, a, b, bias, c),
        (Operand::F32(a), Operand::Bf16(b)) => reference_on(spec, a, b, bias, c),
        (Operand::Bf16(a), Operand::F32(b)) => reference_on(spec, a, b, bias, c),
        (Operand::Bf16(a), Operand::Bf16(b)) => reference_on(spec, a, b, bias, c),
    }
}

fn reference_on<A: Bits + ?Sized, B: Bits + ?Sized>(spec: &GemmSpec, a: &A, b: &B, bias: Option<&[f32]>, c: &mut [f32]) {
    for bi in 0..spec.batch {
        let (ao, bo, co) = batch_offsets(spec, bi);
        for i in 0..spec.m {
            for j in 0..spec.n {
                let mut acc = 0.0f32;
                for q in 0..spec.k {
                    let x = from_bf16(a.bits(ao + i * spec.a.row_stride + q * spec.a.col_stride));
                    let w = from_bf16(b.bits(bo + q * spec.b.row_stride + j * spec.b.col_stride));
                    acc += x * w;
                }
                let dst = &mut c[co + i * spec.c.row_stride + j];
                *dst = if spec.beta == 0.0 { acc + bias.map_or(0.0, |b| b[j]) } else { *dst + acc };
            }
        }
    }
}

fn batch_offsets(spec: &GemmSpec, bi: usize) -> (usize, usize, usize) {
    (spec.a.offset + bi * spec.a.batch_stride, spec.b.offset + bi * spec.b.batch_stride, spec.c.offset + bi * spec.c.batch_stride)
}

/// Proof that this CPU executes AVX-512 F and AVX-512 BF16: only [`Avx512Bf16::detect`] makes
/// one, so holding it makes the `target_feature` calls below sound.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Avx512Bf16(());

impl Avx512Bf16 {
    /// `Err(name of the missing extension)` where the CPU cannot run the fast path.
    pub(crate) fn detect() -> Result<Self, &'static str> {
        #[cfg(target_arch = "x86_64")]
        {
            if !std::arch::is_x86_feature_detected!("avx512f") {
                return Err("avx512f");
            }
            if !std::arch::is_x86_feature_detected!("avx512bf16") {
                return Err("avx512_bf16");
            }
            Ok(Avx512Bf16(()))
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            Err("avx512_bf16 (an x86-64 extension; this is not an x86-64 CPU)")
        }
    }
}

/// A `*mut f32` that rayon tasks may share: each task writes a disjoint rectangle of C.
#[derive(Clone, Copy)]
struct SharedC(*mut f32);
// SAFETY: only used by `gemm_fast`, whose tasks write disjoint elements (checked there).
unsafe impl Send for SharedC {}
unsafe impl Sync for SharedC {}

thread_local! {
    /// Each worker's packed A block, kept between GEMMs so the sampler's repeated GEMMs of one
    /// size do not allocate.
    static A_BLOCK: RefCell<Vec<u32>> = const { RefCell::new(Vec::new()) };
}

/// The fast path on the current rayon pool. `packed_b` is scratch (grown as needed) so that a
/// backend can reuse it across GEMMs. `spec` must have been validated against the operands.
pub(crate) fn gemm_fast(
    cpu: Avx512Bf16,
    spec: &GemmSpec,
    a: Operand<'_>,
    b: Operand<'_>,
    bias: Option<&[f32]>,
    c: &mut [f32],
    packed_b: &mut Vec<u32>,
) -> Result<()> {
    if spec.m > 1 && spec.n > 0 && spec.c.row_stride < spec.n {
        // Rows of C would overlap, and the row blocks are written in parallel.
        return Err(shape_err("gemm", format!("C row_stride {} < n {}: rows of C overlap", spec.c.row_stride, spec.n)));
    }
    if spec.m == 0 || spec.n == 0 {
        return Ok(());
    }
    if spec.k == 0 {
        // Nothing to multiply: C = beta·C (+ bias), as the reference.
        reference(spec, a, b, bias, c);
        return Ok(());
    }
    // The packed B, reserved here so that a shape too large for memory is an error, not an abort.
    let packed_len = spec.n.div_ceil(NR) * spec.k.div_ceil(2) * NR;
    packed_b.clear();
    packed_b.try_reserve_exact(packed_len).map_err(|_| crate::KitError::OutOfMemory(packed_len))?;
    match (a, b) {
        (Operand::F32(a), Operand::F32(b)) => fast_on(cpu, spec, a, b, bias, c, packed_b),
        (Operand::F32(a), Operand::Bf16(b)) => fast_on(cpu, spec, a, b, bias, c, packed_b),
        (Operand::Bf16(a), Operand::F32(b)) => fast_on(cpu, spec, a, b, bias, c, packed_b),
        (Operand::Bf16(a), Operand::Bf16(b)) => fast_on(cpu, spec, a, b, bias, c, packed_b),
    }
    Ok(())
}

fn fast_on<A: Bits + ?Sized, B: Bits + ?Sized>(
    cpu: Avx512Bf16,
    spec: &GemmSpec,
    a: &A,
    b: &B,
    bias: Option<&[f32]>,
    c: &mut [f32],
    packed_b: &mut Vec<u32>,
) {
    let (m, n, k) = (spec.m, spec.n, spec.k);
    let kp = k.div_ceil(2);
    let panels = n.div_ceil(NR);
    let panel_len = kp * NR;
    packed_b.clear();
    packed_b.resize(panels * panel_len, 0);
    let row_blocks = m.div_ceil(MC);
    // Enough tasks to balance the pool: split columns only when rows alone give too few.
    let want_tasks = 4 * rayon::current_num_threads();
    let col_chunks = if row_blocks >= want_tasks { 1 } else { want_tasks.div_ceil(row_blocks).min(panels) };
    let panels_per_chunk = panels.div_ceil(col_chunks);
    let col_chunks = panels.div_ceil(panels_per_chunk);
    let c_ptr = SharedC(c.as_mut_ptr());
    let c_len = c.len();
    for bi in 0..spec.batch {
        let (ao, bo, co) = batch_offsets(spec, bi);
        packed_b.par_chunks_mut(panel_len).enumerate().for_each(|(jp, panel)| pack_b_panel(b, bo, &spec.b, k, n, jp * NR, panel));
        let packed_b = &packed_b[..];
        (0..row_blocks * col_chunks).into_par_iter().for_each(|task| {
            let (rb, cc) = (task / col_chunks, task % col_chunks);
            let rows = rb * MC..((rb + 1) * MC).min(m);
            let panel_range = cc * panels_per_chunk..((cc + 1) * panels_per_chunk).min(panels);
            A_BLOCK.with(|block| {
                let mut block = block.borrow_mut();
                let tiles = rows.len().div_ceil(MR);
                block.clear();
                block.resize(tiles * kp * MR, 0);
                for (t, tile) in block.chunks_mut(kp * MR).enumerate() {
                    let r0 = rows.start + t * MR;
                    pack_a_tile(a, ao, &spec.a, k, r0, (rows.end - r0).min(MR), tile);
                }
                let tile = Tile { spec, bias, c: c_ptr, c_len, co };
                for kb in (0..kp).step_by(KC_PAIRS) {
                    let pairs = KC_PAIRS.min(kp - kb);
                    for jp in panel_range.clone() {
                        let bp = &packed_b[jp * panel_len + kb * NR..jp * panel_len + (kb + pairs) * NR];
                        for (t, at) in block.chunks(kp * MR).enumerate() {
                            let ap = &at[kb * MR..(kb + pairs) * MR];
                            let mut acc = [0.0f32; MR * NR];
                            micro_kernel(cpu, pairs, ap, bp, &mut acc);
                            let r0 = rows.start + t * MR;
                            tile.store(&acc, r0, (rows.end - r0).min(MR), jp * NR, (n - jp * NR).min(NR), kb == 0);
                        }
                    }
                }
            });
        });
    }
}

/// Where a task writes its micro-tiles.
struct Tile<'a> {
    spec: &'a GemmSpec,
    bias: Option<&'a [f32]>,
    c: SharedC,
    c_len: usize,
    co: usize,
}

impl Tile<'_> {
    /// Adds a micro-tile of sums to C (rows `r0..r0+rows`, columns `j0..j0+cols`): the first k
    /// block applies beta and the bias, later ones accumulate.
    fn store(&self, acc: &[f32; MR * NR], r0: usize, rows: usize, j0: usize, cols: usize, first: bool) {
        let rs = self.spec.c.row_stride;
        for r in 0..rows {
            let start = self.co + (r0 + r) * rs + j0;
            // Inside C by validate(); checked again because the writes go through a raw pointer.
            assert!(start + cols <= self.c_len, "gemm tile outside C");
            // SAFETY: in bounds (above); tasks own disjoint row blocks or column chunks and rows
            // do not overlap (row_stride ≥ n checked in gemm_fast), so no other task touches
            // these elements while this slice lives.
            let row = unsafe { std::slice::from_raw_parts_mut(self.c.0.add(start), cols) };
            let sums = &acc[r * NR..r * NR + cols];
            match (first, self.spec.beta == 0.0, self.bias) {
                (true, true, Some(bias)) => {
                    for ((d, &s), &bv) in row.iter_mut().zip(sums).zip(&bias[j0..j0 + cols]) {
                        *d = s + bv;
                    }
                }
                (true, true, None) => row.copy_from_slice(sums),
                _ => {
                    for (d, &s) in row.iter_mut().zip(sums) {
                        *d += s;
                    }
                }
            }
        }
    }
}

/// Packs columns `j0..j0+NR` of B (`[k, n]`, strides of `l`, starting at `bo`) as `[k/2][NR]`
/// dwords of bf16 pairs; columns past n and the half pair past an odd k are zero.
pub(crate) fn pack_b_panel<B: Bits + ?Sized>(b: &B, bo: usize, l: &MatLayout, k: usize, n: usize, j0: usize, panel: &mut [u32]) {
    let kp = k.div_ceil(2);
    let cols = (n - j0).min(NR);
    for jj in 0..NR {
        if jj >= cols {
            for p in 0..kp {
                panel[p * NR + jj] = 0;
            }
            continue;
        }
        let base = bo + (j0 + jj) * l.col_stride;
        for p in 0..kp {
            let q = 2 * p;
            let lo = b.bits(base + q * l.row_stride) as u32;
            let hi = if q + 1 < k { b.bits(base + (q + 1) * l.row_stride) as u32 } else { 0 };
            panel[p * NR + jj] = lo | (hi << 16);
        }
    }
}

/// Packs rows `r0..r0+rows` of A (`[m, k]`, strides of `l`, starting at `ao`) as `[k/2][MR]`
/// dwords of bf16 pairs; rows past `rows` and the half pair past an odd k are zero.
fn pack_a_tile<A: Bits + ?Sized>(a: &A, ao: usize, l: &MatLayout, k: usize, r0: usize, rows: usize, tile: &mut [u32]) {
    let kp = k.div_ceil(2);
    for r in 0..MR {
        if r >= rows {
            for p in 0..kp {
                tile[p * MR + r] = 0;
            }
            continue;
        }
        let base = ao + (r0 + r) * l.row_stride;
        if l.col_stride == 1 {
            // Contiguous row: the common case (activations), kept free of stride arithmetic.
            for p in 0..k / 2 {
                let lo = a.bits(base + 2 * p) as u32;
                let hi = a.bits(base + 2 * p + 1) as u32;
                tile[p * MR + r] = lo | (hi << 16);
            }
            if k % 2 == 1 {
                tile[(kp - 1) * MR + r] = a.bits(base + k - 1) as u32;
            }
        } else {
            for p in 0..kp {
                let q = 2 * p;
                let lo = a.bits(base + q * l.col_stride) as u32;
                let hi = if q + 1 < k { a.bits(base + (q + 1) * l.col_stride) as u32 } else { 0 };
                tile[p * MR + r] = lo | (hi << 16);
            }
        }
    }
}

/// `acc[r·NR + j] = Σ_p A-pair(r, p) · B-pair(p, j)` over `pairs` pairs of packed A (`[pairs][MR]`)
/// and packed B (`[pairs][NR]`).
pub(super) fn micro_kernel(cpu: Avx512Bf16, pairs: usize, a: &[u32], b: &[u32], acc: &mut [f32; MR * NR]) {
    assert!(a.len() >= pairs * MR && b.len() >= pairs * NR, "micro-kernel operands too short");
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `cpu` proves AVX-512 F and BF16 are present; lengths checked above.
    unsafe {
        let _ = cpu;
        x86::micro_kernel(pairs, a.as_ptr(), b.as_ptr(), acc)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        // `Avx512Bf16` cannot be constructed off x86-64.
        let _ = (cpu, pairs, a, b, acc);
        unreachable!("AVX-512 BF16 token off x86-64")
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{MR, NR};
    use std::arch::x86_64::*;

    /// The `MR`×`NR` tile: per pair, two B vectors and one broadcast A pair per row feed
    /// `vdpbf16ps` (16 lanes × 2 products each), 24 accumulators held in registers.
    ///
    /// # Safety
    /// The CPU must support AVX-512 F and BF16; `a` must hold `pairs·MR` and `b` `pairs·NR` dwords.
    #[target_feature(enable = "avx512f,avx512bf16")]
    pub(super) unsafe fn micro_kernel(pairs: usize, a: *const u32, b: *const u32, out: &mut [f32; MR * NR]) {
        let mut acc = [[_mm512_setzero_ps(); 2]; MR];
        for p in 0..pairs {
            // SAFETY (whole block): offsets < pairs·NR and pairs·MR by the caller's contract.
            unsafe {
                let bp = b.add(p * NR);
                let b0: __m512bh = std::mem::transmute(_mm512_loadu_si512(bp as *const __m512i));
                let b1: __m512bh = std::mem::transmute(_mm512_loadu_si512(bp.add(16) as *const __m512i));
                let ap = a.add(p * MR);
                for (r, row) in acc.iter_mut().enumerate() {
                    let pair: __m512bh = std::mem::transmute(_mm512_set1_epi32(*ap.add(r) as i32));
                    row[0] = _mm512_dpbf16_ps(row[0], pair, b0);
                    row[1] = _mm512_dpbf16_ps(row[1], pair, b1);
                }
            }
        }
        for (r, row) in acc.iter().enumerate() {
            // SAFETY: out has MR·NR floats; r·NR + 16 + 16 ≤ MR·NR.
            unsafe {
                _mm512_storeu_ps(out.as_mut_ptr().add(r * NR), row[0]);
                _mm512_storeu_ps(out.as_mut_ptr().add(r * NR + 16), row[1]);
            }
        }
    }
}
