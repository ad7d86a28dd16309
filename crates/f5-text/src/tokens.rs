use std::sync::OnceLock;

use jieba_rs::Jieba;

use crate::{lazy_pinyin_tone3, TextError};

/// The reference's `is_chinese`: `"\u3100" <= c <= "\u9fff"`. Wider than the
/// CJK ideographs (it takes in bopomofo, CJK strokes, enclosed and
/// compatibility forms) and narrower than pypinyin's hans class; it only
/// decides where a space token goes.
pub fn is_chinese(c: char) -> bool {
    ('\u{3100}'..='\u{9fff}').contains(&c)
}

/// The tokens after the previous one that suppress the space before a
/// multi-character ASCII segment. Python tests `out[-1] not in " :'\""`,
/// a substring test, so an empty previous token also suppresses it.
const NO_SPACE_AFTER: &str = " :'\"";

fn segmenter() -> &'static Jieba {
    static JIEBA: OnceLock<Jieba> = OnceLock::new();
    JIEBA.get_or_init(Jieba::new)
}

/// The reference's text translation before segmentation: ASCII `;` becomes `,`
/// and curly quotes become straight ones. The full-width `；` is left alone.
fn translate(text: &str) -> String {
    text.chars()
        .map(|c| match c {
            ';' => ',',
            '\u{201c}' | '\u{201d}' => '"',
            '\u{2018}' | '\u{2019}' => '\'',
            other => other,
        })
        .collect()
}

/// `convert_char_to_pinyin([text])[0]` of the reference (polyphone=True).
///
/// The text is segmented with jieba (HMM on, as `rjieba.cut` defaults), then
/// per segment:
/// * all ASCII: one token per character, preceded by a `" "` token when the
///   segment is longer than one character and the previous token is not one of
///   ` :'"`. jieba's word class does not contain Latin letters with diacritics,
///   so "Yöllä" arrives as `Y|ö|ll|ä` and becomes `Y ö ␠ l l ä`: checkpoints
///   for such languages were trained on exactly that;
/// * all characters three bytes long (Chinese, full-width punctuation):
///   pinyin of the whole segment, with a `" "` token before each Chinese
///   character;
/// * anything else, per character: Latin-1 characters as they are, a Chinese
///   character as `" "` plus its own pinyin (no word context), others as they
///   are.
pub fn to_tokens(text: &str) -> Result<Vec<String>, TextError> {
    let text = translate(text);
    let mut tokens: Vec<String> = Vec::new();
    for segment in segmenter().cut(&text, true) {
        let segment = segment.word;
        let byte_len = segment.len();
        let char_len = segment.chars().count();
        if byte_len == char_len {
            let previous_allows_space = tokens.last().is_some_and(|last| !NO_SPACE_AFTER.contains(last.as_str()));
            if byte_len > 1 && previous_allows_space {
                tokens.push(" ".to_owned());
            }
            tokens.extend(segment.chars().map(String::from));
        } else if byte_len == 3 * char_len {
            let readings = lazy_pinyin_tone3(segment)?;
            if readings.len() < char_len {
                return Err(TextError::SegmentMisaligned { segment: segment.to_owned(), chars: char_len, readings: readings.len() });
            }
            for (c, reading) in segment.chars().zip(readings) {
                if is_chinese(c) {
                    tokens.push(" ".to_owned());
                }
                tokens.push(reading);
            }
        } else {
            for c in segment.chars() {
                if is_chinese(c) {
                    tokens.push(" ".to_owned());
                    tokens.extend(lazy_pinyin_tone3(c.encode_utf8(&mut [0u8; 4]))?);
                } else {
                    tokens.push(c.to_string());
                }
            }
        }
    }
    Ok(tokens)
}
