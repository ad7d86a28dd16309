/// ASCII punctuation that ends a sentence only when whitespace follows.
const ASCII_SENTENCE_ENDS: [char; 6] = [';', ':', ',', '.', '!', '?'];
/// Full-width punctuation that ends a sentence wherever it occurs.
const WIDE_SENTENCE_ENDS: [char; 6] = ['；', '：', '，', '。', '！', '？'];

/// Python's `str.isspace()`, which is also what `\s` matches in a `str`
/// pattern and what `str.strip()` removes. It is Unicode `White_Space` plus the
/// four information separators U+001C..U+001F; `char::is_whitespace` alone
/// would miss those and split or strip differently.
pub fn is_python_whitespace(c: char) -> bool {
    c.is_whitespace() || matches!(c, '\u{1c}'..='\u{1f}')
}

/// `re.split(r"(?<=[;:,.!?])\s+|(?<=[；：，。！？])", text)` of the reference.
///
/// ASCII punctuation splits only where whitespace follows, and the whitespace
/// is consumed; full-width punctuation splits with an empty match, so it stays
/// with its sentence and whatever follows (spaces included) starts the next
/// piece. Empty pieces are returned as `re.split` returns them (e.g. after a
/// final `。`); [`chunk_text`] skips them.
pub fn split_sentences(text: &str) -> Vec<&str> {
    let mut pieces = Vec::new();
    let mut piece_start = 0;
    let mut position = 0;
    let mut previous: Option<char> = None;
    loop {
        if let Some(before) = previous {
            if ASCII_SENTENCE_ENDS.contains(&before) {
                let run: usize = text[position..].chars().take_while(|&c| is_python_whitespace(c)).map(char::len_utf8).sum();
                if run > 0 {
                    pieces.push(&text[piece_start..position]);
                    position += run;
                    piece_start = position;
                    // The character before the new position is whitespace, so
                    // neither alternative can match here again.
                    previous = None;
                    continue;
                }
            } else if WIDE_SENTENCE_ENDS.contains(&before) {
                pieces.push(&text[piece_start..position]);
                piece_start = position;
            }
        }
        match text[position..].chars().next() {
            Some(c) => {
                previous = Some(c);
                position += c.len_utf8();
            }
            None => break,
        }
    }
    pieces.push(&text[piece_start..]);
    pieces
}

/// `chunk_text(text, max_chars)` of the reference (f5-tts ≥ 1.1.18).
///
/// Sentences are packed greedily while the UTF-8 byte length of the chunk so
/// far plus the next sentence stays within `max_bytes`. A sentence whose last
/// character is one byte long is followed by a space inside the chunk (and that
/// space counts towards the budget); chunks are stripped of Python whitespace
/// at the ends. A sentence longer than the budget becomes a chunk of its own and
/// is never cut.
pub fn chunk_text(text: &str, max_bytes: usize) -> Vec<String> {
    let mut chunks = Vec::new();
    let mut current = String::new();
    for sentence in split_sentences(text) {
        let Some(last) = sentence.chars().next_back() else {
            continue;
        };
        if current.len() + sentence.len() > max_bytes {
            if !current.is_empty() {
                chunks.push(current.trim_matches(is_python_whitespace).to_owned());
            }
            current.clear();
        }
        current.push_str(sentence);
        if last.len_utf8() == 1 {
            current.push(' ');
        }
    }
    if !current.is_empty() {
        chunks.push(current.trim_matches(is_python_whitespace).to_owned());
    }
    chunks
}

#[cfg(test)]
mod tests {
    //! Expected values were checked against the reference `re.split` and
    //! `chunk_text`; the goldens in `fixtures/text/chunks.json` cover more.
    use super::*;

    /// `[c for c in range(0x110000) if chr(c).isspace()]` in Python 3.11.
    const PYTHON_SPACES: [u32; 29] = [
        0x9, 0xa, 0xb, 0xc, 0xd, 0x1c, 0x1d, 0x1e, 0x1f, 0x20, 0x85, 0xa0, 0x1680, 0x2000, 0x2001, 0x2002, 0x2003, 0x2004, 0x2005, 0x2006,
        0x2007, 0x2008, 0x2009, 0x200a, 0x2028, 0x2029, 0x202f, 0x205f, 0x3000,
    ];

    #[test]
    fn whitespace_class_equals_python_isspace() {
        let ours: Vec<u32> = (0..=0x10ffffu32).filter_map(char::from_u32).filter(|&c| is_python_whitespace(c)).map(u32::from).collect();
        assert_eq!(ours, PYTHON_SPACES);
    }

    #[test]
    fn ascii_punctuation_needs_following_whitespace() {
        assert_eq!(split_sentences("a.b, c!  d"), vec!["a.b,", "c!", "d"]);
        assert_eq!(split_sentences("end."), vec!["end."]);
        assert_eq!(split_sentences("end. "), vec!["end.", ""]);
    }

    #[test]
    fn wide_punctuation_splits_with_an_empty_match() {
        assert_eq!(split_sentences("你好。 世界！"), vec!["你好。", " 世界！", ""]);
        assert_eq!(split_sentences("。。"), vec!["。", "。", ""]);
    }

    #[test]
    fn information_separators_count_as_whitespace() {
        assert_eq!(split_sentences("a.\u{1f}b"), vec!["a.", "b"]);
        assert_eq!(split_sentences("a.\u{3000}b"), vec!["a.", "b"]);
    }

    #[test]
    fn long_sentence_stays_whole_and_spaces_count() {
        // "bb. " (4 bytes, with its space) plus "c." (2) exceeds 5.
        assert_eq!(chunk_text("aaaa. bb. c.", 5), vec!["aaaa.", "bb.", "c."]);
        assert_eq!(chunk_text("abcdefgh. x.", 3), vec!["abcdefgh.", "x."]);
        // "你好。" is 9 bytes and gets no trailing space.
        assert_eq!(chunk_text("你好。你好。", 18), vec!["你好。你好。"]);
        assert_eq!(chunk_text("你好。你好。", 17), vec!["你好。", "你好。"]);
    }

    #[test]
    fn whitespace_only_sentence_yields_an_empty_chunk_like_the_reference() {
        assert_eq!(chunk_text(" ", 10), vec![String::new()]);
        assert!(chunk_text("", 10).is_empty());
    }
}
