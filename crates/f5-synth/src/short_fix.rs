//! `short_fix`: our rule for short lines and one-word openings. It departs from the reference
//! implementation on purpose and is off by default; with it off, chunks and durations are the
//! reference's to the frame.
//!
//! Two failures it answers, both seen with the released models from every seed:
//!
//! - A short line given its linear share of time is clipped: a flow-matching model asked for very
//!   few frames ends the utterance before it settles. A short chunk therefore gets extra frames
//!   on top of the reference's estimate ([`short_fix_extra_frames`]).
//! - A line that opens with a one-word sentence ("Juuri. Seuraavaksi ne tuovat…") loses that
//!   word: the model runs from the reference straight into the second sentence. Said on its own
//!   the word comes out fine, so it becomes a chunk of its own ([`one_word_opening`]). Two-word
//!   openings ("Eipä kestä.", "Kiitos kutsusta.") are said as part of the line and stay in it.

use f5_dit::duration::{HOP, SAMPLE_RATE};

/// Extra time a short chunk gets, milliseconds, at [`SHORT_FULL_BYTES`] or fewer.
pub const SHORT_PLUS_MS: usize = 1100;
/// Up to this many UTF-8 bytes of text a chunk gets all of [`SHORT_PLUS_MS`].
pub const SHORT_FULL_BYTES: usize = 30;
/// From this many UTF-8 bytes on a chunk gets nothing extra; between [`SHORT_FULL_BYTES`] and
/// here the extra falls linearly.
pub const SHORT_TAPER_END: usize = 120;

/// Mel frames added to the reference's duration estimate of a chunk with `gen_text_bytes` bytes
/// of text:
///
/// `extra_ms = 1100 · clamp((120 − bytes) / (120 − 30), 0, 1)`,
/// `frames = round(extra_ms · 24000 / 256 / 1000)` (halves up), in exact integer arithmetic.
///
/// So 0–30 bytes get 103 frames (1.1 s), 75 bytes 52, 119 bytes 1, 120 and more none. Bytes, not
/// characters, because the reference's own estimate counts bytes: a line of umlauts or CJK gets
/// its extra by the same measure its time is estimated by. The extra is a fixed amount of time,
/// not scaled by the speaking rate: it is room to settle, not speech.
pub fn short_fix_extra_frames(gen_text_bytes: usize) -> usize {
    let taper = SHORT_TAPER_END - SHORT_FULL_BYTES;
    let left = SHORT_TAPER_END.saturating_sub(gen_text_bytes).min(taper) as u64;
    let num = SHORT_PLUS_MS as u64 * left * SAMPLE_RATE as u64;
    let den = taper as u64 * HOP as u64 * 1000;
    ((2 * num + den) / (2 * den)) as usize
}

/// Where the rest of `text` begins (a byte index, at its first non-space character) when the
/// text opens with a one-word sentence followed by more text; `None` otherwise.
///
/// The opening is: optional white space, opening quotes or a dialogue dash; one word (letters and
/// digits, with inner `'`, `’` or `-`, at least one letter); a run of sentence ends `. ! ? …`
/// or `。！？`; optional closing quotes; then white space — which a full-width mark or a CJK word
/// does not need — and text with at least one letter or digit.
///
/// Guards against what only looks like a sentence, for a lone `.`: an initial ("A. Smith"), a
/// title ("Dr. Smith", "Hra. Virtanen") and an abbreviation or ordinal followed by a lowercase
/// word ("esim. näin", "3. kesäkuuta"; a word without letters never counts). In Chinese and
/// Japanese, which do not separate words, a "word" is at most two characters (好, 谢谢, はい).
pub fn one_word_opening(text: &str) -> Option<usize> {
    let mut chars = text.char_indices().peekable();
    while chars.next_if(|&(_, c)| c.is_whitespace() || is_opening_mark(c)).is_some() {}
    let word_start = chars.peek()?.0;
    let mut word_end = word_start;
    while let Some(&(i, c)) = chars.peek() {
        let inner_joiner =
            matches!(c, '\'' | '’' | '-') && word_end > word_start && text[i + c.len_utf8()..].chars().next().is_some_and(is_word_char);
        if !(is_word_char(c) || inner_joiner) {
            break;
        }
        chars.next();
        word_end = i + c.len_utf8();
    }
    let word = &text[word_start..word_end];
    if !word.chars().any(char::is_alphabetic) {
        return None;
    }
    let ends_start = word_end;
    let mut ends_end = word_end;
    while let Some((i, c)) = chars.next_if(|&(_, c)| is_sentence_end(c)) {
        ends_end = i + c.len_utf8();
    }
    let ends = &text[ends_start..ends_end];
    if ends.is_empty() {
        return None;
    }
    while chars.next_if(|&(_, c)| is_closing_mark(c)).is_some() {}
    let mut spaced = false;
    while chars.next_if(|&(_, c)| c.is_whitespace()).is_some() {
        spaced = true;
    }
    let cjk_word = word.chars().any(is_unspaced_script);
    let full_width = ends.chars().any(|c| matches!(c, '。' | '！' | '？'));
    if !(spaced || full_width || cjk_word) {
        return None;
    }
    let rest = chars.peek()?.0;
    if !text[rest..].chars().any(char::is_alphanumeric) {
        return None;
    }
    if cjk_word && word.chars().count() > 2 {
        return None;
    }
    if ends == "." && !is_sentence_before(word, &text[rest..]) {
        return None;
    }
    Some(rest)
}

