//! Text normalisation shared by the reference text and the transcript.
//!
//! Both sides go through the same steps so that only what was *said* differs:
//! square-bracket annotations (`[BLANK_AUDIO]`, `[music]`) are dropped, full-width
//! ASCII is folded, everything is lower-cased, apostrophes join (`don't` → `dont`),
//! other punctuation separates words, CJK characters become one word each, and
//! numbers written in digits are spelt out by a [`Language`].
//!
//! A number can be said in more than one way ("1999" as "one thousand nine hundred
//! ninety nine" or "nineteen ninety nine"). The normaliser keeps every spelling the
//! language offers; [`crate::score`] then uses, for each number, the spelling that
//! the other side actually contains, so neither way of saying it counts as an error.

/// A number as written in the text, handed to a [`Language`] to be spelt out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WrittenNumber<'a> {
    /// The integer digits with any thousands separators removed, e.g. `"1000"` for `1,000`.
    pub integer: &'a str,
    /// Whether the integer was written with thousands separators (`1,000`): such a number is never a year.
    pub grouped: bool,
    /// Digits after a decimal point, if any (`"14"` for `3.14`).
    pub fraction: Option<&'a str>,
    /// Letters glued to the digits (`"st"` in `21st`), lower-cased; the language decides whether
    /// they make an ordinal or are a word of their own.
    pub suffix: Option<&'a str>,
}

/// How a number was spelt: the spellings, most usual first, and whether the suffix was consumed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spelling {
    /// Each alternative is a list of words; the first is the canonical one.
    pub alternatives: Vec<Vec<String>>,
    /// `true` when the suffix was part of the number (an ordinal ending), so it is not a word of its own.
    pub suffix_used: bool,
}

/// The language-specific part of normalisation: how digits and a few symbols are said.
///
/// The transcriber may write a number in words or in digits, and the text may too; spelling
/// digits out on both sides is what makes "21" and "twenty-one" the same two words.
pub trait Language: Send + Sync {
    /// Spellings of a written number, or `None` to keep the digits as a word (the right thing
    /// for a language whose number words are not known here: transcribers write digits too).
    fn spell_number(&self, number: &WrittenNumber<'_>) -> Option<Spelling>;

    /// The word a symbol is read as (`%` → "percent"), or `None` to treat it as punctuation.
    fn symbol_word(&self, symbol: char) -> Option<&'static str>;
}

/// English: cardinals, British "and" forms, year readings and ordinals.
#[derive(Debug, Clone, Copy, Default)]
pub struct English;

/// Any language whose number words are not known: digits stay digits, symbols are punctuation.
#[derive(Debug, Clone, Copy, Default)]
pub struct PassThrough;

/// The [`Language`] for a transcriber language code: English for `None`, `"en"` or `"auto"`
/// (whisper.cpp's server defaults to English), the pass-through for anything else.
pub fn language_for(code: Option<&str>) -> &'static dyn Language {
    match code.map(|c| c.trim().to_ascii_lowercase()) {
        None => &English,
        Some(c) if c.is_empty() || c == "en" || c == "auto" || c.starts_with("en-") || c.starts_with("en_") => &English,
        Some(_) => &PassThrough,
    }
}

impl Language for PassThrough {
    fn spell_number(&self, _number: &WrittenNumber<'_>) -> Option<Spelling> {
        None
    }

    fn symbol_word(&self, _symbol: char) -> Option<&'static str> {
        None
    }
}

const ONES: [&str; 20] = [
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
    "nineteen",
];
const TENS: [&str; 10] = ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"];
const SCALES: [&str; 5] = ["", "thousand", "million", "billion", "trillion"];

/// Numbers with more digits than this are read digit by digit: no one says a 16-digit
/// number as a cardinal, and it keeps the words a text can produce bounded.
const MAX_CARDINAL_DIGITS: usize = 15;

/// English cardinal words for `n` (`21` → "twenty one", `1999` → "one thousand nine hundred
/// ninety nine"), without the British "and". Hyphens are spaces because the normaliser splits
/// at hyphens anyway.
pub fn number_words(n: u64) -> String {
    cardinal(n, false).join(" ")
}

fn below_thousand(n: u64, british_and: bool, out: &mut Vec<String>) {
    let hundreds = n / 100;
    let rest = n % 100;
    if hundreds > 0 {
        out.push(ONES[hundreds as usize].to_string());
        out.push("hundred".to_string());
        if rest > 0 && british_and {
            out.push("and".to_string());
        }
    }
    if rest >= 20 {
        out.push(TENS[(rest / 10) as usize].to_string());
        if !rest.is_multiple_of(10) {
            out.push(ONES[(rest % 10) as usize].to_string());
        }
    } else if rest > 0 {
        out.push(ONES[rest as usize].to_string());
    }
}

