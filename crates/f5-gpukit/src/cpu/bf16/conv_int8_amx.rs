//! The int8 dense convolution of [`super::conv_int8`] on Intel AMX tiles (`tdpbusd`), where the
//! CPU has AMX-TILE and AMX-INT8 and Linux grants the tile state: the same operands (filters
//! packed as there, per-row activation bytes, per-tap corrections) and the same arithmetic, so
//! its outputs equal the AVX-512 VNNI kernel's and the scalar reference's bit for bit.
//!
//! One `tdpbusd` multiplies a 16-row × 64-byte A tile (16 output rows, 64 input channels of one
//! tap) by a 16 × 16-dword B tile (the same 64 channels, 16 output channels) into 16 × 16 i32
//! sums: 16,384 multiply-adds, eight times what the two AVX-512 ports do in the same cycles.
//! The tile is 32 rows × 32 columns (four C tiles, two A and two B tiles: all eight registers).
//!
//! - **A** is read straight from the converted input rows: at tap `k` the 16 rows of a tile
//!   read 16 consecutive input rows (stride 1, inside the input), one strided tile load. Where
//!   they do not (padding, the block's last rows, another stride) the 16 rows are copied into a
//!   small contiguous block first.
//! - **B** is the VNNI kernel's panel `[K][c_in/4][32]` dwords as it is: 16 consecutive dword
//!   rows of 16 columns are one tile load with a stride of 32 dwords.
//! - **Per tap** the C tiles start at zero, take every 64-channel step, and are stored; AVX-512
//!   then adds the tap's correction (exact, in i32) and adds the sums into the f32 accumulators
//!   with each row's step, in tap order as the reference does. The per-row steps are what keep
//!   the activations accurate (see [`super::conv_int8`]), and they do not factor out of a sum
//!   over taps, so this once-per-tap pass is the price of them. (Starting the tiles from the
//!   correction instead, with a stride-0 load, was measured slower: the load waits on the
//!   previous tap's stores.)
//!
//! Only channel counts that are a multiple of 64 run here (whole A tiles); the rest run on the
//! VNNI kernel.

pub(crate) use super::amx::AmxInt8;
use super::amx::TILE_ROWS;
#[cfg(target_arch = "x86_64")]
use super::conv_int8::{PackedFilters, ZERO_QUAD};
#[cfg(target_arch = "x86_64")]
use super::gemm::NR;
#[cfg(target_arch = "x86_64")]
use crate::cpu::conv::{padded_row_len, rows_read, source_row};
#[cfg(target_arch = "x86_64")]
use crate::cpu::scratch::{with_scratch, with_scratch_u32};
use crate::spec::Conv1dSpec;

/// Rows of the kernel's tile: two A tiles.
pub(crate) const MR: usize = 2 * TILE_ROWS;

/// Input channels one A tile covers (64 bytes), as dwords of four.
const TILE_QUADS: usize = 16;

/// Whether a convolution the int8 kernel takes can run on the tiles: whole 64-channel steps.
pub(crate) fn fits(spec: &Conv1dSpec) -> bool {
    spec.c_in.is_multiple_of(4 * TILE_QUADS)
}

#[cfg(target_arch = "x86_64")]
/// What [`conv_block`] reads of the filter bank, as in [`super::conv_int8`].
pub(crate) struct Filters<'a> {
    pub panels: &'a [u32],
    pub correction: &'a [i32],
    pub w_scale: &'a [f32],
}

#[cfg(target_arch = "x86_64")]
impl<'a> Filters<'a> {
    pub(crate) fn of(w: &'a PackedFilters) -> Self {
        let (panels, correction, w_scale) = w.parts();
        Filters { panels, correction, w_scale }
    }
}

