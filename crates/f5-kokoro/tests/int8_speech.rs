//! Real speech from realistic weights: the int8-derived Kokoro-82M (`cargo xtask kokoro-int8`,
//! directory in `F5_KOKORO_INT8`) speaks plain English sentences, phonemised by f5-g2p, and
//! pocketsphinx (the listen-back tests' recogniser, `F5_ASR_PYTHON`) hears the words.
//!
//! Without `F5_KOKORO_INT8` the test says so and passes without checking anything, unless
//! `F5_KOKORO_REQUIRE_INT8=1` (CI sets it where the weights were built) makes that a failure.
//! Without a Python with pocketsphinx it also skips, saying why.
//!
//! Tolerances: the mean word error rate over 3 sentences × 2 voices must be ≤ 0.15 (the int8
//! model itself on onnxruntime scores about 0.05 on sentences of this kind; pocketsphinx's small
//! model is the larger error; measured 0.083). The failing variant — the same sentences with a
//! scrambled style (the voice row's 256 values permuted) — must score a mean ≥ 0.8 (measured
//! 0.90), so the test can tell speech from speech-like noise. (Phonemes shuffled within words
//! were tried too: pocketsphinx's language model still recovers short words, 0.5 on the first
//! sentence, so they make a weaker gate.)
//!
//! The second test is whole-model parity with the reference on the same weights
//! (`fixtures/kokoro/int8_parity/`, made by `int8_goldens.py` with kokoro 0.9.4's `KModel`): the
//! same per-token durations exactly and the audio within a relative L2 of 1e-2 (measured 4.7e-3;
//! why not 1e-4 is at `MAX_AUDIO_REL_L2`), while another seed lies far outside it.

use std::path::PathBuf;
use std::time::Duration;

use f5_gpukit::{Backend, CpuBackend, CpuBf16Backend};
use f5_kokoro::{Kokoro, VoicePack};
use f5_verify::{score, English, Transcriber, TranscriberConfig};

#[path = "../../f5-verify/tests/asr/harness.rs"]
mod harness;
use harness::{start_asr_server, AsrServer};

const SENTENCES: [&str; 3] = [
    "I would like to have a cup of coffee in the morning.",
    "She opened the door and walked into the kitchen.",
    "The children played in the garden until it was dark.",
];
const VOICES: [&str; 2] = ["am_adam", "af_heart"];
const MAX_MEAN_WER: f64 = 0.15;
const MIN_MEAN_WER_WRONG: f64 = 0.8;
const RATE: u32 = 24_000;
const SEED: u64 = 0;

fn skip(reason: &str) {
    eprintln!("SKIPPED (int8 speech test): {reason}");
}

/// The int8-derived model directory, or why there is none (a failure when it is required).
fn int8_dir() -> Option<PathBuf> {
    let required = std::env::var("F5_KOKORO_REQUIRE_INT8").is_ok_and(|v| v == "1");
    let reason = match std::env::var_os("F5_KOKORO_INT8") {
        Some(dir) if PathBuf::from(&dir).join("kokoro-v1_0.pth").is_file() => return Some(PathBuf::from(dir)),
        Some(dir) => {
            format!("F5_KOKORO_INT8={} has no kokoro-v1_0.pth (run `cargo xtask kokoro-int8 --out DIR`)", PathBuf::from(dir).display())
        }
        None => "F5_KOKORO_INT8 is not set (the folder `cargo xtask kokoro-int8` writes)".to_string(),
    };
    assert!(!required, "F5_KOKORO_REQUIRE_INT8=1 but {reason}");
    skip(&reason);
    None
}

/// f5-verify's pocketsphinx server (`tests/asr/server.py`: the whisper.cpp API, resampling to
/// the model's 16 kHz); killed when the test ends.
fn start_server() -> Result<AsrServer, String> {
    start_asr_server(600)
}

/// A fixed permutation (a 64-bit LCG drives Fisher–Yates): the same scramble on every run.
fn permute<T>(items: &mut [T], mut state: u64) {
    for i in (1..items.len()).rev() {
        state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        let j = ((state >> 33) % (i as u64 + 1)) as usize;
        items.swap(i, j);
    }
}

struct Listener {
    transcriber: Transcriber,
    _server: AsrServer,
}

impl Listener {
    /// WER of what pocketsphinx hears in `audio` against `text`.
    fn wer(&self, what: &str, text: &str, audio: &[f32]) -> f64 {
        let heard = self.transcriber.transcribe(audio, RATE).expect("request accepted").expect("the ASR server answers");
        let s = score(text, &heard, &English);
        eprintln!("{what}: {:.2} s, heard {heard:?}: WER {:.3}", audio.len() as f64 / f64::from(RATE), s.wer);
        s.wer
    }
}

