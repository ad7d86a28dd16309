//! The bf16 dense convolution of [`super::conv`] on Intel AMX tiles (`tdpbf16ps`), where the CPU
//! has AMX-TILE and AMX-BF16 and Linux grants the tile state: the same operands (the input rows
//! rounded to bf16 pairs, the filters packed `[K][c_in/2][32]` dwords of pairs) and the same
//! products, exact in f32, summed in f32 over (tap, channel) — in the tiles' order rather than
//! the AVX-512 kernel's, so the two agree to f32 summation rounding, not bit for bit.
//!
//! One `tdpbf16ps` multiplies a 16-row × 32-channel A tile by a 16-pair × 16-column B tile into
//! 16 × 16 f32 sums: 8,192 multiply-adds. The tile is 32 rows × 32 columns (four C tiles, two A
//! and two B tiles), and unlike the int8 kernel's it accumulates over every tap in the tiles:
//! one store and the bias at the end.
//!
//! A is read straight from the converted rows where a tile's 16 rows read 16 consecutive input
//! rows (stride 1, inside the input), else copied into a small contiguous block first (padding,
//! the block's last rows, another stride). A channel count that is not a multiple of 32 is
//! padded to one with zero channels on both sides (the converted rows' padding is zeroed, the
//! panels are packed with zero pairs), so every dense convolution runs here.

pub(crate) use super::amx::AmxBf16;
use super::amx::TILE_ROWS;
use crate::spec::Conv1dSpec;

/// Rows of the kernel's tile: two A tiles.
pub(crate) const MR: usize = 2 * TILE_ROWS;

/// Input channel pairs one A tile covers (64 bytes).
const TILE_PAIRS: usize = 16;

/// Whether a convolution can run on the tiles: a dense one with input channels (any count: the
/// last 32-channel step is padded with zeros).
pub(crate) fn fits(spec: &Conv1dSpec) -> bool {
    spec.groups == 1 && spec.c_in > 0
}

/// Channel pairs per input row and filter tap on the tiles: `⌈c_in/2⌉` rounded up to whole
/// 16-pair steps (the pairs past the input's are zero on both sides).
pub(crate) fn padded_pairs(c_in: usize) -> usize {
    c_in.div_ceil(2).div_ceil(TILE_PAIRS) * TILE_PAIRS
}

#[cfg(target_arch = "x86_64")]
pub(crate) use block::conv_block;

#[cfg(target_arch = "x86_64")]
mod block {
    use super::{padded_pairs, AmxBf16, MR, TILE_PAIRS, TILE_ROWS};
    use crate::cpu::bf16::gemm::NR;
    use crate::cpu::conv::{padded_row_len, rows_read, source_row};
    use crate::cpu::scratch::with_scratch_u32;
    use crate::spec::Conv1dSpec;

