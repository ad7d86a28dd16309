//! What a name may look like: local ids, `owner/repo/path[@revision]` references, and the
//! values a server sends back that end up as file names in the cache.

use crate::error::{HubError, Result};

/// Longest name accepted at all; anything longer is a mistake, not a model.
pub const MAX_NAME_LEN: usize = 4096;
/// Longest local id (`[A-Za-z0-9_-]{1,64}`).
pub const MAX_ID_LEN: usize = 64;
/// Hugging Face limits owner and repository names to 96 characters.
const MAX_REPO_PART_LEN: usize = 96;
/// Longest path inside a repository.
const MAX_REPO_PATH_LEN: usize = 1024;
/// Longest revision (branch, tag, `refs/pr/N`, commit hash).
const MAX_REVISION_LEN: usize = 256;

pub(crate) const DEFAULT_REVISION: &str = "main";

/// Whether `id` may be joined onto a directory this program owns: a plain identifier with no
/// separator and no dot, so nothing can walk out of the store.
pub fn is_valid_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= MAX_ID_LEN && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Why `id` is not a local id, or `None` when it is one.
pub(crate) fn id_problem(id: &str) -> Option<String> {
    if id.len() > MAX_ID_LEN {
        return Some(format!("ids are at most {MAX_ID_LEN} characters"));
    }
    if let Some(c) = id.chars().find(|c| !(c.is_ascii_alphanumeric() || *c == '_' || *c == '-')) {
        return Some(format!("ids use only letters, digits, '_' and '-', not {c:?}"));
    }
    None
}

/// A file (or, for vocoders, a whole repository) on a Hugging Face Hub.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Reference {
    /// The user or organisation.
    pub owner: String,
    /// The repository's name.
    pub repo: String,
    /// Path inside the repository, `/`-separated; empty when the reference names the repository.
    pub path: String,
    /// Branch, tag or commit; `main` unless given after `@`.
    pub revision: String,
}

impl Reference {
    /// Parses `owner/repo[/path/to/file][@revision]`.
    ///
    /// The revision follows the last `@`, so a file whose name contains `@` needs an explicit
    /// `@revision` after it.
    pub fn parse(name: &str) -> Result<Reference> {
        let invalid = |reason: String| HubError::InvalidReference { name: name.to_string(), reason };
        if name.is_empty() {
            return Err(HubError::EmptyName);
        }
        if name.len() > MAX_NAME_LEN {
            return Err(HubError::NameTooLong { len: name.len(), max: MAX_NAME_LEN });
        }
        let (body, revision) = match name.rfind('@') {
            Some(at) => (&name[..at], &name[at + 1..]),
            None => (name, DEFAULT_REVISION),
        };
        check_revision(revision).map_err(invalid)?;
        let mut parts = body.splitn(3, '/');
        let owner = parts.next().unwrap_or_default();
        let repo = parts.next().ok_or_else(|| invalid("expected owner/repo/path".to_string()))?;
        let path = parts.next().unwrap_or_default();
        check_repo_part("owner", owner).map_err(invalid)?;
        check_repo_part("repository", repo).map_err(invalid)?;
        if !path.is_empty() || body.ends_with('/') {
            check_repo_path(path).map_err(invalid)?;
        }
        Ok(Reference { owner: owner.to_string(), repo: repo.to_string(), path: path.to_string(), revision: revision.to_string() })
    }

    /// `owner/repo`.
    pub fn repo_id(&self) -> String {
        format!("{}/{}", self.owner, self.repo)
    }

    /// The same repository and revision, another file in it.
    pub fn with_path(&self, path: &str) -> Result<Reference> {
        check_repo_path(path).map_err(|reason| HubError::InvalidReference { name: format!("{}/{path}", self.repo_id()), reason })?;
        Ok(Reference { path: path.to_string(), ..self.clone() })
    }

    /// A file beside this one (same directory in the repository).
    pub fn sibling(&self, file_name: &str) -> Result<Reference> {
        match self.path.rfind('/') {
            Some(slash) => self.with_path(&format!("{}/{file_name}", &self.path[..slash])),
            None => self.with_path(file_name),
        }
    }
}

impl std::fmt::Display for Reference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.owner, self.repo)?;
        if !self.path.is_empty() {
            write!(f, "/{}", self.path)?;
        }
        // `parse` takes the revision after the last `@`, so a path holding an `@` reads back
        // only with its revision written out, even the default one.
        if self.revision != DEFAULT_REVISION || self.path.contains('@') {
            write!(f, "@{}", self.revision)?;
        }
        Ok(())
    }
}

/// Hub owner and repository names: letters, digits, `-`, `_`, `.`; no leading or trailing
/// `-`/`.`, no `--` (the cache folder joins owner and repo with `--`) and no `..`.
fn check_repo_part(what: &str, part: &str) -> Result<(), String> {
    if part.is_empty() {
        return Err(format!("empty {what} name"));
    }
    if part.len() > MAX_REPO_PART_LEN {
        return Err(format!("{what} name longer than {MAX_REPO_PART_LEN} characters"));
    }
    if let Some(c) = part.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))) {
        return Err(format!("{what} name '{part}' contains {c:?}"));
    }
    if part.starts_with(['-', '.']) || part.ends_with(['-', '.']) || part.contains("--") || part.contains("..") {
        return Err(format!("{what} name '{part}' may not start or end with '-' or '.', nor contain '--' or '..'"));
    }
    Ok(())
}

