//! Streamed answers: each chunk's samples go out as soon as the model thread has made them
//! final (after its cross-fade), encoded in the asked format, either as the raw body
//! (`stream_format: "audio"`) or as OpenAI's server-sent events (`"sse"`: `speech.audio.delta`
//! with base64 audio, then `speech.audio.done`).
//!
//! The model thread hands blocks over a bounded channel. A client that goes away drops the
//! body, and with it the channel's receiver: the model thread's next hand-over fails and the job
//! stops there (the next job starts without waiting for the abandoned one).

use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use f5_audio::encode::{AudioFormat, StreamEncoder};
use f5_synth::{SpeakOptions, VoiceRef, SAMPLE_RATE};
use serde_json::json;
use tokio::sync::{mpsc, oneshot};

use crate::api::{job_error, ApiError, AppState};
use crate::engine::{Admission, JobError, JobOutput, JobSpec};

/// How a streamed answer is framed.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Framing {
    /// The encoded audio as the chunked body.
    Audio,
    /// Server-sent events as OpenAI's speech endpoint sends them.
    Sse,
}

impl Framing {
    /// OpenAI's `stream_format`.
    pub(crate) fn from_name(name: &str) -> Result<Framing, ApiError> {
        match name {
            "audio" => Ok(Framing::Audio),
            "sse" => Ok(Framing::Sse),
            other => Err(ApiError::bad(format!(
                "stream_format {:?} is not supported: use audio or sse",
                other.chars().take(16).collect::<String>()
            ))),
        }
    }
}

/// Blocks in flight between the model thread and the connection: a few chunks' worth, so a
/// slow client holds the model thread back instead of growing memory.
const BLOCKS_IN_FLIGHT: usize = 8;

/// Queues `text` as one streamed job and answers as soon as its first samples (or its error)
/// are known: an error before any audio is an ordinary error answer; after that, the stream
/// simply ends (SSE: with an `error` event).
pub(crate) async fn stream(
    state: &Arc<AppState>,
    voice: VoiceRef,
    model: usize,
    text: String,
    mut options: SpeakOptions,
    format: AudioFormat,
    framing: Framing,
) -> Result<Response, ApiError> {
    // The seed is chosen here, so the header can carry it before the audio is done.
    let seed = *options.seed.get_or_insert_with(f5_synth::random_seed);
    // A streamed answer starts with a short first chunk (Kokoro; F5 ignores it).
    options.quick_start = true;
    let (tx, rx) = mpsc::channel::<Vec<f32>>(BLOCKS_IN_FLIGHT);
    let deadline = Instant::now() + state.config().job_timeout;
    let spec = JobSpec { model, voice, text, options, deadline, stream: Some(tx) };
    let reply = state.engine.submit(spec, Admission::New).map_err(|full| ApiError::queue_full(full.retry_after_s))?;
    respond(state, model, rx, reply, &[seed], format, framing).await
}

/// One line of a streamed dialogue: its voice, text and options, and the silence after it.
pub(crate) struct Line {
    pub voice: VoiceRef,
    pub text: String,
    pub options: SpeakOptions,
    pub gap_after: usize,
}

