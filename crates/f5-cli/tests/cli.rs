//! The `f5` binary end to end on the fixtures: what a user types, what they get back.

mod common;

use common::{add_birch, fixtures};
use std::path::PathBuf;
use std::process::Command;

fn f5(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_f5")).args(args).current_dir(fixtures()).output().expect("run f5");
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// The tiny random-weight model, its vocabulary and vocoder, as every synthesis here names them.
const TINY: [&str; 6] = ["-m", "models/f5-tiny-v1", "--vocab", "vocab.txt", "--vocoder", "models/vocos-tiny"];
/// The fixture recording and its transcript.
const REF: [&str; 4] = ["--ref", "audio/ref_22050.wav", "--ref-text", "The birch canoe slid on the smooth planks."];

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("f5-cli-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

#[test]
fn synth_writes_a_wav_matching_the_reference_length() {
    let out = tmp("out.wav");
    let report = tmp("report.json");
    let (ok, _, err) = f5(&[
        &["synth"][..],
        &TINY[..],
        &REF[..],
        &[
            "-t",
            "Hello world, this is a tiny test.",
            "--nfe",
            "8",
            "--seed",
            "42",
            "-q",
            "-o",
            out.to_str().unwrap(),
            "--report-json",
            report.to_str().unwrap(),
        ][..],
    ]
    .concat());
    assert!(ok, "{err}");
    assert!(err.contains("seed 42") && err.contains("RTF"), "summary line: {err}");
    let wav = hound::WavReader::open(&out).unwrap();
    assert_eq!((wav.spec().sample_rate, wav.spec().channels, wav.spec().bits_per_sample), (24_000, 1, 16));
    // infer_process made 31232 samples for the same inputs (fixtures/goldens/infer_tiny_v1_seed42.npy).
    assert_eq!(wav.len(), 31_232);
    let r: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert_eq!(r["seed"], 42);
    assert_eq!(r["chunks"][0]["frames"], 287);
}

#[test]
fn models_inspect_recognises_kokoro() {
    for file in ["kokoro-small.pth", "kokoro-small-stripped.pth", "kokoro-small.safetensors"] {
        let (ok, out, err) = f5(&["models", "inspect", &format!("kokoro/models/kokoro-small/{file}"), "--json"]);
        assert!(ok, "{file}: {err}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!((v["kind"].as_str(), v["tensors"].as_u64(), v["params"].as_u64()), (Some("kokoro"), Some(548), Some(134_734)), "{file}");
    }
    let (ok, out, _) = f5(&["models", "inspect", "kokoro/models/kokoro-small/kokoro-small.pth"]);
    assert!(ok && out.contains("Kokoro") && out.contains("134734 parameters"), "{out}");
}

#[test]
fn models_inspect_reads_the_architecture() {
    let (ok, out, err) = f5(&["models", "inspect", "models/f5-tiny-v0/model.pt", "--json"]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["container"], "pytorch");
    assert_eq!(v["variant"], "v0");
    assert_eq!(v["heads"], 2);
    assert_eq!(v["dim_head"], 32);
    assert_eq!(v["depth"], 1);
    assert_eq!(v["text_vocab"], 2546);
    let (ok, out, _) = f5(&["models", "inspect", "models/f5-tiny-v1/model.safetensors", "--json"]);
    assert!(ok);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (v["container"].as_str(), v["variant"].as_str(), v["prefix"].as_str()),
        (Some("safetensors"), Some("v1"), Some("ema_model.transformer."))
    );
}

#[test]
fn failures_are_one_line_and_non_zero() {
    for args in [
        vec!["models", "inspect", "malicious/evil_reduce.pt"],
        vec!["models", "inspect", "does-not-exist.safetensors"],
        vec!["mel", "vocab.txt", "-o", "/dev/null"],
        [&["synth"][..], &TINY[..], &["--ref", "audio/ref_22050.wav", "--ref-text", "x", "-t", " ", "-o", "/tmp/never.wav"][..]].concat(),
    ] {
        let (ok, _, err) = f5(&args);
        assert!(!ok, "{args:?} succeeded");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("f5: error: "), "{err}");
    }
    let (_, _, err) = f5(&["models", "inspect", "malicious/evil_reduce.pt"]);
    assert!(err.contains("posix.system"), "{err}");
}

/// `--device cuda` on a machine (or a build) that cannot run it is one clear line, not a panic:
/// a CPU-only build says how to get CUDA; a CUDA build without a driver or GPU says which is
/// missing. bf16 on the CPU runs on every CPU (widened to f32 per op where it lacks AVX-512
/// BF16).
#[test]
fn a_device_that_cannot_run_is_one_clear_line() {
    let out = tmp("device.wav");
    let run = |extra: &[&str]| {
        let args = [&["synth"][..], &TINY[..], &REF[..], &["-t", "Hello.", "-o", out.to_str().unwrap(), "-q"][..], extra].concat();
        f5(&args)
    };
    let (ok, _, err) = run(&["--precision", "bf16"]);
    assert!(ok && out.exists(), "bf16 on the CPU must run on every CPU: {err}");
    std::fs::remove_file(&out).unwrap();
    let (ok, _, err) = run(&["--device", "cuda"]);
    if ok {
        // A machine with a working GPU and a CUDA build: nothing to refuse.
        return;
    }
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains("built without CUDA support") || err.contains("cuda:0"), "{err}");
    assert!(!out.exists(), "a refused run wrote {}", out.display());

    // The daemon takes the same flags and refuses the same way, before it binds a port.
    let voices = tmp("device-voices");
    let serve = |extra: &[&str]| {
        let args = [&["serve"][..], &TINY[..], &["--addr", "127.0.0.1:0", "--voices", voices.to_str().unwrap()][..], extra].concat();
        f5(&args)
    };
    let (ok, _, err) = serve(&["--device", "cuda"]);
    assert!(!ok);
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains("built without CUDA support") || err.contains("cuda:0"), "{err}");
    #[cfg(target_arch = "x86_64")]
    let cpu_vnni = std::arch::is_x86_feature_detected!("avx512vnni");
    #[cfg(not(target_arch = "x86_64"))]
    let cpu_vnni = false;
    if !cpu_vnni {
        // (Where the CPU can, `serve --precision int8` starts serving: nothing to refuse.)
        let (ok, _, err) = serve(&["--precision", "int8"]);
        assert!(!ok);
        assert!(err.contains("avx512") && err.contains("lacks"), "{err}");
    }
}

