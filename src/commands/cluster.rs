//! The commands a user runs against a cluster: `sync` (ask the operator for a sync, and
//! wait for its outcome), `status` (a table of channels), `suspend` and `resume` (set
//! `spec.suspend`) and `check` (is the cluster ready for this binary's operator). They
//! read what the operator publishes (the channel's status, its versions) and write only
//! the sync-request annotation and `spec.suspend`, so a user needs no more than
//! get/list/watch/patch on channels and list on versions (docs/cli.md).
//!
//! What they share is here: their errors (`CliError`) and the client. Each command is a
//! module of its own beside this one; the pure parts (`sync::outcome`, `sync::changes`,
//! `sync::report`, `status::view`, `status::table`, `check::rbac`, `check::lease`) carry
//! the unit tests.

use std::path::PathBuf;

use kube::Client;

use crate::commands::output;

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
    /// Where it looked: `namespace NS`, `any namespace`.
    #[error("no channels in {0}")]
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
    /// A defect of this build (what it embeds does not parse); its tests catch it.
    #[error("{0}")]
    Defect(String),
}

impl CliError {
    /// An API error while doing `what`; a missing object or CRD is said plainly.
    pub(super) fn api(what: impl Into<String>, target: Option<&Target>, e: kube::Error) -> Self {
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

/// The channel's `NAMESPACE/NAME`.
pub(super) fn target_of(ch: &crate::api::ManagedOSVersionChannel) -> Target {
    Target {
        namespace: kube::ResourceExt::namespace(ch).unwrap_or_default(),
        name: kube::ResourceExt::name_any(ch),
    }
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
pub(super) fn parse_channel(text: &str) -> Result<ChannelArg, String> {
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

impl Scope {
    /// The namespace to look in (`None`: all).
    pub fn namespace(&self) -> Option<&str> {
        match self {
            Scope::Channel(t) => Some(&t.namespace),
            Scope::Namespace(ns) => Some(ns),
            Scope::All => None,
        }
    }

    /// How errors and notes name where the command looked.
    pub fn describe(&self) -> String {
        match self {
            Scope::Channel(t) => format!("channel {t}"),
            Scope::Namespace(ns) => format!("namespace {ns}"),
            Scope::All => "any namespace".into(),
        }
    }
}

/// The scope the arguments ask for, before the kubeconfig context's namespace is known
/// (checked before any look at the cluster: a usage error is its message).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Wanted {
    channel: Option<String>,
    namespace: Option<String>,
    all_namespaces: bool,
}

impl Wanted {
    /// `channel` (if any), `-n` and `-A` together; the channel's namespace and `-n` must
    /// agree, and `-A` goes with no channel.
    pub fn new(
        channel: Option<&ChannelArg>,
        namespace: Option<&str>,
        all_namespaces: bool,
    ) -> Result<Self, String> {
        if all_namespaces && let Some(c) = channel {
            let shown = match &c.namespace {
                Some(ns) => format!("{ns}/{}", c.name),
                None => c.name.clone(),
            };
            return Err(format!(
                "the channel {shown} cannot be used with --all-namespaces; give one or the other"
            ));
        }
        Ok(Wanted {
            channel: channel.map(|c| c.name.clone()),
            namespace: namespace_of(channel, namespace)?,
            all_namespaces,
        })
    }

    /// The scope, the namespace defaulting to the kubeconfig context's.
    pub fn resolve(&self, context_namespace: &str) -> Scope {
        let namespace = || {
            self.namespace
                .clone()
                .unwrap_or_else(|| context_namespace.to_string())
        };
        match (&self.channel, self.all_namespaces) {
            (Some(name), _) => Scope::Channel(Target {
                namespace: namespace(),
                name: name.clone(),
            }),
            (None, true) => Scope::All,
            (None, false) => Scope::Namespace(namespace()),
        }
    }

    /// Whether a namespace was named (`-n`, or the channel's), or `-A` given.
    fn explicit(&self) -> bool {
        self.namespace.is_some() || self.all_namespaces
    }
}

/// The namespace of a channel argument and `--namespace`, which must agree when both are
/// given (else a usage error, returned as its message). `None`: neither says.
pub(super) fn namespace_of(
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

/// The channels a command acts on: one, or `--all` of a namespace (or of all).
#[derive(clap::Args, Debug, Clone)]
pub struct Channels {
    /// The channel: NAMESPACE/CHANNEL, or CHANNEL with --namespace (default: the
    /// kubeconfig context's namespace).
    #[arg(
        value_name = "NAMESPACE/CHANNEL",
        value_parser = parse_channel,
        required_unless_present = "all",
        conflicts_with = "all"
    )]
    pub channel: Option<ChannelArg>,
    /// Every channel in the namespace given with --namespace (or, with --all-namespaces,
    /// in every namespace).
    #[arg(long)]
    pub all: bool,
}

impl Channels {
    /// The scope these and `cluster` ask for; `--all` needs a namespace said outright.
    pub fn wanted(&self, cluster: &ClusterArgs) -> Result<Wanted, CliError> {
        let wanted = cluster.wanted(self.channel.as_ref())?;
        if self.all && !wanted.explicit() {
            return Err(CliError::Usage(
                "--all needs --namespace NAMESPACE (or --all-namespaces)".into(),
            ));
        }
        Ok(wanted)
    }

    /// Connects and reads the channels asked for (none found is an error).
    pub async fn find(
        &self,
        cluster: &ClusterArgs,
    ) -> Result<(Client, Scope, Vec<crate::api::ManagedOSVersionChannel>), CliError> {
        // A usage error before any look at the cluster.
        let wanted = self.wanted(cluster)?;
        let client = cluster.client().await?;
        let scope = wanted.resolve(client.default_namespace());
        let found = read_channels(&client, &scope).await?;
        if found.is_empty() {
            return Err(CliError::NoChannels(scope.describe()));
        }
        Ok((client, scope, found))
    }
}

/// The options every cluster command takes.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct ClusterArgs {
    /// kubeconfig to use (default: $KUBECONFIG, ~/.kube/config, or the in-cluster
    /// service account).
    #[arg(long, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use (default: its current context).
    #[arg(long, value_name = "CONTEXT")]
    pub context: Option<String>,
    /// The namespace (default: the kubeconfig context's namespace).
    #[arg(short = 'n', long, value_name = "NAMESPACE")]
    pub namespace: Option<String>,
    /// All namespaces.
    #[arg(short = 'A', long, conflicts_with = "namespace")]
    pub all_namespaces: bool,
    /// Output format: `table` (or `text`) for people, `json` or `yaml` for scripts
    /// (docs/cli.md); also spelled `--format`.
    #[arg(
        short = 'o',
        long,
        visible_alias = "format",
        value_enum,
        default_value = "table"
    )]
    pub output: output::Format,
}

