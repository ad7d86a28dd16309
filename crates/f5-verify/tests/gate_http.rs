//! The client and the gate against a fake whisper.cpp server over real HTTP.
#![cfg(feature = "http-transcriber")]

mod fake_whisper;

use std::convert::Infallible;
use std::time::Duration;

use f5_verify::{English, Gate, Gated, TotalScore, Transcribe, Transcriber, TranscriberConfig, VerifyError};
use fake_whisper::{closed_address, FakeWhisper, Reply, Request};

const RATE: u32 = 24_000;

/// A quick client: retries without real waiting so tests stay fast.
fn client(address: &str, language: Option<&str>, retries: u32) -> Transcriber {
    let mut config = TranscriberConfig::new(address, language.map(str::to_string));
    config.retries = retries;
    config.backoff = Duration::from_millis(1);
    config.timeout = Duration::from_secs(20);
    Transcriber::with_config(config).expect("client for the fake server")
}

/// Audio tagged with a number the fake server can read back: a constant level of tag/1000.
fn tagged(tag: u32) -> Vec<f32> {
    vec![tag as f32 / 1000.0; 2400]
}

fn assert_whisper_request(request: &Request, language: Option<&str>) {
    assert_eq!((request.method.as_str(), request.path.as_str()), ("POST", "/inference"));
    assert_eq!(request.fields.get("response_format").map(String::as_str), Some("json"));
    assert_eq!(request.fields.get("temperature").map(String::as_str), Some("0"));
    assert_eq!(request.fields.get("language").map(String::as_str), language);
    assert!(request.part_names.first().is_some_and(|n| n == "file"), "parts: {:?}", request.part_names);
    assert_eq!(request.file_name.as_deref(), Some("audio.wav"));
    match &request.wav {
        Some(Ok(wav)) => {
            assert_eq!((wav.channels, wav.rate, wav.bits, wav.integer_pcm), (1, RATE, 16, true));
            assert_eq!(wav.samples.len(), 2400);
        }
        other => panic!("file is not a valid wav: {other:?}"),
    }
}

#[test]
fn the_gate_regenerates_exactly_the_chunk_that_was_misheard() {
    let texts = ["The first chunk.", "The second one has 21 words.", "And the third, at last!"];
    // Tag = chunk * 10 + attempt. Chunk 1's first attempt is heard without "twenty one"
    // (2 errors in 7 words, WER 0.29 > 0.2); its second attempt is heard right.
    let server = FakeWhisper::start(|_, request| {
        Reply::Text(
            match request.tag() {
                Some(0) => "the first chunk",
                Some(10) => "The second one has words.",
                Some(11) => "The second one has twenty-one words.",
                Some(20) => "and the third at last",
                _ => "unexpected audio",
            }
            .to_string(),
        )
    });
    let transcriber = client(server.address(), Some("en"), 2);
    let gate = Gate::new(2, 0.2).expect("gate settings");

    let mut generated = Vec::new();
    let mut total = TotalScore::default();
    let mut kept = Vec::new();
    for (chunk, text) in texts.iter().enumerate() {
        let gated: Gated<Vec<f32>> = gate
            .run(Some(&transcriber as &dyn Transcribe), &English, text, RATE, |attempt| {
                generated.push((chunk, attempt));
                Ok::<_, Infallible>(tagged(chunk as u32 * 10 + attempt))
            })
            .unwrap_or_else(|e| match e {});
        total.add(&gated.score);
        kept.push(gated);
    }

    assert_eq!(generated, [(0, 0), (1, 0), (1, 1), (2, 0)]);
    let requests = server.requests();
    assert_eq!(requests.iter().map(Request::tag).collect::<Vec<_>>(), [Some(0), Some(10), Some(11), Some(20)]);
    for request in &requests {
        assert_whisper_request(request, Some("en"));
    }

    let second = &kept[1];
    assert_eq!(second.attempt, 1);
    assert_eq!(second.output, tagged(11));
    assert_eq!((second.score.words, second.score.errors, second.score.attempts, second.score.checked), (7, 0, 2, true));
    assert_eq!(second.score.transcript.as_deref(), Some("The second one has twenty-one words."));
    for other in [&kept[0], &kept[2]] {
        assert_eq!((other.attempt, other.score.attempts, other.score.errors, other.score.checked), (0, 1, 0, true));
    }
    assert_eq!((total.chunks, total.attempts, total.regenerated, total.unchecked, total.words, total.errors), (3, 4, 1, 0, 3 + 7 + 5, 0));
    assert_eq!(total.wer(), Some(0.0));
}