fn cardinal(n: u64, british_and: bool) -> Vec<String> {
    if n == 0 {
        return vec!["zero".to_string()];
    }
    let mut groups = Vec::new();
    let mut rest = n;
    while rest > 0 {
        groups.push(rest % 1000);
        rest /= 1000;
    }
    let mut out = Vec::new();
    for (scale, &group) in groups.iter().enumerate().rev() {
        if group == 0 {
            continue;
        }
        // British English says "one thousand and five": the "and" also comes after a scale word
        // when the last group has no hundreds.
        if british_and && scale == 0 && group < 100 && !out.is_empty() {
            out.push("and".to_string());
        }
        below_thousand(group, british_and, &mut out);
        if let Some(word) = SCALES.get(scale).filter(|w| !w.is_empty()) {
            out.push((*word).to_string());
        }
    }
    out
}

fn digit_by_digit(digits: &str) -> Vec<String> {
    digits.bytes().filter(u8::is_ascii_digit).map(|d| ONES[usize::from(d - b'0')].to_string()).collect()
}

fn ordinal_of(mut words: Vec<String>) -> Vec<String> {
    if let Some(last) = words.pop() {
        let ordinal = match last.as_str() {
            "one" => "first".to_string(),
            "two" => "second".to_string(),
            "three" => "third".to_string(),
            "five" => "fifth".to_string(),
            "eight" => "eighth".to_string(),
            "nine" => "ninth".to_string(),
            "twelve" => "twelfth".to_string(),
            w if w.ends_with('y') => format!("{}ieth", &w[..w.len() - 1]),
            w => format!("{w}th"),
        };
        words.push(ordinal);
    }
    words
}

/// The ways a four-digit year-like number is read aloud besides its cardinal:
/// 1999 "nineteen ninety nine", 1900 "nineteen hundred", 1905 "nineteen oh five".
fn year_readings(n: u64) -> Vec<Vec<String>> {
    if !(1000..=9999).contains(&n) {
        return Vec::new();
    }
    let (high, low) = (n / 100, n % 100);
    let head = cardinal(high, false);
    let join = |tail: &[&str]| {
        let mut words = head.clone();
        words.extend(tail.iter().map(|w| (*w).to_string()));
        words
    };
    match low {
        0 if !high.is_multiple_of(10) => vec![join(&["hundred"])],
        0 => Vec::new(),
        1..=9 => {
            let digit = ONES[low as usize];
            vec![join(&["oh", digit]), join(&["o", digit])]
        }
        _ => {
            let mut words = head.clone();
            words.extend(cardinal(low, false));
            vec![words]
        }
    }
}

impl Language for English {
    fn spell_number(&self, number: &WrittenNumber<'_>) -> Option<Spelling> {
        let integer = number.integer;
        let leading_zero = integer.len() > 1 && integer.starts_with('0');
        let value = if integer.len() <= MAX_CARDINAL_DIGITS && !leading_zero { integer.parse::<u64>().ok() } else { None };
        let ordinal_suffix = matches!(number.suffix, Some("st" | "nd" | "rd" | "th"));

        let mut alternatives: Vec<Vec<String>> = Vec::new();
        let push = |words: Vec<String>, alternatives: &mut Vec<Vec<String>>| {
            if !words.is_empty() && !alternatives.contains(&words) {
                alternatives.push(words);
            }
        };
        match value {
            None => push(digit_by_digit(integer), &mut alternatives),
            Some(n) if ordinal_suffix && number.fraction.is_none() => {
                push(ordinal_of(cardinal(n, false)), &mut alternatives);
                push(ordinal_of(cardinal(n, true)), &mut alternatives);
            }
            Some(n) => {
                let fraction = number.fraction.map(|f| {
                    let mut words = vec!["point".to_string()];
                    words.extend(digit_by_digit(f));
                    words
                });
                let with_fraction = |mut words: Vec<String>| {
                    if let Some(f) = &fraction {
                        words.extend(f.iter().cloned());
                    }
                    words
                };
                push(with_fraction(cardinal(n, false)), &mut alternatives);
                push(with_fraction(cardinal(n, true)), &mut alternatives);
                if !number.grouped && number.fraction.is_none() && integer.len() == 4 {
                    for reading in year_readings(n) {
                        push(reading, &mut alternatives);
                    }
                }
            }
        }
        Some(Spelling { alternatives, suffix_used: ordinal_suffix && value.is_some() && number.fraction.is_none() })
    }

