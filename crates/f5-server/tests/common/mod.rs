//! A real server on a loopback port 0, with the tiny fixture model and a fresh voice store.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use f5_server::{Server, ServerConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

pub const VOICE: &str = "birch";
pub const TRANSCRIPT: &str = "The birch canoe slid on the smooth planks.";

pub fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures").join(rel)
}

pub fn reference_wav() -> Vec<u8> {
    std::fs::read(fixture("audio/ref_22050.wav")).expect("fixture audio/ref_22050.wav")
}

pub struct TestServer {
    pub base: String,
    pub addr: std::net::SocketAddr,
    pub voices: PathBuf,
    pub server_pause: Option<f5_server::PauseGuard>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<Result<(), f5_server::ServerError>>>,
}

fn temp_dir() -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!("f5-server-test-{}-{}", std::process::id(), N.fetch_add(1, Ordering::SeqCst)));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// The id the Kokoro fixture model is served under.
pub const KOKORO: &str = "kokoro-small";

/// The small Kokoro model in the release layout (`fixtures/kokoro/release-small`: its voices
/// are `af_heart` and `am_mirror`).
pub fn kokoro_files() -> f5_synth::ModelFiles {
    let dir = fixture("kokoro/release-small");
    f5_synth::ModelFiles::Kokoro { checkpoint: dir.clone(), voices: f5_synth::KokoroVoices::in_model_dir(&dir) }
}

/// Adds the Kokoro fixture model beside the default F5 one.
pub fn with_kokoro(c: &mut ServerConfig) {
    let mut k = f5_server::ModelEntry::with_files(kokoro_files());
    k.id = Some(KOKORO.into());
    c.more_models = vec![k];
    c.queue_capacity = 32;
}

/// The tiny fixture model and vocoder on a free loopback port, one CPU thread.
pub fn tiny_config(voices: PathBuf) -> ServerConfig {
    let mut config = ServerConfig::new(
        fixture("models/f5-tiny-v1/model.safetensors"),
        fixture("vocab.txt"),
        fixture("models/vocos-tiny/pytorch_model.bin"),
        voices,
    );
    config.addr = "127.0.0.1:0".parse().expect("loopback address");
    config.threads = 1;
    config
}

/// Starts a server whose store holds the fixture voice; `tweak` adjusts the config. With
/// `paused`, the model thread takes no job until `resume` is called.
pub async fn start_with(tweak: impl FnOnce(&mut ServerConfig), paused: bool) -> TestServer {
    let voices = temp_dir();
    let store = f5_synth::VoiceStore::open(&voices).expect("voice store");
    store.add(VOICE, TRANSCRIPT, &reference_wav(), "wav", false).expect("fixture voice");
    let mut config = tiny_config(voices.clone());
    tweak(&mut config);
    let server = Server::bind(config).await.expect("server starts");
    let addr = server.local_addr();
    let server_pause = paused.then(|| server.pause_jobs());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(server.run(async {
        let _ = stopped.await;
    }));
    TestServer { base: format!("http://{addr}"), addr, voices, server_pause, stop: Some(stop), task: Some(task) }
}

pub async fn start() -> TestServer {
    start_with(|_| {}, false).await
}

impl TestServer {
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub fn resume(&mut self) {
        self.server_pause = None;
    }

    /// Stops the server and checks that it stopped cleanly.
    pub async fn shutdown(mut self) {
        self.server_pause = None;
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let result = tokio::time::timeout(Duration::from_secs(60), task).await.expect("server stops within a minute");
            result.expect("server task").expect("server ends without error");
        }
    }

    /// Every path under the store, sorted, with each file's size: to show nothing was written.
    pub fn store_listing(&self) -> Vec<(String, u64)> {
        fn walk(dir: &Path, root: &Path, out: &mut Vec<(String, u64)>) {
            let Ok(rd) = std::fs::read_dir(dir) else { return };
            for e in rd.flatten() {
                let p = e.path();
                let rel = p.strip_prefix(root).unwrap_or(&p).display().to_string();
                let len = e.metadata().map(|m| m.len()).unwrap_or(0);
                out.push((rel, len));
                if p.is_dir() {
                    walk(&p, root, out);
                }
            }
        }
        let mut out = Vec::new();
        walk(&self.voices, &self.voices, &mut out);
        out.sort();
        out
    }

    /// Sends `request_head` exactly as written (no client-side path normalisation) and
    /// returns the status code.
    pub async fn raw_status(&self, request_head: &str) -> u16 {
        let mut s = tokio::net::TcpStream::connect(self.addr).await.expect("connect");
        s.write_all(request_head.as_bytes()).await.expect("write");
        let mut buf = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(30), s.read_to_end(&mut buf)).await.expect("raw answer within 30 s");
        let text = String::from_utf8_lossy(&buf);
        let status = text.split_whitespace().nth(1).unwrap_or("0");
        status.parse().unwrap_or(0)
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.voices);
    }
}

pub fn client() -> reqwest::Client {
    // reqwest is built without a crypto provider and panics at construction when none is
    // installed, even for plain HTTP; a second install is a no-op error.
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder().timeout(Duration::from_secs(300)).build().expect("http client")
}

