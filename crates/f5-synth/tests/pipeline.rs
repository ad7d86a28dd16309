//! The whole pipeline on the tiny fixtures against the reference's `infer_process`.
//!
//! Tolerance: waveform rel-L2 ≤ 1e-3. Every stage is matched to ~1e-6 on its own; the
//! remaining slack covers 8 steps of CFG extrapolation through a random-weight model and the
//! vocoder's exp(), which amplify those differences. A wrong rule anywhere (duration, one frame
//! of the reference left in, loudness, transcript spacing) changes the length or the wave by
//! O(1).

mod common;

use common::{birch_voice, fixtures, synthesizer};
use f5_synth::{Progress, SynthOptions, Voice};

fn npy_f32(name: &str) -> Vec<f32> {
    let path = fixtures().join("goldens").join(name);
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    npyz::NpyFile::new(&bytes[..]).unwrap().into_vec::<f32>().unwrap()
}

fn rel_l2(got: &[f32], want: &[f32]) -> f64 {
    let num: f64 = got.iter().zip(want).map(|(a, b)| (*a as f64 - *b as f64).powi(2)).sum();
    let den: f64 = want.iter().map(|b| (*b as f64).powi(2)).sum();
    (num / den).sqrt()
}

#[test]
fn single_chunk_matches_infer_process() {
    let synth = synthesizer();
    let voice = birch_voice();
    assert_eq!(voice.model_text, "The birch canoe slid on the smooth planks.  ");
    let opts = SynthOptions::default().with_nfe(8).with_seed(Some(42));
    let mut steps = 0;
    let audio = synth
        .synthesize(&voice, "Hello world, this is a tiny test.", &opts, &mut |p| {
            if let Progress::Step { .. } = p {
                steps += 1
            }
        })
        .unwrap();
    assert_eq!(steps, 8);
    assert_eq!(audio.chunks.len(), 1);
    assert_eq!(audio.chunks[0].frames, 287, "duration estimate");
    let want_mel = npy_f32("infer_tiny_v1_seed42_mel.npy");
    assert_eq!(audio.mel.len(), want_mel.len(), "generated mel frames");
    let e_mel = rel_l2(&audio.mel, &want_mel);
    let want = npy_f32("infer_tiny_v1_seed42.npy");
    assert_eq!(audio.samples.len(), want.len(), "wave length");
    let e = rel_l2(&audio.samples, &want);
    eprintln!("infer_process seed 42: mel rel-L2 {e_mel:.2e}, wave rel-L2 {e:.2e}");
    assert!(e_mel <= 1e-4, "mel rel-L2 {e_mel:e}");
    assert!(e <= 1e-3, "wave rel-L2 {e:e}");
}

