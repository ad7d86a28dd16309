//! `cargo xtask bench serve`: load on a real `f5 serve` process with the tiny fixture model.
//!
//! Two phases against one server: a steady phase of N clients, each posting one request after
//! another (alternately `POST /tts` and `POST /v1/audio/speech`, short texts), for a count or a
//! duration; then a burst of M requests sent at the same instant, more than the queue holds, so
//! the server must shed load with `503` and `Retry-After`. For each phase: throughput (answers
//! and audio seconds per second), latency percentiles of the answered requests, the 503 rate
//! (and whether every 503 carried `Retry-After`), other errors, and the server's resident
//! memory. The server runs as its own process so that its RSS is its alone.
//!
//! The clients speak plain HTTP/1.1 over `TcpStream` (one connection per request) rather than
//! through an HTTP crate: xtask stays free of an async runtime, and what is timed is the server.
//! The tiny model makes little audio per second of compute; the figures measure the daemon's
//! queueing and overhead under load, not the speed of a real model.

use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::bench::write_section;
use crate::machine;

const MODEL: &str = "fixtures/models/f5-tiny-v1/model.safetensors";
const VOCAB: &str = "fixtures/vocab.txt";
const VOCODER: &str = "fixtures/models/vocos-tiny/pytorch_model.bin";
const REF_WAV: &str = "fixtures/audio/ref_22050.wav";
const REF_TEXT: &str = "The birch canoe slid on the smooth planks.";
const VOICE: &str = "bench";
/// Short texts, one to two seconds of speech each; clients cycle through them.
const TEXTS: [&str; 4] =
    ["Hello there.", "The quick brown fox jumps over the lazy dog.", "Please call me back tomorrow.", "It is a sunny day in the park."];

struct Opts {
    clients: usize,
    /// Requests per client in the steady phase; `None` with `seconds`.
    requests: Option<usize>,
    seconds: Option<f64>,
    burst: usize,
    queue: usize,
    threads: usize,
    write: bool,
}

