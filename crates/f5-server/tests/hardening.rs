//! Holes an attack on the daemon found, each closed and checked over real HTTP on loopback.

mod common;

use std::time::{Duration, Instant};

use common::*;
use reqwest::multipart::{Form, Part};
use serde_json::json;

async fn status_and_text(r: reqwest::Response) -> (u16, String) {
    let status = r.status().as_u16();
    (status, r.text().await.unwrap_or_default())
}

/// Client mistakes are 4xx whatever the endpoint, and no answer names a file on the server:
/// not `/health`, `GET /models`, `X-F5-Model`, the unknown-model 400, a missing voice's 404 or a
/// broken voice's 422 — even when the models were given by absolute path.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_mistakes_are_4xx_and_no_answer_names_a_path() {
    let v1 = fixture("models/f5-tiny-v1/model.safetensors");
    let v0 = fixture("models/f5-tiny-v0/model.safetensors");
    let (v1_id, v0_id) = (v1.display().to_string(), v0.display().to_string());
    let s = start_with(
        |c| {
            // What `f5 serve -m /abs/path -m /abs/other` configures.
            c.model_id = Some(v1_id.clone());
            let mut extra = f5_server::ModelEntry::new(v0.clone(), fixture("vocab.txt"));
            extra.id = Some(v0_id.clone());
            c.more_models = vec![extra];
        },
        false,
    )
    .await;
    let c = client();
    let fixtures = fixture("").canonicalize().unwrap().display().to_string();
    let voices = s.voices.display().to_string();
    let leaks = |what: &str, text: &str| {
        for secret in [fixtures.as_str(), voices.as_str(), "safetensors", "/tmp", "fixtures"] {
            assert!(!text.contains(secret), "{what} shows {secret:?}: {text}");
        }
    };
    // A stored voice whose recording is broken.
    std::fs::create_dir(s.voices.join("broken")).unwrap();
    std::fs::write(s.voices.join("broken/config.json"), r#"{"transcript": "Hello."}"#).unwrap();
    std::fs::write(s.voices.join("broken/reference.wav"), b"RIFF....WAVEfmt not really").unwrap();

    let (_, health_text) = status_and_text(c.get(s.url("/health")).send().await.unwrap()).await;
    leaks("/health", &health_text);
    let (_, models) = status_and_text(c.get(s.url("/models")).send().await.unwrap()).await;
    leaks("/models", &models);
    let models: serde_json::Value = serde_json::from_str(&models).unwrap();
    assert_eq!(models["models"][0]["id"], "f5-tiny-v1", "a path-given model is named by its directory");
    assert_eq!(models["models"][1]["id"], "f5-tiny-v0");
    let r = c.post(s.url("/tts")).json(&tts_body("Hello there.", 1)).send().await.unwrap();
    assert_eq!(r.status(), 200);
    leaks("X-F5-Model", r.headers()["x-f5-model"].to_str().unwrap());
    for (what, body, want) in [
        ("unknown model", json!({ "voice": VOICE, "text": "Hi.", "model": "nope" }), 400),
        ("missing voice", json!({ "voice": "nobody", "text": "Hi." }), 404),
        ("broken voice", json!({ "voice": "broken", "text": "Hi." }), 422),
    ] {
        let (status, text) = status_and_text(c.post(s.url("/tts")).json(&body).send().await.unwrap()).await;
        assert_eq!(status, want, "{what}: {text}");
        leaks(what, &text);
    }
    let (status, text) = status_and_text(c.delete(s.url("/voices/nobody")).send().await.unwrap()).await;
    assert_eq!(status, 404);
    leaks("DELETE of a missing voice", &text);

    // Every knob is range-checked: out of range is 400, never a 500 from deep in the engine.
    let knob = |k: &str, v: serde_json::Value| {
        let mut b = tts_body("Hi there.", 1);
        b[k] = v;
        b
    };
    for body in [
        knob("cfg", json!(1e38)),
        knob("cfg", json!(-1e38)),
        knob("cfg", json!(11)),
        knob("sway", json!(1e38)),
        knob("sway", json!(-1e38)),
        knob("sway", json!(-1.5)),
        knob("speed", json!(0.1)),
        knob("speed", json!(5)),
        knob("speed", json!(1e300)),
        knob("nfe", json!(129)),
        knob("cross_fade", json!(-1)),
    ] {
        let (status, text) = status_and_text(c.post(s.url("/tts")).json(&body).send().await.unwrap()).await;
        assert_eq!(status, 400, "{body}: {text}");
    }
    // One speed range for every endpoint.
    for (path, body) in [
        ("/dialogue", json!({ "lines": [{ "voice": VOICE, "text": "Hi." }], "speed": 0.1 })),
        ("/dialogue", json!({ "lines": [{ "voice": VOICE, "text": "Hi." }], "speed": 8 })),
        ("/v1/audio/speech", json!({ "model": "tts-1", "input": "Hi.", "voice": VOICE, "speed": 0.1 })),
        ("/v1/audio/speech", json!({ "model": "tts-1", "input": "Hi.", "voice": VOICE, "speed": 8 })),
    ] {
        let (status, text) = status_and_text(c.post(s.url(path)).json(&body).send().await.unwrap()).await;
        assert_eq!(status, 400, "{path} {body}: {text}");
    }
    // Text the vocabulary does not hold, or nothing speakable: spoken or refused, never a 5xx.
    for text in ["Hi 😀 𝔘 \u{10FFFF} ☃ ꙮ 你好 ﷽ there.", "\u{0}\u{1}\u{7f}", "\u{200b}", "\u{301}\u{301}", "[", "。", "-"] {
        let mut b = tts_body(text, 2);
        b["nfe"] = json!(2);
        let (status, body) = status_and_text(c.post(s.url("/tts")).json(&b).send().await.unwrap()).await;
        assert!(status == 200 || (400..500).contains(&status), "{text:?}: {status} {body}");
    }
    let h = health(&c, &s).await;
    assert_eq!(h["jobs_failed"], 0, "{h}");
    s.shutdown().await;
}

