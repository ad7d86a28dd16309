//! `f5 batch` end to end on the small Kokoro fixture: shards cover a job file exactly once and
//! make the same bytes as one unsharded run; a killed run resumes without redoing finished
//! lines; bad job files fail before anything loads, naming the line.

mod common;

use common::{add_birch, fixtures};
use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The small Kokoro model in the release layout (named voices af_heart and am_mirror).
const KOKORO: [&str; 2] = ["-m", "kokoro/release-small"];

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("f5-batch-test-{}", std::process::id())).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn batch_command(jobs: &Path, out: &Path, extra: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_f5"));
    c.arg("batch").arg(jobs).arg("--out").arg(out).args(KOKORO).args(["--threads", "1"]).args(extra).current_dir(fixtures());
    c
}

fn batch(jobs: &Path, out: &Path, extra: &[&str]) -> Output {
    batch_command(jobs, out, extra).output().expect("run f5 batch")
}

/// The last JSON line on stderr: the run's summary.
fn summary(out: &Output) -> serde_json::Value {
    let err = String::from_utf8_lossy(&out.stderr);
    let line = err.lines().rev().find(|l| l.contains("\"event\":\"finished\"")).unwrap_or_else(|| panic!("no summary in {err}"));
    serde_json::from_str(line).unwrap()
}

