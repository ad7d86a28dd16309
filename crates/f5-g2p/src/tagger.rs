//! Tokenisation and tags in place of spaCy's `en_core_web_sm`.
//!
//! misaki reads spaCy's tokens and Penn-Treebank tags. The tags it acts on are few: punctuation
//! classes (`.` `,` `:` quotes, brackets, `$`), `CD`, `NNP` (names and acronyms), `DT`, `IN`,
//! `TO`, `PRP`, the adverb class for "by", `VBD`/`JJ` for "used", and the NOUN/VERB/ADJ/VBD…
//! keys of the 790 POS-conditioned (heteronym) lexicon entries. This module splits text the way
//! spaCy's English tokenizer does for ordinary prose (whitespace, then leading/trailing
//! punctuation, dashes between words) and assigns those tags by rule:
//!
//! * punctuation by character; numbers `CD`; a closed list of function words (determiners,
//!   possessives, pronouns, prepositions, modals, auxiliaries);
//! * capitalised words after the first word of a sentence, and all-capital words of two or more
//!   letters, `NNP`;
//! * **heteronyms** (words whose gold entry is POS-conditioned) from the word before them: after
//!   a determiner, possessive, preposition or number → noun (`NN`); after "to", a modal, "do"
//!   forms or "not" → verb (`VB`); after a subject pronoun → present verb (`VBP`); after
//!   have/has/had → past participle (`VBN`); after a form of "be" → adjective (`JJ`) where the
//!   entry has one, else `VBN`; otherwise no tag the entry knows, so its `DEFAULT` reading.

use crate::lexicon::Lexicon;
use crate::token::Token;

const DETERMINERS: &[&str] =
    &["a", "an", "the", "this", "these", "those", "every", "each", "some", "any", "no", "another", "all", "both", "either", "neither"];
const POSSESSIVES: &[&str] = &["my", "your", "his", "her", "its", "our", "their"];
const SUBJECT_PRONOUNS: &[&str] = &["i", "you", "he", "she", "it", "we", "they"];
const OBJECT_PRONOUNS: &[&str] = &["me", "him", "us", "them"];
const PREPOSITIONS: &[&str] = &[
    "of", "in", "on", "at", "by", "for", "with", "from", "into", "onto", "about", "over", "under", "after", "before", "between", "through",
    "during", "without", "within", "against", "among", "upon", "across", "behind", "beyond", "near", "since", "until", "than", "because",
    "if", "whether", "although", "though", "while", "as", "like", "per", "via", "vs", "vs.",
];
const MODALS: &[&str] = &["will", "would", "can", "could", "shall", "should", "may", "might", "must", "'ll", "'d"];
const DO_FORMS: &[&str] = &[
    "do",
    "does",
    "did",
    "don't",
    "doesn't",
    "didn't",
    "not",
    "never",
    "let",
    "please",
    "won't",
    "can't",
    "cannot",
    "couldn't",
    "wouldn't",
    "shouldn't",
];
const HAVE_FORMS: &[&str] = &["have", "has", "had", "'ve", "having"];
const BE_FORMS: &[&str] =
    &["be", "is", "am", "are", "was", "were", "been", "being", "'s", "'re", "'m", "seems", "seemed", "become", "became", "get", "got"];
const CONJUNCTIONS: &[&str] = &["and", "or", "but", "nor", "yet"];

/// Characters split off the front of a word.
const PREFIX_PUNCT: &str = "\"'“‘([{«¿¡$£€#*";
/// Characters split off the end of a word.
const SUFFIX_PUNCT: &str = "\"'”’)]}».,;:!?…*%";

struct Piece {
    text: String,
    /// A hyphen, slash or plus split from inside a word ("x-ray", "a/b", "3+4").
    infix: bool,
    whitespace: bool,
}

/// Split `text` into spaCy-like tokens and tag them.
pub(crate) fn tokenize(text: &str, lexicon: &Lexicon) -> Vec<Token> {
    let pieces = split(text);
    tag(&pieces, lexicon)
}