pub fn run(root: &Path, args: &[String]) -> Result<()> {
    let mut o = Opts { clients: 16, requests: Some(10), seconds: None, burst: 40, queue: 16, threads: 1, write: true };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = |what: &str| it.next().with_context(|| format!("{what} needs a value"));
        match a.as_str() {
            "--clients" => o.clients = value("--clients")?.parse().context("--clients")?,
            "--requests" => (o.requests, o.seconds) = (Some(value("--requests")?.parse().context("--requests")?), None),
            "--seconds" => (o.seconds, o.requests) = (Some(value("--seconds")?.parse().context("--seconds")?), None),
            "--burst" => o.burst = value("--burst")?.parse().context("--burst")?,
            "--queue" => o.queue = value("--queue")?.parse().context("--queue")?,
            "--threads" => o.threads = value("--threads")?.parse().context("--threads")?,
            "--no-write" => o.write = false,
            other => bail!(
                "bench serve: unknown option {other:?}\nusage: cargo xtask bench serve [--clients 16] [--requests 10 | --seconds S] [--burst 40] [--queue 16] [--threads 1] [--no-write]"
            ),
        }
    }
    if o.clients == 0 {
        bail!("--clients must be at least 1");
    }

    eprintln!("building the f5 binary (release)…");
    let status = Command::new(env!("CARGO")).current_dir(root).args(["build", "--release", "-q", "-p", "f5-cli"]).status()?;
    if !status.success() {
        bail!("cargo build --release -p f5-cli failed");
    }
    let f5 = root.join("target/release/f5");
    let home = root.join("target/bench-serve");
    let _ = std::fs::remove_dir_all(&home);
    std::fs::create_dir_all(&home)?;
    let added = Command::new(&f5)
        .current_dir(root)
        .env("F5_HOME", &home)
        .args(["voices", "add", VOICE, REF_WAV, "--transcript", REF_TEXT])
        .output()
        .context("f5 voices add")?;
    if !added.status.success() {
        bail!("f5 voices add failed: {}", String::from_utf8_lossy(&added.stderr));
    }

    let busy = machine::busy_fraction();
    let mut server = Server::start(root, &f5, &home.join("voices"), &o)?;
    let result = measure(&server, &o);
    let busy_after = machine::busy_fraction();
    server.stop();
    let (warm_rss, steady, burst, idle_rss) = result?;
    let peak_rss = server.peak_rss_mib;

    let mut md = String::new();
    writeln!(md, "Machine: {}.", machine::describe())?;
    writeln!(
        md,
        "Shared by other work during the run ({:.0}% of all CPUs busy just before, {:.0}% just after): latency and throughput here are upper and lower bounds of what a quiet machine gives.",
        busy * 100.0,
        busy_after * 100.0
    )?;
    let phase = match (o.requests, o.seconds) {
        (Some(n), _) => format!("--requests {n}"),
        (None, Some(s)) => format!("--seconds {s}"),
        (None, None) => String::new(),
    };
    writeln!(
        md,
        "Command: `cargo xtask bench serve --clients {} {phase} --burst {} --queue {} --threads {}`: `target/release/f5 serve` on the tiny fixture model (`{MODEL}`, `{VOCODER}`), `--queue {} --threads {}`, one voice (`{REF_WAV}`), default synthesis settings (32 steps). Steady phase: {} clients each posting one request after another, alternately `POST /tts` and `POST /v1/audio/speech` (wav), texts of 12–44 characters. Burst: {} requests sent at once, more than the queue holds. One connection per request.",
        o.clients, o.burst, o.queue, o.threads, o.queue, o.threads, o.clients, o.burst
    )?;
    writeln!(md)?;
    writeln!(md, "| phase | requests | 200 | 503 (with Retry-After) | other errors | answers/s | audio s/s | p50 | p95 | p99 | max |")?;
    writeln!(md, "|---|---|---|---|---|---|---|---|---|---|---|")?;
    for (name, p) in [("steady", &steady), ("burst", &burst)] {
        writeln!(md, "{}", p.row(name))?;
    }
    writeln!(md)?;
    writeln!(
        md,
        "Latency: from connecting to the last byte of the answer, of the requests answered 200. Server RSS: {warm_rss:.0} MiB after one warm-up request, {idle_rss:.0} MiB idle after the burst, {peak_rss:.0} MiB peak (the kernel's high-water mark for the process)."
    )?;
    if steady.errors + burst.errors > 0 {
        writeln!(md)?;
        writeln!(md, "Errors other than 503: {:?}", steady.error_samples.iter().chain(&burst.error_samples).collect::<Vec<_>>())?;
    }
    println!("{md}");
    if o.write {
        write_section(&root.join("docs/benchmarks.md"), "serve", &md)?;
    }
    if steady.errors + burst.errors > 0 {
        bail!("{} requests failed with something other than 503", steady.errors + burst.errors);
    }
    if steady.shed + burst.shed != steady.shed_with_retry + burst.shed_with_retry {
        bail!("a 503 came without Retry-After");
    }
    Ok(())
}

/// RSS after warm-up, the two phases, RSS idle afterwards (MiB).
fn measure(server: &Server, o: &Opts) -> Result<(f64, Phase, Phase, f64)> {
    let warm = one_request(server.addr, 0, 0);
    if warm.status != 200 {
        bail!("the warm-up request got {} ({})", warm.status, warm.error);
    }
    let warm_rss = server.rss_mib("VmRSS");

    eprintln!("steady phase: {} clients…", o.clients);
    let deadline = o.seconds.map(Duration::from_secs_f64);
    let started = Instant::now();
    let results = Arc::new(Mutex::new(Vec::new()));
    let handles: Vec<_> = (0..o.clients)
        .map(|client| {
            let (addr, results, requests) = (server.addr, Arc::clone(&results), o.requests);
            std::thread::spawn(move || {
                let mut i = 0;
                loop {
                    let more = match (requests, deadline) {
                        (Some(n), _) => i < n,
                        (None, Some(d)) => started.elapsed() < d,
                        (None, None) => false,
                    };
                    if !more {
                        break;
                    }
                    let r = one_request(addr, client, i);
                    results.lock().map(|mut v| v.push(r)).ok();
                    i += 1;
                }
            })
        })
        .collect();
    for h in handles {
        let _ = h.join();
    }
    let steady = Phase::from(std::mem::take(&mut *results.lock().map_err(|_| anyhow::anyhow!("a client panicked"))?), started.elapsed());

    eprintln!("burst: {} requests at once…", o.burst);
    let gate = Arc::new(Barrier::new(o.burst.max(1)));
    let started = Instant::now();
    let handles: Vec<_> = (0..o.burst)
        .map(|i| {
            let (addr, gate) = (server.addr, Arc::clone(&gate));
            std::thread::spawn(move || {
                gate.wait();
                one_request(addr, i, i)
            })
        })
        .collect();
    let burst_results: Vec<Answer> = handles.into_iter().filter_map(|h| h.join().ok()).collect();
    let burst = Phase::from(burst_results, started.elapsed());
    // Let the queue drain and the allocator settle before the idle figure.
    std::thread::sleep(Duration::from_secs(2));
    let idle_rss = server.rss_mib("VmRSS");
    Ok((warm_rss, steady, burst, idle_rss))
}

