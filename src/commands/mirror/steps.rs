//! The steps of a run, in the order `run` takes them: the sides opened (the plan: what
//! SOURCE and DEST are, and their stores), SOURCE's channel read and checked, every image
//! copied (with its signatures and referrers), the channel rewritten and published.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures::StreamExt;
use serde_json::Value;

use super::{MirrorArgs, Mode, source, trust};
use crate::commands::mirror::copy::{copy_image, publish as publish_channel};
use crate::commands::mirror::layout::Layout;
use crate::commands::mirror::plan::{self, Dest, Source};
use crate::commands::mirror::registries::Registries;
use crate::commands::mirror::store::Store;
use crate::commands::mirror::walk::{Copied, State, Stats};
use crate::commands::output::Format;
use crate::config::ImageRef;
use crate::cosign::sign::SigningKey;

/// SOURCE and DEST, what the run does, and what it holds open to both.
pub(super) struct Sides {
    pub(super) source: Source,
    pub(super) dest: Dest,
    pub(super) mode: Mode,
    pub(super) sign: Option<SigningKey>,
    pub(super) registries: Registries,
    src_layout: Option<Layout>,
    dst_layout: Option<Layout>,
}

impl Sides {
    pub(super) fn open(args: &MirrorArgs) -> Result<Sides, String> {
        let source = plan::source(&args.source)?;
        let dest = plan::dest(&args.to)?;
        let mode = Mode::of(args);
        let sign = match &args.sign_key {
            Some(_) if matches!(dest, Dest::Dir(_)) => {
                return Err("--sign-key signs the channel a registry DEST publishes: give it to the step that pushes to the site's registry".into());
            }
            Some(f) => Some(SigningKey::from_pem(
                &std::fs::read_to_string(f)
                    .map_err(|e| format!("cannot read {}: {e}", f.display()))?,
            )?),
            None => None,
        };
        let registries = Registries::new(args)?;
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
        Ok(Sides {
            source,
            dest,
            mode,
            sign,
            registries,
            src_layout,
            dst_layout,
        })
    }

    /// SOURCE's store and DEST's.
    pub(super) fn stores(&self) -> (Store<'_>, Store<'_>) {
        (
            self.store(self.src_layout.as_ref()),
            self.store(self.dst_layout.as_ref()),
        )
    }

    fn store<'a>(&'a self, layout: Option<&'a Layout>) -> Store<'a> {
        match layout {
            Some(l) => Store::Dir(l),
            None => Store::Registry(&self.registries),
        }
    }
}

/// What every step of a run works with: the flags, the sides with their stores, the
/// counts of what was read and sent.
pub(super) struct Run<'a> {
    pub(super) args: &'a MirrorArgs,
    pub(super) sides: &'a Sides,
    pub(super) src: Store<'a>,
    pub(super) dst: Store<'a>,
    pub(super) stats: Stats,
}

impl<'a> Run<'a> {
    pub(super) fn new(args: &'a MirrorArgs, sides: &'a Sides) -> Run<'a> {
        let (src, dst) = sides.stores();
        Run {
            args,
            sides,
            src,
            dst,
            stats: Stats::default(),
        }
    }
}

/// SOURCE's channel, as read and as it is being rewritten.
pub(super) struct Channel {
    pub(super) data: Vec<u8>,
    pub(super) value: Value,
    /// Its name in a layout SOURCE.
    pub(super) name: Option<String>,
    pub(super) notes: Vec<String>,
    /// What DEST lacks (`--check`).
    pub(super) drift: Vec<String>,
}

/// Reads SOURCE's channel (verified as it is read, given `--verify-key`), checks its data,
/// and keeps the signed channel in a layout DEST.
pub(super) async fn read(run: &Run<'_>) -> Result<Channel, String> {
    let (args, sides, src) = (run.args, run.sides, &run.src);
    let verify_key = args.verify_key.as_deref().map(trust::key).transpose()?;
    let (data, name, source_digest) = source::read_channel(
        &sides.source,
        src,
        &sides.registries,
        args.timeout,
        args.verify_key.as_deref(),
    )
    .await?;
    let read = trust::Read {
        source: &sides.source,
        digest: source_digest.as_deref(),
        layout: sides.src_layout.as_ref().zip(name.as_deref()),
        data: &data,
    };
    let signing = sides.sign.is_some();
    let trust::Checked { keep, notes } =
        trust::source(read, src, &sides.dest, verify_key.as_ref(), signing).await?;
    if let Some(e) = crate::channel::check(&data)
        .diagnostics
        .iter()
        .find(|d| d.severity == crate::channel::Severity::Error)
    {
        return Err(format!(
            "the channel data of {} is not valid: {}",
            args.source, e.message
        ));
    }
    let value: Value =
        serde_json::from_slice(&data).map_err(|e| format!("the channel data is not JSON: {e}"))?;
    // The signed channel kept, once its data is found valid (invalid data keeps nothing).
    let mut drift = Vec::new();
    if let Some(signed) = &keep {
        let (dst, stats) = (&run.dst, &run.stats);
        let kept = copy_image(src, dst, &sides.dest, signed, sides.mode, stats, &[])
            .await
            .map_err(|e| format!("keeping the signed channel {signed}: {e}"))?;
        if kept.state == State::Missing {
            drift.push(format!("the signed channel: DEST lacks {}", kept.dest));
        }
    }
    Ok(Channel {
        data,
        value,
        name,
        notes,
        drift,
    })
}