fn split(text: &str) -> Vec<Piece> {
    let mut pieces = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let chunk_end = rest.find(char::is_whitespace).unwrap_or(rest.len());
        let chunk = &rest[..chunk_end];
        let after = &rest[chunk_end..];
        let ws_len = after.len() - after.trim_start().len();
        split_chunk(chunk, &mut pieces);
        if ws_len > 0 {
            if let Some(last) = pieces.last_mut() {
                last.whitespace = true;
            }
        }
        rest = &after[ws_len..];
    }
    pieces
}

fn punct(text: &str) -> Piece {
    Piece { text: text.to_string(), infix: false, whitespace: false }
}

fn word_piece(text: &str) -> Piece {
    Piece { text: text.to_string(), infix: false, whitespace: false }
}

fn infix_piece(text: &str) -> Piece {
    Piece { text: text.to_string(), infix: true, whitespace: false }
}

fn is_quote(c: char) -> bool {
    matches!(c, '"' | '\'' | '“' | '”' | '‘' | '’')
}

/// spaCy's English tokenizer exceptions that end in a period (case-sensitive).
const PERIOD_EXCEPTIONS: &[&str] = &[
    "Adm.", "Ak.", "Ala.", "Apr.", "Ariz.", "Ark.", "Aug.", "Bros.", "Calif.", "Co.", "Colo.", "Conn.", "Corp.", "D.C.", "Dec.", "Del.",
    "Dr.", "E.G.", "E.g.", "Feb.", "Fla.", "Ga.", "Gen.", "Gov.", "I.E.", "I.e.", "Ia.", "Id.", "Ill.", "Inc.", "Ind.", "Jan.", "Jr.",
    "Jul.", "Jun.", "Kan.", "Kans.", "Ky.", "La.", "Ltd.", "Mar.", "Mass.", "Md.", "Messrs.", "Mich.", "Minn.", "Miss.", "Mo.", "Mont.",
    "Mr.", "Mrs.", "Ms.", "Mt.", "N.C.", "N.D.", "N.H.", "N.J.", "N.M.", "N.Y.", "Neb.", "Nebr.", "Nev.", "Nov.", "Oct.", "Okla.", "Ore.",
    "Pa.", "Ph.D.", "Prof.", "Rep.", "Rev.", "S.C.", "Sen.", "Sep.", "Sept.", "St.", "Tenn.", "Va.", "Wash.", "Wis.", "a.m.", "co.",
    "e.g.", "i.e.", "p.m.", "v.s.", "vs.",
];

/// Whether a trailing '.' stays on the word, as spaCy decides: its exceptions (plus any single
/// lower-case letter, "a."), else the period is split off only after a digit, a lower-case
/// letter, `%²-+`, punctuation or a quote, or after two capitals ("NASA." splits; "U.S.",
/// "A.", "SpaceX." do not).
fn keeps_period(word: &str) -> bool {
    if PERIOD_EXCEPTIONS.contains(&word) {
        return true;
    }
    let stem = &word[..word.len() - 1];
    let mut rev = stem.chars().rev();
    let (Some(prev), prev2) = (rev.next(), rev.next()) else {
        return false;
    };
    if stem.chars().count() == 1 && prev.is_lowercase() {
        return true;
    }
    let splits = prev.is_ascii_digit()
        || prev.is_lowercase()
        || "%²-+".contains(prev)
        || (!prev.is_alphanumeric() && !prev.is_whitespace())
        || (prev.is_uppercase() && prev2.is_some_and(char::is_uppercase));
    !splits
}

fn split_chunk(chunk: &str, out: &mut Vec<Piece>) {
    let mut word = chunk;
    // leading punctuation, one character at a time
    while let Some(c) = word.chars().next() {
        if !PREFIX_PUNCT.contains(c) || word.chars().count() == 1 && !is_quote(c) && c != '$' {
            break;
        }
        let rest = &word[c.len_utf8()..];
        if (c == '\'' || c == '‘' || c == '’') && keeps_leading_apostrophe(rest) {
            break;
        }
        if c == '.' {
            break;
        }
        out.push(punct(&word[..c.len_utf8()]));
        word = rest;
    }
    // trailing punctuation, collected from the end
    let mut tail: Vec<Piece> = Vec::new();
    loop {
        if word.ends_with("...") && word.len() > 3 {
            tail.push(punct("..."));
            word = &word[..word.len() - 3];
            continue;
        }
        let Some(c) = word.chars().next_back() else {
            break;
        };
        if !SUFFIX_PUNCT.contains(c) || word.chars().count() == 1 {
            break;
        }
        let head = &word[..word.len() - c.len_utf8()];
        if c == '.' && keeps_period(word) {
            break;
        }
        tail.push(punct(&word[word.len() - c.len_utf8()..]));
        word = head;
    }
    if !word.is_empty() {
        split_word(word, out);
    }
    out.extend(tail.into_iter().rev());
}

