//! The last step: what a run says, as text for people (stderr, and the channel to apply on
//! stdout) or one JSON document (`-o json`), and its exit code.

use std::sync::atomic::Ordering;

use serde::Serialize;
use serde_json::Value;

use super::Mode;
use crate::commands::mirror::plan::{self, Dest};
use crate::commands::mirror::steps::{Channel, Published, Run};
use crate::commands::mirror::walk::{Copied, State};
use crate::commands::output::Format;

#[derive(Serialize)]
struct Summary {
    mode: Mode,
    images: Vec<ImageReport>,
    channel: String,
    channel_state: State,
    blobs_sent: u64,
    bytes_sent: u64,
    blobs_present: u64,
    /// Blobs DEST's registry took from another of its repositories (not sent again).
    blobs_mounted: u64,
    drift: Vec<String>,
    /// The channel to apply at the site (a registry DEST).
    apply: Option<Value>,
    /// With `--sign-key`: the Secret of the public key the channel's `verify` names.
    apply_secret: Option<Value>,
    /// What the user should know (a source signature that could not be kept).
    notes: Vec<String>,
}

#[derive(Serialize)]
struct ImageReport {
    source: String,
    dest: String,
    state: State,
    blobs: u64,
    bytes: u64,
    /// Its index was narrowed to `--platform` (the reference names the new index).
    rebuilt: bool,
}

impl ImageReport {
    fn of((source, c): (String, Copied)) -> ImageReport {
        ImageReport {
            source,
            dest: c.dest,
            state: c.state,
            blobs: c.blobs,
            bytes: c.bytes,
            rebuilt: c.rebuilt,
        }
    }
}

/// Says how the run went; its exit code: 2 when a check found drift, else 0.
pub(super) fn report(
    Run {
        args, sides, stats, ..
    }: &Run<'_>,
    channel: Channel,
    images: Vec<(String, Copied)>,
    published: Published,
) -> Result<u8, String> {
    let (printed, printed_secret) = match &sides.dest {
        Dest::Registry(_) => {
            let host = published.reference.split('/').next().unwrap_or_default();
            let apply = plan::channel_manifest(
                &published.object,
                &published.reference,
                sides.registries.is_insecure(host),
                sides.sign.is_some(),
            );
            let secret = sides
                .sign
                .as_ref()
                .map(|key| plan::key_secret(&published.object, &key.public_pem()));
            (Some(apply), secret)
        }
        Dest::Dir(_) => (None, None),
    };
    let summary = Summary {
        mode: sides.mode,
        images: images.into_iter().map(ImageReport::of).collect(),
        channel: published.reference,
        channel_state: published.state,
        blobs_sent: stats.blobs_sent.load(Ordering::Relaxed),
        bytes_sent: stats.bytes_sent.load(Ordering::Relaxed),
        blobs_present: stats.blobs_present.load(Ordering::Relaxed),
        blobs_mounted: stats.blobs_mounted.load(Ordering::Relaxed),
        drift: channel.drift,
        apply: printed,
        apply_secret: printed_secret,
        notes: channel.notes,
    };
    match args.output {
        Format::Json | Format::Yaml => print!(
            "{}",
            crate::commands::output::document(args.output, &summary, false)
        ),
        Format::Text => print_text(&summary, &sides.dest),
    }
    Ok(
        if summary.mode == Mode::Check && !summary.drift.is_empty() {
            2
        } else {
            0
        },
    )
}

fn print_text(s: &Summary, dest: &Dest) {
    eprintln!("{:<8} {} (the channel)", s.channel_state.word(), s.channel);
    let count = |state: State| s.images.iter().filter(|i| i.state == state).count();
    match s.mode {
        Mode::Check => eprintln!(
            "{} images and the channel: {} missing or different in DEST",
            s.images.len(),
            s.drift.len()
        ),
        mode => {
            let (copy, send) = if mode == Mode::DryRun {
                ("to copy", "would send")
            } else {
                ("copied", "sent")
            };
            let mounted = match s.blobs_mounted {
                0 => String::new(),
                n => format!(", {n} mounted from another of its repositories"),
            };
            eprintln!(
                "{} images: {} {copy}, {} already in DEST; {send} {} blobs ({}), {} blobs DEST had{mounted}",
                s.images.len(),
                count(State::Copied),
                count(State::Present),
                s.blobs_sent,
                plan::size(s.bytes_sent),
                s.blobs_present,
            )
        }
    }
    for note in &s.notes {
        eprintln!("note: {note}");
    }
    if s.mode == Mode::Copy && s.blobs_sent == 0 && s.channel_state == State::Present {
        eprintln!("nothing to copy: DEST has everything SOURCE names");
    }
    match (dest, &s.apply) {
        (Dest::Registry(_), Some(channel)) if s.mode != Mode::Check => {
            // The channel to apply, on stdout (`mirror ... > channel.yaml`), after the
            // Secret of its key when it is signed.
            if let Some(secret) = &s.apply_secret {
                print!("{}", serde_saphyr::to_string(secret).unwrap_or_default());
                println!("---");
            }
            print!("{}", serde_saphyr::to_string(channel).unwrap_or_default());
        }
        (Dest::Dir(d), _) if s.mode == Mode::Copy => eprintln!(
            "next: carry {0} to the site and run there: rancheros-operator mirror dir:{0} --to REGISTRY/PREFIX",
            d.display()
        ),
        _ => {}
    }
}
