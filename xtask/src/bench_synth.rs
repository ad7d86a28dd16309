//! `cargo xtask bench synth`: one whole synthesis, process start to exit, `f5 synth` against the
//! reference's `infer_process` on the same full-size random weights, reference recording,
//! sentence, step count and seed. Runs alternate between the two sides so that a change in
//! machine load hits both alike; each figure is the median of its runs.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde_json::Value;

use crate::bench::write_section;
use crate::machine;

/// The reference recording: 6.7 s at 16 kHz with 0.5 s of silence before, 1.5 s between and
/// 1.0 s after its two sentences; both sides trim the edges the same way, leaving about 5 s.
const REF_WAV: &str = "fixtures/audio/silence_test.wav";
const REF_TEXT_FILE: &str = "fixtures/audio/silence_test.txt";
/// About 4 s of speech at the reference's speaking rate.
const SENTENCE: &str = "The old lighthouse keeper climbed the stairs once more to watch the ships come home.";

pub struct SynthOpts {
    pub threads: usize,
    pub nfes: Vec<usize>,
    /// f5's GEMM precisions (`f32`, `bf16`, `int8`); each is run and timed against the one reference.
    pub precisions: Vec<String>,
    pub runs: usize,
    pub write: bool,
}

/// What one process run measured.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Run {
    pub(crate) wall: f64,
    pub(crate) first_sample: f64,
    pub(crate) peak_rss_mib: f64,
    pub(crate) audio_seconds: f64,
}

/// One step count's runs: f5's per precision (in `SynthOpts::precisions` order) and the reference's.
struct NfeRuns {
    nfe: usize,
    ours: Vec<Vec<Run>>,
    theirs: Vec<(Run, Value)>,
    /// Per precision: the last run's mel and wav, to compare each precision's output with f32's.
    outputs: Vec<(PathBuf, PathBuf)>,
}

