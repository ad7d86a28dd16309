//! Kokoro's text front end: text → the phoneme strings Kokoro-82M is given, chunked to its
//! 510-phoneme limit, with the word tokens its timestamps need.
//!
//! * English (en-US, en-GB) follows misaki 0.9.4: its gold/silver lexicons, tokenisation,
//!   punctuation, suffix, capitalisation, acronym and number rules, `[word](/phonemes/)`
//!   overrides, and an espeak-ng fallback for words no rule reads. spaCy's tagger is replaced
//!   by the rules in [`tagger`] (which also say how heteronyms are resolved).
//! * es, fr, hi, it, pt-br go through espeak-ng exactly as kokoro's `EspeakG2P` does.
//!
//! espeak-ng (GPL-3.0) is run as a subprocess, never linked; see [`espeak`].

#![warn(missing_docs)]
mod chunk;
mod english;
pub mod espeak;
mod lexicon;
mod num2words;
mod pystr;
pub mod tagger;
pub mod timestamps;
mod token;

use std::str::FromStr;

pub use chunk::{
    en_tokenize, first_piece_end, first_piece_end_text, next_piece_end, split_first_chunk, split_sentences, tokens_to_ps, tokens_to_text,
    Chunk, FIRST_PIECE_MIN_PHONEMES, FIRST_SENTENCE_MAX_PHONEMES, MAX_PHONEMES, STREAM_GROWTH,
};
pub use english::{EnglishG2p, Fallback};
pub use espeak::{espeak_available, EspeakFallback, EspeakG2p, ESPEAK_ENV};
pub use timestamps::join_timestamps;
pub use token::Token;

/// Errors of the front end.
#[derive(Debug, thiserror::Error)]
pub enum G2pError {
    /// A language code the front end has no rules for.
    #[error("unknown language {0:?}: use en-us, en-gb, es, fr, hi, it or pt-br")]
    UnknownLanguage(String),
    /// A lexicon compiled into the crate does not parse (a broken build).
    #[error("built-in lexicon {name} is unreadable: {reason}")]
    Lexicon {
        /// Which lexicon.
        name: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// Languages other than English (and English words out of the lexicon) need espeak-ng.
    #[error("espeak-ng not found (tried {program:?}): install the Debian package `espeak-ng` or set F5_ESPEAK_NG")]
    EspeakMissing {
        /// The program that was looked for.
        program: String,
    },
    /// espeak-ng ran but did not give phonemes.
    #[error("espeak-ng failed: {reason}")]
    EspeakRun {
        /// Its exit status or error output.
        reason: String,
    },
}

/// The languages Kokoro-82M v1.0 speaks through this front end (kokoro's lang codes a b e f h i p).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Language {
    /// American English (`a`): misaki's lexicon, espeak-ng for unknown words.
    EnUs,
    /// British English (`b`): the British lexicon.
    EnGb,
    /// Spanish (`e`), through espeak-ng.
    Es,
    /// French (`f`), through espeak-ng.
    Fr,
    /// Hindi (`h`), through espeak-ng.
    Hi,
    /// Italian (`i`), through espeak-ng.
    It,
    /// Brazilian Portuguese (`p`), through espeak-ng.
    PtBr,
}

impl Language {
    /// The espeak-ng voice kokoro uses for this language.
    pub fn espeak_voice(self) -> &'static str {
        match self {
            Language::EnUs => "en-us",
            Language::EnGb => "en-gb",
            Language::Es => "es",
            Language::Fr => "fr-fr",
            Language::Hi => "hi",
            Language::It => "it",
            Language::PtBr => "pt-br",
        }
    }

    /// kokoro's one-letter lang code (the first letter of its voice names).
    pub fn code(self) -> char {
        match self {
            Language::EnUs => 'a',
            Language::EnGb => 'b',
            Language::Es => 'e',
            Language::Fr => 'f',
            Language::Hi => 'h',
            Language::It => 'i',
            Language::PtBr => 'p',
        }
    }

    /// Whether the lexicon-based English pipeline applies, rather than espeak-ng for the whole text.
    pub fn is_english(self) -> bool {
        matches!(self, Language::EnUs | Language::EnGb)
    }
}

impl FromStr for Language {
    type Err = G2pError;
    fn from_str(s: &str) -> Result<Self, G2pError> {
        Ok(match s.to_ascii_lowercase().as_str() {
            "a" | "en" | "en-us" | "en_us" => Language::EnUs,
            "b" | "en-gb" | "en_gb" => Language::EnGb,
            "e" | "es" => Language::Es,
            "f" | "fr" | "fr-fr" => Language::Fr,
            "h" | "hi" => Language::Hi,
            "i" | "it" => Language::It,
            "p" | "pt-br" | "pt_br" | "pt" => Language::PtBr,
            _ => return Err(G2pError::UnknownLanguage(s.to_string())),
        })
    }
}

