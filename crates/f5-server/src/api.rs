//! The HTTP surface: routes, request parsing and limits, the token check, errors as JSON.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use axum::extract::rejection::PathRejection;
use axum::extract::{DefaultBodyLimit, FromRequest, Multipart, Path, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use f5_audio::encode::AudioFormat;
use f5_synth::store::StoreError;
use f5_synth::{ModelFiles, SpeakOptions, SynthError, VoiceCache, VoiceRef, VoiceStore, SAMPLE_RATE};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::json;

use crate::engine::{Admission, Engine, JobError, JobOutput, JobSpec};
use crate::ServerConfig;

/// The loudness references are normalised to before the model hears them (the reference's
/// `target_rms`).
const TARGET_RMS: f32 = 0.1;
/// More ODE steps than this buys nothing audible and lets one request hold the model for long.
const MAX_NFE: usize = 128;
/// Lines in one dialogue request.
const MAX_DIALOGUE_LINES: usize = 64;
/// The longest pause a dialogue may put between lines, seconds.
const MAX_PAUSE_SECONDS: f64 = 5.0;
/// Speaking rates every endpoint accepts (OpenAI's range): slower stretches the audio, and so
/// the time on the model, without bound; faster than 4× is not speech.
const SPEED_RANGE: std::ops::RangeInclusive<f64> = 0.25..=4.0;
/// Classifier-free guidance: the reference uses 2; far outside this the output is noise or
/// overflows to NaN.
const CFG_RANGE: std::ops::RangeInclusive<f32> = 0.0..=10.0;
/// Sway sampling: beyond ±1 the time grid stops being monotone (|coef| > 1 folds it back).
const SWAY_RANGE: std::ops::RangeInclusive<f32> = -1.0..=1.0;

const PAGE: &str = include_str!("page.html");

pub(crate) struct AppState {
    config: ServerConfig,
    /// Every model's id, the default first; a job's model is an index into this list.
    model_ids: Vec<String>,
    /// Every model's files, in the order of `model_ids`: what each family offers is known
    /// without loading it.
    models: Vec<ModelFiles>,
    store: VoiceStore,
    voices: VoiceCache,
    pub engine: Arc<Engine>,
    requests: AtomicU64,
    /// Uploads being decoded; each may hold its form and a reference's worth of samples.
    uploads: tokio::sync::Semaphore,
    /// Requests by endpoint and status, for `/metrics`.
    pub metrics: crate::metrics::RequestMetrics,
}

impl AppState {
    pub fn new(config: ServerConfig, model_ids: Vec<String>, models: Vec<ModelFiles>, store: VoiceStore, engine: Arc<Engine>) -> Self {
        let uploads = tokio::sync::Semaphore::new(config.max_concurrent_uploads);
        AppState {
            config,
            model_ids,
            models,
            store,
            voices: VoiceCache::default(),
            engine,
            requests: AtomicU64::new(0),
            uploads,
            metrics: Default::default(),
        }
    }

    pub fn config(&self) -> &ServerConfig {
        &self.config
    }

    pub(crate) fn model_id(&self, index: usize) -> &str {
        self.model_ids.get(index).map(String::as_str).unwrap_or_default()
    }

    /// The model a request names (the default when it names none), or a 400 that lists the
    /// ids this server knows. A family name (`f5`, `f5-tts`, `kokoro`) means the first model of
    /// that family; OpenAI's model names mean the default model.
    fn model_index(&self, asked: Option<&str>) -> Result<usize, ApiError> {
        const OPENAI_MODELS: [&str; 3] = ["tts-1", "tts-1-hd", "gpt-4o-mini-tts"];
        let Some(asked) = asked else { return Ok(0) };
        if let Some(i) = self.model_ids.iter().position(|id| id == asked) {
            return Ok(i);
        }
        if OPENAI_MODELS.contains(&asked) {
            return Ok(0);
        }
        let family = match asked.to_ascii_lowercase().as_str() {
            "f5" | "f5-tts" | "f5tts" => Some("f5"),
            "kokoro" | "kokoro-82m" => Some("kokoro"),
            _ => None,
        };
        if let Some(i) = family.and_then(|f| self.models.iter().position(|m| m.family() == f)) {
            return Ok(i);
        }
        self.model_ids.iter().position(|id| id == asked).ok_or_else(|| {
            ApiError::bad(format!(
                "unknown model {:?}: this server runs {} (GET /models)",
                asked.chars().take(64).collect::<String>(),
                self.model_ids.iter().map(|id| format!("{id:?}")).collect::<Vec<_>>().join(", ")
            ))
        })
    }
}

type Shared = Arc<AppState>;

pub(crate) fn router(state: Shared) -> Router {
    // Uploads get their own (larger) body limit; the route-level layer is closer to the
    // handler than the router-wide one, so it is the one that applies.
    let upload_limit = upload_form_limit(&state.config);
    Router::new()
        .route("/", get(page))
        .route("/health", get(health))
        .route("/ready", get(crate::metrics::ready))
        .route("/metrics", get(crate::metrics::metrics))
        .route("/models", get(models))
        .route("/tts", post(tts))
        .route("/dialogue", post(dialogue))
        .route("/v1/audio/speech", post(openai_speech))
        .route("/v1/audio/voices", get(openai_voices))
        .route("/v1/models", get(openai_models))
        .route("/voices", get(list_voices).post(add_voice).layer(DefaultBodyLimit::max(upload_limit)))
        .route("/voices/{id}", delete(delete_voice))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn_with_state(state.clone(), require_token))
        .layer(middleware::from_fn_with_state(state.clone(), same_site_only))
        .layer(middleware::from_fn_with_state(state.clone(), crate::metrics::observe))
        .layer(DefaultBodyLimit::max(state.config.max_json_bytes))
        .with_state(state)
}

/// A voice upload's form: the recording plus room for the id, the transcript and the form's
/// own framing.
fn upload_form_limit(config: &ServerConfig) -> usize {
    config.max_upload_bytes.saturating_add(64 << 10)
}

// ── errors ──────────────────────────────────────────────────────────────────────────────

/// An error answer, as OpenAI's API writes them: `{"error": {"message", "type", "param",
/// "code"}}` with its status.
#[derive(Debug)]
pub(crate) struct ApiError {
    status: StatusCode,
    message: String,
    retry_after_s: Option<u64>,
}

