//! The DiT forward pass, written once against the kit.
//!
//! Layout: every activation is `[rows, features]`, and the classifier-free-guidance pair
//! (conditional row first, then unconditional) is stacked along the rows, so each projection
//! is one tall GEMM. What does not change during sampling is computed once per utterance: both
//! text encodings, and the part of the input projection that sees the reference mel and the
//! text. What changes only with t — the timestep MLP and every block's adaLN modulation — is
//! computed for all of the schedule's times in one matrix product before the first step.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use f5_gpukit::{Activation, AttentionSpec, Backend, Conv1dSpec, GemmSpec, MatLayout, RopeSpec, StridedRows};
use f5_nn::{ConvNeXtBlock, Linear, NnError, Scope, Weights};
use f5_torchpt::Checkpoint;

use crate::config::{F5Config, Overrides};
use crate::DitError;

const EPS: f32 = 1e-6;

/// Gives every loaded model its own number, so per-utterance state built by one model is refused
/// by another (its buffers are sized for the other's depth and width).
static NEXT_MODEL_ID: AtomicU64 = AtomicU64::new(1);

/// Receives named intermediate tensors of a forward (see [`F5Model::forward`]).
pub type Trace<'a> = &'a mut dyn FnMut(&str, Vec<f32>);

struct Block<B: Backend> {
    /// adaLN projection `[6·dim, dim]`: shift/scale/gate for attention, then for the FF.
    ada: Linear<B>,
    /// to_q, to_k, to_v stacked into one `[3·dim, dim]` projection: one GEMM, not three.
    qkv: Linear<B>,
    out: Linear<B>,
    ff1: Linear<B>,
    ff2: Linear<B>,
}

/// An F5-TTS DiT with its weights on a device.
pub struct F5Model<B: Backend> {
    pub(crate) kit: B,
    config: F5Config,
    /// Which model built a [`Modulations`] or [`Prepared`]; see [`NEXT_MODEL_ID`].
    id: u64,
    time1: Linear<B>,
    time2: Linear<B>,
    text_table: B::Buf,
    text_blocks: Vec<ConvNeXtBlock<B>>,
    input_proj: Linear<B>,
    conv_pos: [(B::Buf, B::Buf); 2],
    blocks: Vec<Block<B>>,
    norm_out: Linear<B>,
    proj_out: Linear<B>,
    /// Rotary frequencies per head-dim pair, from the checkpoint's `rotary_embed.inv_freq`.
    inv_freq: Vec<f32>,
}

impl From<NnError> for DitError {
    fn from(e: NnError) -> Self {
        match e {
            NnError::Missing { tensor, .. } => DitError::Missing { tensor },
            NnError::Shape { tensor, detail, .. } => DitError::Shape { tensor, detail },
            NnError::Checkpoint(e) => DitError::Checkpoint(e),
            NnError::Kit(e) => DitError::Kit(e),
            other @ (NnError::Ambiguous { .. } | NnError::NoCheckpoint { .. }) => DitError::Config(other.to_string()),
        }
    }
}

fn linear<B: Backend>(l: &mut Scope<'_>, kit: &B, name: &str, out: usize, inp: usize) -> Result<Linear<B>, DitError> {
    Ok(Linear::load(l, kit, name, out, inp)?)
}

/// A transformer block's attention and feed-forward projections: int8 in a backend's int8 mode
/// (they are nearly all of the DiT's arithmetic), as [`linear`] elsewhere.
fn linear_int8<B: Backend>(l: &mut Scope<'_>, kit: &B, name: &str, out: usize, inp: usize) -> Result<Linear<B>, DitError> {
    Ok(Linear::load_int8(l, kit, name, out, inp)?)
}

impl<B: Backend> F5Model<B> {
    /// Opens a checkpoint (`.safetensors` or PyTorch `.pt`) and uploads its weights to `kit`.
    /// The architecture is read from the file ([`F5Config::infer`]).
    pub fn open(path: impl AsRef<Path>, kit: B, overrides: &Overrides) -> Result<Self, DitError> {
        let path = path.as_ref();
        let ckpt = Checkpoint::open(path)?;
        let config = F5Config::infer(&ckpt, path, overrides)?;
        Self::from_checkpoint(ckpt, config, kit)
    }

