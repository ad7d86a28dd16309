//! misaki's English lexicon and its word rules (misaki 0.9.4 `en.Lexicon`): gold then silver
//! dictionaries, POS-conditioned entries, capitalisation stress, the -s/-ed/-ing stemmers,
//! acronyms spelled letter by letter, symbols and numbers read out. The data are misaki's own
//! JSON lexicons (Apache-2.0), shipped zlib-compressed.

use std::collections::HashMap;

use crate::num2words;
use crate::pystr::{self, is_alpha, is_ascii_digits, is_lower_form, is_upper_form, lower, upper};
use crate::token::Token;
use crate::G2pError;

pub(crate) const PRIMARY_STRESS: char = 'ˈ';
pub(crate) const SECONDARY_STRESS: char = 'ˌ';
const VOWELS: &str = "AIOQWYaiuæɑɒɔəɛɜɪʊʌᵻ";
const US_TAUS: &str = "AIOWYiuæɑəɛɪɹʊʌ";
const DIPHTHONGS: &str = "AIOQWYʤʧ";
pub(crate) const CONSONANTS: &str = "bdfhjklmnpstvwzðŋɡɹɾʃʒʤʧθ";
const ORDINALS: [&str; 4] = ["st", "nd", "rd", "th"];

pub(crate) fn is_vowel(c: char) -> bool {
    VOWELS.contains(c)
}

static US_GOLD: &[u8] = include_bytes!("../data/us_gold.json.zlib");
static US_SILVER: &[u8] = include_bytes!("../data/us_silver.json.zlib");
static GB_GOLD: &[u8] = include_bytes!("../data/gb_gold.json.zlib");
static GB_SILVER: &[u8] = include_bytes!("../data/gb_silver.json.zlib");
/// The largest lexicon is 3.7 MB of JSON; the limit only stops a corrupt stream.
const MAX_LEXICON_BYTES: usize = 64 << 20;

/// misaki's stress weight: diphthongs and affricates count double.
pub(crate) fn stress_weight(ps: &str) -> usize {
    ps.chars().map(|c| if DIPHTHONGS.contains(c) { 2 } else { 1 }).sum()
}

/// `CURRENCIES`: symbol → (unit, sub-unit).
pub(crate) fn currency_units(symbol: &str) -> Option<(&'static str, &'static str)> {
    match symbol {
        "$" => Some(("dollar", "cent")),
        "£" => Some(("pound", "pence")),
        "€" => Some(("euro", "cent")),
        _ => None,
    }
}

fn symbol_word(word: &str) -> Option<&'static str> {
    match word {
        "%" => Some("percent"),
        "&" => Some("and"),
        "+" => Some("plus"),
        "@" => Some("at"),
        _ => None,
    }
}

fn in_lexicon_ords(c: char) -> bool {
    c == '\'' || c == '-' || c.is_ascii_alphabetic()
}

/// The right-hand side of the token being read, as misaki passes it leftwards: whether the next
/// word starts with a vowel (`None` at a clause end) and whether it is "to".
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct TokenContext {
    pub future_vowel: Option<bool>,
    pub future_to: bool,
}

/// A lexicon value: a pronunciation, or pronunciations by POS (`DEFAULT` always present; a
/// `None` value means "not this word for that tag").
#[derive(Debug, Clone)]
enum Entry {
    Plain(String),
    Tagged(Vec<(String, Option<String>)>),
}

impl Entry {
    fn from_json(value: serde_json::Value) -> Option<Entry> {
        match value {
            serde_json::Value::String(s) => Some(Entry::Plain(s)),
            serde_json::Value::Object(map) => {
                Some(Entry::Tagged(map.into_iter().map(|(k, v)| (k, v.as_str().map(str::to_string))).collect()))
            }
            _ => None,
        }
    }
    fn tag(&self, tag: &str) -> Option<Option<&str>> {
        match self {
            Entry::Plain(_) => None,
            Entry::Tagged(pairs) => pairs.iter().find(|(k, _)| k == tag).map(|(_, v)| v.as_deref()),
        }
    }
    fn has_tag(&self, tag: &str) -> bool {
        self.tag(tag).is_some()
    }
}

type Dict = HashMap<String, Entry>;