/// A request that would make more audio than the server allows (in all, or in one piece) is
/// refused with 413 before it is queued; a job past its deadline is stopped with 503.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audio_length_limits_and_the_job_deadline() {
    let s = start_with(
        |c| {
            c.max_audio_seconds = 20.0;
            c.max_chunk_seconds = 25.0;
            c.job_timeout = Duration::from_secs(1);
        },
        false,
    )
    .await;
    let c = client();
    let sentences = "The quick brown fox jumps over the lazy dog. ".repeat(40);
    let run_on = "and then the fox jumps again ".repeat(40);
    for (path, body, needle) in [
        ("/tts", json!({ "voice": VOICE, "text": sentences }), "per request"),
        ("/tts", json!({ "voice": VOICE, "text": run_on }), "per piece"),
        ("/v1/audio/speech", json!({ "model": "tts-1", "voice": VOICE, "input": sentences }), "per request"),
        (
            "/dialogue",
            json!({ "lines": [{ "voice": VOICE, "text": sentences.get(..900).unwrap() }, { "voice": VOICE, "text": sentences.get(..900).unwrap() }] }),
            "per request",
        ),
    ] {
        let started = Instant::now();
        let (status, text) = status_and_text(c.post(s.url(path)).json(&body).send().await.unwrap()).await;
        assert_eq!(status, 413, "{path}: {text}");
        assert!(text.contains(needle), "{path}: {text}");
        // Refused up front: nothing reached the model (a synthesis of this text takes minutes).
        assert!(started.elapsed() < Duration::from_secs(20), "{path}: refused only after {:?}", started.elapsed());
    }
    assert_eq!(health(&c, &s).await["jobs_done"], 0);
    // Within the limits but slower than the 1 s deadline on the tiny model (about 20 s here).
    let body = json!({ "voice": VOICE, "text": "The quick brown fox jumps over the lazy dog. ".repeat(6), "nfe": 32, "seed": 1 });
    let (status, text) = status_and_text(c.post(s.url("/tts")).json(&body).send().await.unwrap()).await;
    assert_eq!(status, 503, "{text}");
    assert!(text.contains("limit of 1 s"), "{text}");
    // The server goes on: a short job still runs (its deadline is 1 s too, so keep it tiny).
    let mut quick = tts_body("Hi.", 3);
    quick["nfe"] = json!(2);
    let r = c.post(s.url("/tts")).json(&quick).send().await.unwrap();
    assert_eq!(r.status(), 200);
    s.shutdown().await;
}

