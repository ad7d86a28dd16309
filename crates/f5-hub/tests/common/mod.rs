//! A tiny hub-compatible HTTP server for the tests: 127.0.0.1 on an ephemeral port, one request
//! per connection, at most `MAX_REQUESTS` requests and `LIFETIME`, stopped when dropped.
//!
//! `GET|HEAD /{owner}/{repo}/resolve/{revision}/{path}` answers like the Hugging Face Hub:
//! `X-Repo-Commit` and `ETag` (a git-blob-like hash) for plain files; for LFS files a 302 to
//! `http://localhost:{port}/cdn/{sha256}` (another host name, so the token must not follow) with
//! `X-Linked-Etag` and `X-Linked-Size`; 401 for a private repository without the token; 404
//! with `X-Error-Code`. Bodies honour `Range: bytes=N-`. Faults can be scripted per file path.

#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use f5_hub::{Hub, HubConfig};
use sha2::{Digest, Sha256};

const MAX_REQUESTS: usize = 200;
/// A safety net for a server a test forgot: dropping stops it sooner. Long enough for the
/// slowest user, the Kokoro hub test that speaks three voices with listen-back on a busy
/// 2-core machine (its last voice is fetched ~2 min in).
const LIFETIME: Duration = Duration::from_secs(600);
pub const TOKEN: &str = "hf_test_token";

pub fn sha256_hex(data: &[u8]) -> String {
    Sha256::digest(data).iter().map(|b| format!("{b:02x}")).collect()
}

/// A stand-in for git's blob hash: 40 hex characters, not a sha256, so the client does not
/// check it as one.
fn plain_etag(data: &[u8]) -> String {
    sha256_hex(&[b"blob ".as_slice(), data].concat())[..40].to_string()
}

#[derive(Clone)]
pub struct RepoSpec {
    pub commit: String,
    pub private: bool,
    /// path → (bytes, stored with LFS)
    pub files: BTreeMap<String, (Vec<u8>, bool)>,
    /// path → the etag a plain file is served with, instead of the made-up one
    pub etags: HashMap<String, String>,
}

impl RepoSpec {
    pub fn new(commit: &str) -> RepoSpec {
        RepoSpec { commit: commit.to_string(), private: false, files: BTreeMap::new(), etags: HashMap::new() }
    }
    pub fn file(mut self, path: &str, bytes: &[u8], lfs: bool) -> RepoSpec {
        self.files.insert(path.to_string(), (bytes.to_vec(), lfs));
        self
    }
    pub fn etag(mut self, path: &str, etag: &str) -> RepoSpec {
        self.etags.insert(path.to_string(), etag.to_string());
        self
    }
    pub fn private(mut self) -> RepoSpec {
        self.private = true;
        self
    }
}

#[derive(Debug, Clone)]
pub struct Logged {
    pub method: String,
    pub path: String,
    pub headers: HashMap<String, String>,
}

#[derive(Default)]
struct Faults {
    /// file path → how many more bodies to cut off half way
    truncate: HashMap<String, usize>,
    /// file path → how many more bodies to send with a flipped byte
    corrupt: HashMap<String, usize>,
    /// file path → delay before each body, to make concurrent downloads overlap
    slow: HashMap<String, Duration>,
}

struct State {
    repos: Mutex<HashMap<String, RepoSpec>>,
    log: Mutex<Vec<Logged>>,
    faults: Mutex<Faults>,
    port: u16,
}