impl ApiError {
    pub(crate) fn new(status: StatusCode, message: impl Into<String>) -> Self {
        ApiError { status, message: message.into(), retry_after_s: None }
    }
    pub(crate) fn bad(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }
    /// The queue is full: come back after `retry_after_s`.
    pub(crate) fn queue_full(retry_after_s: u64) -> Self {
        ApiError {
            status: StatusCode::SERVICE_UNAVAILABLE,
            message: "the synthesis queue is full; retry later".into(),
            retry_after_s: Some(retry_after_s),
        }
    }
    /// A fault of the server's own. The client learns only that it happened: the detail (which
    /// may name files, devices or internals) goes to the server's log.
    pub(crate) fn internal(detail: impl std::fmt::Display) -> Self {
        crate::log_line!("f5 serve: internal error: {detail}");
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "internal server error; the server log has the details")
    }
    fn too_large(message: impl Into<String>) -> Self {
        Self::new(StatusCode::PAYLOAD_TOO_LARGE, message)
    }
}

/// A blocking task that did not finish (it panicked or the runtime is stopping).
fn join_error(e: tokio::task::JoinError) -> ApiError {
    ApiError::internal(format!("a blocking task failed: {e}"))
}

/// The status follows from the kind of store error: the request's mistakes are 4xx, the
/// store's own failures 500.
impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::InvalidId(_)
            | StoreError::UnsupportedType(_)
            | StoreError::EmptyTranscript
            | StoreError::TranscriptTooLong(_)
            | StoreError::Unusable(_) => ApiError::bad(e.to_string()),
            StoreError::AudioTooLarge(_) | StoreError::AudioTooLong(_) => ApiError::too_large(e.to_string()),
            StoreError::Exists(_) => ApiError::new(StatusCode::CONFLICT, e.to_string()),
            StoreError::NotFound(_) => ApiError::new(StatusCode::NOT_FOUND, e.to_string()),
            StoreError::Io { .. } => ApiError::internal(e),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        // OpenAI's shape, so its clients show the message rather than only the status.
        let kind = match self.status.as_u16() {
            401 => "authentication_error",
            429 | 503 => "rate_limit_error",
            400..=499 => "invalid_request_error",
            _ => "server_error",
        };
        let body = json!({ "error": { "message": self.message, "type": kind, "param": null, "code": null } });
        let mut resp = (self.status, Json(body)).into_response();
        if let Some(s) = self.retry_after_s {
            resp.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        if self.status == StatusCode::UNAUTHORIZED {
            resp.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        resp
    }
}

async fn not_found() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "no such endpoint")
}

async fn method_not_allowed() -> ApiError {
    ApiError::new(StatusCode::METHOD_NOT_ALLOWED, "method not allowed on this endpoint")
}

/// A JSON body whose every failure (too large, not JSON, wrong fields) is answered as JSON.
struct JsonBody<T>(T);

/// How far past the JSON limit the server keeps reading (and dropping) an oversized body so
/// that the client, still sending, gets to read the 413 rather than a reset connection. Bodies
/// larger than this are cut off: the server will not read without bound.
const DRAIN_FACTOR: usize = 16;

impl<T: DeserializeOwned> FromRequest<Shared> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &Shared) -> Result<Self, ApiError> {
        // A browser page on another site can send a "simple" cross-site POST (text/plain, form
        // types) without asking first; it cannot send application/json without a preflight
        // this server never approves. So JSON bodies must say they are JSON.
        if !is_json(req.headers()) {
            return Err(ApiError::new(StatusCode::UNSUPPORTED_MEDIA_TYPE, "send the body as JSON with Content-Type: application/json"));
        }
        let limit = state.config.max_json_bytes;
        let read = read_body_capped(req.into_body(), limit, limit.saturating_mul(DRAIN_FACTOR), "send less text per request");
        let bytes = within_body_timeout(state, read).await?;
        serde_json::from_slice(&bytes).map(JsonBody).map_err(|e| ApiError::bad(format!("malformed JSON body: {e}")))
    }
}

fn is_json(headers: &HeaderMap) -> bool {
    let Some(value) = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()) else { return false };
    value.split(';').next().is_some_and(|essence| essence.trim().eq_ignore_ascii_case("application/json"))
}

/// A body must arrive whole within `body_timeout`: a client trickling bytes would otherwise hold
/// its connection (and, for an upload, an upload slot) for as long as it likes.
async fn within_body_timeout(
    state: &AppState,
    read: impl std::future::Future<Output = Result<Vec<u8>, ApiError>>,
) -> Result<Vec<u8>, ApiError> {
    let limit = state.config.body_timeout;
    tokio::time::timeout(limit, read).await.unwrap_or_else(|_| {
        Err(ApiError::new(StatusCode::REQUEST_TIMEOUT, format!("the request body did not arrive within {} s", limit.as_secs())))
    })
}

/// Reads a body of at most `limit` bytes. A larger one is refused with 413, but only after
/// reading on to its end (or to `drain_limit`), because answering while the client is still
/// writing makes most HTTP clients report a broken pipe instead of the answer.
async fn read_body_capped(mut body: axum::body::Body, limit: usize, drain_limit: usize, advice: &str) -> Result<Vec<u8>, ApiError> {
    use axum::body::HttpBody;
    let mut kept = Vec::new();
    let mut seen = 0usize;
    loop {
        let frame = std::future::poll_fn(|cx| std::pin::Pin::new(&mut body).poll_frame(cx)).await;
        let Some(frame) = frame else { break };
        let frame = frame.map_err(|e| ApiError::bad(format!("could not read the request body: {e}")))?;
        let Ok(data) = frame.into_data() else { continue };
        seen = seen.saturating_add(data.len());
        if seen <= limit {
            kept.extend_from_slice(&data);
        } else if seen > drain_limit {
            break;
        }
    }
    if seen > limit {
        return Err(ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, format!("the request body is over the limit of {limit} bytes; {advice}")));
    }
    Ok(kept)
}

// ── browsers on other sites ─────────────────────────────────────────────────────────────

/// Two defences against web pages the server's user happens to visit.
///
/// DNS rebinding: a page on `evil.example` re-points its own name at 127.0.0.1 and then talks
/// to this server as "same origin". Its requests still carry `Host: evil.example`, so without a
/// token (which such a page cannot know) the `Host` must be a name this server answers to:
/// `localhost`, an IP literal, or one given with `--allowed-host`.
///
/// Cross-site requests: any page can make the browser POST to `http://127.0.0.1:7860`. A
/// state-changing request (anything but GET/HEAD/OPTIONS) whose `Origin` is neither this server
/// (`http(s)://` + its `Host`) nor one given with `--allow-origin` is refused. Clients that are
/// not browsers send no `Origin` and are not affected.
/// An early refusal, answered after reading the request's body (up to the largest body the
/// server accepts anywhere): a server that answers and closes while a client is still sending
/// makes the client see a broken connection instead of the answer (hyper's IncompleteMessage,
/// a browser's network error). A larger body is not read; the answer goes out regardless.
async fn refuse(state: &Shared, req: Request, error: ApiError) -> Response {
    let most = upload_form_limit(&state.config).max(state.config.max_json_bytes);
    let _ = axum::body::to_bytes(req.into_body(), most).await;
    error.into_response()
}

