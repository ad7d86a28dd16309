//! StyleTTS2's style-conditioned blocks, on channels-last `[n, channels]` activations (batch 1).

use f5_gpukit::{Activation, Backend, Conv1dSpec, ConvTranspose1dSpec, InstanceNormSpec};
use f5_nn::{Conv1d, ConvTranspose1d, Linear, Scope};

use crate::KokoroError;

/// `torch.rsqrt(torch.tensor(2))` in f32: the residual blocks' output scale.
pub(crate) const RSQRT_2: f32 = std::f32::consts::FRAC_1_SQRT_2;
/// Epsilon of every instance and layer norm outside ALBERT.
pub(crate) const NORM_EPS: f32 = 1e-5;
/// LeakyReLU slope inside the residual blocks and the text CNN.
pub(crate) const BLOCK_SLOPE: f32 = 0.2;

type Result<T> = std::result::Result<T, KokoroError>;

/// A fresh device buffer of `rows × width` values.
pub(crate) fn buffer<B: Backend>(kit: &B, rows: usize, width: usize) -> Result<B::Buf> {
    let len = rows.checked_mul(width).ok_or_else(|| KokoroError::Input(format!("{rows} frames × {width} channels overflow")))?;
    Ok(kit.alloc(len)?)
}

/// AdaIN1d: instance norm (affine 1/0 unless the checkpoint trained one), then
/// `(1 + γ)·y + β` with `[γ, β] = fc(style)`.
pub(crate) struct AdaIn<B: Backend> {
    fc: Linear<B>,
    affine: Option<(B::Buf, B::Buf)>,
    c: usize,
}

impl<B: Backend> AdaIn<B> {
    pub(crate) fn load(w: &mut Scope<'_>, kit: &B, name: &str, style_dim: usize, c: usize) -> Result<Self> {
        let mut s = w.scope(name);
        let fc = Linear::load(&mut s, kit, "fc", 2 * c, style_dim)?;
        // The release has no `norm.weight`/`norm.bias` (trained with affine=False; the reference
        // loads with strict=False and keeps 1/0): optional, and used when a file has them.
        let affine = match (s.tensor_optional(kit, "norm.weight", &[c])?, s.tensor_optional(kit, "norm.bias", &[c])?) {
            (Some(wt), Some(b)) => Some((wt, b)),
            _ => None,
        };
        Ok(AdaIn { fc, affine, c })
    }

    pub(crate) fn apply(&self, kit: &B, x: &B::Buf, n: usize, style: &B::Buf, out: &mut B::Buf) -> Result<()> {
        let (h, spec) = self.style_and_norm(kit, style, n)?;
        kit.instance_norm(&spec, x, self.affine.as_ref().map(|(w, b)| (w, b)), Some(&h), out)?;
        Ok(())
    }

    /// The style's `[γ, β]` (`fc(style)`) and the norm over `n` rows.
    fn style_and_norm(&self, kit: &B, style: &B::Buf, n: usize) -> Result<(B::Buf, InstanceNormSpec)> {
        let mut h = kit.alloc(2 * self.c)?;
        self.fc.apply(kit, style, 1, &mut h)?;
        Ok((h, InstanceNormSpec { batch: 1, n, c: self.c, eps: NORM_EPS }))
    }

