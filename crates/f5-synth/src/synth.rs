//! The synthesizer: text → chunks → (duration, noise, sampling, vocoder) per chunk → one wave.

use std::path::Path;

use f5_dit::duration::{estimate_frames, sampled_frames, split_fix_duration, HOP};
use f5_dit::{F5Model, Noise, Overrides, SampleOptions, Solver, TorchGenerator};
use f5_gpukit::Backend;
use f5_text::Vocab;
use f5_verify::{ChunkScore, Gate, GateStatus, Language, TotalScore, Transcribe};
use f5_vocos::Vocos;

use crate::voice::Voice;
use crate::SynthError;

/// Output sample rate.
pub const SAMPLE_RATE: u32 = 24_000;

/// Everything that shapes one synthesis; the defaults are the reference's inference defaults.
///
/// Build with `SynthOptions::default().with_nfe(16).with_seed(Some(7))`: the struct is
/// `#[non_exhaustive]`, so a new option is not a breaking change.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct SynthOptions {
    /// ODE steps (`nfe_step`).
    pub nfe: usize,
    /// Classifier-free guidance strength.
    pub cfg: f32,
    /// Sway sampling coefficient; `None` keeps the plain grid.
    pub sway: Option<f32>,
    /// Speaking-rate factor of the duration estimate (> 0).
    pub speed: f64,
    /// Seed of the noise; `None` draws one (reported in [`Audio::seed`]).
    pub seed: Option<u64>,
    /// Cross-fade between chunks, seconds (0 = butt join).
    pub cross_fade: f64,
    /// Total duration in seconds, reference included, instead of the estimate.
    pub fix_duration: Option<f64>,
    /// The ODE solver (Euler, as the reference).
    pub solver: Solver,
    /// The pruned EPSS time grids for the step counts that have one (as the reference).
    pub use_epss: bool,
    /// Listen-back gate: regenerate a chunk up to this many times while its word error rate is
    /// above `max_wer` (only with a transcriber, see [`Synthesizer::with_listen_back`]).
    pub retries: u32,
    /// Listen-back gate: the highest word error rate a chunk is kept with.
    pub max_wer: f64,
    /// Our rule for short lines and one-word openings ([`crate::short_fix`]), off by default
    /// because it departs from the reference: a one-word opening sentence becomes a chunk of its
    /// own, and a short chunk gets up to 1.1 s more than the reference's estimate. Not applied to
    /// the duration when `fix_duration` is set (the total is the user's).
    pub short_fix: bool,
    /// Split-on-fail: a chunk still misheard after its retries is cut into sentences
    /// ([`crate::split_on_fail`]), each generated and checked on its own. On by default; only
    /// acts with a transcriber.
    pub split_on_fail: bool,
}

impl Default for SynthOptions {
    fn default() -> Self {
        let gate = Gate::default();
        SynthOptions {
            retries: gate.retries(),
            max_wer: gate.max_wer(),
            nfe: 32,
            cfg: 2.0,
            sway: Some(-1.0),
            speed: 1.0,
            seed: None,
            cross_fade: 0.15,
            fix_duration: None,
            solver: Solver::Euler,
            use_epss: true,
            short_fix: false,
            split_on_fail: true,
        }
    }
}

setters!(SynthOptions {
    with_nfe => nfe: usize,
    with_cfg => cfg: f32,
    with_sway => sway: Option<f32>,
    with_speed => speed: f64,
    with_seed => seed: Option<u64>,
    with_cross_fade => cross_fade: f64,
    with_fix_duration => fix_duration: Option<f64>,
    with_solver => solver: Solver,
    with_use_epss => use_epss: bool,
    with_retries => retries: u32,
    with_max_wer => max_wer: f64,
    with_short_fix => short_fix: bool,
    with_split_on_fail => split_on_fail: bool,
});

