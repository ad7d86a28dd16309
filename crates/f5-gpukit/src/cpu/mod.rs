//! The CPU backend: the engine users run without a GPU, and the twin every CUDA kernel is
//! checked against. Row-parallel with rayon; GEMMs (and the GEMM halves of attention and the
//! grouped convolutions) through the `gemm` crate, which reaches the f32 peak of the machine.

mod attention;
pub(crate) mod bf16;
mod conv;
mod few_rows;
pub(crate) mod line_alloc;
pub(crate) mod lines;
mod scratch;
mod seq;
pub(crate) mod simd;
mod spectral;

use std::sync::Arc;

use rayon::prelude::*;

use crate::check;
use crate::spec::{
    AttentionSpec, Conv1dSpec, ConvTranspose1dSpec, GemmSpec, InstanceNormSpec, InterpolateSpec, LstmSpec, Pad1dSpec, RopeSpec, StftSpec,
};
use crate::{shape_err, Activation, Backend, Device, KitError, Result};

/// Rows handed to one rayon task by the row-parallel ops: large enough that scheduling costs
/// nothing next to the work, small enough to balance two to a few dozen threads.
const ROWS_PER_TASK: usize = 16;

/// The CPU backend. Cheap to clone; clones share the thread pool.
#[derive(Clone)]
pub struct CpuBackend {
    /// `None` runs on rayon's global pool (sized by `RAYON_NUM_THREADS` or the core count).
    pool: Option<Arc<rayon::ThreadPool>>,
}

impl Default for CpuBackend {
    fn default() -> Self {
        Self::new()
    }
}

/// Buffers of at least this many values (1 MiB) come zeroed from the allocator ([`zeroed_vec`]),
/// and copies of as many are made on every thread of the pool. Copying an 80 MB activation (the
/// 32 s input's last stage) took 14 ms on one thread of a 2-core Xeon VM.
const PARALLEL_MIN_VALUES: usize = 1 << 18;
/// Values per task of the parallel zeroing and copies (256 KiB).
const PARALLEL_CHUNK: usize = 1 << 16;

/// `len` zeros from the global allocator's `alloc_zeroed`, or `None` where it has no room. With
/// the system allocator (`calloc`) or [`LineAligned`](crate::LineAligned) (`calloc` too, on
/// Linux), memory just mapped is handed out unwritten: its pages are zero until first written,
/// and a buffer a fused kernel never writes (Kokoro's norm scratch in the bf16 and int8 modes)
/// takes no memory. Zeroing here on every thread made every page resident at once.
fn zeroed_vec(len: usize) -> Option<Vec<f32>> {
    let layout = std::alloc::Layout::array::<f32>(len).ok()?;
    if layout.size() == 0 {
        return Some(Vec::new());
    }
    // SAFETY: a non-zero size.
    let values = unsafe { std::alloc::alloc_zeroed(layout) }.cast::<f32>();
    if values.is_null() {
        return None;
    }
    // SAFETY: allocated by the global allocator with the layout of `len` f32s, which is the
    // capacity; all `len` values are initialised (zero bits are 0.0).
    Some(unsafe { Vec::from_raw_parts(values, len, len) })
}

impl CpuBackend {
    /// On rayon's global pool.
    pub fn new() -> Self {
        CpuBackend { pool: None }
    }