    /// [`AdaIn::apply`], then Snake with `alpha`, into `t`, then `conv` of that into `y`, in one
    /// kit op ([`Backend::instance_norm_snake_conv1d`]): the CPU int8 mode normalises and snakes each
    /// row as the convolution reads it and never writes `t` (scratch of `n·c`).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn apply_snake_conv(
        &self,
        kit: &B,
        x: &B::Buf,
        n: usize,
        style: &B::Buf,
        alpha: &B::Buf,
        conv: &Conv1d<B>,
        t: &mut B::Buf,
        y: &mut B::Buf,
    ) -> Result<()> {
        let (h, norm, spec) = self.modulation(kit, style, n, conv)?;
        let affine = self.affine.as_ref().map(|(w, b)| (w, b));
        kit.instance_norm_snake_conv1d(&norm, x, affine, Some(&h), alpha, &spec, &conv.weight, conv.bias.as_ref(), t, y)?;
        Ok(())
    }

    /// `y += conv(Snake(AdaIN(x)))` in one kit op ([`Backend::instance_norm_snake_conv1d_add`]):
    /// `x` is consumed and `t` is scratch (each `n·c`, room for a 'same' conv's output).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn apply_snake_conv_add(
        &self,
        kit: &B,
        x: &mut B::Buf,
        n: usize,
        style: &B::Buf,
        alpha: &B::Buf,
        conv: &Conv1d<B>,
        t: &mut B::Buf,
        y: &mut B::Buf,
    ) -> Result<()> {
        let (h, norm, spec) = self.modulation(kit, style, n, conv)?;
        let affine = self.affine.as_ref().map(|(w, b)| (w, b));
        kit.instance_norm_snake_conv1d_add(&norm, x, affine, Some(&h), alpha, &spec, &conv.weight, conv.bias.as_ref(), t, y)?;
        Ok(())
    }

    /// [`AdaIn::style_and_norm`] and `conv`'s shape over the same rows.
    fn modulation(&self, kit: &B, style: &B::Buf, n: usize, conv: &Conv1d<B>) -> Result<(B::Buf, InstanceNormSpec, Conv1dSpec)> {
        let (h, norm) = self.style_and_norm(kit, style, n)?;
        Ok((h, norm, Conv1dSpec { batch: 1, n, ..conv.spec }))
    }
}

/// AdaLayerNorm: LayerNorm without affine, then `(1 + γ)·x + β` with `[γ, β] = fc(style)`.
pub(crate) struct AdaLayerNorm<B: Backend> {
    fc: Linear<B>,
    c: usize,
}

impl<B: Backend> AdaLayerNorm<B> {
    pub(crate) fn load(w: &mut Scope<'_>, kit: &B, name: &str, style_dim: usize, c: usize) -> Result<Self> {
        Ok(AdaLayerNorm { fc: Linear::load(w, kit, &format!("{name}.fc"), 2 * c, style_dim)?, c })
    }

    pub(crate) fn apply(&self, kit: &B, x: &B::Buf, n: usize, style: &B::Buf, out: &mut B::Buf) -> Result<()> {
        let mut h = kit.alloc(2 * self.c)?;
        self.fc.apply(kit, style, 1, &mut h)?;
        kit.adaln_modulate(x, n, self.c, NORM_EPS, &h, self.c, 0, out)?;
        Ok(())
    }
}

/// How a block loads its dense conv filters.
#[derive(Clone, Copy)]
enum ConvFilters {
    /// `Conv1d::load`: computed in f32 on every backend (stored as the weights' storage mode
    /// says: f16 on the bf16 CPU backend for the first half).
    Plain,
    /// `upload_weight`: a backend may keep them in reduced precision.
    GemmWeights,
}

/// AdainResBlk1d: `(residual(x) + shortcut(x))·1/√2`, residual = AdaIN → LeakyReLU 0.2 →
/// [depthwise ConvTranspose ×2] → conv k3 → AdaIN → LeakyReLU 0.2 → conv k3; shortcut =
/// [nearest ×2] → [1×1 conv without bias when the width changes].
pub(crate) struct AdainResBlk<B: Backend> {
    norm1: AdaIn<B>,
    norm2: AdaIn<B>,
    conv1: Conv1d<B>,
    conv2: Conv1d<B>,
    pool: Option<ConvTranspose1d<B>>,
    conv1x1: Option<Conv1d<B>>,
    pub(crate) c_in: usize,
    pub(crate) c_out: usize,
}

impl<B: Backend> AdainResBlk<B> {
    /// The widths come from the checkpoint (`conv1.weight` `[out, in, 3]`), the upsampling from
    /// the presence of `pool`. Every filter computes in f32: the prosody predictor's F0/N
    /// blocks, short sequences whose output is the F0 and energy curves.
    pub(crate) fn load(w: &mut Scope<'_>, kit: &B, name: &str, style_dim: usize) -> Result<Self> {
        Self::load_as(w, kit, name, style_dim, ConvFilters::Plain)
    }

