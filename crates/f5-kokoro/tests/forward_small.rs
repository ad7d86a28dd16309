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

fn run_case(prefix: &str) -> (HashMap<String, Vec<f32>>, Vec<usize>, Vec<f32>) {
    let dir = fixtures().join("whole_small");
    let idx = index();
    let call = idx["files"][format!("whole_small/{prefix}_pred_dur.npy")]["call"].as_str().expect("call").to_string();
    let seed: u64 = call.split("manual_seed(").nth(1).and_then(|s| s.split(')').next()).and_then(|s| s.parse().ok()).expect("seed");
    let speed: f32 = call.split("speed=").nth(1).and_then(|s| s.split(')').next()).and_then(|s| s.parse().ok()).expect("speed");
    let ids: Vec<u32> = npy(&dir.join(format!("{prefix}_ids.npy"))).data.iter().map(|&v| v as u32).collect();
    let style: Vec<f32> = npy(&dir.join(format!("{prefix}_ref_s.npy"))).data.iter().map(|&v| v as f32).collect();
    let model = Kokoro::open(fixtures().join("models/kokoro-small/kokoro-small.pth"), CpuBackend::new()).expect("open the small model");
    let mut stages: HashMap<String, Vec<f32>> = HashMap::new();
    let mut sink = |name: &str, data: Vec<f32>| {
        stages.insert(name.to_string(), data);
    };
    let out = model.forward(&ids, &style, speed, seed, Trace::to(&mut sink)).expect("forward");
    (stages, out.durations, out.audio)
}

fn check_case(prefix: &str) {
    let dir = fixtures().join("whole_small");
    let (stages, durations, audio) = run_case(prefix);
    let want_dur: Vec<usize> = npy(&dir.join(format!("{prefix}_pred_dur.npy"))).data.iter().map(|&v| v as usize).collect();
    assert_eq!(durations, want_dur, "{prefix}: pred_dur must be exactly the reference's");
    let mut report = Vec::new();
    let mut failures = Vec::new();
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter_map(|f| f.strip_prefix(&format!("{prefix}_"))?.strip_suffix(".npy").map(str::to_string))
        .filter(|s| !matches!(s.as_str(), "ids" | "ref_s" | "pred_dur"))
        .collect();
    names.sort();
    for stage in names {
        let golden = npy(&dir.join(format!("{prefix}_{stage}.npy")));
        let got = if stage == "audio" { Some(&audio) } else { stages.get(&stage) };
        let Some(got) = got else {
            report.push(format!("{stage}: no such stage traced"));
            continue;
        };
        let want = if is_channels_first(&stage) && golden.shape.len() == 3 { channels_last(&golden) } else { golden.data.clone() };
        if got.len() != want.len() {
            failures.push(format!("{stage}: {} values, golden {:?}", got.len(), golden.shape));
            continue;
        }
        let err = rel_l2(got, &want);
        // fp32 against fp32: 1e-5 per stage; the audio 1e-4 (sin of phases of ~1e5 rad
        // amplifies single-ulp differences upstream).
        let tol = if stage == "audio" { 1e-4 } else { 1e-5 };
        report.push(format!("{stage}: rel-L2 {err:.2e}"));
        if !(err <= tol) {
            failures.push(format!("{stage}: rel-L2 {err:.3e} > {tol:e}"));
        }
    }
    eprintln!("{prefix}:\n  {}", report.join("\n  "));
    assert!(failures.is_empty(), "{prefix}: {failures:#?}");
}

#[test]
fn tiny_input_matches_the_reference_at_every_stage() {
    check_case("tiny_heart_s1");
}

#[test]
fn the_510_phoneme_limit_matches_the_reference() {
    check_case("long510_mix_s0.8");
}
