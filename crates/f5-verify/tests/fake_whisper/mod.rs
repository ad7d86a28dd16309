//! A stand-in for whisper.cpp's server: real HTTP on 127.0.0.1 (ephemeral port), the
//! `/inference` multipart API, scripted answers. It records every request (fields, and the
//! `file` decoded as a wav) so tests can check what the client sent.
//!
//! Bounded: it serves at most `MAX_REQUESTS` requests and stops by itself after `LIFETIME`
//! even if a test forgets it; dropping it stops it at once.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Cursor, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const MAX_REQUESTS: usize = 64;
const LIFETIME: Duration = Duration::from_secs(60);
const MAX_BODY: usize = 16 << 20;
const MAX_HEADER_LINES: usize = 64;

/// The `file` field decoded as a wav.
#[derive(Debug, Clone)]
pub struct Wav {
    pub channels: u16,
    pub rate: u32,
    pub bits: u16,
    pub integer_pcm: bool,
    pub samples: Vec<i16>,
}

#[derive(Debug, Clone, Default)]
pub struct Request {
    pub method: String,
    pub path: String,
    /// Form fields other than `file`, as text.
    pub fields: HashMap<String, String>,
    /// Names of all parts in order.
    pub part_names: Vec<String>,
    pub file_name: Option<String>,
    /// The decoded `file`, or why it did not decode.
    pub wav: Option<Result<Wav, String>>,
}

impl Request {
    /// The first sample of the uploaded wav scaled back to [-1, 1], used by tests to tag audio.
    pub fn tag(&self) -> Option<i64> {
        match &self.wav {
            Some(Ok(wav)) => wav.samples.first().map(|&s| (f64::from(s) * 1000.0 / 32767.0).round() as i64),
            _ => None,
        }
    }
}

/// What the fake says back.
#[derive(Debug, Clone)]
pub enum Reply {
    /// 200 with `{"text": …}`.
    Text(String),
    /// 200 with a raw JSON body.
    Json(String),
    /// This status with an error body.
    Status(u16),
    /// Waits this long, then closes without answering.
    Hang(Duration),
}

pub struct FakeWhisper {
    address: String,
    requests: Arc<Mutex<Vec<Request>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl FakeWhisper {
    /// Starts a server that answers request number `n` (from 0) with `script(n, &request)`.
    pub fn start<S>(mut script: S) -> Self
    where
        S: FnMut(usize, &Request) -> Reply + Send + 'static,
    {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        let address = listener.local_addr().expect("local address").to_string();
        listener.set_nonblocking(true).expect("non-blocking listener");
        let requests = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let requests = Arc::clone(&requests);
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                let started = Instant::now();
                let mut served = 0;
                while !stop.load(Ordering::Relaxed) && started.elapsed() < LIFETIME && served < MAX_REQUESTS {
                    match listener.accept() {
                        Ok((stream, _)) => {
                            served += 1;
                            serve(stream, &mut script, &requests);
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::sleep(Duration::from_millis(2)),
                        Err(_) => break,
                    }
                }
            })
        };
        Self { address, requests, stop, thread: Some(thread) }
    }

    /// `127.0.0.1:port`.
    pub fn address(&self) -> &str {
        &self.address
    }

    pub fn requests(&self) -> Vec<Request> {
        self.requests.lock().map(|r| r.clone()).unwrap_or_default()
    }
}

impl Drop for FakeWhisper {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// An address where nothing listens: bind an ephemeral port, then let it go.
pub fn closed_address() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    listener.local_addr().expect("local address").to_string()
}

fn serve<S>(stream: TcpStream, script: &mut S, requests: &Mutex<Vec<Request>>)
where
    S: FnMut(usize, &Request) -> Reply,
{
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let mut writer = match stream.try_clone() {
        Ok(w) => w,
        Err(_) => return,
    };
    let mut reader = BufReader::new(stream);
    let request = match read_request(&mut reader) {
        Ok(r) => r,
        Err(e) => {
            respond(&mut writer, 400, &format!("{{\"error\": {:?}}}", e));
            return;
        }
    };
    let index = {
        let mut log = requests.lock().expect("request log");
        log.push(request.clone());
        log.len() - 1
    };
    match script(index, &request) {
        Reply::Text(text) => respond(&mut writer, 200, &serde_json::json!({ "text": text }).to_string()),
        Reply::Json(body) => respond(&mut writer, 200, &body),
        Reply::Status(status) => respond(&mut writer, status, "{\"error\": \"scripted failure\"}"),
        Reply::Hang(wait) => std::thread::sleep(wait),
    }
}

fn respond(stream: &mut TcpStream, status: u16, body: &str) {
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        503 => "Service Unavailable",
        _ => "Status",
    };
    let head = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let _ = stream.write_all(head.as_bytes());
    let _ = stream.write_all(body.as_bytes());
    let _ = stream.flush();
    let _ = stream.shutdown(std::net::Shutdown::Both);
}

