//! F5-TTS behind the engine interface: a [`Synthesizer`] that clones the voice of a recording.

use f5_gpukit::Backend;
use f5_verify::GateStatus;

use crate::engine::{EngineInfo, SpeakOptions, SpeechEngine, Spoken, VoiceRef};
use crate::synth::{Progress, SynthOptions, Synthesizer, SAMPLE_RATE};
use crate::{ListenBack, SynthError};

/// What the F5 family offers.
pub(crate) fn f5_info() -> EngineInfo {
    EngineInfo {
        family: "f5",
        sample_rate: SAMPLE_RATE,
        clones_from_recording: true,
        // The released checkpoints were trained on English and Chinese; the text front end
        // spells any script, so other languages work as well as the checkpoint knows them.
        languages: vec!["en", "zh"],
        word_timestamps: false,
    }
}

/// The F5 family's engine.
pub(crate) struct F5Engine<B: Backend> {
    synth: Synthesizer<B>,
    info: EngineInfo,
}

impl<B: Backend> F5Engine<B> {
    pub(crate) fn new(synth: Synthesizer<B>) -> Self {
        F5Engine { synth, info: f5_info() }
    }

    /// The family's own options from the shared ones; options of other families refused.
    fn options(&self, opts: &SpeakOptions) -> Result<SynthOptions, SynthError> {
        opts.refuse_set(
            "F5-TTS",
            &[("lang", opts.lang.is_some()), ("phonemes", opts.phonemes), ("word timestamps", opts.word_timestamps)],
        )?;
        let d = SynthOptions::default();
        Ok(SynthOptions {
            nfe: opts.nfe.unwrap_or(d.nfe),
            cfg: opts.cfg.unwrap_or(d.cfg),
            sway: match opts.sway {
                None => d.sway,
                Some(0.0) => None,
                Some(s) => Some(s),
            },
            speed: opts.speed,
            seed: opts.seed,
            cross_fade: opts.cross_fade.unwrap_or(d.cross_fade),
            fix_duration: opts.fix_duration,
            retries: opts.retries,
            max_wer: opts.max_wer,
            short_fix: opts.short_fix,
            split_on_fail: opts.split_on_fail,
            ..d
        })
    }
}

impl<B: Backend> SpeechEngine for F5Engine<B> {
    fn info(&self) -> &EngineInfo {
        &self.info
    }

    fn describe(&self) -> String {
        let c = &self.synth.model.config();
        let variant = c.variant().map_or("mixed", |v| v.name());
        match &c.source {
            f5_dit::TraitSource::Yaml(p) => format!("F5-TTS {variant}, {} heads of {} (traits from {})", c.heads, c.dim_head, p.display()),
            _ => format!(
                "F5-TTS {variant}, {} heads of {} (no training config beside the checkpoint: defaults; put the model's .yaml beside it if it is a v0 model)",
                c.heads, c.dim_head
            ),
        }
    }

    fn voices(&self) -> Vec<String> {
        Vec::new()
    }

    fn speak(
        &self,
        voice: &VoiceRef,
        text: &str,
        opts: &SpeakOptions,
        progress: &mut dyn FnMut(Progress<'_>),
        sink: &mut dyn FnMut(&[f64]),
    ) -> Result<Spoken, SynthError> {
        voice.check(&self.info)?;
        let VoiceRef::Recording(voice) = voice else {
            return Err(SynthError::Options("F5-TTS needs a reference recording".into()));
        };
        let options = self.options(opts)?;
        let mut mel = Vec::new();
        let (seed, chunks) = self.synth.run(voice, text, &options, progress, sink, Some(&mut mel))?;
        Ok(Spoken { seed, chunks, mel, words: Vec::new() })
    }

    fn gate_status(&self, opts: &SpeakOptions) -> GateStatus {
        match self.options(opts) {
            Ok(o) => self.synth.gate_status(&o),
            Err(_) => GateStatus::Off,
        }
    }

    fn set_listen_back(&mut self, listen: ListenBack) {
        self.synth.listen = Some(listen);
    }
}
