//! Recording + text → WAV with nothing but `f5-synth` (the README's example, on the fixtures).
//!
//! ```sh
//! cargo run -p f5-synth --example speak                # the tiny fixture models
//! cargo run -p f5-synth --example speak -- CHECKPOINT VOCAB VOCODER RECORDING TRANSCRIPT TEXT OUT.wav
//! ```
//!
//! The fixture models have random weights: the result has the right length and loudness, not words.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use f5_synth::{open_engine, speak_to_memory, DeviceOptions, ModelFiles, SpeakOptions, Voice, VoiceRef};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let f = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures");
    let fixture = |p: &str| f.join(p).display().to_string();
    let out = std::env::temp_dir().join("f5-synth-example-speak.wav").display().to_string();
    let defaults = [
        fixture("models/f5-tiny-v1/model.safetensors"),
        fixture("vocab.txt"),
        fixture("models/vocos-tiny/pytorch_model.bin"),
        fixture("audio/ref_22050.wav"),
        "The birch canoe slid on the smooth planks.".into(),
        "Hello world, this is a tiny test.".into(),
        out,
    ];
    let given: Vec<String> = std::env::args().skip(1).collect();
    let args = if given.is_empty() { defaults.to_vec() } else { given };
    let [checkpoint, vocab, vocoder, recording, transcript, text, out] = &args[..] else {
        return Err("usage: speak CHECKPOINT VOCAB VOCODER RECORDING TRANSCRIPT TEXT OUT.wav".into());
    };
    let files = ModelFiles::F5 { checkpoint: checkpoint.into(), vocab: vocab.into(), vocoder: vocoder.into() };
    let engine = open_engine(&files, DeviceOptions::default())?;
    let voice = VoiceRef::Recording(Arc::new(Voice::load(Path::new(recording), transcript, 0.1)?));
    let options = SpeakOptions::default().with_seed(Some(42)).with_nfe(Some(8));
    let audio = speak_to_memory(&*engine, &voice, text, &options, &mut |_| {})?;
    audio.write_wav(Path::new(out), engine.info().sample_rate)?;
    println!("{out}: {:.2} s in {} chunk(s), seed {}", audio.seconds(), audio.chunks.len(), audio.seed);
    Ok(())
}