/// A job file of `n` short lines: voices alternate between a name and a mix, most lines set a
/// seed, every fifth leaves it to the id, one sets a speed.
fn write_jobs(dir: &Path, n: usize) -> PathBuf {
    let mut text = String::new();
    for i in 0..n {
        let voice = if i % 2 == 0 { "af_heart" } else { "af_heart(2)+am_mirror" };
        let options = match i {
            7 => r#"{"seed": 7, "speed": 1.3}"#.to_string(),
            i if i % 5 == 0 => "{}".to_string(),
            i => format!(r#"{{"seed": {}}}"#, 100 + i),
        };
        text.push_str(&format!(r#"{{"id": "line-{i:02}", "text": "Word {i}.", "voice": "{voice}", "options": {options}}}"#));
        text.push('\n');
        if i == 10 {
            text.push('\n'); // a blank line counts for the shard split and is skipped
        }
    }
    let path = dir.join("jobs.jsonl");
    std::fs::write(&path, text).unwrap();
    path
}

/// Every file in `dir` with its bytes.
fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .map(|e| (e.file_name().to_string_lossy().into_owned(), std::fs::read(e.path()).unwrap()))
        .collect()
}

/// The reports without their timings (the only fields that differ between runs).
fn report_without_timing(bytes: &[u8]) -> serde_json::Value {
    let mut v: serde_json::Value = serde_json::from_slice(bytes).unwrap();
    let map = v.as_object_mut().unwrap();
    map.remove("synth_seconds");
    map.remove("shard");
    for chunk in map.get_mut("chunks").and_then(|c| c.as_array_mut()).into_iter().flatten() {
        chunk.as_object_mut().unwrap().remove("synth_seconds");
    }
    v
}

#[test]
fn three_shards_in_parallel_make_exactly_the_files_of_one_run() {
    let dir = tmp("shards");
    let jobs = write_jobs(&dir, 40);
    let whole = dir.join("whole");
    let sharded = dir.join("sharded");
    let run = batch(&jobs, &whole, &[]);
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    assert_eq!(summary(&run)["done"], 40);

    // All three at once, as three workers would run them.
    let children: Vec<_> = (0..3)
        .map(|i| {
            batch_command(&jobs, &sharded, &["--shard", &format!("{i}/3")])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let children: Vec<Output> = children.into_iter().map(|c| c.wait_with_output().unwrap()).collect();
    let mut done_per_shard = Vec::new();
    for (i, out) in children.iter().enumerate() {
        assert!(out.status.success(), "shard {i}: {}", String::from_utf8_lossy(&out.stderr));
        let s = summary(out);
        assert_eq!((s["skipped"].as_u64(), s["failed"].as_u64()), (Some(0), Some(0)), "shard {i}: {s}");
        done_per_shard.push(s["done"].as_u64().unwrap());
    }
    // 41 physical lines, line L is shard (L-1) mod 3: 14, 14 and 13, less the blank line 12 of shard 2.
    assert_eq!(done_per_shard.iter().sum::<u64>(), 40);
    assert_eq!(done_per_shard, [14, 14, 12]);

    let (a, b) = (files(&whole), files(&sharded));
    assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>(), "the same files, nothing else (no temporaries)");
    assert_eq!(a.len(), 80);
    for (name, bytes) in &a {
        if name.ends_with(".wav") {
            assert!(bytes.len() > 44, "{name} has audio");
            assert!(bytes == &b[name], "{name}: sharded audio differs from the unsharded run");
        } else {
            assert_eq!(report_without_timing(bytes), report_without_timing(&b[name]), "{name}");
        }
    }
    // The seed a line did not set comes from its id, and is what the report says.
    let r = report_without_timing(&a["line-05.json"]);
    assert!(r["seed"].as_u64().is_some_and(|s| s > 0) && r["options"].get("seed").is_none(), "{r}");
    assert_eq!(report_without_timing(&a["line-07.json"])["options"], serde_json::json!({"seed": 7, "speed": 1.3}));
    // Seeds matter: two lines of the same text and voice with different seeds differ; if the
    // shards ignored the seed, the comparison above could not tell.
    let twins = dir.join("twins.jsonl");
    std::fs::write(
        &twins,
        "{\"id\": \"a\", \"text\": \"Word 1.\", \"options\": {\"seed\": 1}}\n{\"id\": \"b\", \"text\": \"Word 1.\", \"options\": {\"seed\": 2}}\n",
    )
    .unwrap();
    let out = dir.join("twins");
    assert!(batch(&twins, &out, &[]).status.success());
    assert_ne!(std::fs::read(out.join("a.wav")).unwrap(), std::fs::read(out.join("b.wav")).unwrap());
}

/// What a kill leaves (finished pairs, a half-written temporary, a wav whose report never got
/// renamed) is resumed: finished lines are not touched (same inode, same mtime), the rest is
/// made, and the summary counts what was skipped.
#[test]
fn a_rerun_after_a_kill_completes_without_redoing_finished_lines() {
    let dir = tmp("resume");
    let jobs = write_jobs(&dir, 12);
    let reference = dir.join("reference");
    assert!(batch(&jobs, &reference, &["-q"]).status.success());

    let out = dir.join("out");
    std::fs::create_dir_all(&out).unwrap();
    let finished = ["line-00", "line-03", "line-04", "line-09"];
    for id in finished {
        for ext in ["wav", "json"] {
            std::fs::copy(reference.join(format!("{id}.{ext}")), out.join(format!("{id}.{ext}"))).unwrap();
        }
    }
    // Killed while writing line-05's wav, and between line-06's two renames.
    std::fs::write(out.join(".line-05.wav.partial"), b"RIFF half").unwrap();
    std::fs::write(out.join("line-06.wav"), b"RIFF stale").unwrap();
    let stamp = |id: &str| {
        let m = std::fs::metadata(out.join(format!("{id}.wav"))).unwrap();
        (m.ino(), m.mtime(), m.mtime_nsec())
    };
    let before: Vec<_> = finished.iter().map(|id| stamp(id)).collect();
    std::thread::sleep(std::time::Duration::from_millis(20));

    let run = batch(&jobs, &out, &[]);
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let s = summary(&run);
    assert_eq!((s["skipped"].as_u64(), s["done"].as_u64()), (Some(4), Some(8)), "{s}");
    let after: Vec<_> = finished.iter().map(|id| stamp(id)).collect();
    assert_eq!(before, after, "finished lines are not rewritten");
    // Everything else is now exactly the reference run's.
    let (want, got) = (files(&reference), files(&out));
    assert_eq!(want.keys().collect::<Vec<_>>(), got.keys().collect::<Vec<_>>(), "no temporary left behind");
    for (name, bytes) in want.iter().filter(|(n, _)| n.ends_with(".wav")) {
        assert!(bytes == &got[name], "{name}");
    }
    // Progress on a pipe is JSON lines: a start line, one per utterance made.
    let err = String::from_utf8_lossy(&run.stderr);
    let events: Vec<serde_json::Value> = err.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    assert_eq!(events.iter().filter(|e| e["event"] == "done").count(), 8, "{err}");
    assert_eq!(events[0]["event"], "start");

    // A real kill mid-run: the rerun skips what the killed run had finished.
    let killed = dir.join("killed");
    let mut child = batch_command(&jobs, &killed, &["-q"]).stderr(std::process::Stdio::null()).spawn().unwrap();
    let reports = || {
        std::fs::read_dir(&killed)
            .map(|d| d.filter(|e| e.as_ref().unwrap().path().extension().is_some_and(|x| x == "json")).count())
            .unwrap_or(0)
    };
    let mut waited = 0;
    while reports() < 2 && waited < 1200 {
        std::thread::sleep(std::time::Duration::from_millis(50));
        waited += 1;
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let had = reports();
    assert!(had >= 2, "the run never finished a line");
    let run = batch(&jobs, &killed, &[]);
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let s = summary(&run);
    assert_eq!((s["skipped"].as_u64(), s["done"].as_u64()), (Some(had as u64), Some(12 - had as u64)), "{s}");
    assert_eq!(files(&killed).len(), 24);
}

#[test]
fn bad_job_files_fail_before_loading_naming_the_line() {
    let dir = tmp("bad");
    let out = dir.join("out");
    for (content, needle) in [
        ("{\"id\": \"a\", \"text\": \"x\"}\n{\"id\": \"../b\", \"text\": \"x\"}\n", "jobs.jsonl:2: invalid id \"../b\""),
        ("{\"id\": \"a\", \"text\": \"x\"}\n\n{\"id\": \"a\", \"text\": \"y\"}\n", "jobs.jsonl:3: id \"a\" is already used on line 1"),
        ("{\"id\": \"a\", \"text\": \"x\", \"options\": {\"sped\": 2}}\n", "jobs.jsonl:1: not a job line: unknown field `sped`"),
        ("{\"id\": \"a\"}\n", "jobs.jsonl:1: not a job line: missing field `text`"),
        ("not json\n", "jobs.jsonl:1: not a job line"),
        ("{\"id\": \"a\", \"text\": \"  \"}\n", "jobs.jsonl:1: the text of \"a\" is empty"),
        ("{\"id\": \"a\", \"text\": \"x\", \"voice\": \"af_nobody\"}\n", "jobs.jsonl:1: voice \"af_nobody\""),
        ("\n\n", "no job lines"),
    ] {
        let jobs = dir.join("jobs.jsonl");
        std::fs::write(&jobs, content).unwrap();
        let run = batch(&jobs, &out, &[]);
        let err = String::from_utf8_lossy(&run.stderr);
        assert!(!run.status.success(), "{content:?} succeeded");
        assert!(err.contains(needle), "{content:?}: {err}");
        assert!(!out.exists() || std::fs::read_dir(&out).unwrap().next().is_none(), "{content:?} wrote something");
    }
    let jobs = dir.join("jobs.jsonl");
    std::fs::write(&jobs, "{\"id\": \"a\", \"text\": \"x\"}\n").unwrap();
    for shard in ["3/3", "1", "x/2"] {
        let run = batch(&jobs, &out, &["--shard", shard]);
        assert!(!run.status.success() && String::from_utf8_lossy(&run.stderr).contains("I/N"), "{shard}");
    }
}

/// An F5 model through the same command: lines with a recording and its transcript, lines
/// with a stored voice, and the default voice from --voice; a line with no voice at all fails
/// alone, naming itself, and the rest are written.
#[test]
fn f5_lines_clone_from_a_recording_or_the_store() {
    let dir = tmp("f5");
    let home = dir.join("home");
    add_birch(&home);
    let jobs = dir.join("jobs.jsonl");
    let line = |id: &str, voice: &str| format!(r#"{{"id": "{id}", "text": "Hello there.", {voice}"options": {{"seed": 4, "nfe": 4}}}}"#);
    std::fs::write(
        &jobs,
        [
            line("by-ref", r#""ref": "audio/ref_22050.wav", "ref_text": "The birch canoe slid on the smooth planks.", "#),
            line("by-store", r#""voice": "birch", "#),
            line("by-default", ""),
        ]
        .join("\n"),
    )
    .unwrap();
    let tiny = ["-m", "models/f5-tiny-v1", "--vocab", "vocab.txt", "--vocoder", "models/vocos-tiny", "-q"];
    let out = dir.join("out");
    let run = |extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_f5"))
            .arg("batch")
            .arg(&jobs)
            .arg("--out")
            .arg(&out)
            .args(tiny)
            .args(extra)
            .current_dir(fixtures())
            .env("F5_HOME", &home)
            .output()
            .unwrap()
    };
    // Without --voice the third line has no voice: it fails, the others are written.
    let first = run(&[]);
    let err = String::from_utf8_lossy(&first.stderr);
    assert!(!first.status.success());
    assert!(err.contains("1 of 3 utterances failed: by-default (line 3)"), "{err}");
    assert!(out.join("by-ref.wav").is_file() && out.join("by-store.wav").is_file() && !out.join("by-default.wav").exists());
    // The same recording and transcript, by path or from the store, and the same seed: the
    // same audio.
    assert_eq!(std::fs::read(out.join("by-ref.wav")).unwrap(), std::fs::read(out.join("by-store.wav")).unwrap());
    // The rerun with a default voice does only the line that failed.
    let second = run(&["--voice", "birch"]);
    assert!(second.status.success(), "{}", String::from_utf8_lossy(&second.stderr));
    let s = summary(&second);
    assert_eq!((s["skipped"].as_u64(), s["done"].as_u64()), (Some(2), Some(1)), "{s}");
    assert_eq!(std::fs::read(out.join("by-default.wav")).unwrap(), std::fs::read(out.join("by-store.wav")).unwrap());
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join("by-ref.json")).unwrap()).unwrap();
    assert_eq!((report["family"].as_str(), report["seed"].as_u64()), (Some("f5"), Some(4)));
}
