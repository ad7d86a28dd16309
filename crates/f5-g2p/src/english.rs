//! misaki's English G2P pipeline (`en.G2P.__call__`, 0.9.4) around the tokenizer of
//! [`crate::tagger`]: `[word](/phonemes/)` overrides, sub-word splitting, merging of glued
//! pieces ("don't", "well-known", "$5"), right-to-left reading with the vowel/"to" context,
//! compound stress, the espeak-ng fallback for words no rule reads, and Kokoro's final
//! `ɾ→T`, `ʔ→t`.

use std::collections::HashMap;
use std::sync::OnceLock;

use fancy_regex::Regex;

use crate::lexicon::{apply_stress, is_vowel, stress_weight, Lexicon, TokenContext, CONSONANTS, PRIMARY_STRESS};
use crate::pystr;
use crate::tagger;
use crate::token::{Extra, Token};
use crate::G2pError;

const PUNCTS: &str = ";:,.!?—…\"“”";
const NON_QUOTE_PUNCTS: &str = ";:,.!?—…";
const SUBTOKEN_JUNKS: &str = "',-._‘’/";
const PUNCT_TAGS: [&str; 11] = [".", ",", "-LRB-", "-RRB-", "``", "\"\"", "''", ":", "$", "#", "NFP"];

/// Reads a word no lexicon rule could: misaki's `EspeakFallback` (espeak-ng + symbol map).
pub trait Fallback: Send + Sync {
    /// Kokoro phonemes for `word`, or `None` when it cannot be read.
    fn phonemize(&self, word: &str) -> Result<Option<String>, G2pError>;
}

/// One `[text](feature)` override's feature.
#[derive(Debug, Clone, PartialEq)]
enum Feature {
    Stress(f64),
    Phonemes(String),
    NumFlags(String),
}

fn link_regex() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| Regex::new(r"\[([^\]]+)\]\(([^\)]*)\)").unwrap_or_else(|e| panic!("link regex: {e}")))
}

fn subtoken_regex() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| {
        Regex::new(
            r"^['‘’]+|\p{Lu}(?=\p{Lu}\p{Ll})|(?:^-)?(?:\d?[,.]?\d)+|[-_]+|['‘’]{2,}|\p{L}*?(?:['‘’]\p{L})*?\p{Ll}(?=\p{Lu})|\p{L}+(?:['‘’]\p{L})*|[^-_\p{L}'‘’\d]|['‘’]+$",
        )
        .unwrap_or_else(|e| panic!("subtoken regex: {e}"))
    })
}

fn subtokenize(word: &str) -> Vec<String> {
    // Most words are one ASCII letter run with at most an initial capital; the pattern keeps
    // those whole, and its look-ahead engine is the slow part of the whole front end.
    let mut bytes = word.bytes();
    if bytes.next().is_some_and(|b| b.is_ascii_alphabetic()) && bytes.all(|b| b.is_ascii_lowercase()) {
        return vec![word.to_string()];
    }
    subtoken_regex().find_iter(word).filter_map(|m| m.ok()).map(|m| m.as_str().to_string()).collect()
}

/// The text after `preprocess`, the byte spans of its whitespace-separated words, and the
/// features keyed by word index.
struct Preprocessed {
    text: String,
    spans: Vec<(usize, usize)>,
    features: HashMap<usize, Feature>,
}

fn push_split(result: &mut String, spans: &mut Vec<(usize, usize)>, segment: &str) {
    let base = result.len();
    let mut start: Option<usize> = None;
    for (i, c) in segment.char_indices() {
        if c.is_whitespace() {
            if let Some(s) = start.take() {
                spans.push((base + s, base + i));
            }
        } else if start.is_none() {
            start = Some(i);
        }
    }
    if let Some(s) = start {
        spans.push((base + s, base + segment.len()));
    }
    result.push_str(segment);
}