async fn same_site_only(State(state): State<Shared>, req: Request, next: Next) -> Response {
    let host = req.headers().get(header::HOST).and_then(|h| h.to_str().ok()).unwrap_or_default().to_string();
    if state.config.token.is_none() && !host.is_empty() && !host_allowed(&host, &state.config.allowed_hosts) {
        let shown: String = host.chars().take(80).collect();
        let error = ApiError::new(
            StatusCode::MISDIRECTED_REQUEST,
            format!("this server does not answer to the host name {shown:?}; start it with --allowed-host NAME or --token"),
        );
        return refuse(&state, req, error).await;
    }
    let changes_state = !matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS);
    if changes_state {
        if let Some(origin) = req.headers().get(header::ORIGIN) {
            let origin = origin.to_str().unwrap_or_default().trim_end_matches('/');
            let own = ["http://", "https://"].iter().any(|scheme| {
                origin.len() == scheme.len() + host.len()
                    && origin.get(..scheme.len()).is_some_and(|p| p.eq_ignore_ascii_case(scheme))
                    && origin.get(scheme.len()..).is_some_and(|h| h.eq_ignore_ascii_case(&host))
            });
            let allowed = state.config.allowed_origins.iter().any(|a| a.trim_end_matches('/').eq_ignore_ascii_case(origin));
            if !(own || allowed) {
                let shown: String = origin.chars().take(80).collect();
                let error = ApiError::new(
                    StatusCode::FORBIDDEN,
                    format!("requests from the web page at {shown:?} may not change anything here; start the server with --allow-origin to permit it"),
                );
                return refuse(&state, req, error).await;
            }
        }
    }
    next.run(req).await
}

/// Whether a `Host` header (`name[:port]`, `[v6]:port`) names this server.
fn host_allowed(host: &str, allowed: &[String]) -> bool {
    let name = match host.strip_prefix('[') {
        Some(rest) => rest.split(']').next().unwrap_or_default(),
        None => match host.rsplit_once(':') {
            Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
            _ => host,
        },
    };
    let name = name.trim_end_matches('.');
    name.eq_ignore_ascii_case("localhost")
        || name.parse::<std::net::IpAddr>().is_ok()
        || allowed.iter().any(|a| a.trim_end_matches('.').eq_ignore_ascii_case(name))
}

// ── the token ───────────────────────────────────────────────────────────────────────────

/// With a token configured, every endpoint wants it as a bearer header except `/health` and
/// `/ready` (for load balancers and supervisors) and the page, which asks for the token (or
/// takes it from a link's `?token=…`) and sends it as a bearer header on every call. The API
/// never takes it from the URL: tokens in URLs end up in every proxy's and server's access log.
async fn require_token(State(state): State<Shared>, req: Request, next: Next) -> Response {
    let Some(token) = state.config.token.as_deref() else {
        return next.run(req).await;
    };
    let is_get = req.method() == Method::GET;
    let path = req.uri().path();
    // Supervisors and load balancers carry no token: liveness and readiness stay open. So does
    // the page, which holds no data: a browser opening it without the token gets a form that
    // asks for it (and keeps it in the browser) instead of a JSON error.
    let open = is_get && (path == "/health" || path == "/ready" || path == "/");
    if open || header_token_matches(req.headers(), token) {
        return next.run(req).await;
    }
    refuse(&state, req, ApiError::new(StatusCode::UNAUTHORIZED, "missing or wrong bearer token")).await
}

fn header_token_matches(headers: &HeaderMap, token: &str) -> bool {
    let Some(value) = headers.get(header::AUTHORIZATION).map(|v| v.as_bytes()) else {
        return false;
    };
    // The scheme name is case-insensitive; the token is not.
    let Some(given) = value.get(..7).filter(|s| s.eq_ignore_ascii_case(b"bearer ")).and_then(|_| value.get(7..)) else {
        return false;
    };
    same_secret(given, token.as_bytes())
}

/// Constant time in the content; only the length can show.
fn same_secret(given: &[u8], token: &[u8]) -> bool {
    use subtle::ConstantTimeEq;
    given.ct_eq(token).into()
}

// ── small endpoints ─────────────────────────────────────────────────────────────────────

/// The page; it is not cached, since with a token it was fetched with a secret in its URL.
async fn page() -> Response {
    let mut resp = Html(PAGE).into_response();
    resp.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp.headers_mut().insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    resp
}

/// Open to all (supervisors and load balancers carry no token), so with a token configured a
/// caller without it learns only that the server is alive and whether it takes jobs; the
/// counters and the model's name are for callers with the token.
async fn health(State(state): State<Shared>, headers: HeaderMap) -> Json<serde_json::Value> {
    let ready = state.engine.accepting();
    if let Some(token) = state.config.token.as_deref() {
        if !header_token_matches(&headers, token) {
            return Json(json!({ "status": "ok", "ready": ready }));
        }
    }
    let s = &state.engine.stats;
    Json(json!({
        "status": "ok",
        "ready": ready,
        "model": state.model_id(s.current.load(Ordering::SeqCst)),
        "loaded": s.loaded.load(Ordering::SeqCst),
        "queue_depth": state.engine.depth(),
        "queue_capacity": state.config.queue_capacity,
        "loads": s.loads.load(Ordering::SeqCst),
        "unloads": s.unloads.load(Ordering::SeqCst),
        "switches": s.switches.load(Ordering::SeqCst),
        "requests": state.requests.load(Ordering::SeqCst),
        "jobs_done": s.jobs_done.load(Ordering::SeqCst),
        "jobs_failed": s.jobs_failed.load(Ordering::SeqCst),
        "jobs_cancelled": s.jobs_cancelled.load(Ordering::SeqCst),
    }))
}

/// Every model a request may name; the first is the default.
async fn models(State(state): State<Shared>) -> Json<serde_json::Value> {
    let stats = &state.engine.stats;
    let loaded = stats.loaded.load(Ordering::SeqCst).then(|| stats.current.load(Ordering::SeqCst));
    let list: Vec<_> = state
        .model_ids
        .iter()
        .zip(&state.models)
        .enumerate()
        .map(|(i, (id, files))| {
            json!({
                "id": id,
                "family": files.family(),
                "loaded": loaded == Some(i),
                "default": i == 0,
                // Families that clone take a voice from the store (GET /voices); the others
                // speak in these named voices, or mixes of them such as "a(2)+b".
                "clones_from_recording": files.clones_from_recording(),
                "voices": files.voices(),
                "languages": files.languages(),
            })
        })
        .collect();
    Json(json!({ "models": list }))
}

