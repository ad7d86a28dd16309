//! What the tiled convolution paths (`fourier`, `winograd`) share: the walk over batch items
//! and chunks of tile columns, and a shared view of a buffer their tasks write disjointly.

use crate::cpu::gemm_into;
use crate::spec::{Conv1dSpec, GemmSpec};

/// A function of the batch item and one input row (`c_in` values) that gives the row the
/// convolution reads instead: the fused instance norm and Snake before Kokoro's resblock
/// convolutions, applied as the path gathers its rows.
pub(crate) type ItemRowPrep<'a> = &'a (dyn Fn(usize, &[f32], &mut [f32]) + Sync);

/// What a tiled path (`fourier::conv1d_fft_around`, `winograd::conv1d_winograd_around`) does
/// around the convolution proper.
#[derive(Clone, Copy, Default)]
pub(crate) struct Around<'a> {
    /// Each input row through this as the path gathers it (zero padding stays zero): the
    /// convolution of the mapped input, which is never written whole.
    pub(crate) prep: Option<ItemRowPrep<'a>>,
    /// Add each output (plus bias) to `y` instead of writing it: `y += conv(x) + bias`, the
    /// residual step, rounded as the convolution into a buffer and an `axpy` after it.
    pub(crate) accumulate: bool,
}

/// Calls `f(item, x_item, y_item, j0, j1)` for every batch item and every chunk `j0 .. j1` of
/// `chunk_columns` tile columns out of `columns`: the scratch a path holds covers one chunk, so
/// a long input is walked a chunk at a time.
pub(super) fn for_each_chunk(
    spec: &Conv1dSpec,
    x: &[f32],
    y: &mut [f32],
    columns: usize,
    chunk_columns: usize,
    mut f: impl FnMut(usize, &[f32], &mut [f32], usize, usize),
) {
    let Conv1dSpec { batch, n, c_in, c_out, .. } = *spec;
    let n_out = spec.n_out();
    for b in 0..batch {
        let xb = &x[b * n * c_in..(b + 1) * n * c_in];
        let yb = &mut y[b * n_out * c_out..(b + 1) * n_out * c_out];
        for j0 in (0..columns).step_by(chunk_columns.max(1)) {
            f(b, xb, &mut *yb, j0, (j0 + chunk_columns).min(columns));
        }
    }
}

/// A slice that parallel tasks write disjoint, non-contiguous parts of.
pub(super) struct SharedOut(pub(super) *mut f32, pub(super) usize);
// SAFETY: every use writes elements no other task touches (the callers' comments say which).
unsafe impl Sync for SharedOut {}

impl SharedOut {
    /// # Safety
    /// `at + values.len()` is within the slice, and no other thread reads or writes those
    /// elements while the slice is shared.
    pub(super) unsafe fn write(&self, at: usize, values: &[f32]) {
        assert!(at + values.len() <= self.1, "write past the shared slice");
        // SAFETY: in bounds (checked above); exclusive per the caller's contract.
        unsafe { std::ptr::copy_nonoverlapping(values.as_ptr(), self.0.add(at), values.len()) }
    }

    /// `C = A·B` (one thread) into the elements of the shared slice that `spec.c` addresses.
    ///
    /// # Safety
    /// No other thread reads or writes those elements while the slice is shared, and `a`, `b`
    /// are not the shared slice.
    pub(super) unsafe fn gemm(&self, spec: &GemmSpec, a: &[f32], b: &[f32]) {
        assert!(spec.validate(a.len(), b.len(), self.1, None).is_ok(), "a GEMM past the shared slice");
        // SAFETY: validated against the shared slice's length; exclusive per the caller's contract.
        unsafe { gemm_into(spec, a, b, self.0, self.1, false) }
    }
}
