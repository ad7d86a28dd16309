//! The Vocos forward pass, written once against the kit.
//!
//! Activations are channels-last `[frames, channels]` throughout, which is both the layout the
//! caller's mel comes in and the one the kit's convolutions, norms and GEMMs take, so nothing
//! is transposed. Only the spectrum leaves the device; the inverse STFT runs on the host.

use std::path::Path;

use f5_gpukit::{Backend, Conv1dSpec};
use f5_nn::{Conv1d, ConvNeXtBlock, LayerNorm, Linear, NnError, Weights};
use f5_torchpt::Checkpoint;

use crate::config::VocosConfig;
use crate::istft::IstftPlan;
use crate::VocosError;

/// LayerNorm epsilon of every Vocos norm.
const EPS: f32 = 1e-6;

/// The head clips magnitudes after `exp`, so an overflowing log-magnitude gives this, not inf.
const MAG_MAX: f32 = 100.0;

/// A one-sided complex spectrum, real and imaginary parts each `[frames, bins]` row-major.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Spectrum {
    /// Real parts.
    pub re: Vec<f32>,
    /// Imaginary parts.
    pub im: Vec<f32>,
    /// Frames (one per mel frame).
    pub frames: usize,
    /// Bins per frame (`n_fft/2 + 1`).
    pub bins: usize,
}

/// A Vocos mel vocoder with its weights on a device.
pub struct Vocos<B: Backend> {
    kit: B,
    config: VocosConfig,
    embed: Conv1d<B>,
    norm: LayerNorm<B>,
    blocks: Vec<ConvNeXtBlock<B>>,
    final_norm: LayerNorm<B>,
    head: Linear<B>,
    istft: IstftPlan,
}

impl From<NnError> for VocosError {
    fn from(e: NnError) -> Self {
        match e {
            NnError::Missing { path, tensor } => VocosError::Missing { path, tensor },
            NnError::Shape { tensor, detail, .. } => VocosError::Shape { tensor, detail },
            NnError::Checkpoint(e) => VocosError::from(e),
            NnError::Kit(e) => VocosError::from(e),
            other @ (NnError::Ambiguous { .. } | NnError::NoCheckpoint { .. }) => VocosError::Config(other.to_string()),
        }
    }
}

impl<B: Backend> Vocos<B> {
    /// Opens a Vocos directory (`pytorch_model.bin` or a `.safetensors`, with `config.yaml`) or
    /// a weight file, and uploads the weights to `kit`. The architecture comes from the shapes;
    /// hop and sample rate from a `config.yaml` beside the weights when there is one, else
    /// charactr's defaults ([`VocosConfig::hop_source`] tells which).
    pub fn open(path: impl AsRef<Path>, kit: B) -> Result<Self, VocosError> {
        let path = path.as_ref();
        // charactr publishes `pytorch_model.bin`; exports are a single `.safetensors`.
        let weights = if path.is_dir() {
            f5_nn::checkpoint_in(path, &["pytorch_model.bin", "model.safetensors"], &["safetensors"])?
        } else {
            path.to_path_buf()
        };
        let ckpt = Checkpoint::open(&weights)?;
        let yaml = weights.parent().map(|d| d.join("config.yaml")).filter(|p| p.is_file());
        let config = VocosConfig::infer(&ckpt, yaml.as_deref())?;
        Self::from_checkpoint(ckpt, config, kit)
    }

    /// Uploads the weights of an already opened checkpoint with a known architecture; each
    /// tensor's mapped pages are dropped once copied.
    pub fn from_checkpoint(ckpt: Checkpoint, config: VocosConfig, kit: B) -> Result<Self, VocosError> {
        let istft = IstftPlan::new(config.n_fft, config.hop)?;
        let mut weights = Weights::from_checkpoint(ckpt)?;
        Ok(Self::load(&mut weights, config, istft, kit)?)
    }

    fn load(weights: &mut Weights, config: VocosConfig, istft: IstftPlan, kit: B) -> Result<Self, NnError> {
        let c = &config;
        let mut l = weights.scope(c.prefix.trim_end_matches('.'));
        let d = c.dim;
        let blocks = (0..c.layers)
            .map(|i| {
                let name = format!("backbone.convnext.{i}");
                let blk = ConvNeXtBlock::load(&mut l, &kit, &name, d, c.intermediate, c.block_kernel)?;
                if c.layer_scale && blk.gamma.is_none() {
                    return Err(l.missing(&format!("{name}.gamma")));
                }
                Ok(blk)
            })
            .collect::<Result<Vec<_>, NnError>>()?;
        let embed_spec = Conv1dSpec::new(1, 0, c.mel_channels, d, c.embed_kernel).pad(c.embed_kernel / 2);
        Ok(Vocos {
            embed: Conv1d::load(&mut l, &kit, "backbone.embed", embed_spec, true)?,
            norm: LayerNorm::load(&mut l, &kit, "backbone.norm", d, EPS)?,
            blocks,
            final_norm: LayerNorm::load(&mut l, &kit, "backbone.final_layer_norm", d, EPS)?,
            head: Linear::load(&mut l, &kit, "head.out", c.n_fft + 2, d)?,
            istft,
            config,
            kit,
        })
    }