/// `GET /v1/models`, as OpenAI lists models: the server's ids, then the names it also takes
/// (each family's name for its first model, OpenAI's for the default).
async fn openai_models(State(state): State<Shared>) -> Json<serde_json::Value> {
    let mut ids: Vec<String> = state.model_ids.clone();
    for family in ["f5", "kokoro"] {
        if state.models.iter().any(|m| m.family() == family) && !ids.iter().any(|i| i == family) {
            ids.push(family.to_string());
        }
    }
    ids.extend(["tts-1", "tts-1-hd", "gpt-4o-mini-tts"].map(String::from));
    let data: Vec<_> = ids.iter().map(|id| json!({ "id": id, "object": "model", "created": 0, "owned_by": "f5" })).collect();
    Json(json!({ "object": "list", "data": data }))
}

/// `GET /v1/audio/voices`: every voice a request may name, the models' named voices and the
/// store's recordings, as Kokoro-FastAPI lists them (`{"voices": [...]}`).
async fn openai_voices(State(state): State<Shared>) -> Result<Json<serde_json::Value>, ApiError> {
    let store = state.store.clone();
    let stored = tokio::task::spawn_blocking(move || store.list()).await.map_err(join_error)??;
    let mut names: Vec<String> = state.models.iter().flat_map(|m| m.voices()).collect();
    names.sort();
    names.dedup();
    names.extend(stored.into_iter().map(|v| v.id));
    Ok(Json(json!({ "voices": names })))
}

async fn list_voices(State(state): State<Shared>) -> Result<Json<serde_json::Value>, ApiError> {
    let store = state.store.clone();
    let voices = tokio::task::spawn_blocking(move || store.list()).await.map_err(join_error)??;
    let list: Vec<_> = voices.into_iter().map(|v| json!({ "id": v.id, "transcript": v.transcript })).collect();
    // The recordings of the store (for models that clone), and each other model's named voices.
    let named: Vec<_> = state
        .model_ids
        .iter()
        .zip(&state.models)
        .filter(|(_, m)| !m.clones_from_recording())
        .map(|(id, m)| json!({ "model": id, "voices": m.voices() }))
        .collect();
    Ok(Json(json!({ "voices": list, "named": named })))
}

async fn delete_voice(State(state): State<Shared>, id: Result<Path<String>, PathRejection>) -> Result<StatusCode, ApiError> {
    let Path(id) = id.map_err(|e| ApiError::bad(e.body_text()))?;
    check_voice_id(&id)?;
    let store = state.store.clone();
    tokio::task::spawn_blocking(move || store.remove(&id)).await.map_err(join_error)??;
    Ok(StatusCode::NO_CONTENT)
}

fn check_voice_id(id: &str) -> Result<(), ApiError> {
    if f5_synth::valid_id(id) {
        return Ok(());
    }
    let shown: String = id.chars().take(80).collect();
    Err(ApiError::bad(format!("invalid voice id {shown:?}: use 1–64 letters, digits, '_' or '-'")))
}

/// `POST /voices`: multipart fields `id`, `transcript`, `audio` (a file), optional `replace`.
/// Everything is checked — the id, the transcript, that the audio decodes and holds enough
/// voice to clone — before the store writes anything.
async fn add_voice(State(state): State<Shared>, req: Request) -> Result<(StatusCode, Json<serde_json::Value>), ApiError> {
    // The whole form is read first, so an oversized one is answered with 413 after the client
    // has finished sending (see `read_body_capped`).
    // Each upload in flight holds its form and, while decoding, a reference's worth of samples:
    // a few at a time bound the memory uploads can take together.
    let _permit = state.uploads.acquire().await.map_err(|_| ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "the server is stopping"))?;
    let form_limit = upload_form_limit(&state.config);
    let (parts, body) = req.into_parts();
    let read = read_body_capped(body, form_limit, form_limit.saturating_mul(4), "use a shorter recording (10 s is plenty)");
    let form = within_body_timeout(&state, read).await?;
    let req = Request::from_parts(parts, axum::body::Body::from(form));
    let mut multipart = Multipart::from_request(req, &state).await.map_err(|e| ApiError::new(e.status(), e.body_text()))?;
    let (mut id, mut transcript, mut audio, mut replace) = (None, None, None, false);
    let mut extension = None;
    while let Some(field) = multipart.next_field().await.map_err(|e| ApiError::new(e.status(), e.body_text()))? {
        let name = field.name().unwrap_or_default().to_string();
        match name.as_str() {
            "audio" => {
                extension = audio_extension(field.file_name(), field.content_type());
                let bytes = field.bytes().await.map_err(|e| ApiError::new(e.status(), e.body_text()))?;
                if bytes.len() > state.config.max_upload_bytes {
                    return Err(ApiError::new(
                        StatusCode::PAYLOAD_TOO_LARGE,
                        format!("the recording is {} bytes; the limit is {}", bytes.len(), state.config.max_upload_bytes),
                    ));
                }
                audio = Some(bytes);
            }
            "id" | "transcript" | "replace" => {
                let text = field.text().await.map_err(|e| ApiError::new(e.status(), e.body_text()))?;
                match name.as_str() {
                    "id" => id = Some(text),
                    "transcript" => transcript = Some(text),
                    _ => replace = matches!(text.trim(), "1" | "true" | "yes" | "on"),
                }
            }
            other => {
                return Err(ApiError::bad(format!(
                    "unknown field {:?}: send id, transcript and audio",
                    other.chars().take(40).collect::<String>()
                )))
            }
        }
    }
    let id = id.ok_or_else(|| ApiError::bad("the field \"id\" is missing"))?;
    // Without a transcript a configured transcriber hears the recording.
    let transcript = match (transcript, &state.config.transcriber) {
        (Some(t), _) => Some(t),
        (None, Some(_)) => None,
        (None, None) => return Err(ApiError::bad("the field \"transcript\" is missing")),
    };
    let audio = audio.ok_or_else(|| ApiError::bad("the file field \"audio\" is missing"))?;
    check_voice_id(&id)?;
    if let Some(transcript) = &transcript {
        if transcript.trim().is_empty() {
            return Err(ApiError::bad("the transcript is empty: give the words spoken in the recording"));
        }
        if transcript.len() > f5_synth::store::MAX_TRANSCRIPT_BYTES {
            return Err(ApiError::bad(format!(
                "the transcript is {} bytes; the limit is {}",
                transcript.len(),
                f5_synth::store::MAX_TRANSCRIPT_BYTES
            )));
        }
    }
    let extension = extension.unwrap_or("wav");
    let store = state.store.clone();
    let transcriber = state.config.transcriber.clone().map(|addr| (addr, state.config.language.clone()));
    // The store decodes the recording once, at most a reference's worth of it, and checks that
    // it makes a usable voice before anything is written. A recording whose speech the ≤ 12 s
    // rule cuts is refused by it, unless a transcriber can give the kept part its transcript.
    let (entry, clipped) = tokio::task::spawn_blocking(move || {
        let heard = match &transcriber {
            Some((addr, language)) => transcribe_kept_part(&audio, extension, transcript.as_deref(), addr, language.clone())?,
            None => None,
        };
        Ok::<_, ApiError>(match (heard, transcript) {
            (Some(h), _) => {
                let (bytes, ext) = match &h.kept_wav {
                    Some(wav) => (wav.as_slice(), "wav"),
                    None => (&audio[..], extension),
                };
                (store.add(&id, &h.transcript, bytes, ext, replace)?, Some((h.clipped, true)))
            }
            (None, Some(t)) => (store.add(&id, &t, &audio, extension, replace)?, None),
            // Not decodable or too short to prepare: the store says why.
            (None, None) => (store.add(&id, "…", &audio, extension, replace)?, None),
        })
    })
    .await
    .map_err(join_error)??;
    let mut answer = json!({ "id": entry.id, "transcript": entry.transcript });
    if clipped.is_some() {
        answer["transcribed"] = json!(true);
    }
    if let Some(c) = clipped.and_then(|(c, _)| c) {
        answer["clipped"] = json!({
            "message": format!("{}; the transcript is what the transcriber heard in the kept part", c.describe()),
            "speech_seconds": c.speech_seconds, "kept_seconds": c.kept_seconds,
        });
    }
    Ok((StatusCode::CREATED, Json(answer)))
}