    /// On a private pool of `threads` threads (0 = the global pool), so that a benchmark or a
    /// server can pin the engine's parallelism without touching the rest of the process.
    pub fn with_threads(threads: usize) -> Result<Self> {
        if threads == 0 {
            return Ok(Self::new());
        }
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("f5-cpu-{i}"))
            .build()
            .map_err(|e| KitError::Device(format!("cannot start {threads} CPU threads: {e}")))?;
        Ok(CpuBackend { pool: Some(Arc::new(pool)) })
    }

    /// Threads the ops run on.
    pub fn threads(&self) -> usize {
        match &self.pool {
            Some(p) => p.current_num_threads(),
            None => rayon::current_num_threads(),
        }
    }

    /// Normal draws as PyTorch's serial CPU path makes them (`at::normal_distribution<double>`:
    /// a Box–Muller pair per four 32-bit generator words, rounded to f32): `out[2i]`,
    /// `out[2i + 1]` = `(r·cos θ, r·sin θ)` of `words[4i..4i + 4]`, θ = 2π·u1 from the first
    /// two words and r = √(−2·log1p(−u2)) from the last two, each uniform the low 53 bits of
    /// its two words. Computed in f64 within an ulp of libm's values, vectorised and on this
    /// backend's threads, so the f32 results are libm's except where an f64 value lies within
    /// an ulp of an f32 rounding boundary (about one value in 10⁸). Kokoro's source noise is
    /// millions of these; one at a time through libm they were most of the source's time.
    pub fn box_muller_normals(&self, words: &[u32], out: &mut [f32]) -> Result<()> {
        if !out.len().is_multiple_of(2) || words.len() != 2 * out.len() {
            return Err(crate::shape_err(
                "box_muller_normals",
                format!("{} words for {} values: four words make each pair of values", words.len(), out.len()),
            ));
        }
        /// Pairs per parallel task (a fixed split; each pair is computed alone).
        const PAIRS_PER_TASK: usize = 4096;
        self.run(|| {
            out.par_chunks_mut(2 * PAIRS_PER_TASK).zip(words.par_chunks(4 * PAIRS_PER_TASK)).for_each(|(o, w)| simd::box_muller_words(w, o))
        });
        Ok(())
    }

    fn run<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        match &self.pool {
            Some(p) => p.install(f),
            None => f(),
        }
    }

    /// [`Backend::gemm`] on slices: for the bf16 backend, which widens a bf16 weight into
    /// scratch memory and multiplies it here.
    pub(crate) fn gemm_slices(&self, spec: &GemmSpec, a: &[f32], b: &[f32], bias: Option<&[f32]>, c: &mut [f32]) -> Result<()> {
        spec.validate(a.len(), b.len(), c.len(), bias.map(|b| b.len()))?;
        self.run(|| {
            // On one thread too, so the sums are the same whatever the thread count.
            if let Some(isa) = few_rows::Isa::detect().filter(|&isa| few_rows::applies(isa, spec)) {
                few_rows::gemm(isa, spec, a, b, c);
            } else if spec.batch == 1 && spec.m <= GEMM_FEW_ROWS && spec.n >= 2 * GEMM_COLUMN_BLOCK {
                gemm_by_columns(spec, a, b, c);
            } else {
                gemm_raw(spec, a, b, c, true);
            }
            if let Some(bias) = bias {
                // A separate, row-parallel pass: seeding C with the bias and accumulating
                // (read_dst) costs the GEMM more than this pass does.
                let bias = &bias[..spec.n];
                for bi in 0..spec.batch {
                    let co = spec.c.offset + bi * spec.c.batch_stride;
                    let rs = spec.c.row_stride;
                    let end = co + (spec.m.max(1) - 1) * rs + spec.n;
                    if spec.m == 0 {
                        continue;
                    }
                    c[co..end].par_chunks_mut(rs * ROWS_PER_TASK).for_each(|rows| {
                        for row in rows.chunks_mut(rs) {
                            let len = row.len().min(spec.n);
                            simd::axpy(1.0, &bias[..len], &mut row[..len]);
                        }
                    });
                }
            }
        });
        Ok(())
    }

    /// [`Backend::instance_norm`] on slices, each output row then through `snake` when given
    /// (`(α, row function)`: the f32 backend's Snake or the bf16 backend's), after the checks of
    /// both ops: the one body of `instance_norm` and `instance_norm_snake` on both CPU backends.
    pub(crate) fn instance_norm_on(
        &self,
        spec: &InstanceNormSpec,
        x: &[f32],
        affine: Option<(&[f32], &[f32])>,
        style: Option<&[f32]>,
        snake: Option<seq::SnakeAfter<'_>>,
        out: &mut [f32],
    ) -> Result<()> {
        spec.validate(x.len(), affine.map(|(w, b)| (w.len(), b.len())), style.map(|s| s.len()), out.len())?;
        if let Some((alpha, _)) = snake {
            check::snake(spec.batch * spec.n, spec.c, out.len(), alpha.len())?;
        }
        self.run(|| seq::instance_norm(spec, x, affine, style, snake, out));
        Ok(())
    }

    /// The fused instance norm + Snake + convolution (+ residual, with `accumulate`) of the CPU
    /// backends' f32 convolutions, after the checks the unfused ops make (so both fail alike):
    /// the tiled path ([`conv::conv1d_around`]) maps each input row as it gathers it, so the
    /// normalised rows are never written whole. `Ok(false)`, with nothing written, where the
    /// convolution takes no tiled path. `rows` gives each batch item's row normalisation (its
    /// statistics and Snake), made only once the path is known to apply.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn norm_snake_conv_tiled<'r>(
        &self,
        norm: &InstanceNormSpec,
        x: &[f32],
        affine: Option<(&[f32], &[f32])>,
        style: Option<&[f32]>,
        alpha: &[f32],
        rows: impl Fn(usize, &[f32]) -> seq::RowNorm<'r> + Sync,
        conv: &Conv1dSpec,
        weight: &[f32],
        bias: Option<&[f32]>,
        scratch_len: usize,
        accumulate: bool,
        y: &mut [f32],
    ) -> Result<bool> {
        if norm.n == 0 || norm.c == 0 || !conv::around_applies(conv) {
            return Ok(false);
        }
        check::fused_norm_snake_conv(norm, conv, x, affine, style, alpha, scratch_len, weight.len(), bias, y.len())?;
        let InstanceNormSpec { batch, n, c, .. } = *norm;
        Ok(self.run(|| {
            let items: Vec<seq::RowNorm<'_>> = (0..batch).map(|b| rows(b, &x[b * n * c..(b + 1) * n * c])).collect();
            let prep = |b: usize, row: &[f32], out: &mut [f32]| items[b].row(row, out);
            conv::conv1d_around(conv, x, weight, bias, y, conv::Around { prep: Some(&prep), accumulate })
        }))
    }

    /// [`CpuBackend::norm_snake_conv_tiled`] with this backend's norm and Snake.
    #[allow(clippy::too_many_arguments)]
    fn norm_snake_conv(
        &self,
        norm: &InstanceNormSpec,
        x: &[f32],
        affine: Option<(&Vec<f32>, &Vec<f32>)>,
        style: Option<&Vec<f32>>,
        alpha: &[f32],
        conv: &Conv1dSpec,
        weight: &[f32],
        bias: Option<&Vec<f32>>,
        scratch_len: usize,
        accumulate: bool,
        y: &mut [f32],
    ) -> Result<bool> {
        let affine = affine.map(|(w, b)| (w.as_slice(), b.as_slice()));
        let (style, bias) = (style.map(|s| s.as_slice()), bias.map(|b| b.as_slice()));
        let rows = |b: usize, xb: &[f32]| seq::RowNorm::of(norm, b, xb, affine, style, Some((alpha, seq::SnakeSine::Exact)));
        self.norm_snake_conv_tiled(norm, x, affine, style, alpha, rows, conv, weight, bias, scratch_len, accumulate, y)
    }

    /// [`Backend::snake`] with `sin²` from [`simd::sin2_f32`] (within 4e-7 of exact, against
    /// the f32 backend's sine within 2 ulp): the bf16 backend's Snake, where the convolutions
    /// around it add far more.
    pub(crate) fn snake_f32_sin(&self, x: &mut [f32], rows: usize, c: usize, alpha: &[f32]) -> Result<()> {
        let total = check::snake(rows, c, x.len(), alpha.len())?;
        self.run(|| seq::snake_f32_sin(&mut x[..total], c, alpha));
        Ok(())
    }
}

