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

/// Streaming's chunks through the real English front end: the first sentence alone, then the
/// rest of the reference's first chunk in growing pieces of whole sentences; the pieces'
/// phonemes are the reference's chunk split at spaces.
#[test]
fn stream_chunks_speak_the_first_sentence_first() {
    let g2p = G2p::english(false, None).expect("en-us");
    let text = "The old lighthouse stood at the edge of the cliff. Every night its lamp swept across the water, \
                guiding the fishing boats home. The keeper climbed the stairs at dusk and wound the clockwork by hand. \
                In winter the storms were so loud that he could not hear himself think. Still, he never missed a night.";
    let reference = g2p.chunks(text).expect("chunks");
    let streamed = g2p.stream_chunks(text).expect("stream chunks");
    assert_eq!(reference.len(), 1, "a five-sentence paragraph is one reference chunk");
    assert_eq!(streamed[0].graphemes, "The old lighthouse stood at the edge of the cliff.");
    assert_eq!(streamed[1].graphemes, "Every night its lamp swept across the water, guiding the fishing boats home.");
    let joined = |f: fn(&f5_g2p::Chunk) -> &str| streamed.iter().map(f).collect::<Vec<_>>().join(" ");
    assert_eq!(joined(|c| &c.graphemes), reference[0].graphemes);
    assert_eq!(joined(|c| &c.phonemes), reference[0].phonemes);
    // Each piece after the first is within twice what was spoken before it (or one sentence).
    let mut spoken = 0;
    for c in &streamed {
        let n = c.phonemes.chars().count();
        assert!(spoken == 0 || n <= 2 * spoken || !c.graphemes.trim_end_matches('.').contains(". "), "{} after {spoken}", c.graphemes);
        spoken += n + 1;
    }
    // One sentence: nothing to cut, the reference chunking unchanged.
    let one = "The old lighthouse stood at the edge of the cliff.";
    assert_eq!(g2p.stream_chunks(one).expect("one"), g2p.chunks(one).expect("one"));
}