    /// As [`AdainResBlk::load`], but the dense convs (`conv1`, `conv2`, `conv1x1`) load their
    /// filters as GEMM weights ([`Conv1d::load_weight`]: bf16 on the bf16 CPU backend): the
    /// decoder's blocks, 514→1024 to 1024→512 channels over every frame, where those convs are
    /// the bulk of the arithmetic. The depthwise `pool` stays f32 (3 taps per output, no GEMM).
    /// Measured on the int8-derived full weights (`kokoro_cpu_time --precision both`, 2 threads):
    /// the five blocks take 0.60 s instead of 1.15 s on the 32.5 s input, and the decoder-alone
    /// audio rel-L2 bf16 vs f32 goes from 4.4e-3 / 4.7e-3 (long / short input, generator convs
    /// alone in bf16) to 7.9e-3 / 9.0e-3: loading them with `load` instead takes that back.
    pub(crate) fn load_gemm_weights(w: &mut Scope<'_>, kit: &B, name: &str, style_dim: usize) -> Result<Self> {
        Self::load_as(w, kit, name, style_dim, ConvFilters::GemmWeights)
    }

    fn load_as(w: &mut Scope<'_>, kit: &B, name: &str, style_dim: usize, filters: ConvFilters) -> Result<Self> {
        let conv = |s: &mut Scope<'_>, name: &str, spec: Conv1dSpec, bias: bool| match filters {
            ConvFilters::Plain => Conv1d::load(s, kit, name, spec, bias),
            ConvFilters::GemmWeights => Conv1d::load_weight(s, kit, name, spec, bias),
        };
        let mut s = w.scope(name);
        let shape = s
            .shape("conv1.weight_v")
            .or_else(|| s.shape("conv1.weight"))
            .map(<[usize]>::to_vec)
            .ok_or_else(|| s.missing("conv1.weight"))?;
        let [c_out, c_in, 3] = shape[..] else {
            return Err(KokoroError::Config(format!("{}: conv1 weight {shape:?} is not [out, in, 3]", s.name(""))));
        };
        let upsample = s.contains("pool.weight_v") || s.contains("pool.weight");
        let pool = if upsample {
            let spec = ConvTranspose1dSpec::new(1, 0, c_in, c_in, 3, 2).pad(1).output_padding(1).groups(c_in);
            Some(ConvTranspose1d::load(&mut s, kit, "pool", spec, true)?)
        } else {
            None
        };
        let conv1x1 = if c_in != c_out { Some(conv(&mut s, "conv1x1", Conv1dSpec::new(1, 0, c_in, c_out, 1), false)?) } else { None };
        Ok(AdainResBlk {
            norm1: AdaIn::load(&mut s, kit, "norm1", style_dim, c_in)?,
            norm2: AdaIn::load(&mut s, kit, "norm2", style_dim, c_out)?,
            conv1: conv(&mut s, "conv1", Conv1dSpec::new(1, 0, c_in, c_out, 3).pad(1), true)?,
            conv2: conv(&mut s, "conv2", Conv1dSpec::new(1, 0, c_out, c_out, 3).pad(1), true)?,
            pool,
            conv1x1,
            c_in,
            c_out,
        })
    }

    pub(crate) fn upsamples(&self) -> bool {
        self.pool.is_some()
    }

    /// `x [n, c_in]` → `[m, c_out]` with `m = 2n` when the block upsamples; returns the output and `m`.
    pub(crate) fn apply(&self, kit: &B, x: &B::Buf, n: usize, style: &B::Buf) -> Result<(B::Buf, usize)> {
        let m = if self.upsamples() { 2 * n } else { n };
        let mut a = buffer(kit, n, self.c_in)?;
        self.norm1.apply(kit, x, n, style, &mut a)?;
        kit.activation(Activation::LeakyRelu(BLOCK_SLOPE), &mut a, n * self.c_in)?;
        if let Some(pool) = &self.pool {
            let mut up = buffer(kit, m, self.c_in)?;
            pool.apply(kit, &a, 1, n, &mut up)?;
            a = up;
        }
        let mut b = buffer(kit, m, self.c_out)?;
        self.conv1.apply(kit, &a, 1, m, &mut b)?;
        let mut c = buffer(kit, m, self.c_out)?;
        self.norm2.apply(kit, &b, m, style, &mut c)?;
        kit.activation(Activation::LeakyRelu(BLOCK_SLOPE), &mut c, m * self.c_out)?;
        let mut out = buffer(kit, m, self.c_out)?;
        self.conv2.apply(kit, &c, 1, m, &mut out)?;
        // Shortcut.
        let up;
        let src = if self.upsamples() {
            let mut u = buffer(kit, m, self.c_in)?;
            kit.upsample_nearest(x, 1, n, self.c_in, 2, &mut u)?;
            up = u;
            &up
        } else {
            x
        };
        match &self.conv1x1 {
            Some(conv) => {
                conv.apply(kit, src, 1, m, &mut b)?;
                kit.axpy(1.0, &b, &mut out, m * self.c_out)?;
            }
            None => kit.axpy(1.0, src, &mut out, m * self.c_out)?,
        }
        kit.activation(Activation::Scale(RSQRT_2), &mut out, m * self.c_out)?;
        Ok((out, m))
    }
}

