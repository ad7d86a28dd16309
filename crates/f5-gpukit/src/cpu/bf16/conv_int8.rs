//! Dense 1-D convolution in int8 on AVX-512 VNNI (`vpdpbusd`): the int8 mode of
//! `CpuBf16Backend` (see [`super::CpuBf16Backend::with_int8_convs`]).
//!
//! The same tile structure as the bf16 kernel in [`super::conv`] (no im2col: each tap's A rows
//! are read straight from a converted copy of the input rows), with four channels per dword
//! instead of two, so a tile runs half as many multiply-add steps, on [`MR`] = 6 rows by 64
//! output channels (two filter panels; 32 where one is left), an i32 accumulator per output in
//! registers and the f32 sums across taps in the output rows themselves:
//!
//! - **Filters**, per output channel `co`: scale `s_w = max|w[co, ·, ·]| / 127` and
//!   `q_w = round(w / s_w)` in `[−127, 127]` (round half to even), packed per call into panels
//!   of [`NR`] output channels, `[K][c_in/4][NR]` dwords of four signed bytes
//!   `(q_w[co, 4j..4j+4, k])`, the operand layout `vpdpbusd` multiplies lane by lane. The
//!   filters come from the bf16 weight (the backend stores weights once, in bf16).
//! - **Activations**, per input row (one time step, all channels): `s_x = max|x[t, ·]| / 127`
//!   and `q_x = round(x / s_x)` in `[−127, 127]`, stored as the unsigned byte `q_x + 128`
//!   (`vpdpbusd` multiplies unsigned by signed bytes). One scale for the whole input is what
//!   onnxruntime's `DynamicQuantizeLinear` uses, and it was measured far too coarse here: in
//!   Kokoro's generator a few time steps reach 10–50× the input's RMS, so one step sized for them
//!   left 2–11 % noise on every value and ~0.2 rel-L2 on the audio. Per row the step follows the
//!   row's own range. A row's scale does not factor out of a convolution (one output sums K rows),
//!   so the kernel sums each tap in i32 and adds it into an f32 accumulator with that row's scale.
//! - **Sums**: per tap, `acc_k = Σ_c (q_x + 128) · q_w − 128 · Σ_c q_w[co, c, k]` exactly in
//!   i32 (the correction per tap and output channel is packed with the filters; a tap on zero
//!   padding reads a row of bytes 128 with scale 0); then `f = acc_k · s_x(row) + f` in f32 over
//!   the taps in order, and the output is `f · s_w[co] + bias[co]` (fused multiply-adds).
//!
//! [`reference`] computes exactly this with plain loops on every machine. The integer sums do not
//! depend on their order and the f32 steps run in the same order, so the kernel must match it bit
//! for bit. Nothing depends on how rows are cut into blocks, so neither does the thread count.
//!
//! The i32 sums cannot overflow: a step adds at most `4 · 255 · 127 < 2¹⁷`, so `K·c_in` up to
//! ~66,000 is safe; longer sums are refused by [`supports`] and run on the bf16 kernel.

use rayon::prelude::*;

use super::conv_int8_amx::{self as amx, AmxInt8};
use super::gemm::{from_bf16, NR};
use crate::cpu::conv::{padded_row_len, rows_read, tap_offsets, BlockOutput};
use crate::cpu::lines::LineVec;
use crate::cpu::scratch::{with_scratch, with_scratch_u32, with_scratch_usize};
use crate::cpu::seq::RowPrep;
use crate::spec::Conv1dSpec;

/// Rows of the micro-tile: 6 rows × 4 vectors of 16 lanes, an i32 accumulator each for the tap
/// being summed (24 registers), with the four B vectors and the broadcast A dword in the 32
/// AVX-512 registers; the f32 sums across taps are kept in the output.
pub(crate) const MR: usize = 6;

/// The byte a zero activation is stored as (`q_x + 128` with `q_x = 0`), four to a dword.
pub(crate) const ZERO_QUAD: u32 = 0x8080_8080;

/// The bf16 copy's budget in [`super::conv`] is 256 KiB of input rows per task; a byte per
/// value here, so the same number of rows fits in half the space.
const X_BLOCK_BYTES: usize = 128 * 1024;

/// Longest `K·c_in` whose i32 sums cannot overflow (`4·255·127` per dword step, below 2³¹).
const MAX_TERMS: usize = 4 * ((i32::MAX as usize) / (4 * 255 * 127));

/// Proof that this CPU executes AVX-512 F and AVX-512 VNNI, and, where it holds an [`AmxInt8`],
/// that the AMX tiles may run the convolutions that [fit](amx::fits) them: only
/// [`Avx512Vnni::detect`] makes one, so holding it makes the `target_feature` calls below sound.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Avx512Vnni {
    amx: Option<AmxInt8>,
}

