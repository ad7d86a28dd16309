//! Prints the tokens (and, with a vocabulary, the ids) the model reads for a text.
//!
//! cargo run -p f5-text --example tokens -- "我们在2024年用F5-TTS合成了speech；很好！" [vocab.txt]

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let text = args.next().ok_or("usage: tokens TEXT [VOCAB]")?;
    let tokens = f5_text::to_tokens(&text)?;
    println!("{tokens:?}");
    if let Some(path) = args.next() {
        let vocab = f5_text::Vocab::load(path)?;
        println!("{:?}", vocab.ids(&tokens));
    }
    for chunk in f5_text::chunk_text(&text, 135) {
        println!("chunk: {chunk}");
    }
    Ok(())
}