    /// Uploads the weights of an already opened checkpoint with a known architecture. Each
    /// tensor's mapped pages are dropped once copied, so the file and the weights are never
    /// resident together.
    ///
    /// A hand-built `config` is checked for consistency first (heads × head width = dim, an
    /// even head width, groups that divide dim) and every tensor against it, so a wrong one is an
    /// error, never a panic later.
    pub fn from_checkpoint(ckpt: Checkpoint, config: F5Config, kit: B) -> Result<Self, DitError> {
        config.validate()?;
        let mut weights = Weights::from_checkpoint(ckpt)?;
        let c = &config;
        let mut l = weights.scope(c.prefix.trim_end_matches('.'));
        let (d, td) = (c.dim, c.text_dim);
        let text_blocks = (0..c.conv_layers)
            .map(|i| Ok(ConvNeXtBlock::load(&mut l, &kit, &format!("text_embed.text_blocks.{i}"), td, 2 * td, c.text_conv_kernel)?))
            .collect::<Result<Vec<_>, DitError>>()?;
        let blocks = (0..c.depth)
            .map(|i| {
                let p = format!("transformer_blocks.{i}");
                let mut w = Vec::with_capacity(3 * d * d);
                let mut b = Vec::with_capacity(3 * d);
                for which in ["to_q", "to_k", "to_v"] {
                    w.extend(l.host(&format!("{p}.attn.{which}.weight"), &[d, d])?);
                    b.extend(l.host(&format!("{p}.attn.{which}.bias"), &[d])?);
                }
                Ok(Block {
                    ada: linear(&mut l, &kit, &format!("{p}.attn_norm.linear"), 6 * d, d)?,
                    qkv: Linear { weight: l.upload_gemm_weight_int8(&kit, &w)?, bias: Some(kit.upload(&b)?), out: 3 * d, inp: d },
                    out: linear_int8(&mut l, &kit, &format!("{p}.attn.to_out.0"), d, d)?,
                    ff1: linear_int8(&mut l, &kit, &format!("{p}.ff.ff.0.0"), c.ff_inner, d)?,
                    ff2: linear_int8(&mut l, &kit, &format!("{p}.ff.ff.2"), d, c.ff_inner)?,
                })
            })
            .collect::<Result<Vec<_>, DitError>>()?;
        let cp_in = d / c.conv_pos_groups;
        let conv_pos = [
            (
                l.tensor(&kit, "input_embed.conv_pos_embed.conv1d.0.weight", &[d, cp_in, c.conv_pos_kernel])?,
                l.tensor(&kit, "input_embed.conv_pos_embed.conv1d.0.bias", &[d])?,
            ),
            (
                l.tensor(&kit, "input_embed.conv_pos_embed.conv1d.2.weight", &[d, cp_in, c.conv_pos_kernel])?,
                l.tensor(&kit, "input_embed.conv_pos_embed.conv1d.2.bias", &[d])?,
            ),
        ];
        let half = c.dim_head / 2;
        let inv_freq = match l.host_optional("rotary_embed.inv_freq", &[half])? {
            Some(v) => v,
            // Not every exporter keeps the buffer; it is a pure function of the head width.
            None => (0..half).map(|j| (1.0 / 10000f64.powf((2 * j) as f64 / c.dim_head as f64)) as f32).collect(),
        };
        Ok(F5Model {
            time1: linear(&mut l, &kit, "time_embed.time_mlp.0", d, c.time_freq_dim)?,
            time2: linear(&mut l, &kit, "time_embed.time_mlp.2", d, d)?,
            text_table: l.tensor(&kit, "text_embed.text_embed.weight", &[c.text_rows, td])?,
            text_blocks,
            input_proj: linear(&mut l, &kit, "input_embed.proj", d, 2 * c.mel_dim + td)?,
            conv_pos,
            blocks,
            norm_out: linear(&mut l, &kit, "norm_out.linear", 2 * d, d)?,
            proj_out: linear(&mut l, &kit, "proj_out", c.mel_dim, d)?,
            inv_freq,
            config,
            id: NEXT_MODEL_ID.fetch_add(1, Ordering::Relaxed),
            kit,
        })
    }

    /// The backend the weights live on: callers upload inputs and download results through it.
    pub fn kit(&self) -> &B {
        &self.kit
    }

    /// The architecture, as read from the checkpoint (read-only: the weights were shaped by it).
    pub fn config(&self) -> &F5Config {
        &self.config
    }

