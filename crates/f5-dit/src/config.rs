//! The architecture of a checkpoint, read from its tensors — nothing is configured by hand.
//!
//! Shapes give the key prefix, dim, depth, ff_mult, text dim, vocabulary rows, ConvNeXt count,
//! mel channels and both convolution kernels. Two things are NOT visible in the weights: the
//! head count (released models use 64-wide heads, fine-tunes may not) and the v0/v1 traits
//! (RoPE on head 0 only and no text padding mask, vs RoPE on every head with the mask). Those
//! come from explicit overrides, else an F5 training config (`*.yaml` with `model.arch`) beside
//! the checkpoint whose arch matches the shapes, else the defaults: v1, and the head width the
//! stored `rotary_embed.inv_freq` buffer implies (64 when a file lacks it). A head count that
//! contradicts that buffer is refused. [`F5Config::source`] says where the traits came from.

use std::path::{Path, PathBuf};

use f5_torchpt::Checkpoint;

use crate::DitError;

/// The two generations of released F5-TTS checkpoints differ in two forward-pass traits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variant {
    /// F5TTS_Base and friends: RoPE on attention head 0 only, filler text positions not masked.
    V0,
    /// F5TTS_v1_Base: RoPE on every head, filler text positions zeroed around every ConvNeXt block.
    V1,
}

impl Variant {
    /// The short name configs and logs use (`v0`, `v1`).
    pub fn name(self) -> &'static str {
        match self {
            Variant::V0 => "v0",
            Variant::V1 => "v1",
        }
    }
}

/// Where the traits that shapes cannot show came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TraitSource {
    /// An F5 training config beside the checkpoint.
    Yaml(PathBuf),
    /// Explicit [`Overrides`].
    Overrides,
    /// Nothing said otherwise: 64-wide heads, v1.
    Default,
}

/// What a caller may state about a checkpoint that its shapes do not show.
///
/// `Overrides::default()` states nothing (the file and a training config beside it decide);
/// `Overrides::default().with_variant(Some(Variant::V0))` is how a fine-tune of the first release
/// that ships without its config is opened.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct Overrides {
    /// Attention heads, for a fine-tune with other than 64-wide heads.
    pub heads: Option<usize>,
    /// The generation whose forward-pass traits apply.
    pub variant: Option<Variant>,
}

setters!(Overrides {
    with_heads => heads: Option<usize>,
    with_variant => variant: Option<Variant>,
});

/// Everything the forward pass needs to know about a checkpoint.
///
/// Normally read from the file ([`F5Config::infer`]); it stays constructible in code for a
/// checkpoint whose architecture is known in advance: `F5Config::default()` is F5TTS_v1_Base,
/// changed with the `with_*` setters and handed to [`crate::F5Model::from_checkpoint`], which
/// checks it against every tensor.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct F5Config {
    /// What every tensor name starts with, e.g. `ema_model.transformer.`.
    pub prefix: String,
    /// Width of the transformer's residual stream.
    pub dim: usize,
    /// Transformer blocks.
    pub depth: usize,
    /// Attention heads (`dim = heads · dim_head`).
    pub heads: usize,
    /// Width of one attention head; rotary embedding needs it even.
    pub dim_head: usize,
    /// Hidden width of each block's feed-forward layer (`ff_mult · dim`).
    pub ff_inner: usize,
    /// Width of the text encoder.
    pub text_dim: usize,
    /// Rows of the text embedding table: the vocabulary size + 1 (row 0 is the filler).
    pub text_rows: usize,
    /// ConvNeXt blocks in the text encoder (0: the embedding alone).
    pub conv_layers: usize,
    /// Kernel of the text encoder's depthwise convolutions.
    pub text_conv_kernel: usize,
    /// Mel channels of the vocoder the model was trained for (100 for Vocos).
    pub mel_dim: usize,
    /// Kernel of the convolutional position embedding.
    pub conv_pos_kernel: usize,
    /// Groups of the convolutional position embedding (must divide `dim`).
    pub conv_pos_groups: usize,
    /// Sinusoidal features fed to the timestep MLP (256 in every release).
    pub time_freq_dim: usize,
    /// v1 trait: zero the filler text positions around every ConvNeXt block.
    pub text_mask_padding: bool,
    /// v0 trait: rotary embedding only on the first this-many heads (`None` = every head).
    pub pe_attn_head: Option<usize>,
    /// Where the traits that the shapes cannot show came from.
    pub source: TraitSource,
    /// Parameters of the model in the file (0 for a config built in code: nothing was counted).
    pub params: usize,
}