fn load_dict(compressed: &[u8], name: &'static str) -> Result<Dict, G2pError> {
    let bytes = miniz_oxide::inflate::decompress_to_vec_zlib_with_limit(compressed, MAX_LEXICON_BYTES)
        .map_err(|e| G2pError::Lexicon { name, reason: format!("{e:?}") })?;
    let raw: HashMap<String, serde_json::Value> =
        serde_json::from_slice(&bytes).map_err(|e| G2pError::Lexicon { name, reason: e.to_string() })?;
    let mut dict: Dict = HashMap::with_capacity(raw.len() * 2);
    for (k, v) in raw {
        if let Some(entry) = Entry::from_json(v) {
            dict.insert(k, entry);
        }
    }
    Ok(grow_dictionary(dict))
}

/// `Lexicon.grow_dictionary`: lower-case keys also answer capitalised, capitalised keys also
/// answer lower-case; the original keys win.
fn grow_dictionary(dict: Dict) -> Dict {
    let mut extra: Vec<(String, Entry)> = Vec::new();
    for (k, v) in &dict {
        if pystr::len(k) < 2 {
            continue;
        }
        if is_lower_form(k) {
            let cap = pystr::capitalize(k);
            if *k != cap {
                extra.push((cap, v.clone()));
            }
        } else if *k == pystr::capitalize(&lower(k)) {
            extra.push((lower(k), v.clone()));
        }
    }
    let mut grown = dict;
    for (k, v) in extra {
        grown.entry(k).or_insert(v);
    }
    grown
}

/// `apply_stress(ps, stress)`.
pub(crate) fn apply_stress(ps: &str, stress: Option<f64>) -> String {
    let Some(stress) = stress else {
        return ps.to_string();
    };
    let has_primary = ps.contains(PRIMARY_STRESS);
    let has_any = has_primary || ps.contains(SECONDARY_STRESS);
    if stress < -1.0 {
        ps.replace([PRIMARY_STRESS, SECONDARY_STRESS], "")
    } else if stress == -1.0 || ((stress == 0.0 || stress == -0.5) && has_primary) {
        ps.replace(SECONDARY_STRESS, "").replace(PRIMARY_STRESS, &SECONDARY_STRESS.to_string())
    } else if (stress == 0.0 || stress == 0.5 || stress == 1.0) && !has_any {
        if !ps.chars().any(is_vowel) {
            return ps.to_string();
        }
        restress(ps, SECONDARY_STRESS)
    } else if stress >= 1.0 && !has_primary && ps.contains(SECONDARY_STRESS) {
        ps.replace(SECONDARY_STRESS, &PRIMARY_STRESS.to_string())
    } else if stress > 1.0 && !has_any {
        if !ps.chars().any(is_vowel) {
            return ps.to_string();
        }
        restress(ps, PRIMARY_STRESS)
    } else {
        ps.to_string()
    }
}

/// misaki's `restress(mark + ps)` for a string without stress marks: the mark moves to just
/// before the first vowel.
fn restress(ps: &str, mark: char) -> String {
    let mut out = String::with_capacity(ps.len() + 2);
    let mut placed = false;
    for c in ps.chars() {
        if !placed && is_vowel(c) {
            out.push(mark);
            placed = true;
        }
        out.push(c);
    }
    out
}

/// Python's `tag.startswith(...)` family: `Lexicon.get_parent_tag`.
fn parent_tag(tag: &str) -> &str {
    if tag.starts_with("VB") {
        "VERB"
    } else if tag.starts_with("NN") {
        "NOUN"
    } else if tag.starts_with("ADV") || tag.starts_with("RB") {
        "ADV"
    } else if tag.starts_with("ADJ") || tag.starts_with("JJ") {
        "ADJ"
    } else {
        tag
    }
}

pub(crate) type Found = (Option<String>, Option<u8>);

/// One English variant's lexicon (en-US or en-GB).
pub struct Lexicon {
    british: bool,
    golds: Dict,
    silvers: Dict,
}