/// "'em": an apostrophe that starts a word rather than a quotation.
fn keeps_leading_apostrophe(rest: &str) -> bool {
    let lower = rest.to_lowercase();
    let core = lower.trim_end_matches(|c: char| !c.is_alphanumeric());
    // spaCy's exceptions keep "'em" whole; any other leading apostrophe is split off
    core == "em"
}

/// spaCy's contraction, unit and infix splits of a word without surrounding punctuation.
fn split_word(word: &str, out: &mut Vec<Piece>) {
    let lower = word.to_lowercase();
    // "cannot", "gonna", "gotta", "wanna" are split by spaCy's exceptions
    let ascii = word.is_ascii();
    if ascii && lower == "cannot" {
        out.push(word_piece(&word[..3]));
        out.push(word_piece(&word[3..]));
        return;
    }
    if ascii && ["gonna", "gotta", "wanna"].contains(&lower.as_str()) {
        out.push(word_piece(&word[..3]));
        out.push(word_piece(&word[3..]));
        return;
    }
    // clitics: "do|n't", "it|'s", "I|'m", "we|'ll", "they|'ve", "you|'re", "I|'d"
    let normalized = word.replace('’', "'");
    for clitic in ["n't", "'s", "'m", "'re", "'ve", "'ll", "'d"] {
        if let Some(stem) = normalized.strip_suffix(clitic) {
            if !stem.is_empty() && stem.chars().all(char::is_alphabetic) {
                let cut = word.char_indices().nth(stem.chars().count()).map_or(word.len(), |(i, _)| i);
                out.push(word_piece(&word[..cut]));
                out.push(word_piece(&word[cut..]));
                return;
            }
        }
    }
    // a number glued to a unit: "10km", "5pm"
    if let Some(pos) = word.find(|c: char| !c.is_ascii_digit()) {
        if pos > 0 && UNITS.contains(&word[pos..].to_lowercase().as_str()) {
            out.push(word_piece(&word[..pos]));
            out.push(word_piece(&word[pos..]));
            return;
        }
    }
    split_infixes(word, out);
}

const UNITS: &[&str] = &[
    "km", "m", "cm", "mm", "kg", "g", "mg", "lb", "lbs", "am", "pm", "h", "hr", "hrs", "min", "ms", "mph", "kph", "ft", "mi", "gb", "mb",
    "kb", "tb", "ghz", "mhz", "khz", "hz", "kw", "mw", "w", "v", "ml", "l", "oz", "yd", "yds", "sec", "secs", "mins",
];

/// spaCy's infixes: dashes anywhere inside a word, a hyphen between letters or between digits,
/// a slash before a letter, a plus between digits.
fn split_infixes(word: &str, out: &mut Vec<Piece>) {
    let chars: Vec<(usize, char)> = word.char_indices().collect();
    let mut start = 0usize;
    let mut k = 0usize;
    while k < chars.len() {
        let (i, c) = chars[k];
        let prev = if k > 0 { Some(chars[k - 1].1) } else { None };
        let next = chars.get(k + 1).map(|&(_, c)| c);
        let between = |left: fn(char) -> bool, right: fn(char) -> bool| prev.is_some_and(left) && next.is_some_and(right);
        let digit = |c: char| c.is_ascii_digit();
        let infix = match c {
            '-' => between(char::is_alphabetic, char::is_alphabetic) || between(digit, digit),
            '/' => between(char::is_alphanumeric, char::is_alphabetic),
            '+' => between(digit, digit),
            _ => false,
        };
        let len = if k == 0 {
            0
        } else if c == '—' || c == '–' {
            c.len_utf8()
        } else if c == '-' && next == Some('-') {
            2
        } else if infix {
            1
        } else {
            0
        };
        if len == 0 || i + len >= word.len() {
            k += 1;
            continue;
        }
        if i > start {
            out.push(word_piece(&word[start..i]));
        }
        out.push(if infix { infix_piece(&word[i..i + len]) } else { punct(&word[i..i + len]) });
        start = i + len;
        k += if len == 2 { 2 } else { 1 };
    }
    if start < word.len() {
        out.push(word_piece(&word[start..]));
    }
}