/// LayerNorm statistics of one row: `(mean, 1/sqrt(var + eps))` with the biased variance, as
/// PyTorch computes it. Two passes in f32 with 16 lanes each.
fn row_stats(x: &[f32], eps: f32) -> (f32, f32) {
    let d = x.len() as f32;
    let mean = simd::sum(x) / d;
    let var = simd::sum_sq_dev(x, mean) / d;
    (mean, 1.0 / (var + eps).sqrt())
}

/// Runs one strided GEMM on the current pool. Every pointer offset was bounds-checked by
/// `GemmSpec::validate`.
pub(crate) fn gemm_raw(spec: &GemmSpec, a: &[f32], b: &[f32], c: &mut [f32], parallel: bool) {
    // SAFETY: `c` is uniquely borrowed for the call and holds every element the spec addresses.
    unsafe { gemm_into(spec, a, b, c.as_mut_ptr(), c.len(), parallel) }
}

/// Columns per task of [`gemm_by_columns`]: a fixed width (not derived from the thread count),
/// and the split is made on any number of threads, so the products do not depend on how many
/// threads run them (the `gemm` crate's kernels for a block's last, partial tile may sum in
/// another order than a whole-width product's).
const GEMM_COLUMN_BLOCK: usize = 128;
/// Up to this many rows, the `gemm` crate runs a product on one thread whatever its width (its
/// tasks split the rows), so [`gemm_by_columns`] splits the columns instead.
const GEMM_FEW_ROWS: usize = 128;

/// A GEMM with few rows (ALBERT's and the LSTMs' projections of a sentence: 50–150 rows against
/// 768–2048 columns) split into fixed-width column blocks that run in parallel, each on one
/// thread. The `gemm` crate keeps such a product on a single thread, so the first half of a
/// short Kokoro utterance left every other core idle. Same sums over k for every element
/// (each block is the same product restricted to its columns).
fn gemm_by_columns(spec: &GemmSpec, a: &[f32], b: &[f32], c: &mut [f32]) {
    struct Out(*mut f32, usize);
    // SAFETY: the blocks write disjoint columns of C; the pointer outlives the scope below.
    unsafe impl Sync for Out {}
    let out = Out(c.as_mut_ptr(), c.len());
    let blocks = spec.n.div_ceil(GEMM_COLUMN_BLOCK);
    (0..blocks).into_par_iter().for_each(|blk| {
        let n0 = blk * GEMM_COLUMN_BLOCK;
        let mut part = *spec;
        part.n = GEMM_COLUMN_BLOCK.min(spec.n - n0);
        part.b.offset += n0 * spec.b.col_stride;
        part.c.offset += n0 * spec.c.col_stride;
        let out = &out;
        // SAFETY: `part` addresses a subset of the elements `spec` addresses (validated by the
        // caller), and no two blocks share an element of C.
        unsafe { gemm_into(&part, a, b, out.0, out.1, false) }
    });
}