impl Lexicon {
    /// Decompress and index misaki's gold and silver lexicons for one variant (about 0.3 s).
    pub fn new(british: bool) -> Result<Lexicon, G2pError> {
        let (gold, silver) = if british { (GB_GOLD, GB_SILVER) } else { (US_GOLD, US_SILVER) };
        Ok(Lexicon {
            british,
            golds: load_dict(gold, if british { "gb_gold" } else { "us_gold" })?,
            silvers: load_dict(silver, if british { "gb_silver" } else { "us_silver" })?,
        })
    }

    /// Whether the gold lexicon's entry for `word` is POS-conditioned (a heteronym).
    pub(crate) fn is_heteronym(&self, word: &str) -> bool {
        matches!(self.golds.get(word), Some(Entry::Tagged(_)))
    }

    /// Whether the POS-conditioned gold entry for `word` has a reading for `tag`.
    pub(crate) fn heteronym_has(&self, word: &str, tag: &str) -> bool {
        self.golds.get(word).is_some_and(|e| e.has_tag(tag))
    }

    /// Whether `word` (lower case) is an ordinary dictionary word.
    pub(crate) fn is_common_word(&self, word: &str) -> bool {
        self.golds.contains_key(word) || self.silvers.contains_key(word)
    }

    fn gold_plain(&self, word: &str) -> Option<String> {
        match self.golds.get(word)? {
            Entry::Plain(s) => Some(s.clone()),
            Entry::Tagged(_) => None,
        }
    }

    fn gold_tagged(&self, word: &str, tag: &str) -> Option<String> {
        self.golds.get(word)?.tag(tag).flatten().map(str::to_string)
    }

    fn get_nnp(&self, word: &str) -> Found {
        let mut joined = String::new();
        for c in word.chars().filter(|c| c.is_alphabetic()) {
            let key: String = c.to_uppercase().collect();
            match self.golds.get(&key) {
                Some(Entry::Plain(s)) => joined.push_str(s),
                Some(Entry::Tagged(_)) | None => return (None, None),
            }
        }
        let ps = apply_stress(&joined, Some(0.0));
        let ps = match ps.rfind(SECONDARY_STRESS) {
            Some(i) => format!("{}{}{}", &ps[..i], PRIMARY_STRESS, &ps[i + SECONDARY_STRESS.len_utf8()..]),
            None => ps,
        };
        (Some(ps), Some(3))
    }

    fn get_special_case(&self, word: &str, tag: &str, stress: Option<f64>, ctx: &TokenContext) -> Found {
        if tag == "ADD" && (word == "." || word == "/") {
            let w = if word == "." { "dot" } else { "slash" };
            return self.lookup(w, None, Some(-0.5), Some(ctx));
        }
        if let Some(w) = symbol_word(word) {
            return self.lookup(w, None, None, Some(ctx));
        }
        let inner = word.trim_matches('.');
        if inner.contains('.') && is_alpha(&word.replace('.', "")) && word.split('.').map(pystr::len).max().unwrap_or(0) < 3 {
            return self.get_nnp(word);
        }
        match word {
            "a" | "A" => {
                let ps = if tag == "DT" { "ɐ" } else { "ˈA" };
                return (Some(ps.to_string()), Some(4));
            }
            "am" | "Am" | "AM" => {
                if tag.starts_with("NN") {
                    return self.get_nnp(word);
                }
                if ctx.future_vowel.is_none() || word != "am" || stress.is_some_and(|s| s != 0.0 && s > 0.0) {
                    return (self.gold_plain("am"), Some(4));
                }
                return (Some("ɐm".to_string()), Some(4));
            }
            "an" | "An" | "AN" => {
                if word == "AN" && tag.starts_with("NN") {
                    return self.get_nnp(word);
                }
                return (Some("ɐn".to_string()), Some(4));
            }
            "I" if tag == "PRP" => return (Some(format!("{SECONDARY_STRESS}I")), Some(4)),
            "by" | "By" | "BY" if parent_tag(tag) == "ADV" => return (Some("bˈI".to_string()), Some(4)),
            _ => {}
        }
        if word == "to" || word == "To" || (word == "TO" && (tag == "TO" || tag == "IN")) {
            let ps = match ctx.future_vowel {
                None => self.gold_plain("to"),
                Some(false) => Some("tə".to_string()),
                Some(true) => Some("tʊ".to_string()),
            };
            return (ps, Some(4));
        }
        if word == "in" || word == "In" || (word == "IN" && tag != "NNP") {
            let mark = if ctx.future_vowel.is_none() || tag != "IN" { PRIMARY_STRESS.to_string() } else { String::new() };
            return (Some(format!("{mark}ɪn")), Some(4));
        }
        if word == "the" || word == "The" || (word == "THE" && tag == "DT") {
            let ps = if ctx.future_vowel == Some(true) { "ði" } else { "ðə" };
            return (Some(ps.to_string()), Some(4));
        }
        if tag == "IN" && (word.eq_ignore_ascii_case("vs") || word.eq_ignore_ascii_case("vs.")) {
            return self.lookup("versus", None, None, Some(ctx));
        }
        if word == "used" || word == "Used" || word == "USED" {
            let key = if (tag == "VBD" || tag == "JJ") && ctx.future_to { "VBD" } else { "DEFAULT" };
            return (self.gold_tagged("used", key), Some(4));
        }
        (None, None)
    }

