//! `include`/`exclude` globs, matched in time linear in the text.

use std::collections::HashMap;

use super::matchable;

/// `*` any run of characters, `?` one; everything else itself. A text over
/// [`MAX_MATCHED_CHARS`](super::MAX_MATCHED_CHARS) is not matched.
pub fn glob(pattern: &str, text: &str) -> bool {
    Glob::new(pattern).matches(text)
}

/// A glob compiled once: the parts between its `*`s. A text matches when it starts with
/// the first part and ends with the last, and the middle parts are found in order between
/// them, each at its leftmost place (the leftmost place leaves the most room for the rest,
/// so no other need be tried). Each middle part is searched for bit-parallel (shift-and),
/// the searches going on where the last one stopped: every character of the text is looked
/// at about once, whatever the pattern (a backtracking matcher takes pattern x text steps).
#[derive(Clone, Debug, PartialEq)]
pub struct Glob {
    first: Vec<char>,
    middle: Vec<Part>,
    /// `None`: no `*`, the first part is the whole text.
    last: Option<Vec<char>>,
}

/// A middle part, for the shift-and search: for each character, the bits of the places in
/// the part that it (or a `?`) fills.
#[derive(Clone, Debug, PartialEq)]
struct Part {
    len: usize,
    masks: HashMap<char, Vec<u64>>,
    /// The bits of the `?`s: what any other character fills.
    any: Vec<u64>,
}

impl Part {
    fn new(chars: &[char]) -> Part {
        let words = chars.len().div_ceil(64);
        let mut any = vec![0u64; words];
        let mut masks: HashMap<char, Vec<u64>> = HashMap::new();
        for (i, c) in chars.iter().enumerate() {
            if *c == '?' {
                set(&mut any, i);
            } else {
                set(masks.entry(*c).or_insert_with(|| vec![0u64; words]), i);
            }
        }
        for mask in masks.values_mut() {
            for (m, a) in mask.iter_mut().zip(&any) {
                *m |= a;
            }
        }
        Part {
            len: chars.len(),
            masks,
            any,
        }
    }

    /// Where the part ends first in `text` (the index after it), and the characters read.
    fn find_end(&self, text: &[char]) -> (Option<usize>, usize) {
        let mut state = vec![0u64; self.any.len()];
        let last = self.len.saturating_sub(1);
        for (i, c) in text.iter().enumerate() {
            // Every place moves on by one and a match may start here; the character
            // keeps the places it fills.
            let mut carry = 1u64;
            let mask = self.masks.get(c).unwrap_or(&self.any);
            for (w, m) in state.iter_mut().zip(mask) {
                let out = *w >> 63;
                *w = ((*w << 1) | carry) & m;
                carry = out;
            }
            if bit(&state, last) {
                return (Some(i.saturating_add(1)), i.saturating_add(1));
            }
        }
        (None, text.len())
    }
}

fn set(bits: &mut [u64], i: usize) {
    if let Some(w) = bits.get_mut(i / 64) {
        *w |= 1u64 << (i % 64);
    }
}

fn bit(bits: &[u64], i: usize) -> bool {
    bits.get(i / 64)
        .is_some_and(|w| w & (1u64 << (i % 64)) != 0)
}

/// Whether `text` (as long as `part`) is `part`, a `?` filled by any character.
fn fills(part: &[char], text: &[char]) -> bool {
    part.len() == text.len() && part.iter().zip(text).all(|(p, t)| *p == '?' || p == t)
}

impl Glob {
    pub fn new(pattern: &str) -> Glob {
        let mut parts: Vec<Vec<char>> = pattern.split('*').map(|p| p.chars().collect()).collect();
        let first = if parts.is_empty() {
            Vec::new()
        } else {
            parts.remove(0)
        };
        let last = parts.pop();
        let middle = parts
            .iter()
            .filter(|p| !p.is_empty())
            .map(|p| Part::new(p))
            .collect();
        Glob {
            first,
            middle,
            last,
        }
    }

    pub fn matches(&self, text: &str) -> bool {
        self.matches_counted(text).0
    }

    /// [`Glob::matches`], and the characters of the text it read (each costs at most one
    /// word operation per 64 characters of a part).
    fn matches_counted(&self, text: &str) -> (bool, usize) {
        if !matchable(text) {
            return (false, 0);
        }
        let t: Vec<char> = text.chars().collect();
        let Some(last) = &self.last else {
            return (fills(&self.first, &t), t.len());
        };
        // The first and the last part, apart: too short a text is not read.
        let start = self.first.len();
        let Some(end) = t.len().checked_sub(last.len()).filter(|end| start <= *end) else {
            return (false, 0);
        };
        let mut steps = start.saturating_add(last.len());
        let (Some(head), Some(tail)) = (t.get(..start), t.get(end..)) else {
            return (false, steps);
        };
        if !fills(&self.first, head) || !fills(last, tail) {
            return (false, steps);
        }
        let mut at = start;
        for part in &self.middle {
            let rest = t.get(at..end).unwrap_or_default();
            let (found, read) = part.find_end(rest);
            steps = steps.saturating_add(read);
            match found {
                Some(n) => at = at.saturating_add(n),
                None => return (false, steps),
            }
        }
        (true, steps)
    }
}

#[cfg(test)]
pub(super) fn glob_counted(pattern: &str, text: &str) -> (bool, usize) {
    Glob::new(pattern).matches_counted(text)
}

#[cfg(test)]
mod tests;