#[test]
fn bad_inputs_are_clear_errors() {
    let synth = synthesizer();
    let voice = birch_voice();
    let opts = SynthOptions::default().with_nfe(2).with_seed(Some(1));
    let err = synth.synthesize(&voice, "   ", &opts, &mut |_| {}).unwrap_err().to_string();
    assert!(err.contains("empty"), "{err}");
    let err = synth.synthesize(&voice, "Hi.", &opts.clone().with_speed(0.0), &mut |_| {}).unwrap_err().to_string();
    assert!(err.contains("speed"), "{err}");
    // Only punctuation still speaks (something): a sensible result, not a panic.
    let audio = synth.synthesize(&voice, "?!", &opts, &mut |_| {}).unwrap();
    assert!(!audio.samples.is_empty());
    let err = Voice::load(&fixtures().join("audio/ref_22050.wav"), "", 0.1).unwrap_err().to_string();
    assert!(err.contains("transcript"), "{err}");
    // A transcript in another script than the text: still a synthesis (the model reads both).
    let zh = Voice::load(&fixtures().join("audio/ref_22050.wav"), "白桦木独木舟在光滑的木板上滑行。", 0.1).unwrap();
    assert_eq!(zh.model_text, "白桦木独木舟在光滑的木板上滑行。", "a CJK full stop gets no extra space");
    assert!(!synth.synthesize(&zh, "Hello there, friend.", &opts, &mut |_| {}).unwrap().samples.is_empty());
    // A silent recording and one with a fraction of a second of sound are refused by name.
    let dir = std::env::temp_dir().join(format!("f5-synth-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let silent = dir.join("silent.wav");
    f5_audio::output::write_wav_pcm16(&silent, &vec![0.0; 72_000], 24_000).unwrap();
    let err = Voice::load(&silent, "Nothing.", 0.1).unwrap_err().to_string();
    assert!(err.contains("silent"), "{err}");
    let blip = dir.join("blip.wav");
    let tone: Vec<f64> = (0..24_000).map(|i| if i < 4_800 { 0.3 * (i as f64 * 0.05).sin() } else { 0.0 }).collect();
    f5_audio::output::write_wav_pcm16(&blip, &tone, 24_000).unwrap();
    let err = Voice::load(&blip, "Hi.", 0.1).unwrap_err().to_string();
    assert!(err.contains("at least"), "{err}");
}

/// A transcriber that answers from a script, in call order.
struct Scripted {
    answers: std::sync::Mutex<std::collections::VecDeque<String>>,
    calls: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl f5_verify::Transcribe for Scripted {
    fn transcribe(&self, _samples: &[f32], _rate: u32) -> Result<Option<String>, f5_verify::VerifyError> {
        self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(self.answers.lock().unwrap().pop_front())
    }
    fn describe(&self) -> String {
        "scripted".into()
    }
}

#[test]
fn the_gate_regenerates_exactly_the_misheard_chunk() {
    let voice = birch_voice();
    // Sentences of ~150 bytes against a ~440-byte budget: several chunks.
    let sentence = "The quick brown fox jumps over the lazy dog while the small cat watches from the warm windowsill and the birds sing in the tall green trees.";
    let text = [sentence; 9].join(" ");
    let chunks = f5_text::chunk_text(&text, voice.max_chunk_bytes(1.0));
    assert!(chunks.len() >= 3, "{chunks:?}");
    let mut answers: std::collections::VecDeque<String> = chunks.iter().cloned().collect();
    answers.insert(1, "something else entirely was heard here".into());
    let calls = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let synth = synthesizer().with_listen_back(f5_synth::ListenBack {
        transcriber: Box::new(Scripted { answers: std::sync::Mutex::new(answers), calls: calls.clone() }),
        language: &f5_verify::English,
    });
    let opts = SynthOptions::default().with_nfe(1).with_seed(Some(5)).with_retries(2).with_max_wer(0.3);
    let mut starts = Vec::new();
    let audio = synth
        .synthesize(&voice, &text, &opts, &mut |p| {
            if let Progress::Chunk { index, attempt, .. } = p {
                starts.push((index, attempt));
            }
        })
        .unwrap();
    let mut want: Vec<(usize, u32)> = (0..chunks.len()).map(|i| (i, 0)).collect();
    want.insert(2, (1, 1));
    assert_eq!(starts, want, "chunk 2 (index 1) generated twice, every other chunk once");
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), chunks.len() + 1);
    assert_eq!(audio.chunks[1].score.attempts, 2);
    assert_eq!(audio.chunks[1].score.errors, 0);
    assert!(audio.chunks.iter().all(|c| c.score.checked));
    assert_eq!((audio.score.regenerated, audio.score.unchecked, audio.score.attempts as usize), (1, 0, chunks.len() + 1));
    assert_eq!(audio.score.wer(), Some(0.0));

    // The first attempts draw from one shared stream: regenerating chunk 2 must not change
    // chunk 3. Without the gate, chunk 3's samples are the same.
    let plain = synthesizer();
    let base = plain.synthesize(&voice, &text, &opts, &mut |_| {}).unwrap();
    assert_eq!(base.score.unchecked, chunks.len());
    let again = plain.synthesize(&voice, &text, &opts, &mut |_| {}).unwrap();
    assert!(base.samples == again.samples, "a seeded synthesis is deterministic");
    let tail = |a: &f5_synth::Audio| a.samples[a.samples.len() - 2000..].to_vec();
    assert!(tail(&audio) == tail(&base), "the chunk after the regenerated one is unchanged");
}

/// A text long enough for two chunks: the reference ran its chunks in order (its thread pool
/// replaced by an in-order executor), so they drew noise from the one generator one after
/// another, as f5 does. The golden keeps every 16th sample of the cross-faded wave.
#[test]
fn multi_chunk_matches_infer_process_run_in_order() {
    let index: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(fixtures().join("goldens/index.json")).unwrap()).unwrap();
    let entry = &index["files"]["goldens/infer_multichunk_seed7_every16.npy"];
    let info = &entry["inputs"];
    let gen_text = info["gen_text"].as_str().expect("gen_text");
    let want_chunks: Vec<&str> = info["chunks"].as_array().unwrap().iter().map(|c| c.as_str().unwrap()).collect();
    let total = info["samples"].as_u64().unwrap() as usize;
    let synth = synthesizer();
    let voice = birch_voice();
    assert_eq!(voice.max_chunk_bytes(1.0) as u64, info["max_chars"].as_u64().unwrap(), "chunk budget");
    let opts = SynthOptions::default().with_nfe(4).with_seed(Some(7));
    let audio = synth.synthesize(&voice, gen_text, &opts, &mut |_| {}).unwrap();
    let got_chunks: Vec<&str> = audio.chunks.iter().map(|c| c.text.as_str()).collect();
    assert_eq!(got_chunks, want_chunks);
    assert_eq!(audio.samples.len(), total, "cross-faded length");
    let every16: Vec<f32> = audio.samples.iter().step_by(16).copied().collect();
    let want = npy_f32("infer_multichunk_seed7_every16.npy");
    let e = rel_l2(&every16, &want);
    eprintln!("multi-chunk ({} chunks): wave rel-L2 {e:.2e}", want_chunks.len());
    assert!(e <= 1e-3, "wave rel-L2 {e:e}");
}

