//! Kokoro-82M behind the engine interface: text → the front end's chunks (≤ 510 phonemes each)
//! → one forward per chunk in a named (or mixed) voice → 24 kHz samples, each chunk handed to the
//! sink as soon as it is spoken. With [`SpeakOptions::quick_start`] (streamed answers) the first
//! chunk is the text's first sentence (or first clause of a long one, `G2p::stream_chunks`), and
//! the rest of the first 510-phoneme chunk follows in growing pieces: a stream's first audio waits
//! for one short forward, not a whole 510-phoneme one, and each next piece is ready before the
//! audio already sent has played out.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::{Arc, Mutex};

use f5_g2p::{G2p, Language as FrontEnd};
use f5_gpukit::Backend;
use f5_kokoro::{Kokoro, VoicePack};
use f5_verify::{Gate, GateStatus, Language, Transcribe};

use crate::engine::{plain_report, EngineInfo, SpeakOptions, SpeechEngine, Spoken, VoiceRef, WordTime};
use crate::open::KokoroVoices;
use crate::synth::{retry_seed, CrossFader, Progress, SAMPLE_RATE};
use crate::{ListenBack, SynthError};

/// Samples per duration frame of Kokoro's predictor (two 300-sample source steps).
const SAMPLES_PER_FRAME: usize = 600;

/// The Kokoro family's engine.
pub(crate) struct KokoroEngine<B: Backend> {
    model: Kokoro<B>,
    voices: KokoroVoices,
    info: EngineInfo,
    /// Voice packs read so far, by the name they were asked for (mixes included).
    packs: Mutex<HashMap<String, Arc<VoicePack>>>,
    /// One front end per language, built on first use (English loads its lexicons once).
    front_ends: Mutex<HashMap<char, Arc<G2p>>>,
    listen: Option<ListenBack>,
}

/// The languages Kokoro's front end reads, by the codes `--lang` takes.
pub(crate) const KOKORO_LANGUAGES: [&str; 7] = ["en-us", "en-gb", "es", "fr", "hi", "it", "pt-br"];

impl<B: Backend> KokoroEngine<B> {
    pub(crate) fn new(model: Kokoro<B>, voices: KokoroVoices) -> Self {
        let info = EngineInfo {
            family: "kokoro",
            sample_rate: SAMPLE_RATE,
            clones_from_recording: false,
            languages: KOKORO_LANGUAGES.to_vec(),
            word_timestamps: true,
        };
        KokoroEngine { model, voices, info, packs: Mutex::new(HashMap::new()), front_ends: Mutex::new(HashMap::new()), listen: None }
    }

    /// A voice name, file or mix → its pack (cached).
    fn pack(&self, spec: &str) -> Result<Arc<VoicePack>, SynthError> {
        if let Some(p) = self.packs.lock().map_err(|_| poisoned())?.get(spec) {
            return Ok(p.clone());
        }
        let dim = 2 * self.model.config().style_dim;
        let parts = voice_parts(spec)?;
        let mut packs = Vec::with_capacity(parts.len());
        for (name, weight) in parts {
            let path = self.voices.locate(&name)?;
            packs.push((VoicePack::open(&path, dim)?, weight));
        }
        let pack = Arc::new(if packs.len() == 1 && (packs[0].1 - 1.0).abs() < f32::EPSILON {
            packs.swap_remove(0).0
        } else {
            VoicePack::mix(&packs)?
        });
        let mut cache = self.packs.lock().map_err(|_| poisoned())?;
        // Bounded: a client sending endless distinct mixes must not grow the cache forever.
        if cache.len() >= 64 {
            cache.clear();
        }
        cache.insert(spec.to_string(), pack.clone());
        Ok(pack)
    }

    /// The front end for `opts.lang`, else for the voice's first letter (the reference's rule:
    /// `af_heart` is American English, `ef_dora` Spanish, …).
    fn front_end(&self, voice: &str, opts: &SpeakOptions) -> Result<Arc<G2p>, SynthError> {
        let language = match &opts.lang {
            Some(code) => FrontEnd::from_str(code)
                .map_err(|_| SynthError::Options(format!("unknown language {code:?}: Kokoro reads {}", KOKORO_LANGUAGES.join(", "))))?,
            None => {
                let first = voice_language_letter(voice);
                first.and_then(|c| FrontEnd::from_str(&c.to_string()).ok()).ok_or_else(|| {
                    SynthError::Options(format!(
                        "cannot tell the language from the voice {voice:?} (names start with a, b, e, f, h, i or p); give --lang"
                    ))
                })?
            }
        };
        let mut cache = self.front_ends.lock().map_err(|_| poisoned())?;
        if let Some(g) = cache.get(&language.code()) {
            return Ok(g.clone());
        }
        let g = Arc::new(G2p::new(language)?);
        cache.insert(language.code(), g.clone());
        Ok(g)
    }