    /// One forward of the transformer: the velocity field at time `t` (0 = noise, 1 = speech)
    /// for the noisy mel `x` (`[frames, mel]`), given vocabulary `ids` and the reference mel
    /// `cond` (`[ref_frames, mel]`, `ref_frames <= frames`). With `cfg` the result is two rows,
    /// `[2·frames, mel]`, conditional first, then with the text dropped; without, `[frames, mel]`.
    ///
    /// This is what [`F5Model::sample`] calls once per step; on its own it is what a caller needs
    /// to compare the model with another implementation or to drive a solver of its own.
    pub fn velocity(&self, ids: &[u32], cond: &[f32], x: &[f32], t: f32, cfg: bool) -> Result<Vec<f32>, DitError> {
        let mel = self.config.mel_dim;
        if !t.is_finite() {
            return Err(DitError::Input(format!("time {t} is not a finite number")));
        }
        if x.is_empty() || !x.len().is_multiple_of(mel) {
            return Err(DitError::Input(format!("noisy mel has {} values: not a whole, non-zero number of {mel}-channel frames", x.len())));
        }
        let frames = x.len() / mel;
        let mods = self.modulations(&[t])?;
        let mut prep = self.prepare(ids, cond, frames, cfg)?;
        let xb = self.kit.upload(x)?;
        self.forward(&mut prep, &mods, 0, &xb, None)?;
        let mut out = self.kit.download(&prep.pred)?;
        out.truncate(prep.rows * frames * mel);
        Ok(out)
    }

    #[doc(hidden)]
    /// The text encoder's output `[n, text_dim]` for one CFG row. `ids` are vocabulary ids
    /// (before the model's +1 shift); `drop_text` is the unconditional row, whose characters
    /// all become the filler but whose padding mask (v1) is still the real text's.
    pub fn text_embed(&self, ids: &[u32], n: usize, drop_text: bool) -> Result<B::Buf, DitError> {
        let kit = &self.kit;
        let c = &self.config;
        let td = c.text_dim;
        let real = ids.len().min(n);
        let mut shifted = Vec::with_capacity(n);
        for &id in &ids[..real] {
            let s = id as usize + 1;
            if s >= c.text_rows {
                return Err(DitError::Input(format!("token id {id} is outside the model's vocabulary of {} entries", c.text_rows - 1)));
            }
            shifted.push(if drop_text { 0 } else { s as u32 });
        }
        shifted.resize(n, 0);
        let mut x = kit.alloc(n * td)?;
        kit.embedding(&self.text_table, td, &shifted, &mut x)?;
        if c.conv_layers == 0 {
            return Ok(x);
        }
        let pos = kit.upload(&text_positions(n, td))?;
        kit.axpy(1.0, &pos, &mut x, n * td)?;
        // v1 zeroes every position past the real text, before and after each block.
        let keep = if c.text_mask_padding {
            let k: Vec<f32> = (0..n).map(|i| if i < real { 1.0 } else { 0.0 }).collect();
            Some(kit.upload(&k)?)
        } else {
            None
        };
        if let Some(k) = &keep {
            kit.mask_rows(&mut x, n, td, k)?;
        }
        let Some(first) = self.text_blocks.first() else { return Ok(x) };
        let mut scratch = first.scratch(kit, n)?;
        for blk in &self.text_blocks {
            blk.apply(kit, &mut x, n, &mut scratch)?;
            if let Some(k) = &keep {
                kit.mask_rows(&mut x, n, td, k)?;
            }
        }
        Ok(x)
    }

    #[doc(hidden)]
    /// Timestep embeddings `[times.len(), dim]`: sinusoidal features (sin first, then cos, of
    /// `1000·t·exp(−i·ln(10⁴)/(half−1))`) through the two-layer MLP.
    pub fn time_embed(&self, times: &[f32]) -> Result<B::Buf, DitError> {
        let kit = &self.kit;
        let c = &self.config;
        let s = times.len();
        let feats = kit.upload(&timestep_features(times, c.time_freq_dim))?;
        let mut h = kit.alloc(s * c.dim)?;
        self.time1.apply(kit, &feats, s, &mut h)?;
        kit.activation(Activation::Silu, &mut h, s * c.dim)?;
        let mut t = kit.alloc(s * c.dim)?;
        self.time2.apply(kit, &h, s, &mut t)?;
        Ok(t)
    }