pub fn run(root: &Path, o: &SynthOpts) -> Result<()> {
    if o.precisions.is_empty() {
        bail!("--precision needs at least one of f32, bf16, int8");
    }
    let model = refmodel(root, "f5-v1-base/model_1250000.safetensors")?;
    let vocoder = refmodel(root, "vocos-full")?;
    let ref_text = std::fs::read_to_string(root.join(REF_TEXT_FILE)).with_context(|| REF_TEXT_FILE.to_string())?;
    let ref_text = ref_text.trim().to_string();
    let (f5, py, scratch) = prepare_processes(root, "bench-synth")?;

    let busy = machine::wait_idle(0.10, Duration::from_secs(120));
    let mut rows = Vec::new();
    let mut commands = Vec::new();
    for &nfe in &o.nfes {
        let theirs_out = scratch.join(format!("ref_nfe{nfe}.wav"));
        // The same work on both sides; only the way each names its output differs.
        let (model, vocoder, nfe_s, threads) =
            (model.display().to_string(), vocoder.display().to_string(), nfe.to_string(), o.threads.to_string());
        let common = [
            "--model",
            &model,
            "--vocoder",
            &vocoder,
            "--ref",
            REF_WAV,
            "--ref-text",
            &ref_text,
            "--text",
            SENTENCE,
            "--nfe",
            &nfe_s,
            "--seed",
            "1",
            "--threads",
            &threads,
        ];
        let words = |parts: &[&[&str]]| -> Vec<String> { parts.concat().iter().map(|s| s.to_string()).collect() };
        let mut ours_args = Vec::new();
        let mut outputs = Vec::new();
        for p in &o.precisions {
            let wav = scratch.join(format!("f5_nfe{nfe}_{p}.wav"));
            let mel = scratch.join(format!("f5_nfe{nfe}_{p}_mel.npy"));
            let wav_s = from_root(root, &wav);
            let args = words(&[&["synth"], &common, &["--precision", p, "-q", "-o", &wav_s]]);
            commands.push(format!("target/release/f5 {}", shell_words(&args)));
            ours_args.push((args, wav.clone()));
            outputs.push((mel, wav));
        }
        let theirs_path = from_root(root, &theirs_out);
        let theirs_args = words(&[&["xtask/bench/synth_reference.py"], &common, &["--out", &theirs_path]]);
        commands.push(format!("$F5_REF_PYTHON {}", shell_words(&theirs_args)));
        let (mut ours, mut theirs) = (vec![Vec::new(); o.precisions.len()], Vec::new());
        for i in 0..o.runs {
            for (k, p) in o.precisions.iter().enumerate() {
                eprintln!("nfe {nfe}, run {} of {}: f5 {p}…", i + 1, o.runs);
                let (args, wav) = &ours_args[k];
                let mut cmd = Command::new(&f5);
                cmd.current_dir(root).args(args).stdout(Stdio::null()).stderr(Stdio::piped());
                // The last run also saves its mel, for the precisions' fidelity. Saving the mel
                // makes f5 write the wav at the end instead of streaming it, so that run's first
                // sample is left out of the median when there are others.
                let saves_mel = o.precisions.len() > 1 && i + 1 == o.runs;
                if saves_mel {
                    cmd.arg("--save-mel").arg(from_root(root, &outputs[k].0));
                }
                let (mut run, _) = measure(cmd, wav).with_context(|| format!("f5 synth --precision {p}"))?;
                eprintln!("  f5 {p}: {:.1} s wall, first sample {:.1} s, {:.0} MiB", run.wall, run.first_sample, run.peak_rss_mib);
                if saves_mel && o.runs > 1 {
                    run.first_sample = f64::NAN;
                }
                ours[k].push(run);
            }
            eprintln!("nfe {nfe}, run {} of {}: reference…", i + 1, o.runs);
            let mut cmd = Command::new(&py);
            cmd.current_dir(root).args(&theirs_args).stdout(Stdio::piped()).stderr(Stdio::piped());
            let (run, json) = measure(cmd, &theirs_out).context("reference infer_process")?;
            eprintln!("  reference: {:.1} s wall, first sample {:.1} s, {:.0} MiB", run.wall, run.first_sample, run.peak_rss_mib);
            theirs.push((run, json));
        }
        rows.push(NfeRuns { nfe, ours, theirs, outputs });
    }
    let busy_after = machine::busy_fraction();

    let mut md = String::new();
    writeln!(md, "Machine: {}.", machine::describe())?;
    writeln!(
        md,
        "Command: `cargo xtask bench synth --threads {} --nfe {} --precision {} --runs {}` (runs alternate f5 / reference; median of {}; machine {:.0}% busy before, {:.0}% after).",
        o.threads,
        o.nfes.iter().map(ToString::to_string).collect::<Vec<_>>().join(","),
        o.precisions.join(","),
        o.runs,
        o.runs,
        busy * 100.0,
        busy_after * 100.0
    )?;
    let torch = rows.first().and_then(|r| r.theirs.first()).and_then(|(_, j)| j.get("torch")).and_then(Value::as_str).unwrap_or("?");
    writeln!(
        md,
        "Weights: full-size random F5TTS_v1_Base and Vocos (fp32 files; f5's precision is that of its GEMM weights). Reference recording `{REF_WAV}` (its transcript), text \"{SENTENCE}\", seed 1, cfg 2, sway −1. Each run is a fresh process: wall = start to exit, first sample = start until the output file holds audio, peak RSS from the kernel's accounting of that process. Reference: f5-tts 1.1.22 on PyTorch {torch}, f32."
    )?;
    writeln!(md)?;
    writeln!(md, "| nfe | f5 precision | audio | f5 wall | reference wall | speed-up | f5 RTF | reference RTF | f5 first sample | reference first sample | f5 peak RSS | reference peak RSS |")?;
    writeln!(md, "|---|---|---|---|---|---|---|---|---|---|---|---|")?;
    let mut fidelity = Vec::new();
    for row in &rows {
        let theirs: Vec<Run> = row.theirs.iter().map(|(r, _)| *r).collect();
        let t_wall = median(&theirs, |r| r.wall);
        let t_audio = median(&theirs, |r| r.audio_seconds);
        for (k, ours) in row.ours.iter().enumerate() {
            let o_wall = median(ours, |r| r.wall);
            let audio = median(ours, |r| r.audio_seconds);
            if (audio - t_audio).abs() > 0.05 {
                bail!("the two sides made different lengths ({audio:.2} s vs {t_audio:.2} s): not the same work, no ratio");
            }
            writeln!(
                md,
                "| {} | {} | {audio:.2} s | {o_wall:.1} s | {t_wall:.1} s | {:.2}× | {:.2} | {:.2} | {:.1} s | {:.1} s | {:.0} MiB | {:.0} MiB |",
                row.nfe,
                o.precisions[k],
                t_wall / o_wall,
                o_wall / audio,
                t_wall / audio,
                median_finite(ours, |r| r.first_sample),
                median(&theirs, |r| r.first_sample),
                median(ours, |r| r.peak_rss_mib),
                median(&theirs, |r| r.peak_rss_mib),
            )?;
        }
        // Each precision's output against f32's (when both were run).
        if let Some(base) = o.precisions.iter().position(|p| p == "f32") {
            for (k, p) in o.precisions.iter().enumerate() {
                if k == base {
                    continue;
                }
                let mel = rel_l2(&read_npy(&row.outputs[k].0)?, &read_npy(&row.outputs[base].0)?)?;
                let wav = rel_l2(&read_wav(&row.outputs[k].1)?, &read_wav(&row.outputs[base].1)?)?;
                fidelity.push((row.nfe, p.clone(), mel, wav));
            }
        }
    }
    if !fidelity.is_empty() {
        writeln!(md)?;
        writeln!(md, "Fidelity of each precision against f5 f32 on the same run's inputs (last run's outputs; rel-L2 = ‖a − b‖ / ‖b‖):")?;
        writeln!(md)?;
        writeln!(md, "| nfe | precision | mel rel-L2 vs f32 | wav rel-L2 vs f32 |")?;
        writeln!(md, "|---|---|---|---|")?;
        for (nfe, p, mel, wav) in &fidelity {
            writeln!(md, "| {nfe} | {p} | {mel:.2e} | {wav:.2e} |")?;
        }
    }
    writeln!(md)?;
    writeln!(md, "Exact commands (from the repository root; the last f5 run of each also passes `--save-mel`):")?;
    writeln!(md)?;
    writeln!(md, "```")?;
    for c in &commands {
        writeln!(md, "{c}")?;
    }
    writeln!(md, "```")?;
    println!("{md}");
    if o.write {
        write_section(&root.join("docs/benchmarks.md"), &format!("synth-{}t", o.threads), &md)?;
    }
    Ok(())
}

