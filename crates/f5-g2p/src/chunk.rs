//! Chunking as kokoro's `KPipeline` does it: the model takes at most 510 phonemes, so English
//! tokens are gathered until the next would pass 510 and the chunk is cut after the last
//! sentence end (`!.?…`), else clause mark (`:;`), else comma or dash (`,—`); other languages
//! are split at sentence ends into pieces of at most 400 characters before phonemisation.

use crate::token::Token;

/// The model's phoneme budget per chunk (512 positions minus the two pad tokens).
pub const MAX_PHONEMES: usize = 510;
/// `KPipeline.__call__`'s grapheme budget for non-English chunks.
pub const NON_ENGLISH_CHUNK_CHARS: usize = 400;

fn chars(s: &str) -> usize {
    s.chars().count()
}

/// `KPipeline.tokens_to_ps`.
pub fn tokens_to_ps(tokens: &[Token]) -> String {
    let mut s = String::new();
    for t in tokens {
        s.push_str(t.phonemes.as_deref().unwrap_or(""));
        if !t.whitespace.is_empty() {
            s.push(' ');
        }
    }
    s.trim().to_string()
}

/// `KPipeline.tokens_to_text`.
pub fn tokens_to_text(tokens: &[Token]) -> String {
    let mut s = String::new();
    for t in tokens {
        s.push_str(&t.text);
        s.push_str(&t.whitespace);
    }
    s.trim().to_string()
}

/// `KPipeline.waterfall_last`: where to cut `tokens` so the rest still fits.
fn waterfall_last(tokens: &[Token], next_count: usize) -> usize {
    const WATERFALL: [&str; 3] = ["!.?…", ":;", ",—"];
    const BUMPS: [&str; 2] = [")", "\u{201d}"];
    for marks in WATERFALL {
        let found = tokens.iter().rposition(|t| {
            let ps = t.phonemes.as_deref().unwrap_or("");
            chars(ps) == 1 && marks.contains(ps)
        });
        let Some(mut z) = found else {
            continue;
        };
        z += 1;
        if z < tokens.len() && BUMPS.contains(&tokens[z].phonemes.as_deref().unwrap_or("")) {
            z += 1;
        }
        if next_count.saturating_sub(chars(&tokens_to_ps(&tokens[..z]))) <= MAX_PHONEMES {
            return z;
        }
    }
    tokens.len()
}

/// One piece of text the model speaks in one pass.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Chunk {
    /// The text of the chunk.
    pub graphemes: String,
    /// What the model is given (at most 510 characters).
    pub phonemes: String,
    /// The word tokens (English only; kokoro keeps none for espeak languages).
    pub tokens: Option<Vec<Token>>,
}

/// `KPipeline.en_tokenize`: cut English tokens into chunks of at most 510 phonemes.
pub fn en_tokenize(tokens: Vec<Token>) -> Vec<Chunk> {
    let mut out = Vec::new();
    let mut tks: Vec<Token> = Vec::new();
    let mut pcount = 0usize;
    for mut t in tokens {
        if t.phonemes.is_none() {
            t.phonemes = Some(String::new());
        }
        let mut next_ps = t.phonemes.clone().unwrap_or_default();
        if !t.whitespace.is_empty() {
            next_ps.push(' ');
        }
        let next_pcount = pcount + chars(next_ps.trim_end());
        if next_pcount > MAX_PHONEMES {
            let z = waterfall_last(&tks, next_pcount);
            let rest = tks.split_off(z.min(tks.len()));
            out.push(Chunk { graphemes: tokens_to_text(&tks), phonemes: tokens_to_ps(&tks), tokens: Some(tks) });
            tks = rest;
            pcount = chars(&tokens_to_ps(&tks));
            if tks.is_empty() {
                next_ps = next_ps.trim_start().to_string();
            }
        }
        pcount += chars(&next_ps);
        tks.push(t);
    }
    if !tks.is_empty() {
        out.push(Chunk { graphemes: tokens_to_text(&tks), phonemes: tokens_to_ps(&tks), tokens: Some(tks) });
    }
    out
}

/// `re.split(r'\n+', text.strip())` without the blank segments kokoro skips.
pub fn split_lines(text: &str) -> Vec<&str> {
    text.trim().split('\n').filter(|s| !s.trim().is_empty()).collect()
}

/// The non-English branch of `KPipeline.__call__`: sentence pieces of at most 400 characters.
pub fn split_sentences(graphemes: &str) -> Vec<String> {
    // re.split(r'([.!?]+)', graphemes): text, delimiter, text, delimiter, ..., text
    let mut parts: Vec<String> = Vec::new();
    let mut current = String::new();
    let mut in_delim = false;
    for c in graphemes.chars() {
        let is_delim = matches!(c, '.' | '!' | '?');
        if is_delim != in_delim {
            parts.push(std::mem::take(&mut current));
            in_delim = is_delim;
        }
        current.push(c);
    }
    parts.push(current);
    if parts.len().is_multiple_of(2) {
        // the text ended on a delimiter: re.split adds a trailing empty piece
        parts.push(String::new());
    }
    let mut chunks: Vec<String> = Vec::new();
    let mut current_chunk = String::new();
    let mut i = 0;
    while i < parts.len() {
        let mut sentence = parts[i].clone();
        if let Some(delim) = parts.get(i + 1) {
            sentence.push_str(delim);
        }
        if chars(&current_chunk) + chars(&sentence) <= NON_ENGLISH_CHUNK_CHARS {
            current_chunk.push_str(&sentence);
        } else {
            if !current_chunk.is_empty() {
                chunks.push(current_chunk.trim().to_string());
            }
            current_chunk = sentence;
        }
        i += 2;
    }
    if !current_chunk.is_empty() {
        chunks.push(current_chunk.trim().to_string());
    }
    if chunks.is_empty() {
        let cs: Vec<char> = graphemes.chars().collect();
        chunks = cs.chunks(NON_ENGLISH_CHUNK_CHARS).map(|c| c.iter().collect()).collect();
    }
    chunks
}

/// kokoro truncates an over-long phoneme string to its first 510 characters.
pub fn truncate_phonemes(ps: &str) -> String {
    ps.chars().take(MAX_PHONEMES).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sentence_split_matches_re_split_shape() {
        assert_eq!(split_sentences("Hola. ¿Qué tal?"), vec!["Hola. ¿Qué tal?"]);
        let long = "a".repeat(300) + ". " + &"b".repeat(300) + ".";
        let chunks = split_sentences(&long);
        assert_eq!(chunks.len(), 2);
        assert_eq!(chunks[1], "b".repeat(300) + ".");
    }
}
