//! `config.json` of a Kokoro checkpoint: every size the architecture reads, and the phoneme
//! vocabulary.

use std::collections::HashMap;
use std::path::Path;

use serde::Deserialize;

use crate::KokoroError;

/// The ALBERT text model's sizes (`plbert` in config.json; `AlbertConfig` defaults fill the rest).
#[derive(Clone, Debug, Deserialize)]
pub struct AlbertSizes {
    /// Width of ALBERT's hidden states (768 in the release).
    pub hidden_size: usize,
    /// Attention heads per layer.
    pub num_attention_heads: usize,
    /// Hidden width of each layer's feed-forward.
    pub intermediate_size: usize,
    /// Rows of the position table: the longest token sequence one forward takes.
    pub max_position_embeddings: usize,
    /// Layers (ALBERT shares one set of weights across them).
    pub num_hidden_layers: usize,
    /// `AlbertConfig`'s default.
    #[serde(default = "default_embedding_size")]
    pub embedding_size: usize,
}

fn default_embedding_size() -> usize {
    128
}

/// The ISTFTNet generator's sizes.
#[derive(Clone, Debug, Deserialize)]
pub struct IstftNetSizes {
    /// Upsampling factor of each transposed convolution of the generator.
    pub upsample_rates: Vec<usize>,
    /// Kernel of each upsampling convolution.
    pub upsample_kernel_sizes: Vec<usize>,
    /// Channels entering the first upsampling stage (halved at each).
    pub upsample_initial_channel: usize,
    /// Kernels of the residual blocks run after each upsampling.
    pub resblock_kernel_sizes: Vec<usize>,
    /// Dilations of each residual block's convolutions.
    pub resblock_dilation_sizes: Vec<Vec<usize>>,
    /// FFT size of the inverse STFT that turns the generator's output into samples.
    pub gen_istft_n_fft: usize,
    /// Hop of that inverse STFT.
    pub gen_istft_hop_size: usize,
}

/// A Kokoro `config.json`.
#[derive(Clone, Debug, Deserialize)]
pub struct KokoroConfig {
    /// Rows of the phoneme embedding tables (token ids are below this).
    pub n_token: usize,
    /// Width of the text features after `bert_encoder` (512 in the release).
    pub hidden_dim: usize,
    /// Half of a voice style vector (128): one half styles the decoder, the other the prosody.
    pub style_dim: usize,
    /// Layers of the prosody predictor's duration encoder, and the text encoder's convolution depth.
    pub n_layer: usize,
    /// Duration classes per phoneme (the most frames one phoneme can get).
    pub max_dur: usize,
    /// Kernel of the text encoder's convolutions.
    pub text_encoder_kernel_size: usize,
    /// The ALBERT text model's sizes.
    pub plbert: AlbertSizes,
    /// The ISTFTNet generator's sizes.
    pub istftnet: IstftNetSizes,
    /// Phoneme (one Unicode scalar) → token id.
    pub vocab: HashMap<String, u32>,
}

impl KokoroConfig {
    /// Parses `config.json` text and refuses sizes no model could have (before any weight is read).
    pub fn from_json(text: &str) -> Result<Self, KokoroError> {
        let c: KokoroConfig = serde_json::from_str(text).map_err(|e| KokoroError::Config(format!("config.json: {e}")))?;
        c.check()?;
        Ok(c)
    }

    /// Reads and checks a `config.json` file.
    pub fn open(path: &Path) -> Result<Self, KokoroError> {
        let text = std::fs::read_to_string(path).map_err(|e| KokoroError::Config(format!("{}: {e}", path.display())))?;
        Self::from_json(&text).map_err(|e| match e {
            KokoroError::Config(m) => KokoroError::Config(format!("{}: {m}", path.display())),
            other => other,
        })
    }

    /// The vocabulary as a map from character to id.
    pub fn char_vocab(&self) -> HashMap<char, u32> {
        self.vocab.iter().filter_map(|(k, &v)| single_char(k).map(|c| (c, v))).collect()
    }

    fn check(&self) -> Result<(), KokoroError> {
        let bad = |m: String| Err(KokoroError::Config(m));
        if let Some((k, _)) = self.vocab.iter().find(|(k, _)| single_char(k).is_none()) {
            return bad(format!("vocab key {k:?} is not one character"));
        }
        if let Some((k, v)) = self.vocab.iter().find(|(_, &v)| v == 0 || v as usize >= self.n_token) {
            return bad(format!("vocab {k:?} → {v} is outside 1..{} (0 is the pad)", self.n_token));
        }
        let p = &self.plbert;
        if p.num_attention_heads == 0 || !p.hidden_size.is_multiple_of(p.num_attention_heads) {
            return bad(format!("plbert hidden_size {} is not a multiple of {} heads", p.hidden_size, p.num_attention_heads));
        }
        if p.max_position_embeddings < 3 {
            return bad("plbert max_position_embeddings must leave room for the pads".into());
        }
        let i = &self.istftnet;
        if i.upsample_rates.len() != i.upsample_kernel_sizes.len() || i.upsample_rates.is_empty() {
            return bad("istftnet upsample_rates and upsample_kernel_sizes must be non-empty and of one length".into());
        }
        if i.resblock_kernel_sizes.len() != i.resblock_dilation_sizes.len() || i.resblock_kernel_sizes.is_empty() {
            return bad("istftnet resblock_kernel_sizes and resblock_dilation_sizes must be non-empty and of one length".into());
        }
        if i.gen_istft_n_fft < 2 || !i.gen_istft_n_fft.is_multiple_of(2) || i.gen_istft_hop_size == 0 {
            return bad(format!("istftnet n_fft {} must be even, hop {} positive", i.gen_istft_n_fft, i.gen_istft_hop_size));
        }
        if !self.hidden_dim.is_multiple_of(2) || self.hidden_dim == 0 || self.style_dim == 0 || self.max_dur == 0 {
            return bad("hidden_dim must be even and positive; style_dim and max_dur positive".into());
        }
        Ok(())
    }

    /// The most phonemes one forward takes: ALBERT's positions less the two pads (510 for the
    /// release). Never a smaller cap: a cut at fewer positions restarts the intonation mid-sentence.
    pub fn max_phonemes(&self) -> usize {
        self.plbert.max_position_embeddings - 2
    }

    /// Samples per predicted frame: the generator's upsampling × the iSTFT hop (600 for the release).
    pub fn samples_per_frame(&self) -> usize {
        // The predictor's F0 runs at twice the frame rate; the generator input too.
        2 * self.istftnet.upsample_rates.iter().product::<usize>() * self.istftnet.gen_istft_hop_size
    }
}

fn single_char(s: &str) -> Option<char> {
    let mut it = s.chars();
    let c = it.next()?;
    it.next().is_none().then_some(c)
}