    #[doc(hidden)]
    /// Every block's adaLN modulation and the final layer's for each of `times`, in one pass:
    /// the schedule is known before the first step, so 23 matrix-vector products per step
    /// become 23 matrix-matrix products per utterance.
    pub fn modulations(&self, times: &[f32]) -> Result<Modulations<B>, DitError> {
        let kit = &self.kit;
        let (s, d) = (times.len(), self.config.dim);
        let mut t = self.time_embed(times)?;
        kit.activation(Activation::Silu, &mut t, s * d)?;
        let blocks = self
            .blocks
            .iter()
            .map(|b| {
                let mut m = kit.alloc(s * 6 * d)?;
                b.ada.apply(kit, &t, s, &mut m)?;
                Ok(m)
            })
            .collect::<Result<Vec<_>, DitError>>()?;
        let mut out = kit.alloc(s * 2 * d)?;
        self.norm_out.apply(kit, &t, s, &mut out)?;
        Ok(Modulations { times: times.to_vec(), blocks, out, model: self.id })
    }

    #[doc(hidden)]
    /// The per-utterance state: both text encodings, the reference-and-text part of the input
    /// projection, rotary tables and scratch for `n` frames. `cond` is the reference mel
    /// `[ref_frames, mel]` (frames past it are zero); `rows` is 2 with CFG, 1 without.
    pub fn prepare(&self, ids: &[u32], cond: &[f32], n: usize, cfg: bool) -> Result<Prepared<B>, DitError> {
        let kit = &self.kit;
        let c = &self.config;
        let (d, mel, td) = (c.dim, c.mel_dim, c.text_dim);
        if n == 0 {
            return Err(DitError::Input("zero frames to generate".into()));
        }
        if !cond.len().is_multiple_of(mel) || cond.len() > n * mel {
            return Err(DitError::Input(format!(
                "reference mel has {} values: not a whole number of {mel}-channel frames within {n} frames",
                cond.len()
            )));
        }
        let rows = if cfg { 2 } else { 1 };
        // cat(x, cond, text) · Wᵀ = x·W_xᵀ + [cond, text]·W_ctᵀ: the second term is fixed for
        // the whole utterance, so it is computed here once (bias included) and each step only
        // adds the 100-wide x part.
        let mut cond_pad = cond.to_vec();
        cond_pad.resize(n * mel, 0.0);
        let cond_buf = kit.upload(&cond_pad)?;
        let zeros = kit.alloc(n * mel)?;
        let text_c = self.text_embed(ids, n, false)?;
        let text_u = if cfg { Some(self.text_embed(ids, n, true)?) } else { None };
        let mut ct = kit.alloc(rows * n * (mel + td))?;
        let mut base = kit.alloc(rows * n * d)?;
        {
            let mut row_ct = kit.alloc(n * (mel + td))?;
            kit.concat_features(&[(&cond_buf, mel), (&text_c, td)], n, &mut row_ct)?;
            kit.copy(&row_ct, 0, &mut ct, 0, n * (mel + td))?;
            if let Some(tu) = &text_u {
                kit.concat_features(&[(&zeros, mel), (tu, td)], n, &mut row_ct)?;
                kit.copy(&row_ct, 0, &mut ct, n * (mel + td), n * (mel + td))?;
            }
        }
        let w_ct = GemmSpec {
            m: rows * n,
            n: d,
            k: mel + td,
            batch: 1,
            a: MatLayout::row_major(mel + td),
            b: MatLayout::transposed(2 * mel + td).at(mel),
            c: MatLayout::row_major(d),
            beta: 0.0,
        };
        kit.gemm(&w_ct, &ct, &self.input_proj.weight, self.input_proj.bias.as_ref(), &mut base)?;

        let half = c.dim_head / 2;
        let mut cos = Vec::with_capacity(n * half);
        let mut sin = Vec::with_capacity(n * half);
        for p in 0..n {
            for &f in &self.inv_freq {
                // Positions times frequencies in f32, as the reference's einsum computes them.
                let a = (p as f32 * f) as f64;
                cos.push(a.cos() as f32);
                sin.push(a.sin() as f32);
            }
        }
        let bn = rows * n;
        Ok(Prepared {
            model: self.id,
            n,
            rows,
            base,
            text_cond: text_c,
            text_uncond: text_u,
            cos: kit.upload(&cos)?,
            sin: kit.upload(&sin)?,
            h: kit.alloc(bn * d)?,
            hn: kit.alloc(bn * d)?,
            conv: kit.alloc(bn * d)?,
            qkv: kit.alloc(bn * 3 * d)?,
            q: kit.alloc(bn * d)?,
            k: kit.alloc(bn * d)?,
            v: kit.alloc(bn * d)?,
            att: kit.alloc(bn * d)?,
            merged: kit.alloc(bn * d)?,
            ff: kit.alloc(bn * c.ff_inner)?,
            xproj: kit.alloc(n * d)?,
            pred: kit.alloc(bn * mel)?,
        })
    }