#[test]
fn tokens_and_chunks() {
    let text = tmp("lines.txt");
    std::fs::write(&text, "Hello world.\n你好\n").unwrap();
    let (ok, out, err) = f5(&["tokens", "vocab.txt", text.to_str().unwrap()]);
    assert!(ok, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2);
    // "你好" → [" ", "ni2", " ", "hao3"] (tone sandhi on the first syllable).
    assert_eq!(lines[1].split(' ').count(), 4);
    std::fs::write(&text, "One sentence here. Another one there! And a third?").unwrap();
    let (ok, out, _) = f5(&["chunks", text.to_str().unwrap(), "--max", "20"]);
    assert!(ok);
    assert_eq!(out.lines().collect::<Vec<_>>(), ["One sentence here.", "Another one there!", "And a third?"]);
}

#[test]
fn voices_add_use_remove_in_a_private_store() {
    let home = tmp("home");
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_f5"))
            .args(args)
            .current_dir(fixtures())
            .env("F5_HOME", &home)
            .env("HF_HUB_OFFLINE", "1")
            .output()
            .unwrap();
        (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (ok, _, err) =
        run(&["voices", "add", "alice", "audio/ref_22050.wav", "--transcript", "The birch canoe slid on the smooth planks."]);
    assert!(ok, "{err}");
    let (ok, out, _) = run(&["voices", "list"]);
    assert!(ok && out.starts_with("alice"), "{out}");
    let wav = tmp("voice.wav");
    let (ok, _, err) = run(&[
        &["synth", "-q"][..],
        &TINY[..],
        &["--voice", "alice", "-t", "Hi there, friend.", "--nfe", "2", "-o", wav.to_str().unwrap()][..],
    ]
    .concat());
    assert!(ok, "{err}");
    for bad in ["../x", "a/b", "", "x.y"] {
        let (ok, _, err) = run(&["voices", "add", bad, "audio/ref_22050.wav", "--transcript", "x"]);
        assert!(!ok && err.contains("invalid voice id"), "{bad:?}: {err}");
    }
    let (ok, _, err) = run(&["voices", "add", "noise", "vocab.txt", "--transcript", "x"]);
    assert!(!ok, "{err}");
    let (ok, _, _) = run(&["voices", "remove", "alice"]);
    assert!(ok);
    let (ok, out, _) = run(&["voices", "list"]);
    assert!(ok && out.is_empty());
    // Only the (now empty) voices directory was ever created in the store.
    assert_eq!(std::fs::read_dir(home.join("voices")).unwrap().count(), 0);
}

#[test]
fn a_transcriber_that_is_down_leaves_synthesis_working_and_unchecked() {
    let out = tmp("down.wav");
    let report = tmp("down.json");
    // Port 1 on loopback: nothing listens there, so every request is refused at once.
    let (ok, _, err) = f5(&[
        &["synth", "-q"][..],
        &TINY[..],
        &REF[..],
        &[
            "-t",
            "Hello world.",
            "--nfe",
            "2",
            "--seed",
            "1",
            "--transcriber",
            "127.0.0.1:1",
            "-o",
            out.to_str().unwrap(),
            "--report-json",
            report.to_str().unwrap(),
        ][..],
    ]
    .concat());
    assert!(ok, "{err}");
    assert!(err.contains("unchecked"), "{err}");
    let r: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert_eq!(r["score"]["unchecked"], 1);
    assert_eq!(r["chunks"][0]["checked"], false);
    assert_eq!(r["chunks"][0]["attempts"], 1);
}

#[test]
fn serve_starts_and_answers_health() {
    use std::io::{BufRead, Read, Write};
    let home = tmp("serve-home");
    let mut child = Command::new(env!("CARGO_BIN_EXE_f5"))
        .args([&["serve"][..], &TINY[..], &["--addr", "127.0.0.1:0"][..]].concat())
        .current_dir(fixtures())
        .env("F5_HOME", &home)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stderr.take().unwrap()).read_line(&mut line).unwrap();
    let addr = line
        .split("http://")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .unwrap_or_else(|| panic!("no address in {line:?}"))
        .to_string();
    let mut s = std::net::TcpStream::connect(&addr).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(10))).unwrap();
    write!(s, "GET /health HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    child.kill().unwrap();
    let _ = child.wait();
    assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
}

