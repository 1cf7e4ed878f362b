//! Channel data: the JSON array of versions a channel produces, and the rules it must
//! follow. This is the one implementation of those rules: `validate` reports what
//! [`check`] finds, the operator refuses a sync when [`parse`] fails.
//!
//! The data is read in one streaming pass: the top-level array is walked item by item and
//! each item is checked and dropped (or handed over) before the next one is read, so memory
//! stays near the size of the data itself. Positions are only worked out for the values a
//! diagnostic is about, in one more pass over the text, so valid data never pays for them.
//!
//! Layout: `read` walks the data and words the syntax errors, `rules` says what each item
//! must be, `names` holds the Kubernetes name rules, `checker` collects the diagnostics
//! (capped) and has `locate` find their positions at the end.

// Channel data is untrusted input: no indexing that could panic (checked access only).
#![cfg_attr(not(test), deny(clippy::indexing_slicing))]

pub mod changelogs;
mod checker;
mod depth;
pub mod images;
mod locate;
mod names;
mod read;
mod rules;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;

use serde_json::Value;

use crate::api::ManagedOSVersionSpec;

pub use depth::MAX_DEPTH;
pub use names::dns1123_subdomain_problem;

/// The API server refuses objects much above 1 MiB (etcd's limit is 1.5 MiB).
pub const MAX_ITEM_BYTES: usize = 1024 * 1024;
/// The API server's limit on the total size of an object's annotations (keys and values).
pub const MAX_ANNOTATIONS_BYTES: usize = 256 * 1024;
/// At most this many diagnostics are kept for one input; the rest are counted in a last one.
pub const MAX_DIAGNOSTICS: usize = 100_000;

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
    /// `path` and `message` without any bytes of the data, when they carry some: see
    /// [`Diagnostic::without_values`].
    #[serde(skip)]
    bare: Option<Box<Bare>>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Bare {
    path: String,
    message: String,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.render(f, &self.path, &self.message)
    }
}

impl Diagnostic {
    /// The diagnostic in words that carry no byte of the data: line, column, the path with
    /// every key the data chose shown as `[<key>]`, and the rule broken, without the value
    /// that broke it. For a status that people who may not read the data can read (a json
    /// channel's source may be a server only the operator reaches).
    pub fn without_values(&self) -> impl fmt::Display + '_ {
        WithoutValues(self)
    }

    fn render(&self, f: &mut fmt::Formatter<'_>, path: &str, message: &str) -> fmt::Result {
        write!(f, "line {}, column {}: ", self.line, self.column)?;
        if !path.is_empty() {
            write!(f, "{path}: ")?;
        }
        f.write_str(message)
    }
}

struct WithoutValues<'a>(&'a Diagnostic);

impl fmt::Display for WithoutValues<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = self.0;
        match &d.bare {
            Some(bare) => d.render(f, &bare.path, &bare.message),
            None => d.render(f, &d.path, &d.message),
        }
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

impl InvalidChannelData {
    /// The message without any byte of the data (see [`Diagnostic::without_values`]).
    pub fn without_values(&self) -> String {
        format!(
            "invalid channel data: {}{}",
            self.first.without_values(),
            more_suffix(self.total)
        )
    }
}

fn more_suffix(total: usize) -> String {
    match total {
        0 | 1 => String::new(),
        2 => " (and 1 more problem; run `rancheros-operator validate` on the data for all)".into(),
        n => format!(
            " (and {} more problems; run `rancheros-operator validate` on the data for all)",
            n.saturating_sub(1)
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
    /// Entries the data lists (duplicates included); only the first ones are kept when
    /// parsed with [`parse_at_most`].
    pub listed: usize,
}

/// Parses channel data for a sync: the versions, or the reason the whole sync must fail.
///
/// Every rule applies, as in `validate`, except one: a name listed more than once is
/// taken from its last entry (channels published in the wild have listed a container
/// and an iso build under one name) and reported in [`Parsed::duplicates`].
pub fn parse(data: &[u8]) -> Result<Parsed, InvalidChannelData> {
    parse_at_most(data, usize::MAX)
}

/// [`parse`], keeping at most `most` entries: the rest are checked and counted
/// ([`Parsed::listed`]) but not kept, so that data listing more than a sync may apply
/// costs no more memory than data listing that many.
pub fn parse_at_most(data: &[u8], most: usize) -> Result<Parsed, InvalidChannelData> {
    let mut versions = Vec::new();
    let mut listed: usize = 0;
    let outcome = read::run(data, &mut |v| {
        listed = listed.saturating_add(1);
        if listed <= most {
            versions.push(v);
        }
    });
    let total = outcome.errors.saturating_sub(outcome.duplicate_errors);
    if total == 0 {
        return Ok(Parsed {
            versions: last_entry_wins(versions),
            duplicates: outcome.duplicates,
            listed,
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
            bare: None,
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
    read::run(data, &mut on_version).diagnostics
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

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Segment {
    Index(usize),
    Key(String),
}

fn path_string(path: &[Segment]) -> String {
    write_path(path, |_| true)
}

/// The path with every key the rules do not name (a label's key, an unknown key: the
/// data's own words) shown as `[<key>]`; `None` when there is none.
fn bare_path_string(path: &[Segment]) -> Option<String> {
    let own = |s: &Segment| matches!(s, Segment::Key(k) if !rules::is_schema_key(k));
    path.iter()
        .any(own)
        .then(|| write_path(path, rules::is_schema_key))
}

/// `keep(key)`: whether the key is shown, else `[<key>]` stands for it.
fn write_path(path: &[Segment], keep: impl Fn(&str) -> bool) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    for seg in path {
        match seg {
            Segment::Index(i) => {
                let _ = write!(out, "[{i}]");
            }
            Segment::Key(k) if !keep(k) => out.push_str("[<key>]"),
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

fn key(k: &str) -> Segment {
    Segment::Key(k.to_string())
}
