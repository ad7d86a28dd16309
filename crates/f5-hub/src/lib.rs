//! Model names to files on disk.
//!
//! A name is read in this order:
//! 1. a PATH that exists: a checkpoint file, or a directory holding one and `vocab.txt`. A name
//!    that reads as a path (it starts at `/`, `./`, `../` or `~`, has a file extension and no
//!    `/`, or its first component exists here) but does not exist is an error naming the nearest
//!    existing entry — never a download;
//! 2. a LOCAL ID, `$F5_HOME/models/<id>/` (ids are `[A-Za-z0-9_-]{1,64}`, so none escapes the store);
//! 3. a REFERENCE `owner/repo/path/to/file[@revision]`, fetched from the Hugging Face Hub into the
//!    standard Hugging Face cache, where Python's huggingface_hub finds it too (and where this crate
//!    finds what Python fetched). A `/` makes a reference; ids cannot contain one.
//!
//! References already in the cache cost no request at all. `HF_HUB_OFFLINE=1` forbids the
//! network entirely. Downloads resume, are checked (size; sha256 for LFS files), land atomically,
//! and are locked per blob so concurrent fetches of one file do not collide.
//!
//! The client is blocking: call it from a plain thread (or `spawn_blocking`), not from inside an
//! async task.

#![warn(missing_docs)]

mod cache;
mod config;
mod error;
mod family;
mod http;
mod local;
mod name;
mod progress;

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use config::HubConfig;
pub use error::{HubError, Result};
pub use family::{Resolved, ResolvedKokoro, KOKORO_CHECKPOINT};
pub use name::{is_valid_id, Reference, MAX_ID_LEN, MAX_NAME_LEN};
pub use progress::{Progress, ProgressFn};

use cache::{Cached, RepoCache};
use http::{Head, Remote};

/// Checkpoint extensions the engine opens.
const CHECKPOINT_EXTENSIONS: [&str; 2] = ["safetensors", "pt"];
const VOCAB_FILE: &str = "vocab.txt";
const VOCODER_CONFIG: &str = "config.yaml";
const VOCODER_WEIGHTS: &str = "pytorch_model.bin";

/// Which reading of the name matched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelKind {
    /// A file or directory on this machine.
    Path,
    /// A model in the local store (`$F5_HOME/models/<id>`).
    Local,
    /// A file of a hub repository, now in the Hugging Face cache.
    Reference,
}

/// An F5 model's files on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedModel {
    /// The checkpoint (`.safetensors` or `.pt`).
    pub checkpoint: PathBuf,
    /// `None` only when nothing was named and no `vocab.txt` sits beside a single checkpoint
    /// file (the caller may then fall back to the default vocabulary).
    pub vocab: Option<PathBuf>,
    /// Which reading of the name found it.
    pub kind: ModelKind,
}

/// A vocoder's files on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedVocoder {
    /// The weights (`pytorch_model.bin` or `.safetensors`).
    pub weights: PathBuf,
    /// `config.yaml` beside the weights when there is one.
    pub config: Option<PathBuf>,
    /// Which reading of the name found it.
    pub kind: ModelKind,
}

/// One model this machine has: a local id, or a file of a cached snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The name that resolves to it: the id, or `owner/repo/path` (plus `@commit` when no
    /// branch or tag points at that snapshot).
    pub name: String,
    /// A local id or a cached reference.
    pub kind: ModelKind,
    /// The directory (local id) or the snapshot file (reference).
    pub path: PathBuf,
    /// Bytes on disk: the directory's files, or the file.
    pub size: u64,
    /// The snapshot's commit (references only).
    pub commit: Option<String>,
    /// Branches and tags that point at that commit (references only).
    pub refs: Vec<String>,
}

impl Entry {
    /// Whether the entry is something the engine could open as a model or vocoder.
    pub fn is_checkpoint(&self) -> bool {
        self.kind == ModelKind::Local || has_extension(&self.path, &["safetensors", "pt", "bin"])
    }
}

/// A file the hub fetched or confirmed for [`Hub::pull`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pulled {
    /// What was asked for.
    pub reference: Reference,
    /// Where it is in the cache now.
    pub path: PathBuf,
}

/// Resolves model names to files, fetching hub references into the shared cache. Blocking; cheap
/// to share (`Send + Sync`).
pub struct Hub {
    config: HubConfig,
    remote: Remote,
    progress: Option<ProgressFn>,
    allow_paths: bool,
}

