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