/// What a transcriber heard in an upload: the transcript, and for a recording the ≤ 12 s rule
/// cut, the kept part as a wav to store instead.
struct Heard {
    transcript: String,
    kept_wav: Option<Vec<u8>>,
    clipped: Option<f5_synth::Clipped>,
}

/// `None` when the transcriber is not needed: a transcript was given and the recording is
/// whole (it is stored as sent), or the recording is unusable (the store then says why). Else
/// what the transcriber heard in the part that is kept. A cut recording's kept part is stored
/// instead of it, so the stored voice and its transcript match; its last 50 ms (the silence the
/// clip appends) are left off so that clipping it again keeps all of it.
fn transcribe_kept_part(
    audio: &[u8],
    extension: &str,
    transcript: Option<&str>,
    addr: &str,
    language: Option<String>,
) -> Result<Option<Heard>, ApiError> {
    let limit = f5_audio::decode::DecodeLimit::REFERENCE;
    let Ok(decoded) = f5_audio::decode::decode_bytes_limited(audio, "the recording", Some(extension), limit) else {
        return Ok(None);
    };
    // A placeholder stands in for a missing transcript until the transcriber's replaces it.
    let Ok(voice) = f5_synth::Voice::prepare(&decoded.audio, transcript.unwrap_or("…"), f5_audio::level::TARGET_RMS) else {
        return Ok(None);
    };
    if transcript.is_some() && voice.clipped.is_none() {
        return Ok(None);
    }
    let clipped = voice.clipped;
    let said = clipped.map(|c| format!("{}; ", c.describe())).unwrap_or_default();
    let unusable = |m: String| ApiError::bad(format!("{said}{m}"));
    let transcriber = f5_verify::Transcriber::new(addr, language).map_err(|e| unusable(format!("the transcriber {addr}: {e}")))?;
    let heard = f5_verify::Transcribe::transcribe(&transcriber, &voice.wave, 24_000)
        .map_err(|e| unusable(format!("the transcriber {addr}: {e}")))?
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty())
        .ok_or_else(|| unusable(format!("the transcriber {addr} gave no transcript: send the transcript (of 3–12 s of speech)")))?;
    let kept_wav = match clipped {
        Some(_) => {
            let keep = voice.wave.len().saturating_sub(24_000 / 20);
            Some(
                f5_verify::wav_bytes(&voice.wave[..keep], 24_000)
                    .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?,
            )
        }
        None => None,
    };
    Ok(Some(Heard { transcript: heard, kept_wav, clipped }))
}

/// The container of an upload, from its file name or else its content type.
fn audio_extension(file_name: Option<&str>, content_type: Option<&str>) -> Option<&'static str> {
    let from_name = file_name.and_then(|n| n.rsplit_once('.')).map(|(_, e)| e.to_ascii_lowercase());
    let by_name = match from_name.as_deref() {
        Some("wav") | Some("wave") => Some("wav"),
        Some("mp3") => Some("mp3"),
        Some("flac") => Some("flac"),
        Some("ogg") | Some("oga") => Some("ogg"),
        _ => None,
    };
    by_name.or(match content_type.map(|c| c.split(';').next().unwrap_or_default().trim().to_ascii_lowercase()).as_deref() {
        Some("audio/wav") | Some("audio/x-wav") | Some("audio/wave") | Some("audio/vnd.wave") => Some("wav"),
        Some("audio/mpeg") | Some("audio/mp3") => Some("mp3"),
        Some("audio/flac") | Some("audio/x-flac") => Some("flac"),
        Some("audio/ogg") => Some("ogg"),
        _ => None,
    })
}

// ── synthesis ───────────────────────────────────────────────────────────────────────────

/// The options every synthesis request may carry.
#[derive(Deserialize, Default)]
struct Knobs {
    nfe: Option<usize>,
    cfg: Option<f32>,
    sway: Option<f32>,
    speed: Option<f64>,
    seed: Option<u64>,
    cross_fade: Option<f64>,
    retries: Option<u32>,
    max_wer: Option<f64>,
    model: Option<String>,
    /// Kokoro: the front end's language (default from the voice's first letter).
    lang: Option<String>,
    /// Listen back: split a chunk still misheard after its retries into sentences (default on).
    split_on_fail: Option<bool>,
    /// wav (the default of /tts), pcm, mp3, opus or flac (`format` is the same).
    #[serde(alias = "format")]
    response_format: Option<String>,
    /// Send each chunk as soon as it is final.
    stream: Option<bool>,
    /// With streaming: `audio` (the raw body, the default) or `sse` (OpenAI's events).
    stream_format: Option<String>,
    /// Kokoro: answer JSON with the audio (base64) and when each word is spoken.
    timestamps: Option<bool>,
}

impl Knobs {
    /// The output format asked for, else `default`.
    fn format(&self, default: AudioFormat) -> Result<AudioFormat, ApiError> {
        match &self.response_format {
            None => Ok(default),
            Some(name) => AudioFormat::from_name(name).map_err(|e| ApiError::bad(e.to_string())),
        }
    }

    /// How to stream, when streaming was asked for (`stream: true`, or any `stream_format`).
    fn streaming(&self) -> Result<Option<crate::stream::Framing>, ApiError> {
        match (&self.stream_format, self.stream) {
            (Some(f), Some(false)) => Err(ApiError::bad(format!("stream_format {f:?} needs \"stream\": true (or leave stream out)"))),
            (Some(f), _) => crate::stream::Framing::from_name(f).map(Some),
            (None, Some(true)) => Ok(Some(crate::stream::Framing::Audio)),
            (None, _) => Ok(None),
        }
    }
}

