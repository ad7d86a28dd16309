//! What the synthesizer's test files share: the tiny fixtures, opened the same way.

use std::path::PathBuf;

use f5_dit::Overrides;
use f5_gpukit::CpuBackend;
use f5_synth::{Synthesizer, Voice};

pub fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures")
}

/// The tiny v1 model, the fixture vocabulary and the tiny Vocos on the CPU backend.
pub fn synthesizer() -> Synthesizer<CpuBackend> {
    let f = fixtures();
    Synthesizer::open(
        &f.join("models/f5-tiny-v1/model.safetensors"),
        &f.join("vocab.txt"),
        &f.join("models/vocos-tiny/pytorch_model.bin"),
        CpuBackend::new(),
        &Overrides::default(),
    )
    .expect("open tiny models")
}

/// The fixture recording with its transcript, loudness target 0.1 (the reference's default).
#[allow(dead_code)] // not every test file uses it
pub fn birch_voice() -> Voice {
    Voice::load(&fixtures().join("audio/ref_22050.wav"), "The birch canoe slid on the smooth planks.", 0.1).expect("load the fixture voice")
}