/// A path inside a repository: `/`-separated components that stay inside the snapshot.
fn check_repo_path(path: &str) -> Result<(), String> {
    if path.is_empty() {
        return Err("empty file path".to_string());
    }
    if path.len() > MAX_REPO_PATH_LEN {
        return Err(format!("file path longer than {MAX_REPO_PATH_LEN} characters"));
    }
    for component in path.split('/') {
        if component.is_empty() || component == "." || component == ".." {
            return Err(format!("file path '{path}' has a '{component}' component"));
        }
        if component.contains(['\\', '\0']) || component.chars().any(char::is_control) {
            return Err(format!("file path '{path}' contains a backslash or control character"));
        }
    }
    Ok(())
}

/// Revisions become folder names under `refs/`, so they obey the path rules too
/// (`refs/pr/1` is a valid revision).
fn check_revision(revision: &str) -> Result<(), String> {
    if revision.is_empty() {
        return Err("empty revision after '@'".to_string());
    }
    if revision.len() > MAX_REVISION_LEN {
        return Err(format!("revision longer than {MAX_REVISION_LEN} characters"));
    }
    for component in revision.split('/') {
        if component.is_empty() || component == "." || component == ".." {
            return Err(format!("revision '{revision}' has a '{component}' component"));
        }
        if let Some(c) = component.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))) {
            return Err(format!("revision '{revision}' contains {c:?}"));
        }
    }
    Ok(())
}

/// A full 40-hex git commit hash, the only revision that never moves.
pub(crate) fn is_commit_hash(s: &str) -> bool {
    s.len() == 40 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// A sha256 in hex: the hub's etag for LFS files, which is therefore checkable.
pub(crate) fn is_sha256_hex(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Etags name blob files, so a server may not choose a path with them.
pub(crate) fn is_safe_etag(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 256
        && !s.starts_with('.')
        && s.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && !s.ends_with(".incomplete")
        && !s.ends_with(".lock")
}

/// huggingface_hub's `_normalize_etag`: `lstrip("W/")` then strip `"`. Python's `lstrip`
/// removes any leading run of the characters `W` and `/`, not the prefix; this copies that.
pub(crate) fn normalize_etag(raw: &str) -> String {
    raw.trim_start_matches(['W', '/']).trim_matches('"').to_string()
}

/// Percent-encodes like Python's `urllib.parse.quote(s, safe=keep)`.
pub(crate) fn quote(s: &str, keep: &[u8]) -> String {
    let mut out = String::with_capacity(s.len());
    for &b in s.as_bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-' | b'~') || keep.contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids() {
        assert!(is_valid_id("F5TTS_v1-Base"));
        assert!(!is_valid_id(""));
        assert!(!is_valid_id("a.b"));
        assert!(!is_valid_id("a/b"));
        assert!(!is_valid_id(".."));
        assert!(!is_valid_id(&"a".repeat(65)));
        assert!(is_valid_id(&"a".repeat(64)));
    }

    #[test]
    fn references() {
        let r = Reference::parse("SWivid/F5-TTS/F5TTS_v1_Base/model_1250000.safetensors").unwrap();
        assert_eq!((r.owner.as_str(), r.repo.as_str()), ("SWivid", "F5-TTS"));
        assert_eq!(r.path, "F5TTS_v1_Base/model_1250000.safetensors");
        assert_eq!(r.revision, "main");
        assert_eq!(r.sibling("vocab.txt").unwrap().path, "F5TTS_v1_Base/vocab.txt");
        let r = Reference::parse("charactr/vocos-mel-24khz@refs/pr/1").unwrap();
        assert_eq!((r.path.as_str(), r.revision.as_str()), ("", "refs/pr/1"));
        assert_eq!(r.to_string(), "charactr/vocos-mel-24khz@refs/pr/1");
        for bad in ["a/../../b", "../x", "a/b/../c", "a/b/c/", "a//b", "a/b@", "a/b@x/../y", "-a/b/c", "a--x/b/c", "a/b/c\\d", "a"] {
            assert!(Reference::parse(bad).is_err(), "{bad} should be refused");
        }
    }

    /// Found by the `hub_reference` fuzz target: a path with an `@` printed without its
    /// default revision, and the printed name read back as another file at another revision.
    #[test]
    fn a_reference_prints_as_a_name_that_reads_back_to_it() {
        let r = Reference::parse("o/r/a@b.pt@main").unwrap();
        assert_eq!((r.path.as_str(), r.revision.as_str()), ("a@b.pt", "main"));
        assert_eq!(r.to_string(), "o/r/a@b.pt@main");
        assert_eq!(Reference::parse(&r.to_string()).unwrap(), r);
        // Without an `@` in the path the default revision stays implicit.
        assert_eq!(Reference::parse("o/r/a.pt@main").unwrap().to_string(), "o/r/a.pt");
    }

    #[test]
    fn etags_and_quoting() {
        assert_eq!(normalize_etag("W/\"abc\""), "abc");
        assert_eq!(normalize_etag("\"abc\""), "abc");
        assert!(!is_safe_etag("../x"));
        assert!(!is_safe_etag("x.incomplete"));
        assert_eq!(quote("refs/pr/1", b""), "refs%2Fpr%2F1");
        assert_eq!(quote("a b/c.txt", b"/"), "a%20b/c.txt");
    }
}