    fn check_options(&self, opts: &SpeakOptions) -> Result<(), SynthError> {
        opts.refuse_set(
            "Kokoro",
            &[
                ("nfe", opts.nfe.is_some()),
                ("cfg", opts.cfg.is_some()),
                ("sway", opts.sway.is_some()),
                ("fix duration", opts.fix_duration.is_some()),
                ("short fix", opts.short_fix),
            ],
        )?;
        if !(opts.speed.is_finite() && opts.speed > 0.0 && opts.speed <= 10.0) {
            return Err(SynthError::Options(format!("speed must be in (0, 10], got {}", opts.speed)));
        }
        if let Some(c) = opts.cross_fade {
            if !(c.is_finite() && (0.0..=5.0).contains(&c)) {
                return Err(SynthError::Options(format!("cross-fade must be between 0 and 5 s, got {c}")));
            }
        }
        Gate::new(opts.retries, opts.max_wer).map_err(|e| SynthError::Options(e.to_string()))?;
        Ok(())
    }
}

/// The letter that names a voice's language: the first of its name (of the first voice of a mix).
fn voice_language_letter(spec: &str) -> Option<char> {
    let first = spec.split('+').next()?.trim();
    let name = Path::new(first).file_stem().and_then(|s| s.to_str()).unwrap_or(first);
    name.chars().next().map(|c| c.to_ascii_lowercase())
}

fn poisoned() -> SynthError {
    SynthError::Options("an earlier synthesis failed while holding the voice cache; start again".into())
}

/// A chunk's forward, as the gate listens to it.
struct ChunkSpeech(f5_kokoro::Speech);

impl AsRef<[f32]> for ChunkSpeech {
    fn as_ref(&self) -> &[f32] {
        &self.0.audio
    }
}

/// One chunk to speak: what it says (for the gate and the report) and what the model is given.
struct Piece {
    text: String,
    phonemes: String,
    tokens: Option<Vec<f5_g2p::Token>>,
}

impl<B: Backend> SpeechEngine for KokoroEngine<B> {
    fn info(&self) -> &EngineInfo {
        &self.info
    }

    fn describe(&self) -> String {
        let c = self.model.config();
        format!("Kokoro (StyleTTS2 + ISTFTNet), {} tokens, hidden {}, style {}", c.n_token, c.hidden_dim, c.style_dim)
    }