impl Avx512Vnni {
    /// `Err(name of the missing extension)` where the CPU cannot run the int8 kernel; with the
    /// AMX tiles where [`AmxInt8::detect`] finds them.
    pub(crate) fn detect() -> Result<Self, &'static str> {
        Self::detect_vnni().map(|_| Avx512Vnni { amx: AmxInt8::detect().ok() })
    }

    /// The same proof without the tiles: every convolution on the AVX-512 VNNI kernel.
    pub(crate) fn without_amx(self) -> Self {
        Avx512Vnni { amx: None }
    }

    /// Whether convolutions that fit the tiles run on them.
    pub(crate) fn amx(&self) -> bool {
        self.amx.is_some()
    }

    fn detect_vnni() -> Result<Self, &'static str> {
        #[cfg(target_arch = "x86_64")]
        {
            if !std::arch::is_x86_feature_detected!("avx512f") {
                return Err("avx512f");
            }
            if !std::arch::is_x86_feature_detected!("avx512vnni") {
                return Err("avx512_vnni");
            }
            Ok(Avx512Vnni { amx: None })
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            Err("avx512_vnni (an x86-64 extension; this is not an x86-64 CPU)")
        }
    }
}

/// Whether a dense convolution of this shape takes the int8 path: its sums fit i32, and it has
/// something to sum (an empty filter leaves the bf16 kernel to write the bias).
pub(crate) fn supports(spec: &Conv1dSpec) -> bool {
    spec.groups == 1
        && spec.kernel > 0
        && spec.c_in > 0
        && spec.kernel.checked_mul(spec.c_in.div_ceil(4) * 4).is_some_and(|t| t <= MAX_TERMS)
}

/// `127 / max|v|` and `max|v| / 127` (the quantisation step); `(0, 0)` for an all-zero `v`, whose
/// values then all quantise to 0.
fn scales(max_abs: f32) -> (f32, f32) {
    if max_abs > 0.0 && max_abs.is_finite() {
        (127.0 / max_abs, max_abs / 127.0)
    } else {
        (0.0, 0.0)
    }
}

/// `round(v · inv)` clamped to `[−127, 127]`, rounding half to even (the vector conversion's
/// default rounding).
///
/// The rounding is the default one of an f32 addition: past 2²³ an f32 holds integers only, so
/// `(y + 1.5·2²³) − 1.5·2²³` is `y` rounded half to even for `|y|` ≤ 2²², exactly (the clamp to
/// ±128 first keeps `y` there and changes no result). `round_ties_even` itself is a libm call on
/// x86-64 without SSE4.1, the target's baseline: quantising Kokoro's int8 filter banks at load
/// spent ~80 ms of CPU time in it.
#[inline(always)]
fn quantize(v: f32, inv: f32) -> i32 {
    const ROUND: f32 = 12_582_912.0; // 1.5 · 2²³
    let y = v * inv;
    if y.is_nan() {
        return -127;
    }
    let q = (y.clamp(-128.0, 128.0) + ROUND) - ROUND;
    q.clamp(-127.0, 127.0) as i32
}

/// A filter bank `[c_out, c_in, K]` quantised and packed for the tile kernel: panels of [`NR`]
/// output channels `[K][c_in/4][NR]` dwords; per tap and output channel (padded to whole
/// panels) the offset correction `−128·Σ_c q_w[co, c, k]`, `[K][cols]`; per output channel the
/// step `s_w`. Made once per weight and kept with it (the backend's weight buffers hold it), so
/// a forward pays the quantisation once, not on every call.
#[derive(Clone, Debug)]
pub(crate) struct PackedFilters {
    /// `(c_out, c_in, kernel)` the bank was packed for.
    shape: (usize, usize, usize),
    /// On a cache line: the tile kernel loads a line of it per vector.
    panels: LineVec<u32>,
    /// `[K][cols]` i32 corrections, cols = panels · NR.
    correction: Vec<i32>,
    w_scale: Vec<f32>,
}

impl PackedFilters {
    /// Quantises and packs the bf16 filters `w` of `spec` (validated, and [`supports`] it).
    pub(crate) fn pack(spec: &Conv1dSpec, w: &[u16]) -> Self {
        let Conv1dSpec { c_in, c_out, kernel, .. } = *spec;
        let panel_len = kernel * c_in.div_ceil(4) * NR;
        let cols = c_out.div_ceil(NR) * NR;
        let mut panels = LineVec::zeroed(cols / NR * panel_len);
        let mut sums = vec![0i32; cols * kernel];
        let mut w_scale = vec![0f32; cols];
        panels
            .par_chunks_mut(panel_len.max(1))
            .zip(sums.par_chunks_mut((NR * kernel).max(1)).zip(w_scale.par_chunks_mut(NR)))
            .enumerate()
            .for_each(|(jp, (panel, (sums, w_scale)))| pack_filters(spec, w, jp * NR, panel, sums, w_scale));
        // Per panel the sums are [NR][K]; the kernel reads [K][cols].
        let mut correction = vec![0i32; kernel * cols];
        for (co, per_tap) in sums.chunks(kernel.max(1)).enumerate() {
            for (k, &sum) in per_tap.iter().enumerate() {
                correction[k * cols + co] = -128 * sum;
            }
        }
        PackedFilters { shape: (c_out, c_in, kernel), panels, correction, w_scale }
    }