    /// Output rows `t0..t0 + yblk.len() / c_out` of one batch item, as the AVX-512 kernel's
    /// block: converts the input rows they read to bf16 pairs (`convert_rows`, the AVX-512
    /// kernel's), then runs the tile kernel over every filter panel of `packed` (outer) and tile
    /// of 32 rows (inner). `spec` [fits](super::fits) the tiles and `packed` was packed with
    /// [`padded_pairs`] pairs.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn conv_block(
        amx: AmxBf16,
        convert_rows: impl Fn(&[f32], usize, usize, &mut [u32]),
        spec: &Conv1dSpec,
        xb: &[f32],
        packed: &[u32],
        bias: Option<&[f32]>,
        t0: usize,
        yblk: &mut [f32],
    ) {
        let Conv1dSpec { c_in, c_out, kernel, .. } = *spec;
        debug_assert!(super::fits(spec));
        let rows = yblk.len() / c_out;
        let pairs = padded_pairs(c_in);
        let (lo, hi) = rows_read(spec, t0, rows);
        let row_len = padded_row_len(pairs);
        let zero_row = (hi - lo) * row_len;
        // The copy starts on a cache line (`row_len` is a multiple of 16 dwords), so no tile row
        // straddles two.
        with_scratch_u32(zero_row + row_len + 2 * TILE_ROWS * pairs + 16, |scratch| {
            let skip = (64 - scratch.as_ptr() as usize % 64) % 64 / 4;
            let (xq, staged) = scratch[skip..].split_at_mut(zero_row + row_len);
            convert_rows(&xb[lo * c_in..hi * c_in], c_in, row_len, &mut xq[..zero_row]);
            // The padding pairs the tiles read: zero (the conversion leaves them as they were).
            if pairs > c_in.div_ceil(2) {
                for row in xq[..zero_row].chunks_exact_mut(row_len) {
                    row[c_in.div_ceil(2)..pairs].fill(0);
                }
            }
            xq[zero_row..].fill(0);
            let input = Input { spec, lo, xq, row_len, zero_row };
            let panel_len = kernel * pairs * NR;
            // SAFETY: `amx` proves the tiles; the configuration is released when `_tiles`
            // drops, at the end of this block, and nothing in between uses other tile shapes.
            let _tiles = unsafe { x86::Tiles::load() };
            let mut acc = x86::Sums::zero();
            for jp in 0..c_out.div_ceil(NR) {
                let (j0, width) = (jp * NR, (c_out - jp * NR).min(NR));
                let panel = &packed[jp * panel_len..(jp + 1) * panel_len];
                let bias = bias.map(|b| &b[j0..j0 + width]);
                for r0 in (0..rows).step_by(MR) {
                    let tile_rows = (rows - r0).min(MR);
                    let out = &mut yblk[r0 * c_out + j0..(r0 + tile_rows - 1) * c_out + j0 + width];
                    tile_kernel(amx, &input, (t0 + r0, tile_rows), panel, bias, staged, &mut acc, out, c_out);
                }
            }
        });
    }

    /// The block's converted input: rows `lo..` of `row_len` dwords each in `xq` (the first
    /// [`padded_pairs`] of them read), a zero row at `zero_row`.
    struct Input<'a> {
        spec: &'a Conv1dSpec,
        lo: usize,
        xq: &'a [u32],
        row_len: usize,
        zero_row: usize,
    }

    /// The 16 output rows `t..` (`valid` of them real) at tap `k`: a pointer to the first of 16
    /// consecutive converted rows and their stride, or (padding, rows past the block, a stride)
    /// the rows copied into `staged` (16 rows of `pairs`), a zero row where a tap reads padding.
    fn a_rows(input: &Input<'_>, t: usize, valid: usize, k: usize, staged: &mut [u32]) -> (*const u32, usize) {
        let spec = input.spec;
        let pairs = padded_pairs(spec.c_in);
        if let Some(first) = crate::cpu::bf16::amx::consecutive_rows(spec, t, valid, k) {
            let i = first - input.lo;
            assert!((i + TILE_ROWS) * input.row_len <= input.zero_row, "A rows outside the converted block");
            return (input.xq[i * input.row_len..].as_ptr(), input.row_len);
        }
        for (r, dst) in staged.chunks_exact_mut(pairs).enumerate() {
            let s = if r < valid { source_row(spec, t + r, k) } else { None };
            let at = s.map_or(input.zero_row, |s| (s - input.lo) * input.row_len);
            dst.copy_from_slice(&input.xq[at..at + pairs]);
        }
        (staged.as_ptr(), pairs)
    }

    /// Output rows `t..t + rows` of one panel's `width` columns into `out` (row stride `ldy`):
    /// the sums over every tap and channel in the tiles, then `bias + sum`.
    #[allow(clippy::too_many_arguments)]
    fn tile_kernel(
        amx: AmxBf16,
        input: &Input<'_>,
        (t, rows): (usize, usize),
        panel: &[u32],
        bias: Option<&[f32]>,
        staged: &mut [u32],
        acc: &mut x86::Sums,
        out: &mut [f32],
        ldy: usize,
    ) {
        let spec = input.spec;
        let pairs = padded_pairs(spec.c_in);
        let width = out.len().saturating_sub(rows.saturating_sub(1) * ldy);
        assert!((1..=MR).contains(&rows) && (1..=NR).contains(&width) && out.len() == (rows - 1) * ldy + width, "tile shape");
        assert!(pairs.is_multiple_of(TILE_PAIRS) && input.row_len >= pairs && input.xq.len() >= input.zero_row + pairs, "tile channels");
        assert!(panel.len() >= spec.kernel * pairs * NR, "filter panel too short");
        assert!(bias.is_none_or(|b| b.len() == width) && staged.len() >= 2 * TILE_ROWS * pairs, "bias, staging");
        let (stage0, stage1) = staged.split_at_mut(TILE_ROWS * pairs);
        // SAFETY: `amx` proves the tiles (configured by `conv_block`).
        unsafe { x86::zero(amx) };
        for k in 0..spec.kernel {
            let (a0, lda0) = a_rows(input, t, rows.min(TILE_ROWS), k, stage0);
            let (a1, lda1) = a_rows(input, t + TILE_ROWS, rows.saturating_sub(TILE_ROWS), k, stage1);
            let tap = x86::Tap { a: [a0, a1], lda: [lda0, lda1], b: panel[k * pairs * NR..].as_ptr(), pairs };
            // SAFETY: the tiles are configured; each A tile is 16 rows of `pairs` dwords,
            // consecutive rows inside the converted block or the staged copy (`a_rows`); B
            // reads `pairs·NR` dwords of the tap's panel (its length checked above).
            unsafe { x86::tap(amx, &tap) };
        }
        // SAFETY: the sums go to `acc`; the stores are masked to `rows` rows and `width`
        // columns of `out` (shape checked), the bias reads to `width`.
        unsafe { x86::store(amx, acc, bias.map_or(std::ptr::null(), |b| b.as_ptr()), out.as_mut_ptr(), ldy, rows, width) };
    }

    mod x86 {
        use super::{AmxBf16, NR, TILE_PAIRS};
        pub(super) use crate::cpu::bf16::amx::x86::Tiles;

        pub(in super::super) use crate::cpu::bf16::amx::x86::F32Sums as Sums;

        /// One tap's operands: the two A tiles' first rows and strides (dwords), the tap's
        /// panel `[pairs][NR]`.
        pub(in super::super) struct Tap {
            pub a: [*const u32; 2],
            pub lda: [usize; 2],
            pub b: *const u32,
            pub pairs: usize,
        }

        /// Zeroes the four C tiles (tmm0–3).
        ///
        /// # Safety
        /// The tiles configured ([`Tiles::load`]).
        pub(in super::super) unsafe fn zero(_amx: AmxBf16) {
            // SAFETY: tile-register writes only.
            unsafe { crate::cpu::bf16::amx::x86::zero_c_tiles() };
        }

        /// C += Σ over the tap's 32-channel steps of A·B (tmm4–5 A, tmm6–7 B).
        ///
        /// # Safety
        /// The tiles configured; A tile `h` reads 16 rows of `pairs` dwords at `a[h] + i·lda[h]`,
        /// B `pairs·NR` dwords.
        pub(in super::super) unsafe fn tap(_amx: AmxBf16, t: &Tap) {
            let (lda0, lda1) = (4 * t.lda[0], 4 * t.lda[1]);
            for s in 0..t.pairs / TILE_PAIRS {
                let q = s * TILE_PAIRS;
                // SAFETY: each tile load reads 16 rows of 64 bytes inside the operands the caller
                // vouches for.
                unsafe {
                    let b = t.b.add(q * NR);
                    crate::cpu::bf16::amx::x86::step_bf16([t.a[0].add(q), t.a[1].add(q)], [lda0, lda1], b);
                }
            }
        }

        /// Stores the C tiles into `acc`, then `out[r·ldy + j] = bias[j] + acc[r][j]` for
        /// `r < rows`, `j < width` (`bias` null: no bias).
        ///
        /// # Safety
        /// The tiles configured; `bias` null or `width` values; `out` `(rows − 1)·ldy + width`.
        pub(in super::super) unsafe fn store(
            _amx: AmxBf16,
            acc: &mut Sums,
            bias: *const f32,
            out: *mut f32,
            ldy: usize,
            rows: usize,
            width: usize,
        ) {
            // SAFETY: `_amx` proves the tiles (and with them AVX-512 F); the rest is the caller's.
            unsafe { crate::cpu::bf16::amx::x86::store_f32_sums(acc, bias, out, ldy, rows, width) }
        }
    }
}
