//! Split-on-fail: a chunk the listen-back gate still mishears after its retries is cut into
//! sentences, and each sentence is generated (and checked) on its own. A long chunk fails when
//! one of its sentences is misspoken; regenerating only that sentence, with a duration estimate
//! of its own, fixes what retries of the whole cannot. The earlier implementation this project
//! grew from did the same.

/// Sentences shorter than this (in words) are merged into a neighbour: a two-word sentence is
/// too short for the model to time well on its own.
pub const MIN_SENTENCE_WORDS: usize = 5;

/// The sentences a failing chunk is split into: cut after `.`, `!` or `?` followed by
/// whitespace; a sentence of fewer than [`MIN_SENTENCE_WORDS`] words is merged into the next
/// one (the last into the one before it). One piece means there is nothing to split.
pub fn sentences_for_retry(text: &str) -> Vec<String> {
    let mut raw: Vec<&str> = Vec::new();
    let mut start = 0;
    let mut chars = text.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        if matches!(c, '.' | '!' | '?') && chars.peek().is_some_and(|(_, n)| n.is_whitespace()) {
            let end = i + c.len_utf8();
            raw.push(&text[start..end]);
            start = end;
        }
    }
    raw.push(&text[start..]);
    let words = |s: &str| s.split_whitespace().count();
    let mut out: Vec<String> = Vec::new();
    let mut pending = String::new();
    for piece in raw.into_iter().map(str::trim).filter(|p| !p.is_empty()) {
        if !pending.is_empty() {
            pending.push(' ');
        }
        pending.push_str(piece);
        if words(&pending) >= MIN_SENTENCE_WORDS {
            out.push(std::mem::take(&mut pending));
        }
    }
    if !pending.is_empty() {
        match out.last_mut() {
            Some(last) => {
                last.push(' ');
                last.push_str(&pending);
            }
            None => out.push(pending),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sentences_split_at_end_marks_followed_by_space() {
        let t = "The first sentence is right here. Is the second one a question? Yes it is, and it ends loudly!";
        assert_eq!(
            sentences_for_retry(t),
            ["The first sentence is right here.", "Is the second one a question?", "Yes it is, and it ends loudly!"]
        );
        // No space after the mark: not a sentence end (numbers, abbreviations in a word).
        assert_eq!(sentences_for_retry("It costs 3.50 dollars today, my friend."), ["It costs 3.50 dollars today, my friend."]);
    }

    #[test]
    fn short_sentences_merge_into_a_neighbour() {
        // "Right." (1 word) joins the next; the short last one joins the one before.
        let t = "Right. Now we look at the next part of it. Good job.";
        assert_eq!(sentences_for_retry(t), ["Right. Now we look at the next part of it. Good job."]);
        let t = "This sentence has enough words. Short one. And this one also has enough words.";
        assert_eq!(sentences_for_retry(t), ["This sentence has enough words.", "Short one. And this one also has enough words."]);
        assert_eq!(sentences_for_retry("Hi."), ["Hi."]);
        assert!(sentences_for_retry("   ").is_empty());
    }
}
