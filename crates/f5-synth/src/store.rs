//! The voice store: `$F5_HOME/voices/<id>/{reference.<ext>, config.json}`.
//!
//! Ids are plain names (`[A-Za-z0-9_-]{1,64}`): no separator, no dot, so nothing a request sends
//! can name a path outside the store. Writes go to a temporary directory inside the store and
//! are renamed into place, so a crash never leaves half a voice, and an existing voice is never
//! lost to a failed replacement.
//!
//! Every change holds an exclusive lock on the store directory (`flock`), and every read that
//! wants a consistent voice ([`VoiceStore::read`]) a shared one, so concurrent replacements and
//! deletions — from the server's threads or from a CLI running beside it — happen one at a time
//! and a reader sees the old voice or the new one, never the moment between the two renames.
//! Temporaries that a crashed writer left behind are swept when the store is opened.
//!
//! Several servers may share one store directory (replicas behind a load balancer, on one host
//! or a shared volume whose locks work across hosts, as NFSv4's do): nothing about the voices
//! is cached in memory, every request reads the store, so a voice one replica adds is heard at
//! once by the others. Adding a voice that is already stored with the same recording bytes and
//! transcript succeeds without writing (a client's retry that a balancer sends to another
//! replica is not a conflict); only different content under the same id needs `replace`.

use std::fs::File;
use std::path::{Path, PathBuf};

use crate::SynthError;

/// Longest accepted id.
pub const MAX_ID_LEN: usize = 64;
/// Largest reference recording the store accepts (a 12 s clip is ~1 MB as 16-bit wav; this
/// leaves room for long uncompressed uploads that are clipped on load).
pub const MAX_AUDIO_BYTES: usize = 50 << 20;
/// Longest transcript accepted, in bytes.
pub const MAX_TRANSCRIPT_BYTES: usize = 4096;

/// Why the store refused or failed. The variants say whose the problem is: everything but
/// [`StoreError::Io`] is about the request (the id, the recording, the transcript), `Io` is the
/// store's own failure.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// An id that could not be a directory name safely (path separators, dots, length).
    #[error("invalid voice id {0:?}: use 1–{MAX_ID_LEN} letters, digits, '_' or '-'")]
    InvalidId(String),
    /// The recording's file type is not one the decoder reads.
    #[error("unsupported audio type {0:?}: use wav, mp3, flac or ogg")]
    UnsupportedType(String),
    /// Without a transcript F5 cannot align the recording with the text.
    #[error("the transcript is empty: give the words spoken in the recording")]
    EmptyTranscript,
    /// The transcript is larger than any 12 s recording could say.
    #[error("the transcript is {0} bytes; the limit is {MAX_TRANSCRIPT_BYTES}")]
    TranscriptTooLong(usize),
    /// The upload is larger than the store accepts.
    #[error("the recording is {0} bytes; the limit is {MAX_AUDIO_BYTES}")]
    AudioTooLarge(usize),
    /// The recording is longer than the store accepts (only its first seconds would be used).
    #[error("the recording is longer than {0} s; send 3–12 s of clean speech")]
    AudioTooLong(f64),
    /// Not audio, silent, too little voice: the recording cannot clone a voice.
    #[error("the recording cannot be used: {0}")]
    Unusable(String),
    /// A voice of that id exists and the request did not ask to replace it.
    #[error("voice {0:?} already exists: send replace=true to overwrite it")]
    Exists(String),
    /// No voice of that id is stored.
    #[error("no voice {0:?}")]
    NotFound(String),
    /// The store's files could not be read or written (the message may name paths: it is for
    /// the operator, not for a remote client).
    #[error("the voice store cannot {action}: {source}")]
    Io {
        /// What the store was doing (for the operator's log).
        action: String,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
}

impl From<StoreError> for SynthError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::NotFound(_) => SynthError::NotFound(e.to_string()),
            StoreError::Unusable(m) => SynthError::Reference(m),
            other => SynthError::Store(other.to_string()),
        }
    }
}