    /// The panels, the corrections (`[K][cols]`) and the steps (`cols`).
    pub(crate) fn parts(&self) -> (&[u32], &[i32], &[f32]) {
        (&self.panels, &self.correction, &self.w_scale)
    }

    /// `(c_out, c_in, kernel)` the bank was packed for.
    pub(crate) fn shape(&self) -> (usize, usize, usize) {
        self.shape
    }

    /// Values in the bank: `c_out · c_in · kernel`.
    pub(crate) fn len(&self) -> usize {
        self.shape.0 * self.shape.1 * self.shape.2
    }

    /// Values `offset..offset + out.len()` of the `[c_out, c_in, K]` filters as the kernel
    /// computes with them: `q_w · s_w` (within half a step of the bf16 filters). The range must
    /// lie within [`PackedFilters::len`].
    pub(crate) fn dequantize_into(&self, offset: usize, out: &mut [f32]) {
        let (_, c_in, kernel) = self.shape;
        let quads = c_in.div_ceil(4);
        let panel_len = kernel * quads * NR;
        for (e, o) in (offset..).zip(out.iter_mut()) {
            let (co, ci, k) = (e / (c_in * kernel), e / kernel % c_in, e % kernel);
            let dword = self.panels[co / NR * panel_len + (k * quads + ci / 4) * NR + co % NR];
            *o = (dword >> (8 * (ci % 4))) as u8 as i8 as f32 * self.w_scale[co];
        }
    }

    /// Whether this bank was packed for the filters of `spec`.
    pub(crate) fn fits(&self, spec: &Conv1dSpec) -> bool {
        self.shape == (spec.c_out, spec.c_in, spec.kernel)
    }
}

/// `y = conv(x, w) + bias` for a dense convolution with the packed int8 filters `w`, computed as
/// the module docs say. `spec` must have been validated against the operands, [`supports`] it,
/// and `w` must [fit](PackedFilters::fits) it.
pub(crate) fn conv1d_dense(cpu: Avx512Vnni, spec: &Conv1dSpec, x: &[f32], w: &PackedFilters, bias: Option<&[f32]>, y: &mut [f32]) {
    let Conv1dSpec { batch, n, c_in, c_out, .. } = *spec;
    let n_out = spec.n_out();
    for b in 0..batch {
        conv1d_item(
            cpu,
            spec,
            &x[b * n * c_in..(b + 1) * n * c_in],
            w,
            bias,
            None,
            BlockOutput::default(),
            &mut y[b * n_out * c_out..(b + 1) * n_out * c_out],
        );
    }
}

/// One batch item of [`conv1d_dense`]: `yb = conv(prep(xb)) + bias`, where `prep` (when given)
/// maps each input row before it is quantised, as the blocks read it (rows two blocks read
/// are mapped by both, to the same values); written or added, with statistics, as `output`
/// asks ([`BlockOutput`]).
#[allow(clippy::too_many_arguments)]
pub(crate) fn conv1d_item(
    cpu: Avx512Vnni,
    spec: &Conv1dSpec,
    xb: &[f32],
    w: &PackedFilters,
    bias: Option<&[f32]>,
    prep: Option<RowPrep<'_>>,
    output: BlockOutput<'_>,
    yb: &mut [f32],
) {
    debug_assert!(supports(spec) && w.fits(spec), "conv_int8::conv1d_item: filters packed for another shape");
    let c_out = spec.c_out;
    if spec.n_out() == 0 || c_out == 0 {
        return;
    }
    let tiles = cpu.amx.filter(|_| amx::fits(spec));
    let rb = output.block_rows(rows_per_block(spec, rayon::current_num_threads(), if tiles.is_some() { amx::MR } else { 2 * MR }));
    match tiles {
        #[cfg(target_arch = "x86_64")]
        Some(tiles) => {
            let convert = |x: &[f32], c_in: usize, row_len: usize, dst: &mut [u32], steps: &mut [f32]| {
                convert_rows(cpu, x, c_in, row_len, dst, steps, prep)
            };
            let filters = amx::Filters::of(w);
            output.for_each_block(yb, c_out, rb, |first, out| amx::conv_block(tiles, convert, spec, xb, &filters, bias, first, out));
        }
        #[cfg(not(target_arch = "x86_64"))]
        Some(_) => unreachable!("AMX token off x86-64"),
        None => output.for_each_block(yb, c_out, rb, |first, out| conv_block(cpu, spec, xb, w, bias, prep, first, out)),
    }
}

/// Output rows per task: a multiple of `multiple` (whole tiles) whose input rows fit
/// [`X_BLOCK_BYTES`] as bytes, and few enough that every thread gets about four blocks.
fn rows_per_block(spec: &Conv1dSpec, threads: usize, multiple: usize) -> usize {
    let row_bytes = 4 * spec.c_in.div_ceil(4).max(1);
    let reach = spec.dilation * spec.kernel.saturating_sub(1);
    let fit = (X_BLOCK_BYTES / row_bytes).saturating_sub(reach) / spec.stride.max(1);
    let share = spec.n_out().div_ceil(4 * threads.max(1));
    fit.min(share).div_ceil(multiple).max(1) * multiple
}