pub struct TestServer {
    pub addr: SocketAddr,
    state: Arc<State>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl TestServer {
    pub fn start(repos: Vec<(&str, RepoSpec)>) -> TestServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        let addr = listener.local_addr().expect("local addr");
        listener.set_nonblocking(true).expect("nonblocking");
        let state = Arc::new(State {
            repos: Mutex::new(repos.into_iter().map(|(id, spec)| (id.to_string(), spec)).collect()),
            log: Mutex::new(Vec::new()),
            faults: Mutex::new(Faults::default()),
            port: addr.port(),
        });
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (state, stop) = (state.clone(), stop.clone());
            std::thread::spawn(move || serve(listener, state, stop))
        };
        TestServer { addr, state, stop, thread: Some(thread) }
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.addr.port())
    }

    pub fn requests(&self) -> Vec<Logged> {
        self.state.log.lock().unwrap().clone()
    }

    pub fn request_count(&self) -> usize {
        self.state.log.lock().unwrap().len()
    }

    pub fn truncate_next(&self, path: &str, times: usize) {
        self.state.faults.lock().unwrap().truncate.insert(path.to_string(), times);
    }

    pub fn corrupt_next(&self, path: &str, times: usize) {
        self.state.faults.lock().unwrap().corrupt.insert(path.to_string(), times);
    }

    pub fn slow(&self, path: &str, delay: Duration) {
        self.state.faults.lock().unwrap().slow.insert(path.to_string(), delay);
    }

    pub fn set_commit(&self, repo: &str, commit: &str) {
        if let Some(spec) = self.state.repos.lock().unwrap().get_mut(repo) {
            spec.commit = commit.to_string();
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn serve(listener: TcpListener, state: Arc<State>, stop: Arc<AtomicBool>) {
    let started = Instant::now();
    let mut handled = 0;
    let mut workers = Vec::new();
    while !stop.load(Ordering::SeqCst) && started.elapsed() < LIFETIME && handled < MAX_REQUESTS {
        match listener.accept() {
            Ok((stream, _)) => {
                handled += 1;
                let state = state.clone();
                workers.push(std::thread::spawn(move || {
                    let _ = handle(stream, &state);
                }));
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::sleep(Duration::from_millis(2)),
            Err(_) => break,
        }
    }
    for worker in workers {
        let _ = worker.join();
    }
}

fn handle(stream: TcpStream, state: &State) -> std::io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let mut words = line.split_whitespace();
    let method = words.next().unwrap_or_default().to_string();
    let path = words.next().unwrap_or_default().to_string();
    let mut headers = HashMap::new();
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header)? == 0 || header.trim().is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':') {
            headers.insert(name.trim().to_ascii_lowercase(), value.trim().to_string());
        }
    }
    state.log.lock().unwrap().push(Logged { method: method.clone(), path: path.clone(), headers: headers.clone() });
    let mut out = stream;
    let head_only = method == "HEAD";
    let parts: Vec<&str> = path.split('/').collect();

    if parts.len() == 3 && parts[1] == "cdn" {
        let found = state.repos.lock().unwrap().values().find_map(|repo| {
            repo.files.iter().find(|(_, (bytes, lfs))| *lfs && sha256_hex(bytes) == parts[2]).map(|(p, (b, _))| (p.clone(), b.clone()))
        });
        return match found {
            Some((file_path, bytes)) => send_body(&mut out, state, &file_path, &bytes, &headers, Vec::new(), head_only),
            None => send(&mut out, 404, &[], b"", head_only),
        };
    }
    if parts.len() < 6 || parts[3] != "resolve" {
        return send(&mut out, 404, &[], b"", head_only);
    }
    let repo_id = format!("{}/{}", parts[1], parts[2]);
    let revision = parts[4].replace("%2F", "/");
    let file_path = parts[5..].join("/");
    let Some(repo) = state.repos.lock().unwrap().get(&repo_id).cloned() else {
        return send(&mut out, 404, &[("X-Error-Code", "RepoNotFound".into())], b"", head_only);
    };
    if repo.private && headers.get("authorization").map(String::as_str) != Some(&format!("Bearer {TOKEN}")) {
        return send(&mut out, 401, &[("X-Error-Code", "RepoNotFound".into())], b"", head_only);
    }
    if revision != "main" && revision != repo.commit {
        return send(&mut out, 404, &[("X-Error-Code", "RevisionNotFound".into())], b"", head_only);
    }
    let commit = ("X-Repo-Commit", repo.commit.clone());
    let Some((bytes, lfs)) = repo.files.get(&file_path) else {
        return send(&mut out, 404, &[commit, ("X-Error-Code", "EntryNotFound".into())], b"", head_only);
    };
    if *lfs {
        let sha = sha256_hex(bytes);
        let extra = [
            commit,
            ("Location", format!("http://localhost:{}/cdn/{sha}", state.port)),
            ("X-Linked-Etag", format!("\"{sha}\"")),
            ("X-Linked-Size", bytes.len().to_string()),
            ("ETag", format!("\"{}\"", plain_etag(sha.as_bytes()))),
        ];
        return send(&mut out, 302, &extra, b"", head_only);
    }
    let etag = repo.etags.get(&file_path).cloned().unwrap_or_else(|| plain_etag(bytes));
    let extra = vec![commit, ("ETag", format!("\"{etag}\""))];
    send_body(&mut out, state, &file_path, bytes, &headers, extra, head_only)
}

