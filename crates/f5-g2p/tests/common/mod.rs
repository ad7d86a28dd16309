//! Shared loading of the reference goldens in fixtures/g2p (made by make_goldens.py).
#![allow(dead_code)] // each test file uses a different subset of these helpers

use std::path::PathBuf;

pub fn fixture_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/g2p").join(name)
}

pub fn load_json(name: &str) -> serde_json::Value {
    let path = fixture_path(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("bad JSON in {}: {e}", path.display()))
}

pub fn str_list(v: &serde_json::Value) -> Vec<String> {
    v.as_array().map(|a| a.iter().filter_map(|x| x.as_str().map(str::to_string)).collect()).unwrap_or_default()
}

/// Whether espeak-ng runs here; prints why a test is skipped when it does not.
pub fn espeak_or_skip(test: &str) -> bool {
    if f5_g2p::espeak_available() {
        return true;
    }
    eprintln!("SKIPPED {test}: espeak-ng not found (install the Debian package `espeak-ng` or set {})", f5_g2p::ESPEAK_ENV);
    false
}
