//! The Kubernetes client every command builds the same way (the operator and the user
//! commands alike): `--kubeconfig`, else `$KUBECONFIG`, else `~/.kube/config`, else the
//! in-cluster service account; `--context` picks a context of that kubeconfig. The
//! client's default namespace is the chosen context's (`default` when it sets none).

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
            Config::from_custom_kubeconfig(kubeconfig, &options)
                .await
                .map_err(config_error)?
        }
        // A context is a kubeconfig's: no in-cluster fallback.
        (None, Some(context)) => match Kubeconfig::read() {
            Ok(kubeconfig) => Config::from_custom_kubeconfig(kubeconfig, &options)
                .await
                .map_err(config_error)?,
            Err(_) => return Err(ClientError::ContextWithoutKubeconfig(context.into())),
        },
        (None, None) => Config::infer()
            .await
            .map_err(|e| ClientError::Config(e.to_string()))?,
    };
    Client::try_from(config).map_err(|e| ClientError::Config(e.to_string()))
}