/// The median over the runs whose value is known (a run that saved its mel has no streamed
/// first sample).
fn median_finite(runs: &[Run], f: impl Fn(&Run) -> f64) -> f64 {
    let known: Vec<Run> = runs.iter().copied().filter(|r| f(r).is_finite()).collect();
    median(&known, f)
}

/// ‖a − b‖ / ‖b‖ over two outputs of the same length.
fn rel_l2(a: &[f64], b: &[f64]) -> Result<f64> {
    if a.len() != b.len() {
        bail!("outputs of different lengths ({} vs {}): cannot compare precisions", a.len(), b.len());
    }
    let diff: f64 = a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum();
    let norm: f64 = b.iter().map(|y| y * y).sum();
    Ok((diff / norm).sqrt())
}

fn read_npy(path: &Path) -> Result<Vec<f64>> {
    let bytes = std::fs::read(path).with_context(|| path.display().to_string())?;
    let arr = npyz::NpyFile::new(&bytes[..]).with_context(|| path.display().to_string())?;
    Ok(arr.into_vec::<f32>()?.into_iter().map(f64::from).collect())
}

/// The 16-bit samples of a wav `f5 synth` wrote, as numbers.
fn read_wav(path: &Path) -> Result<Vec<f64>> {
    let bytes = std::fs::read(path).with_context(|| path.display().to_string())?;
    let at = bytes.windows(4).position(|w| w == b"data").with_context(|| format!("{}: no data chunk", path.display()))?;
    Ok(bytes[at + 8..].chunks_exact(2).map(|c| f64::from(i16::from_le_bytes([c[0], c[1]]))).collect())
}

/// What a fresh-process bench needs: the release `f5` binary (built now), the reference's Python
/// and an empty-or-kept scratch folder `target/NAME`.
pub(crate) fn prepare_processes(root: &Path, name: &str) -> Result<(PathBuf, String, PathBuf)> {
    eprintln!("building the f5 binary (release)…");
    let status = Command::new(env!("CARGO")).current_dir(root).args(["build", "--release", "-q", "-p", "f5-cli"]).status()?;
    if !status.success() {
        bail!("cargo build --release -p f5-cli failed");
    }
    let scratch = root.join("target").join(name);
    std::fs::create_dir_all(&scratch)?;
    Ok((root.join("target/release/f5"), crate::reference_python(), scratch))
}