/// One request's outcome.
struct Answer {
    /// 0 when no HTTP answer came (connection refused or reset, timeout).
    status: u16,
    retry_after: bool,
    latency: Duration,
    audio_seconds: f64,
    error: String,
}

/// Request `i` of `client`: alternately the native and the OpenAI-style endpoint.
fn one_request(addr: SocketAddr, client: usize, i: usize) -> Answer {
    let text = TEXTS[(client + i) % TEXTS.len()];
    let seed = (client * 1000 + i) as u64;
    let (path, body) = if (client + i).is_multiple_of(2) {
        ("/tts", serde_json::json!({ "voice": VOICE, "text": text, "seed": seed }))
    } else {
        ("/v1/audio/speech", serde_json::json!({ "model": "tts-1", "voice": VOICE, "input": text, "response_format": "wav" }))
    };
    let started = Instant::now();
    let answer = post_json(addr, path, &body.to_string());
    let latency = started.elapsed();
    match answer {
        Ok((status, headers, body)) => {
            let retry_after = headers.iter().any(|(k, v)| k.eq_ignore_ascii_case("retry-after") && v.trim().parse::<u64>().is_ok());
            let audio_seconds = if status == 200 { wav_seconds(&body) } else { 0.0 };
            let error = if status == 200 { String::new() } else { String::from_utf8_lossy(&body).chars().take(200).collect() };
            Answer { status, retry_after, latency, audio_seconds, error }
        }
        Err(e) => Answer { status: 0, retry_after: false, latency, audio_seconds: 0.0, error: format!("{e:#}") },
    }
}

/// An HTTP answer: status, headers (name, value), body.
type HttpAnswer = (u16, Vec<(String, String)>, Vec<u8>);

/// One `POST` with a JSON body on a fresh connection.
fn post_json(addr: SocketAddr, path: &str, body: &str) -> Result<HttpAnswer> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(10))?;
    stream.set_read_timeout(Some(Duration::from_secs(600)))?;
    write!(
        stream,
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let status: u16 = line.split_whitespace().nth(1).and_then(|s| s.parse().ok()).with_context(|| format!("bad status line {line:?}"))?;
    let mut headers = Vec::new();
    loop {
        line.clear();
        if reader.read_line(&mut line)? == 0 || line.trim_end().is_empty() {
            break;
        }
        if let Some((k, v)) = line.trim_end().split_once(':') {
            headers.push((k.trim().to_string(), v.trim().to_string()));
        }
    }
    let mut body = Vec::new();
    let length = headers.iter().find(|(k, _)| k.eq_ignore_ascii_case("content-length")).and_then(|(_, v)| v.parse::<u64>().ok());
    match length {
        Some(n) => {
            reader.take(n).read_to_end(&mut body)?;
        }
        None => {
            reader.read_to_end(&mut body)?;
        }
    }
    Ok((status, headers, body))
}

/// Seconds of 24 kHz 16-bit mono audio in a wav answer.
fn wav_seconds(bytes: &[u8]) -> f64 {
    match bytes.windows(4).position(|w| w == b"data") {
        Some(at) => bytes.len().saturating_sub(at + 8) as f64 / 2.0 / 24_000.0,
        None => 0.0,
    }
}