#[test]
fn streamed_wav_equals_the_whole_synthesis_and_remove_silence_keeps_speech_without_pauses() {
    let text = "Hello world, this is a tiny test. And here is a second sentence to speak.";
    let base = [&["synth", "-q"][..], &TINY[..], &REF[..], &["-t", text, "--nfe", "2", "--seed", "9"][..]].concat();
    let wav = tmp("stream.wav");
    let npy = tmp("whole.npy");
    let (ok, _, err) = f5(&[&base[..], &["-o", wav.to_str().unwrap()]].concat());
    assert!(ok, "{err}");
    let (ok, _, err) = f5(&[&base[..], &["-o", npy.to_str().unwrap()]].concat());
    assert!(ok, "{err}");
    let streamed: Vec<i16> = hound::WavReader::open(&wav).unwrap().samples::<i16>().map(|s| s.unwrap()).collect();
    let bytes = std::fs::read(&npy).unwrap();
    let whole: Vec<f32> = npyz::NpyFile::new(&bytes[..]).unwrap().into_vec().unwrap();
    assert_eq!(streamed.len(), whole.len());
    let peak = whole.iter().fold(0f32, |m, x| m.max(x.abs()));
    assert!(peak <= 1.0, "this fixture run stays within full scale ({peak})");
    // libsndfile's rule, floor(x · 32768): the streamed file is exactly the whole wave in 16 bits.
    let mismatches =
        streamed.iter().zip(&whole).filter(|(s, w)| **s as f64 != ((**w as f64) * 32768.0).floor().clamp(-32768.0, 32767.0)).count();
    assert_eq!(mismatches, 0);
    let trimmed = tmp("trimmed.wav");
    let (ok, _, err) = f5(&[&base[..], &["--remove-silence", "-o", trimmed.to_str().unwrap()]].concat());
    assert!(ok, "{err}");
    // No pause of a second here, so nothing is removed; pydub's millisecond slicing may pad the
    // last millisecond with up to 2 ms of frames, as the reference's output would be.
    let n = hound::WavReader::open(&trimmed).unwrap().len() as usize;
    assert!(n >= streamed.len() && n <= streamed.len() + 48, "{n} vs {}", streamed.len());
}

