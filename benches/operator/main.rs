//! Benchmark of the operator itself on the local cluster; every figure side by side with a
//! baseline measured in the same run, and written to docs/benchmarks.md. Run by
//! `scripts/bench-operator` (`cargo bench --bench operator -- ARGS`); the scenarios and
//! their goals are listed in scenarios.md (also the text under docs/benchmarks.md's tables).
//!
//! `cargo test` runs this target without arguments: it then measures nothing (the cluster
//! benchmark takes minutes); its pure parts are unit-tested by tests/bench_operator.rs.
//!
//! The operator runs as a local process (the image's static release build, or `--binary`)
//! against the cluster, so its RSS and CPU are read from /proc. Brings the cluster up when
//! it is down (and down again after). Exits 1 when a goal is missed.

// `cargo test` builds this target with cfg(test) but no test harness: the modules' unit
// tests are run by tests/bench_operator.rs, and unused here.
#![cfg_attr(test, allow(dead_code, unused_imports))]

mod audit;
mod date;
mod footprint;
mod kit;
mod objects;
mod oci;
mod oci_image;
mod oci_scale;
mod only;
mod parse;
mod push;
mod report;
mod results;
mod scenarios;
mod value;

use std::path::{Path, PathBuf};

use clap::{Parser, ValueEnum};
use color_eyre::eyre::{Result, WrapErr, bail};

use kit::{Kit, log};
use results::{Big, Many, Requests};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Only {
    Big,
    Many,
    Requests,
    Oci,
    Rss,
    Scale,
    OciScale,
}

/// Benchmark of the operator itself on the local cluster.
#[derive(Parser, Debug)]
#[command(name = "bench-operator")]
pub struct Args {
    #[arg(long, default_value_t = 5000)]
    pub versions: usize,
    #[arg(long, default_value_t = 200)]
    pub channels: usize,
    #[arg(long, default_value_t = 50)]
    pub per_channel: usize,
    #[arg(long, default_value_t = 60)]
    pub idle_seconds: u64,
    /// Do not rewrite docs/benchmarks.md.
    #[arg(long)]
    pub no_docs: bool,
    /// Keep the operator logs and inputs in DIR.
    #[arg(long, value_name = "DIR")]
    pub logs: Option<PathBuf>,
    /// An earlier operator build: its requests per channel sync (and RSS, and restart),
    /// measured in the same run.
    #[arg(long, value_name = "PATH")]
    pub baseline_binary: Option<PathBuf>,
    /// Versions of the oci vs custom channel.
    #[arg(long, default_value_t = 50)]
    pub oci_versions: usize,
    /// This operator binary instead of the image's (no image build or import).
    #[arg(long, value_name = "PATH")]
    pub binary: Option<PathBuf>,
    /// Versions in scope for the RSS per version (--only rss).
    #[arg(long, default_value_t = 20000)]
    pub rss_versions: usize,
    /// Also the RSS per channel, with this many suspended channels (--only rss).
    #[arg(long, default_value_t = 0)]
    pub rss_channels: usize,
    /// Json channels of --only scale.
    #[arg(long, default_value_t = 1000)]
    pub scale_channels: usize,
    /// Versions per channel of --only scale.
    #[arg(long, default_value_t = 100)]
    pub scale_per_channel: usize,
    /// Namespaces the --only scale channels spread over.
    #[arg(long, default_value_t = 10)]
    pub scale_namespaces: usize,
    /// Versions of the first sync under an admission policy (part of big; 0: none).
    #[arg(long, default_value_t = 1000)]
    pub admission_versions: usize,
    /// Oci channels of each oci-scale row (the rows: 1 and 10 versions per channel).
    #[arg(long, default_value_t = 1000)]
    pub oci_scale_channels: usize,
    /// Run these parts only, comma-separated (for iterating; implies --no-docs, goals of
    /// the other parts count as met). rss and scale run alone.
    #[arg(long, value_enum, value_delimiter = ',')]
    pub only: Vec<Only>,
    /// Given by `cargo bench` to every benchmark target.
    #[arg(long, hide = true)]
    pub bench: bool,
}