/// Output channels `j0..j0 + NR`: quantises each channel's filter with its own scale, writes the
/// panel `[K][c_in/4][NR]` dwords of four signed bytes (channels past `c_out` and bytes past
/// `c_in` zero), per channel and tap `Σ_c q_w` into `sums` (`[NR][K]`) and per channel `s_w`.
fn pack_filters(spec: &Conv1dSpec, w: &[u16], j0: usize, panel: &mut [u32], sums: &mut [i32], w_scale: &mut [f32]) {
    let Conv1dSpec { c_in, c_out, kernel, .. } = *spec;
    let quads = c_in.div_ceil(4);
    for jj in 0..NR {
        let co = j0 + jj;
        let tap_sums = &mut sums[jj * kernel..(jj + 1) * kernel];
        tap_sums.fill(0);
        if co >= c_out {
            panel.iter_mut().skip(jj).step_by(NR).for_each(|v| *v = 0);
            w_scale[jj] = 0.0;
            continue;
        }
        let filter = &w[co * c_in * kernel..(co + 1) * c_in * kernel];
        let max = filter.iter().fold(0.0f32, |m, &b| m.max(from_bf16(b).abs()));
        let (inv, step) = scales(max);
        for j in 0..quads {
            for (k, tap_sum) in tap_sums.iter_mut().enumerate() {
                let mut dword = 0u32;
                for i in 0..4 {
                    let c = 4 * j + i;
                    if c < c_in {
                        let q = quantize(from_bf16(filter[c * kernel + k]), inv);
                        *tap_sum += q;
                        dword |= (q as u8 as u32) << (8 * i);
                    }
                }
                panel[(k * quads + j) * NR + jj] = dword;
            }
        }
        w_scale[jj] = step;
    }
}

/// Output rows `t0..t0 + yblk.len() / c_out` of one batch item: quantises the input rows they
/// read (each with its own scale), tabulates each tile's source rows and their scales, and runs
/// the tile kernel over every pair of filter panels (outer), group of taps (middle: a group's
/// filters stay in L1) and tile (inner).
#[allow(clippy::too_many_arguments)]
fn conv_block(
    cpu: Avx512Vnni,
    spec: &Conv1dSpec,
    xb: &[f32],
    w: &PackedFilters,
    bias: Option<&[f32]>,
    prep: Option<RowPrep<'_>>,
    t0: usize,
    yblk: &mut [f32],
) {
    let Conv1dSpec { c_in, c_out, kernel, .. } = *spec;
    let rows = yblk.len() / c_out;
    let tiles = rows.div_ceil(MR);
    let quads = c_in.div_ceil(4);
    let cols = w.w_scale.len();
    let (lo, hi) = rows_read(spec, t0, rows);
    let row_len = padded_row_len(quads);
    let zero_row = (hi - lo) * row_len;
    with_scratch_u32(zero_row + row_len, |xq| {
        // The converted rows' steps, then the zero row's (0: it adds nothing).
        with_scratch(hi - lo + 1, |row_steps| {
            convert_rows(cpu, &xb[lo * c_in..hi * c_in], c_in, row_len, &mut xq[..zero_row], &mut row_steps[..hi - lo], prep);
            xq[zero_row..].fill(ZERO_QUAD);
            row_steps[hi - lo] = 0.0;
            let xq = &*xq;
            with_scratch_usize(tiles * kernel * MR, |offsets| {
                // Row indices first (the zero row's is `hi − lo`), each then giving its step
                // and, scaled, its offset: no division per entry.
                tap_offsets(spec, t0, rows, MR, lo, 1, hi - lo, offsets);
                with_scratch(tiles * kernel * MR, |steps| {
                    for (s, o) in steps.iter_mut().zip(offsets.iter_mut()) {
                        *s = row_steps[*o];
                        *o *= row_len;
                    }
                    let (offsets, steps) = (&*offsets, &*steps);
                    let panel_len = kernel * quads * NR;
                    // Columns in pairs of panels (the last may be a single one); per pair, the
                    // taps in groups whose filters stay in L1 while every tile of the block
                    // takes them.
                    let group = taps_per_group(kernel, quads);
                    for j0 in (0..c_out).step_by(2 * NR) {
                        let (jp, width) = (j0 / NR, (c_out - j0).min(2 * NR));
                        let second = if width > NR { &w.panels[(jp + 1) * panel_len..(jp + 2) * panel_len] } else { &[] };
                        let columns = Columns {
                            panels: [&w.panels[jp * panel_len..(jp + 1) * panel_len], second],
                            correction: &w.correction,
                            stride: cols,
                            j0,
                            w_scale: &w.w_scale[j0..j0 + width],
                            bias: bias.map(|b| &b[j0..j0 + width]),
                        };
                        for k0 in (0..kernel).step_by(group) {
                            let taps = k0..(k0 + group).min(kernel);
                            for ti in 0..tiles {
                                let r0 = ti * MR;
                                let tile_rows = (rows - r0).min(MR);
                                let out = &mut yblk[r0 * c_out + j0..(r0 + tile_rows - 1) * c_out + j0 + width];
                                let at = ti * kernel * MR..(ti + 1) * kernel * MR;
                                let tile = TileRows { taps: kernel, run: quads, offsets: &offsets[at.clone()], steps: &steps[at] };
                                tile_kernel(cpu, &tile, taps.clone(), xq, &columns, out, c_out, tile_rows);
                            }
                        }
                    }
                });
            });
        });
    });
}

