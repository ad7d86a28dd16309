//! Print the phoneme chunks of each line of standard input, tab-separated, one line per input
//! line: `cargo run -p f5-g2p --example g2p_lines -- LANG < lines.txt`.

use std::io::BufRead;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let lang: f5_g2p::Language = std::env::args().nth(1).unwrap_or_else(|| "en-us".to_string()).parse()?;
    let g2p = f5_g2p::G2p::new(lang)?;
    for line in std::io::stdin().lock().lines() {
        let chunks: Vec<String> = g2p.chunks(&line?)?.into_iter().map(|c| c.phonemes).collect();
        println!("{}", chunks.join("\t"));
    }
    Ok(())
}
