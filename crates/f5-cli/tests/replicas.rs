//! Three `f5 serve` replicas behind HAProxy, configured by the example in
//! deploy/haproxy/haproxy.cfg (only its ports changed), sharing one voice store: bounded
//! concurrent load through the balancer while one replica is stopped with SIGTERM. No request
//! fails, every answer is whole and byte-identical to one server's answer for the same seed,
//! and the stopped replica exits 0.
//!
//! Needs the `haproxy` binary (.ci/run installs it); without it the test says so and skips.

mod common;

use common::{add_birch, fixtures};
use std::collections::HashMap;
use std::io::{BufRead, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const TINY: [&str; 6] = ["-m", "models/f5-tiny-v1", "--vocab", "vocab.txt", "--vocoder", "models/vocos-tiny"];

/// A process that is killed if the test ends without stopping it, and its standard error.
struct Guard(Option<Child>, Option<std::io::BufReader<std::process::ChildStderr>>);

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(c) = self.0.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// `n` distinct free ports (the listeners are held until all are picked, so none repeats).
fn free_ports<const N: usize>() -> [u16; N] {
    let listeners: Vec<_> = (0..N).map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap()).collect();
    std::array::from_fn(|i| listeners[i].local_addr().unwrap().port())
}

/// A replica on `port`, reading the store in `voices`; returns once it is listening.
fn replica(port: u16, voices: &Path, extra: &[&str]) -> Guard {
    let mut child = Command::new(env!("CARGO_BIN_EXE_f5"))
        .arg("serve")
        .args(TINY)
        .args(["--threads", "1", "--log-format", "off", "--addr", &format!("127.0.0.1:{port}")])
        .arg("--voices")
        .arg(voices)
        .args(extra)
        .current_dir(fixtures())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    let mut stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    stderr.read_line(&mut line).unwrap();
    assert!(line.contains(&format!("serving on http://127.0.0.1:{port}")), "replica on {port}: {line}");
    Guard(Some(child), Some(stderr))
}

/// Stops a replica with SIGTERM; its exit status and what it wrote to stderr.
fn sigterm_and_wait(mut replica: Guard) -> (std::process::ExitStatus, String) {
    let mut child = replica.0.take().unwrap();
    assert!(Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap().success());
    let exit = child.wait().unwrap();
    let mut rest = String::new();
    if let Some(mut stderr) = replica.1.take() {
        let _ = stderr.read_to_string(&mut rest);
    }
    (exit, rest)
}

/// A store in a fresh directory with the fixture voice `birch`; returns (directory, store).
fn store_with_birch(name: &str) -> (PathBuf, PathBuf) {
    let dir = std::env::temp_dir().join(format!("f5-replicas-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    add_birch(&dir);
    let voices = dir.join("voices");
    (dir, voices)
}

fn haproxy_available() -> bool {
    Command::new("haproxy").arg("-v").output().is_ok_and(|o| o.status.success())
}

/// HAProxy on deploy/haproxy/haproxy.cfg for `backs`, once it routes requests.
fn start_haproxy(dir: &Path, backs: &[u16]) -> (Guard, u16) {
    let [front] = free_ports();
    let config = dir.join("haproxy.cfg");
    std::fs::write(&config, haproxy_config(front, backs)).unwrap();
    let check = Command::new("haproxy").arg("-c").arg("-f").arg(&config).output().unwrap();
    assert!(check.status.success(), "{}", String::from_utf8_lossy(&check.stderr));
    let haproxy = Guard(
        Some(Command::new("haproxy").arg("-db").arg("-f").arg(&config).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap()),
        None,
    );
    wait_until("HAProxy answers", Duration::from_secs(30), || matches!(exchange(front, "GET", "/ready", ""), Ok((200, _))));
    // Every replica seen ready (rise 2 at 1 s), not only the first.
    std::thread::sleep(Duration::from_secs(3));
    (haproxy, front)
}

/// One request with `Connection: close`; the status and body of the whole answer, its length
/// checked against Content-Length (a cut answer fails), or why there was none.
fn exchange(port: u16, method: &str, path: &str, body: &str) -> Result<(u16, Vec<u8>), String> {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(120))).map_err(|e| e.to_string())?;
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .map_err(|e| e.to_string())?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).map_err(|e| e.to_string())?;
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").ok_or_else(|| format!("no head in {} bytes", raw.len()))?;
    let head = String::from_utf8_lossy(&raw[..split]).to_string();
    let body = raw[split + 4..].to_vec();
    let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).ok_or_else(|| format!("no status: {head}"))?;
    let length = head
        .lines()
        .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().to_string()))
        .and_then(|v| v.parse::<usize>().ok());
    if length != Some(body.len()) {
        return Err(format!("incomplete answer: {} of {length:?} bytes ({head})", body.len()));
    }
    Ok((status, body))
}

