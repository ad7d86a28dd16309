//! Shape descriptions of the ops that need more than a length: what a backend is asked to do,
//! validated in one place so every backend refuses the same bad shapes with the same words.

use crate::{shape_err, Result};

/// Where one operand matrix of a [`GemmSpec`] lives in its buffer: element `(i, j)` of batch
/// item `b` is at `offset + b·batch_stride + i·row_stride + j·col_stride`.
///
/// One of the two strides is 1 in every layout f5 uses (row-major, or a PyTorch `Linear`
/// weight read transposed), which is also what cuBLAS can express.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MatLayout {
    /// Index of element (0, 0) of the first batch item.
    pub offset: usize,
    /// Distance between consecutive rows.
    pub row_stride: usize,
    /// Distance between consecutive columns.
    pub col_stride: usize,
    /// Distance between consecutive batch items (0: one matrix shared by all).
    pub batch_stride: usize,
}

impl MatLayout {
    /// A row-major `[rows, cols]` matrix with leading dimension `ld` (≥ cols).
    pub fn row_major(ld: usize) -> Self {
        MatLayout { offset: 0, row_stride: ld, col_stride: 1, batch_stride: 0 }
    }

    /// The transpose of a row-major matrix with leading dimension `ld`: used to read a PyTorch
    /// `Linear` weight `[out, in]` as the `[in, out]` right-hand side without copying it.
    pub fn transposed(ld: usize) -> Self {
        MatLayout { offset: 0, row_stride: 1, col_stride: ld, batch_stride: 0 }
    }

    /// The same layout starting at `offset` (a view into part of a buffer).
    pub fn at(mut self, offset: usize) -> Self {
        self.offset = offset;
        self
    }

    /// The same layout repeated every `batch_stride` values for batched GEMMs.
    pub fn batched(mut self, batch_stride: usize) -> Self {
        self.batch_stride = batch_stride;
        self
    }

    /// One past the last element touched by a `[rows, cols]` matrix in `batch` items, or `None`
    /// on overflow.
    pub fn extent(&self, rows: usize, cols: usize, batch: usize) -> Option<usize> {
        if rows == 0 || cols == 0 || batch == 0 {
            return Some(0);
        }
        let last = (batch - 1)
            .checked_mul(self.batch_stride)?
            .checked_add((rows - 1).checked_mul(self.row_stride)?)?
            .checked_add((cols - 1).checked_mul(self.col_stride)?)?;
        self.offset.checked_add(last)?.checked_add(1)
    }
}

/// `C[b] = beta·C[b] + A[b]·B[b] (+ bias)` with `A: [m, k]`, `B: [k, n]`, `C: [m, n]`.
///
/// `bias` (length `n`, added to every row) is applied only when `beta == 0`, i.e. when C is
/// produced rather than accumulated into, which is the only way the models use it.
#[derive(Clone, Copy, Debug)]
pub struct GemmSpec {
    /// Rows of A and C.
    pub m: usize,
    /// Columns of B and C.
    pub n: usize,
    /// Columns of A, rows of B: the summed dimension.
    pub k: usize,
    /// Independent products in one call.
    pub batch: usize,
    /// Where A is.
    pub a: MatLayout,
    /// Where B is (transposed for a PyTorch weight).
    pub b: MatLayout,
    /// Where C is.
    pub c: MatLayout,
    /// 0 overwrites C, 1 accumulates into it.
    pub beta: f32,
}

impl GemmSpec {
    /// `y[m, n] = x[m, k] · Wᵀ (+ bias)` with `W` a PyTorch `Linear` weight `[n, k]`.
    pub fn linear(m: usize, k: usize, n: usize) -> Self {
        GemmSpec { m, n, k, batch: 1, a: MatLayout::row_major(k), b: MatLayout::transposed(k), c: MatLayout::row_major(n), beta: 0.0 }
    }

