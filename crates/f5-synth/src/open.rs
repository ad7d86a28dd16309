//! Models on disk, and the one place a family and a backend are chosen: [`open_engine`].

use std::path::{Path, PathBuf};
use std::sync::Arc;

use f5_gpukit::{Backend, CpuBackend, DeviceChoice};

use crate::engine::{SpeechEngine, VoiceRef};
use crate::f5_engine::F5Engine;
use crate::kokoro_engine::{locate_voice, KokoroEngine, KOKORO_LANGUAGES};
use crate::synth::Synthesizer;
use crate::SynthError;

/// Finds a voice pack that is not on disk yet (a hub download): `Ok(None)` when the source does
/// not have it, `Err` with a readable reason when it could not be fetched.
pub type VoiceFetcher = Arc<dyn Fn(&str) -> Result<Option<PathBuf>, String> + Send + Sync>;

/// Where a Kokoro model's voice packs are. Built with [`KokoroVoices::in_model_dir`] or
/// [`KokoroVoices::in_dir`] and the `with_*` setters (new sources can then be added without
/// breaking callers).
#[derive(Clone, Default)]
#[non_exhaustive]
pub struct KokoroVoices {
    /// The directory of `NAME.pt` / `NAME.bin` packs (`voices/` of the release layout).
    pub dir: Option<PathBuf>,
    /// Fetches a pack the directory lacks (a hub repository's `voices/NAME.pt`).
    pub fetch: Option<VoiceFetcher>,
    /// Names a fetcher can provide that may not be on disk yet (listed with the directory's).
    pub known: Vec<String>,
    /// Whether a voice may be a file path (the CLI: yes; a server's clients: never).
    pub allow_files: bool,
}

impl std::fmt::Debug for KokoroVoices {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KokoroVoices").field("dir", &self.dir).field("fetch", &self.fetch.is_some()).finish()
    }
}

impl KokoroVoices {
    /// The voices of a model directory: `DIR/voices/`.
    pub fn in_model_dir(dir: &Path) -> Self {
        Self::in_dir(dir.join("voices"))
    }

    /// The voices of a directory of packs (a hub snapshot's `voices/`, wherever it lies).
    pub fn in_dir(voices: PathBuf) -> Self {
        KokoroVoices { dir: Some(voices), ..Default::default() }
    }

    /// Whether a voice may also be a file path (see [`KokoroVoices::allow_files`]).
    pub fn with_allow_files(mut self, allow: bool) -> Self {
        self.allow_files = allow;
        self
    }

    /// Where packs the directory lacks come from, and the names that source can provide.
    pub fn with_fetcher(mut self, fetch: VoiceFetcher, known: Vec<String>) -> Self {
        self.fetch = Some(fetch);
        self.known = known;
        self
    }

    /// Every voice name this source has, sorted: the directory's packs and the known names.
    pub fn list(&self) -> Vec<String> {
        let mut names: Vec<String> = self.known.clone();
        if let Some(entries) = self.dir.as_ref().and_then(|d| std::fs::read_dir(d).ok()) {
            for e in entries.flatten() {
                let p = e.path();
                let is_pack = p.extension().is_some_and(|x| x == "pt" || x == "bin");
                if let (true, Some(stem)) = (is_pack, p.file_stem().and_then(|s| s.to_str())) {
                    names.push(stem.to_string());
                }
            }
        }
        names.sort();
        names.dedup();
        names
    }

    /// The file of one voice (see [`SpeechEngine::speak`] for names, files and mixes).
    pub fn locate(&self, name: &str) -> Result<PathBuf, SynthError> {
        locate_voice(self, name)
    }
}

