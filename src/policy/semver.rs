//! Versions as channels write them (`v2.1.4-6.118`): semver with a leading `v` allowed and
//! build metadata (`+...`) ignored; and ranges over them (`>=2.1.0 <3 || =1.9.0`).
//!
//! Written here rather than taken from a crate: ranges follow the channels' own habit,
//! where the `-6.118` after a version is the distribution's release number, not a
//! pre-release. A bound without a pre-release part compares only `major.minor.patch`, so
//! `>=2.2.0` holds `v2.2.0-3.15` (semver's own ranges would leave out every such version).

use std::cmp::Ordering;

/// A parsed version: its three numbers and its pre-release identifiers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Version {
    core: [u64; 3],
    pre: Vec<Ident>,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Ident {
    // Numeric identifiers sort before alphanumeric ones (semver 11.4.3): declared first.
    Num(u64),
    Alpha(String),
}

impl Version {
    /// `[v]MAJOR[.MINOR[.PATCH]][-PRE][+BUILD]` (a missing number is 0: channels write
    /// `v2`); `None` for anything else, and for a text over
    /// [`super::MAX_MATCHED_CHARS`] characters (no real version is that long; the bound
    /// keeps a sort's many parses cheap whatever the data).
    pub fn parse(text: &str) -> Option<Version> {
        if !super::matchable(text) {
            return None;
        }
        Version::bound(text).map(|(v, _)| v)
    }

    /// One to three numbers (`3` is `3.0.0`), a pre-release allowed; whether it has one.
    fn bound(text: &str) -> Option<(Version, bool)> {
        let (core, pre) = split(text)?;
        let mut numbers = [0u64; 3];
        let mut given = 0usize;
        for (slot, part) in numbers.iter_mut().zip(core.split('.')) {
            *slot = number(part)?;
            given = given.saturating_add(1);
        }
        if given == 0 || core.split('.').count() > 3 {
            return None;
        }
        let pre = idents(pre)?;
        let whole = !pre.is_empty();
        Some((Version { core: numbers, pre }, whole))
    }
}

/// `text` without a leading `v` and without build metadata: the core, and the pre-release.
fn split(text: &str) -> Option<(&str, Option<&str>)> {
    let text = text.strip_prefix(['v', 'V']).unwrap_or(text);
    let text = text.split_once('+').map_or(text, |(t, _)| t);
    Some(match text.split_once('-') {
        Some((core, pre)) => (core, Some(pre)),
        None => (text, None),
    })
}

fn number(part: &str) -> Option<u64> {
    if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    part.parse().ok()
}

fn idents(pre: Option<&str>) -> Option<Vec<Ident>> {
    let Some(pre) = pre else {
        return Some(Vec::new());
    };
    pre.split('.')
        .map(|i| {
            if i.is_empty() || !i.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') {
                None
            } else if i.bytes().all(|b| b.is_ascii_digit()) {
                // (a number too big for u64 sorts as text, after every number)
                Some(
                    i.parse()
                        .map_or_else(|_| Ident::Alpha(i.into()), Ident::Num),
                )
            } else {
                Some(Ident::Alpha(i.into()))
            }
        })
        .collect()
}

impl Ord for Version {
    fn cmp(&self, other: &Self) -> Ordering {
        self.core.cmp(&other.core).then_with(|| {
            match (self.pre.is_empty(), other.pre.is_empty()) {
                // A release is newer than its pre-releases.
                (true, true) => Ordering::Equal,
                (true, false) => Ordering::Greater,
                (false, true) => Ordering::Less,
                (false, false) => self.pre.cmp(&other.pre),
            }
        })
    }
}

impl PartialOrd for Version {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Ge,
    Gt,
    Le,
    Lt,
    Eq,
}

#[derive(Clone, Debug, PartialEq)]
struct Comparator {
    op: Op,
    bound: Version,
    /// The bound names a pre-release: compared with the whole version, else with its
    /// three numbers only.
    whole: bool,
}

impl Comparator {
    fn holds(&self, v: &Version) -> bool {
        let order = if self.whole {
            v.cmp(&self.bound)
        } else {
            v.core.cmp(&self.bound.core)
        };
        match self.op {
            Op::Ge => order != Ordering::Less,
            Op::Gt => order == Ordering::Greater,
            Op::Le => order != Ordering::Greater,
            Op::Lt => order == Ordering::Less,
            Op::Eq => order == Ordering::Equal,
        }
    }
}

