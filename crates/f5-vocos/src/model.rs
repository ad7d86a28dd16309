//! The Vocos forward pass, written once against the kit.
//!
//! Activations are channels-last `[frames, channels]` throughout, which is both the layout the
//! caller's mel comes in and the one the kit's convolutions, norms and GEMMs take, so nothing
//! is transposed. Only the spectrum leaves the device; the inverse STFT runs on the host.

use std::path::{Path, PathBuf};

use f5_gpukit::{Activation, Backend, Conv1dSpec, Linear};
use f5_torchpt::Checkpoint;

use crate::config::VocosConfig;
use crate::istft::IstftPlan;
use crate::VocosError;

/// LayerNorm epsilon of every Vocos norm.
const EPS: f32 = 1e-6;

/// The head clips magnitudes after `exp`, so an overflowing log-magnitude gives this, not inf.
const MAG_MAX: f32 = 100.0;

struct Block<B: Backend> {
    dw_w: B::Buf,
    dw_b: B::Buf,
    norm_w: B::Buf,
    norm_b: B::Buf,
    pw1: Linear<B>,
    pw2: Linear<B>,
    /// Layer scale; `None` when the model was built without it (branch added unscaled).
    gamma: Option<B::Buf>,
}

/// A one-sided complex spectrum, real and imaginary parts each `[frames, bins]` row-major.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Spectrum {
    pub re: Vec<f32>,
    pub im: Vec<f32>,
    pub frames: usize,
    pub bins: usize,
}

/// A Vocos mel vocoder with its weights on a device.
pub struct Vocos<B: Backend> {
    kit: B,
    config: VocosConfig,
    embed_w: B::Buf,
    embed_b: B::Buf,
    norm_w: B::Buf,
    norm_b: B::Buf,
    blocks: Vec<Block<B>>,
    final_w: B::Buf,
    final_b: B::Buf,
    head: Linear<B>,
    istft: IstftPlan,
}

struct Loader<'a, B: Backend> {
    kit: &'a B,
    ckpt: &'a Checkpoint,
    prefix: &'a str,
}

impl<B: Backend> Loader<'_, B> {
    fn tensor(&self, name: &str, shape: &[usize]) -> Result<B::Buf, VocosError> {
        let full = format!("{}{name}", self.prefix);
        let meta = self
            .ckpt
            .meta(&full)
            .map_err(|_| VocosError::Missing { path: self.ckpt.path().display().to_string(), tensor: full.clone() })?;
        if meta.shape() != shape {
            return Err(VocosError::Shape { tensor: full, detail: format!("found {:?}, the architecture needs {shape:?}", meta.shape()) });
        }
        Ok(self.kit.upload(&self.ckpt.read_f32(&full)?)?)
    }

    fn linear(&self, name: &str, out: usize, inp: usize) -> Result<Linear<B>, VocosError> {
        Ok(Linear {
            weight: self.tensor(&format!("{name}.weight"), &[out, inp])?,
            bias: self.tensor(&format!("{name}.bias"), &[out])?,
            out,
            inp,
        })
    }
}

/// The weight file inside a Vocos directory: `pytorch_model.bin` as charactr publishes it,
/// else `model.safetensors`, else the directory's only `*.safetensors`.
fn weights_in(dir: &Path) -> Result<PathBuf, VocosError> {
    for name in ["pytorch_model.bin", "model.safetensors"] {
        let p = dir.join(name);
        if p.is_file() {
            return Ok(p);
        }
    }
    let listing = std::fs::read_dir(dir).map_err(|e| VocosError::Config(format!("{}: {e}", dir.display())))?;
    let mut st: Vec<PathBuf> = listing
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file() && p.extension().is_some_and(|e| e == "safetensors"))
        .collect();
    st.sort();
    match st.len() {
        1 => Ok(st.remove(0)),
        0 => Err(VocosError::Config(format!("{}: no pytorch_model.bin or *.safetensors in this directory", dir.display()))),
        _ => Err(VocosError::Config(format!("{}: several *.safetensors files ({st:?}); pass the one to load", dir.display()))),
    }
}