impl Hub {
    /// A hub with explicit settings (tests, or a program with its own configuration).
    pub fn new(config: HubConfig) -> Hub {
        Hub { remote: Remote::new(&config), config, progress: None, allow_paths: true }
    }

    /// Reads `F5_HOME`, `HF_HOME`, `HF_HUB_CACHE`, `HF_ENDPOINT`, `HF_TOKEN` and `HF_HUB_OFFLINE`.
    pub fn from_env() -> Hub {
        Hub::new(HubConfig::from_env())
    }

    /// Reports every download to `progress`.
    pub fn with_progress(mut self, progress: impl Fn(&Progress<'_>) + Send + Sync + 'static) -> Hub {
        self.progress = Some(Arc::new(progress));
        self
    }

    /// With `false`, names are never read as paths on this machine: for a server, whose clients
    /// must only reach the store and the hub.
    pub fn allow_paths(mut self, allow: bool) -> Hub {
        self.allow_paths = allow;
        self
    }

    /// The settings in use (the cache and store directories, the endpoint, offline mode).
    pub fn config(&self) -> &HubConfig {
        &self.config
    }

    /// The checkpoint and vocabulary a model name stands for, fetching a reference the first time.
    ///
    /// `vocab` names the vocabulary explicitly (a path or a reference); otherwise it is
    /// `vocab.txt` beside the checkpoint.
    pub fn resolve_model(&self, name: &str, vocab: Option<&str>) -> Result<ResolvedModel> {
        let named = self.classify(name)?;
        let explicit_vocab = vocab.map(|v| self.resolve_vocab(v)).transpose()?;
        match named {
            Named::Path(path) if path.is_dir() => {
                let checkpoint = find_checkpoint(&path)?;
                let vocab = match explicit_vocab {
                    Some(v) => v,
                    None => existing(path.join(VOCAB_FILE)).ok_or(HubError::MissingVocab { dir: path.clone() })?,
                };
                Ok(ResolvedModel { checkpoint, vocab: Some(vocab), kind: ModelKind::Path })
            }
            Named::Path(path) => {
                let vocab = explicit_vocab.or_else(|| path.parent().and_then(|dir| existing(dir.join(VOCAB_FILE))));
                Ok(ResolvedModel { checkpoint: path, vocab, kind: ModelKind::Path })
            }
            Named::Local(dir) => {
                let checkpoint = find_checkpoint(&dir)?;
                let vocab = match explicit_vocab {
                    Some(v) => v,
                    None => existing(dir.join(VOCAB_FILE)).ok_or(HubError::MissingVocab { dir: dir.clone() })?,
                };
                Ok(ResolvedModel { checkpoint, vocab: Some(vocab), kind: ModelKind::Local })
            }
            Named::Reference(reference) => {
                if reference.path.is_empty() {
                    return Err(HubError::RepositoryNotAFile { reference: name.to_string() });
                }
                let checkpoint = self.fetch(&reference)?;
                let vocab = match explicit_vocab {
                    Some(v) => Some(v),
                    None => self.fetch_optional(&reference.sibling(VOCAB_FILE)?, false)?,
                };
                Ok(ResolvedModel { checkpoint, vocab, kind: ModelKind::Reference })
            }
        }
    }

    /// The vocoder weights (and `config.yaml`) a name stands for. A reference may name a whole
    /// repository (`charactr/vocos-mel-24khz`), which means its `pytorch_model.bin` and `config.yaml`.
    pub fn resolve_vocoder(&self, name: &str) -> Result<ResolvedVocoder> {
        let from_dir = |dir: &Path, kind| -> Result<ResolvedVocoder> {
            let weights = existing(dir.join(VOCODER_WEIGHTS))
                .or_else(|| single_with_extension(dir, "safetensors"))
                .ok_or(HubError::NoVocoderWeights { dir: dir.to_path_buf() })?;
            Ok(ResolvedVocoder { weights, config: existing(dir.join(VOCODER_CONFIG)), kind })
        };
        match self.classify(name)? {
            Named::Path(path) if path.is_dir() => from_dir(&path, ModelKind::Path),
            Named::Path(path) => {
                let config = path.parent().and_then(|dir| existing(dir.join(VOCODER_CONFIG)));
                Ok(ResolvedVocoder { weights: path, config, kind: ModelKind::Path })
            }
            Named::Local(dir) => from_dir(&dir, ModelKind::Local),
            Named::Reference(reference) => {
                let (weights, config) = if reference.path.is_empty() {
                    (reference.with_path(VOCODER_WEIGHTS)?, reference.with_path(VOCODER_CONFIG)?)
                } else {
                    (reference.clone(), reference.sibling(VOCODER_CONFIG)?)
                };
                let weights = self.fetch(&weights)?;
                let config = self.fetch_optional(&config, false)?;
                Ok(ResolvedVocoder { weights, config, kind: ModelKind::Reference })
            }
        }
    }

    /// One file of a reference, from the cache when it is there (no request at all), else
    /// from the hub. Offline and not cached is an error.
    pub fn fetch(&self, reference: &Reference) -> Result<PathBuf> {
        self.fetch_optional(reference, false)?.ok_or_else(|| self.absent_error(reference))
    }

    /// Asks the hub for the current revision of a reference and brings the cache up to date:
    /// a moved branch is followed, and an existing LFS blob is re-hashed and fetched again if it
    /// is corrupt. A file reference brings `vocab.txt` beside it when the repository has one; a
    /// repository reference brings the vocoder files. Offline, this checks the cache only.
    pub fn pull(&self, name: &str) -> Result<Vec<Pulled>> {
        let reference = Reference::parse(name)?;
        let (required, optional) = if reference.path.is_empty() {
            (reference.with_path(VOCODER_WEIGHTS)?, reference.with_path(VOCODER_CONFIG)?)
        } else if has_extension(Path::new(&reference.path), &CHECKPOINT_EXTENSIONS) {
            (reference.clone(), reference.sibling(VOCAB_FILE)?)
        } else {
            let path = self.fetch_optional(&reference, true)?.ok_or_else(|| self.absent_error(&reference))?;
            return Ok(vec![Pulled { reference, path }]);
        };
        let path = self.fetch_optional(&required, true)?.ok_or_else(|| self.absent_error(&required))?;
        let mut pulled = vec![Pulled { reference: required, path }];
        if let Some(path) = self.fetch_optional(&optional, true)? {
            pulled.push(Pulled { reference: optional, path });
        }
        Ok(pulled)
    }

    /// Local models (`$F5_HOME/models/<id>`) first, then every file of every cached snapshot.
    pub fn list(&self) -> Vec<Entry> {
        let mut entries = Vec::new();
        let models_dir = self.config.models_dir();
        if let Ok(dirs) = fs::read_dir(&models_dir) {
            let mut ids: Vec<String> = dirs
                .flatten()
                .filter(|e| e.path().is_dir())
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|id| is_valid_id(id))
                .collect();
            ids.sort();
            for id in ids {
                let path = models_dir.join(&id);
                entries.push(Entry {
                    size: cache::dir_size(&path),
                    name: id,
                    kind: ModelKind::Local,
                    path,
                    commit: None,
                    refs: Vec::new(),
                });
            }
        }
        for file in cache::scan(&self.config.hub_cache) {
            let mut name = format!("{}/{}/{}", file.owner, file.repo, file.path);
            if file.refs.is_empty() {
                name.push('@');
                name.push_str(&file.commit);
            }
            entries.push(Entry {
                name,
                kind: ModelKind::Reference,
                path: file.location,
                size: file.size,
                commit: Some(file.commit),
                refs: file.refs,
            });
        }
        entries
    }

