//! PL-BERT: Hugging Face `AlbertModel` semantics — one shared layer applied `num_hidden_layers`
//! times, tanh GELU (`gelu_new`), LayerNorm eps 1e-12, positions 0..T−1, token type 0, no mask
//! (batch 1, every position real).

use f5_gpukit::{Activation, AttentionSpec, Backend, RopeSpec, StridedRows};
use f5_nn::{LayerNorm, Linear, Scope};

use crate::blocks::buffer;
use crate::config::AlbertSizes;
use crate::KokoroError;

const ALBERT_EPS: f32 = 1e-12;

pub(crate) struct Albert<B: Backend> {
    word: B::Buf,
    position: B::Buf,
    token_type0: Vec<f32>,
    emb_norm: LayerNorm<B>,
    mapping_in: Linear<B>,
    /// query, key and value stacked into one `[3·hidden, hidden]` projection.
    qkv: Linear<B>,
    dense: Linear<B>,
    attn_norm: LayerNorm<B>,
    ffn: Linear<B>,
    ffn_out: Linear<B>,
    full_norm: LayerNorm<B>,
    sizes: AlbertSizes,
}

impl<B: Backend> Albert<B> {
    pub(crate) fn load(w: &mut Scope<'_>, kit: &B, n_token: usize, sizes: &AlbertSizes) -> Result<Self, KokoroError> {
        let (e, h, ff) = (sizes.embedding_size, sizes.hidden_size, sizes.intermediate_size);
        let mut emb = w.scope("embeddings");
        let word = emb.tensor(kit, "word_embeddings.weight", &[n_token, e])?;
        let position = emb.tensor(kit, "position_embeddings.weight", &[sizes.max_position_embeddings, e])?;
        let types = emb.host("token_type_embeddings.weight", &[2, e])?;
        let emb_norm = LayerNorm::load(&mut emb, kit, "LayerNorm", e, ALBERT_EPS)?;
        let mapping_in = Linear::load(w, kit, "encoder.embedding_hidden_mapping_in", h, e)?;
        let mut l = w.scope("encoder.albert_layer_groups.0.albert_layers.0");
        let mut qkv_w = Vec::with_capacity(3 * h * h);
        let mut qkv_b = Vec::with_capacity(3 * h);
        for which in ["query", "key", "value"] {
            qkv_w.extend(l.host(&format!("attention.{which}.weight"), &[h, h])?);
            qkv_b.extend(l.host(&format!("attention.{which}.bias"), &[h])?);
        }
        Ok(Albert {
            word,
            position,
            token_type0: types[..e].to_vec(),
            emb_norm,
            mapping_in,
            qkv: Linear { weight: l.upload_linear_weight(kit, &qkv_w, 3 * h, h)?, bias: Some(kit.upload(&qkv_b)?), out: 3 * h, inp: h },
            dense: Linear::load(&mut l, kit, "attention.dense", h, h)?,
            attn_norm: LayerNorm::load(&mut l, kit, "attention.LayerNorm", h, ALBERT_EPS)?,
            ffn: Linear::load(&mut l, kit, "ffn", ff, h)?,
            ffn_out: Linear::load(&mut l, kit, "ffn_output", h, ff)?,
            full_norm: LayerNorm::load(&mut l, kit, "full_layer_layer_norm", h, ALBERT_EPS)?,
            sizes: sizes.clone(),
        })
    }

    /// `last_hidden_state` `[T, hidden]` for token ids `[T]` (pads included).
    pub(crate) fn forward(&self, kit: &B, ids: &[u32]) -> Result<B::Buf, KokoroError> {
        let s = &self.sizes;
        let (t, e, h, heads) = (ids.len(), s.embedding_size, s.hidden_size, s.num_attention_heads);
        if t > s.max_position_embeddings {
            return Err(KokoroError::Input(format!("{t} tokens exceed ALBERT's {} positions", s.max_position_embeddings)));
        }
        let hd = h / heads;
        // Embeddings: word + position + token type 0, then LayerNorm.
        let mut x = buffer(kit, t, e)?;
        kit.embedding(&self.word, e, ids, &mut x)?;
        let pos_ids: Vec<u32> = (0..t as u32).collect();
        let mut pos = buffer(kit, t, e)?;
        kit.embedding(&self.position, e, &pos_ids, &mut pos)?;
        kit.axpy(1.0, &pos, &mut x, t * e)?;
        let types: Vec<f32> = self.token_type0.iter().copied().cycle().take(t * e).collect();
        kit.axpy(1.0, &kit.upload(&types)?, &mut x, t * e)?;
        self.emb_norm.apply(kit, &x, t, &mut pos)?;
        let mut hidden = buffer(kit, t, h)?;
        self.mapping_in.apply(kit, &pos, t, &mut hidden)?;

        let mut qkv = buffer(kit, t, 3 * h)?;
        let (mut q, mut k, mut v) = (buffer(kit, t, h)?, buffer(kit, t, h)?, buffer(kit, t, h)?);
        let mut ctx = buffer(kit, t, h)?;
        let mut merged = buffer(kit, t, h)?;
        let mut attn_out = buffer(kit, t, h)?;
        let mut wide = buffer(kit, t, s.intermediate_size)?;
        let empty = kit.alloc(0)?;
        let split =
            |offset: usize| RopeSpec { batch: 1, n: t, heads, head_dim: hd, rope_heads: 0, src: StridedRows { offset, row_stride: 3 * h } };
        for _ in 0..s.num_hidden_layers {
            self.qkv.apply(kit, &hidden, t, &mut qkv)?;
            kit.split_heads_rope(&split(0), &qkv, &empty, &empty, &mut q)?;
            kit.split_heads_rope(&split(h), &qkv, &empty, &empty, &mut k)?;
            kit.split_heads_rope(&split(2 * h), &qkv, &empty, &empty, &mut v)?;
            let spec = AttentionSpec { batch_heads: heads, n: t, head_dim: hd, scale: 1.0 / (hd as f32).sqrt() };
            kit.attention(&spec, &q, &k, &v, &mut ctx)?;
            kit.merge_heads(&ctx, 1, t, heads, hd, &mut merged)?;
            self.dense.apply(kit, &merged, t, &mut attn_out)?;
            kit.axpy(1.0, &hidden, &mut attn_out, t * h)?;
            self.attn_norm.apply(kit, &attn_out, t, &mut merged)?;
            // merged = attention output (post-norm); FFN on it, residual, full-layer norm.
            self.ffn.apply(kit, &merged, t, &mut wide)?;
            kit.activation(Activation::GeluTanh, &mut wide, t * s.intermediate_size)?;
            self.ffn_out.apply(kit, &wide, t, &mut attn_out)?;
            kit.axpy(1.0, &merged, &mut attn_out, t * h)?;
            self.full_norm.apply(kit, &attn_out, t, &mut hidden)?;
        }
        Ok(hidden)
    }
}
