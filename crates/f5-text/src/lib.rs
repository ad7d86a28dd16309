//! The F5-TTS text front end: how the reference implementation (f5-tts 1.1.22)
//! turns a string into the token ids the model was trained on.
//!
//! * [`Vocab`] reads a `vocab.txt` with the exact line rules of the reference
//!   (Python text mode, `line[:-1]`), and maps tokens to ids (unknown → 0).
//! * [`to_tokens`] is `convert_char_to_pinyin` for one text: jieba segmentation
//!   (jieba-rs 0.11.0, the library the reference calls through rjieba), one
//!   token per character for Latin text, TONE3 pinyin with phrase-aware
//!   polyphones and tone sandhi for Chinese (a port of pypinyin 0.55.0).
//! * [`chunk_text`] and [`split_sentences`] split long input into the batches
//!   the reference synthesises one after another.
//!
//! Every rule here copies a quirk of the reference on purpose: a checkpoint
//! learnt to read exactly the token stream the reference produces, so any
//! "cleaner" behaviour would feed the model sequences it has never seen.

#![warn(missing_docs)]
mod chunk;
mod error;
mod pinyin;
mod tokens;
mod vocab;

pub use chunk::{chunk_text, is_python_whitespace, split_sentences};
pub use error::TextError;
pub use pinyin::lazy_pinyin_tone3;
pub use tokens::{is_chinese, to_tokens};
pub use vocab::Vocab;
