//! The [`Checker`]'s bookkeeping: it collects what the rules find, keeps at most
//! [`MAX_DIAGNOSTICS`], notes the duplicate names a sync tolerates, and resolves positions
//! only at the end. The rules themselves are in `rules`.

// Channel data is untrusted input: no indexing that could panic (checked access only).
#![cfg_attr(not(test), deny(clippy::indexing_slicing))]

use std::collections::HashSet;

use super::{Diagnostic, MAX_DIAGNOSTICS, Outcome, Segment, Severity, locate, path_string};

pub(super) enum Where {
    Path(Vec<Segment>),
    At(usize, usize),
}

struct Found {
    severity: Severity,
    at: Where,
    message: String,
}

#[derive(Default)]
pub(super) struct Checker {
    found: Vec<Found>,
    // The rules read these two to tell whether an item or spec added errors.
    pub(super) errors: usize,
    warnings: usize,
    syntax: Option<usize>,
    /// Where the first diagnostic past [`MAX_DIAGNOSTICS`] is: the note about them goes there.
    first_left_out: Option<Where>,
    pub(super) duplicate_errors: usize,
    duplicates: Vec<String>,
    duplicate_names: HashSet<String>,
    duplicate_slots: HashSet<usize>,
}

impl Checker {
    pub(super) fn push(&mut self, severity: Severity, at: Where, message: String) {
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
    pub(super) fn error(&mut self, path: Vec<Segment>, message: String) {
        self.push(Severity::Error, Where::Path(path), message);
    }
    /// A name used before: an error for `validate`, the one error a sync tolerates.
    pub(super) fn duplicate_name(&mut self, path: Vec<Segment>, name: &str, message: String) {
        if self.found.len() < MAX_DIAGNOSTICS - 1 {
            self.duplicate_slots.insert(self.found.len());
        }
        self.duplicate_errors += 1;
        if self.duplicate_names.insert(name.to_string()) {
            self.duplicates.push(name.to_string());
        }
        self.error(path, message);
    }
    pub(super) fn warn(&mut self, path: Vec<Segment>, message: String) {
        self.push(Severity::Warning, Where::Path(path), message);
    }
    pub(super) fn syntax_at(&mut self, line: usize, column: usize, message: String) {
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
    pub(super) fn finish(mut self, data: &[u8]) -> Outcome {
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
}
