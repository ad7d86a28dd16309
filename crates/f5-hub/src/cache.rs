//! The Hugging Face cache layout, as huggingface_hub's `file_download.py` writes it:
//!
//! ```text
//! <hub cache>/models--{owner}--{repo}/blobs/{etag}                 the bytes
//!                                    /snapshots/{commit}/{path}     relative symlink to the blob
//!                                    /refs/{revision}               the commit hash, no newline
//!                                    /.no_exist/{commit}/{path}     empty: the file is known absent
//! <hub cache>/.locks/models--{owner}--{repo}/{etag}.lock            flock while a blob is written
//! ```
//!
//! Both programs read and write the same tree, so a file fetched by either is found by the other.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{HubError, Result};
use crate::name::{is_commit_hash, is_safe_etag, Reference};

/// huggingface_hub writes this into the cache root so backup tools skip it.
const CACHEDIR_TAG: &str = "Signature: 8a477f597d28d172789f06886806bc55\n\
# This file is a cache directory tag created by huggingface_hub.\n\
# For information about cache directory tags, see:\n\
#\thttps://bford.info/cachedir/\n";

/// What the cache knows about one file at one revision.
#[derive(Debug)]
pub(crate) enum Cached {
    /// The snapshot pointer exists and leads to a file.
    Present(PathBuf),
    /// A previous lookup found that the file does not exist at that commit.
    KnownAbsent,
    /// Nothing recorded: only the network can tell.
    Unknown,
}

pub(crate) struct RepoCache {
    hub_cache: PathBuf,
    folder: String,
    root: PathBuf,
}

impl RepoCache {
    pub(crate) fn new(hub_cache: &Path, reference: &Reference) -> RepoCache {
        let folder = repo_folder_name(&reference.owner, &reference.repo);
        RepoCache { hub_cache: hub_cache.to_path_buf(), root: hub_cache.join(&folder), folder }
    }

    pub(crate) fn root(&self) -> &Path {
        &self.root
    }

    pub(crate) fn blob(&self, etag: &str) -> PathBuf {
        self.root.join("blobs").join(etag)
    }

    /// The partial download of a blob. One name per blob (not per process), because the lock
    /// makes one writer at a time and a later run should resume what an earlier one left.
    pub(crate) fn incomplete(&self, etag: &str) -> PathBuf {
        self.root.join("blobs").join(format!("{etag}.incomplete"))
    }

    pub(crate) fn lock_file(&self, etag: &str) -> PathBuf {
        self.hub_cache.join(".locks").join(&self.folder).join(format!("{etag}.lock"))
    }

    pub(crate) fn pointer(&self, commit: &str, path: &str) -> PathBuf {
        join_repo_path(&self.root.join("snapshots").join(commit), path)
    }

    fn no_exist(&self, commit: &str, path: &str) -> PathBuf {
        join_repo_path(&self.root.join(".no_exist").join(commit), path)
    }

    fn ref_file(&self, revision: &str) -> PathBuf {
        join_repo_path(&self.root.join("refs"), revision)
    }

    /// The commit a revision stands for, without the network: a commit hash is itself, a branch
    /// or tag is whatever `refs/` last recorded.
    pub(crate) fn commit_for(&self, revision: &str) -> Option<String> {
        if is_commit_hash(revision) {
            return Some(revision.to_string());
        }
        let path = self.ref_file(revision);
        // A ref holds 40 characters; anything large is not one of ours.
        if fs::metadata(&path).ok()?.len() > 1024 {
            return None;
        }
        let commit = fs::read_to_string(path).ok()?.trim().to_string();
        is_safe_etag(&commit).then_some(commit)
    }

    pub(crate) fn lookup(&self, reference: &Reference) -> Cached {
        let Some(commit) = self.commit_for(&reference.revision) else {
            return Cached::Unknown;
        };
        let pointer = self.pointer(&commit, &reference.path);
        if fs::metadata(&pointer).is_ok_and(|m| m.is_file()) {
            return Cached::Present(pointer);
        }
        if self.no_exist(&commit, &reference.path).is_file() {
            return Cached::KnownAbsent;
        }
        Cached::Unknown
    }

    /// Records which commit a branch or tag points at, atomically so a concurrent reader never
    /// sees half a hash. Unchanged refs are not rewritten (the cache may be read-only).
    pub(crate) fn write_ref(&self, revision: &str, commit: &str) -> Result<()> {
        if revision == commit {
            return Ok(());
        }
        let path = self.ref_file(revision);
        if fs::read_to_string(&path).is_ok_and(|old| old == commit) {
            return Ok(());
        }
        write_atomically(&path, commit.as_bytes())
    }

    pub(crate) fn mark_absent(&self, commit: &str, path: &str) -> Result<()> {
        let marker = self.no_exist(commit, path);
        if let Some(parent) = marker.parent() {
            fs::create_dir_all(parent).map_err(HubError::io(parent))?;
        }
        fs::OpenOptions::new().create(true).append(true).open(&marker).map_err(HubError::io(&marker))?;
        Ok(())
    }