#[test]
fn a_transcriber_that_is_down_leaves_everything_unchecked() {
    let transcriber = client(&closed_address(), None, 2);
    let gate = Gate::default();
    assert!(gate.status(Some(&transcriber)).to_string().contains("/inference"));

    let mut total = TotalScore::default();
    let mut generated = 0;
    for (chunk, text) in ["one two", "three four five"].iter().enumerate() {
        let gated = gate
            .run(Some(&transcriber as &dyn Transcribe), &English, text, RATE, |attempt| {
                generated += 1;
                Ok::<_, Infallible>(tagged(chunk as u32 * 10 + attempt))
            })
            .unwrap_or_else(|e| match e {});
        assert_eq!(gated.output, tagged(chunk as u32 * 10), "the first attempt is kept");
        assert!(!gated.score.checked);
        assert_eq!(gated.score.wer, None);
        assert!(gated.score.problem.as_deref().is_some_and(|p| p.contains("no answer")), "{:?}", gated.score.problem);
        total.add(&gated.score);
    }
    assert_eq!(generated, 2, "nothing is regenerated blind");
    assert_eq!((total.chunks, total.unchecked, total.attempts, total.wer()), (2, 2, 2, None));
    assert!(total.to_string().contains("2 unchecked"));
}

#[test]
fn a_busy_server_is_asked_again() {
    let server = FakeWhisper::start(|n, _| if n == 0 { Reply::Status(503) } else { Reply::Text("hello there".into()) });
    let transcriber = client(server.address(), None, 3);
    let heard = transcriber.transcribe(&tagged(1), RATE).expect("no request error");
    assert_eq!(heard.as_deref(), Some("hello there"));
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    for request in &requests {
        assert_whisper_request(request, None);
    }
}

#[test]
fn an_empty_answer_is_asked_again() {
    let server = FakeWhisper::start(|n, _| Reply::Text(if n == 0 { "  ".into() } else { "words at last".into() }));
    let transcriber = client(server.address(), None, 1);
    assert_eq!(transcriber.transcribe(&tagged(1), RATE).ok().flatten().as_deref(), Some("words at last"));
    assert_eq!(server.requests().len(), 2);
}

#[test]
fn a_server_that_stays_busy_gives_no_answer_and_then_is_tried_once() {
    let server = FakeWhisper::start(|_, _| Reply::Status(503));
    let transcriber = client(server.address(), None, 2);
    assert_eq!(transcriber.transcribe(&tagged(1), RATE).ok(), Some(None));
    assert_eq!(server.requests().len(), 3, "one request and two retries");
    // Known to be unanswering: the next call does not spend the retries again.
    assert_eq!(transcriber.transcribe(&tagged(1), RATE).ok(), Some(None));
    assert_eq!(server.requests().len(), 4);
}

#[test]
fn a_server_that_recovers_gets_the_retries_back() {
    let server = FakeWhisper::start(|n, _| if n < 2 { Reply::Status(503) } else { Reply::Text("back".into()) });
    let transcriber = client(server.address(), None, 0);
    assert_eq!(transcriber.transcribe(&tagged(1), RATE).ok(), Some(None));
    assert_eq!(transcriber.transcribe(&tagged(1), RATE).ok(), Some(None));
    assert_eq!(transcriber.transcribe(&tagged(1), RATE).ok().flatten().as_deref(), Some("back"));
    assert_eq!(server.requests().len(), 3);
}

#[test]
fn a_rejected_request_is_an_error_at_once() {
    let server = FakeWhisper::start(|_, _| Reply::Status(400));
    let transcriber = client(server.address(), None, 3);
    let error = transcriber.transcribe(&tagged(1), RATE).err();
    assert!(matches!(error, Some(VerifyError::Rejected { status: 400, .. })), "{error:?}");
    assert_eq!(server.requests().len(), 1, "a 400 is not retried");
}

#[test]
fn an_error_answer_with_status_200_is_an_error() {
    let server = FakeWhisper::start(|n, _| {
        if n == 0 {
            Reply::Json("{\"error\": \"failed to read WAV file\"}".into())
        } else {
            Reply::Json("not json".into())
        }
    });
    let transcriber = client(server.address(), None, 3);
    let first = transcriber.transcribe(&tagged(1), RATE).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(first.contains("failed to read WAV file"), "{first}");
    let second = transcriber.transcribe(&tagged(1), RATE).err();
    assert!(matches!(second, Some(VerifyError::Answer { .. })), "{second:?}");
    assert_eq!(server.requests().len(), 2);
}

#[test]
fn a_server_that_never_answers_times_out() {
    let server = FakeWhisper::start(|_, _| Reply::Hang(Duration::from_secs(3)));
    let mut config = TranscriberConfig::new(server.address(), None);
    config.retries = 0;
    config.timeout = Duration::from_millis(300);
    let transcriber = Transcriber::with_config(config).expect("client");
    assert_eq!(transcriber.transcribe(&tagged(1), RATE).ok(), Some(None));
}

#[test]
fn the_language_field_is_sent_only_when_configured() {
    let server = FakeWhisper::start(|_, _| Reply::Text("ok".into()));
    client(server.address(), Some("fi"), 0).transcribe(&tagged(1), RATE).ok();
    client(server.address(), None, 0).transcribe(&tagged(1), RATE).ok();
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    assert_whisper_request(&requests[0], Some("fi"));
    assert_whisper_request(&requests[1], None);
}

#[test]
fn empty_audio_is_not_sent() {
    let server = FakeWhisper::start(|_, _| Reply::Text("should not be asked".into()));
    let transcriber = client(server.address(), None, 0);
    assert_eq!(transcriber.transcribe(&[], RATE).ok(), Some(Some(String::new())));
    assert!(server.requests().is_empty());
}
