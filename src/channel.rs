//! Channel data: the JSON array of versions a channel produces, and the rules it must
//! follow. This is the one implementation of those rules: `validate` reports what
//! [`check`] finds, the operator refuses a sync when [`parse`] fails.
//!
//! The data is read in one streaming pass: the top-level array is walked item by item and
//! each item is checked and dropped (or handed over) before the next one is read, so memory
//! stays near the size of the data itself. Positions are only worked out for the values a
//! diagnostic is about, in one more pass over the text, so valid data never pays for them.

// Channel data is untrusted input: no indexing that could panic (checked access only).
#![cfg_attr(not(test), deny(clippy::indexing_slicing))]

use std::borrow::Cow;
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;

use serde::de::{DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

use crate::api::{CHANNEL_LABEL, ManagedOSVersionSpec, NO_LONGER_IN_SYNC_ANNOTATION};

/// Metadata keys a channel item may carry that are copied to the version.
const KEPT_METADATA: [&str; 3] = ["name", "labels", "annotations"];
/// Item keys accepted without a warning: they are natural in a copied Kubernetes object.
const QUIET_ITEM_KEYS: [&str; 4] = ["apiVersion", "kind", "metadata", "spec"];
const SPEC_KEYS: [&str; 5] = [
    "version",
    "type",
    "minVersion",
    "metadata",
    "upgradeContainer",
];
/// The API server refuses objects much above 1 MiB (etcd's limit is 1.5 MiB).
pub const MAX_ITEM_BYTES: usize = 1024 * 1024;
/// The API server's limit on the total size of an object's annotations (keys and values).
pub const MAX_ANNOTATIONS_BYTES: usize = 256 * 1024;
/// At most this many diagnostics are kept for one input; the rest are counted in a last one.
pub const MAX_DIAGNOSTICS: usize = 100_000;
/// Values longer than this many characters are shortened when quoted in a message.
const QUOTE_CHARS: usize = 60;

/// One version as the channel lists it, checked and ready to become a `ManagedOSVersion`.
#[derive(Clone, Debug, PartialEq)]
pub struct ChannelVersion {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub spec: ManagedOSVersionSpec,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Error,
    Warning,
}

/// One problem found in channel data, with where it is.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Diagnostic {
    pub severity: Severity,
    /// JSON path of the offending value, like `[1].spec.type`; empty for the whole document.
    pub path: String,
    /// 1-based line and column (in characters) of the offending value (or of the syntax
    /// error). A key that is missing is reported at the object that lacks it.
    pub line: usize,
    pub column: usize,
    pub message: String,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}, column {}: ", self.line, self.column)?;
        if !self.path.is_empty() {
            write!(f, "{}: ", self.path)?;
        }
        f.write_str(&self.message)
    }
}

/// Everything [`check`] found: the versions (complete only when there are no errors) and
/// every diagnostic, in the order they were found (item by item, in document order).
#[derive(Debug, Default)]
pub struct Report {
    pub versions: Vec<ChannelVersion>,
    pub diagnostics: Vec<Diagnostic>,
}

impl Report {
    pub fn errors(&self) -> impl Iterator<Item = &Diagnostic> {
        self.diagnostics
            .iter()
            .filter(|d| d.severity == Severity::Error)
    }
    pub fn is_valid(&self) -> bool {
        self.errors().next().is_none()
    }
}

/// Channel data that breaks a rule: the first error (a syntax error, when there is one,
/// since it says why the rest could not be read), for a status message.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("invalid channel data: {first}{more}", more = more_suffix(*.total))]
pub struct InvalidChannelData {
    pub first: Diagnostic,
    pub total: usize,
}

fn more_suffix(total: usize) -> String {
    match total {
        0 | 1 => String::new(),
        2 => " (and 1 more problem; run `rancheros-operator validate` on the data for all)".into(),
        n => format!(
            " (and {} more problems; run `rancheros-operator validate` on the data for all)",
            n - 1
        ),
    }
}

/// Channel data as a sync applies it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Parsed {
    /// One version per name: of names listed more than once, the last entry.
    pub versions: Vec<ChannelVersion>,
    /// Names listed more than once, in the order first repeated.
    pub duplicates: Vec<String>,
}

/// Parses channel data for a sync: the versions, or the reason the whole sync must fail.
///
/// Every rule applies, as in `validate`, except one: a name listed more than once is
/// taken from its last entry (channels published in the wild have listed a container
/// and an iso build under one name) and reported in [`Parsed::duplicates`].
pub fn parse(data: &[u8]) -> Result<Parsed, InvalidChannelData> {
    let mut versions = Vec::new();
    let outcome = run(data, &mut |v| versions.push(v));
    let total = outcome.errors.saturating_sub(outcome.duplicate_errors);
    if total == 0 {
        return Ok(Parsed {
            versions: last_entry_wins(versions),
            duplicates: outcome.duplicates,
        });
    }
    let is_duplicate = |i: &usize| outcome.duplicate_slots.contains(i);
    let first = match outcome.syntax {
        Some(i) => outcome.diagnostics.get(i).cloned(),
        None => outcome
            .diagnostics
            .iter()
            .enumerate()
            .find(|(i, d)| d.severity == Severity::Error && !is_duplicate(i))
            .map(|(_, d)| d.clone()),
    };
    // Only past the diagnostics' cap when every kept error is a duplicate: the last
    // diagnostic then says how many more there are.
    let first = first.or_else(|| outcome.diagnostics.last().cloned());
    Err(InvalidChannelData {
        first: first.unwrap_or(Diagnostic {
            severity: Severity::Error,
            path: String::new(),
            line: 1,
            column: 1,
            message: "invalid channel data".into(),
        }),
        total,
    })
}

