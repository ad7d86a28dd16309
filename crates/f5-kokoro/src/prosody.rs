//! The prosody predictor: duration encoder, durations, and the F0 / energy (N) curves.

use f5_gpukit::{Backend, Conv1dSpec};
use f5_nn::{BiLstm, Conv1d, Linear, Scope};

use crate::blocks::{buffer, AdaLayerNorm, AdainResBlk};
use crate::KokoroError;

type Result<T> = std::result::Result<T, KokoroError>;

pub(crate) struct Prosody<B: Backend> {
    /// DurationEncoder: (BiLSTM, AdaLayerNorm) × n_layer.
    dur_lstms: Vec<BiLstm<B>>,
    dur_norms: Vec<AdaLayerNorm<B>>,
    lstm: BiLstm<B>,
    duration_proj: Linear<B>,
    shared: BiLstm<B>,
    f0: Vec<AdainResBlk<B>>,
    n: Vec<AdainResBlk<B>>,
    f0_proj: Conv1d<B>,
    n_proj: Conv1d<B>,
    d_hid: usize,
    style_dim: usize,
    max_dur: usize,
}

/// The durations stage's results.
pub(crate) struct Durations<B: Backend> {
    /// DurationEncoder output `[T, d_hid + style_dim]`.
    pub d: B::Buf,
    /// `Σ sigmoid(logits) / speed` per token, before rounding.
    pub raw: Vec<f32>,
    /// Frames per token: round half to even, at least 1.
    pub frames: Vec<usize>,
}

impl<B: Backend> Prosody<B> {
    pub(crate) fn load(w: &mut Scope<'_>, kit: &B, d_hid: usize, style_dim: usize, n_layer: usize, max_dur: usize) -> Result<Self> {
        let (h, wide) = (d_hid / 2, d_hid + style_dim);
        let mut dur_lstms = Vec::new();
        let mut dur_norms = Vec::new();
        for i in 0..n_layer {
            dur_lstms.push(BiLstm::load(w, kit, &format!("text_encoder.lstms.{}", 2 * i), wide, h)?);
            dur_norms.push(AdaLayerNorm::load(w, kit, &format!("text_encoder.lstms.{}", 2 * i + 1), style_dim, d_hid)?);
        }
        let blocks = |w: &mut Scope<'_>, name: &str| -> Result<Vec<AdainResBlk<B>>> {
            (0..3).map(|i| AdainResBlk::load(w, kit, &format!("{name}.{i}"), style_dim)).collect()
        };
        let f0 = blocks(w, "F0")?;
        let n = blocks(w, "N")?;
        let last = f0.last().map_or(d_hid / 2, |b| b.c_out);
        Ok(Prosody {
            dur_lstms,
            dur_norms,
            lstm: BiLstm::load(w, kit, "lstm", wide, h)?,
            duration_proj: Linear::load(w, kit, "duration_proj.linear_layer", max_dur, d_hid)?,
            shared: BiLstm::load(w, kit, "shared", wide, h)?,
            f0,
            n,
            f0_proj: Conv1d::load(w, kit, "F0_proj", Conv1dSpec::new(1, 0, last, 1, 1), true)?,
            n_proj: Conv1d::load(w, kit, "N_proj", Conv1dSpec::new(1, 0, last, 1, 1), true)?,
            d_hid,
            style_dim,
            max_dur,
        })
    }

    /// `[x | s]` per row: `x [t, width]` with the style `s` appended to every row.
    fn with_style(&self, kit: &B, x: &B::Buf, t: usize, width: usize, style_rows: &B::Buf, out: &mut B::Buf) -> Result<()> {
        Ok(kit.concat_features(&[(x, width), (style_rows, self.style_dim)], t, out)?)
    }

    /// DurationEncoder, the duration LSTM and projection: `d_en [T, d_hid]` → durations.
    pub(crate) fn durations(
        &self,
        kit: &B,
        d_en: &B::Buf,
        t: usize,
        style: &B::Buf,
        speed: f32,
        trace: &mut crate::Trace<'_>,
    ) -> Result<Durations<B>> {
        let (dh, sd) = (self.d_hid, self.style_dim);
        let wide = dh + sd;
        let rows: Vec<f32> = kit.download(style)?.iter().copied().cycle().take(t * sd).collect();
        let style_rows = kit.upload(&rows)?;
        let mut x = buffer(kit, t, wide)?;
        self.with_style(kit, d_en, t, dh, &style_rows, &mut x)?;
        let mut h = buffer(kit, t, dh)?;
        let mut normed = buffer(kit, t, dh)?;
        for (lstm, norm) in self.dur_lstms.iter().zip(&self.dur_norms) {
            lstm.apply(kit, &x, 1, t, &[t], &mut h)?;
            norm.apply(kit, &h, t, style, &mut normed)?;
            self.with_style(kit, &normed, t, dh, &style_rows, &mut x)?;
        }
        trace.emit(kit, "duration_encoder", &x)?;
        self.lstm.apply(kit, &x, 1, t, &[t], &mut h)?;
        trace.emit(kit, "predictor_lstm", &h)?;
        let mut logits = buffer(kit, t, self.max_dur)?;
        self.duration_proj.apply(kit, &h, t, &mut logits)?;
        trace.emit(kit, "duration_logits", &logits)?;
        let logits = kit.download(&logits)?;
        let (raw, frames) = frames_from_logits(&logits[..t * self.max_dur], self.max_dur, speed);
        Ok(Durations { d: x, raw, frames })
    }

    /// `shared` BiLSTM on the aligned features, then the F0 and N branches: `[F, d_hid+style]` →
    /// two curves of `2F` values.
    pub(crate) fn f0_n(
        &self,
        kit: &B,
        en: &B::Buf,
        f: usize,
        style: &B::Buf,
        trace: &mut crate::Trace<'_>,
    ) -> Result<(B::Buf, B::Buf, usize)> {
        let mut x = buffer(kit, f, self.d_hid)?;
        self.shared.apply(kit, en, 1, f, &[f], &mut x)?;
        trace.emit(kit, "shared_lstm", &x)?;
        let branch = |blocks: &[AdainResBlk<B>], proj: &Conv1d<B>| -> Result<(B::Buf, usize)> {
            let mut n = f;
            let mut cur: Option<B::Buf> = None;
            for blk in blocks {
                let (out, m) = blk.apply(kit, cur.as_ref().unwrap_or(&x), n, style)?;
                cur = Some(out);
                n = m;
            }
            let mut out = buffer(kit, n, 1)?;
            proj.apply(kit, cur.as_ref().unwrap_or(&x), 1, n, &mut out)?;
            Ok((out, n))
        };
        let (f0, m) = branch(&self.f0, &self.f0_proj)?;
        let (n, _) = branch(&self.n, &self.n_proj)?;
        Ok((f0, n, m))
    }
}

/// Frames per token from the duration logits `[T, max_dur]`: `Σ sigmoid / speed`, rounded half to
/// even as `torch.round` does (2.5 → 2, 3.5 → 4), at least 1. Returns the unrounded values too.
pub fn frames_from_logits(logits: &[f32], max_dur: usize, speed: f32) -> (Vec<f32>, Vec<usize>) {
    let raw: Vec<f32> =
        logits.chunks(max_dur.max(1)).map(|row| row.iter().map(|&v| 1.0 / (1.0 + (-v).exp())).sum::<f32>() / speed).collect();
    let frames = raw.iter().map(|&v| v.round_ties_even().max(1.0) as usize).collect();
    (raw, frames)
}
