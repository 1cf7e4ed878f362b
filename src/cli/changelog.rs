//! `changelog NS/VERSION`: a version's changelog, as the image of its `oci` channel shipped
//! it (`/changelog/<version>.updates.log`). The operator keeps a channel's changelogs in
//! one ConfigMap (`<channel>-changelogs`, a key per version); the version's channel label
//! says which.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::{Api, ResourceExt};
use serde::Serialize;

use super::output::Format;
use super::{ChannelArg, CliError, ClusterArgs};
use crate::api::{CHANNEL_LABEL, ManagedOSVersion};
use crate::channel::changelogs;

#[derive(clap::Args, Debug, Clone)]
pub struct ChangelogArgs {
    /// The version: NAMESPACE/VERSION, or VERSION with --namespace (default: the
    /// kubeconfig context's namespace).
    #[arg(value_name = "NAMESPACE/VERSION", value_parser = super::parse_channel)]
    pub version: ChannelArg,
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

#[derive(Serialize)]
struct Document<'a> {
    namespace: &'a str,
    version: &'a str,
    channel: &'a str,
    changelog: &'a str,
}

/// Prints the changelog; `Ok(false)` (exit 1) when the version has none, said on `err`.
pub async fn run(
    args: ChangelogArgs,
    out: &mut impl std::io::Write,
    err: &mut impl std::io::Write,
) -> Result<bool, CliError> {
    if args.cluster.all_namespaces {
        return Err(CliError::Usage(
            "changelog names one version; --all-namespaces does not apply".into(),
        ));
    }
    let wanted = args.cluster.wanted(Some(&args.version))?;
    let client = args.cluster.client().await?;
    let scope = wanted.resolve(client.default_namespace());
    let ns = scope.namespace().unwrap_or_default().to_string();
    let name = &args.version.name;
    let shown = format!("{ns}/{name}");
    let missing = |err: &mut dyn std::io::Write, why: &str| -> Result<bool, CliError> {
        writeln!(err, "error: version {shown} {why}").map_err(CliError::Output)?;
        Ok(false)
    };
    let versions: Api<ManagedOSVersion> = Api::namespaced(client.clone(), &ns);
    let version = versions
        .get_opt(name)
        .await
        .map_err(|e| CliError::api(format!("reading version {shown}"), None, e))?;
    let Some(version) = version else {
        return missing(err, "not found");
    };
    let Some(channel) = version.labels().get(CHANNEL_LABEL).cloned() else {
        return missing(
            err,
            "belongs to no channel (no rancheros.cattle.io/channel label)",
        );
    };
    let maps: Api<ConfigMap> = Api::namespaced(client, &ns);
    let map_name = changelogs::configmap_name(&channel);
    let map = maps
        .get_opt(&map_name)
        .await
        .map_err(|e| CliError::api(format!("reading ConfigMap {ns}/{map_name}"), None, e))?;
    let text = map
        .and_then(|m| m.data)
        .and_then(|mut d| d.remove(version.name_any().as_str()));
    let Some(text) = text else {
        return missing(
            err,
            &format!("has no changelog (the image of channel {channel} ships none for it)"),
        );
    };
    match args.cluster.output {
        Format::Table => {
            out.write_all(text.as_bytes()).map_err(CliError::Output)?;
            if !text.ends_with('\n') {
                writeln!(out).map_err(CliError::Output)?;
            }
        }
        format => {
            let doc = Document {
                namespace: &ns,
                version: name,
                channel: &channel,
                changelog: &text,
            };
            super::write_out(out, &super::output::document(format, &doc, false))?;
        }
    }
    Ok(true)
}
