//! The acoustic text encoder: embedding → (weight-normed conv → channel LayerNorm → LeakyReLU
//! 0.2) × depth → BiLSTM.

use f5_gpukit::{Activation, Backend, Conv1dSpec};
use f5_nn::{BiLstm, Conv1d, LayerNorm, Scope};

use crate::blocks::{buffer, BLOCK_SLOPE, NORM_EPS};
use crate::KokoroError;

pub(crate) struct TextEncoder<B: Backend> {
    embedding: B::Buf,
    cnn: Vec<(Conv1d<B>, LayerNorm<B>)>,
    lstm: BiLstm<B>,
    c: usize,
}

impl<B: Backend> TextEncoder<B> {
    pub(crate) fn load(w: &mut Scope<'_>, kit: &B, n_token: usize, c: usize, kernel: usize, depth: usize) -> Result<Self, KokoroError> {
        let embedding = w.tensor(kit, "embedding.weight", &[n_token, c])?;
        let mut cnn = Vec::new();
        for i in 0..depth {
            let conv = Conv1d::load(w, kit, &format!("cnn.{i}.0"), Conv1dSpec::new(1, 0, c, c, kernel).pad((kernel - 1) / 2), true)?;
            // StyleTTS2's LayerNorm over channels names its affine gamma/beta.
            let mut s = w.scope(&format!("cnn.{i}.1"));
            let norm = LayerNorm { affine: Some((s.tensor(kit, "gamma", &[c])?, s.tensor(kit, "beta", &[c])?)), d: c, eps: NORM_EPS };
            cnn.push((conv, norm));
        }
        Ok(TextEncoder { embedding, cnn, lstm: BiLstm::load(w, kit, "lstm", c, c / 2)?, c })
    }

    /// `t_en [T, c]` for token ids `[T]`.
    pub(crate) fn forward(&self, kit: &B, ids: &[u32]) -> Result<B::Buf, KokoroError> {
        let (t, c) = (ids.len(), self.c);
        let mut x = buffer(kit, t, c)?;
        kit.embedding(&self.embedding, c, ids, &mut x)?;
        let mut y = buffer(kit, t, c)?;
        for (conv, norm) in &self.cnn {
            conv.apply(kit, &x, 1, t, &mut y)?;
            norm.apply(kit, &y, t, &mut x)?;
            kit.activation(Activation::LeakyRelu(BLOCK_SLOPE), &mut x, t * c)?;
        }
        self.lstm.apply(kit, &x, 1, t, &[t], &mut y)?;
        Ok(y)
    }
}