/// What one phase measured.
struct Phase {
    requests: usize,
    ok: usize,
    shed: usize,
    shed_with_retry: usize,
    errors: usize,
    error_samples: Vec<String>,
    wall: Duration,
    audio_seconds: f64,
    /// Latencies of the answered (200) requests, sorted.
    latencies: Vec<Duration>,
}

impl Phase {
    fn from(answers: Vec<Answer>, wall: Duration) -> Phase {
        let mut p = Phase {
            requests: answers.len(),
            ok: 0,
            shed: 0,
            shed_with_retry: 0,
            errors: 0,
            error_samples: Vec::new(),
            wall,
            audio_seconds: 0.0,
            latencies: Vec::new(),
        };
        for a in answers {
            match a.status {
                200 => {
                    p.ok += 1;
                    p.audio_seconds += a.audio_seconds;
                    p.latencies.push(a.latency);
                }
                503 => {
                    p.shed += 1;
                    p.shed_with_retry += usize::from(a.retry_after);
                }
                status => {
                    p.errors += 1;
                    if p.error_samples.len() < 5 {
                        p.error_samples.push(format!("{status}: {}", a.error));
                    }
                }
            }
        }
        p.latencies.sort();
        p
    }

    /// Nearest-rank percentile of the answered requests' latencies, seconds.
    fn percentile(&self, q: f64) -> f64 {
        if self.latencies.is_empty() {
            return f64::NAN;
        }
        let rank = ((q * self.latencies.len() as f64).ceil() as usize).clamp(1, self.latencies.len());
        self.latencies[rank - 1].as_secs_f64()
    }

    fn row(&self, name: &str) -> String {
        let secs = self.wall.as_secs_f64().max(1e-9);
        let max = self.latencies.last().map_or(f64::NAN, Duration::as_secs_f64);
        format!(
            "| {name} | {} | {} | {} ({}) | {} | {:.2} | {:.2} | {:.2} s | {:.2} s | {:.2} s | {max:.2} s |",
            self.requests,
            self.ok,
            self.shed,
            self.shed_with_retry,
            self.errors,
            self.ok as f64 / secs,
            self.audio_seconds / secs,
            self.percentile(0.50),
            self.percentile(0.95),
            self.percentile(0.99),
        )
    }
}

/// The `f5 serve` process under test.
struct Server {
    child: Child,
    addr: SocketAddr,
    /// Filled in by `stop` from the kernel's accounting of the exited process.
    peak_rss_mib: f64,
}

impl Server {
    fn start(root: &Path, f5: &Path, voices: &PathBuf, o: &Opts) -> Result<Server> {
        let mut child = Command::new(f5)
            .current_dir(root)
            .args(["serve", "--model", MODEL, "--vocab", VOCAB, "--vocoder", VOCODER, "--addr", "127.0.0.1:0"])
            .arg("--voices")
            .arg(voices)
            .args(["--queue", &o.queue.to_string(), "--threads", &o.threads.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .context("cannot start f5 serve")?;
        // The server prints the address it bound (port 0: the kernel's choice) on stderr.
        let stderr = child.stderr.take().context("server stderr")?;
        let mut lines = BufReader::new(stderr).lines();
        let addr = loop {
            match lines.next() {
                Some(Ok(line)) => {
                    if let Some(rest) = line.split("serving on http://").nth(1) {
                        break rest.split_whitespace().next().unwrap_or_default().parse::<SocketAddr>().context("server address")?;
                    }
                    eprintln!("server: {line}");
                }
                _ => {
                    let _ = child.kill();
                    bail!("f5 serve exited before listening");
                }
            }
        };
        // Keep draining its stderr so that it never blocks on a full pipe.
        std::thread::spawn(move || lines.map_while(Result::ok).for_each(drop));
        Ok(Server { child, addr, peak_rss_mib: 0.0 })
    }

    /// A `/proc/PID/status` memory line (`VmRSS`, `VmHWM`) in MiB.
    fn rss_mib(&self, key: &str) -> f64 {
        std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .ok()
            .and_then(|s| {
                s.lines().find(|l| l.starts_with(key)).and_then(|l| l.split_whitespace().nth(1)).and_then(|kb| kb.parse::<f64>().ok())
            })
            .map_or(f64::NAN, |kb| kb / 1024.0)
    }

    fn stop(&mut self) {
        self.peak_rss_mib = self.rss_mib("VmHWM");
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