/// A range: alternatives (`||`), each a set of comparators that must all hold.
#[derive(Clone, Debug, PartialEq)]
pub struct Range(Vec<Vec<Comparator>>);

impl Range {
    pub fn parse(text: &str) -> Result<Range, String> {
        let mut alternatives = Vec::new();
        for alt in text.split("||") {
            let mut all = Vec::new();
            let words: Vec<&str> = alt.split_whitespace().collect();
            let mut i = 0usize;
            while let Some(word) = words.get(i) {
                i = i.saturating_add(1);
                let (op, rest) = if let Some(r) = word.strip_prefix(">=") {
                    (Op::Ge, r)
                } else if let Some(r) = word.strip_prefix("<=") {
                    (Op::Le, r)
                } else if let Some(r) = word.strip_prefix('>') {
                    (Op::Gt, r)
                } else if let Some(r) = word.strip_prefix('<') {
                    (Op::Lt, r)
                } else if let Some(r) = word.strip_prefix('=') {
                    (Op::Eq, r)
                } else {
                    (Op::Eq, *word)
                };
                // `>= 2.1.0`: the version may follow as its own word.
                let rest = if rest.is_empty() {
                    let next = words.get(i).copied().unwrap_or_default();
                    i = i.saturating_add(1);
                    next
                } else {
                    rest
                };
                let (bound, whole) = Version::bound(rest).ok_or_else(|| {
                    format!(
                        "{:?} is not a version (use numbers like 2.1.0)",
                        crate::text::head(rest, 64)
                    )
                })?;
                all.push(Comparator { op, bound, whole });
            }
            if all.is_empty() {
                return Err("an empty alternative".into());
            }
            alternatives.push(all);
        }
        Ok(Range(alternatives))
    }

    pub fn holds(&self, v: &Version) -> bool {
        self.0.iter().any(|all| all.iter().all(|c| c.holds(v)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Version {
        Version::parse(s).unwrap_or_else(|| panic!("{s}"))
    }

    #[test]
    fn versions_order_as_semver_with_a_v_and_without_build_metadata() {
        let sorted = [
            "v1.0.0-alpha",
            "1.0.0-alpha.1",
            "1.0.0-alpha.beta",
            "1.0.0-beta.2",
            "1.0.0-beta.11",
            "1.0.0-rc.1",
            "1.0.0",
            "v2.2.0-3.7",
            "v2.2.0-3.13",
            "v2.2.0-3.15",
            "2.10.0",
        ];
        for pair in sorted.windows(2) {
            assert!(v(pair[0]) < v(pair[1]), "{pair:?}");
        }
        assert_eq!(v("1.2.3+build.5").cmp(&v("v1.2.3")), Ordering::Equal);
        assert_eq!(v("v2").cmp(&v("2.0.0")), Ordering::Equal);
        assert!(v("v1") < v("1.0.1"));
        for bad in [
            "",
            "1..2",
            "1.2.3.4",
            "latest",
            "1.x.0",
            "1.2.3-",
            "1.2.3-a..b",
            "v",
        ] {
            assert!(Version::parse(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn a_bound_without_a_pre_release_holds_the_releases_of_its_numbers() {
        let r = Range::parse(">=2.1.0 <3").unwrap();
        assert!(r.holds(&v("v2.1.4-6.118")));
        assert!(r.holds(&v("2.9.9")));
        assert!(!r.holds(&v("3.0.0-1.1")));
        assert!(!r.holds(&v("2.0.9")));
        let exact = Range::parse("=2.2.0").unwrap();
        assert!(exact.holds(&v("v2.2.0-3.15")));
        let pre = Range::parse(">=2.2.0-3.13").unwrap();
        assert!(pre.holds(&v("v2.2.0-3.15")));
        assert!(!pre.holds(&v("v2.2.0-3.7")));
        let either = Range::parse("<1 || >= 2.2").unwrap();
        assert!(either.holds(&v("0.9.0")) && either.holds(&v("2.2.0-1")));
        assert!(!either.holds(&v("1.5.0")));
        for bad in [">=", "||", ">=x", "<1.2.3.4", ">=1 ||"] {
            assert!(Range::parse(bad).is_err(), "{bad}");
        }
    }
}
