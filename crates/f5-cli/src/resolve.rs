//! Model, vocoder and voice names → files on disk, through f5-hub (paths, local ids, hub
//! references fetched into the shared Hugging Face cache) and the voice store.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use anyhow::{bail, Context, Result};
use f5_hub::{Hub, Progress};

/// The hub, drawing a download bar on stderr unless `quiet`.
pub fn hub(quiet: bool) -> Hub {
    let hub = Hub::from_env();
    if quiet {
        return hub;
    }
    let bar: Arc<Mutex<Option<indicatif::ProgressBar>>> = Arc::new(Mutex::new(None));
    hub.with_progress(move |p| {
        let Ok(mut slot) = bar.lock() else { return };
        match p {
            Progress::Start { file, total, resumed_from } => {
                let b = indicatif::ProgressBar::new(total.unwrap_or(0));
                if let Ok(style) = indicatif::ProgressStyle::with_template("{msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec}") {
                    b.set_style(style);
                }
                b.set_message(format!("downloading {file}"));
                b.set_position(*resumed_from);
                *slot = Some(b);
            }
            Progress::Advance { done, .. } => {
                if let Some(b) = slot.as_ref() {
                    b.set_position(*done);
                }
            }
            Progress::Finish { .. } => {
                if let Some(b) = slot.take() {
                    b.finish_and_clear();
                }
            }
        }
    })
}

/// The vocoder weights (its config.yaml, when there is one, sits beside them). A model of
/// either family named here is refused by its family, not by a missing tensor.
pub fn vocoder(hub: &Hub, name: &str) -> Result<PathBuf> {
    let weights = match hub.resolve_vocoder(name) {
        Ok(v) => v.weights,
        Err(e) => {
            // A local model directory has no vocoder weights: say what it is instead.
            if Path::new(name).is_dir() {
                if let Ok(resolved) = hub.resolve(name, None) {
                    let family = match resolved {
                        f5_hub::Resolved::F5(_) => Family::F5,
                        f5_hub::Resolved::Kokoro(_) => Family::Kokoro,
                    };
                    bail!(
                        "vocoder {name:?}: this is {}, not a vocoder (--vocoder takes a Vocos vocoder such as {DEFAULT_VOCODER})",
                        family.a_name()
                    );
                }
            }
            return Err(anyhow::Error::from(e).context(format!("vocoder {name:?}")));
        }
    };
    crate::limits::require_regular_file(&weights, "vocoder")?;
    if let Some(family) = family_of(&weights).filter(|f| *f != Family::Vocos) {
        bail!("vocoder {name:?}: this is {}, not a vocoder (--vocoder takes a Vocos vocoder such as {DEFAULT_VOCODER})", family.a_name());
    }
    Ok(weights)
}

/// What a weights file holds, told from its tensors.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Family {
    F5,
    Kokoro,
    Vocos,
}

impl Family {
    /// "an F5-TTS model", for messages.
    pub fn a_name(self) -> &'static str {
        match self {
            Family::F5 => "an F5-TTS model",
            Family::Kokoro => "a Kokoro model",
            Family::Vocos => "a Vocos vocoder",
        }
    }
}

/// The family of the weights in `path`, or `None` when the file cannot be read as any of them
/// (the loader then says why). Reads the checkpoint's index only, not its tensors.
pub fn family_of(path: &Path) -> Option<Family> {
    let ckpt = f5_torchpt::Checkpoint::open(path).ok()?;
    if f5_kokoro::inspect(&ckpt).is_some() {
        return Some(Family::Kokoro);
    }
    if f5_dit::F5Config::infer(&ckpt, path, &f5_dit::Overrides::default()).is_ok() {
        return Some(Family::F5);
    }
    let yaml = path.parent().map(|d| d.join("config.yaml")).filter(|p| p.is_file());
    f5_vocos::VocosConfig::infer(&ckpt, yaml.as_deref()).is_ok().then_some(Family::Vocos)
}

/// A voice: a directory (`reference.*` + `config.json`), or an id in the voice store.
pub fn voice(name: &str) -> Result<(PathBuf, String)> {
    let as_path = Path::new(name);
    if as_path.is_dir() {
        return voice_dir(as_path);
    }
    if f5_synth::valid_id(name) {
        // Reading never writes: a store that does not exist yet has no voices (opening it would
        // create it).
        let root = f5_synth::store::f5_home().join("voices");
        if !root.is_dir() {
            bail!("voice {name:?}: no such voice; the voice store {} is empty (`f5 voices add`)", root.display());
        }
        let store = f5_synth::VoiceStore::from_env()?;
        let e = store.get(name)?;
        return Ok((e.audio, e.transcript));
    }
    bail!("voice {name:?}: not a directory and not a voice id (see `f5 voices list`)")
}

