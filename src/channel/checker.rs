//! The [`Checker`]'s bookkeeping: it collects what the rules find, keeps at most
//! [`MAX_DIAGNOSTICS`], notes the duplicate names a sync tolerates, and resolves positions
//! only at the end. The rules themselves are in `rules`.

// Channel data is untrusted input: no indexing that could panic (checked access only).
#![cfg_attr(not(test), deny(clippy::indexing_slicing))]

use std::collections::HashSet;

use super::{
    Bare, Diagnostic, MAX_DIAGNOSTICS, Outcome, Segment, Severity, bare_path_string, locate,
    path_string,
};

pub(super) enum Where {
    Path(Vec<Segment>),
    At(usize, usize),
}

struct Found {
    severity: Severity,
    at: Where,
    message: String,
    /// `message` without the values it quotes from the data, when it quotes some.
    bare: Option<String>,
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
        self.push_quoting(severity, at, message, None);
    }
    /// A diagnostic whose message quotes the data; `bare` says the same without it.
    fn push_quoting(
        &mut self,
        severity: Severity,
        at: Where,
        message: String,
        bare: Option<String>,
    ) {
        match severity {
            Severity::Error => self.errors = self.errors.saturating_add(1),
            Severity::Warning => self.warnings = self.warnings.saturating_add(1),
        }
        // One slot is kept for the note that says how many were left out.
        if self.found.len() < MAX_DIAGNOSTICS - 1 {
            self.found.push(Found {
                severity,
                at,
                message,
                bare,
            });
        } else if self.first_left_out.is_none() {
            self.first_left_out = Some(at);
        }
    }
    pub(super) fn error(&mut self, path: Vec<Segment>, message: String) {
        self.push(Severity::Error, Where::Path(path), message);
    }
    /// An error whose message quotes the data (a value, a character of it); `bare` says
    /// the same without any of it, for statuses that must not show the data.
    pub(super) fn error_quoting(&mut self, path: Vec<Segment>, message: String, bare: String) {
        self.push_quoting(Severity::Error, Where::Path(path), message, Some(bare));
    }
    /// A name used before: an error for `validate`, the one error a sync tolerates.
    pub(super) fn duplicate_name(
        &mut self,
        path: Vec<Segment>,
        name: &str,
        message: String,
        bare: String,
    ) {
        if self.found.len() < MAX_DIAGNOSTICS - 1 {
            self.duplicate_slots.insert(self.found.len());
        }
        self.duplicate_errors = self.duplicate_errors.saturating_add(1);
        if self.duplicate_names.insert(name.to_string()) {
            self.duplicates.push(name.to_string());
        }
        self.error_quoting(path, message, bare);
    }
    pub(super) fn warn(&mut self, path: Vec<Segment>, message: String) {
        self.push(Severity::Warning, Where::Path(path), message);
    }
    /// `bare`: the message without what it quotes from the data, when it quotes some.
    pub(super) fn syntax_at(
        &mut self,
        line: usize,
        column: usize,
        message: String,
        bare: Option<String>,
    ) {
        self.errors = self.errors.saturating_add(1);
        // A syntax error ends the data, so it always has a place, past the limit too.
        self.syntax = Some(self.found.len());
        self.found.push(Found {
            severity: Severity::Error,
            at: Where::At(line, column),
            message,
            bare,
        });
    }

    /// Resolves positions only now, so that valid data never pays for them.
    pub(super) fn finish(mut self, data: &[u8]) -> Outcome {
        let kept = self.found.len();
        let total = self.errors.saturating_add(self.warnings);
        if total > kept {
            let (kept_errors, kept_warnings) =
                self.found
                    .iter()
                    .fold((0usize, 0usize), |(e, w), f| match f.severity {
                        Severity::Error => (e.saturating_add(1), w),
                        Severity::Warning => (e, w.saturating_add(1)),
                    });
            let (more_errors, more_warnings) = (
                self.errors.saturating_sub(kept_errors),
                self.warnings.saturating_sub(kept_warnings),
            );
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
                bare: None,
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
                let (path, bare_path, (line, column)) = match f.at {
                    Where::Path(p) => (
                        path_string(&p),
                        bare_path_string(&p),
                        positions.next().unwrap_or((1, 1)),
                    ),
                    Where::At(line, column) => (String::new(), None, (line, column)),
                };
                let bare = (bare_path.is_some() || f.bare.is_some()).then(|| {
                    Box::new(Bare {
                        path: bare_path.unwrap_or_else(|| path.clone()),
                        message: f.bare.unwrap_or_else(|| f.message.clone()),
                    })
                });
                Diagnostic {
                    severity: f.severity,
                    path,
                    line,
                    column,
                    message: f.message,
                    bare,
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
