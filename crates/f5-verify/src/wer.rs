//! Word errors between what was asked for and what the transcriber heard.

use crate::normalize::{segments, Language, Segment};

/// A word may equal the concatenation of up to this many consecutive words on the other side
/// at no cost: the speaker said "lepakon kosto", the transcriber wrote "lepakonkosto" (or the
/// reverse), and nothing was missed. Four covers compounds in Finnish and German without letting
/// unrelated runs of short words line up by accident.
pub const MAX_MERGE: usize = 4;

/// The result of comparing a transcript with its reference text.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Score {
    /// Words in the normalised reference (numbers in the spelling the transcript used).
    pub words: usize,
    /// Word edits (substitutions, deletions, insertions) after free merges.
    pub errors: usize,
    /// `errors / words`; for an empty reference 0.0 when the transcript is empty too, else 1.0
    /// (see [`wer_of`]).
    pub wer: f64,
}

/// Word error rate from counts. An empty reference has no rate of its own: we call it 0.0 when
/// nothing was heard and 1.0 when something was, rather than infinity, so that a threshold
/// comparison and a sum over chunks stay finite while any `max_wer < 1` still rejects words
/// spoken where none were asked for.
pub fn wer_of(errors: usize, words: usize) -> f64 {
    match (errors, words) {
        (0, _) => 0.0,
        (_, 0) => 1.0,
        (e, w) => e as f64 / w as f64,
    }
}

/// Whether `whole` is exactly the concatenation of `parts`, without building the concatenation.
fn is_concatenation<S: AsRef<str>>(whole: &str, parts: &[S]) -> bool {
    let total: usize = parts.iter().map(|p| p.as_ref().len()).sum();
    if total != whole.len() {
        return false;
    }
    let mut rest = whole;
    for part in parts {
        match rest.strip_prefix(part.as_ref()) {
            Some(r) => rest = r,
            None => return false,
        }
    }
    rest.is_empty()
}

/// Edit distance over words, where a word on either side may match the concatenation of 2 to
/// [`MAX_MERGE`] consecutive words on the other side at no cost.
///
/// Symmetric in its arguments. Time O(n·m), memory O(m) (rows are kept only as far back as a
/// merge can reach).
///
/// ```
/// use f5_verify::word_errors;
/// assert_eq!(word_errors(&["lepakon", "kosto"], &["lepakonkosto"]), 0);
/// assert_eq!(word_errors(&["a", "b", "c"], &["a", "x"]), 2);
/// ```
pub fn word_errors<R: AsRef<str>, H: AsRef<str>>(reference: &[R], hypothesis: &[H]) -> usize {
    let m = hypothesis.len();
    // rows[k] holds row i-k of the table; row i is built in `current`.
    let mut rows: Vec<Vec<usize>> = (0..MAX_MERGE).map(|_| vec![0; m + 1]).collect();
    if let Some(first) = rows.first_mut() {
        for (j, cell) in first.iter_mut().enumerate() {
            *cell = j;
        }
    }
    let mut current = vec![0usize; m + 1];
    for i in 1..=reference.len() {
        let r_word = reference[i - 1].as_ref();
        current[0] = i;
        for j in 1..=m {
            let h_word = hypothesis[j - 1].as_ref();
            let above = &rows[0];
            let substitution = above[j - 1] + usize::from(r_word != h_word);
            let mut best = substitution.min(above[j] + 1).min(current[j - 1] + 1);
            // One reference word heard as k hypothesis words.
            for k in 2..=MAX_MERGE.min(j) {
                if is_concatenation(r_word, &hypothesis[j - k..j]) {
                    best = best.min(above[j - k]);
                }
            }
            // k reference words heard as one hypothesis word; row i-k is rows[k-1].
            for k in 2..=MAX_MERGE.min(i) {
                if is_concatenation(h_word, &reference[i - k..i]) {
                    best = best.min(rows[k - 1][j - 1]);
                }
            }
            current[j] = best;
        }
        rows.rotate_right(1);
        std::mem::swap(&mut rows[0], &mut current);
    }
    rows[0][m]
}

/// Whether `needle` occurs as a contiguous run in `haystack`.
fn contains_run(haystack: &[&str], needle: &[String]) -> bool {
    !needle.is_empty() && haystack.windows(needle.len()).any(|w| w.iter().zip(needle).all(|(a, b)| *a == b.as_str()))
}

/// Words of one side, each number in the first spelling that the other side contains as a run
/// of words (else its canonical spelling).
fn resolve(own: &[Segment], other_canonical: &[&str]) -> Vec<String> {
    let mut out = Vec::new();
    for segment in own {
        match segment {
            Segment::Word(w) => out.push(w.clone()),
            Segment::Number(alternatives) => {
                let chosen = alternatives.iter().find(|alt| contains_run(other_canonical, alt)).or(alternatives.first());
                out.extend(chosen.into_iter().flatten().cloned());
            }
        }
    }
    out
}

