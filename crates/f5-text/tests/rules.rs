//! One test per rule of the front end. Every expected value was produced by
//! the reference (pypinyin 0.55.0 `lazy_pinyin(..., style=TONE3,
//! tone_sandhi=True)`, f5-tts 1.1.22 `convert_char_to_pinyin` and
//! `list_str_to_idx` with the packaged vocabulary).

use std::path::PathBuf;

use f5_text::{lazy_pinyin_tone3, to_tokens, Vocab};

fn py(text: &str) -> Vec<String> {
    lazy_pinyin_tone3(text).expect("embedded table decodes")
}

fn tokens(text: &str) -> Vec<String> {
    to_tokens(text).expect("conversion succeeds")
}

fn vocab() -> Vocab {
    Vocab::load(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/vocab.txt")).expect("vocab loads")
}

#[test]
fn third_tone_pair_becomes_second_tone() {
    assert_eq!(py("你好"), ["ni2", "hao3"]);
}

#[test]
fn third_tone_rule_edits_the_first_third_tone_of_the_word() {
    // Trailing run of two third tones, yet the FIRST third tone (与) changes.
    assert_eq!(py("与世俯仰"), ["yu2", "shi4", "fu3", "yang3"]);
}

#[test]
fn third_tone_chain_keeps_only_the_last() {
    assert_eq!(py("井井有法"), ["jing2", "jing2", "you2", "fa3"]);
}

#[test]
fn bu_before_fourth_tone_is_second_tone() {
    assert_eq!(py("一动不动"), ["yi1", "dong4", "bu2", "dong4"]);
}

#[test]
fn bu_before_other_tones_is_fourth_tone() {
    // The phrase dictionary says bu2 here; the rule overrides it.
    assert_eq!(py("听而不闻"), ["ting1", "er2", "bu4", "wen2"]);
}

#[test]
fn word_final_bu_and_yi() {
    assert_eq!(py("不"), ["bu4"]);
    assert_eq!(py("一"), ["yi1"]);
    assert_eq!(py("第一"), ["di4", "yi1"]);
}

#[test]
fn yi_before_other_tones_is_fourth_tone() {
    assert_eq!(py("一专多能"), ["yi4", "zhuan1", "duo1", "neng2"]);
}

#[test]
fn yi_before_fourth_tone_keeps_first_tone() {
    // pypinyin replaces '4' by '2' in "yi1", which changes nothing.
    assert_eq!(py("一样"), ["yi1", "yang4"]);
    // Phrase dictionary reading, untouched by the rule for the same reason.
    assert_eq!(py("一个"), ["yi2", "ge4"]);
}

#[test]
fn bu_rule_runs_before_yi_rule() {
    // 不 becomes bu2 first, so 一 no longer precedes a fourth tone.
    assert_eq!(py("划一不二"), ["hua4", "yi4", "bu2", "er4"]);
}

#[test]
fn neutral_tone_has_no_digit_and_u_umlaut_is_v() {
    assert_eq!(py("们"), ["men"]);
    assert_eq!(py("一丁点儿"), ["yi4", "ding1", "dian3", "er"]);
    assert_eq!(py("女"), ["nv3"]);
    assert_eq!(py("绿"), ["lv4"]);
    assert_eq!(py("略"), ["lve4"]);
}

#[test]
fn latin_diacritics_split_words_and_insert_a_space() {
    assert_eq!(tokens("Yöllä"), ["Y", "ö", " ", "l", "l", "ä"]);
    assert_eq!(tokens("Größe"), ["G", "r", "ö", "ß", "e"]);
    assert_eq!(tokens("Ça va"), ["Ç", "a", " ", "v", "a"]);
}

#[test]
fn space_before_ascii_segment_is_suppressed_after_space_colon_and_quotes() {
    assert_eq!(tokens("say: hello"), ["s", "a", "y", ":", " ", "h", "e", "l", "l", "o"]);
    assert_eq!(tokens("\"quoted\""), ["\"", "q", "u", "o", "t", "e", "d", "\""]);
    assert_eq!(tokens("1 23"), ["1", " ", "2", "3"]);
    assert_eq!(tokens("Hello世界"), ["H", "e", "l", "l", "o", " ", "shi4", " ", "jie4"]);
}

#[test]
fn translation_of_semicolon_and_curly_quotes() {
    assert_eq!(tokens("a;b"), ["a", ",", "b"]);
    assert_eq!(tokens("“hi” ‘yo’"), ["\"", "h", "i", "\"", " ", "'", "y", "o", "'"]);
    // The full-width semicolon is not translated.
    assert_eq!(tokens("好；好"), [" ", "hao3", "；", " ", "hao3"]);
}

#[test]
fn mixed_segment_reads_chinese_per_character() {
    assert_eq!(tokens("A股"), ["A", " ", "gu3"]);
    // In the reference's Chinese range but without pinyin: a space, then itself.
    assert_eq!(tokens("ㄅ"), [" ", "ㄅ"]);
    // Four-byte ideograph: outside the range, kept as it is.
    assert_eq!(tokens("𠮶"), ["𠮶"]);
}

#[test]
fn unknown_tokens_map_to_zero() {
    let vocab = vocab();
    assert_eq!(vocab.ids(&tokens("好；好")), [0, 458, 0, 0, 458]);
    assert_eq!(vocab.ids(&tokens("ㄅ")), [0, 0]);
    assert_eq!(vocab.ids(&tokens("𠮶")), [2544]);
    assert_eq!(vocab.ids(&tokens("“hi” ‘yo’")), [2, 441, 507, 2, 0, 7, 1236, 827, 7]);
}
