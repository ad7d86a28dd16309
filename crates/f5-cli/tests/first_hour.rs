//! What a new user meets in the first hour, through the `f5` binary on the fixtures: the
//! settings file, mistyped paths, clipped references, `f5 chunks`, inspect, wrong-family
//! errors, the voice store and the daemon's warnings.

use std::io::{BufRead, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures")
}

/// A fresh directory for one test (F5_HOME, HF_HOME, outputs).
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("f5-first-hour-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `f5 ARGS` in the fixtures with its own F5_HOME and Hugging Face cache, offline.
fn f5_in(home: &Path, args: &[&str]) -> (bool, String, String) {
    let out = command(home).args(args).output().expect("run f5");
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

fn command(home: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_f5"));
    c.current_dir(fixtures())
        .env("F5_HOME", home.join("f5"))
        .env("HF_HOME", home.join("hf"))
        .env_remove("HF_HUB_CACHE")
        .env_remove("F5_TOKEN")
        .env("HF_HUB_OFFLINE", "1");
    c
}

fn write_config(home: &Path, text: &str) -> PathBuf {
    let dir = home.join("f5");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("config.toml");
    std::fs::write(&path, text).unwrap();
    path
}

fn report(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

const TINY_F5: [&str; 4] = ["-m", "models/f5-tiny-v1", "--vocab", "vocab.txt"];
const REF: [&str; 4] = ["--ref", "audio/ref_22050.wav", "--ref-text", "The birch canoe slid on the smooth planks."];

/// The settings file names the model and voice, so a bare `f5 synth` uses them (without it,
/// the default is Kokoro from the hub, which offline and uncached fails).
#[test]
fn the_settings_file_gives_the_model_and_voice() {
    let home = scratch("config-model");
    let out = home.join("x.wav");
    let json = home.join("r.json");
    let args = ["synth", "-q", "-t", "Good morning.", "-o", out.to_str().unwrap(), "--report-json", json.to_str().unwrap()];
    let (ok, _, err) = f5_in(&home, &args);
    assert!(!ok && err.contains("hexgrad/Kokoro-82M"), "without settings the default model is the hub's: {err}");
    write_config(&home, "model = \"kokoro/release-small\"\nvoice = \"am_mirror\"\nvocoder = \"models/vocos-tiny\"\n");
    let (ok, _, err) = f5_in(&home, &args);
    assert!(ok, "{err}");
    let r = report(&json);
    assert_eq!(
        (r["model"].as_str(), r["voice"].as_str(), r["family"].as_str()),
        (Some("kokoro/release-small"), Some("am_mirror"), Some("kokoro"))
    );
    // The file's vocoder is a default for F5 models (the fixture F5 model has none beside it, so
    // without the setting this would look for charactr/vocos-mel-24khz offline and fail).
    let (ok, _, err) = f5_in(&home, &[&args[..], &TINY_F5[..], &REF[..]].concat());
    assert!(ok, "the file's vocoder serves the F5 model: {err}");
    assert_eq!(report(&json)["family"], "f5");
    // Flags win over the file: an explicit --voice, and a --device the file sets otherwise.
    write_config(&home, "model = \"kokoro/release-small\"\nvoice = \"am_nobody\"\ndevice = \"cuda:7\"\n");
    let (ok, _, err) = f5_in(&home, &[&args[..], &["--voice", "af_heart", "--device", "cpu"][..]].concat());
    assert!(ok, "{err}");
    assert_eq!(report(&json)["voice"], "af_heart");
    // And the file's values are used when the flags are not given.
    let (ok, _, err) = f5_in(&home, &[&args[..], &["--voice", "af_heart"][..]].concat());
    assert!(!ok && err.contains("cuda"), "the file's device applies: {err}");
    let (ok, _, err) = f5_in(&home, &[&args[..], &["--device", "cpu"][..]].concat());
    assert!(!ok && err.contains("am_nobody"), "the file's voice applies: {err}");
}

/// `--config PATH` names another file; a mistake in it is one line naming the file and the key.
#[test]
fn a_settings_mistake_is_one_line_naming_file_and_key() {
    let home = scratch("config-errors");
    let other = home.join("mine.toml");
    for (text, needle) in [
        ("modle = \"kokoro/release-small\"\n", "unknown key `modle`"),
        ("precision = \"f16\"\n", "`precision` is \"f16\""),
        ("model = [1]\n", "`model` must be a string"),
        ("model = \"a\"\nvoice = \n", "line 2"),
    ] {
        std::fs::write(&other, text).unwrap();
        let (ok, _, err) = f5_in(&home, &["--config", other.to_str().unwrap(), "voices", "list"]);
        assert!(!ok, "{text:?} was accepted");
        assert_eq!(err.trim_end().lines().count(), 1, "{text:?}: {err}");
        assert!(err.contains(other.to_str().unwrap()) && err.contains(needle), "{text:?}: {err}");
    }
    // The default file is read too, and a --config that does not exist is an error.
    let default = write_config(&home, "vocodr = \"x\"\n");
    let (ok, _, err) = f5_in(&home, &["voices", "list"]);
    assert!(!ok && err.contains(default.to_str().unwrap()) && err.contains("`vocodr`"), "{err}");
    let (ok, _, err) = f5_in(&home, &["--config", "no/such.toml", "voices", "list"]);
    assert!(!ok && err.contains("no/such.toml"), "{err}");
}

/// Starts `f5 serve` and returns it with the address from its banner and the stderr lines
/// before the banner.
// The child is handed to the caller, who kills and waits for it.
#[allow(clippy::zombie_processes)]
fn start_server(mut command: Command) -> (std::process::Child, String, Vec<String>) {
    let mut child = command.stderr(Stdio::piped()).spawn().unwrap();
    let mut reader = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut before = Vec::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap() == 0 {
            let _ = child.kill();
            let _ = child.wait();
            panic!("f5 serve ended before listening: {before:?}");
        }
        if let Some(rest) = line.split("http://").nth(1) {
            let addr = rest.split_whitespace().next().unwrap().to_string();
            // Keep draining stderr so the server never blocks on a full pipe.
            std::thread::spawn(move || {
                let mut sink = String::new();
                let _ = reader.read_to_string(&mut sink);
            });
            return (child, addr, before);
        }
        before.push(line);
    }
}

fn http_get(addr: &str, path: &str, headers: &str) -> String {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(20))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\n{headers}Connection: close\r\n\r\n").unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    resp
}

/// `f5 serve` with no --model serves the settings file's model.
#[test]
fn serve_without_a_model_serves_the_settings_default() {
    let home = scratch("config-serve");
    write_config(&home, "model = \"kokoro/release-small\"\n");
    let mut c = command(&home);
    c.args(["serve", "--addr", "127.0.0.1:0"]);
    let (mut child, addr, _) = start_server(c);
    let resp = http_get(&addr, "/models", "");
    let _ = child.kill();
    let _ = child.wait();
    assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
    // The fixture release's two voices: the hub's release (the default otherwise) has 54.
    assert!(resp.contains(r#""voices":["af_heart","am_mirror"]"#) && resp.contains(r#""family":"kokoro""#), "{resp}");
}

/// A mistyped local path is "no such file" with the nearest entry that exists, and no request
/// goes to the hub (the endpoint here is a closed port: a download attempt would say "could
/// not reach"); a real `owner/repo/file` reference still goes to the hub.
#[test]
fn a_mistyped_path_is_no_such_file_not_a_download() {
    let home = scratch("typo");
    let out = home.join("x.wav");
    let run = |model: &[&str]| {
        let mut c = command(&home);
        c.env_remove("HF_HUB_OFFLINE").env("HF_ENDPOINT", "http://127.0.0.1:1");
        c.args([&["synth", "-q", "-t", "Hi.", "-o", out.to_str().unwrap()][..], model, &REF[..]].concat());
        let o = c.output().unwrap();
        (o.status.success(), String::from_utf8_lossy(&o.stderr).into_owned())
    };
    let (ok, err) = run(&["-m", "models/f5-tiny", "--vocab", "vocab.txt"]);
    assert!(!ok);
    assert!(err.contains("'models/f5-tiny': no such file or directory"), "{err}");
    assert!(err.contains("'models/f5-tiny-v1'"), "the nearest match is suggested: {err}");
    assert!(!err.contains("127.0.0.1:1"), "no request to the hub: {err}");
    for typo in ["./models/f5-tiny-v1/model.safetensor", "model.safetensors", "/nonexistent/f5/model.pt"] {
        let (ok, err) = run(&["-m", typo, "--vocab", "vocab.txt"]);
        assert!(!ok && err.contains("no such file or directory") && !err.contains("127.0.0.1:1"), "{typo}: {err}");
    }
    let (ok, err) = run(&["-m", "models/f5-tiny-v1", "--vocab", "vocab.tx", "--vocoder", "models/vocos-tiny"]);
    assert!(!ok && err.contains("'vocab.tx': no such file or directory; did you mean 'vocab.txt'?"), "{err}");
    let (ok, err) = run(&["-m", "models/f5-tiny-v1", "--vocab", "vocab.txt", "--vocoder", "models/vocos-tyni"]);
    assert!(!ok && err.contains("did you mean 'models/vocos-tiny'?"), "{err}");
    // A hub reference whose owner is not a directory here is asked of the hub.
    let (ok, err) = run(&["-m", "someone/some-repo/model.safetensors"]);
    assert!(!ok && err.contains("127.0.0.1:1"), "a reference goes to the hub: {err}");
}

#[path = "../../f5-verify/tests/fake_whisper/mod.rs"]
#[allow(dead_code)]
mod fake_whisper;

/// A recording longer than the ≤ 12 s rule keeps loses speech while its transcript stays whole:
/// refused, saying what was kept and what to do; with a transcriber the kept part is
/// transcribed, said on stderr and in the report. The store refuses it too.
#[test]
fn a_clipped_reference_is_said_and_refused_unless_transcribed() {
    let home = scratch("clipped");
    let out = home.join("x.wav");
    let json = home.join("r.json");
    let transcript = std::fs::read_to_string(fixtures().join("audio/clip_continuous.txt")).unwrap();
    let tiny = ["-m", "models/f5-tiny-v1", "--vocab", "vocab.txt", "--vocoder", "models/vocos-tiny"];
    let base = [
        "synth",
        "-q",
        "--ref",
        "audio/clip_continuous.wav",
        "--ref-text",
        transcript.trim(),
        "-t",
        "Hi there.",
        "--nfe",
        "2",
        "-o",
        out.to_str().unwrap(),
        "--report-json",
        json.to_str().unwrap(),
    ];
    let (ok, _, err) = f5_in(&home, &[&base[..], &tiny[..]].concat());
    assert!(!ok, "a clipped reference with its whole transcript was used: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains("20.0 s of speech; only its first 12.0 s are used") && err.contains("trim the recording"), "{err}");
    assert!(err.contains("--transcriber"), "{err}");
    // The same recording with a transcriber: the kept part is transcribed and used.
    let whisper = fake_whisper::FakeWhisper::start(|_, _| fake_whisper::Reply::Text("The part that was kept.".into()));
    let with_transcriber = ["--transcriber", whisper.address(), "--retries", "0", "--no-split-on-fail"];
    let (ok, _, err) = f5_in(&home, &[&base[..], &tiny[..], &with_transcriber[..]].concat());
    assert!(ok, "{err}");
    assert!(err.contains("only its first 12.0 s are used") && err.contains("\"The part that was kept.\""), "{err}");
    let first = whisper.requests().into_iter().next().expect("the reference was sent to the transcriber");
    let Some(Ok(wav)) = first.wav else { panic!("no wav in {first:?}") };
    // The kept part at 24 kHz: 12 s, plus the 50 ms the clip appends, minus what the edge trim took.
    let seconds = wav.samples.len() as f64 / f64::from(wav.rate);
    assert!((11.5..=12.1).contains(&seconds), "{seconds} s sent");
    let r = report(&json);
    assert_eq!(r["reference_clipped"]["transcript_used"], "The part that was kept.");
    assert!((r["reference_clipped"]["speech_seconds"].as_f64().unwrap() - 20.0).abs() < 0.1, "{r}");
    // A whole reference is not clipped and the report says nothing of it.
    let (ok, _, err) = f5_in(
        &home,
        &[
            &["synth", "-q"][..],
            &tiny[..],
            &REF[..],
            &["-t", "Hi.", "--nfe", "2", "-o", out.to_str().unwrap(), "--report-json", json.to_str().unwrap()][..],
        ]
        .concat(),
    );
    assert!(ok, "{err}");
    assert!(report(&json).get("reference_clipped").is_none());
    // The store refuses it as well.
    let (ok, _, err) = f5_in(&home, &["voices", "add", "long", "audio/clip_continuous.wav", "--transcript", transcript.trim()]);
    assert!(!ok && err.contains("only its first 12.0 s are used"), "{err}");
}

/// `f5 chunks` with the voice options of `f5 synth` prints exactly the chunks synthesis makes
/// (the budget follows from the reference) and says which budget it used; without them it says
/// that the budget is the default. A multi-voice text's summary counts every piece's chunks.
#[test]
fn chunks_prints_what_synthesis_does_and_the_summary_counts_every_piece() {
    let home = scratch("chunks");
    let text_file = home.join("text.txt");
    let text = "The first sentence is here, and it runs on for a while with several clauses. A second one follows it. \
                Then a third sentence comes, also of some length, to fill the budget. And a short fourth. The fifth and last one ends it.";
    // About 690 bytes: more than one chunk with the fixture reference's budget (496 bytes).
    std::fs::write(&text_file, [text, text, text].join(" ")).unwrap();
    let json = home.join("r.json");
    let out = home.join("x.wav");
    let tiny = ["-m", "models/f5-tiny-v1", "--vocab", "vocab.txt", "--vocoder", "models/vocos-tiny"];
    let (ok, _, err) = f5_in(
        &home,
        &[
            &[
                "synth",
                "-q",
                "-f",
                text_file.to_str().unwrap(),
                "--nfe",
                "2",
                "-o",
                out.to_str().unwrap(),
                "--report-json",
                json.to_str().unwrap(),
            ][..],
            &tiny[..],
            &REF[..],
        ]
        .concat(),
    );
    assert!(ok, "{err}");
    let synthesised: Vec<String> =
        report(&json)["chunks"].as_array().unwrap().iter().map(|c| c["text"].as_str().unwrap().to_string()).collect();
    let (ok, printed, err) = f5_in(&home, &[&["chunks", text_file.to_str().unwrap()][..], &REF[..]].concat());
    assert!(ok, "{err}");
    assert_eq!(printed.lines().collect::<Vec<_>>(), synthesised, "f5 chunks with the reference = synthesis");
    assert!(err.contains(&format!("{} chunks; budget ", synthesised.len())) && err.contains("audio/ref_22050.wav"), "{err}");
    // Without a reference: the default budget, said to be one, and different chunks here.
    let (ok, default, err) = f5_in(&home, &["chunks", text_file.to_str().unwrap()]);
    assert!(ok && err.contains("budget 135 bytes (the default") && err.contains("--ref"), "{err}");
    assert_ne!(default.lines().count(), synthesised.len(), "the fixture reference's budget differs from 135: {default}");

    // Multi-voice: [main] … [birch] … [main] … is three chunks, in the report and the summary.
    let (ok, _, err) =
        f5_in(&home, &["voices", "add", "birch", "audio/ref_22050.wav", "--transcript", "The birch canoe slid on the smooth planks."]);
    assert!(ok, "{err}");
    let multi = "[main] Hello there. [birch] I am the birch voice. [main] Back to me.";
    let (ok, _, err) = f5_in(
        &home,
        &[
            &["synth", "-t", multi, "--nfe", "2", "-o", out.to_str().unwrap(), "--report-json", json.to_str().unwrap()][..],
            &tiny[..],
            &REF[..],
        ]
        .concat(),
    );
    assert!(ok, "{err}");
    assert_eq!(report(&json)["chunks"].as_array().unwrap().len(), 3);
    assert!(err.contains(", 3 chunks, seed"), "{err}");
    std::fs::write(&text_file, multi).unwrap();
    let (ok, printed, err) = f5_in(&home, &[&["chunks", text_file.to_str().unwrap()][..], &REF[..]].concat());
    assert!(ok, "{err}");
    assert_eq!(printed.lines().collect::<Vec<_>>(), ["[main] Hello there.", "[birch] I am the birch voice.", "[main] Back to me."]);
}

/// `f5 models inspect` takes the directories `f5 synth` takes, of every family.
#[test]
fn inspect_takes_a_model_directory() {
    let home = scratch("inspect");
    for (dir, kind) in [("models/f5-tiny-v1", "f5"), ("models/vocos-tiny", "vocos"), ("kokoro/release-small", "kokoro")] {
        let (ok, out, err) = f5_in(&home, &["models", "inspect", dir, "--json"]);
        assert!(ok, "{dir}: {err}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["kind"], kind, "{dir}");
    }
}

/// An error whose cause is printed in its own message and again as its source is said once:
/// the busy port of `f5 serve`.
#[test]
fn a_busy_port_is_said_once() {
    let home = scratch("busy");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let (ok, _, err) = f5_in(&home, &["serve", "-m", "kokoro/release-small", "--addr", &addr]);
    assert!(!ok);
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert_eq!(err.matches("(os error 98)").count(), 1, "each cause once: {err}");
    drop(taken);
}

/// A model of one family where another is expected is named by the family found, not by a
/// missing tensor.
#[test]
fn the_wrong_family_is_named() {
    let home = scratch("family");
    let out = home.join("x.wav");
    let base = ["synth", "-q", "-t", "Hi.", "--ref", "audio/ref_22050.wav", "--ref-text", "The birch canoe.", "-o", out.to_str().unwrap()];
    for (extra, needle) in [
        (
            &["-m", "models/f5-tiny-v1", "--vocab", "vocab.txt", "--vocoder", "models/f5-tiny-v1/model.safetensors"][..],
            "this is an F5-TTS model, not a vocoder",
        ),
        (
            &["-m", "models/f5-tiny-v1", "--vocab", "vocab.txt", "--vocoder", "models/f5-tiny-v1"][..],
            "this is an F5-TTS model, not a vocoder",
        ),
        (
            &["-m", "models/f5-tiny-v1", "--vocab", "vocab.txt", "--vocoder", "kokoro/release-small/kokoro-v1_0.pth"][..],
            "this is a Kokoro model, not a vocoder",
        ),
        (
            &["-m", "models/f5-tiny-v1", "--vocab", "vocab.txt", "--vocoder", "kokoro/release-small"][..],
            "this is a Kokoro model, not a vocoder",
        ),
        (&["-m", "models/vocos-tiny", "--vocab", "vocab.txt"][..], "this is a Vocos vocoder, not a model"),
        (&["-m", "models/vocos-tiny/pytorch_model.bin", "--vocab", "vocab.txt"][..], "this is a Vocos vocoder, not a model"),
    ] {
        let (ok, _, err) = f5_in(&home, &[&base[..], extra].concat());
        assert!(!ok && err.contains(needle), "{extra:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    }
}

/// Reading the voice store never writes it, and a `[tag]` naming no voice is an error naming
/// the tag, for both families (not the main voice speaking the piece in silence).
#[test]
fn reading_voices_writes_nothing_and_an_unknown_tag_is_an_error() {
    let home = scratch("voices-read");
    let (ok, out, err) = f5_in(&home, &["voices", "list"]);
    assert!(ok && out.is_empty() && err.contains("no voices"), "{err}");
    assert!(!home.join("f5").exists(), "voices list created {}", home.join("f5").display());
    let out = home.join("x.wav");
    let tiny = ["-m", "models/f5-tiny-v1", "--vocab", "vocab.txt", "--vocoder", "models/vocos-tiny"];
    let text = "Hello there. [birhc] Hi from another voice. [main] And back.";
    let (ok, _, err) =
        f5_in(&home, &[&["synth", "-q", "-t", text, "--nfe", "2", "-o", out.to_str().unwrap()][..], &tiny[..], &REF[..]].concat());
    assert!(!ok && err.contains("[birhc]"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(!home.join("f5").exists(), "a voice lookup created the store");
    let (ok, _, err) =
        f5_in(&home, &["synth", "-q", "-m", "kokoro/release-small", "-t", "Hi. [af_nobody] Hello.", "-o", out.to_str().unwrap()]);
    assert!(!ok && err.contains("[af_nobody]"), "{err}");
    let (ok, _, err) =
        f5_in(&home, &["synth", "-q", "-m", "kokoro/release-small", "-t", "Hi. [am_mirror] Hello.", "-o", out.to_str().unwrap()]);
    assert!(ok, "a voice the model has: {err}");
}

/// Listening beyond loopback without a token is warned about, loudly and before the banner;
/// on loopback, or with a token, it is not.
#[test]
fn serving_the_network_without_a_token_warns() {
    let home = scratch("warn");
    let serve = |extra: &[&str]| {
        let mut c = command(&home);
        c.args([&["serve", "-m", "kokoro/release-small"][..], extra].concat());
        let (mut child, _, before) = start_server(c);
        let _ = child.kill();
        let _ = child.wait();
        before.concat()
    };
    let warned = serve(&["--addr", "0.0.0.0:0"]);
    assert!(warned.contains("WARNING") && warned.contains("without --token"), "{warned:?}");
    assert!(!serve(&["--addr", "127.0.0.1:0"]).contains("WARNING"));
    assert!(!serve(&["--addr", "0.0.0.0:0", "--token", "a-secret"]).contains("WARNING"));
}

/// Without --ref-text, a transcriber hears the reference and f5 shows what it heard; without a
/// transcriber the missing transcript is one line saying both ways out.
#[test]
fn a_missing_reference_transcript_is_transcribed_and_shown() {
    let home = scratch("no-ref-text");
    let out = home.join("x.wav");
    let tiny = ["-m", "models/f5-tiny-v1", "--vocab", "vocab.txt", "--vocoder", "models/vocos-tiny"];
    let base = ["synth", "-q", "--ref", "audio/ref_22050.wav", "-t", "Hi there.", "--nfe", "2", "-o", out.to_str().unwrap()];
    let (ok, _, err) = f5_in(&home, &[&base[..], &tiny[..]].concat());
    assert!(!ok && err.contains("--ref-text") && err.contains("--transcriber"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    let whisper = fake_whisper::FakeWhisper::start(|_, _| fake_whisper::Reply::Text("The birch canoe slid on the smooth planks.".into()));
    let with = ["--transcriber", whisper.address(), "--retries", "0", "--no-split-on-fail"];
    let (ok, _, err) = f5_in(&home, &[&base[..], &tiny[..], &with[..]].concat());
    assert!(ok, "{err}");
    assert!(err.contains("the transcriber heard \"The birch canoe slid on the smooth planks.\""), "{err}");
    let first = whisper.requests().into_iter().next().expect("the reference was sent to the transcriber");
    assert!(matches!(first.wav, Some(Ok(ref w)) if w.rate == 24_000), "{first:?}");
}

/// The README's command on the fixtures runs as written (the program is this build's `f5`, the
/// README's `./target/release/f5`), from a directory where `fixtures/` is the repository's.
#[test]
fn the_readme_fixture_command_runs_as_written() {
    let readme = std::fs::read_to_string(fixtures().join("../README.md")).unwrap();
    let block = readme
        .split("```sh\n")
        .skip(1)
        .filter_map(|b| b.split("```").next())
        .find(|b| b.contains("fixtures/models/f5-tiny-v1"))
        .expect("a ```sh block with the fixture command in the README");
    let command = block.replace("\\\n", " ");
    let words: Vec<String> = shell_words(command.trim());
    assert_eq!(words.first().map(String::as_str), Some("./target/release/f5"), "{words:?}");
    let output = words.windows(2).find(|w| w[0] == "-o").map(|w| w[1].clone()).expect("an -o in the README's command");
    let dir = scratch("readme");
    std::os::unix::fs::symlink(fixtures().canonicalize().unwrap(), dir.join("fixtures")).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_f5"))
        .args(&words[1..])
        .current_dir(&dir)
        .env("F5_HOME", dir.join("f5"))
        .env("HF_HOME", dir.join("hf"))
        .env("HF_HUB_OFFLINE", "1")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let wav = hound::WavReader::open(dir.join(&output)).unwrap();
    assert_eq!(wav.spec().sample_rate, 24_000);
    assert!(wav.len() > 24_000, "{} samples", wav.len());
}

/// The words of a command line: spaces split, double quotes group (what the README uses).
fn shell_words(line: &str) -> Vec<String> {
    let (mut words, mut word, mut quoted) = (Vec::new(), String::new(), false);
    for c in line.chars() {
        match c {
            '"' => quoted = !quoted,
            c if c.is_whitespace() && !quoted => {
                if !word.is_empty() {
                    words.push(std::mem::take(&mut word));
                }
            }
            c => word.push(c),
        }
    }
    if !word.is_empty() {
        words.push(word);
    }
    words
}