    pub(crate) fn validate(&self, a_len: usize, b_len: usize, c_len: usize, bias_len: Option<usize>) -> Result<()> {
        let check = |name: &str, l: &MatLayout, r: usize, c: usize, have: usize| -> Result<()> {
            if l.row_stride != 1 && l.col_stride != 1 {
                return Err(shape_err(
                    "gemm",
                    format!("{name}: one of row_stride/col_stride must be 1 (got {}/{})", l.row_stride, l.col_stride),
                ));
            }
            match l.extent(r, c, self.batch) {
                Some(need) if need <= have => Ok(()),
                Some(need) => Err(shape_err("gemm", format!("{name} [{r}×{c}]×{} needs {need} values, buffer has {have}", self.batch))),
                None => Err(shape_err("gemm", format!("{name}: layout overflows"))),
            }
        };
        if self.beta != 0.0 && self.beta != 1.0 {
            return Err(shape_err("gemm", format!("beta must be 0 or 1, got {}", self.beta)));
        }
        check("A", &self.a, self.m, self.k, a_len)?;
        check("B", &self.b, self.k, self.n, b_len)?;
        check("C", &self.c, self.m, self.n, c_len)?;
        if self.c.col_stride != 1 {
            return Err(shape_err("gemm", "C must be row-major (col_stride 1)"));
        }
        if let Some(bl) = bias_len {
            if bl < self.n {
                return Err(shape_err("gemm", format!("bias has {bl} values, need {}", self.n)));
            }
            if self.beta != 0.0 {
                return Err(shape_err("gemm", "bias is only supported when beta is 0"));
            }
        }
        Ok(())
    }
}

/// Attention over `[batch_heads, n, head_dim]` tensors, all three contiguous.
#[derive(Clone, Copy, Debug)]
pub struct AttentionSpec {
    /// Items × heads: each slice is one head of one item.
    pub batch_heads: usize,
    /// Sequence length (queries = keys).
    pub n: usize,
    /// Width of one head.
    pub head_dim: usize,
    /// Usually `1/√head_dim`.
    pub scale: f32,
}

impl AttentionSpec {
    pub(crate) fn validate(&self, q: usize, k: usize, v: usize, out: usize) -> Result<()> {
        let need = self
            .batch_heads
            .checked_mul(self.n)
            .and_then(|x| x.checked_mul(self.head_dim))
            .ok_or_else(|| shape_err("attention", "shape overflows"))?;
        for (name, have) in [("q", q), ("k", k), ("v", v), ("out", out)] {
            if have < need {
                return Err(shape_err("attention", format!("{name} has {have} values, need {need}")));
            }
        }
        Ok(())
    }
}

/// Rows of a `[rows, width]` region inside a wider buffer: row `r` starts at
/// `offset + r·row_stride`. Lets the head split read q, k and v straight out of one fused
/// `[rows, 3·dim]` projection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StridedRows {
    /// Where row 0 starts.
    pub offset: usize,
    /// Distance between rows (the fused buffer's width).
    pub row_stride: usize,
}

/// Head split with rotary embedding; see [`crate::Backend::split_heads_rope`].
#[derive(Clone, Copy, Debug)]
pub struct RopeSpec {
    /// Items.
    pub batch: usize,
    /// Sequence length.
    pub n: usize,
    /// Heads the rows are split into.
    pub heads: usize,
    /// Width of one head (even: rotary pairs).
    pub head_dim: usize,
    /// How many heads, from head 0, are rotated: all of them (F5 v1) or 1 (v0), or 0 for none.
    pub rope_heads: usize,
    /// Where each row's `heads·head_dim` values start in the source buffer.
    pub src: StridedRows,
}

