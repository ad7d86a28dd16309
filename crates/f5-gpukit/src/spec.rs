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
    pub offset: usize,
    pub row_stride: usize,
    pub col_stride: usize,
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

    pub fn at(mut self, offset: usize) -> Self {
        self.offset = offset;
        self
    }

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
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub batch: usize,
    pub a: MatLayout,
    pub b: MatLayout,
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
    pub batch_heads: usize,
    pub n: usize,
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
    pub offset: usize,
    pub row_stride: usize,
}

/// Head split with rotary embedding; see [`crate::Backend::split_heads_rope`].
#[derive(Clone, Copy, Debug)]
pub struct RopeSpec {
    pub batch: usize,
    pub n: usize,
    pub heads: usize,
    pub head_dim: usize,
    /// How many heads, from head 0, are rotated: all of them (F5 v1) or 1 (v0), or 0 for none.
    pub rope_heads: usize,
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

/// A 1-D convolution over the sequence axis of channels-last activations; PyTorch semantics
/// (`stride 1`, `dilation 1`, zero padding `pad` on both sides, output length `n + 2·pad − kernel + 1`).
#[derive(Clone, Copy, Debug)]
pub struct Conv1dSpec {
    pub batch: usize,
    pub n: usize,
    pub c_in: usize,
    pub c_out: usize,
    pub kernel: usize,
    pub pad: usize,
    pub groups: usize,
}

impl Conv1dSpec {
    pub fn n_out(&self) -> usize {
        (self.n + 2 * self.pad + 1).saturating_sub(self.kernel)
    }

    pub(crate) fn validate(&self, x: usize, w: usize, bias: Option<usize>, y: usize) -> Result<()> {
        let op = "conv1d";
        if self.groups == 0 || !self.c_in.is_multiple_of(self.groups) || !self.c_out.is_multiple_of(self.groups) {
            return Err(shape_err(op, format!("groups {} must divide c_in {} and c_out {}", self.groups, self.c_in, self.c_out)));
        }
        if self.kernel == 0 || self.n + 2 * self.pad < self.kernel {
            return Err(shape_err(op, format!("kernel {} does not fit n {} with pad {}", self.kernel, self.n, self.pad)));
        }
        let need_x = self.batch * self.n * self.c_in;
        let need_w = self.c_out * (self.c_in / self.groups) * self.kernel;
        let need_y = self.batch * self.n_out() * self.c_out;
        if x < need_x {
            return Err(shape_err(op, format!("x has {x} values, need {need_x}")));
        }
        if w < need_w {
            return Err(shape_err(op, format!("weight has {w} values, need {need_w}")));
        }
        if let Some(b) = bias {
            if b < self.c_out {
                return Err(shape_err(op, format!("bias has {b} values, need {}", self.c_out)));
            }
        }
        if y < need_y {
            return Err(shape_err(op, format!("y has {y} values, need {need_y}")));
        }
        Ok(())
    }
}

/// The pointwise nonlinearities of F5 and Vocos. GELU comes in two forms that are different
/// functions: the ConvNeXt blocks use the exact erf form, the DiT feed-forward the tanh one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activation {
    GeluErf,
    GeluTanh,
    Silu,
    Mish,
}
