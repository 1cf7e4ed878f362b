use super::super::tests::Rng;
use super::super::{MAX_MATCHED_CHARS, MAX_PATTERN_BYTES};
use super::*;

/// The matcher this one replaced (backtracking over the last `*`: pattern x text steps),
/// as the reference of what a glob means.
fn backtracking(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    let (mut pi, mut ti) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        match p.get(pi) {
            Some('*') => {
                star = Some((pi, ti));
                pi += 1;
            }
            Some(c) if *c == '?' || Some(c) == t.get(ti) => {
                pi += 1;
                ti += 1;
            }
            _ => match star {
                Some((sp, st)) => {
                    pi = sp + 1;
                    ti = st + 1;
                    star = Some((sp, ti));
                }
                None => return false,
            },
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

/// Random patterns of `*`, `?`, `a`, `b` (and `ü`) up to the byte cap, and texts of `a`,
/// `b` up to the character cap, with the worst cases of the old matcher among them.
fn patterns_and_texts() -> (Vec<String>, Vec<String>) {
    let mut rng = Rng(7);
    let mut patterns = vec![
        // Failed late from every start in a text of `a`s: quadratic steps before.
        format!("*{}b", "a".repeat(MAX_MATCHED_CHARS / 2)),
        format!("*{}b", "a".repeat(MAX_PATTERN_BYTES - 2)),
        format!("*{}b", "?".repeat(MAX_PATTERN_BYTES - 2)),
        "*a".repeat(MAX_PATTERN_BYTES / 2),
        "*".into(),
        String::new(),
    ];
    let alphabet = ['*', '?', 'a', 'b', 'ü'];
    for _ in 0..400 {
        let len = usize::try_from(rng.next() % 40).unwrap();
        let len = if rng.next().is_multiple_of(4) {
            len * 6
        } else {
            len
        };
        let pattern: String = (0..len)
            .map(|_| alphabet[usize::try_from(rng.next() % 5).unwrap()])
            .collect();
        patterns.push(pattern);
    }
    let mut texts = vec![
        String::new(),
        "a".repeat(MAX_MATCHED_CHARS),
        format!("{}b", "a".repeat(MAX_MATCHED_CHARS - 1)),
        "ab".repeat(MAX_MATCHED_CHARS / 2),
    ];
    for _ in 0..40 {
        let len = usize::try_from(rng.next() % 30).unwrap();
        texts.push(
            (0..len)
                .map(|_| ['a', 'b', 'ü'][usize::try_from(rng.next() % 3).unwrap()])
                .collect(),
        );
    }
    (patterns, texts)
}

#[test]
fn globs_mean_what_the_backtracking_matcher_meant() {
    let (patterns, texts) = patterns_and_texts();
    let mut matched = 0;
    for pattern in &patterns {
        for text in &texts {
            let want = backtracking(pattern, text);
            assert_eq!(glob(pattern, text), want, "{pattern:?} {text:?}");
            matched += usize::from(want);
        }
    }
    assert!(matched > 100, "the cases match as well as fail: {matched}");
}

#[test]
fn a_glob_reads_each_character_of_the_text_once_whatever_the_pattern() {
    let (patterns, texts) = patterns_and_texts();
    for pattern in &patterns {
        for text in &texts {
            let (_, steps) = glob_counted(pattern, text);
            let t = text.chars().count();
            // (each step is at most one word operation per 64 characters of the pattern)
            assert!(steps <= t, "{steps} steps: {pattern:?} {t}");
        }
        // A text of the item cap's size costs nothing: it is not matched.
        let long = "a".repeat(1 << 20);
        assert_eq!(glob_counted(pattern, &long), (false, 0), "{pattern:?}");
        let long = "ü".repeat(MAX_MATCHED_CHARS + 1);
        assert_eq!(glob_counted(pattern, &long).1, 0, "characters are counted");
    }
    // 253 characters of a two-byte letter still match.
    assert!(glob("*", &"ü".repeat(MAX_MATCHED_CHARS)));
}