impl RopeSpec {
    pub(crate) fn validate(&self, src: usize, cos: usize, sin: usize, dst: usize) -> Result<()> {
        let op = "split_heads_rope";
        if !self.head_dim.is_multiple_of(2) {
            return Err(shape_err(op, format!("head_dim {} must be even for pair rotation", self.head_dim)));
        }
        if self.rope_heads > self.heads {
            return Err(shape_err(op, format!("rope_heads {} > heads {}", self.rope_heads, self.heads)));
        }
        let width = self.heads * self.head_dim;
        let rows = self.batch * self.n;
        if rows > 0 {
            if self.src.row_stride < width {
                return Err(shape_err(op, format!("row_stride {} < heads·head_dim {width}", self.src.row_stride)));
            }
            let need = self.src.offset + (rows - 1) * self.src.row_stride + width;
            if src < need {
                return Err(shape_err(op, format!("src has {src} values, need {need}")));
            }
        }
        let table = self.n * self.head_dim / 2;
        if self.rope_heads > 0 && (cos < table || sin < table) {
            return Err(shape_err(op, format!("cos/sin tables have {cos}/{sin} values, need {table}")));
        }
        if dst < rows * width {
            return Err(shape_err(op, format!("dst has {dst} values, need {}", rows * width)));
        }
        Ok(())
    }
}

/// How a 1-D op fills the positions before the first and after the last input row.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PadMode {
    /// Zeros (PyTorch's default `padding_mode="zeros"`).
    #[default]
    Zeros,
    /// Mirror without repeating the edge (`ReflectionPad1d`, `padding_mode="reflect"`): needs `pad < n`.
    Reflect,
    /// Repeat the edge row (`ReplicationPad1d`, `padding_mode="replicate"`).
    Replicate,
}

impl PadMode {
    /// The input row that padded position `p` (in `0..n + left + right`, where the input starts at
    /// `left`) reads, or `None` for a zero. The caller has checked `n > 0` and, for `Reflect`,
    /// that both pads are `< n`.
    #[inline]
    pub fn source(self, p: usize, left: usize, n: usize) -> Option<usize> {
        let i = p as isize - left as isize;
        let n = n as isize;
        if (0..n).contains(&i) {
            return Some(i as usize);
        }
        match self {
            PadMode::Zeros => None,
            PadMode::Reflect => Some(if i < 0 { (-i) as usize } else { (2 * (n - 1) - i) as usize }),
            PadMode::Replicate => Some(if i < 0 { 0 } else { (n - 1) as usize }),
        }
    }

    fn check(self, op: &'static str, left: usize, right: usize, n: usize) -> Result<()> {
        match self {
            PadMode::Reflect if left.max(right) >= n && left.max(right) > 0 => {
                Err(shape_err(op, format!("reflect padding {left}/{right} needs a longer input than {n} rows")))
            }
            PadMode::Replicate if n == 0 && left.max(right) > 0 => Err(shape_err(op, "replicate padding of an empty input")),
            _ => Ok(()),
        }
    }
}

/// `a·b·…` with every product checked: the total element count of a shape, or a shape error.
pub(crate) fn product(op: &'static str, dims: &[usize]) -> Result<usize> {
    dims.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d).ok_or_else(|| shape_err(op, format!("shape {dims:?} overflows"))))
}

/// Refuses an operand shorter than the op needs.
pub(crate) fn operand(op: &'static str, name: &str, have: usize, want: usize) -> Result<()> {
    if have < want {
        return Err(shape_err(op, format!("{name} has {have} values, need {want}")));
    }
    Ok(())
}

/// A 1-D convolution over the sequence axis of channels-last activations `[batch, n, c_in]`
/// with a PyTorch weight `[c_out, c_in/groups, kernel]` (dense, grouped or depthwise), PyTorch
/// semantics: `pad` rows on both sides (filled as `pad_mode` says), then
/// `y[t] = Σ_k w[k]·x[t·stride + k·dilation]`, `n_out = (n + 2·pad − dilation·(kernel−1) − 1)/stride + 1`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conv1dSpec {
    /// Items.
    pub batch: usize,
    /// Input rows per item.
    pub n: usize,
    /// Input channels.
    pub c_in: usize,
    /// Output channels.
    pub c_out: usize,
    /// Kernel taps.
    pub kernel: usize,
    /// Rows added on each side before convolving.
    pub pad: usize,
    /// Channel groups (`c_in` for depthwise); divides both channel counts.
    pub groups: usize,
    /// Input rows between output rows.
    pub stride: usize,
    /// Input rows between taps.
    pub dilation: usize,
    /// What the padding rows hold.
    pub pad_mode: PadMode,
}