/// A dialogue as one stream: each line is its own job (so other clients' requests interleave),
/// queued when the previous one is done, its samples and the pause after it sent as they come.
pub(crate) async fn stream_dialogue(
    state: &Arc<AppState>,
    model: usize,
    mut lines: Vec<Line>,
    format: AudioFormat,
    framing: Framing,
) -> Result<Response, ApiError> {
    let seeds: Vec<u64> = lines.iter_mut().map(|l| *l.options.seed.get_or_insert_with(f5_synth::random_seed)).collect();
    if let Some(first) = lines.first_mut() {
        // The first line starts the stream: its first audio comes after one short chunk.
        first.options.quick_start = true;
    }
    let (tx, rx) = mpsc::channel::<Vec<f32>>(BLOCKS_IN_FLIGHT);
    let (done_tx, done_rx) = oneshot::channel();
    // The first line is queued here, so a full queue is an ordinary 503.
    let mut lines = lines.into_iter();
    let Some(first) = lines.next() else { return Err(ApiError::bad("the dialogue has no lines")) };
    let first_gap = first.gap_after;
    let deadline = Instant::now() + state.config().job_timeout;
    let spec = JobSpec { model, voice: first.voice, text: first.text, options: first.options, deadline, stream: Some(tx.clone()) };
    let first_reply = state.engine.submit(spec, Admission::New).map_err(|full| ApiError::queue_full(full.retry_after_s))?;
    let driver_state = state.clone();
    tokio::spawn(async move {
        let state = driver_state;
        let rest: Vec<Line> = lines.collect();
        let count = rest.len() + 1;
        let mut whole: Option<JobOutput> = None;
        let mut pending = Some((first_reply, first_gap));
        let mut rest = rest.into_iter();
        for i in 0..count {
            let (reply, gap_after) = match pending.take() {
                Some(first) => first,
                None => {
                    let Some(line) = rest.next() else { break };
                    let deadline = Instant::now() + state.config().job_timeout;
                    let spec =
                        JobSpec { model, voice: line.voice, text: line.text, options: line.options, deadline, stream: Some(tx.clone()) };
                    // Later lines of an admitted dialogue are never refused.
                    match state.engine.submit(spec, Admission::Continuation) {
                        Ok(reply) => (reply, line.gap_after),
                        Err(_) => {
                            let _ = done_tx.send(Err(JobError::Failed("a dialogue line could not be queued".into())));
                            return;
                        }
                    }
                }
            };
            let out = match reply.await {
                Ok(Ok(out)) => out,
                Ok(Err(e)) => {
                    let _ = done_tx.send(Err(e));
                    return;
                }
                Err(_) => {
                    let _ = done_tx.send(Err(JobError::Cancelled));
                    return;
                }
            };
            if i + 1 < count && gap_after > 0 && tx.send(vec![0.0f32; gap_after]).await.is_err() {
                let _ = done_tx.send(Err(JobError::Cancelled));
                return;
            }
            match &mut whole {
                None => whole = Some(out),
                Some(w) => w.audio.chunks.extend(out.audio.chunks),
            }
        }
        drop(tx);
        let _ = done_tx.send(whole.ok_or_else(|| JobError::Rejected("the dialogue has no lines".into())));
    });
    respond(state, model, rx, done_rx, &seeds, format, framing).await
}