/// [`gemm_raw`] with C given as a pointer, so disjoint column blocks can be computed at once.
///
/// # Safety
/// `c` points to `c_len` writable floats that hold every element `spec` addresses in C, and no
/// other thread reads or writes those elements during the call.
pub(crate) unsafe fn gemm_into(spec: &GemmSpec, a: &[f32], b: &[f32], c_ptr: *mut f32, c_len: usize, parallel: bool) {
    let par = if parallel { gemm::Parallelism::Rayon(0) } else { gemm::Parallelism::None };
    for bi in 0..spec.batch {
        let ao = spec.a.offset + bi * spec.a.batch_stride;
        let bo = spec.b.offset + bi * spec.b.batch_stride;
        let co = spec.c.offset + bi * spec.c.batch_stride;
        if spec.m == 0 || spec.n == 0 {
            continue;
        }
        debug_assert!(co < c_len, "C's offset {co} past its {c_len} values");
        let (a_ptr, b_ptr) = (a.as_ptr().wrapping_add(ao.min(a.len())), b.as_ptr().wrapping_add(bo.min(b.len())));
        let (a_rs, a_cs, b_rs, b_cs) =
            (spec.a.row_stride as isize, spec.a.col_stride as isize, spec.b.row_stride as isize, spec.b.col_stride as isize);
        let (c_rs, c_cs) = (spec.c.row_stride as isize, spec.c.col_stride as isize);
        // The gemm crate's kernels run down columns of A (column-major is their native layout):
        // handed a row-major A it first transposes every panel of it element by element, which
        // cost Kokoro's convolutions (im2col rows times row-major packed filters) a seventh of
        // their time. When B is row-major, Cᵀ = Bᵀ·Aᵀ has a column-major left operand, so that
        // is the product it gets: the same sums over k, operands in the layout the kernels read.
        // (A `Linear`'s transposed weight is column-major already: swapping would only move the
        // strided panel from one side to the other.)
        let transpose = spec.a.row_stride != 1 && spec.b.col_stride == 1 && spec.b.row_stride != 1;
        // SAFETY: validate() proved that every element addressed through these offsets and
        // strides lies inside the slices (C's inside `c_len`); the caller guarantees C's
        // elements are this call's alone, and C does not alias a or b. The transposed call
        // addresses exactly the same elements through swapped strides.
        unsafe {
            if transpose {
                gemm::gemm(
                    spec.n,
                    spec.m,
                    spec.k,
                    c_ptr.add(co),
                    c_rs,
                    c_cs,
                    spec.beta != 0.0,
                    b_ptr,
                    b_rs,
                    b_cs,
                    a_ptr,
                    a_rs,
                    a_cs,
                    1.0,
                    1.0,
                    false,
                    false,
                    false,
                    par,
                );
            } else {
                gemm::gemm(
                    spec.m,
                    spec.n,
                    spec.k,
                    c_ptr.add(co),
                    c_cs,
                    c_rs,
                    spec.beta != 0.0,
                    a_ptr,
                    a_cs,
                    a_rs,
                    b_ptr,
                    b_cs,
                    b_rs,
                    1.0,
                    1.0,
                    false,
                    false,
                    false,
                    par,
                );
            }
        }
    }
}

impl Backend for CpuBackend {
    type Buf = Vec<f32>;

    fn device(&self) -> Device {
        Device::Cpu { threads: self.pool.as_ref().map_or(0, |p| p.current_num_threads()) }
    }

    /// Small buffers are zeroed here; large ones come from the global allocator's
    /// `alloc_zeroed`, which maps fresh memory without writing it (the system allocator's
    /// `calloc`, or [`LineAligned`](crate::LineAligned)'s on Linux), so their pages cost memory
    /// and a fault only where a kernel writes them.
    fn alloc(&self, len: usize) -> Result<Vec<f32>> {
        if len >= PARALLEL_MIN_VALUES {
            return zeroed_vec(len).ok_or(KitError::OutOfMemory(len));
        }
        let mut v = Vec::new();
        v.try_reserve_exact(len).map_err(|_| KitError::OutOfMemory(len))?;
        v.resize(len, 0.0);
        Ok(v)
    }

    fn upload(&self, data: &[f32]) -> Result<Vec<f32>> {
        let mut v = Vec::new();
        v.try_reserve_exact(data.len()).map_err(|_| KitError::OutOfMemory(data.len()))?;
        v.extend_from_slice(data);
        Ok(v)
    }

    fn on_host_threads<R: Send>(&self, work: impl FnOnce() -> R + Send) -> R {
        self.run(work)
    }

    fn download(&self, buf: &Vec<f32>) -> Result<Vec<f32>> {
        Ok(buf.clone())
    }

    fn len(&self, buf: &Vec<f32>) -> usize {
        buf.len()
    }

    fn write(&self, buf: &mut Vec<f32>, offset: usize, data: &[f32]) -> Result<()> {
        let end = offset.checked_add(data.len()).filter(|&e| e <= buf.len());
        let end = end.ok_or_else(|| shape_err("write", format!("{}+{} past buffer of {}", offset, data.len(), buf.len())))?;
        buf[offset..end].copy_from_slice(data);
        Ok(())
    }

    fn read(&self, buf: &Vec<f32>, offset: usize, out: &mut [f32]) -> Result<()> {
        let end = offset.checked_add(out.len()).filter(|&e| e <= buf.len());
        let end = end.ok_or_else(|| shape_err("read", format!("{}+{} past buffer of {}", offset, out.len(), buf.len())))?;
        out.copy_from_slice(&buf[offset..end]);
        Ok(())
    }

    fn copy(&self, src: &Vec<f32>, src_off: usize, dst: &mut Vec<f32>, dst_off: usize, len: usize) -> Result<()> {
        let s_end = src_off.checked_add(len).filter(|&e| e <= src.len());
        let d_end = dst_off.checked_add(len).filter(|&e| e <= dst.len());
        match (s_end, d_end) {
            (Some(se), Some(de)) => {
                let (dst, src) = (&mut dst[dst_off..de], &src[src_off..se]);
                if len < PARALLEL_MIN_VALUES {
                    dst.copy_from_slice(src);
                } else {
                    // Large copies (the generator's 80 MB activations) on every thread: one
                    // core's stream falls well short of the memory bandwidth on a server.
                    self.run(|| {
                        dst.par_chunks_mut(PARALLEL_CHUNK).zip(src.par_chunks(PARALLEL_CHUNK)).for_each(|(d, s)| d.copy_from_slice(s))
                    });
                }
                Ok(())
            }
            _ => Err(shape_err("copy", format!("{len} values from {src_off} (of {}) to {dst_off} (of {})", src.len(), dst.len()))),
        }
    }

    fn fill(&self, buf: &mut Vec<f32>, offset: usize, len: usize, value: f32) -> Result<()> {
        let end = offset.checked_add(len).filter(|&e| e <= buf.len());
        let end = end.ok_or_else(|| shape_err("fill", format!("{offset}+{len} past buffer of {}", buf.len())))?;
        buf[offset..end].fill(value);
        Ok(())
    }

