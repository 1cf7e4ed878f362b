//! The one streaming pass over the data: the top-level array item by item, each item
//! handed to the rules as soon as it is read; and the messages for data that is not JSON.

// Channel data is untrusted input: no indexing that could panic (checked access only).
#![cfg_attr(not(test), deny(clippy::indexing_slicing))]

use std::borrow::Cow;
use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt;

use serde::de::{DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

use super::checker::{Checker, Where};
use super::{ChannelVersion, Outcome, Segment, Severity, key, locate};

/// Reads and checks `data`, handing each good version to `on_version`.
pub(super) fn run(data: &[u8], on_version: &mut dyn FnMut(ChannelVersion)) -> Outcome {
    let mut checker = Checker::default();
    let body = match data.strip_prefix(b"\xEF\xBB\xBF") {
        Some(rest) => {
            checker.push(
                Severity::Warning,
                Where::At(1, 1),
                "the data starts with a UTF-8 byte order mark (BOM), which is ignored".into(),
            );
            rest
        }
        None => data,
    };
    if let Some(problem) = encoding_problem(body) {
        checker.syntax_at(1, 1, problem, None);
        return checker.finish(body);
    }
    if body.iter().all(u8::is_ascii_whitespace) {
        checker.syntax_at(
            1,
            1,
            "no data: channel data must be a JSON array of versions (`[]` when there are none)"
                .into(),
            None,
        );
        return checker.finish(body);
    }
    let mut de = serde_json::Deserializer::from_slice(body);
    let root = Root {
        checker: &mut checker,
        first_use: HashMap::new(),
        on_version,
    };
    let outcome = root.deserialize(&mut de).and_then(|kind| {
        de.end()?;
        Ok(kind)
    });
    match outcome {
        Ok(None) => {}
        Ok(Some(kind)) => checker.error(
            vec![],
            format!("channel data must be a JSON array of versions, found {kind}"),
        ),
        Err(e) => {
            let (line, column) = char_column(body, e.line(), e.column());
            let mut message = syntax_message(&e);
            if looks_like_yaml(body) {
                message.push_str(" (this looks like YAML: channel data must be JSON)");
            }
            // serde_json's syntax messages are fixed words; a data error (none is expected
            // from these visitors) may quote a value.
            let bare = (e.classify() == serde_json::error::Category::Data)
                .then(|| "not valid JSON: a value could not be read".to_string());
            checker.syntax_at(line, column, message, bare);
        }
    }
    checker.finish(body)
}

/// Whether the first line reads like YAML (`---`, `- item`, `key: value`), a common mix-up.
fn looks_like_yaml(data: &[u8]) -> bool {
    let start = locate::skip_ws(data, 0);
    let line = data
        .get(start..)
        .unwrap_or_default()
        .split(|b| *b == b'\n')
        .next()
        .unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let line = line.trim_end();
    if line == "---" || line.starts_with("- ") || line == "-" {
        return true;
    }
    match line.split_once(':') {
        Some((key, rest)) => {
            !key.is_empty()
                && key
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
                && (rest.is_empty() || rest.starts_with(' '))
        }
        None => false,
    }
}

/// Text in another encoding than UTF-8 fails as JSON with an unhelpful message; say why.
fn encoding_problem(data: &[u8]) -> Option<String> {
    // One of the first two bytes zero and not the other: ASCII text in UTF-16.
    let one_zero_of_two = matches!(data, [a, b, ..] if (*a == 0) != (*b == 0));
    let utf16 = data.starts_with(b"\xFF\xFE") || data.starts_with(b"\xFE\xFF") || one_zero_of_two;
    let utf32 = data.starts_with(b"\x00\x00\xFE\xFF") || data.starts_with(b"\xFF\xFE\x00\x00");
    (utf16 || utf32).then(|| {
        "the data is not UTF-8 (it looks like UTF-16 or UTF-32): channel data must be UTF-8 JSON"
            .into()
    })
}

/// serde_json counts columns in bytes; diagnostics count characters, as editors do.
fn char_column(data: &[u8], line: usize, byte_column: usize) -> (usize, usize) {
    let line = line.max(1);
    let line_start = if line == 1 {
        0
    } else {
        data.iter()
            .enumerate()
            .filter(|(_, b)| **b == b'\n')
            .nth(line.saturating_sub(2))
            .map_or(data.len(), |(i, _)| i.saturating_add(1))
    };
    let end = line_start
        .saturating_add(byte_column.saturating_sub(1))
        .min(data.len());
    let before = data.get(line_start..end).unwrap_or_default();
    (line, locate::count_chars(before).saturating_add(1))
}

fn syntax_message(e: &serde_json::Error) -> String {
    use serde_json::error::Category;
    let text = e.to_string();
    // serde_json appends " at line L column C"; the diagnostic carries the position itself.
    let text = match text.rsplit_once(" at line ") {
        Some((message, _)) => message.to_string(),
        None => text,
    };
    if text.starts_with("recursion limit exceeded") {
        return "arrays and objects are nested too deeply (recursion limit exceeded: at most 127 levels)".into();
    }
    if text.starts_with("number out of range") {
        return "a number is too large to be read (number out of range)".into();
    }
    if text.starts_with("invalid unicode code point") {
        return "not valid UTF-8 in a string: channel data must be UTF-8 JSON".into();
    }
    if text == "expected ident" {
        return "not valid JSON: unknown word (the only bare words in JSON are true, false and null; strings need double quotes)".into();
    }
    match e.classify() {
        Category::Eof => format!("not valid JSON, the data ends too early (truncated?): {text}"),
        _ => format!("not valid JSON: {text}"),
    }
}

/// The top-level value: an array is checked item by item as it is read; anything else is
/// skipped and named.
struct Root<'c, 'f> {
    checker: &'c mut Checker,
    first_use: HashMap<String, usize>,
    on_version: &'f mut dyn FnMut(ChannelVersion),
}

impl<'de> DeserializeSeed<'de> for Root<'_, '_> {
    /// `None` for an array, else what was found instead.
    type Value = Option<&'static str>;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Root<'_, '_> {
    type Value = Option<&'static str>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON array of versions")
    }
    fn visit_seq<A: SeqAccess<'de>>(mut self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut i = 0;
        let duplicates = RefCell::new(Vec::new());
        loop {
            let link = Link {
                up: None,
                segment: LinkSegment::Index(i),
            };
            let seed = ValueSeed {
                at: &link,
                duplicates: &duplicates,
            };
            let Some(item) = seq.next_element_seed(seed)? else {
                break;
            };
            for path in duplicates.borrow_mut().drain(..) {
                self.checker.warn(
                    path,
                    "duplicate key: only its last value is used, the earlier ones are ignored"
                        .into(),
                );
            }
            if let Some(version) = self.checker.item(i, item, &mut self.first_use) {
                (self.on_version)(version);
            }
            i = i.saturating_add(1);
        }
        Ok(None)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut list = false;
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            list |= key == "items";
            map.next_value::<IgnoredAny>()?;
        }
        Ok(Some(if list {
            "an object (a Kubernetes List? the channel data is the array under its \"items\")"
        } else {
            "an object"
        }))
    }
    fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
        Ok(Some("a boolean"))
    }
    fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
        Ok(Some("a number"))
    }
    fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
        Ok(Some("a number"))
    }
    fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
        Ok(Some("a number"))
    }
    fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
        Ok(Some("a string"))
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(Some("null"))
    }
}

