//! A port of `pypinyin.lazy_pinyin(text, style=Style.TONE3, tone_sandhi=True)`
//! (pypinyin 0.55.0), the call the reference makes for Chinese segments.
//!
//! What it reproduces:
//! * the split of the input into runs of "hans" characters (pypinyin's
//!   `RE_HANS`) and other characters; other runs come back unchanged, as one
//!   item per run;
//! * the forward maximum match over the phrase dictionary in its strict form
//!   (`no_non_phrases=True`), including its habit of emitting every remaining
//!   character on its own when the rest of the run is only a phrase prefix;
//! * the first dictionary reading of each character or phrase character;
//! * the tone-sandhi rules of `ToneSandhiMixin`, applied per matched word, in
//!   their order (third tone, then 不, then 一) and with their literal string
//!   edits;
//! * the TONE3 spelling (digit at the end, neutral tone without a digit, `ü`
//!   written `v`).
//!
//! The syllable spellings and the effect of every sandhi edit on them are
//! precomputed by `tools/gen_pinyin_table.py` with pypinyin itself, so this
//! module only walks tables.

use std::collections::HashMap;
use std::sync::OnceLock;

use crate::TextError;

static TABLE_ZLIB: &[u8] = include_bytes!("../data/pinyin-table.zlib");
/// The decompressed table is about 0.8 MiB; the bound only guards against a
/// corrupt blob inflating without end.
const MAX_TABLE_BYTES: usize = 16 * 1024 * 1024;

/// Indices into [`Syllable::moves`], in the order the generator writes them.
const ROUND_TRIP: usize = 0;
const THREE_TO_TWO: usize = 1;
const FOUR_TO_TWO: usize = 2;
const DIGITS_TO_FOUR: usize = 3;
const DIGITS_TO_ONE: usize = 4;

#[derive(Debug)]
struct Syllable {
    tone3: Box<str>,
    /// `'3' in tone_to_tone2(syllable)`
    has_three: bool,
    /// `'4' in tone_to_tone2(syllable)`
    has_four: bool,
    /// The syllable each sandhi edit turns this one into.
    moves: [u16; 5],
}

#[derive(Debug)]
struct Phrase {
    text: Box<str>,
    /// (character position, syllable) where the phrase reading differs from
    /// the character's own first reading.
    overrides: Box<[(u16, u16)]>,
}

#[derive(Debug)]
struct PinyinTable {
    syllables: Vec<Syllable>,
    first_reading: HashMap<char, u16>,
    /// Sorted by text in code-point order, which is also byte order, so a
    /// binary search finds both exact phrases and phrase prefixes.
    phrases: Vec<Phrase>,
}

/// One item of pypinyin's per-word reading list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reading {
    Syllable(u16),
    /// A hans character without a dictionary reading; pypinyin keeps the
    /// character itself, and no sandhi edit can change it.
    Literal(char),
}

fn table() -> Result<&'static PinyinTable, TextError> {
    static TABLE: OnceLock<Result<PinyinTable, String>> = OnceLock::new();
    TABLE.get_or_init(|| parse_table(TABLE_ZLIB)).as_ref().map_err(|message| TextError::PinyinTable(message.clone()))
}

