//! Synthesise a mel spectrogram with the tiny random-weight fixture and write it as .npy.
//!
//! ```sh
//! cargo run -p f5-dit --example tiny_mel -- /tmp/tiny_mel.npy
//! ```
//!
//! The reference "mel" here is zeros and the token ids are arbitrary: this shows the library
//! API (open, sample, seeded noise); `f5-synth` does the real front end.

use std::path::PathBuf;

use f5_dit::{duration, F5Model, Noise, Overrides, SampleOptions};
use f5_gpukit::CpuBackend;
use npyz::WriterBuilder;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let out = std::env::args().nth(1).map(PathBuf::from).unwrap_or_else(|| PathBuf::from("tiny_mel.npy"));
    let ckpt = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/models/f5-tiny-v1/model.safetensors");
    let model = F5Model::open(&ckpt, CpuBackend::new(), &Overrides::default())?;
    let mel_dim = model.config().mel_dim;
    // A 2-second "reference" (its frames are kept as they are) and 40 tokens of text.
    let ref_samples = 2 * duration::SAMPLE_RATE;
    let ref_frames = ref_samples / duration::HOP + 1;
    let reference = vec![-5.0f32; ref_frames * mel_dim];
    let ids: Vec<u32> = (0..40).map(|i| 10 + i % 60).collect();
    let frames = duration::sampled_frames(duration::estimate_frames(ref_samples, 30, 40, 1.0, None), ids.len(), ref_samples);
    let opts = SampleOptions::default().with_steps(8);
    let mel = model.sample(&ids, &reference, frames, Noise::Seed(42), &opts, &mut |done, total| eprint!("\rstep {done}/{total}"))?;
    eprintln!();
    let file = std::io::BufWriter::new(std::fs::File::create(&out)?);
    let mut w = npyz::WriteOptions::new().default_dtype().shape(&[frames as u64, mel_dim as u64]).writer(file).begin_nd()?;
    w.extend(mel.iter().copied())?;
    w.finish()?;
    println!(
        "{}: {frames} frames × {mel_dim} mel channels ({} config, {} parameters)",
        out.display(),
        model.config().variant().map_or("mixed", |v| v.name()),
        model.config().params
    );
    Ok(())
}