/// A short synthesis request on the fixture voice with few steps, so each takes well under
/// a second on the tiny model.
pub fn tts_body(text: &str, seed: u64) -> serde_json::Value {
    serde_json::json!({ "voice": VOICE, "text": text, "nfe": 4, "seed": seed })
}

/// Checks the RIFF/WAVE header of a 24 kHz mono 16-bit answer and returns its sample count.
pub fn wav_samples(bytes: &[u8]) -> usize {
    assert!(bytes.len() > 44, "a wav answer, got {} bytes", bytes.len());
    assert_eq!(&bytes[0..4], b"RIFF");
    assert_eq!(&bytes[8..12], b"WAVE");
    let u16_at = |i: usize| u16::from_le_bytes([bytes[i], bytes[i + 1]]);
    let u32_at = |i: usize| u32::from_le_bytes([bytes[i], bytes[i + 1], bytes[i + 2], bytes[i + 3]]);
    assert_eq!(u16_at(22), 1, "mono");
    assert_eq!(u32_at(24), 24_000, "24 kHz");
    assert_eq!(u16_at(34), 16, "16-bit");
    assert_eq!(&bytes[36..40], b"data");
    let data = u32_at(40) as usize;
    assert_eq!(data, bytes.len() - 44, "data chunk covers the rest");
    data / 2
}

pub async fn health(c: &reqwest::Client, s: &TestServer) -> serde_json::Value {
    let r = c.get(s.url("/health")).send().await.expect("health");
    assert_eq!(r.status(), 200);
    r.json().await.expect("health json")
}

/// A FLAC file of `frames` 16-bit mono samples at `rate`, every one `value`: each frame is one
/// constant subframe (a few bytes for up to 65535 samples), so a few kilobytes decode to
/// gigabytes. Built by hand: frame header with CRC-8, constant subframe, CRC-16.
pub fn constant_flac(rate: u32, frames: u64, value: i16) -> Vec<u8> {
    const BLOCK: u64 = 65_535;
    fn crc8(bytes: &[u8]) -> u8 {
        let mut crc = 0u8;
        for &b in bytes {
            crc ^= b;
            for _ in 0..8 {
                crc = if crc & 0x80 != 0 { (crc << 1) ^ 0x07 } else { crc << 1 };
            }
        }
        crc
    }
    fn crc16(bytes: &[u8]) -> u16 {
        let mut crc = 0u16;
        for &b in bytes {
            crc ^= u16::from(b) << 8;
            for _ in 0..8 {
                crc = if crc & 0x8000 != 0 { (crc << 1) ^ 0x8005 } else { crc << 1 };
            }
        }
        crc
    }
    /// FLAC's UTF-8-like coding of the frame number.
    fn coded_number(n: u64) -> Vec<u8> {
        if n < 0x80 {
            return vec![n as u8];
        }
        let mut tail = Vec::new();
        let mut n = n;
        let mut lead_bits = 6u32; // payload bits left for the first byte
        while n >= (1 << lead_bits) {
            tail.push(0x80 | (n & 0x3f) as u8);
            n >>= 6;
            lead_bits -= 1;
        }
        let count = tail.len() as u32 + 1;
        let lead = (0xffu16 << (8 - count)) as u8 | n as u8;
        let mut out = vec![lead];
        out.extend(tail.iter().rev());
        out
    }
    let mut out = b"fLaC".to_vec();
    // STREAMINFO, the last metadata block: 34 bytes.
    out.extend([0x80, 0, 0, 34]);
    out.extend((BLOCK as u16).to_be_bytes());
    out.extend((BLOCK as u16).to_be_bytes());
    out.extend([0; 6]); // frame sizes unknown
                        // 20 bits rate, 3 bits channels-1 (0), 5 bits bps-1 (15), 36 bits total samples.
    let packed: u64 = (u64::from(rate) << 44) | (15u64 << 36) | (frames & ((1 << 36) - 1));
    out.extend(packed.to_be_bytes());
    out.extend([0; 16]); // no MD5
    let mut done = 0u64;
    let mut number = 0u64;
    while done < frames {
        let block = (frames - done).min(BLOCK);
        let mut frame = vec![0xff, 0xf8];
        // Block size from the 16-bit field at the end of the header; the rate from STREAMINFO.
        frame.push(0x70);
        // Mono, 16-bit.
        frame.push(0x08);
        frame.extend(coded_number(number));
        frame.extend(((block - 1) as u16).to_be_bytes());
        frame.push(crc8(&frame));
        frame.push(0x00); // constant subframe, no wasted bits
        frame.extend(value.to_be_bytes());
        let crc = crc16(&frame);
        frame.extend(crc.to_be_bytes());
        out.extend(frame);
        done += block;
        number += 1;
    }
    out
}

/// This process's peak resident memory in bytes (Linux), after resetting it to the current
/// resident size when `reset`.
pub fn peak_rss(reset: bool) -> u64 {
    if reset {
        let _ = std::fs::write("/proc/self/clear_refs", "5");
    }
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}
