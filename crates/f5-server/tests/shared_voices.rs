//! Two servers on one voice store directory, as stateless replicas behind a load balancer: a
//! voice added through one is listed and spoken by the other at once, the same upload through
//! both agrees (no conflict), other content under the same id is refused, and a removal
//! through one is seen by the other.

mod common;

use common::*;
use reqwest::multipart::{Form, Part};

fn voice_form(id: &str, transcript: &str, audio: Vec<u8>) -> Form {
    Form::new().text("id", id.to_string()).text("transcript", transcript.to_string()).part("audio", Part::bytes(audio).file_name("ref.wav"))
}

async fn tts(c: &reqwest::Client, s: &TestServer, voice: &str, seed: u64) -> (u16, Vec<u8>) {
    let body = serde_json::json!({ "voice": voice, "text": "Two servers, one voice.", "nfe": 4, "seed": seed });
    let r = c.post(s.url("/tts")).json(&body).send().await.unwrap();
    (r.status().as_u16(), r.bytes().await.unwrap().to_vec())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_on_one_voice_directory_see_and_agree_on_each_others_voices() {
    let a = start().await;
    let shared = a.voices.clone();
    let b = start_with(move |c| c.voices_dir = shared, false).await;
    let c = client();

    // Added through A, spoken by B with the same bytes A makes.
    let r = c.post(a.url("/voices")).multipart(voice_form("carol", TRANSCRIPT, reference_wav())).send().await.unwrap();
    assert_eq!(r.status(), 201);
    let listed: serde_json::Value = c.get(b.url("/voices")).send().await.unwrap().json().await.unwrap();
    let ids: Vec<&str> = listed["voices"].as_array().unwrap().iter().filter_map(|v| v["id"].as_str()).collect();
    assert!(ids.contains(&"carol"), "B lists A's voice: {listed}");
    let (status_a, wav_a) = tts(&c, &a, "carol", 9).await;
    let (status_b, wav_b) = tts(&c, &b, "carol", 9).await;
    assert_eq!((status_a, status_b), (200, 200));
    wav_samples(&wav_a);
    assert!(wav_a == wav_b, "the same voice and seed on two replicas make the same bytes");

    // The same upload through B (a retry the balancer sent elsewhere) agrees; other content is
    // a conflict, and leaves the voice as it was.
    let r = c.post(b.url("/voices")).multipart(voice_form("carol", TRANSCRIPT, reference_wav())).send().await.unwrap();
    assert_eq!(r.status(), 201, "{}", r.text().await.unwrap_or_default());
    let r = c.post(b.url("/voices")).multipart(voice_form("carol", "Other words entirely.", reference_wav())).send().await.unwrap();
    assert_eq!(r.status(), 409);
    let (_, again) = tts(&c, &a, "carol", 9).await;
    assert!(again == wav_a);

    // Replaced through B, heard through A: nothing is cached past the store.
    let form = voice_form("carol", "The birch canoe slid on the smooth planks, again.", reference_wav()).text("replace", "true");
    assert_eq!(c.post(b.url("/voices")).multipart(form).send().await.unwrap().status(), 201);
    let (_, replaced) = tts(&c, &a, "carol", 9).await;
    assert!(replaced != wav_a, "A speaks the replaced voice");

    // Removed through B, gone from A.
    assert_eq!(c.delete(b.url("/voices/carol")).send().await.unwrap().status(), 204);
    let (status, _) = tts(&c, &a, "carol", 9).await;
    assert_eq!(status, 404);

    b.shutdown().await;
    a.shutdown().await;
}