/// F5TTS_v1_Base, the released model most checkpoints are fine-tuned from.
impl Default for F5Config {
    fn default() -> Self {
        F5Config {
            prefix: "ema_model.transformer.".into(),
            dim: 1024,
            depth: 22,
            heads: 16,
            dim_head: 64,
            ff_inner: 2048,
            text_dim: 512,
            // The released vocabulary has 2545 entries.
            text_rows: 2546,
            conv_layers: 4,
            text_conv_kernel: 7,
            mel_dim: 100,
            conv_pos_kernel: 31,
            conv_pos_groups: 16,
            time_freq_dim: 256,
            text_mask_padding: true,
            pe_attn_head: None,
            source: TraitSource::Default,
            params: 0,
        }
    }
}

setters!(F5Config {
    with_prefix => prefix: String,
    with_dim => dim: usize,
    with_depth => depth: usize,
    with_heads => heads: usize,
    with_dim_head => dim_head: usize,
    with_ff_inner => ff_inner: usize,
    with_text_dim => text_dim: usize,
    with_text_rows => text_rows: usize,
    with_conv_layers => conv_layers: usize,
    with_text_conv_kernel => text_conv_kernel: usize,
    with_mel_dim => mel_dim: usize,
    with_conv_pos_kernel => conv_pos_kernel: usize,
    with_conv_pos_groups => conv_pos_groups: usize,
    with_time_freq_dim => time_freq_dim: usize,
    with_text_mask_padding => text_mask_padding: bool,
    with_pe_attn_head => pe_attn_head: Option<usize>,
});

impl F5Config {
    /// ff_mult as the training config states it.
    pub fn ff_mult(&self) -> f64 {
        self.ff_inner as f64 / self.dim as f64
    }

    /// Heads that get rotary position embedding.
    pub fn rope_heads(&self) -> usize {
        self.pe_attn_head.map_or(self.heads, |k| k.min(self.heads))
    }

    /// The released generation these traits belong to, or `None` for a mix of the two.
    pub fn variant(&self) -> Option<Variant> {
        match (self.text_mask_padding, self.pe_attn_head) {
            (true, None) => Some(Variant::V1),
            (false, Some(1)) => Some(Variant::V0),
            _ => None,
        }
    }

    /// Refuses a configuration the forward pass cannot run (a hand-built one; what
    /// [`F5Config::infer`] returns always passes), before any weight is uploaded.
    pub fn validate(&self) -> Result<(), DitError> {
        let bad = |m: String| Err(DitError::Config(m));
        let nonzero = [
            ("dim", self.dim),
            ("depth", self.depth),
            ("heads", self.heads),
            ("dim_head", self.dim_head),
            ("ff_inner", self.ff_inner),
            ("text_dim", self.text_dim),
            ("text_rows", self.text_rows),
            ("text_conv_kernel", self.text_conv_kernel),
            ("mel_dim", self.mel_dim),
            ("conv_pos_kernel", self.conv_pos_kernel),
            ("conv_pos_groups", self.conv_pos_groups),
            ("time_freq_dim", self.time_freq_dim),
        ];
        if let Some((name, _)) = nonzero.iter().find(|(_, v)| *v == 0) {
            return bad(format!("{name} is zero"));
        }
        if self.heads.checked_mul(self.dim_head) != Some(self.dim) {
            return bad(format!("{} heads of width {} do not make dim {}", self.heads, self.dim_head, self.dim));
        }
        if !self.dim_head.is_multiple_of(2) {
            return bad(format!("head width {} is odd; rotary embedding needs pairs", self.dim_head));
        }
        if !self.dim.is_multiple_of(self.conv_pos_groups) {
            return bad(format!("{} position-convolution groups do not divide dim {}", self.conv_pos_groups, self.dim));
        }
        if self.time_freq_dim < 4 || !self.time_freq_dim.is_multiple_of(2) {
            return bad(format!("time_freq_dim {} must be even and at least 4", self.time_freq_dim));
        }
        if !self.text_dim.is_multiple_of(2) {
            return bad(format!("text_dim {} is odd; its position code needs pairs", self.text_dim));
        }
        Ok(())
    }