impl Conv1dSpec {
    /// A dense convolution, stride 1, dilation 1, no padding; set the rest with the builders.
    pub fn new(batch: usize, n: usize, c_in: usize, c_out: usize, kernel: usize) -> Self {
        Conv1dSpec { batch, n, c_in, c_out, kernel, pad: 0, groups: 1, stride: 1, dilation: 1, pad_mode: PadMode::Zeros }
    }

    /// A depthwise convolution (`groups = c_in = c_out`) with "same" padding `kernel / 2`.
    pub fn depthwise(batch: usize, n: usize, channels: usize, kernel: usize) -> Self {
        Self::new(batch, n, channels, channels, kernel).pad(kernel / 2).groups(channels)
    }

    /// Sets `pad`.
    pub fn pad(mut self, pad: usize) -> Self {
        self.pad = pad;
        self
    }
    /// Sets `groups`.
    pub fn groups(mut self, groups: usize) -> Self {
        self.groups = groups;
        self
    }
    /// Sets `stride`.
    pub fn stride(mut self, stride: usize) -> Self {
        self.stride = stride;
        self
    }
    /// Sets `dilation`.
    pub fn dilation(mut self, dilation: usize) -> Self {
        self.dilation = dilation;
        self
    }
    /// Sets `pad_mode`.
    pub fn pad_mode(mut self, mode: PadMode) -> Self {
        self.pad_mode = mode;
        self
    }

    /// The receptive field of one output row: `dilation·(kernel − 1) + 1`.
    pub fn span(&self) -> usize {
        self.dilation.saturating_mul(self.kernel.saturating_sub(1)).saturating_add(1)
    }

    /// Output rows per item (0 when the kernel does not fit or the spec is invalid).
    pub fn n_out(&self) -> usize {
        let padded = self.n.saturating_add(self.pad.saturating_mul(2));
        if self.kernel == 0 || self.stride == 0 || padded < self.span() {
            return 0;
        }
        (padded - self.span()) / self.stride + 1
    }

    pub(crate) fn validate(&self, x: usize, w: usize, bias: Option<usize>, y: usize) -> Result<()> {
        let op = "conv1d";
        if self.groups == 0 || !self.c_in.is_multiple_of(self.groups) || !self.c_out.is_multiple_of(self.groups) {
            return Err(shape_err(op, format!("groups {} must divide c_in {} and c_out {}", self.groups, self.c_in, self.c_out)));
        }
        if self.stride == 0 || self.dilation == 0 {
            return Err(shape_err(op, format!("stride {} and dilation {} must be ≥ 1", self.stride, self.dilation)));
        }
        let padded = self.pad.checked_mul(2).and_then(|p| p.checked_add(self.n));
        let span = self.dilation.checked_mul(self.kernel.saturating_sub(1)).and_then(|s| s.checked_add(1));
        match (padded, span) {
            (Some(p), Some(s)) if self.kernel > 0 && p >= s => {}
            _ => {
                return Err(shape_err(
                    op,
                    format!("kernel {} (dilation {}) does not fit n {} with pad {}", self.kernel, self.dilation, self.n, self.pad),
                ))
            }
        }
        self.pad_mode.check(op, self.pad, self.pad, self.n)?;
        operand(op, "x", x, product(op, &[self.batch, self.n, self.c_in])?)?;
        operand(op, "weight", w, product(op, &[self.c_out, self.c_in / self.groups, self.kernel])?)?;
        if let Some(b) = bias {
            operand(op, "bias", b, self.c_out)?;
        }
        operand(op, "y", y, product(op, &[self.batch, self.n_out(), self.c_out])?)
    }
}