fn phonemes(g2p: &f5_g2p::G2p, text: &str) -> String {
    let chunks = g2p.chunks(text).expect("phonemes");
    assert_eq!(chunks.len(), 1, "{text:?} should be one chunk");
    chunks[0].phonemes.clone()
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len() as f64
}

/// The recogniser, or why there is none (the test then skips, saying so).
fn listener() -> Option<Listener> {
    let server = match start_server() {
        Ok(s) => s,
        Err(reason) => {
            skip(&reason);
            return None;
        }
    };
    let mut config = TranscriberConfig::new(server.address.as_str(), Some("en".into()));
    config.timeout = Duration::from_secs(300);
    Some(Listener { transcriber: Transcriber::with_config(config).expect("client for the ASR server"), _server: server })
}

#[test]
fn int8_weights_speak_words_that_pocketsphinx_hears() {
    let Some(dir) = int8_dir() else { return };
    let Some(listener) = listener() else { return };
    let model = Kokoro::open(dir.join("kokoro-v1_0.pth"), CpuBackend::new()).unwrap_or_else(|e| panic!("{e}"));
    let g2p = f5_g2p::G2p::english(false, None).expect("English front end");

    let mut wers = Vec::new();
    for voice_name in VOICES {
        let voice = VoicePack::open(&dir.join(format!("voices/{voice_name}.pt")), 256).unwrap_or_else(|e| panic!("{e}"));
        for text in SENTENCES {
            let ps = phonemes(&g2p, text);
            let speech = model.speak(&ps, &voice, 1.0, SEED).unwrap_or_else(|e| panic!("{e}"));
            wers.push(listener.wer(&format!("{voice_name} {ps:?}"), text, &speech.audio));
        }
    }
    let spoken = mean(&wers);
    eprintln!("mean WER {spoken:.3} over {} utterances", wers.len());
    assert!(spoken <= MAX_MEAN_WER, "int8 Kokoro: mean WER {spoken:.3} > {MAX_MEAN_WER} ({wers:?})");

    // The same sentences from a style that is no voice must fail the same gate.
    let voice = VoicePack::open(&dir.join("voices/am_adam.pt"), 256).unwrap_or_else(|e| panic!("{e}"));
    let mut wrong = Vec::new();
    for (i, text) in SENTENCES.iter().enumerate() {
        let ps = phonemes(&g2p, text);
        let mut style = voice.style(ps.chars().count()).unwrap_or_else(|e| panic!("{e}")).to_vec();
        permute(&mut style, 17 + i as u64);
        let tokens = model.tokens(&ps).unwrap_or_else(|e| panic!("{e}"));
        let speech = model.forward(&tokens, &style, 1.0, SEED, f5_kokoro::Trace::off()).unwrap_or_else(|e| panic!("{e}"));
        wrong.push(listener.wer(&format!("scrambled style {ps:?}"), text, &speech.audio));
    }
    let garbled = mean(&wrong);
    eprintln!("scrambled style: mean WER {garbled:.3} ({wrong:?})");
    assert!(garbled >= MIN_MEAN_WER_WRONG, "a scrambled style scored a mean WER of {garbled:.3} < {MIN_MEAN_WER_WRONG} ({wrong:?})");
}

/// Ten plain sentences × two voices from phonemes made by the reference's own front end
/// (`fixtures/kokoro/int8_sentences.json`, misaki's `EspeakG2P` as kokoro runs it; see
/// `espeak_sentences.py`), so what is heard does not depend on f5-g2p. Same gate as above: a
/// mean WER ≤ 0.15, where the scrambled style above scores ≥ 0.8. Measured 0.047 (the int8
/// model on onnxruntime scores about 0.05 on sentences of this kind).
#[test]
fn int8_weights_speak_the_reference_front_ends_phonemes() {
    let Some(dir) = int8_dir() else { return };
    let model = Kokoro::open(dir.join("kokoro-v1_0.pth"), CpuBackend::new()).unwrap_or_else(|e| panic!("{e}"));
    reference_phonemes_are_heard(&dir, &model, "f32");
}

/// The same ten sentences × two voices in the reduced precisions of the CPU backend (bf16
/// weights; bf16 with the generator's convolutions in int8), same gate: what they change in the
/// audio (~1e-2 and ~2e-2 rel-L2 from f32 in the decoder, `kokoro_cpu_time --precision`) must
/// not change the words heard. Each runs where the CPU has its extensions and says so where not.
#[test]
fn reduced_precisions_speak_the_reference_front_ends_phonemes() {
    let Some(dir) = int8_dir() else { return };
    for (label, kit) in [("bf16", CpuBf16Backend::with_threads(0)), ("int8", CpuBf16Backend::with_int8_convs(0))] {
        match kit {
            Ok(kit) => {
                let model = Kokoro::open(dir.join("kokoro-v1_0.pth"), kit).unwrap_or_else(|e| panic!("{e}"));
                reference_phonemes_are_heard(&dir, &model, label);
            }
            Err(e) => skip(&format!("{label} not run: {e}")),
        }
    }
}