    /// The architecture, as read from the checkpoint and its `config.yaml`.
    pub fn config(&self) -> &VocosConfig {
        &self.config
    }

    /// The backend the weights live on.
    pub fn kit(&self) -> &B {
        &self.kit
    }

    /// Samples [`Vocos::decode`] returns for `frames` mel frames: `hop·(frames − 1)`.
    pub fn output_len(&self, frames: usize) -> usize {
        self.istft.output_len(frames)
    }

    /// Checks a mel `[frames, mel_channels]` before any work is done on it, so that bad input is
    /// reported in its own terms rather than as a shape error deep in the kit.
    pub fn check_mel(&self, mel: &[f32], frames: usize) -> Result<(), VocosError> {
        let ch = self.config.mel_channels;
        if frames < 2 {
            return Err(VocosError::Input(format!(
                "the vocoder needs at least 2 mel frames, got {frames}: with center=True a single frame decodes to no samples and the reference (torch.istft) refuses it"
            )));
        }
        if mel.len().is_multiple_of(frames) && mel.len() / frames != ch {
            return Err(VocosError::Input(format!(
                "mel has {} channels per frame ({} values / {frames} frames), the vocoder takes {ch}",
                mel.len() / frames,
                mel.len()
            )));
        }
        if !mel.len().is_multiple_of(ch) {
            return Err(VocosError::Input(format!("mel has {} values, not a multiple of the {ch} mel channels", mel.len())));
        }
        if mel.len() / ch != frames {
            return Err(VocosError::Input(format!(
                "mel holds {} frames of {ch} channels, but {frames} frames were stated",
                mel.len() / ch
            )));
        }
        if let Some(i) = mel.iter().position(|v| !v.is_finite()) {
            return Err(VocosError::NonFinite { frame: i / ch, channel: i % ch, value: mel[i] });
        }
        Ok(())
    }

    /// The head's complex spectrum for a log-mel `[frames, mel_channels]` (row-major): the
    /// whole network, without the inverse STFT.
    pub fn spectrum(&self, mel: &[f32], frames: usize) -> Result<Spectrum, VocosError> {
        self.check_mel(mel, frames)?;
        let kit = &self.kit;
        let c = &self.config;
        let (d, n, bins) = (c.dim, frames, c.bins());
        // Sizes derive from the caller's slice and the weights; refuse rather than wrap.
        let size = |width: usize| n.checked_mul(width).ok_or_else(|| VocosError::Input(format!("{n} frames × {width} features overflows")));
        let x_in = kit.upload(mel)?;
        // The residual stream and one [n, dim] scratch, plus the blocks' own scratch; then the
        // head output and the spectrum.
        let mut stream = kit.alloc(size(d)?)?;
        let mut normed = kit.alloc(size(d)?)?;
        self.embed.apply(kit, &x_in, 1, n, &mut normed)?;
        drop(x_in);
        self.norm.apply(kit, &normed, n, &mut stream)?;
        if let Some(first) = self.blocks.first() {
            let mut scratch = first.scratch(kit, n)?;
            for blk in &self.blocks {
                blk.apply(kit, &mut stream, n, &mut scratch)?;
            }
        }
        self.final_norm.apply(kit, &stream, n, &mut normed)?;
        let mut head = kit.alloc(size(c.n_fft + 2)?)?;
        self.head.apply(kit, &normed, n, &mut head)?;
        let mut re = kit.alloc(size(bins)?)?;
        let mut im = kit.alloc(size(bins)?)?;
        kit.polar_spectrum(&head, n, bins, MAG_MAX, &mut re, &mut im)?;
        Ok(Spectrum { re: kit.download(&re)?, im: kit.download(&im)?, frames: n, bins })
    }

    /// Decodes a natural-log mel `[frames, mel_channels]` (row-major, F5's layout) into
    /// `hop·(frames − 1)` samples at [`VocosConfig::sample_rate`], as
    /// `vocos.decode(mel.T[None])[0]` does.
    pub fn decode(&self, mel: &[f32], frames: usize) -> Result<Vec<f32>, VocosError> {
        let s = self.spectrum(mel, frames)?;
        self.istft.process(&s.re, &s.im, s.frames)
    }

    /// The inverse STFT this model ends with, for callers that hold a spectrum themselves.
    pub fn istft_plan(&self) -> &IstftPlan {
        &self.istft
    }
}