    fn gemm(&self, spec: &GemmSpec, a: &Vec<f32>, b: &Vec<f32>, bias: Option<&Vec<f32>>, c: &mut Vec<f32>) -> Result<()> {
        self.gemm_slices(spec, a, b, bias.map(|b| b.as_slice()), c)
    }

    fn attention(&self, spec: &AttentionSpec, q: &Vec<f32>, k: &Vec<f32>, v: &Vec<f32>, out: &mut Vec<f32>) -> Result<()> {
        spec.validate(q.len(), k.len(), v.len(), out.len())?;
        self.run(|| attention::attention(spec, q, k, v, out));
        Ok(())
    }

    fn layer_norm(
        &self,
        x: &Vec<f32>,
        rows: usize,
        d: usize,
        eps: f32,
        affine: Option<(&Vec<f32>, &Vec<f32>)>,
        out: &mut Vec<f32>,
    ) -> Result<()> {
        let total = check::layer_norm(rows, d, x.len(), out.len(), affine.map(|(w, b)| (w.len(), b.len())))?;
        if d == 0 {
            return Ok(());
        }
        self.run(|| {
            out[..total].par_chunks_mut(d * ROWS_PER_TASK).zip(x[..total].par_chunks(d * ROWS_PER_TASK)).for_each(|(o, xi)| {
                for (orow, xrow) in o.chunks_mut(d).zip(xi.chunks(d)) {
                    let (mean, rstd) = row_stats(xrow, eps);
                    match affine {
                        Some((w, b)) => simd::affine_row(xrow, mean, rstd, &w[..d], &b[..d], orow),
                        None => simd::plain_norm_row(xrow, mean, rstd, orow),
                    }
                }
            })
        });
        Ok(())
    }

    fn adaln_modulate(
        &self,
        x: &Vec<f32>,
        rows: usize,
        d: usize,
        eps: f32,
        modulation: &Vec<f32>,
        shift_off: usize,
        scale_off: usize,
        out: &mut Vec<f32>,
    ) -> Result<()> {
        let total = check::adaln_modulate(rows, d, x.len(), out.len(), modulation.len(), shift_off, scale_off)?;
        if d == 0 {
            return Ok(());
        }
        let shift = &modulation[shift_off..shift_off + d];
        let scale = &modulation[scale_off..scale_off + d];
        self.run(|| {
            out[..total].par_chunks_mut(d * ROWS_PER_TASK).zip(x[..total].par_chunks(d * ROWS_PER_TASK)).for_each(|(o, xi)| {
                for (orow, xrow) in o.chunks_mut(d).zip(xi.chunks(d)) {
                    let (mean, rstd) = row_stats(xrow, eps);
                    simd::modulate_row(xrow, mean, rstd, scale, shift, orow);
                }
            })
        });
        Ok(())
    }

    fn gated_add(&self, x: &mut Vec<f32>, y: &Vec<f32>, rows: usize, d: usize, gates: &Vec<f32>, gate_off: usize) -> Result<()> {
        let total = check::gated_add(rows, d, x.len(), y.len(), gates.len(), gate_off)?;
        if d == 0 {
            return Ok(());
        }
        let g = &gates[gate_off..gate_off + d];
        self.run(|| {
            x[..total].par_chunks_mut(d * ROWS_PER_TASK).zip(y[..total].par_chunks(d * ROWS_PER_TASK)).for_each(|(xc, yc)| {
                for (xr, yr) in xc.chunks_mut(d).zip(yc.chunks(d)) {
                    simd::gated_add_row(xr, yr, g);
                }
            })
        });
        Ok(())
    }

    fn grn(&self, x: &mut Vec<f32>, batch: usize, n: usize, d: usize, gamma: &Vec<f32>, beta: &Vec<f32>, eps: f32) -> Result<()> {
        let total = check::grn(batch, n, d, x.len(), gamma.len(), beta.len())?;
        if d == 0 || n == 0 {
            return Ok(());
        }
        self.run(|| {
            for item in x[..total].chunks_mut(n * d) {
                // ‖x‖₂ down the sequence for every channel: rows are added in order, so the
                // reduction is the same whatever the thread count.
                let mut g = vec![0.0f32; d];
                for row in item.chunks(d) {
                    simd::add_squares(&mut g, row);
                }
                for v in g.iter_mut() {
                    *v = v.sqrt();
                }
                let mean = simd::sum(&g) / d as f32;
                let denom = mean + eps;
                let factor: Vec<f32> = g.iter().map(|&gv| gv / denom).collect();
                item.par_chunks_mut(d * ROWS_PER_TASK).for_each(|rows| {
                    for row in rows.chunks_mut(d) {
                        for (((v, &f), &ga), &be) in row.iter_mut().zip(&factor).zip(&gamma[..d]).zip(&beta[..d]) {
                            *v = ga * (*v * f) + be + *v;
                        }
                    }
                });
            }
        });
        Ok(())
    }

