//! The whole forward of a small Kokoro (random weights in the release layout, sizes from its
//! config.json) against the reference `KModel.forward_with_tokens`, stage by stage.

mod common;

use std::collections::HashMap;

use common::{channels_last, fixtures, index, npy, rel_l2};
use f5_gpukit::CpuBackend;
use f5_kokoro::{Kokoro, Trace};

/// Stages whose goldens are in the reference's channels-first conv layout `[1, C, T]`.
fn is_channels_first(stage: &str) -> bool {
    matches!(stage, "t_en" | "asr" | "F0" | "N")
        || stage.starts_with("dec_")
        || (stage.starts_with("gen_") && !matches!(stage, "gen_sine_waves" | "gen_source_noise" | "gen_sine_uv" | "gen_har_source"))
}

struct Case {
    ids: Vec<u32>,
    style: Vec<f32>,
    speed: f32,
    seed: u64,
}

fn case(prefix: &str) -> Case {
    let dir = fixtures().join("whole_small");
    let idx = index();
    let call = idx["files"][format!("whole_small/{prefix}_pred_dur.npy")]["call"].as_str().expect("call").to_string();
    let seed: u64 = call.split("manual_seed(").nth(1).and_then(|s| s.split(')').next()).and_then(|s| s.parse().ok()).expect("seed");
    let speed: f32 = call.split("speed=").nth(1).and_then(|s| s.split(')').next()).and_then(|s| s.parse().ok()).expect("speed");
    let ids: Vec<u32> = npy(&dir.join(format!("{prefix}_ids.npy"))).data.iter().map(|&v| v as u32).collect();
    let style: Vec<f32> = npy(&dir.join(format!("{prefix}_ref_s.npy"))).data.iter().map(|&v| v as f32).collect();
    Case { ids, style, speed, seed }
}

fn model() -> Kokoro<CpuBackend> {
    Kokoro::open(fixtures().join("models/kokoro-small/kokoro-small.pth"), CpuBackend::new()).expect("open the small model")
}

/// Compares every golden of `prefix` whose name `select` accepts with the traced stage.
fn compare(prefix: &str, stages: &HashMap<String, Vec<f32>>, select: impl Fn(&str) -> bool) {
    let dir = fixtures().join("whole_small");
    let mut report = Vec::new();
    let mut failures = Vec::new();
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter_map(|f| f.strip_prefix(&format!("{prefix}_"))?.strip_suffix(".npy").map(str::to_string))
        .filter(|s| !matches!(s.as_str(), "ids" | "ref_s" | "pred_dur") && select(s))
        .collect();
    names.sort();
    assert!(!names.is_empty(), "{prefix}: no goldens selected");
    for stage in names {
        let golden = npy(&dir.join(format!("{prefix}_{stage}.npy")));
        let Some(got) = stages.get(&stage) else {
            failures.push(format!("{stage}: not traced"));
            continue;
        };
        let want = if is_channels_first(&stage) && golden.shape.len() == 3 { channels_last(&golden) } else { golden.data.clone() };
        if got.len() != want.len() {
            failures.push(format!("{stage}: {} values, golden {:?}", got.len(), golden.shape));
            continue;
        }
        let err = rel_l2(got, &want);
        // fp32 against fp32: 1e-5 per stage; the audio 1e-4 (sin of phases of ~1e4 rad
        // amplifies single-ulp differences upstream).
        let tol = if stage == "audio" { 1e-4 } else { 1e-5 };
        report.push(format!("{stage}: rel-L2 {err:.2e}"));
        if err.is_nan() || err > tol {
            failures.push(format!("{stage}: rel-L2 {err:.3e} > {tol:e}"));
        }
    }
    eprintln!("{prefix}:\n  {}", report.join("\n  "));
    assert!(failures.is_empty(), "{prefix}: {failures:#?}");
}

