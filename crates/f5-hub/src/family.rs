//! Which model family a name's files are: a Kokoro release (`config.json` with an `istftnet`
//! section beside `kokoro-v1_0.pth`, voices under `voices/`) or an F5 checkpoint. Told from the
//! files, never from the name.

use std::path::{Path, PathBuf};

use crate::{Hub, ModelKind, Named, Reference, ResolvedModel, Result};

/// The release's checkpoint name in a Kokoro repository.
pub const KOKORO_CHECKPOINT: &str = "kokoro-v1_0.pth";
const KOKORO_CONFIG: &str = "config.json";
const KOKORO_VOICES: &str = "voices";

/// A Kokoro model's files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedKokoro {
    /// The checkpoint file, or the model directory holding it (with `config.json` beside).
    pub checkpoint: PathBuf,
    /// Where its voice packs are (`voices/`; for a hub model, the packs fetched so far).
    pub voices_dir: PathBuf,
    /// The hub repository further voices come from ([`Hub::fetch_voice`]); `None` on disk.
    pub repo: Option<Reference>,
    /// Which reading of the name found it.
    pub kind: ModelKind,
}

/// A model name's files, by family.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolved {
    /// An F5-TTS checkpoint (and its vocabulary).
    F5(ResolvedModel),
    /// A Kokoro release (weights, `config.json`, voices).
    Kokoro(ResolvedKokoro),
}

/// Whether `config` is a Kokoro `config.json` (it has the ISTFTNet decoder's section).
fn is_kokoro_config(config: &Path) -> bool {
    let Ok(text) = std::fs::read_to_string(config) else { return false };
    serde_json::from_str::<serde_json::Value>(&text).is_ok_and(|v| v.get("istftnet").is_some_and(|s| s.is_object()))
}

/// A Kokoro model at `path` on disk (a directory or a checkpoint with `config.json` beside).
fn kokoro_on_disk(path: &Path, kind: ModelKind) -> Option<ResolvedKokoro> {
    let dir = if path.is_dir() { path } else { path.parent()? };
    if !is_kokoro_config(&dir.join(KOKORO_CONFIG)) {
        return None;
    }
    Some(ResolvedKokoro { checkpoint: path.to_path_buf(), voices_dir: dir.join(KOKORO_VOICES), repo: None, kind })
}

impl Hub {
    /// The files a model name stands for, whichever family they are: a Kokoro release (a path,
    /// a local id, a repository such as `hexgrad/Kokoro-82M`, or its `.pth` file) or an F5
    /// checkpoint as [`Hub::resolve_model`] finds it. For a Kokoro repository only the
    /// checkpoint and `config.json` are fetched; voices come one at a time ([`Hub::fetch_voice`]).
    pub fn resolve(&self, name: &str, vocab: Option<&str>) -> Result<Resolved> {
        match self.classify(name)? {
            Named::Path(p) => {
                if let Some(k) = kokoro_on_disk(&p, ModelKind::Path) {
                    return Ok(Resolved::Kokoro(k));
                }
            }
            Named::Local(dir) => {
                if let Some(k) = kokoro_on_disk(&dir, ModelKind::Local) {
                    return Ok(Resolved::Kokoro(k));
                }
            }
            Named::Reference(r) if r.path.is_empty() || r.path.ends_with(".pth") => {
                let (config, checkpoint) = if r.path.is_empty() {
                    (r.with_path(KOKORO_CONFIG)?, r.with_path(KOKORO_CHECKPOINT)?)
                } else {
                    (r.sibling(KOKORO_CONFIG)?, r.clone())
                };
                if let Some(config_path) = self.fetch_optional(&config, false)? {
                    if is_kokoro_config(&config_path) {
                        let checkpoint = self.fetch(&checkpoint)?;
                        let dir = checkpoint.parent().map(Path::to_path_buf).unwrap_or_default();
                        let repo = Reference { path: String::new(), ..r };
                        return Ok(Resolved::Kokoro(ResolvedKokoro {
                            checkpoint,
                            voices_dir: dir.join(KOKORO_VOICES),
                            repo: Some(repo),
                            kind: ModelKind::Reference,
                        }));
                    }
                }
            }
            Named::Reference(_) => {}
        }
        self.resolve_model(name, vocab).map(Resolved::F5)
    }

    /// One voice pack of a Kokoro repository (`voices/NAME.pt`), from the cache or the hub;
    /// `Ok(None)` when the repository has no such voice. `name` must be a plain voice name.
    pub fn fetch_voice(&self, repo: &Reference, name: &str) -> Result<Option<PathBuf>> {
        let voice = repo.with_path(&format!("{KOKORO_VOICES}/{name}.pt"))?;
        self.fetch_optional(&voice, false)
    }
}
