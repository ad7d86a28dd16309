//! The whole model: loading and the forward pass.

use std::collections::HashMap;
use std::path::Path;

use f5_gpukit::Backend;
use f5_nn::torch_rand::TorchGenerator;
use f5_nn::{Linear, WeightStorage, Weights};

use crate::albert::Albert;
use crate::blocks::buffer;
use crate::config::KokoroConfig;
use crate::decoder::Decoder;
use crate::prosody::Prosody;
use crate::text_encoder::TextEncoder;
use crate::voice::VoicePack;
use crate::{KokoroError, SourceSpectrum, Trace};

/// A Kokoro model with its weights on a device.
pub struct Kokoro<B: Backend> {
    kit: B,
    config: KokoroConfig,
    vocab: HashMap<char, u32>,
    albert: Albert<B>,
    bert_encoder: Linear<B>,
    predictor: Prosody<B>,
    text_encoder: TextEncoder<B>,
    decoder: Decoder<B>,
}

/// One forward's result.
#[derive(Clone, Debug)]
pub struct Speech {
    /// Mono samples at 24 kHz.
    pub audio: Vec<f32>,
    /// Frames (600 samples each) per token, pads included: the input to word timestamps.
    pub durations: Vec<usize>,
}

impl<B: Backend> Kokoro<B> {
    /// Opens a model directory (a checkpoint + `config.json`, the Hugging Face release layout) or
    /// a checkpoint file with `config.json` beside it, and uploads the weights to `kit`.
    pub fn open(path: impl AsRef<Path>, kit: B) -> Result<Self, KokoroError> {
        let path = path.as_ref();
        // The Hugging Face release names it kokoro-v1_0.pth; other layouts are a single file.
        let weights =
            if path.is_dir() { f5_nn::checkpoint_in(path, &["kokoro-v1_0.pth"], &["pth", "safetensors"])? } else { path.to_path_buf() };
        let config_path = weights.parent().map(|d| d.join("config.json")).filter(|p| p.is_file());
        let config_path =
            config_path.ok_or_else(|| KokoroError::Config(format!("{}: no config.json beside the checkpoint", weights.display())))?;
        let config = KokoroConfig::open(&config_path)?;
        let mut w = Weights::open(&weights)?;
        Self::from_weights(&mut w, config, kit)
    }

    /// Builds the model from opened weights (any of the layouts `Weights` reads: the release's
    /// `module.`-prefixed dict of five state dicts, the prefix stripped, parametrization names,
    /// safetensors).
    pub fn from_weights(w: &mut Weights, config: KokoroConfig, kit: B) -> Result<Self, KokoroError> {
        let c = &config;
        // The first half (ALBERT, durations, F0/N, text encoder) computes in f32 on a bf16
        // backend: in bf16 its F0 and N move by 3–10 % (rel-L2) and F0 steers the sine source's
        // phase over the whole utterance. It is 10–20 % of the forward; the decoder's convolutions
        // carry the bf16 speed-up. Past ALBERT its weights (22 M) are stored as f16 where the
        // backend can (the bf16 CPU backend: 45 MB less): on the int8-derived weights F0's and
        // N's rel-L2 against f32 stay at bf16's own 9.2e-4 / 3.5e-4 and no duration moves (the
        // short input, `kokoro_cpu_time`). ALBERT's own (6 M, each used by all 12 layers) keep
        // 16 bits: stored as f16 they double F0's and N's error (1.9e-3 / 6.7e-4). Where the CPU
        // has AMX its Linears run split into two bf16 parts per value on the tiles
        // (`upload_linear_weight_near_f32`, ~2⁻¹⁴ per product): ALBERT 1.8–2× faster, and on the
        // small random-weight model F0/N against f32 stay within 4 % of the f32 products' figures
        // (tests/bf16_cpu.rs); on the int8-derived weights F0 went 6.9e-4 → 1.0e-3 and N
        // 5.9e-4 → 4.4e-4, no duration moving (the short input). Elsewhere they are exact f32.
        // (On those CPUs attention is f32 too, `CpuBf16Backend::bf16_attention`: then F0 / N are
        // 4.0e-5 / 8.2e-5 short and 5.5e-5 / 9.4e-5 long, no duration moving on either.)
        w.set_storage(WeightStorage::NearF32);
        let albert = Albert::load(&mut w.scope("bert"), &kit, c.n_token, &c.plbert)?;
        w.set_storage(WeightStorage::F32Compact);
        let bert_encoder = Linear::load(&mut w.root(), &kit, "bert_encoder", c.hidden_dim, c.plbert.hidden_size)?;
        let predictor = Prosody::load(&mut w.scope("predictor"), &kit, c.hidden_dim, c.style_dim, c.n_layer, c.max_dur)?;
        let text_encoder =
            TextEncoder::load(&mut w.scope("text_encoder"), &kit, c.n_token, c.hidden_dim, c.text_encoder_kernel_size, c.n_layer)?;
        w.set_storage(WeightStorage::Fast);
        let decoder = Decoder::load(&mut w.scope("decoder"), &kit, c.hidden_dim, c.style_dim, &c.istftnet)?;
        Ok(Kokoro { vocab: config.char_vocab(), kit, albert, bert_encoder, predictor, text_encoder, decoder, config })
    }