    fn symbol_word(&self, symbol: char) -> Option<&'static str> {
        match symbol {
            '%' => Some("percent"),
            '&' => Some("and"),
            _ => None,
        }
    }
}

/// One unit of normalised text: a plain word, or a spelt-out number with its alternatives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Segment {
    Word(String),
    Number(Vec<Vec<String>>),
}

impl Segment {
    pub(crate) fn canonical(&self) -> impl Iterator<Item = &str> {
        let words: &[String] = match self {
            Segment::Word(w) => std::slice::from_ref(w),
            Segment::Number(alts) => alts.first().map(Vec::as_slice).unwrap_or(&[]),
        };
        words.iter().map(String::as_str)
    }
}

/// Han (with extensions and compatibility ideographs), kana and hangul: scripts written without
/// spaces (or, for hangul, scored like them), where a character is the unit a transcriber gets
/// right or wrong.
pub fn is_cjk_char(c: char) -> bool {
    matches!(c as u32,
        0x3400..=0x4DBF | 0x4E00..=0x9FFF | 0xF900..=0xFAFF | 0x20000..=0x3134F
        | 0x3040..=0x309F            // hiragana
        | 0x30A0..=0x30FA | 0x30FC..=0x30FF // katakana without the middle dot
        | 0x31F0..=0x31FF            // katakana phonetic extensions
        | 0xFF66..=0xFF9F            // half-width katakana
        | 0xAC00..=0xD7AF            // hangul syllables
        | 0x1100..=0x11FF | 0x3130..=0x318F // hangul jamo
        | 0x3005 | 0x3007            // 々 and 〇
    )
}

fn is_apostrophe(c: char) -> bool {
    matches!(c, '\'' | '\u{2019}' | '\u{02BC}' | '\u{2018}' | '\u{FF07}')
}

/// Punctuation and symbols that separate words. ASCII, Latin-1, general punctuation, CJK
/// punctuation and full-width forms, plus the sentence marks of a few other scripts; letters,
/// digits and combining marks are never in the list, so words of any script stay whole.
pub fn is_punctuation(c: char) -> bool {
    let code = c as u32;
    if c.is_ascii() {
        return c.is_ascii_punctuation();
    }
    let in_symbol_block = matches!(code,
        0x00A1..=0x00BF | 0x00D7 | 0x00F7
        | 0x2010..=0x205E      // general punctuation
        | 0x20A0..=0x20CF      // currency signs
        | 0x2100..=0x214F      // letterlike symbols (℃, №)
        | 0x2190..=0x23FF      // arrows, maths, technical
        | 0x2500..=0x27BF      // box drawing, shapes, dingbats
        | 0x2E00..=0x2E7F      // supplemental punctuation
        | 0x3000..=0x303F      // CJK symbols and punctuation
        | 0x30FB               // katakana middle dot
        | 0xFE10..=0xFE1F | 0xFE30..=0xFE6F // vertical, compatibility and small forms
        | 0xFF01..=0xFF0F | 0xFF1A..=0xFF20 | 0xFF3B..=0xFF40 | 0xFF5B..=0xFF65
        | 0x055A..=0x055F | 0x0589     // Armenian
        | 0x05BE | 0x05C0 | 0x05C3 | 0x05C6 | 0x05F3 | 0x05F4 // Hebrew
        | 0x060C | 0x061B | 0x061F | 0x066A..=0x066D | 0x06D4 // Arabic
        | 0x0964 | 0x0965 | 0x0970   // Devanagari danda
        | 0x0E4F | 0x0E5A | 0x0E5B   // Thai
        | 0x1360..=0x1368            // Ethiopic
        | 0x037E | 0x0387            // Greek question mark and ano teleia
        | 0x1F300..=0x1FAFF          // emoji and pictographs
    );
    // Within those blocks some code points are letters or numbers (々, 〇, ², ª, ℃ is not):
    // a letter or number is never punctuation.
    in_symbol_block && !c.is_alphanumeric()
}

/// Full-width ASCII (`Ａ１！`) as plain ASCII, and the ideographic space as a space.
fn fold_width(c: char) -> char {
    match c as u32 {
        code @ 0xFF01..=0xFF5E => char::from_u32(code - 0xFF01 + 0x21).unwrap_or(c),
        0x3000 => ' ',
        _ => c,
    }
}

