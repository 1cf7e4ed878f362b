//! Finds where values start in the raw text, for diagnostics only. Every item it looks
//! into was read whole by serde_json, so it is valid JSON; it still never indexes out of
//! bounds on any input.

// Channel data is untrusted input: no indexing that could panic (checked access only).
#![cfg_attr(not(test), deny(clippy::indexing_slicing))]

use std::collections::{BTreeMap, HashMap, HashSet};

use super::Segment;

/// Characters in UTF-8 text (bytes that do not continue a character).
pub fn count_chars(text: &[u8]) -> usize {
    text.iter().filter(|b| (**b as i8) >= -0x40).count()
}

/// Byte offset of the value at each path, or of its deepest ancestor that exists (a
/// missing key is reported at the object that lacks it). One pass over the text up to
/// the last item concerned, plus one walk of each item concerned.
pub fn offsets(data: &[u8], paths: &[&[Segment]]) -> Vec<usize> {
    let root = skip_ws(data, 0);
    let mut out = vec![root; paths.len()];
    if data.get(root) != Some(&b'[') {
        return out;
    }
    // For each item concerned: which paths, and the rest of each path inside the item.
    let mut by_item: BTreeMap<usize, Vec<(usize, &[Segment])>> = BTreeMap::new();
    for (n, path) in paths.iter().enumerate() {
        if let Some((Segment::Index(i), tail)) = path.split_first() {
            by_item.entry(*i).or_default().push((n, tail));
        }
    }
    let mut index = 0;
    let mut pos = skip_ws(data, root.saturating_add(1));
    for (item, wanted) in by_item {
        while index < item {
            let Some(next) = skip_value(data, pos).and_then(|end| after_comma(data, end)) else {
                return out;
            };
            pos = next;
            index = index.saturating_add(1);
        }
        let tails: Vec<&[Segment]> = wanted.iter().map(|(_, tail)| *tail).collect();
        let (found, end) = walk_item(data, pos, &tails);
        for (n, tail) in wanted {
            let offset = (0..=tail.len())
                .rev()
                .find_map(|len| found.get(tail.get(..len)?).copied())
                .unwrap_or(pos);
            if let Some(slot) = out.get_mut(n) {
                *slot = offset;
            }
        }
        // Go on from the end of this item rather than skip it again.
        let Some(next) = end.and_then(|end| after_comma(data, end)) else {
            return out;
        };
        pos = next;
        index = item.saturating_add(1);
    }
    out
}

/// Where the next item starts when a `,` follows the value that ends at `end`.
fn after_comma(data: &[u8], end: usize) -> Option<usize> {
    let pos = skip_ws(data, end);
    (data.get(pos) == Some(&b',')).then(|| skip_ws(data, pos.saturating_add(1)))
}

/// Offsets of the values at the given paths (and their ancestors) inside the item that
/// starts at `start`. The last of duplicate keys wins, as when parsing.
/// Also returns the offset just past the item, when it could be found.
fn walk_item<'p>(
    data: &[u8],
    start: usize,
    paths: &[&'p [Segment]],
) -> (HashMap<&'p [Segment], usize>, Option<usize>) {
    let mut prefixes: HashSet<&'p [Segment]> = HashSet::new();
    for p in paths {
        prefixes.extend((0..=p.len()).filter_map(|len| p.get(..len)));
    }
    let mut found = HashMap::new();
    found.insert(&[][..], start);
    let mut path = Vec::new();
    let end = walk(data, start, &mut path, &prefixes, &mut found);
    (found, end)
}