#[derive(Deserialize)]
struct TtsRequest {
    voice: String,
    text: String,
    #[serde(flatten)]
    knobs: Knobs,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DialogueLine {
    voice: String,
    text: String,
    seed: Option<u64>,
}

#[derive(Deserialize)]
struct DialogueRequest {
    lines: Vec<DialogueLine>,
    /// Silence between lines, seconds (default: by each line's final punctuation).
    pause: Option<f64>,
    #[serde(flatten)]
    knobs: Knobs,
}

/// What OpenAI's `audio.speech.create` sends; fields it may add later are ignored.
#[derive(Deserialize)]
struct SpeechRequest {
    model: String,
    input: String,
    voice: String,
    response_format: Option<String>,
    speed: Option<f64>,
    /// `audio` or `sse`: stream the answer (OpenAI's streaming formats).
    stream_format: Option<String>,
    /// Also accepted here, as on /tts.
    stream: Option<bool>,
}

impl Knobs {
    /// The request's options. Options only one family understands stay unset unless the
    /// request gives them, so the family that cannot honour one refuses it by name.
    fn options(&self, state: &AppState) -> Result<SpeakOptions, ApiError> {
        if state.config.transcriber.is_none() && (self.retries.is_some_and(|r| r > 0) || self.max_wer.is_some()) {
            return Err(ApiError::new(
                StatusCode::NOT_IMPLEMENTED,
                "the listen-back check (retries, max_wer) needs a transcriber: start the server with --transcriber host:port",
            ));
        }
        let mut options = SpeakOptions::default();
        let retries = self.retries.unwrap_or(options.retries);
        let max_wer = self.max_wer.unwrap_or(options.max_wer);
        if f5_verify::Gate::new(retries, max_wer).is_err() {
            return Err(ApiError::bad(format!(
                "retries must be at most {} and max_wer a number >= 0, got {retries} and {max_wer}",
                f5_verify::MAX_GATE_RETRIES
            )));
        }
        if let Some(nfe) = self.nfe.filter(|&n| n == 0 || n > MAX_NFE) {
            return Err(ApiError::bad(format!("nfe must be between 1 and {MAX_NFE}, got {nfe}")));
        }
        let speed = check_speed(self.speed.unwrap_or(1.0))?;
        if let Some(cross_fade) = self.cross_fade.filter(|c| !(c.is_finite() && (0.0..=5.0).contains(c))) {
            return Err(ApiError::bad(format!("cross_fade must be between 0 and 5 s, got {cross_fade}")));
        }
        if let Some(cfg) = self.cfg.filter(|c| !CFG_RANGE.contains(c)) {
            return Err(ApiError::bad(format!("cfg must be between {} and {}, got {cfg}", CFG_RANGE.start(), CFG_RANGE.end())));
        }
        if let Some(sway) = self.sway.filter(|s| !SWAY_RANGE.contains(s)) {
            return Err(ApiError::bad(format!("sway must be between {} and {}, got {sway}", SWAY_RANGE.start(), SWAY_RANGE.end())));
        }
        options.retries = retries;
        options.max_wer = max_wer;
        options.nfe = self.nfe;
        options.cfg = self.cfg;
        // 0 is the plain grid, as on the command line.
        options.sway = self.sway;
        options.speed = speed;
        options.seed = self.seed;
        options.cross_fade = self.cross_fade;
        options.lang = self.lang.clone();
        options.split_on_fail = self.split_on_fail.unwrap_or(true);
        Ok(options)
    }
}

/// One speed range for every endpoint.
fn check_speed(speed: f64) -> Result<f64, ApiError> {
    if !SPEED_RANGE.contains(&speed) {
        return Err(ApiError::bad(format!("speed must be between {} and {}, got {speed}", SPEED_RANGE.start(), SPEED_RANGE.end())));
    }
    Ok(speed)
}

/// Seconds of audio `text` would make in `voice` at `speed` on model `model`: the total and
/// the longest chunk, by the pipeline's own estimate. Checked before a job is queued, so a
/// request that would hold the model for too long is refused at once.
fn planned_seconds(state: &AppState, model: usize, voice: &VoiceRef, text: &str, speed: f64) -> (f64, f64) {
    state.models.get(model).map_or((0.0, 0.0), |m| m.planned_seconds(voice, text, speed))
}

/// Refuses, with 413, work over the server's audio limits.
fn check_planned(state: &AppState, total: f64, longest_chunk: f64) -> Result<(), ApiError> {
    let config = &state.config;
    if longest_chunk > config.max_chunk_seconds {
        return Err(ApiError::too_large(format!(
            "a stretch of the text without a sentence break would make about {longest_chunk:.0} s of audio in one piece; this server makes at most {:.0} s per piece: add punctuation",
            config.max_chunk_seconds
        )));
    }
    if total > config.max_audio_seconds {
        return Err(ApiError::too_large(format!(
            "the text would make about {total:.0} s of audio; this server makes at most {:.0} s per request",
            config.max_audio_seconds
        )));
    }
    Ok(())
}

fn check_text(state: &AppState, text: &str) -> Result<(), ApiError> {
    if text.trim().is_empty() {
        return Err(ApiError::bad("the text to speak is empty"));
    }
    if text.len() > state.config.max_text_bytes {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("the text is {} bytes; this server takes at most {}", text.len(), state.config.max_text_bytes),
        ));
    }
    Ok(())
}

/// The voice a request names for model `model`: for a family that clones, the stored voice
/// `id`, prepared (decoded, clipped, mel) off the async workers and cached; otherwise one of the
/// model's named voices or a mix of them, checked before anything is queued (a hub model's
/// voice pack is fetched here). A voice that cannot be used is answered naming the voice, never
/// a file of the server's.
async fn load_voice(state: &Shared, model: usize, id: &str) -> Result<VoiceRef, ApiError> {
    let Some(files) = state.models.get(model).cloned() else { return Err(ApiError::internal(format!("no model number {model}"))) };
    if !files.clones_from_recording() {
        let name = id.to_string();
        if name.len() > 256 {
            return Err(ApiError::bad("the voice name is longer than 256 bytes"));
        }
        return tokio::task::spawn_blocking(move || match files.check_voice_name(&name) {
            Ok(()) => Ok(VoiceRef::Named(name)),
            Err(e) if e.is_caller_error() => Err(ApiError::bad(e.to_string())),
            Err(other) => Err(ApiError::internal(format!("voice {name:?}: {other}"))),
        })
        .await
        .map_err(join_error)?;
    }
    check_voice_id(id)?;
    let state = state.clone();
    let id = id.to_string();
    let unusable = |id: &str, m: &str| ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, format!("voice {id:?} cannot be used: {m}"));
    tokio::task::spawn_blocking(move || {
        let (entry, bytes) = match state.store.read(&id) {
            Ok(read) => read,
            Err(StoreError::Unusable(m)) => return Err(unusable(&id, &m)),
            Err(e) => return Err(ApiError::from(e)),
        };
        let extension = entry.audio.extension().and_then(|e| e.to_str());
        state.voices.load(&bytes, extension, &entry.transcript, TARGET_RMS).map(VoiceRef::Recording).map_err(|e| match e {
            SynthError::Reference(m) => unusable(&id, &m),
            other => ApiError::internal(format!("voice {id:?}: {other}")),
        })
    })
    .await
    .map_err(join_error)?
}