/// Keeps one version per name: the content of its last entry, at its first place.
fn last_entry_wins(versions: Vec<ChannelVersion>) -> Vec<ChannelVersion> {
    let mut place: HashMap<String, usize> = HashMap::new();
    let mut out: Vec<ChannelVersion> = Vec::with_capacity(versions.len());
    for v in versions {
        match place.get(&v.name).and_then(|i| out.get_mut(*i)) {
            Some(slot) => *slot = v,
            None => {
                place.insert(v.name.clone(), out.len());
                out.push(v);
            }
        }
    }
    out
}

/// Applies every rule to `data` and reports every problem.
pub fn check(data: &[u8]) -> Report {
    let mut versions = Vec::new();
    let diagnostics = check_each(data, |v| versions.push(v));
    Report {
        versions,
        diagnostics,
    }
}

/// Like [`check`], but hands each good version to `on_version` as soon as it is read
/// instead of keeping them all: what `validate` uses to check large files in little memory.
/// Returns the diagnostics; the versions handed over are complete only when none is an error.
pub fn check_each(data: &[u8], mut on_version: impl FnMut(ChannelVersion)) -> Vec<Diagnostic> {
    run(data, &mut on_version).diagnostics
}

struct Outcome {
    diagnostics: Vec<Diagnostic>,
    /// Errors found, including those past [`MAX_DIAGNOSTICS`].
    errors: usize,
    /// Index in `diagnostics` of the syntax error, if the data is not JSON.
    syntax: Option<usize>,
    /// Duplicate-name errors: how many, which names, and where in `diagnostics`.
    duplicate_errors: usize,
    duplicates: Vec<String>,
    duplicate_slots: HashSet<usize>,
}