/// Records the values under `pos` that are on a wanted path; returns the offset just
/// past the value at `pos`.
fn walk<'p>(
    data: &[u8],
    pos: usize,
    path: &mut Vec<Segment>,
    prefixes: &HashSet<&'p [Segment]>,
    found: &mut HashMap<&'p [Segment], usize>,
) -> Option<usize> {
    // The value at `value`, the member `segment` of the one at `pos`: walked when it is on
    // a wanted path, else skipped; the offset just past it.
    let visit = |path: &mut Vec<Segment>,
                 segment: Segment,
                 value: usize,
                 found: &mut HashMap<&'p [Segment], usize>| {
        path.push(segment);
        let end = match prefixes.get(path.as_slice()) {
            Some(p) => {
                // A later duplicate key replaces everything found under an earlier one.
                found.retain(|k, _| !(k.len() > p.len() && k.starts_with(p)));
                found.insert(*p, value);
                walk(data, value, path, prefixes, found)
            }
            None => skip_value(data, value),
        };
        path.pop();
        end
    };
    match data.get(pos)? {
        b'{' => {
            let mut p = skip_ws(data, pos.saturating_add(1));
            while data.get(p) == Some(&b'"') {
                let key_end = skip_string(data, p)?;
                let key = read_key(data.get(p..key_end)?)?;
                let colon = skip_ws(data, key_end);
                let value = skip_ws(data, colon.saturating_add(1));
                let end = visit(path, Segment::Key(key), value, found)?;
                p = after_comma(data, end).unwrap_or_else(|| skip_ws(data, end));
            }
            (data.get(p) == Some(&b'}')).then_some(p.saturating_add(1))
        }
        b'[' => {
            let mut p = skip_ws(data, pos.saturating_add(1));
            let mut i = 0;
            while !matches!(data.get(p), None | Some(b']')) {
                let end = visit(path, Segment::Index(i), p, found)?;
                let Some(next) = after_comma(data, end) else {
                    p = skip_ws(data, end);
                    break;
                };
                p = next;
                i = i.saturating_add(1);
            }
            (data.get(p) == Some(&b']')).then_some(p.saturating_add(1))
        }
        _ => skip_value(data, pos),
    }
}

fn read_key(quoted: &[u8]) -> Option<String> {
    let inner = quoted.get(1..quoted.len().checked_sub(1)?)?;
    if inner.contains(&b'\\') {
        serde_json::from_slice(quoted).ok()
    } else {
        String::from_utf8(inner.to_vec()).ok()
    }
}

/// 1-based (line, column in characters) of each offset, in one pass over the text.
pub fn positions(data: &[u8], offsets: &[usize]) -> Vec<(usize, usize)> {
    // (offset, n), by offset; stable, so equal offsets keep their order.
    let mut order: Vec<(usize, usize)> = offsets
        .iter()
        .enumerate()
        .map(|(n, offset)| (*offset, n))
        .collect();
    order.sort_by_key(|(offset, _)| *offset);
    let mut out = vec![(1, 1); offsets.len()];
    let (mut cur, mut line, mut column) = (0usize, 1usize, 1usize);
    for (offset, n) in order {
        // Sorted by offset, so `cur <= target <= data.len()` and the span always exists.
        let target = offset.min(data.len());
        let span = data.get(cur..target).unwrap_or_default();
        match span.iter().rposition(|b| *b == b'\n') {
            Some(last) => {
                line = line.saturating_add(span.iter().filter(|b| **b == b'\n').count());
                column = count_chars(span.get(last.saturating_add(1)..).unwrap_or_default())
                    .saturating_add(1);
            }
            None => column = column.saturating_add(count_chars(span)),
        }
        cur = target;
        if let Some(slot) = out.get_mut(n) {
            *slot = (line, column);
        }
    }
    out
}

pub fn skip_ws(data: &[u8], mut p: usize) -> usize {
    while matches!(data.get(p), Some(b' ' | b'\t' | b'\n' | b'\r')) {
        p = p.saturating_add(1);
    }
    p
}

/// The offset just past the string that starts (with its quote) at `p`.
fn skip_string(data: &[u8], p: usize) -> Option<usize> {
    let mut q = p.saturating_add(1);
    loop {
        q = q.saturating_add(
            data.get(q..)?
                .iter()
                .position(|b| matches!(b, b'"' | b'\\'))?,
        );
        if data.get(q) == Some(&b'"') {
            return Some(q.saturating_add(1));
        }
        // A backslash: skip it and the character it escapes.
        q = q.saturating_add(2);
    }
}

/// The offset just past the value that starts at `p`.
fn skip_value(data: &[u8], p: usize) -> Option<usize> {
    match data.get(p)? {
        b'"' => skip_string(data, p),
        b'{' | b'[' => {
            let (mut depth, mut q) = (0usize, p);
            loop {
                q = q.saturating_add(
                    data.get(q..)?
                        .iter()
                        .position(|b| matches!(b, b'"' | b'{' | b'[' | b'}' | b']'))?,
                );
                match data.get(q)? {
                    b'"' => {
                        q = skip_string(data, q)?;
                        continue;
                    }
                    b'{' | b'[' => depth = depth.saturating_add(1),
                    _ => {
                        depth = depth.checked_sub(1)?;
                        if depth == 0 {
                            return Some(q.saturating_add(1));
                        }
                    }
                }
                q = q.saturating_add(1);
            }
        }
        _ => {
            let mut q = p;
            while !matches!(
                data.get(q),
                None | Some(b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r')
            ) {
                q = q.saturating_add(1);
            }
            (q > p).then_some(q)
        }
    }
}
