//! The listen-back gate: generate, transcribe, compare, and generate again while the words
//! are wrong.
//!
//! A flow-matching model has no inner signal that it dropped or slurred a word, so the gate
//! listens to each chunk from outside. It is pure logic over two callbacks (the generator and
//! a [`Transcribe`]), so the synthesiser can call it and tests can drive it without a model.

use std::fmt;

use crate::normalize::{normalize, Language};
use crate::transcriber::Transcribe;
use crate::wer::{score, wer_of, Score};
use crate::VerifyError;

/// More retries than this would mean a chunk that is never right keeps the device busy for
/// minutes; a configuration asking for it is refused.
pub const MAX_GATE_RETRIES: u32 = 20;

/// How strict the listen-back check is.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Gate {
    retries: u32,
    max_wer: f64,
}

impl Default for Gate {
    /// Two retries and a WER limit of 0.3: a whole dropped word in a short chunk fails,
    /// a transcriber's spelling quirk in a long one does not.
    fn default() -> Self {
        Self { retries: 2, max_wer: 0.3 }
    }
}

/// Whether the gate will listen, in a form a command line can print.
#[derive(Debug, Clone, PartialEq)]
pub enum GateStatus {
    /// No transcriber is configured: every chunk is generated once and left unchecked.
    Off,
    /// Chunks are transcribed and regenerated while their WER is above `max_wer`.
    On {
        /// Where the transcriber is ([`Transcribe::describe`]).
        transcriber: String,
        /// Regenerations allowed per chunk.
        retries: u32,
        /// The highest word error rate a chunk is kept with.
        max_wer: f64,
    },
}

impl fmt::Display for GateStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GateStatus::Off => write!(f, "listen-back check off (no transcriber configured)"),
            GateStatus::On { transcriber, retries, max_wer } => write!(
                f,
                "listen-back check on: {transcriber}, regenerating a chunk up to {retries} time{} while its WER is above {:.0}%",
                if *retries == 1 { "" } else { "s" },
                max_wer * 100.0
            ),
        }
    }
}

/// How one chunk fared.
#[derive(Debug, Clone, PartialEq)]
pub struct ChunkScore {
    /// Words in the chunk's normalised text (as scored, when checked).
    pub words: usize,
    /// Word errors of the kept attempt; 0 when unchecked.
    pub errors: usize,
    /// How many times the chunk was generated.
    pub attempts: u32,
    /// Whether the kept attempt was transcribed and scored.
    pub checked: bool,
    /// WER of the kept attempt; `None` when unchecked.
    pub wer: Option<f64>,
    /// What the transcriber heard in the kept attempt.
    pub transcript: Option<String>,
    /// Why the chunk is unchecked or why listening stopped early, when the transcriber failed.
    pub problem: Option<String>,
}

impl ChunkScore {
    /// The score of a chunk that was split after `whole` failed: its parts' scores together.
    /// Words and errors are the parts' (what was kept); attempts count the whole's too, so the
    /// cost shows; checked only when every part was; heard is the parts' transcripts joined.
    pub fn merged(whole: &ChunkScore, parts: &[ChunkScore]) -> ChunkScore {
        let words = parts.iter().map(|p| p.words).sum();
        let errors = parts.iter().map(|p| p.errors).sum();
        let checked = !parts.is_empty() && parts.iter().all(|p| p.checked);
        ChunkScore {
            words,
            errors,
            attempts: whole.attempts + parts.iter().map(|p| p.attempts).sum::<u32>(),
            checked,
            wer: checked.then(|| wer_of(errors, words)),
            transcript: checked.then(|| parts.iter().filter_map(|p| p.transcript.as_deref()).collect::<Vec<_>>().join(" ")),
            problem: parts.iter().find_map(|p| p.problem.clone()),
        }
    }
}

/// A chunk's kept output and its score.
#[derive(Debug, Clone, PartialEq)]
pub struct Gated<T> {
    /// The generator's output for the kept attempt.
    pub output: T,
    /// Which attempt was kept (0 = the first).
    pub attempt: u32,
    /// How the kept attempt was heard (and how many attempts it took).
    pub score: ChunkScore,
}

