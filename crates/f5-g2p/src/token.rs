//! One word-level token of the English front end: misaki's `MToken` with its `_` extras, kept
//! because the chunker and the word timestamps work on tokens, not on the joined string.

use serde::Serialize;

/// A token as misaki's pipeline carries it from tokenisation to the chunker.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Token {
    /// The text of the token as written.
    pub text: String,
    /// Penn-Treebank-style tag (misaki reads spaCy's; here it comes from [`crate::tagger`]).
    pub tag: String,
    /// Whitespace after the token ("" or " ").
    pub whitespace: String,
    /// Kokoro phonemes; `None` until resolved (and for words nothing could read).
    pub phonemes: Option<String>,
    /// Word start in seconds, set by [`crate::timestamps::join_timestamps`].
    pub start_ts: Option<f64>,
    /// Word end in seconds.
    pub end_ts: Option<f64>,
    #[serde(skip)]
    pub(crate) extra: Extra,
}

/// misaki's `MToken.Underscore` fields.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Extra {
    pub is_head: bool,
    pub alias: Option<String>,
    pub stress: Option<f64>,
    pub currency: Option<String>,
    pub num_flags: String,
    pub prespace: bool,
    pub rating: Option<u8>,
}

impl Token {
    /// A token with known phonemes (for timestamps on tokens kept from an earlier run).
    pub fn with_phonemes(text: &str, whitespace: &str, phonemes: Option<String>) -> Self {
        let mut t = Token::new(text, "", whitespace);
        t.phonemes = phonemes;
        t
    }

    pub(crate) fn new(text: &str, tag: &str, whitespace: &str) -> Self {
        Token {
            text: text.to_string(),
            tag: tag.to_string(),
            whitespace: whitespace.to_string(),
            phonemes: None,
            start_ts: None,
            end_ts: None,
            extra: Extra { is_head: true, ..Extra::default() },
        }
    }
}
