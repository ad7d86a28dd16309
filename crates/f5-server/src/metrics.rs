//! `GET /metrics` in the Prometheus text format (OpenMetrics, through the maintained
//! `prometheus-client` crate), and one log line per request with its id.
//!
//! Histograms and the per-endpoint request counters live as long as the server; the counters the
//! model thread already keeps for `/health` ([`Stats`]) are read at each scrape, so there is one
//! count of everything, not two that could drift.

use std::sync::atomic::Ordering;
use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::http::{HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use crate::api::AppState;
use crate::engine::Stats;

/// One request's endpoint (the route, never the raw path a client sent) and answer.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct RequestLabels {
    pub endpoint: String,
    pub status: u16,
}

/// What the model thread observes per finished job.
pub(crate) struct JobMetrics {
    /// Seconds on the model per job (a reload included).
    pub synthesis_seconds: Histogram,
    /// Seconds of audio per job.
    pub audio_seconds: Histogram,
    /// Synthesis seconds over audio seconds per job.
    pub real_time_factor: Histogram,
    /// Extra generations the listen-back check asked for.
    pub gate_retries: Counter,
    /// Chunks still misheard after their retries (before any split).
    pub gate_failures: Counter,
}

impl Default for JobMetrics {
    fn default() -> Self {
        JobMetrics {
            synthesis_seconds: Histogram::new(exponential_buckets(0.05, 2.0, 14)),
            audio_seconds: Histogram::new(exponential_buckets(0.25, 2.0, 12)),
            real_time_factor: Histogram::new(exponential_buckets(0.01, 2.0, 14)),
            gate_retries: Counter::default(),
            gate_failures: Counter::default(),
        }
    }
}

impl JobMetrics {
    /// Records a finished job: its time on the model, its audio, its listen-back cost.
    pub fn observe(&self, ran_seconds: f64, audio: &f5_synth::Audio, max_wer: f64) {
        let audio_seconds: f64 = audio.chunks.iter().map(|c| c.samples).sum::<usize>() as f64 / f5_synth::SAMPLE_RATE as f64;
        self.synthesis_seconds.observe(ran_seconds);
        self.audio_seconds.observe(audio_seconds);
        if audio_seconds > 0.0 {
            self.real_time_factor.observe(ran_seconds / audio_seconds);
        }
        for chunk in &audio.chunks {
            let whole = chunk.split.as_ref().map_or(&chunk.score, |s| &s.whole);
            self.gate_retries.inc_by(u64::from(chunk.score.attempts.saturating_sub(1)));
            if whole.checked && whole.wer.is_some_and(|w| w > max_wer) {
                self.gate_failures.inc();
            }
        }
    }
}

/// The server's own request counters.
#[derive(Default)]
pub(crate) struct RequestMetrics {
    pub requests: Family<RequestLabels, Counter>,
    pub in_flight: Gauge,
}

/// The text Prometheus scrapes.
pub(crate) fn render(state: &AppState) -> Result<String, std::fmt::Error> {
    let stats: &Stats = &state.engine.stats;
    let mut r = Registry::with_prefix("f5");
    let req = &state.metrics;
    r.register("requests", "HTTP requests answered, by endpoint and status", req.requests.clone());
    r.register("requests_in_flight", "HTTP requests being answered", req.in_flight.clone());
    r.register("queue_depth", "Jobs waiting for the model thread", ConstGauge::new(state.engine.depth() as i64));
    r.register("queue_capacity", "Jobs that may wait before new requests get 503", ConstGauge::new(state.config().queue_capacity as i64));
    r.register("model_loaded", "1 while weights are in memory", ConstGauge::new(i64::from(stats.loaded.load(Ordering::SeqCst))));
    let count = |a: &std::sync::atomic::AtomicU64| ConstCounter::new(a.load(Ordering::SeqCst));
    r.register("model_loads", "Weights read from disk (start, reloads, switches)", count(&stats.loads));
    r.register("model_unloads", "Weights dropped after the idle limit", count(&stats.unloads));
    r.register("model_switches", "Weights exchanged for another model", count(&stats.switches));
    r.register("jobs_done", "Jobs that produced audio", count(&stats.jobs_done));
    r.register("jobs_failed", "Jobs the server failed", count(&stats.jobs_failed));
    r.register("jobs_cancelled", "Jobs stopped because their client went away", count(&stats.jobs_cancelled));
    let jobs = &stats.job_metrics;
    r.register("synthesis_seconds", "Seconds on the model per job", jobs.synthesis_seconds.clone());
    r.register("audio_seconds", "Seconds of audio per job", jobs.audio_seconds.clone());
    r.register("real_time_factor", "Synthesis seconds per second of audio, per job", jobs.real_time_factor.clone());
    r.register("gate_retries", "Chunks generated again because the listen-back check misheard them", jobs.gate_retries.clone());
    r.register("gate_failures", "Chunks still misheard after their retries", jobs.gate_failures.clone());
    if let Some(bytes) = resident_bytes() {
        r.register("process_resident_memory_bytes", "Resident memory of the server process", ConstGauge::new(bytes));
    }
    let mut out = String::new();
    encode(&mut out, &r)?;
    Ok(out)
}