/// Scores a transcript against the text it should say. Both are normalised with `language`;
/// a number matches whichever of its spellings the other side used ("1999" against
/// "nineteen ninety nine" is no error).
///
/// ```
/// use f5_verify::{score, English};
/// let s = score("I was born in 1999.", "i was born in nineteen ninety-nine", &English);
/// assert_eq!((s.words, s.errors), (7, 0));
/// ```
pub fn score(reference: &str, hypothesis: &str, language: &dyn Language) -> Score {
    let reference = segments(reference, language);
    let hypothesis = segments(hypothesis, language);
    let reference_canonical: Vec<&str> = reference.iter().flat_map(Segment::canonical).collect();
    let hypothesis_canonical: Vec<&str> = hypothesis.iter().flat_map(Segment::canonical).collect();
    let reference_words = resolve(&reference, &hypothesis_canonical);
    let hypothesis_words = resolve(&hypothesis, &reference_canonical);
    let errors = word_errors(&reference_words, &hypothesis_words);
    Score { words: reference_words.len(), errors, wer: wer_of(errors, reference_words.len()) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::normalize::{English, PassThrough};
    use proptest::prelude::*;

    fn errors(r: &str, h: &str) -> usize {
        let r: Vec<&str> = r.split_whitespace().collect();
        let h: Vec<&str> = h.split_whitespace().collect();
        word_errors(&r, &h)
    }

    /// Textbook Levenshtein over words, the reference for the no-merge case.
    fn levenshtein(r: &[String], h: &[String]) -> usize {
        let mut table = vec![vec![0usize; h.len() + 1]; r.len() + 1];
        for (i, row) in table.iter_mut().enumerate() {
            row[0] = i;
        }
        for (j, cell) in table[0].iter_mut().enumerate() {
            *cell = j;
        }
        for i in 1..=r.len() {
            for j in 1..=h.len() {
                let sub = table[i - 1][j - 1] + usize::from(r[i - 1] != h[j - 1]);
                table[i][j] = sub.min(table[i - 1][j] + 1).min(table[i][j - 1] + 1);
            }
        }
        table[r.len()][h.len()]
    }

    #[test]
    fn merge_rule_works_in_both_directions() {
        assert_eq!(errors("lepakon kosto", "lepakonkosto"), 0);
        assert_eq!(errors("lepakonkosto", "lepakon kosto"), 0);
        assert_eq!(errors("a b c d", "abcd"), 0);
        assert_eq!(errors("abcd", "a b c d"), 0);
        // Five parts exceed the merge limit: one substitution plus four deletions.
        assert_eq!(errors("abcde", "a b c d e"), 5);
        // A merge must use consecutive words in order.
        assert_eq!(errors("lepakon kosto", "kostolepakon"), 2);
        assert_eq!(errors("the lepakon kosto came", "the lepakonkosto came"), 0);
        assert_eq!(errors("the lepakon kosto came", "a lepakonkosto"), 2);
    }

    #[test]
    fn plain_edits() {
        assert_eq!(errors("a b c", "a b c"), 0);
        assert_eq!(errors("a b c", "a x c"), 1);
        assert_eq!(errors("a b c", "a c"), 1);
        assert_eq!(errors("a b c", "a b c d"), 1);
        assert_eq!(errors("a b c", ""), 3);
        assert_eq!(errors("", "a b"), 2);
        assert_eq!(errors("", ""), 0);
    }

    #[test]
    fn numbers_match_digits_and_any_spelling() {
        let s = score("We have 21 apples.", "we have twenty-one apples", &English);
        assert_eq!((s.words, s.errors), (5, 0));
        let s = score("we have twenty one apples", "We have 21 apples", &English);
        assert_eq!((s.words, s.errors), (5, 0));
        // Year reading on either side.
        assert_eq!(score("In 1999 it rained", "in nineteen ninety nine it rained", &English).errors, 0);
        assert_eq!(score("in nineteen ninety nine it rained", "In 1999 it rained", &English).errors, 0);
        assert_eq!(score("in 1999", "in one thousand nine hundred and ninety nine", &English).errors, 0);
        assert_eq!(score("in 1905", "in nineteen oh five", &English).errors, 0);
        // Digits on both sides compare as the canonical spelling.
        let s = score("in 1999", "In 1999.", &English);
        assert_eq!((s.words, s.errors), (7, 0));
        // A wrong number is still wrong: "twenty two" against "twenty one" is one substitution.
        assert_eq!(score("21 apples", "22 apples", &English).errors, 1);
        // The 21st against "twenty first".
        assert_eq!(score("the 21st", "the twenty-first", &English).errors, 0);
    }

    #[test]
    fn punctuation_and_case_do_not_count() {
        let s = score("Hello, world! How are you?", "hello world how are you", &English);
        assert_eq!((s.words, s.errors, s.wer), (5, 0, 0.0));
        assert_eq!(score("It's “quoted” — fine…", "its quoted fine", &English).errors, 0);
        assert_eq!(score("你好，世界。", "你好世界", &English).errors, 0);
    }

    #[test]
    fn cjk_counts_characters() {
        let s = score("你好世界", "你好世间", &English);
        assert_eq!((s.words, s.errors), (4, 1));
        assert_eq!(s.wer, 0.25);
        let s = score("こんにちは", "こんばんは", &English);
        assert_eq!((s.words, s.errors), (5, 2));
    }

    #[test]
    fn empty_sides() {
        let s = score("three little words", "", &English);
        assert_eq!((s.words, s.errors, s.wer), (3, 3, 1.0));
        let s = score("", "", &English);
        assert_eq!((s.words, s.errors, s.wer), (0, 0, 0.0));
        let s = score("...", "uh huh", &English);
        assert_eq!((s.words, s.errors, s.wer), (0, 2, 1.0));
        let s = score("", "[BLANK_AUDIO]", &English);
        assert_eq!((s.words, s.errors, s.wer), (0, 0, 0.0));
        // Silence where words were asked for is all deletions.
        let s = score("say this", "[BLANK_AUDIO]", &English);
        assert_eq!((s.words, s.errors, s.wer), (2, 2, 1.0));
    }

    #[test]
    fn wer_of_counts() {
        assert_eq!(wer_of(0, 0), 0.0);
        assert_eq!(wer_of(3, 0), 1.0);
        assert_eq!(wer_of(1, 4), 0.25);
        assert_eq!(wer_of(6, 3), 2.0);
    }

    #[test]
    fn pass_through_compares_digits_as_words() {
        assert_eq!(score("Er kam um 21 Uhr", "er kam um 21 uhr", &PassThrough).errors, 0);
        assert_eq!(score("Er kam um 21 Uhr", "er kam um 22 uhr", &PassThrough).errors, 1);
    }

    /// Single letters never concatenate into another single letter, so no merge can apply.
    fn no_merge_words() -> impl Strategy<Value = Vec<String>> {
        prop::collection::vec(prop::sample::select(vec!["a", "b", "c", "d"]).prop_map(str::to_string), 0..12)
    }

    /// Short words over two letters: merges happen often.
    fn mergeable_words() -> impl Strategy<Value = Vec<String>> {
        prop::collection::vec("[ab]{1,3}", 0..10)
    }

    proptest! {
        #[test]
        fn without_merges_it_is_levenshtein(r in no_merge_words(), h in no_merge_words()) {
            prop_assert_eq!(word_errors(&r, &h), levenshtein(&r, &h));
            prop_assert_eq!(word_errors(&r, &h), word_errors(&h, &r));
        }

        #[test]
        fn distance_is_symmetric_bounded_and_zero_on_itself(r in mergeable_words(), h in mergeable_words()) {
            let d = word_errors(&r, &h);
            prop_assert_eq!(d, word_errors(&h, &r));
            prop_assert!(d <= r.len().max(h.len()));
            prop_assert!(d <= levenshtein(&r, &h), "merges only ever lower the distance");
            prop_assert_eq!(word_errors(&r, &r), 0);
        }

        #[test]
        fn splitting_a_word_costs_nothing(r in prop::collection::vec("[a-z]{2,6}", 1..8), at in 0usize..8, cut in 1usize..6) {
            let at = at % r.len();
            let word = &r[at];
            let cut = 1 + cut % (word.len() - 1);
            let mut h = r.clone();
            h.splice(at..=at, [word[..cut].to_string(), word[cut..].to_string()]);
            prop_assert_eq!(word_errors(&r, &h), 0);
            prop_assert_eq!(word_errors(&h, &r), 0);
        }

        #[test]
        fn scores_are_finite_and_consistent(r in "[a-z0-9 ,.!?'-]{0,40}", h in "[a-z0-9 ,.!?'-]{0,40}") {
            let s = score(&r, &h, &English);
            prop_assert!(s.wer.is_finite() && s.wer >= 0.0);
            prop_assert_eq!(s.wer, wer_of(s.errors, s.words));
            prop_assert_eq!(score(&r, &r, &English).errors, 0);
        }

        #[test]
        fn normalising_twice_changes_nothing(text in "[A-Za-z0-9 ,.;:!?'\"()\\-%&你好世界カナ한국Ａ１。、]{0,60}") {
            let once = crate::normalize(&text, &English);
            let twice = crate::normalize(&once.join(" "), &English);
            prop_assert_eq!(once, twice);
        }
    }
}