/// Text without its square-bracket annotations. Transcribers write non-speech as `[BLANK_AUDIO]`
/// or `[Music]`; a TTS text does not speak brackets either. An unclosed `[` is left in place
/// (it becomes punctuation) rather than swallowing the rest of the text.
fn without_annotations(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(open) = rest.find(['[', '【']) {
        let (before, from_open) = rest.split_at(open);
        out.push_str(before);
        let close = from_open.find([']', '】']);
        match close {
            Some(close) => {
                out.push(' ');
                let after = &from_open[close..];
                let mut chars = after.chars();
                chars.next();
                rest = chars.as_str();
            }
            None => {
                out.push_str(from_open);
                rest = "";
            }
        }
    }
    out.push_str(rest);
    out
}

/// Normalised text as segments (words and numbers with their spellings).
pub(crate) fn segments(text: &str, language: &dyn Language) -> Vec<Segment> {
    let cleaned: String = without_annotations(text).chars().map(fold_width).flat_map(char::to_lowercase).collect();
    let chars: Vec<char> = cleaned.chars().collect();
    let mut out = Vec::new();
    let mut word = String::new();
    let flush = |word: &mut String, out: &mut Vec<Segment>| {
        if !word.is_empty() {
            out.push(Segment::Word(std::mem::take(word)));
        }
    };

    let mut i = 0;
    while let Some(&c) = chars.get(i) {
        if c.is_ascii_digit() {
            flush(&mut word, &mut out);
            i = number_at(&chars, i, language, &mut out);
            continue;
        }
        i += 1;
        if is_apostrophe(c) {
            continue;
        }
        if c.is_whitespace() || c.is_control() {
            flush(&mut word, &mut out);
        } else if is_cjk_char(c) {
            flush(&mut word, &mut out);
            out.push(Segment::Word(c.to_string()));
        } else if let Some(said) = language.symbol_word(c) {
            flush(&mut word, &mut out);
            out.push(Segment::Word(said.to_string()));
        } else if is_punctuation(c) {
            flush(&mut word, &mut out);
        } else {
            word.push(c);
        }
    }
    flush(&mut word, &mut out);
    out
}

/// Reads the number starting at `start` (an ASCII digit), pushes its segments and returns the
/// index after it. Recognised: `1234`, `1,234,567` (groups of exactly three), `3.14`, and
/// letters glued to the end (`21st`, `3d`).
fn number_at(chars: &[char], start: usize, language: &dyn Language, out: &mut Vec<Segment>) -> usize {
    let digits_from = |from: usize| chars.get(from..).map_or(0, |rest| rest.iter().take_while(|c| c.is_ascii_digit()).count());
    let mut end = start + digits_from(start);
    let mut integer: String = chars[start..end].iter().collect();
    let mut grouped = false;
    // "1,234": a comma followed by exactly three digits continues the number, as long as the
    // first group was at most three digits long.
    if integer.len() <= 3 {
        while chars.get(end) == Some(&',') && digits_from(end + 1) == 3 {
            integer.extend(&chars[end + 1..end + 4]);
            end += 4;
            grouped = true;
        }
    }
    let mut fraction = None;
    if chars.get(end) == Some(&'.') && digits_from(end + 1) > 0 {
        let len = digits_from(end + 1);
        fraction = Some(chars[end + 1..end + 1 + len].iter().collect::<String>());
        end += 1 + len;
    }
    let suffix_len = chars
        .get(end..)
        .map_or(0, |rest| rest.iter().take_while(|c| c.is_alphabetic() && !is_cjk_char(**c) && !c.is_ascii_digit()).count());
    let suffix: Option<String> = (suffix_len > 0).then(|| chars[end..end + suffix_len].iter().collect());
    let written = WrittenNumber { integer: &integer, grouped, fraction: fraction.as_deref(), suffix: suffix.as_deref() };
    let suffix_used = match language.spell_number(&written) {
        Some(spelling) if !spelling.alternatives.is_empty() => {
            out.push(Segment::Number(spelling.alternatives));
            spelling.suffix_used
        }
        _ => {
            out.push(Segment::Word(integer.clone()));
            if let Some(f) = &fraction {
                out.push(Segment::Word(f.clone()));
            }
            false
        }
    };
    if suffix_used {
        end + suffix_len
    } else {
        // The letters are not part of the number: leave them to be read as a word.
        end
    }
}

