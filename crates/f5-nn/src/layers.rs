//! The layers every model is built from, each loading itself from a [`Scope`] and running on
//! any backend. Activations are channels-last `[batch, n, channels]` (`[rows, features]`).

use f5_gpukit::{Activation, Backend, Conv1dSpec, ConvTranspose1dSpec, Device, GemmSpec, KitError, LstmSpec, StridedRows};

/// What running a layer can fail with: the kit's own errors (layers only compose kit ops).
type RunResult<T> = f5_gpukit::Result<T>;

use crate::{Result, Scope};

/// A PyTorch `nn.Linear`: weight `[out, inp]` used in place (read transposed by the GEMM, no
/// copy; uploaded through `upload_weight`) and an optional bias `[out]`.
pub struct Linear<B: Backend> {
    /// `[out, inp]`, as PyTorch stores it.
    pub weight: B::Buf,
    /// `[out]`, when the layer has one.
    pub bias: Option<B::Buf>,
    /// Output features.
    pub out: usize,
    /// Input features.
    pub inp: usize,
}

impl<B: Backend> Linear<B> {
    /// `name.weight` `[out, inp]` (plain or weight-normed) and `name.bias` `[out]`.
    pub fn load(w: &mut Scope<'_>, kit: &B, name: &str, out: usize, inp: usize) -> Result<Self> {
        let mut s = w.scope(name);
        Ok(Linear { weight: s.gemm_weight(kit, "weight", &[out, inp])?, bias: Some(s.tensor(kit, "bias", &[out])?), out, inp })
    }

    /// As [`Linear::load`], the weight through [`Scope::gemm_weight_int8`]: a backend with an int8
    /// mode (`CpuBf16Backend::with_int8_convs`) computes the layer in int8 (per-row activations,
    /// per-output-channel weights). Only for layers whose inputs were measured to tolerate that.
    pub fn load_int8(w: &mut Scope<'_>, kit: &B, name: &str, out: usize, inp: usize) -> Result<Self> {
        let mut s = w.scope(name);
        Ok(Linear { weight: s.gemm_weight_int8(kit, "weight", &[out, inp])?, bias: Some(s.tensor(kit, "bias", &[out])?), out, inp })
    }

    /// As [`Linear::load`] for a layer built with `bias=False`.
    pub fn load_no_bias(w: &mut Scope<'_>, kit: &B, name: &str, out: usize, inp: usize) -> Result<Self> {
        Ok(Linear { weight: w.scope(name).gemm_weight(kit, "weight", &[out, inp])?, bias: None, out, inp })
    }

    /// `y[rows, out] = x[rows, inp] · Wᵀ (+ b)`.
    pub fn apply(&self, kit: &B, x: &B::Buf, rows: usize, y: &mut B::Buf) -> RunResult<()> {
        kit.gemm(&GemmSpec::linear(rows, self.inp, self.out), x, &self.weight, self.bias.as_ref(), y)
    }
}

/// `nn.LayerNorm` over the last axis, with or without the affine.
pub struct LayerNorm<B: Backend> {
    /// `(weight, bias)`, `[d]` each; `None` for `elementwise_affine=False`.
    pub affine: Option<(B::Buf, B::Buf)>,
    /// Features normalised over.
    pub d: usize,
    /// Added to the variance, as the module was built with.
    pub eps: f32,
}

impl<B: Backend> LayerNorm<B> {
    /// `name.weight` and `name.bias`, `[d]` each.
    pub fn load(w: &mut Scope<'_>, kit: &B, name: &str, d: usize, eps: f32) -> Result<Self> {
        let mut s = w.scope(name);
        Ok(LayerNorm { affine: Some((s.tensor(kit, "weight", &[d])?, s.tensor(kit, "bias", &[d])?)), d, eps })
    }

    /// Without parameters (`elementwise_affine=False`).
    pub fn plain(d: usize, eps: f32) -> Self {
        LayerNorm { affine: None, d, eps }
    }

    /// Normalises each of `rows` rows of `x` (`[rows, d]`) into `out`.
    pub fn apply(&self, kit: &B, x: &B::Buf, rows: usize, out: &mut B::Buf) -> RunResult<()> {
        kit.layer_norm(x, rows, self.d, self.eps, self.affine.as_ref().map(|(w, b)| (w, b)), out)
    }
}