    /// Points `snapshots/{commit}/{path}` at `blobs/{etag}` with a relative link, as
    /// huggingface_hub does, so the cache survives being moved. The link is made under a
    /// temporary name and renamed over the pointer, so readers see the old or the new one.
    pub(crate) fn link(&self, commit: &str, path: &str, etag: &str) -> Result<PathBuf> {
        let pointer = self.pointer(commit, path);
        let depth = path.split('/').count() - 1;
        let target: PathBuf = std::iter::repeat_n("..", depth + 2).collect::<PathBuf>().join("blobs").join(etag);
        let parent = pointer.parent().unwrap_or(&self.root);
        fs::create_dir_all(parent).map_err(HubError::io(parent))?;
        if fs::read_link(&pointer).is_ok_and(|existing| existing == target) {
            return Ok(pointer);
        }
        let temp = temp_sibling(&pointer);
        symlink(&target, &temp).map_err(HubError::io(&temp))?;
        fs::rename(&temp, &pointer).map_err(|source| {
            let _ = fs::remove_file(&temp);
            HubError::Io { path: pointer.clone(), source }
        })?;
        Ok(pointer)
    }

    pub(crate) fn tag_cache_dir(&self) {
        let tag = self.hub_cache.join("CACHEDIR.TAG");
        if !tag.exists() {
            // Best effort, as in huggingface_hub: a missing tag only affects backup tools.
            let _ = fs::write(tag, CACHEDIR_TAG);
        }
    }
}

/// `models--{owner}--{repo}`.
pub(crate) fn repo_folder_name(owner: &str, repo: &str) -> String {
    format!("models--{owner}--{repo}")
}

fn join_repo_path(base: &Path, path: &str) -> PathBuf {
    path.split('/').fold(base.to_path_buf(), |acc, part| acc.join(part))
}

/// A name beside `path` that no other writer (thread or process) uses at the same time.
pub(crate) fn temp_sibling(path: &Path) -> PathBuf {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    path.with_file_name(format!("{name}.{}-{n}.tmp", std::process::id()))
}

pub(crate) fn write_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent).map_err(HubError::io(parent))?;
    }
    let temp = temp_sibling(path);
    let write = || -> std::io::Result<()> {
        let mut file = fs::File::create(&temp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        fs::rename(&temp, path)
    };
    write().map_err(|source| {
        let _ = fs::remove_file(&temp);
        HubError::Io { path: path.to_path_buf(), source }
    })
}

#[cfg(unix)]
fn symlink(target: &Path, link: &Path) -> std::io::Result<()> {
    std::os::unix::fs::symlink(target, link)
}

#[cfg(windows)]
fn symlink(target: &Path, link: &Path) -> std::io::Result<()> {
    std::os::windows::fs::symlink_file(target, link)
}

/// One file of one cached snapshot.
#[derive(Debug, Clone)]
pub(crate) struct CachedFile {
    pub owner: String,
    pub repo: String,
    pub commit: String,
    pub path: String,
    pub size: u64,
    pub location: PathBuf,
    /// Branches and tags whose ref points at this commit.
    pub refs: Vec<String>,
}

/// Every file in every snapshot of every model repository in the cache. Entries whose blob is
/// missing (a broken link) are skipped: they would not resolve either.
pub(crate) fn scan(hub_cache: &Path) -> Vec<CachedFile> {
    let mut out = Vec::new();
    let Ok(repos) = fs::read_dir(hub_cache) else {
        return out;
    };
    let mut repo_dirs: Vec<(String, String, PathBuf)> = repos
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name().into_string().ok()?;
            let rest = name.strip_prefix("models--")?;
            let (owner, repo) = rest.split_once("--")?;
            Some((owner.to_string(), repo.to_string(), entry.path()))
        })
        .collect();
    repo_dirs.sort();
    for (owner, repo, root) in repo_dirs {
        let mut refs: Vec<(String, String)> = Vec::new();
        collect_files(&root.join("refs"), "", &mut |name, path| {
            if let Ok(commit) = fs::read_to_string(path) {
                refs.push((name.to_string(), commit.trim().to_string()));
            }
        });
        let Ok(snapshots) = fs::read_dir(root.join("snapshots")) else { continue };
        let mut commits: Vec<(String, PathBuf)> =
            snapshots.flatten().filter_map(|e| Some((e.file_name().into_string().ok()?, e.path()))).collect();
        commits.sort();
        for (commit, dir) in commits {
            let names: Vec<String> = refs.iter().filter(|(_, c)| *c == commit).map(|(n, _)| n.clone()).collect();
            let mut files = Vec::new();
            collect_files(&dir, "", &mut |path, location| {
                if let Ok(meta) = fs::metadata(location) {
                    files.push((path.to_string(), location.to_path_buf(), meta.len()));
                }
            });
            files.sort();
            for (path, location, size) in files {
                out.push(CachedFile {
                    owner: owner.clone(),
                    repo: repo.clone(),
                    commit: commit.clone(),
                    path,
                    size,
                    location,
                    refs: names.clone(),
                });
            }
        }
    }
    out
}

/// Walks `dir`, calling `visit(relative path with '/', full path)` for each non-directory.
fn collect_files(dir: &Path, prefix: &str, visit: &mut dyn FnMut(&str, &Path)) {
    let Ok(entries) = fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let Ok(name) = entry.file_name().into_string() else { continue };
        let relative = if prefix.is_empty() { name } else { format!("{prefix}/{name}") };
        let path = entry.path();
        // symlink_metadata: a snapshot holds links to files; a linked directory is not followed.
        match fs::symlink_metadata(&path) {
            Ok(meta) if meta.is_dir() => collect_files(&path, &relative, visit),
            Ok(_) => visit(&relative, &path),
            Err(_) => {}
        }
    }
}

/// Total size of the regular files under `dir` (links followed), for listing local models.
pub(crate) fn dir_size(dir: &Path) -> u64 {
    let mut total = 0;
    collect_files(dir, "", &mut |_, path| total += fs::metadata(path).map(|m| m.len()).unwrap_or(0));
    total
}