fn parse_table(compressed: &[u8]) -> Result<PinyinTable, String> {
    let bytes = miniz_oxide::inflate::decompress_to_vec_zlib_with_limit(compressed, MAX_TABLE_BYTES)
        .map_err(|e| format!("cannot inflate: {e:?}"))?;
    let text = std::str::from_utf8(&bytes).map_err(|e| format!("not UTF-8: {e}"))?;
    let mut lines = text.lines();
    let mut next_line = |what: &str| lines.next().ok_or_else(|| format!("ends before {what}"));

    if next_line("the header")? != "f5-pinyin-table 1" {
        return Err("unknown header".into());
    }
    next_line("the pypinyin version")?;

    let state_count = section_count(next_line("the states")?, "states")?;
    let mut syllables = Vec::with_capacity(state_count.min(1 << 16));
    for _ in 0..state_count {
        let line = next_line("a state")?;
        let mut fields = line.split('\t');
        let (Some(tone3), Some(flags), Some(moves), None) = (fields.next(), fields.next(), fields.next(), fields.next()) else {
            return Err(format!("bad state line {line:?}"));
        };
        let flags: u8 = flags.parse().map_err(|_| format!("bad flags in {line:?}"))?;
        let mut parsed = [0u16; 5];
        let mut move_fields = moves.split(' ');
        for slot in parsed.iter_mut() {
            *slot = parse_state(move_fields.next(), state_count, line)?;
        }
        if move_fields.next().is_some() {
            return Err(format!("too many moves in {line:?}"));
        }
        syllables.push(Syllable { tone3: tone3.into(), has_three: flags & 1 != 0, has_four: flags & 2 != 0, moves: parsed });
    }

    let char_count = section_count(next_line("the characters")?, "chars")?;
    let mut first_reading = HashMap::with_capacity(char_count.min(1 << 20));
    let mut code_point: u32 = 0;
    for _ in 0..char_count {
        let line = next_line("a character")?;
        let (delta, state) = line.split_once('\t').ok_or_else(|| format!("bad character line {line:?}"))?;
        let delta: u32 = delta.parse().map_err(|_| format!("bad delta in {line:?}"))?;
        code_point = code_point.checked_add(delta).ok_or_else(|| format!("code point overflow at {line:?}"))?;
        let c = char::from_u32(code_point).ok_or_else(|| format!("invalid code point {code_point}"))?;
        first_reading.insert(c, parse_state(Some(state), state_count, line)?);
    }

    let phrase_count = section_count(next_line("the phrases")?, "phrases")?;
    let mut phrases: Vec<Phrase> = Vec::with_capacity(phrase_count.min(1 << 20));
    for _ in 0..phrase_count {
        let line = next_line("a phrase")?;
        let (phrase, overrides) = line.split_once('\t').unwrap_or((line, ""));
        let length = phrase.chars().count();
        let mut parsed = Vec::new();
        for item in overrides.split(' ').filter(|item| !item.is_empty()) {
            let (position, state) = item.split_once('=').ok_or_else(|| format!("bad override in {line:?}"))?;
            let position: u16 = position.parse().map_err(|_| format!("bad position in {line:?}"))?;
            if usize::from(position) >= length {
                return Err(format!("override past the end of {line:?}"));
            }
            parsed.push((position, parse_state(Some(state), state_count, line)?));
        }
        for (position, c) in phrase.chars().enumerate() {
            if !first_reading.contains_key(&c) && !parsed.iter().any(|&(p, _)| usize::from(p) == position) {
                return Err(format!("no reading for {c:?} in phrase {phrase:?}"));
            }
        }
        if let Some(previous) = phrases.last() {
            if *previous.text >= *phrase {
                return Err(format!("phrases out of order at {phrase:?}"));
            }
        }
        phrases.push(Phrase { text: phrase.into(), overrides: parsed.into_boxed_slice() });
    }
    if next_line("the end marker")? != "end" {
        return Err("missing end marker".into());
    }
    Ok(PinyinTable { syllables, first_reading, phrases })
}

fn section_count(line: &str, name: &str) -> Result<usize, String> {
    line.strip_prefix(name)
        .and_then(|rest| rest.strip_prefix(' '))
        .and_then(|count| count.parse().ok())
        .ok_or_else(|| format!("expected the {name} section, found {line:?}"))
}

fn parse_state(field: Option<&str>, state_count: usize, line: &str) -> Result<u16, String> {
    field
        .and_then(|f| f.parse::<u16>().ok())
        .filter(|&state| usize::from(state) < state_count)
        .ok_or_else(|| format!("bad state index in {line:?}"))
}

/// pypinyin's `RE_HANS` character class (the UCS-4 build). Its ranges
/// U+300F7..U+31288, U+30EDD and U+30EDE lie inside U+30000..U+3134A and are
/// left out here.
fn is_hans(c: char) -> bool {
    matches!(c,
        '\u{3007}'
        | '\u{e815}'..='\u{e864}'
        | '\u{fa18}'
        | '\u{3400}'..='\u{4dbf}'
        | '\u{4e00}'..='\u{9fff}'
        | '\u{f900}'..='\u{faff}'
        | '\u{20000}'..='\u{2a6df}'
        | '\u{2a703}'..='\u{2b73f}'
        | '\u{2b740}'..='\u{2b81d}'
        | '\u{2b825}'..='\u{2bf6e}'
        | '\u{2c029}'..='\u{2ce93}'
        | '\u{2d016}'
        | '\u{2d11b}'..='\u{2ebd9}'
        | '\u{2f80a}'..='\u{2fa1f}'
        | '\u{30000}'..='\u{3134a}'
        | '\u{31350}'..='\u{32389}'
    )
}