/// The answer for blocks arriving on `rx`, ended by `ending`.
async fn respond(
    state: &Arc<AppState>,
    model: usize,
    mut rx: mpsc::Receiver<Vec<f32>>,
    reply: oneshot::Receiver<Result<JobOutput, JobError>>,
    seeds: &[u64],
    format: AudioFormat,
    framing: Framing,
) -> Result<Response, ApiError> {
    let mut encoder = StreamEncoder::new(format, SAMPLE_RATE, 1).map_err(ApiError::internal)?;
    // Wait for the first block: until then a failure can still be a proper status.
    // Before the status is sent, a shutdown's drain running out is still a proper 503.
    let first_block = tokio::select! {
        block = rx.recv() => block,
        _ = state.engine.drain_over() => return Err(job_error(state, JobError::ShuttingDown)),
    };
    let (first, ending) = match first_block {
        Some(block) => (block, Ending::Pending(reply)),
        None => match reply.await {
            // The job ended without a sample (nothing to say): an empty but valid answer.
            Ok(Ok(out)) => (Vec::new(), Ending::Known(Ok(out))),
            Ok(Err(e)) => return Err(job_error(state, e)),
            Err(_) => return Err(ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "the server is stopping")),
        },
    };
    let head = encoder.push(&first).map_err(ApiError::internal)?;
    let frame = move |bytes: Vec<u8>| -> Vec<u8> {
        match framing {
            Framing::Audio => bytes,
            Framing::Sse if bytes.is_empty() => bytes,
            Framing::Sse => {
                let audio = base64::engine::general_purpose::STANDARD.encode(&bytes);
                format!("data: {}\n\n", json!({ "type": "speech.audio.delta", "audio": audio })).into_bytes()
            }
        }
    };
    struct Flow {
        rx: mpsc::Receiver<Vec<f32>>,
        encoder: StreamEncoder,
        ending: Option<Ending>,
        first: Option<Vec<u8>>,
    }
    let flow = Flow { rx, encoder, ending: Some(ending), first: Some(head) };
    let body = futures_util::stream::unfold(flow, move |mut flow| async move {
        if let Some(first) = flow.first.take() {
            return Some((Ok::<_, std::io::Error>(frame(first)), flow));
        }
        loop {
            match flow.rx.recv().await {
                Some(block) => {
                    let bytes = match flow.encoder.push(&block) {
                        Ok(b) => b,
                        Err(e) => return Some((Err(std::io::Error::other(e.to_string())), flow)),
                    };
                    if !bytes.is_empty() {
                        return Some((Ok(frame(bytes)), flow));
                    }
                }
                None => {
                    let outcome = match flow.ending.take()? {
                        Ending::Known(outcome) => outcome,
                        Ending::Pending(reply) => reply.await.unwrap_or(Err(JobError::Cancelled)),
                    };
                    let mut tail = match (&outcome, flow.encoder.finish()) {
                        (Ok(_), Ok(bytes)) => frame(bytes),
                        _ => Vec::new(),
                    };
                    if framing == Framing::Sse {
                        let event = match outcome {
                            Ok(out) => json!({
                                "type": "speech.audio.done",
                                "usage": { "input_tokens": 0, "output_tokens": 0, "total_tokens": 0 },
                                "seed": out.audio.seed,
                                "chunks": out.audio.chunks.len(),
                            }),
                            Err(e) => json!({ "type": "error", "error": { "message": stream_error_message(e) } }),
                        };
                        tail.extend(format!("data: {event}\n\n").into_bytes());
                    } else if let Err(e) = outcome {
                        // The status is long sent: end the body early so the client sees a cut.
                        return Some((Err(std::io::Error::other(stream_error_message(e))), flow));
                    }
                    return if tail.is_empty() { None } else { Some((Ok(tail), flow)) };
                }
            }
        }
    });
    let mut resp = (StatusCode::OK, Body::from_stream(body)).into_response();
    let h = resp.headers_mut();
    let content_type = match framing {
        Framing::Audio => format.mime_type(),
        Framing::Sse => "text/event-stream",
    };
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    let seeds = seeds.iter().map(u64::to_string).collect::<Vec<_>>().join(",");
    if let Ok(v) = HeaderValue::from_str(&seeds) {
        h.insert("x-f5-seed", v);
    }
    if let Ok(v) = HeaderValue::from_str(state.model_id(model)) {
        h.insert("x-f5-model", v);
    }
    h.insert("x-f5-stream", HeaderValue::from_static("1"));
    Ok(resp)
}

/// How a stream's job ends: already known (it ended before its first sample), or still to come.
enum Ending {
    Known(Result<JobOutput, JobError>),
    Pending(oneshot::Receiver<Result<JobOutput, JobError>>),
}

/// What a client is told when its stream breaks off (never a server path: failures are logged).
fn stream_error_message(e: JobError) -> String {
    match e {
        JobError::Rejected(m) => m,
        JobError::TimedOut => "the job ran past this server's time limit".into(),
        JobError::Cancelled => "the job was cancelled".into(),
        JobError::ShuttingDown => "this server is shutting down and its drain time ran out".into(),
        JobError::Failed(m) => {
            crate::log_line!("f5 serve: internal error in a stream: {m}");
            "internal server error; the server log has the details".into()
        }
    }
}