impl ClusterArgs {
    /// A client for these options (see [`crate::client`]).
    pub async fn client(&self) -> Result<Client, CliError> {
        let source = crate::client::Source {
            kubeconfig: self.kubeconfig.as_deref(),
            context: self.context.as_deref(),
        };
        crate::client::client(source)
            .await
            .map_err(|e| CliError::Config(e.to_string()))
    }

    /// The scope these options and `channel` ask for (a usage error is its message).
    pub fn wanted(&self, channel: Option<&ChannelArg>) -> Result<Wanted, CliError> {
        Wanted::new(channel, self.namespace.as_deref(), self.all_namespaces)
            .map_err(CliError::Usage)
    }
}

/// Writes `text` to `out` and flushes it.
pub(super) fn write_out(out: &mut impl std::io::Write, text: &str) -> Result<(), CliError> {
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(CliError::Output)
}

/// The channels of `scope`, one API call (a missing channel is [`CliError::NotFound`]).
pub(super) async fn read_channels(
    client: &Client,
    scope: &Scope,
) -> Result<Vec<crate::api::ManagedOSVersionChannel>, CliError> {
    use crate::api::ManagedOSVersionChannel;
    use kube::Api;
    match scope {
        Scope::Channel(target) => {
            let api: Api<ManagedOSVersionChannel> =
                Api::namespaced(client.clone(), &target.namespace);
            let ch = api
                .get(&target.name)
                .await
                .map_err(|e| CliError::api(format!("reading channel {target}"), Some(target), e))?;
            Ok(vec![ch])
        }
        Scope::Namespace(ns) => {
            let api: Api<ManagedOSVersionChannel> = Api::namespaced(client.clone(), ns);
            api.list(&Default::default())
                .await
                .map(|l| l.items)
                .map_err(|e| CliError::api(format!("listing channels in namespace {ns}"), None, e))
        }
        Scope::All => {
            let api: Api<ManagedOSVersionChannel> = Api::all(client.clone());
            api.list(&Default::default())
                .await
                .map(|l| l.items)
                .map_err(|e| CliError::api("listing channels", None, e))
        }
    }
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

    #[test]
    fn scopes_from_the_arguments_and_the_context() {
        let target = |ns: &str, name: &str| {
            Scope::Channel(Target {
                namespace: ns.into(),
                name: name.into(),
            })
        };
        let scope = |channel: Option<&str>, ns: Option<&str>, all: bool| {
            let channel = channel.map(|c| parse_channel(c).unwrap());
            Wanted::new(channel.as_ref(), ns, all).map(|w| w.resolve("ctx"))
        };
        assert_eq!(scope(None, None, false), Ok(Scope::Namespace("ctx".into())));
        assert_eq!(
            scope(None, Some("n"), false),
            Ok(Scope::Namespace("n".into()))
        );
        assert_eq!(scope(None, None, true), Ok(Scope::All));
        assert_eq!(scope(Some("c"), None, false), Ok(target("ctx", "c")));
        assert_eq!(scope(Some("c"), Some("n"), false), Ok(target("n", "c")));
        assert_eq!(scope(Some("m/c"), None, false), Ok(target("m", "c")));
        let e = scope(Some("m/c"), None, true).unwrap_err();
        assert!(
            e.contains("m/c cannot be used with --all-namespaces"),
            "{e}"
        );
        assert!(scope(Some("m/c"), Some("n"), false).is_err());
        assert!(!Wanted::new(None, None, false).unwrap().explicit());
        assert!(Wanted::new(None, None, true).unwrap().explicit());
    }
}