fn io_error(action: impl Into<String>) -> impl FnOnce(std::io::Error) -> StoreError {
    let action = action.into();
    move |source| StoreError::Io { action, source }
}

/// One stored voice.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VoiceEntry {
    /// The voice's id, which is also its directory name.
    pub id: String,
    /// The words spoken in the recording.
    pub transcript: String,
    /// The recording as uploaded (its extension says its type).
    pub audio: PathBuf,
}

/// A directory of voices.
#[derive(Clone, Debug)]
pub struct VoiceStore {
    root: PathBuf,
}

/// `true` for ids the store accepts.
pub fn valid_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= MAX_ID_LEN && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

fn bad_id(id: &str) -> StoreError {
    StoreError::InvalidId(id.chars().take(80).collect())
}

/// `$F5_HOME`, default `~/.f5`.
pub fn f5_home() -> PathBuf {
    if let Some(h) = std::env::var_os("F5_HOME").filter(|h| !h.is_empty()) {
        return PathBuf::from(h);
    }
    std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(|| PathBuf::from(".")).join(".f5")
}

/// The store's lock, released when dropped (closing the descriptor releases the `flock`).
struct StoreLock(#[allow(dead_code)] File);

/// Prefixes of the store's own temporaries; none is a valid id (ids have no dot).
const TMP_PREFIX: &str = ".tmp-";
const OLD_PREFIX: &str = ".old-";
const DEL_PREFIX: &str = ".del-";

impl VoiceStore {
    /// A store at `root`, created if absent; temporaries a crashed writer left are swept (an
    /// old voice moved aside by an interrupted replacement is put back).
    pub fn open(root: impl Into<PathBuf>) -> Result<Self, StoreError> {
        let root = root.into();
        std::fs::create_dir_all(&root).map_err(io_error(format!("create {}", root.display())))?;
        let store = VoiceStore { root };
        store.sweep()?;
        Ok(store)
    }

    /// `$F5_HOME/voices`.
    pub fn from_env() -> Result<Self, StoreError> {
        Self::open(f5_home().join("voices"))
    }

    /// The directory the voices live in, one subdirectory each.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn dir(&self, id: &str) -> Result<PathBuf, StoreError> {
        if !valid_id(id) {
            return Err(bad_id(id));
        }
        Ok(self.root.join(id))
    }

    /// Locks the whole store: exclusive for a change, shared for a consistent read.
    fn lock(&self, exclusive: bool) -> Result<StoreLock, StoreError> {
        let action = || format!("lock {}", self.root.display());
        let dir = File::open(&self.root).map_err(io_error(action()))?;
        if exclusive { dir.lock() } else { dir.lock_shared() }.map_err(io_error(action()))?;
        Ok(StoreLock(dir))
    }

    /// Removes what interrupted writers left. Runs under the exclusive lock, so any temporary
    /// seen here belongs to a writer that is gone.
    fn sweep(&self) -> Result<(), StoreError> {
        let _lock = self.lock(true)?;
        let rd = std::fs::read_dir(&self.root).map_err(io_error(format!("list {}", self.root.display())))?;
        for entry in rd.flatten() {
            let Some(name) = entry.file_name().to_str().map(str::to_string) else { continue };
            let path = entry.path();
            if name.starts_with(TMP_PREFIX) || name.starts_with(DEL_PREFIX) {
                let _ = std::fs::remove_dir_all(&path);
            } else if let Some(rest) = name.strip_prefix(OLD_PREFIX) {
                // `.old-<id>-<pid>-<n>`: the replacement stopped between its two renames. If
                // the new voice never arrived, the old one goes back; otherwise it is garbage.
                let id = rest.rsplitn(3, '-').nth(2).unwrap_or_default();
                let home = self.root.join(id);
                if valid_id(id) && !home.exists() && std::fs::rename(&path, &home).is_ok() {
                    continue;
                }
                let _ = std::fs::remove_dir_all(&path);
            }
        }
        Ok(())
    }

    /// The voice `id`, or a not-found error naming it.
    pub fn get(&self, id: &str) -> Result<VoiceEntry, StoreError> {
        let dir = self.dir(id)?;
        read_entry(id, &dir).ok_or_else(|| StoreError::NotFound(id.to_string()))
    }

    /// The voice `id` and its recording's bytes, read together under the shared lock: a
    /// replacement running at the same time is seen whole or not at all.
    pub fn read(&self, id: &str) -> Result<(VoiceEntry, Vec<u8>), StoreError> {
        let dir = self.dir(id)?;
        let _lock = self.lock(false)?;
        let entry = read_entry(id, &dir).ok_or_else(|| StoreError::NotFound(id.to_string()))?;
        let bytes = f5_audio::decode::read_regular_file(&entry.audio, MAX_AUDIO_BYTES as u64)
            .map_err(|e| StoreError::Unusable(format!("voice {id:?}: its recording cannot be read ({})", io_reason(&e))))?;
        Ok((entry, bytes))
    }

    /// Every voice that has a recording and a transcript, sorted by id.
    pub fn list(&self) -> Result<Vec<VoiceEntry>, StoreError> {
        let rd = std::fs::read_dir(&self.root).map_err(io_error(format!("list {}", self.root.display())))?;
        let mut out: Vec<VoiceEntry> = rd
            .filter_map(|e| e.ok())
            .filter_map(|e| {
                let id = e.file_name().to_str()?.to_string();
                if !valid_id(&id) {
                    return None; // temporaries and anything not ours
                }
                read_entry(&id, &e.path())
            })
            .collect();
        out.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(out)
    }

    /// Stores a voice. The recording is decoded once, at most [`DecodeLimit::REFERENCE`] of
    /// it, and must make a usable voice (not silent, enough speech) before anything is written;
    /// `extension` names its container (`wav`, `mp3`, `flac`, `ogg`). An existing voice is
    /// replaced only with `replace`; one stored with exactly this content is left as it is and
    /// returned, so adding the same voice twice (from two replicas) agrees instead of failing.
    ///
    /// [`DecodeLimit::REFERENCE`]: f5_audio::decode::DecodeLimit::REFERENCE
    pub fn add(&self, id: &str, transcript: &str, audio: &[u8], extension: &str, replace: bool) -> Result<VoiceEntry, StoreError> {
        let dir = self.dir(id)?;
        let ext = extension.to_ascii_lowercase();
        if !matches!(ext.as_str(), "wav" | "mp3" | "flac" | "ogg") {
            return Err(StoreError::UnsupportedType(extension.chars().take(16).collect()));
        }
        if transcript.trim().is_empty() {
            return Err(StoreError::EmptyTranscript);
        }
        if transcript.len() > MAX_TRANSCRIPT_BYTES {
            return Err(StoreError::TranscriptTooLong(transcript.len()));
        }
        if audio.len() > MAX_AUDIO_BYTES {
            return Err(StoreError::AudioTooLarge(audio.len()));
        }
        // A cheap answer before the decode; checked again under the lock.
        if !replace {
            if let Some(existing) = read_entry(id, &dir) {
                return same_content(&existing, transcript, audio, &ext)
                    .then_some(existing)
                    .ok_or_else(|| StoreError::Exists(id.to_string()));
            }
        }
        check_recording(audio, &ext, transcript)?;
        let _lock = self.lock(true)?;
        if !replace && dir.exists() {
            return match read_entry(id, &dir) {
                Some(existing) if same_content(&existing, transcript, audio, &ext) => Ok(existing),
                _ => Err(StoreError::Exists(id.to_string())),
            };
        }
        let tmp = self.root.join(format!("{TMP_PREFIX}{id}-{}-{}", std::process::id(), unique()));
        let write = || -> std::io::Result<()> {
            std::fs::create_dir(&tmp)?;
            write_synced(&tmp.join(format!("reference.{ext}")), audio)?;
            let config = format!("{{\"transcript\": {}}}\n", json_string(transcript));
            write_synced(&tmp.join("config.json"), config.as_bytes())?;
            if dir.exists() {
                // Move the old voice aside first, so a failed rename leaves it recoverable (and
                // the sweep puts it back after a crash).
                let old = self.root.join(format!("{OLD_PREFIX}{id}-{}-{}", std::process::id(), unique()));
                std::fs::rename(&dir, &old)?;
                match std::fs::rename(&tmp, &dir) {
                    Ok(()) => std::fs::remove_dir_all(&old),
                    Err(e) => {
                        let _ = std::fs::rename(&old, &dir);
                        Err(e)
                    }
                }
            } else {
                std::fs::rename(&tmp, &dir)
            }
        };
        if let Err(e) = write() {
            let _ = std::fs::remove_dir_all(&tmp);
            return Err(StoreError::Io { action: format!("write voice {id:?}"), source: e });
        }
        self.get(id)
    }

    /// Deletes a voice.
    pub fn remove(&self, id: &str) -> Result<(), StoreError> {
        let dir = self.dir(id)?;
        let _lock = self.lock(true)?;
        if !dir.exists() {
            return Err(StoreError::NotFound(id.to_string()));
        }
        let trash = self.root.join(format!("{DEL_PREFIX}{id}-{}-{}", std::process::id(), unique()));
        std::fs::rename(&dir, &trash)
            .and_then(|_| std::fs::remove_dir_all(&trash))
            .map_err(|source| StoreError::Io { action: format!("remove voice {id:?}"), source })
    }
}