#[test]
fn a_dialogue_is_its_lines_in_order_with_punctuation_pauses() {
    let synth = synthesizer();
    let a = birch_voice();
    let b = Voice::load(&fixtures().join("audio/ref_44100.wav"), "The birch canoe slid on the smooth planks.", 0.1).unwrap();
    let opts = SynthOptions::default().with_nfe(2).with_seed(Some(11));
    let lines: [(&Voice, &str); 3] = [(&a, "Hello, who is there?"), (&b, "Just me, waiting"), (&a, "Come in.")];
    let d = synth.dialogue(&lines, &opts, &mut |_| {}).unwrap();
    let mut want = Vec::new();
    for (i, (v, t)) in lines.iter().enumerate() {
        let part = synth.synthesize(v, t, &opts.clone().with_seed(Some(11 + i as u64)), &mut |_| {}).unwrap();
        want.extend(part.samples);
        if i < 2 {
            want.extend(std::iter::repeat_n(0.0f32, f5_synth::trailing_pause_ms(t) as usize * 24));
        }
    }
    assert_eq!(f5_synth::trailing_pause_ms("Hello, who is there?"), 450);
    assert_eq!(f5_synth::trailing_pause_ms("Just me, waiting"), 200);
    assert!(d.samples == want, "lines, pauses and seeds in order");
    assert_eq!(d.chunks.len(), 3);
    assert!(synth.dialogue(&[], &opts, &mut |_| {}).is_err());
}

/// Split-on-fail: a three-sentence chunk whose middle sentence is misheard in every attempt of
/// the whole is cut into its sentences; each goes through the gate on its own, so only the
/// misheard one is generated again, and the report shows the split. With it off, the whole
/// chunk's best attempt is kept, as before.
#[test]
fn split_on_fail_regenerates_the_misheard_sentence_on_its_own() {
    let voice = birch_voice();
    let s1 = "The birch canoe slid on the smooth planks today.";
    let s2 = "Glue the sheet to the dark blue background now.";
    let s3 = "It is easy to tell the depth of a well.";
    let text = format!("{s1} {s2} {s3}");
    assert_eq!(f5_text::chunk_text(&text, voice.max_chunk_bytes(1.0)).len(), 1, "one chunk");
    let misheard = format!("{s1} zebra quantum xylophone {s3}");
    let script = [misheard.as_str(), misheard.as_str(), s1, "zebra quantum xylophone", s2, s3];
    let run = |split_on_fail: bool| {
        let calls = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let synth = synthesizer().with_listen_back(f5_synth::ListenBack {
            transcriber: Box::new(Scripted { answers: std::sync::Mutex::new(script.iter().map(|s| s.to_string()).collect()), calls }),
            language: &f5_verify::English,
        });
        let opts =
            SynthOptions::default().with_nfe(1).with_seed(Some(3)).with_retries(1).with_max_wer(0.3).with_split_on_fail(split_on_fail);
        let mut starts = Vec::new();
        let audio = synth
            .synthesize(&voice, &text, &opts, &mut |p| {
                if let Progress::Chunk { text, attempt, .. } = p {
                    starts.push((text.to_string(), attempt));
                }
            })
            .unwrap();
        (audio, starts)
    };

    let (audio, starts) = run(true);
    let want: Vec<(String, u32)> =
        [(text.as_str(), 0), (text.as_str(), 1), (s1, 0), (s2, 0), (s2, 1), (s3, 0)].iter().map(|(t, a)| (t.to_string(), *a)).collect();
    assert_eq!(starts, want);
    let chunk = &audio.chunks[0];
    let split = chunk.split.as_ref().expect("the chunk was split");
    assert_eq!(split.whole.attempts, 2);
    assert!(split.whole.wer.unwrap() > 0.3);
    let parts: Vec<(&str, u32, Option<f64>)> = split.parts.iter().map(|p| (p.text.as_str(), p.score.attempts, p.score.wer)).collect();
    assert_eq!(parts, [(s1, 1, Some(0.0)), (s2, 2, Some(0.0)), (s3, 1, Some(0.0))]);
    // The chunk's score is what was kept: the parts, heard right; its cost counts every attempt.
    assert_eq!((chunk.score.wer, chunk.score.attempts, chunk.score.errors), (Some(0.0), 6, 0));
    assert_eq!(chunk.samples, split.parts.iter().map(|p| p.samples).sum::<usize>());
    // Each sentence has its own duration estimate: shorter than the whole chunk's.
    assert!(split.parts.iter().all(|p| p.generated_frames < chunk.generated_frames));

    let (kept, starts) = run(false);
    assert_eq!(starts, [(text.clone(), 0), (text.clone(), 1)]);
    assert!(kept.chunks[0].split.is_none());
    assert!(kept.chunks[0].score.wer.unwrap() > 0.3, "without split-on-fail the misheard chunk stays");
}