#[cfg(target_arch = "x86_64")]
/// Output rows `t0..t0 + yblk.len() / c_out` of one batch item, as the VNNI kernel's block:
/// quantises the input rows they read (each with its own step) and runs the tile kernel over
/// every filter panel (outer: one panel stays in L2) and tile of 32 rows (inner). `spec`
/// [fits](fits) the tiles.
#[allow(clippy::too_many_arguments)]
pub(crate) fn conv_block(
    amx: AmxInt8,
    convert_rows: impl Fn(&[f32], usize, usize, &mut [u32], &mut [f32]),
    spec: &Conv1dSpec,
    xb: &[f32],
    w: &Filters<'_>,
    bias: Option<&[f32]>,
    t0: usize,
    yblk: &mut [f32],
) {
    let Conv1dSpec { c_in, c_out, kernel, .. } = *spec;
    debug_assert!(fits(spec));
    let rows = yblk.len() / c_out;
    let quads = c_in / 4;
    let (lo, hi) = rows_read(spec, t0, rows);
    let row_len = padded_row_len(quads);
    let zero_row = (hi - lo) * row_len;
    // The input copy starts on a cache line (its rows are whole lines: `row_len` is a multiple
    // of 16 dwords), so no tile row straddles two.
    with_scratch_u32(zero_row + row_len + 2 * TILE_ROWS * quads + 16, |scratch| {
        let skip = (64 - scratch.as_ptr() as usize % 64) % 64 / 4;
        let (xq, staged) = scratch[skip..].split_at_mut(zero_row + row_len);
        with_scratch(hi - lo + 1, |row_steps| {
            convert_rows(&xb[lo * c_in..hi * c_in], c_in, row_len, &mut xq[..zero_row], &mut row_steps[..hi - lo]);
            xq[zero_row..].fill(ZERO_QUAD);
            row_steps[hi - lo] = 0.0;
            let input = Input { spec, lo, xq, row_len, zero_row, row_steps };
            let panel_len = kernel * quads * NR;
            // SAFETY: `amx` proves the tiles; the configuration is released when `_tiles` drops,
            // at the end of this block, and nothing in between uses other tile shapes.
            let _tiles = unsafe { x86::Tiles::load() };
            let mut acc = x86::Accumulators::zero();
            for jp in 0..c_out.div_ceil(NR) {
                let (j0, width) = (jp * NR, (c_out - jp * NR).min(NR));
                let columns = Columns {
                    panel: &w.panels[jp * panel_len..(jp + 1) * panel_len],
                    correction: w.correction,
                    stride: w.w_scale.len(),
                    j0,
                    w_scale: &w.w_scale[j0..j0 + width],
                    bias: bias.map(|b| &b[j0..j0 + width]),
                };
                for r0 in (0..rows).step_by(MR) {
                    let tile_rows = (rows - r0).min(MR);
                    let out = &mut yblk[r0 * c_out + j0..(r0 + tile_rows - 1) * c_out + j0 + width];
                    tile_kernel(amx, &input, (t0 + r0, tile_rows), &columns, staged, &mut acc, out, c_out);
                }
            }
        });
    });
}

#[cfg(target_arch = "x86_64")]
/// The block's converted input: rows `lo..` of `row_len` dwords each in `xq` (`⌈c_in/4⌉` of
/// them used), a row of zero bytes at `zero_row`, and each row's step (the zero row's is 0).
struct Input<'a> {
    spec: &'a Conv1dSpec,
    lo: usize,
    xq: &'a [u32],
    row_len: usize,
    zero_row: usize,
    row_steps: &'a [f32],
}

#[cfg(target_arch = "x86_64")]
/// One panel's filters `[taps][quads][NR]`, the corrections `[taps][stride]` from column `j0`,
/// the steps and bias of its `width` columns.
struct Columns<'a> {
    panel: &'a [u32],
    correction: &'a [i32],
    stride: usize,
    j0: usize,
    w_scale: &'a [f32],
    bias: Option<&'a [f32]>,
}