/// What the images' copies came to.
pub(super) struct Copies {
    /// Each image's reference in the channel and its copy, in the order of the references.
    pub(super) images: Vec<(String, Copied)>,
    /// Each image's reference in the channel, and its reference in DEST.
    pub(super) rewritten: BTreeMap<String, String>,
    pub(super) drift: Vec<String>,
}

/// The images that failed, of how many.
pub(super) struct Failures {
    failed: Vec<String>,
    of: usize,
}

impl Failures {
    pub(super) fn say(&self) {
        for f in &self.failed {
            eprintln!("error: {f}");
        }
        eprintln!(
            "error: {} of {} images failed; the channel was not published",
            self.failed.len(),
            self.of
        );
    }
}

/// Copies every image the channel names, `--jobs` at once, each said as it ends.
pub(super) async fn copy_images(
    run: &Run<'_>,
    value: &Value,
) -> Result<Result<Copies, Failures>, String> {
    let (args, src, dst, stats) = (run.args, &run.src, &run.dst, &run.stats);
    // Every image once, however many versions name it.
    let mut wanted: BTreeMap<String, ImageRef> = BTreeMap::new();
    for f in crate::channel::images::images(value) {
        let image = plan::image(&f.reference)
            .map_err(|e| format!("version {} ({}): {e}", f.index, f.field))?;
        wanted.insert(f.reference, image);
    }
    let (dest, mode, platforms) = (&run.sides.dest, run.sides.mode, &args.platform);
    let mut outcomes = futures::stream::iter(wanted.iter().map(|(text, image)| async move {
        let result = copy_image(src, dst, dest, image, mode, stats, platforms).await;
        (text.clone(), result)
    }))
    .buffer_unordered(usize::from(args.jobs));

    let mut failed = Vec::new();
    let mut copies = Copies {
        images: Vec::new(),
        rewritten: BTreeMap::new(),
        drift: Vec::new(),
    };
    // On a terminal, a line that redraws (images done, bytes sent, rate); elsewhere, only
    // the line of each image as it ends.
    let progress = args.output == Format::Text && std::io::stderr().is_terminal();
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
        match outcome {
            Err(e) => failed.push(format!("{text}: {e}")),
            Ok(c) => {
                if c.state == State::Missing {
                    copies.drift.push(format!("{text}: DEST lacks {}", c.dest));
                }
                if args.output == Format::Text {
                    eprintln!("{:<8} {text} -> {}{}", c.state.word(), c.dest, c.detail());
                }
                copies.rewritten.insert(text.clone(), c.dest.clone());
                copies.images.push((text, c));
            }
        }
    }
    if progress {
        eprint!("\r\x1b[K");
    }
    copies.images.sort_by(|a, b| a.0.cmp(&b.0));
    if !failed.is_empty() {
        return Ok(Err(Failures {
            failed,
            of: wanted.len(),
        }));
    }
    Ok(Ok(copies))
}

/// The channel as published: its reference in DEST, and whether DEST had it.
pub(super) struct Published {
    pub(super) reference: String,
    pub(super) state: State,
    /// The `ManagedOSVersionChannel`'s name for it.
    pub(super) object: String,
}

/// Rewrites the channel's images to their DEST references and publishes it; the inner
/// `Err` is a failure of the publishing itself.
pub(super) async fn publish(
    Run { sides, dst, .. }: &Run<'_>,
    channel: &mut Channel,
    rewritten: &BTreeMap<String, String>,
) -> Result<Result<Published, String>, String> {
    crate::channel::images::rewrite(&mut channel.value, |f| rewritten.get(&f.reference).cloned());
    let new_data = serde_json::to_vec_pretty(&channel.value).map_err(|e| e.to_string())?;
    if crate::channel::check(&new_data)
        .diagnostics
        .iter()
        .any(|d| d.severity == crate::channel::Severity::Error)
    {
        return Err("the rewritten channel data is not valid".into());
    }
    let name = channel
        .name
        .clone()
        .unwrap_or_else(|| plan::channel_name(&sides.source, &channel.data));
    let published = publish_channel(
        dst,
        &sides.dest,
        &name,
        &new_data,
        sides.mode,
        sides.sign.as_ref(),
    )
    .await;
    let (reference, state) = match published {
        Ok(p) => p,
        Err(e) => return Ok(Err(format!("publishing the channel {name}: {e}"))),
    };
    if state == State::Missing {
        channel
            .drift
            .push(format!("the channel {reference} is missing or differs"));
    }
    let object = plan::object_name(name.split(':').next().unwrap_or(&name));
    Ok(Ok(Published {
        reference,
        state,
        object,
    }))
}
