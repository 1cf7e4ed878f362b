//! The `validate` subcommand: lints channel data with the operator's own rules
//! (`channel::check_each`) and reports every problem, for people (text) or tools (json).
//! The json output's schema is documented in `docs/validate.md`; keep them in step.

// The source lines shown come from untrusted input: checked access only, no indexing.
#![cfg_attr(not(test), deny(clippy::indexing_slicing))]

use std::io::{Read, Write};
use std::path::Path;

use serde::Serialize;

use crate::channel::{self, Diagnostic, Severity};

pub mod image;
pub mod policy;

/// Version of the `--format json` document; bumped only on incompatible changes.
pub const JSON_SCHEMA: u32 = 1;

pub use crate::commands::output::Format;

/// The result for one input.
#[derive(Debug, Serialize)]
pub struct FileReport {
    /// The name as given (`<stdin>` for `-`).
    pub file: String,
    /// No read error and no error diagnostic.
    pub valid: bool,
    /// Why the input could not be read; it was not checked then.
    pub read_error: Option<String>,
    /// The versions the operator would sync: all of them when valid, else 0.
    pub versions: usize,
    pub errors: usize,
    pub warnings: usize,
    /// Errors first, then warnings, each in document order (line, then column).
    pub diagnostics: Vec<Diagnostic>,
    /// With `--policy`: what it would publish of a valid input.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy: Option<policy::PolicyReport>,
    #[serde(skip)]
    source: Vec<u8>,
}

/// Checks one input; `-` is standard input. An unreadable input is an invalid one.
fn check_input(name: &Path) -> FileReport {
    let stdin = name.as_os_str() == "-";
    let read = if stdin {
        let mut buf = Vec::new();
        std::io::stdin().lock().read_to_end(&mut buf).map(|_| buf)
    } else {
        std::fs::read(name)
    };
    let display_name = if stdin {
        "<stdin>".to_string()
    } else {
        name.display().to_string()
    };
    match read {
        Ok(data) => report(&display_name, data),
        Err(e) => {
            let why = format!("cannot read {display_name}: {}", io_reason(&e));
            unreadable(&display_name, why)
        }
    }
}

/// The report of an input that could not be read (it was not checked).
pub fn unreadable(name: &str, why: String) -> FileReport {
    FileReport {
        read_error: Some(why),
        file: name.to_string(),
        valid: false,
        versions: 0,
        errors: 0,
        warnings: 0,
        diagnostics: Vec::new(),
        policy: None,
        source: Vec::new(),
    }
}

/// "No such file or directory (os error 2)" reads better as "no such file or directory".
fn io_reason(e: &std::io::Error) -> String {
    let text = e.to_string();
    let text = match text.split_once(" (os error ") {
        Some((reason, _)) => reason,
        None => &text,
    };
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => text.to_string(),
    }
}

/// Checks data that was read already.
pub fn report(file: &str, data: Vec<u8>) -> FileReport {
    let mut versions = 0usize;
    let mut diagnostics = channel::check_each(&data, |_| versions = versions.saturating_add(1));
    // Stable: diagnostics at the same place keep the order the checks found them in.
    diagnostics.sort_by_key(|d| (d.severity, d.line, d.column));
    let errors = diagnostics
        .iter()
        .filter(|d| d.severity == Severity::Error)
        .count();
    FileReport {
        file: file.into(),
        valid: errors == 0,
        read_error: None,
        versions: if errors == 0 { versions } else { 0 },
        errors,
        warnings: diagnostics.len().saturating_sub(errors),
        diagnostics,
        policy: None,
        source: data,
    }
}

#[derive(Serialize)]
struct JsonDoc<'a> {
    schema: u32,
    valid: bool,
    files: &'a [FileReport],
}

/// Checks every input and writes the reports: text as each input is done (so only one
/// input is in memory at a time), json as one document at the end. Unreadable inputs are
/// also reported on `err` in text mode. Returns whether all inputs are valid.
pub fn run(
    images: Vec<FileReport>,
    inputs: &[impl AsRef<Path>],
    policy: Option<&crate::policy::Policy>,
    format: Format,
    out: &mut impl Write,
    err: &mut impl Write,
) -> std::io::Result<bool> {
    let mut all_valid = true;
    let mut kept = Vec::new();
    let (mut valid_files, mut invalid_files) = (0usize, 0usize);
    let count = images.len().saturating_add(inputs.len());
    let files = inputs.iter().map(|i| check_input(i.as_ref()));
    for mut r in images.into_iter().chain(files) {
        all_valid &= r.valid;
        if let Some(p) = policy
            && r.valid
        {
            r.policy = policy::report(p, &r.source);
        }
        if r.valid {
            valid_files = valid_files.saturating_add(1);
        } else {
            invalid_files = invalid_files.saturating_add(1);
        }
        match format {
            Format::Text => match &r.read_error {
                Some(e) => {
                    out.flush()?;
                    writeln!(err, "error: {e}")?;
                }
                None => write_text(out, &r)?,
            },
            Format::Json | Format::Yaml => {
                r.source = Vec::new();
                kept.push(r);
            }
        }
    }
    match format {
        Format::Json | Format::Yaml => write(out, &kept, format)?,
        Format::Text => {
            if count > 1 {
                writeln!(
                    out,
                    "{count} inputs: {valid_files} valid, {invalid_files} invalid"
                )?;
            }
            all_valid
        }
    };
    out.flush()?;
    Ok(all_valid)
}