fn tts_body(seed: u64) -> String {
    format!(r#"{{"voice": "birch", "text": "Replica number {seed} is speaking now.", "nfe": 4, "seed": {seed}}}"#)
}

fn wait_until(what: &str, limit: Duration, mut ok: impl FnMut() -> bool) {
    let start = Instant::now();
    while !ok() {
        assert!(start.elapsed() < limit, "{what} within {limit:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// deploy/haproxy/haproxy.cfg with its frontend on `front` and its servers on `backs` (the
/// example's first ones; the rest are left out).
fn haproxy_config(front: u16, backs: &[u16]) -> String {
    let example = std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../deploy/haproxy/haproxy.cfg")).unwrap();
    let mut servers = 0;
    let lines: Vec<String> = example
        .lines()
        .map(|l| {
            let t = l.trim_start();
            if t.starts_with("bind ") {
                format!("    bind 127.0.0.1:{front}")
            } else if t.starts_with("server ") {
                let name = t.split_whitespace().nth(1).unwrap_or("f5");
                servers += 1;
                match backs.get(servers - 1) {
                    Some(port) => format!("    server {name} 127.0.0.1:{port} check"),
                    None => String::new(),
                }
            } else if t.starts_with("log stdout") {
                String::new() // the test's HAProxy logs nothing
            } else {
                l.to_string()
            }
        })
        .collect();
    assert_eq!(servers, 3, "the example lists three replicas");
    assert!(backs.len() <= servers);
    lines.join("\n") + "\n"
}

#[test]
fn three_replicas_behind_haproxy_lose_no_request_when_one_is_stopped() {
    if !haproxy_available() {
        eprintln!("skipping the replicas test: no haproxy binary (apt-get install haproxy)");
        return;
    }
    let (dir, voices) = store_with_birch("three");
    let ports: [u16; 3] = free_ports();
    let mut replicas: Vec<Guard> = ports.iter().map(|&p| replica(p, &voices, &[])).collect();
    // What one server answers, per seed: the standard every balanced answer must meet.
    let seeds: Vec<u64> = (0..6).collect();
    let mut expected: HashMap<u64, Vec<u8>> = HashMap::new();
    for &seed in &seeds {
        let (status, body) = exchange(ports[0], "POST", "/tts", &tts_body(seed)).unwrap();
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
        assert!(body.starts_with(b"RIFF"));
        expected.insert(seed, body);
    }

    let (_haproxy, front) = start_haproxy(&dir, &ports);

    // Four clients, twelve requests each; one replica is stopped after the sixth answer.
    let answered = Arc::new(AtomicUsize::new(0));
    let clients: Vec<_> = (0..4)
        .map(|client| {
            let (answered, seeds) = (answered.clone(), seeds.clone());
            std::thread::spawn(move || {
                let mut results = Vec::new();
                for i in 0..12 {
                    let seed = seeds[(client * 5 + i) % seeds.len()];
                    results.push((seed, exchange(front, "POST", "/tts", &tts_body(seed))));
                    answered.fetch_add(1, Ordering::SeqCst);
                }
                results
            })
        })
        .collect();
    wait_until("six answers", Duration::from_secs(120), || answered.load(Ordering::SeqCst) >= 6);
    // The replica about to be stopped is taking its share of the load, and is busy now.
    let tts_answered = |port: u16| -> f64 {
        let Ok((200, text)) = exchange(port, "GET", "/metrics", "") else { return 0.0 };
        String::from_utf8_lossy(&text)
            .lines()
            .filter(|l| l.starts_with("f5_requests_total{") && l.contains("endpoint=\"/tts\""))
            .filter_map(|l| l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()))
            .sum()
    };
    wait_until("the second replica serving", Duration::from_secs(60), || {
        // In flight: this scrape and at least one synthesis.
        let in_flight = exchange(ports[1], "GET", "/metrics", "").ok().and_then(|(_, t)| {
            String::from_utf8_lossy(&t)
                .lines()
                .find_map(|l| l.strip_prefix("f5_requests_in_flight ").and_then(|v| v.trim().parse::<f64>().ok()))
        });
        tts_answered(ports[1]) >= 1.0 && in_flight.unwrap_or(0.0) >= 2.0
    });
    let (exit, _) = sigterm_and_wait(replicas.remove(1));

    let mut total = 0;
    for client in clients {
        for (seed, result) in client.join().unwrap() {
            let (status, body) = result.unwrap_or_else(|e| panic!("seed {seed}: the request failed: {e}"));
            assert_eq!(status, 200, "seed {seed}: {}", String::from_utf8_lossy(&body[..body.len().min(300)]));
            assert!(body == expected[&seed], "seed {seed}: the answer differs from one server's");
            total += 1;
        }
    }
    assert_eq!(total, 48);
    assert!(exit.success(), "the stopped replica exits 0 after draining: {exit}");
    // The remaining replicas still answer through the balancer.
    let (status, body) = exchange(front, "POST", "/tts", &tts_body(0)).unwrap();
    assert!(status == 200 && body == expected[&0]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A replica stopped with a drain time shorter than its jobs: what it cuts off is answered 503,
/// and HAProxy (the example's `retry-on … 503`) sends it to the other replica. The clients see
/// only whole answers, the same as one server's.
#[test]
fn a_drain_cut_short_is_retried_on_another_replica() {
    if !haproxy_available() {
        eprintln!("skipping the replicas test: no haproxy binary (apt-get install haproxy)");
        return;
    }
    let (dir, voices) = store_with_birch("cut");
    let ports: [u16; 2] = free_ports();
    let steady = replica(ports[0], &voices, &[]);
    let stopping = replica(ports[1], &voices, &["--drain-timeout", "1"]);
    // Jobs that take longer than the drain time (about 3 s each here).
    let text = "The quick brown fox jumps over the lazy dog. ".repeat(6);
    let body = |seed: u64| format!(r#"{{"voice": "birch", "text": "{text}", "nfe": 16, "seed": {seed}}}"#);
    let seeds: Vec<u64> = (0..4).collect();
    let expected: HashMap<u64, Vec<u8>> = seeds
        .iter()
        .map(|&seed| {
            let (status, answer) = exchange(ports[0], "POST", "/tts", &body(seed)).unwrap();
            assert_eq!(status, 200);
            (seed, answer)
        })
        .collect();
    let (_haproxy, front) = start_haproxy(&dir, &ports);
    let clients: Vec<_> = seeds
        .iter()
        .map(|&seed| {
            let request = body(seed);
            std::thread::spawn(move || (seed, exchange(front, "POST", "/tts", &request)))
        })
        .collect();
    // The stopping replica is working on one of them (in flight: this scrape and a job).
    wait_until("the second replica busy", Duration::from_secs(60), || {
        exchange(ports[1], "GET", "/metrics", "")
            .ok()
            .and_then(|(_, t)| {
                String::from_utf8_lossy(&t)
                    .lines()
                    .find_map(|l| l.strip_prefix("f5_requests_in_flight ").and_then(|v| v.trim().parse::<f64>().ok()))
            })
            .is_some_and(|n| n >= 2.0)
    });
    let (exit, log) = sigterm_and_wait(stopping);
    assert!(exit.success(), "exit {exit}: {log}");
    assert!(log.contains("drain time of 1 s ran out"), "the drain did cut a job off: {log}");
    for client in clients {
        let (seed, result) = client.join().unwrap();
        let (status, answer) = result.unwrap_or_else(|e| panic!("seed {seed}: the request failed: {e}"));
        assert_eq!(status, 200, "seed {seed}: {}", String::from_utf8_lossy(&answer[..answer.len().min(300)]));
        assert!(answer == expected[&seed], "seed {seed}: the answer differs from one server's");
    }
    drop(steady);
    let _ = std::fs::remove_dir_all(&dir);
}