#[test]
fn multi_voice_tags_use_store_voices() {
    let home = tmp("multi-home");
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_f5")).args(args).current_dir(fixtures()).env("F5_HOME", &home).output().unwrap();
        (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (ok, err) = run(&[
        "voices",
        "add",
        "quiet",
        "audio/silence_test.wav",
        "--transcript",
        "The birch canoe slid on the smooth planks. Glue the sheet to the dark blue background.",
    ]);
    assert!(ok, "{err}");
    let report = tmp("multi.json");
    let out = tmp("multi.wav");
    let rest = [
        "-t",
        "Hello there. [quiet] Hi from the other voice. [main] And back.",
        "--nfe",
        "2",
        "--seed",
        "4",
        "-o",
        out.to_str().unwrap(),
        "--report-json",
        report.to_str().unwrap(),
    ];
    let (ok, err) = run(&[&["synth", "-q"][..], &TINY[..], &REF[..], &rest[..]].concat());
    assert!(ok, "{err}");
    let r: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    let texts: Vec<&str> = r["chunks"].as_array().unwrap().iter().map(|c| c["text"].as_str().unwrap()).collect();
    assert_eq!(texts, ["Hello there.", "Hi from the other voice.", "And back."]);
}

/// The PNG at `path`: (width, height, RGB bytes).
fn read_png(path: &std::path::Path) -> (u32, u32, Vec<u8>) {
    let file = std::io::BufReader::new(std::fs::File::open(path).unwrap());
    let mut reader = png::Decoder::new(file).read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buf).unwrap();
    assert_eq!((info.color_type, info.bit_depth), (png::ColorType::Rgb, png::BitDepth::Eight));
    buf.truncate(info.buffer_size());
    (info.width, info.height, buf)
}

#[test]
fn spectrogram_draws_the_generated_mel() {
    let png_path = tmp("spec.png");
    let mel_path = tmp("spec-mel.npy");
    let out = tmp("spec.wav");
    let report = tmp("spec.json");
    let (ok, _, err) = f5(&[
        &["synth", "-q"][..],
        &TINY[..],
        &REF[..],
        &["-t", "Hello world, this is a tiny test.", "--nfe", "2", "--seed", "5", "-o", out.to_str().unwrap()][..],
        &["--save-mel", mel_path.to_str().unwrap(), "--spectrogram", png_path.to_str().unwrap(), "--report-json", report.to_str().unwrap()]
            [..],
    ]
    .concat());
    assert!(ok, "{err}");
    let bytes = std::fs::read(&mel_path).unwrap();
    let npy = npyz::NpyFile::new(&bytes[..]).unwrap();
    let shape = npy.shape().to_vec();
    let mel: Vec<f32> = npy.into_vec().unwrap();
    let r: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    let frames = r["chunks"][0]["generated_frames"].as_u64().unwrap() as usize;
    assert_eq!(shape, [frames as u64, 100]);
    let (width, height, rgb) = read_png(&png_path);
    assert_eq!((width as usize, height), (frames, 300), "one pixel per frame, three per mel bin");
    let row = |y: usize| &rgb[y * frames * 3..(y + 1) * frames * 3];
    // Each bin is three identical rows; neighbouring bins differ somewhere: not a flat image.
    for bin in 0..100 {
        assert!(row(bin * 3) == row(bin * 3 + 1) && row(bin * 3) == row(bin * 3 + 2), "bin rows {bin}");
    }
    let distinct: std::collections::HashSet<&[u8]> = (0..300).step_by(3).map(row).collect();
    assert!(distinct.len() > 50, "only {} distinct rows", distinct.len());
    // Low frequencies at the bottom, and a brighter colour for a larger value: in every column,
    // of two bins whose values differ by more than 0.25 (both above the floor, 8 below the
    // loudest), the larger has the brighter pixel at row (99 − bin)·3. The margin: rounding each
    // channel to 8 bits moves the luma below by at most 1000, while 0.25 of the 8-wide range
    // moves viridis's by more than 5000.
    let luma = |p: &[u8]| 299 * p[0] as i64 + 587 * p[1] as i64 + 114 * p[2] as i64;
    let loud = mel.iter().copied().fold(f32::MIN, f32::max);
    let floor = mel.iter().copied().fold(f32::MAX, f32::min).max(loud - 8.0);
    let mut compared = 0;
    for frame in 0..frames {
        let column = &mel[frame * 100..(frame + 1) * 100];
        let pixel = |bin: usize| luma(&row((99 - bin) * 3)[frame * 3..frame * 3 + 3]);
        for a in 0..100 {
            for b in 0..100 {
                if column[a] > column[b].max(floor) + 0.25 {
                    assert!(pixel(a) > pixel(b), "frame {frame}: bin {a} ({}) vs bin {b} ({})", column[a], column[b]);
                    compared += 1;
                }
            }
        }
    }
    assert!(compared > 20_000, "only {compared} pairs compared: a nearly flat mel proves little");
    // The loudest value of all is the top of the colour map.
    let top = (0..mel.len()).max_by(|&a, &b| mel[a].total_cmp(&mel[b])).unwrap();
    let (frame, bin) = (top / 100, top % 100);
    assert_eq!(&row((99 - bin) * 3)[frame * 3..frame * 3 + 3], &[253, 231, 37]);
}