impl SynthOptions {
    fn validate(&self) -> Result<(), SynthError> {
        let bad = |m: String| Err(SynthError::Options(m));
        if self.nfe == 0 || self.nfe > 1000 {
            return bad(format!("nfe must be between 1 and 1000, got {}", self.nfe));
        }
        if !(self.speed.is_finite() && self.speed > 0.0 && self.speed <= 10.0) {
            return bad(format!("speed must be in (0, 10], got {}", self.speed));
        }
        if !self.cfg.is_finite() || self.sway.is_some_and(|s| !s.is_finite()) {
            return bad("cfg and sway must be finite".into());
        }
        if !(self.cross_fade.is_finite() && self.cross_fade >= 0.0 && self.cross_fade <= 5.0) {
            return bad(format!("cross-fade must be between 0 and 5 s, got {}", self.cross_fade));
        }
        if let Some(d) = self.fix_duration {
            if !(d.is_finite() && d > 0.0 && d <= 600.0) {
                return bad(format!("fix-duration must be in (0, 600] s, got {d}"));
            }
        }
        Ok(())
    }
}

/// Where a synthesis is.
#[derive(Clone, Copy, Debug)]
pub enum Progress<'a> {
    /// Chunk `index` (0-based) of `total` starts (again, with `attempt` > 0, after the
    /// listen-back check heard too many errors).
    Chunk {
        /// Which chunk, from 0.
        index: usize,
        /// Chunks in the whole text.
        total: usize,
        /// The chunk's text, as the model reads it.
        text: &'a str,
        /// 0 for the first try, then each regeneration.
        attempt: u32,
    },
    /// `step` of `steps` forwards of the current chunk are done.
    Step {
        /// Which chunk, from 0.
        chunk: usize,
        /// Forwards done so far.
        step: usize,
        /// Forwards the chunk takes (steps, twice that with the midpoint solver).
        steps: usize,
    },
}

/// What happened to one chunk.
#[derive(Clone, Debug)]
pub struct ChunkReport {
    /// The chunk's text, as the model read it.
    pub text: String,
    /// Frames sampled, reference included.
    pub frames: usize,
    /// Of those, frames `short_fix` added to the reference's estimate (0 when it is off).
    pub short_fix_frames: usize,
    /// Frames of new speech handed to the vocoder.
    pub generated_frames: usize,
    /// Samples this chunk added to the result, before the cross-fade.
    pub samples: usize,
    /// Wall time of this chunk in seconds, all attempts.
    pub seconds: f64,
    /// The listen-back check's verdict (attempts is 1 and `checked` false when it is off). For
    /// a chunk that was split, its parts' scores together ([`ChunkScore::merged`]).
    pub score: ChunkScore,
    /// When the whole chunk was still misheard after its retries and split into sentences:
    /// the whole's score, and each sentence's own report (its attempts and WER).
    pub split: Option<SplitReport>,
}

/// What split-on-fail did to a chunk.
#[derive(Clone, Debug)]
pub struct SplitReport {
    /// The whole chunk's best attempt, which failed.
    pub whole: ChunkScore,
    /// The sentences, in order, as generated.
    pub parts: Vec<ChunkReport>,
}

/// A finished synthesis.
#[derive(Clone, Debug, Default)]
pub struct Audio {
    /// Mono samples at [`SAMPLE_RATE`], not peak-limited (a writer decides how to fit 16 bits).
    pub samples: Vec<f32>,
    /// The generated mels `[frames, 100]` of all chunks, concatenated (no cross-fade on mels).
    pub mel: Vec<f32>,
    /// The seed the noise came from (drawn when none was asked for): give it back to repeat the result.
    pub seed: u64,
    /// What happened to each chunk, in order.
    pub chunks: Vec<ChunkReport>,
    /// All chunks' listen-back scores together.
    pub score: TotalScore,
    /// When each word is spoken, when asked for and the family has them (else empty).
    pub words: Vec<crate::WordTime>,
}

impl Audio {
    /// Length in seconds at [`SAMPLE_RATE`] (both families speak at it).
    pub fn seconds(&self) -> f64 {
        self.samples.len() as f64 / SAMPLE_RATE as f64
    }

