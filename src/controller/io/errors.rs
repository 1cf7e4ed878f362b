//! Errors of the I/O layer, and the one place API errors are classified.

use kube::api::{DeleteParams, Preconditions};

use crate::failure::{ErrorClass, SyncFailure};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{what}: {}", api_message(source))]
    Kube {
        what: String,
        #[source]
        source: kube::Error,
    },
    #[error("reading the {container} container's log of pod {pod}: {source}")]
    Log {
        container: &'static str,
        pod: String,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "the API server refuses to {what} (found by a dry run; nothing was changed): {}",
        api_message(source)
    )]
    DryRun {
        what: String,
        #[source]
        source: kube::Error,
    },
    #[error("{what}: {}; {undo}", api_message(source))]
    Write {
        what: String,
        /// How undoing the sync's earlier writes went.
        undo: String,
        #[source]
        source: kube::Error,
    },
}

impl Error {
    pub fn class(&self) -> ErrorClass {
        match self {
            Error::Kube { source, .. }
            | Error::DryRun { source, .. }
            | Error::Write { source, .. } => classify(source),
            Error::Log { .. } => ErrorClass::Retryable,
        }
    }

    /// The failed sync this error makes.
    pub fn to_failure(&self) -> SyncFailure {
        SyncFailure::Api {
            class: self.class(),
            message: self.to_string(),
        }
    }
}

/// Classifies an API error: what retrying the same request cannot fix is `Refused`.
pub fn classify(e: &kube::Error) -> ErrorClass {
    match e {
        kube::Error::Api(s) if matches!(s.code, 400 | 403 | 404 | 405 | 409 | 410 | 413 | 422) => {
            ErrorClass::Refused
        }
        _ => ErrorClass::Retryable,
    }
}

pub fn kube_err(what: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
    let what = what.into();
    move |source| Error::Kube { what, source }
}

pub fn is_status(e: &kube::Error, code: u16) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == code)
}

/// The API server's own message, else the client's.
pub fn api_message(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) if !s.message.is_empty() => s.message.clone(),
        other => other.to_string(),
    }
}

/// A delete of exactly the object with this uid: one replaced meanwhile is left alone.
pub fn delete_uid(uid: &str, dry_run: bool) -> DeleteParams {
    DeleteParams {
        dry_run,
        preconditions: Some(Preconditions {
            uid: Some(uid.to_string()),
            resource_version: None,
        }),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api_error(code: u16) -> kube::Error {
        kube::Error::Api(
            kube::core::Status::failure("no", "Reason")
                .with_code(code)
                .boxed(),
        )
    }

    #[test]
    fn errors_are_classified_in_one_place() {
        for code in [400, 403, 404, 409, 422] {
            assert_eq!(classify(&api_error(code)), ErrorClass::Refused, "{code}");
        }
        for code in [429, 500, 503, 504] {
            assert_eq!(classify(&api_error(code)), ErrorClass::Retryable, "{code}");
        }
    }

    #[test]
    fn an_error_becomes_a_failed_sync_with_its_class_and_message() {
        let e = kube_err("listing ManagedOSVersions in ns")(api_error(429));
        assert_eq!(
            e.to_failure(),
            SyncFailure::Api {
                class: ErrorClass::Retryable,
                message: "listing ManagedOSVersions in ns: no".into()
            }
        );
    }
}
