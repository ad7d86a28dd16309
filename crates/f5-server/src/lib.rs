//! The f5 synthesis service.
//!
//! Connections are async tasks: they spend their time on sockets, JSON and file reads. The
//! forward passes are handed to ONE model thread over a bounded queue, one job per utterance,
//! because the model's scratch buffers belong to whoever runs it: two forwards at once through
//! the same weights would corrupt each other, and a second client must wait rather than race.
//! The model thread is also the only one that lets the weights go when idle (`unload_after`),
//! loads them again before the next job, and exchanges them when a job names another of the
//! configured models: one set of weights in memory at a time.
//!
//! ```no_run
//! # async fn run() -> Result<(), f5_server::ServerError> {
//! let config = f5_server::ServerConfig::new(
//!     "model.safetensors".into(), "vocab.txt".into(), "vocos.bin".into(), "voices".into());
//! // Serves until the process ends; pass any future to stop it earlier.
//! f5_server::serve(config, std::future::pending::<()>()).await
//! # }
//! ```

mod api;
mod conn;
mod engine;
mod metrics;
mod stream;

/// Writes one line to standard error, as `eprintln!` does, but never panics: a daemon whose
/// stderr was closed (a supervisor that stopped reading, a pipe whose reader went away) must go
/// on answering; `eprintln!` panics when the write fails.
macro_rules! log_line {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr().lock(), $($arg)*);
    }};
}
pub(crate) use log_line;

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

pub use engine::PauseGuard;
/// The server's `device` setting, parsed as the pipeline parses it.
pub use f5_gpukit::DeviceChoice;
pub use metrics::LogFormat;

/// Everything `f5 serve` decides.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// Where to listen; port 0 picks a free port (see [`Server::local_addr`]).
    pub addr: SocketAddr,
    /// The default model's files (any family: see [`f5_synth::ModelFiles`]).
    pub model: f5_synth::ModelFiles,
    /// The name `GET /models` reports; `None` takes the checkpoint's directory name.
    pub model_id: Option<String>,
    /// Further models a request may name by id (`"model": …`), of any family; the model thread
    /// unloads the current weights and loads the named ones.
    pub more_models: Vec<ModelEntry>,
    /// The voice store directory (created if absent).
    pub voices_dir: PathBuf,
    /// When set, every endpoint but `/health` and the page wants `Authorization: Bearer <token>`.
    pub token: Option<String>,
    /// Free the weights after this long without a job; reload before the next one.
    pub unload_after: Option<Duration>,
    /// Jobs that may wait behind the running one before new requests get 503.
    pub queue_capacity: usize,
    /// CPU threads for the model (0 = all cores).
    pub threads: usize,
    /// Which backend runs the model (CUDA needs the `cuda` feature; a build without it refuses
    /// at start, saying so).
    pub device: DeviceChoice,
    /// Longest text one request may ask for, in UTF-8 bytes (a dialogue: all lines together).
    pub max_text_bytes: usize,
    /// Largest voice upload (the multipart body), in bytes.
    pub max_upload_bytes: usize,
    /// Largest JSON request body, in bytes.
    pub max_json_bytes: usize,
    /// A whisper.cpp-compatible transcriber (`host:port`) for the listen-back check; requests
    /// may then ask for `retries`/`max_wer`, and every answer carries its score.
    pub transcriber: Option<String>,
    /// Language of the texts for the transcriber and the word comparison.
    pub language: Option<String>,
    /// Most seconds of audio one request may make (a dialogue: all lines), estimated from the
    /// text and the voice before anything is queued.
    pub max_audio_seconds: f64,
    /// Most seconds of audio one chunk (one forward pass over the model's window) may make: a
    /// long run of text without a sentence break cannot be split and would make one huge pass.
    pub max_chunk_seconds: f64,
    /// A job still running (or waiting) this long after it was queued is stopped at its next
    /// step and answered 503.
    pub job_timeout: Duration,
    /// Voice uploads decoded at the same time; more wait their turn.
    pub max_concurrent_uploads: usize,
    /// Browser origins (`scheme://host[:port]`) besides the server's own that may make
    /// state-changing requests (POST, DELETE). Requests without an `Origin` (non-browser
    /// clients) are not affected.
    pub allowed_origins: Vec<String>,
    /// Host names (besides `localhost` and IP literals) that a request's `Host` header may name
    /// when no token is set; guards against DNS rebinding.
    pub allowed_hosts: Vec<String>,
    /// A client must send its request head within this long.
    pub header_timeout: Duration,
    /// A client must send its whole request body within this long.
    pub body_timeout: Duration,
    /// A kept-alive connection with no request in flight closes after this long.
    pub idle_timeout: Duration,
    /// Open connections at once; more wait in the kernel's accept queue.
    pub max_connections: usize,
    /// One line per request on standard error (text or JSON), or none.
    pub log_format: LogFormat,
    /// After the shutdown signal, how long accepted requests (running and queued jobs) have to
    /// finish; those not done by then are answered 503 and the server stops. `None` waits for
    /// every accepted request, however long. An orchestrator's grace period (Kubernetes'
    /// `terminationGracePeriodSeconds`) should exceed this by a few seconds.
    pub drain_timeout: Option<Duration>,
}