/// Filters one pass over a block's tiles reads, a group of whole taps of a panel pair: about
/// the L1 cache (32–48 KiB), so that most of them stay there while the tiles take them in turn
/// (measured on a 48 KiB L1: 16 and 24 KiB groups ran no faster, 48 KiB and whole filters slower).
const GROUP_FILTER_BYTES: usize = 32 * 1024;

/// Taps per group: as many as fit [`GROUP_FILTER_BYTES`] for a pair of panels, at least one.
fn taps_per_group(kernel: usize, quads: usize) -> usize {
    (GROUP_FILTER_BYTES / (2 * NR * 4 * quads.max(1))).clamp(1, kernel.max(1))
}

/// One tile's A operand: `offsets[k·MR + r]` is where, in the converted input, the `run` dwords
/// row `r` reads at tap `k` start, and `steps[k·MR + r]` that input row's step.
struct TileRows<'a> {
    taps: usize,
    run: usize,
    offsets: &'a [usize],
    steps: &'a [f32],
}

/// Columns `j0..j0 + width` (up to two panels): the panels (the second empty where `width` ≤
/// [`NR`]), the filter bank's corrections (`[K][stride]`), the steps and the bias.
struct Columns<'a> {
    panels: [&'a [u32]; 2],
    correction: &'a [i32],
    stride: usize,
    j0: usize,
    w_scale: &'a [f32],
    bias: Option<&'a [f32]>,
}

/// Quantises the rows `x` (`c_in` values each), each with its own step: row `i` of `dst` (a
/// stride of `row_len` dwords) starts with `⌈c_in/4⌉` dwords of bytes `q_x + 128`, the bytes past
/// `c_in` being 128 (a zero activation), and `steps[i]` is its step; the rest of the stride is
/// left as it was. With `prep`, each row is first mapped by it (into an L1-sized scratch row)
/// and the mapped row is what is quantised.
fn convert_rows(cpu: Avx512Vnni, x: &[f32], c_in: usize, row_len: usize, dst: &mut [u32], steps: &mut [f32], prep: Option<RowPrep<'_>>) {
    if c_in == 0 {
        return;
    }
    let quads = c_in.div_ceil(4);
    let rows = x.len() / c_in;
    assert!(
        row_len >= quads && dst.len() == rows * row_len && x.len() == rows * c_in && steps.len() == rows,
        "converted rows do not match their source"
    );
    let convert = |row: &[f32], out: &mut [u32], step: &mut f32| {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `cpu` proves AVX-512 F; `row` holds `c_in` floats and `out` at least `quads`
        // dwords (checked above).
        unsafe {
            let _ = cpu;
            let (inv, s) = scales(x86::max_abs(row.as_ptr(), c_in));
            x86::convert_row(row.as_ptr(), c_in, inv, out.as_mut_ptr());
            *step = s;
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let _ = (cpu, row, out, step);
            unreachable!("AVX-512 VNNI token off x86-64")
        }
    };
    let rows = x.chunks_exact(c_in).zip(dst.chunks_exact_mut(row_len)).zip(steps.iter_mut());
    match prep {
        None => rows.for_each(|((row, out), step)| convert(row, out, step)),
        Some(prep) => with_scratch(c_in, |mapped| {
            for ((row, out), step) in rows {
                prep(row, mapped);
                convert(mapped, out, step);
            }
        }),
    }
}