fn run(data: &[u8], on_version: &mut dyn FnMut(ChannelVersion)) -> Outcome {
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
        checker.syntax_at(1, 1, problem);
        return checker.finish(body);
    }
    if body.iter().all(u8::is_ascii_whitespace) {
        checker.syntax_at(
            1,
            1,
            "no data: channel data must be a JSON array of versions (`[]` when there are none)"
                .into(),
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
            checker.syntax_at(line, column, message);
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
            .nth(line - 2)
            .map_or(data.len(), |(i, _)| i + 1)
    };
    let end = line_start
        .saturating_add(byte_column.saturating_sub(1))
        .min(data.len());
    let before = data.get(line_start..end).unwrap_or_default();
    (line, locate::count_chars(before) + 1)
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

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Segment {
    Index(usize),
    Key(String),
}

pub fn path_string(path: &[Segment]) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    for seg in path {
        match seg {
            Segment::Index(i) => {
                let _ = write!(out, "[{i}]");
            }
            Segment::Key(k) => {
                let ident = !k.is_empty()
                    && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                    && !k.starts_with(|c: char| c.is_ascii_digit());
                if ident {
                    out.push('.');
                    out.push_str(k);
                } else {
                    out.push('[');
                    out.push_str(&Value::String(k.clone()).to_string());
                    out.push(']');
                }
            }
        }
    }
    out
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
            i += 1;
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

enum Where {
    Path(Vec<Segment>),
    At(usize, usize),
}

struct Found {
    severity: Severity,
    at: Where,
    message: String,
}

#[derive(Default)]
struct Checker {
    found: Vec<Found>,
    errors: usize,
    warnings: usize,
    syntax: Option<usize>,
    /// Where the first diagnostic past [`MAX_DIAGNOSTICS`] is: the note about them goes there.
    first_left_out: Option<Where>,
    duplicate_errors: usize,
    duplicates: Vec<String>,
    duplicate_names: HashSet<String>,
    duplicate_slots: HashSet<usize>,
}

fn key(k: &str) -> Segment {
    Segment::Key(k.to_string())
}

impl Checker {
    fn push(&mut self, severity: Severity, at: Where, message: String) {
        match severity {
            Severity::Error => self.errors += 1,
            Severity::Warning => self.warnings += 1,
        }
        // One slot is kept for the note that says how many were left out.
        if self.found.len() < MAX_DIAGNOSTICS - 1 {
            self.found.push(Found {
                severity,
                at,
                message,
            });
        } else if self.first_left_out.is_none() {
            self.first_left_out = Some(at);
        }
    }
    fn error(&mut self, path: Vec<Segment>, message: String) {
        self.push(Severity::Error, Where::Path(path), message);
    }
    /// A name used before: an error for `validate`, the one error a sync tolerates.
    fn duplicate_name(&mut self, path: Vec<Segment>, name: &str, message: String) {
        if self.found.len() < MAX_DIAGNOSTICS - 1 {
            self.duplicate_slots.insert(self.found.len());
        }
        self.duplicate_errors += 1;
        if self.duplicate_names.insert(name.to_string()) {
            self.duplicates.push(name.to_string());
        }
        self.error(path, message);
    }
    fn warn(&mut self, path: Vec<Segment>, message: String) {
        self.push(Severity::Warning, Where::Path(path), message);
    }
    fn syntax_at(&mut self, line: usize, column: usize, message: String) {
        self.errors += 1;
        // A syntax error ends the data, so it always has a place, past the limit too.
        self.syntax = Some(self.found.len());
        self.found.push(Found {
            severity: Severity::Error,
            at: Where::At(line, column),
            message,
        });
    }

    /// Resolves positions only now, so that valid data never pays for them.
    fn finish(mut self, data: &[u8]) -> Outcome {
        let kept = self.found.len();
        let total = self.errors + self.warnings;
        if total > kept {
            let (kept_errors, kept_warnings) = self.found.iter().fold((0, 0), |(e, w), f| match f
                .severity
            {
                Severity::Error => (e + 1, w),
                Severity::Warning => (e, w + 1),
            });
            let (more_errors, more_warnings) =
                (self.errors - kept_errors, self.warnings - kept_warnings);
            let severity = if more_errors > 0 {
                Severity::Error
            } else {
                Severity::Warning
            };
            self.found.push(Found {
                severity,
                at: self.first_left_out.take().unwrap_or(Where::Path(vec![])),
                message: format!(
                    "too many problems: {more_errors} more errors and {more_warnings} more warnings are not listed (at most {MAX_DIAGNOSTICS} are)"
                ),
            });
        }
        let paths: Vec<&[Segment]> = self
            .found
            .iter()
            .filter_map(|f| match &f.at {
                Where::Path(p) => Some(p.as_slice()),
                Where::At(..) => None,
            })
            .collect();
        let offsets = locate::offsets(data, &paths);
        let mut positions = locate::positions(data, &offsets).into_iter();
        let diagnostics = self
            .found
            .into_iter()
            .map(|f| {
                let (path, (line, column)) = match f.at {
                    Where::Path(p) => (path_string(&p), positions.next().unwrap_or((1, 1))),
                    Where::At(line, column) => (String::new(), (line, column)),
                };
                Diagnostic {
                    severity: f.severity,
                    path,
                    line,
                    column,
                    message: f.message,
                }
            })
            .collect();
        Outcome {
            diagnostics,
            errors: self.errors,
            syntax: self.syntax,
            duplicate_errors: self.duplicate_errors,
            duplicates: self.duplicates,
            duplicate_slots: self.duplicate_slots,
        }
    }

    fn item(
        &mut self,
        i: usize,
        item: Value,
        first_use: &mut HashMap<String, usize>,
    ) -> Option<ChannelVersion> {
        let at = |rest: &[&str]| {
            let mut p = vec![Segment::Index(i)];
            p.extend(rest.iter().map(|k| key(k)));
            p
        };
        let Value::Object(mut obj) = item else {
            self.error(
                at(&[]),
                format!(
                    "each version must be a JSON object, found {}",
                    kind_of(&item)
                ),
            );
            return None;
        };
        // A duplicate name alone does not keep the item from a sync (the last entry wins).
        let errors_before = self.errors - self.duplicate_errors;
        for k in obj.keys() {
            if !QUIET_ITEM_KEYS.contains(&k.as_str()) {
                self.warn(at(&[k]), "unknown key, ignored".into());
            }
        }

        // metadata: name, labels, annotations
        let mut name = None;
        let mut labels = BTreeMap::new();
        let mut annotations = BTreeMap::new();
        match obj.remove("metadata") {
            None => self.error(at(&["metadata"]), "required object is missing".into()),
            Some(Value::Object(mut meta)) => {
                for k in meta.keys() {
                    if !KEPT_METADATA.contains(&k.as_str()) {
                        self.warn(
                            at(&["metadata", k]),
                            "ignored: only name, labels and annotations are taken from a version's metadata".into(),
                        );
                    }
                }
                match meta.remove("name") {
                    None => {
                        self.error(at(&["metadata", "name"]), "required name is missing".into())
                    }
                    Some(Value::String(n)) => match dns1123_subdomain_problem(&n) {
                        Some(why) => self.error(
                            at(&["metadata", "name"]),
                            format!("{} is not a valid name: {why}", quote(&n)),
                        ),
                        None => {
                            if let Some(first) = first_use.get(&n) {
                                self.duplicate_name(
                                    at(&["metadata", "name"]),
                                    &n,
                                    format!("duplicate name {n:?}, already used by [{first}]"),
                                );
                                name = Some(n);
                            } else {
                                first_use.insert(n.clone(), i);
                                name = Some(n);
                            }
                        }
                    },
                    Some(other) => self.error(
                        at(&["metadata", "name"]),
                        format!("must be a string, found {}", kind_of(&other)),
                    ),
                }
                for (field, is_label) in [("labels", true), ("annotations", false)] {
                    if let Some(v) = meta.remove(field) {
                        let target = if is_label {
                            &mut labels
                        } else {
                            &mut annotations
                        };
                        self.string_map(at(&["metadata", field]), v, is_label, target);
                    }
                }
                let annotation_bytes: usize =
                    annotations.iter().map(|(k, v)| k.len() + v.len()).sum();
                if annotation_bytes > MAX_ANNOTATIONS_BYTES {
                    self.error(
                        at(&["metadata", "annotations"]),
                        format!(
                            "annotations hold {annotation_bytes} bytes, more than the {MAX_ANNOTATIONS_BYTES} bytes Kubernetes allows"
                        ),
                    );
                }
            }
            Some(other) => self.error(
                at(&["metadata"]),
                format!("must be an object, found {}", kind_of(&other)),
            ),
        }

        // spec
        let spec = match obj.remove("spec") {
            None => {
                self.error(at(&["spec"]), "required object is missing".into());
                None
            }
            Some(Value::Object(spec)) => self.spec(&at(&["spec"]), spec),
            Some(other) => {
                self.error(
                    at(&["spec"]),
                    format!("must be an object, found {}", kind_of(&other)),
                );
                None
            }
        };

        if self.errors - self.duplicate_errors > errors_before {
            return None;
        }
        let version = ChannelVersion {
            name: name?,
            labels,
            annotations,
            spec: spec?,
        };
        let size = approx_size(&version);
        if size > MAX_ITEM_BYTES {
            self.error(
                at(&[]),
                format!(
                    "version is about {size} bytes, more than the {MAX_ITEM_BYTES} bytes a Kubernetes object can hold"
                ),
            );
            return None;
        }
        Some(version)
    }

    fn string_map(
        &mut self,
        path: Vec<Segment>,
        value: Value,
        is_label: bool,
        into: &mut BTreeMap<String, String>,
    ) {
        let map = match value {
            Value::Object(map) => map,
            Value::Null => return,
            other => {
                self.error(
                    path,
                    format!("must be an object of strings, found {}", kind_of(&other)),
                );
                return;
            }
        };
        for (k, v) in map {
            let at = || {
                let mut p = path.clone();
                p.push(key(&k));
                p
            };
            let Value::String(s) = v else {
                self.error(at(), format!("must be a string, found {}", kind_of(&v)));
                continue;
            };
            if let Some(why) = qualified_name_problem(&k) {
                self.error(at(), format!("{} is not a valid key: {why}", quote(&k)));
                continue;
            }
            if is_label && let Some(why) = label_value_problem(&s) {
                self.error(
                    at(),
                    format!("{} is not a valid label value: {why}", quote(&s)),
                );
                continue;
            }
            if is_label && k == CHANNEL_LABEL {
                self.warn(
                    at(),
                    "ignored: the operator sets this label to the channel's name".into(),
                );
            }
            if !is_label && k == NO_LONGER_IN_SYNC_ANNOTATION {
                self.warn(
                    at(),
                    "ignored: the operator manages this annotation itself".into(),
                );
            }
            into.insert(k, s);
        }
    }

    fn spec(
        &mut self,
        path: &[Segment],
        mut spec: Map<String, Value>,
    ) -> Option<ManagedOSVersionSpec> {
        let at = |k: &str| {
            let mut p = path.to_vec();
            p.push(key(k));
            p
        };
        for k in spec.keys() {
            if !SPEC_KEYS.contains(&k.as_str()) {
                self.warn(at(k), "unknown key, ignored".into());
            }
        }
        let before = self.errors;
        let optional_string =
            |this: &mut Self, k: &str, spec: &mut Map<String, Value>| match spec.remove(k) {
                None | Some(Value::Null) => None,
                Some(Value::String(s)) => Some(s),
                Some(other) => {
                    this.error(
                        at(k),
                        format!("must be a string, found {}", kind_of(&other)),
                    );
                    None
                }
            };
        let version = optional_string(self, "version", &mut spec);
        let min_version = optional_string(self, "minVersion", &mut spec);
        let type_ = match spec.remove("type") {
            Some(Value::String(t)) if t == "container" || t == "iso" => t,
            None => {
                self.error(at("type"), "required: \"container\" or \"iso\"".into());
                String::new()
            }
            Some(other) => {
                self.error(
                    at("type"),
                    format!("must be \"container\" or \"iso\", found {}", show(&other)),
                );
                String::new()
            }
        };
        let object = |this: &mut Self, k: &str, spec: &mut Map<String, Value>| match spec.remove(k)
        {
            None | Some(Value::Null) => None,
            Some(Value::Object(m)) => Some(m),
            Some(other) => {
                this.error(
                    at(k),
                    format!("must be an object, found {}", kind_of(&other)),
                );
                None
            }
        };
        let errors_before_metadata = self.errors;
        let metadata = object(self, "metadata", &mut spec);
        // A metadata of the wrong type was reported already: no need to say what it lacks.
        let metadata_reported = self.errors > errors_before_metadata;
        let upgrade_container = object(self, "upgradeContainer", &mut spec);
        let required = match type_.as_str() {
            "container" => Some("upgradeImage"),
            "iso" => Some("uri"),
            _ => None,
        };
        if let Some(field) = required.filter(|_| !metadata_reported) {
            let mut p = at("metadata");
            p.push(key(field));
            match metadata.as_ref().and_then(|m| m.get(field)) {
                Some(Value::String(s)) if !s.trim().is_empty() => {}
                Some(Value::String(_)) => self.error(
                    p,
                    format!("must not be empty for {} version", article(&type_)),
                ),
                Some(other) => self.error(p, format!("must be a string, found {}", kind_of(other))),
                None if metadata.is_none() => self.error(
                    at("metadata"),
                    format!(
                        "required: {} version needs metadata.{field}",
                        article(&type_)
                    ),
                ),
                None => self.error(p, format!("required for {} version", article(&type_))),
            }
        }
        (self.errors == before).then_some(ManagedOSVersionSpec {
            version,
            type_,
            min_version,
            metadata,
            upgrade_container,
        })
    }
}

/// "a container" / "an iso".
fn article(type_: &str) -> String {
    if type_.starts_with(['a', 'e', 'i', 'o', 'u']) {
        format!("an {type_}")
    } else {
        format!("a {type_}")
    }
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// A value for a message: scalars as JSON (long strings shortened), containers by kind.
fn show(v: &Value) -> String {
    match v {
        Value::String(s) => quote(s),
        Value::Array(_) | Value::Object(_) => kind_of(v).into(),
        scalar => scalar.to_string(),
    }
}

/// A string quoted for a message; one too long to read is shortened and its length given.
fn quote(s: &str) -> String {
    let count = s.chars().count();
    if count <= QUOTE_CHARS {
        return format!("{s:?}");
    }
    let head: String = s.chars().take(QUOTE_CHARS - 20).collect();
    format!("{head:?}... ({count} characters)")
}

fn approx_size(v: &ChannelVersion) -> usize {
    fn value(v: &Value) -> usize {
        match v {
            Value::String(s) => s.len() + 2,
            Value::Array(a) => a.iter().map(value).sum::<usize>() + a.len() + 2,
            Value::Object(m) => object(m),
            _ => 8,
        }
    }
    fn object(m: &Map<String, Value>) -> usize {
        m.iter().map(|(k, v)| k.len() + 3 + value(v)).sum::<usize>() + 2
    }
    let maps =
        |m: &BTreeMap<String, String>| m.iter().map(|(k, v)| k.len() + v.len() + 6).sum::<usize>();
    v.name.len()
        + maps(&v.labels)
        + maps(&v.annotations)
        + v.spec.metadata.as_ref().map_or(0, object)
        + v.spec.upgrade_container.as_ref().map_or(0, object)
        + v.spec.version.as_ref().map_or(0, String::len)
        + v.spec.min_version.as_ref().map_or(0, String::len)
}

/// Why `name` is not a DNS-1123 subdomain (the rule for Kubernetes object names), if it isn't.
pub fn dns1123_subdomain_problem(name: &str) -> Option<String> {
    if name.is_empty() {
        return Some("must not be empty".into());
    }
    if name.len() > 253 {
        return Some(format!(
            "must be at most 253 characters, has {}",
            name.len()
        ));
    }
    for part in name.split('.') {
        if part.is_empty() {
            return Some("must not have empty parts between dots".into());
        }
        if let Some(c) = part
            .chars()
            .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-'))
        {
            return Some(format!(
                "{c:?} is not allowed: use lower-case letters, digits, '-' and '.'"
            ));
        }
        if part.starts_with('-') || part.ends_with('-') {
            return Some("must start and end with a letter or digit".into());
        }
    }
    None
}

/// Kubernetes "qualified name" rule for label and annotation keys: `[prefix/]name`.
fn qualified_name_problem(k: &str) -> Option<String> {
    let (prefix, name) = match k.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, k),
    };
    if let Some(p) = prefix
        && let Some(why) = dns1123_subdomain_problem(p)
    {
        return Some(format!("prefix {why}"));
    }
    if name.is_empty() || name.len() > 63 {
        return Some("the name part must be 1 to 63 characters".into());
    }
    name_part_problem(name)
}