/// A model's files, resolved but not loaded; which family they are decides how they open.
#[derive(Clone, Debug)]
pub enum ModelFiles {
    /// An F5-TTS checkpoint, its vocabulary, and the Vocos vocoder it speaks through.
    F5 {
        /// The DiT weights (`.safetensors` or `.pt`), with its training YAML beside it if any.
        checkpoint: PathBuf,
        /// `vocab.txt`: one token per line, in the order the model's embedding was trained on.
        vocab: PathBuf,
        /// Vocos weights (`pytorch_model.bin` with its `config.yaml` beside it).
        vocoder: PathBuf,
    },
    /// A Kokoro checkpoint (a file with `config.json` beside it, or the release directory) and
    /// its voices.
    Kokoro {
        /// The weights file, or the directory holding `kokoro-v1_0.pth` and `config.json`.
        checkpoint: PathBuf,
        /// Where its voice packs are.
        voices: KokoroVoices,
    },
}

impl ModelFiles {
    /// The family's short name: `f5` or `kokoro`.
    pub fn family(&self) -> &'static str {
        match self {
            ModelFiles::F5 { .. } => "f5",
            ModelFiles::Kokoro { .. } => "kokoro",
        }
    }

    /// Whether its voices are recordings (F5 clones) rather than names.
    pub fn clones_from_recording(&self) -> bool {
        matches!(self, ModelFiles::F5 { .. })
    }

    /// The checkpoint (a file, or a Kokoro model directory).
    pub fn checkpoint(&self) -> &Path {
        match self {
            ModelFiles::F5 { checkpoint, .. } | ModelFiles::Kokoro { checkpoint, .. } => checkpoint,
        }
    }

    /// The first of its files that is not there, to refuse a wrong path before it is needed.
    pub fn missing_file(&self) -> Option<&Path> {
        let files: Vec<&Path> = match self {
            ModelFiles::F5 { checkpoint, vocab, vocoder } => vec![checkpoint, vocab, vocoder],
            ModelFiles::Kokoro { checkpoint, .. } => vec![checkpoint],
        };
        files.into_iter().find(|p| !p.exists())
    }

    /// An F5 model given without a vocoder (an empty path) speaks through `other`'s; other
    /// families have nothing to inherit.
    pub fn inherit_vocoder(&mut self, other: &ModelFiles) -> Result<(), SynthError> {
        if let ModelFiles::F5 { vocoder, checkpoint, .. } = self {
            if vocoder.as_os_str().is_empty() {
                let ModelFiles::F5 { vocoder: shared, .. } = other else {
                    return Err(SynthError::Options(format!("{}: an F5 model needs a vocoder", checkpoint.display())));
                };
                *vocoder = shared.clone();
            }
        }
        Ok(())
    }

    /// The named voices (none for a family that clones).
    pub fn voices(&self) -> Vec<String> {
        match self {
            ModelFiles::F5 { .. } => Vec::new(),
            ModelFiles::Kokoro { voices, .. } => voices.list(),
        }
    }

    /// The text languages the family reads (`--lang` codes; F5's are informative).
    pub fn languages(&self) -> Vec<&'static str> {
        match self {
            ModelFiles::F5 { .. } => crate::f5_engine::f5_info().languages,
            ModelFiles::Kokoro { .. } => KOKORO_LANGUAGES.to_vec(),
        }
    }

    /// Whether `name` is a voice this model can speak in, before any weights are loaded; the
    /// error names the problem (an unknown name, a malformed mix). Families that clone take
    /// recordings, so there every name is refused.
    pub fn check_voice_name(&self, name: &str) -> Result<(), SynthError> {
        match self {
            ModelFiles::F5 { .. } => VoiceRef::Named(name.to_string()).check(&crate::f5_engine::f5_info()),
            ModelFiles::Kokoro { voices, .. } => {
                for (part, _) in crate::kokoro_engine::voice_parts(name)? {
                    voices.locate(&part)?;
                }
                Ok(())
            }
        }
    }

    /// Seconds of audio `text` will make, at most, and its longest chunk: what a server checks
    /// against its limits before queueing. F5 uses the reference's duration estimate; Kokoro's
    /// length is only known after its forward, so its bound is generous (ten characters a
    /// second, faster than any voice of the release speaks at speed 1).
    pub fn planned_seconds(&self, voice: &VoiceRef, text: &str, speed: f64) -> (f64, f64) {
        match (self, voice) {
            (ModelFiles::F5 { .. }, VoiceRef::Recording(v)) => crate::synth::planned_seconds(v, text, speed),
            _ => {
                let chars = text.chars().filter(|c| !c.is_whitespace()).count() as f64;
                let total = chars / 10.0 / speed.max(1e-3);
                // One forward holds at most 510 phonemes, about 40 s of speech at speed 1.
                (total, total.min(40.0 / speed.max(1e-3)))
            }
        }
    }
}

