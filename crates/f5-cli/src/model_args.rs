//! The options that choose a model and where it runs, shared by `f5 synth` and `f5 batch` (and
//! filled from the settings file by `config.rs`, which finds them by their ids `model`, `device`
//! and `precision`).

use std::sync::Arc;

use anyhow::Result;
use f5_hub::Hub;

use crate::resolve;

/// Which model speaks.
#[derive(clap::Args, Debug, Clone)]
pub struct ModelArgs {
    /// The model: a directory or checkpoint file, a local id ($F5_HOME/models/ID), or a hub
    /// reference, fetched once into the Hugging Face cache. The family is told from the files:
    /// a Kokoro release (hexgrad/Kokoro-82M, the default; kokoro-v1_0.pth + config.json + voices/)
    /// or an F5-TTS checkpoint (e.g. SWivid/F5-TTS/F5TTS_v1_Base/model_1250000.safetensors).
    #[arg(id = "model", long = "model", short = 'm', default_value = resolve::DEFAULT_MODEL)]
    pub name: String,
    /// F5: the vocab.txt of the checkpoint (default: vocab.txt beside it, in the same directory or repo).
    #[arg(long)]
    pub vocab: Option<String>,
    /// F5: the Vocos vocoder: a directory or weights file, a local id, or a hub repo
    /// (default charactr/vocos-mel-24khz).
    #[arg(long)]
    pub vocoder: Option<String>,
    /// The settings file's vocoder: used for F5 models when --vocoder is not given.
    #[arg(skip)]
    pub default_vocoder: Option<String>,
}

impl ModelArgs {
    /// The model's files (fetched through `hub` when it is a reference); for the default model,
    /// a failure says how to work offline.
    pub fn files(&self, hub: &Arc<Hub>) -> Result<f5_synth::ModelFiles> {
        let vocoder = resolve::VocoderChoice { given: self.vocoder.as_deref(), default: self.default_vocoder.as_deref() };
        resolve::model_files_with(hub, &self.name, self.vocab.as_deref(), vocoder, resolve::Use::Command).map_err(|e| {
            if self.name == resolve::DEFAULT_MODEL {
                resolve::default_model_hint(e)
            } else {
                e
            }
        })
    }
}

/// Where the model runs.
#[derive(clap::Args, Debug, Clone)]
pub struct RunArgs {
    /// CPU threads (default: all cores).
    #[arg(long, default_value_t = 0)]
    pub threads: usize,
    /// Where the model runs: cpu, or cuda / cuda:N on a build with the `cuda` feature.
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// Weight precision: f32; bf16 (bf16 weights, f32 accumulation; on a CPU without AVX-512 BF16
    /// the weights are widened to f32 per op); or int8 (CPU only, needs AVX-512 VNNI: bf16, and
    /// dense convolutions in int8 — Kokoro's decoder; with AMX, those under 256 channels stay on
    /// the faster bf16 tiles).
    #[arg(long, default_value = "f32")]
    pub precision: String,
}

impl RunArgs {
    /// The device and thread count, checked (an unknown device or precision is an error here).
    pub fn options(&self) -> Result<f5_synth::DeviceOptions> {
        let device = f5_gpukit::DeviceChoice::parse(&self.device, &self.precision)?;
        Ok(f5_synth::DeviceOptions::new(device, crate::limits::clamp_threads(self.threads)))
    }

    /// The model opened on this device.
    pub fn open(&self, files: &f5_synth::ModelFiles) -> Result<Box<dyn f5_synth::SpeechEngine>> {
        Ok(f5_synth::open_engine(files, self.options()?)?)
    }
}