    fn split_heads_rope(&self, spec: &RopeSpec, src: &Vec<f32>, cos: &Vec<f32>, sin: &Vec<f32>, dst: &mut Vec<f32>) -> Result<()> {
        spec.validate(src.len(), cos.len(), sin.len(), dst.len())?;
        let RopeSpec { batch, n, heads, head_dim: hd, rope_heads, src: rows } = *spec;
        if batch * n * heads * hd == 0 {
            return Ok(());
        }
        let half = hd / 2;
        self.run(|| {
            // One task per (batch, head) output slab [n, hd]: writes are contiguous.
            dst[..batch * heads * n * hd].par_chunks_mut(n * hd).enumerate().for_each(|(bh, slab)| {
                let (b, h) = (bh / heads, bh % heads);
                for (p, out) in slab.chunks_mut(hd).enumerate() {
                    let start = rows.offset + (b * n + p) * rows.row_stride + h * hd;
                    let inp = &src[start..start + hd];
                    if h < rope_heads {
                        let c = &cos[p * half..(p + 1) * half];
                        let s = &sin[p * half..(p + 1) * half];
                        for j in 0..half {
                            let (x0, x1) = (inp[2 * j], inp[2 * j + 1]);
                            out[2 * j] = x0 * c[j] - x1 * s[j];
                            out[2 * j + 1] = x1 * c[j] + x0 * s[j];
                        }
                    } else {
                        out.copy_from_slice(inp);
                    }
                }
            })
        });
        Ok(())
    }

    fn merge_heads(&self, src: &Vec<f32>, batch: usize, n: usize, heads: usize, hd: usize, dst: &mut Vec<f32>) -> Result<()> {
        let total = check::merge_heads(batch, n, heads, hd, src.len(), dst.len())?;
        if total == 0 {
            return Ok(());
        }
        let width = heads * hd;
        self.run(|| {
            dst[..total].par_chunks_mut(width).enumerate().for_each(|(row, out)| {
                let (b, p) = (row / n, row % n);
                for h in 0..heads {
                    let s = ((b * heads + h) * n + p) * hd;
                    out[h * hd..(h + 1) * hd].copy_from_slice(&src[s..s + hd]);
                }
            })
        });
        Ok(())
    }

    fn conv1d(&self, spec: &Conv1dSpec, x: &Vec<f32>, weight: &Vec<f32>, bias: Option<&Vec<f32>>, y: &mut Vec<f32>) -> Result<()> {
        spec.validate(x.len(), weight.len(), bias.map(|b| b.len()), y.len())?;
        self.run(|| conv::conv1d(spec, x, weight, bias.map(|b| b.as_slice()), y));
        Ok(())
    }

    fn conv_transpose1d(
        &self,
        spec: &ConvTranspose1dSpec,
        x: &Vec<f32>,
        weight: &Vec<f32>,
        bias: Option<&Vec<f32>>,
        y: &mut Vec<f32>,
    ) -> Result<()> {
        spec.validate(x.len(), weight.len(), bias.map(|b| b.len()), y.len())?;
        self.run(|| conv::conv_transpose1d(spec, x, weight, bias.map(|b| b.as_slice()), y));
        Ok(())
    }

    fn lstm(
        &self,
        spec: &LstmSpec,
        lengths: &[usize],
        gates_x: &Vec<f32>,
        w_hh: &Vec<f32>,
        state0: Option<(&Vec<f32>, &Vec<f32>)>,
        out: &mut Vec<f32>,
    ) -> Result<()> {
        spec.validate(lengths, gates_x.len(), w_hh.len(), state0.map(|(h, c)| (h.len(), c.len())), out.len())?;
        self.run(|| seq::lstm(spec, lengths, gates_x, w_hh, state0.map(|(h, c)| (h.as_slice(), c.as_slice())), out));
        Ok(())
    }

    fn instance_norm(
        &self,
        spec: &InstanceNormSpec,
        x: &Vec<f32>,
        affine: Option<(&Vec<f32>, &Vec<f32>)>,
        style: Option<&Vec<f32>>,
        out: &mut Vec<f32>,
    ) -> Result<()> {
        let affine = affine.map(|(w, b)| (w.as_slice(), b.as_slice()));
        self.instance_norm_on(spec, x, affine, style.map(|s| s.as_slice()), None, out)
    }

    fn instance_norm_snake(
        &self,
        spec: &InstanceNormSpec,
        x: &Vec<f32>,
        affine: Option<(&Vec<f32>, &Vec<f32>)>,
        style: Option<&Vec<f32>>,
        alpha: &Vec<f32>,
        out: &mut Vec<f32>,
    ) -> Result<()> {
        let affine = affine.map(|(w, b)| (w.as_slice(), b.as_slice()));
        self.instance_norm_on(spec, x, affine, style.map(|s| s.as_slice()), Some((alpha, seq::SnakeSine::Exact)), out)
    }

    /// Where the convolution takes a tiled path (FFT, or Winograd for 3 taps), fused: each input
    /// row is normalised and snaked as the path gathers it (from statistics computed first, row
    /// by row as `seq`'s `RowNorm` does), so `t` is never written and the normalised rows never
    /// go through memory as a whole; the bits are the two ops'. Otherwise those two ops.
    ///
    /// What it is for is memory: at Kokoro's generator's last rate `t` is an activation of its
    /// own (9.4 MB on a sentence, 80 MB on a 510-phoneme input), written by no other op there
    /// once both forms fuse, so its pages are never touched ([`Backend::alloc`] leaves a large
    /// buffer's zeroing to the system). On a Zen 2 EPYC (AVX2, 2 threads, alternated runs) the
    /// forward's peak memory fell by 9 MiB on a sentence and 68 MiB on the long input, in f32
    /// and in bf16 on widened weights, the speed within the noise; on the AMX Xeon the FFT path
    /// fused this way had measured 5% slower on a sentence (the tiles' overlap snakes 10–20% of
    /// the rows twice).
    fn instance_norm_snake_conv1d(
        &self,
        norm: &InstanceNormSpec,
        x: &Vec<f32>,
        affine: Option<(&Vec<f32>, &Vec<f32>)>,
        style: Option<&Vec<f32>>,
        alpha: &Vec<f32>,
        conv: &Conv1dSpec,
        weight: &Vec<f32>,
        bias: Option<&Vec<f32>>,
        t: &mut Vec<f32>,
        y: &mut Vec<f32>,
    ) -> Result<()> {
        check::norm_then_conv(norm, conv)?;
        if self.norm_snake_conv(norm, x, affine, style, alpha, conv, weight, bias, t.len(), false, y)? {
            return Ok(());
        }
        self.instance_norm_snake(norm, x, affine, style, alpha, t)?;
        self.conv1d(conv, t, weight, bias, y)
    }

