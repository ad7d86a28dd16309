use std::collections::HashMap;
use std::path::Path;

use crate::TextError;

/// Vocabulary files are a few thousand short lines; anything far larger is not
/// a vocabulary and is refused before it is read into memory.
const MAX_VOCAB_FILE_BYTES: u64 = 64 * 1024 * 1024;

/// A token → id map read exactly as the reference reads `vocab.txt`.
///
/// The reference does `for i, line in enumerate(open(path, encoding="utf-8")):
/// vocab[line[:-1]] = i`. Consequences kept here on purpose:
/// * the file is opened in text mode, so `\r\n` and a lone `\r` end a line just
///   like `\n` (a CRLF file yields the same tokens as an LF file);
/// * `line[:-1]` drops the last character, which is the newline — except on a
///   final line without one, which loses its last real character;
/// * a final newline does not create an extra empty token;
/// * a token that occurs twice keeps the id of its last line, and the size is
///   the number of distinct tokens (`len(dict)`), not the number of lines.
#[derive(Debug, Clone)]
pub struct Vocab {
    ids: HashMap<String, u32>,
}

impl Vocab {
    /// Reads a vocabulary file (UTF-8, as the reference opens it).
    pub fn load(path: impl AsRef<Path>) -> Result<Self, TextError> {
        let path = path.as_ref();
        let io_error = |source| TextError::VocabIo { path: path.to_path_buf(), source };
        let size = std::fs::metadata(path).map_err(io_error)?.len();
        if size > MAX_VOCAB_FILE_BYTES {
            return Err(TextError::VocabTooLarge { path: path.to_path_buf(), size, limit: MAX_VOCAB_FILE_BYTES });
        }
        let bytes = std::fs::read(path).map_err(io_error)?;
        let text =
            std::str::from_utf8(&bytes).map_err(|e| TextError::VocabEncoding { path: path.to_path_buf(), offset: e.valid_up_to() })?;
        Ok(Self::from_text(text))
    }

    /// Builds the vocabulary from the decoded file contents, with the same line
    /// rules as [`Vocab::load`].
    pub fn from_text(text: &str) -> Self {
        // Python's universal-newline translation, applied to the whole file.
        let normalized = text.replace("\r\n", "\n").replace('\r', "\n");
        let mut ids = HashMap::new();
        let mut rest = normalized.as_str();
        let mut line_index: u32 = 0;
        while !rest.is_empty() {
            let (token, next) = match rest.find('\n') {
                Some(end) => (&rest[..end], &rest[end + 1..]),
                None => {
                    let mut chars = rest.chars();
                    chars.next_back();
                    (chars.as_str(), "")
                }
            };
            ids.insert(token.to_owned(), line_index);
            line_index = line_index.saturating_add(1);
            rest = next;
        }
        Self { ids }
    }

    /// `vocab_size` of the reference: the number of distinct tokens. It is
    /// also the checkpoint's `text_num_embeds`.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// True for a vocabulary without tokens (an empty file).
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// The id of one token; an unknown token is 0, the id of the space in the
    /// shipped vocabularies (`vocab_char_map.get(c, 0)`).
    pub fn id(&self, token: &str) -> u32 {
        self.ids.get(token).copied().unwrap_or(0)
    }

    /// The id of every token, in order (`list_str_to_idx` for one text).
    pub fn ids<S: AsRef<str>>(&self, tokens: &[S]) -> Vec<u32> {
        tokens.iter().map(|token| self.id(token.as_ref())).collect()
    }

    /// Whether the token has its own entry (as opposed to falling back to 0).
    pub fn contains(&self, token: &str) -> bool {
        self.ids.contains_key(token)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn final_newline_adds_no_token_and_missing_newline_eats_a_character() {
        let with_newline = Vocab::from_text(" \na\nbc\n");
        assert_eq!(with_newline.len(), 3);
        assert_eq!(with_newline.id("bc"), 2);

        let without_newline = Vocab::from_text(" \na\nbc");
        assert_eq!(without_newline.len(), 3);
        assert_eq!(without_newline.id("b"), 2);
        assert!(!without_newline.contains("bc"));
    }

    #[test]
    fn crlf_and_lone_cr_end_lines_like_python_text_mode() {
        let crlf = Vocab::from_text(" \r\na\r\nb\r\n");
        assert_eq!(crlf.len(), 3);
        assert_eq!(crlf.id("a"), 1);
        assert_eq!(crlf.id("b"), 2);
        assert!(!crlf.contains("a\r"));

        let lone_cr = Vocab::from_text(" \ra\rb\n");
        assert_eq!(lone_cr.id("a"), 1);
        assert_eq!(lone_cr.id("b"), 2);
    }

    #[test]
    fn duplicates_keep_last_line_and_shrink_the_size() {
        let vocab = Vocab::from_text(" \na\nb\na\n");
        assert_eq!(vocab.len(), 3);
        assert_eq!(vocab.id("a"), 3);
    }

    #[test]
    fn empty_lines_are_tokens_and_unknown_maps_to_zero() {
        let vocab = Vocab::from_text(" \n\nx\n");
        assert_eq!(vocab.id(""), 1);
        assert_eq!(vocab.id("x"), 2);
        assert_eq!(vocab.id("never-seen"), 0);
        assert_eq!(vocab.ids(&["x", "?", " "]), vec![2, 0, 0]);
    }

    #[test]
    fn multibyte_last_character_is_dropped_whole() {
        let vocab = Vocab::from_text(" \nab𠮶");
        assert_eq!(vocab.id("ab"), 1);
    }
}
