//! The `validate` subcommand: lints channel data with the operator's own rules
//! (`channel::check`) and reports every problem, for people (text) or tools (json).

use std::io::{Read, Write};

use serde::Serialize;

use crate::channel::{self, Diagnostic, Severity};

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Text,
    Json,
}

/// The result for one input.
#[derive(Debug, Serialize)]
pub struct FileReport {
    pub file: String,
    pub valid: bool,
    pub versions: usize,
    pub errors: usize,
    pub warnings: usize,
    pub diagnostics: Vec<Diagnostic>,
    #[serde(skip)]
    source: Vec<u8>,
}

/// Checks one input; `-` is standard input. An unreadable input is an invalid one.
pub fn check_input(name: &str) -> FileReport {
    let read = if name == "-" {
        let mut buf = Vec::new();
        std::io::stdin().read_to_end(&mut buf).map(|_| buf)
    } else {
        std::fs::read(name)
    };
    let display_name = if name == "-" { "<stdin>" } else { name };
    match read {
        Ok(data) => report(display_name, data),
        Err(e) => FileReport {
            file: display_name.into(),
            valid: false,
            versions: 0,
            errors: 1,
            warnings: 0,
            diagnostics: vec![Diagnostic {
                severity: Severity::Error,
                path: String::new(),
                line: 0,
                column: 0,
                message: format!("cannot read the file: {e}"),
            }],
            source: Vec::new(),
        },
    }
}

pub fn report(file: &str, data: Vec<u8>) -> FileReport {
    let r = channel::check(&data);
    let errors = r.errors().count();
    FileReport {
        file: file.into(),
        valid: errors == 0,
        versions: if errors == 0 { r.versions.len() } else { 0 },
        errors,
        warnings: r.diagnostics.len() - errors,
        diagnostics: r.diagnostics,
        source: data,
    }
}

/// Writes the reports; returns whether all inputs are valid.
pub fn write(
    out: &mut impl Write,
    reports: &[FileReport],
    format: Format,
) -> std::io::Result<bool> {
    let all_valid = reports.iter().all(|r| r.valid);
    match format {
        Format::Json => {
            let doc = serde_json::json!({ "valid": all_valid, "files": reports });
            serde_json::to_writer_pretty(&mut *out, &doc)?;
            writeln!(out)?;
        }
        Format::Text => {
            for r in reports {
                write_text(out, r)?;
            }
        }
    }
    Ok(all_valid)
}

fn write_text(out: &mut impl Write, r: &FileReport) -> std::io::Result<()> {
    for d in &r.diagnostics {
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
        if d.line == 0 {
            writeln!(out, "  --> {}", r.file)?;
            continue;
        }
        writeln!(out, "  --> {}:{}:{}", r.file, d.line, d.column)?;
        if let Some((excerpt, caret)) = excerpt(&r.source, d.line, d.column) {
            let gutter = d.line.to_string();
            let pad = " ".repeat(gutter.len());
            writeln!(out, "{pad} |")?;
            writeln!(out, "{gutter} | {excerpt}")?;
            writeln!(out, "{pad} | {}^", " ".repeat(caret))?;
        }
    }
    let summary = if r.valid {
        format!("{}: valid, {} versions", r.file, r.versions)
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
    writeln!(out, "{summary}{counts}")
}

fn plural(n: usize, word: &str) -> String {
    if n == 1 {
        word.into()
    } else {
        format!("{word}s")
    }
}

/// Up to 80 characters of the line around the column, and where the caret goes in them.
/// Channel files are often one long line, so the line is never printed whole.
fn excerpt(source: &[u8], line: usize, column: usize) -> Option<(String, usize)> {
    const WIDTH: usize = 80;
    let text = source.split(|b| *b == b'\n').nth(line - 1)?;
    let chars: Vec<char> = String::from_utf8_lossy(text)
        .trim_end_matches('\r')
        .chars()
        .map(|c| if c == '\t' { ' ' } else { c })
        .collect();
    let at = (column - 1).min(chars.len());
    let start = if chars.len() <= WIDTH {
        0
    } else {
        at.saturating_sub(WIDTH / 2).min(chars.len() - WIDTH)
    };
    let end = (start + WIDTH).min(chars.len());
    let mut excerpt: String = chars[start..end].iter().collect();
    let mut caret = at - start;
    if start > 0 {
        excerpt.insert_str(0, "...");
        caret += 3;
    }
    if end < chars.len() {
        excerpt.push_str("...");
    }
    Some((excerpt, caret))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(data: &str) -> String {
        let mut out = Vec::new();
        write(
            &mut out,
            &[report("c.json", data.as_bytes().to_vec())],
            Format::Text,
        )
        .unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn text_reports_read_like_compiler_diagnostics() {
        let out =
            text("[\n  {\"metadata\": {\"name\": \"a\"}, \"spec\": {\"type\": \"rpm\"}}\n]\n");
        assert_eq!(
            out,
            "error: [0].spec.type: must be \"container\" or \"iso\", found \"rpm\"\n  --> c.json:2:48\n  |\n2 |   {\"metadata\": {\"name\": \"a\"}, \"spec\": {\"type\": \"rpm\"}}\n  |                                                ^\nc.json: invalid (1 error, 0 warnings)\n"
        );
    }

    #[test]
    fn valid_files_say_how_many_versions() {
        assert_eq!(text("[]"), "c.json: valid, 0 versions\n");
    }

    #[test]
    fn long_lines_are_cut_around_the_column() {
        let (ex, caret) = excerpt(&[b'x'; 1000], 1, 500).unwrap();
        assert_eq!(ex.len(), 86);
        assert_eq!(caret, 43);
    }

    #[test]
    fn json_reports_are_stable_for_tools() {
        let mut out = Vec::new();
        let ok = write(&mut out, &[report("c.json", b"[1]".to_vec())], Format::Json).unwrap();
        assert!(!ok);
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["valid"], false);
        assert_eq!(v["files"][0]["diagnostics"][0]["path"], "[0]");
        assert_eq!(v["files"][0]["diagnostics"][0]["severity"], "error");
        assert_eq!(v["files"][0]["diagnostics"][0]["line"], 1);
        assert_eq!(v["files"][0]["diagnostics"][0]["column"], 2);
    }
}