/// `lazy_pinyin(text, style=Style.TONE3, tone_sandhi=True)`.
///
/// Returns one item per hans character and one item per run of other
/// characters (the run itself), e.g. `"银行，好"` → `["yin2", "hang2", "，", "hao3"]`.
pub fn lazy_pinyin_tone3(text: &str) -> Result<Vec<String>, TextError> {
    let table = table()?;
    let mut items = Vec::new();
    for (run, hans) in runs_by_hans(text) {
        if !hans {
            items.push(run.to_owned());
            continue;
        }
        for word in table.cut(run) {
            let mut readings = table.readings(word);
            table.third_tone(&mut readings);
            table.bu_yi(word, '不', DIGITS_TO_FOUR, &mut readings);
            table.bu_yi(word, '一', DIGITS_TO_ONE, &mut readings);
            items.extend(readings.iter().map(|&reading| table.tone3(reading)));
        }
    }
    Ok(items)
}

/// `simpleseg._seg`: maximal runs of hans and of non-hans characters.
fn runs_by_hans(text: &str) -> Vec<(&str, bool)> {
    let mut runs = Vec::new();
    let mut start = 0;
    let mut current: Option<bool> = None;
    for (index, c) in text.char_indices() {
        let hans = is_hans(c);
        match current {
            Some(kind) if kind != hans => {
                runs.push((&text[start..index], kind));
                start = index;
            }
            _ => {}
        }
        current = Some(hans);
    }
    if let Some(kind) = current {
        runs.push((&text[start..], kind));
    }
    runs
}

impl PinyinTable {
    fn phrase_index(&self, word: &str) -> Result<usize, usize> {
        self.phrases.binary_search_by(|phrase| (*phrase.text).cmp(word))
    }

    fn is_phrase(&self, word: &str) -> bool {
        self.phrase_index(word).is_ok()
    }

    /// Whether some phrase starts with `word` (pypinyin's `PrefixSet`).
    fn is_phrase_prefix(&self, word: &str) -> bool {
        let index = match self.phrase_index(word) {
            Ok(_) => return true,
            Err(index) => index,
        };
        self.phrases.get(index).is_some_and(|phrase| phrase.text.starts_with(word))
    }