/// Taps `taps` of `out[r·ldy + j] = (Σ_k (Σ_p A(r, k, p) · B(k, p, j) + correction[k][j0 + j]) ·
/// step(r, k)) · w_scale[j] + bias[j]` for rows `r < rows` and the `width` columns, the taps
/// summed in order in f32 in `out` itself (the first tap starts from zero; the last writes the
/// result), A read from `xq` at the tile's offsets, B the packed panels `[taps][run][NR]`.
#[allow(clippy::too_many_arguments)]
fn tile_kernel(
    cpu: Avx512Vnni,
    tile: &TileRows<'_>,
    taps: std::ops::Range<usize>,
    xq: &[u32],
    columns: &Columns<'_>,
    out: &mut [f32],
    ldy: usize,
    rows: usize,
) {
    let TileRows { taps: all_taps, run, offsets, steps } = *tile;
    assert!((1..=MR).contains(&rows), "tile rows");
    assert!(taps.start < taps.end && taps.end <= all_taps, "tap range");
    let width = columns.w_scale.len();
    let panels = if width > NR { 2 } else { 1 };
    assert!((1..=2 * NR).contains(&width) && out.len() == (rows - 1) * ldy + width, "tile shape");
    assert!(columns.bias.is_none_or(|b| b.len() == width), "bias width");
    assert!(columns.j0 + width <= columns.stride && columns.correction.len() >= all_taps * columns.stride, "corrections");
    assert!(offsets.len() == all_taps * MR && steps.len() == all_taps * MR, "tile table");
    // Only the taps this call reads: a tile runs once per group of taps.
    assert!(offsets[taps.start * MR..taps.end * MR].iter().all(|&o| o + run <= xq.len()), "A offsets outside the input copy");
    assert!(columns.panels[..panels].iter().all(|p| p.len() >= all_taps * run * NR), "filter panel too short");
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `cpu` proves AVX-512 F and VNNI; every A read (taps `taps` only) lies at an offset
    // checked above, B reads within `all_taps·run·NR` of each panel used (two only where `width` > NR), the
    // corrections read `width` values per tap within the array, and the loads and stores of
    // `out` lie within it (its shape checked above).
    unsafe {
        let _ = cpu;
        let b = [columns.panels[0].as_ptr(), columns.panels[panels - 1].as_ptr()];
        let tile = x86::Tile { taps, last: all_taps, run, xq: xq.as_ptr(), offsets: offsets.as_ptr(), steps: steps.as_ptr(), b };
        let epi = x86::TileColumns {
            correction: columns.correction.as_ptr().add(columns.j0),
            stride: columns.stride,
            w_scale: columns.w_scale.as_ptr(),
            bias: columns.bias.map_or(std::ptr::null(), |b| b.as_ptr()),
        };
        let full = width == panels * NR;
        let run_tile = |out: *mut f32, ldy: usize| match (panels, full) {
            (2, true) => x86::tile_kernel::<4, true>(&tile, &epi, out, ldy, width),
            (2, false) => x86::tile_kernel::<4, false>(&tile, &epi, out, ldy, width),
            (_, true) => x86::tile_kernel::<2, true>(&tile, &epi, out, ldy, width),
            (_, false) => x86::tile_kernel::<2, false>(&tile, &epi, out, ldy, width),
        };
        if rows == MR {
            run_tile(out.as_mut_ptr(), ldy);
        } else {
            // A partial tile runs whole on a staged copy of its rows (the rows past it read the
            // zero row), so the kernel has no row count to test.
            let mut staged = [0.0f32; MR * 2 * NR];
            for (r, row) in staged.chunks_exact_mut(2 * NR).take(rows).enumerate() {
                row[..width].copy_from_slice(&out[r * ldy..r * ldy + width]);
            }
            run_tile(staged.as_mut_ptr(), 2 * NR);
            for (r, row) in staged.chunks_exact(2 * NR).take(rows).enumerate() {
                out[r * ldy..r * ldy + width].copy_from_slice(&row[..width]);
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (cpu, xq, out, taps);
        unreachable!("AVX-512 VNNI token off x86-64")
    }
}

/// The module's arithmetic with plain loops, on every machine: filters and input rows quantised
/// as the module docs say, each tap's sum in i64 (exact; the kernel's i32 sums are exact too), the
/// same f32 steps in the same order. `spec` must have been validated and [`supports`] it.
#[cfg(test)]
pub(crate) fn reference(spec: &Conv1dSpec, x: &[f32], w: &[u16], bias: Option<&[f32]>, y: &mut [f32]) {
    let Conv1dSpec { batch, n, c_in, c_out, kernel, .. } = *spec;
    let n_out = spec.n_out();
    let per_filter = c_in * kernel;
    let mut qw = vec![0i32; c_out * per_filter];
    let mut w_step = vec![0.0f32; c_out];
    for co in 0..c_out {
        let filter = &w[co * per_filter..(co + 1) * per_filter];
        let (inv, step) = scales(filter.iter().fold(0.0f32, |m, &b| m.max(from_bf16(b).abs())));
        w_step[co] = step;
        for (q, &b) in qw[co * per_filter..].iter_mut().zip(filter) {
            *q = quantize(from_bf16(b), inv);
        }
    }
    for b in 0..batch {
        let xb = &x[b * n * c_in..(b + 1) * n * c_in];
        let mut qx = vec![0i32; n * c_in];
        let mut x_step = vec![0.0f32; n];
        for (t, row) in xb.chunks_exact(c_in.max(1)).enumerate() {
            let (inv, step) = scales(row.iter().fold(0.0f32, |m, &v| m.max(v.abs())));
            x_step[t] = step;
            for (q, &v) in qx[t * c_in..].iter_mut().zip(row) {
                *q = quantize(v, inv);
            }
        }
        for t in 0..n_out {
            for co in 0..c_out {
                let mut f = 0.0f32;
                for k in 0..kernel {
                    let s = spec.pad_mode.source(t * spec.stride + k * spec.dilation, spec.pad, n);
                    let acc: i64 =
                        s.map_or(0, |s| (0..c_in).map(|ci| qx[s * c_in + ci] as i64 * qw[co * per_filter + ci * kernel + k] as i64).sum());
                    f = (acc as i32 as f32).mul_add(s.map_or(0.0, |s| x_step[s]), f);
                }
                y[(b * n_out + t) * c_out + co] = f.mul_add(w_step[co], bias.map_or(0.0, |bv| bv[co]));
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{MR, NR};
    use std::arch::x86_64::*;

    /// Mask of the first `n` of 16 lanes (`n` ≥ 16: all).
    #[inline(always)]
    fn lanes(n: usize) -> __mmask16 {
        if n >= 16 {
            0xFFFF
        } else {
            ((1u32 << n) - 1) as __mmask16
        }
    }

    /// `max |v|` over `len` floats (NaNs ignored).
    ///
    /// # Safety
    /// AVX-512 F present; `v` holds `len` floats.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn max_abs(v: *const f32, len: usize) -> f32 {
        let mut m = _mm512_setzero_ps();
        let mut i = 0;
        // SAFETY: every load lies within `len` (the tail masked).
        unsafe {
            while i + 16 <= len {
                // max(x, m) with m second: a NaN lane of x leaves m as it was.
                m = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(v.add(i))), m);
                i += 16;
            }
            if i < len {
                m = _mm512_max_ps(_mm512_abs_ps(_mm512_maskz_loadu_ps(lanes(len - i), v.add(i))), m);
            }
        }
        _mm512_reduce_max_ps(m)
    }

    /// One row: bytes `round(x·inv)` (the default rounding, half to even) clamped to ±127, plus
    /// 128; the bytes of the last dword past `c_in` are 128.
    ///
    /// # Safety
    /// AVX-512 F present; `x` holds `c_in` floats, `dst` `⌈c_in/4⌉` dwords.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn convert_row(x: *const f32, c_in: usize, inv: f32, dst: *mut u32) {
        let scale = _mm512_set1_ps(inv);
        let (lo, hi, offset) = (_mm512_set1_epi32(-127), _mm512_set1_epi32(127), _mm512_set1_epi32(128));
        let quantize = |v: __m512| {
            let q = _mm512_cvtps_epi32(_mm512_mul_ps(v, scale));
            _mm512_add_epi32(_mm512_min_epi32(_mm512_max_epi32(q, lo), hi), offset)
        };
        let out = dst as *mut u8;
        // SAFETY (whole block): every access lies in x or the first ⌈c_in/4⌉ dwords of dst;
        // masked loads and stores touch only their enabled lanes.
        unsafe {
            let mut c = 0;
            while c + 16 <= c_in {
                _mm_storeu_si128(out.add(c) as *mut __m128i, _mm512_cvtepi32_epi8(quantize(_mm512_loadu_ps(x.add(c)))));
                c += 16;
            }
            if c < c_in {
                let m = lanes(c_in - c);
                _mm512_mask_cvtepi32_storeu_epi8(out.add(c) as *mut i8, m, quantize(_mm512_maskz_loadu_ps(m, x.add(c))));
            }
            for pad in c_in..c_in.div_ceil(4) * 4 {
                *out.add(pad) = 128;
            }
        }
    }

    /// Where one tile's operands lie: `offsets[k·MR + r]` is the start, in `xq`, of the `run`
    /// dwords row `r` reads at tap `k`, `steps[k·MR + r]` that input row's step; `b` the panels
    /// `[last][run][NR]` of the tile's first and second 32 columns; `taps` the taps to sum now,
    /// `last` the filter's tap count (the group ending there writes the result).
    pub(super) struct Tile {
        pub taps: std::ops::Range<usize>,
        pub last: usize,
        pub run: usize,
        pub xq: *const u32,
        pub offsets: *const usize,
        pub steps: *const f32,
        pub b: [*const u32; 2],
    }

    /// The tile's columns: the corrections (`[taps][stride]`, from the tile's first column),
    /// the filter steps and the bias (or null).
    pub(super) struct TileColumns {
        pub correction: *const i32,
        pub stride: usize,
        pub w_scale: *const f32,
        pub bias: *const f32,
    }

    /// The `MR` × `16·NV` tile (`NV` = 2: one panel, 4: two): per tap, i32 accumulators start at
    /// the tap's correction and take `vpdpbusd` of `NV` B vectors and one broadcast A dword per
    /// row and step; then each is added, with its row's step, into the f32 sum kept in `out`
    /// (zero before the first tap), and after the filter's last tap `f · w_scale + bias` is
    /// stored instead. `FULL`: all `16·NV` columns are there (no masks); otherwise `width`.
    ///
    /// The sums live in `out`, not in registers, so the i32 accumulators can take 24 registers:
    /// with four B vectors a step issues 10 loads for 24 `vpdpbusd`, where two B vectors (12
    /// accumulators beside 12 f32 ones) issued 8 loads for 12, and the loads, not the dot
    /// products, bounded the loop. A tap's sums cost `MR·NV` loads and stores against its
    /// `run·MR·NV` dot products.
    ///
    /// # Safety
    /// AVX-512 F and VNNI present; `offsets`/`steps` hold `last·MR` entries, each offset `o` of
    /// the taps `taps` with `o + run` dwords inside `xq`; `taps` lies in `0..last` and is not empty; `b[0]` (and
    /// `b[1]` where `NV` = 4) hold `last·run·NR` dwords; `correction` holds `width` values at
    /// each of `last` strides; `w_scale` (and `bias` unless null) `width` values; `out` holds
    /// `(MR − 1)·ldy + width` floats, `1 ≤ width ≤ 16·NV` (`= 16·NV` where `FULL`).
    #[target_feature(enable = "avx512f,avx512vnni")]
    pub(super) unsafe fn tile_kernel<const NV: usize, const FULL: bool>(
        tile: &Tile,
        cols: &TileColumns,
        out: *mut f32,
        ldy: usize,
        width: usize,
    ) {
        let Tile { ref taps, last, run, xq, offsets, steps, b } = *tile;
        let masks: [__mmask16; NV] = std::array::from_fn(|v| lanes(width.saturating_sub(16 * v)));
        // The sums' loads and stores: whole vectors unmasked (a masked store is not forwarded to
        // the next tap's load of it).
        let load = |at: *const f32, v: usize| {
            // SAFETY: `at` is one of the tile's output vectors, within the caller's contract.
            unsafe {
                if FULL {
                    _mm512_loadu_ps(at)
                } else {
                    _mm512_maskz_loadu_ps(masks[v], at)
                }
            }
        };
        let store = |at: *mut f32, v: usize, f: __m512| {
            // SAFETY: as for `load`.
            unsafe {
                if FULL {
                    _mm512_storeu_ps(at, f)
                } else {
                    _mm512_mask_storeu_ps(at, masks[v], f)
                }
            }
        };
        for r in 0..MR {
            let dst = out.wrapping_add(r * ldy);
            _mm_prefetch::<_MM_HINT_ET0>(dst as *const i8);
            _mm_prefetch::<_MM_HINT_ET0>(dst.wrapping_add(width - 1) as *const i8);
        }
        for k in taps.clone() {
            // SAFETY (whole block): offsets, steps, B, the corrections and `out` within the
            // caller's contract; correction, step and bias loads masked to `width`.
            unsafe {
                let corr = cols.correction.add(k * cols.stride);
                let c: [__m512i; NV] = std::array::from_fn(|v| _mm512_maskz_loadu_epi32(masks[v], corr.wrapping_add(16 * v)));
                let mut acc = [c; MR];
                let a: [*const u32; MR] = std::array::from_fn(|r| xq.add(*offsets.add(k * MR + r)));
                let bk = [b[0].add(k * run * NR), b[1].add(k * run * NR)];
                for p in 0..run {
                    let bv: [__m512i; NV] =
                        std::array::from_fn(|v| _mm512_loadu_si512(bk[v / 2].add(p * NR + 16 * (v % 2)) as *const __m512i));
                    for (row, ar) in acc.iter_mut().zip(a) {
                        let quad = _mm512_set1_epi32(*ar.add(p) as i32);
                        for (lane, &bv) in row.iter_mut().zip(&bv) {
                            *lane = _mm512_dpbusd_epi32(*lane, quad, bv);
                        }
                    }
                }
                let step: [__m512; MR] = std::array::from_fn(|r| _mm512_set1_ps(*steps.add(k * MR + r)));
                if k + 1 < last {
                    for (r, (row, &step)) in acc.iter().zip(&step).enumerate() {
                        for (v, &sum) in row.iter().enumerate() {
                            let at = out.add(r * ldy + 16 * v);
                            let prev = if k == 0 { _mm512_setzero_ps() } else { load(at, v) };
                            store(at, v, _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), step, prev));
                        }
                    }
                } else {
                    let w_scale: [__m512; NV] = std::array::from_fn(|v| _mm512_maskz_loadu_ps(masks[v], cols.w_scale.add(16 * v)));
                    let bias: [__m512; NV] = std::array::from_fn(|v| {
                        if cols.bias.is_null() {
                            _mm512_setzero_ps()
                        } else {
                            _mm512_maskz_loadu_ps(masks[v], cols.bias.add(16 * v))
                        }
                    });
                    for (r, (row, &step)) in acc.iter().zip(&step).enumerate() {
                        for (v, &sum) in row.iter().enumerate() {
                            let at = out.add(r * ldy + 16 * v);
                            let prev = if k == 0 { _mm512_setzero_ps() } else { load(at, v) };
                            let f = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), step, prev);
                            store(at, v, _mm512_fmadd_ps(f, w_scale[v], bias[v]));
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
#[path = "conv_int8_tests.rs"]
mod tests;
