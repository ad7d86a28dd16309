//! Throughput of the English front end: every line of a text file through `G2p::chunks`
//! (misaki's G2P + kokoro's chunking), once with the lexicon alone and once with the espeak-ng
//! fallback for out-of-lexicon words. One thread.
//!
//! `cargo run --release -p f5-g2p --example bench_english -- TEXT_FILE`
//! (fixtures/g2p/bench_misaki.py --make-text writes the 1 MB text used for the reference.)

use std::time::Instant;

use f5_g2p::{EspeakFallback, G2p};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args().nth(1).ok_or("usage: bench_english TEXT_FILE")?;
    let text = std::fs::read_to_string(&path)?;
    let lines: Vec<&str> = text.lines().collect();
    println!("{} bytes, {} lines", text.len(), lines.len());

    let start = Instant::now();
    let lexicon_only = G2p::english(false, None)?;
    println!("load: {:.3} s", start.elapsed().as_secs_f64());
    let mut configs: Vec<(&str, G2p)> = vec![("lexicon only", lexicon_only)];
    if f5_g2p::espeak_available() {
        configs.push(("with espeak-ng fallback", G2p::english(false, Some(Box::new(EspeakFallback::new(false))))?));
    }
    for (name, g2p) in &configs {
        let start = Instant::now();
        let mut phonemes = 0usize;
        for line in &lines {
            for chunk in g2p.chunks(line)? {
                phonemes += chunk.phonemes.chars().count();
            }
        }
        let secs = start.elapsed().as_secs_f64();
        println!("{name}: {secs:.3} s ({:.2} MB/s), {phonemes} phoneme characters", text.len() as f64 / 1e6 / secs);
    }
    Ok(())
}