fn punct_tag(text: &str, opening: bool) -> &'static str {
    match text {
        "." | "!" | "?" => ".",
        "," => ",",
        ";" | ":" | "—" | "–" | "--" | "-" | "..." | "…" => ":",
        "(" | "[" | "{" => "-LRB-",
        ")" | "]" | "}" => "-RRB-",
        "“" | "‘" | "«" => "``",
        "”" | "’" | "»" => "''",
        "\"" | "'" => {
            if opening {
                "``"
            } else {
                "''"
            }
        }
        "$" | "£" | "€" => "$",
        "%" => "NN",
        "#" => "#",
        _ => "NFP",
    }
}

fn is_number_word(text: &str) -> bool {
    let t = text.trim_start_matches(['-', '.']);
    t.starts_with(|c: char| c.is_ascii_digit())
}

fn lower_is(list: &[&str], word: &str) -> bool {
    list.contains(&word)
}

/// The coarse class of a word for the heteronym rule.
fn function_tag(lower: &str) -> Option<&'static str> {
    if lower == "to" {
        Some("TO")
    } else if lower_is(DETERMINERS, lower) {
        Some("DT")
    } else if lower_is(POSSESSIVES, lower) {
        Some("PRP$")
    } else if lower_is(SUBJECT_PRONOUNS, lower) || lower_is(OBJECT_PRONOUNS, lower) {
        Some("PRP")
    } else if lower_is(PREPOSITIONS, lower) {
        Some("IN")
    } else if lower_is(MODALS, lower) {
        Some("MD")
    } else if lower_is(CONJUNCTIONS, lower) {
        Some("CC")
    } else if lower == "not" || lower == "n't" || lower == "never" {
        Some("RB")
    } else {
        None
    }
}

/// Token texts that are punctuation for tagging (spaCy's punctuation tokens).
const PUNCT_TEXTS: &[&str] = &[
    ".", "!", "?", ",", ";", ":", "—", "–", "--", "-", "...", "…", "(", "[", "{", ")", "]", "}", "“", "‘", "«", "”", "’", "»", "\"", "'",
    "$", "£", "€", "#", "%", "*", "¿", "¡",
];

fn is_punct_text(text: &str) -> bool {
    PUNCT_TEXTS.contains(&text)
}

