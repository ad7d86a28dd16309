//! Streamed answers and output formats over real HTTP: the first audio leaves before the next
//! chunk is made, a stream is the whole answer cut in pieces, a client that leaves frees the
//! model thread, and every format decodes back.

mod common;

/// The whisper.cpp stand-in of f5-verify's tests, shared rather than copied (this file uses
/// only part of it).
#[allow(dead_code)]
#[path = "../../f5-verify/tests/fake_whisper/mod.rs"]
mod fake_whisper;

use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use common::{client, start_with, VOICE};
use fake_whisper::{FakeWhisper, Reply};
use serde_json::json;

/// Several chunks on the tiny model's budget (each sentence ~150 bytes).
fn long_text() -> String {
    let sentence = "The quick brown fox jumps over the lazy dog while the small cat watches from the warm windowsill and the birds sing in the tall green trees.";
    [sentence; 6].join(" ")
}

fn body(text: &str, extra: serde_json::Value) -> serde_json::Value {
    let mut b = json!({ "voice": VOICE, "text": text, "seed": 9, "nfe": 2 });
    if let (Some(b), Some(extra)) = (b.as_object_mut(), extra.as_object()) {
        b.extend(extra.clone());
    }
    b
}

fn pcm_samples(bytes: &[u8]) -> Vec<i16> {
    bytes.chunks_exact(2).map(|p| i16::from_le_bytes([p[0], p[1]])).collect()
}

/// The order of events, not time: the transcriber (which hears each chunk right after it is
/// made) holds its answer for the second chunk until the client has read the first audio
/// bytes. A server that sends only at the end would never release it (the hold gives up after
/// a minute and says so). The stream then equals the whole answer sample for sample.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_audio_leaves_before_the_second_chunk_and_the_stream_is_the_whole_answer() {
    let (release, released) = mpsc::channel::<()>();
    let released = Arc::new(Mutex::new(released));
    let held_in_vain = Arc::new(Mutex::new(false));
    let (r, h) = (released.clone(), held_in_vain.clone());
    let mut heard = 0;
    let whisper = FakeWhisper::start(move |_, request| {
        if request.path != "/inference" {
            return Reply::Status(404);
        }
        heard += 1;
        // The transcription of chunk 2 comes after chunk 2 is made.
        if heard == 2 {
            let got = r.lock().map(|rx| rx.recv_timeout(Duration::from_secs(60)).is_ok()).unwrap_or(false);
            if !got {
                *h.lock().unwrap() = true;
            }
        }
        // One wrong word: WER 1, within the request's max_wer of 1, so nothing is regenerated
        // (an error or an empty text would make the client ask again, blurring which chunk
        // is which).
        Reply::Text("nothing".into())
    });
    let address = whisper.address().to_string();
    let s = start_with(move |c| c.transcriber = Some(address), false).await;
    let c = client();
    let text = long_text();

    let gate = json!({ "retries": 0, "max_wer": 1.0 });
    let mut r = c
        .post(s.url("/tts"))
        .json(&body(&text, json!({ "stream": true, "response_format": "pcm", "retries": 0, "max_wer": 1.0 })))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "audio/pcm");
    assert_eq!(r.headers()["x-f5-seed"], "9");
    let first = r.chunk().await.unwrap().expect("a first piece of audio");
    release.send(()).unwrap();
    let mut streamed = first.to_vec();
    while let Some(piece) = r.chunk().await.unwrap() {
        streamed.extend_from_slice(&piece);
    }
    assert!(!*held_in_vain.lock().unwrap(), "the second chunk was made before the client had any audio");
    let heard = whisper.requests().iter().filter(|r| r.path == "/inference").count();
    assert!(heard >= 2, "several chunks, each heard: {heard}");

    let mut whole_body = body(&text, json!({ "response_format": "pcm" }));
    whole_body.as_object_mut().unwrap().extend(gate.as_object().unwrap().clone());
    let whole = c.post(s.url("/tts")).json(&whole_body).send().await.unwrap();
    assert_eq!(whole.status(), 200);
    let whole = whole.bytes().await.unwrap();
    let (a, b) = (pcm_samples(&streamed), pcm_samples(&whole));
    let first_difference = a.iter().zip(&b).position(|(x, y)| x != y);
    assert!(
        a == b,
        "the stream is the whole answer, sample for sample: {} vs {} samples, first difference at {first_difference:?}",
        a.len(),
        b.len()
    );

    // The same as OpenAI's server-sent events: base64 deltas, then done.
    let mut sse_body = body(&text, json!({ "response_format": "pcm", "stream_format": "sse" }));
    sse_body.as_object_mut().unwrap().extend(gate.as_object().unwrap().clone());
    let r = c.post(s.url("/tts")).json(&sse_body).send().await.unwrap();
    assert_eq!(r.headers()["content-type"], "text/event-stream");
    let seed: u64 = r.headers()["x-f5-seed"].to_str().unwrap().parse().unwrap();
    let events = r.text().await.unwrap();
    let events: Vec<serde_json::Value> =
        events.split("\n\n").filter_map(|e| e.strip_prefix("data: ")).map(|e| serde_json::from_str(e).unwrap()).collect();
    let (last, deltas) = events.split_last().expect("events");
    assert_eq!(last["type"], "speech.audio.done", "{last}");
    assert_eq!(last["seed"], seed);
    assert!(deltas.len() >= 2 && deltas.iter().all(|e| e["type"] == "speech.audio.delta"));
    let audio: Vec<u8> =
        deltas.iter().flat_map(|e| base64::engine::general_purpose::STANDARD.decode(e["audio"].as_str().unwrap()).unwrap()).collect();
    assert_eq!(pcm_samples(&audio), b, "the events carry the same samples");
    s.shutdown().await;
}