    /// Reads the architecture of `ckpt` (opened from `path`, whose directory is searched for a
    /// training config).
    pub fn infer(ckpt: &Checkpoint, path: &Path, overrides: &Overrides) -> Result<F5Config, DitError> {
        let prefix = find_prefix(ckpt)?;
        let shape = |name: &str| -> Result<Vec<usize>, DitError> {
            let full = format!("{prefix}{name}");
            ckpt.meta(&full).map(|m| m.shape().to_vec()).map_err(|_| DitError::Missing { tensor: full })
        };
        let dims = |name: &str, rank: usize| -> Result<Vec<usize>, DitError> {
            let s = shape(name)?;
            if s.len() != rank {
                return Err(DitError::Shape {
                    tensor: format!("{prefix}{name}"),
                    detail: format!("expected {rank} dimensions, found {s:?}"),
                });
            }
            Ok(s)
        };
        let count = |stem: &str, leaf: &str| (0..).take_while(|i| ckpt.contains(&format!("{prefix}{stem}.{i}.{leaf}"))).count();

        let t0 = dims("time_embed.time_mlp.0.weight", 2)?;
        let (dim, time_freq_dim) = (t0[0], t0[1]);
        let depth = count("transformer_blocks", "attn_norm.linear.weight");
        if depth == 0 {
            return Err(DitError::Missing { tensor: format!("{prefix}transformer_blocks.0.attn_norm.linear.weight") });
        }
        let ff_inner = dims("transformer_blocks.0.ff.ff.0.0.weight", 2)?[0];
        let emb = dims("text_embed.text_embed.weight", 2)?;
        let (text_rows, text_dim) = (emb[0], emb[1]);
        let conv_layers = count("text_embed.text_blocks", "dwconv.weight");
        let text_conv_kernel = if conv_layers > 0 { dims("text_embed.text_blocks.0.dwconv.weight", 3)?[2] } else { 1 };
        let mel_dim = dims("proj_out.weight", 2)?[0];
        let cp = dims("input_embed.conv_pos_embed.conv1d.0.weight", 3)?;
        if cp[1] == 0 || dim % cp[1] != 0 {
            return Err(DitError::Shape {
                tensor: format!("{prefix}input_embed.conv_pos_embed.conv1d.0.weight"),
                detail: format!("{cp:?} does not divide dim {dim} into groups"),
            });
        }
        let (conv_pos_groups, conv_pos_kernel) = (dim / cp[1], cp[2]);
        let proj = dims("input_embed.proj.weight", 2)?;
        if proj != [dim, 2 * mel_dim + text_dim] {
            return Err(DitError::Shape {
                tensor: format!("{prefix}input_embed.proj.weight"),
                detail: format!("{proj:?}, expected [{dim}, {}]", 2 * mel_dim + text_dim),
            });
        }
        let params = ckpt
            .names()
            .filter(|n| n.starts_with(&prefix) && !n.ends_with("inv_freq"))
            .filter_map(|n| ckpt.meta(n).ok())
            .map(|m| m.numel())
            .sum();

        let yaml = find_training_config(path, dim, depth, text_dim, conv_layers);
        // The rotary buffer, when the file keeps it, shows the head width after all.
        let rope_width = ckpt
            .meta(&format!("{prefix}rotary_embed.inv_freq"))
            .ok()
            .and_then(|m| m.shape().first().map(|&h| 2 * h))
            .filter(|&w| w > 0 && dim % w == 0);
        let default_heads = dim / rope_width.unwrap_or(64);
        let v1 = (true, None);
        let traits = |v: Variant| if v == Variant::V1 { v1 } else { (false, Some(1)) };
        let (heads, (text_mask_padding, pe_attn_head), source) = match (&yaml, overrides.heads, overrides.variant) {
            (_, Some(_), _) | (_, _, Some(_)) => {
                let heads = overrides.heads.or(yaml.as_ref().and_then(|y| y.heads)).unwrap_or(default_heads);
                let t = overrides.variant.map(traits).or(yaml.as_ref().map(|y| (y.text_mask_padding, y.pe_attn_head))).unwrap_or(v1);
                (heads, t, TraitSource::Overrides)
            }
            (Some(y), None, None) => {
                (y.heads.unwrap_or(default_heads), (y.text_mask_padding, y.pe_attn_head), TraitSource::Yaml(y.path.clone()))
            }
            (None, None, None) => (default_heads, v1, TraitSource::Default),
        };
        if heads == 0 || dim % heads != 0 {
            return Err(DitError::Config(format!("{heads} heads do not divide dim {dim}")));
        }
        let dim_head = dim / heads;
        if let Some(w) = rope_width.filter(|&w| w != dim_head) {
            return Err(DitError::Config(format!(
                "{heads} heads make {dim_head}-wide heads, but the checkpoint's rotary_embed.inv_freq is for {w}-wide heads ({} heads); the heads setting ({}) is wrong for this file",
                dim / w,
                match &source { TraitSource::Yaml(p) => format!("from {}", p.display()), TraitSource::Overrides => "given explicitly".into(), TraitSource::Default => "the default".into() }
            )));
        }
        if dim_head % 2 != 0 {
            return Err(DitError::Config(format!("head width {dim_head} is odd; rotary embedding needs pairs")));
        }
        Ok(F5Config {
            prefix,
            dim,
            depth,
            heads,
            dim_head,
            ff_inner,
            text_dim,
            text_rows,
            conv_layers,
            text_conv_kernel,
            mel_dim,
            conv_pos_kernel,
            conv_pos_groups,
            time_freq_dim,
            text_mask_padding,
            pe_attn_head,
            source,
            params,
        })
    }
}

