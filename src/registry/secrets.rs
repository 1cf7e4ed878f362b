//! What a pull needs from the channel's namespace: the credentials of `imagePullSecrets`
//! (the first Secret with an entry for the image's registry), the CA of `caSecretRef` and
//! the public key of `spec.verify`.

use k8s_openapi::api::core::v1::Secret;
use kube::Api;

use super::{Access, auth};
use crate::config::OciOptions;

/// Reads the Secrets the options name; `Err`: which one cannot serve, and why.
pub async fn access(secrets: &Api<Secret>, options: &OciOptions) -> Result<Access, String> {
    let mut access = Access::default();
    let registry = &options.image.registry;
    for name in &options.image_pull_secrets {
        let data = read(secrets, "imagePullSecrets", name, ".dockerconfigjson").await?;
        let found = auth::lookup(&data, registry)
            .map_err(|why| format!("imagePullSecrets: Secret {name} {why}"))?;
        if found.is_some() {
            access.credentials = found;
            break;
        }
    }
    if let Some(name) = &options.ca_secret {
        access.ca_pem = Some(read(secrets, "caSecretRef", name, "ca.crt").await?);
    }
    if let Some(name) = &options.verify_secret {
        access.verify_key = Some(read(secrets, "spec.verify.secretRef", name, "cosign.pub").await?);
    }
    Ok(access)
}

async fn read(
    secrets: &Api<Secret>,
    field: &str,
    name: &str,
    key: &str,
) -> Result<Vec<u8>, String> {
    let secret = secrets
        .get_opt(name)
        .await
        .map_err(|e| format!("{field}: reading Secret {name} failed: {}", reason(&e)))?
        .ok_or_else(|| format!("{field}: Secret {name} not found in the channel's namespace"))?;
    secret
        .data
        .and_then(|mut d| d.remove(key))
        .map(|b| b.0)
        .ok_or_else(|| format!("{field}: Secret {name} has no {key} key"))
}

fn reason(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => format!("{} ({})", s.reason, s.code),
        other => other.to_string(),
    }
}
