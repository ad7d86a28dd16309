//! The server over real HTTP on a loopback port, with the tiny fixture model.

mod common;

use std::time::Duration;

use common::*;
use reqwest::multipart::{Form, Part};
use serde_json::json;

async fn error_of(r: reqwest::Response) -> (u16, String) {
    let status = r.status().as_u16();
    let ct = r.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
    let body: serde_json::Value = r.json().await.unwrap_or_else(|e| panic!("status {status}: the error body is not JSON ({ct}): {e}"));
    let msg = body["error"]["message"].as_str().unwrap_or_else(|| panic!("no error.message in {body}")).to_string();
    let kind = body["error"]["type"].as_str().unwrap_or_else(|| panic!("no error.type in {body}"));
    assert_eq!(kind == "server_error", status >= 500 && status != 503, "{status} answered as {kind}");
    (status, msg)
}

fn upload_form(id: &str, transcript: &str, audio: Vec<u8>, file_name: &str) -> Form {
    Form::new()
        .text("id", id.to_string())
        .text("transcript", transcript.to_string())
        .part("audio", Part::bytes(audio).file_name(file_name.to_string()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_endpoint_answers_and_refuses() {
    let s = start().await;
    let c = client();

    // /health and /models
    let h = health(&c, &s).await;
    assert_eq!(h["loaded"], true);
    assert_eq!(h["queue_depth"], 0);
    assert_eq!(h["loads"], 1);
    let models: serde_json::Value = c.get(s.url("/models")).send().await.unwrap().json().await.unwrap();
    assert_eq!(models["models"][0]["id"], "f5-tiny-v1");

    // GET /: one page, its script inline, nothing fetched from elsewhere.
    let page = c.get(s.url("/")).send().await.unwrap();
    assert_eq!(page.status(), 200);
    assert!(page.headers()["content-type"].to_str().unwrap().starts_with("text/html"));
    let html = page.text().await.unwrap();
    assert!(html.contains("<audio") && html.contains("<script>") && html.contains("fetch(\"tts\""));
    assert!(!html.contains("http://") && !html.contains("https://") && !html.contains("src=\""), "no external resources");

    // GET /voices
    let voices: serde_json::Value = c.get(s.url("/voices")).send().await.unwrap().json().await.unwrap();
    assert_eq!(voices["voices"], json!([{ "id": VOICE, "transcript": TRANSCRIPT }]));

    // POST /tts: a wav, with the seed asked for and the timings in headers.
    let r = c.post(s.url("/tts")).json(&tts_body("Hello there.", 7)).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "audio/wav");
    assert_eq!(r.headers()["x-f5-seed"], "7");
    assert_eq!(r.headers()["x-f5-model"], "f5-tiny-v1");
    for h in ["x-f5-audio-seconds", "x-f5-synth-ms", "x-f5-queue-ms", "x-f5-chunks"] {
        assert!(r.headers().contains_key(h), "{h}");
    }
    let first = r.bytes().await.unwrap();
    assert!(wav_samples(&first) > 0);
    // The same request again is the same audio.
    let again = c.post(s.url("/tts")).json(&tts_body("Hello there.", 7)).send().await.unwrap().bytes().await.unwrap();
    assert_eq!(first, again);

    // POST /tts refusals
    let cases = [
        (json!({ "voice": "nobody", "text": "Hi." }), 404),
        (json!({ "voice": "../birch", "text": "Hi." }), 400),
        (json!({ "voice": VOICE, "text": "   " }), 400),
        (json!({ "voice": VOICE, "text": "Hi.", "nfe": 0 }), 400),
        (json!({ "voice": VOICE, "text": "Hi.", "nfe": 100000 }), 400),
        (json!({ "voice": VOICE, "text": "Hi.", "speed": -1.0 }), 400),
        (json!({ "voice": VOICE, "text": "Hi.", "model": "other" }), 400),
        (json!({ "voice": VOICE, "text": "Hi.", "max_wer": 0.2 }), 501),
        (json!({ "voice": VOICE }), 400),
        (json!({ "voice": VOICE, "text": "x".repeat(6000) }), 413),
    ];
    for (body, want) in cases {
        let r = c.post(s.url("/tts")).json(&body).send().await.unwrap();
        let (status, msg) = error_of(r).await;
        assert_eq!(status, want, "{body}: {msg}");
    }
    let r = c.post(s.url("/tts")).header("content-type", "application/json").body("{\"voice\": ").send().await.unwrap();
    let (status, msg) = error_of(r).await;
    assert_eq!(status, 400);
    assert!(msg.contains("malformed JSON"), "{msg}");

    // POST /dialogue: k lines, seeds seed, seed+1, …; each line is what /tts gives for it.
    let body = json!({ "lines": [{ "voice": VOICE, "text": "Hello there." }, { "voice": VOICE, "text": "Fine, thanks." }], "nfe": 4, "seed": 7, "pause": 0 });
    let r = c.post(s.url("/dialogue")).json(&body).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-f5-seed"], "7,8");
    let both = r.bytes().await.unwrap();
    let second = c.post(s.url("/tts")).json(&tts_body("Fine, thanks.", 8)).send().await.unwrap().bytes().await.unwrap();
    // With no pause and no peak limiting needed, the dialogue's data is the two answers' data back to back.
    assert_eq!(wav_samples(&both), wav_samples(&first) + wav_samples(&second));
    assert_eq!(&both[44..44 + first.len() - 44], &first[44..]);
    assert_eq!(&both[first.len()..], &second[44..]);
    for (body, want) in [
        (json!({ "lines": [] }), 400),
        (json!({ "lines": [{ "voice": VOICE, "text": "Hi." }, { "voice": "nobody", "text": "Hi." }], "nfe": 4 }), 404),
        (json!({ "lines": [{ "voice": VOICE, "text": "Hi." }], "pause": 99 }), 400),
        (json!({ "lines": [{ "voice": VOICE, "text": "Hi.", "bogus": 1 }] }), 400),
    ] {
        let (status, msg) = error_of(c.post(s.url("/dialogue")).json(&body).send().await.unwrap()).await;
        assert_eq!(status, want, "{body}: {msg}");
    }

    // POST /v1/audio/speech: the body OpenAI's client sends, with the API key it always sends
    // (ignored when the server has no token).
    let r = c
        .post(s.url("/v1/audio/speech"))
        .header("authorization", "Bearer sk-none")
        .json(&json!({ "model": "tts-1", "input": "Hello there.", "voice": VOICE, "response_format": "wav" }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "audio/wav");
    assert!(wav_samples(&r.bytes().await.unwrap()) > 0);
    let r = c
        .post(s.url("/v1/audio/speech"))
        .json(&json!({ "model": "f5-tiny-v1", "input": "Hello there.", "voice": VOICE, "response_format": "pcm", "speed": 1.5 }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "audio/pcm");
    let pcm = r.bytes().await.unwrap();
    assert!(!pcm.is_empty() && pcm.len() % 2 == 0 && &pcm[..4] != b"RIFF");
    for body in [
        json!({ "model": "tts-1", "input": "Hi.", "voice": VOICE, "response_format": "aac" }),
        json!({ "model": "tts-1", "input": "Hi.", "voice": VOICE, "speed": 10.0 }),
        json!({ "model": "whisper-1", "input": "Hi.", "voice": VOICE }),
        json!({ "model": "tts-1", "voice": VOICE }),
    ] {
        let (status, msg) = error_of(c.post(s.url("/v1/audio/speech")).json(&body).send().await.unwrap()).await;
        assert_eq!(status, 400, "{body}: {msg}");
    }

    // POST /voices, then use it, then DELETE it.
    let r = c.post(s.url("/voices")).multipart(upload_form("alice", TRANSCRIPT, reference_wav(), "alice.wav")).send().await.unwrap();
    assert_eq!(r.status(), 201);
    let listed: serde_json::Value = c.get(s.url("/voices")).send().await.unwrap().json().await.unwrap();
    assert_eq!(listed["voices"].as_array().map(Vec::len), Some(2));
    let r = c.post(s.url("/tts")).json(&json!({ "voice": "alice", "text": "Hi.", "nfe": 4, "seed": 1 })).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let (status, _) =
        error_of(c.post(s.url("/voices")).multipart(upload_form("alice", "Again.", reference_wav(), "a.wav")).send().await.unwrap()).await;
    assert_eq!(status, 409, "no silent overwrite");
    let replace = upload_form("alice", "Replaced.", reference_wav(), "a.wav").text("replace", "true");
    assert_eq!(c.post(s.url("/voices")).multipart(replace).send().await.unwrap().status(), 201);
    let (status, _) = error_of(c.post(s.url("/voices")).multipart(Form::new().text("id", "bob")).send().await.unwrap()).await;
    assert_eq!(status, 400, "missing fields");
    assert_eq!(c.delete(s.url("/voices/alice")).send().await.unwrap().status(), 204);
    let (status, _) = error_of(c.delete(s.url("/voices/alice")).send().await.unwrap()).await;
    assert_eq!(status, 404);

    // Unknown paths and methods are JSON errors too.
    assert_eq!(error_of(c.get(s.url("/nothing")).send().await.unwrap()).await.0, 404);
    assert_eq!(error_of(c.get(s.url("/tts")).send().await.unwrap()).await.0, 405);

    let h = health(&c, &s).await;
    assert!(h["requests"].as_u64().unwrap() >= 6);
    assert_eq!(h["jobs_failed"], 0);
    s.shutdown().await;
}

/// 16 clients at once, each with its own seeds and texts; every answer must be exactly what
/// the same request gets when it is alone on the server (no cross-talk between jobs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_clients_get_exactly_their_own_answers() {
    const CLIENTS: u64 = 16;
    const PER_CLIENT: u64 = 10;
    let texts = ["Hello there.", "A short line.", "Fine, thanks."];
    let s = start_with(|c| c.queue_capacity = 64, false).await;
    let c = client();
    let mut tasks = Vec::new();
    for client_id in 0..CLIENTS {
        let c = c.clone();
        let url = s.url("/tts");
        tasks.push(tokio::spawn(async move {
            let mut answers = Vec::new();
            for i in 0..PER_CLIENT {
                let seed = client_id * 1000 + i;
                let text = texts[((client_id + i) % 3) as usize];
                let r = c.post(&url).json(&tts_body(text, seed)).send().await.expect("request");
                assert_eq!(r.status(), 200, "client {client_id} request {i}");
                assert_eq!(r.headers()["x-f5-seed"], seed.to_string().as_str());
                answers.push((text, seed, r.bytes().await.expect("body")));
            }
            answers
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.expect("client task"));
    }
    assert_eq!(all.len() as u64, CLIENTS * PER_CLIENT);
    for (text, seed, got) in all {
        let alone = c.post(s.url("/tts")).json(&tts_body(text, seed)).send().await.unwrap().bytes().await.unwrap();
        assert_eq!(got, alone, "text {text:?} seed {seed}: the answer under load differs from the answer alone");
    }
    let h = health(&c, &s).await;
    assert_eq!(h["jobs_done"].as_u64(), Some(2 * CLIENTS * PER_CLIENT));
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_queue_answers_503_with_retry_after() {
    // The model thread is held, so the queue fills regardless of how fast synthesis runs.
    let mut s = start_with(|c| c.queue_capacity = 2, true).await;
    let c = client();
    let waiting: Vec<_> = (0..2)
        .map(|i| {
            let (c, url) = (c.clone(), s.url("/tts"));
            tokio::spawn(async move { c.post(url).json(&tts_body("Hello there.", i)).send().await.unwrap().status().as_u16() })
        })
        .collect();
    // Bounded wait until both are queued.
    let mut depth = 0;
    for _ in 0..400 {
        depth = health(&c, &s).await["queue_depth"].as_u64().unwrap_or(0);
        if depth == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(depth, 2);
    let r = c.post(s.url("/tts")).json(&tts_body("Hello there.", 9)).send().await.unwrap();
    assert_eq!(r.status(), 503);
    let retry: u64 = r.headers()["retry-after"].to_str().unwrap().parse().unwrap();
    assert!(retry >= 1);
    assert!(error_of(r).await.1.contains("queue is full"));
    s.resume();
    for w in waiting {
        assert_eq!(w.await.unwrap(), 200, "queued jobs run once the thread is free");
    }
    s.shutdown().await;
}

/// The weights go when idle and come back for the next job; jobs that arrive while they are
/// gone (or going) wait and succeed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unload_after_gives_the_weights_back_and_reloads_under_load() {
    let s = start_with(|c| c.unload_after = Some(Duration::from_millis(200)), false).await;
    let c = client();
    for round in 0..3u64 {
        // Bounded wait for the idle unload.
        let mut loaded = true;
        for _ in 0..400 {
            loaded = health(&c, &s).await["loaded"].as_bool().unwrap_or(true);
            if !loaded {
                break;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        assert!(!loaded, "round {round}: unloaded when idle");
        let burst: Vec<_> = (0..6u64)
            .map(|i| {
                let (c, url) = (c.clone(), s.url("/tts"));
                tokio::spawn(
                    async move { c.post(url).json(&tts_body("Hello there.", round * 10 + i)).send().await.unwrap().status().as_u16() },
                )
            })
            .collect();
        for b in burst {
            assert_eq!(b.await.unwrap(), 200, "round {round}");
        }
    }
    let h = health(&c, &s).await;
    assert!(h["unloads"].as_u64().unwrap() >= 3, "{h}");
    assert!(h["loads"].as_u64().unwrap() >= 4, "{h}");
    assert_eq!(h["jobs_done"], 18);
    s.shutdown().await;
}

/// Hostile input: all refused with 4xx, nothing written to the store, the server still fine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_requests_are_refused_and_write_nothing() {
    const TOKEN: &str = "s3cret-token";
    let s = start_with(
        |c| {
            c.token = Some(TOKEN.into());
            c.max_upload_bytes = 300_000;
            c.max_json_bytes = 64 << 10;
        },
        false,
    )
    .await;
    let c = client();
    let auth = format!("Bearer {TOKEN}");
    let before = s.store_listing();
    assert!(!before.is_empty());

    // The token: health, readiness and the page (which asks for the token) are open; everything
    // else wants it as a header, never from the URL.
    assert_eq!(c.get(s.url("/health")).send().await.unwrap().status(), 200);
    for (path, header, want) in [
        ("/", None, 200),
        ("/", Some(auth.as_str()), 200),
        ("/?token=s3cret-token", None, 200),
        ("/?token=wrong", None, 200),
        ("/models?token=s3cret-token", None, 401),
        ("/voices?token=s3cret-token", None, 401),
        ("/models", Some("Bearer s3cret-toke"), 401),
        ("/models", Some(auth.as_str()), 200),
        ("/health?token=wrong", None, 200),
    ] {
        let mut req = c.get(s.url(path));
        if let Some(h) = header {
            req = req.header("authorization", h);
        }
        let r = req.send().await.unwrap();
        assert_eq!(r.status().as_u16(), want, "GET {path} with {header:?}");
        if want == 200 && path.starts_with("/?") {
            assert_eq!(r.headers()["cache-control"], "no-store", "a page fetched with a secret in its URL is not cached");
        }
    }
    let r = c.post(s.url("/tts?token=s3cret-token")).json(&tts_body("Hi.", 1)).send().await.unwrap();
    assert_eq!(error_of(r).await.0, 401, "synthesis does not take the token from the URL");
    for (method, path) in [
        ("GET", "/voices"),
        ("GET", "/models"),
        ("POST", "/tts"),
        ("POST", "/dialogue"),
        ("POST", "/v1/audio/speech"),
        ("DELETE", "/voices/birch"),
        ("POST", "/voices"),
    ] {
        for header in [
            None,
            Some("Bearer wrong-token!"),
            Some("Bearer s3cret-toke"),
            Some("Bearer s3cret-token2"),
            Some("s3cret-token"),
            Some("Basic czNjcmV0"),
        ] {
            let mut req = c.request(method.parse().unwrap(), s.url(path));
            if let Some(h) = header {
                req = req.header("authorization", h);
            }
            let r = req.json(&tts_body("Hi.", 1)).send().await.unwrap();
            let (status, _) = error_of(r).await;
            assert_eq!(status, 401, "{method} {path} with {header:?}");
        }
    }
    // The scheme name is case-insensitive (RFC 9110 §11.1).
    assert_eq!(c.get(s.url("/models")).header("authorization", format!("bearer {TOKEN}")).send().await.unwrap().status(), 200);
    let r = c.post(s.url("/voices")).multipart(upload_form("mallory", TRANSCRIPT, reference_wav(), "m.wav")).send().await.unwrap();
    assert_eq!(r.status(), 401, "an upload without the token");

    // Voice ids that could name a path, in the URL (sent raw, so no client normalises them)…
    let long = "x".repeat(200);
    for path in [
        "/voices/..",
        "/voices/%2e%2e",
        "/voices/%2E%2E",
        "/voices/..%2fbirch",
        "/voices/a%2fb",
        "/voices/%00",
        "/voices/a%00b",
        &format!("/voices/{long}"),
        "/voices/a/b",
        "/voices/../voices/birch",
        "/voices/%ff",
    ] {
        let status =
            s.raw_status(&format!("DELETE {path} HTTP/1.1\r\nHost: x\r\nAuthorization: {auth}\r\nConnection: close\r\n\r\n")).await;
        assert!((400..500).contains(&status), "DELETE {path} → {status}");
    }
    // …in a synthesis request…
    let ids = ["..", "../birch", "a/b", "%2e%2e", "a\0b", long.as_str(), "/etc/passwd", "birch/../birch", ""];
    for id in ids {
        let r = c
            .post(s.url("/tts"))
            .header("authorization", &auth)
            .json(&json!({ "voice": id, "text": "Hi.", "nfe": 4 }))
            .send()
            .await
            .unwrap();
        let (status, _) = error_of(r).await;
        assert_eq!(status, 400, "tts voice {id:?}");
    }
    // …and in an upload.
    for id in ids {
        let r = c
            .post(s.url("/voices"))
            .header("authorization", &auth)
            .multipart(upload_form(id, TRANSCRIPT, reference_wav(), "x.wav"))
            .send()
            .await
            .unwrap();
        let (status, _) = error_of(r).await;
        assert_eq!(status, 400, "upload id {id:?}");
    }
    // An upload over the limit, with a .wav name on noise-free garbage and as a real wav padded out.
    let mut big = reference_wav();
    big.resize(400_000, 0);
    let r = c
        .post(s.url("/voices"))
        .header("authorization", &auth)
        .multipart(upload_form("big", TRANSCRIPT, big, "big.wav"))
        .send()
        .await
        .unwrap();
    let (status, msg) = error_of(r).await;
    assert_eq!(status, 413, "{msg}");
    // Not audio.
    for (bytes, name) in [
        (b"MZ\x90\x00 definitely not audio".to_vec(), "evil.wav"),
        (b"#!/bin/sh\nrm -rf /\n".to_vec(), "x.sh"),
        (vec![0u8; 5000], "zeros.wav"),
    ] {
        let r = c
            .post(s.url("/voices"))
            .header("authorization", &auth)
            .multipart(upload_form("notaudio", TRANSCRIPT, bytes, name))
            .send()
            .await
            .unwrap();
        let (status, msg) = error_of(r).await;
        assert_eq!(status, 400, "{name}: {msg}");
    }
    // Malformed JSON bodies.
    for body in
        ["{", "null", "[]", "{\"voice\": 3, \"text\": \"Hi.\"}", "\u{0}\u{1}", "{\"voice\": \"birch\", \"text\": \"Hi.\", \"nfe\": -4}"]
    {
        for path in ["/tts", "/dialogue", "/v1/audio/speech"] {
            let r = c
                .post(s.url(path))
                .header("authorization", &auth)
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await
                .unwrap();
            let (status, msg) = error_of(r).await;
            assert_eq!(status, 400, "{path} {body:?}: {msg}");
        }
    }
    // A megabyte of text, several times over: the 413 must reach a client that is still sending
    // (a server that answers early and closes leaves it with a broken pipe, now and then).
    let mega = "a".repeat(1 << 20);
    for _ in 0..6 {
        for (path, body) in [
            ("/tts", json!({ "voice": VOICE, "text": mega })),
            ("/dialogue", json!({ "lines": [{ "voice": VOICE, "text": mega }] })),
            ("/v1/audio/speech", json!({ "model": "tts-1", "voice": VOICE, "input": mega })),
        ] {
            let r = c.post(s.url(path)).header("authorization", &auth).json(&body).send().await;
            let r = r.unwrap_or_else(|e| panic!("{path}: the client never saw an answer: {e:?}"));
            let (status, msg) = error_of(r).await;
            assert_eq!(status, 413, "{path}: {msg}");
        }
    }

    assert_eq!(s.store_listing(), before, "nothing was written to the store");
    // Without the token, /health says only that the server is alive and takes jobs.
    assert_eq!(health(&c, &s).await, json!({ "status": "ok", "ready": true }));
    let h: serde_json::Value = c.get(s.url("/health")).header("authorization", &auth).send().await.unwrap().json().await.unwrap();
    assert_eq!(h["jobs_done"], 0, "no hostile request reached the model");
    let r = c.post(s.url("/tts")).header("authorization", &auth).json(&tts_body("Still here.", 3)).send().await.unwrap();
    assert_eq!(r.status(), 200, "the server still works");
    assert!(wav_samples(&r.bytes().await.unwrap()) > 0);
    s.shutdown().await;
}

/// With a transcriber configured, /tts accepts the listen-back knobs and reports the score. A
/// transcriber that is down leaves synthesis working, the answer marked as not fully verified.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listen_back_scores_travel_in_headers() {
    // Port 1 on loopback: nothing listens, every request is refused at once.
    let s = start_with(|c| c.transcriber = Some("127.0.0.1:1".into()), false).await;
    let c = client();
    let mut body = tts_body("Hello there.", 3);
    body["retries"] = json!(1);
    body["max_wer"] = json!(0.2);
    let r = c.post(s.url("/tts")).json(&body).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-f5-verified"], "partly");
    let score = r.headers()["x-f5-score"].to_str().unwrap().to_string();
    assert!(score.contains("unchecked=1") && score.contains("attempts=1"), "{score}");
    body["max_wer"] = json!(-1.0);
    let r = c.post(s.url("/tts")).json(&body).send().await.unwrap();
    assert_eq!(r.status(), 400, "a negative max_wer is refused");
    s.shutdown().await;
}

/// Without a `pause`, a dialogue line is followed by the pause its final punctuation asks for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dialogue_pauses_follow_punctuation_by_default() {
    let s = start().await;
    let c = client();
    let body =
        json!({ "lines": [{ "voice": VOICE, "text": "Hello there." }, { "voice": VOICE, "text": "Fine, thanks" }], "nfe": 4, "seed": 5 });
    let r = c.post(s.url("/dialogue")).json(&body).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let both = wav_samples(&r.bytes().await.unwrap());
    let mut alone = 0;
    for (i, text) in ["Hello there.", "Fine, thanks"].iter().enumerate() {
        let r = c.post(s.url("/tts")).json(&tts_body(text, 5 + i as u64)).send().await.unwrap();
        alone += wav_samples(&r.bytes().await.unwrap());
    }
    assert_eq!(both, alone + f5_synth::trailing_pause_ms("Hello there.") as usize * 24);
    s.shutdown().await;
}

/// Two models behind the one model thread. Requests that alternate between them all succeed,
/// each answer is byte-identical to the same request on a server that runs only that model,
/// and `/health` counts every exchange of weights; an unknown model is refused with the ids.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_switch_between_models() {
    const V1: &str = "f5-tiny-v1";
    const V0: &str = "f5-tiny-v0";
    let v0_files = || f5_server::ModelEntry::new(fixture("models/f5-tiny-v0/model.safetensors"), fixture("vocab.txt"));
    let c = client();

    // The answers each model gives alone.
    let requests: Vec<(&str, String, u64)> =
        (0..6u64).map(|i| (if i % 2 == 0 { V0 } else { V1 }, format!("Line number {i}."), 20 + i)).collect();
    let body = |model: &str, text: &str, seed: u64| {
        let mut b = tts_body(text, seed);
        b["model"] = json!(model);
        b
    };
    let mut alone = Vec::new();
    for model in [V1, V0] {
        let single = start_with(
            |c| {
                if model == V0 {
                    c.model = f5_synth::ModelFiles::F5 {
                        checkpoint: fixture("models/f5-tiny-v0/model.safetensors"),
                        vocab: fixture("vocab.txt"),
                        vocoder: fixture("models/vocos-tiny/pytorch_model.bin"),
                    };
                }
            },
            false,
        )
        .await;
        for (m, text, seed) in requests.iter().filter(|r| r.0 == model) {
            let r = c.post(single.url("/tts")).json(&body(m, text, *seed)).send().await.unwrap();
            assert_eq!(r.status(), 200, "{m} alone");
            alone.push(((*m, text.clone(), *seed), r.bytes().await.unwrap()));
        }
        single.shutdown().await;
    }
    let alone_answer = |m: &str, text: &str, seed: u64| {
        alone.iter().find(|(k, _)| k.0 == m && k.1 == text && k.2 == seed).map(|(_, v)| v.clone()).expect("a lone answer")
    };

    let s = start_with(
        |c| {
            c.more_models = vec![v0_files()];
            // Room for the whole burst below.
            c.queue_capacity = 32;
        },
        false,
    )
    .await;
    let models: serde_json::Value = c.get(s.url("/models")).send().await.unwrap().json().await.unwrap();
    let summary: Vec<_> = models["models"]
        .as_array()
        .expect("models")
        .iter()
        .map(|m| json!({ "id": m["id"], "loaded": m["loaded"], "default": m["default"], "family": m["family"] }))
        .collect();
    assert_eq!(
        summary,
        [
            json!({ "id": V1, "loaded": true, "default": true, "family": "f5" }),
            json!({ "id": V0, "loaded": false, "default": false, "family": "f5" })
        ]
    );

    // One after another, alternating: every request but none exchanges the weights.
    for (m, text, seed) in &requests {
        let r = c.post(s.url("/tts")).json(&body(m, text, *seed)).send().await.unwrap();
        assert_eq!(r.status(), 200, "{m}");
        assert_eq!(r.headers()["x-f5-model"], *m);
        assert_eq!(r.bytes().await.unwrap(), alone_answer(m, text, *seed), "{m} {text:?}: as from a server running only {m}");
    }
    let h = health(&c, &s).await;
    assert_eq!(h["switches"], 6, "v1 loaded at start, then v0 v1 v0 v1 v0 v1: {h}");
    assert_eq!(h["loads"], 7, "{h}");
    assert_eq!(h["unloads"], 0, "{h}");
    assert_eq!(h["model"], V1, "{h}");
    // The two models differ, so the answers above show which weights spoke.
    assert_ne!(alone_answer(V0, "Line number 0.", 20), alone_answer(V1, "Line number 1.", 21));

    // All at once, in both directions and through every synthesis endpoint.
    let mut tasks = Vec::new();
    for round in 0..3 {
        for (m, text, seed) in requests.clone() {
            let (c, url) = (c.clone(), s.url("/tts"));
            let b = body(m, &text, seed);
            tasks.push(tokio::spawn(async move {
                let r = c.post(url).json(&b).send().await.expect("tts");
                assert_eq!(r.status(), 200, "round {round} {m}");
                ((m, text, seed), r.bytes().await.expect("wav"))
            }));
        }
    }
    for task in tasks {
        let ((m, text, seed), wav) = task.await.expect("request task");
        assert_eq!(wav, alone_answer(m, &text, seed), "{m} {text:?} under concurrent switching");
    }
    let r = c
        .post(s.url("/v1/audio/speech"))
        .json(&json!({ "model": V0, "input": "Hello there.", "voice": VOICE, "response_format": "wav" }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-f5-model"], V0);
    let r =
        c.post(s.url("/v1/audio/speech")).json(&json!({ "model": "tts-1", "input": "Hello there.", "voice": VOICE })).send().await.unwrap();
    assert_eq!(r.headers()["x-f5-model"], V1, "OpenAI's names mean the default model");
    let dialogue = json!({ "lines": [{ "voice": VOICE, "text": "Line number 0." }], "nfe": 4, "seed": 20, "model": V0 });
    let r = c.post(s.url("/dialogue")).json(&dialogue).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-f5-model"], V0);
    let h = health(&c, &s).await;
    assert!(h["switches"].as_u64().unwrap() >= 8, "{h}");
    assert_eq!(h["jobs_failed"], 0, "{h}");

    // An unknown model: 400, naming the models there are, and nothing queued.
    let done = h["jobs_done"].clone();
    for (path, body) in [
        ("/tts", body("f5-tiny-v2", "Hi.", 1)),
        ("/dialogue", json!({ "lines": [{ "voice": VOICE, "text": "Hi." }], "model": "f5-tiny-v2" })),
        ("/v1/audio/speech", json!({ "model": "f5-tiny-v2", "input": "Hi.", "voice": VOICE })),
    ] {
        let (status, msg) = error_of(c.post(s.url(path)).json(&body).send().await.unwrap()).await;
        assert_eq!(status, 400, "{path}: {msg}");
        assert!(msg.contains("f5-tiny-v2") && msg.contains(V1) && msg.contains(V0), "{path}: {msg}");
    }
    assert_eq!(health(&c, &s).await["jobs_done"], done);
    s.shutdown().await;
}

/// Two models may not share an id, and a further model's files must exist at start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn further_models_are_checked_at_start() {
    let voices = std::env::temp_dir().join(format!("f5-server-models-check-{}", std::process::id()));
    let base = || tiny_config(voices.clone());
    let mut same_id = base();
    let mut dup = f5_server::ModelEntry::new(fixture("models/f5-tiny-v0/model.safetensors"), fixture("vocab.txt"));
    dup.id = Some("f5-tiny-v1".into());
    same_id.more_models = vec![dup];
    let err = f5_server::Server::bind(same_id).await.err().expect("a duplicate id is refused").to_string();
    assert!(err.contains("f5-tiny-v1"), "{err}");
    let mut missing = base();
    missing.more_models = vec![f5_server::ModelEntry::new(fixture("models/nowhere/model.safetensors"), fixture("vocab.txt"))];
    let err = f5_server::Server::bind(missing).await.err().expect("a missing file is refused").to_string();
    assert!(err.contains("nowhere"), "{err}");
    let _ = std::fs::remove_dir_all(&voices);
}

/// A device the server cannot run on stops the start with the reason: a build without CUDA
/// says so; a CUDA build names the device it could not open (there is no GPU number 99).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_device_that_cannot_run_stops_the_start() {
    let voices = std::env::temp_dir().join(format!("f5-server-device-check-{}", std::process::id()));
    let mut config = tiny_config(voices.clone());
    config.device = f5_server::DeviceChoice::Cuda { ordinal: 99, bf16: false };
    let err = f5_server::Server::bind(config).await.err().expect("GPU 99 is refused").to_string();
    if cfg!(feature = "cuda") {
        assert!(err.contains("cuda:99"), "{err}");
    } else {
        assert!(err.contains("built without CUDA support"), "{err}");
    }
    let _ = std::fs::remove_dir_all(&voices);
}