impl<B: Backend> Vocos<B> {
    /// Opens a Vocos directory (`pytorch_model.bin` or a `.safetensors`, with `config.yaml`) or
    /// a weight file, and uploads the weights to `kit`. The architecture comes from the shapes;
    /// hop and sample rate from a `config.yaml` beside the weights when there is one, else
    /// charactr's defaults ([`VocosConfig::hop_source`] tells which).
    pub fn open(path: impl AsRef<Path>, kit: B) -> Result<Self, VocosError> {
        let path = path.as_ref();
        let weights = if path.is_dir() { weights_in(path)? } else { path.to_path_buf() };
        let ckpt = Checkpoint::open(&weights)?;
        let yaml = weights.parent().map(|d| d.join("config.yaml")).filter(|p| p.is_file());
        let config = VocosConfig::infer(&ckpt, yaml.as_deref())?;
        Self::from_checkpoint(&ckpt, config, kit)
    }

    /// Uploads the weights of an already opened checkpoint with a known architecture.
    pub fn from_checkpoint(ckpt: &Checkpoint, config: VocosConfig, kit: B) -> Result<Self, VocosError> {
        let c = &config;
        let l = Loader { kit: &kit, ckpt, prefix: &c.prefix };
        let d = c.dim;
        let blocks = (0..c.layers)
            .map(|i| {
                let p = format!("backbone.convnext.{i}");
                Ok(Block {
                    dw_w: l.tensor(&format!("{p}.dwconv.weight"), &[d, 1, c.block_kernel])?,
                    dw_b: l.tensor(&format!("{p}.dwconv.bias"), &[d])?,
                    norm_w: l.tensor(&format!("{p}.norm.weight"), &[d])?,
                    norm_b: l.tensor(&format!("{p}.norm.bias"), &[d])?,
                    pw1: l.linear(&format!("{p}.pwconv1"), c.intermediate, d)?,
                    pw2: l.linear(&format!("{p}.pwconv2"), d, c.intermediate)?,
                    gamma: if c.layer_scale { Some(l.tensor(&format!("{p}.gamma"), &[d])?) } else { None },
                })
            })
            .collect::<Result<Vec<_>, VocosError>>()?;
        Ok(Vocos {
            embed_w: l.tensor("backbone.embed.weight", &[d, c.mel_channels, c.embed_kernel])?,
            embed_b: l.tensor("backbone.embed.bias", &[d])?,
            norm_w: l.tensor("backbone.norm.weight", &[d])?,
            norm_b: l.tensor("backbone.norm.bias", &[d])?,
            blocks,
            final_w: l.tensor("backbone.final_layer_norm.weight", &[d])?,
            final_b: l.tensor("backbone.final_layer_norm.bias", &[d])?,
            head: l.linear("head.out", c.n_fft + 2, d)?,
            istft: IstftPlan::new(c.n_fft, c.hop)?,
            config,
            kit,
        })
    }

    pub fn config(&self) -> &VocosConfig {
        &self.config
    }

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
        // Four activations reused by every block: the residual stream, two [n, dim] scratch
        // buffers and the wide one; then the head output and the spectrum.
        let mut stream = kit.alloc(size(d)?)?;
        let mut branch = kit.alloc(size(d)?)?;
        let mut normed = kit.alloc(size(d)?)?;
        let mut wide = kit.alloc(size(c.intermediate.max(1))?)?;

        let embed = Conv1dSpec { batch: 1, n, c_in: c.mel_channels, c_out: d, kernel: c.embed_kernel, pad: c.embed_kernel / 2, groups: 1 };
        kit.conv1d(&embed, &x_in, &self.embed_w, Some(&self.embed_b), &mut branch)?;
        drop(x_in);
        kit.layer_norm(&branch, n, d, EPS, Some((&self.norm_w, &self.norm_b)), &mut stream)?;
        let dw = Conv1dSpec { batch: 1, n, c_in: d, c_out: d, kernel: c.block_kernel, pad: c.block_kernel / 2, groups: d };
        for blk in &self.blocks {
            kit.conv1d(&dw, &stream, &blk.dw_w, Some(&blk.dw_b), &mut branch)?;
            kit.layer_norm(&branch, n, d, EPS, Some((&blk.norm_w, &blk.norm_b)), &mut normed)?;
            blk.pw1.apply(kit, &normed, n, &mut wide)?;
            kit.activation(Activation::GeluErf, &mut wide, n * c.intermediate)?;
            blk.pw2.apply(kit, &wide, n, &mut branch)?;
            match &blk.gamma {
                Some(g) => kit.gated_add(&mut stream, &branch, n, d, g, 0)?,
                None => kit.axpy(1.0, &branch, &mut stream, n * d)?,
            }
        }
        drop(wide);
        kit.layer_norm(&stream, n, d, EPS, Some((&self.final_w, &self.final_b)), &mut normed)?;
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