/// `chunks` with every one-word opening sentence ([`one_word_opening`]) cut off into a chunk of
/// its own, before the rest — again while the rest opens with one. Chunks stay trimmed, as the
/// reference's chunker leaves them.
pub fn split_one_word_openings(chunks: Vec<String>) -> Vec<String> {
    let mut out = Vec::with_capacity(chunks.len());
    for chunk in chunks {
        let mut rest = chunk.as_str();
        while let Some(at) = one_word_opening(rest) {
            let (head, tail) = rest.split_at(at);
            out.push(head.trim().to_string());
            rest = tail;
        }
        out.push(rest.trim().to_string());
    }
    out
}

/// Whether a word ended by a lone `.` ends a sentence: not an initial, not a title before a name,
/// not an abbreviation or ordinal before a lowercase word.
fn is_sentence_before(word: &str, rest: &str) -> bool {
    const TITLES: [&str; 25] = [
        "mr", "mrs", "ms", "dr", "prof", "st", "jr", "sr", "mt", "rev", "hon", "capt", "lt", "sgt", "col", "gen", "gov", "sen", "fr", "hr",
        "hra", "rva", "nti", "tri", "mme",
    ];
    let initial = word.chars().count() == 1 && word.chars().all(char::is_uppercase);
    if initial || TITLES.contains(&word.to_lowercase().as_str()) {
        return false;
    }
    let next = rest.chars().find(|&c| !is_opening_mark(c));
    !next.is_some_and(char::is_lowercase)
}

fn is_word_char(c: char) -> bool {
    // Combining diacritics: a decomposed "ä" is still one letter.
    c.is_alphanumeric() || ('\u{300}'..='\u{36f}').contains(&c)
}

fn is_sentence_end(c: char) -> bool {
    matches!(c, '.' | '!' | '?' | '…' | '。' | '！' | '？')
}

fn is_opening_mark(c: char) -> bool {
    matches!(c, '"' | '\'' | '“' | '‘' | '”' | '„' | '‚' | '«' | '»' | '‹' | '(' | '[' | '（' | '「' | '『' | '-' | '–' | '—')
}

fn is_closing_mark(c: char) -> bool {
    matches!(c, '"' | '\'' | '”' | '’' | '»' | '«' | '›' | ')' | ']' | '）' | '」' | '』')
}