    fn is_known(&self, word: &str) -> bool {
        if self.golds.contains_key(word) || symbol_word(word).is_some() || self.silvers.contains_key(word) {
            return true;
        }
        if !is_alpha(word) || !word.chars().all(in_lexicon_ords) {
            return false;
        }
        if pystr::len(word) == 1 {
            return true;
        }
        if is_upper_form(word) && self.golds.contains_key(&lower(word)) {
            return true;
        }
        let rest = pystr::skip(word, 1);
        rest == upper(rest)
    }

    pub(crate) fn lookup(&self, word: &str, tag: Option<&str>, stress: Option<f64>, ctx: Option<&TokenContext>) -> Found {
        let mut word = word.to_string();
        let mut is_nnp = false;
        if is_upper_form(&word) && !self.golds.contains_key(&word) {
            word = lower(&word);
            is_nnp = tag == Some("NNP");
        }
        let mut rating = 4;
        let mut entry = self.golds.get(&word);
        if entry.is_none() && !is_nnp {
            entry = self.silvers.get(&word);
            rating = 3;
        }
        let ps: Option<String> = match entry {
            None => None,
            Some(Entry::Plain(s)) => Some(s.clone()),
            Some(e @ Entry::Tagged(_)) => {
                let key: String = if ctx.is_some_and(|c| c.future_vowel.is_none()) && e.has_tag("None") {
                    "None".to_string()
                } else {
                    match tag {
                        Some(t) if e.has_tag(t) => t.to_string(),
                        Some(t) => parent_tag(t).to_string(),
                        None => String::new(),
                    }
                };
                match e.tag(&key) {
                    Some(v) => v.map(str::to_string),
                    None => e.tag("DEFAULT").flatten().map(str::to_string),
                }
            }
        };
        if ps.is_none() || (is_nnp && !ps.as_deref().unwrap_or("").contains(PRIMARY_STRESS)) {
            let (nnp, nnp_rating) = self.get_nnp(&word);
            if nnp.is_some() {
                return (nnp, nnp_rating);
            }
        }
        match ps {
            Some(ps) => (Some(apply_stress(&ps, stress)), Some(rating)),
            None => (None, Some(rating)),
        }
    }

    fn suffix_s(&self, stem: &str) -> Option<String> {
        let last = pystr::last_char(stem)?;
        Some(if "ptkfθ".contains(last) {
            format!("{stem}s")
        } else if "szʃʒʧʤ".contains(last) {
            format!("{stem}{}z", if self.british { 'ɪ' } else { 'ᵻ' })
        } else {
            format!("{stem}z")
        })
    }

    pub(crate) fn stem_s(&self, word: &str, tag: Option<&str>, stress: Option<f64>, ctx: Option<&TokenContext>) -> Found {
        let n = pystr::len(word);
        if n < 3 || !word.ends_with('s') {
            return (None, None);
        }
        let stem = if !word.ends_with("ss") && self.is_known(pystr::drop_last(word, 1)) {
            pystr::drop_last(word, 1).to_string()
        } else if (word.ends_with("'s") || (n > 4 && word.ends_with("es") && !word.ends_with("ies")))
            && self.is_known(pystr::drop_last(word, 2))
        {
            pystr::drop_last(word, 2).to_string()
        } else if n > 4 && word.ends_with("ies") && self.is_known(&format!("{}y", pystr::drop_last(word, 3))) {
            format!("{}y", pystr::drop_last(word, 3))
        } else {
            return (None, None);
        };
        let (ps, rating) = self.lookup(&stem, tag, stress, ctx);
        (ps.and_then(|p| self.suffix_s(&p)), rating)
    }