/// `VmRSS` of this process (Linux); `None` elsewhere.
fn resident_bytes() -> Option<i64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: i64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// A request id as a client may send it (`X-Request-Id`): short and plain, else a new one.
fn request_id(given: Option<&HeaderValue>) -> String {
    let valid = |s: &&str| !s.is_empty() && s.len() <= 64 && s.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    match given.and_then(|v| v.to_str().ok()).filter(valid) {
        Some(id) => id.to_string(),
        None => format!("{:016x}", f5_synth::random_seed()),
    }
}

/// How the per-request log lines look.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum LogFormat {
    /// `f5 serve: <id> POST /tts 200 812 ms model=… audio=2.10s`
    #[default]
    Text,
    /// One JSON object per line.
    Json,
    /// No per-request lines.
    Off,
}

/// Counts, times and logs every request, and echoes (or assigns) its `X-Request-Id`.
pub(crate) async fn observe(State(state): State<std::sync::Arc<AppState>>, req: Request, next: Next) -> Response {
    let started = Instant::now();
    let id = request_id(req.headers().get("x-request-id"));
    let endpoint = req.extensions().get::<MatchedPath>().map_or_else(|| "unmatched".to_string(), |p| p.as_str().to_string());
    let method = req.method().clone();
    state.metrics.in_flight.inc();
    let mut resp = next.run(req).await;
    state.metrics.in_flight.dec();
    let status = resp.status().as_u16();
    state.metrics.requests.get_or_create(&RequestLabels { endpoint: endpoint.clone(), status }).inc();
    if let Ok(v) = HeaderValue::from_str(&id) {
        resp.headers_mut().insert("x-request-id", v);
    }
    let ms = started.elapsed().as_millis();
    let header = |name: &str| resp.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_string);
    let (model, audio) = (header("x-f5-model"), header("x-f5-audio-seconds"));
    match state.config().log_format {
        LogFormat::Off => {}
        LogFormat::Text => crate::log_line!(
            "f5 serve: {id} {method} {endpoint} {status} {ms} ms{}{}",
            model.map(|m| format!(" model={m}")).unwrap_or_default(),
            audio.map(|a| format!(" audio={a}s")).unwrap_or_default()
        ),
        LogFormat::Json => crate::log_line!(
            "{}",
            serde_json::json!({ "id": id, "method": method.as_str(), "endpoint": endpoint, "status": status, "ms": ms, "model": model, "audio_seconds": audio })
        ),
    }
    resp
}

/// `GET /metrics`.
pub(crate) async fn metrics(State(state): State<std::sync::Arc<AppState>>) -> Response {
    match render(&state) {
        Ok(text) => {
            let mut resp = (StatusCode::OK, text).into_response();
            resp.headers_mut().insert(
                axum::http::header::CONTENT_TYPE,
                HeaderValue::from_static("application/openmetrics-text; version=1.0.0; charset=utf-8"),
            );
            resp
        }
        Err(_) => (StatusCode::INTERNAL_SERVER_ERROR, "cannot render the metrics").into_response(),
    }
}

/// `GET /ready`: 200 while the server takes jobs (not stopping, room in the queue), else 503 —
/// what a load balancer routes by. `/health` stays "alive".
pub(crate) async fn ready(State(state): State<std::sync::Arc<AppState>>) -> Response {
    let ready = state.engine.accepting();
    let body = axum::Json(serde_json::json!({ "ready": ready, "queue_depth": state.engine.depth() }));
    (if ready { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE }, body).into_response()
}