fn parse_feature(f: &str) -> Option<Feature> {
    let unsigned = f.strip_prefix(['-', '+']).unwrap_or(f);
    if pystr::is_ascii_digits(unsigned) {
        let v: f64 = unsigned.parse().ok()?;
        return Some(Feature::Stress(if f.starts_with('-') { -v } else { v }));
    }
    match f {
        "0.5" | "+0.5" => return Some(Feature::Stress(0.5)),
        "-0.5" => return Some(Feature::Stress(-0.5)),
        _ => {}
    }
    if pystr::len(f) > 1 && f.starts_with('/') && f.ends_with('/') {
        return Some(Feature::Phonemes(f[1..].trim_end_matches('/').to_string()));
    }
    if pystr::len(f) > 1 && f.starts_with('#') && f.ends_with('#') {
        return Some(Feature::NumFlags(f[1..].trim_end_matches('#').to_string()));
    }
    None
}

fn preprocess(text: &str) -> Preprocessed {
    let text = text.trim_start();
    let mut result = String::new();
    let mut spans = Vec::new();
    let mut features = HashMap::new();
    let mut last_end = 0;
    for caps in link_regex().captures_iter(text).filter_map(|c| c.ok()) {
        let (Some(whole), Some(shown), Some(feature)) = (caps.get(0), caps.get(1), caps.get(2)) else {
            continue;
        };
        push_split(&mut result, &mut spans, &text[last_end..whole.start()]);
        if let Some(f) = parse_feature(feature.as_str()) {
            features.insert(spans.len(), f);
        }
        let start = result.len();
        result.push_str(shown.as_str());
        spans.push((start, result.len()));
        last_end = whole.end();
    }
    if last_end < text.len() {
        push_split(&mut result, &mut spans, &text[last_end..]);
    }
    Preprocessed { text: result, spans, features }
}

/// misaki's `merge_tokens`: glue sub-tokens back into one word-level token.
fn merge_tokens(tokens: &[Token], unk: Option<&str>) -> Token {
    let mut stresses: Vec<f64> = Vec::new();
    for tk in tokens {
        if let Some(s) = tk.extra.stress {
            if !stresses.contains(&s) {
                stresses.push(s);
            }
        }
    }
    let currency = tokens.iter().filter_map(|tk| tk.extra.currency.clone()).max();
    let phonemes = unk.map(|unk| {
        let mut ps = String::new();
        for tk in tokens {
            if tk.extra.prespace
                && !ps.is_empty()
                && !ps.chars().next_back().is_some_and(char::is_whitespace)
                && tk.phonemes.as_deref().is_some_and(|p| !p.is_empty())
            {
                ps.push(' ');
            }
            ps.push_str(tk.phonemes.as_deref().unwrap_or(unk));
        }
        ps
    });
    let mut text = String::new();
    for (i, tk) in tokens.iter().enumerate() {
        text.push_str(&tk.text);
        if i + 1 < tokens.len() {
            text.push_str(&tk.whitespace);
        }
    }
    let weight = |tk: &Token| -> usize { tk.text.chars().map(|c| if pystr::is_lower_form(&c.to_string()) { 1 } else { 2 }).sum() };
    let mut best = 0;
    for (i, tk) in tokens.iter().enumerate() {
        if weight(tk) > weight(&tokens[best]) {
            best = i;
        }
    }
    let mut flags: Vec<char> = tokens.iter().flat_map(|tk| tk.extra.num_flags.chars()).collect();
    flags.sort_unstable();
    flags.dedup();
    let ratings: Option<Vec<u8>> = tokens.iter().map(|tk| tk.extra.rating).collect();
    let first = &tokens[0];
    let last = &tokens[tokens.len() - 1];
    Token {
        text,
        tag: tokens[best].tag.clone(),
        whitespace: last.whitespace.clone(),
        phonemes,
        start_ts: first.start_ts,
        end_ts: last.end_ts,
        extra: Extra {
            is_head: first.extra.is_head,
            alias: None,
            stress: if stresses.len() == 1 { Some(stresses[0]) } else { None },
            currency,
            num_flags: flags.into_iter().collect(),
            prespace: first.extra.prespace,
            rating: ratings.and_then(|r| r.into_iter().min()),
        },
    }
}

/// A word: one token, or sub-tokens written without space between them.
enum Word {
    Single(Token),
    Group(Vec<Token>),
}