#[cfg(target_arch = "x86_64")]
/// The 16 output rows `t..` (`valid` of them real) read at tap `k`: where they are 16
/// consecutive input rows, a pointer to the first in `xq`, the row stride and a pointer to
/// their 16 steps; else they are copied (a zero row for padding and rows past the block) into
/// `staged` (16 rows of `quads`) and their steps into `steps`.
fn a_rows(
    input: &Input<'_>,
    t: usize,
    valid: usize,
    k: usize,
    staged: &mut [u32],
    steps: &mut [f32; TILE_ROWS],
) -> (*const u32, usize, *const f32) {
    let spec = input.spec;
    let quads = spec.c_in / 4;
    if let Some(first) = crate::cpu::bf16::amx::consecutive_rows(spec, t, valid, k) {
        let i = first - input.lo;
        assert!(
            (i + TILE_ROWS) * input.row_len <= input.zero_row && i + TILE_ROWS <= input.row_steps.len(),
            "A rows outside the converted block"
        );
        return (input.xq[i * input.row_len..].as_ptr(), input.row_len, input.row_steps[i..].as_ptr());
    }
    for (r, (dst, step)) in staged.chunks_exact_mut(quads).zip(steps.iter_mut()).enumerate() {
        let s = if r < valid { source_row(spec, t + r, k) } else { None };
        let at = s.map_or(input.zero_row, |s| (s - input.lo) * input.row_len);
        dst.copy_from_slice(&input.xq[at..at + quads]);
        *step = input.row_steps[at / input.row_len];
    }
    (staged.as_ptr(), quads, steps.as_ptr())
}