    /// The model's `config.json` (read-only: the weights were shaped by it).
    pub fn config(&self) -> &KokoroConfig {
        &self.config
    }

    /// The backend the weights live on.
    pub fn kit(&self) -> &B {
        &self.kit
    }

    /// Phonemes → token ids, one Unicode scalar at a time; characters outside the vocabulary are
    /// dropped, as the reference drops them. Wrapped in the pad `[0, …, 0]`.
    pub fn tokens(&self, phonemes: &str) -> Result<Vec<u32>, KokoroError> {
        let count = phonemes.chars().count();
        if count == 0 {
            return Err(KokoroError::Input("no phonemes to speak".into()));
        }
        let ids: Vec<u32> = phonemes.chars().filter_map(|c| self.vocab.get(&c).copied()).collect();
        if ids.is_empty() {
            return Err(KokoroError::Input(format!("none of the {count} characters is a phoneme of this model")));
        }
        let max = self.config.max_phonemes();
        if ids.len() > max {
            return Err(KokoroError::Input(format!(
                "{} phonemes exceed the {max} one forward takes (ALBERT's {} positions less the two pads); split the text",
                ids.len(),
                self.config.plbert.max_position_embeddings
            )));
        }
        let mut out = Vec::with_capacity(ids.len() + 2);
        out.push(0);
        out.extend(ids);
        out.push(0);
        Ok(out)
    }

    /// Speaks a phoneme string in a voice: the voice row for the string's length (counted before
    /// vocabulary filtering, as the reference counts), `speed` (> 0; 1 is the voice's own pace)
    /// and `seed` for the source noise (`torch.manual_seed(seed)`'s stream: the same seed gives
    /// PyTorch's audio).
    pub fn speak(&self, phonemes: &str, voice: &VoicePack, speed: f32, seed: u64) -> Result<Speech, KokoroError> {
        let tokens = self.tokens(phonemes)?;
        let style = voice.style(phonemes.chars().count())?;
        self.forward(&tokens, style, speed, seed, Trace::off())
    }

    /// The forward for padded token ids and a 256-float style row: [`Kokoro::align`] then
    /// [`Kokoro::decode`].
    pub fn forward(&self, tokens: &[u32], style: &[f32], speed: f32, seed: u64, mut trace: Trace<'_>) -> Result<Speech, KokoroError> {
        let aligned = self.align(tokens, style, speed, &mut trace)?;
        let audio = self.decode(&aligned, style, seed, &mut trace)?;
        Ok(Speech { audio, durations: aligned.durations })
    }

    fn check_style(&self, style: &[f32]) -> Result<(), KokoroError> {
        if style.len() != 2 * self.config.style_dim {
            return Err(KokoroError::Input(format!("a style has {} values, this model takes {}", style.len(), 2 * self.config.style_dim)));
        }
        if style.iter().any(|v| !v.is_finite()) {
            return Err(KokoroError::Input("the style holds a value that is not a finite number".into()));
        }
        Ok(())
    }