/// `nn.Conv1d` (any stride, dilation, groups and padding mode), weight plain or weight-normed.
pub struct Conv1d<B: Backend> {
    /// `[c_out, c_in/groups, kernel]`, weight norm already folded in.
    pub weight: B::Buf,
    /// `[c_out]`, when the layer has one.
    pub bias: Option<B::Buf>,
    /// The shape with `batch`/`n` filled in per call.
    pub spec: Conv1dSpec,
}

/// How [`Conv1d::load_through`] uploads a filter bank (the spec for uploads that pack for it).
type UploadFilters<B> = fn(&Scope<'_>, &B, &[f32], &Conv1dSpec) -> Result<<B as Backend>::Buf>;

impl<B: Backend> Conv1d<B> {
    /// `name.weight` `[c_out, c_in/groups, kernel]` (or `weight_g`/`weight_v`) and, with
    /// `bias`, `name.bias`. `spec` gives everything but the batch and length.
    /// The filters compute in f32 ([`Scope::upload_f32_weight`]: f16-stored under
    /// `WeightStorage::F32Compact`).
    pub fn load(w: &mut Scope<'_>, kit: &B, name: &str, spec: Conv1dSpec, bias: bool) -> Result<Self> {
        Self::load_through(w, kit, name, spec, bias, |s, kit, data, _| s.upload_f32_weight(kit, data))
    }

    /// As [`Conv1d::load`], but the filters go through [`Backend::upload_conv_filters`], a
    /// [`Linear`]'s weight's kind of upload: a backend may then keep them in reduced precision
    /// (bf16 on `CpuBf16Backend`, whose dense convolutions run on its bf16 kernel, packed for
    /// it once here rather than on every call). For the big dense convolutions whose cost that
    /// cuts; small or precision-critical ones stay on `load`. The filters are then read-only.
    /// Under `WeightStorage::F32`/`F32Compact` they go up as [`Conv1d::load`]'s do.
    pub fn load_weight(w: &mut Scope<'_>, kit: &B, name: &str, spec: Conv1dSpec, bias: bool) -> Result<Self> {
        Self::load_through(w, kit, name, spec, bias, |s, kit, data, spec| s.upload_conv_filters(kit, data, spec))
    }

    /// As [`Conv1d::load_weight`], through [`Backend::upload_conv_filters_int8`]: a backend with
    /// an int8 mode (`CpuBf16Backend::with_int8_convs`) computes this convolution in int8 with
    /// per-row activation scales and may keep the filters in int8 only (read-only). Only for
    /// convolutions whose inputs were measured to tolerate that.
    pub fn load_weight_int8(w: &mut Scope<'_>, kit: &B, name: &str, spec: Conv1dSpec, bias: bool) -> Result<Self> {
        Self::load_through(w, kit, name, spec, bias, |s, kit, data, spec| s.upload_conv_filters_int8(kit, data, spec))
    }

    /// The filters `[c_out, c_in/groups, kernel]` uploaded by `upload`, and the bias.
    fn load_through(w: &mut Scope<'_>, kit: &B, name: &str, spec: Conv1dSpec, bias: bool, upload: UploadFilters<B>) -> Result<Self> {
        let mut s = w.scope(name);
        let groups = spec.groups.max(1);
        let weight = s.host_normed("weight", &[spec.c_out, spec.c_in / groups, spec.kernel])?;
        let bias = if bias { Some(s.tensor(kit, "bias", &[spec.c_out])?) } else { None };
        Ok(Conv1d { weight: upload(&s, kit, &weight, &spec)?, bias, spec })
    }

    /// Output rows for an input of `n` rows.
    /// Output length for an input of `n` steps.
    pub fn n_out(&self, n: usize) -> usize {
        Conv1dSpec { n, ..self.spec }.n_out()
    }

    /// `y [batch, n_out, c_out] = conv(x [batch, n, c_in])`; returns `n_out`.
    pub fn apply(&self, kit: &B, x: &B::Buf, batch: usize, n: usize, y: &mut B::Buf) -> RunResult<usize> {
        let spec = Conv1dSpec { batch, n, ..self.spec };
        kit.conv1d(&spec, x, &self.weight, self.bias.as_ref(), y)?;
        Ok(spec.n_out())
    }
}

/// `nn.ConvTranspose1d` (dilation 1), weight `[c_in, c_out/groups, kernel]`, plain or
/// weight-normed (its `weight_g` is `[c_in, 1, 1]`).
pub struct ConvTranspose1d<B: Backend> {
    /// `[c_in, c_out/groups, kernel]`, weight norm already folded in.
    pub weight: B::Buf,
    /// `[c_out]`, when the layer has one.
    pub bias: Option<B::Buf>,
    /// Channels, kernel, stride and padding (`batch`/`n` are filled in per call).
    pub spec: ConvTranspose1dSpec,
}

impl<B: Backend> ConvTranspose1d<B> {
    /// Loads `name.weight` (plain, or `weight_g`/`weight_v`) and, with `bias`, `name.bias`. The
    /// filters compute in f32 ([`Scope::upload_f32_weight`]: f16-stored under
    /// `WeightStorage::F32Compact`).
    pub fn load(w: &mut Scope<'_>, kit: &B, name: &str, spec: ConvTranspose1dSpec, bias: bool) -> Result<Self> {
        Self::load_through(w, kit, name, spec, bias, |s, kit, data| s.upload_f32_weight(kit, data))
    }

    /// As [`ConvTranspose1d::load`], but the filters go through [`Backend::upload_weight`], as
    /// [`Conv1d::load_weight`]'s do: a backend may keep them in reduced precision (bf16 on
    /// `CpuBf16Backend`, whose dense transposed convolutions then run their GEMM on its bf16
    /// kernel). For the big dense upsamplers whose cost that cuts; grouped or depthwise ones gain
    /// nothing there (that backend widens their filters to f32 on every call) and stay on `load`.
    pub fn load_weight(w: &mut Scope<'_>, kit: &B, name: &str, spec: ConvTranspose1dSpec, bias: bool) -> Result<Self> {
        Self::load_through(w, kit, name, spec, bias, |s, kit, data| s.upload_gemm_weight(kit, data))
    }

    /// The filters `[c_in, c_out/groups, kernel]` uploaded by `upload`, and the bias.
    fn load_through(
        w: &mut Scope<'_>,
        kit: &B,
        name: &str,
        spec: ConvTranspose1dSpec,
        bias: bool,
        upload: fn(&Scope<'_>, &B, &[f32]) -> Result<B::Buf>,
    ) -> Result<Self> {
        let mut s = w.scope(name);
        let groups = spec.groups.max(1);
        let weight = s.host_normed("weight", &[spec.c_in, spec.c_out / groups, spec.kernel])?;
        let bias = if bias { Some(s.tensor(kit, "bias", &[spec.c_out])?) } else { None };
        Ok(ConvTranspose1d { weight: upload(&s, kit, &weight)?, bias, spec })
    }

    /// Output length for an input of `n` steps.
    pub fn n_out(&self, n: usize) -> usize {
        ConvTranspose1dSpec { n, ..self.spec }.n_out()
    }

    /// `y [batch, n_out, c_out]`; returns `n_out`.
    pub fn apply(&self, kit: &B, x: &B::Buf, batch: usize, n: usize, y: &mut B::Buf) -> RunResult<usize> {
        let spec = ConvTranspose1dSpec { batch, n, ..self.spec };
        kit.conv_transpose1d(&spec, x, &self.weight, self.bias.as_ref(), y)?;
        Ok(spec.n_out())
    }
}

/// One direction of a one-layer `nn.LSTM`: the input projection of every step is one GEMM
/// (`W_ih` with both biases folded into one), only the recurrence is sequential.
pub struct Lstm<B: Backend> {
    /// `W_ih` `[4·hidden, input]` with `b_ih + b_hh` as its bias.
    pub input_proj: Linear<B>,
    /// `W_hh` `[4·hidden, hidden]`, applied step by step.
    pub w_hh: B::Buf,
    /// Hidden width.
    pub hidden: usize,
    /// Whether this is the backward direction (runs from each item's last real step).
    pub reverse: bool,
}

impl<B: Backend> Lstm<B> {
    /// PyTorch's names in `w`: `weight_ih_l0` `[4H, input]`, `weight_hh_l0` `[4H, H]`,
    /// `bias_ih_l0`, `bias_hh_l0` `[4H]`, with the `_reverse` suffix for the backward direction.
    pub fn load(w: &mut Scope<'_>, kit: &B, input: usize, hidden: usize, reverse: bool) -> Result<Self> {
        let sfx = if reverse { "_reverse" } else { "" };
        let g4 = 4 * hidden;
        let w_ih = w.gemm_weight(kit, &format!("weight_ih_l0{sfx}"), &[g4, input])?;
        let w_hh = w.host(&format!("weight_hh_l0{sfx}"), &[g4, hidden])?;
        let w_hh = w.upload_f32_weight(kit, &w_hh)?;
        let mut bias = w.host(&format!("bias_ih_l0{sfx}"), &[g4])?;
        let b_hh = w.host(&format!("bias_hh_l0{sfx}"), &[g4])?;
        bias.iter_mut().zip(&b_hh).for_each(|(a, b)| *a += b);
        Ok(Lstm { input_proj: Linear { weight: w_ih, bias: Some(kit.upload(&bias)?), out: g4, inp: input }, w_hh, hidden, reverse })
    }

    /// Runs over `x [batch, n, input]` with per-item `lengths`, writing each step's `h` into
    /// `out` rows laid out as `rows` (zeros past each length).
    #[allow(clippy::too_many_arguments)]
    pub fn apply_into(
        &self,
        kit: &B,
        x: &B::Buf,
        batch: usize,
        n: usize,
        lengths: &[usize],
        out: &mut B::Buf,
        rows: StridedRows,
    ) -> RunResult<()> {
        let steps = batch.checked_mul(n).ok_or_else(|| KitError::Shape { op: "lstm", detail: format!("{batch}×{n} steps overflow") })?;
        let mut gates = kit.alloc(steps.saturating_mul(self.input_proj.out))?;
        self.input_proj.apply(kit, x, steps, &mut gates)?;
        let spec = LstmSpec { batch, n, hidden: self.hidden, reverse: self.reverse, out: rows };
        kit.lstm(&spec, lengths, &gates, &self.w_hh, None, out)
    }
}

/// A one-layer bidirectional `nn.LSTM`, `[batch, n, input]` → `[batch, n, 2·hidden]` (forward
/// half first), exact for each item's own length in a padded batch — what PyTorch's
/// `pack_padded_sequence` path computes.
pub struct BiLstm<B: Backend> {
    /// The forward direction (`weight_ih_l0`, ...).
    pub forward: Lstm<B>,
    /// The backward direction (`weight_ih_l0_reverse`, ...).
    pub backward: Lstm<B>,
}

impl<B: Backend> BiLstm<B> {
    /// Loads both directions of the `nn.LSTM` called `name`.
    pub fn load(w: &mut Scope<'_>, kit: &B, name: &str, input: usize, hidden: usize) -> Result<Self> {
        let mut s = w.scope(name);
        Ok(BiLstm { forward: Lstm::load(&mut s, kit, input, hidden, false)?, backward: Lstm::load(&mut s, kit, input, hidden, true)? })
    }

    /// Hidden width of one direction (the output is twice this).
    pub fn hidden(&self) -> usize {
        self.forward.hidden
    }

    /// Runs both directions over `x` (`[batch, n, input]`), each item for its own `lengths[i]`
    /// steps (the padding past it is zero in `out`, `[batch, n, 2·hidden]`).
    pub fn apply(&self, kit: &B, x: &B::Buf, batch: usize, n: usize, lengths: &[usize], out: &mut B::Buf) -> RunResult<()> {
        let h = self.hidden();
        if !matches!(kit.device(), Device::Cpu { threads } if threads != 1) {
            self.forward.apply_into(kit, x, batch, n, lengths, out, StridedRows { offset: 0, row_stride: 2 * h })?;
            return self.backward.apply_into(kit, x, batch, n, lengths, out, StridedRows { offset: h, row_stride: 2 * h });
        }
        // On a CPU with more than one thread the two recurrences run side by side: each step is
        // a sequential matrix-vector product too small to split across threads, so the
        // directions are the parallelism. Each writes its own half-width buffer (both cannot
        // borrow `out`), interleaved afterwards.
        let steps = batch.checked_mul(n).ok_or_else(|| KitError::Shape { op: "lstm", detail: format!("{batch}×{n} steps overflow") })?;
        let mut halves = [kit.alloc(steps.saturating_mul(h))?, kit.alloc(steps.saturating_mul(h))?];
        let [fwd_out, back_out] = &mut halves;
        let rows = StridedRows { offset: 0, row_stride: h };
        let (fwd, back) = std::thread::scope(|scope| {
            let back = scope.spawn(|| self.backward.apply_into(kit, x, batch, n, lengths, back_out, rows));
            let fwd = self.forward.apply_into(kit, x, batch, n, lengths, fwd_out, rows);
            (fwd, back.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)))
        });
        fwd?;
        back?;
        kit.concat_features(&[(&halves[0], h), (&halves[1], h)], steps, out)
    }
}