    fn suffix_ed(&self, stem: &str) -> Option<String> {
        let last = pystr::last_char(stem)?;
        let weak = if self.british { 'ɪ' } else { 'ᵻ' };
        Some(if "pkfθʃsʧ".contains(last) {
            format!("{stem}t")
        } else if last == 'd' {
            format!("{stem}{weak}d")
        } else if last != 't' {
            format!("{stem}d")
        } else if self.british || pystr::len(stem) < 2 {
            format!("{stem}ɪd")
        } else if pystr::nth_from_end(stem, 2).is_some_and(|c| US_TAUS.contains(c)) {
            format!("{}ɾᵻd", pystr::drop_last(stem, 1))
        } else {
            format!("{stem}ᵻd")
        })
    }

    fn stem_ed(&self, word: &str, tag: Option<&str>, stress: Option<f64>, ctx: Option<&TokenContext>) -> Found {
        let n = pystr::len(word);
        if n < 4 || !word.ends_with('d') {
            return (None, None);
        }
        let stem = if !word.ends_with("dd") && self.is_known(pystr::drop_last(word, 1)) {
            pystr::drop_last(word, 1).to_string()
        } else if n > 4 && word.ends_with("ed") && !word.ends_with("eed") && self.is_known(pystr::drop_last(word, 2)) {
            pystr::drop_last(word, 2).to_string()
        } else {
            return (None, None);
        };
        let (ps, rating) = self.lookup(&stem, tag, stress, ctx);
        (ps.and_then(|p| self.suffix_ed(&p)), rating)
    }

    fn suffix_ing(&self, stem: &str) -> Option<String> {
        let last = pystr::last_char(stem)?;
        if self.british {
            if last == 'ə' || last == 'ː' {
                return None;
            }
        } else if pystr::len(stem) > 1 && last == 't' && pystr::nth_from_end(stem, 2).is_some_and(|c| US_TAUS.contains(c)) {
            return Some(format!("{}ɾɪŋ", pystr::drop_last(stem, 1)));
        }
        Some(format!("{stem}ɪŋ"))
    }

    fn stem_ing(&self, word: &str, tag: Option<&str>, stress: Option<f64>, ctx: Option<&TokenContext>) -> Found {
        let n = pystr::len(word);
        if n < 5 || !word.ends_with("ing") {
            return (None, None);
        }
        let base = pystr::drop_last(word, 3);
        let stem = if n > 5 && self.is_known(base) {
            base.to_string()
        } else if self.is_known(&format!("{base}e")) {
            format!("{base}e")
        } else if n > 5 && doubled_consonant_ing(word) && self.is_known(pystr::drop_last(word, 4)) {
            pystr::drop_last(word, 4).to_string()
        } else {
            return (None, None);
        };
        let (ps, rating) = self.lookup(&stem, tag, stress, ctx);
        (ps.and_then(|p| self.suffix_ing(&p)), rating)
    }

