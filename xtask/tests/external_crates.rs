//! The libraries as a user gets them: a fresh crate outside the workspace depends on `f5-synth`
//! (or `f5-dit` alone) by path, its `main.rs` is the crate README's library example verbatim,
//! and it is built and run on the fixture models. This catches what the workspace's own tests
//! cannot: a type the example needs that only a sibling crate exports, a feature only the
//! workspace turns on, a README that no longer compiles outside doctest wrapping.
//!
//! Cost: the fresh crate shares the workspace's target directory, its lockfile and its profiles,
//! so the registry dependencies the workspace already built are reused and only the f5 crates
//! are compiled again (once for both tests). `--offline`: nothing is downloaded.

use std::path::{Path, PathBuf};
use std::process::Command;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("xtask sits in the workspace").to_path_buf()
}

/// The first ```rust block of `readme` that has a `main` (the library example).
fn readme_example(readme: &Path) -> String {
    let text = std::fs::read_to_string(readme).unwrap_or_else(|e| panic!("{}: {e}", readme.display()));
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        match &mut current {
            None if line.starts_with("```rust") => current = Some(String::new()),
            Some(_) if line.starts_with("```") => blocks.extend(current.take()),
            Some(code) => {
                code.push_str(line);
                code.push('\n');
            }
            None => {}
        }
    }
    blocks.into_iter().find(|b| b.contains("fn main")).unwrap_or_else(|| panic!("{} has no ```rust example with a main", readme.display()))
}

/// Builds a crate named `name` depending on `dep` whose main is `dep`'s README example, runs it
/// with `args`, and returns its standard output.
fn build_and_run(name: &str, dep: &str, args: &[PathBuf]) -> String {
    let root = workspace();
    let dir = tempfile::Builder::new().prefix(name).tempdir().expect("temporary directory");
    let manifest_text = std::fs::read_to_string(root.join("Cargo.toml")).expect("workspace manifest");
    // The workspace's [profile.*] sections (the file ends with them), so that the registry
    // dependencies it built are reused instead of rebuilt with other settings.
    let profiles = manifest_text.find("\n[profile.").map_or("", |i| &manifest_text[i..]);
    let dep_path = root.join("crates").join(dep);
    let manifest = format!(
        "[package]\nname = \"{name}\"\nversion = \"0.0.0\"\nedition = \"2021\"\npublish = false\n\n\
         [dependencies]\n{dep} = {{ path = {:?} }}\n\n# not a member of any workspace above the temporary directory\n[workspace]\n{profiles}",
        dep_path.display().to_string()
    );
    std::fs::write(dir.path().join("Cargo.toml"), manifest).expect("write Cargo.toml");
    // The workspace's lockfile pins the same versions it built (cargo prunes what is unused).
    std::fs::copy(root.join("Cargo.lock"), dir.path().join("Cargo.lock")).expect("copy Cargo.lock");
    std::fs::create_dir(dir.path().join("src")).expect("src/");
    std::fs::write(dir.path().join("src/main.rs"), readme_example(&dep_path.join("README.md"))).expect("write main.rs");

    let target = std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| root.join("target"));
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(cargo);
    command.args(["run", "--offline", "--quiet", "--"]).args(args).current_dir(dir.path()).env("CARGO_TARGET_DIR", &target);
    // What cargo set for this test process describes xtask, not the fresh crate; and build
    // scripts that watch such a variable (ring's watches CARGO_MANIFEST_DIR) would see it change
    // between the workspace's build and this one, and rebuild back and forth.
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy();
        let set_for_xtask = [
            "CARGO_PKG_",
            "CARGO_MANIFEST_",
            "CARGO_CRATE_",
            "CARGO_BIN_",
            "CARGO_PRIMARY_PACKAGE",
            "CARGO_TARGET_TMPDIR",
            "CARGO_RUSTC_CURRENT_DIR",
        ]
        .iter()
        .any(|p| key.starts_with(p));
        if set_for_xtask {
            command.env_remove(&*key);
        }
    }
    let started = std::time::Instant::now();
    let out = command.output().expect("run cargo");
    eprintln!("{name}: built and ran in {:.1} s", started.elapsed().as_secs_f64());
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{name} failed ({}):\n{stdout}\n{}", out.status, String::from_utf8_lossy(&out.stderr));
    stdout
}

#[test]
fn f5_synth_readme_example_speaks_in_a_fresh_crate() {
    let f = workspace().join("fixtures");
    let out_dir = tempfile::tempdir().expect("output directory");
    let wav = out_dir.path().join("hello.wav");
    let args = [
        f.join("models/f5-tiny-v1/model.safetensors"),
        f.join("vocab.txt"),
        f.join("models/vocos-tiny/pytorch_model.bin"),
        f.join("audio/ref_22050.wav"),
        "The birch canoe slid on the smooth planks.".into(),
        "Hello world, this is a tiny test.".into(),
        wav.clone(),
    ];
    let stdout = build_and_run("readme-f5-synth", "f5-synth", &args);
    assert!(stdout.contains("hello.wav"), "{stdout}");
    // A real 16-bit mono WAV at 24 kHz with speech-length content, not an empty file.
    let bytes = std::fs::read(&wav).expect("the example wrote its WAV");
    assert_eq!(&bytes[..4], b"RIFF");
    assert_eq!(u16::from_le_bytes([bytes[22], bytes[23]]), 1, "mono");
    assert_eq!(u32::from_le_bytes([bytes[24], bytes[25], bytes[26], bytes[27]]), 24_000);
    let seconds = (bytes.len() - 44) as f64 / 2.0 / 24_000.0;
    assert!((0.5..10.0).contains(&seconds), "{seconds} s");
}

#[test]
fn f5_dit_readme_example_runs_a_forward_in_a_fresh_crate() {
    let ckpt = workspace().join("fixtures/models/f5-tiny-v1/model.safetensors");
    let stdout = build_and_run("readme-f5-dit", "f5-dit", &[ckpt]);
    // 2 guidance rows × 100 frames × 100 mel channels, and the tiny model's parameter count.
    assert!(stdout.contains("20000 values from 224996 parameters"), "{stdout}");
}