/// Where a value being read sits, as a chain of borrowed segments: no allocation unless a
/// duplicate key is found and its path is needed.
struct Link<'a> {
    up: Option<&'a Link<'a>>,
    segment: LinkSegment<'a>,
}

enum LinkSegment<'a> {
    Index(usize),
    Key(&'a str),
}

impl Link<'_> {
    fn path(&self) -> Vec<Segment> {
        let mut out = Vec::new();
        let mut at = Some(self);
        while let Some(link) = at {
            out.push(match link.segment {
                LinkSegment::Index(i) => Segment::Index(i),
                LinkSegment::Key(k) => key(k),
            });
            at = link.up;
        }
        out.reverse();
        out
    }
}

/// Reads a [`Value`] as serde_json does, and also notes the paths of duplicate keys, which
/// serde_json drops silently (the last one wins).
struct ValueSeed<'a> {
    at: &'a Link<'a>,
    duplicates: &'a RefCell<Vec<Vec<Segment>>>,
}

impl<'de> DeserializeSeed<'de> for ValueSeed<'_> {
    type Value = Value;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ValueSeed<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(64));
        loop {
            let link = Link {
                up: Some(self.at),
                segment: LinkSegment::Index(out.len()),
            };
            let seed = ValueSeed {
                at: &link,
                duplicates: self.duplicates,
            };
            match seq.next_element_seed(seed)? {
                Some(v) => out.push(v),
                None => return Ok(Value::Array(out)),
            }
        }
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(k) = map.next_key::<String>()? {
            let link = Link {
                up: Some(self.at),
                segment: LinkSegment::Key(&k),
            };
            let v = map.next_value_seed(ValueSeed {
                at: &link,
                duplicates: self.duplicates,
            })?;
            let path = out.contains_key(&k).then(|| link.path());
            if let Some(path) = path {
                self.duplicates.borrow_mut().push(path);
            }
            out.insert(k, v);
        }
        Ok(Value::Object(out))
    }
}