/// Mean WER of the reference front end's phonemes spoken by `model`, held to the gate.
fn reference_phonemes_are_heard<B: Backend>(dir: &std::path::Path, model: &Kokoro<B>, label: &str) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/kokoro/int8_sentences.json");
    let doc: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).expect("int8_sentences.json")).expect("json");
    let sentences: Vec<(&str, &str)> = doc["sentences"]
        .as_array()
        .expect("sentences")
        .iter()
        .map(|r| (r["text"].as_str().expect("text"), r["phonemes"].as_str().expect("phonemes")))
        .collect();
    assert_eq!(sentences.len(), 10);
    let Some(listener) = listener() else { return };
    let mut wers = Vec::new();
    for voice_name in VOICES {
        let voice = VoicePack::open(&dir.join(format!("voices/{voice_name}.pt")), 256).unwrap_or_else(|e| panic!("{e}"));
        for (text, ps) in &sentences {
            let speech = model.speak(ps, &voice, 1.0, SEED).unwrap_or_else(|e| panic!("{e}"));
            wers.push(listener.wer(&format!("{label} {voice_name} {ps:?}"), text, &speech.audio));
        }
    }
    let spoken = mean(&wers);
    eprintln!("{label}, reference phonemes: mean WER {spoken:.3} over {} utterances", wers.len());
    assert!(spoken <= MAX_MEAN_WER, "{label} Kokoro on the reference's phonemes: mean WER {spoken:.3} > {MAX_MEAN_WER} ({wers:?})");
}

/// ‖a − b‖ / ‖b‖.
fn rel_l2(got: &[f32], want: &[f32]) -> f64 {
    assert_eq!(got.len(), want.len(), "lengths differ");
    let num: f64 = got.iter().zip(want).map(|(&g, &w)| (f64::from(g) - f64::from(w)).powi(2)).sum();
    let den: f64 = want.iter().map(|&w| f64::from(w).powi(2)).sum();
    (num / den.max(1e-30)).sqrt()
}

fn read_npy<T: npyz::Deserialize>(path: &std::path::Path) -> Vec<T> {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    npyz::NpyFile::new(&bytes[..]).and_then(|f| f.into_vec::<T>()).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The audio bound. The whole forward is ill-conditioned through the source's phase (see
/// `stage_by_stage`: every stage before it matches to ~4e-7): the reference alone moves by a
/// relative L2 of 1.8e-3 between 1 and 2 threads and by 5.8e-3 / 7.2e-3 (am_adam / af_heart) when
/// the style is scaled by 1 + 1e-6. 1e-4 for the whole audio is therefore out of reach for any
/// f32 port; 1e-2 is above that sensitivity and ten times below what another seed gives
/// (0.13 / 0.10), which the test also checks fails.
const MAX_AUDIO_REL_L2: f64 = 1e-2;

#[test]
fn int8_weights_give_the_reference_kmodels_audio() {
    let Some(dir) = int8_dir() else { return };
    let goldens = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/kokoro/int8_parity");
    let index: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(goldens.join("index.json")).expect("int8_parity/index.json")).expect("index.json");
    let golden_phonemes = index["phonemes"].as_str().expect("phonemes");
    let speed = index["speed"].as_f64().expect("speed") as f32;
    let seed = index["seed"].as_u64().expect("seed");
    // the model's input as committed (f5-g2p's phonemes when the goldens were made), so a
    // change in the front end cannot move this comparison
    let model = Kokoro::open(dir.join("kokoro-v1_0.pth"), CpuBackend::new()).unwrap_or_else(|e| panic!("{e}"));
    for case in index["cases"].as_array().expect("cases") {
        let voice_name = case["voice"].as_str().expect("voice");
        let voice = VoicePack::open(&dir.join(format!("voices/{voice_name}.pt")), 256).unwrap_or_else(|e| panic!("{e}"));
        let want_dur: Vec<i64> = read_npy(&goldens.join(case["pred_dur"].as_str().expect("pred_dur")));
        let want_audio: Vec<f32> = read_npy(&goldens.join(case["audio"].as_str().expect("audio")));
        let speech = model.speak(golden_phonemes, &voice, speed, seed).unwrap_or_else(|e| panic!("{e}"));
        stage_by_stage(&model, &goldens, case, golden_phonemes, &voice, speed, seed, &want_audio);
        let got_dur: Vec<i64> = speech.durations.iter().map(|&d| d as i64).collect();
        assert_eq!(got_dur, want_dur, "{voice_name}: durations");
        let err = rel_l2(&speech.audio, &want_audio);
        eprintln!("{voice_name}: {} samples, audio rel-L2 {err:.2e} against the reference KModel", speech.audio.len());
        assert!(err <= MAX_AUDIO_REL_L2, "{voice_name}: audio rel-L2 {err:.2e} > {MAX_AUDIO_REL_L2}");
        if voice_name == "am_adam" {
            // the failing variant: the same input with another seed's noise
            let other = model.speak(golden_phonemes, &voice, speed, seed + 1).unwrap_or_else(|e| panic!("{e}"));
            let n = other.audio.len().min(want_audio.len());
            let other_err = rel_l2(&other.audio[..n], &want_audio[..n]);
            eprintln!("{voice_name}: seed {} gives rel-L2 {other_err:.2e}", seed + 1);
            assert!(other_err > MAX_AUDIO_REL_L2, "another seed is within the bound ({other_err:.2e}): the check cannot fail");
        }
    }
}

