//! `status`: the channels as a table (`table`) or a document (`view`), read once, or with
//! `--watch` kept up to date from a watch of the channels and printed again whenever what
//! it shows changed.

pub mod table;
pub mod view;

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};

use crate::api::ManagedOSVersionChannel;
use crate::commands::cluster::{ChannelArg, CliError, ClusterArgs, Scope, Target};
use crate::commands::output::{self, Format};
use crate::commands::status::view::{ChannelView, StatusDocument};

/// How often a terminal's table is drawn again with nothing changed, so that its
/// relative times (`5m ago`, `in 55m`) stay right. Drawing makes no API call.
const REDRAW: Duration = Duration::from_secs(10);

#[derive(clap::Args, Debug, Clone)]
pub struct StatusArgs {
    /// One channel: NAMESPACE/CHANNEL, or CHANNEL with --namespace.
    #[arg(value_name = "NAMESPACE/CHANNEL", value_parser = crate::commands::cluster::parse_channel)]
    pub channel: Option<ChannelArg>,
    /// Keep watching, and print again whenever a channel changes (until interrupted).
    #[arg(short = 'w', long)]
    pub watch: bool,
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

/// Prints the table or document to `out` (with no channels, a table says so on `err`, as
/// `kubectl get` does).
pub async fn run(
    args: StatusArgs,
    out: &mut impl std::io::Write,
    err: &mut impl std::io::Write,
) -> Result<(), CliError> {
    // A usage error before any look at the cluster.
    let wanted = args.cluster.wanted(args.channel.as_ref())?;
    let client = args.cluster.client().await?;
    let scope = wanted.resolve(client.default_namespace());
    let channels = crate::commands::cluster::read_channels(&client, &scope).await?;
    let format = args.cluster.output;
    let views = crate::commands::status::view::views(&channels);
    if !args.watch {
        return print(format, &views, false, &scope, out, err);
    }
    watch(&client, &scope, format, views, out, err).await
}

/// Prints `views` once. `stream`: one of a series (`--watch`).
fn print(
    format: Format,
    views: &[ChannelView],
    stream: bool,
    scope: &Scope,
    out: &mut impl std::io::Write,
    err: &mut impl std::io::Write,
) -> Result<(), CliError> {
    if format.is_document() {
        let doc = StatusDocument { channels: views };
        return crate::commands::cluster::write_out(out, &output::document(format, &doc, stream));
    }
    if views.is_empty() {
        // Only `--watch` gets here for one channel: it was deleted while watched.
        let note = match scope {
            Scope::Channel(t) => format!("channel {t} not found"),
            _ => format!("no channels in {}", scope.describe()),
        };
        return writeln!(err, "{note}").map_err(CliError::Output);
    }
    crate::commands::cluster::write_out(
        out,
        &crate::commands::status::table::render_views(views, Timestamp::now()),
    )
}

/// Prints the channels now, then again on every change, until the watch fails for good.
async fn watch(
    client: &Client,
    scope: &Scope,
    format: Format,
    first: Vec<ChannelView>,
    out: &mut impl std::io::Write,
    err: &mut impl std::io::Write,
) -> Result<(), CliError> {
    let (api, config): (Api<ManagedOSVersionChannel>, _) = match scope {
        Scope::Channel(t) => (
            Api::namespaced(client.clone(), &t.namespace),
            watcher::Config::default().fields(&format!("metadata.name={}", t.name)),
        ),
        Scope::Namespace(ns) => (
            Api::namespaced(client.clone(), ns),
            watcher::Config::default(),
        ),
        Scope::All => (Api::all(client.clone()), watcher::Config::default()),
    };
    // A terminal shows the table in place; elsewhere (a pipe, a log) each one follows the
    // last, a blank line between.
    let screen = format == Format::Text && std::io::stdout().is_terminal();
    draw(screen, format, &first, scope, out, err)?;
    let mut shown = first;
    let mut known: BTreeMap<Target, ChannelView> = BTreeMap::new();
    let mut listing: BTreeMap<Target, ChannelView> = BTreeMap::new();
    let mut initialised = false;
    let mut events = watcher(api, config).default_backoff().boxed();
    let mut ticker = tokio::time::interval(REDRAW);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tokio::select! {
            event = events.next() => {
                let Some(event) = event else { return Ok(()) };
                match event {
                    Ok(watcher::Event::Init) => listing.clear(),
                    Ok(watcher::Event::InitApply(ch)) => {
                        let v = ChannelView::of(&ch);
                        listing.insert(key(&v), v);
                    }
                    Ok(watcher::Event::InitDone) => {
                        known = std::mem::take(&mut listing);
                        initialised = true;
                    }
                    Ok(watcher::Event::Apply(ch)) => {
                        let v = ChannelView::of(&ch);
                        known.insert(key(&v), v);
                    }
                    Ok(watcher::Event::Delete(ch)) => {
                        known.remove(&key(&ChannelView::of(&ch)));
                    }
                    Err(e) => {
                        if let Some(message) = crate::commands::sync::wait::fatal(&e) {
                            return Err(CliError::Watch {
                                what: format!("watching channels in {}", scope.describe()),
                                message,
                            });
                        }
                        // Anything else is retried, with a backoff.
                        continue;
                    }
                }
                let now: Vec<ChannelView> = known.values().cloned().collect();
                if initialised && now != shown {
                    draw(screen, format, &now, scope, out, err)?;
                    shown = now;
                }
            }
            _ = ticker.tick(), if screen => draw(screen, format, &shown, scope, out, err)?,
        }
    }
}

/// One print of `--watch`: in place on a `screen`, else after the last.
fn draw(
    screen: bool,
    format: Format,
    views: &[ChannelView],
    scope: &Scope,
    out: &mut impl std::io::Write,
    err: &mut impl std::io::Write,
) -> Result<(), CliError> {
    if screen {
        crate::commands::cluster::write_out(out, "\x1b[H\x1b[2J")?;
    }
    print(format, views, true, scope, out, err)?;
    if format == Format::Text && !screen && !views.is_empty() {
        crate::commands::cluster::write_out(out, "\n")?;
    }
    Ok(())
}

fn key(v: &ChannelView) -> Target {
    Target {
        namespace: v.namespace.clone(),
        name: v.name.clone(),
    }
}
