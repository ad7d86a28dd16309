//! Random held-out lines (made by make_goldens.py from misaki's lexicons and the espeak corpora,
//! not written for the rules) against the reference: every line must match.

mod common;

use common::{espeak_or_skip, load_json, str_list};
use f5_g2p::{G2p, Language};

fn check(g2p: &G2p, cases: &serde_json::Value, label: &str) -> Vec<String> {
    let cases = cases.as_array().unwrap_or_else(|| panic!("{label}: no cases"));
    assert!(cases.len() >= 100, "{label}: too few cases");
    let mut diffs = Vec::new();
    for case in cases {
        let text = case["text"].as_str().unwrap_or_default();
        let got: Vec<String> = g2p.chunks(text).expect("phonemize").into_iter().map(|c| c.phonemes).collect();
        let want = str_list(&case["phonemes"]);
        let bundled = str_list(&case["phonemes_bundled"]);
        if got != want && (bundled.is_empty() || got != bundled) {
            diffs.push(format!("  [{label}] {text}\n    reference: {want:?}\n    f5-g2p:    {got:?}"));
        }
    }
    println!("{label}: {}/{} exact", cases.len() - diffs.len(), cases.len());
    diffs
}

#[test]
fn heldout_lines_match_reference() {
    if !espeak_or_skip("heldout_lines_match_reference") {
        return;
    }
    let golden = load_json("goldens.json");
    let mut diffs = Vec::new();
    diffs.extend(check(&G2p::new(Language::EnUs).expect("en-us"), &golden["heldout_en_us"], "en-us"));
    diffs.extend(check(&G2p::new(Language::EnGb).expect("en-gb"), &golden["heldout_en_gb"], "en-gb"));
    for (name, lang) in [("es", Language::Es), ("fr", Language::Fr), ("hi", Language::Hi), ("it", Language::It), ("pt-br", Language::PtBr)]
    {
        let g2p = G2p::new(lang).expect("front end");
        diffs.extend(check(&g2p, &golden["espeak"][format!("heldout_{name}")], name));
    }
    for d in &diffs {
        println!("{d}");
    }
    assert!(diffs.is_empty(), "{} held-out lines differ", diffs.len());
}