impl ServerConfig {
    /// The defaults `f5 serve` documents: loopback port 7860, 16 waiting jobs, 5000-byte texts,
    /// 20 MiB uploads, 256 KiB JSON bodies, no token, weights kept loaded; at most 300 s of audio
    /// per request and 40 s per chunk, 600 s per job, 2 uploads decoded at once; 10 s for a
    /// request head, 60 s for a body, 60 s idle, 256 connections.
    ///
    /// The default model is an F5 checkpoint with its vocabulary and vocoder; see
    /// [`ServerConfig::with_model`] for any family.
    pub fn new(model: PathBuf, vocab: PathBuf, vocoder: PathBuf, voices_dir: PathBuf) -> Self {
        Self::with_model(f5_synth::ModelFiles::F5 { checkpoint: model, vocab, vocoder }, voices_dir)
    }

    /// The defaults of [`ServerConfig::new`] with `model` as the default model.
    pub fn with_model(model: f5_synth::ModelFiles, voices_dir: PathBuf) -> Self {
        ServerConfig {
            addr: SocketAddr::from(([127, 0, 0, 1], 7860)),
            model,
            model_id: None,
            more_models: Vec::new(),
            voices_dir,
            token: None,
            unload_after: None,
            queue_capacity: 16,
            threads: 0,
            device: DeviceChoice::Cpu,
            max_text_bytes: 5000,
            max_upload_bytes: 20 << 20,
            max_json_bytes: 256 << 10,
            transcriber: None,
            language: None,
            max_audio_seconds: 300.0,
            max_chunk_seconds: 40.0,
            job_timeout: Duration::from_secs(600),
            max_concurrent_uploads: 2,
            allowed_origins: Vec::new(),
            allowed_hosts: Vec::new(),
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(60),
            idle_timeout: Duration::from_secs(60),
            max_connections: 256,
            log_format: LogFormat::Text,
            drain_timeout: None,
        }
    }

    /// Every model's files, the default first. An F5 model named without a vocoder speaks
    /// through the default model's.
    fn all_models(&self) -> Result<Vec<f5_synth::ModelFiles>, ServerError> {
        let mut models = vec![self.model.clone()];
        for extra in &self.more_models {
            let mut files = extra.files.clone();
            files.inherit_vocoder(&self.model).map_err(|e| ServerError::Config(e.to_string()))?;
            models.push(files);
        }
        Ok(models)
    }

