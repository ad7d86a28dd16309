//! `cargo xtask bench kokoro-process`: Kokoro-82M as a user runs it, one fresh process per
//! utterance: `f5 synth --phonemes` against kokoro 0.9.4's `KModel` in Python
//! (`xtask/bench/kokoro_process.py`) on the same release-layout folder (default the int8-derived
//! weights, `target/kokoro-int8`), same phonemes, voice, seed and thread count. Each run: wall time
//! from spawn to exit (loading included), the kernel's peak RSS (`wait4`), audio seconds; runs
//! alternate f5 / reference, median of `--runs`. Peak memory does not depend on machine load;
//! wall time does, and the table says how busy the machine was.
//!
//! Where `F5_ONNX_PYTHON` names a Python with onnxruntime, a third side joins the rotation:
//! kokoro-onnx's `kokoro-v1.0.int8.onnx` (in the model folder; `cargo xtask kokoro-int8` writes
//! it) on onnxruntime, same phonemes, voice row, speed and threads (`xtask/bench/kokoro_onnx.py`).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{bail, Context, Result};

use crate::bench_synth::{measure, median, prepare_processes, shell_words, Run};
use crate::machine;

pub struct ProcessOpts {
    pub threads: usize,
    pub runs: usize,
    pub write: bool,
    pub model_dir: Option<PathBuf>,
    /// f5's precisions (`f32`, `bf16`, `int8`): one f5 side per precision in the rotation.
    pub precisions: Vec<String>,
}

const VOICE: &str = "af_heart";

/// The bench inputs: the full-size goldens' short (56) and long (510) phoneme strings.
fn inputs(root: &Path) -> Result<Vec<(&'static str, String)>> {
    let index: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(root.join("fixtures/kokoro/index_full.json"))?)?;
    let phonemes = |case: &str| -> Result<String> {
        index["notes"][format!("whole_full/{case}")]["phonemes"]
            .as_str()
            .map(str::to_string)
            .with_context(|| format!("index_full.json: no phonemes for {case}"))
    };
    Ok(vec![("short", phonemes("short_heart_s1")?), ("long", phonemes("long510_mix_s0.8")?)])
}

