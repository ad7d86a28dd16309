//! A decompression bomb posted as a voice: alone in its own test binary, because it measures the
//! process's peak memory, which any test running beside it would disturb.

mod common;

use common::*;
use reqwest::multipart::{Form, Part};

fn flac_upload(id: &str, flac: Vec<u8>) -> Form {
    Form::new().text("id", id.to_string()).text("transcript", TRANSCRIPT).part("audio", Part::bytes(flac).file_name("bomb.flac"))
}

/// 2^28 samples of one value (101 minutes at 44.1 kHz, 1 GiB as f32) in ~60 KB of FLAC: refused
/// as too long after decoding at most the 30 s a reference may have, with the server's peak
/// memory growing by far less than one full decode; the store is untouched. A 10 s file built
/// the same way is accepted, so the refusal is about the length, not a broken file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flac_bomb_is_refused_without_decoding_it() {
    let s = start().await;
    let c = client();
    let bomb = constant_flac(44_100, 1 << 28, 3000);
    assert!(bomb.len() < 100_000, "the bomb is small: {} bytes", bomb.len());
    let before = s.store_listing();
    // Settle the allocator with one request of each kind first, then measure from here.
    let _ = c.get(s.url("/voices")).send().await.unwrap();
    let baseline = peak_rss(true);
    let r = c.post(s.url("/voices")).multipart(flac_upload("bomb", bomb)).send().await.unwrap();
    let status = r.status().as_u16();
    let body = r.text().await.unwrap();
    let grew = peak_rss(false).saturating_sub(baseline);
    assert_eq!(status, 413, "{body}");
    assert!(body.contains("longer than 30 s"), "{body}");
    assert_eq!(s.store_listing(), before, "nothing stored");
    // One decode of the whole file is 1 GiB of f32 samples; 30 s at 44.1 kHz is 5 MiB. The
    // bound leaves room for the form, the decoder's buffers and the allocator's slack.
    assert!(grew < 128 << 20, "peak memory grew by {} MiB while refusing the bomb", grew >> 20);

    let honest = constant_flac(44_100, 10 * 44_100, 3000);
    let r = c.post(s.url("/voices")).multipart(flac_upload("steady", honest)).send().await.unwrap();
    assert_eq!(r.status(), 201, "{}", r.text().await.unwrap());
    s.shutdown().await;
}