/// Scores of all chunks of a synthesis together.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct TotalScore {
    /// Reference words of the checked chunks (the WER's denominator).
    pub words: usize,
    /// Word errors of the checked chunks.
    pub errors: usize,
    /// Generations over all chunks.
    pub attempts: u32,
    /// Chunks seen.
    pub chunks: usize,
    /// Chunks generated more than once.
    pub regenerated: usize,
    /// Chunks that could not be checked.
    pub unchecked: usize,
}

impl TotalScore {
    /// Adds one chunk.
    pub fn add(&mut self, chunk: &ChunkScore) {
        self.chunks += 1;
        self.attempts += chunk.attempts;
        if chunk.attempts > 1 {
            self.regenerated += 1;
        }
        if chunk.checked {
            self.words += chunk.words;
            self.errors += chunk.errors;
        } else {
            self.unchecked += 1;
        }
    }

    /// Errors over words of the checked chunks; `None` when no chunk was checked.
    pub fn wer(&self) -> Option<f64> {
        (self.chunks > self.unchecked).then(|| wer_of(self.errors, self.words))
    }
}

impl<'a> FromIterator<&'a ChunkScore> for TotalScore {
    fn from_iter<I: IntoIterator<Item = &'a ChunkScore>>(iter: I) -> Self {
        let mut total = TotalScore::default();
        for chunk in iter {
            total.add(chunk);
        }
        total
    }
}

impl fmt::Display for TotalScore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.wer() {
            Some(wer) => write!(f, "WER {:.1}% ({} errors in {} words)", wer * 100.0, self.errors, self.words)?,
            None => write!(f, "WER not measured")?,
        }
        write!(f, ", {} chunks, {} generations, {} regenerated", self.chunks, self.attempts, self.regenerated)?;
        if self.unchecked > 0 {
            write!(f, ", {} unchecked", self.unchecked)?;
        }
        Ok(())
    }
}

impl Gate {
    /// A gate that regenerates a chunk up to `retries` times while its WER is above `max_wer`.
    pub fn new(retries: u32, max_wer: f64) -> Result<Self, VerifyError> {
        if retries > MAX_GATE_RETRIES {
            return Err(VerifyError::Config(format!("{retries} retries is more than the {MAX_GATE_RETRIES} allowed")));
        }
        if !(max_wer.is_finite() && max_wer >= 0.0) {
            return Err(VerifyError::Config(format!("max WER {max_wer} is not a number >= 0")));
        }
        Ok(Self { retries, max_wer })
    }

    /// Regenerations allowed per chunk after the first try.
    pub fn retries(&self) -> u32 {
        self.retries
    }

    /// The highest word error rate a chunk is kept with.
    pub fn max_wer(&self) -> f64 {
        self.max_wer
    }

    /// Whether this gate will listen with `transcriber`.
    pub fn status(&self, transcriber: Option<&dyn Transcribe>) -> GateStatus {
        match transcriber {
            None => GateStatus::Off,
            Some(t) => GateStatus::On { transcriber: t.describe(), retries: self.retries, max_wer: self.max_wer },
        }
    }

    /// Whether a chunk's kept attempt was heard and is within the limit. An unchecked chunk
    /// (no transcriber, or none answered) has not failed: only a chunk that was heard with
    /// too many errors has.
    pub fn failed(&self, score: &ChunkScore) -> bool {
        score.checked && score.wer.is_some_and(|w| w > self.max_wer)
    }

