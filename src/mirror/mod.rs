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

pub mod layout;
pub mod plan;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures::StreamExt;
use futures::stream::BoxStream;
use serde::Serialize;
use serde_json::Value;

use crate::config::{ImageRef, Reference};
use crate::registry::{self, Credentials, PullError, push};
use layout::Layout;
use plan::{Dest, Source};

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
    /// The most one request or blob may take
    #[arg(long, value_name = "DURATION", default_value = "30m", value_parser = crate::duration::parse)]
    pub timeout: Duration,
    #[arg(short = 'o', long, value_enum, default_value = "text")]
    pub output: Output,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Copy,
    DryRun,
    Check,
}

/// How a run ended: 0 done or complete, 1 failures, 2 drift (`--check`).
pub async fn run(args: MirrorArgs) -> Result<u8, String> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let source = plan::source(&args.source)?;
    let dest = plan::dest(&args.to)?;
    let mode = if args.dry_run {
        Mode::DryRun
    } else if args.check {
        Mode::Check
    } else {
        Mode::Copy
    };
    let registries = Registries::new(&args)?;
    let src_layout = match &source {
        Source::Dir(d) => Some(Layout::open(d, false)?),
        _ => None,
    };
    let dst_layout = match &dest {
        Dest::Dir(d) => Some(Layout::open(d, mode == Mode::Copy)?),
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

    let (data, layout_name) = read_channel(&source, &src, &registries, args.timeout).await?;
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

    // Every image once, however many versions name it.
    let mut wanted: BTreeMap<String, ImageRef> = BTreeMap::new();
    for f in crate::channel::images::images(&value) {
        let image = plan::image(&f.reference)
            .map_err(|e| format!("version {} ({}): {e}", f.index, f.field))?;
        wanted.insert(f.reference, image);
    }
    let stats = Stats::default();
    let outcomes: Vec<(String, Result<Copied, String>)> =
        futures::stream::iter(wanted.iter().map(|(text, image)| {
            let (src, dst, dest, stats) = (&src, &dst, &dest, &stats);
            async move {
                let result = copy_image(src, dst, dest, image, mode, stats).await;
                (text.clone(), result)
            }
        }))
        .buffer_unordered(usize::from(args.jobs))
        .collect()
        .await;

    let mut failures = Vec::new();
    let mut drift = Vec::new();
    let mut rewritten = BTreeMap::new();
    let mut images = Vec::new();
    for (text, outcome) in &outcomes {
        match outcome {
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
                });
            }
        }
    }
    images.sort_by(|a, b| a.source.cmp(&b.source));
    if !failures.is_empty() {
        for f in &failures {
            eprintln!("error: {f}");
        }
        eprintln!(
            "error: {} of {} images failed; the channel was not published",
            failures.len(),
            outcomes.len()
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
    let channel = publish(&dst, &dest, &name, &new_data, mode, &registries).await;
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
    let printed = match &dest {
        Dest::Registry(_) => Some(plan::channel_manifest(
            &plan::object_name(name.split(':').next().unwrap_or(&name)),
            &channel_ref,
            registries.is_insecure(channel_ref.split('/').next().unwrap_or_default()),
        )),
        Dest::Dir(_) => None,
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
        drift: drift.clone(),
        apply: printed.clone(),
    };
    match args.output {
        Output::Json => println!(
            "{}",
            serde_json::to_string_pretty(&summary).map_err(|e| e.to_string())?
        ),
        Output::Text => print_text(&summary, &dest, &args.to),
    }
    Ok(if mode == Mode::Check && !drift.is_empty() {
        2
    } else {
        0
    })
}

fn print_text(s: &Summary, dest: &Dest, to: &str) {
    let verb = match s.mode {
        "dry-run" => "would send",
        "check" => "checked:",
        _ => "sent",
    };
    eprintln!("{:<8} {} ({})", s.channel_state, s.channel, "channel");
    if s.mode == "check" {
        eprintln!(
            "{} images, {} missing or different",
            s.images.len(),
            s.drift.len()
        );
    } else {
        eprintln!(
            "{} images; {verb} {} blobs ({}), {} already in DEST",
            s.images.len(),
            s.blobs_sent,
            plan::size(s.bytes_sent),
            s.blobs_present
        );
    }
    if s.mode == "copy" && s.blobs_sent == 0 && s.channel_state == "present" {
        eprintln!("nothing to copy: DEST has everything SOURCE names");
    }
    match (dest, &s.apply) {
        (Dest::Registry(_), Some(channel)) if s.mode != "check" => {
            // The channel to apply, on stdout (`mirror ... > channel.yaml`).
            print!("{}", serde_saphyr::to_string(channel).unwrap_or_default());
        }
        (Dest::Dir(d), _) if s.mode == "copy" => eprintln!(
            "next, at the site: rancheros-operator mirror dir:{} --to REGISTRY/PREFIX (the layout {to})",
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
    drift: Vec<String>,
    /// The channel to apply at the site (a registry DEST).
    apply: Option<Value>,
}

#[derive(Serialize)]
struct ImageReport {
    source: String,
    dest: String,
    state: &'static str,
    blobs: u64,
    bytes: u64,
}

#[derive(Default)]
struct Stats {
    blobs_sent: AtomicU64,
    bytes_sent: AtomicU64,
    blobs_present: AtomicU64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Sent now (or, in a dry run, would be).
    Copied,
    Present,
    /// `--check`: DEST lacks it.
    Missing,
}

impl State {
    fn word(self) -> &'static str {
        match self {
            State::Copied => "copied",
            State::Present => "present",
            State::Missing => "missing",
        }
    }
}

struct Copied {
    /// The reference the rewritten channel names: DEST's, pinned by digest.
    dest: String,
    state: State,
    blobs: u64,
    bytes: u64,
}

impl Copied {
    fn detail(&self) -> String {
        if self.blobs == 0 {
            String::new()
        } else {
            format!(" ({} blobs, {})", self.blobs, plan::size(self.bytes))
        }
    }
}

/// Where credentials and plain HTTP come from, for every registry a run speaks to.
struct Registries {
    client: registry::Client,
    insecure: Vec<String>,
    configs: Vec<Vec<u8>>,
    timeout: Duration,
}

impl Registries {
    fn new(args: &MirrorArgs) -> Result<Self, String> {
        let client =
            registry::Client::new(crate::egress::Policy::new(Vec::new(), Vec::new()), u64::MAX)
                .map_err(|e| format!("cannot build the HTTP client: {e}"))?;
        let mut configs = Vec::new();
        if let Some(f) = &args.registry_config {
            configs
                .push(std::fs::read(f).map_err(|e| format!("cannot read {}: {e}", f.display()))?);
        }
        configs.extend(
            crate::validate::image::login_files()
                .into_iter()
                .filter_map(|f| std::fs::read(f).ok()),
        );
        Ok(Registries {
            client,
            insecure: args.insecure.clone(),
            configs,
            timeout: args.timeout,
        })
    }

    fn is_insecure(&self, host: &str) -> bool {
        self.insecure.iter().any(|h| h == host)
    }

    fn credentials(&self, host: &str) -> Option<Credentials> {
        self.configs
            .iter()
            .find_map(|c| registry::auth::lookup(c, host).ok().flatten())
    }
}

/// One side of the copy.
enum Store<'a> {
    Registry(&'a Registries),
    Dir(&'a Layout),
}

/// A repository on a side: in a layout, its entries are named `registry/repository`.
#[derive(Clone, Debug)]
struct Loc {
    registry: String,
    repository: String,
}

impl Loc {
    fn of(image: &ImageRef) -> Loc {
        Loc {
            registry: image.registry.clone(),
            repository: image.repository.clone(),
        }
    }

    fn name(&self) -> String {
        format!("{}/{}", self.registry, self.repository)
    }

    /// `name:tag` or `name@digest`.
    fn at(&self, reference: &str) -> String {
        if reference.contains(':') {
            format!("{}@{reference}", self.name())
        } else {
            format!("{}:{reference}", self.name())
        }
    }

    fn image(&self) -> ImageRef {
        ImageRef {
            registry: self.registry.clone(),
            repository: self.repository.clone(),
            reference: Reference::Tag("mirror".into()),
        }
    }
}

impl Store<'_> {
    async fn with_session<T>(
        r: &Registries,
        loc: &Loc,
        actions: &'static str,
        f: impl AsyncFnOnce(&mut registry::Session<'_>) -> Result<T, PullError>,
    ) -> Result<T, PullError> {
        let image = loc.image();
        let credentials = r.credentials(&loc.registry);
        let mut session = r.client.session(
            &image,
            r.is_insecure(&loc.registry),
            credentials.as_ref(),
            r.timeout,
            actions,
        );
        f(&mut session).await
    }

    /// A manifest by tag or digest, with the media type it is stored with.
    async fn manifest(
        &self,
        loc: &Loc,
        reference: &str,
    ) -> Result<Option<(Vec<u8>, String)>, PullError> {
        let found = match self {
            Store::Registry(r) => {
                Self::with_session(r, loc, "pull", async |s| push::manifest(s, reference).await)
                    .await?
            }
            Store::Dir(l) => match l.resolve(&loc.at(reference)).await {
                Some(d) => l
                    .manifest(&d, registry::manifest::MAX_MANIFEST_BYTES)
                    .await?
                    .map(|b| (b, None)),
                None => None,
            },
        };
        Ok(found.map(|(body, ct)| {
            let mt = push::media_type(&body, ct.as_deref());
            (body, mt)
        }))
    }

    /// The digest `reference` names here, if there is one.
    async fn manifest_digest(
        &self,
        loc: &Loc,
        reference: &str,
    ) -> Result<Option<String>, PullError> {
        match self {
            Store::Registry(r) => {
                Self::with_session(r, loc, "pull", async |s| {
                    push::manifest_digest(s, reference).await
                })
                .await
            }
            Store::Dir(l) => Ok(l.resolve(&loc.at(reference)).await),
        }
    }

    async fn has_blob(&self, loc: &Loc, digest: &str) -> Result<bool, PullError> {
        match self {
            Store::Registry(r) => {
                Self::with_session(r, loc, "pull", async |s| push::has_blob(s, digest).await).await
            }
            Store::Dir(l) => l.has_blob(digest),
        }
    }

    async fn blob(
        &self,
        loc: &Loc,
        digest: &str,
    ) -> Result<BoxStream<'static, Result<bytes::Bytes, PullError>>, PullError> {
        match self {
            Store::Registry(r) => {
                Self::with_session(r, loc, "pull", async |s| push::blob(s, digest).await).await
            }
            Store::Dir(l) => l.blob(digest).await,
        }
    }

    async fn put_blob(
        &self,
        loc: &Loc,
        digest: &str,
        size: u64,
        data: BoxStream<'static, Result<bytes::Bytes, PullError>>,
    ) -> Result<(), PullError> {
        match self {
            Store::Registry(r) => {
                Self::with_session(r, loc, "pull,push", async |s| {
                    push::put_blob(s, digest, size, data).await
                })
                .await
            }
            Store::Dir(l) => l.put_blob(digest, data).await,
        }
    }

    /// Stores a manifest under `reference`; in a layout, `named` adds an entry to
    /// `index.json` (an index's children are only blobs there).
    async fn put_manifest(
        &self,
        loc: &Loc,
        reference: &str,
        media_type: &str,
        body: &[u8],
        named: bool,
    ) -> Result<(), PullError> {
        match self {
            Store::Registry(r) => {
                Self::with_session(r, loc, "pull,push", async |s| {
                    push::put_manifest(s, reference, media_type, body).await
                })
                .await
            }
            Store::Dir(l) if named => {
                l.put_manifest(&loc.at(reference), media_type, body, false)
                    .await
            }
            Store::Dir(l) => {
                let digest = registry::sha256(body);
                if l.has_blob(&digest)? {
                    return Ok(());
                }
                let data = futures::stream::iter([Ok(bytes::Bytes::copy_from_slice(body))]).boxed();
                l.put_blob(&digest, data).await
            }
        }
    }
}

/// Copies one image (its manifest tree, then its cosign tags); in a dry run or a check,
/// only says what is missing.
async fn copy_image(
    src: &Store<'_>,
    dst: &Store<'_>,
    dest: &Dest,
    image: &ImageRef,
    mode: Mode,
    stats: &Stats,
) -> Result<Copied, String> {
    let from = Loc::of(image);
    let to = match dest {
        Dest::Registry(prefix) => {
            let full = plan::dest_repo(prefix, &image.repository);
            let (registry, repository) = full.split_once('/').unwrap_or((&full, ""));
            Loc {
                registry: registry.to_string(),
                repository: repository.to_string(),
            }
        }
        Dest::Dir(_) => from.clone(),
    };
    let fail = |e: PullError| e.to_string();
    let (body, media_type) = src
        .manifest(&from, image.reference())
        .await
        .map_err(fail)?
        .ok_or_else(|| format!("SOURCE has no manifest {}", from.at(image.reference())))?;
    let digest = registry::sha256(&body);
    if let Reference::Digest(d) = &image.reference
        && registry::matches(d, &body) != Some(true)
    {
        return Err(format!(
            "the manifest {} is not what its digest names",
            from.at(d)
        ));
    }
    let mut copied = Copied {
        dest: to.at(&digest),
        state: State::Present,
        blobs: 0,
        bytes: 0,
    };
    let mut walk = Walk {
        src,
        dst,
        from: &from,
        to: &to,
        mode,
        stats,
        copied: &mut copied,
        depth: 0,
    };
    walk.tree(&digest, &body, &media_type, true).await?;
    for tag in plan::cosign_tags(&digest) {
        let Some(signature) = src.manifest_digest(&from, &tag).await.map_err(fail)? else {
            continue;
        };
        let at_dest = dst.manifest_digest(&to, &tag).await.map_err(fail)?;
        if at_dest.as_deref() == Some(signature.as_str()) && !signature.is_empty() {
            continue;
        }
        let (body, media_type) = src
            .manifest(&from, &tag)
            .await
            .map_err(fail)?
            .ok_or_else(|| format!("SOURCE lost {} while it was read", from.at(&tag)))?;
        let sig_digest = registry::sha256(&body);
        let mut walk = Walk {
            src,
            dst,
            from: &from,
            to: &to,
            mode,
            stats,
            copied: &mut copied,
            depth: 0,
        };
        walk.tree(&sig_digest, &body, &media_type, false).await?;
        match mode {
            Mode::Copy => dst
                .put_manifest(&to, &tag, &media_type, &body, true)
                .await
                .map_err(fail)?,
            Mode::Check => copied.state = State::Missing,
            Mode::DryRun => copied.state = State::Copied,
        }
    }
    Ok(copied)
}

/// The most manifests deep a tree may go (an index of images: 2).
const MAX_DEPTH: usize = 4;

struct Walk<'w, 's> {
    src: &'w Store<'s>,
    dst: &'w Store<'s>,
    from: &'w Loc,
    to: &'w Loc,
    mode: Mode,
    stats: &'w Stats,
    copied: &'w mut Copied,
    depth: usize,
}

impl Walk<'_, '_> {
    /// One manifest (already read) and what it names; stored last, so that a manifest in
    /// DEST always has all it names there.
    async fn tree(
        &mut self,
        digest: &str,
        body: &[u8],
        media_type: &str,
        top: bool,
    ) -> Result<(), String> {
        let fail = |e: PullError| e.to_string();
        if self
            .dst
            .manifest_digest(self.to, digest)
            .await
            .map_err(fail)?
            .is_some()
        {
            return Ok(());
        }
        if self.mode == Mode::Check {
            self.copied.state = State::Missing;
            return Ok(());
        }
        self.copied.state = State::Copied;
        if self.depth >= MAX_DEPTH {
            return Err(format!(
                "{} nests manifests deeper than {MAX_DEPTH}",
                self.from.at(digest)
            ));
        }
        let (manifests, blobs) =
            plan::children(body).map_err(|e| format!("{}: {e}", self.from.at(digest)))?;
        for (child, _) in manifests {
            let (cbody, ctype) = self
                .src
                .manifest(self.from, &child)
                .await
                .map_err(fail)?
                .ok_or_else(|| format!("SOURCE has no manifest {}", self.from.at(&child)))?;
            if registry::matches(&child, &cbody) != Some(true) {
                return Err(format!(
                    "the manifest {} is not what its digest names",
                    self.from.at(&child)
                ));
            }
            self.depth += 1;
            Box::pin(self.tree(&child, &cbody, &ctype, false)).await?;
            self.depth -= 1;
        }
        for (blob, size) in blobs {
            if self.dst.has_blob(self.to, &blob).await.map_err(fail)? {
                self.stats.blobs_present.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            if self.mode == Mode::Copy {
                let data = self.src.blob(self.from, &blob).await.map_err(fail)?;
                self.dst
                    .put_blob(self.to, &blob, size, data)
                    .await
                    .map_err(|e| format!("blob {blob}: {e}"))?;
            }
            self.stats.blobs_sent.fetch_add(1, Ordering::Relaxed);
            self.stats.bytes_sent.fetch_add(size, Ordering::Relaxed);
            self.copied.blobs += 1;
            self.copied.bytes += size;
        }
        if self.mode == Mode::Copy {
            self.dst
                .put_manifest(self.to, digest, media_type, body, top)
                .await
                .map_err(fail)?;
        }
        Ok(())
    }
}

/// Reads the channel data; from a layout, also the name it was stored under.
async fn read_channel(
    source: &Source,
    src: &Store<'_>,
    registries: &Registries,
    timeout: Duration,
) -> Result<(Vec<u8>, Option<String>), String> {
    match source {
        Source::File(p) => {
            let data = std::fs::read(p).map_err(|e| format!("cannot read {}: {e}", p.display()))?;
            if data.len() as u64 > MAX_DATA_BYTES {
                return Err(format!(
                    "{} is more than {MAX_DATA_BYTES} bytes",
                    p.display()
                ));
            }
            Ok((data, None))
        }
        Source::Url(u) => {
            let client =
                crate::fetch::Client::new(crate::egress::Policy::new(Vec::new(), Vec::new()))
                    .map_err(|e| format!("cannot build the HTTP client: {e}"))?;
            let options = crate::config::JsonOptions {
                uri: u.clone(),
                timeout,
            };
            let mut hold = crate::budget::Budget::new(MAX_DATA_BYTES, crate::budget::IDLE).hold();
            match crate::fetch::get(
                &client,
                &options,
                &Default::default(),
                MAX_DATA_BYTES,
                &mut hold,
            )
            .await
            {
                crate::fetch::Response::Body { data, .. } => Ok((data, None)),
                crate::fetch::Response::Failed(e) | crate::fetch::Response::Unverified(e) => Err(e),
                crate::fetch::Response::NotModified => Err(format!("fetching {u}: no data")),
            }
        }
        Source::Oci(image) => {
            let parsed = ImageRef::parse(image)?;
            let options = crate::validate::image::ImageOptions {
                path: None,
                platform: None,
                insecure: registries.is_insecure(&parsed.registry),
                ca_file: None,
                key_file: None,
                timeout,
                max_output_bytes: MAX_DATA_BYTES,
                max_layer_bytes: 512 << 20,
            };
            crate::validate::image::pull_with(image, &options, registries.configs.clone())
                .await
                .map(|(_, data)| (data, None))
        }
        Source::Dir(d) => {
            let Store::Dir(l) = src else {
                return Err("internal: a layout source without its layout".into());
            };
            let (name, digest) = l.channel().await.ok_or_else(|| {
                format!(
                    "{} holds no channel (no entry marked by an earlier mirror)",
                    d.display()
                )
            })?;
            let body = l
                .manifest(&digest, registry::manifest::MAX_MANIFEST_BYTES)
                .await
                .map_err(|e| e.to_string())?
                .ok_or_else(|| format!("{} lacks the channel's manifest {digest}", d.display()))?;
            let manifest: Value =
                serde_json::from_slice(&body).map_err(|_| "the channel's manifest is not JSON")?;
            let layer = manifest["layers"][0]["digest"]
                .as_str()
                .ok_or("the channel's manifest names no layer")?
                .to_string();
            let data = l
                .manifest(&layer, MAX_DATA_BYTES)
                .await
                .map_err(|e| e.to_string())?
                .ok_or_else(|| format!("{} lacks the channel data {layer}", d.display()))?;
            if registry::matches(&layer, &data) != Some(true) {
                return Err(format!(
                    "the channel data in {} is not what its digest names",
                    d.display()
                ));
            }
            Ok((data, Some(name)))
        }
    }
}

/// Pushes the rewritten channel as an artifact (blobs, then the manifest under its tag);
/// its reference in DEST and whether it was there already.
async fn publish(
    dst: &Store<'_>,
    dest: &Dest,
    name: &str,
    data: &[u8],
    mode: Mode,
    registries: &Registries,
) -> Result<(String, State), String> {
    let _ = registries;
    let (path, tag) = name
        .rsplit_once(':')
        .ok_or("a channel name without a tag")?;
    let loc = match dest {
        Dest::Registry(prefix) => {
            let full = plan::dest_repo(prefix, path);
            let (registry, repository) = full.split_once('/').unwrap_or((&full, ""));
            Loc {
                registry: registry.into(),
                repository: repository.into(),
            }
        }
        // In a layout, the channel's entry is named `path:tag`.
        Dest::Dir(_) => {
            let (registry, repository) = path.split_once('/').unwrap_or(("", path));
            Loc {
                registry: registry.into(),
                repository: repository.into(),
            }
        }
    };
    let manifest = plan::artifact(data);
    let digest = registry::sha256(&manifest);
    let shown = match dest {
        Dest::Registry(_) => format!("{}:{tag}", loc.name()),
        Dest::Dir(d) => format!("dir:{}:{name}", d.display()),
    };
    let fail = |e: PullError| e.to_string();
    let current = match (dst, dest) {
        (Store::Dir(l), _) => l.channel().await.filter(|(n, _)| n == name).map(|(_, d)| d),
        _ => dst.manifest_digest(&loc, tag).await.map_err(fail)?,
    };
    if current.as_deref() == Some(digest.as_str()) {
        return Ok((shown, State::Present));
    }
    match mode {
        Mode::Check => return Ok((shown, State::Missing)),
        Mode::DryRun => return Ok((shown, State::Copied)),
        Mode::Copy => {}
    }
    for (blob, bytes) in [
        (registry::sha256(plan::EMPTY), plan::EMPTY),
        (registry::sha256(data), data),
    ] {
        if !dst.has_blob(&loc, &blob).await.map_err(fail)? {
            let stream = futures::stream::iter([Ok(bytes::Bytes::copy_from_slice(bytes))]).boxed();
            dst.put_blob(&loc, &blob, bytes.len() as u64, stream)
                .await
                .map_err(fail)?;
        }
    }
    match dst {
        Store::Dir(l) => l
            .put_manifest(name, registry::manifest::OCI_MANIFEST, &manifest, true)
            .await
            .map_err(fail)?,
        Store::Registry(_) => dst
            .put_manifest(&loc, tag, registry::manifest::OCI_MANIFEST, &manifest, true)
            .await
            .map_err(fail)?,
    }
    Ok((shown, State::Copied))
}