/// Sends a file's bytes, honouring `Range: bytes=N-` and the scripted faults.
fn send_body(
    out: &mut TcpStream,
    state: &State,
    file_path: &str,
    bytes: &[u8],
    request: &HashMap<String, String>,
    mut extra: Vec<(&str, String)>,
    head_only: bool,
) -> std::io::Result<()> {
    let total = bytes.len();
    let start = request.get("range").and_then(|r| r.strip_prefix("bytes=")).and_then(|r| r.trim_end_matches('-').parse::<usize>().ok());
    let (status, body) = match start {
        Some(start) if start >= total => return send(out, 416, &[("Content-Range", format!("bytes */{total}"))], b"", head_only),
        Some(start) => {
            extra.push(("Content-Range", format!("bytes {start}-{}/{total}", total - 1)));
            (206, bytes[start..].to_vec())
        }
        None => (200, bytes.to_vec()),
    };
    if head_only {
        return send(out, status, &extra, &body, true);
    }
    let (truncate, corrupt, delay) = {
        let mut faults = state.faults.lock().unwrap();
        let truncate = take_one(&mut faults.truncate, file_path);
        let corrupt = take_one(&mut faults.corrupt, file_path);
        (truncate, corrupt, faults.slow.get(file_path).copied())
    };
    if let Some(delay) = delay {
        std::thread::sleep(delay);
    }
    let mut body = body;
    if corrupt {
        if let Some(first) = body.first_mut() {
            *first ^= 0xff;
        }
    }
    if truncate {
        // Promise the whole body, send half, hang up.
        write_head(out, status, &extra, body.len())?;
        out.write_all(&body[..body.len() / 2])?;
        out.flush()?;
        return out.shutdown(std::net::Shutdown::Both);
    }
    send(out, status, &extra, &body, false)
}

fn take_one(map: &mut HashMap<String, usize>, key: &str) -> bool {
    match map.get_mut(key) {
        Some(n) if *n > 0 => {
            *n -= 1;
            true
        }
        _ => false,
    }
}

fn write_head(out: &mut TcpStream, status: u16, extra: &[(&str, String)], len: usize) -> std::io::Result<()> {
    let reason = match status {
        200 => "OK",
        206 => "Partial Content",
        302 => "Found",
        401 => "Unauthorized",
        404 => "Not Found",
        416 => "Range Not Satisfiable",
        _ => "Status",
    };
    let mut head = format!("HTTP/1.1 {status} {reason}\r\nConnection: close\r\nContent-Length: {len}\r\n");
    for (name, value) in extra {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    out.write_all(head.as_bytes())
}

fn send(out: &mut TcpStream, status: u16, extra: &[(&str, String)], body: &[u8], head_only: bool) -> std::io::Result<()> {
    write_head(out, status, extra, body.len())?;
    if !head_only {
        out.write_all(body)?;
    }
    out.flush()?;
    // Drain anything the client still sends so the close is clean.
    let _ = out.shutdown(std::net::Shutdown::Write);
    let mut sink = [0u8; 256];
    let _ = out.set_read_timeout(Some(Duration::from_millis(200)));
    while matches!(out.read(&mut sink), Ok(n) if n > 0) {}
    Ok(())
}

/// A hub whose every directory is inside `root` and whose endpoint is `endpoint`; nothing is
/// read from the process environment.
pub fn hub(root: &std::path::Path, endpoint: &str, token: Option<&str>, offline: bool) -> Hub {
    let mut vars: HashMap<&str, String> = HashMap::new();
    vars.insert("HOME", root.join("home").display().to_string());
    vars.insert("F5_HOME", root.join("f5").display().to_string());
    vars.insert("HF_HOME", root.join("hf").display().to_string());
    vars.insert("HF_ENDPOINT", endpoint.to_string());
    if let Some(token) = token {
        vars.insert("HF_TOKEN", token.to_string());
    }
    if offline {
        vars.insert("HF_HUB_OFFLINE", "1".to_string());
    }
    let mut config = HubConfig::from_vars(|name| vars.get(name).cloned());
    config.retry_delay = Duration::ZERO;
    config.timeout = Duration::from_secs(20);
    Hub::new(config)
}