/// Han and kana: scripts written without spaces between words.
fn is_unspaced_script(c: char) -> bool {
    matches!(c as u32, 0x3040..=0x30ff | 0x31f0..=0x31ff | 0x3400..=0x4dbf | 0x4e00..=0x9fff | 0xf900..=0xfaff | 0xff66..=0xff9f | 0x20000..=0x2ffff)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The opening as split off, and the rest, or None.
    fn split(text: &str) -> Option<(&str, &str)> {
        one_word_opening(text).map(|at| (text[..at].trim(), &text[at..]))
    }

    #[test]
    fn one_word_openings_are_found() {
        assert_eq!(split("Juuri. Seuraavaksi ne tuovat kahvia."), Some(("Juuri.", "Seuraavaksi ne tuovat kahvia.")));
        assert_eq!(one_word_opening("Juuri. Seuraavaksi ne tuovat kahvia."), Some(7));
        // Umlauts are two bytes each: the index is a byte index on a character boundary.
        assert_eq!(one_word_opening("Hyvä! Nyt mennään."), Some(7));
        assert_eq!(split("Öljyä? Kyllä kiitos."), Some(("Öljyä?", "Kyllä kiitos.")));
        assert_eq!(split("Yes?! Really."), Some(("Yes?!", "Really.")));
        assert_eq!(split("Stop!!! Now."), Some(("Stop!!!", "Now.")));
        assert_eq!(split("Don't. Please stop."), Some(("Don't.", "Please stop.")));
        assert_eq!(split("Well-known. Everyone says so."), Some(("Well-known.", "Everyone says so.")));
        // Decomposed umlaut (a + combining diaeresis) is one word.
        assert_eq!(split("Ha\u{308}t. Mita\u{308} nyt?"), Some(("Ha\u{308}t.", "Mita\u{308} nyt?")));
        assert_eq!(split("Ok. 5 minuuttia."), Some(("Ok.", "5 minuuttia.")));
    }

    #[test]
    fn ellipses_whitespace_and_quotes() {
        assert_eq!(split("Juuri… Seuraavaksi ne tuo…"), Some(("Juuri…", "Seuraavaksi ne tuo…")));
        assert_eq!(split("Well... maybe later."), Some(("Well...", "maybe later.")));
        assert_eq!(one_word_opening("  \tYes. We go."), Some(8));
        assert_eq!(split("\"Yes.\" He left."), Some(("\"Yes.\"", "He left.")));
        assert_eq!(split("“Juuri.” Seuraavaksi tulee."), Some(("“Juuri.”", "Seuraavaksi tulee.")));
        assert_eq!(split("»Niin!» hän sanoi."), Some(("»Niin!»", "hän sanoi.")));
        assert_eq!(split("— Juuri. Seuraavaksi."), Some(("— Juuri.", "Seuraavaksi.")));
        assert_eq!(split("Juuri.\nSeuraavaksi."), Some(("Juuri.", "Seuraavaksi.")));
        assert_eq!(split("Juuri. «Seuraavaksi.»"), Some(("Juuri.", "«Seuraavaksi.»")));
    }

    #[test]
    fn cjk_openings() {
        assert_eq!(split("好。接下来我们开始。"), Some(("好。", "接下来我们开始。")));
        assert_eq!(one_word_opening("好。接下来我们开始。"), Some(6));
        assert_eq!(split("谢谢！我们走吧。"), Some(("谢谢！", "我们走吧。")));
        assert_eq!(split("はい。そうです。"), Some(("はい。", "そうです。")));
        assert_eq!(split("「はい。」そうです。"), Some(("「はい。」", "そうです。")));
        assert_eq!(split("好…接下来。"), Some(("好…", "接下来。")));
        // A whole Chinese sentence has no spaces either, but is no one-word opening.
        assert_eq!(split("我们今天去公园。明天再说。"), None);
        // A Latin word before a full-width stop needs no space.
        assert_eq!(split("OK。下一个。"), Some(("OK。", "下一个。")));
        // Korean separates words by spaces: as in Latin text.
        assert_eq!(split("네. 알겠습니다."), Some(("네.", "알겠습니다.")));
    }

    #[test]
    fn what_is_left_in_the_line() {
        for text in [
            "Eipä kestä. Tervetuloa taas.",
            "Kiitos kutsusta. Oli mukavaa.",
            "Hello world. How are you?",
            "Okay, fine. Let's go.",
            "\"Yes,\" he said.",
            // A line that is one word only, with or without trailing space or punctuation after.
            "Juuri.",
            "Juuri.   ",
            "  Juuri! ",
            "Juuri. !",
            "好。",
            "Juuri",
            // No space after a Latin stop: not a sentence break (3.14, U.S.A, file.txt).
            "Juuri.Seuraavaksi tulee.",
            "Juuri!Seuraavaksi tulee.",
            // Initials, titles, abbreviations and ordinals before a lone stop.
            "A. Smith wrote it.",
            "Dr. Smith is here.",
            "Mr. Brown arrived.",
            "Hra. Virtanen saapui.",
            "esim. tämä on esimerkki.",
            "Esim. tämä on esimerkki.",
            "3. kesäkuuta tulee kesä.",
            "42. Next one.",
            "",
            "   ",
            ".",
            "... and then.",
        ] {
            assert_eq!(one_word_opening(text), None, "{text:?}");
        }
    }

    #[test]
    fn extra_frames_follow_the_designed_taper() {
        // 1100 ms = 103.125 frames of 256 samples at 24 kHz → 103.
        assert_eq!(short_fix_extra_frames(0), 103);
        assert_eq!(short_fix_extra_frames(1), 103);
        assert_eq!(short_fix_extra_frames(30), 103);
        // 1100·89/90 ms = 101.98 frames → 102.
        assert_eq!(short_fix_extra_frames(31), 102);
        // Halfway: 550 ms = 51.5625 frames → 52.
        assert_eq!(short_fix_extra_frames(75), 52);
        // 1100/90 ms = 1.146 frames → 1.
        assert_eq!(short_fix_extra_frames(119), 1);
        assert_eq!(short_fix_extra_frames(120), 0);
        assert_eq!(short_fix_extra_frames(121), 0);
        assert_eq!(short_fix_extra_frames(usize::MAX), 0);
        // Monotone, never more than the full amount.
        let all: Vec<usize> = (0..=130).map(short_fix_extra_frames).collect();
        assert!(all.windows(2).all(|w| w[0] >= w[1]));
        // Multibyte text counts bytes: 10 umlauts are 20 bytes (full), 40 Han characters 120 (none).
        assert_eq!(short_fix_extra_frames("ääääääääää".len()), 103);
        assert_eq!(short_fix_extra_frames("好".repeat(40).len()), 0);
        // 25 Han characters = 75 bytes: the halfway value, although only 25 characters.
        assert_eq!(short_fix_extra_frames("好".repeat(25).len()), 52);
    }

    #[test]
    fn chunks_are_split_at_every_one_word_opening() {
        let chunks =
            vec!["Juuri. Niin. Seuraavaksi ne tuovat kahvia.".to_string(), "Eipä kestä. Hei.".to_string(), "好。接下来。".to_string()];
        assert_eq!(
            split_one_word_openings(chunks),
            ["Juuri.", "Niin.", "Seuraavaksi ne tuovat kahvia.", "Eipä kestä. Hei.", "好。", "接下来。"]
        );
        let plain = vec!["Hello there. General Kenobi.".to_string()];
        assert_eq!(split_one_word_openings(plain.clone()), plain);
    }
}
