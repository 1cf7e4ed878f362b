//! `mirror SOURCE --to DEST`: a channel and every image its versions name, copied by digest
//! into a registry or an OCI image layout directory, then the channel data rewritten to
//! DEST and pushed last, as the artifact `oci` channels read.
//!
//! Layout: `plan` decides (what SOURCE and DEST are, where an image goes, the artifact, the
//! channel printed), `layout` is the directory store, and this file walks each image's
//! manifests (an index whole, with every child) and moves blobs between the two sides
//! through the project's one registry client (`crate::registry`), each blob streamed and
//! checked against its digest, skipped when DEST has it. What arrived stays: a run killed
//! at any point is finished by the next one without sending it again.

mod copy;
pub mod layout;
pub mod plan;
mod referrers;
mod registries;
mod source;
mod store;
mod trust;
mod walk;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures::StreamExt;
use serde::Serialize;
use serde_json::Value;

use crate::config::ImageRef;
use copy::{copy_image, publish};
use layout::Layout;
use plan::{Dest, Source};
use registries::Registries;
use store::Store;
use walk::{State, Stats};

/// The largest channel data read from a file, URL or layout.
const MAX_DATA_BYTES: u64 = 16 << 20;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    Text,
    Json,
}

#[derive(clap::Args, Debug)]
pub struct MirrorArgs {
    /// The channel: an image or artifact (`registry/repo:tag`), a json URL, a file, or
    /// `dir:PATH` (a layout an earlier mirror wrote)
    #[arg(value_name = "SOURCE")]
    pub source: String,
    /// A registry prefix (`registry.site.lan/os`) or `dir:PATH` (an OCI image layout)
    #[arg(long, value_name = "DEST")]
    pub to: String,
    /// List what would be copied, with sizes; copy nothing
    #[arg(long, conflicts_with = "check")]
    pub dry_run: bool,
    /// Exit 2 when DEST lacks or differs from anything SOURCE names, 0 when complete
    #[arg(long)]
    pub check: bool,
    /// Copy only these platforms of an image index (`linux/arm64`; repeatable): the index
    /// is rebuilt with their entries (a new digest, so a signature over the original is
    /// not copied)
    #[arg(long, value_name = "OS/ARCH[/VARIANT]", value_parser = parse_platform)]
    pub platform: Vec<crate::config::Platform>,
    /// Images copied at once
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=32))]
    pub jobs: u16,
    /// A registry (`host[:port]`) spoken to over plain HTTP; repeatable
    #[arg(long = "insecure-registry", value_name = "HOST")]
    pub insecure: Vec<String>,
    /// A docker config file with credentials (default: `DOCKER_CONFIG`,
    /// `~/.docker/config.json`, and Podman's)
    #[arg(long, value_name = "FILE")]
    pub registry_config: Option<PathBuf>,
    /// Verify SOURCE's channel before anything is copied: its cosign signature (the
    /// `sha256-<hex>.sig` tag, as `spec.verify` checks it) by this public key (`cosign.pub`);
    /// a `dir:` SOURCE, with the signature its bundle carries
    #[arg(long, value_name = "FILE")]
    pub verify_key: Option<PathBuf>,
    /// Sign the published channel with this key (a PKCS#8 PEM ECDSA P-256 private key);
    /// the printed channel then verifies it (`spec.verify`, with a Secret of the public key).
    /// Needs SOURCE verified (`--verify-key`) or `--sign-unverified`
    #[arg(long, value_name = "FILE")]
    pub sign_key: Option<PathBuf>,
    /// With `--sign-key`: sign a SOURCE that was not verified
    #[arg(long, requires = "sign_key", conflicts_with = "verify_key")]
    pub sign_unverified: bool,
    /// A PEM file of roots that registries' certificates may chain to (beside the
    /// system's)
    #[arg(long, value_name = "FILE")]
    pub ca_file: Option<PathBuf>,
    /// The most one request or blob may take
    #[arg(long, value_name = "DURATION", default_value = "30m", value_parser = crate::duration::parse)]
    pub timeout: Duration,
    #[arg(short = 'o', long, value_enum, default_value = "text")]
    pub output: Output,
}

fn parse_platform(text: &str) -> Result<crate::config::Platform, String> {
    crate::config::Platform::parse(text)
        .map_err(|e| e.replace("spec.options.platform", "--platform"))
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    Copy,
    DryRun,
    Check,
}

