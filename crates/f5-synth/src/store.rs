//! The voice store: `$F5_HOME/voices/<id>/{reference.<ext>, config.json}`.
//!
//! Ids are plain names (`[A-Za-z0-9_-]{1,64}`): no separator, no dot, so nothing a request sends
//! can name a path outside the store. Writes go to a temporary directory inside the store and
//! are renamed into place, so a crash or a concurrent reader never sees half a voice, and an
//! existing voice is never lost to a failed replacement.

use std::path::{Path, PathBuf};

use crate::SynthError;

/// Longest accepted id.
pub const MAX_ID_LEN: usize = 64;
/// Largest reference recording the store accepts (a 12 s clip is ~1 MB as 16-bit wav; this
/// leaves room for long uncompressed uploads that are clipped on load).
pub const MAX_AUDIO_BYTES: usize = 50 << 20;
/// Longest transcript accepted, in bytes.
pub const MAX_TRANSCRIPT_BYTES: usize = 4096;

/// One stored voice.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VoiceEntry {
    pub id: String,
    pub transcript: String,
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

fn bad_id(id: &str) -> SynthError {
    let shown: String = id.chars().take(80).collect();
    SynthError::Store(format!("invalid voice id {shown:?}: use 1–{MAX_ID_LEN} letters, digits, '_' or '-'"))
}

/// `$F5_HOME`, default `~/.f5`.
pub fn f5_home() -> PathBuf {
    if let Some(h) = std::env::var_os("F5_HOME").filter(|h| !h.is_empty()) {
        return PathBuf::from(h);
    }
    std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(|| PathBuf::from(".")).join(".f5")
}

impl VoiceStore {
    /// A store at `root`, created if absent.
    pub fn open(root: impl Into<PathBuf>) -> Result<Self, SynthError> {
        let root = root.into();
        std::fs::create_dir_all(&root).map_err(|e| SynthError::Store(format!("cannot create {}: {e}", root.display())))?;
        Ok(VoiceStore { root })
    }

    /// `$F5_HOME/voices`.
    pub fn from_env() -> Result<Self, SynthError> {
        Self::open(f5_home().join("voices"))
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    fn dir(&self, id: &str) -> Result<PathBuf, SynthError> {
        if !valid_id(id) {
            return Err(bad_id(id));
        }
        Ok(self.root.join(id))
    }

    /// The voice `id`, or a not-found error naming it.
    pub fn get(&self, id: &str) -> Result<VoiceEntry, SynthError> {
        let dir = self.dir(id)?;
        read_entry(id, &dir).ok_or_else(|| SynthError::NotFound(format!("no voice {id:?} in {}", self.root.display())))
    }

    /// Every voice that has a recording and a transcript, sorted by id.
    pub fn list(&self) -> Result<Vec<VoiceEntry>, SynthError> {
        let rd = std::fs::read_dir(&self.root).map_err(|e| SynthError::Store(format!("cannot list {}: {e}", self.root.display())))?;
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

    /// Stores a voice. `audio` must decode as audio (checked before anything is written);
    /// `extension` names its container (`wav`, `mp3`, `flac`, `ogg`). An existing voice is
    /// replaced only with `replace`.
    pub fn add(&self, id: &str, transcript: &str, audio: &[u8], extension: &str, replace: bool) -> Result<VoiceEntry, SynthError> {
        let dir = self.dir(id)?;
        let ext = extension.to_ascii_lowercase();
        if !matches!(ext.as_str(), "wav" | "mp3" | "flac" | "ogg") {
            return Err(SynthError::Store(format!("unsupported audio type {extension:?}: use wav, mp3, flac or ogg")));
        }
        if transcript.trim().is_empty() {
            return Err(SynthError::Store("the transcript is empty".into()));
        }
        if transcript.len() > MAX_TRANSCRIPT_BYTES {
            return Err(SynthError::Store(format!("the transcript is {} bytes; the limit is {MAX_TRANSCRIPT_BYTES}", transcript.len())));
        }
        if audio.len() > MAX_AUDIO_BYTES {
            return Err(SynthError::Store(format!("the recording is {} bytes; the limit is {MAX_AUDIO_BYTES}", audio.len())));
        }
        f5_audio::decode_bytes(audio, "the uploaded recording", Some(&ext)).map_err(|e| SynthError::Reference(e.to_string()))?;
        if dir.exists() && !replace {
            return Err(SynthError::Store(format!("voice {id:?} already exists")));
        }
        let tmp = self.root.join(format!(".tmp-{id}-{}-{}", std::process::id(), unique()));
        let write = || -> std::io::Result<()> {
            std::fs::create_dir(&tmp)?;
            std::fs::write(tmp.join(format!("reference.{ext}")), audio)?;
            let config = format!("{{\"transcript\": {}}}\n", json_string(transcript));
            std::fs::write(tmp.join("config.json"), config)?;
            if dir.exists() {
                // Move the old voice aside first, so a failed rename leaves it recoverable.
                let old = self.root.join(format!(".old-{id}-{}-{}", std::process::id(), unique()));
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
            return Err(SynthError::Store(format!("cannot write voice {id:?}: {e}")));
        }
        self.get(id)
    }

    /// Deletes a voice.
    pub fn remove(&self, id: &str) -> Result<(), SynthError> {
        let dir = self.dir(id)?;
        if read_entry(id, &dir).is_none() {
            return Err(SynthError::NotFound(format!("no voice {id:?} in {}", self.root.display())));
        }
        let trash = self.root.join(format!(".del-{id}-{}-{}", std::process::id(), unique()));
        std::fs::rename(&dir, &trash)
            .and_then(|_| std::fs::remove_dir_all(&trash))
            .map_err(|e| SynthError::Store(format!("cannot remove voice {id:?}: {e}")))
    }
}

fn unique() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
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
        assert!(matches!(s.get("alice"), Err(SynthError::NotFound(_))));
        assert!(s.list().unwrap().is_empty());
        // Nothing but voices is left behind.
        assert_eq!(std::fs::read_dir(s.root()).unwrap().count(), 0);
    }

    #[test]
    fn bad_uploads_write_nothing_and_keep_what_exists() {
        let s = store();
        s.add("bob", "Original.", &wav(), "wav", false).unwrap();
        assert!(s.add("bob", "New.", b"not audio at all", "wav", true).is_err());
        assert_eq!(s.get("bob").unwrap().transcript, "Original.");
        assert!(s.add("../evil", "x", &wav(), "wav", false).is_err());
        assert!(s.add("carol", " ", &wav(), "wav", false).is_err());
        assert!(s.add("carol", "x", &wav(), "exe", false).is_err());
        assert_eq!(s.list().unwrap().len(), 1);
        assert_eq!(std::fs::read_dir(s.root()).unwrap().count(), 1);
    }
}