    fn voices(&self) -> Vec<String> {
        self.voices.list()
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
        let VoiceRef::Named(name) = voice else {
            return Err(SynthError::Options("Kokoro needs a voice name".into()));
        };
        self.check_options(opts)?;
        if text.trim().is_empty() {
            return Err(SynthError::Options("the text to speak is empty".into()));
        }
        let pack = self.pack(name)?;
        let pieces: Vec<Piece> = if opts.phonemes {
            vec![Piece { text: text.trim().to_string(), phonemes: text.trim().to_string(), tokens: None }]
        } else {
            let g2p = self.front_end(name, opts)?;
            let chunks = if opts.quick_start { g2p.stream_chunks(text)? } else { g2p.chunks(text)? };
            chunks.into_iter().map(|c| Piece { text: c.graphemes, phonemes: c.phonemes, tokens: c.tokens }).collect()
        };
        if pieces.is_empty() {
            return Err(SynthError::Options("the front end found nothing to say in the text".into()));
        }
        let seed = opts.seed.unwrap_or_else(crate::synth::random_seed);
        let gate = Gate::new(opts.retries, opts.max_wer).map_err(|e| SynthError::Options(e.to_string()))?;
        let english = f5_verify::English;
        let (transcriber, language): (Option<&dyn Transcribe>, &dyn Language) = match &self.listen {
            Some(l) => (Some(&*l.transcriber as &dyn Transcribe), l.language),
            None => (None, &english),
        };
        let fade = f5_audio::output::cross_fade_samples(opts.cross_fade.unwrap_or(0.0), SAMPLE_RATE);
        let mut fader = CrossFader::new(fade);
        let mut reports = Vec::with_capacity(pieces.len());
        let mut words = Vec::new();
        // Where the next wave starts in the joined result: the samples so far, less one overlap
        // per join (exact without a cross-fade, Kokoro's default).
        let mut pushed = 0usize;
        let mut emit = |piece: &Piece, speech: f5_kokoro::Speech, words: &mut Vec<WordTime>| -> usize {
            let overlap = if pushed == 0 { 0 } else { fade.min(pushed).min(speech.audio.len()) };
            let at = (pushed - overlap) as f64 / SAMPLE_RATE as f64;
            if let (true, Some(tokens)) = (opts.word_timestamps, &piece.tokens) {
                let mut tokens = tokens.clone();
                let durations: Vec<i64> = speech.durations.iter().map(|&d| d as i64).collect();
                f5_g2p::join_timestamps(&mut tokens, &durations);
                words.extend(tokens.into_iter().filter_map(|t| {
                    let (s, e) = (t.start_ts?, t.end_ts?);
                    t.text.chars().any(char::is_alphanumeric).then_some(WordTime { word: t.text, start: at + s, end: at + e })
                }));
            }
            pushed = pushed - overlap + speech.audio.len();
            sink(&fader.push(&speech.audio));
            speech.audio.len()
        };
        for (i, piece) in pieces.iter().enumerate() {
            let started = std::time::Instant::now();
            let gated = gate.run(transcriber, language, &piece.text, SAMPLE_RATE, |attempt| -> Result<ChunkSpeech, SynthError> {
                progress(Progress::Chunk { index: i, total: pieces.len(), text: &piece.text, attempt });
                // Each chunk its own seed, derived from the synthesis seed, so chunks differ and
                // a seeded run is reproducible; retries get seeds of their own.
                let chunk_seed = if attempt == 0 { seed.wrapping_add(i as u64) } else { retry_seed(seed, i, attempt) };
                Ok(ChunkSpeech(self.model.speak(&piece.phonemes, &pack, opts.speed as f32, chunk_seed)?))
            })?;
            let sentences = if opts.split_on_fail && !opts.phonemes && gate.failed(&gated.score) {
                crate::split_on_fail::sentences_for_retry(&piece.text)
            } else {
                Vec::new()
            };
            if sentences.len() > 1 {
                let g2p = self.front_end(name, opts)?;
                let mut parts = Vec::with_capacity(sentences.len());
                for (p, sentence) in sentences.iter().enumerate() {
                    let part_started = std::time::Instant::now();
                    // A sentence of a chunk is shorter than the chunk: one piece of phonemes.
                    let phonemes: Vec<f5_g2p::Chunk> = g2p.chunks(sentence)?;
                    let tokens = phonemes.iter().filter_map(|c| c.tokens.clone()).flatten().collect::<Vec<_>>();
                    let part_piece = Piece {
                        text: sentence.clone(),
                        phonemes: phonemes.iter().map(|c| c.phonemes.as_str()).collect::<Vec<_>>().join(" "),
                        tokens: (!tokens.is_empty()).then_some(tokens),
                    };
                    let part = gate.run(transcriber, language, sentence, SAMPLE_RATE, |attempt| -> Result<ChunkSpeech, SynthError> {
                        progress(Progress::Chunk { index: i, total: pieces.len(), text: sentence, attempt });
                        let part_seed = crate::synth::split_seed(seed, i, p, attempt);
                        Ok(ChunkSpeech(self.model.speak(&part_piece.phonemes, &pack, opts.speed as f32, part_seed)?))
                    })?;
                    let samples = emit(&part_piece, part.output.0, &mut words);
                    parts.push(plain_report(
                        sentence,
                        samples / SAMPLES_PER_FRAME,
                        samples,
                        part_started.elapsed().as_secs_f64(),
                        part.score,
                    ));
                }
                let part_scores: Vec<f5_verify::ChunkScore> = parts.iter().map(|p| p.score.clone()).collect();
                let samples: usize = parts.iter().map(|p| p.samples).sum();
                let score = f5_verify::ChunkScore::merged(&gated.score, &part_scores);
                let mut report = plain_report(&piece.text, samples / SAMPLES_PER_FRAME, samples, started.elapsed().as_secs_f64(), score);
                report.split = Some(crate::synth::SplitReport { whole: gated.score, parts });
                reports.push(report);
                continue;
            }
            let samples = emit(piece, gated.output.0, &mut words);
            reports.push(plain_report(&piece.text, samples / SAMPLES_PER_FRAME, samples, started.elapsed().as_secs_f64(), gated.score));
        }
        sink(&fader.finish());
        Ok(Spoken { seed, chunks: reports, mel: Vec::new(), words })
    }

    fn gate_status(&self, opts: &SpeakOptions) -> GateStatus {
        match Gate::new(opts.retries, opts.max_wer) {
            Ok(g) => g.status(self.listen.as_ref().map(|l| &*l.transcriber as &dyn Transcribe)),
            Err(_) => GateStatus::Off,
        }
    }

    fn set_listen_back(&mut self, listen: ListenBack) {
        self.listen = Some(listen);
    }
}

/// Whether a voice is given as a file rather than a name.
fn looks_like_file(name: &str) -> bool {
    name.contains('/') || name.contains('\\') || name.ends_with(".pt") || name.ends_with(".bin")
}