/// A transposed 1-D convolution (`nn.ConvTranspose1d`, dilation 1) over channels-last
/// `[batch, n, c_in]` with a PyTorch weight `[c_in, c_out/groups, kernel]`:
/// input row `i` adds `x[i]·w[k]` into output row `i·stride + k − pad`;
/// `n_out = (n − 1)·stride − 2·pad + kernel + output_padding`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConvTranspose1dSpec {
    /// Items.
    pub batch: usize,
    /// Input rows per item.
    pub n: usize,
    /// Input channels.
    pub c_in: usize,
    /// Output channels.
    pub c_out: usize,
    /// Kernel taps.
    pub kernel: usize,
    /// The upsampling factor.
    pub stride: usize,
    /// Rows cropped from each end of the full output.
    pub pad: usize,
    /// Extra rows at the end (as PyTorch, to reach an exact length).
    pub output_padding: usize,
    /// Channel groups; divides both channel counts.
    pub groups: usize,
}

impl ConvTranspose1dSpec {
    /// Dense, stride `stride`, no padding; set the rest with the builders.
    pub fn new(batch: usize, n: usize, c_in: usize, c_out: usize, kernel: usize, stride: usize) -> Self {
        ConvTranspose1dSpec { batch, n, c_in, c_out, kernel, stride, pad: 0, output_padding: 0, groups: 1 }
    }
    /// Sets `pad`.
    pub fn pad(mut self, pad: usize) -> Self {
        self.pad = pad;
        self
    }
    /// Sets `output_padding`.
    pub fn output_padding(mut self, output_padding: usize) -> Self {
        self.output_padding = output_padding;
        self
    }
    /// Sets `groups`.
    pub fn groups(mut self, groups: usize) -> Self {
        self.groups = groups;
        self
    }

    /// Output rows per item (0 for an empty input or an invalid spec).
    pub fn n_out(&self) -> usize {
        if self.n == 0 {
            return 0;
        }
        ((self.n - 1).saturating_mul(self.stride))
            .saturating_add(self.kernel)
            .saturating_add(self.output_padding)
            .saturating_sub(self.pad.saturating_mul(2))
    }

    pub(crate) fn validate(&self, x: usize, w: usize, bias: Option<usize>, y: usize) -> Result<()> {
        let op = "conv_transpose1d";
        if self.groups == 0 || !self.c_in.is_multiple_of(self.groups) || !self.c_out.is_multiple_of(self.groups) {
            return Err(shape_err(op, format!("groups {} must divide c_in {} and c_out {}", self.groups, self.c_in, self.c_out)));
        }
        if self.stride == 0 || self.kernel == 0 {
            return Err(shape_err(op, format!("stride {} and kernel {} must be ≥ 1", self.stride, self.kernel)));
        }
        if self.output_padding >= self.stride {
            return Err(shape_err(op, format!("output_padding {} must be smaller than stride {}", self.output_padding, self.stride)));
        }
        let full = (self.n.max(1) - 1)
            .checked_mul(self.stride)
            .and_then(|v| v.checked_add(self.kernel))
            .and_then(|v| v.checked_add(self.output_padding))
            .ok_or_else(|| shape_err(op, "output length overflows"))?;
        if self.pad.checked_mul(2).is_none_or(|p| p >= full) {
            return Err(shape_err(op, format!("pad {} leaves no output of the {full} rows", self.pad)));
        }
        operand(op, "x", x, product(op, &[self.batch, self.n, self.c_in])?)?;
        operand(op, "weight", w, product(op, &[self.c_in, self.c_out / self.groups, self.kernel])?)?;
        if let Some(b) = bias {
            operand(op, "bias", b, self.c_out)?;
        }
        operand(op, "y", y, product(op, &[self.batch, self.n_out(), self.c_out])?)
    }
}

