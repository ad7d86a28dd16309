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

/// Streaming's first piece is at least this many phonemes (about half a second of speech): a
/// shorter one ("Hi.", "Well,") would be spoken as a clipped fragment of its own.
pub const FIRST_PIECE_MIN_PHONEMES: usize = 16;
/// A first sentence longer than this (about four seconds of speech: a sentence of 45 phonemes
/// is 3 s of Kokoro's audio, whose forward took 0.15–0.45 s on two cores of the machines in
/// docs/benchmarks.md) is cut at its first clause mark, so the first audio does not wait for
/// all of it.
pub const FIRST_SENTENCE_MAX_PHONEMES: usize = 60;

/// Sentence ends and clause marks as the chunker's waterfall knows them.
const SENTENCE_ENDS: &str = "!.?…";
const CLAUSE_MARKS: &str = ",;:—";

/// Where streaming cuts the first chunk: the end of its first sentence (sentences shorter than
/// [`FIRST_PIECE_MIN_PHONEMES`] are joined to the next), or, when that sentence is longer than
/// [`FIRST_SENTENCE_MAX_PHONEMES`], the end of its first clause of at least that minimum. `None`
/// when no cut leaves both pieces at least the minimum (the chunk is spoken whole).
pub fn first_piece_end(tokens: &[Token]) -> Option<usize> {
    let ps_len = |range: &[Token]| chars(&tokens_to_ps(range));
    let mark_in = |t: &Token, marks: &str| {
        let ps = t.phonemes.as_deref().unwrap_or("");
        chars(ps) == 1 && marks.contains(ps)
    };
    // Cut after token i, past a closing bracket or quote as the waterfall does.
    let after = |i: usize| {
        let z = i + 1;
        let bump = tokens.get(z).is_some_and(|t| matches!(t.phonemes.as_deref(), Some(")") | Some("\u{201d}")));
        if bump {
            z + 1
        } else {
            z
        }
    };
    let long_enough = |z: usize| ps_len(&tokens[..z]) >= FIRST_PIECE_MIN_PHONEMES;
    let sentence_end =
        (0..tokens.len()).filter(|&i| mark_in(&tokens[i], SENTENCE_ENDS)).map(after).find(|&z| long_enough(z)).unwrap_or(tokens.len());
    let mut cut = sentence_end;
    if ps_len(&tokens[..sentence_end]) > FIRST_SENTENCE_MAX_PHONEMES {
        let clause = (0..sentence_end)
            .filter(|&i| mark_in(&tokens[i], CLAUSE_MARKS))
            .map(after)
            .find(|&z| long_enough(z) && ps_len(&tokens[z..]) >= FIRST_PIECE_MIN_PHONEMES);
        if let Some(z) = clause {
            cut = z;
        }
    }
    (cut < tokens.len() && ps_len(&tokens[cut..]) >= FIRST_PIECE_MIN_PHONEMES).then_some(cut)
}

/// After the first piece, each further piece of the first chunk holds at most this many times
/// the phonemes spoken before it (whole sentences; a single longer sentence goes alone). With
/// the forward at RTF ≤ 0.5 on its own cores, the next piece is then ready before the audio
/// already sent has played out, so a real-time player does not stop between pieces.
pub const STREAM_GROWTH: usize = 2;

/// Where the next piece after `spoken` phonemes ends in `tokens`: the last sentence end within
/// [`STREAM_GROWTH`] × `spoken` phonemes (else the first sentence end), leaving both sides at
/// least [`FIRST_PIECE_MIN_PHONEMES`]; `None` when the rest fits the budget or has no such end.
pub fn next_piece_end(tokens: &[Token], spoken: usize) -> Option<usize> {
    let ps_len = |range: &[Token]| chars(&tokens_to_ps(range));
    let budget = STREAM_GROWTH * spoken;
    if ps_len(tokens) <= budget {
        return None;
    }
    let ends: Vec<usize> = (0..tokens.len())
        .filter(|&i| {
            let ps = tokens[i].phonemes.as_deref().unwrap_or("");
            chars(ps) == 1 && SENTENCE_ENDS.contains(ps)
        })
        .map(|i| {
            let z = i + 1;
            let bump = tokens.get(z).is_some_and(|t| matches!(t.phonemes.as_deref(), Some(")") | Some("\u{201d}")));
            if bump {
                z + 1
            } else {
                z
            }
        })
        .filter(|&z| {
            z < tokens.len() && ps_len(&tokens[..z]) >= FIRST_PIECE_MIN_PHONEMES && ps_len(&tokens[z..]) >= FIRST_PIECE_MIN_PHONEMES
        })
        .collect();
    ends.iter().rev().find(|&&z| ps_len(&tokens[..z]) <= budget).or(ends.first()).copied()
}