/// A client that gives up frees the model thread at the next step: the next job does not wait
/// for the abandoned one to finish.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_whose_client_left_is_cancelled() {
    let s = start().await;
    let c = client();
    // About 20 s of work on the tiny model (one step is under a second).
    let long = json!({ "voice": VOICE, "text": "The quick brown fox jumps over the lazy dog. ".repeat(8), "nfe": 32, "seed": 1 });
    let impatient = reqwest::Client::builder().timeout(Duration::from_millis(1500)).build().unwrap();
    let gave_up = impatient.post(s.url("/tts")).json(&long).send().await;
    assert!(gave_up.is_err(), "the long job answered within 1.5 s; the test needs a slower job");
    let started = Instant::now();
    let r = c.post(s.url("/tts")).json(&tts_body("Hello there.", 4)).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let waited = started.elapsed();
    // The abandoned job had ~18 s left; the next one runs in well under a second.
    assert!(waited < Duration::from_secs(8), "the next job waited {waited:?}");
    let h = health(&c, &s).await;
    assert_eq!(h["jobs_cancelled"], 1, "{h}");
    assert_eq!(h["jobs_done"], 1, "{h}");
    s.shutdown().await;
}

/// JSON bodies must say so; pages on other sites cannot change anything; without a token, a
/// `Host` the server does not answer to (DNS rebinding) is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cross_site_requests_are_refused() {
    let s = start_with(
        |c| {
            c.allowed_origins = vec!["https://studio.example".into()];
            c.allowed_hosts = vec!["tts.lan".into()];
        },
        false,
    )
    .await;
    let c = client();
    let before = s.store_listing();
    let body = serde_json::to_string(&tts_body("Hi.", 1)).unwrap();
    for ct in [None, Some("text/plain"), Some("application/x-www-form-urlencoded"), Some("multipart/form-data; boundary=x")] {
        let mut req = c.post(s.url("/tts")).body(body.clone());
        if let Some(ct) = ct {
            req = req.header("content-type", ct);
        }
        let (status, text) = status_and_text(req.send().await.unwrap()).await;
        assert_eq!(status, 415, "{ct:?}: {text}");
    }
    let evil = "http://evil.example";
    let own = format!("http://{}", s.addr);
    let upload =
        || Form::new().text("id", "x").text("transcript", TRANSCRIPT).part("audio", Part::bytes(reference_wav()).file_name("x.wav"));
    let (status, _) = status_and_text(c.post(s.url("/tts")).header("origin", evil).json(&tts_body("Hi.", 1)).send().await.unwrap()).await;
    assert_eq!(status, 403);
    let (status, _) = status_and_text(c.delete(s.url(&format!("/voices/{VOICE}"))).header("origin", evil).send().await.unwrap()).await;
    assert_eq!(status, 403);
    let (status, _) = status_and_text(c.post(s.url("/voices")).header("origin", evil).multipart(upload()).send().await.unwrap()).await;
    assert_eq!(status, 403);
    let (status, _) = status_and_text(c.post(s.url("/voices")).header("origin", "null").multipart(upload()).send().await.unwrap()).await;
    assert_eq!(status, 403, "a sandboxed page's origin");
    assert_eq!(s.store_listing(), before, "nothing changed");
    // Reading is fine from anywhere; the server's own page and allowed origins may write.
    assert_eq!(c.get(s.url("/voices")).header("origin", evil).send().await.unwrap().status(), 200);
    let mut quick = tts_body("Hi.", 1);
    quick["nfe"] = json!(2);
    for origin in [own.as_str(), "https://studio.example"] {
        let r = c.post(s.url("/tts")).header("origin", origin).json(&quick).send().await.unwrap();
        assert_eq!(r.status(), 200, "{origin}");
    }
    // Host names: localhost, IP literals and --allowed-host; anything else is a rebinding.
    let port = s.addr.port();
    for (host, want) in [
        (format!("127.0.0.1:{port}"), 200),
        (format!("localhost:{port}"), 200),
        ("LOCALHOST".to_string(), 200),
        (format!("[::1]:{port}"), 200),
        ("tts.lan".to_string(), 200),
        (format!("evil.example:{port}"), 421),
        ("127.0.0.1.evil.example".to_string(), 421),
    ] {
        let status = s.raw_status(&format!("GET /voices HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n")).await;
        assert_eq!(status, want, "Host: {host}");
    }
    s.shutdown().await;
}