    fn get_word(&self, word: &str, tag: &str, stress: Option<f64>, ctx: &TokenContext) -> Found {
        let special = self.get_special_case(word, tag, stress, ctx);
        if special.0.is_some() {
            return special;
        }
        let wl = lower(word);
        let mut word = word.to_string();
        if pystr::len(&word) > 1
            && is_alpha(&word.replace('\'', ""))
            && word != wl
            && (tag != "NNP" || pystr::len(&word) > 7)
            && !self.golds.contains_key(&word)
            && !self.silvers.contains_key(&word)
            && (is_upper_form(&word) || {
                let rest = pystr::skip(&word, 1);
                rest == lower(rest)
            })
            && (self.golds.contains_key(&wl)
                || self.silvers.contains_key(&wl)
                || self.stem_s(&wl, Some(tag), stress, Some(ctx)).0.is_some()
                || self.stem_ed(&wl, Some(tag), stress, Some(ctx)).0.is_some()
                || self.stem_ing(&wl, Some(tag), stress, Some(ctx)).0.is_some())
        {
            word = wl;
        }
        if self.is_known(&word) {
            return self.lookup(&word, Some(tag), stress, Some(ctx));
        }
        if let Some(stem) = word.strip_suffix("s'") {
            let possessive = format!("{stem}'s");
            if self.is_known(&possessive) {
                return self.lookup(&possessive, Some(tag), stress, Some(ctx));
            }
        }
        if let Some(stem) = word.strip_suffix('\'') {
            if self.is_known(stem) {
                return self.lookup(stem, Some(tag), stress, Some(ctx));
            }
        }
        let s = self.stem_s(&word, Some(tag), stress, Some(ctx));
        if s.0.is_some() {
            return s;
        }
        let ed = self.stem_ed(&word, Some(tag), stress, Some(ctx));
        if ed.0.is_some() {
            return ed;
        }
        let ing = self.stem_ing(&word, Some(tag), Some(stress.unwrap_or(0.5)), Some(ctx));
        if ing.0.is_some() {
            return ing;
        }
        (None, None)
    }

    fn is_currency(word: &str) -> bool {
        if !word.contains('.') {
            return true;
        }
        if word.matches('.').count() > 1 {
            return false;
        }
        let cents = word.split('.').nth(1).unwrap_or("");
        // misaki compares the digit set with {0} (an int), which never matches a str set.
        pystr::len(cents) < 3
    }

    fn get_number(&self, word: &str, currency: Option<&str>, is_head: bool, num_flags: &str) -> Found {
        self.number_words(word, currency, is_head, num_flags).unwrap_or((None, None))
    }

    /// `get_number`; `None` where a part is too large for num2words or not a number.
    fn number_words(&self, word: &str, currency: Option<&str>, is_head: bool, num_flags: &str) -> Option<Found> {
        let suffix_start = word.char_indices().rev().take_while(|(_, c)| c.is_ascii_lowercase() || *c == '\'').last().map(|(i, _)| i);
        let (mut word, suffix) = match suffix_start {
            Some(i) => (&word[..i], Some(&word[i..])),
            None => (word, None),
        };
        let mut result: Vec<(String, u8)> = Vec::new();
        if let Some(rest) = word.strip_prefix('-') {
            push_found(&mut result, self.lookup("minus", None, None, None));
            word = rest;
        }
        let currency_units = currency.and_then(currency_units);
        let is_ordinal = suffix.is_some_and(|s| ORDINALS.contains(&s));
        if is_ascii_digits(word) && is_ordinal {
            let n = parse_int(word)?;
            let text = num2words::ordinal(n)?;
            self.extend_num(&mut result, &text, true, num_flags);
        } else if result.is_empty() && pystr::len(word) == 4 && currency_units.is_none() && is_ascii_digits(word) {
            let text = num2words::year(parse_int(word)?)?;
            self.extend_num(&mut result, &text, true, num_flags);
        } else if !is_head && !word.contains('.') {
            let num = word.replace(',', "");
            let digits: Vec<char> = num.chars().collect();
            if digits.first() == Some(&'0') || digits.len() > 3 {
                for d in &digits {
                    self.extend_digits(&mut result, &d.to_string(), false, num_flags)?;
                }
            } else if digits.len() == 3 && !num.ends_with("00") {
                self.extend_digits(&mut result, &digits[0].to_string(), true, num_flags)?;
                if digits[1] == '0' {
                    push_found(&mut result, self.lookup("O", None, Some(-2.0), None));
                    self.extend_digits(&mut result, &digits[2].to_string(), false, num_flags)?;
                } else {
                    let tail: String = digits[1..].iter().collect();
                    self.extend_digits(&mut result, &tail, false, num_flags)?;
                }
            } else {
                self.extend_digits(&mut result, &num, true, num_flags)?;
            }
        } else if word.matches('.').count() > 1 || !is_head {
            let mut first = true;
            for num in word.replace(',', "").split('.') {
                if num.is_empty() {
                } else if num.starts_with('0') || (pystr::len(num) != 2 && pystr::skip(num, 1).chars().any(|c| c != '0')) {
                    for d in num.chars() {
                        self.extend_digits(&mut result, &d.to_string(), false, num_flags)?;
                    }
                } else {
                    self.extend_digits(&mut result, num, first, num_flags)?;
                }
                first = false;
            }
        } else if let (Some((unit, sub)), true) = (currency_units, Lexicon::is_currency(word)) {
            let plain = word.replace(',', "");
            let mut pairs: Vec<(u128, &str)> = Vec::new();
            for (part, name) in plain.split('.').zip([unit, sub]) {
                let n = if part.is_empty() { 0 } else { parse_int(part)? };
                pairs.push((n, name));
            }
            if pairs.len() > 1 {
                if pairs[1].0 == 0 {
                    pairs.truncate(1);
                } else if pairs[0].0 == 0 {
                    pairs.remove(0);
                }
            }
            for (i, (num, name)) in pairs.iter().enumerate() {
                if i > 0 {
                    push_found(&mut result, self.lookup("and", None, None, None));
                }
                let text = num2words::cardinal(*num)?;
                self.extend_num(&mut result, &text, i == 0, num_flags);
                let unit_found = if *num != 1 && *name != "pence" {
                    self.stem_s(&format!("{name}s"), None, None, None)
                } else {
                    self.lookup(name, None, None, None)
                };
                push_found(&mut result, unit_found);
            }
        } else {
            let text = if is_ascii_digits(word) {
                num2words::cardinal(parse_int(word)?)?
            } else if !word.contains('.') {
                let n = parse_int(&word.replace(',', ""))?;
                if is_ordinal {
                    num2words::ordinal(n)?
                } else {
                    num2words::cardinal(n)?
                }
            } else {
                let plain = word.replace(',', "");
                if let Some(frac) = plain.strip_prefix('.') {
                    let mut t = "point".to_string();
                    for d in frac.chars() {
                        t.push(' ');
                        t.push_str(&num2words::cardinal(u128::from(d.to_digit(10)?))?);
                    }
                    t
                } else {
                    num2words::float_literal(&plain)?
                }
            };
            self.extend_num(&mut result, &text, true, num_flags);
        }
        if result.is_empty() {
            return Some((None, None));
        }
        let joined = result.iter().map(|(p, _)| p.as_str()).collect::<Vec<_>>().join(" ");
        let rating = result.iter().map(|(_, r)| *r).min();
        let ps = match suffix {
            Some("s") | Some("'s") => self.suffix_s(&joined),
            Some("ed") | Some("'d") => self.suffix_ed(&joined),
            Some("ing") => self.suffix_ing(&joined),
            _ => Some(joined),
        };
        Some((ps, rating))
    }