fn retokenize(tokens: Vec<Token>) -> Vec<Word> {
    let mut words: Vec<Word> = Vec::new();
    let mut currency: Option<String> = None;
    let n = tokens.len();
    let next_tags: Vec<String> = tokens.iter().map(|t| t.tag.clone()).collect();
    for (i, token) in tokens.into_iter().enumerate() {
        let mut tks: Vec<Token> = if token.extra.alias.is_none() && token.phonemes.is_none() {
            subtokenize(&token.text)
                .into_iter()
                .map(|t| {
                    let mut sub = Token::new(&t, &token.tag, "");
                    sub.extra.num_flags = token.extra.num_flags.clone();
                    sub.extra.stress = token.extra.stress;
                    sub
                })
                .collect()
        } else {
            vec![token.clone()]
        };
        if tks.is_empty() {
            continue;
        }
        let last = tks.len() - 1;
        tks[last].whitespace = token.whitespace.clone();
        let count = tks.len();
        for j in 0..count {
            let prev_last = if j > 0 { pystr::last_char(&tks[j - 1].text) } else { None };
            let next_first = tks.get(j + 1).and_then(|t| t.text.chars().next());
            let tk = &mut tks[j];
            if tk.extra.alias.is_some() || tk.phonemes.is_some() {
            } else if tk.tag == "$" && crate::lexicon::currency_units(&tk.text).is_some() {
                currency = Some(tk.text.clone());
                tk.phonemes = Some(String::new());
                tk.extra.rating = Some(4);
            } else if tk.tag == ":" && (tk.text == "-" || tk.text == "–") {
                tk.phonemes = Some("—".to_string());
                tk.extra.rating = Some(3);
            } else if PUNCT_TAGS.contains(&tk.tag.as_str())
                && !tk.text.chars().all(|c| {
                    let l = c.to_lowercase().next().unwrap_or(c);
                    l.is_ascii_lowercase()
                })
            {
                let ps = match tk.tag.as_str() {
                    "-LRB-" => "(".to_string(),
                    "-RRB-" => ")".to_string(),
                    "``" => "\u{201c}".to_string(),
                    "\"\"" | "''" => "\u{201d}".to_string(),
                    _ => tk.text.chars().filter(|c| PUNCTS.contains(*c)).collect(),
                };
                tk.phonemes = Some(ps);
                tk.extra.rating = Some(4);
            } else if currency.is_some() {
                if tk.tag != "CD" {
                    currency = None;
                } else if j + 1 == count && (i + 1 == n || next_tags[i + 1] != "CD") {
                    tk.extra.currency = currency.clone();
                }
            } else if 0 < j
                && j + 1 < count
                && tk.text == "2"
                && prev_last.is_some_and(char::is_alphabetic)
                && next_first.is_some_and(char::is_alphabetic)
            {
                tk.extra.alias = Some("to".to_string());
            }
        }
        for mut tk in tks {
            if tk.extra.alias.is_some() || tk.phonemes.is_some() {
                words.push(Word::Single(tk));
            } else if let Some(Word::Group(group)) = words.last_mut() {
                if group.last().is_some_and(|t| t.whitespace.is_empty()) {
                    tk.extra.is_head = false;
                    group.push(tk);
                    continue;
                }
                words.push(if tk.whitespace.is_empty() { Word::Group(vec![tk]) } else { Word::Single(tk) });
            } else {
                words.push(if tk.whitespace.is_empty() { Word::Group(vec![tk]) } else { Word::Single(tk) });
            }
        }
    }
    words
        .into_iter()
        .map(|w| match w {
            Word::Group(mut g) if g.len() == 1 => Word::Single(g.remove(0)),
            other => other,
        })
        .collect()
}

fn token_context(ctx: TokenContext, ps: Option<&str>, token: &Token) -> TokenContext {
    let mut vowel = ctx.future_vowel;
    if let Some(ps) = ps.filter(|p| !p.is_empty()) {
        for c in ps.chars() {
            if is_vowel(c) || CONSONANTS.contains(c) || NON_QUOTE_PUNCTS.contains(c) {
                vowel = if NON_QUOTE_PUNCTS.contains(c) { None } else { Some(is_vowel(c)) };
                break;
            }
        }
    }
    let future_to = token.text == "to" || token.text == "To" || (token.text == "TO" && (token.tag == "TO" || token.tag == "IN"));
    TokenContext { future_vowel: vowel, future_to }
}

