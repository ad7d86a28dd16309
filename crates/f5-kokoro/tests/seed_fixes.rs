//! The goldens that catch the seed's fixes and the rounding rule, each with the wrong variant
//! shown to fail the same check.

mod common;

use std::collections::HashMap;

use common::{channels_last, fixtures, npy, rel_l2};
use f5_gpukit::{Backend, CpuBackend};
use f5_kokoro::{frames_from_logits, Kokoro, Trace};
use f5_nn::{BiLstm, Weights};

#[test]
fn durations_round_half_to_even_as_torch_round() {
    let g = fixtures().join("goldens");
    let logits: Vec<f32> = npy(&g.join("round_logits.npy")).data.iter().map(|&v| v as f32).collect();
    for (speed, file) in [(1.0, "round_speed1_pred_dur.npy"), (2.0, "round_speed2_pred_dur.npy")] {
        let want: Vec<usize> = npy(&g.join(file)).data.iter().map(|&v| v as usize).collect();
        let (raw, frames) = frames_from_logits(&logits, 50, speed);
        assert_eq!(frames, want, "speed {speed}");
        // Half away from zero (f32::round) differs on the ties: the golden can tell.
        let away: Vec<usize> = raw.iter().map(|&v| v.round().max(1.0) as usize).collect();
        assert_ne!(away, want, "speed {speed}: the golden must hold a tie");
    }
}

/// Fix 2: a bidirectional LSTM over a padded batch is exact per item only when each item's
/// reverse pass starts at its own last step. The reference's pack_padded_sequence golden, through
/// the layer the model uses.
#[test]
fn padded_batch_bilstm_matches_pack_padded_sequence() {
    let g = fixtures().join("goldens");
    let kit = CpuBackend::new();
    let mut w = Weights::open(fixtures().join("modules/text_encoder.safetensors")).unwrap();
    let lstm = BiLstm::load(&mut w.root(), &kit, "lstm", 32, 16).unwrap();
    let lengths: Vec<usize> = npy(&g.join("text_encoder_padded_lengths.npy")).data.iter().map(|&v| v as usize).collect();
    // The LSTM's input: cnn[2]'s output with the padding zeroed, as TextEncoder masks it.
    let cnn = npy(&g.join("text_encoder_padded_cnn2.npy"));
    let (b, c, n) = (cnn.shape[0], cnn.shape[1], cnn.shape[2]);
    let mut x = vec![0.0f32; b * n * c];
    for item in 0..b {
        for t in 0..lengths[item] {
            for ch in 0..c {
                x[(item * n + t) * c + ch] = cnn.data[(item * c + ch) * n + t] as f32;
            }
        }
    }
    let golden = npy(&g.join("text_encoder_padded_out.npy"));
    let want: Vec<f64> = (0..b)
        .flat_map(|item| {
            let one = common::Golden { shape: vec![1, c, n], data: golden.data[item * c * n..(item + 1) * c * n].to_vec() };
            channels_last(&one)
        })
        .collect();
    let run = |lens: &[usize]| -> Vec<f32> {
        let mut out = kit.alloc(b * n * c).unwrap();
        lstm.apply(&kit, &kit.upload(&x).unwrap(), b, n, lens, &mut out).unwrap();
        kit.download(&out).unwrap()
    };
    let got = run(&lengths);
    let err = rel_l2(&got, &want);
    assert!(err < 1e-5, "padded batch vs pack_padded_sequence: rel-L2 {err:e}");
    // The naive variant: every item run over the whole padded buffer.
    let naive = run(&vec![n; b]);
    let short = lengths.iter().position(|&l| l < n).expect("a shorter item");
    let span = short * n * c..(short * n + lengths[short]) * c;
    let err = rel_l2(&naive[span.clone()], &want[span]);
    assert!(err > 1e-2, "a reverse pass starting on the padding must miss the golden (rel-L2 {err:e})");
}

/// Fix 1: ALBERT keeps its 512 positions. The T = 512 golden's first rows change when the input
/// is cut to a 64-position window (what a 64-token cap does), so the golden catches such a cap.
#[test]
fn a_64_position_cap_fails_the_t512_golden() {
    let dir = fixtures().join("whole_small");
    let ids: Vec<u32> = npy(&dir.join("long510_mix_s0.8_ids.npy")).data.iter().map(|&v| v as u32).collect();
    assert_eq!(ids.len(), 512);
    let style: Vec<f32> = npy(&dir.join("long510_mix_s0.8_ref_s.npy")).data.iter().map(|&v| v as f32).collect();
    let golden = npy(&dir.join("long510_mix_s0.8_bert.npy"));
    let hidden = golden.shape[2];
    let model = Kokoro::open(fixtures().join("models/kokoro-small/kokoro-small.pth"), CpuBackend::new()).unwrap();
    let bert_of = |ids: &[u32]| -> Vec<f32> {
        let mut stages: HashMap<String, Vec<f32>> = HashMap::new();
        let mut sink = |name: &str, data: Vec<f32>| {
            stages.insert(name.to_string(), data);
        };
        model.align(ids, &style, 0.8, &mut Trace::to(&mut sink)).unwrap();
        stages.remove("bert").unwrap()
    };
    let full = bert_of(&ids);
    assert!(rel_l2(&full, &golden.data) < 1e-5);
    let mut cut = ids[..63].to_vec();
    cut.push(0);
    let capped = bert_of(&cut);
    let rows = 62 * hidden;
    let err = rel_l2(&capped[hidden..hidden + rows], &golden.data[hidden..hidden + rows]);
    assert!(err > 1e-2, "the first 62 positions must differ under a 64-position cap (rel-L2 {err:e})");
}
