//! What several of the binary's test files share: the fixtures folder and the stored voice
//! `birch` (the fixture recording with its transcript) that the daemon and batch tests speak with.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

pub fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures")
}

/// `f5 voices add birch …` into the store under `home` (as `F5_HOME`), asserting it worked.
pub fn add_birch(home: &Path) {
    let added = Command::new(env!("CARGO_BIN_EXE_f5"))
        .args(["voices", "add", "birch", "audio/ref_22050.wav", "--transcript", "The birch canoe slid on the smooth planks."])
        .current_dir(fixtures())
        .env("F5_HOME", home)
        .output()
        .expect("f5 runs");
    assert!(added.status.success(), "{}", String::from_utf8_lossy(&added.stderr));
}