/// How a run ended: 0 done or complete, 1 failures, 2 drift (`--check`).
pub async fn run(args: MirrorArgs) -> Result<u8, String> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    // A usage error: nothing is read before it is said.
    if let Err(e) = trust::signing(
        args.sign_key.is_some(),
        args.verify_key.is_some(),
        args.sign_unverified,
    ) {
        eprintln!("error: {e}");
        return Ok(2);
    }
    let source = plan::source(&args.source)?;
    let dest = plan::dest(&args.to)?;
    let mode = if args.dry_run {
        Mode::DryRun
    } else if args.check {
        Mode::Check
    } else {
        Mode::Copy
    };
    let sign = match &args.sign_key {
        Some(_) if matches!(dest, Dest::Dir(_)) => {
            return Err("--sign-key signs the channel a registry DEST publishes: give it to the step that pushes to the site's registry".into());
        }
        Some(f) => Some(crate::cosign::sign::SigningKey::from_pem(
            &std::fs::read_to_string(f).map_err(|e| format!("cannot read {}: {e}", f.display()))?,
        )?),
        None => None,
    };
    let registries = Registries::new(&args)?;
    let src_layout = match &source {
        Source::Dir(d) => Some(Layout::open(d, false)?),
        _ => None,
    };
    let dst_layout = match &dest {
        // (a dry run or a check of a layout not written yet: an empty one, left unwritten)
        Dest::Dir(d) if mode != Mode::Copy && !d.join("index.json").exists() => {
            Some(Layout::empty(d))
        }
        Dest::Dir(d) => Some(Layout::open(d, true)?),
        Dest::Registry(_) => None,
    };
    let src = match &src_layout {
        Some(l) => Store::Dir(l),
        None => Store::Registry(&registries),
    };
    let dst = match &dst_layout {
        Some(l) => Store::Dir(l),
        None => Store::Registry(&registries),
    };

    let verify_key = args.verify_key.as_deref().map(trust::key).transpose()?;
    // An oci SOURCE is verified as it is read (the pull `spec.verify` makes).
    let (data, layout_name, source_digest) = source::read_channel(
        &source,
        &src,
        &registries,
        args.timeout,
        args.verify_key.as_deref(),
    )
    .await?;
    let stats = Stats::default();
    let read = trust::Read {
        source: &source,
        digest: source_digest.as_deref(),
        layout: src_layout.as_ref().zip(layout_name.as_deref()),
        data: &data,
    };
    let trust::Checked { keep, notes } =
        trust::source(read, &src, &dest, verify_key.as_ref(), sign.is_some()).await?;
    let report = crate::channel::check(&data);
    if let Some(e) = report
        .diagnostics
        .iter()
        .find(|d| d.severity == crate::channel::Severity::Error)
    {
        return Err(format!(
            "the channel data of {} is not valid: {}",
            args.source, e.message
        ));
    }
    let mut value: Value =
        serde_json::from_slice(&data).map_err(|e| format!("the channel data is not JSON: {e}"))?;

    // The signed channel kept, once its data is found valid (invalid data keeps nothing).
    let mut drift = Vec::new();
    if let Some(signed) = &keep {
        let kept = copy_image(&src, &dst, &dest, signed, mode, &stats, &[])
            .await
            .map_err(|e| format!("keeping the signed channel {signed}: {e}"))?;
        if kept.state == State::Missing {
            drift.push(format!("the signed channel: DEST lacks {}", kept.dest));
        }
    }
    // Every image once, however many versions name it.
    let mut wanted: BTreeMap<String, ImageRef> = BTreeMap::new();
    for f in crate::channel::images::images(&value) {
        let image = plan::image(&f.reference)
            .map_err(|e| format!("version {} ({}): {e}", f.index, f.field))?;
        wanted.insert(f.reference, image);
    }
    let mut outcomes = futures::stream::iter(wanted.iter().map(|(text, image)| {
        let (src, dst, dest, stats, platforms) = (&src, &dst, &dest, &stats, &args.platform);
        async move {
            let result = copy_image(src, dst, dest, image, mode, stats, platforms).await;
            (text.clone(), result)
        }
    }))
    .buffer_unordered(usize::from(args.jobs));

    let mut failures = Vec::new();
    let mut rewritten = BTreeMap::new();
    let mut images = Vec::new();
    // Each image said as it ends (a long copy shows its progress image by image).
    // On a terminal, a line that redraws (images done, bytes sent, rate); elsewhere, only
    // the line of each image as it ends.
    let progress = args.output == Output::Text && std::io::stderr().is_terminal();
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    let started = std::time::Instant::now();
    let mut done = 0usize;
    loop {
        let next = tokio::select! {
            next = outcomes.next() => next,
            _ = tick.tick(), if progress => {
                let sent = stats.streamed.load(Ordering::Relaxed);
                let secs = started.elapsed().as_secs_f64().max(0.001);
                eprint!(
                    "\r\x1b[K{done}/{} images, {} sent, {}/s",
                    wanted.len(),
                    plan::size(sent),
                    plan::size((sent as f64 / secs) as u64)
                );
                continue;
            }
        };
        let Some((text, outcome)) = next else {
            break;
        };
        done = done.saturating_add(1);
        if progress {
            eprint!("\r\x1b[K");
        }
        match &outcome {
            Err(e) => failures.push(format!("{text}: {e}")),
            Ok(c) => {
                if c.state == State::Missing {
                    drift.push(format!("{text}: DEST lacks {}", c.dest));
                }
                if args.output == Output::Text {
                    eprintln!("{:<8} {text} -> {}{}", c.state.word(), c.dest, c.detail());
                }
                rewritten.insert(text.clone(), c.dest.clone());
                images.push(ImageReport {
                    source: text.clone(),
                    dest: c.dest.clone(),
                    state: c.state.word(),
                    blobs: c.blobs,
                    bytes: c.bytes,
                    rebuilt: c.rebuilt,
                });
            }
        }
    }
    if progress {
        eprint!("\r\x1b[K");
    }
    images.sort_by(|a, b| a.source.cmp(&b.source));
    if !failures.is_empty() {
        for f in &failures {
            eprintln!("error: {f}");
        }
        eprintln!(
            "error: {} of {} images failed; the channel was not published",
            failures.len(),
            wanted.len()
        );
        return Ok(1);
    }

    crate::channel::images::rewrite(&mut value, |f| rewritten.get(&f.reference).cloned());
    let new_data = serde_json::to_vec_pretty(&value).map_err(|e| e.to_string())?;
    if crate::channel::check(&new_data)
        .diagnostics
        .iter()
        .any(|d| d.severity == crate::channel::Severity::Error)
    {
        return Err("the rewritten channel data is not valid".into());
    }
    let name = layout_name.unwrap_or_else(|| plan::channel_name(&source, &data));
    let channel = publish(&dst, &dest, &name, &new_data, mode, sign.as_ref()).await;
    let (channel_ref, channel_state) = match channel {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: publishing the channel {name}: {e}");
            return Ok(1);
        }
    };
    if channel_state == State::Missing {
        drift.push(format!("the channel {channel_ref} is missing or differs"));
    }
    let object = plan::object_name(name.split(':').next().unwrap_or(&name));
    let printed = match &dest {
        Dest::Registry(_) => Some(plan::channel_manifest(
            &object,
            &channel_ref,
            registries.is_insecure(channel_ref.split('/').next().unwrap_or_default()),
            sign.is_some(),
        )),
        Dest::Dir(_) => None,
    };
    let printed_secret = match (&dest, &sign) {
        (Dest::Registry(_), Some(key)) => Some(plan::key_secret(&object, &key.public_pem())),
        _ => None,
    };
    let summary = Summary {
        mode: match mode {
            Mode::Copy => "copy",
            Mode::DryRun => "dry-run",
            Mode::Check => "check",
        },
        images,
        channel: channel_ref.clone(),
        channel_state: channel_state.word(),
        blobs_sent: stats.blobs_sent.load(Ordering::Relaxed),
        bytes_sent: stats.bytes_sent.load(Ordering::Relaxed),
        blobs_present: stats.blobs_present.load(Ordering::Relaxed),
        blobs_mounted: stats.blobs_mounted.load(Ordering::Relaxed),
        drift: drift.clone(),
        apply: printed.clone(),
        apply_secret: printed_secret,
        notes,
    };
    match args.output {
        Output::Json => println!(
            "{}",
            serde_json::to_string_pretty(&summary).map_err(|e| e.to_string())?
        ),
        Output::Text => print_text(&summary, &dest),
    }
    Ok(if mode == Mode::Check && !drift.is_empty() {
        2
    } else {
        0
    })
}

