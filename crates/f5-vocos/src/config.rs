//! The architecture of a Vocos checkpoint, read from its tensor shapes, plus what shapes cannot
//! show (the hop length and the sample rate) from the `config.yaml` Vocos ships beside its
//! weights.
//!
//! Shapes give the mel channel count, the backbone width, the ConvNeXt width and depth, the
//! kernels, whether blocks carry a layer-scale `gamma`, and `n_fft` (the head predicts
//! `n_fft/2 + 1` log-magnitudes and as many phases). The hop only matters in the inverse STFT
//! and has no tensor; without a config it defaults to charactr's 256 and
//! [`VocosConfig::hop_source`] says so. A config that contradicts the shapes is refused rather
//! than half-believed.

use std::path::{Path, PathBuf};

use f5_torchpt::Checkpoint;
use yaml_rust2::Yaml;

use crate::istft::MAX_N_FFT;
use crate::VocosError;

/// charactr/vocos-mel-24khz: 256-sample hop at 24 kHz (F5-TTS's mel frame rate).
pub const DEFAULT_HOP: usize = 256;
/// charactr/vocos-mel-24khz's output rate, assumed when no `config.yaml` says otherwise.
pub const DEFAULT_SAMPLE_RATE: u32 = 24_000;

/// A `config.yaml` is a few hundred bytes; a larger file is not one.
const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// Where the hop length (and sample rate) came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HopSource {
    /// The Vocos `config.yaml` at this path.
    Yaml(PathBuf),
    /// No config beside the weights: [`DEFAULT_HOP`] and [`DEFAULT_SAMPLE_RATE`] assumed.
    Default,
}

/// Everything the forward pass needs to know about a Vocos checkpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VocosConfig {
    /// What every tensor name starts with before `backbone.`/`head.` (empty for Vocos' own
    /// `pytorch_model.bin`; a wrapper's `vocoder.` or similar otherwise).
    pub prefix: String,
    /// Mel channels the vocoder takes (100; must match the acoustic model's).
    pub mel_channels: usize,
    /// Width of the ConvNeXt backbone.
    pub dim: usize,
    /// Hidden width of each block's pointwise layers.
    pub intermediate: usize,
    /// ConvNeXt blocks.
    pub layers: usize,
    /// Kernel of the input convolution (7 in Vocos; padded by kernel/2 to keep the length).
    pub embed_kernel: usize,
    /// Kernel of each block's depthwise convolution (7 in Vocos).
    pub block_kernel: usize,
    /// Whether the blocks scale their branch by a learned `gamma` before the residual add
    /// (Vocos' `layer_scale_init_value`; absent when that was `None`).
    pub layer_scale: bool,
    /// FFT size of the head's inverse STFT (its output is `n_fft/2 + 1` bins).
    pub n_fft: usize,
    /// Samples per mel frame.
    pub hop: usize,
    /// Output sample rate.
    pub sample_rate: u32,
    /// Where `hop` and `sample_rate` came from.
    pub hop_source: HopSource,
    /// Trainable parameters (the feature extractor's and the iSTFT's buffers excluded).
    pub params: usize,
}

impl VocosConfig {
    /// Bins of the one-sided spectrum the head predicts: `n_fft/2 + 1`.
    pub fn bins(&self) -> usize {
        self.n_fft / 2 + 1
    }