/// A client that reads the first audio and leaves: its job stops at the next chunk and the
/// next request is answered; `/health` counts the cancelled job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_leaves_mid_stream_frees_the_model_thread() {
    let s = start_with(|_| {}, false).await;
    let c = client();
    let text = [long_text(), long_text()].join(" ");
    let mut r = c.post(s.url("/tts")).json(&body(&text, json!({ "stream": true }))).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let first = r.chunk().await.unwrap().expect("audio");
    assert!(first.starts_with(b"RIFF"), "a streamed wav starts with its header");
    drop(r);
    let after = c.post(s.url("/tts")).json(&body("A short line.", json!({}))).send().await.unwrap();
    assert_eq!(after.status(), 200);
    let h: serde_json::Value = c.get(s.url("/health")).send().await.unwrap().json().await.unwrap();
    assert_eq!(h["jobs_cancelled"], 1, "{h}");
    assert_eq!(h["jobs_done"], 1, "{h}");
    s.shutdown().await;
}

fn decode(bytes: &[u8], ext: &str) -> Vec<f32> {
    let d = f5_audio::decode::decode_bytes(bytes, "answer", Some(ext)).unwrap_or_else(|e| panic!("{ext}: {e}"));
    assert_eq!(d.sample_rate, 24_000, "{ext}");
    d.channels.into_iter().next().expect("mono")
}

