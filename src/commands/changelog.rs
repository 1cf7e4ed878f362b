//! `changelog NS/VERSION`: a version's changelog, as the image of its `oci` channel shipped
//! it (`/changelog/<version>.updates.log`). The operator keeps a channel's changelogs in
//! one ConfigMap (`<channel>-changelogs`, a key per version); the version's channel label
//! says which.

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::{Api, ResourceExt};
use serde::Serialize;

use crate::api::{CHANNEL_LABEL, ManagedOSVersion};
use crate::channel::changelogs;
use crate::commands::cluster::{ChannelArg, CliError, ClusterArgs};
use crate::commands::output::Format;

#[derive(clap::Args, Debug, Clone)]
pub struct ChangelogArgs {
    /// The version: NAMESPACE/VERSION, or VERSION with --namespace (default: the
    /// kubeconfig context's namespace).
    #[arg(value_name = "NAMESPACE/VERSION", value_parser = crate::commands::cluster::parse_channel)]
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
    // Only the channel's own: a ConfigMap of that name someone else made is not its
    // changelogs (the operator leaves it alone, and so does this).
    if let Some(m) = &map
        && !written_for(m, &version, &channel)
    {
        return missing(
            err,
            &format!(
                "has no changelog: ConfigMap {ns}/{map_name} is not channel {channel}'s (it has no controller owner reference to it)"
            ),
        );
    }
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
        Format::Text => {
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
            crate::commands::cluster::write_out(
                out,
                &crate::commands::output::document(format, &doc, false),
            )?;
        }
    }
    Ok(true)
}

/// Whether the ConfigMap is the changelogs the operator wrote for the version's channel:
/// its controller is a channel of that name, the version's own controller when it has one.
fn written_for(map: &ConfigMap, version: &ManagedOSVersion, channel: &str) -> bool {
    let controller = |refs: Option<&Vec<OwnerReference>>| {
        refs.into_iter()
            .flatten()
            .find(|o| o.controller == Some(true))
            .cloned()
    };
    let Some(owner) = controller(map.metadata.owner_references.as_ref()) else {
        return false;
    };
    let of_version = controller(version.metadata.owner_references.as_ref());
    owner.kind == "ManagedOSVersionChannel"
        && owner.name == channel
        && of_version.is_none_or(|v| v.uid == owner.uid)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owned(refs: serde_json::Value) -> serde_json::Value {
        serde_json::json!({"name": "x", "ownerReferences": refs})
    }

    fn channel_ref(name: &str, uid: &str) -> serde_json::Value {
        serde_json::json!([{"apiVersion": "rancheros.cattle.io/v1", "kind": "ManagedOSVersionChannel", "name": name, "uid": uid, "controller": true}])
    }

    #[test]
    fn only_the_channels_own_configmap_is_its_changelogs() {
        let version: ManagedOSVersion = serde_json::from_value(serde_json::json!({
            "metadata": owned(channel_ref("foo", "u1")),
            "spec": {},
        }))
        .unwrap();
        let map = |meta: serde_json::Value| -> ConfigMap {
            serde_json::from_value(serde_json::json!({"metadata": meta})).unwrap()
        };
        assert!(written_for(
            &map(owned(channel_ref("foo", "u1"))),
            &version,
            "foo"
        ));
        // A tenant's (no owner), another channel's, a namesake's (another uid).
        assert!(!written_for(
            &map(serde_json::json!({"name": "x"})),
            &version,
            "foo"
        ));
        assert!(!written_for(
            &map(owned(channel_ref("bar", "u2"))),
            &version,
            "foo"
        ));
        assert!(!written_for(
            &map(owned(channel_ref("foo", "u9"))),
            &version,
            "foo"
        ));
    }
}
