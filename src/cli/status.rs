//! `status`: the channels as a table (`table`), read once.

use kube::api::ListParams;
use kube::{Api, Client};

use super::{ChannelArg, CliError, ClusterArgs, Target};
use crate::api::ManagedOSVersionChannel;

#[derive(clap::Args, Debug, Clone)]
pub struct StatusArgs {
    /// One channel: NAMESPACE/CHANNEL, or CHANNEL with --namespace.
    #[arg(value_name = "NAMESPACE/CHANNEL", value_parser = super::parse_channel)]
    pub channel: Option<ChannelArg>,
    /// The namespace to list (default: the kubeconfig context's namespace).
    #[arg(short = 'n', long, value_name = "NAMESPACE")]
    pub namespace: Option<String>,
    /// List the channels of all namespaces.
    #[arg(short = 'A', long, conflicts_with_all = ["namespace", "channel"])]
    pub all_namespaces: bool,
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

/// Prints the table to `out` (or, when there are no channels, says so on `err`, as
/// `kubectl get` does).
pub async fn run(
    args: StatusArgs,
    out: &mut impl std::io::Write,
    err: &mut impl std::io::Write,
) -> Result<(), CliError> {
    // A usage error before any look at the cluster.
    let namespace = super::namespace_of(args.channel.as_ref(), args.namespace.as_deref())
        .map_err(CliError::Usage)?;
    let client = super::client(args.cluster.kubeconfig.as_deref()).await?;
    let namespace = namespace.unwrap_or_else(|| client.default_namespace().to_string());
    let channels = read(&client, &args, &namespace).await?;
    if channels.is_empty() {
        let where_ = if args.all_namespaces {
            "any namespace".to_string()
        } else {
            format!("namespace {namespace}")
        };
        return writeln!(err, "no channels in {where_}").map_err(CliError::Output);
    }
    let table = super::table::render(&channels, k8s_openapi::jiff::Timestamp::now());
    out.write_all(table.as_bytes())
        .and_then(|()| out.flush())
        .map_err(CliError::Output)
}

async fn read(
    client: &Client,
    args: &StatusArgs,
    namespace: &str,
) -> Result<Vec<ManagedOSVersionChannel>, CliError> {
    if let Some(channel) = &args.channel {
        let target = Target {
            namespace: namespace.into(),
            name: channel.name.clone(),
        };
        let api: Api<ManagedOSVersionChannel> = Api::namespaced(client.clone(), namespace);
        let ch = api
            .get(&target.name)
            .await
            .map_err(|e| CliError::api(format!("reading channel {target}"), Some(&target), e))?;
        return Ok(vec![ch]);
    }
    let (api, what): (Api<ManagedOSVersionChannel>, String) = if args.all_namespaces {
        (Api::all(client.clone()), "listing channels".into())
    } else {
        (
            Api::namespaced(client.clone(), namespace),
            format!("listing channels in namespace {namespace}"),
        )
    };
    api.list(&ListParams::default())
        .await
        .map(|l| l.items)
        .map_err(|e| CliError::api(what, None, e))
}
