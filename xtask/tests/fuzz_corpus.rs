//! The committed fuzz inputs, replayed through the functions the fuzz targets run, so that the
//! stable test suite exercises every parser of untrusted bytes without nightly or cargo-fuzz.
//! `fuzz/seeds/TARGET/` holds the seed corpus of each target, including every input that once
//! crashed (the owning crate also has a named regression test for each).

use std::path::{Path, PathBuf};

use f5_fuzz_harness::TARGETS;

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz")
}

fn files_in(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
}

#[test]
fn every_seed_replays_through_its_target() {
    let mut failures = Vec::new();
    let mut replayed = 0;
    for (target, run) in TARGETS {
        let seeds = files_in(&fuzz_dir().join("seeds").join(target));
        assert!(!seeds.is_empty(), "fuzz/seeds/{target} holds no input");
        for file in seeds {
            let bytes = std::fs::read(&file).expect("seed file");
            // Collect every failing input rather than stopping at the first, naming each file.
            if std::panic::catch_unwind(|| run(&bytes)).is_err() {
                failures.push(file.display().to_string());
            }
            replayed += 1;
        }
    }
    assert!(failures.is_empty(), "{} of {replayed} fuzz inputs panicked: {failures:#?}", failures.len());
}

/// A target without a harness entry (or seeds) would be fuzzed but never replayed here.
#[test]
fn every_fuzz_target_is_replayed() {
    let mut on_disk: Vec<String> =
        files_in(&fuzz_dir().join("fuzz_targets")).iter().filter_map(|p| p.file_stem()?.to_str().map(str::to_owned)).collect();
    on_disk.sort();
    let mut known: Vec<String> = TARGETS.iter().map(|(name, _)| name.to_string()).collect();
    known.sort();
    assert_eq!(on_disk, known, "fuzz/fuzz_targets/*.rs and f5_fuzz_harness::TARGETS differ");
    let manifest = std::fs::read_to_string(fuzz_dir().join("Cargo.toml")).expect("fuzz/Cargo.toml");
    for name in &known {
        assert!(manifest.contains(&format!("name = \"{name}\"")), "fuzz/Cargo.toml has no [[bin]] {name}");
    }
}