fn resolve_tokens(tokens: &mut [Token]) {
    let mut text = String::new();
    for (i, tk) in tokens.iter().enumerate() {
        text.push_str(&tk.text);
        if i + 1 < tokens.len() {
            text.push_str(&tk.whitespace);
        }
    }
    let classes: Vec<u8> = text
        .chars()
        .filter(|c| !SUBTOKEN_JUNKS.contains(*c))
        .map(|c| {
            if c.is_alphabetic() {
                0
            } else if c.is_ascii_digit() {
                1
            } else {
                2
            }
        })
        .collect();
    let mixed = classes.iter().any(|&c| c != classes[0]);
    let prespace = text.contains(' ') || text.contains('/') || (!classes.is_empty() && mixed);
    let n = tokens.len();
    for (i, tk) in tokens.iter_mut().enumerate() {
        if tk.phonemes.is_none() {
            if i == n - 1 && !tk.text.is_empty() && NON_QUOTE_PUNCTS.contains(tk.text.as_str()) {
                tk.phonemes = Some(tk.text.clone());
                tk.extra.rating = Some(3);
            } else if tk.text.chars().all(|c| SUBTOKEN_JUNKS.contains(c)) {
                tk.phonemes = Some(String::new());
                tk.extra.rating = Some(3);
            }
        } else if i > 0 {
            tk.extra.prespace = prespace;
        }
    }
    if prespace {
        return;
    }
    let mut indices: Vec<(bool, usize, usize)> = tokens
        .iter()
        .enumerate()
        .filter_map(|(i, tk)| {
            let ps = tk.phonemes.as_deref().filter(|p| !p.is_empty())?;
            Some((ps.contains(PRIMARY_STRESS), stress_weight(ps), i))
        })
        .collect();
    if indices.len() == 2 && tokens[indices[0].2].text.chars().count() == 1 {
        let i = indices[1].2;
        if let Some(ps) = tokens[i].phonemes.as_deref() {
            tokens[i].phonemes = Some(apply_stress(ps, Some(-0.5)));
        }
        return;
    }
    let primaries = indices.iter().filter(|(b, _, _)| *b).count();
    if indices.len() < 2 || primaries <= indices.len().div_ceil(2) {
        // (len+1)//2
        return;
    }
    indices.sort();
    let half = indices.len() / 2;
    for &(_, _, i) in &indices[..half] {
        if let Some(ps) = tokens[i].phonemes.as_deref() {
            tokens[i].phonemes = Some(apply_stress(ps, Some(-0.5)));
        }
    }
}

/// The English front end for one variant: misaki's pipeline over its lexicon.
pub struct EnglishG2p {
    lexicon: Lexicon,
    fallback: Option<Box<dyn Fallback>>,
}

impl EnglishG2p {
    /// `british` selects en-GB; `fallback` reads out-of-lexicon words (misaki leaves them
    /// empty without one, as Kokoro does when espeak-ng is missing).
    pub fn new(british: bool, fallback: Option<Box<dyn Fallback>>) -> Result<Self, G2pError> {
        Ok(EnglishG2p { lexicon: Lexicon::new(british)?, fallback })
    }

