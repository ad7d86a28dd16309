//! Kokoro as a new user meets it: the README's first command and `f5 synth` with no model
//! flags fetch `hexgrad/Kokoro-82M` (here served by the loopback hub of f5-hub's tests, holding
//! the int8-derived weights that `cargo xtask kokoro-int8` rebuilds) into the Hugging Face cache
//! layout, speak words pocketsphinx hears, and a second run asks the hub nothing.
//!
//! Needs `F5_KOKORO_INT8` (the folder `cargo xtask kokoro-int8` writes) and `F5_ASR_PYTHON` (a
//! Python with pocketsphinx); without them the tests say so and pass without checking, unless
//! `F5_KOKORO_REQUIRE_INT8=1` (CI sets it where the weights were built) makes that a failure.
//!
//! Tolerances: the int8-derived weights through pocketsphinx's small model score ~0.08 WER on
//! plain sentences (f5-kokoro's int8 test); the issue's bounds are a mean ≤ 0.2 for the default
//! model on 3 sentences and ≤ 0.15 over 5 sentences in two voices and a mix.

/// The loopback hub of f5-hub's tests, shared rather than copied.
#[path = "../../f5-hub/tests/common/mod.rs"]
mod hubsim;

#[path = "../../f5-verify/tests/asr/harness.rs"]
mod asr;

use std::path::{Path, PathBuf};
use std::process::Command;

const REPO: &str = "hexgrad/Kokoro-82M";
const COMMIT: &str = "2222222222222222222222222222222222222222";
/// Voices the fake repository holds (the release has 54; these are the ones the tests name).
const VOICES: [&str; 3] = ["af_heart", "am_adam", "af_bella"];

/// Says why the test does not run; missing weights are a failure where they are required.
fn skip(reason: &str, weights_missing: bool) {
    let required = std::env::var("F5_KOKORO_REQUIRE_INT8").is_ok_and(|v| v == "1");
    assert!(!(required && weights_missing), "F5_KOKORO_REQUIRE_INT8=1 but {reason}");
    eprintln!("SKIPPED (Kokoro from the hub): {reason}");
}

/// The int8-derived release folder, or `None` (after saying why).
fn int8_dir() -> Option<PathBuf> {
    match std::env::var_os("F5_KOKORO_INT8").map(PathBuf::from) {
        Some(dir) if dir.join("kokoro-v1_0.pth").is_file() => Some(dir),
        Some(dir) => {
            skip(&format!("F5_KOKORO_INT8={} has no kokoro-v1_0.pth", dir.display()), true);
            None
        }
        None => {
            skip("F5_KOKORO_INT8 is not set (the folder `cargo xtask kokoro-int8` writes)", true);
            None
        }
    }
}

/// A fake `hexgrad/Kokoro-82M` with the release's layout and the int8-derived files.
fn fake_hub(dir: &Path) -> hubsim::TestServer {
    let read = |p: PathBuf| std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    let mut repo = hubsim::RepoSpec::new(COMMIT).file("config.json", &read(dir.join("config.json")), false).file(
        "kokoro-v1_0.pth",
        &read(dir.join("kokoro-v1_0.pth")),
        true,
    );
    for v in VOICES {
        repo = repo.file(&format!("voices/{v}.pt"), &read(dir.join("voices").join(format!("{v}.pt"))), true);
    }
    hubsim::TestServer::start(vec![(REPO, repo)])
}

/// What each test needs: the recogniser, the fake hub, an empty home.
struct Setup {
    asr: asr::AsrServer,
    hub: hubsim::TestServer,
    home: tempfile::TempDir,
}

/// The setup, or `None` (after saying why) when the weights or the recogniser are missing.
fn setup() -> Option<Setup> {
    let dir = int8_dir()?;
    let asr = match asr::start_asr_server(600) {
        Ok(s) => s,
        Err(reason) => {
            skip(&reason, false);
            return None;
        }
    };
    Some(Setup { asr, hub: fake_hub(&dir), home: tempfile::tempdir().expect("temp dir") })
}

/// `f5` with every store and cache inside `home`, the hub at `endpoint`.
fn f5_in(home: &Path, endpoint: &str, args: &[String]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_f5"))
        .args(args)
        .current_dir(home)
        .env("F5_HOME", home.join("f5"))
        .env("HF_HOME", home.join("hf"))
        .env("HF_ENDPOINT", endpoint)
        .env_remove("HF_HUB_OFFLINE")
        .env_remove("HF_TOKEN")
        .output()
        .expect("run f5");
    (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// The words of a command line: spaces split, double quotes group (what the README uses).
fn shell_words(line: &str) -> Vec<String> {
    let (mut words, mut word, mut quoted, mut any) = (Vec::new(), String::new(), false, false);
    for c in line.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                any = true;
            }
            c if c.is_whitespace() && !quoted => {
                if any {
                    words.push(std::mem::take(&mut word));
                    any = false;
                }
            }
            c => {
                word.push(c);
                any = true;
            }
        }
    }
    if any {
        words.push(word);
    }
    words
}