    /// Writes the samples as mono 16-bit PCM WAV at `sample_rate` (the engine's
    /// [`crate::EngineInfo::sample_rate`]), as the reference's `soundfile.write` does, so a
    /// caller needs no audio crate of its own for the common case.
    pub fn write_wav(&self, path: &Path, sample_rate: u32) -> Result<(), SynthError> {
        let wide: Vec<f64> = self.samples.iter().map(|&x| x as f64).collect();
        Ok(f5_audio::output::write_wav_pcm16(path, &wide, sample_rate)?)
    }
}

/// Joins chunks with the reference's linear cross-fade, emitting samples as soon as no later
/// chunk can change them — so an arbitrarily long text is written with bounded memory.
///
/// The overlap is `min(fade, everything emitted so far + the held tail, next chunk)`, as the
/// reference's `min(c, len(prev), len(next))` on the growing wave.
pub struct CrossFader {
    fade: usize,
    tail: Vec<f64>,
    total: usize,
}

impl CrossFader {
    /// A fader whose overlap is `fade_samples` (0: chunks are butt-joined).
    pub fn new(fade_samples: usize) -> Self {
        CrossFader { fade: fade_samples, tail: Vec::new(), total: 0 }
    }

    /// Adds a chunk; returns the samples that are final.
    pub fn push(&mut self, next: &[f32]) -> Vec<f64> {
        let joined = if self.total == 0 {
            next.iter().map(|&x| x as f64).collect()
        } else {
            // Only the held tail can take part in the overlap: it is at least min(fade, total).
            f5_audio::output::cross_fade_append(&self.tail, next, self.fade.min(self.total))
        };
        self.total += next.len();
        let keep = self.fade.min(joined.len());
        let split = joined.len() - keep;
        self.tail = joined[split..].to_vec();
        joined[..split].to_vec()
    }

    /// The held tail, once no chunk follows.
    pub fn finish(self) -> Vec<f64> {
        self.tail
    }
}

/// A transcriber to listen to each chunk with, and the language its text is normalised in.
pub struct ListenBack {
    /// What turns each chunk back into text (an HTTP [`crate::Transcriber`] or one's own).
    pub transcriber: Box<dyn Transcribe + Send + Sync>,
    /// How both texts are normalised before counting word errors (numbers, case, punctuation).
    pub language: &'static dyn Language,
}

/// The model, the vocoder and the vocabulary, ready to speak.
pub struct Synthesizer<B: Backend> {
    /// The diffusion transformer.
    pub model: F5Model<B>,
    /// The vocoder that turns its mels into samples.
    pub vocoder: Vocos<B>,
    /// The checkpoint's vocabulary: text to token ids.
    pub vocab: Vocab,
    /// When set, every chunk is transcribed and regenerated while it is misheard.
    pub listen: Option<ListenBack>,
}

/// One generated chunk: the wave the gate listens to, and the mel that made it.
struct ChunkOutput {
    wave: Vec<f32>,
    mel: Vec<f32>,
}

impl AsRef<[f32]> for ChunkOutput {
    fn as_ref(&self) -> &[f32] {
        &self.wave
    }
}

impl<B: Backend + Clone> Synthesizer<B> {
    /// Opens a checkpoint, its vocabulary and a vocoder on `kit`.
    pub fn open(model: &Path, vocab: &Path, vocoder: &Path, kit: B, overrides: &Overrides) -> Result<Self, SynthError> {
        let vocab = Vocab::load(vocab)?;
        let model = F5Model::open(model, kit.clone(), overrides)?;
        if vocab.len() + 1 != model.config().text_rows {
            return Err(SynthError::Options(format!(
                "the vocabulary has {} entries but the checkpoint's text embedding has {} rows (vocabulary + 1): wrong vocab.txt for this model",
                vocab.len(),
                model.config().text_rows
            )));
        }
        let vocoder = Vocos::open(vocoder, kit)?;
        if vocoder.config().mel_channels != model.config().mel_dim {
            return Err(SynthError::Options(format!(
                "the vocoder takes {} mel channels, the model makes {}",
                vocoder.config().mel_channels,
                model.config().mel_dim
            )));
        }
        Ok(Synthesizer { model, vocoder, vocab, listen: None })
    }
}