/// The ConvNeXt(-V2) block of F5's text encoder and of Vocos' backbone:
/// depthwise conv → LayerNorm → Linear → GELU (erf) → (GRN) → Linear → (× layer scale) → + residual.
/// F5's blocks have GRN (ConvNeXt-V2) and no layer scale; Vocos' the reverse.
pub struct ConvNeXtBlock<B: Backend> {
    /// The depthwise convolution.
    pub dwconv: Conv1d<B>,
    /// The LayerNorm after it.
    pub norm: LayerNorm<B>,
    /// Pointwise expansion `dim → wide`.
    pub pwconv1: Linear<B>,
    /// GRN `(gamma, beta)`, `[wide]` each.
    pub grn: Option<(B::Buf, B::Buf)>,
    /// Pointwise projection `wide → dim`.
    pub pwconv2: Linear<B>,
    /// Layer scale `[dim]`.
    pub gamma: Option<B::Buf>,
    /// Channels in and out.
    pub dim: usize,
    /// Channels between the pointwise layers.
    pub wide: usize,
}

/// Epsilon of the ConvNeXt blocks' LayerNorm and GRN (both models use 1e-6).
const CONVNEXT_EPS: f32 = 1e-6;

/// The four activations a [`ConvNeXtBlock`] works in, allocated once for a run of blocks.
pub struct ConvNeXtScratch<B: Backend> {
    conv: B::Buf,
    normed: B::Buf,
    wide: B::Buf,
    back: B::Buf,
}