/// Decodes at most the reference limit of a recording and prepares it as a voice, to refuse a
/// recording that is not audio, too long, silent or too short before it is stored.
fn check_recording(audio: &[u8], ext: &str, transcript: &str) -> Result<(), StoreError> {
    use f5_audio::decode::DecodeLimit;
    let limit = DecodeLimit::REFERENCE;
    let decoded = f5_audio::decode::decode_bytes_limited(audio, "the recording", Some(ext), limit)
        .map_err(|e| StoreError::Unusable(e.to_string()))?;
    if decoded.cut {
        return Err(StoreError::AudioTooLong(limit.max_seconds));
    }
    crate::Voice::from_audio(&decoded.audio, transcript, f5_audio::level::TARGET_RMS).map(|_| ()).map_err(|e| match e {
        SynthError::Reference(m) => StoreError::Unusable(m),
        other => StoreError::Unusable(other.to_string()),
    })
}

/// The reason of a read error without the path it names.
fn io_reason(e: &f5_audio::AudioError) -> String {
    match e {
        f5_audio::AudioError::Io { source, .. } => source.to_string(),
        other => other.to_string(),
    }
}

fn write_synced(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut f = File::create(path)?;
    f.write_all(bytes)?;
    f.sync_all()
}

/// Whether a stored voice is exactly this one: the same transcript, container and recording
/// bytes (compared whole; a reference is at most [`MAX_AUDIO_BYTES`]).
fn same_content(existing: &VoiceEntry, transcript: &str, audio: &[u8], ext: &str) -> bool {
    existing.transcript == transcript
        && existing.audio.extension().and_then(|e| e.to_str()) == Some(ext)
        && std::fs::read(&existing.audio).is_ok_and(|stored| stored == audio)
}