    /// Where the convolution takes a tiled path (FFT, or Winograd for 3 taps), fused as
    /// [`Backend::instance_norm_snake_conv1d`] is, and each output is added to `y` as it is
    /// formed (the roundings of the `axpy` after a separate convolution): `x` and `t` are left
    /// as they were, and neither the normalised rows nor the convolution's output go through
    /// memory; the bits are the three ops'. Otherwise those three ops.
    ///
    /// Measured on Kokoro's generator (f32, 2 threads, the AMX Xeon): the long input's forward
    /// 11% faster on the FFT path. The Winograd path adding its outputs in place had measured no
    /// faster than its output and an `axpy`; it fuses for `t`'s memory.
    fn instance_norm_snake_conv1d_add(
        &self,
        norm: &InstanceNormSpec,
        x: &mut Vec<f32>,
        affine: Option<(&Vec<f32>, &Vec<f32>)>,
        style: Option<&Vec<f32>>,
        alpha: &Vec<f32>,
        conv: &Conv1dSpec,
        weight: &Vec<f32>,
        bias: Option<&Vec<f32>>,
        t: &mut Vec<f32>,
        y: &mut Vec<f32>,
    ) -> Result<()> {
        let out_len = check::norm_then_conv_add(norm, conv, x.len())?;
        if self.norm_snake_conv(norm, x, affine, style, alpha, conv, weight, bias, t.len(), true, y)? {
            return Ok(());
        }
        self.instance_norm_snake(norm, x, affine, style, alpha, t)?;
        self.conv1d(conv, t, weight, bias, x)?;
        self.axpy(1.0, x, y, out_len)
    }

    fn snake(&self, x: &mut Vec<f32>, rows: usize, c: usize, alpha: &Vec<f32>) -> Result<()> {
        let total = check::snake(rows, c, x.len(), alpha.len())?;
        self.run(|| seq::snake(&mut x[..total], c, alpha));
        Ok(())
    }

    fn upsample_nearest(&self, x: &Vec<f32>, batch: usize, n: usize, c: usize, factor: usize, out: &mut Vec<f32>) -> Result<()> {
        check::upsample_nearest(batch, n, c, factor, x.len(), out.len())?;
        self.run(|| seq::upsample_nearest(x, batch, n, c, factor, out));
        Ok(())
    }

    fn interpolate_linear(&self, spec: &InterpolateSpec, x: &Vec<f32>, out: &mut Vec<f32>) -> Result<()> {
        spec.validate(x.len(), out.len())?;
        self.run(|| seq::interpolate_linear(spec, x, out));
        Ok(())
    }

    fn pad1d(&self, spec: &Pad1dSpec, x: &Vec<f32>, out: &mut Vec<f32>) -> Result<()> {
        spec.validate(x.len(), out.len())?;
        self.run(|| seq::pad1d(spec, x, out));
        Ok(())
    }

    fn cumsum(&self, x: &Vec<f32>, batch: usize, n: usize, c: usize, out: &mut Vec<f32>) -> Result<()> {
        check::cumsum(batch, n, c, x.len(), out.len())?;
        self.run(|| seq::cumsum(x, batch, n, c, out));
        Ok(())
    }

    fn stft(&self, spec: &StftSpec, signal: &Vec<f32>, mag: &mut Vec<f32>, phase: &mut Vec<f32>) -> Result<()> {
        spec.validate("stft", signal.len(), mag.len(), phase.len())?;
        self.run(|| spectral::stft(spec, signal, mag, phase));
        Ok(())
    }

    fn istft(&self, spec: &StftSpec, mag: &Vec<f32>, phase: &Vec<f32>, signal: &mut Vec<f32>) -> Result<()> {
        spec.validate("istft", signal.len(), mag.len(), phase.len())?;
        self.run(|| spectral::istft(spec, mag, phase, signal));
        Ok(())
    }

    fn activation(&self, act: Activation, x: &mut Vec<f32>, len: usize) -> Result<()> {
        check::elementwise("activation", len, x.len())?;
        let f = move |c: &mut [f32]| match act {
            Activation::GeluErf => simd::map_gelu_erf(c),
            Activation::GeluTanh => simd::map_gelu_tanh(c),
            Activation::Silu => simd::map_silu(c),
            Activation::Mish => simd::map_mish(c),
            Activation::LeakyRelu(slope) => c.iter_mut().for_each(|v| *v = if *v >= 0.0 { *v } else { *v * slope }),
            // libm's forms (the sine: libm's value or one ulp from it, vectorised through f64):
            // these feed a model's sine source and spectrum, where the fast approximations' 1e-7
            // errors would be amplified.
            Activation::Sigmoid => c.iter_mut().for_each(|v| *v = 1.0 / (1.0 + (-*v).exp())),
            Activation::Tanh => c.iter_mut().for_each(|v| *v = v.tanh()),
            Activation::Sin => simd::map_sin(c),
            Activation::Exp => c.iter_mut().for_each(|v| *v = v.exp()),
            Activation::Scale(a) => c.iter_mut().for_each(|v| *v *= a),
        };
        self.run(|| x[..len].par_chunks_mut(4096).for_each(f));
        Ok(())
    }