    fn absent_error(&self, reference: &Reference) -> HubError {
        HubError::RemoteNotFound { url: self.remote.resolve_url(reference), what: "file" }
    }

    fn resolve_vocab(&self, name: &str) -> Result<PathBuf> {
        if self.allow_paths && Path::new(name).is_file() {
            return Ok(PathBuf::from(name));
        }
        if self.allow_paths && local::looks_like_path(name) {
            return Err(HubError::NoSuchPath { name: name.to_string(), suggestion: local::suggestion(&local::nearest_existing(name)) });
        }
        if name.contains('/') {
            return self.fetch(&Reference::parse(name)?);
        }
        Err(HubError::InvalidReference {
            name: name.to_string(),
            reason: "a vocabulary is a file path or an owner/repo/file reference".to_string(),
        })
    }

    fn classify(&self, name: &str) -> Result<Named> {
        if name.is_empty() {
            return Err(HubError::EmptyName);
        }
        if name.len() > MAX_NAME_LEN {
            return Err(HubError::NameTooLong { len: name.len(), max: MAX_NAME_LEN });
        }
        if self.allow_paths && Path::new(name).exists() {
            return Ok(Named::Path(PathBuf::from(name)));
        }
        if self.allow_paths && local::looks_like_path(name) {
            return Err(HubError::NoSuchPath { name: name.to_string(), suggestion: local::suggestion(&local::nearest_existing(name)) });
        }
        if is_valid_id(name) {
            let dir = self.config.models_dir().join(name);
            return if dir.is_dir() {
                Ok(Named::Local(dir))
            } else {
                Err(HubError::UnknownLocalId { name: name.to_string(), models_dir: self.config.models_dir() })
            };
        }
        if name.contains('/') {
            return Ok(Named::Reference(Reference::parse(name)?));
        }
        let reason = name::id_problem(name).unwrap_or_else(|| "not an id".to_string());
        Err(HubError::InvalidName { name: name.to_string(), reason })
    }