/// The recurrence of one LSTM direction over `[batch, n]` steps with PyTorch's gate order
/// (i, f, g, o). The input projection `x·W_ihᵀ + b_ih + b_hh` of every step is computed before
/// (one GEMM) and passed as `gates_x` `[batch, n, 4·hidden]`; this op runs only the sequential
/// part `gates = gates_x[t] + h·W_hhᵀ` with `W_hh` `[4·hidden, hidden]`.
///
/// Item `b` runs over its own first `lengths[b]` steps only — forward `0..len`, or, with
/// `reverse`, `len−1` down to 0 — and its output rows `len..n` are zero, which is exactly what
/// PyTorch's `pack_padded_sequence` path computes for a padded batch. (Running the reverse
/// direction over the padded buffer would start it on padding: wrong for every shorter item.)
/// Output row `b·n + t` holds `hidden` values at `out.offset + (b·n + t)·out.row_stride`, so the
/// two directions of a bidirectional layer write the two halves of one `[batch·n, 2·hidden]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LstmSpec {
    /// Items.
    pub batch: usize,
    /// Rows (time steps) per item, padding included.
    pub n: usize,
    /// Hidden width.
    pub hidden: usize,
    /// Run from each item's last real step back to its first.
    pub reverse: bool,
    /// Where each output row goes (one half of a bidirectional layer's row).
    pub out: StridedRows,
}

impl LstmSpec {
    pub(crate) fn validate(
        &self,
        lengths: &[usize],
        gates_x: usize,
        w_hh: usize,
        state0: Option<(usize, usize)>,
        out: usize,
    ) -> Result<()> {
        let op = "lstm";
        if lengths.len() != self.batch {
            return Err(shape_err(op, format!("{} lengths for a batch of {}", lengths.len(), self.batch)));
        }
        if let Some((b, &len)) = lengths.iter().enumerate().find(|(_, &l)| l > self.n) {
            return Err(shape_err(op, format!("item {b} has length {len} > n {}", self.n)));
        }
        let g4 = product(op, &[4, self.hidden])?;
        operand(op, "gates_x", gates_x, product(op, &[self.batch, self.n, g4])?)?;
        operand(op, "w_hh", w_hh, product(op, &[g4, self.hidden])?)?;
        if let Some((h0, c0)) = state0 {
            let need = product(op, &[self.batch, self.hidden])?;
            operand(op, "h0", h0, need)?;
            operand(op, "c0", c0, need)?;
        }
        let rows = product(op, &[self.batch, self.n])?;
        if rows > 0 && self.hidden > 0 {
            if self.out.row_stride < self.hidden {
                return Err(shape_err(op, format!("out row_stride {} < hidden {}", self.out.row_stride, self.hidden)));
            }
            let need = (rows - 1)
                .checked_mul(self.out.row_stride)
                .and_then(|v| v.checked_add(self.out.offset))
                .and_then(|v| v.checked_add(self.hidden))
                .ok_or_else(|| shape_err(op, "out layout overflows"))?;
            operand(op, "out", out, need)?;
        }
        Ok(())
    }
}

/// Instance normalisation of channels-last `[batch, n, c]`: every channel of every item is
/// normalised over its `n` rows (biased variance, `eps`), as `nn.InstanceNorm1d` without running
/// statistics. See [`crate::Backend::instance_norm`] for the optional affine and style.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct InstanceNormSpec {
    /// Items.
    pub batch: usize,
    /// Rows per item (the axis normalised over).
    pub n: usize,
    /// Channels.
    pub c: usize,
    /// Added to the variance.
    pub eps: f32,
}

impl InstanceNormSpec {
    pub(crate) fn validate(&self, x: usize, affine: Option<(usize, usize)>, style: Option<usize>, out: usize) -> Result<()> {
        let op = "instance_norm";
        let total = product(op, &[self.batch, self.n, self.c])?;
        operand(op, "x", x, total)?;
        operand(op, "out", out, total)?;
        if let Some((w, b)) = affine {
            operand(op, "weight", w, self.c)?;
            operand(op, "bias", b, self.c)?;
        }
        if let Some(s) = style {
            operand(op, "style", s, product(op, &[self.batch, 2, self.c])?)?;
        }
        Ok(())
    }
}