/// 60 concurrent replacements and deletions of one voice: each answered 201, 204 or 404 (never
/// 5xx), and afterwards the store holds voices only, no temporaries or moved-aside copies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_replace_and_delete_of_one_voice() {
    let s = start_with(|c| c.max_concurrent_uploads = 4, false).await;
    let c = client();
    // A one-second recording decodes in a moment, so the requests really overlap.
    let audio = constant_flac(16_000, 16_000, 3000);
    for round in 0..3 {
        let mut tasks = Vec::new();
        for i in 0..60 {
            let (c, base, audio) = (c.clone(), s.base.clone(), audio.clone());
            tasks.push(tokio::spawn(async move {
                let r = if i % 3 == 0 {
                    c.delete(format!("{base}/voices/{VOICE}")).send().await
                } else {
                    let form = Form::new()
                        .text("id", VOICE)
                        .text("transcript", format!("Take {i}. {TRANSCRIPT}"))
                        .text("replace", "true")
                        .part("audio", Part::bytes(audio).file_name("r.flac"));
                    c.post(format!("{base}/voices")).multipart(form).send().await
                };
                let r = r.expect("an answer");
                (i, r.status().as_u16(), r.text().await.unwrap_or_default())
            }));
        }
        for t in tasks {
            let (i, status, text) = t.await.unwrap();
            let ok = if i % 3 == 0 { [204, 404].contains(&status) } else { status == 201 };
            assert!(ok, "round {round} request {i}: {status} {text}");
        }
    }
    let names: Vec<String> = s.store_listing().into_iter().map(|(p, _)| p).filter(|p| !p.contains('/')).collect();
    assert!(names.iter().all(|n| n == VOICE), "only voices are left: {names:?}");
    s.shutdown().await;
}

/// Slow or silent clients do not hold connections: an unfinished request head is dropped after
/// the header timeout, a kept-alive connection after the idle timeout, a body that does not
/// arrive is answered 408; with the connection cap taken by stalled clients, a new client is
/// served once they are dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_and_idle_connections_are_closed() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let s = start_with(
        |c| {
            c.header_timeout = Duration::from_secs(1);
            c.idle_timeout = Duration::from_secs(1);
            c.body_timeout = Duration::from_secs(1);
            c.max_connections = 2;
        },
        false,
    )
    .await;
    // Read until the server closes; None if it is still open after 20 s.
    async fn closed_within(mut conn: tokio::net::TcpStream) -> Option<(Duration, String)> {
        let started = Instant::now();
        let mut buf = Vec::new();
        match tokio::time::timeout(Duration::from_secs(20), conn.read_to_end(&mut buf)).await {
            Ok(_) => Some((started.elapsed(), String::from_utf8_lossy(&buf).into_owned())),
            Err(_) => None,
        }
    }
    // Half a request head, then nothing.
    let mut slow = tokio::net::TcpStream::connect(s.addr).await.unwrap();
    slow.write_all(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n").await.unwrap();
    let (after, _) = closed_within(slow).await.expect("a stalled request head is dropped");
    assert!(after >= Duration::from_millis(900), "dropped only for being slow: {after:?}");
    // A whole request on a kept-alive connection, answered, then nothing.
    let mut idle = tokio::net::TcpStream::connect(s.addr).await.unwrap();
    idle.write_all(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").await.unwrap();
    let (_, answer) = closed_within(idle).await.expect("an idle kept-alive connection is closed");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    // A body announced and never sent.
    let mut no_body = tokio::net::TcpStream::connect(s.addr).await.unwrap();
    no_body
        .write_all(b"POST /tts HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
        .await
        .unwrap();
    let (_, answer) = closed_within(no_body).await.expect("a missing body ends the request");
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    // Both connection slots taken by clients that send nothing: the next client waits for them
    // to be dropped, then is served.
    let stalled: Vec<_> = futures_connect(s.addr, 2).await;
    let c = client();
    let r = c.get(s.url("/health")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    drop(stalled);
    s.shutdown().await;
}

async fn futures_connect(addr: std::net::SocketAddr, n: usize) -> Vec<tokio::net::TcpStream> {
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(tokio::net::TcpStream::connect(addr).await.unwrap());
    }
    out
}