    /// Tokens of `text` without phonemes yet: the tokenizer's output with the overrides applied
    /// (`G2P.tokenize` + `fold_left`).
    fn tokens(&self, text: &str) -> Vec<Token> {
        let pre = preprocess(text);
        let mut tokens = tagger::tokenize(&pre.text, &self.lexicon);
        if !pre.features.is_empty() {
            // each token's byte span in the preprocessed text, to align it to its source word
            let mut cursor = 0;
            let mut token_spans = Vec::with_capacity(tokens.len());
            for tk in &tokens {
                let start = pre.text[cursor..].find(tk.text.as_str()).map_or(cursor, |o| cursor + o);
                let end = start + tk.text.len();
                token_spans.push((start, end));
                cursor = end;
            }
            for (&k, feature) in &pre.features {
                let Some(&(ws, we)) = pre.spans.get(k) else {
                    continue;
                };
                let aligned = token_spans.iter().enumerate().filter(|(_, &(s, e))| s < we && e > ws).map(|(j, _)| j).collect::<Vec<_>>();
                for (i, j) in aligned.into_iter().enumerate() {
                    let tk = &mut tokens[j];
                    match feature {
                        Feature::Stress(s) => tk.extra.stress = Some(*s),
                        Feature::Phonemes(ps) => {
                            tk.extra.is_head = i == 0;
                            tk.phonemes = Some(if i == 0 { ps.clone() } else { String::new() });
                            tk.extra.rating = Some(5);
                        }
                        Feature::NumFlags(f) => tk.extra.num_flags = f.clone(),
                    }
                }
            }
        }
        // fold_left
        let mut folded: Vec<Token> = Vec::with_capacity(tokens.len());
        for tk in tokens {
            if !tk.extra.is_head {
                if let Some(prev) = folded.pop() {
                    folded.push(merge_tokens(&[prev, tk], Some("")));
                    continue;
                }
            }
            folded.push(tk);
        }
        folded
    }

    /// Whether out-of-lexicon words have a reader.
    pub fn has_fallback(&self) -> bool {
        self.fallback.is_some()
    }

    fn fallback(&self, word: &str) -> Result<Option<String>, G2pError> {
        match &self.fallback {
            Some(f) => f.phonemize(word),
            None => Ok(None),
        }
    }

