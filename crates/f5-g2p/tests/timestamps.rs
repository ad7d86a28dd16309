//! Word timestamps against kokoro's `KPipeline.join_timestamps` on synthetic durations.

mod common;

use common::load_json;
use f5_g2p::{join_timestamps, Token};

fn tokens_of(case: &serde_json::Value) -> Vec<Token> {
    case["tokens"]
        .as_array()
        .expect("tokens")
        .iter()
        .map(|t| {
            Token::with_phonemes(
                t["text"].as_str().unwrap_or_default(),
                t["whitespace"].as_str().unwrap_or_default(),
                t["phonemes"].as_str().map(str::to_string),
            )
        })
        .collect()
}

#[test]
fn timestamps_match_join_timestamps() {
    let cases = load_json("timestamps.json");
    let cases = cases.as_array().expect("cases");
    assert!(cases.len() >= 10);
    let mut with_missing = 0;
    for case in cases {
        let dur: Vec<i64> = case["pred_dur"].as_array().expect("pred_dur").iter().filter_map(|d| d.as_i64()).collect();
        let mut tokens = tokens_of(case);
        join_timestamps(&mut tokens, &dur);
        for (t, want) in tokens.iter().zip(case["tokens"].as_array().expect("tokens")) {
            // the reference divides integers by 80, so the same division gives the same f64
            assert_eq!(t.start_ts, want["start_ts"].as_f64(), "start of {:?}", t.text);
            assert_eq!(t.end_ts, want["end_ts"].as_f64(), "end of {:?}", t.text);
        }
        if tokens.iter().any(|t| t.phonemes.is_some() && t.start_ts.is_none()) {
            with_missing += 1;
        }
    }
    // the short-duration cases leave later words without times, as the reference does
    assert!(with_missing > 0);
}

#[test]
fn bos_offset_is_three_frames() {
    // BOS 5 frames → first word starts 2 frames = 4 half-frames = 0.05 s in
    let mut tokens = vec![Token::with_phonemes("hi", "", Some("hˈI".to_string()))];
    join_timestamps(&mut tokens, &[5, 1, 2, 3, 1]);
    assert_eq!(tokens[0].start_ts, Some(4.0 / 80.0));
    assert_eq!(tokens[0].end_ts, Some((4.0 + 2.0 * 6.0) / 80.0));
}