enum Engine {
    English(EnglishG2p),
    Espeak(EspeakG2p),
}

/// The front end for one language, as one `KPipeline` holds one G2P.
pub struct G2p {
    language: Language,
    engine: Engine,
}

impl G2p {
    /// English loads its lexicons (and uses espeak-ng for unknown words when it is installed;
    /// without it those words are dropped, as kokoro does); other languages need espeak-ng at
    /// the first call.
    pub fn new(language: Language) -> Result<G2p, G2pError> {
        let engine = if language.is_english() {
            let british = language == Language::EnGb;
            let fallback: Option<Box<dyn Fallback>> = if espeak_available() { Some(Box::new(EspeakFallback::new(british))) } else { None };
            Engine::English(EnglishG2p::new(british, fallback)?)
        } else {
            Engine::Espeak(EspeakG2p::new(language.espeak_voice()))
        };
        Ok(G2p { language, engine })
    }

    /// English with an explicit fallback choice (`None`: unknown words stay empty).
    pub fn english(british: bool, fallback: Option<Box<dyn Fallback>>) -> Result<G2p, G2pError> {
        Ok(G2p {
            language: if british { Language::EnGb } else { Language::EnUs },
            engine: Engine::English(EnglishG2p::new(british, fallback)?),
        })
    }

    /// The language this front end was built for.
    pub fn language(&self) -> Language {
        self.language
    }

    /// Whether English words outside the lexicons can be read (espeak-ng was found).
    pub fn has_fallback(&self) -> bool {
        match &self.engine {
            Engine::English(e) => e.has_fallback(),
            Engine::Espeak(_) => true,
        }
    }

    /// The chunks the model is given for `text`, in order: `KPipeline.__call__` without the
    /// model (lines split at newlines, then English token chunking or non-English sentence
    /// chunking; empty chunks skipped, phonemes truncated to 510 characters).
    pub fn chunks(&self, text: &str) -> Result<Vec<Chunk>, G2pError> {
        let mut out = Vec::new();
        for line in chunk::split_lines(text) {
            match &self.engine {
                Engine::English(g2p) => {
                    let (_, tokens) = g2p.phonemize(line)?;
                    for mut c in en_tokenize(tokens) {
                        if c.phonemes.is_empty() {
                            continue;
                        }
                        c.phonemes = chunk::truncate_phonemes(&c.phonemes);
                        out.push(c);
                    }
                }
                Engine::Espeak(g2p) => {
                    for piece in split_sentences(line) {
                        if piece.trim().is_empty() {
                            continue;
                        }
                        let ps = g2p.phonemize(&piece)?;
                        if ps.is_empty() {
                            continue;
                        }
                        out.push(Chunk { graphemes: piece, phonemes: chunk::truncate_phonemes(&ps), tokens: None });
                    }
                }
            }
        }
        Ok(out)
    }

    /// The chunks to speak when the first audio should come soon: [`G2p::chunks`] with the first
    /// chunk cut after its first sentence, or the first clause of a long one
    /// ([`first_piece_end`]), so the first forward is short, and (English) the rest of that
    /// chunk in growing pieces of whole sentences ([`next_piece_end`]) so playback need not
    /// wait between them; every word is kept, in order, and the later chunks are the
    /// reference's. Nothing is cut where a piece would be too short.
    pub fn stream_chunks(&self, text: &str) -> Result<Vec<Chunk>, G2pError> {
        let chunks = self.chunks(text)?;
        match &self.engine {
            Engine::English(_) => Ok(chunk::split_first_chunk(chunks)),
            Engine::Espeak(g2p) => {
                let mut chunks = chunks;
                let Some(first) = chunks.first() else {
                    return Ok(chunks);
                };
                let Some(cut) = first_piece_end_text(&first.graphemes) else {
                    return Ok(chunks);
                };
                let (head, tail) = (first.graphemes[..cut].trim().to_string(), first.graphemes[cut..].trim().to_string());
                let (head_ps, tail_ps) = (g2p.phonemize(&head)?, g2p.phonemize(&tail)?);
                if head_ps.is_empty() || tail_ps.is_empty() {
                    return Ok(chunks);
                }
                let pieces = [
                    Chunk { graphemes: head, phonemes: chunk::truncate_phonemes(&head_ps), tokens: None },
                    Chunk { graphemes: tail, phonemes: chunk::truncate_phonemes(&tail_ps), tokens: None },
                ];
                chunks.splice(0..1, pieces);
                Ok(chunks)
            }
        }
    }
}
