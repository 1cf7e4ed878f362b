//! Shortening text for status messages and Events: one implementation, so that every
//! message stays within its bound and never cuts a character in two.

/// What marks text that was cut.
const ELLIPSIS: &str = "...";

/// The start of `s` in at most `max` bytes, `...` included when it was cut.
pub fn head(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max.saturating_sub(ELLIPSIS.len());
    while !s.is_char_boundary(end) {
        end = end.saturating_sub(1);
    }
    let kept = s.get(..end).unwrap_or_default();
    let mut out = String::with_capacity(max);
    out.push_str(kept);
    // `max` below the ellipsis' own length: what fits of it.
    out.push_str(ELLIPSIS.get(..max.min(ELLIPSIS.len())).unwrap_or_default());
    out
}

/// The end of `s` in at most `max` bytes, `...` first when it was cut.
pub fn tail(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let keep = max.saturating_sub(ELLIPSIS.len());
    let mut start = s.len().saturating_sub(keep);
    while !s.is_char_boundary(start) {
        start = start.saturating_add(1);
    }
    let kept = s.get(start..).unwrap_or_default();
    let mut out = String::with_capacity(max);
    out.push_str(ELLIPSIS.get(..max.min(ELLIPSIS.len())).unwrap_or_default());
    out.push_str(kept);
    out
}

/// The most bytes of a condition message or an Event note: no status can outgrow the
/// object size limit, whatever text a tenant put in it.
pub const MESSAGE_MAX: usize = 1024;

/// A condition message, Event note or log line that may carry tenant text (option names
/// and values, runner output, headers): control characters replaced (no terminal escape
/// reaches a status, `status` output or a log) and cut with `…` to [`MESSAGE_MAX`] bytes.
pub fn message(s: &str) -> String {
    clean(s, MESSAGE_MAX)
}

/// `s` with control characters replaced (line breaks and tabs by a space, the rest by
/// `�`, bidirectional overrides too) and cut, on a character boundary, to at most `max`
/// bytes, `…` included.
pub fn clean(s: &str, max: usize) -> String {
    const CUT: char = '…';
    let mut out = String::with_capacity(s.len().min(max.saturating_add(4)));
    for c in s.chars() {
        // Past the bound: it will be cut; the rest of a long text is not even read.
        if out.len() > max {
            break;
        }
        out.push(match c {
            '\n' | '\r' | '\t' => ' ',
            c if c.is_control()
                || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}') =>
            {
                '\u{fffd}'
            }
            c => c,
        });
    }
    if out.len() <= max {
        return out;
    }
    let mut end = max.saturating_sub(CUT.len_utf8());
    while !out.is_char_boundary(end) {
        end = end.saturating_sub(1);
    }
    out.truncate(end);
    if out.len().saturating_add(CUT.len_utf8()) <= max {
        out.push(CUT);
    }
    out
}

/// The most items a list in a message names.
const LIST_MAX: usize = 10;

/// `a, b, c`, or the first [`LIST_MAX`] and `and N more`: a message stays bounded however
/// many items there are.
pub fn list<S: AsRef<str>>(items: &[S], separator: &str) -> String {
    let shown: Vec<&str> = items.iter().take(LIST_MAX).map(AsRef::as_ref).collect();
    let mut out = shown.join(separator);
    let rest = items.len().saturating_sub(LIST_MAX);
    if rest > 0 {
        out.push_str(&format!("{separator}and {rest} more"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `cut(s, max)` is at most `max` bytes for every `max` below `end`.
    fn assert_within_every_bound_below(end: usize, cut: fn(&str, usize) -> String, s: &str) {
        for max in 0..end {
            let c = cut(s, max);
            assert!(c.len() <= max, "{max}: {c:?}");
        }
    }

    #[test]
    fn messages_lose_control_characters_and_stay_within_1024_bytes() {
        assert_eq!(
            clean("a\u{1b}[31mred\u{7}\nb\tc", 100),
            "a\u{fffd}[31mred\u{fffd} b c"
        );
        assert_eq!(clean("\u{9b}x\u{202e}y", 100), "\u{fffd}x\u{fffd}y");
        assert_eq!(message("short"), "short");
        let long = message(&"é".repeat(300 * 1024));
        assert!(long.len() <= MESSAGE_MAX, "{}", long.len());
        assert!(long.ends_with("é…"), "{long}");
        assert_eq!(clean("abcdef", 6), "abcdef");
        assert_eq!(clean("abcdefg", 6), "abc…");
        assert_within_every_bound_below(10, clean, "€€€€€");
        // Exactly at the bound after replacements: kept whole.
        let at = "\u{1b}".repeat(MESSAGE_MAX / 3);
        assert_eq!(message(&at).chars().count(), MESSAGE_MAX / 3);
    }

    #[test]
    fn head_keeps_whole_characters_within_the_bound() {
        assert_eq!(head("héllo wörld", 8), "héll...");
        assert_eq!(head("short", 10), "short");
        assert_within_every_bound_below(12, head, "€€€€");
        assert_eq!(head("€€€€", 2), "..");
        assert_eq!(head("€€€€", 6), "€...");
    }

    #[test]
    fn tail_keeps_the_end() {
        assert_eq!(tail("0123456789", 7), "...6789");
        assert_eq!(tail("ab", 7), "ab");
        assert_within_every_bound_below(14, tail, "ééééé€");
    }

    #[test]
    fn lists_name_ten_and_count_the_rest() {
        let names: Vec<String> = (0..25).map(|i| format!("v{i}")).collect();
        let l = list(&names, ", ");
        assert!(l.starts_with("v0, v1,"), "{l}");
        assert!(l.ends_with("v9, and 15 more"), "{l}");
        assert_eq!(list(&["a", "b"], "; "), "a; b");
        assert_eq!(list::<&str>(&[], ", "), "");
    }
}