/// The first half (everything up to the decoder's inputs) from the tokens.
fn check_align(prefix: &str) {
    let c = case(prefix);
    let m = model();
    let mut stages: HashMap<String, Vec<f32>> = HashMap::new();
    let mut sink = |name: &str, data: Vec<f32>| {
        stages.insert(name.to_string(), data);
    };
    let aligned = m.align(&c.ids, &c.style, c.speed, &mut Trace::to(&mut sink)).expect("align");
    let want: Vec<usize> = npy(&fixtures().join(format!("whole_small/{prefix}_pred_dur.npy"))).data.iter().map(|&v| v as usize).collect();
    assert_eq!(aligned.durations, want, "{prefix}: pred_dur must be exactly the reference's");
    compare(prefix, &stages, |s| !s.starts_with("dec_") && !s.starts_with("gen_") && s != "audio");
}

/// The second half fed the reference's own F0, N and aligned features: the source turns F0
/// into phases of thousands of radians, where our F0's last-bit differences from the
/// reference's (1e-6) would show as 1e-4 — so the decoder is held to its own arithmetic. The
/// source's spectrum is checked on its own; the generator after it is then fed the reference's
/// spectrum, because the first and last STFT frames are exactly real and the sign of the
/// reference FFT's rounding noise puts some of their phases at +π or −π (a fact of the input,
/// not of either implementation).
fn check_decode(prefix: &str) {
    let dir = fixtures().join("whole_small");
    let c = case(prefix);
    let m = model();
    let host = |name: &str| -> Vec<f32> {
        let g = npy(&dir.join(format!("{prefix}_{name}.npy")));
        let v = if is_channels_first(name) && g.shape.len() == 3 { channels_last(&g) } else { g.data };
        v.iter().map(|&x| x as f32).collect()
    };
    let durations: Vec<usize> = npy(&dir.join(format!("{prefix}_pred_dur.npy"))).data.iter().map(|&v| v as usize).collect();
    let aligned = m.aligned_from_host(durations, &host("F0"), &host("N"), &host("asr")).expect("aligned");
    let mut stages: HashMap<String, Vec<f32>> = HashMap::new();
    let mut sink = |name: &str, data: Vec<f32>| {
        stages.insert(name.to_string(), data);
    };
    m.decode(&aligned, &c.style, c.seed, &mut Trace::to(&mut sink)).expect("decode");
    compare(prefix, &stages, |s| s.starts_with("dec_") || matches!(s, "gen_har_source" | "gen_har_mag"));
    if dir.join(format!("{prefix}_gen_har_phase.npy")).exists() {
        let want = host("gen_har_phase");
        let got = &stages["gen_har_phase"];
        let mag = host("gen_har_mag");
        let bins = 11;
        let frames = want.len() / bins;
        for (i, (&g, &w)) in got.iter().zip(&want).enumerate() {
            let d = (g - w).abs();
            let branch_cut = (g.abs() - std::f32::consts::PI).abs() < 1e-4 && (w.abs() - std::f32::consts::PI).abs() < 1e-4;
            let edge = i / bins == 0 || i / bins == frames - 1;
            // Phase is meaningful where the magnitude is not at rounding level.
            assert!(d < 1e-3 || (branch_cut && edge) || mag[i] < 1e-6, "{prefix}: har phase {i}: got {g}, want {w} (|S| {})", mag[i]);
        }
        // With the reference's spectrum, everything after the source.
        let spectrum = f5_kokoro::SourceSpectrum { magnitude: mag, phase: want };
        let mut stages: HashMap<String, Vec<f32>> = HashMap::new();
        let mut sink = |name: &str, data: Vec<f32>| {
            stages.insert(name.to_string(), data);
        };
        let audio = m.decode_with_spectrum(&aligned, &c.style, &spectrum, &mut Trace::to(&mut sink)).expect("decode");
        stages.insert("audio".into(), audio);
        compare(prefix, &stages, |s| {
            (s.starts_with("gen_") && !matches!(s, "gen_har_source" | "gen_har_mag" | "gen_har_phase" | "gen_conv_post")) || s == "audio"
        });
    }
}

#[test]
fn tiny_input_first_half_matches_the_reference() {
    check_align("tiny_heart_s1");
}

#[test]
fn tiny_input_second_half_matches_the_reference() {
    check_decode("tiny_heart_s1");
}

#[test]
fn the_510_phoneme_limit_matches_the_reference() {
    check_align("long510_mix_s0.8");
}

#[test]
fn the_510_phoneme_decoder_matches_the_reference() {
    check_decode("long510_mix_s0.8");
}