/// Streaming's chunks: `chunks` (the reference chunking) with the first English chunk cut at
/// [`first_piece_end`], so the first audio comes after a forward of one short sentence or clause
/// instead of up to 510 phonemes, and the rest of that chunk in pieces growing by
/// [`next_piece_end`], so the audio keeps coming. Every token stays, in order; later chunks are
/// the reference's.
pub fn split_first_chunk(mut chunks: Vec<Chunk>) -> Vec<Chunk> {
    let Some(first) = chunks.first() else {
        return chunks;
    };
    let Some(tokens) = &first.tokens else {
        return chunks;
    };
    let Some(cut) = first_piece_end(tokens) else {
        return chunks;
    };
    let piece = |tks: Vec<Token>| Chunk { graphemes: tokens_to_text(&tks), phonemes: tokens_to_ps(&tks), tokens: Some(tks) };
    let mut rest = tokens.clone();
    let mut tail = rest.split_off(cut);
    let mut spoken = chars(&tokens_to_ps(&rest));
    let mut pieces = vec![piece(rest)];
    while let Some(z) = next_piece_end(&tail, spoken) {
        let after = tail.split_off(z);
        spoken += chars(&tokens_to_ps(&tail));
        pieces.push(piece(std::mem::replace(&mut tail, after)));
    }
    pieces.push(piece(tail));
    chunks.splice(0..1, pieces);
    chunks
}

/// The same rule on text the espeak languages phonemise whole: the byte offset after the first
/// sentence (or first clause of a long one) of `graphemes`, lengths counted in characters.
pub fn first_piece_end_text(graphemes: &str) -> Option<usize> {
    let total = chars(graphemes.trim());
    // Offsets just after a mark that is followed by whitespace (a mark inside "3.5" is no end).
    let cuts = |marks: &str| -> Vec<usize> {
        let mut out = Vec::new();
        let mut it = graphemes.char_indices().peekable();
        while let Some((i, c)) = it.next() {
            if marks.contains(c) && it.peek().is_some_and(|(_, n)| n.is_whitespace()) {
                out.push(i + c.len_utf8());
            }
        }
        out
    };
    let head_len = |z: usize| chars(graphemes[..z].trim());
    let rest_len = |z: usize| chars(graphemes[z..].trim());
    let sentence_end = cuts(SENTENCE_ENDS).into_iter().find(|&z| head_len(z) >= FIRST_PIECE_MIN_PHONEMES).unwrap_or(graphemes.len());
    let mut cut = sentence_end;
    if head_len(sentence_end) > FIRST_SENTENCE_MAX_PHONEMES {
        if let Some(z) = cuts(CLAUSE_MARKS)
            .into_iter()
            .filter(|&z| z < sentence_end)
            .find(|&z| head_len(z) >= FIRST_PIECE_MIN_PHONEMES && rest_len(z) >= FIRST_PIECE_MIN_PHONEMES)
        {
            cut = z;
        }
    }
    (cut < graphemes.len() && total > 0 && rest_len(cut) >= FIRST_PIECE_MIN_PHONEMES).then_some(cut)
}