/// A voice directory: `reference.*` audio and `config.json` with the transcript.
pub fn voice_dir(dir: &Path) -> Result<(PathBuf, String)> {
    let config = dir.join("config.json");
    let text = std::fs::read_to_string(&config).with_context(|| format!("voice {}: cannot read config.json", dir.display()))?;
    let v: serde_json::Value = serde_json::from_str(&text).with_context(|| format!("{}: not valid JSON", config.display()))?;
    let transcript = v.get("transcript").or_else(|| v.get("ref_text")).and_then(|t| t.as_str());
    let Some(transcript) = transcript else { bail!("{}: no \"transcript\" field", config.display()) };
    let mut audio: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("cannot list {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.file_stem().is_some_and(|s| s == "reference") && p.extension().is_some_and(|e| e != "json"))
        .collect();
    audio.sort();
    match audio.into_iter().next() {
        Some(a) => Ok((a, transcript.to_string())),
        None => bail!("voice {}: no reference.wav (or reference.mp3/.flac/.ogg)", dir.display()),
    }
}

/// The hub model Kokoro's release is published as: what `--model` means when it is not given.
pub const DEFAULT_MODEL: &str = "hexgrad/Kokoro-82M";
/// The default model could not be had (no network, not cached): the error, and what to do.
pub fn default_model_hint(e: anyhow::Error) -> anyhow::Error {
    anyhow::anyhow!(
        "{e:#} — the default model {DEFAULT_MODEL} is fetched from the Hugging Face Hub once; offline, run `cargo xtask kokoro-int8 --install` and pass `--model kokoro-int8`, or name another model with --model"
    )
}

/// The vocoder F5 checkpoints speak through unless `--vocoder` names another.
pub const DEFAULT_VOCODER: &str = "charactr/vocos-mel-24khz";

/// How a model is being used: by one command, where F5-only flags given for a Kokoro model are
/// a mistake to point out, or among a server's models, where they belong to the others.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Use {
    /// `f5 synth`: voices may be files; `--vocab`/`--vocoder` for a Kokoro model are refused.
    Command,
    /// `f5 serve`: voices are names only (clients never name server files).
    Server,
}

/// The vocoder asked for: on the command line (`given`), or by the settings file (`default`,
/// which applies to F5 models only and is no mistake for a Kokoro one).
#[derive(Clone, Copy, Default)]
pub struct VocoderChoice<'a> {
    pub given: Option<&'a str>,
    pub default: Option<&'a str>,
}

/// A model name → its files, the family told from the files ([`f5_hub::Hub::resolve`]). For a
/// Kokoro repository on the hub, voices are fetched on first use through the same hub.
pub fn model_files_with(
    hub: &Arc<Hub>,
    name: &str,
    vocab: Option<&str>,
    choice: VocoderChoice<'_>,
    usage: Use,
) -> Result<f5_synth::ModelFiles> {
    let vocoder = choice.given;
    let vocoder_not_model = || anyhow::anyhow!("model {name:?}: this is a Vocos vocoder, not a model (pass it as --vocoder)");
    let resolved = match hub.resolve(name, vocab) {
        Ok(r) => r,
        // A vocoder's directory holds no model checkpoint: say what it is instead.
        Err(e) if Path::new(name).is_dir() => match hub.resolve_vocoder(name).ok().and_then(|v| family_of(&v.weights)) {
            Some(Family::Vocos) => return Err(vocoder_not_model()),
            _ => return Err(anyhow::Error::from(e).context(format!("model {name:?}"))),
        },
        Err(e) => return Err(anyhow::Error::from(e).context(format!("model {name:?}"))),
    };
    Ok(match resolved {
        f5_hub::Resolved::F5(r) => {
            crate::limits::require_regular_file(&r.checkpoint, "checkpoint")?;
            match family_of(&r.checkpoint) {
                Some(Family::Vocos) => return Err(vocoder_not_model()),
                Some(Family::Kokoro) => bail!(
                    "model {name:?}: this is a Kokoro model without its config.json beside it (name the directory of the release: kokoro-v1_0.pth, config.json, voices/)"
                ),
                _ => {}
            }
            let Some(vocab) = r.vocab else {
                bail!("model {name:?}: no vocab.txt beside {}; name one with --vocab", r.checkpoint.display());
            };
            crate::limits::require_regular_file(&vocab, "vocabulary")?;
            let vocoder = self::vocoder(hub, vocoder.or(choice.default).unwrap_or(DEFAULT_VOCODER))?;
            f5_synth::ModelFiles::F5 { checkpoint: r.checkpoint, vocab, vocoder }
        }
        f5_hub::Resolved::Kokoro(k) => {
            if usage == Use::Command && vocab.is_some() {
                bail!("model {name:?} is a Kokoro model: --vocab applies to F5 checkpoints only");
            }
            if usage == Use::Command && vocoder.is_some() {
                bail!("model {name:?} is a Kokoro model, which makes its own audio: --vocoder applies to F5 checkpoints only");
            }
            let mut voices = f5_synth::KokoroVoices::in_dir(k.voices_dir).with_allow_files(usage == Use::Command);
            if let Some(repo) = k.repo {
                let hub = hub.clone();
                voices.fetch = Some(Arc::new(move |voice: &str| hub.fetch_voice(&repo, voice).map_err(|e| e.to_string())));
            }
            f5_synth::ModelFiles::Kokoro { checkpoint: k.checkpoint, voices }
        }
    })
}
