//! `cargo xtask fuzz [TARGET] [--seconds N] [--asan] [--keep-going]`: runs the libFuzzer targets in `fuzz/`
//! (cargo-fuzz, nightly) one after another for a bounded time each.
//!
//! New inputs go to `fuzz/corpus/TARGET` (ignored by git); the committed seeds in
//! `fuzz/seeds/TARGET` are read as a second corpus and never written. A crash leaves its input
//! under `fuzz/artifacts/TARGET/`; the run goes on with the next target and fails at the end.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{bail, Context, Result};

const USAGE: &str = "usage: cargo xtask fuzz [TARGET] [--seconds N (default 60 per target)] [--asan] [--keep-going] [--list]";

/// The targets, from the file names under `fuzz/fuzz_targets/`.
fn targets(root: &Path) -> Result<Vec<String>> {
    let dir = root.join("fuzz/fuzz_targets");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .with_context(|| format!("cannot list {}", dir.display()))?
        .filter_map(|e| e.ok()?.file_name().to_str()?.strip_suffix(".rs").map(str::to_owned))
        .collect();
    names.sort();
    Ok(names)
}

/// Says in one line what to install when nightly or cargo-fuzz is missing.
fn check_tools() -> Result<()> {
    let nightly = Command::new("cargo").args(["+nightly", "--version"]).output();
    if !nightly.is_ok_and(|o| o.status.success()) {
        bail!("fuzzing needs a nightly toolchain: rustup toolchain install nightly (then: cargo install cargo-fuzz)");
    }
    let fuzz = Command::new("cargo").args(["+nightly", "fuzz", "--version"]).output();
    if !fuzz.is_ok_and(|o| o.status.success()) {
        bail!("fuzzing needs cargo-fuzz: cargo install cargo-fuzz");
    }
    Ok(())
}

pub fn run(root: &Path, args: &[String]) -> Result<()> {
    let all = targets(root)?;
    let mut chosen = Vec::new();
    let mut seconds = 60u64;
    let mut asan = false;
    let mut keep_going = false;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--seconds" => seconds = it.next().context("--seconds needs a number")?.parse().context("--seconds")?,
            "--asan" => asan = true,
            // libFuzzer's fork mode: a crash is saved and the run goes on, so a known crash (in a
            // dependency, say) does not stop the search for others behind it.
            "--keep-going" => keep_going = true,
            "--list" => {
                println!("{}", all.join("\n"));
                return Ok(());
            }
            name if !name.starts_with('-') && all.iter().any(|t| t == name) => chosen.push(name.to_string()),
            other => bail!("fuzz: unknown target or option {other:?}; targets: {}\n{USAGE}", all.join(", ")),
        }
    }
    if chosen.is_empty() {
        chosen = all;
    }
    check_tools()?;
    let fuzz_dir = root.join("fuzz");
    // Without a sanitizer the runs are several times faster; the code under test is safe Rust
    // (panics, overflows and debug assertions are caught either way). --asan adds
    // AddressSanitizer for memory errors in unsafe code and C dependencies.
    let sanitizer = if asan { "address" } else { "none" };
    let mut failed = Vec::new();
    let mut summary = Vec::new();
    for target in &chosen {
        let corpus = format!("corpus/{target}");
        let seeds = format!("seeds/{target}");
        std::fs::create_dir_all(fuzz_dir.join(&corpus))?;
        eprintln!("== fuzz {target} for {seconds} s (sanitizer: {sanitizer})");
        let started = Instant::now();
        let mut child = Command::new("cargo")
            .current_dir(&fuzz_dir)
            .args(["+nightly", "fuzz", "run", "--sanitizer", sanitizer, target, &corpus, &seeds, "--"])
            .args([
                format!("-max_total_time={seconds}"),
                // An input that takes this long, or a process above this much memory, is a bug:
                // every entry point bounds its work and its allocations.
                "-timeout=20".to_string(),
                "-rss_limit_mb=2048".to_string(),
                "-print_final_stats=1".to_string(),
            ])
            .args(if keep_going { &["-fork=1", "-ignore_crashes=1"][..] } else { &[] })
            .stderr(Stdio::piped())
            .spawn()
            .context("cannot run cargo +nightly fuzz")?;
        // libFuzzer reports on stderr: pass it through, keep the last status line for the summary.
        let mut last_status = String::new();
        if let Some(err) = child.stderr.take() {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                eprintln!("{line}");
                if line.starts_with('#') && line.contains("cov:") {
                    last_status = line;
                }
            }
        }
        let status = child.wait()?;
        let took = started.elapsed().as_secs_f64();
        let verdict = if status.success() { "ok" } else { "FAILED" };
        summary.push(format!("{target:<20} {verdict:<6} {took:>6.0} s  {last_status}"));
        if !status.success() {
            failed.push(target.clone());
        }
    }
    eprintln!("\n== fuzz summary");
    for line in &summary {
        eprintln!("{line}");
    }
    if !failed.is_empty() {
        bail!("fuzz targets failed: {} (inputs under fuzz/artifacts/)", failed.join(", "));
    }
    Ok(())
}
