//! Streaming: samples handed to a callback as soon as they are final, chunk by chunk, so a long
//! text plays (or goes out over a socket) before the whole is spoken. Kokoro on the small
//! fixture model in the release layout.
//!
//! ```sh
//! cargo run -p f5-synth --example stream
//! cargo run -p f5-synth --example stream -- Kokoro-82M af_heart "Some text to speak."
//! ```

use std::path::PathBuf;

use f5_synth::{open_engine, DeviceOptions, KokoroVoices, ModelFiles, Progress, SpeakOptions, VoiceRef};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let dir = args
        .next()
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/kokoro/release-small"));
    let voice = args.next().unwrap_or_else(|| "af_heart".into());
    let text = args.next().unwrap_or_else(|| "The first sentence is short. The second one takes a little longer to say.".into());

    let files = ModelFiles::Kokoro { checkpoint: dir.clone(), voices: KokoroVoices::in_model_dir(&dir) };
    let engine = open_engine(&files, DeviceOptions::default())?;
    let rate = engine.info().sample_rate as f64;
    let mut received = 0usize;
    let spoken = engine.speak(
        &VoiceRef::Named(voice),
        &text,
        &SpeakOptions::default().with_seed(Some(1)),
        &mut |p| {
            if let Progress::Chunk { index, total, text, .. } = p {
                println!("chunk {}/{total}: {text:?}", index + 1);
            }
        },
        &mut |samples: &[f64]| {
            if samples.is_empty() {
                return;
            }
            received += samples.len();
            println!("  +{} samples ({:.2} s so far)", samples.len(), received as f64 / rate);
        },
    )?;
    println!("{:.2} s in {} chunk(s), seed {}", received as f64 / rate, spoken.chunks.len(), spoken.seed);
    Ok(())
}