/// A voice request's parts and weights: a file alone, else a name or a mix `a(2)+b`.
pub(crate) fn voice_parts(spec: &str) -> Result<Vec<(String, f32)>, SynthError> {
    if looks_like_file(spec) {
        return Ok(vec![(spec.to_string(), 1.0)]);
    }
    f5_kokoro::parse_voice_mix(spec).map_err(|e| SynthError::Options(e.to_string()))
}

/// Where a voice pack is: a `.pt`/`.bin` file given by path (when allowed), else `NAME.pt` or
/// `NAME.bin` in the model's voices directory, else fetched.
pub(crate) fn locate_voice(voices: &KokoroVoices, name: &str) -> Result<PathBuf, SynthError> {
    if looks_like_file(name) {
        if !voices.allow_files {
            // The name is not echoed: it is a path, and this caller may not name paths.
            return Err(SynthError::NotFound("unknown voice: voices are named (letters, digits, '_' or '-'), not files".into()));
        }
        let p = PathBuf::from(name);
        if p.is_file() {
            return Ok(p);
        }
        return Err(SynthError::NotFound(format!("voice file {name}: no such file")));
    }
    if !f5_voice_name(name) {
        return Err(SynthError::NotFound(format!("unknown voice {name:?}: a voice name is letters, digits, '_' or '-'")));
    }
    if let Some(dir) = &voices.dir {
        for ext in ["pt", "bin"] {
            let p = dir.join(format!("{name}.{ext}"));
            if p.is_file() {
                return Ok(p);
            }
        }
    }
    if let Some(fetch) = &voices.fetch {
        if let Some(p) = fetch(name).map_err(SynthError::NotFound)? {
            return Ok(p);
        }
    }
    let known = voices.list();
    let hint = if known.is_empty() { String::new() } else { format!(" (this model has: {})", known.join(", ")) };
    Err(SynthError::NotFound(format!("unknown voice {name:?}{hint}")))
}

/// A voice name as the release spells them (`af_heart`): nothing that could reach a path.
fn f5_voice_name(name: &str) -> bool {
    !name.is_empty() && name.len() <= 64 && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use f5_gpukit::DeviceChoice;

    use crate::engine::{SpeakOptions, VoiceRef};
    use crate::open::{open_engine, DeviceOptions, KokoroVoices, ModelFiles};
    use crate::synth::Progress;

    #[derive(Debug, PartialEq)]
    enum Event {
        ChunkStarts(usize),
        Samples(usize),
    }

    /// A stream hears the first sentence before the model starts on the rest: with `quick_start`
    /// the sink gets the first chunk's samples before chunk 1 begins (on the small fixture model,
    /// so it is cheap); without it the two sentences are one chunk, as the reference speaks them.
    #[test]
    fn the_first_sentence_reaches_the_sink_before_the_rest_is_spoken() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/kokoro/release-small");
        let files = ModelFiles::Kokoro { checkpoint: dir.clone(), voices: KokoroVoices::in_model_dir(&dir) };
        let engine = open_engine(&files, DeviceOptions::new(DeviceChoice::Cpu, 1)).expect("open the fixture model");
        let text = "The quick brown fox jumps over the fence. The lazy dog sleeps in the warm sun all day long.";
        let whole = engine
            .speak(
                &VoiceRef::Named("af_heart".into()),
                text,
                &SpeakOptions { seed: Some(3), ..SpeakOptions::default() },
                &mut |_| {},
                &mut |_| {},
            )
            .expect("speak without quick_start");
        assert_eq!(whole.chunks.len(), 1, "without quick_start the text is the reference's one chunk");
        let opts = SpeakOptions { seed: Some(3), quick_start: true, ..SpeakOptions::default() };
        let events = RefCell::new(Vec::new());
        let spoken = engine
            .speak(
                &VoiceRef::Named("af_heart".into()),
                text,
                &opts,
                &mut |p| {
                    if let Progress::Chunk { index, .. } = p {
                        events.borrow_mut().push(Event::ChunkStarts(index));
                    }
                },
                &mut |block| {
                    if !block.is_empty() {
                        events.borrow_mut().push(Event::Samples(block.len()));
                    }
                },
            )
            .expect("speak");
        assert_eq!(
            spoken.chunks.iter().map(|c| c.text.as_str()).collect::<Vec<_>>(),
            ["The quick brown fox jumps over the fence.", "The lazy dog sleeps in the warm sun all day long."]
        );
        let events = events.into_inner();
        assert_eq!(events.len(), 4, "{events:?}");
        assert_eq!(events[0], Event::ChunkStarts(0));
        assert_eq!(events[1], Event::Samples(spoken.chunks[0].samples), "the first chunk whole, before the second starts");
        assert_eq!(events[2], Event::ChunkStarts(1));
        assert_eq!(events[3], Event::Samples(spoken.chunks[1].samples));
    }
}