    /// Generates one chunk, listening to each attempt.
    ///
    /// `generate(attempt)` makes attempt 0, 1, … (the caller derives a new seed from the
    /// attempt); its output's samples (`rate` Hz) are sent to `transcriber`. Attempts stop at the
    /// first whose WER is at most `max_wer`, after `1 + retries` attempts, or when the
    /// transcriber gives no answer (generating blind would only cost time). The attempt with the
    /// lowest WER is kept, the earliest among equals; if none could be scored, the first attempt
    /// is kept unchecked. Without a transcriber the chunk is generated once, unchecked.
    ///
    /// Only the generator's errors are returned as errors: a transcriber that fails leaves the
    /// chunk unchecked with the reason in [`ChunkScore::problem`].
    pub fn run<T, E, G>(
        &self,
        transcriber: Option<&dyn Transcribe>,
        language: &dyn Language,
        reference: &str,
        rate: u32,
        mut generate: G,
    ) -> Result<Gated<T>, E>
    where
        T: AsRef<[f32]>,
        G: FnMut(u32) -> Result<T, E>,
    {
        let unchecked = |output: T, attempts: u32, problem: Option<String>| Gated {
            output,
            attempt: 0,
            score: ChunkScore {
                words: normalize(reference, language).len(),
                errors: 0,
                attempts,
                checked: false,
                wer: None,
                transcript: None,
                problem,
            },
        };
        let Some(transcriber) = transcriber else {
            return Ok(unchecked(generate(0)?, 1, None));
        };

        let mut best: Option<(T, u32, Score, String)> = None;
        let mut first_unscored: Option<T> = None;
        let mut problem = None;
        let mut attempts = 0;
        for attempt in 0..=self.retries {
            let output = generate(attempt)?;
            attempts += 1;
            let heard = match transcriber.transcribe(output.as_ref(), rate) {
                Ok(Some(text)) => text,
                Ok(None) => {
                    problem = Some(format!("{} gave no answer", transcriber.describe()));
                    first_unscored.get_or_insert(output);
                    break;
                }
                Err(e) => {
                    problem = Some(e.to_string());
                    first_unscored.get_or_insert(output);
                    break;
                }
            };
            let s = score(reference, &heard, language);
            let good_enough = s.wer <= self.max_wer;
            if best.as_ref().is_none_or(|(_, _, kept, _)| s.wer < kept.wer) {
                best = Some((output, attempt, s, heard));
            }
            if good_enough {
                break;
            }
        }

        match (best, first_unscored) {
            (Some((output, attempt, s, heard)), _) => Ok(Gated {
                output,
                attempt,
                score: ChunkScore {
                    words: s.words,
                    errors: s.errors,
                    attempts,
                    checked: true,
                    wer: Some(s.wer),
                    transcript: Some(heard),
                    problem,
                },
            }),
            (None, Some(output)) => Ok(unchecked(output, attempts, problem)),
            // The loop runs at least once and either scores or keeps the output unscored.
            (None, None) => unreachable!("the gate made no attempt"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::normalize::English;
    use std::cell::RefCell;
    use std::convert::Infallible;

    /// Answers from a script indexed by the first sample (the attempt number the generator wrote).
    struct Scripted {
        answers: Vec<Result<Option<String>, ()>>,
        heard: RefCell<Vec<u32>>,
    }

    impl Scripted {
        fn new(answers: &[Result<Option<&str>, ()>]) -> Self {
            Self { answers: answers.iter().map(|a| a.map(|o| o.map(str::to_string))).collect(), heard: RefCell::default() }
        }
    }

    impl Transcribe for Scripted {
        fn transcribe(&self, samples: &[f32], _rate: u32) -> Result<Option<String>, VerifyError> {
            let attempt = samples.first().copied().unwrap_or(-1.0) as u32;
            self.heard.borrow_mut().push(attempt);
            match self.answers.get(attempt as usize) {
                Some(Ok(answer)) => Ok(answer.clone()),
                Some(Err(())) => Err(VerifyError::Rejected { endpoint: "scripted".into(), status: 400, body: "no".into() }),
                None => Ok(None),
            }
        }

        fn describe(&self) -> String {
            "scripted".into()
        }
    }

    fn run(gate: Gate, transcriber: Option<&dyn Transcribe>, reference: &str) -> (Gated<Vec<f32>>, Vec<u32>) {
        let mut made = Vec::new();
        let gated = gate
            .run(transcriber, &English, reference, 16_000, |attempt| {
                made.push(attempt);
                Ok::<_, Infallible>(vec![attempt as f32; 4])
            })
            .unwrap_or_else(|e: Infallible| match e {});
        (gated, made)
    }

    #[test]
    fn a_right_first_attempt_is_kept() {
        let t = Scripted::new(&[Ok(Some("Hello there."))]);
        let (g, made) = run(Gate::default(), Some(&t), "hello there");
        assert_eq!(made, [0]);
        assert_eq!((g.attempt, g.score.attempts, g.score.checked, g.score.errors, g.score.wer), (0, 1, true, 0, Some(0.0)));
    }

    #[test]
    fn a_wrong_attempt_is_regenerated_until_right() {
        let t = Scripted::new(&[Ok(Some("hello")), Ok(Some("yellow bear")), Ok(Some("hello there"))]);
        let (g, made) = run(Gate::new(3, 0.2).unwrap_or_default(), Some(&t), "hello there");
        assert_eq!(made, [0, 1, 2]);
        assert_eq!(*t.heard.borrow(), [0, 1, 2]);
        assert_eq!((g.attempt, g.score.attempts, g.score.errors), (2, 3, 0));
        assert_eq!(g.output, vec![2.0; 4]);
    }

    #[test]
    fn the_best_attempt_is_kept_when_none_passes() {
        // WERs 1.0, 0.5, 1.0 with max 0.2 and two retries: the middle one is kept.
        let t = Scripted::new(&[Ok(Some("nothing alike")), Ok(Some("hello")), Ok(Some("bye now"))]);
        let (g, made) = run(Gate::new(2, 0.2).unwrap_or_default(), Some(&t), "hello there");
        assert_eq!(made, [0, 1, 2]);
        assert_eq!((g.attempt, g.score.attempts, g.score.errors, g.score.wer), (1, 3, 1, Some(0.5)));
        assert_eq!(g.output, vec![1.0; 4]);
        assert_eq!(g.score.transcript.as_deref(), Some("hello"));
    }

    #[test]
    fn no_transcriber_means_one_unchecked_attempt() {
        let gate = Gate::default();
        let (g, made) = run(gate, None, "three words here");
        assert_eq!(made, [0]);
        assert_eq!((g.score.checked, g.score.words, g.score.wer, g.score.problem.clone()), (false, 3, None, None));
        assert_eq!(gate.status(None), GateStatus::Off);
        assert!(gate.status(None).to_string().contains("off"));
    }

    #[test]
    fn no_answer_stops_listening_and_keeps_the_best_scored_attempt() {
        let t = Scripted::new(&[Ok(Some("wrong words")), Ok(None)]);
        let (g, made) = run(Gate::new(5, 0.1).unwrap_or_default(), Some(&t), "hello there");
        assert_eq!(made, [0, 1]);
        assert_eq!((g.attempt, g.score.checked, g.score.attempts), (0, true, 2));
        assert!(g.score.problem.is_some());

        let t = Scripted::new(&[Ok(None)]);
        let (g, made) = run(Gate::new(5, 0.1).unwrap_or_default(), Some(&t), "hello there");
        assert_eq!(made, [0]);
        assert_eq!((g.score.checked, g.score.wer, g.score.words), (false, None, 2));
    }

    #[test]
    fn a_transcriber_error_leaves_the_chunk_unchecked() {
        let t = Scripted::new(&[Err(())]);
        let (g, made) = run(Gate::default(), Some(&t), "hello");
        assert_eq!(made, [0]);
        assert!(!g.score.checked);
        assert!(g.score.problem.as_deref().is_some_and(|p| p.contains("400")));
    }

    #[test]
    fn generator_errors_pass_through() {
        let t = Scripted::new(&[Ok(Some("x"))]);
        let result: Result<Gated<Vec<f32>>, &str> = Gate::default().run(Some(&t), &English, "hello", 16_000, |_| Err("no model"));
        assert_eq!(result.err(), Some("no model"));
    }

    #[test]
    fn gate_settings_are_checked() {
        assert!(Gate::new(MAX_GATE_RETRIES + 1, 0.3).is_err());
        assert!(Gate::new(1, f64::NAN).is_err());
        assert!(Gate::new(1, -0.1).is_err());
        assert!(Gate::new(0, 0.0).is_ok());
    }

    #[test]
    fn totals_add_up() {
        let chunk = |words, errors, attempts, checked| ChunkScore {
            words,
            errors,
            attempts,
            checked,
            wer: checked.then(|| wer_of(errors, words)),
            transcript: None,
            problem: None,
        };
        let chunks = [chunk(10, 1, 1, true), chunk(6, 0, 2, true), chunk(4, 0, 1, false)];
        let total: TotalScore = chunks.iter().collect();
        assert_eq!((total.words, total.errors, total.attempts, total.chunks, total.regenerated, total.unchecked), (16, 1, 4, 3, 1, 1));
        assert_eq!(total.wer(), Some(1.0 / 16.0));
        assert!(total.to_string().contains("1 unchecked"));
        let none: TotalScore = [chunk(4, 0, 1, false)].iter().collect();
        assert_eq!(none.wer(), None);
    }
}