/// Queues one job and waits for it. The job must be done `job_timeout` after it was queued.
async fn speak(
    state: &Shared,
    voice: VoiceRef,
    model: usize,
    text: String,
    options: SpeakOptions,
    admission: Admission,
) -> Result<JobOutput, ApiError> {
    let deadline = std::time::Instant::now() + state.config.job_timeout;
    let spec = JobSpec { model, voice, text, options, deadline, stream: None };
    let rx = state.engine.submit(spec, admission).map_err(|full| ApiError::queue_full(full.retry_after_s))?;
    // A shutdown's drain time running out answers at once, whatever the model thread is in the
    // middle of: the client gets a 503 it can retry elsewhere, never a dropped connection.
    let reply = tokio::select! {
        reply = rx => reply,
        _ = state.engine.drain_over() => return Err(job_error(state, JobError::ShuttingDown)),
    };
    match reply {
        Ok(Ok(out)) => Ok(out),
        Ok(Err(e)) => Err(job_error(state, e)),
        Err(_) => Err(ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "the server is stopping")),
    }
}

/// The answer for a job that did not produce audio.
pub(crate) fn job_error(state: &AppState, e: JobError) -> ApiError {
    match e {
        JobError::Rejected(m) => ApiError::bad(m),
        JobError::Failed(m) => ApiError::internal(m),
        JobError::TimedOut => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("the job ran past this server's limit of {} s; send less text or fewer steps", state.config.job_timeout.as_secs()),
        ),
        // Only sent when the client is gone; nobody reads this.
        JobError::Cancelled => ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "the job was cancelled"),
        JobError::ShuttingDown => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "this server is shutting down and its drain time ran out before the job was done; send the request again",
        ),
    }
}

/// Scales the wave down once when it would clip 16 bits, rather than clipping it.
fn limited(mut wave: Vec<f64>) -> Vec<f64> {
    f5_audio::level::limit_peak_f64(&mut wave, 1.0);
    wave
}

/// Headers that say what the server did: the seeds (to reproduce the answer), the lengths,
/// the time in queue and on the model.
fn audio_response(
    state: &AppState,
    body: Vec<u8>,
    content_type: &'static str,
    seeds: &[u64],
    outputs: &[&JobOutput],
    seconds: f64,
) -> Response {
    let seeds = seeds.iter().map(u64::to_string).collect::<Vec<_>>().join(",");
    let waited: u128 = outputs.iter().map(|o| o.waited.as_millis()).sum();
    let ran: u128 = outputs.iter().map(|o| o.ran.as_millis()).sum();
    let chunks: usize = outputs.iter().map(|o| o.audio.chunks.len()).sum();
    let mut resp = (StatusCode::OK, body).into_response();
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    let mut put = |name: &'static str, value: String| {
        if let Ok(v) = HeaderValue::from_str(&value) {
            h.insert(name, v);
        }
    };
    put("x-f5-seed", seeds);
    put("x-f5-model", state.model_id(outputs.first().map_or(0, |o| o.model)).to_string());
    put("x-f5-audio-seconds", format!("{seconds:.3}"));
    put("x-f5-chunks", chunks.to_string());
    put("x-f5-queue-ms", waited.to_string());
    put("x-f5-synth-ms", ran.to_string());
    let total: f5_synth::TotalScore = outputs.iter().flat_map(|o| o.audio.chunks.iter().map(|c| &c.score)).collect();
    if state.config.transcriber.is_none() {
        put("x-f5-verified", "no".into());
    } else {
        put("x-f5-verified", if total.unchecked == 0 { "yes" } else { "partly" }.into());
        put(
            "x-f5-score",
            format!(
                "words={} errors={} attempts={} regenerated={} unchecked={}",
                total.words, total.errors, total.attempts, total.regenerated, total.unchecked
            ),
        );
        if let Some(w) = total.wer() {
            put("x-f5-wer", format!("{w:.4}"));
        }
        // Chunks still misheard after their retries, generated again sentence by sentence.
        let split = outputs.iter().flat_map(|o| o.audio.chunks.iter()).filter(|c| c.split.is_some()).count();
        put("x-f5-split", split.to_string());
    }
    resp
}

async fn tts(State(state): State<Shared>, JsonBody(req): JsonBody<TtsRequest>) -> Result<Response, ApiError> {
    state.requests.fetch_add(1, Ordering::SeqCst);
    check_text(&state, &req.text)?;
    let model = state.model_index(req.knobs.model.as_deref())?;
    let mut options = req.knobs.options(&state)?;
    let format = req.knobs.format(AudioFormat::Wav)?;
    let streaming = req.knobs.streaming()?;
    let timestamps = req.knobs.timestamps.unwrap_or(false);
    if timestamps && streaming.is_some() {
        return Err(ApiError::bad("timestamps come with the whole answer: leave out stream or timestamps"));
    }
    options.word_timestamps = timestamps;
    let voice = load_voice(&state, model, &req.voice).await?;
    let (total, longest) = planned_seconds(&state, model, &voice, &req.text, options.speed);
    check_planned(&state, total, longest)?;
    if let Some(framing) = streaming {
        return crate::stream::stream(&state, voice, model, req.text, options, format, framing).await;
    }
    let out = speak(&state, voice, model, req.text, options, Admission::New).await?;
    let wave = limited(out.audio.samples.iter().map(|&x| x as f64).collect());
    let body = encoded(format, &wave)?;
    if timestamps {
        // Kokoro-FastAPI's captioned speech: the audio in base64 and the words' times.
        use base64::Engine as _;
        let words: Vec<_> = out.audio.words.iter().map(|w| json!({ "word": w.word, "start_time": w.start, "end_time": w.end })).collect();
        let answer = json!({
            "audio": base64::engine::general_purpose::STANDARD.encode(&body),
            "audio_format": format.name(),
            "timestamps": words,
            "seed": out.audio.seed,
        });
        let mut resp = audio_response(&state, Vec::new(), format.mime_type(), &[out.audio.seed], &[&out], out.audio.seconds());
        *resp.body_mut() = axum::body::Body::from(answer.to_string());
        resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        return Ok(resp);
    }
    Ok(audio_response(&state, body, format.mime_type(), &[out.audio.seed], &[&out], out.audio.seconds()))
}