    /// Reads the architecture of `ckpt`; `yaml` is a Vocos `config.yaml` to take the hop and
    /// sample rate from (and to check the shapes against), or `None` for the defaults.
    pub fn infer(ckpt: &Checkpoint, yaml: Option<&Path>) -> Result<VocosConfig, VocosError> {
        let prefix = find_prefix(ckpt)?;
        let path = ckpt.path().display().to_string();
        let dims = |name: &str, rank: usize| -> Result<Vec<usize>, VocosError> {
            let full = format!("{prefix}{name}");
            let meta = ckpt.meta(&full).map_err(|_| VocosError::Missing { path: path.clone(), tensor: full.clone() })?;
            let s = meta.shape().to_vec();
            if s.len() != rank {
                return Err(VocosError::Shape { tensor: full, detail: format!("expected {rank} dimensions, found {s:?}") });
            }
            Ok(s)
        };
        let odd_kernel = |name: &str, k: usize| -> Result<usize, VocosError> {
            if k % 2 == 1 {
                Ok(k)
            } else {
                Err(VocosError::Shape {
                    tensor: format!("{prefix}{name}"),
                    detail: format!("kernel {k} is even; a length-preserving k/2 padding needs an odd kernel"),
                })
            }
        };

        let embed = dims("backbone.embed.weight", 3)?;
        let (dim, mel_channels) = (embed[0], embed[1]);
        let embed_kernel = odd_kernel("backbone.embed.weight", embed[2])?;
        let layers = (0..).take_while(|i| ckpt.contains(&format!("{prefix}backbone.convnext.{i}.dwconv.weight"))).count();
        let (intermediate, block_kernel, layer_scale) = if layers > 0 {
            let dw = dims("backbone.convnext.0.dwconv.weight", 3)?;
            let k = odd_kernel("backbone.convnext.0.dwconv.weight", dw[2])?;
            let inter = dims("backbone.convnext.0.pwconv1.weight", 2)?[0];
            (inter, k, ckpt.contains(&format!("{prefix}backbone.convnext.0.gamma")))
        } else {
            (0, 1, false)
        };
        let head = dims("head.out.weight", 2)?;
        let rows = head[0];
        if rows < 4 || !rows.is_multiple_of(2) || rows - 2 > MAX_N_FFT || head[1] != dim {
            return Err(VocosError::Shape {
                tensor: format!("{prefix}head.out.weight"),
                detail: format!(
                    "found {head:?}; an iSTFT head is [n_fft + 2, dim] = [2·bins, {dim}] with an even n_fft of at most {MAX_N_FFT}"
                ),
            });
        }
        let n_fft = rows - 2;
        if ckpt.contains(&format!("{prefix}backbone.norm.scale.weight")) {
            return Err(VocosError::Config(format!(
                "{path}: this Vocos conditions its LayerNorms on a bandwidth id (adanorm, the EnCodec variant); only the mel vocoder is supported"
            )));
        }
        let params = ckpt
            .names()
            .filter(|n| n.strip_prefix(prefix.as_str()).is_some_and(|rest| rest.starts_with("backbone.") || rest.starts_with("head.out.")))
            .filter_map(|n| ckpt.meta(n).ok())
            .map(|m| m.numel())
            .sum();

        let mut config = VocosConfig {
            prefix,
            mel_channels,
            dim,
            intermediate,
            layers,
            embed_kernel,
            block_kernel,
            layer_scale,
            n_fft,
            hop: DEFAULT_HOP,
            sample_rate: DEFAULT_SAMPLE_RATE,
            hop_source: HopSource::Default,
            params,
        };
        if let Some(yaml) = yaml {
            config.apply_yaml(yaml)?;
        }
        if config.hop == 0 || config.hop > config.n_fft {
            return Err(VocosError::Config(format!("hop {} must be in 1..={} (n_fft)", config.hop, config.n_fft)));
        }
        Ok(config)
    }