impl<B: Backend> Synthesizer<B> {
    /// Turns the listen-back gate on.
    pub fn with_listen_back(mut self, listen: ListenBack) -> Self {
        self.listen = Some(listen);
        self
    }

    /// Whether chunks will be checked, as a line a user can read.
    pub fn gate_status(&self, opts: &SynthOptions) -> GateStatus {
        match Gate::new(opts.retries, opts.max_wer) {
            Ok(g) => g.status(self.listen.as_ref().map(|l| &*l.transcriber as &dyn Transcribe)),
            Err(_) => GateStatus::Off,
        }
    }

    /// Speaks `text` in `voice`; the whole wave in memory. See [`Self::synthesize_streaming`].
    pub fn synthesize(
        &self,
        voice: &Voice,
        text: &str,
        opts: &SynthOptions,
        progress: &mut dyn FnMut(Progress<'_>),
    ) -> Result<Audio, SynthError> {
        let mut samples = Vec::new();
        let mut mel = Vec::new();
        let (seed, chunks) = self.run(voice, text, opts, progress, &mut |s| samples.extend(s.iter().map(|&v| v as f32)), Some(&mut mel))?;
        let score = chunks.iter().map(|c| &c.score).collect();
        Ok(Audio { samples, mel, seed, chunks, score, words: Vec::new() })
    }

    /// Speaks `text` chunk by chunk, handing final samples to `sink` as they are ready.
    /// Returns the seed used and the chunk reports.
    pub fn synthesize_streaming(
        &self,
        voice: &Voice,
        text: &str,
        opts: &SynthOptions,
        progress: &mut dyn FnMut(Progress<'_>),
        sink: &mut dyn FnMut(&[f64]),
    ) -> Result<(u64, Vec<ChunkReport>), SynthError> {
        self.run(voice, text, opts, progress, sink, None)
    }

    pub(crate) fn run(
        &self,
        voice: &Voice,
        text: &str,
        opts: &SynthOptions,
        progress: &mut dyn FnMut(Progress<'_>),
        sink: &mut dyn FnMut(&[f64]),
        mut mel_out: Option<&mut Vec<f32>>,
    ) -> Result<(u64, Vec<ChunkReport>), SynthError> {
        opts.validate()?;
        if text.trim().is_empty() {
            return Err(SynthError::Options("the text to speak is empty".into()));
        }
        let budget = voice.max_chunk_bytes(opts.speed);
        let mut chunks: Vec<String> = f5_text::chunk_text(text, budget);
        if opts.short_fix {
            chunks = crate::short_fix::split_one_word_openings(chunks);
        }
        if chunks.is_empty() {
            return Err(SynthError::Options("the text to speak is empty".into()));
        }
        let fix: Vec<Option<f64>> = match opts.fix_duration {
            None => vec![None; chunks.len()],
            Some(d) if chunks.len() == 1 => vec![Some(d)],
            Some(d) => {
                let bytes: Vec<usize> = chunks.iter().map(String::len).collect();
                split_fix_duration(d, voice.wave.len(), &bytes, opts.cross_fade).into_iter().map(Some).collect()
            }
        };
        let seed = opts.seed.unwrap_or_else(random_seed);
        // One generator stream across all chunks, in order: what the reference draws when its
        // chunks run one after another.
        let mut generator = TorchGenerator::new(seed);
        let sample_opts = SampleOptions::default()
            .with_steps(opts.nfe)
            .with_cfg_strength(opts.cfg)
            .with_sway(opts.sway)
            .with_solver(opts.solver)
            .with_use_epss(opts.use_epss);
        let mel_dim = self.model.config().mel_dim;
        let mut fader = CrossFader::new(f5_audio::output::cross_fade_samples(opts.cross_fade, SAMPLE_RATE));
        let mut reports = Vec::with_capacity(chunks.len());
        let gate = Gate::new(opts.retries, opts.max_wer).map_err(|e| SynthError::Options(e.to_string()))?;
        let english = f5_verify::English;
        let (transcriber, language): (Option<&dyn Transcribe>, &dyn Language) = match &self.listen {
            Some(l) => (Some(&*l.transcriber as &dyn Transcribe), l.language),
            None => (None, &english),
        };
        for (i, chunk) in chunks.iter().enumerate() {
            let started = std::time::Instant::now();
            let piece = self.plan(voice, chunk, opts, fix[i])?;
            // The first attempt always draws from the shared stream, so later chunks get the same
            // noise whether or not this one is regenerated; retries use seeds of their own.
            let first_noise = generator.randn(piece.frames * mel_dim);
            let gated = gate.run(transcriber, language, chunk, SAMPLE_RATE, |attempt| -> Result<ChunkOutput, SynthError> {
                progress(Progress::Chunk { index: i, total: chunks.len(), text: chunk, attempt });
                let retry_noise;
                let noise = if attempt == 0 {
                    &first_noise
                } else {
                    retry_noise = TorchGenerator::new(retry_seed(seed, i, attempt)).randn(piece.frames * mel_dim);
                    &retry_noise
                };
                self.render(voice, &piece, noise, &sample_opts, i, progress)
            })?;
            let sentences =
                if opts.split_on_fail && gate.failed(&gated.score) { crate::split_on_fail::sentences_for_retry(chunk) } else { Vec::new() };
            if sentences.len() > 1 {
                // Each sentence with its own estimate and its own noise (derived from the seed,
                // after every retry seed of the whole), through the gate on its own.
                let mut parts = Vec::with_capacity(sentences.len());
                for (p, sentence) in sentences.iter().enumerate() {
                    let part_started = std::time::Instant::now();
                    let piece = self.plan(voice, sentence, opts, None)?;
                    let part = gate.run(transcriber, language, sentence, SAMPLE_RATE, |attempt| -> Result<ChunkOutput, SynthError> {
                        progress(Progress::Chunk { index: i, total: chunks.len(), text: sentence, attempt });
                        let noise = TorchGenerator::new(split_seed(seed, i, p, attempt)).randn(piece.frames * mel_dim);
                        self.render(voice, &piece, &noise, &sample_opts, i, progress)
                    })?;
                    let out = part.output;
                    if let Some(m) = mel_out.as_deref_mut() {
                        m.extend_from_slice(&out.mel);
                    }
                    sink(&fader.push(&out.wave));
                    parts.push(piece.report(sentence, out.wave.len(), part_started, part.score));
                }
                let part_scores: Vec<ChunkScore> = parts.iter().map(|p| p.score.clone()).collect();
                let score = ChunkScore::merged(&gated.score, &part_scores);
                let mut report = piece.report(chunk, parts.iter().map(|p| p.samples).sum(), started, score);
                report.split = Some(SplitReport { whole: gated.score, parts });
                reports.push(report);
                continue;
            }
            let out = gated.output;
            if let Some(m) = mel_out.as_deref_mut() {
                m.extend_from_slice(&out.mel);
            }
            let ready = fader.push(&out.wave);
            sink(&ready);
            reports.push(piece.report(chunk, out.wave.len(), started, gated.score));
        }
        sink(&fader.finish());
        Ok((seed, reports))
    }
}

/// The seed of attempt `attempt` of sentence `part` of split chunk `chunk`: apart from every
/// retry seed (those add at most [`f5_verify::MAX_GATE_RETRIES`] to the chunk's).
pub(crate) fn split_seed(seed: u64, chunk: usize, part: usize, attempt: u32) -> u64 {
    retry_seed(seed, chunk, 1 + f5_verify::MAX_GATE_RETRIES + (part as u32) * (1 + f5_verify::MAX_GATE_RETRIES) + attempt)
}

/// One piece of text planned for the model: its ids and frames.
struct Piece {
    ids: Vec<u32>,
    frames: usize,
    short_fix_frames: usize,
    ref_len: usize,
}

impl Piece {
    fn report(&self, text: &str, samples: usize, started: std::time::Instant, score: ChunkScore) -> ChunkReport {
        ChunkReport {
            text: text.to_string(),
            frames: self.frames,
            short_fix_frames: self.short_fix_frames,
            generated_frames: self.frames - self.ref_len,
            samples,
            seconds: started.elapsed().as_secs_f64(),
            score,
            split: None,
        }
    }
}

impl<B: Backend> Synthesizer<B> {
    /// Tokens and frames of one piece of text in `voice` (the reference's estimate, `fix`
    /// seconds when given, plus short-fix frames when on).
    fn plan(&self, voice: &Voice, text: &str, opts: &SynthOptions, fix: Option<f64>) -> Result<Piece, SynthError> {
        let tokens = f5_text::to_tokens(&format!("{}{text}", voice.model_text))?;
        let ids = self.vocab.ids(&tokens);
        let estimate = estimate_frames(voice.wave.len(), voice.model_text.len(), text.len(), opts.speed, fix);
        let short_fix_frames = if opts.short_fix && fix.is_none() { crate::short_fix::short_fix_extra_frames(text.len()) } else { 0 };
        let frames = sampled_frames(estimate + short_fix_frames, ids.len(), voice.wave.len());
        Ok(Piece { ids, frames, short_fix_frames, ref_len: voice.wave.len() / HOP })
    }

    /// One forward of a planned piece with the given noise: sampling, vocoder, loudness back.
    fn render(
        &self,
        voice: &Voice,
        piece: &Piece,
        noise: &[f32],
        sample_opts: &SampleOptions,
        chunk: usize,
        progress: &mut dyn FnMut(Progress<'_>),
    ) -> Result<ChunkOutput, SynthError> {
        let mel_dim = self.model.config().mel_dim;
        let mut step = |done: usize, steps: usize| progress(Progress::Step { chunk, step: done, steps });
        let mel = self.model.sample(&piece.ids, &voice.mel, piece.frames, Noise::Given(noise), sample_opts, &mut step)?;
        // The reference drops N // 256 frames, one fewer than the reference mel has: its
        // last frame reaches the vocoder.
        let generated = mel[piece.ref_len * mel_dim..].to_vec();
        let mut wave = self.vocoder.decode(&generated, piece.frames - piece.ref_len)?;
        voice.loudness.undo(&mut wave);
        Ok(ChunkOutput { wave, mel: generated })
    }
}

/// The seed of retry `attempt` of chunk `chunk`: distinct per chunk and attempt, derived from
/// the synthesis seed so a seeded run with the gate on is reproducible too.
pub(crate) fn retry_seed(seed: u64, chunk: usize, attempt: u32) -> u64 {
    seed.wrapping_add((chunk as u64) << 32).wrapping_add(attempt as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

/// A seed when none was asked for: time and process id, mixed. Reported with the result so any
/// output can be reproduced.
pub fn random_seed() -> u64 {
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0);
    let mut x = t ^ (std::process::id() as u64).rotate_left(32);
    // splitmix64 finaliser
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (x ^ (x >> 31)) >> 1
}

/// Silence after a dialogue line, by how the line ends: a full stop or a question asks for a
/// breath, a comma or a dash for a short one, an ellipsis for a long one.
pub fn trailing_pause_ms(line: &str) -> u32 {
    let t = line.trim_end_matches(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | '”' | '’' | ')' | '」' | '』'));
    if t.ends_with("...") || t.ends_with('…') {
        return 700;
    }
    match t.chars().last() {
        Some('.' | '!' | '?' | '。' | '！' | '？') => 450,
        Some(';' | ':' | '；' | '：') => 350,
        Some(',' | '，' | '、' | '-' | '–' | '—') => 250,
        _ => 200,
    }
}

impl<B: Backend> Synthesizer<B> {
    /// A dialogue: each line in its own voice, in order, followed by the pause its final
    /// punctuation asks for ([`trailing_pause_ms`]; none after the last line). Lines are separate
    /// syntheses: the seed, when given, is offset by the line's index so lines differ.
    pub fn dialogue(
        &self,
        lines: &[(&Voice, &str)],
        opts: &SynthOptions,
        progress: &mut dyn FnMut(Progress<'_>),
    ) -> Result<Audio, SynthError> {
        if lines.is_empty() {
            return Err(SynthError::Options("the dialogue has no lines".into()));
        }
        let mut out = Audio::default();
        for (i, (voice, text)) in lines.iter().enumerate() {
            let line_opts = SynthOptions { seed: opts.seed.map(|s| s.wrapping_add(i as u64)), ..opts.clone() };
            let part = self.synthesize(voice, text, &line_opts, progress)?;
            if i == 0 {
                out.seed = part.seed;
            }
            out.samples.extend_from_slice(&part.samples);
            if i + 1 < lines.len() {
                let pause = trailing_pause_ms(text) as usize * SAMPLE_RATE as usize / 1000;
                out.samples.extend(std::iter::repeat_n(0.0, pause));
            }
            out.mel.extend_from_slice(&part.mel);
            out.chunks.extend(part.chunks);
        }
        out.score = out.chunks.iter().map(|c| &c.score).collect();
        Ok(out)
    }
}

/// The reference's `remove_silence_for_generated_wav`: the 16-bit wave split at pauses of a second
/// or more below −50 dBFS, keeping 500 ms around each piece, and the pieces joined.
pub fn remove_long_silences(samples: &[f32]) -> Result<Vec<f32>, SynthError> {
    let ints: Vec<i32> = samples.iter().map(|&x| f5_audio::output::f64_to_pcm16(x as f64) as i32).collect();
    let seg = f5_audio::PcmSegment::new(ints, 1, SAMPLE_RATE, 2).map_err(|e| SynthError::Options(e.to_string()))?;
    let pieces = f5_audio::silence::split_on_silence(&seg, 1000, -50.0, 500, 10);
    let mut out: Vec<f32> = Vec::with_capacity(samples.len());
    for p in &pieces {
        out.extend(p.samples().iter().map(|&v| v as f32 / 32768.0));
    }
    Ok(out)
}

/// Seconds of audio `text` would make in `voice` at `speed` by the reference's estimate: the
/// total and the longest chunk (what a server checks against its limits before queueing).
pub(crate) fn planned_seconds(voice: &Voice, text: &str, speed: f64) -> (f64, f64) {
    let ref_samples = voice.wave.len();
    let ref_frames = ref_samples / HOP;
    let (mut total, mut longest) = (0.0f64, 0.0f64);
    for chunk in f5_text::chunk_text(text, voice.max_chunk_bytes(speed)) {
        let frames = estimate_frames(ref_samples, voice.model_text.len(), chunk.len(), speed, None);
        let seconds = frames.saturating_sub(ref_frames) as f64 * HOP as f64 / SAMPLE_RATE as f64;
        total += seconds;
        longest = longest.max(seconds);
    }
    (total, longest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streaming_cross_fade_equals_the_whole_join() {
        let chunks: Vec<Vec<f32>> = [5000usize, 1200, 7000, 300, 4000]
            .iter()
            .enumerate()
            .map(|(k, &n)| (0..n).map(|i| ((i * (k + 3)) % 17) as f32 / 17.0 - 0.5).collect())
            .collect();
        for fade in [0usize, 100, 3600] {
            let want = f5_audio::output::join_chunks(&chunks, fade);
            let mut f = CrossFader::new(fade);
            let mut got = Vec::new();
            for c in &chunks {
                got.extend(f.push(c));
            }
            got.extend(f.finish());
            assert_eq!(got, want, "fade {fade}");
        }
    }
}
