//! The client against a real speech recogniser: `tests/asr/server.py` (pocketsphinx behind the
//! whisper.cpp API) listening to speech made by espeak-ng.
//!
//! Needs `F5_ASR_PYTHON` naming a Python with the `pocketsphinx` package, and `espeak-ng` on the
//! PATH; without either the tests say why and pass without checking anything.
//!
//! Tolerances: pocketsphinx's small US-English model hears espeak-ng's synthetic voice
//! imperfectly, and a change in the last bit of a sample can change a word ("we bought" heard as
//! "the top"), so a matching text is allowed a
//! WER up to 0.35 and a different text must score at least 0.7. Both runs are deterministic
//! (same synthesis, same decoder), the margins cover version differences of the two tools.
#![cfg(feature = "http-transcriber")]

use std::convert::Infallible;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use f5_verify::{score, English, Gate, Transcribe, Transcriber, TranscriberConfig};

#[path = "asr/harness.rs"]
mod harness;
use harness::{start_asr_server, AsrServer};

const MATCHING_MAX_WER: f64 = 0.35;
const DIFFERENT_MIN_WER: f64 = 0.7;
/// A voice and speed pocketsphinx's model hears well (the default espeak voice it mostly does not).
const VOICE: &str = "en-us+f5";
const SPEED: &str = "160";

const COFFEE: &str = "I would like to have a cup of coffee in the morning.";
const KITCHEN: &str = "She opened the door and walked into the kitchen.";
const PEOPLE: &str = "There are 21 people in the room.";
const CHILDREN: &str = "He has 3 children and 2 dogs.";

fn skip(reason: &str) {
    eprintln!("SKIPPED (real-ASR test): {reason}");
}

/// Starts the server (espeak-ng speaks the test's audio, so it must be there too), or says why
/// it cannot.
fn start_server() -> Result<AsrServer, String> {
    match Command::new("espeak-ng").arg("--version").output() {
        Ok(out) if out.status.success() => {}
        _ => return Err("espeak-ng is not installed".into()),
    }
    start_asr_server(120)
}

/// Speech for `text` from espeak-ng, as f32 samples and rate.
fn speak(text: &str) -> (Vec<f32>, u32) {
    static COUNTER: AtomicUsize = AtomicUsize::new(0);
    let path =
        std::env::temp_dir().join(format!("f5-verify-espeak-{}-{}.wav", std::process::id(), COUNTER.fetch_add(1, Ordering::Relaxed)));
    let status = Command::new("espeak-ng").args(["-v", VOICE, "-s", SPEED, "-w"]).arg(&path).arg(text).status().expect("run espeak-ng");
    assert!(status.success(), "espeak-ng failed for {text:?}");
    let mut reader = hound::WavReader::open(&path).expect("espeak-ng wrote a wav");
    let spec = reader.spec();
    assert_eq!((spec.channels, spec.bits_per_sample), (1, 16), "espeak-ng writes 16-bit mono");
    let samples: Vec<f32> = reader.samples::<i16>().map(|s| f32::from(s.expect("wav sample")) / 32768.0).collect();
    let _ = std::fs::remove_file(&path);
    (samples, spec.sample_rate)
}

fn transcriber(server: &AsrServer) -> Transcriber {
    let mut config = TranscriberConfig::new(server.address.as_str(), Some("en".into()));
    config.timeout = Duration::from_secs(120);
    Transcriber::with_config(config).expect("client for the ASR server")
}

#[test]
fn real_asr_scores_matching_speech_low_and_different_speech_high() {
    let server = match start_server() {
        Ok(s) => s,
        Err(reason) => return skip(&reason),
    };
    let transcriber = transcriber(&server);
    for (said, other) in [(COFFEE, KITCHEN), (KITCHEN, COFFEE), (PEOPLE, CHILDREN), (CHILDREN, PEOPLE)] {
        let (samples, rate) = speak(said);
        let heard = transcriber.transcribe(&samples, rate).expect("request accepted").expect("the ASR server answers");
        let matching = score(said, &heard, &English);
        let different = score(other, &heard, &English);
        eprintln!("said {said:?}, heard {heard:?}: WER {:.3} against itself, {:.3} against {other:?}", matching.wer, different.wer);
        assert!(matching.wer <= MATCHING_MAX_WER, "matching text: WER {} ({heard:?})", matching.wer);
        assert!(different.wer >= DIFFERENT_MIN_WER, "different text: WER {} ({heard:?})", different.wer);
    }
}

#[test]
fn real_asr_drives_the_gate() {
    let server = match start_server() {
        Ok(s) => s,
        Err(reason) => return skip(&reason),
    };
    let transcriber = transcriber(&server);
    // Attempt 0 "says" the wrong sentence, attempt 1 the right one.
    let wrong = speak(KITCHEN);
    let right = speak(COFFEE);
    let gate = Gate::new(2, MATCHING_MAX_WER).expect("gate settings");
    let gated = gate
        .run(Some(&transcriber as &dyn Transcribe), &English, COFFEE, wrong.1, |attempt| {
            Ok::<_, Infallible>(if attempt == 0 { wrong.0.clone() } else { right.0.clone() })
        })
        .unwrap_or_else(|e| match e {});
    eprintln!("gate: {:?}", gated.score);
    assert_eq!((gated.attempt, gated.score.attempts, gated.score.checked), (1, 2, true));
    assert!(gated.score.wer.is_some_and(|w| w <= MATCHING_MAX_WER));
}
