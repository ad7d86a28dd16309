//! English against misaki 0.9.4 + kokoro's KPipeline on the corpus of fixtures/g2p.

mod common;

use common::{espeak_or_skip, load_json, str_list};
use f5_g2p::{G2p, Language};

/// The share of corpus lines whose chunks must match misaki exactly: all of them (measured
/// 340/340 with espeak-ng 1.51 here); any drop means a rule regressed.
const MIN_EXACT_SHARE: f64 = 1.0;

#[test]
fn english_lines_match_misaki() {
    if !espeak_or_skip("english_lines_match_misaki") {
        return;
    }
    let golden = load_json("goldens.json");
    let g2p = G2p::new(Language::EnUs).expect("en-us front end");
    let lines = golden["en"].as_array().expect("en lines");
    let mut exact = 0usize;
    let mut exact_bundled = 0usize;
    let mut diffs = Vec::new();
    for case in lines {
        let text = case["text"].as_str().unwrap_or_default();
        let want: Vec<String> = case["chunks"]
            .as_array()
            .map(|a| a.iter().filter_map(|c| c["phonemes"].as_str().map(str::to_string)).collect())
            .unwrap_or_default();
        let want_bundled = str_list(&case["chunks_bundled"]);
        let got: Vec<String> = g2p.chunks(text).expect("phonemize").into_iter().map(|c| c.phonemes).collect();
        if got == want || got == want_bundled {
            exact += 1;
        } else {
            diffs.push(format!("  {text}\n    misaki: {want:?}\n    f5-g2p: {got:?}"));
        }
        if got == want_bundled {
            exact_bundled += 1;
        }
    }
    let share = exact as f64 / lines.len() as f64;
    println!(
        "English: {exact}/{} lines exact ({:.1}%); {exact_bundled} exact against espeak-ng {} (kokoro's bundled library)",
        lines.len(),
        100.0 * share,
        golden["espeak_version_bundled"].as_str().unwrap_or("?")
    );
    for d in &diffs {
        println!("{d}");
    }
    assert!(share >= MIN_EXACT_SHARE, "exact share {share:.3} fell below {MIN_EXACT_SHARE}");
}
