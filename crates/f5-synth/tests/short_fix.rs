//! `short_fix` through the whole synthesizer on the tiny fixtures: off, the reference's chunks
//! and frames exactly; on, the designed extra frames and one-word openings as chunks of their
//! own, in every entry point (whole, streaming, dialogue).

mod common;

use common::{birch_voice as voice, synthesizer};
use f5_dit::duration::{estimate_frames, sampled_frames};
use f5_gpukit::CpuBackend;
use f5_synth::short_fix::short_fix_extra_frames;
use f5_synth::{Progress, SynthOptions, Synthesizer, Voice};

/// The reference's frames for a chunk of this text (the rule in F5-SPEC §4.5 and `CFM.sample`'s
/// lower bound), plus `extra`.
fn reference_frames(synth: &Synthesizer<CpuBackend>, voice: &Voice, chunk: &str, extra: usize) -> usize {
    let tokens = f5_text::to_tokens(&format!("{}{chunk}", voice.model_text)).unwrap();
    let ids = synth.vocab.ids(&tokens);
    let estimate = estimate_frames(voice.wave.len(), voice.model_text.len(), chunk.len(), 1.0, None);
    sampled_frames(estimate + extra, ids.len(), voice.wave.len())
}

const OPENING: &str = "Juuri. Seuraavaksi ne tuovat kahvia ja pullaa pöytään.";

#[test]
fn off_by_default_and_off_is_the_reference_rule() {
    assert!(!SynthOptions::default().short_fix);
    let synth = synthesizer();
    let v = voice();
    let opts = SynthOptions::default().with_nfe(1).with_seed(Some(3));
    for text in ["Hi there.", OPENING, "Hello world, this is a tiny test."] {
        let audio = synth.synthesize(&v, text, &opts, &mut |_| {}).unwrap();
        assert_eq!(audio.chunks.len(), 1, "{text:?} stays one chunk");
        assert_eq!(audio.chunks[0].text, text);
        assert_eq!(audio.chunks[0].short_fix_frames, 0);
        assert_eq!(audio.chunks[0].frames, reference_frames(&synth, &v, text, 0), "{text:?}");
    }
}

#[test]
fn on_a_short_line_gets_exactly_the_designed_extra_frames() {
    let synth = synthesizer();
    let v = voice();
    let off = SynthOptions::default().with_nfe(1).with_seed(Some(3));
    let on = off.clone().with_short_fix(true);
    // 9 bytes (the reference's own < 10-byte rule applies too), 30, 31, 75 and 121 bytes.
    let lines = [
        ("Hi there.", 103),
        ("The cat sat on the warm porch.", 103),
        ("The cats sat on the warm porch.", 102),
        ("The quick brown fox jumps over the lazy dog and then runs far to the woods.", 52),
        ("The quick brown fox jumps over the lazy dog and then runs far into the woods, where no one has seen it since that summer.", 0),
    ];
    for (text, extra) in lines {
        assert_eq!(short_fix_extra_frames(text.len()), extra, "{text:?} is {} bytes", text.len());
        let a = synth.synthesize(&v, text, &off, &mut |_| {}).unwrap();
        let b = synth.synthesize(&v, text, &on, &mut |_| {}).unwrap();
        assert_eq!((a.chunks.len(), b.chunks.len()), (1, 1));
        assert_eq!(b.chunks[0].short_fix_frames, extra, "{text:?}");
        assert_eq!(b.chunks[0].frames, a.chunks[0].frames + extra, "{text:?}");
        assert_eq!(b.chunks[0].generated_frames, a.chunks[0].generated_frames + extra);
        assert_eq!(b.mel.len(), a.mel.len() + extra * 100, "the generated mel is that much longer");
        assert_eq!(b.samples.len(), a.samples.len() + extra * 256, "and the wave");
        if extra == 0 {
            // Nothing to add, nothing to split: the same noise, the same wave.
            assert!(a.samples == b.samples, "{text:?}: short_fix changed a line it has no rule for");
        }
    }
    // A total fixed by the user is left alone.
    let fixed = on.clone().with_fix_duration(Some(6.0));
    let c = synth.synthesize(&v, "Hi there.", &fixed, &mut |_| {}).unwrap();
    assert_eq!(c.chunks[0].short_fix_frames, 0);
    assert_eq!(c.chunks[0].frames, (6.0f64 * 24_000.0 / 256.0) as usize);
}

#[test]
fn on_a_one_word_opening_is_a_chunk_of_its_own_everywhere() {
    let synth = synthesizer();
    let v = voice();
    let on = SynthOptions::default().with_nfe(1).with_seed(Some(3)).with_short_fix(true);
    let want = ["Juuri.", "Seuraavaksi ne tuovat kahvia ja pullaa pöytään."];
    let mut started = Vec::new();
    let audio = synth
        .synthesize(&v, OPENING, &on, &mut |p| {
            if let Progress::Chunk { text, total, .. } = p {
                started.push((text.to_string(), total));
            }
        })
        .unwrap();
    let texts: Vec<&str> = audio.chunks.iter().map(|c| c.text.as_str()).collect();
    assert_eq!(texts, want);
    assert_eq!(started, want.iter().map(|t| (t.to_string(), 2)).collect::<Vec<_>>(), "progress names the same chunks");
    // Each chunk has its own estimate, by its own bytes (the rest is 50 bytes: 1100·70/90 ms = 80.2 frames → 80).
    for c in &audio.chunks {
        let extra = short_fix_extra_frames(c.text.len());
        assert_eq!(c.short_fix_frames, extra);
        assert_eq!(c.frames, reference_frames(&synth, &v, &c.text, extra), "{:?}", c.text);
    }
    assert_eq!(audio.chunks[1].short_fix_frames, 80);

    // Streaming: the same chunks and the same samples.
    let mut streamed = Vec::new();
    let (_, reports) =
        synth.synthesize_streaming(&v, OPENING, &on, &mut |_| {}, &mut |s| streamed.extend(s.iter().map(|&x| x as f32))).unwrap();
    assert_eq!(reports.iter().map(|c| c.text.as_str()).collect::<Vec<_>>(), want);
    assert!(streamed == audio.samples, "streaming equals the whole synthesis");

    // Dialogue: every line under the same rule.
    let d = synth.dialogue(&[(&v, OPENING), (&v, "Kiitos kutsusta. Oli mukavaa.")], &on, &mut |_| {}).unwrap();
    let texts: Vec<&str> = d.chunks.iter().map(|c| c.text.as_str()).collect();
    assert_eq!(texts, [want[0], want[1], "Kiitos kutsusta. Oli mukavaa."], "a two-word opening stays in its line");
}