impl<B: Backend> ConvNeXtBlock<B> {
    /// PyTorch names under `name`: `dwconv`, `norm`, `pwconv1`, `pwconv2`, and if present
    /// `grn.gamma`/`grn.beta` (`[1, 1, wide]`) and `gamma` (`[dim]`).
    pub fn load(w: &mut Scope<'_>, kit: &B, name: &str, dim: usize, wide: usize, kernel: usize) -> Result<Self> {
        let mut s = w.scope(name);
        let grn = match (s.tensor_optional(kit, "grn.gamma", &[1, 1, wide])?, s.tensor_optional(kit, "grn.beta", &[1, 1, wide])?) {
            (Some(g), Some(b)) => Some((g, b)),
            (None, None) => None,
            (Some(_), None) => return Err(s.missing("grn.beta")),
            (None, Some(_)) => return Err(s.missing("grn.gamma")),
        };
        Ok(ConvNeXtBlock {
            dwconv: Conv1d::load(&mut s, kit, "dwconv", Conv1dSpec::depthwise(1, 0, dim, kernel), true)?,
            norm: LayerNorm::load(&mut s, kit, "norm", dim, CONVNEXT_EPS)?,
            pwconv1: Linear::load(&mut s, kit, "pwconv1", wide, dim)?,
            grn,
            pwconv2: Linear::load(&mut s, kit, "pwconv2", dim, wide)?,
            gamma: s.tensor_optional(kit, "gamma", &[dim])?,
            dim,
            wide,
        })
    }

