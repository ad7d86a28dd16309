//! Print the English tokens (text, tag, phonemes) of each line of standard input as JSON, one
//! line per input line: a debugging aid for comparing with the reference's tokens.
//!
//! `cargo run -p f5-g2p --example g2p_tokens < lines.txt`

use std::io::BufRead;

use f5_g2p::{EnglishG2p, EspeakFallback, Fallback};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let british = std::env::args().any(|a| a == "--gb");
    let fallback: Option<Box<dyn Fallback>> = if f5_g2p::espeak_available() { Some(Box::new(EspeakFallback::new(british))) } else { None };
    let g2p = EnglishG2p::new(british, fallback)?;
    for line in std::io::stdin().lock().lines() {
        let line = line?;
        let (ps, tokens) = g2p.phonemize(&line)?;
        let toks: Vec<serde_json::Value> = tokens.iter().map(|t| serde_json::json!([t.text, t.tag, t.phonemes])).collect();
        println!("{}", serde_json::json!({"text": line, "ps": ps, "tokens": toks}));
    }
    Ok(())
}