    fn cfg_combine(&self, pred: &Vec<f32>, half: usize, strength: f32, out: &mut Vec<f32>) -> Result<()> {
        check::cfg_combine(half, pred.len(), out.len())?;
        let (c, u) = pred.split_at(half);
        for ((o, &ci), &ui) in out[..half].iter_mut().zip(c).zip(&u[..half]) {
            *o = ci + (ci - ui) * strength;
        }
        Ok(())
    }

    fn axpy(&self, a: f32, x: &Vec<f32>, y: &mut Vec<f32>, len: usize) -> Result<()> {
        check::axpy(len, x.len(), y.len())?;
        self.run(|| y[..len].par_chunks_mut(8192).zip(x[..len].par_chunks(8192)).for_each(|(yc, xc)| simd::axpy(a, xc, yc)));
        Ok(())
    }

    fn mask_rows(&self, x: &mut Vec<f32>, rows: usize, d: usize, keep: &Vec<f32>) -> Result<()> {
        check::mask_rows(rows, d, x.len(), keep.len())?;
        if d == 0 {
            return Ok(());
        }
        for (row, &k) in x.chunks_mut(d).take(rows).zip(keep) {
            if k == 0.0 {
                row.fill(0.0);
            }
        }
        Ok(())
    }

    fn concat_features(&self, parts: &[(&Vec<f32>, usize)], rows: usize, out: &mut Vec<f32>) -> Result<()> {
        let lens: Vec<(usize, usize)> = parts.iter().map(|(p, w)| (p.len(), *w)).collect();
        let width = check::concat_features(&lens, rows, out.len())?;
        if width == 0 {
            return Ok(());
        }
        self.run(|| {
            out[..rows * width].par_chunks_mut(width).enumerate().for_each(|(r, orow)| {
                let mut at = 0;
                for (p, w) in parts {
                    orow[at..at + w].copy_from_slice(&p[r * w..(r + 1) * w]);
                    at += w;
                }
            })
        });
        Ok(())
    }

    fn split_features(&self, x: &Vec<f32>, rows: usize, parts: &mut [(&mut Vec<f32>, usize)]) -> Result<()> {
        let lens: Vec<(usize, usize)> = parts.iter().map(|(p, w)| (p.len(), *w)).collect();
        let width = check::split_features(x.len(), rows, &lens)?;
        // One pass over the input's rows, a block of rows per task writing its rows of every
        // part: each part's block of rows (its column offset and width alongside).
        const ROWS: usize = 2048;
        let mut blocks: Vec<Vec<(usize, usize, &mut [f32])>> = (0..rows.div_ceil(ROWS)).map(|_| Vec::new()).collect();
        let mut at = 0;
        for (part, w) in parts.iter_mut() {
            let w = *w;
            if w > 0 {
                for (block, rows_of_part) in blocks.iter_mut().zip(part[..rows * w].chunks_mut(ROWS * w)) {
                    block.push((at, w, rows_of_part));
                }
            }
            at += w;
        }
        self.run(|| {
            blocks.into_par_iter().enumerate().for_each(|(b, block)| {
                let x_rows = &x[b * ROWS * width..((b + 1) * ROWS).min(rows) * width];
                for (at, w, dst) in block {
                    for (d, row) in dst.chunks_exact_mut(w).zip(x_rows.chunks_exact(width)) {
                        d.copy_from_slice(&row[at..at + w]);
                    }
                }
            })
        });
        Ok(())
    }

    fn embedding(&self, table: &Vec<f32>, dim: usize, ids: &[u32], out: &mut Vec<f32>) -> Result<()> {
        check::embedding(table.len(), dim, ids, out.len())?;
        for (r, &id) in ids.iter().enumerate() {
            let id = id as usize;
            out[r * dim..(r + 1) * dim].copy_from_slice(&table[id * dim..(id + 1) * dim]);
        }
        Ok(())
    }

    fn polar_spectrum(&self, h: &Vec<f32>, frames: usize, bins: usize, mag_max: f32, re: &mut Vec<f32>, im: &mut Vec<f32>) -> Result<()> {
        let half = check::polar_spectrum(frames, bins, h.len(), re.len(), im.len())?;
        if bins == 0 {
            return Ok(());
        }
        self.run(|| {
            re[..half].par_chunks_mut(bins).zip(im[..half].par_chunks_mut(bins)).zip(h[..2 * half].par_chunks(2 * bins)).for_each(
                |((r, i), hr)| {
                    let (logmag, phase) = hr.split_at(bins);
                    for j in 0..bins {
                        // exp then clip, in that order, as the reference head does: an
                        // overflowing exp is clipped to the maximum, not NaN.
                        let mag = logmag[j].exp().min(mag_max);
                        let (s, c) = phase[j].sin_cos();
                        r[j] = mag * c;
                        i[j] = mag * s;
                    }
                },
            )
        });
        Ok(())
    }
}