    /// `Ok(None)`: the hub (or the cache's memory of it) says the file does not exist.
    /// `refresh`: ask the hub even on a cache hit, and re-verify the blob.
    fn fetch_optional(&self, reference: &Reference, refresh: bool) -> Result<Option<PathBuf>> {
        let cache = RepoCache::new(&self.config.hub_cache, reference);
        let cached = cache.lookup(reference);
        match cached {
            Cached::Present(path) if !refresh || self.config.offline => return Ok(Some(path)),
            Cached::KnownAbsent if !refresh || self.config.offline => return Ok(None),
            _ => {}
        }
        if self.config.offline {
            return Err(HubError::OfflineNotCached { reference: reference.to_string(), cache: cache.root().to_path_buf() });
        }
        match self.remote.head(reference)? {
            Head::EntryNotFound { commit, .. } => {
                if let Some(commit) = commit {
                    cache.mark_absent(&commit, &reference.path)?;
                    cache.write_ref(&reference.revision, &commit)?;
                }
                Ok(None)
            }
            Head::Found(meta) => {
                cache.write_ref(&reference.revision, &meta.commit)?;
                let label = reference.to_string();
                self.remote.fetch_blob(&cache, &meta, &label, &self.config, self.progress.as_ref(), refresh)?;
                Ok(Some(cache.link(&meta.commit, &reference.path, &meta.etag)?))
            }
        }
    }
}

enum Named {
    Path(PathBuf),
    Local(PathBuf),
    Reference(Reference),
}

fn existing(path: PathBuf) -> Option<PathBuf> {
    path.is_file().then_some(path)
}

fn has_extension(path: &Path, extensions: &[&str]) -> bool {
    path.extension().and_then(|e| e.to_str()).is_some_and(|e| extensions.contains(&e))
}

fn files_with_extension(dir: &Path, extension: &str) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = fs::read_dir(dir)
        .map(|entries| entries.flatten().map(|e| e.path()).filter(|p| p.is_file() && has_extension(p, &[extension])).collect())
        .unwrap_or_default();
    found.sort();
    found
}

fn single_with_extension(dir: &Path, extension: &str) -> Option<PathBuf> {
    let mut found = files_with_extension(dir, extension);
    (found.len() == 1).then(|| found.remove(0))
}

/// The one checkpoint in a directory. A `.safetensors` beside a `.pt` of the same model is
/// common in releases, so a single safetensors file wins over any number of `.pt` files.
fn find_checkpoint(dir: &Path) -> Result<PathBuf> {
    let safetensors = files_with_extension(dir, "safetensors");
    let pt = files_with_extension(dir, "pt");
    match (safetensors.as_slice(), pt.as_slice()) {
        ([one], _) | ([], [one]) => Ok(one.clone()),
        ([], []) => Err(HubError::NoCheckpoint { dir: dir.to_path_buf() }),
        (many, _) if !many.is_empty() => Err(ambiguous(dir, many)),
        (_, many) => Err(ambiguous(dir, many)),
    }
}

fn ambiguous(dir: &Path, candidates: &[PathBuf]) -> HubError {
    let names: Vec<String> = candidates.iter().filter_map(|p| p.file_name()).map(|n| n.to_string_lossy().into_owned()).collect();
    HubError::AmbiguousCheckpoint { dir: dir.to_path_buf(), candidates: names.join(", ") }
}

#[cfg(test)]
mod tests {
    /// The server shares one hub between its connection tasks and its model thread.
    #[test]
    fn hub_is_shareable_across_threads() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<super::Hub>();
    }
}