    /// `extend_num(num)` without `escape`: the digits are first read by num2words.
    fn extend_digits(&self, result: &mut Vec<(String, u8)>, digits: &str, first: bool, num_flags: &str) -> Option<()> {
        let text = num2words::cardinal(parse_int(digits)?)?;
        self.extend_num(result, &text, first, num_flags);
        Some(())
    }

    /// `extend_num(words, escape=True)`: look up each word of num2words' output.
    fn extend_num(&self, result: &mut Vec<(String, u8)>, text: &str, first: bool, flags: &str) {
        let splits: Vec<&str> = split_non_letters(text);
        for (i, w) in splits.iter().enumerate() {
            if *w != "and" || flags.contains('&') {
                if first && i == 0 && splits.len() > 1 && *w == "one" && flags.contains('a') {
                    result.push(("ə".to_string(), 4));
                } else {
                    let stress = if *w == "point" { Some(-2.0) } else { None };
                    push_found(result, self.lookup(w, None, stress, None));
                }
            } else if *w == "and" && flags.contains('n') {
                if let Some(last) = result.last_mut() {
                    last.0.push_str("ən");
                }
            }
        }
    }

    fn append_currency(&self, ps: String, currency: Option<&str>) -> String {
        let Some(currency) = currency else {
            return ps;
        };
        match currency_units(currency) {
            Some((unit, _)) => match self.stem_s(&format!("{unit}s"), None, None, None).0 {
                Some(units) => format!("{ps} {units}"),
                None => ps,
            },
            None => ps,
        }
    }

