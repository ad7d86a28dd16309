//! A reference whose speech the ≤ 12 s rule cuts is told apart from one it keeps whole.

use std::path::PathBuf;

use f5_synth::Voice;

fn fixture(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures").join(rel)
}

#[test]
fn a_recording_the_clip_cuts_is_refused_and_kept_only_on_request() {
    let transcript = std::fs::read_to_string(fixture("audio/clip_continuous.txt")).unwrap();
    // 20 s of continuous sound: the clip keeps its first 12 s.
    let err = Voice::load(&fixture("audio/clip_continuous.wav"), &transcript, 0.1).unwrap_err().to_string();
    assert!(err.contains("only its first 12.0 s are used") && err.contains("trim the recording"), "{err}");
    let kept = Voice::load_kept(&fixture("audio/clip_continuous.wav"), &transcript, 0.1).unwrap();
    let c = kept.clipped.expect("clipped");
    // Sound is measured in 10 ms steps above −50 dBFS; the fixture is 20.0 s of it.
    assert!((c.speech_seconds - 20.0).abs() < 0.05 && (c.kept_speech_seconds - 12.0).abs() < 0.1, "{c:?}");
    assert!(!c.file_cut);
    let heard = kept.with_transcript("What the kept part says.").unwrap();
    assert!(heard.clipped.is_none() && heard.fixed_transcript == "What the kept part says. ");
    assert_eq!(heard.wave, kept.wave, "a new transcript keeps the audio");
    // A 30.6 s file is read up to the 30 s decode limit: cut, and said to be.
    let pauses = Voice::load_kept(&fixture("audio/clip_pauses.wav"), "x", 0.1).unwrap();
    assert!(pauses.clipped.is_some_and(|c| c.file_cut));
}

#[test]
fn recordings_the_clip_keeps_whole_are_not_clipped() {
    // Short references at every rate and container, and one with pauses (6.7 s): the clip trims
    // their silent edges only, which is no lost speech.
    for name in ["ref_16000.wav", "ref_22050.wav", "ref_44100.wav", "ref_48000.wav", "ref_44100_stereo.flac", "silence_test.wav"] {
        let v = Voice::load_kept(&fixture(&format!("audio/{name}")), "x", 0.1).unwrap();
        assert!(v.clipped.is_none(), "{name}: {:?}", v.clipped);
    }
}