impl Args {
    /// The binaries to compare: this one, and the baseline if given.
    fn binaries(&self, binary: &Path) -> Vec<(String, PathBuf)> {
        let mut out = vec![("now".to_string(), binary.to_path_buf())];
        if let Some(b) = &self.baseline_binary {
            out.push(("baseline".to_string(), b.clone()));
        }
        out
    }

    fn runs(&self, part: Only) -> bool {
        self.only.is_empty() || self.only.contains(&part)
    }
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn cluster(command: &str) -> std::process::Command {
    let mut c = std::process::Command::new(root().join("scripts").join("cluster"));
    c.arg(command);
    c
}

/// `scripts/cluster COMMAND`, its stdout discarded; an error if it fails.
fn cluster_ok(command: &str) -> Result<()> {
    if !cluster(command)
        .stdout(std::process::Stdio::null())
        .status()?
        .success()
    {
        bail!("scripts/cluster {command} failed");
    }
    Ok(())
}

fn main() -> Result<()> {
    let raw: Vec<String> = std::env::args().collect();
    if raw.len() == 1 {
        // A test run (`cargo test --all-targets` runs benchmark targets without arguments).
        println!(
            "bench-operator: measures nothing without arguments (scripts/bench-operator, or \
             cargo bench --bench operator -- ARGS)"
        );
        return Ok(());
    }
    let args = Args::parse_from(raw);

    let started_cluster = !cluster("status")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()?
        .success();
    if started_cluster {
        log("bringing the cluster up");
        cluster_ok("up")?;
    }
    let result = with_cluster(&args);
    if started_cluster {
        let _ = cluster("down").stdout(std::process::Stdio::null()).status();
    }
    let missed = result?;
    if !missed.is_empty() {
        eprintln!("{missed}");
        std::process::exit(1);
    }
    Ok(())
}

/// Everything between bringing the cluster up and down; the goals missed, as a message.
fn with_cluster(args: &Args) -> Result<String> {
    let env = kit::run(
        &root().join("scripts/cluster").to_string_lossy(),
        &["env"],
        None,
    )?;
    for (name, value) in parse::cluster_env(&env, |n| std::env::var(n).ok()) {
        // SAFETY: no other thread yet (the runtime starts below).
        unsafe { std::env::set_var(name, value) };
    }
    let binary = match &args.binary {
        Some(b) => std::path::absolute(b)?,
        None => image_binary()?,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(async_main(args, &binary))
}

/// Builds and imports the operator image; its own binary (the benchmark measures what
/// ships).
fn image_binary() -> Result<PathBuf> {
    log("building the operator image (static release build) and importing it");
    cluster_ok("image")?;
    let var = |n: &str| std::env::var(n).ok().filter(|v| !v.is_empty());
    let cache = var("RANCHEROS_CACHE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let base = var("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from(var("HOME").unwrap_or_default()).join(".cache"));
            base.join("rancheros-operator")
        });
    let target = var("OPERATOR_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| cache.join("cargo-target-image"));
    Ok(target.join("x86_64-unknown-linux-gnu/release/rancheros-operator"))
}

async fn async_main(args: &Args, binary: &Path) -> Result<String> {
    let client = rancheros_operator::client::client(Default::default()).await?;
    let temp;
    let workdir = match &args.logs {
        Some(dir) => {
            std::fs::create_dir_all(dir)?;
            dir.clone()
        }
        None => {
            temp = TempDir::new()?;
            temp.0.clone()
        }
    };
    let env = |n: &str| std::env::var(n).wrap_err_with(|| format!("{n} is not set"));
    let kit = Kit {
        client,
        root: root(),
        workdir,
        runner_image: env("RANCHEROS_RUNNER_IMAGE")?,
        operator_image: env("OPERATOR_IMAGE")?,
    };
    kit.crds().await?;

    if args.only.contains(&Only::Scale) {
        let r = footprint::scale_out(&kit, binary, args).await?;
        print!("{}", only::scale_lines(&r));
        return Ok(if only::scale_met(&r) {
            String::new()
        } else {
            "bench-operator: scale goal missed".into()
        });
    }
    if args.only.contains(&Only::Rss) {
        if args.rss_channels > 0 {
            let (n, none, some) = footprint::rss_per_channel(&kit, binary, args).await?;
            print!("{}", only::rss_channel_lines(n, none, some));
        }
        if args.rss_versions > 0 {
            let r = footprint::rss_per_version(&kit, &args.binaries(binary), args).await?;
            print!("{}", only::rss_version_lines(&r));
        }
        return Ok(String::new());
    }

    let big = match args.runs(Only::Big) {
        true => scenarios::big_channel(&kit, binary, args).await?,
        false => Big::skipped(),
    };
    let many = match args.runs(Only::Many) {
        true => scenarios::many_channels(&kit, binary, args).await?,
        false => Many::default(),
    };
    let requests = match args.runs(Only::Requests) {
        true => scenarios::requests_per_sync(&kit, binary, "now").await?,
        false => Requests::default(),
    };
    let baseline = match (&args.baseline_binary, args.runs(Only::Requests)) {
        (Some(b), true) => Some(scenarios::requests_per_sync(&kit, b, "baseline").await?),
        _ => None,
    };
    let oci = match args.runs(Only::Oci) {
        true => Some(oci::oci_vs_custom(&kit, binary, args).await?),
        false => None,
    };

    let mut oci_scale = Vec::new();
    if args.runs(Only::OciScale) {
        for per_channel in [1, 10] {
            let c = args.oci_scale_channels;
            oci_scale.push(oci_scale::oci_scale(&kit, binary, c, per_channel).await?);
        }
    }

    let mut goals = report::goals(&big, &many, &requests, oci.as_ref());
    goals.extend(report::oci_scale_goals(&oci_scale));
    let mut rows = report::rows(&big, &many, &requests, baseline.as_ref(), oci.as_ref());
    rows.extend(report::oci_scale_rows(&oci_scale));
    let table = report::table(&goals, &rows);
    println!("{table}");

    if !args.no_docs && args.only.is_empty() {
        write_docs(&kit, args, &table).await?;
    }
    let missed: Vec<&str> = goals.iter().filter(|g| !g.met).map(|g| g.name).collect();
    Ok(match missed.is_empty() {
        true => String::new(),
        false => format!("goals missed: {}", missed.join("; ")),
    })
}

/// The head of docs/benchmarks.md: this run's figures (the sections below, written by hand,
/// stay).
async fn write_docs(kit: &Kit, args: &Args, table: &str) -> Result<()> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    // SAFETY: sysconf only reads configuration values.
    let bytes = unsafe { libc::sysconf(libc::_SC_PAGESIZE) * libc::sysconf(libc::_SC_PHYS_PAGES) };
    let machine = format!("{cores} cores, {} GiB", bytes as f64 as u64 / (1 << 30));
    let k8s = kit.client.apiserver_version().await?.git_version;
    let (y, mo, d, h, mi, _) = date::civil(kit::now_secs());
    let date = format!("{y}-{mo:02}-{d:02} {h:02}:{mi:02} UTC");
    let command = format!(
        "scripts/bench-operator --versions {} --channels {} --per-channel {} --idle-seconds {}",
        args.versions, args.channels, args.per_channel, args.idle_seconds
    );
    let head = report::docs_head(&machine, &k8s, &date, &command, table);
    let path = kit.root.join("docs/benchmarks.md");
    let page = std::fs::read_to_string(&path).unwrap_or_default();
    std::fs::write(&path, report::replace_docs_head(&page, &head))?;
    Ok(())
}

/// A temporary directory, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> Result<Self> {
        let dir = std::env::temp_dir().join(format!(
            "bench-operator-{}-{}",
            std::process::id(),
            kit::now_secs()
        ));
        std::fs::create_dir_all(&dir)?;
        Ok(Self(dir))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