    #[doc(hidden)]
    /// One forward at time `mods.times[step]` for the noisy mel `x` (`[n, mel]`, shared by both
    /// rows): the velocity `[rows·n, mel]` in `prep.pred`, conditional row first.
    ///
    /// `trace`, when given, receives named intermediate tensors (for comparison with the
    /// reference, stage by stage); it costs a download per stage, so sampling passes `None`.
    pub fn forward(
        &self,
        prep: &mut Prepared<B>,
        mods: &Modulations<B>,
        step: usize,
        x: &B::Buf,
        mut trace: Option<Trace<'_>>,
    ) -> Result<(), DitError> {
        let kit = &self.kit;
        let c = &self.config;
        let (d, mel, n, rows) = (c.dim, c.mel_dim, prep.n, prep.rows);
        let bn = rows * n;
        if step >= mods.times.len() {
            return Err(DitError::Input(format!("step {step} past a schedule of {} times", mods.times.len())));
        }
        if mods.model != self.id || prep.model != self.id {
            return Err(DitError::Input("modulations or per-utterance state were built by another model".into()));
        }
        if kit.len(x) < n * mel {
            return Err(DitError::Input(format!("noisy mel has {} values, {n} frames need {}", kit.len(x), n * mel)));
        }
        let mut emit = |name: &str, buf: &B::Buf, len: usize| -> Result<(), DitError> {
            if let Some(t) = trace.as_deref_mut() {
                let mut v = vec![0.0; len];
                kit.read(buf, 0, &mut v)?;
                t(name, v);
            }
            Ok(())
        };

        // Input embedding: base (reference + text part) plus x·W_xᵀ, then the convolutional
        // position embedding with its residual.
        let w_x = GemmSpec {
            m: n,
            n: d,
            k: mel,
            batch: 1,
            a: MatLayout::row_major(mel),
            b: MatLayout::transposed(2 * mel + c.text_dim),
            c: MatLayout::row_major(d),
            beta: 0.0,
        };
        kit.gemm(&w_x, x, &self.input_proj.weight, None, &mut prep.xproj)?;
        kit.copy(&prep.base, 0, &mut prep.h, 0, bn * d)?;
        for r in 0..rows {
            kit.copy(&prep.xproj, 0, &mut prep.hn, r * n * d, n * d)?;
        }
        kit.axpy(1.0, &prep.hn, &mut prep.h, bn * d)?;
        let k = c.conv_pos_kernel;
        let spec = Conv1dSpec::new(rows, n, d, d, k).pad(k / 2).groups(c.conv_pos_groups);
        kit.conv1d(&spec, &prep.h, &self.conv_pos[0].0, Some(&self.conv_pos[0].1), &mut prep.conv)?;
        kit.activation(Activation::Mish, &mut prep.conv, bn * d)?;
        kit.conv1d(&spec, &prep.conv, &self.conv_pos[1].0, Some(&self.conv_pos[1].1), &mut prep.hn)?;
        kit.activation(Activation::Mish, &mut prep.hn, bn * d)?;
        kit.axpy(1.0, &prep.hn, &mut prep.h, bn * d)?;
        emit("input_embed", &prep.h, bn * d)?;

        let heads = c.heads;
        let hd = c.dim_head;
        let attn = AttentionSpec { batch_heads: rows * heads, n, head_dim: hd, scale: 1.0 / (hd as f32).sqrt() };
        for (i, blk) in self.blocks.iter().enumerate() {
            let m = &mods.blocks[i];
            let o = step * 6 * d;
            // Chunk order: shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp.
            kit.adaln_modulate(&prep.h, bn, d, EPS, m, o, o + d, &mut prep.hn)?;
            blk.qkv.apply(kit, &prep.hn, bn, &mut prep.qkv)?;
            let split = |part: usize, rope_heads: usize| RopeSpec {
                batch: rows,
                n,
                heads,
                head_dim: hd,
                rope_heads,
                src: StridedRows { offset: part * d, row_stride: 3 * d },
            };
            kit.split_heads_rope(&split(0, c.rope_heads()), &prep.qkv, &prep.cos, &prep.sin, &mut prep.q)?;
            kit.split_heads_rope(&split(1, c.rope_heads()), &prep.qkv, &prep.cos, &prep.sin, &mut prep.k)?;
            kit.split_heads_rope(&split(2, 0), &prep.qkv, &prep.cos, &prep.sin, &mut prep.v)?;
            kit.attention(&attn, &prep.q, &prep.k, &prep.v, &mut prep.att)?;
            kit.merge_heads(&prep.att, rows, n, heads, hd, &mut prep.merged)?;
            blk.out.apply(kit, &prep.merged, bn, &mut prep.hn)?;
            kit.gated_add(&mut prep.h, &prep.hn, bn, d, m, o + 2 * d)?;
            kit.adaln_modulate(&prep.h, bn, d, EPS, m, o + 3 * d, o + 4 * d, &mut prep.hn)?;
            blk.ff1.apply(kit, &prep.hn, bn, &mut prep.ff)?;
            kit.activation(Activation::GeluTanh, &mut prep.ff, bn * c.ff_inner)?;
            blk.ff2.apply(kit, &prep.ff, bn, &mut prep.conv)?;
            kit.gated_add(&mut prep.h, &prep.conv, bn, d, m, o + 5 * d)?;
            if i == 0 {
                emit("block0", &prep.h, bn * d)?;
            }
        }
        // Final modulation: chunk order scale THEN shift (the blocks' is shift first).
        let o = step * 2 * d;
        kit.adaln_modulate(&prep.h, bn, d, EPS, &mods.out, o + d, o, &mut prep.hn)?;
        self.proj_out.apply(kit, &prep.hn, bn, &mut prep.pred)?;
        emit("output", &prep.pred, bn * mel)?;
        Ok(())
    }
}