fn print_text(s: &Summary, dest: &Dest) {
    eprintln!("{:<8} {} (the channel)", s.channel_state, s.channel);
    let count = |state: &str| s.images.iter().filter(|i| i.state == state).count();
    match s.mode {
        "check" => eprintln!(
            "{} images and the channel: {} missing or different in DEST",
            s.images.len(),
            s.drift.len()
        ),
        mode => {
            let (copy, send) = if mode == "dry-run" {
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
                count("copied"),
                count("present"),
                s.blobs_sent,
                plan::size(s.bytes_sent),
                s.blobs_present,
            )
        }
    }
    for note in &s.notes {
        eprintln!("note: {note}");
    }
    if s.mode == "copy" && s.blobs_sent == 0 && s.channel_state == "present" {
        eprintln!("nothing to copy: DEST has everything SOURCE names");
    }
    match (dest, &s.apply) {
        (Dest::Registry(_), Some(channel)) if s.mode != "check" => {
            // The channel to apply, on stdout (`mirror ... > channel.yaml`), after the
            // Secret of its key when it is signed.
            if let Some(secret) = &s.apply_secret {
                print!("{}", serde_saphyr::to_string(secret).unwrap_or_default());
                println!("---");
            }
            print!("{}", serde_saphyr::to_string(channel).unwrap_or_default());
        }
        (Dest::Dir(d), _) if s.mode == "copy" => eprintln!(
            "next: carry {0} to the site and run there: rancheros-operator mirror dir:{0} --to REGISTRY/PREFIX",
            d.display()
        ),
        _ => {}
    }
}

#[derive(Serialize)]
struct Summary {
    mode: &'static str,
    images: Vec<ImageReport>,
    channel: String,
    channel_state: &'static str,
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
    state: &'static str,
    blobs: u64,
    bytes: u64,
    /// Its index was narrowed to `--platform` (the reference names the new index).
    rebuilt: bool,
}