/// Where the whole-model difference comes from, stage by stage:
/// - the first half (F0, N, asr: the decoder's inputs) matches the reference to ≤ 1e-5 (the spec's
///   bound; measured 2–5e-7);
/// - the decoder run on the reference's own F0/N/asr gives its audio to ≤ 1e-3 (measured 2.1e-4 /
///   3.1e-4). The reference's decoder is well conditioned on these inputs (1 vs 2 threads: 1.7e-6);
///   what is left is the source STFT's first and last frames, which are exactly real: where a bin
///   is negative, the sign of each FFT's rounding noise puts its phase at +π or −π, and the
///   generator sees a 2π step (`tests/forward_full.rs`). Flipping every such phase in the reference
///   itself moves its audio by 8.5e-4 / 9.3e-4, the bound above that;
/// - the whole model then differs by 4.7e-3 / 5.0e-3 (`MAX_AUDIO_REL_L2`) because the source's
///   phase is the running sum of F0 over ~70,000 samples: F0's 4e-7 becomes ~4e-3 rad at 10⁴ rad.
#[allow(clippy::too_many_arguments)]
fn stage_by_stage(
    model: &Kokoro<CpuBackend>,
    goldens: &std::path::Path,
    case: &serde_json::Value,
    phonemes: &str,
    voice: &VoicePack,
    speed: f32,
    seed: u64,
    want_audio: &[f32],
) {
    let voice_name = case["voice"].as_str().expect("voice");
    let golden = |key: &str| -> Vec<f32> { read_npy(&goldens.join(case[key].as_str().unwrap_or_else(|| panic!("no {key} golden")))) };
    let tokens = model.tokens(phonemes).unwrap_or_else(|e| panic!("{e}"));
    let style = voice.style(phonemes.chars().count()).unwrap_or_else(|e| panic!("{e}")).to_vec();
    let mut stages = std::collections::HashMap::new();
    let mut sink = |name: &str, data: Vec<f32>| {
        stages.insert(name.to_string(), data);
    };
    let aligned = model.align(&tokens, &style, speed, &mut f5_kokoro::Trace::to(&mut sink)).unwrap_or_else(|e| panic!("{e}"));
    let (f0, n, asr_cf) = (golden("F0"), golden("N"), golden("asr"));
    let frames = aligned.durations.iter().sum::<usize>();
    // [512, F] (the reference's channels-first) → [F, 512] (ours)
    let channels = asr_cf.len() / frames;
    let asr: Vec<f32> = (0..frames * channels).map(|i| asr_cf[(i % channels) * frames + i / channels]).collect();
    for (name, want) in [("F0", &f0), ("N", &n), ("asr", &asr)] {
        let got = stages.get(name).unwrap_or_else(|| panic!("no {name} stage"));
        let err = rel_l2(got, want);
        eprintln!("{voice_name} {name}: rel-L2 {err:.2e}");
        assert!(err <= 1e-5, "{voice_name} {name}: rel-L2 {err:.2e} > 1e-5");
    }
    let fed = model.aligned_from_host(aligned.durations.clone(), &f0, &n, &asr).unwrap_or_else(|e| panic!("{e}"));
    let audio = model.decode(&fed, &style, seed, &mut f5_kokoro::Trace::off()).unwrap_or_else(|e| panic!("{e}"));
    let err = rel_l2(&audio, want_audio);
    eprintln!("{voice_name} decoder on the reference's inputs: audio rel-L2 {err:.2e}");
    assert!(err <= 1e-3, "{voice_name}: the decoder on the reference's F0/N/asr gives audio rel-L2 {err:.2e} > 1e-3");
}