/// Where and how wide to run a model.
///
/// `DeviceOptions::default()` is f32 on the CPU with every core; `DeviceOptions::new(device,
/// threads)` says both. The struct is `#[non_exhaustive]`, so a new setting is not a breaking
/// change.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct DeviceOptions {
    /// The backend: CPU (f32 or bf16 weights) or a CUDA device (with the `cuda` feature).
    pub device: DeviceChoice,
    /// CPU threads (0: all cores).
    pub threads: usize,
}

impl DeviceOptions {
    /// `device` with `threads` CPU threads (0: all cores).
    pub fn new(device: DeviceChoice, threads: usize) -> Self {
        DeviceOptions { device, threads }
    }
}

impl Default for DeviceOptions {
    fn default() -> Self {
        DeviceOptions::new(DeviceChoice::Cpu, 0)
    }
}

setters!(DeviceOptions {
    with_device => device: DeviceChoice,
    with_threads => threads: usize,
});

/// Opens a model on a device: **the** place where the backend and the family are chosen. Every
/// caller (the CLI, the daemon's model thread) goes through here and then talks only to the
/// returned engine.
pub fn open_engine(files: &ModelFiles, device: DeviceOptions) -> Result<Box<dyn SpeechEngine>, SynthError> {
    match device.device {
        DeviceChoice::Cpu => {
            let kit = CpuBackend::with_threads(device.threads)
                .map_err(|e| SynthError::Device(format!("cannot start {} CPU threads: {e}", device.threads)))?;
            open_on(files, kit)
        }
        DeviceChoice::CpuBf16 => {
            let kit = f5_gpukit::CpuBf16Backend::with_threads(device.threads).map_err(|e| SynthError::Device(e.to_string()))?;
            open_on(files, kit)
        }
        DeviceChoice::CpuInt8 => {
            let kit = f5_gpukit::CpuBf16Backend::with_int8_convs(device.threads).map_err(|e| SynthError::Device(e.to_string()))?;
            open_on(files, kit)
        }
        #[cfg(feature = "cuda")]
        DeviceChoice::Cuda { ordinal, bf16 } => {
            let options = f5_gpukit::CudaOptions::with_bf16_weights(bf16);
            let kit = f5_gpukit::CudaBackend::with_options(ordinal, options)
                .map_err(|e| SynthError::Device(format!("device cuda:{ordinal}: {e}")))?;
            open_on(files, kit)
        }
        #[cfg(not(feature = "cuda"))]
        DeviceChoice::Cuda { .. } => Err(SynthError::Device(
            "this f5 was built without CUDA support (the `cuda` feature); rebuild it with `cargo build --release -p f5-cli --features cuda`".into(),
        )),
    }
}

fn open_on<B: Backend + Clone + Send + 'static>(files: &ModelFiles, kit: B) -> Result<Box<dyn SpeechEngine>, SynthError> {
    Ok(match files {
        ModelFiles::F5 { checkpoint, vocab, vocoder } => {
            Box::new(F5Engine::new(Synthesizer::open(checkpoint, vocab, vocoder, kit, &f5_dit::Overrides::default())?))
        }
        ModelFiles::Kokoro { checkpoint, voices } => Box::new(KokoroEngine::new(f5_kokoro::Kokoro::open(checkpoint, kit)?, voices.clone())),
    })
}
