//! Kokoro from phonemes, with nothing but `f5-kokoro`: a model, a voice pack and IPA in, 24 kHz
//! samples and per-phoneme durations out. (The text → phonemes front end is `f5-g2p`; `f5-synth`
//! joins the two and writes WAVs.)
//!
//! ```sh
//! cargo run -p f5-kokoro --example phonemes                         # the small fixture model
//! cargo run -p f5-kokoro --example phonemes -- Kokoro-82M Kokoro-82M/voices/af_heart.pt "həlˈoʊ"
//! ```
//!
//! The fixture model is a shrunken Kokoro with random weights: the audio has the right length
//! for the phonemes, not speech.

use std::path::PathBuf;

use f5_kokoro::{CpuBackend, Kokoro, VoicePack};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let fixtures = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/kokoro");
    let mut args = std::env::args_os().skip(1);
    let model = args.next().map(PathBuf::from).unwrap_or_else(|| fixtures.join("models/kokoro-small/kokoro-small.pth"));
    let voice = args.next().map(PathBuf::from).unwrap_or_else(|| fixtures.join("voices/af_heart.pt"));
    let phonemes = args.next().and_then(|p| p.into_string().ok()).unwrap_or_else(|| "həlˈoʊ wˈɜːld".into());

    let kokoro = Kokoro::open(&model, CpuBackend::new())?;
    // A pack holds one 256-float style per phoneme count; the model picks the row for this text.
    let pack = VoicePack::open(&voice, 256)?;
    let speech = kokoro.speak(&phonemes, &pack, 1.0, 0)?;
    let seconds = speech.audio.len() as f64 / 24_000.0;
    let peak = speech.audio.iter().fold(0.0f32, |m, s| m.max(s.abs()));
    println!("{phonemes:?}: {seconds:.2} s, peak {peak:.3}, frames per token {:?}", speech.durations);
    Ok(())
}