    fn is_number(word: &str, is_head: bool) -> bool {
        if !word.chars().any(|c| c.is_ascii_digit()) {
            return false;
        }
        let mut stem = word;
        for s in ["ing", "'d", "ed", "'s", "st", "nd", "rd", "th", "s"] {
            if let Some(rest) = word.strip_suffix(s) {
                stem = rest;
                break;
            }
        }
        stem.chars().enumerate().all(|(i, c)| c.is_ascii_digit() || c == ',' || c == '.' || (is_head && i == 0 && c == '-'))
    }

    /// `Lexicon.__call__`: phonemes and rating for a token in context, `(None, None)` when the
    /// lexicon cannot read it.
    pub(crate) fn read(&self, tk: &Token, ctx: &TokenContext) -> Found {
        let source = tk.extra.alias.as_deref().unwrap_or(&tk.text);
        let replaced = source.replace(['\u{2018}', '\u{2019}'], "'");
        let word: String = unicode_normalization::UnicodeNormalization::nfkc(replaced.as_str()).map(ascii_digit_if_numeric).collect();
        let stress = if is_lower_form(&word) {
            None
        } else if is_upper_form(&word) {
            Some(2.0)
        } else {
            Some(0.5)
        };
        let (ps, rating) = self.get_word(&word, &tk.tag, stress, ctx);
        if let Some(ps) = ps {
            let ps = self.append_currency(ps, tk.extra.currency.as_deref());
            return (Some(apply_stress(&ps, tk.extra.stress)), rating);
        }
        if Lexicon::is_number(&word, tk.extra.is_head) {
            let (ps, rating) = self.get_number(&word, tk.extra.currency.as_deref(), tk.extra.is_head, &tk.extra.num_flags);
            return (ps.map(|p| apply_stress(&p, tk.extra.stress)), rating);
        }
        (None, None)
    }
}

/// `Lexicon.numeric_if_needed`: a non-ASCII decimal digit becomes its ASCII digit.
fn ascii_digit_if_numeric(c: char) -> char {
    if c.is_ascii_digit() || !c.is_numeric() {
        return c;
    }
    match c.to_digit(10) {
        Some(d) => char::from_digit(d, 10).unwrap_or(c),
        None => c,
    }
}

fn push_found(result: &mut Vec<(String, u8)>, found: Found) {
    // misaki appends the (phonemes, rating) pair as it is; a missing word would make its join
    // fail, so such a word is left out here.
    if let (Some(ps), Some(r)) = found {
        result.push((ps, r));
    }
}

fn parse_int(s: &str) -> Option<u128> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// `re.split(r'[^a-z]+', text)`: a leading or trailing separator run yields an empty piece.
fn split_non_letters(text: &str) -> Vec<&str> {
    let mut pieces = Vec::new();
    let mut start = 0usize;
    let mut in_sep = false;
    for (i, c) in text.char_indices() {
        let letter = c.is_ascii_lowercase();
        if !letter && !in_sep {
            pieces.push(&text[start..i]);
            in_sep = true;
        } else if letter && in_sep {
            start = i;
            in_sep = false;
        }
    }
    pieces.push(if in_sep { "" } else { &text[start..] });
    pieces
}

/// `re.search(r'([bcdgklmnprstvxz])\1ing$|cking$', word)`.
fn doubled_consonant_ing(word: &str) -> bool {
    if word.ends_with("cking") {
        return true;
    }
    let Some(stem) = word.strip_suffix("ing") else {
        return false;
    };
    let mut rev = stem.chars().rev();
    match (rev.next(), rev.next()) {
        (Some(a), Some(b)) => a == b && "bcdgklmnprstvxz".contains(a),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stress_rules_follow_misaki() {
        assert_eq!(apply_stress("ɹˈid", Some(-1.0)), "ɹˌid");
        assert_eq!(apply_stress("ɹid", Some(2.0)), "ɹˈid");
        assert_eq!(apply_stress("ɹid", Some(0.5)), "ɹˌid");
        assert_eq!(apply_stress("ɹˈid", Some(-2.0)), "ɹid");
        assert_eq!(apply_stress("ɹˌid", Some(2.0)), "ɹˈid");
    }

    #[test]
    fn split_keeps_python_edges() {
        assert_eq!(split_non_letters("twenty-one"), vec!["twenty", "one"]);
        assert_eq!(split_non_letters("one, two"), vec!["one", "two"]);
    }
}