/// The whole answer in `format` (16-bit samples by the one conversion rule; the length exact).
fn encoded(format: AudioFormat, wave: &[f64]) -> Result<Vec<u8>, ApiError> {
    f5_audio::encode::encode_whole_f64(format, wave, SAMPLE_RATE, 1).map_err(ApiError::internal)
}

/// `POST /dialogue`: each line is its own job, answered in turn, so other clients' requests
/// interleave with a long dialogue instead of waiting for all of it.
async fn dialogue(State(state): State<Shared>, JsonBody(req): JsonBody<DialogueRequest>) -> Result<Response, ApiError> {
    state.requests.fetch_add(1, Ordering::SeqCst);
    if req.lines.is_empty() {
        return Err(ApiError::bad("the dialogue has no lines"));
    }
    if req.lines.len() > MAX_DIALOGUE_LINES {
        return Err(ApiError::bad(format!("the dialogue has {} lines; the limit is {MAX_DIALOGUE_LINES}", req.lines.len())));
    }
    let total: usize = req.lines.iter().map(|l| l.text.len()).sum();
    if total > state.config.max_text_bytes {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("the dialogue is {total} bytes of text; this server takes at most {}", state.config.max_text_bytes),
        ));
    }
    for line in &req.lines {
        check_text(&state, &line.text)?;
    }
    // Without an explicit pause, each line is followed by the pause its final punctuation asks
    // for (f5_synth::trailing_pause_ms), as Synthesizer::dialogue does.
    if let Some(pause) = req.pause {
        if !(pause.is_finite() && (0.0..=MAX_PAUSE_SECONDS).contains(&pause)) {
            return Err(ApiError::bad(format!("pause must be between 0 and {MAX_PAUSE_SECONDS} s, got {pause}")));
        }
    }
    let model = state.model_index(req.knobs.model.as_deref())?;
    let options = req.knobs.options(&state)?;
    // Every voice is checked before the first line is queued, so a typo in line 7 does not
    // cost six syntheses.
    let mut voices = Vec::with_capacity(req.lines.len());
    let (mut total, mut longest) = (0.0f64, 0.0f64);
    for line in &req.lines {
        let voice = load_voice(&state, model, &line.voice).await?;
        let (t, l) = planned_seconds(&state, model, &voice, &line.text, options.speed);
        total += t;
        longest = longest.max(l);
        voices.push(voice);
    }
    check_planned(&state, total, longest)?;
    let fixed_gap = req.pause.map(|p| (p * SAMPLE_RATE as f64).round() as usize);
    let format = req.knobs.format(AudioFormat::Wav)?;
    if let Some(framing) = req.knobs.streaming()? {
        let lines = req
            .lines
            .into_iter()
            .zip(voices)
            .enumerate()
            .map(|(i, (line, voice))| {
                let mut line_options = options.clone();
                line_options.seed = line.seed.or(options.seed.map(|s| s.wrapping_add(i as u64)));
                let gap_after = fixed_gap.unwrap_or_else(|| f5_synth::trailing_pause_ms(&line.text) as usize * SAMPLE_RATE as usize / 1000);
                crate::stream::Line { voice, text: line.text, options: line_options, gap_after }
            })
            .collect();
        return crate::stream::stream_dialogue(&state, model, lines, format, framing).await;
    }
    let mut wave = Vec::new();
    let mut previous_gap = 0usize;
    let mut outputs = Vec::with_capacity(req.lines.len());
    for (i, (line, voice)) in req.lines.into_iter().zip(voices).enumerate() {
        // A request seed gives each line its own reproducible seed.
        let seed = line.seed.or(options.seed.map(|s| s.wrapping_add(i as u64)));
        let admission = if i == 0 { Admission::New } else { Admission::Continuation };
        let gap_after = fixed_gap.unwrap_or_else(|| f5_synth::trailing_pause_ms(&line.text) as usize * SAMPLE_RATE as usize / 1000);
        let mut line_options = options.clone();
        line_options.seed = seed;
        let out = speak(&state, voice, model, line.text, line_options, admission).await?;
        if i > 0 {
            wave.extend(std::iter::repeat_n(0.0f64, previous_gap));
        }
        previous_gap = gap_after;
        wave.extend(out.audio.samples.iter().map(|&x| x as f64));
        outputs.push(out);
    }
    let seconds = wave.len() as f64 / SAMPLE_RATE as f64;
    let body = encoded(format, &limited(wave))?;
    let seeds: Vec<u64> = outputs.iter().map(|o| o.audio.seed).collect();
    let refs: Vec<&JobOutput> = outputs.iter().collect();
    Ok(audio_response(&state, body, format.mime_type(), &seeds, &refs, seconds))
}

/// `POST /v1/audio/speech`, as OpenAI's API takes it. OpenAI's model names stand for this
/// server's default model, so clients written for OpenAI work unchanged; the server's own ids
/// pick a model.
async fn openai_speech(State(state): State<Shared>, JsonBody(req): JsonBody<SpeechRequest>) -> Result<Response, ApiError> {
    state.requests.fetch_add(1, Ordering::SeqCst);
    let model = state.model_index(Some(&req.model))?;
    // OpenAI's default is mp3.
    let format = match &req.response_format {
        None => AudioFormat::Mp3,
        Some(name) => AudioFormat::from_name(name).map_err(|e| ApiError::bad(e.to_string()))?,
    };
    let streaming = match (&req.stream_format, req.stream) {
        (Some(f), _) => Some(crate::stream::Framing::from_name(f)?),
        (None, Some(true)) => Some(crate::stream::Framing::Audio),
        (None, _) => None,
    };
    let speed = check_speed(req.speed.unwrap_or(1.0))?;
    check_text(&state, &req.input)?;
    let mut options = SpeakOptions::default();
    options.speed = speed;
    let voice = load_voice(&state, model, &req.voice).await?;
    let (total, longest) = planned_seconds(&state, model, &voice, &req.input, speed);
    check_planned(&state, total, longest)?;
    if let Some(framing) = streaming {
        return crate::stream::stream(&state, voice, model, req.input, options, format, framing).await;
    }
    let out = speak(&state, voice, model, req.input, options, Admission::New).await?;
    let wave = limited(out.audio.samples.iter().map(|&x| x as f64).collect());
    let body = encoded(format, &wave)?;
    Ok(audio_response(&state, body, format.mime_type(), &[out.audio.seed], &[&out], out.audio.seconds()))
}