    /// misaki's `G2P.__call__` with Kokoro's `unk=''`: the phoneme string and the word tokens.
    pub fn phonemize(&self, text: &str) -> Result<(String, Vec<Token>), G2pError> {
        let tokens = self.tokens(text);
        let mut words = retokenize(tokens);
        let mut ctx = TokenContext::default();
        for w in words.iter_mut().rev() {
            match w {
                Word::Single(tk) => {
                    if tk.phonemes.is_none() {
                        let (ps, rating) = self.lexicon.read(tk, &ctx);
                        tk.phonemes = ps;
                        tk.extra.rating = rating;
                    }
                    if tk.phonemes.is_none() {
                        if let Some(ps) = self.fallback(&tk.text)? {
                            tk.phonemes = Some(ps);
                            tk.extra.rating = Some(2);
                        }
                    }
                    ctx = token_context(ctx, tk.phonemes.as_deref(), tk);
                }
                Word::Group(group) => {
                    let (mut left, mut right) = (0usize, group.len());
                    let mut should_fallback = false;
                    while left < right {
                        let blocked = group[left..right].iter().any(|t| t.extra.alias.is_some() || t.phonemes.is_some());
                        let merged = if blocked { None } else { Some(merge_tokens(&group[left..right], None)) };
                        let (ps, rating) = match &merged {
                            Some(tk) => self.lexicon.read(tk, &ctx),
                            None => (None, None),
                        };
                        if let (Some(ps), Some(tk)) = (ps, merged.as_ref()) {
                            group[left].phonemes = Some(ps.clone());
                            group[left].extra.rating = rating;
                            for x in &mut group[left + 1..right] {
                                x.phonemes = Some(String::new());
                            }
                            ctx = token_context(ctx, Some(&ps), tk);
                            right = left;
                            left = 0;
                        } else if left + 1 < right {
                            left += 1;
                        } else {
                            right -= 1;
                            let tk = &mut group[right];
                            if tk.phonemes.is_none() {
                                if tk.text.chars().all(|c| SUBTOKEN_JUNKS.contains(c)) {
                                    tk.phonemes = Some(String::new());
                                    tk.extra.rating = Some(3);
                                } else if self.fallback.is_some() {
                                    should_fallback = true;
                                    break;
                                }
                            }
                            left = 0;
                        }
                    }
                    if should_fallback {
                        let merged = merge_tokens(group, None);
                        let ps = self.fallback(&merged.text)?;
                        let rating = ps.as_ref().map(|_| 2);
                        group[0].phonemes = ps;
                        group[0].extra.rating = rating;
                        for x in group.iter_mut().skip(1) {
                            x.phonemes = Some(String::new());
                            x.extra.rating = rating;
                        }
                    } else {
                        resolve_tokens(group);
                    }
                }
            }
        }
        let mut out: Vec<Token> = words
            .into_iter()
            .map(|w| match w {
                Word::Single(tk) => tk,
                Word::Group(g) => merge_tokens(&g, Some("")),
            })
            .collect();
        let mut joined = String::new();
        for tk in &mut out {
            if let Some(ps) = tk.phonemes.as_mut() {
                if ps.contains(['ɾ', 'ʔ']) {
                    *ps = ps.replace('ɾ', "T").replace('ʔ', "t");
                }
            }
            joined.push_str(tk.phonemes.as_deref().unwrap_or(""));
            joined.push_str(&tk.whitespace);
        }
        Ok((joined, out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subtokens_split_like_misaki() {
        assert_eq!(subtokenize("well-known"), vec!["well", "-", "known"]);
        assert_eq!(subtokenize("iPhone"), vec!["i", "Phone"]);
        assert_eq!(subtokenize("don't"), vec!["don't"]);
        assert_eq!(subtokenize("3.14"), vec!["3.14"]);
        assert_eq!(subtokenize("NASAs"), vec!["NASAs"]);
        // the fast path agrees with the pattern on plain words
        for w in ["hello", "Hello", "A", "x", "Zebra"] {
            let by_pattern: Vec<String> = subtoken_regex().find_iter(w).filter_map(|m| m.ok()).map(|m| m.as_str().to_string()).collect();
            assert_eq!(subtokenize(w), by_pattern);
        }
    }

    #[test]
    fn overrides_parse_like_misaki() {
        let p = preprocess("[Kokoro](/kˈOkəɹO/) says [hi](+2) [5](#a#)");
        assert_eq!(p.text, "Kokoro says hi 5");
        assert_eq!(p.features.get(&0), Some(&Feature::Phonemes("kˈOkəɹO".into())));
        assert_eq!(p.features.get(&2), Some(&Feature::Stress(2.0)));
        assert_eq!(p.features.get(&3), Some(&Feature::NumFlags("a".into())));
    }
}

#[cfg(test)]
mod heteronym_tests {
    use super::*;

    fn word_phonemes(g2p: &EnglishG2p, text: &str, word: &str) -> String {
        let (_, tokens) = g2p.phonemize(text).expect("phonemize");
        tokens.into_iter().find(|t| t.text == word).and_then(|t| t.phonemes).unwrap_or_default()
    }

    /// The context rule picks the reading a reader would: a wrong tag gives the other one.
    #[test]
    fn heteronyms_follow_their_context() {
        let g2p = EnglishG2p::new(false, None).expect("lexicon");
        assert_eq!(word_phonemes(&g2p, "Can you record this?", "record"), "ɹəkˈɔɹd");
        assert_eq!(word_phonemes(&g2p, "The record shows it.", "record"), "ɹˈɛkəɹd");
        assert_eq!(word_phonemes(&g2p, "They live here.", "live"), "lˈɪv");
        assert_eq!(word_phonemes(&g2p, "A live show.", "live"), "lˈIv");
        assert_eq!(word_phonemes(&g2p, "She has read it.", "read"), "ɹˈɛd");
        assert_eq!(word_phonemes(&g2p, "Please read it.", "read"), "ɹˈid");
        assert_eq!(word_phonemes(&g2p, "I used to go.", "used"), "jˈust");
        assert_eq!(word_phonemes(&g2p, "The used car.", "used"), "jˈuzd");
    }

    #[test]
    fn overrides_and_numbers_read_out() {
        let g2p = EnglishG2p::new(false, None).expect("lexicon");
        let (ps, _) = g2p.phonemize("[Kokoro](/kˈOkəɹO/) costs $5.50.").expect("ok");
        assert_eq!(ps, "kˈOkəɹO kˈɔsts fˈIv dˈɑləɹz ænd fˈɪfti sˈɛnts.");
        let (ps, _) = g2p.phonemize("In 1984, the 3rd one.").expect("ok");
        assert!(ps.contains("nˌIntˈin ˈATi fˈɔɹ"), "{ps}"); // misaki 0.9.4 reads it so
        assert!(ps.contains("θˈɜɹd"), "{ps}");
    }
}