/// kokoro truncates an over-long phoneme string to its first 510 characters.
pub fn truncate_phonemes(ps: &str) -> String {
    ps.chars().take(MAX_PHONEMES).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// English-like tokens from words written as their own phonemes (one char per phoneme, so
    /// lengths are easy to count); punctuation is its own token, as misaki makes it.
    fn tokens(text: &str) -> Vec<Token> {
        let mut out: Vec<Token> = Vec::new();
        for word in text.split(' ') {
            let (body, mark) = match word.char_indices().last() {
                Some((i, c)) if ",;:.!?".contains(c) => (&word[..i], Some(c)),
                _ => (word, None),
            };
            out.push(Token::with_phonemes(body, if mark.is_some() { "" } else { " " }, Some(body.to_string())));
            if let Some(c) = mark {
                out.push(Token::with_phonemes(&c.to_string(), " ", Some(c.to_string())));
            }
        }
        if let Some(last) = out.last_mut() {
            last.whitespace.clear();
        }
        out
    }

    fn chunk(text: &str) -> Chunk {
        let tks = tokens(text);
        Chunk { graphemes: tokens_to_text(&tks), phonemes: tokens_to_ps(&tks), tokens: Some(tks) }
    }

    #[test]
    fn first_chunk_is_the_first_sentence_with_every_word_kept() {
        let text = "The quick brown fox jumps over. The lazy dog sleeps in the sun all day. It wakes at night.";
        let got = split_first_chunk(vec![chunk(text)]);
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].graphemes, "The quick brown fox jumps over.");
        assert_eq!(got[1].graphemes, "The lazy dog sleeps in the sun all day. It wakes at night.");
        assert_eq!(format!("{} {}", got[0].graphemes, got[1].graphemes), text);
        assert_eq!(format!("{} {}", got[0].phonemes, got[1].phonemes), chunk(text).phonemes);
    }

    #[test]
    fn a_long_first_sentence_is_cut_at_its_first_clause() {
        let text = "When the morning train finally pulled into the station, the passengers who had waited for hours \
                    stepped down onto the platform; nobody spoke. Then the rain began.";
        let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
        let got = split_first_chunk(vec![chunk(&text)]);
        assert_eq!(got[0].graphemes, "When the morning train finally pulled into the station,");
        assert_eq!(format!("{} {}", got[0].graphemes, got[1].graphemes), text);
        // Below the limit the whole first sentence is the piece, commas and all.
        let short = "Yes, the train came. And then it left again very slowly.";
        assert_eq!(split_first_chunk(vec![chunk(short)])[0].graphemes, "Yes, the train came.");
    }

    #[test]
    fn short_first_sentences_join_the_next() {
        // "Hi." alone would be a clipped fragment: the first piece runs to the next sentence end.
        let got = split_first_chunk(vec![chunk("Hi. How are you doing today? I am fine, thanks for asking.")]);
        assert_eq!(got[0].graphemes, "Hi. How are you doing today?");
    }

    #[test]
    fn no_split_where_a_piece_would_be_too_short() {
        // One sentence: nothing to cut.
        let one = chunk("The quick brown fox jumps over the lazy dog.");
        assert_eq!(split_first_chunk(vec![one.clone()]), vec![one]);
        // The rest would be a few phonemes ("Go."): spoken with the first sentence.
        let tail = chunk("The quick brown fox jumps over the lazy dog. Go.");
        assert_eq!(split_first_chunk(vec![tail.clone()]), vec![tail]);
        // A long sentence whose only clause leaves a tiny remainder is not cut there either.
        let long = chunk(&format!("{} the end, ok.", "word ".repeat(15).trim_end()));
        assert_eq!(split_first_chunk(vec![long.clone()]), vec![long]);
        // Later chunks are left alone, and chunks without tokens (espeak languages) too.
        let plain = Chunk { graphemes: "Hola. ¿Qué tal estás hoy, amigo?".into(), phonemes: "ola kˈe tˈal".into(), tokens: None };
        assert_eq!(split_first_chunk(vec![plain.clone()]), vec![plain]);
    }

    #[test]
    fn pieces_after_the_first_grow_by_whole_sentences() {
        // Eight sentences of 20 phonemes: the first alone; then at most 2 × 20 (one sentence: two
        // are 41 with the space between), at most 2 × 40 (three, 62), and the last three (62 ≤ 204).
        let sentence = "abcd efgh ijkl mnop.";
        let text = [sentence; 8].join(" ");
        let got = split_first_chunk(vec![chunk(&text)]);
        let sizes: Vec<usize> = got.iter().map(|c| c.graphemes.split(". ").count()).collect();
        assert_eq!(sizes, [1, 1, 3, 3], "sentences per piece");
        assert_eq!(got.iter().map(|c| c.graphemes.as_str()).collect::<Vec<_>>().join(" "), text);
        // A sentence over the budget still goes whole (never cut inside a later sentence).
        let long_second = format!("{sentence} {}. {sentence}", "word ".repeat(20).trim_end());
        let got = split_first_chunk(vec![chunk(&long_second)]);
        assert_eq!(got.len(), 3);
        assert_eq!(got[1].graphemes, format!("{}.", "word ".repeat(20).trim_end()));
    }

    #[test]
    fn text_rule_matches_the_token_rule() {
        let text = "The quick brown fox jumps over. The lazy dog sleeps in the sun all day.";
        let cut = first_piece_end_text(text).expect("a cut");
        assert_eq!(&text[..cut], "The quick brown fox jumps over.");
        assert_eq!(first_piece_end_text("Le chat dort sur le canapé."), None);
        assert_eq!(first_piece_end_text("Il costo è 3.5 euro per tutti i biglietti."), None, "a decimal point is no sentence end");
    }

    #[test]
    fn sentence_split_matches_re_split_shape() {
        assert_eq!(split_sentences("Hola. ¿Qué tal?"), vec!["Hola. ¿Qué tal?"]);
        let long = "a".repeat(300) + ". " + &"b".repeat(300) + ".";
        let chunks = split_sentences(&long);
        assert_eq!(chunks.len(), 2);
        assert_eq!(chunks[1], "b".repeat(300) + ".");
    }
}