    /// Scratch for blocks of this size over `n` rows.
    pub fn scratch(&self, kit: &B, n: usize) -> RunResult<ConvNeXtScratch<B>> {
        let rows = |w: usize| {
            n.checked_mul(w).ok_or_else(|| KitError::Shape { op: "convnext", detail: format!("{n} rows × {w} features overflow") })
        };
        Ok(ConvNeXtScratch {
            conv: kit.alloc(rows(self.dim)?)?,
            normed: kit.alloc(rows(self.dim)?)?,
            wide: kit.alloc(rows(self.wide)?)?,
            back: kit.alloc(rows(self.dim)?)?,
        })
    }

    /// `x [n, dim] += block(x)`, in place.
    pub fn apply(&self, kit: &B, x: &mut B::Buf, n: usize, s: &mut ConvNeXtScratch<B>) -> RunResult<()> {
        let (d, wd) = (self.dim, self.wide);
        self.dwconv.apply(kit, x, 1, n, &mut s.conv)?;
        self.norm.apply(kit, &s.conv, n, &mut s.normed)?;
        self.pwconv1.apply(kit, &s.normed, n, &mut s.wide)?;
        kit.activation(Activation::GeluErf, &mut s.wide, n * wd)?;
        if let Some((g, b)) = &self.grn {
            kit.grn(&mut s.wide, 1, n, wd, g, b, CONVNEXT_EPS)?;
        }
        self.pwconv2.apply(kit, &s.wide, n, &mut s.back)?;
        match &self.gamma {
            Some(g) => kit.gated_add(x, &s.back, n, d, g, 0)?,
            None => kit.axpy(1.0, &s.back, x, n * d)?,
        }
        Ok(())
    }
}
