//! One forward of the diffusion transformer from a checkpoint, with nothing but `f5-dit`.
//!
//! ```sh
//! cargo run -p f5-dit --example forward                      # the tiny fixture model
//! cargo run -p f5-dit --example forward -- model_1250000.safetensors
//! ```
//!
//! The velocity at one time of the flow is what another implementation is compared on, and
//! what a solver of one's own integrates; `F5Model::sample` runs the reference's solver instead.

use std::path::PathBuf;

use f5_dit::{CpuBackend, F5Model, Overrides, TorchGenerator};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let fixture = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/models/f5-tiny-v1/model.safetensors");
    let path = std::env::args_os().nth(1).map(PathBuf::from).unwrap_or(fixture);
    let model = F5Model::open(&path, CpuBackend::new(), &Overrides::default())?;
    let mel = model.config().mel_dim;
    let frames = 100;
    let reference = vec![-5.0f32; 40 * mel]; // the first 40 frames are "the recording"
    let ids: Vec<u32> = (0..30).map(|i| 10 + i).collect(); // vocabulary ids of the text
    let noise = TorchGenerator::new(7).randn(frames * mel); // torch.randn, bit for bit
    let v = model.velocity(&ids, &reference, &noise, 0.5, true)?;
    let rms = |x: &[f32]| (x.iter().map(|a| a * a).sum::<f32>() / x.len() as f32).sqrt();
    let (cond, uncond) = v.split_at(frames * mel);
    println!("{}: {} parameters, velocity at t=0.5 for {frames} frames", path.display(), model.config().params);
    println!("rms with text {:.4}, without {:.4}", rms(cond), rms(uncond));
    Ok(())
}