fn tag(pieces: &[Piece], lexicon: &Lexicon) -> Vec<Token> {
    let mut tokens: Vec<Token> = Vec::with_capacity(pieces.len());
    let mut sentence_start = true;
    let mut open_single_quote = false;
    let mut prev_word: Option<String> = None;
    let mut prev_tag: Option<String> = None;
    for (i, piece) in pieces.iter().enumerate() {
        let ws = if piece.whitespace { " " } else { "" };
        if piece.infix {
            let t = if piece.text == "-" { "HYPH" } else { "SYM" };
            tokens.push(Token::new(&piece.text, t, ws));
            continue;
        }
        let prev_piece = i.checked_sub(1).map(|k| &pieces[k]);
        let glued_to_word = prev_piece.is_some_and(|p| !p.whitespace && !is_punct_text(&p.text));
        if matches!(piece.text.as_str(), "'" | "’")
            && glued_to_word
            && !open_single_quote
            && prev_piece.is_some_and(|p| p.text.ends_with(['s', 'S']))
        {
            // the plural possessive "students'"
            tokens.push(Token::new(&piece.text, "POS", ws));
            continue;
        }
        if is_punct_text(&piece.text) {
            // a quote opens at the start, after a space, or after an opening bracket or quote
            let opening = match (prev_piece, tokens.last()) {
                (None, _) | (_, None) => true,
                (Some(p), Some(last)) => p.whitespace || last.tag == "``" || last.tag == "-LRB-",
            };
            let t = punct_tag(&piece.text, opening);
            if matches!(piece.text.as_str(), "'" | "‘" | "’") {
                open_single_quote = t == "``";
            }
            if t == "." {
                sentence_start = true;
            }
            if t != "``" && t != "-LRB-" {
                prev_word = None;
                prev_tag = Some(t.to_string());
            }
            tokens.push(Token::new(&piece.text, t, ws));
            continue;
        }
        let text = piece.text.as_str();
        let lower = text.to_lowercase();
        let clitic = lower.replace('’', "'");
        let t: String = if is_number_word(text) {
            "CD".to_string()
        } else if text == "I" {
            "PRP".to_string()
        } else if text == "&" {
            "CC".to_string()
        } else if glued_to_word && clitic == "'s" {
            "POS".to_string()
        } else if glued_to_word && ["'m", "'re", "'ve"].contains(&clitic.as_str()) {
            "VBP".to_string()
        } else if lower == "that" {
            let next_is_end = pieces.get(i + 1).is_none_or(|p| matches!(p.text.as_str(), "." | "!" | "?"));
            if sentence_start || next_is_end {
                "DT".to_string()
            } else {
                "IN".to_string()
            }
        } else if lower == "used" {
            match prev_word.as_deref() {
                Some(p) if lower_is(BE_FORMS, p) => "VBN".to_string(),
                Some(p) if lower_is(DETERMINERS, p) || lower_is(POSSESSIVES, p) => "JJ".to_string(),
                _ => "VBD".to_string(),
            }
        } else if let Some(f) = function_tag(&clitic) {
            if f == "DT" && text.chars().all(|c| c.is_uppercase()) && text.chars().count() > 1 {
                "NNP".to_string()
            } else {
                f.to_string()
            }
        } else if lexicon.is_heteronym(&lower) && !is_proper(text, sentence_start, lexicon) {
            heteronym_tag(&lower, prev_word.as_deref(), prev_tag.as_deref(), lexicon)
        } else if is_proper(text, sentence_start, lexicon) {
            "NNP".to_string()
        } else {
            "NN".to_string()
        };
        sentence_start = false;
        prev_word = Some(lower);
        prev_tag = Some(t.clone());
        tokens.push(Token::new(text, &t, ws));
    }
    tokens
}

/// Names and acronyms: all capitals (two or more letters), or capitalised away from the start
/// of a sentence, or capitalised at the start and unknown in lower case.
fn is_proper(text: &str, sentence_start: bool, lexicon: &Lexicon) -> bool {
    let letters: Vec<char> = text.chars().filter(|c| c.is_alphabetic()).collect();
    if letters.len() >= 2 && letters.iter().all(|c| c.is_uppercase()) {
        return true;
    }
    let Some(first) = text.chars().next() else {
        return false;
    };
    if !first.is_uppercase() {
        return false;
    }
    if !sentence_start {
        return true;
    }
    !lexicon.is_common_word(&text.to_lowercase())
}

fn heteronym_tag(word: &str, prev_word: Option<&str>, prev_tag: Option<&str>, lexicon: &Lexicon) -> String {
    let Some(prev) = prev_word else {
        return "_".to_string();
    };
    let tag = match prev_tag.unwrap_or("") {
        "DT" | "PRP$" | "IN" | "CD" => "NN",
        "TO" | "MD" | "RB" => "VB",
        "PRP" if lower_is(SUBJECT_PRONOUNS, prev) => "VBP",
        _ if lower_is(DO_FORMS, prev) => "VB",
        _ if lower_is(HAVE_FORMS, prev) => "VBN",
        _ if lower_is(BE_FORMS, prev) => {
            if lexicon.heteronym_has(word, "ADJ") {
                "JJ"
            } else {
                "VBN"
            }
        }
        _ if prev.ends_with("'s") => "NN",
        _ => "_",
    };
    tag.to_string()
}