    /// The ids of every model, the default first, checked to be distinct.
    fn model_ids(&self) -> Result<Vec<String>, ServerError> {
        let mut ids = vec![model_id_for(self.model_id.as_deref(), self.model.checkpoint())];
        for extra in &self.more_models {
            let id = model_id_for(extra.id.as_deref(), extra.files.checkpoint());
            if ids.contains(&id) {
                return Err(ServerError::Config(format!(
                    "two models have the id {id:?} ({}); give them distinct ids",
                    extra.files.checkpoint().display()
                )));
            }
            ids.push(id);
        }
        Ok(ids)
    }
}

/// A model besides the default one (see [`ServerConfig::more_models`]).
#[derive(Clone, Debug)]
pub struct ModelEntry {
    /// The id requests use; `None` takes the checkpoint's directory name.
    pub id: Option<String>,
    pub files: f5_synth::ModelFiles,
}

impl ModelEntry {
    /// An F5 checkpoint and its vocabulary, speaking through the default model's vocoder.
    pub fn new(model: PathBuf, vocab: PathBuf) -> Self {
        ModelEntry { id: None, files: f5_synth::ModelFiles::F5 { checkpoint: model, vocab, vocoder: PathBuf::new() } }
    }

    /// A model of any family.
    pub fn with_files(files: f5_synth::ModelFiles) -> Self {
        ModelEntry { id: None, files }
    }
}

/// A model's public id: the one given, else the checkpoint's directory name (checkpoints are
/// usually `<name>/model.safetensors`), else its file stem.
///
/// An id that names a file on this machine (an absolute or relative path) is not used as it is:
/// ids are shown to every client (`GET /models`, `/health`, `X-F5-Model`, error messages), and
/// a path there tells a remote client how the server's disk is laid out.
fn model_id_for(given: Option<&str>, model: &std::path::Path) -> String {
    if let Some(id) = given.filter(|s| !s.is_empty() && !looks_like_a_path(s)) {
        return id.to_string();
    }
    model
        .parent()
        .and_then(|p| p.file_name())
        .or_else(|| model.file_stem())
        .and_then(|s| s.to_str())
        .filter(|s| !s.is_empty())
        .unwrap_or("f5")
        .to_string()
}

/// Whether a model name given on the command line is a filesystem path rather than a local id
/// or a hub reference (`owner/repo/file`, which is relative and names no existing file).
fn looks_like_a_path(name: &str) -> bool {
    let p = std::path::Path::new(name);
    p.is_absolute() || name.starts_with('.') || name.starts_with('~') || name.contains('\\') || p.exists()
}