/// Runs `cmd` to completion, polling its output file for the first audio and taking its peak
/// RSS from `wait4`. A failed run is an error: a benchmark must not print a ratio built on it.
pub(crate) fn measure(mut cmd: Command, out: &Path) -> Result<(Run, Value)> {
    let _ = std::fs::remove_file(out);
    let start = Instant::now();
    let mut child: Child = cmd.spawn().context("cannot start")?;
    let pid = i32::try_from(child.id()).context("pid")?;
    let mut stdout = child.stdout.take();
    let mut stderr = child.stderr.take();
    // Drain both pipes on threads so a chatty child never blocks on a full pipe.
    let out_reader = std::thread::spawn(move || {
        let mut s = String::new();
        if let Some(p) = stdout.as_mut() {
            let _ = std::io::Read::read_to_string(p, &mut s);
        }
        s
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        if let Some(p) = stderr.as_mut() {
            let _ = std::io::Read::read_to_string(p, &mut s);
        }
        s
    });
    let mut first_sample = None;
    let (status, rusage) = loop {
        if first_sample.is_none() && audio_bytes(out) > 0 {
            first_sample = Some(start.elapsed().as_secs_f64());
        }
        let mut status = 0i32;
        // SAFETY: plain syscall on our own child; `rusage` is a valid out-pointer.
        let mut rusage: libc::rusage = unsafe { std::mem::zeroed() };
        let r = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut rusage) };
        if r == pid {
            break (status, rusage);
        }
        if r < 0 {
            bail!("wait4 failed: {}", std::io::Error::last_os_error());
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let wall = start.elapsed().as_secs_f64();
    let stdout = out_reader.join().unwrap_or_default();
    let stderr = err_reader.join().unwrap_or_default();
    if !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
        let tail: String = stderr.lines().rev().take(15).collect::<Vec<_>>().into_iter().rev().collect::<Vec<_>>().join("\n");
        bail!("exited with status {status}:\n{tail}");
    }
    let bytes = audio_bytes(out);
    if bytes == 0 {
        bail!("{} holds no audio", out.display());
    }
    let json: Value = if stdout.trim().is_empty() { Value::Null } else { serde_json::from_str(&stdout).context("reference JSON")? };
    let run = Run {
        wall,
        first_sample: first_sample.unwrap_or(wall),
        // ru_maxrss is in KiB on Linux.
        peak_rss_mib: rusage.ru_maxrss as f64 / 1024.0,
        audio_seconds: bytes as f64 / 2.0 / 24_000.0,
    };
    Ok((run, json))
}

/// Bytes of 16-bit mono audio in a wav's `data` chunk so far (0 until the header and some
/// samples are there). A streaming writer may leave the chunk size open, so this reads the
/// file length rather than trusting the header's count.
fn audio_bytes(path: &Path) -> u64 {
    let Ok(bytes) = std::fs::read(path) else { return 0 };
    let Some(at) = bytes.windows(4).position(|w| w == b"data") else { return 0 };
    (bytes.len() as u64).saturating_sub(at as u64 + 8)
}

pub(crate) fn median(runs: &[Run], f: impl Fn(&Run) -> f64) -> f64 {
    let mut v: Vec<f64> = runs.iter().map(f).collect();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

pub(crate) fn shell_words(args: &[String]) -> String {
    args.iter()
        .map(|a| {
            if a.chars().all(|c| c.is_ascii_alphanumeric() || "-_./=,".contains(c)) {
                a.clone()
            } else {
                format!("'{}'", a.replace('\'', "'\\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// A full-size checkpoint, as a path relative to the repository root (where the processes run,
/// so that the printed commands can be pasted there).
fn refmodel(root: &Path, rel: &str) -> Result<PathBuf> {
    let p = Path::new("target/refmodels").join(rel);
    if !root.join(&p).exists() {
        bail!("{} is missing: run `cargo xtask fixtures --full-size` first", root.join(&p).display());
    }
    Ok(p)
}

/// `p` relative to the repository root, for the command lines the processes run from there.
fn from_root(root: &Path, p: &Path) -> String {
    p.strip_prefix(root).unwrap_or(p).display().to_string()
}