/// The prefix before `time_embed.time_mlp.0.weight`. Where a file carries several models (a
/// training `.pt` with `model_state_dict` and `ema_model_state_dict`), the EMA weights win, as
/// in the reference loader.
fn find_prefix(ckpt: &Checkpoint) -> Result<String, DitError> {
    const ANCHOR: &str = "time_embed.time_mlp.0.weight";
    let mut found: Vec<String> = ckpt.names().filter_map(|n| n.strip_suffix(ANCHOR)).map(str::to_string).collect();
    found.sort_by_key(|p| (!p.contains("ema"), p.len()));
    found.into_iter().next().ok_or_else(|| DitError::Config(format!("no tensor ending in `{ANCHOR}`: not an F5-TTS DiT checkpoint")))
}

struct YamlArch {
    path: PathBuf,
    heads: Option<usize>,
    text_mask_padding: bool,
    pe_attn_head: Option<usize>,
}

/// The first `*.yaml` beside the checkpoint whose `model.arch` agrees with the shapes.
fn find_training_config(ckpt_path: &Path, dim: usize, depth: usize, text_dim: usize, conv_layers: usize) -> Option<YamlArch> {
    let dir = ckpt_path.parent()?;
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "yaml" || e == "yml"))
        .collect();
    entries.sort();
    entries.into_iter().find_map(|p| {
        // A config file is at most a few KB; anything huge is not one.
        let meta = std::fs::metadata(&p).ok()?;
        if meta.len() > 1 << 20 {
            return None;
        }
        let text = std::fs::read_to_string(&p).ok()?;
        let docs = yaml_rust2::YamlLoader::load_from_str(&text).ok()?;
        let arch = &docs.first()?["model"]["arch"];
        let int = |k: &str| arch[k].as_i64().and_then(|v| usize::try_from(v).ok());
        let agrees = int("dim") == Some(dim)
            && int("depth") == Some(depth)
            && int("text_dim").is_none_or(|v| v == text_dim)
            && int("conv_layers").is_none_or(|v| v == conv_layers);
        if !agrees {
            return None;
        }
        let heads = int("heads").or_else(|| int("dim_head").filter(|&h| h > 0).map(|h| dim / h));
        // The DiT's own defaults when a key is absent: text_mask_padding True, pe_attn_head None.
        let text_mask_padding = arch["text_mask_padding"].as_bool().unwrap_or(true);
        let pe_attn_head = int("pe_attn_head");
        Some(YamlArch { path: p, heads, text_mask_padding, pe_attn_head })
    })
}
