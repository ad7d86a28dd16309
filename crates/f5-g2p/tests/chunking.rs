//! Chunk boundaries against kokoro's KPipeline on long paragraphs.

mod common;

use common::{espeak_or_skip, load_json};
use f5_g2p::{G2p, Language, MAX_PHONEMES};

fn pairs(v: &serde_json::Value) -> Vec<(String, String)> {
    v.as_array()
        .map(|a| {
            a.iter()
                .map(|c| (c["graphemes"].as_str().unwrap_or_default().to_string(), c["phonemes"].as_str().unwrap_or_default().to_string()))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn english_paragraphs_chunk_like_kpipeline() {
    // a few words of the paragraphs ("Gutenberg", "copied") are read by the espeak-ng fallback
    if !espeak_or_skip("english_paragraphs_chunk_like_kpipeline") {
        return;
    }
    let golden = load_json("goldens.json");
    let g2p = G2p::new(Language::EnUs).expect("en-us");
    let paragraphs = golden["en_long"].as_array().expect("paragraphs");
    let mut cut_by = Vec::new();
    for p in paragraphs {
        let text = p["text"].as_str().unwrap_or_default().replace('\n', " ");
        let want = pairs(&p["chunks"]);
        let got: Vec<(String, String)> = g2p.chunks(&text).expect("chunks").into_iter().map(|c| (c.graphemes, c.phonemes)).collect();
        assert!(want.len() > 1, "a golden paragraph must need chunking");
        for (g, w) in got.iter().zip(&want) {
            assert_eq!(g, w, "chunk differs");
        }
        assert_eq!(got.len(), want.len(), "chunk count differs");
        for (_, ps) in &got {
            assert!(ps.chars().count() <= MAX_PHONEMES);
        }
        cut_by.push(want[0].0.chars().last());
    }
    // the three paragraphs exercise the three waterfall levels and the no-mark fallback
    println!("first chunks end with {cut_by:?}");
}

#[test]
fn espeak_paragraphs_chunk_like_kpipeline() {
    if !espeak_or_skip("espeak_paragraphs_chunk_like_kpipeline") {
        return;
    }
    let golden = load_json("goldens.json");
    for (name, lang) in [("es", Language::Es), ("fr", Language::Fr), ("hi", Language::Hi), ("it", Language::It), ("pt-br", Language::PtBr)]
    {
        let case = &golden["espeak"][format!("{name}_long")];
        let want = pairs(&case["chunks"]);
        assert!(want.len() > 1, "{name}: the golden paragraph must need chunking");
        let g2p = G2p::new(lang).expect("front end");
        let got: Vec<(String, String)> =
            g2p.chunks(case["text"].as_str().unwrap_or_default()).expect("chunks").into_iter().map(|c| (c.graphemes, c.phonemes)).collect();
        assert_eq!(got, want, "{name} chunks differ");
    }
}
