//! `rancheros-operator`: one binary: `operator`, `display` (internal: it runs in syncer
//! pods), `validate`, and for users against a cluster `sync`, `status`, `suspend`,
//! `resume`, `check`, plus `completion` (see docs/cli.md).
//! Exit codes: 0 success, 1 the work failed, 2 a usage error (from clap).

#![deny(
    clippy::string_slice,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic
)]

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};
use color_eyre::eyre::{self, WrapErr};
use rancheros_operator::commands::cluster::CliError;
use rancheros_operator::commands::{self, display, operator, probe, validate};
use rancheros_operator::duration;

#[derive(Parser)]
#[command(
    name = "rancheros-operator",
    version,
    about = "Keeps ManagedOSVersions in step with ManagedOSVersionChannels"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Reconcile ManagedOSVersionChannels into ManagedOSVersions.
    Operator(Box<operator::OperatorArgs>),
    /// Print a channel data file, then stay up until SIGTERM/SIGINT (runs in syncer pods).
    ///
    /// Internal: the operator runs it in the pods it creates; hidden from --help.
    #[command(hide = true)]
    Display {
        /// The file the runner container wrote.
        #[arg(long, env = "FILE")]
        file: PathBuf,
    },
    /// Check channel data files (or `-` for stdin) with the operator's rules.
    ///
    /// Reports every problem with file, line, column and JSON path. Exit code 0 when all
    /// inputs are valid, 1 when any is invalid or unreadable, 2 on a usage error.
    Validate {
        /// Files to check; `-` reads standard input.
        #[arg(value_name = "FILE|-", required_unless_present = "images")]
        files: Vec<PathBuf>,
        /// A channel image or artifact to check (repo:tag or repo@sha256:...; repeatable),
        /// read as the operator reads an oci channel. Credentials: $REGISTRY_AUTH_FILE,
        /// the Podman or Docker login file.
        #[arg(long = "image", value_name = "REF")]
        images: Vec<String>,
        /// The file read from --image (default /channel.json).
        #[arg(long, requires = "images")]
        path: Option<String>,
        /// The platform picked from an image index (default linux/<this machine's arch>).
        #[arg(long, requires = "images")]
        platform: Option<String>,
        /// Reach the --image registry over plain HTTP.
        #[arg(long, requires = "images")]
        insecure: bool,
        /// A PEM file the --image registry's certificate chains to.
        #[arg(long, requires = "images")]
        ca_file: Option<PathBuf>,
        /// A cosign public key (cosign.pub): the --image digest must carry a cosign
        /// signature by it, as an oci channel with spec.verify requires.
        #[arg(long, value_name = "FILE", requires = "images")]
        key: Option<PathBuf>,
        /// A channel policy (a `spec.versions` object, or a channel manifest; YAML or JSON):
        /// also report what it would publish of each valid input and what it holds back.
        #[arg(long, value_name = "FILE")]
        policy: Option<PathBuf>,
        /// `text` for people (like a compiler's diagnostics), `json` or `yaml` for tools (see
        /// docs/validate.md); also spelled `-o`/`--output`.
        #[arg(
            short = 'o',
            long,
            visible_alias = "output",
            value_enum,
            default_value = "text"
        )]
        format: rancheros_operator::commands::output::Format,
    },
    /// Ask the operator for a sync of a channel now; with --wait, wait for its outcome.
    ///
    /// Exit code 0 when the sync succeeded (or, without --wait, was requested), 1 when it
    /// failed or its outcome did not come within --timeout, 2 on a usage error.
    Sync(commands::sync::SyncArgs),
    /// Show channels as a table: ready, reason, versions, revision, last and next sync.
    ///
    /// With --watch, print again whenever a channel changes (until interrupted).
    Status(commands::status::StatusArgs),
    /// GET an HTTP URL until it answers 2xx (the chart's `helm test` pod; the image has no curl).
    #[command(hide = true)]
    Probe {
        url: String,
        /// How long to keep asking.
        #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = duration::parse)]
        timeout: std::time::Duration,
    },
    /// Pause a channel (spec.suspend: true): no syncs, versions left as they are.
    Suspend(commands::suspend::SuspendArgs),
    /// Resume a suspended channel (spec.suspend: false).
    Resume(commands::suspend::SuspendArgs),
    /// Print a version's changelog, as its oci channel's image shipped it
    /// (`/changelog/<version>.updates.log`). Exit 1 when it has none.
    Changelog(commands::changelog::ChangelogArgs),
    /// Check a cluster before an install or upgrade: the CRDs match this binary, the
    /// operator's RBAC is in place, a leader holds the Lease.
    ///
    /// One line per check; exit code 0 when all pass, 1 when any fails.
    Check(commands::check::CheckArgs),
    /// Copy a channel and every image it lists into a registry or an OCI layout directory
    /// (for an air-gapped site), then publish the channel rewritten to them.
    ///
    /// Exit code 0 when done (or, with --check, complete), 1 on a failure (one line each;
    /// the channel is then not published), 2 on a usage error or, with --check, drift.
    Mirror(rancheros_operator::commands::mirror::MirrorArgs),
    /// Print a shell completion script (bash, zsh or fish) to stdout.
    ///
    /// bash: `source <(rancheros-operator completion bash)`; zsh: write it as `_rancheros-operator`
    /// in a directory of $fpath; fish: write it to ~/.config/fish/completions/rancheros-operator.fish.
    Completion {
        #[arg(value_enum)]
        shell: Shell,
    },
}