/// Why the server could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("invalid server setting: {0}")]
    Config(String),
    #[error("cannot listen on {addr}: {source}")]
    Bind { addr: SocketAddr, source: std::io::Error },
    #[error("cannot load the model: {0}")]
    Model(String),
    #[error(transparent)]
    Store(#[from] f5_synth::store::StoreError),
    #[error("the server failed: {0}")]
    Io(#[from] std::io::Error),
}

/// A server that has loaded its model and bound its socket but does not answer yet; splitting
/// the two lets a caller (and the tests) learn the port before serving.
pub struct Server {
    listener: tokio::net::TcpListener,
    addr: SocketAddr,
    state: Arc<api::AppState>,
    model_thread: std::thread::JoinHandle<()>,
}

impl Server {
    /// Loads the default model's weights on the model thread (so a wrong path fails here, not
    /// on the first request), checks that every further model's files exist, opens the voice
    /// store and binds the socket.
    pub async fn bind(config: ServerConfig) -> Result<Server, ServerError> {
        if config.queue_capacity == 0 {
            return Err(ServerError::Config("the queue capacity must be at least 1".into()));
        }
        if config.token.as_deref().is_some_and(str::is_empty) {
            return Err(ServerError::Config("the token is empty".into()));
        }
        if config.unload_after.is_some_and(|d| d.is_zero()) {
            return Err(ServerError::Config("unload-after must be longer than zero".into()));
        }
        for (name, seconds) in [("max-audio-seconds", config.max_audio_seconds), ("max-chunk-seconds", config.max_chunk_seconds)] {
            if !(seconds.is_finite() && seconds > 0.0) {
                return Err(ServerError::Config(format!("{name} must be a number of seconds above zero, got {seconds}")));
            }
        }
        for (name, d) in [
            ("job-timeout", config.job_timeout),
            ("header-timeout", config.header_timeout),
            ("body-timeout", config.body_timeout),
            ("idle-timeout", config.idle_timeout),
        ] {
            if d.is_zero() {
                return Err(ServerError::Config(format!("{name} must be longer than zero")));
            }
        }
        if config.max_concurrent_uploads == 0 || config.max_connections == 0 {
            return Err(ServerError::Config("the upload and connection limits must be at least 1".into()));
        }
        let model_ids = config.model_ids()?;
        let models = config.all_models()?;
        // The further models load only when first asked for; a typo in their paths should
        // still stop the start, not the first request that names them.
        for files in &models[1..] {
            if let Some(missing) = files.missing_file() {
                return Err(ServerError::Model(format!("{}: no such file", missing.display())));
            }
        }
        let store = f5_synth::VoiceStore::open(&config.voices_dir)?;
        let loader = engine::Loader {
            models: models.clone(),
            threads: config.threads,
            device: config.device,
            transcriber: config.transcriber.clone(),
            language: config.language.clone(),
        };
        let (engine, model_thread) =
            engine::Engine::start(loader, config.queue_capacity, config.unload_after).await.map_err(ServerError::Model)?;
        let listener =
            tokio::net::TcpListener::bind(config.addr).await.map_err(|source| ServerError::Bind { addr: config.addr, source })?;
        let addr = listener.local_addr()?;
        let state = Arc::new(api::AppState::new(config, model_ids, models, store, engine));
        Ok(Server { listener, addr, state, model_thread })
    }

    /// The address actually bound (the real port when the config asked for 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Holds the model thread before its next job until the guard drops. Only for tests that
    /// need a full queue without depending on how fast a synthesis runs.
    #[doc(hidden)]
    pub fn pause_jobs(&self) -> PauseGuard {
        self.state.engine.pause()
    }

    /// Answers requests until `shutdown` completes, lets the requests in flight finish (within
    /// the drain timeout, when one is set: the rest are answered 503), then stops the model
    /// thread. A drain cut off by its timeout is still a clean stop: `Ok`.
    pub async fn run(self, shutdown: impl Future<Output = ()> + Send + 'static) -> Result<(), ServerError> {
        let app = api::router(self.state.clone());
        let engine = self.state.engine.clone();
        let drain_timeout = self.state.config().drain_timeout;
        let limits = conn::Limits {
            header_timeout: self.state.config().header_timeout,
            idle_timeout: self.state.config().idle_timeout,
            max_connections: self.state.config().max_connections,
            drain_timeout,
            on_drain_over: Box::new(move || engine.cut_off()),
        };
        let drained = conn::serve(self.listener, app, limits, shutdown).await;
        self.state.engine.stop();
        if drained == conn::Drained::CutOff {
            // The model thread may be inside a forward that takes seconds more; the process
            // is ending, so it is not waited for.
            log_line!(
                "f5 serve: the drain time of {} s ran out; the requests still waiting were answered 503",
                drain_timeout.map_or(0, |d| d.as_secs())
            );
            return Ok(());
        }
        let thread = self.model_thread;
        let _ = tokio::task::spawn_blocking(move || thread.join()).await;
        Ok(())
    }
}

/// Loads, binds and serves until `shutdown` completes: what `f5 serve` runs.
pub async fn serve(config: ServerConfig, shutdown: impl Future<Output = ()> + Send + 'static) -> Result<(), ServerError> {
    Server::bind(config).await?.run(shutdown).await
}