/// A number for temporary names that no other writer uses at the same moment: the process id
/// alone repeats across containers (each replica may be pid 1), so the clock's nanoseconds and a
/// counter go in as well.
fn unique() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    nanos.wrapping_add(N.fetch_add(1, Ordering::Relaxed))
}

fn json_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Reads `config.json`'s transcript (the `"transcript"` or `"ref_text"` field).
fn read_transcript(config: &Path) -> Option<String> {
    let text = std::fs::read_to_string(config).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    v.get("transcript").or_else(|| v.get("ref_text")).and_then(|t| t.as_str()).map(str::to_string)
}

fn read_entry(id: &str, dir: &Path) -> Option<VoiceEntry> {
    let transcript = read_transcript(&dir.join("config.json"))?;
    let mut audio: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.file_stem().is_some_and(|s| s == "reference") && p.extension().is_some_and(|e| e != "json"))
        .collect();
    audio.sort();
    Some(VoiceEntry { id: id.to_string(), transcript, audio: audio.into_iter().next()? })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store() -> VoiceStore {
        let dir = std::env::temp_dir().join(format!("f5-store-{}-{}", std::process::id(), unique()));
        VoiceStore::open(dir).unwrap()
    }

    fn wav() -> Vec<u8> {
        std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/../../fixtures/audio/ref_22050.wav")).unwrap()
    }

    #[test]
    fn ids_that_could_escape_are_refused() {
        for id in ["", "..", "../x", "a/b", "a\\b", "a.b", "%2e%2e", "a\0b", &"x".repeat(65), "ä"] {
            assert!(!valid_id(id), "{id:?}");
        }
        for id in ["alice", "Bob_2", "x-y", &"x".repeat(64)] {
            assert!(valid_id(id), "{id:?}");
        }
    }

    #[test]
    fn add_list_get_remove() {
        let s = store();
        let e = s.add("alice", "Hello \"there\".", &wav(), "wav", false).unwrap();
        assert_eq!(e.transcript, "Hello \"there\".");
        assert!(s.add("alice", "again", &wav(), "wav", false).is_err(), "no silent overwrite");
        s.add("alice", "replaced", &wav(), "WAV", true).unwrap();
        assert_eq!(s.get("alice").unwrap().transcript, "replaced");
        assert_eq!(s.list().unwrap().len(), 1);
        s.remove("alice").unwrap();
        assert!(matches!(s.get("alice"), Err(StoreError::NotFound(_))));
        assert!(matches!(s.remove("alice"), Err(StoreError::NotFound(_))));
        assert!(s.list().unwrap().is_empty());
        // Nothing but voices is left behind.
        assert_eq!(std::fs::read_dir(s.root()).unwrap().count(), 0);
    }

    /// Two stores on one directory, as two replicas: the same voice added by both (at once, and
    /// again later) agrees, without `replace`; other content under that id is still refused;
    /// what one adds or removes the other sees at once.
    #[test]
    fn replicas_sharing_a_directory_agree() {
        let a = store();
        let b = VoiceStore::open(a.root()).unwrap();
        let audio = wav();
        std::thread::scope(|scope| {
            for s in [&a, &b, &a, &b] {
                let audio = &audio;
                scope.spawn(move || s.add("gina", "Same words.", audio, "wav", false).unwrap());
            }
        });
        assert_eq!(b.get("gina").unwrap().transcript, "Same words.");
        let before = std::fs::metadata(a.get("gina").unwrap().audio).unwrap().modified().unwrap();
        b.add("gina", "Same words.", &audio, "wav", false).unwrap();
        let after = std::fs::metadata(a.get("gina").unwrap().audio).unwrap().modified().unwrap();
        assert_eq!(before, after, "an identical add writes nothing");
        assert!(matches!(b.add("gina", "Other words.", &audio, "wav", false), Err(StoreError::Exists(_))));
        let mut louder = audio.clone();
        let last = louder.len() - 1;
        louder[last] ^= 1;
        assert!(matches!(b.add("gina", "Same words.", &louder, "wav", false), Err(StoreError::Exists(_))));
        assert_eq!(std::fs::read(a.get("gina").unwrap().audio).unwrap(), audio, "the first content stays");
        a.remove("gina").unwrap();
        assert!(matches!(b.get("gina"), Err(StoreError::NotFound(_))));
        assert_eq!(std::fs::read_dir(a.root()).unwrap().count(), 0, "no temporaries left");
    }

    #[test]
    fn bad_uploads_write_nothing_and_keep_what_exists() {
        let s = store();
        s.add("bob", "Original.", &wav(), "wav", false).unwrap();
        assert!(matches!(s.add("bob", "New.", b"not audio at all", "wav", true), Err(StoreError::Unusable(_))));
        assert_eq!(s.get("bob").unwrap().transcript, "Original.");
        assert!(matches!(s.add("bob", "New.", &wav(), "wav", false), Err(StoreError::Exists(_))));
        assert!(matches!(s.add("../evil", "x", &wav(), "wav", false), Err(StoreError::InvalidId(_))));
        assert!(matches!(s.add("carol", " ", &wav(), "wav", false), Err(StoreError::EmptyTranscript)));
        assert!(matches!(s.add("carol", "x", &wav(), "exe", false), Err(StoreError::UnsupportedType(_))));
        assert_eq!(s.list().unwrap().len(), 1);
        assert_eq!(std::fs::read_dir(s.root()).unwrap().count(), 1);
    }

    /// Many threads replacing and deleting one voice: every call either succeeds or is refused
    /// for a reason of the request (not found), never an I/O failure; nothing is left but the
    /// voice itself; readers see a whole voice or none.
    #[test]
    fn concurrent_replace_and_remove_of_one_voice() {
        let s = store();
        let audio = wav();
        s.add("dora", "First.", &audio, "wav", false).unwrap();
        std::thread::scope(|scope| {
            for t in 0..12 {
                let (s, audio) = (&s, &audio);
                scope.spawn(move || {
                    for i in 0..5 {
                        let result = if (t + i) % 3 == 0 {
                            s.remove("dora").map(|_| ())
                        } else {
                            s.add("dora", &format!("Take {t} {i}."), audio, "wav", true).map(|_| ())
                        };
                        match result {
                            Ok(()) | Err(StoreError::NotFound(_)) => {}
                            Err(e) => panic!("thread {t} call {i}: {e}"),
                        }
                        match s.read("dora") {
                            Ok((entry, bytes)) => assert_eq!(bytes.len(), audio.len(), "{entry:?}"),
                            Err(StoreError::NotFound(_)) => {}
                            Err(e) => panic!("read: {e}"),
                        }
                    }
                });
            }
        });
        let left: Vec<String> =
            std::fs::read_dir(s.root()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        assert!(left.is_empty() || left == ["dora"], "only the voice remains: {left:?}");
    }

    /// What a crashed writer leaves is cleaned when the store opens; a voice moved aside by an
    /// interrupted replacement comes back.
    #[test]
    fn opening_sweeps_stale_temporaries() {
        let s = store();
        s.add("erin", "Kept.", &wav(), "wav", false).unwrap();
        s.add("fred", "Moved aside.", &wav(), "wav", false).unwrap();
        std::fs::create_dir(s.root().join(".tmp-erin-1-2")).unwrap();
        std::fs::write(s.root().join(".tmp-erin-1-2/reference.wav"), b"partial").unwrap();
        std::fs::create_dir(s.root().join(".del-gone-1-3")).unwrap();
        std::fs::create_dir(s.root().join(".old-erin-1-4")).unwrap();
        std::fs::rename(s.root().join("fred"), s.root().join(".old-fred-1-5")).unwrap();
        let reopened = VoiceStore::open(s.root()).unwrap();
        let mut left: Vec<String> =
            std::fs::read_dir(s.root()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        left.sort();
        assert_eq!(left, ["erin", "fred"]);
        assert_eq!(reopened.get("fred").unwrap().transcript, "Moved aside.");
    }
}