/// The shells `completion` writes for.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum Shell {
    Bash,
    Zsh,
    Fish,
}

fn main() -> ExitCode {
    one_malloc_arena();
    // User errors are one line and never need a backtrace: capturing one (RUST_BACKTRACE
    // set) would resolve symbols at every error, seconds in a debug build. Panics (bugs)
    // still get color-eyre's report with their backtrace.
    if std::env::var_os("RUST_LIB_BACKTRACE").is_none() {
        // SAFETY: first thing in main, before any thread exists.
        unsafe { std::env::set_var("RUST_LIB_BACKTRACE", "0") };
    }
    let _ = color_eyre::install();
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            // One line: the error and its causes, each cause once.
            let mut line = String::new();
            for cause in e.chain().map(ToString::to_string) {
                if !line.contains(&cause) {
                    if !line.is_empty() {
                        line.push_str(": ");
                    }
                    line.push_str(&cause);
                }
            }
            eprintln!("error: {line}");
            ExitCode::from(1)
        }
    }
}

fn runtime() -> eyre::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .wrap_err("cannot start the async runtime")
}

fn run(cli: Cli) -> eyre::Result<ExitCode> {
    match cli.command {
        Command::Operator(args) => {
            if let Err(problem) = args.check() {
                clap::Error::raw(
                    clap::error::ErrorKind::ValueValidation,
                    format!("{problem}\n"),
                )
                .exit();
            }
            operator::init_logging(args.log_format);
            let rt = runtime()?;
            let result = rt.block_on(operator::run(*args));
            // Exit at once: nothing left running (a stray request, a blocking DNS lookup)
            // may delay a replica that just stepped down.
            rt.shutdown_timeout(std::time::Duration::from_millis(200));
            result?;
        }
        Command::Display { file } => {
            let rt = current_thread()?;
            rt.block_on(display::run(&file))?;
        }
        Command::Validate {
            files,
            format,
            images,
            path,
            platform,
            insecure,
            ca_file,
            key,
            policy,
        } => {
            let policy = match policy.as_deref().map(validate::policy::load).transpose() {
                Ok(p) => p,
                Err(why) => {
                    eprintln!("error: {why}");
                    return Ok(ExitCode::from(1));
                }
            };
            if files.iter().filter(|f| f.as_os_str() == "-").count() > 1 {
                clap::Error::raw(
                    clap::error::ErrorKind::ArgumentConflict,
                    "`-` (standard input) can be given only once\n",
                )
                .exit();
            }
            let mut out = std::io::BufWriter::new(std::io::stdout().lock());
            let options = validate::image::ImageOptions {
                path,
                platform,
                insecure,
                ca_file,
                key_file: key,
                timeout: std::time::Duration::from_secs(60),
                max_output_bytes: 16 << 20,
                max_layer_bytes: 512 << 20,
            };
            let pulled = if images.is_empty() {
                Vec::new()
            } else {
                let rt = runtime()?;
                rt.block_on(async {
                    let mut reports = Vec::new();
                    for image in &images {
                        reports.push(validate::image::check(image, &options).await);
                    }
                    reports
                })
            };
            let valid = validate::run(
                pulled,
                &files,
                policy.as_ref(),
                format,
                &mut out,
                &mut std::io::stderr(),
            )
            .wrap_err("cannot write the report")?;
            if !valid {
                return Ok(ExitCode::from(1));
            }
        }
        Command::Sync(args) => {
            let rt = current_thread()?;
            if !cli_result("sync", rt.block_on(commands::sync::run(args)))? {
                return Ok(ExitCode::from(1));
            }
        }
        Command::Status(args) => {
            let rt = current_thread()?;
            let mut out = std::io::stdout().lock();
            cli_result(
                "status",
                rt.block_on(commands::status::run(
                    args,
                    &mut out,
                    &mut std::io::stderr(),
                )),
            )?;
        }
        Command::Probe { url, timeout } => {
            let rt = current_thread()?;
            let code = rt.block_on(probe::run(&url, timeout))?;
            println!("GET {url}: HTTP {code}");
        }
        Command::Suspend(args) => set_suspend("suspend", args, true)?,
        Command::Changelog(args) => {
            let rt = current_thread()?;
            let mut out = std::io::stdout().lock();
            let found = rt.block_on(commands::changelog::run(
                args,
                &mut out,
                &mut std::io::stderr(),
            ));
            if !cli_result("changelog", found)? {
                return Ok(ExitCode::from(1));
            }
        }
        Command::Resume(args) => set_suspend("resume", args, false)?,
        Command::Check(args) => {
            let rt = current_thread()?;
            let mut out = std::io::stdout().lock();
            let failed = cli_result("check", rt.block_on(commands::check::run(args, &mut out)))?;
            if !failed.is_empty() {
                eprintln!(
                    "error: the cluster is not ready for this operator: {} failed",
                    failed.join(", ")
                );
                return Ok(ExitCode::from(1));
            }
        }
        Command::Mirror(args) => {
            let rt = runtime()?;
            match rt.block_on(rancheros_operator::commands::mirror::run(args)) {
                Ok(0) => {}
                Ok(code) => return Ok(ExitCode::from(code)),
                Err(e) => {
                    eprintln!("error: {e}");
                    return Ok(ExitCode::from(1));
                }
            }
        }
        Command::Completion { shell } => {
            let shell = match shell {
                Shell::Bash => clap_complete::Shell::Bash,
                Shell::Zsh => clap_complete::Shell::Zsh,
                Shell::Fish => clap_complete::Shell::Fish,
            };
            let mut out = std::io::stdout().lock();
            clap_complete::generate(shell, &mut public_command(), "rancheros-operator", &mut out);
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `suspend` and `resume`.
fn set_suspend(
    name: &str,
    args: commands::suspend::SuspendArgs,
    suspend: bool,
) -> eyre::Result<()> {
    let rt = current_thread()?;
    let mut out = std::io::stdout().lock();
    cli_result(
        name,
        rt.block_on(commands::suspend::run(args, suspend, &mut out)),
    )
}

/// The command tree without its hidden subcommands (`display`): clap_complete offers hidden
/// subcommands too, and clap cannot remove one, so the visible ones are copied over.
fn public_command() -> clap::Command {
    let root = Cli::command();
    let mut public = clap::Command::new("rancheros-operator")
        .version(env!("CARGO_PKG_VERSION"))
        .about(root.get_about().cloned().unwrap_or_default())
        .subcommand_required(true);
    for arg in root.get_arguments() {
        public = public.arg(arg.clone());
    }
    for sub in root.get_subcommands().filter(|s| !s.is_hide_set()) {
        public = public.subcommand(sub.clone());
    }
    public
}

fn current_thread() -> eyre::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .wrap_err("cannot start the async runtime")
}

/// A usage error clap could not see exits 2 as clap's own do; the rest are errors (1).
fn cli_result<T>(subcommand: &str, result: Result<T, CliError>) -> eyre::Result<T> {
    match result {
        Err(CliError::Usage(message)) => {
            let mut root = Cli::command();
            let mut command = match root.find_subcommand_mut(subcommand) {
                Some(c) => c
                    .clone()
                    .bin_name(format!("rancheros-operator {subcommand}")),
                None => Cli::command(),
            };
            command
                .error(clap::error::ErrorKind::ArgumentConflict, message)
                .exit()
        }
        other => Ok(other?),
    }
}

/// One glibc malloc arena instead of one per thread that ever contended for it (up to 8 per
/// core): the operator's allocations are small and short-lived, and separate arenas keep
/// each thread's freed memory apart, which showed as peak RSS (`scripts/bench-operator`).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn one_malloc_arena() {
    // SAFETY: mallopt only sets a tunable; called first in main, before any other thread.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn one_malloc_arena() {}