/// Linear interpolation along the rows of channels-last `[batch, n_in, c]` into
/// `[batch, n_out, c]`, as `F.interpolate(mode="linear", align_corners=False)`: output row `t`
/// reads source position `max((t + 0.5)·ratio − 0.5, 0)` where `ratio` is what PyTorch uses —
/// `1/scale_factor` when a scale factor was given, else `n_in / n_out` (see [`InterpolateSpec::by_scale`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct InterpolateSpec {
    /// Items.
    pub batch: usize,
    /// Input rows per item.
    pub n_in: usize,
    /// Output rows per item.
    pub n_out: usize,
    /// Channels.
    pub c: usize,
    /// Source rows per output row, in f32 as PyTorch's CPU kernel computes it.
    pub ratio: f32,
}

impl InterpolateSpec {
    /// `F.interpolate(x, scale_factor=scale, mode="linear")`: `n_out = floor(n_in·scale)`,
    /// ratio `1/scale` (computed in f64, then rounded to f32, as PyTorch does).
    pub fn by_scale(batch: usize, n_in: usize, c: usize, scale: f64) -> Self {
        let n_out = (n_in as f64 * scale).floor().max(0.0) as usize;
        InterpolateSpec { batch, n_in, n_out, c, ratio: (1.0 / scale) as f32 }
    }

    /// The two input rows output row `t` of an item reads and their weights `(i0, i1, l0, l1)`:
    /// the row is `fma(x[i0], l0, x[i1]·l1)`, channel by channel, in the f32 arithmetic of
    /// PyTorch's CPU kernel. Public so that host code which needs only some of the output
    /// (Kokoro's source reads two input samples per frame of a 300× downsample) computes those
    /// values with the op's own bits. `n_in` must be at least 1.
    #[inline]
    pub fn taps(&self, t: usize) -> (usize, usize, f32, f32) {
        let src = (self.ratio * (t as f32 + 0.5) - 0.5).max(0.0);
        let i0 = (src as usize).min(self.n_in.saturating_sub(1));
        let i1 = if i0 + 1 < self.n_in { i0 + 1 } else { i0 };
        let l1 = src - i0 as f32;
        (i0, i1, 1.0 - l1, l1)
    }

    pub(crate) fn validate(&self, x: usize, out: usize) -> Result<()> {
        let op = "interpolate_linear";
        if !(self.ratio.is_finite() && self.ratio > 0.0) {
            return Err(shape_err(op, format!("ratio {} must be finite and positive", self.ratio)));
        }
        if self.n_in == 0 && self.n_out > 0 {
            return Err(shape_err(op, "cannot interpolate an empty input"));
        }
        operand(op, "x", x, product(op, &[self.batch, self.n_in, self.c])?)?;
        operand(op, "out", out, product(op, &[self.batch, self.n_out, self.c])?)
    }
}

/// Padding of channels-last `[batch, n, c]` along the rows into `[batch, left + n + right, c]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pad1dSpec {
    /// Items.
    pub batch: usize,
    /// Input rows per item.
    pub n: usize,
    /// Channels.
    pub c: usize,
    /// Rows added before.
    pub left: usize,
    /// Rows added after.
    pub right: usize,
    /// What the added rows hold.
    pub mode: PadMode,
}

impl Pad1dSpec {
    /// Output rows per item: `left + n + right`.
    pub fn n_out(&self) -> usize {
        self.n.saturating_add(self.left).saturating_add(self.right)
    }

    pub(crate) fn validate(&self, x: usize, out: usize) -> Result<()> {
        let op = "pad1d";
        self.mode.check(op, self.left, self.right, self.n)?;
        let n_out = self.n.checked_add(self.left).and_then(|v| v.checked_add(self.right)).ok_or_else(|| shape_err(op, "overflow"))?;
        operand(op, "x", x, product(op, &[self.batch, self.n, self.c])?)?;
        operand(op, "out", out, product(op, &[self.batch, n_out, self.c])?)
    }
}