#[test]
fn spectrogram_paths_that_cannot_work() {
    let base = [&["synth", "-q"][..], &TINY[..], &REF[..], &["-t", "Hello there.", "--nfe", "1", "--seed", "1"][..]].concat();
    // Known before synthesis: nothing is generated or written.
    let out = tmp("never-spec.wav");
    for (png, says) in [("/nonexistent-dir-f5/s.png", "is not a directory"), ("spec.jpg", "must end in .png")] {
        let (ok, _, err) = f5(&[&base[..], &["-o", out.to_str().unwrap(), "--spectrogram", png]].concat());
        assert!(!ok, "{png}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert!(err.starts_with("f5: error: ") && err.contains(says), "{err}");
        assert!(!out.exists(), "{png}: no audio when the spectrogram path is refused up front");
    }
    // Known only when writing (here the image's temporary file cannot be created; an unwritable
    // directory fails the same way): the audio is kept, the exit status says it failed.
    let png = tmp("blocked.png");
    std::fs::create_dir_all(png.with_extension("png.partial")).unwrap();
    let out = tmp("kept.wav");
    let (ok, _, err) = f5(&[&base[..], &["-o", out.to_str().unwrap(), "--spectrogram", png.to_str().unwrap()]].concat());
    assert!(!ok);
    assert!(err.contains("the audio was written to") && err.contains("blocked.png"), "{err}");
    assert!(!png.exists());
    assert!(hound::WavReader::open(&out).unwrap().len() > 0, "the audio is there");
}

#[test]
fn short_fix_splits_a_one_word_opening_and_lengthens_short_chunks() {
    let run = |extra: &[&str], name: &str| -> serde_json::Value {
        let report = tmp(name);
        let out = tmp("short-fix.wav");
        let text = "Juuri. Seuraavaksi ne tuovat kahvia.";
        let (ok, _, err) = f5(&[
            &["synth", "-q"][..],
            &TINY[..],
            &REF[..],
            &["-t", text, "--nfe", "1", "--seed", "2", "-o", out.to_str().unwrap(), "--report-json", report.to_str().unwrap()][..],
            extra,
        ]
        .concat());
        assert!(ok, "{err}");
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap()
    };
    let off = run(&[], "short-off.json");
    assert_eq!(off["options"]["short_fix"], false);
    assert_eq!(off["chunks"].as_array().unwrap().len(), 1);
    assert_eq!(off["chunks"][0]["short_fix_frames"], 0);
    let on = run(&["--short-fix"], "short-on.json");
    assert_eq!(on["options"]["short_fix"], true);
    let chunks = on["chunks"].as_array().unwrap();
    let texts: Vec<&str> = chunks.iter().map(|c| c["text"].as_str().unwrap()).collect();
    assert_eq!(texts, ["Juuri.", "Seuraavaksi ne tuovat kahvia."]);
    // 6 and 29 bytes: both at or under 30 bytes, both get the whole 1.1 s = 103 frames.
    assert_eq!(chunks[0]["short_fix_frames"], 103);
    assert_eq!(chunks[1]["short_fix_frames"], 103);
    let (_, help, _) = f5(&["synth", "--help"]);
    assert!(help.contains("--short-fix") && help.contains("departs from the reference"), "{help}");
    assert!(help.contains("--spectrogram"), "{help}");
}

/// The small Kokoro model in the release layout (named voices af_heart and am_mirror).
const KOKORO: [&str; 2] = ["-m", "kokoro/release-small"];

/// Kokoro through the same command: a named voice, a mix, word timings in the report; the
/// family is told from the files, and options of the other family are refused by name.
#[test]
fn synth_speaks_kokoro_with_named_and_mixed_voices() {
    let out = tmp("kokoro.wav");
    let report = tmp("kokoro.json");
    let run = |extra: &[&str]| f5(&[&["synth"][..], &KOKORO[..], &["-q", "-o", out.to_str().unwrap()][..], extra].concat());
    let (ok, _, err) =
        run(&["--voice", "af_heart", "-t", "Good morning.", "--seed", "5", "--report-json", report.to_str().unwrap(), "--word-timestamps"]);
    assert!(ok, "{err}");
    let samples = |p: &std::path::Path| hound::WavReader::open(p).unwrap().into_samples::<i16>().map(Result::unwrap).collect::<Vec<_>>();
    let named = samples(&out);
    assert!(!named.is_empty());
    let r: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert_eq!(r["family"], "kokoro");
    assert_eq!(r["seed"], 5);
    let words: Vec<&str> = r["words"].as_array().unwrap().iter().map(|w| w["word"].as_str().unwrap()).collect();
    assert_eq!(words, ["Good", "morning"]);
    // Same seed, same samples; a mix speaks differently.
    let (ok, _, err) = run(&["--voice", "af_heart", "-t", "Good morning.", "--seed", "5"]);
    assert!(ok, "{err}");
    assert_eq!(samples(&out), named);
    let (ok, _, err) = run(&["--voice", "af_heart(2)+am_mirror", "-t", "Good morning.", "--seed", "5"]);
    assert!(ok, "{err}");
    assert_ne!(samples(&out), named);
    // A voice file works on the command line.
    let (ok, _, err) = run(&["--voice", "kokoro/release-small/voices/am_mirror.bin", "-t", "Good morning.", "--seed", "5"]);
    assert!(ok, "{err}");

    for (extra, needle) in [
        (&["--voice", "af_heart", "-t", "Hi.", "--nfe", "8"][..], "nfe does not apply to Kokoro"),
        (&["--voice", "af_heart", "-t", "Hi.", "--vocoder", "models/vocos-tiny"][..], "--vocoder applies to F5"),
        (&["--voice", "af_nobody", "-t", "Hi."][..], "unknown voice \"af_nobody\""),
        (&["--voice", "af_heart", "-t", "Hi.", "--lang", "xx"][..], "unknown language \"xx\""),
        (&["--ref", "audio/ref_22050.wav", "--ref-text", "x", "-t", "Hi."][..], "does not clone"),
        (&["--voice", "af_heart", "-t", "Hi.", "--save-mel", "/tmp/never.npy"][..], "--save-mel"),
    ] {
        let (ok, _, err) = run(extra);
        assert!(!ok, "{extra:?} succeeded");
        assert_eq!(err.trim_end().lines().count(), 1, "{extra:?}: {err}");
        assert!(err.contains(needle), "{extra:?}: {err}");
    }
    // And the reverse: Kokoro's options on an F5 model.
    let (ok, _, err) =
        f5(&[&["synth"][..], &TINY[..], &REF[..], &["-t", "Hi.", "--lang", "en-us", "-q", "-o", out.to_str().unwrap()][..]].concat());
    assert!(!ok);
    assert!(err.contains("lang does not apply to F5-TTS"), "{err}");
}

/// With no --model, the default is Kokoro's hub release; offline and not cached, the error
/// says so in one line, naming the hub name.
#[test]
fn the_default_model_offline_and_uncached_is_one_clear_line() {
    let home = tmp("default-model-home");
    let out = Command::new(env!("CARGO_BIN_EXE_f5"))
        .args(["synth", "-t", "Hello.", "-q", "-o", tmp("never-default.wav").to_str().unwrap()])
        .current_dir(fixtures())
        .env("F5_HOME", &home)
        .env("HF_HOME", home.join("hf"))
        .env("HF_HUB_OFFLINE", "1")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains("hexgrad/Kokoro-82M") && err.contains("offline") && err.contains("--model kokoro-int8"), "{err}");
}