/// The words of a normalised text, numbers in their canonical spelling.
///
/// ```
/// use f5_verify::{normalize, English};
/// assert_eq!(normalize("It's 21°C, isn't it?", &English), ["its", "twenty", "one", "c", "isnt", "it"]);
/// assert_eq!(normalize("你好，世界", &English), ["你", "好", "世", "界"]);
/// ```
pub fn normalize(text: &str, language: &dyn Language) -> Vec<String> {
    segments(text, language).iter().flat_map(Segment::canonical).map(str::to_string).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(text: &str) -> Vec<String> {
        normalize(text, &English)
    }

    #[test]
    fn cardinals_follow_american_usage_without_and() {
        assert_eq!(number_words(0), "zero");
        assert_eq!(number_words(21), "twenty one");
        assert_eq!(number_words(100), "one hundred");
        assert_eq!(number_words(115), "one hundred fifteen");
        assert_eq!(number_words(1999), "one thousand nine hundred ninety nine");
        assert_eq!(number_words(1_000_005), "one million five");
        assert_eq!(number_words(999_999_999_999_999), "nine hundred ninety nine trillion nine hundred ninety nine billion nine hundred ninety nine million nine hundred ninety nine thousand nine hundred ninety nine");
    }

    #[test]
    fn number_forms_in_text() {
        assert_eq!(words("21"), ["twenty", "one"]);
        assert_eq!(words("1,000,000 people"), ["one", "million", "people"]);
        assert_eq!(words("3.14"), ["three", "point", "one", "four"]);
        assert_eq!(words("the 21st and 2nd"), ["the", "twenty", "first", "and", "second"]);
        assert_eq!(words("12th 40th 3rd"), ["twelfth", "fortieth", "third"]);
        assert_eq!(words("mp3 3d"), ["mp", "three", "three", "d"]);
        assert_eq!(words("007"), ["zero", "zero", "seven"]);
        assert_eq!(words("50% & more"), ["fifty", "percent", "and", "more"]);
        // A sentence-final full stop is not a decimal point.
        assert_eq!(words("In 1999."), ["in", "one", "thousand", "nine", "hundred", "ninety", "nine"]);
        // Too long for a cardinal: digit by digit.
        assert_eq!(words("1234567890123456").len(), 16);
    }

    #[test]
    fn numbers_keep_their_other_spellings() {
        let segs = segments("1999 1905 1900 2000 105", &English);
        let alts = |i: usize| match &segs[i] {
            Segment::Number(alts) => alts.iter().map(|a| a.join(" ")).collect::<Vec<_>>(),
            other => panic!("not a number: {other:?}"),
        };
        assert_eq!(alts(0), ["one thousand nine hundred ninety nine", "one thousand nine hundred and ninety nine", "nineteen ninety nine"]);
        assert!(alts(1).contains(&"nineteen oh five".to_string()));
        assert!(alts(2).contains(&"nineteen hundred".to_string()));
        assert_eq!(alts(3), ["two thousand"]);
        assert_eq!(alts(4), ["one hundred five", "one hundred and five"]);
    }

    #[test]
    fn punctuation_case_and_apostrophes() {
        assert_eq!(words("Hello, World! Don't—STOP… “quoted” (yes)."), ["hello", "world", "dont", "stop", "quoted", "yes"]);
        assert_eq!(words("well-known"), ["well", "known"]);
        assert_eq!(words("Ｆｕｌｌ－ｗｉｄｔｈ１２"), ["full", "width", "twelve"]);
        assert_eq!(words("[BLANK_AUDIO]"), Vec::<String>::new());
        assert_eq!(words("hi [Music] there [unclosed"), ["hi", "there", "unclosed"]);
        // Letters with combining marks and non-Latin scripts stay whole.
        assert_eq!(words("नमस्ते दुनिया।"), ["नमस्ते", "दुनिया"]);
        assert_eq!(words("Ελληνικά; Русский!"), ["ελληνικά", "русский"]);
    }

    #[test]
    fn cjk_is_scored_per_character() {
        assert_eq!(words("你好，世界。"), ["你", "好", "世", "界"]);
        assert_eq!(words("カタカナ・ひらがな"), ["カ", "タ", "カ", "ナ", "ひ", "ら", "が", "な"]);
        assert_eq!(words("한국어 abc"), ["한", "국", "어", "abc"]);
        assert_eq!(words("第3章"), ["第", "three", "章"]);
    }

    #[test]
    fn pass_through_keeps_digits() {
        assert_eq!(normalize("Es ist 21 Uhr, 3,5 Grad", &PassThrough), ["es", "ist", "21", "uhr", "3", "5", "grad"]);
        assert_eq!(normalize("50%", &PassThrough), ["50"]);
    }

    #[test]
    fn language_codes() {
        assert_eq!(normalize("21", language_for(None)), ["twenty", "one"]);
        assert_eq!(normalize("21", language_for(Some("EN"))), ["twenty", "one"]);
        assert_eq!(normalize("21", language_for(Some("fi"))), ["21"]);
    }
}
