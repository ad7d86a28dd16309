//! A 5,000-word text through the front end (`f5-g2p`) and the model: every chunk within the 510
//! phonemes one forward takes, each spoken, the chunks joined in order.

mod common;

use common::{fixtures, shared_kokoro};
use f5_gpukit::CpuBackend;
use f5_kokoro::{Kokoro, VoicePack};

#[test]
fn five_thousand_words_synthesise_in_chunks_within_the_limit() {
    // The front end's own corpus as one paragraph (newlines would cut a chunk at every line),
    // repeated past 5,000 words: chunks are then cut only by the 510-phoneme budget.
    let corpus = std::fs::read_to_string(fixtures().join("../g2p/en_corpus.txt")).expect("fixtures/g2p/en_corpus.txt");
    let paragraph = corpus.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut text = String::new();
    while text.split_whitespace().count() < 5_000 {
        text.push_str(&paragraph);
        text.push(' ');
    }
    let g2p = f5_g2p::G2p::english(false, None).expect("English front end");
    let chunks = g2p.chunks(&text).expect("chunks");
    assert!(chunks.len() > 10, "{} chunks", chunks.len());
    let longest = chunks.iter().map(|c| c.phonemes.chars().count()).max().unwrap_or(0);
    assert!(longest > 400, "chunks should fill the budget (longest {longest})");
    let model = Kokoro::open(fixtures().join("models/kokoro-small/kokoro-small.pth"), CpuBackend::new()).unwrap();
    let voice = VoicePack::open(&shared_kokoro().join("voices/af_heart.bin"), 256).unwrap();
    let mut total = 0usize;
    let mut spoken = 0;
    for (i, chunk) in chunks.iter().enumerate() {
        let n = chunk.phonemes.chars().count();
        assert!(n <= 510, "chunk {i} has {n} phonemes");
        if n == 0 || !chunk.phonemes.chars().any(|c| model.config().vocab.contains_key(&c.to_string())) {
            continue;
        }
        let speech = model.speak(&chunk.phonemes, &voice, 1.0, i as u64).unwrap_or_else(|e| panic!("chunk {i}: {e}"));
        assert_eq!(speech.audio.len(), 600 * speech.durations.iter().sum::<usize>());
        total += speech.audio.len();
        spoken += 1;
    }
    assert!(spoken + 2 >= chunks.len(), "{spoken} of {} chunks spoken", chunks.len());
    eprintln!("{} words → {} chunks → {:.1} s of audio", text.split_whitespace().count(), chunks.len(), total as f64 / 24_000.0);
}