fn label_value_problem(v: &str) -> Option<String> {
    if v.is_empty() {
        return None;
    }
    if v.len() > 63 {
        return Some("must be at most 63 characters".into());
    }
    name_part_problem(v)
}

fn name_part_problem(s: &str) -> Option<String> {
    let ok = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    if let Some(c) = s.chars().find(|c| !ok(*c)) {
        return Some(format!("{c:?} is not allowed"));
    }
    let edge_ok = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    if !edge_ok(s.chars().next()) || !edge_ok(s.chars().last()) {
        return Some("must start and end with a letter or digit".into());
    }
    None
}

/// Finds where values start in the raw text, for diagnostics only. Every item it looks
/// into was read whole by serde_json, so it is valid JSON; it still never indexes out of
/// bounds on any input.
mod locate {
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
        let mut pos = skip_ws(data, root + 1);
        for (item, wanted) in by_item {
            while index < item {
                let Some(end) = skip_value(data, pos) else {
                    return out;
                };
                pos = skip_ws(data, end);
                if data.get(pos) != Some(&b',') {
                    return out;
                }
                pos = skip_ws(data, pos + 1);
                index += 1;
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
            let Some(end) = end else {
                return out;
            };
            pos = skip_ws(data, end);
            if data.get(pos) != Some(&b',') {
                return out;
            }
            pos = skip_ws(data, pos + 1);
            index = item + 1;
        }
        out
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
        let visit =
            |path: &mut Vec<Segment>, value: usize, found: &mut HashMap<&'p [Segment], usize>| {
                match prefixes.get(path.as_slice()) {
                    Some(p) => {
                        // A later duplicate key replaces everything found under an earlier one.
                        found.retain(|k, _| !(k.len() > p.len() && k.starts_with(p)));
                        found.insert(*p, value);
                        walk(data, value, path, prefixes, found)
                    }
                    None => skip_value(data, value),
                }
            };
        match data.get(pos)? {
            b'{' => {
                let mut p = skip_ws(data, pos + 1);
                while data.get(p) == Some(&b'"') {
                    let key_end = skip_string(data, p)?;
                    let key = read_key(data.get(p..key_end)?)?;
                    let colon = skip_ws(data, key_end);
                    let value = skip_ws(data, colon + 1);
                    path.push(Segment::Key(key));
                    let end = visit(path, value, found);
                    path.pop();
                    p = skip_ws(data, end?);
                    if data.get(p) == Some(&b',') {
                        p = skip_ws(data, p + 1);
                    }
                }
                (data.get(p) == Some(&b'}')).then_some(p + 1)
            }
            b'[' => {
                let mut p = skip_ws(data, pos + 1);
                let mut i = 0;
                while !matches!(data.get(p), None | Some(b']')) {
                    path.push(Segment::Index(i));
                    let end = visit(path, p, found);
                    path.pop();
                    p = skip_ws(data, end?);
                    if data.get(p) == Some(&b',') {
                        p = skip_ws(data, p + 1);
                    } else {
                        break;
                    }
                    i += 1;
                }
                (data.get(p) == Some(&b']')).then_some(p + 1)
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
                    line += span.iter().filter(|b| **b == b'\n').count();
                    column = count_chars(span.get(last + 1..).unwrap_or_default()) + 1;
                }
                None => column += count_chars(span),
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
            p += 1;
        }
        p
    }

    /// The offset just past the string that starts (with its quote) at `p`.
    fn skip_string(data: &[u8], p: usize) -> Option<usize> {
        let mut q = p + 1;
        loop {
            q += data
                .get(q..)?
                .iter()
                .position(|b| matches!(b, b'"' | b'\\'))?;
            if data.get(q) == Some(&b'"') {
                return Some(q + 1);
            }
            // A backslash: skip it and the character it escapes.
            q += 2;
        }
    }

    /// The offset just past the value that starts at `p`.
    fn skip_value(data: &[u8], p: usize) -> Option<usize> {
        match data.get(p)? {
            b'"' => skip_string(data, p),
            b'{' | b'[' => {
                let (mut depth, mut q) = (0usize, p);
                loop {
                    q += data
                        .get(q..)?
                        .iter()
                        .position(|b| matches!(b, b'"' | b'{' | b'[' | b'}' | b']'))?;
                    match data.get(q)? {
                        b'"' => {
                            q = skip_string(data, q)?;
                            continue;
                        }
                        b'{' | b'[' => depth += 1,
                        _ => {
                            depth = depth.checked_sub(1)?;
                            if depth == 0 {
                                return Some(q + 1);
                            }
                        }
                    }
                    q += 1;
                }
            }
            _ => {
                let mut q = p;
                while !matches!(
                    data.get(q),
                    None | Some(b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r')
                ) {
                    q += 1;
                }
                (q > p).then_some(q)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use indoc::indoc;

    const SAMPLE: &str = r#"[{"metadata":{"name":"foo"},"spec":{"version":"v1","type":"container","minVersion":"0.0.0","metadata":{"upgradeImage":"registry.com/repository/image:v1"}}},{"metadata":{"name":"bar"},"spec":{"version":"v2","type":"container","minVersion":"0.0.0","metadata":{"upgradeImage":"registry.com/repository/image:v2"}}}]"#;

    fn errors(data: &str) -> Vec<String> {
        check(data.as_bytes())
            .errors()
            .map(|d| format!("{}@{}:{} {}", d.path, d.line, d.column, d.message))
            .collect()
    }

    #[test]
    fn the_sample_parses_to_two_versions() {
        let versions = parse(SAMPLE.as_bytes()).unwrap().versions;
        assert_eq!(versions.len(), 2);
        assert_eq!(versions[0].name, "foo");
        assert_eq!(versions[0].spec.version.as_deref(), Some("v1"));
        assert_eq!(versions[0].spec.type_, "container");
        assert_eq!(
            versions[1].spec.metadata.as_ref().unwrap()["upgradeImage"],
            "registry.com/repository/image:v2"
        );
    }

    #[test]
    fn an_empty_array_is_valid() {
        assert_eq!(parse(b"[]").unwrap(), Parsed::default());
    }

    #[test]
    fn syntax_errors_carry_their_position() {
        let e = parse(b"[\n  {\"metadata\": }\n]").unwrap_err();
        assert_eq!((e.first.line, e.first.column), (2, 16));
        assert!(
            e.first.message.starts_with("not valid JSON"),
            "{}",
            e.first.message
        );
        let e = parse(b"[{\"metadata\":").unwrap_err();
        assert!(e.first.message.contains("truncated"), "{}", e.first.message);
        assert!(!e.to_string().contains(" at line "), "{e}");
    }

    #[test]
    fn not_an_array() {
        assert_eq!(
            errors(r#"{"a":1}"#),
            ["@1:1 channel data must be a JSON array of versions, found an object"]
        );
    }

    #[test]
    fn rule_violations_are_all_reported_with_paths_and_positions() {
        let data = indoc! {r#"
            [
              {"metadata": {"name": "ok"}, "spec": {"type": "iso", "metadata": {"uri": "http://x"}}},
              {"metadata": {"name": "Bad_Name"}, "spec": {"type": "container", "metadata": {"upgradeImage": "i"}}},
              {"metadata": {"name": "ok"}, "spec": {"type": "rpm"}},
              {"spec": {"type": "container", "metadata": {"upgradeImage": ""}}},
              {"metadata": {"name": "x"}, "spec": {"type": "iso", "version": 3}},
              7
            ]
        "#};
        assert_eq!(
            errors(data),
            [
                r#"[1].metadata.name@3:25 "Bad_Name" is not a valid name: 'B' is not allowed: use lower-case letters, digits, '-' and '.'"#,
                r#"[2].metadata.name@4:25 duplicate name "ok", already used by [0]"#,
                r#"[2].spec.type@4:49 must be "container" or "iso", found "rpm""#,
                r#"[3].metadata@5:3 required object is missing"#,
                r#"[3].spec.metadata.upgradeImage@5:63 must not be empty for a container version"#,
                r#"[4].spec.version@6:66 must be a string, found a number"#,
                r#"[4].spec.metadata@6:39 required: an iso version needs metadata.uri"#,
                r#"[5]@7:3 each version must be a JSON object, found a number"#,
            ]
        );
    }

    #[test]
    fn ignored_metadata_and_unknown_keys_are_warnings_and_dropped() {
        let data = r#"[{"kind":"ManagedOSVersion","status":{},"metadata":{"name":"a","namespace":"x","ownerReferences":[],"labels":{"l":"v"},"annotations":{"a/b":"c"}},"spec":{"type":"iso","extra":1,"metadata":{"uri":"u","displayName":"A"}}}]"#;
        let report = check(data.as_bytes());
        assert!(report.is_valid());
        let warnings: Vec<_> = report.diagnostics.iter().map(|d| d.path.as_str()).collect();
        assert_eq!(
            warnings,
            [
                "[0].status",
                "[0].metadata.namespace",
                "[0].metadata.ownerReferences",
                "[0].spec.extra"
            ]
        );
        let v = &report.versions[0];
        assert_eq!(v.labels["l"], "v");
        assert_eq!(v.annotations["a/b"], "c");
        assert_eq!(v.spec.metadata.as_ref().unwrap()["displayName"], "A");
    }

    #[test]
    fn labels_must_be_valid_kubernetes_labels() {
        let data = r#"[{"metadata":{"name":"a","labels":{"ok":"","-bad":"v","k":"white space","n":1}},"spec":{"type":"iso","metadata":{"uri":"u"}}}]"#;
        let errs = errors(data);
        assert_eq!(errs.len(), 3, "{errs:?}");
        assert!(
            errs[0].starts_with("[0].metadata.labels[\"-bad\"]"),
            "{errs:?}"
        );
    }

    #[test]
    fn oversized_versions_are_refused() {
        let big = "x".repeat(MAX_ITEM_BYTES + 1);
        let data = format!(
            r#"[{{"metadata":{{"name":"a"}},"spec":{{"type":"iso","metadata":{{"uri":"u","blob":"{big}"}}}}}}]"#
        );
        let errs = errors(&data);
        assert_eq!(errs.len(), 1);
        assert!(errs[0].contains("more than the"), "{errs:?}");
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_crash() {
        let data = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        let e = parse(data.as_bytes()).unwrap_err();
        assert!(e.first.message.contains("recursion limit"), "{e}");
    }

    #[test]
    fn dns_names() {
        assert_eq!(dns1123_subdomain_problem("a.b-c.1"), None);
        assert!(dns1123_subdomain_problem("a..b").is_some());
        assert!(dns1123_subdomain_problem("-a").is_some());
        assert!(dns1123_subdomain_problem(&"a".repeat(254)).is_some());
    }

    #[test]
    fn paths_quote_keys_that_are_not_identifiers() {
        let p = [Segment::Index(1), key("spec"), key("a/b")];
        assert_eq!(path_string(&p), r#"[1].spec["a/b"]"#);
    }

    #[test]
    fn problems_before_a_syntax_error_are_kept_and_the_syntax_error_leads() {
        let data = "[{\"metadata\":{\"name\":\"A\"},\"spec\":{\"type\":\"iso\",\"metadata\":{\"uri\":\"u\"}}},\n {\"metadata\":";
        assert_eq!(
            errors(data),
            [
                r#"[0].metadata.name@1:22 "A" is not a valid name: 'A' is not allowed: use lower-case letters, digits, '-' and '.'"#,
                "@2:13 not valid JSON, the data ends too early (truncated?): EOF while parsing a value",
            ]
        );
        let e = parse(data.as_bytes()).unwrap_err();
        assert!(e.first.message.contains("truncated"), "{e}");
        assert_eq!(e.total, 2);
    }

    #[test]
    fn encodings_and_empty_data_get_clear_messages() {
        let bom = check(b"\xEF\xBB\xBF[]");
        assert!(bom.is_valid());
        assert_eq!(bom.diagnostics[0].severity, Severity::Warning);
        assert!(bom.diagnostics[0].message.contains("byte order mark"));
        let utf16: Vec<u8> = "\u{feff}[]"
            .encode_utf16()
            .flat_map(u16::to_le_bytes)
            .collect();
        assert_eq!(
            errors(std::str::from_utf8(&utf16).unwrap_or("\0[")),
            [
                "@1:1 the data is not UTF-8 (it looks like UTF-16 or UTF-32): channel data must be UTF-8 JSON"
            ]
        );
        assert_eq!(
            errors(" \n"),
            [
                "@1:1 no data: channel data must be a JSON array of versions (`[]` when there are none)"
            ]
        );
        let e = parse(b"[{\"metadata\":{\"name\":\"a\xFF\"}}]").unwrap_err();
        assert!(e.first.message.contains("UTF-8"), "{e}");
    }

    #[test]
    fn columns_count_characters() {
        // "é" is two bytes but one column: what follows it on the line is counted in characters.
        let data = "[{\"metadata\":{\"name\":\"é\"},\"spec\":{\"type\":1}}, é]";
        assert_eq!(
            errors(data),
            [
                r#"[0].metadata.name@1:22 "é" is not a valid name: 'é' is not allowed: use lower-case letters, digits, '-' and '.'"#,
                "[0].spec.type@1:42 must be \"container\" or \"iso\", found 1",
                "@1:47 not valid JSON: expected value",
            ]
        );
    }

    #[test]
    fn duplicate_keys_are_warnings_at_the_value_that_is_used() {
        let data = "[{\"metadata\":{\"name\":\"a\"},\"spec\":{\"type\":\"iso\",\"metadata\":{\"uri\":\"\",\n\"uri\":\"u\"}}}]";
        let report = check(data.as_bytes());
        assert!(report.is_valid(), "{:?}", report.diagnostics);
        let d = &report.diagnostics[0];
        assert_eq!(
            (d.path.as_str(), d.line, d.column, d.severity),
            ("[0].spec.metadata.uri", 2, 7, Severity::Warning)
        );
        assert_eq!(
            report.versions[0].spec.metadata.as_ref().unwrap()["uri"],
            "u"
        );
    }

    #[test]
    fn positions_inside_arrays_and_after_escaped_keys() {
        let data = indoc! {r#"
            [{"metadata": {"name": "a"}, "spec": {"type": "iso", "metadata": {"uri": "u"}}},
             {"metadata": {"name": "b", "x\"}": 1}, "spec": {"type": "container", "metadata": {"upgradeImage": "i"},
              "upgradeContainer": {"env": [{"name": "A"}, {"name": "B", "value": "1", "value": "2"}]}}}]
        "#};
        let report = check(data.as_bytes());
        let found: Vec<_> = report
            .diagnostics
            .iter()
            .map(|d| format!("{}@{}:{}", d.path, d.line, d.column))
            .collect();
        assert_eq!(
            found,
            [
                "[1].spec.upgradeContainer.env[1].value@3:84",
                r#"[1].metadata["x\"}"]@2:37"#,
            ]
        );
    }

    #[test]
    fn long_values_are_shortened_in_messages() {
        let name = "N".repeat(1_000_000);
        let data = format!(r#"[{{"metadata":{{"name":"{name}"}},"spec":{{"type":"{name}"}}}}]"#);
        let errs = errors(&data);
        assert_eq!(errs.len(), 2);
        assert!(errs.iter().all(|e| e.len() < 300), "{errs:?}");
        assert!(errs[0].contains("(1000000 characters)"), "{errs:?}");
    }

    #[test]
    fn a_kubernetes_list_gets_a_hint() {
        assert_eq!(
            errors(r#"{"kind":"List","items":[]}"#),
            [
                "@1:1 channel data must be a JSON array of versions, found an object (a Kubernetes List? the channel data is the array under its \"items\")"
            ]
        );
    }

    #[test]
    fn reserved_labels_and_oversized_annotations() {
        let big = "x".repeat(MAX_ANNOTATIONS_BYTES);
        let data = format!(
            r#"[{{"metadata":{{"name":"a","labels":{{"rancheros.cattle.io/channel":"x"}},"annotations":{{"rancheros.cattle.io/channel-no-longer-in-sync":"true"}}}},"spec":{{"type":"iso","metadata":{{"uri":"u"}}}}}},
               {{"metadata":{{"name":"b","labels":null,"annotations":{{"a":"{big}"}}}},"spec":{{"type":"iso","metadata":{{"uri":"u"}}}}}}]"#
        );
        let report = check(data.as_bytes());
        let found: Vec<_> = report
            .diagnostics
            .iter()
            .map(|d| (d.severity, d.path.as_str()))
            .collect();
        assert_eq!(
            found,
            [
                (
                    Severity::Warning,
                    r#"[0].metadata.labels["rancheros.cattle.io/channel"]"#
                ),
                (
                    Severity::Warning,
                    r#"[0].metadata.annotations["rancheros.cattle.io/channel-no-longer-in-sync"]"#
                ),
                (Severity::Error, "[1].metadata.annotations"),
            ]
        );
    }

    #[test]
    fn the_number_of_diagnostics_is_capped_but_all_are_counted() {
        let data = format!("[{}1]", "1,".repeat(MAX_DIAGNOSTICS + 9));
        let report = check(data.as_bytes());
        assert_eq!(report.diagnostics.len(), MAX_DIAGNOSTICS);
        let last = report.diagnostics.last().unwrap();
        assert!(
            last.message
                .starts_with("too many problems: 11 more errors"),
            "{last}"
        );
        assert_eq!(
            parse(data.as_bytes()).unwrap_err().total,
            MAX_DIAGNOSTICS + 10
        );
    }

    #[test]
    fn error_summary_counts_the_rest() {
        let e = parse(br#"[1,2,3]"#).unwrap_err();
        assert_eq!(e.total, 3);
        assert!(e.to_string().contains("and 2 more problems"), "{e}");
    }
}
