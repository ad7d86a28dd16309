//! What a new user meets first in the daemon, over real HTTP on a loopback port.

mod common;

use common::*;
use reqwest::multipart::{Form, Part};

/// A recording whose speech the ≤ 12 s rule cuts is refused at upload, saying what is kept and
/// what to do: its whole transcript would no longer match the audio the model hears.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clipped_voice_upload_is_refused_saying_what_was_kept() {
    let s = start().await;
    let c = client();
    let audio = std::fs::read(fixture("audio/clip_continuous.wav")).unwrap();
    let transcript = std::fs::read_to_string(fixture("audio/clip_continuous.txt")).unwrap();
    let form = Form::new()
        .text("id", "long")
        .text("transcript", transcript.trim().to_string())
        .part("audio", Part::bytes(audio).file_name("long.wav"));
    let r = c.post(s.url("/voices")).multipart(form).send().await.unwrap();
    let status = r.status().as_u16();
    let body: serde_json::Value = r.json().await.unwrap();
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!((400..500).contains(&status), "{status}: {body}");
    assert!(message.contains("20.0 s of speech; only its first 12.0 s are used") && message.contains("trim the recording"), "{body}");
    let listed: serde_json::Value = c.get(s.url("/voices")).send().await.unwrap().json().await.unwrap();
    assert!(!listed.to_string().contains("\"long\""), "{listed}");
    s.shutdown().await;
}

#[path = "../../f5-verify/tests/fake_whisper/mod.rs"]
#[allow(dead_code)]
mod fake_whisper;

/// With a transcriber configured, the same upload is kept: its kept part is transcribed and
/// stored with what was heard, and the answer says how much was kept. The stored voice then
/// speaks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_transcriber_a_clipped_upload_keeps_its_transcribed_part() {
    let whisper = fake_whisper::FakeWhisper::start(|_, _| fake_whisper::Reply::Text("What the kept part says.".into()));
    let addr = whisper.address().to_string();
    let s = start_with(move |c| c.transcriber = Some(addr), false).await;
    let c = client();
    let audio = std::fs::read(fixture("audio/clip_continuous.wav")).unwrap();
    let transcript = std::fs::read_to_string(fixture("audio/clip_continuous.txt")).unwrap();
    let form = Form::new()
        .text("id", "long")
        .text("transcript", transcript.trim().to_string())
        .part("audio", Part::bytes(audio).file_name("long.wav"));
    let r = c.post(s.url("/voices")).multipart(form).send().await.unwrap();
    let status = r.status().as_u16();
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["transcript"], "What the kept part says.");
    assert!(body["clipped"]["message"].as_str().unwrap_or_default().contains("only its first 12.0 s are used"), "{body}");
    assert!((body["clipped"]["speech_seconds"].as_f64().unwrap_or_default() - 20.0).abs() < 0.1, "{body}");
    let first = whisper.requests().into_iter().next().expect("the kept part was sent to the transcriber");
    let Some(Ok(wav)) = first.wav else { panic!("no wav in {first:?}") };
    let seconds = wav.samples.len() as f64 / f64::from(wav.rate);
    assert!((11.5..=12.1).contains(&seconds), "{seconds} s sent");
    let r =
        c.post(s.url("/tts")).json(&serde_json::json!({ "voice": "long", "text": "Hello.", "nfe": 2, "seed": 1 })).send().await.unwrap();
    assert_eq!(r.status(), 200, "the stored kept part speaks");
    s.shutdown().await;
}

/// Every route the router has is in the README's endpoint table as "`METHOD /path`", so the
/// README stays true when a route is added. The routes are read from the router's source, the
/// one place they are declared.
#[test]
fn the_readme_lists_every_route() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let source = std::fs::read_to_string(root.join("src/api.rs")).unwrap();
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let mut routes = Vec::new();
    for line in source.lines().map(str::trim).filter(|l| l.starts_with(".route(\"")) {
        let rest = &line[".route(\"".len()..];
        let path = &rest[..rest.find('"').expect("a closing quote")];
        let handlers = &rest[path.len()..];
        for (method, call) in [("GET", "get("), ("POST", "post("), ("DELETE", "delete("), ("PUT", "put("), ("PATCH", "patch(")] {
            // `get(h)` opens the handlers; `.post(h)` chains another method.
            if handlers.contains(&format!(" {call}")) || handlers.contains(&format!(".{call}")) {
                routes.push(format!("{method} {path}"));
            }
        }
    }
    assert!(routes.len() >= 13, "the router's routes were not found in src/api.rs: {routes:?}");
    let missing: Vec<&String> = routes.iter().filter(|r| !readme.contains(&format!("`{r}`"))).collect();
    assert!(missing.is_empty(), "crates/f5-server/README.md does not list {missing:?}");
}
