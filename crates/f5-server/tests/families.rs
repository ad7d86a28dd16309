//! One server, two model families: an F5 checkpoint (voices are recordings in the store) and a
//! Kokoro model (named voices and mixes), behind the one model thread.

mod common;

use common::{client, kokoro_files, start_with, with_kokoro, KOKORO, VOICE};
use serde_json::json;

const F5: &str = "f5-tiny-v1";

fn body(model: &str, voice: &str, text: &str, seed: u64) -> serde_json::Value {
    json!({ "model": model, "voice": voice, "text": text, "seed": seed, "nfe": if model == F5 { json!(4) } else { json!(null) } })
}

/// `/models` says what each family takes; the voice lists carry the named voices and the store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_families_are_listed_with_their_voices() {
    let s = start_with(with_kokoro, false).await;
    let c = client();
    let models: serde_json::Value = c.get(s.url("/models")).send().await.unwrap().json().await.unwrap();
    let list = models["models"].as_array().expect("models");
    assert_eq!(list.len(), 2);
    assert_eq!(list[0]["id"], F5);
    assert_eq!(list[0]["family"], "f5");
    assert_eq!(list[0]["clones_from_recording"], true);
    assert_eq!(list[1]["id"], KOKORO);
    assert_eq!(list[1]["family"], "kokoro");
    assert_eq!(list[1]["voices"], json!(["af_heart", "am_mirror"]));
    let text = models.to_string();
    assert!(!text.contains("/fixtures") && !text.contains("release-small"), "no server path in {text}");

    let voices: serde_json::Value = c.get(s.url("/v1/audio/voices")).send().await.unwrap().json().await.unwrap();
    assert_eq!(voices["voices"], json!(["af_heart", "am_mirror", VOICE]));
    let openai: serde_json::Value = c.get(s.url("/v1/models")).send().await.unwrap().json().await.unwrap();
    let ids: Vec<&str> = openai["data"].as_array().unwrap().iter().map(|m| m["id"].as_str().unwrap()).collect();
    assert_eq!(ids, [F5, KOKORO, "f5", "kokoro", "tts-1", "tts-1-hd", "gpt-4o-mini-tts"]);
    assert_eq!(openai["object"], "list");
    let store: serde_json::Value = c.get(s.url("/voices")).send().await.unwrap().json().await.unwrap();
    assert_eq!(store["named"], json!([{ "model": KOKORO, "voices": ["af_heart", "am_mirror"] }]));
    s.shutdown().await;
}

/// Alternating requests for both families all succeed, each byte-identical to the same request
/// on a server running only that model; `/health` counts every exchange of weights.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alternating_families_answer_as_single_model_servers() {
    let c = client();
    let requests: Vec<(&str, &str, String, u64)> = (0..4u64)
        .map(|i| {
            if i % 2 == 0 {
                (KOKORO, "af_heart", format!("Line number {i}."), 40 + i)
            } else {
                (F5, VOICE, format!("Line number {i}."), 40 + i)
            }
        })
        .collect();

    let mut alone = Vec::new();
    for model in [F5, KOKORO] {
        let single = start_with(
            |c| {
                if model == KOKORO {
                    c.model = kokoro_files();
                    c.model_id = Some(KOKORO.into());
                } else {
                    c.model_id = Some(F5.into());
                }
            },
            false,
        )
        .await;
        for (m, voice, text, seed) in requests.iter().filter(|r| r.0 == model) {
            let r = c.post(single.url("/tts")).json(&body(m, voice, text, *seed)).send().await.unwrap();
            assert_eq!(r.status(), 200, "{m} alone");
            alone.push((text.clone(), r.bytes().await.unwrap()));
        }
        single.shutdown().await;
    }

    let s = start_with(with_kokoro, false).await;
    for (m, voice, text, seed) in &requests {
        let r = c.post(s.url("/tts")).json(&body(m, voice, text, *seed)).send().await.unwrap();
        assert_eq!(r.status(), 200, "{m}");
        assert_eq!(r.headers()["x-f5-model"], *m);
        let want = &alone.iter().find(|(t, _)| t == text).expect("lone answer").1;
        assert_eq!(&r.bytes().await.unwrap(), want, "{m} {text:?}: as from a server running only {m}");
    }
    let h: serde_json::Value = c.get(s.url("/health")).send().await.unwrap().json().await.unwrap();
    assert_eq!(h["switches"], 4, "F5 loaded at start, then kokoro f5 kokoro f5: {h}");

    // The family name picks the model; OpenAI's endpoint takes a Kokoro mix.
    for (name, id, voice) in [("f5", F5, VOICE), ("f5-tts", F5, VOICE), ("kokoro", KOKORO, "af_heart")] {
        let r = c.post(s.url("/tts")).json(&json!({ "model": name, "voice": voice, "text": "Hi there.", "seed": 1, "nfe": if id == F5 { json!(2) } else { json!(null) } })).send().await.unwrap();
        assert_eq!(r.status(), 200, "{name}");
        assert_eq!(r.headers()["x-f5-model"], id, "the family name {name:?} means the first {id}");
    }
    let r = c
        .post(s.url("/v1/audio/speech"))
        .json(&json!({ "model": "kokoro", "voice": "af_heart(2)+am_mirror", "input": "Hello there.", "response_format": "wav" }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-f5-model"], KOKORO);
    let wav = r.bytes().await.unwrap();
    assert!(wav.starts_with(b"RIFF") && wav.len() > 1000);
    s.shutdown().await;
}

/// What a family cannot take is a 400 that names it, and never a path of the server's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_family_refuses_what_it_cannot_take() {
    let s = start_with(with_kokoro, false).await;
    let c = client();
    let ask = |b: serde_json::Value| {
        let (c, url) = (c.clone(), s.url("/tts"));
        async move {
            let r = c.post(url).json(&b).send().await.unwrap();
            let status = r.status().as_u16();
            (status, r.text().await.unwrap())
        }
    };
    let (status, text) = ask(json!({ "model": KOKORO, "voice": "af_nobody", "text": "Hi." })).await;
    assert_eq!(status, 400, "{text}");
    // OpenAI's error shape, so its clients show the message.
    let error: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(error["error"]["type"], "invalid_request_error", "{text}");
    let text = error["error"]["message"].as_str().unwrap().to_string();
    assert!(text.contains("af_nobody") && text.contains("af_heart") && !text.contains('/'), "{text}");
    let (status, text) = ask(json!({ "model": KOKORO, "voice": "../../etc/passwd", "text": "Hi." })).await;
    assert_eq!(status, 400, "{text}");
    assert!(!text.contains("release-small"), "{text}");
    let (status, text) = ask(json!({ "model": KOKORO, "voice": "af_heart", "text": "Hi.", "nfe": 8 })).await;
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("nfe") && text.contains("Kokoro"), "{text}");
    // A Kokoro voice name is not a stored recording for F5.
    let (status, text) = ask(json!({ "model": F5, "voice": "af_heart", "text": "Hi." })).await;
    assert_eq!(status, 404, "{text}");
    let (status, text) = ask(json!({ "model": F5, "voice": VOICE, "text": "Hi.", "lang": "en-us", "nfe": 2 })).await;
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("lang"), "{text}");
    s.shutdown().await;
}