/// Modulation vectors for a schedule: per block `[times, 6·dim]`, final `[times, 2·dim]`.
pub struct Modulations<B: Backend> {
    /// The schedule's times, in the order the steps use them.
    pub times: Vec<f32>,
    model: u64,
    blocks: Vec<B::Buf>,
    out: B::Buf,
}

/// Per-utterance state and scratch; see [`F5Model::prepare`].
pub struct Prepared<B: Backend> {
    model: u64,
    /// Frames generated (reference included).
    pub n: usize,
    /// 2 with classifier-free guidance (conditional row first), 1 without.
    pub rows: usize,
    base: B::Buf,
    /// The text encoder's output for the conditional row, `[n, text_dim]`.
    pub text_cond: B::Buf,
    /// The same with the text dropped (the unconditional row), when guidance is on.
    pub text_uncond: Option<B::Buf>,
    cos: B::Buf,
    sin: B::Buf,
    h: B::Buf,
    hn: B::Buf,
    conv: B::Buf,
    qkv: B::Buf,
    q: B::Buf,
    k: B::Buf,
    v: B::Buf,
    att: B::Buf,
    merged: B::Buf,
    ff: B::Buf,
    xproj: B::Buf,
    /// The last forward's velocity `[rows·n, mel]`, conditional row first.
    pub pred: B::Buf,
}

/// The sinusoidal timestep features `[times, dim]`, float32 op for op as the reference:
/// `f_i = exp(i·(−ln 10⁴/(half−1)))`, `arg = (1000·t)·f_i`, `[sin(arg) | cos(arg)]`.
pub fn timestep_features(times: &[f32], dim: usize) -> Vec<f32> {
    let half = dim / 2;
    let k = (10000f64.ln() / (half.max(2) - 1) as f64) as f32;
    let freqs: Vec<f32> = (0..half).map(|i| ((i as f32 * -k) as f64).exp() as f32).collect();
    let mut out = Vec::with_capacity(times.len() * dim);
    for &t in times {
        let st = 1000.0f32 * t;
        let args: Vec<f32> = freqs.iter().map(|&f| st * f).collect();
        out.extend(args.iter().map(|&a| (a as f64).sin() as f32));
        out.extend(args.iter().map(|&a| (a as f64).cos() as f32));
    }
    out
}

/// The text encoder's absolute position code `[n, dim]`: `cos` of `p·θ_j` for the first half of
/// the features, `sin` for the second, `θ_j = 10000^(−2j/dim)` — added, not a rotation.
pub fn text_positions(n: usize, dim: usize) -> Vec<f32> {
    let half = dim / 2;
    let freqs: Vec<f32> = (0..half).map(|j| 1.0 / 10000f64.powf(((2 * j) as f32 / dim as f32) as f64) as f32).collect();
    let mut out = Vec::with_capacity(n * dim);
    for p in 0..n {
        let angles: Vec<f32> = freqs.iter().map(|&f| p as f32 * f).collect();
        out.extend(angles.iter().map(|&a| (a as f64).cos() as f32));
        out.extend(angles.iter().map(|&a| (a as f64).sin() as f32));
    }
    out
}
