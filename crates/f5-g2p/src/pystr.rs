//! The few Python `str` predicates misaki's rules are written in, with Python's semantics
//! (code points, not bytes), so the rules read the same here as in the reference.

/// `s.lower()`.
pub fn lower(s: &str) -> String {
    s.to_lowercase()
}

/// `s.upper()`.
pub fn upper(s: &str) -> String {
    s.to_uppercase()
}

/// `s == s.lower()`.
pub fn is_lower_form(s: &str) -> bool {
    s == lower(s)
}

/// `s == s.upper()`.
pub fn is_upper_form(s: &str) -> bool {
    s == upper(s)
}

/// `s.capitalize()`: first character upper-cased, the rest lower-cased.
pub fn capitalize(s: &str) -> String {
    let mut chars = s.chars();
    match chars.next() {
        None => String::new(),
        Some(first) => {
            let mut out: String = first.to_uppercase().collect();
            out.push_str(&chars.as_str().to_lowercase());
            out
        }
    }
}

/// `s.isalpha()`: non-empty and every character alphabetic.
pub fn is_alpha(s: &str) -> bool {
    !s.is_empty() && s.chars().all(char::is_alphabetic)
}

/// `len(s)` in code points.
pub fn len(s: &str) -> usize {
    s.chars().count()
}

/// `s[n:]` in code points.
pub fn skip(s: &str, n: usize) -> &str {
    match s.char_indices().nth(n) {
        Some((i, _)) => &s[i..],
        None => "",
    }
}

/// `s[:-n]` in code points (`s[:0]`-style empty result when `n >= len`).
pub fn drop_last(s: &str, n: usize) -> &str {
    let count = len(s);
    if n >= count {
        return "";
    }
    match s.char_indices().nth(count - n) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// `s[-n:]`-style: the last character, if any.
pub fn last_char(s: &str) -> Option<char> {
    s.chars().next_back()
}

/// The character `n` places from the end (`s[-n]`, n ≥ 1).
pub fn nth_from_end(s: &str, n: usize) -> Option<char> {
    s.chars().rev().nth(n.checked_sub(1)?)
}

/// `re.match(r'^[0-9]+$', s)`.
pub fn is_ascii_digits(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slicing_counts_code_points() {
        assert_eq!(drop_last("ɹˈid", 1), "ɹˈi");
        assert_eq!(drop_last("ab", 3), "");
        assert_eq!(skip("ˈAb", 1), "Ab");
        assert_eq!(nth_from_end("abc", 2), Some('b'));
        assert_eq!(capitalize("hELLO"), "Hello");
        assert!(is_upper_form("NASA's1") == ("NASA's1" == "NASA'S1"));
    }
}
