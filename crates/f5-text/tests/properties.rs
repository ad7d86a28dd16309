//! Properties that must hold for any input, not only for the goldens.

use f5_text::{chunk_text, is_python_whitespace, split_sentences, to_tokens};
use proptest::prelude::*;

/// Text drawn from the scripts the front end treats differently: ASCII,
/// Latin-1 letters, CJK ideographs, CJK and ASCII punctuation, whitespace of
/// several kinds, four-byte characters.
fn mixed_text() -> impl Strategy<Value = String> {
    proptest::collection::vec(
        prop_oneof![
            proptest::char::range('a', 'z'),
            proptest::char::range('0', '9'),
            proptest::sample::select(vec![
                ' ', '.', ',', ';', ':', '!', '?', '\'', '"', '-', '\n', '\t', '\u{3000}', '\u{a0}', '\u{1f}', 'ä', 'ö', 'ß', 'é', '。',
                '，', '；', '：', '！', '？', '、', '“', '”', '一', '不', '你', '好', '行', '长', 'ㄅ', '𠮶', '😀', 'ệ', 'ア', '한',
            ]),
            proptest::char::range('\u{4e00}', '\u{9fa5}'),
            any::<char>(),
        ],
        0..40,
    )
    .prop_map(|chars| chars.into_iter().collect())
}

proptest! {
    #[test]
    fn conversion_never_fails(text in mixed_text()) {
        prop_assert!(to_tokens(&text).is_ok());
    }

    #[test]
    fn sentence_pieces_cover_the_text_except_consumed_whitespace(text in mixed_text()) {
        let mut cursor = 0;
        for piece in split_sentences(&text) {
            let offset = piece.as_ptr() as usize - text.as_ptr() as usize;
            prop_assert!(offset >= cursor);
            prop_assert!(text[cursor..offset].chars().all(is_python_whitespace));
            cursor = offset + piece.len();
        }
        prop_assert_eq!(cursor, text.len());
    }

    #[test]
    fn chunks_fit_the_budget_unless_one_sentence_is_longer(text in mixed_text(), budget in 1usize..60) {
        let longest = split_sentences(&text).iter().map(|s| s.len()).max().unwrap_or(0);
        for chunk in chunk_text(&text, budget) {
            prop_assert!(chunk.len() <= budget.max(longest), "{:?} at {}", chunk, budget);
        }
    }
}
