//! The Kubernetes client every command builds the same way (the operator and the user
//! commands alike): `--kubeconfig`, else `$KUBECONFIG`, else `~/.kube/config`, else the
//! in-cluster service account; `--context` picks a context of that kubeconfig. The
//! client's default namespace is the chosen context's (`default` when it sets none).
//! `fake_api`: a fake API server for unit tests.

use std::path::Path;

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

/// Why no client could be built; one line for the user.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot read the kubeconfig {path}: {message}")]
    Read { path: String, message: String },
    #[error("{0}")]
    Config(String),
    #[error("--context {0} needs a kubeconfig, and none was found ($KUBECONFIG, ~/.kube/config)")]
    ContextWithoutKubeconfig(String),
    #[error("the kubeconfig has no context {context} (it has: {known})")]
    UnknownContext { context: String, known: String },
}

/// A context named on the command line must be in the kubeconfig (kube-rs would say
/// "failed to load current context").
fn has_context(kubeconfig: &Kubeconfig, context: Option<&str>) -> Result<(), ClientError> {
    let Some(context) = context else {
        return Ok(());
    };
    if kubeconfig.contexts.iter().any(|c| c.name == context) {
        return Ok(());
    }
    let names: Vec<&str> = kubeconfig
        .contexts
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    Err(ClientError::UnknownContext {
        context: context.into(),
        known: crate::text::list(&names, ", "),
    })
}

/// Where the client's configuration comes from.
#[derive(Clone, Copy, Debug, Default)]
pub struct Source<'a> {
    pub kubeconfig: Option<&'a Path>,
    pub context: Option<&'a str>,
}

/// A client for `source` (see the module's rules).
pub async fn client(source: Source<'_>) -> Result<Client, ClientError> {
    // kube-rs finds no default TLS provider when more than one is compiled in.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let options = KubeConfigOptions {
        context: source.context.map(String::from),
        ..Default::default()
    };
    let config_error = |e: kube::config::KubeconfigError| ClientError::Config(e.to_string());
    let config = match (source.kubeconfig, source.context) {
        (Some(path), _) => {
            let kubeconfig = Kubeconfig::read_from(path).map_err(|e| ClientError::Read {
                path: path.display().to_string(),
                message: e.to_string(),
            })?;
            has_context(&kubeconfig, source.context)?;
            Config::from_custom_kubeconfig(kubeconfig, &options)
                .await
                .map_err(config_error)?
        }
        // A context is a kubeconfig's: no in-cluster fallback.
        (None, Some(context)) => match Kubeconfig::read() {
            Ok(kubeconfig) => {
                has_context(&kubeconfig, Some(context))?;
                Config::from_custom_kubeconfig(kubeconfig, &options)
                    .await
                    .map_err(config_error)?
            }
            Err(_) => return Err(ClientError::ContextWithoutKubeconfig(context.into())),
        },
        (None, None) => Config::infer()
            .await
            .map_err(|e| ClientError::Config(e.to_string()))?,
    };
    Client::try_from(config).map_err(|e| ClientError::Config(e.to_string()))
}

#[cfg(test)]
pub(crate) mod fake_api;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_context_must_be_in_the_kubeconfig() {
        let kubeconfig: Kubeconfig = serde_json::from_value(serde_json::json!({
            "contexts": [{"name": "a", "context": {"cluster": "c", "user": "u"}},
                         {"name": "b", "context": {"cluster": "c", "user": "u"}}]
        }))
        .unwrap();
        assert!(has_context(&kubeconfig, None).is_ok());
        assert!(has_context(&kubeconfig, Some("b")).is_ok());
        assert_eq!(
            has_context(&kubeconfig, Some("x")).unwrap_err().to_string(),
            "the kubeconfig has no context x (it has: a, b)"
        );
    }
}
