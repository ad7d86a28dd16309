//! What the `f5` binary reads is bounded: devices, FIFOs and oversized inputs are refused with a
//! clear line instead of reading forever or blocking, and `--threads` is clamped.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures")
}

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("f5-cli-limits-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// Runs f5; a run still going after `limit` is killed and reported as hung.
fn f5_within(args: &[&str], limit: Duration) -> (bool, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_f5"))
        .args(args)
        .current_dir(fixtures())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run f5");
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            let mut err = String::new();
            if let Some(mut e) = child.stderr.take() {
                let _ = std::io::Read::read_to_string(&mut e, &mut err);
            }
            return (status.success(), err);
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("f5 {args:?} still ran after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

const TINY: [&str; 6] = ["-m", "models/f5-tiny-v1", "--vocab", "vocab.txt", "--vocoder", "models/vocos-tiny"];
const TEXT: [&str; 2] = ["-t", "Hello there."];
const LIMIT: Duration = Duration::from_secs(60);

fn fifo(name: &str) -> PathBuf {
    let p = tmp(name);
    let _ = std::fs::remove_file(&p);
    let ok = Command::new("mkfifo").arg(&p).status().expect("mkfifo").success();
    assert!(ok, "mkfifo {}", p.display());
    p
}

#[test]
fn devices_and_fifos_are_refused_not_read() {
    let out = tmp("out.wav");
    let out = out.to_str().unwrap();
    let ref_fifo = fifo("ref.wav");
    let model_fifo = fifo("model.safetensors");
    let cases: Vec<Vec<&str>> = vec![
        [&["synth"][..], &TINY, &["--ref", "/dev/zero", "--ref-text", "Hi.", "-o", out], &TEXT].concat(),
        [&["synth"][..], &TINY, &["--ref", "audio/ref_22050.wav", "--ref-text", "Hi.", "-f", "/dev/zero", "-o", out]].concat(),
        [&["synth"][..], &TINY, &["--ref", ref_fifo.to_str().unwrap(), "--ref-text", "Hi.", "-o", out], &TEXT].concat(),
        [
            &["synth", "-m", model_fifo.to_str().unwrap(), "--vocab", "vocab.txt", "--vocoder", "models/vocos-tiny"][..],
            &["--ref", "audio/ref_22050.wav", "--ref-text", "Hi.", "-o", out],
            &TEXT,
        ]
        .concat(),
        vec!["models", "inspect", model_fifo.to_str().unwrap()],
        vec!["chunks", "/dev/zero"],
    ];
    for args in cases {
        let (ok, err) = f5_within(&args, LIMIT);
        assert!(!ok, "{args:?} succeeded");
        assert!(err.contains("not a regular file"), "{args:?}: {err}");
        assert_eq!(err.lines().filter(|l| l.starts_with("f5: error")).count(), 1, "one error line: {err}");
    }
}

#[test]
fn an_oversized_text_file_is_refused() {
    let big = tmp("big.txt");
    std::fs::write(&big, "word ".repeat(1 << 20)).unwrap();
    let (ok, err) = f5_within(&["chunks", big.to_str().unwrap()], LIMIT);
    assert!(!ok);
    assert!(err.contains("over 4194304 bytes"), "{err}");
    let small = tmp("small.txt");
    std::fs::write(&small, "One. Two.").unwrap();
    let (ok, err) = f5_within(&["chunks", small.to_str().unwrap()], LIMIT);
    assert!(ok, "{err}");
}

#[test]
fn threads_are_clamped_to_the_cores() {
    let out = tmp("threads.wav");
    let args = [
        &["synth"][..],
        &TINY,
        &["--ref", "audio/ref_22050.wav", "--ref-text", "The birch canoe slid on the smooth planks."],
        &["-t", "Hi.", "--nfe", "2", "--seed", "1", "-q", "--threads", "100000", "-o", out.to_str().unwrap()],
    ]
    .concat();
    let (ok, err) = f5_within(&args, LIMIT);
    assert!(ok, "{err}");
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    assert!(err.contains(&format!("--threads 100000 is more than the {cores} cores here; using {cores}")), "{err}");
}
