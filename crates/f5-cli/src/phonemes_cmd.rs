//! `f5 phonemes`: what Kokoro is given for a text — its front end's phoneme chunks, one per
//! line, or the chunks with their word tokens as JSON lines.

use std::io::Read;

use anyhow::{Context, Result};
use clap::Args;
use f5_g2p::{G2p, Language};

#[derive(Args)]
pub struct PhonemesArgs {
    /// The text ("-" reads standard input).
    pub text: String,
    /// Language: en-us, en-gb, es, fr, hi, it, pt-br (or kokoro's letters a b e f h i p).
    #[arg(long, default_value = "en-us")]
    pub lang: String,
    /// Print each chunk as a JSON object with its text, phonemes and word tokens.
    #[arg(long)]
    pub json: bool,
}

/// The lines `f5 phonemes` prints for `text`.
fn render(g2p: &G2p, text: &str, json: bool) -> Result<Vec<String>> {
    let chunks = g2p.chunks(text)?;
    if !json {
        return Ok(chunks.into_iter().map(|c| c.phonemes).collect());
    }
    chunks.iter().map(|c| serde_json::to_string(c).context("encoding a chunk as JSON")).collect()
}

pub fn run(args: PhonemesArgs) -> Result<()> {
    let language: Language = args.lang.parse()?;
    let text = if args.text == "-" {
        let mut s = String::new();
        std::io::stdin().read_to_string(&mut s).context("reading standard input")?;
        s
    } else {
        args.text
    };
    let g2p = G2p::new(language)?;
    if language.is_english() && !g2p.has_fallback() {
        eprintln!("warning: espeak-ng not found, so words outside the lexicon are skipped (install the Debian package `espeak-ng`)");
    }
    for line in render(&g2p, &text, args.json)? {
        println!("{line}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prints_one_chunk_per_line_and_json_tokens() {
        let g2p = G2p::english(false, None).expect("en-us");
        let lines = render(&g2p, "Hello world.\nIt costs $5.", false).expect("render");
        assert_eq!(lines, vec!["həlˈO wˈɜɹld.", "ˌɪt kˈɔsts fˈIv dˈɑləɹz."]);
        let json = render(&g2p, "Hello world.", true).expect("render");
        let v: serde_json::Value = serde_json::from_str(&json[0]).expect("json");
        assert_eq!(v["phonemes"], "həlˈO wˈɜɹld.");
        assert_eq!(v["tokens"][1]["text"], "world");
        assert_eq!(v["tokens"][1]["phonemes"], "wˈɜɹld");
    }
}