/// AdaINResBlock1 of the ISTFTNet generator: three times
/// `x += conv2(Snake₂(AdaIN₂(conv1_dilated(Snake₁(AdaIN₁(x))))))`.
pub(crate) struct AdaInResBlock1<B: Backend> {
    convs1: Vec<Conv1d<B>>,
    convs2: Vec<Conv1d<B>>,
    adain1: Vec<AdaIn<B>>,
    adain2: Vec<AdaIn<B>>,
    alpha1: Vec<B::Buf>,
    alpha2: Vec<B::Buf>,
}

impl<B: Backend> AdaInResBlock1<B> {
    pub(crate) fn load(
        w: &mut Scope<'_>,
        kit: &B,
        name: &str,
        c: usize,
        kernel: usize,
        dilations: &[usize],
        style_dim: usize,
    ) -> Result<Self> {
        let mut s = w.scope(name);
        let mut blk = AdaInResBlock1 { convs1: vec![], convs2: vec![], adain1: vec![], adain2: vec![], alpha1: vec![], alpha2: vec![] };
        for (j, &d) in dilations.iter().enumerate() {
            // The generator's dense convs, its bulk of arithmetic: GEMM weights (bf16 on the bf16
            // CPU backend), and int8 in its int8 mode. Their inputs (Snake of an AdaIN output)
            // take per-row int8 scales well: the decoder alone moves ~2.5e-2 rel-L2 from f32 on
            // the short input with these in int8, against ~5e-2 with the decoder's 1024-channel
            // AdaIN blocks in int8 too (their inputs have outlier channels), so those stay bf16.
            let same = |dil: usize| Conv1dSpec::new(1, 0, c, c, kernel).dilation(dil).pad((kernel * dil - dil) / 2);
            blk.convs1.push(Conv1d::load_weight_int8(&mut s, kit, &format!("convs1.{j}"), same(d), true)?);
            blk.convs2.push(Conv1d::load_weight_int8(&mut s, kit, &format!("convs2.{j}"), same(1), true)?);
            blk.adain1.push(AdaIn::load(&mut s, kit, &format!("adain1.{j}"), style_dim, c)?);
            blk.adain2.push(AdaIn::load(&mut s, kit, &format!("adain2.{j}"), style_dim, c)?);
            blk.alpha1.push(s.tensor(kit, &format!("alpha1.{j}"), &[1, c, 1])?);
            blk.alpha2.push(s.tensor(kit, &format!("alpha2.{j}"), &[1, c, 1])?);
        }
        Ok(blk)
    }

    /// In place on `x [n, c]`, with `t` and `u` (each `n·c`) as scratch: the caller owns the
    /// buffers, so a stage of blocks at the generator's highest rate (~70 MB per buffer for a
    /// 510-phoneme chunk) shares two scratch buffers instead of allocating three per block.
    pub(crate) fn apply_in_place(&self, kit: &B, x: &mut B::Buf, n: usize, style: &B::Buf, t: &mut B::Buf, u: &mut B::Buf) -> Result<()> {
        for j in 0..self.convs1.len() {
            // AdaIN + Snake + conv as one kit op each (the CPU int8 mode never writes the
            // normalised rows): the first into `u` (`t` scratch), the second added to `x`
            // (consuming `u`).
            self.adain1[j].apply_snake_conv(kit, x, n, style, &self.alpha1[j], &self.convs1[j], t, u)?;
            self.adain2[j].apply_snake_conv_add(kit, u, n, style, &self.alpha2[j], &self.convs2[j], t, x)?;
        }
        Ok(())
    }
}
