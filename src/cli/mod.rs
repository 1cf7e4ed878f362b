//! The commands a user runs against a cluster: `sync` (ask the operator for a sync, and
//! wait for its outcome) and `status` (a table of channels). Both read only what the
//! operator already publishes (the channel's status, its versions) and write one thing,
//! the sync-request annotation, so a user needs no more than get/list/watch/patch on
//! channels and list on versions (docs/cli.md).
//!
//! Rooms: `outcome` (when a requested sync has finished, and how: pure), `changes` (what a
//! sync changed, from the versions before and after: pure), `table` (the status table:
//! pure), `progress` (the spinner or plain progress lines), `sync` and `status` (the I/O).

pub mod changes;
pub mod outcome;
mod progress;
pub mod status;
pub mod sync;
pub mod table;

use std::path::{Path, PathBuf};

use kube::Client;

/// Why a command could not do its work (exit code 1). A failed sync is not one of these:
/// `sync` reports it per channel.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// What clap cannot check (exit code 2).
    #[error("{0}")]
    Usage(String),
    #[error("cannot load the Kubernetes client configuration: {0}")]
    Config(String),
    #[error("channel {0} not found")]
    NotFound(String),
    #[error("no channels in namespace {0}")]
    NoChannels(String),
    #[error(
        "the ManagedOSVersionChannel CRD is not installed in the cluster; apply crds/ (or install the Helm chart) first"
    )]
    MissingCrd,
    #[error("{what}: {source}")]
    Api {
        what: String,
        source: Box<kube::Error>,
    },
    #[error("{what}: {message}")]
    Watch { what: String, message: String },
    #[error("cannot write the output: {0}")]
    Output(std::io::Error),
}

impl CliError {
    /// An API error while doing `what`; a missing object or CRD is said plainly.
    fn api(what: impl Into<String>, target: Option<&Target>, e: kube::Error) -> Self {
        if let kube::Error::Api(status) = &e
            && status.code == 404
        {
            // A missing CRD answers 404 with the API server's generic text; a missing
            // object names itself.
            return match target {
                Some(t)
                    if !status
                        .message
                        .contains("could not find the requested resource") =>
                {
                    CliError::NotFound(t.to_string())
                }
                _ => CliError::MissingCrd,
            };
        }
        CliError::Api {
            what: what.into(),
            source: Box::new(e),
        }
    }
}

/// One channel: `NAMESPACE/NAME`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Target {
    pub namespace: String,
    pub name: String,
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// A channel as given on the command line: `NAMESPACE/NAME`, or `NAME` (the namespace
/// then comes from `--namespace` or the kubeconfig's context).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChannelArg {
    pub namespace: Option<String>,
    pub name: String,
}

/// clap's value parser for [`ChannelArg`] (a malformed one is a usage error, exit 2).
pub fn parse_channel(text: &str) -> Result<ChannelArg, String> {
    let usage = || {
        format!("{text:?} is not a channel; write NAMESPACE/CHANNEL (or CHANNEL with --namespace)")
    };
    let mut parts = text.split('/');
    let (first, second, rest) = (parts.next(), parts.next(), parts.next());
    let valid = |s: &str| !s.is_empty() && !s.chars().any(char::is_whitespace);
    match (first, second, rest) {
        (Some(name), None, None) if valid(name) => Ok(ChannelArg {
            namespace: None,
            name: name.into(),
        }),
        (Some(ns), Some(name), None) if valid(ns) && valid(name) => Ok(ChannelArg {
            namespace: Some(ns.into()),
            name: name.into(),
        }),
        _ => Err(usage()),
    }
}

/// Where a command looks: one channel, the channels of one namespace, or all namespaces.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scope {
    Channel(Target),
    Namespace(String),
    All,
}

/// The namespace of a channel argument and `--namespace`, which must agree when both are
/// given (else a usage error, returned as its message). `None`: neither says.
pub fn namespace_of(
    channel: Option<&ChannelArg>,
    namespace: Option<&str>,
) -> Result<Option<String>, String> {
    match (channel.and_then(|c| c.namespace.as_deref()), namespace) {
        (Some(a), Some(b)) if a != b => Err(format!(
            "the channel {a}/{} is not in --namespace {b}; give the namespace once",
            channel.map(|c| c.name.as_str()).unwrap_or_default()
        )),
        (Some(a), _) => Ok(Some(a.into())),
        (None, b) => Ok(b.map(Into::into)),
    }
}

/// A client with the operator's rules (see [`crate::operator::kube_client`]).
pub async fn client(kubeconfig: Option<&Path>) -> Result<Client, CliError> {
    crate::operator::kube_client(kubeconfig)
        .await
        .map_err(CliError::Config)
}

/// The options every cluster command takes.
#[derive(clap::Args, Debug, Clone)]
pub struct ClusterArgs {
    /// kubeconfig to use (default: $KUBECONFIG, ~/.kube/config, or the in-cluster
    /// service account).
    #[arg(long, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channel_arguments() {
        assert_eq!(
            parse_channel("fleet-default/stable"),
            Ok(ChannelArg {
                namespace: Some("fleet-default".into()),
                name: "stable".into()
            })
        );
        assert_eq!(
            parse_channel("stable"),
            Ok(ChannelArg {
                namespace: None,
                name: "stable".into()
            })
        );
        for bad in ["", "/", "a/", "/b", "a/b/c", "a b/c"] {
            let e = parse_channel(bad).unwrap_err();
            assert!(e.contains("NAMESPACE/CHANNEL"), "{bad:?}: {e}");
        }
    }

    #[test]
    fn the_namespace_is_given_once() {
        let arg = parse_channel("a/b").unwrap();
        assert_eq!(namespace_of(Some(&arg), None), Ok(Some("a".into())));
        assert_eq!(namespace_of(Some(&arg), Some("a")), Ok(Some("a".into())));
        assert!(namespace_of(Some(&arg), Some("c")).is_err());
        let bare = parse_channel("b").unwrap();
        assert_eq!(namespace_of(Some(&bare), Some("c")), Ok(Some("c".into())));
        assert_eq!(namespace_of(Some(&bare), None), Ok(None));
        assert_eq!(namespace_of(None, None), Ok(None));
    }
}
