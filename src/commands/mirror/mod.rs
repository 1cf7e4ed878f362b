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
mod report;
mod source;
mod steps;
mod store;
mod trust;
mod walk;

#[cfg(test)]
mod tests;

use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;

use crate::commands::output::Format;
use steps::{Copies, Run, Sides};

/// The largest channel data read from a file, URL or layout.
const MAX_DATA_BYTES: u64 = 16 << 20;

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
    /// `text` for people, `json` or `yaml` (the same document) for scripts; also spelled
    /// `--format`
    #[arg(
        short = 'o',
        long,
        visible_alias = "format",
        value_enum,
        default_value = "text"
    )]
    pub output: Format,
}

fn parse_platform(text: &str) -> Result<crate::config::Platform, String> {
    crate::config::Platform::parse(text).map_err(|e| format!("--platform: {e}"))
}

/// What a run does: copy, or only say what it would copy (`--dry-run`), or what DEST lacks
/// (`--check`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Mode {
    Copy,
    DryRun,
    Check,
}

impl Mode {
    fn of(args: &MirrorArgs) -> Mode {
        if args.dry_run {
            Mode::DryRun
        } else if args.check {
            Mode::Check
        } else {
            Mode::Copy
        }
    }
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
    // The plan: what SOURCE and DEST are, and the stores of both sides.
    let sides = Sides::open(&args)?;
    let run = Run::new(&args, &sides);
    // SOURCE's channel: read, verified, checked (a signed one kept whole in a layout).
    let mut channel = steps::read(&run).await?;
    // Every image, with its signatures and referrers; a failure publishes nothing.
    let Copies {
        images,
        rewritten,
        drift,
    } = match steps::copy_images(&run, &channel.value).await? {
        Ok(copies) => copies,
        Err(failures) => {
            failures.say();
            return Ok(1);
        }
    };
    channel.drift.extend(drift);
    // The channel rewritten to DEST, published last.
    let published = match steps::publish(&run, &mut channel, &rewritten).await? {
        Ok(published) => published,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(1);
        }
    };
    report::report(&run, channel, images, published)
}
