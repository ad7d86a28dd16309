//! The engine interface over both families: the same calls reach F5 and Kokoro, what one family
//! cannot honour is refused by name, and the interface adds nothing to what each model computes.

mod common;

use std::sync::Arc;

use common::{birch_voice, fixtures, synthesizer};
use f5_gpukit::{CpuBackend, DeviceChoice};
use f5_synth::{open_engine, speak_to_memory, DeviceOptions, KokoroVoices, ModelFiles, SpeakOptions, SynthError, SynthOptions, VoiceRef};

fn one_thread() -> DeviceOptions {
    DeviceOptions::new(DeviceChoice::Cpu, 1)
}

/// The small Kokoro model in the release layout: `config.json`, `kokoro-v1_0.pth`, `voices/`
/// with `af_heart` (the real pack) and `am_mirror` (its features in reverse order).
fn kokoro_files(allow_files: bool) -> ModelFiles {
    let dir = fixtures().join("kokoro/release-small");
    let mut voices = KokoroVoices::in_model_dir(&dir);
    voices.allow_files = allow_files;
    ModelFiles::Kokoro { checkpoint: dir, voices }
}

fn f5_files() -> ModelFiles {
    let f = fixtures();
    ModelFiles::F5 {
        checkpoint: f.join("models/f5-tiny-v1/model.safetensors"),
        vocab: f.join("vocab.txt"),
        vocoder: f.join("models/vocos-tiny/pytorch_model.bin"),
    }
}

fn seeded(seed: u64) -> SpeakOptions {
    let mut o = SpeakOptions::default();
    o.seed = Some(seed);
    o
}

fn quiet() -> impl FnMut(f5_synth::Progress<'_>) {
    |_| {}
}

#[test]
fn kokoro_through_the_engine_is_the_model_itself() {
    let engine = open_engine(&kokoro_files(false), one_thread()).expect("open kokoro");
    assert_eq!(engine.info().family, "kokoro");
    assert!(!engine.info().clones_from_recording);
    assert_eq!(engine.voices(), ["af_heart", "am_mirror"]);
    let text = "Hello there, world.";
    let audio = speak_to_memory(&*engine, &VoiceRef::Named("af_heart".into()), text, &seeded(7), &mut quiet()).expect("speak");
    assert_eq!(audio.chunks.len(), 1);
    assert!(!audio.samples.is_empty() && audio.samples.iter().all(|x| x.is_finite()));

    // The same phonemes through the model crate directly, with the seed of chunk 0: identical.
    let g2p = f5_g2p::G2p::english(false, None).expect("front end");
    let chunks = g2p.chunks(text).expect("phonemes");
    let dir = fixtures().join("kokoro/release-small");
    let model = f5_kokoro::Kokoro::open(&dir, CpuBackend::with_threads(1).expect("kit")).expect("model");
    let pack = f5_kokoro::VoicePack::open(&dir.join("voices/af_heart.pt"), 256).expect("pack");
    let direct = model.speak(&chunks[0].phonemes, &pack, 1.0, 7).expect("direct");
    assert_eq!(audio.samples, direct.audio, "the engine must hand over exactly what the model made");
    assert_eq!(audio.chunks[0].samples, direct.audio.len());

    // Phonemes given directly skip the front end and speak the same.
    let mut o = seeded(7);
    o.phonemes = true;
    let from_phonemes =
        speak_to_memory(&*engine, &VoiceRef::Named("af_heart".into()), &chunks[0].phonemes, &o, &mut quiet()).expect("phonemes");
    assert_eq!(from_phonemes.samples, direct.audio);

    // Same seed, same audio; another seed, other audio (the source noise).
    let again = speak_to_memory(&*engine, &VoiceRef::Named("af_heart".into()), text, &seeded(7), &mut quiet()).expect("again");
    assert_eq!(again.samples, audio.samples);
    let other = speak_to_memory(&*engine, &VoiceRef::Named("af_heart".into()), text, &seeded(8), &mut quiet()).expect("other");
    assert_ne!(other.samples, audio.samples);
}

#[test]
fn kokoro_mixes_voices_and_times_words() {
    let engine = open_engine(&kokoro_files(false), one_thread()).expect("open kokoro");
    let speak = |voice: &str, o: &SpeakOptions| speak_to_memory(&*engine, &VoiceRef::Named(voice.into()), "Good morning.", o, &mut quiet());
    let a = speak("af_heart", &seeded(1)).expect("a");
    let b = speak("am_mirror", &seeded(1)).expect("b");
    let mix = speak("af_heart(2)+am_mirror", &seeded(1)).expect("mix");
    assert_ne!(mix.samples, a.samples);
    assert_ne!(mix.samples, b.samples);

    let mut o = seeded(1);
    o.word_timestamps = true;
    let timed = speak("af_heart", &o).expect("timestamps");
    let words: Vec<&str> = timed.words.iter().map(|w| w.word.as_str()).collect();
    assert_eq!(words, ["Good", "morning"]);
    let seconds = timed.samples.len() as f64 / 24_000.0;
    for pair in timed.words.windows(2) {
        assert!(pair[0].end <= pair[1].start + 1e-9, "words in order: {:?}", timed.words);
    }
    assert!(timed.words.iter().all(|w| 0.0 <= w.start && w.start < w.end && w.end <= seconds + 1e-9), "{:?}", timed.words);
    // Asking for timings does not change the audio.
    assert_eq!(timed.samples, a.samples);
}