    /// The first half of the forward (ALBERT, durations, alignment, F0/N, text encoder): padded
    /// tokens + style + speed → per-token frame counts and the decoder's inputs.
    pub fn align(&self, tokens: &[u32], style: &[f32], speed: f32, trace: &mut Trace<'_>) -> Result<Aligned<B>, KokoroError> {
        let kit = &self.kit;
        let c = &self.config;
        if !(speed.is_finite() && speed > 0.0) {
            return Err(KokoroError::Input(format!("speed {speed} must be a positive number")));
        }
        self.check_style(style)?;
        if tokens.len() < 2 || tokens.len() > c.plbert.max_position_embeddings {
            return Err(KokoroError::Input(format!("{} tokens: one forward takes 2..={}", tokens.len(), c.plbert.max_position_embeddings)));
        }
        if let Some(&bad) = tokens.iter().find(|&&t| t as usize >= c.n_token) {
            return Err(KokoroError::Input(format!("token {bad} is outside the vocabulary of {}", c.n_token)));
        }
        let t = tokens.len();
        let s_pro = kit.upload(&style[c.style_dim..])?;

        let bert = self.albert.forward(kit, tokens)?;
        trace.emit(kit, "bert", &bert)?;
        let mut d_en = buffer(kit, t, c.hidden_dim)?;
        self.bert_encoder.apply(kit, &bert, t, &mut d_en)?;
        drop(bert);
        trace.emit(kit, "d_en", &d_en)?;
        let dur = self.predictor.durations(kit, &d_en, t, &s_pro, speed, trace)?;
        trace.emit_host("duration_raw", dur.raw.clone());
        // Alignment as a gather: frame j reads the token it belongs to (repeat_interleave).
        let indices: Vec<u32> = dur.frames.iter().enumerate().flat_map(|(i, &n)| std::iter::repeat_n(i as u32, n)).collect();
        let f = indices.len();
        let wide = c.hidden_dim + c.style_dim;
        let mut en = buffer(kit, f, wide)?;
        kit.embedding(&dur.d, wide, &indices, &mut en)?;
        let (f0, n_curve, m) = self.predictor.f0_n(kit, &en, f, &s_pro, trace)?;
        drop(en);
        if m != 2 * f {
            return Err(KokoroError::Config(format!("the F0 branch gives {m} values for {f} frames; it must upsample ×2")));
        }
        trace.emit(kit, "F0", &f0)?;
        trace.emit(kit, "N", &n_curve)?;
        let t_en = self.text_encoder.forward(kit, tokens)?;
        trace.emit(kit, "t_en", &t_en)?;
        let mut asr = buffer(kit, f, c.hidden_dim)?;
        kit.embedding(&t_en, c.hidden_dim, &indices, &mut asr)?;
        drop(t_en);
        trace.emit(kit, "asr", &asr)?;
        Ok(Aligned { durations: dur.frames, frames: f, f0, n: n_curve, asr })
    }

    /// Decoder inputs given from outside (another implementation's, for a test that feeds the
    /// reference's own F0 to the source): `f0`/`n` of `2F` values, `asr` `[F, hidden_dim]`.
    pub fn aligned_from_host(&self, durations: Vec<usize>, f0: &[f32], n: &[f32], asr: &[f32]) -> Result<Aligned<B>, KokoroError> {
        let f = durations.iter().sum::<usize>();
        if f0.len() != 2 * f || n.len() != 2 * f || asr.len() != f * self.config.hidden_dim {
            return Err(KokoroError::Input(format!(
                "for {f} frames the decoder takes 2F = {} F0 and N values and F × {} features",
                2 * f,
                self.config.hidden_dim
            )));
        }
        let kit = &self.kit;
        Ok(Aligned { durations, frames: f, f0: kit.upload(f0)?, n: kit.upload(n)?, asr: kit.upload(asr)? })
    }

    /// The second half (decoder, source, generator, inverse STFT): the aligned features and the
    /// style's acoustic half → 24 kHz samples. `seed` seeds the source noise as
    /// `torch.manual_seed(seed)` does.
    pub fn decode(&self, aligned: &Aligned<B>, style: &[f32], seed: u64, trace: &mut Trace<'_>) -> Result<Vec<f32>, KokoroError> {
        self.decode_inner(aligned, style, seed, None, trace)
    }

    /// [`Kokoro::decode`] with the source's spectrum given instead of generated from F0 (parity
    /// tests only: hidden from the documented API).
    #[doc(hidden)]
    pub fn decode_with_spectrum(
        &self,
        aligned: &Aligned<B>,
        style: &[f32],
        spectrum: &SourceSpectrum,
        trace: &mut Trace<'_>,
    ) -> Result<Vec<f32>, KokoroError> {
        self.decode_inner(aligned, style, 0, Some(spectrum), trace)
    }

    fn decode_inner(
        &self,
        aligned: &Aligned<B>,
        style: &[f32],
        seed: u64,
        spectrum: Option<&SourceSpectrum>,
        trace: &mut Trace<'_>,
    ) -> Result<Vec<f32>, KokoroError> {
        self.check_style(style)?;
        let c = &self.config;
        let s_dec = self.kit.upload(&style[..c.style_dim])?;
        let mut rng = TorchGenerator::new(seed);
        self.decoder.forward(
            &self.kit,
            &aligned.asr,
            c.hidden_dim,
            aligned.frames,
            &aligned.f0,
            &aligned.n,
            &s_dec,
            &mut rng,
            spectrum,
            trace,
        )
    }
}

/// The first half's results: frames per token and the decoder's inputs, on the device.
pub struct Aligned<B: Backend> {
    /// Frames (600 samples each) per token, pads included.
    pub durations: Vec<usize>,
    frames: usize,
    f0: B::Buf,
    n: B::Buf,
    asr: B::Buf,
}

impl<B: Backend> Aligned<B> {
    /// Total frames `F` (the audio is `600·F` samples for the release).
    pub fn frames(&self) -> usize {
        self.frames
    }
}
