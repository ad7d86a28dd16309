//! `f5 serve --drain-timeout`: after SIGTERM, accepted requests get that long; what is not done
//! by then (the running job and the queued one) is answered a complete 503, never a dropped
//! connection, and the server exits 0 soon after. A job that finishes within the time is
//! answered in full.

mod common;

use common::{add_birch, fixtures};
use std::io::{BufRead, Read, Write};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The tiny random-weight F5 model, its vocabulary and vocoder.
const TINY: [&str; 6] = ["-m", "models/f5-tiny-v1", "--vocab", "vocab.txt", "--vocoder", "models/vocos-tiny"];

struct Served {
    child: Child,
    stderr: std::io::BufReader<std::process::ChildStderr>,
    addr: String,
}

/// A failed assertion must not leave the server running (holding the test's output open).
impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `f5 serve` on a free port with a voice `birch` in a private store.
fn serve(name: &str, extra: &[&str]) -> Served {
    let home = std::env::temp_dir().join(format!("f5-drain-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&home);
    add_birch(&home);
    let mut child = Command::new(env!("CARGO_BIN_EXE_f5"))
        .args([&["serve"][..], &TINY[..], &["--addr", "127.0.0.1:0", "--threads", "1", "--log-format", "off"][..], extra].concat())
        .current_dir(fixtures())
        .env("F5_HOME", &home)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    stderr.read_line(&mut line).unwrap();
    let addr = line.split("http://").nth(1).and_then(|r| r.split_whitespace().next()).unwrap_or_else(|| panic!("no address in {line:?}"));
    Served { child, stderr, addr: addr.to_string() }
}

fn request(addr: &str, path: &str, body: &str) -> std::net::TcpStream {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    let method = if body.is_empty() { "GET" } else { "POST" };
    write!(s, "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len()).unwrap();
    s
}

fn metric(addr: &str, name: &str) -> f64 {
    let mut text = String::new();
    let _ = request(addr, "/metrics", "").read_to_string(&mut text);
    text.lines().find_map(|l| l.strip_prefix(name).and_then(|v| v.strip_prefix(' '))).and_then(|v| v.trim().parse().ok()).unwrap_or(0.0)
}

/// Status, headers and body of a whole answer; the body's length is checked against
/// Content-Length, so a connection dropped half way fails here.
fn read_answer(mut s: std::net::TcpStream) -> (u16, String, Vec<u8>) {
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap_or_else(|| panic!("no complete head in {raw:?}"));
    let head = String::from_utf8_lossy(&raw[..split]).to_string();
    let body = raw[split + 4..].to_vec();
    let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let length: Option<usize> = head
        .lines()
        .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().to_string()))
        .and_then(|v| v.parse().ok());
    assert_eq!(length, Some(body.len()), "a whole answer: {head}");
    (status, head, body)
}

fn sigterm(child: &Child) {
    assert!(Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap().success());
}

#[test]
fn drain_timeout_answers_what_is_cut_off_with_a_whole_503_and_exits_0() {
    let mut s = serve("cut", &["--drain-timeout", "1", "--queue", "16"]);
    // Twelve jobs queued on the one model thread: together far more work than the drain time
    // (each takes about half a second here), so at least the last ones are cut off.
    let text = "The quick brown fox jumps over the lazy dog. ".repeat(40);
    let jobs: Vec<_> = (0..12)
        .map(|seed| request(&s.addr, "/tts", &format!(r#"{{"voice": "birch", "text": "{text}", "nfe": 32, "seed": {seed}}}"#)))
        .collect();
    let started = Instant::now();
    while metric(&s.addr, "f5_queue_depth") < 8.0 {
        assert!(started.elapsed() < Duration::from_secs(60), "the jobs never queued");
        std::thread::sleep(Duration::from_millis(20));
    }
    let signalled = Instant::now();
    sigterm(&s.child);
    let mut statuses = Vec::new();
    for (i, answer) in jobs.into_iter().enumerate() {
        let (status, _, body) = read_answer(answer);
        match status {
            200 => assert!(body.starts_with(b"RIFF"), "job {i}: a whole wav"),
            503 => {
                let text = String::from_utf8_lossy(&body);
                assert!(text.contains("drain time ran out"), "job {i}: {text}");
            }
            other => panic!("job {i}: status {other}: {}", String::from_utf8_lossy(&body)),
        }
        statuses.push(status);
    }
    assert_eq!(statuses.last(), Some(&503), "the last queued job is cut off: {statuses:?}");
    // Answers come in queue order: once one is cut off, every later one is too.
    let first_cut = statuses.iter().position(|&s| s == 503).unwrap_or(statuses.len());
    assert!(statuses[first_cut..].iter().all(|&s| s == 503), "{statuses:?}");
    let status = s.child.wait().unwrap();
    let took = signalled.elapsed();
    let mut rest = String::new();
    let _ = s.stderr.read_to_string(&mut rest);
    assert!(status.success(), "exit {status}: {rest}");
    assert!(rest.contains("drain time of 1 s ran out"), "{rest}");
    // 1 s of drain, at most 2 s for the 503s, and room for a loaded machine; the queued work
    // alone takes far longer than this.
    assert!(took < Duration::from_secs(8), "exited {took:?} after the signal ({statuses:?})");
    eprintln!("answers after the signal: {statuses:?}, exit after {took:?}");
}

#[test]
fn jobs_done_within_the_drain_timeout_are_answered_in_full() {
    let mut s = serve("whole", &["--drain-timeout", "120"]);
    let job = request(&s.addr, "/tts", r#"{"voice": "birch", "text": "Hello there, this is a short line.", "nfe": 4, "seed": 3}"#);
    let started = Instant::now();
    while metric(&s.addr, "f5_requests_in_flight") < 2.0 {
        assert!(started.elapsed() < Duration::from_secs(60), "the job never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    sigterm(&s.child);
    let (status, _, body) = read_answer(job);
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    assert!(body.starts_with(b"RIFF"));
    let status = s.child.wait().unwrap();
    let mut rest = String::new();
    let _ = s.stderr.read_to_string(&mut rest);
    assert!(status.success(), "exit {status}: {rest}");
    assert!(!rest.contains("ran out"), "{rest}");
}