/// Every output format by extension (and `--format`, and `-o -`) decodes back to the same
/// audio: wav, pcm and flac to the same 16-bit samples, mp3 to the same length (gapless tag),
/// opus to an Ogg Opus stream of the same duration.
#[test]
fn synth_writes_every_format_and_streams_to_stdout() {
    let run = |out: &str, extra: &[&str]| {
        let args = [
            &["synth"][..],
            &TINY[..],
            &REF[..],
            &["-t", "Hello world, this is a tiny test.", "--nfe", "2", "--seed", "3", "-q", "-o", out][..],
            extra,
        ]
        .concat();
        f5(&args)
    };
    let decode = |p: &std::path::Path| {
        let d = f5_audio::decode::decode_file(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        assert_eq!(d.sample_rate, 24_000);
        d.channels.into_iter().next().unwrap()
    };
    let wav = tmp("formats.wav");
    let (ok, _, err) = run(wav.to_str().unwrap(), &[]);
    assert!(ok, "{err}");
    let reference = decode(&wav);
    let flac = tmp("formats.flac");
    assert!(run(flac.to_str().unwrap(), &[]).0);
    assert_eq!(decode(&flac), reference, "flac is lossless");
    let mp3 = tmp("formats.mp3");
    assert!(run(mp3.to_str().unwrap(), &[]).0);
    assert_eq!(decode(&mp3).len(), reference.len(), "a whole mp3 file keeps the exact length");
    let pcm = tmp("formats.raw");
    assert!(run(pcm.to_str().unwrap(), &["--format", "pcm"]).0);
    let raw: Vec<f32> = std::fs::read(&pcm).unwrap().chunks_exact(2).map(|b| i16::from_le_bytes([b[0], b[1]]) as f32 / 32768.0).collect();
    assert_eq!(raw, reference);
    let opus = tmp("formats.opus");
    assert!(run(opus.to_str().unwrap(), &[]).0);
    let bytes = std::fs::read(&opus).unwrap();
    assert!(bytes.starts_with(b"OggS") && bytes.windows(8).any(|w| w == b"OpusHead"));

    // Standard output: the stream, here as flac; the same samples.
    let out = Command::new(env!("CARGO_BIN_EXE_f5"))
        .args(
            [
                &["synth"][..],
                &TINY[..],
                &REF[..],
                &["-t", "Hello world, this is a tiny test.", "--nfe", "2", "--seed", "3", "-q", "-o", "-", "--format", "flac"][..],
            ]
            .concat(),
        )
        .current_dir(fixtures())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let piped = tmp("formats-piped.flac");
    std::fs::write(&piped, &out.stdout).unwrap();
    assert_eq!(decode(&piped), reference, "the stream on stdout is the same audio");

    let (ok, _, err) = run(tmp("formats.aac").to_str().unwrap(), &[]);
    assert!(!ok);
    assert!(err.contains(".mp3") && err.contains("--format"), "{err}");
    let (ok, _, err) = run(mp3.to_str().unwrap(), &["--float"]);
    assert!(!ok);
    assert!(err.contains("--float needs .wav"), "{err}");
}

/// `--play` plays the written file with the first player on PATH and says which; with none it
/// says what it looked for (the audio stays). Without -o and not on a terminal, the audio goes
/// to standard output.
#[test]
fn play_uses_the_first_player_found_and_no_output_name_pipes_the_audio() {
    use std::os::unix::fs::PermissionsExt;
    let bin = tmp("players");
    std::fs::create_dir_all(&bin).unwrap();
    let called = tmp("player-called.txt");
    let player = bin.join("aplay");
    std::fs::write(&player, format!("#!/bin/sh\necho \"$@\" > {}\n", called.display())).unwrap();
    std::fs::set_permissions(&player, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = tmp("played.wav");
    let synth = |path: &std::path::Path, extra: &[&str]| {
        let args = [&["synth"][..], &TINY[..], &REF[..], &["-t", "Hi there.", "--nfe", "2", "-q"][..], extra].concat();
        Command::new(env!("CARGO_BIN_EXE_f5")).args(args).current_dir(fixtures()).env("PATH", path).output().unwrap()
    };
    let r = synth(&bin, &["-o", out.to_str().unwrap(), "--play"]);
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(r.status.success(), "{err}");
    assert!(err.contains("with aplay"), "{err}");
    assert_eq!(std::fs::read_to_string(&called).unwrap().trim(), format!("-q {}", out.display()));
    let empty = tmp("no-players");
    std::fs::create_dir_all(&empty).unwrap();
    std::fs::remove_file(&out).unwrap();
    let r = synth(&empty, &["-o", out.to_str().unwrap(), "--play"]);
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(!r.status.success() && err.contains("found no audio player") && err.contains("aplay"), "{err}");
    assert!(out.exists(), "the audio is written even when it cannot be played");

    let r = synth(&empty, &[]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    assert!(r.stdout.starts_with(b"RIFF"), "no -o and a pipe: the wav on standard output");
}

/// SIGTERM (what an orchestrator sends) while a request is being answered: the server stops
/// taking connections, answers the accepted request in full, and exits 0.
#[test]
fn serve_drains_on_sigterm() {
    use std::io::{BufRead, Read, Write};
    let home = tmp("drain-home");
    let mut child = Command::new(env!("CARGO_BIN_EXE_f5"))
        .args([&["serve"][..], &TINY[..], &["--addr", "127.0.0.1:0", "--threads", "1", "--log-format", "json"][..]].concat())
        .current_dir(fixtures())
        .env("F5_HOME", &home)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    stderr.read_line(&mut line).unwrap();
    let addr = line
        .split("http://")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .unwrap_or_else(|| panic!("no address in {line:?}"))
        .to_string();
    let request = |path: &str, body: &str| {
        let mut s = std::net::TcpStream::connect(&addr).unwrap();
        s.set_read_timeout(Some(std::time::Duration::from_secs(120))).unwrap();
        let method = if body.is_empty() { "GET" } else { "POST" };
        write!(s, "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len()).unwrap();
        s
    };
    // A voice for the request, added to the store the server reads.
    add_birch(&home);
    let text = "The quick brown fox jumps over the lazy dog. ".repeat(6);
    let mut job = request("/tts", &format!(r#"{{"voice": "birch", "text": "{text}", "nfe": 4, "seed": 1}}"#));
    // Wait until the server is answering it: two requests in flight, this scrape and the job.
    let in_flight = || {
        let mut s = request("/metrics", "");
        let mut text = String::new();
        let _ = s.read_to_string(&mut text);
        text.lines().find_map(|l| l.strip_prefix("f5_requests_in_flight ")).and_then(|v| v.trim().parse::<f64>().ok()).unwrap_or(0.0)
    };
    let mut waited = 0;
    while in_flight() < 2.0 {
        waited += 1;
        assert!(waited < 600, "the job never started");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap().success());
    let mut answer = Vec::new();
    job.read_to_end(&mut answer).unwrap();
    let head = String::from_utf8_lossy(&answer[..answer.len().min(200)]).to_string();
    assert!(head.starts_with("HTTP/1.1 200"), "the accepted request is answered: {head}");
    assert!(answer.windows(4).any(|w| w == b"RIFF"), "with its whole wav");
    let status = child.wait().unwrap();
    let mut rest = String::new();
    let _ = stderr.read_to_string(&mut rest);
    assert!(status.success(), "exit {status}: {rest}");
    assert!(rest.contains("stopping") && rest.contains("\"endpoint\":\"/tts\""), "a JSON line per request: {rest}");
}