/// Writes the reports; returns whether all inputs are valid.
pub fn write(
    out: &mut impl Write,
    reports: &[FileReport],
    format: Format,
) -> std::io::Result<bool> {
    let all_valid = reports.iter().all(|r| r.valid);
    match format {
        Format::Json | Format::Yaml => {
            let doc = JsonDoc {
                schema: JSON_SCHEMA,
                valid: all_valid,
                files: reports,
            };
            out.write_all(crate::commands::output::document(format, &doc, false).as_bytes())?;
        }
        Format::Text => {
            for r in reports {
                match &r.read_error {
                    Some(e) => writeln!(out, "error: {e}")?,
                    None => write_text(out, r)?,
                }
            }
        }
    }
    Ok(all_valid)
}

fn write_text(out: &mut impl Write, r: &FileReport) -> std::io::Result<()> {
    let excerpts = excerpts(&r.source, &r.diagnostics);
    for (d, excerpt) in r.diagnostics.iter().zip(excerpts) {
        let level = match d.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        let path = if d.path.is_empty() {
            String::new()
        } else {
            format!("{}: ", d.path)
        };
        writeln!(out, "{level}: {path}{}", d.message)?;
        writeln!(out, "  --> {}:{}:{}", r.file, d.line, d.column)?;
        if let Some((excerpt, caret)) = excerpt {
            let gutter = d.line.to_string();
            let pad = " ".repeat(gutter.len());
            writeln!(out, "{pad} |")?;
            writeln!(out, "{gutter} | {excerpt}")?;
            writeln!(out, "{pad} | {}^", " ".repeat(caret))?;
        }
    }
    let summary = if r.valid {
        format!(
            "{}: valid, {} {}",
            r.file,
            r.versions,
            plural(r.versions, "version")
        )
    } else {
        format!("{}: invalid", r.file)
    };
    let counts = match (r.errors, r.warnings) {
        (0, 0) => String::new(),
        (e, w) => format!(
            " ({} {}, {} {})",
            e,
            plural(e, "error"),
            w,
            plural(w, "warning")
        ),
    };
    writeln!(out, "{summary}{counts}")?;
    match &r.policy {
        Some(p) => policy::write_text(out, &r.file, p),
        None => Ok(()),
    }
}

fn plural(n: usize, word: &str) -> String {
    if n == 1 {
        word.into()
    } else {
        format!("{word}s")
    }
}

/// The excerpt of each diagnostic's line, in one pass over the source however many
/// diagnostics there are and however long the lines (channel files are often one line).
fn excerpts(source: &[u8], diagnostics: &[Diagnostic]) -> Vec<Option<(String, usize)>> {
    // Positions are counted after a byte order mark, as editors show them.
    let source = source.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(source);
    let mut out = vec![None; diagnostics.len()];
    let mut order: Vec<(usize, &Diagnostic)> = diagnostics.iter().enumerate().collect();
    order.sort_by_key(|(_, d)| (d.line, d.column));
    let mut lines = source.split(|b| *b == b'\n');
    let (mut line_no, mut line): (usize, &[u8]) = (0, &[]);
    // Within the current line: a byte offset and the character column it is at.
    let (mut byte, mut column) = (0usize, 1usize);
    for (n, d) in order {
        if d.line == 0 {
            continue;
        }
        while line_no < d.line {
            let Some(next) = lines.next() else {
                return out;
            };
            line = next.strip_suffix(b"\r").unwrap_or(next);
            line_no = line_no.saturating_add(1);
            (byte, column) = (0, 1);
        }
        while column < d.column && byte < line.len() {
            byte = next_char(line, byte);
            column = column.saturating_add(1);
        }
        if let Some(slot) = out.get_mut(n) {
            *slot = Some(excerpt_at(line, byte));
        }
    }
    out
}

fn is_continuation(b: u8) -> bool {
    (b as i8) < -0x40
}

/// Whether the byte at `p` continues a character (false past the end).
fn continues_at(line: &[u8], p: usize) -> bool {
    line.get(p).is_some_and(|b| is_continuation(*b))
}

/// The offset of the character after the one at `p` (at most `line.len()`).
fn next_char(line: &[u8], mut p: usize) -> usize {
    p = p.saturating_add(1);
    while continues_at(line, p) {
        p = p.saturating_add(1);
    }
    p
}

/// Up to 80 characters of `line` around the byte offset `at`, and where the caret goes.
fn excerpt_at(line: &[u8], at: usize) -> (String, usize) {
    const WIDTH: usize = 80;
    let at = at.min(line.len());
    // The offset of the character before the one at `p` (called with `p > 0` only).
    let back = |mut p: usize| {
        p = p.saturating_sub(1);
        while p > 0 && continues_at(line, p) {
            p = p.saturating_sub(1);
        }
        p
    };
    let forward = |p: usize| next_char(line, p);
    let (mut start, mut before) = (at, 0);
    while start > 0 && before < WIDTH / 2 {
        start = back(start);
        before = before.saturating_add(1);
    }
    let (mut end, mut width) = (at, before);
    while end < line.len() && width < WIDTH {
        end = forward(end);
        width = width.saturating_add(1);
    }
    // Near the end of a long line, show more of what comes before.
    while start > 0 && width < WIDTH {
        start = back(start);
        width = width.saturating_add(1);
    }
    let clean = |bytes: &[u8]| -> String {
        String::from_utf8_lossy(bytes)
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect()
    };
    // start <= at <= end <= line.len(): both ranges exist.
    let mut excerpt = clean(line.get(start..end).unwrap_or_default());
    let mut caret = clean(line.get(start..at).unwrap_or_default())
        .chars()
        .count();
    if start > 0 {
        excerpt.insert_str(0, "...");
        caret = caret.saturating_add(3);
    }
    if end < line.len() {
        excerpt.push_str("...");
    }
    (excerpt, caret)
}

#[cfg(test)]
mod tests;