#[test]
fn what_a_family_cannot_honour_is_refused_by_name() {
    let kokoro = open_engine(&kokoro_files(false), one_thread()).expect("open kokoro");
    let named = VoiceRef::Named("af_heart".into());
    let options_error = |r: Result<_, SynthError>| match r {
        Err(SynthError::Options(m)) => m,
        Err(other) => panic!("expected an options error, got {other}"),
        Ok(_) => panic!("expected an options error, got audio"),
    };
    let mut o = SpeakOptions::default();
    o.nfe = Some(8);
    o.fix_duration = Some(3.0);
    let m = options_error(speak_to_memory(&*kokoro, &named, "Hi.", &o, &mut quiet()));
    assert!(m.contains("nfe") && m.contains("fix duration") && m.contains("Kokoro"), "{m}");
    let recording = VoiceRef::Recording(Arc::new(birch_voice()));
    let m = options_error(speak_to_memory(&*kokoro, &recording, "Hi.", &SpeakOptions::default(), &mut quiet()));
    assert!(m.contains("does not clone"), "{m}");
    let mut o = SpeakOptions::default();
    o.lang = Some("klingon".into());
    let m = options_error(speak_to_memory(&*kokoro, &named, "Hi.", &o, &mut quiet()));
    assert!(m.contains("klingon") && m.contains("en-us"), "{m}");

    let f5 = open_engine(&f5_files(), one_thread()).expect("open f5");
    assert!(f5.info().clones_from_recording);
    let mut o = SpeakOptions::default();
    o.lang = Some("en-us".into());
    o.phonemes = true;
    let m = options_error(speak_to_memory(&*f5, &recording, "Hi.", &o, &mut quiet()));
    assert!(m.contains("lang") && m.contains("phonemes") && m.contains("F5"), "{m}");
    let m = options_error(speak_to_memory(&*f5, &named, "Hi.", &SpeakOptions::default(), &mut quiet()));
    assert!(m.contains("recording"), "{m}");
}

#[test]
fn unknown_voices_are_named_without_paths_and_files_only_when_allowed() {
    let files = kokoro_files(false);
    let not_found = |r: Result<(), SynthError>| match r {
        Err(SynthError::NotFound(m)) => m,
        other => panic!("expected not found, got {other:?}"),
    };
    let m = not_found(files.check_voice_name("af_nobody"));
    assert!(m.contains("af_nobody") && m.contains("af_heart, am_mirror"), "{m}");
    assert!(!m.contains('/'), "no server path in {m}");
    // A server's clients cannot reach files, even ones that exist.
    let pack = fixtures().join("kokoro/release-small/voices/af_heart.pt");
    let m = not_found(files.check_voice_name(pack.to_str().expect("utf-8 path")));
    assert!(!m.contains("release-small"), "{m}");
    assert!(files.check_voice_name("../voices/af_heart").is_err());
    // A malformed mix is the caller's error.
    assert!(matches!(files.check_voice_name("af_heart(0)"), Err(SynthError::Options(_))));
    // The command line may name a file.
    kokoro_files(true).check_voice_name(pack.to_str().expect("utf-8 path")).expect("a voice file on the command line");
    // F5 takes recordings: no name is a voice.
    assert!(f5_files().check_voice_name("af_heart").is_err());
}

#[test]
fn f5_through_the_engine_is_the_synthesizer_itself() {
    let engine = open_engine(&f5_files(), one_thread()).expect("open f5");
    let voice = birch_voice();
    let text = "Some new words to say.";
    let mut o = seeded(11);
    o.nfe = Some(4);
    let via_engine = speak_to_memory(&*engine, &VoiceRef::Recording(Arc::new(voice.clone())), text, &o, &mut quiet()).expect("engine");
    let direct =
        synthesizer().synthesize(&voice, text, &SynthOptions::default().with_nfe(4).with_seed(Some(11)), &mut quiet()).expect("direct");
    assert_eq!(via_engine.samples, direct.samples);
    assert_eq!(via_engine.mel, direct.mel);
    // Unset options are the reference's defaults: nfe 32 differs from nfe 4.
    let defaults = speak_to_memory(&*engine, &VoiceRef::Recording(Arc::new(voice)), text, &seeded(11), &mut quiet()).expect("defaults");
    assert_ne!(defaults.samples, direct.samples);
}
