//! English against misaki 0.9.4 + kokoro's KPipeline on the corpus of fixtures/g2p.

mod common;

use common::{load_json, str_list};
use f5_g2p::{espeak_available, G2p, Language};

/// The share of corpus lines whose chunks must match misaki exactly: all of them (measured
/// 340/340 with espeak-ng 1.51 here); any drop means a rule regressed.
const MIN_EXACT_SHARE: f64 = 1.0;
/// Without espeak-ng: the share of lines that need no fallback word (measured 0.918: 312/340).
const MIN_EXACT_SHARE_WITHOUT_ESPEAK: f64 = 0.9;

type Word = (String, String, String);

/// The tokens kokoro keeps per chunk as (text, phonemes, following space), from the golden.
fn golden_words(case: &serde_json::Value) -> Vec<Word> {
    let field = |t: &serde_json::Value, k: &str| t[k].as_str().unwrap_or_default().to_string();
    case["chunks"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|c| c["tokens"].as_array().cloned().unwrap_or_default())
        .map(|t| (field(&t, "text"), field(&t, "phonemes"), field(&t, "whitespace")))
        .collect()
}

#[test]
fn english_lines_match_misaki() {
    // Without espeak-ng the lexicon path is still checked: words that need the fallback come
    // out empty, so only the lines without such words can match.
    let with_espeak = espeak_available();
    if !with_espeak {
        println!("espeak-ng not found: checking the lexicon path only (lines with fallback words will differ)");
    }
    let golden = load_json("goldens.json");
    let g2p =
        if with_espeak { G2p::new(Language::EnUs).expect("en-us front end") } else { G2p::english(false, None).expect("en-us front end") };
    let min_share = if with_espeak { MIN_EXACT_SHARE } else { MIN_EXACT_SHARE_WITHOUT_ESPEAK };
    let lines = golden["en"].as_array().expect("en lines");
    let (mut exact, mut exact_bundled) = (0usize, 0usize);
    let mut diffs = Vec::new();
    let (mut words, mut word_diffs) = (0usize, Vec::<String>::new());
    for case in lines {
        let text = case["text"].as_str().unwrap_or_default();
        let want: Vec<String> =
            case["chunks"].as_array().into_iter().flatten().filter_map(|c| c["phonemes"].as_str().map(str::to_string)).collect();
        let want_bundled = str_list(&case["chunks_bundled"]);
        let chunks = g2p.chunks(text).expect("phonemize");
        // word by word
        let want_words = golden_words(case);
        let got_words: Vec<Word> = chunks
            .iter()
            .flat_map(|c| c.tokens.clone().unwrap_or_default())
            .map(|t| (t.text, t.phonemes.unwrap_or_default(), t.whitespace))
            .collect();
        words += want_words.len();
        if got_words.len() != want_words.len() {
            word_diffs.push(format!("  {text}: {} tokens, misaki {}", got_words.len(), want_words.len()));
        } else {
            for (g, w) in got_words.iter().zip(&want_words) {
                if g != w {
                    word_diffs.push(format!("  {text}: {g:?} vs misaki {w:?}"));
                }
            }
        }
        let got: Vec<String> = chunks.into_iter().map(|c| c.phonemes).collect();
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
    let bundled = golden["espeak_version_bundled"].as_str().unwrap_or("?");
    println!(
        "English: {exact}/{} lines exact ({:.1}%); {exact_bundled} exact against espeak-ng {bundled} (kokoro's bundled library)",
        lines.len(),
        100.0 * share,
    );
    for d in &diffs {
        println!("{d}");
    }
    println!("words: {}/{words} tokens equal in text, phonemes and spacing", words - word_diffs.len());
    for d in &word_diffs {
        println!("{d}");
    }
    assert!(share >= min_share, "exact share {share:.3} fell below {min_share}");
    // words may differ only inside lines that already differ (an espeak-ng version gap)
    assert!(word_diffs.len() <= diffs.len() * 20, "{} word-level differences", word_diffs.len());
}
