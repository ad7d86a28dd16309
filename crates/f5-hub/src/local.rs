//! Names that look like paths on this machine. A mistyped path must not become a download: a
//! name that reads as a path and does not exist is "no such file", with the nearest entry that
//! does exist, instead of being sent to the hub as `owner/repo/file`.

use std::path::{Component, Path, PathBuf};

/// Whether `name` reads as a local path rather than a hub reference: it starts at `/`, `.`, `..`
/// or `~`, holds a backslash, has a file extension and no `/` (a reference needs
/// `owner/repo/…`), or its first component exists here (`fixtures/models/…` run beside
/// `fixtures/`).
pub(crate) fn looks_like_path(name: &str) -> bool {
    if name.starts_with(['/', '~']) || name.starts_with("./") || name.starts_with("../") || name == "." || name == ".." {
        return true;
    }
    if name.contains('\\') {
        return true;
    }
    match name.split_once('/') {
        None => Path::new(name).extension().is_some(),
        Some((first, _)) => !first.is_empty() && Path::new(first).exists(),
    }
}

/// The existing paths nearest to a `name` that does not exist: the deepest ancestor that exists,
/// joined to its entries closest in spelling to the next component (all that tie, at most
/// three). Empty when nothing is close (more than half the component would have to change).
pub(crate) fn nearest_existing(name: &str) -> Vec<PathBuf> {
    let path = Path::new(name);
    let mut existing = PathBuf::new();
    for component in path.components() {
        let next = existing.join(component);
        let Component::Normal(wanted) = component else {
            existing = next;
            continue;
        };
        if next.exists() {
            existing = next;
            continue;
        }
        let dir = if existing.as_os_str().is_empty() { Path::new(".") } else { existing.as_path() };
        let wanted = wanted.to_string_lossy();
        let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
        let mut scored: Vec<(usize, String)> = entries
            .flatten()
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|n| !n.starts_with('.'))
            .map(|n| (strsim::levenshtein(&wanted, &n), n))
            .filter(|(d, _)| *d <= wanted.chars().count().div_ceil(2).max(1))
            .collect();
        scored.sort();
        let Some(best) = scored.first().map(|(d, _)| *d) else { return Vec::new() };
        return scored.into_iter().take_while(|(d, _)| *d == best).take(3).map(|(_, n)| existing.join(n)).collect();
    }
    Vec::new()
}

/// `"; did you mean 'a' or 'b'?"`, or nothing.
pub(crate) fn suggestion(candidates: &[PathBuf]) -> String {
    if candidates.is_empty() {
        return String::new();
    }
    let names: Vec<String> = candidates.iter().map(|p| format!("'{}'", p.display())).collect();
    format!("; did you mean {}?", names.join(" or "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_reads_as_a_path() {
        for name in ["/x/model.pt", "./m", "../m", "~/m", "model.safetensors", "C:\\m", "."] {
            assert!(looks_like_path(name), "{name}");
        }
        // `src` exists beside the crate's manifest, where `cargo test` runs.
        assert!(looks_like_path("src/nothing-here"));
        for name in ["SWivid/F5-TTS/F5TTS_v1_Base/model_1250000.safetensors", "hexgrad/Kokoro-82M", "my-local-id"] {
            assert!(!looks_like_path(name), "{name}");
        }
    }

    #[test]
    fn the_nearest_existing_entry_is_suggested() {
        let dir = tempfile::tempdir().unwrap();
        let models = dir.path().join("models");
        for d in ["f5-tiny-v0", "f5-tiny-v1", "vocos-tiny"] {
            std::fs::create_dir_all(models.join(d)).unwrap();
        }
        let name = models.join("f5-tiny");
        let near = nearest_existing(name.to_str().unwrap());
        assert_eq!(near, [models.join("f5-tiny-v0"), models.join("f5-tiny-v1")]);
        let near = nearest_existing(models.join("vocos-tyni/config.yaml").to_str().unwrap());
        assert_eq!(near, [models.join("vocos-tiny")]);
        assert!(nearest_existing(models.join("entirely-different-name").to_str().unwrap()).is_empty());
        assert_eq!(suggestion(&[PathBuf::from("a"), PathBuf::from("b")]), "; did you mean 'a' or 'b'?");
    }
}