#[cfg(target_arch = "x86_64")]
/// Output rows `t..t + rows` of the panel's columns into `out` (row stride `ldy`), as the VNNI
/// kernel's tile: per tap the i32 sums on the tiles, added into f32 with each row's step.
#[allow(clippy::too_many_arguments)]
fn tile_kernel(
    amx: AmxInt8,
    input: &Input<'_>,
    (t, rows): (usize, usize),
    columns: &Columns<'_>,
    staged: &mut [u32],
    acc: &mut x86::Accumulators,
    out: &mut [f32],
    ldy: usize,
) {
    let spec = input.spec;
    let quads = spec.c_in / 4;
    let width = columns.w_scale.len();
    assert!((1..=MR).contains(&rows) && (1..=NR).contains(&width) && out.len() == (rows - 1) * ldy + width, "tile shape");
    assert!(quads.is_multiple_of(TILE_QUADS) && input.row_len >= quads && input.xq.len() >= input.zero_row + quads, "tile channels");
    assert!(columns.panel.len() >= spec.kernel * quads * NR, "filter panel too short");
    assert!(columns.j0 + NR <= columns.stride && columns.correction.len() >= spec.kernel * columns.stride, "corrections");
    assert!(columns.bias.is_none_or(|b| b.len() == width) && staged.len() >= 2 * TILE_ROWS * quads, "bias, staging");
    let (stage0, stage1) = staged.split_at_mut(TILE_ROWS * quads);
    let (mut steps0, mut steps1) = ([0f32; TILE_ROWS], [0f32; TILE_ROWS]);
    for k in 0..spec.kernel {
        let (a0, lda0, s0) = a_rows(input, t, rows.min(TILE_ROWS), k, stage0, &mut steps0);
        let (a1, lda1, s1) = a_rows(input, t + TILE_ROWS, rows.saturating_sub(TILE_ROWS), k, stage1, &mut steps1);
        let tap = x86::Tap {
            a: [a0, a1],
            lda: [lda0, lda1],
            b: columns.panel[k * quads * NR..].as_ptr(),
            quads,
            correction: columns.correction[k * columns.stride + columns.j0..].as_ptr(),
            steps: [s0, s1],
        };
        // SAFETY: `amx` proves the tiles (configured by `conv_block`); each A tile is 16 rows of
        // `quads` dwords, consecutive rows of `xq` inside the converted block or the staged
        // copy, with 16 steps beside them (`a_rows`); B reads `quads·NR` dwords of the tap's
        // panel; the correction row has NR values (`j0 + NR ≤ stride`).
        unsafe { x86::tap(amx, &tap, k == 0, acc) };
    }
    // SAFETY: stores masked to `rows` rows and `width` columns of `out` (shape checked).
    unsafe {
        x86::store(acc, columns.w_scale.as_ptr(), columns.bias.map_or(std::ptr::null(), |b| b.as_ptr()), out.as_mut_ptr(), ldy, rows, width)
    };
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{AmxInt8, MR, NR, TILE_QUADS, TILE_ROWS};
    pub(super) use crate::cpu::bf16::amx::x86::Tiles;
    use std::arch::x86_64::*;

    /// The f32 accumulators of the 32 × 32 tile and the i32 sums of the tap being added, both
    /// row-major.
    #[repr(C, align(64))]
    pub(super) struct Accumulators {
        f: [f32; MR * NR],
        sums: [i32; MR * NR],
    }

    impl Accumulators {
        pub(super) fn zero() -> Self {
            Accumulators { f: [0.0; MR * NR], sums: [0; MR * NR] }
        }
    }

    /// One tap's operands: the two A tiles' first rows and strides (dwords), the tap's panel
    /// `[quads][NR]`, its correction row (NR values) and each A tile's 16 steps.
    pub(super) struct Tap {
        pub a: [*const u32; 2],
        pub lda: [usize; 2],
        pub b: *const u32,
        pub quads: usize,
        pub correction: *const i32,
        pub steps: [*const f32; 2],
    }

    /// One tap: C = correction (every row) + Σ over the 64-channel steps of A·B in the tiles,
    /// then `acc[r][j] = (C[r][j] as f32) · step[r] + acc[r][j]`, with `acc` taken as zero on
    /// the `first` tap (whatever it held before).
    ///
    /// # Safety
    /// The tiles configured ([`Tiles::load`]); A tile `h` reads 16 rows of `quads` dwords at
    /// `a[h] + i·lda[h]`, B `quads·NR` dwords, the correction NR values, the steps MR values.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn tap(_amx: AmxInt8, t: &Tap, first: bool, acc: &mut Accumulators) {
        let (lda0, lda1) = (4 * t.lda[0], 4 * t.lda[1]);
        // SAFETY (whole block): every tile load reads 16 rows of 64 bytes inside the operands
        // the caller vouches for; the stores write the 4 KiB `sums`.
        unsafe {
            crate::cpu::bf16::amx::x86::zero_c_tiles();
            for s in 0..t.quads / TILE_QUADS {
                let q = s * TILE_QUADS;
                let b = t.b.add(q * NR);
                crate::cpu::bf16::amx::x86::step_int8([t.a[0].add(q), t.a[1].add(q)], [lda0, lda1], b);
            }
            crate::cpu::bf16::amx::x86::store_c_tiles(acc.sums.as_mut_ptr());
            let correction =
                [_mm512_loadu_si512(t.correction as *const __m512i), _mm512_loadu_si512(t.correction.add(16) as *const __m512i)];
            for r in 0..MR {
                let step = _mm512_set1_ps(*t.steps[r / TILE_ROWS].add(r % TILE_ROWS));
                for (h, &corr) in correction.iter().enumerate() {
                    let i = r * NR + 16 * h;
                    let sum = _mm512_cvtepi32_ps(_mm512_add_epi32(_mm512_load_si512(acc.sums.as_ptr().add(i) as *const __m512i), corr));
                    let f = acc.f.as_mut_ptr().add(i);
                    let before = if first { _mm512_setzero_ps() } else { _mm512_load_ps(f) };
                    _mm512_store_ps(f, _mm512_fmadd_ps(sum, step, before));
                }
            }
        }
    }

    /// `out[r·ldy + j] = acc[r][j] · w_scale[j] + bias[j]` for `r < rows`, `j < width`.
    ///
    /// # Safety
    /// `w_scale` (and `bias` unless null) hold `width` values; `out` `(rows − 1)·ldy + width`.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn store(
        acc: &Accumulators,
        w_scale: *const f32,
        bias: *const f32,
        out: *mut f32,
        ldy: usize,
        rows: usize,
        width: usize,
    ) {
        let lanes = |n: usize| if n >= 16 { 0xFFFFu16 } else { ((1u32 << n) - 1) as u16 };
        // SAFETY: loads and stores masked to `width` columns, `rows` rows.
        unsafe {
            for h in 0..NR / 16 {
                let m = lanes(width.saturating_sub(16 * h));
                if m == 0 {
                    continue;
                }
                let s = _mm512_maskz_loadu_ps(m, w_scale.wrapping_add(16 * h));
                let b = if bias.is_null() { _mm512_setzero_ps() } else { _mm512_maskz_loadu_ps(m, bias.wrapping_add(16 * h)) };
                for r in 0..rows {
                    let f = _mm512_load_ps(acc.f.as_ptr().add(r * NR + 16 * h));
                    _mm512_mask_storeu_ps(out.add(r * ldy + 16 * h), m, _mm512_fmadd_ps(f, s, b));
                }
            }
        }
    }
}