pub fn run(root: &Path, o: &ProcessOpts) -> Result<()> {
    let model_dir = o.model_dir.clone().unwrap_or_else(|| root.join("target/kokoro-int8"));
    for need in ["config.json", "kokoro-v1_0.pth"] {
        if !model_dir.join(need).is_file() {
            bail!("{} has no {need}: run `cargo xtask kokoro-int8` or pass --model DIR", model_dir.display());
        }
    }
    let voice_file = model_dir.join(format!("voices/{VOICE}.pt"));
    if !voice_file.is_file() {
        bail!("{} is missing", voice_file.display());
    }
    for p in &o.precisions {
        if !matches!(p.as_str(), "f32" | "bf16" | "int8") {
            bail!("--precision {p:?}: use f32, bf16, int8 or a list (f32,bf16,int8)");
        }
    }
    let (f5, py, scratch) = prepare_processes(root, "bench-kokoro-process")?;
    let dir = model_dir.to_string_lossy().to_string();
    let threads = o.threads.to_string();

    // The onnxruntime side: its Python, model and the raw voice pack (the same numbers as
    // voices/af_heart.pt, which kokoro-int8 checks), or why it is skipped.
    let onnx_side: Result<(String, PathBuf, PathBuf), String> = (|| {
        let py = std::env::var("F5_ONNX_PYTHON").map_err(|_| "F5_ONNX_PYTHON is not set: a Python with onnxruntime".to_string())?;
        let onnx = crate::bench_kokoro::onnx_model(root, &model_dir)
            .ok_or_else(|| format!("no {} in {}: run `cargo xtask kokoro-int8`", crate::kokoro_int8::ONNX_FILE, model_dir.display()))?;
        let shared = std::env::var_os("KOKORO_SHARED").map(PathBuf::from).unwrap_or_else(|| root.join("../shared/kokoro"));
        let voice_bin = shared.join(format!("voices/{VOICE}.bin"));
        if !voice_bin.is_file() {
            return Err(format!("{} is missing (set KOKORO_SHARED)", voice_bin.display()));
        }
        Ok((py, onnx, voice_bin))
    })();
    if let Err(why) = &onnx_side {
        eprintln!("onnxruntime side skipped: {why}");
    }
    let config_file = model_dir.join("config.json").to_string_lossy().to_string();
    let mut onnx_versions = (String::from("?"), crate::bench_kokoro::onnx_inputs(None));

    let busy = machine::wait_idle(0.10, Duration::from_secs(120));
    let mut rows = Vec::new();
    let mut commands = Vec::new();
    let mut torch = String::from("?");
    for (name, phonemes) in inputs(root)? {
        let theirs_out = scratch.join(format!("ref_{name}.wav"));
        // One f5 side per precision: (precision, output file, arguments).
        let ours_sides: Vec<(String, PathBuf, Vec<String>)> = o
            .precisions
            .iter()
            .map(|p| {
                let out = scratch.join(format!("f5_{name}_{p}.wav"));
                let args = [
                    "synth",
                    "-q",
                    "-m",
                    &dir,
                    "--voice",
                    VOICE,
                    "--phonemes",
                    "-t",
                    &phonemes,
                    "--seed",
                    "0",
                    "--threads",
                    &threads,
                    "--precision",
                    p,
                    "-o",
                ]
                .iter()
                .map(|s| s.to_string())
                .chain([out.to_string_lossy().to_string()])
                .collect();
                (p.clone(), out, args)
            })
            .collect();
        let theirs_args: Vec<String> = [
            "xtask/bench/kokoro_process.py",
            "--threads",
            &threads,
            "--model-dir",
            &dir,
            "--voice",
            VOICE,
            "--phonemes",
            &phonemes,
            "--out",
        ]
        .iter()
        .map(|s| s.to_string())
        .chain([theirs_out.to_string_lossy().to_string()])
        .collect();
        let onnx_out = scratch.join(format!("onnx_{name}.wav"));
        let onnx_args: Option<Vec<String>> = onnx_side.as_ref().ok().map(|(_, onnx, voice_bin)| {
            [
                "xtask/bench/kokoro_onnx.py".to_string(),
                "process".into(),
                "--threads".into(),
                threads.clone(),
                "--onnx".into(),
                onnx.to_string_lossy().to_string(),
                "--config".into(),
                config_file.clone(),
                "--voice-bin".into(),
                voice_bin.to_string_lossy().to_string(),
                "--phonemes".into(),
                phonemes.clone(),
                "--out".into(),
                onnx_out.to_string_lossy().to_string(),
            ]
            .to_vec()
        });
        for (_, _, args) in &ours_sides {
            commands.push(format!("target/release/f5 {}", shell_words(args)));
        }
        commands.push(format!("$F5_REF_PYTHON {}", shell_words(&theirs_args)));
        if let Some(args) = &onnx_args {
            commands.push(format!("$F5_ONNX_PYTHON {}", shell_words(args)));
        }
        let mut ours: Vec<(String, Vec<Run>)> = ours_sides.iter().map(|(p, _, _)| (p.clone(), Vec::new())).collect();
        let (mut theirs, mut onnx_runs): (Vec<Run>, Vec<Run>) = (Vec::new(), Vec::new());
        for i in 0..o.runs {
            eprintln!("{name} ({} phonemes), run {} of {}: f5…", phonemes.chars().count(), i + 1, o.runs);
            for ((p, out, args), (_, runs)) in ours_sides.iter().zip(ours.iter_mut()) {
                let mut cmd = Command::new(&f5);
                cmd.current_dir(root).args(args).stdout(Stdio::null()).stderr(Stdio::piped());
                let (run, _) = measure(cmd, out).with_context(|| format!("f5 synth --precision {p}"))?;
                eprintln!("  f5 {p}: {:.2} s wall, {:.0} MiB", run.wall, run.peak_rss_mib);
                runs.push(run);
            }
            let mut cmd = Command::new(&py);
            cmd.current_dir(root).args(&theirs_args).stdout(Stdio::piped()).stderr(Stdio::piped());
            let (run, json) = measure(cmd, &theirs_out).context("the reference (kokoro_process.py)")?;
            if let Some(t) = json["torch"].as_str() {
                torch = t.to_string();
            }
            eprintln!("  reference: {:.2} s wall, {:.0} MiB", run.wall, run.peak_rss_mib);
            theirs.push(run);
            if let (Ok((py, _, _)), Some(args)) = (&onnx_side, &onnx_args) {
                let mut cmd = Command::new(py);
                cmd.current_dir(root).args(args).stdout(Stdio::piped()).stderr(Stdio::piped());
                let (run, json) = measure(cmd, &onnx_out).context("the onnxruntime side (kokoro_onnx.py)")?;
                onnx_versions = (
                    json["onnxruntime"].as_str().unwrap_or("?").to_string(),
                    crate::bench_kokoro::onnx_inputs(json["kokoro_onnx"].as_str()),
                );
                eprintln!("  onnxruntime: {:.2} s wall, {:.0} MiB", run.wall, run.peak_rss_mib);
                onnx_runs.push(run);
            }
        }
        rows.push((name, phonemes.chars().count(), ours, theirs, onnx_runs));
    }
    let busy_after = machine::busy_fraction();

    let mut md = String::new();
    writeln!(md, "Machine: {}.", machine::describe())?;
    writeln!(
        md,
        "Command: `cargo xtask bench kokoro-process --threads {} --runs {} --precision {}` (fresh processes, runs alternate f5 / reference / onnxruntime, median of {}; machine {:.0}% busy before, {:.0}% after). Weights: `{}` (release layout, stored fp32; f5 bf16 keeps the decoder's big weights in bf16, f5 int8 also runs the generator's residual-block convolutions in int8), voice {VOICE}, seed 0. Reference: kokoro 0.9.4 `KModel` in fp32, torch {torch}.",
        o.threads,
        o.runs,
        o.precisions.join(","),
        o.runs,
        busy * 100.0,
        busy_after * 100.0,
        model_dir.file_name().and_then(|n| n.to_str()).unwrap_or("?"),
    )?;
    match &onnx_side {
        Ok(_) => writeln!(
            md,
            "onnxruntime: kokoro-onnx's `kokoro-v1.0.int8.onnx` (int8 weights and int8 matmuls/convolutions, the model these weights are dequantised from), onnxruntime {} with {}, session called directly, intra-op threads {}, inter-op 1.",
            onnx_versions.0, onnx_versions.1, o.threads
        )?,
        Err(why) => writeln!(md, "onnxruntime: not measured in this run ({why}).")?,
    }
    writeln!(md)?;
    writeln!(md, "| input | audio | f5 wall | reference wall | onnxruntime wall | f5 peak RSS | reference peak RSS | onnxruntime peak RSS | f5 / reference memory | f5 / onnxruntime memory |")?;
    writeln!(md, "|---|---|---|---|---|---|---|---|---|---|")?;
    for (name, n, sides, theirs, onnx_runs) in &rows {
        for (precision, ours) in sides {
            let (our_rss, their_rss) = (median(ours, |r| r.peak_rss_mib), median(theirs, |r| r.peak_rss_mib));
            let onnx_rss = (!onnx_runs.is_empty()).then(|| median(onnx_runs, |r| r.peak_rss_mib));
            writeln!(
                md,
                "| {name} ({n} phonemes), f5 {precision} | {:.2} s | {:.2} s | {:.2} s | {} | {:.0} MiB | {:.0} MiB | {} | {:.2}× | {} |",
                median(ours, |r| r.audio_seconds),
                median(ours, |r| r.wall),
                median(theirs, |r| r.wall),
                if onnx_runs.is_empty() { "—".to_string() } else { format!("{:.2} s", median(onnx_runs, |r| r.wall)) },
                our_rss,
                their_rss,
                onnx_rss.map_or("—".to_string(), |x| format!("{x:.0} MiB")),
                our_rss / their_rss,
                onnx_rss.map_or("—".to_string(), |x| format!("{:.2}×", our_rss / x)),
            )?;
        }
    }
    writeln!(md)?;
    writeln!(md, "Exact commands (from the repository root):")?;
    writeln!(md)?;
    writeln!(md, "```")?;
    // Paths relative to the repository root (the reference's Python is named by its variable).
    let root_prefix = format!("{}/", root.display());
    let shared_prefix = std::env::var("KOKORO_SHARED").ok().filter(|s| !s.is_empty()).map(|s| format!("{}/", s.trim_end_matches('/')));
    for c in &commands {
        let c = c.replace(&root_prefix, "");
        // The voice pack's folder by its variable, not this machine's path.
        let c = match &shared_prefix {
            Some(p) => c.replace(p.as_str(), "$KOKORO_SHARED/"),
            None => c,
        };
        writeln!(md, "{c}")?;
    }
    writeln!(md, "```")?;
    print!("{md}");
    if o.write {
        let path = root.join("docs/benchmarks.md");
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let heading = "## Kokoro-82M, one process per utterance (`cargo xtask bench kokoro-process`)";
        if !text.contains(heading) {
            std::fs::write(
                &path,
                format!("{}\n\n{heading}\n\nWhat a user's command costs: process start, loading the weights and one forward, f5 against the reference in fresh processes; peak memory is the kernel's high-water mark.\n", text.trim_end()),
            )?;
        }
        crate::bench::write_section(&path, &format!("kokoro-process-{}t", o.threads), &md)?;
    }
    Ok(())
}