/// Every format, whole and streamed, decodes back: flac and pcm to exactly the wav's samples,
/// mp3 (whole: gapless tag) to exactly its length, opus to an Ogg stream; OpenAI's endpoint
/// answers mp3 when no format is named, as OpenAI's does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_format_decodes_back_whole_and_streamed() {
    let s = start_with(|_| {}, false).await;
    let c = client();
    let text = "Hello there. This is a short test of the formats.";
    let get = |format: &'static str, stream: bool| {
        let (c, url) = (c.clone(), s.url("/tts"));
        let b = body(text, json!({ "response_format": format, "stream": stream }));
        async move {
            let r = c.post(url).json(&b).send().await.unwrap();
            assert_eq!(r.status(), 200, "{format}");
            let ct = r.headers()["content-type"].to_str().unwrap().to_string();
            (ct, r.bytes().await.unwrap().to_vec())
        }
    };
    let (ct, wav) = get("wav", false).await;
    assert_eq!(ct, "audio/wav");
    let reference = decode(&wav, "wav");
    let (ct, pcm) = get("pcm", false).await;
    assert_eq!(ct, "audio/pcm");
    let pcm: Vec<f32> = pcm_samples(&pcm).iter().map(|&v| v as f32 / 32768.0).collect();
    assert_eq!(pcm, reference);
    for stream in [false, true] {
        let (ct, flac) = get("flac", stream).await;
        assert_eq!(ct, "audio/flac");
        assert_eq!(decode(&flac, "flac"), reference, "flac (stream {stream}) is lossless");
        let (ct, wav_again) = get("wav", stream).await;
        assert_eq!(ct, "audio/wav");
        assert_eq!(decode(&wav_again, "wav"), reference, "wav (stream {stream})");
        let (ct, mp3) = get("mp3", stream).await;
        assert_eq!(ct, "audio/mpeg");
        let n = decode(&mp3, "mp3").len();
        if stream {
            // A stream carries no gapless tag: the encoder's delay in front, < one frame after.
            assert!(n >= reference.len() + 1057 && n < reference.len() + 1057 + 576 * 2, "{n} vs {}", reference.len());
        } else {
            assert_eq!(n, reference.len(), "a whole mp3 keeps the exact length");
        }
        let (ct, opus) = get("opus", stream).await;
        assert_eq!(ct, "audio/opus");
        assert!(opus.starts_with(b"OggS") && opus.windows(8).any(|w| w == b"OpusHead"), "an Ogg Opus stream");
    }
    let r = c.post(s.url("/v1/audio/speech")).json(&json!({ "model": "tts-1", "voice": VOICE, "input": text })).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "audio/mpeg");
    // OpenAI's streaming events from its own endpoint.
    let r = c
        .post(s.url("/v1/audio/speech"))
        .json(&json!({ "model": "tts-1", "voice": VOICE, "input": text, "response_format": "wav", "stream_format": "sse" }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["content-type"], "text/event-stream");
    let events = r.text().await.unwrap();
    assert!(events.starts_with("data: {") && events.contains("speech.audio.delta") && events.trim_end().ends_with('}'));
    assert!(events.contains("\"type\":\"speech.audio.done\""), "{events}");
    let r = c.post(s.url("/tts")).json(&body(text, json!({ "response_format": "aac" }))).send().await.unwrap();
    assert_eq!(r.status(), 400);
    let e: serde_json::Value = r.json().await.unwrap();
    assert!(e["error"]["message"].as_str().unwrap().contains("aac"), "{e}");
    s.shutdown().await;
}

/// A dialogue streams line after line, with the pauses, and equals its whole answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dialogue_streams_as_its_whole_answer() {
    let s = start_with(|_| {}, false).await;
    let c = client();
    let lines = json!([{ "voice": VOICE, "text": "First line here." }, { "voice": VOICE, "text": "And the second one." }]);
    let whole =
        c.post(s.url("/dialogue")).json(&json!({ "lines": lines, "seed": 4, "nfe": 2, "response_format": "pcm" })).send().await.unwrap();
    assert_eq!(whole.status(), 200);
    let whole = whole.bytes().await.unwrap();
    let streamed = c
        .post(s.url("/dialogue"))
        .json(&json!({ "lines": lines, "seed": 4, "nfe": 2, "response_format": "pcm", "stream": true }))
        .send()
        .await
        .unwrap();
    assert_eq!(streamed.status(), 200);
    assert_eq!(streamed.headers()["x-f5-seed"], "4,5");
    assert_eq!(pcm_samples(&streamed.bytes().await.unwrap()), pcm_samples(&whole));
    s.shutdown().await;
}