/// The README's first two commands, as written.
fn readme_commands() -> (String, String) {
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md")).expect("README.md");
    let block = readme.split("```sh\n").nth(1).and_then(|b| b.split("```").next()).expect("a ```sh block in the README");
    let mut lines = block.lines().filter(|l| !l.trim().is_empty());
    (lines.next().expect("a first command").to_string(), lines.next().expect("a second command").to_string())
}

/// `f5 synth` with `extra`, listened to once per chunk by the recogniser at `asr` (no retries,
/// no split, so the WER is the first attempt's), its report written to `report`.
fn heard_synth(extra: &[&str], asr: &str, report: &Path) -> Vec<String> {
    let mut args: Vec<String> = ["synth", "-q"].iter().chain(extra).map(|s| s.to_string()).collect();
    args.extend(["--transcriber", asr, "--retries", "0", "--no-split-on-fail", "--report-json"].map(String::from));
    args.push(report.display().to_string());
    args
}

/// The word error rate the listen-back check heard, from a `--report-json` report.
fn heard_wer(report: &Path) -> f64 {
    let r: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(report).expect("report")).expect("report json");
    let chunks = r["chunks"].as_array().expect("chunks");
    assert!(chunks.iter().all(|c| c["checked"] == true), "every chunk heard: {r}");
    eprintln!("heard: {:?}", chunks.iter().map(|c| c["heard"].as_str().unwrap_or_default()).collect::<Vec<_>>());
    r["score"]["wer"].as_f64().expect("a WER")
}

#[test]
fn the_readme_command_and_the_default_model_speak_from_the_hub() {
    let Some(Setup { asr, hub, home }) = setup() else { return };

    // The README's first command, exactly as written, on the test's build of the binary.
    let (first, second) = readme_commands();
    let prefix = "cargo run --release -p f5-cli -- ";
    let args = shell_words(first.strip_prefix(prefix).unwrap_or_else(|| panic!("the README's first command is not `{prefix}…`: {first}")));
    let (ok, err) = f5_in(home.path(), &hub.endpoint(), &args);
    assert!(ok, "{first}: {err}");
    let out = args.iter().position(|a| a == "-o").map(|i| home.path().join(&args[i + 1])).expect("the command names -o");
    assert!(hound::WavReader::open(&out).expect("a wav").duration() > 12_000, "half a second of speech at least");
    assert_eq!(second, "cargo test --workspace", "the README's second command is CI's test command");
    let snapshot = home.path().join("hf/hub/models--hexgrad--Kokoro-82M/snapshots").join(COMMIT);
    for f in ["config.json", "kokoro-v1_0.pth", "voices/af_heart.pt"] {
        assert!(snapshot.join(f).is_file(), "{f} in the Hugging Face cache layout");
    }

    // No model flags, three sentences, heard by pocketsphinx through the listen-back check.
    let report = home.path().join("report.json");
    let text = "I would like to have a cup of coffee in the morning. She opened the door and walked into the kitchen. The children played in the garden until it was dark.";
    let args = heard_synth(&["--text", text, "-o", "x.wav", "--seed", "0"], &asr.address, &report);
    let before = hub.request_count();
    let (ok, err) = f5_in(home.path(), &hub.endpoint(), &args);
    assert!(ok, "{err}");
    assert_eq!(hub.request_count(), before, "a second run asks the hub nothing: {:?}", &hub.requests()[before..]);
    let wer = heard_wer(&report);
    assert!(wer <= 0.2, "the default model's speech heard with WER {wer}");
}

#[test]
fn named_voices_and_a_mix_from_the_hub_are_heard() {
    let Some(Setup { asr, hub, home }) = setup() else { return };
    let text = "The sun was shining brightly this morning. We walked to the station together. \
                My brother bought a new red bicycle. Please close the window before you leave. \
                They will arrive at the airport tomorrow.";
    let mut wers = Vec::new();
    // The mix first: it fetches two voices while the loopback hub is fresh.
    for voice in ["af_bella(2)+am_adam", "af_heart", "am_adam"] {
        let report = home.path().join(format!("report-{}.json", wers.len()));
        let args = heard_synth(&["--model", REPO, "--voice", voice, "--text", text, "-o", "y.wav", "--seed", "1"], &asr.address, &report);
        let (ok, err) = f5_in(home.path(), &hub.endpoint(), &args);
        assert!(ok, "{voice}: {err}");
        wers.push(heard_wer(&report));
    }
    let mean = wers.iter().sum::<f64>() / wers.len() as f64;
    assert!(mean <= 0.15, "mean WER {mean} over am_adam, af_heart and a mix: {wers:?}");
}