/// A short-time Fourier transform with a periodic Hann window of `n_fft` samples (`win_length =
/// n_fft`), hop `hop`, `center=True` with reflect padding — `torch.stft`/`torch.istft` as the
/// ISTFTNet generator calls them. Spectra are channels-last `[batch, frames, n_fft/2 + 1]` in
/// polar form (magnitude, phase). Every signal has `samples = hop·(frames − 1)` samples
/// (`torch.stft` of such a signal gives `frames` frames, `torch.istft` of them returns it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StftSpec {
    /// Signals.
    pub batch: usize,
    /// Frames per signal.
    pub frames: usize,
    /// FFT size = window length.
    pub n_fft: usize,
    /// Samples between frames.
    pub hop: usize,
}

impl StftSpec {
    /// The spec of `torch.stft` on `samples` samples: `frames = samples/hop + 1`.
    pub fn for_samples(batch: usize, samples: usize, n_fft: usize, hop: usize) -> Self {
        StftSpec { batch, frames: samples.checked_div(hop).unwrap_or(0) + 1, n_fft, hop }
    }
    /// One-sided frequency bins: `n_fft/2 + 1`.
    pub fn bins(&self) -> usize {
        self.n_fft / 2 + 1
    }
    /// Samples per item of the time signal: `hop·(frames − 1)`.
    pub fn samples(&self) -> usize {
        self.hop.saturating_mul(self.frames.saturating_sub(1))
    }

    pub(crate) fn validate(&self, op: &'static str, signal: usize, mag: usize, phase: usize) -> Result<()> {
        if self.n_fft < 2 || !self.n_fft.is_multiple_of(2) || self.hop == 0 || self.hop > self.n_fft {
            return Err(shape_err(op, format!("n_fft {} must be even and ≥ 2, hop {} in 1..=n_fft", self.n_fft, self.hop)));
        }
        if self.frames == 0 {
            return Err(shape_err(op, "no frames"));
        }
        let samples = product(op, &[self.hop, self.frames - 1])?;
        if op == "istft" && self.hop > self.n_fft / 2 {
            // The Hann² envelope has zeros between frames past half-overlap: torch.istft refuses too.
            return Err(shape_err(op, format!("hop {} over n_fft/2 leaves gaps the window cannot cover", self.hop)));
        }
        if op == "stft" && samples <= self.n_fft / 2 {
            return Err(shape_err(op, format!("{samples} samples are too few to reflect-pad by {}", self.n_fft / 2)));
        }
        operand(op, "signal", signal, product(op, &[self.batch, samples])?)?;
        let spec = product(op, &[self.batch, self.frames, self.bins()])?;
        operand(op, "magnitude", mag, spec)?;
        operand(op, "phase", phase, spec)
    }
}

/// The pointwise functions, some with a parameter. GELU comes in two forms that are different
/// functions: the ConvNeXt blocks use the exact erf form, the DiT feed-forward and ALBERT the tanh
/// one; the LeakyReLU slope differs between places of one model (Kokoro: 0.2, 0.1 and 0.01).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Activation {
    /// GELU with the exact erf: ConvNeXt blocks.
    GeluErf,
    /// GELU's tanh approximation: the DiT feed-forward and ALBERT.
    GeluTanh,
    /// `x·sigmoid(x)`: the timestep MLP and adaLN inputs.
    Silu,
    /// `x·tanh(softplus(x))`: the DiT's convolutional position embedding.
    Mish,
    /// `x` for `x ≥ 0`, `slope·x` below.
    LeakyRelu(f32),
    /// `1/(1+e^−x)`.
    Sigmoid,
    /// Hyperbolic tangent.
    Tanh,
    /// Sine (Kokoro's harmonic source).
    Sin,
    /// `e^x` (magnitudes from log-magnitudes).
    Exp,
    /// `factor·x` (a residual's `1/√2`, a mean's `1/k`).
    Scale(f32),
}
