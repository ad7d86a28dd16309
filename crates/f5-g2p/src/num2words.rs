//! English number words as the `num2words` package (0.5.x, `lang='en'`) writes them, because
//! misaki reads every number through it: "one hundred and five", "one thousand, two hundred",
//! "twenty-first", years "nineteen oh-five", floats "three point one four".

const LOW: [&str; 20] = [
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
/// 10^(3k) names for k = 1.. as num2words' English table has them (its largest is 10^93).
const SCALES: [&str; 11] = [
    "thousand",
    "million",
    "billion",
    "trillion",
    "quadrillion",
    "quintillion",
    "sextillion",
    "septillion",
    "octillion",
    "nonillion",
    "decillion",
];

/// Cardinal words for `n` (`num2words(n)`), or `None` past the table (10^36 here).
pub fn cardinal(n: u128) -> Option<String> {
    if n < 1000 {
        return Some(below_thousand(n as u32));
    }
    // Split into groups of three from the top; num2words joins a group with the rest by
    // " and " when the rest is below 100, by ", " otherwise.
    let mut scale_index = 0usize;
    let mut power: u128 = 1000;
    while n / power >= 1000 {
        power = power.checked_mul(1000)?;
        scale_index += 1;
    }
    let scale = SCALES.get(scale_index)?;
    let high = n / power;
    let rest = n % power;
    let mut out = format!("{} {}", cardinal(high)?, scale);
    if rest > 0 {
        out.push_str(if rest < 100 { " and " } else { ", " });
        out.push_str(&cardinal(rest)?);
    }
    Some(out)
}

fn below_thousand(n: u32) -> String {
    if n < 20 {
        return LOW[n as usize].to_string();
    }
    if n < 100 {
        let (t, u) = (n / 10, n % 10);
        return if u == 0 { TENS[t as usize].to_string() } else { format!("{}-{}", TENS[t as usize], LOW[u as usize]) };
    }
    let (h, rest) = (n / 100, n % 100);
    if rest == 0 {
        format!("{} hundred", LOW[h as usize])
    } else {
        format!("{} hundred and {}", LOW[h as usize], below_thousand(rest))
    }
}

/// Ordinal words (`num2words(n, to='ordinal')`): the last word of the cardinal made ordinal.
pub fn ordinal(n: u128) -> Option<String> {
    let card = cardinal(n)?;
    let (head, last_word) = match card.rfind(' ') {
        Some(i) => (&card[..=i], &card[i + 1..]),
        None => ("", card.as_str()),
    };
    let (word_head, last) = match last_word.rfind('-') {
        Some(i) => (&last_word[..=i], &last_word[i + 1..]),
        None => ("", last_word),
    };
    let ord = match last {
        "one" => "first".to_string(),
        "two" => "second".to_string(),
        "three" => "third".to_string(),
        "four" => "fourth".to_string(),
        "five" => "fifth".to_string(),
        "six" => "sixth".to_string(),
        "seven" => "seventh".to_string(),
        "eight" => "eighth".to_string(),
        "nine" => "ninth".to_string(),
        "ten" => "tenth".to_string(),
        "eleven" => "eleventh".to_string(),
        "twelve" => "twelfth".to_string(),
        other => match other.strip_suffix('y') {
            Some(stem) => format!("{stem}ieth"),
            None => format!("{other}th"),
        },
    };
    Some(format!("{head}{word_head}{ord}"))
}

/// Year words (`num2words(n, to='year')`) for n ≥ 0: "nineteen eighty-four", "two thousand and
/// five" (X00X years go cardinal), "nineteen hundred", "nineteen oh-five".
pub fn year(n: u128) -> Option<String> {
    let (high, low) = (n / 100, n % 100);
    if high == 0 || (high % 10 == 0 && low < 10) || high >= 100 {
        return cardinal(n);
    }
    let high_text = cardinal(high)?;
    let low_text = if low == 0 {
        "hundred".to_string()
    } else if low < 10 {
        format!("oh-{}", cardinal(low)?)
    } else {
        cardinal(low)?
    };
    Some(format!("{high_text} {low_text}"))
}

/// Float words (`num2words(float(text))`) for a plain decimal literal such as "3.14" or "12.0":
/// the integer part in cardinal words, "point", then each digit of Python's shortest repr of the
/// float. `None` for anything that is not `digits.digits` or that Python would print in
/// exponent form.
pub fn float_literal(text: &str) -> Option<String> {
    let value: f64 = text.parse().ok()?;
    if !value.is_finite() || value.abs() >= 1e16 || (value != 0.0 && value.abs() < 1e-4) {
        return None;
    }
    // num2words reads an integral float ("2.0") as the integer
    if value.fract() == 0.0 {
        let words = cardinal(value.abs() as u128)?;
        return Some(if value < 0.0 { format!("minus {words}") } else { words });
    }
    // Rust's `{}` for f64 is the shortest round-trip form, as Python's repr (minus the ".0").
    let repr = format!("{}", value.abs());
    let (int_part, frac_part) = match repr.split_once('.') {
        Some((i, f)) => (i.to_string(), f.to_string()),
        None => (repr.clone(), "0".to_string()),
    };
    let int_value: u128 = int_part.parse().ok()?;
    let mut out = String::new();
    if value < 0.0 {
        out.push_str("minus ");
    }
    out.push_str(&cardinal(int_value)?);
    out.push_str(" point");
    for d in frac_part.chars() {
        let digit = d.to_digit(10)? as usize;
        out.push(' ');
        out.push_str(LOW[digit]);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every number in fixtures/g2p/num2words.json, written by the num2words package itself.
    #[test]
    fn matches_num2words_fixture() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../fixtures/g2p/num2words.json");
        let text = std::fs::read_to_string(path).expect("fixture");
        let golden: serde_json::Value = serde_json::from_str(&text).expect("json");
        let mut checked = 0;
        for (kind, f) in [("cardinal", cardinal as fn(u128) -> Option<String>), ("ordinal", ordinal), ("year", year)] {
            for (n, want) in golden[kind].as_object().expect(kind) {
                let n: u128 = n.parse().expect("number");
                assert_eq!(f(n).as_deref(), want.as_str(), "{kind} {n}");
                checked += 1;
            }
        }
        for (lit, want) in golden["float"].as_object().expect("float") {
            assert_eq!(float_literal(lit).as_deref(), want.as_str(), "float {lit}");
        }
        assert!(checked > 500);
    }

    #[test]
    fn joins_like_num2words() {
        assert_eq!(cardinal(0).unwrap(), "zero");
        assert_eq!(cardinal(105).unwrap(), "one hundred and five");
        assert_eq!(cardinal(1001).unwrap(), "one thousand and one");
        assert_eq!(cardinal(1200).unwrap(), "one thousand, two hundred");
        assert_eq!(ordinal(21).unwrap(), "twenty-first");
        assert_eq!(ordinal(40).unwrap(), "fortieth");
        assert_eq!(year(1905).unwrap(), "nineteen oh-five");
        assert_eq!(year(2005).unwrap(), "two thousand and five");
        assert_eq!(float_literal("3.50").unwrap(), "three point five");
        assert_eq!(float_literal("2.0").unwrap(), "two");
    }
}