    /// `mmseg.Seg(no_non_phrases=True).cut`, step for step.
    fn cut<'a>(&self, text: &'a str) -> Vec<&'a str> {
        let mut words = Vec::new();
        let mut remain = text;
        'outer: while !remain.is_empty() {
            let mut last_valid_end = None;
            for (index, c) in remain.char_indices() {
                let end = index + c.len_utf8();
                let word = &remain[..end];
                if self.is_phrase_prefix(word) {
                    if self.is_phrase(word) {
                        last_valid_end = Some(end);
                    }
                    continue;
                }
                let taken = last_valid_end.unwrap_or_else(|| first_char_len(remain));
                words.push(&remain[..taken]);
                remain = &remain[taken..];
                continue 'outer;
            }
            // The whole remainder is a phrase prefix.
            match last_valid_end {
                Some(end) => {
                    words.push(&remain[..end]);
                    remain = &remain[end..];
                }
                None => {
                    words.extend(remain.char_indices().map(|(i, c)| &remain[i..i + c.len_utf8()]));
                    remain = "";
                }
            }
        }
        words
    }

    /// `_phrase_pinyin`: the phrase reading when the word is a phrase, else the
    /// first reading of each character.
    fn readings(&self, word: &str) -> Vec<Reading> {
        let per_char = |c: char| self.first_reading.get(&c).map_or(Reading::Literal(c), |&s| Reading::Syllable(s));
        let mut readings: Vec<Reading> = word.chars().map(per_char).collect();
        if let Ok(index) = self.phrase_index(word) {
            if let Some(phrase) = self.phrases.get(index) {
                for &(position, state) in phrase.overrides.iter() {
                    if let Some(slot) = readings.get_mut(usize::from(position)) {
                        *slot = Reading::Syllable(state);
                    }
                }
            }
        }
        readings
    }

    fn syllable(&self, state: u16) -> Option<&Syllable> {
        self.syllables.get(usize::from(state))
    }

    fn has_three(&self, reading: Reading) -> bool {
        matches!(reading, Reading::Syllable(s) if self.syllable(s).is_some_and(|s| s.has_three))
    }

    fn has_four(&self, reading: Reading) -> bool {
        matches!(reading, Reading::Syllable(s) if self.syllable(s).is_some_and(|s| s.has_four))
    }

    fn apply(&self, reading: Reading, edit: usize) -> Reading {
        match reading {
            Reading::Syllable(state) => {
                self.syllable(state).and_then(|s| s.moves.get(edit)).map_or(reading, |&next| Reading::Syllable(next))
            }
            Reading::Literal(_) => reading,
        }
    }

    fn tone3(&self, reading: Reading) -> String {
        match reading {
            Reading::Syllable(state) => self.syllable(state).map_or_else(String::new, |s| s.tone3.to_string()),
            Reading::Literal(c) => c.to_string(),
        }
    }

    /// `ToneSandhiMixin._third_tone`. Only the length of the TRAILING run of
    /// third tones decides what happens, and the edits then go to the first
    /// third tones of the whole word — pypinyin's rule, kept as it is.
    fn third_tone(&self, readings: &mut [Reading]) {
        if !readings.iter().any(|&r| self.has_three(r)) {
            return;
        }
        let trailing_threes = readings.iter().rev().take_while(|&&r| self.has_three(r)).count();
        let to_change = match trailing_threes {
            0 | 1 => return,
            2 => 1,
            n => n - 1,
        };
        let mut changed = 0;
        let mut edits = vec![ROUND_TRIP; readings.len()];
        for (reading, edit) in readings.iter().zip(edits.iter_mut()) {
            if changed == to_change {
                break;
            }
            if self.has_three(*reading) {
                *edit = THREE_TO_TWO;
                changed += 1;
            }
        }
        for (reading, edit) in readings.iter_mut().zip(edits) {
            *reading = self.apply(*reading, edit);
        }
    }

    /// `ToneSandhiMixin._bu` (`marker` 不, `final_edit` digits → 4) and `_yi`
    /// (`marker` 一, `final_edit` digits → 1): before a syllable whose TONE2
    /// spelling has a 4 the marker's 4 becomes 2; before anything else its
    /// digits become 4; at the end of the word its digits become `final_edit`.
    /// When the word contains the marker, every syllable goes through the
    /// TONE2 round trip.
    fn bu_yi(&self, word: &str, marker: char, final_edit: usize, readings: &mut [Reading]) {
        if !word.contains(marker) {
            return;
        }
        let original: Vec<Reading> = readings.to_vec();
        let chars: Vec<char> = word.chars().collect();
        for (index, reading) in readings.iter_mut().enumerate() {
            let edit = if chars.get(index) != Some(&marker) {
                ROUND_TRIP
            } else if index + 1 < chars.len() {
                match original.get(index + 1) {
                    Some(&next) if self.has_four(next) => FOUR_TO_TWO,
                    _ => DIGITS_TO_FOUR,
                }
            } else {
                final_edit
            };
            *reading = self.apply(original.get(index).copied().unwrap_or(*reading), edit);
        }
    }
}

fn first_char_len(text: &str) -> usize {
    text.chars().next().map_or(0, char::len_utf8)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn py(text: &str) -> Vec<String> {
        lazy_pinyin_tone3(text).expect("embedded table decodes")
    }

    #[test]
    fn table_decodes() {
        let table = table().expect("embedded table decodes");
        assert!(table.syllables.len() > 1000);
        assert!(table.first_reading.len() > 40_000);
        assert!(table.phrases.len() > 40_000);
    }

    #[test]
    fn non_hans_runs_come_back_whole() {
        assert_eq!(py("，。"), vec!["，。"]);
        assert_eq!(py("好，。好"), vec!["hao3", "，。", "hao3"]);
    }
}