fn read_line(reader: &mut impl BufRead) -> Result<String, String> {
    let mut line = Vec::new();
    reader.by_ref().take(8192).read_until(b'\n', &mut line).map_err(|e| e.to_string())?;
    let line = String::from_utf8(line).map_err(|_| "header is not UTF-8".to_string())?;
    Ok(line.trim_end_matches(['\r', '\n']).to_string())
}

fn read_request(reader: &mut impl BufRead) -> Result<Request, String> {
    let request_line = read_line(reader)?;
    let mut parts = request_line.split_whitespace();
    let method = parts.next().unwrap_or_default().to_string();
    let path = parts.next().unwrap_or_default().to_string();
    let mut headers = HashMap::new();
    for _ in 0..MAX_HEADER_LINES {
        let line = read_line(reader)?;
        if line.is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            headers.insert(name.trim().to_ascii_lowercase(), value.trim().to_string());
        }
    }
    let body = if headers.get("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        read_chunked(reader)?
    } else {
        let length: usize = headers.get("content-length").ok_or("no Content-Length")?.parse().map_err(|_| "bad Content-Length")?;
        if length > MAX_BODY {
            return Err(format!("body of {length} bytes is too large"));
        }
        let mut body = vec![0; length];
        reader.read_exact(&mut body).map_err(|e| e.to_string())?;
        body
    };
    let content_type = headers.get("content-type").ok_or("no Content-Type")?;
    let boundary = content_type
        .split(';')
        .map(str::trim)
        .find_map(|p| p.strip_prefix("boundary="))
        .ok_or("not multipart (no boundary)")?
        .trim_matches('"')
        .to_string();
    if !content_type.starts_with("multipart/form-data") {
        return Err(format!("content type {content_type} is not multipart/form-data"));
    }
    let mut request = Request { method, path, ..Request::default() };
    for part in split_multipart(&body, &boundary)? {
        request.part_names.push(part.name.clone());
        if part.name == "file" {
            request.file_name = part.file_name.clone();
            request.wav = Some(decode_wav(&part.value));
        } else {
            request.fields.insert(part.name, String::from_utf8_lossy(&part.value).into_owned());
        }
    }
    Ok(request)
}

fn read_chunked(reader: &mut impl BufRead) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    loop {
        let size_line = read_line(reader)?;
        let size = usize::from_str_radix(size_line.split(';').next().unwrap_or("").trim(), 16).map_err(|_| "bad chunk size")?;
        if size == 0 {
            let _ = read_line(reader)?;
            return Ok(body);
        }
        if body.len() + size > MAX_BODY {
            return Err("chunked body too large".into());
        }
        let start = body.len();
        body.resize(start + size, 0);
        reader.read_exact(&mut body[start..]).map_err(|e| e.to_string())?;
        let _ = read_line(reader)?;
    }
}

struct Part {
    name: String,
    file_name: Option<String>,
    value: Vec<u8>,
}

fn find(haystack: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    haystack.get(from..)?.windows(needle.len()).position(|w| w == needle).map(|p| p + from)
}

fn split_multipart(body: &[u8], boundary: &str) -> Result<Vec<Part>, String> {
    let delimiter = format!("--{boundary}").into_bytes();
    let mut parts = Vec::new();
    let mut at = find(body, &delimiter, 0).ok_or("no first boundary")? + delimiter.len();
    loop {
        if body.get(at..at + 2) == Some(b"--") {
            return Ok(parts);
        }
        at += 2; // CRLF after the delimiter
        let head_end = find(body, b"\r\n\r\n", at).ok_or("part without header end")?;
        let head = String::from_utf8_lossy(&body[at..head_end]).into_owned();
        let next = find(body, &delimiter, head_end).ok_or("part without closing boundary")?;
        // The value ends with the CRLF that precedes the next delimiter.
        let value = body[head_end + 4..next.saturating_sub(2)].to_vec();
        let disposition =
            head.lines().find(|l| l.to_ascii_lowercase().starts_with("content-disposition:")).ok_or("part without Content-Disposition")?;
        let attribute =
            |key: &str| disposition.split(';').map(str::trim).find_map(|p| p.strip_prefix(key)).map(|v| v.trim_matches('"').to_string());
        let name = attribute("name=").ok_or("part without a name")?;
        parts.push(Part { name, file_name: attribute("filename="), value });
        at = next + delimiter.len();
    }
}

fn decode_wav(bytes: &[u8]) -> Result<Wav, String> {
    let mut reader = hound::WavReader::new(Cursor::new(bytes)).map_err(|e| format!("not a wav: {e}"))?;
    let spec = reader.spec();
    let samples: Result<Vec<i16>, _> = reader.samples::<i16>().collect();
    Ok(Wav {
        channels: spec.channels,
        rate: spec.sample_rate,
        bits: spec.bits_per_sample,
        integer_pcm: spec.sample_format == hound::SampleFormat::Int,
        samples: samples.map_err(|e| format!("wav samples: {e}"))?,
    })
}