    /// Takes hop and sample rate from a Vocos `config.yaml` and checks everything else it states
    /// against the shapes.
    fn apply_yaml(&mut self, path: &Path) -> Result<(), VocosError> {
        let at = path.display();
        let size = std::fs::metadata(path).map_err(|e| VocosError::Config(format!("{at}: {e}")))?.len();
        if size > MAX_CONFIG_BYTES {
            return Err(VocosError::Config(format!("{at}: {size} bytes is too large for a Vocos config")));
        }
        let text = std::fs::read_to_string(path).map_err(|e| VocosError::Config(format!("{at}: {e}")))?;
        let docs = yaml_rust2::YamlLoader::load_from_str(&text).map_err(|e| VocosError::Config(format!("{at}: {e}")))?;
        let doc = docs.first().ok_or_else(|| VocosError::Config(format!("{at}: empty YAML")))?;

        let head = &doc["head"];
        let backbone = &doc["backbone"];
        if let Some(class) = head["class_path"].as_str() {
            if !class.ends_with("ISTFTHead") {
                return Err(VocosError::Config(format!("{at}: head {class} is not supported; only ISTFTHead (mel Vocos) is")));
            }
        }
        if let Some(class) = backbone["class_path"].as_str() {
            if !class.ends_with("VocosBackbone") {
                return Err(VocosError::Config(format!("{at}: backbone {class} is not supported; only VocosBackbone is")));
            }
        }
        let head_args = &head["init_args"];
        let backbone_args = &backbone["init_args"];
        if let Some(padding) = head_args["padding"].as_str() {
            if padding != "center" {
                return Err(VocosError::Config(format!(
                    "{at}: head padding {padding:?} is not supported; only \"center\" (torch.istft, as in vocos-mel-24khz) is"
                )));
            }
        }
        if !matches!(backbone_args["adanorm_num_embeddings"], Yaml::BadValue | Yaml::Null) {
            return Err(VocosError::Config(format!(
                "{at}: adanorm_num_embeddings is set; only the unconditioned mel vocoder is supported"
            )));
        }
        let checks = [
            ("head.init_args.n_fft", &head_args["n_fft"], self.n_fft),
            ("head.init_args.dim", &head_args["dim"], self.dim),
            ("backbone.init_args.dim", &backbone_args["dim"], self.dim),
            ("backbone.init_args.input_channels", &backbone_args["input_channels"], self.mel_channels),
            ("backbone.init_args.num_layers", &backbone_args["num_layers"], self.layers),
        ];
        for (key, value, from_shapes) in checks {
            if let Some(stated) = uint(value, key, &at)? {
                if stated != from_shapes {
                    return Err(VocosError::Config(format!("{at}: {key} is {stated} but the weights have {from_shapes}")));
                }
            }
        }
        if self.layers > 0 {
            if let Some(stated) = uint(&backbone_args["intermediate_dim"], "backbone.init_args.intermediate_dim", &at)? {
                if stated != self.intermediate {
                    return Err(VocosError::Config(format!(
                        "{at}: backbone.init_args.intermediate_dim is {stated} but the weights have {}",
                        self.intermediate
                    )));
                }
            }
        }
        if let Some(hop) = uint(&head_args["hop_length"], "head.init_args.hop_length", &at)? {
            self.hop = hop;
        }
        if let Some(rate) = uint(&doc["feature_extractor"]["init_args"]["sample_rate"], "feature_extractor.init_args.sample_rate", &at)? {
            self.sample_rate = u32::try_from(rate).map_err(|_| VocosError::Config(format!("{at}: sample_rate {rate} is out of range")))?;
        }
        self.hop_source = HopSource::Yaml(path.to_path_buf());
        Ok(())
    }
}

/// A non-negative integer entry, `None` when the key is absent, an error when it is something else.
fn uint(value: &Yaml, key: &str, at: &impl std::fmt::Display) -> Result<Option<usize>, VocosError> {
    match value {
        Yaml::BadValue | Yaml::Null => Ok(None),
        Yaml::Integer(v) => usize::try_from(*v).map(Some).map_err(|_| VocosError::Config(format!("{at}: {key} is {v}, not a size"))),
        other => Err(VocosError::Config(format!("{at}: {key} is {other:?}, not an integer"))),
    }
}

/// The part of the names before `backbone.embed.weight`: empty for Vocos' own files, a
/// wrapper's prefix otherwise.
fn find_prefix(ckpt: &Checkpoint) -> Result<String, VocosError> {
    const ANCHOR: &str = "backbone.embed.weight";
    let found: Vec<&str> = ckpt.names().filter_map(|n| n.strip_suffix(ANCHOR)).filter(|p| p.is_empty() || p.ends_with('.')).collect();
    match found.as_slice() {
        [one] => Ok((*one).to_string()),
        [] => Err(VocosError::Missing { path: ckpt.path().display().to_string(), tensor: ANCHOR.to_string() }),
        many => Err(VocosError::Config(format!(
            "{}: holds several vocoders (names ending in {ANCHOR} under prefixes {many:?}); pass a file with one",
            ckpt.path().display()
        ))),
    }
}
