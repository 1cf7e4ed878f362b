//! Peak memory of the operator's code under what a hostile tenant or client sends, as a
//! ratio to the idle process of the same run: oci pulls of hostile layers from a registry
//! on loopback (a 256 MiB tar long name; a zstd frame declaring a 64 MiB window; a zstd
//! layer at the 8 MiB window cap decompressing to 100 MiB), ten pulls at once each, as ten
//! sync slots would; and a slowloris burst (800 connections, each sending 300 KiB of a
//! request head that never ends) on the metrics server, beside the same burst on a bare
//! `axum::serve` (how the servers were before they were bounded).
//!
//!     cargo bench --bench hostile_memory
//!
//! The process runs with one malloc arena, as the operator does (`main.rs`).
//! Peak RSS is the kernel's high-water mark (`VmHWM`), reset before each scenario
//! (`/proc/self/clear_refs`); the growth is the peak minus the RSS just before. A report,
//! not a test: docs/benchmarks.md keeps the figures.

#[path = "../tests/chart_install/hostile_registry.rs"]
mod hostile_registry;

use std::io::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::routing::get;
use rancheros_operator::budget::{Budget, IDLE};
use rancheros_operator::config::{ImageRef, OciOptions};
use rancheros_operator::egress::Policy;
use rancheros_operator::fetch::{Response, Validators};
use rancheros_operator::registry::{self, Access};

const PULLS: usize = 10;
const SLOWLORIS: usize = 800;
const HEAD: usize = 300 << 10;

fn status_kib(field: &str) -> u64 {
    let text = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// Resets the high-water mark to the current RSS; returns that RSS (KiB).
fn reset_peak() -> u64 {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
    status_kib("VmRSS:")
}

struct Row {
    what: &'static str,
    outcome: String,
    growth_kib: u64,
    secs: f64,
}

async fn pulls(registry: &str, name: &str, timeout: Duration) -> (String, Duration) {
    let client = registry::Client::new(Policy::new(Vec::new(), Vec::new()), 512 << 20).unwrap();
    let image = ImageRef::parse(&format!("{registry}/{name}:v1")).unwrap();
    let options = OciOptions {
        insecure: true,
        ..OciOptions::of_image(image, timeout)
    };
    let budget = Budget::new(16 << 20, IDLE);
    let (known, access) = (Validators::default(), Access::default());
    let mut holds: Vec<_> = (0..PULLS).map(|_| budget.hold()).collect();
    let started = Instant::now();
    let all = holds
        .iter_mut()
        .map(|h| registry::pull(&client, &options, &access, &known, 16 << 20, h));
    let answers = futures::future::join_all(all).await;
    let outcome = match answers.first() {
        Some(Response::Failed(why)) => why.rsplit(": ").next().unwrap_or(why).to_string(),
        Some(Response::Body { data, .. }) => format!("read {} bytes", data.len()),
        Some(other) => format!("{other:?}"),
        None => String::new(),
    };
    (outcome, started.elapsed())
}

/// `count` connections to `address`, each sending `HEAD` bytes of a head that never ends,
/// then waiting up to 15 s for the server to close it; how many it closed.
async fn slowloris(address: std::net::SocketAddr) -> usize {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let pad: Arc<Vec<u8>> = Arc::new({
        let mut v = b"GET /metrics HTTP/1.1\r\nHost: x\r\n".to_vec();
        while v.len() < HEAD {
            v.extend_from_slice(
                b"X-Pad: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n",
            );
        }
        v
    });
    // From 32 loopback addresses (all of 127/8 is loopback on Linux): one address holds
    // at most its share of the cap, and the attack wants the whole cap full.
    let tasks = (0..SLOWLORIS).map(|i| {
        let pad = pad.clone();
        tokio::spawn(async move {
            let from = std::net::SocketAddr::from(([127, 0, 0, 2 + (i % 32) as u8], 0));
            let connected = match tokio::net::TcpSocket::new_v4() {
                Ok(socket) => match socket.bind(from) {
                    Ok(()) => socket.connect(address).await,
                    Err(e) => Err(e),
                },
                Err(e) => Err(e),
            };
            let Ok(mut s) = connected else {
                return true;
            };
            if s.write_all(&pad).await.is_err() {
                return true;
            }
            let mut buf = [0u8; 256];
            matches!(
                tokio::time::timeout(Duration::from_secs(15), s.read(&mut buf)).await,
                Ok(Ok(_) | Err(_))
            )
        })
    });
    futures::future::join_all(tasks)
        .await
        .into_iter()
        .filter(|r| matches!(r, Ok(true)))
        .count()
}

fn app() -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/metrics", get(|| async { "" }))
}

fn main() {
    // As the operator's main does: one malloc arena (else each blocking thread's arena keeps
    // what its layer search freed, and the figures measure glibc, not the code).
    // SAFETY: mallopt only sets a tunable; called first, before any other thread.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
    let _ = rustls::crypto::ring::default_provider().install_default();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    eprintln!("building the hostile images (a 256 MiB name is compressed once)...");
    let hostile = hostile_registry::Hostile::serve("127.0.0.1");
    let idle = runtime.block_on(async {
        // The client, the runtime and the images built: what every scenario starts from.
        let _ = pulls(&hostile.address, "none", Duration::from_secs(5)).await;
        status_kib("VmRSS:")
    });
    let mut rows = Vec::new();
    for (what, name) in [
        ("10 pulls: a 256 MiB tar long name (gzip)", "longname"),
        (
            "10 pulls: a zstd frame declaring a 64 MiB window",
            "zstdwindow",
        ),
        (
            "10 pulls: a zstd layer at the 8 MiB window cap, 100 MiB",
            "zstdcap",
        ),
    ] {
        let before = reset_peak();
        let (outcome, took) =
            runtime.block_on(pulls(&hostile.address, name, Duration::from_secs(120)));
        rows.push(Row {
            what,
            outcome,
            growth_kib: status_kib("VmHWM:").saturating_sub(before),
            secs: took.as_secs_f64(),
        });
    }
    for (what, bounded) in [
        ("800 slowloris heads of 300 KiB: bounded server", true),
        (
            "800 slowloris heads of 300 KiB: bare axum::serve (before)",
            false,
        ),
    ] {
        let before = reset_peak();
        let started = Instant::now();
        let closed = runtime.block_on(async {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let address = listener.local_addr().unwrap();
            let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
            let server = tokio::spawn(async move {
                let shutdown = async {
                    let _ = stopped.await;
                };
                if bounded {
                    let _ = rancheros_operator::http_server::serve(
                        listener,
                        app(),
                        &["/healthz"],
                        rancheros_operator::http_server::Limits::default(),
                        shutdown,
                    )
                    .await;
                } else {
                    let _ = axum::serve(listener, app())
                        .with_graceful_shutdown(shutdown)
                        .await;
                }
            });
            let closed = slowloris(address).await;
            let _ = stop.send(());
            // The bare server waits for its connections to end: do not wait for it.
            let _ = tokio::time::timeout(Duration::from_secs(1), server).await;
            closed
        });
        rows.push(Row {
            what,
            outcome: format!("{closed} of {SLOWLORIS} closed by the server within 15 s"),
            growth_kib: status_kib("VmHWM:").saturating_sub(before),
            secs: started.elapsed().as_secs_f64(),
        });
    }
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "idle process: {:.1} MiB RSS (the baseline of the ratios)\n",
        mib(idle)
    );
    let _ = writeln!(
        out,
        "{:<60} {:>11} {:>9} {:>7}  outcome",
        "scenario", "peak +MiB", "x idle", "secs"
    );
    for r in rows {
        let _ = writeln!(
            out,
            "{:<60} {:>11.1} {:>9.2} {:>7.1}  {}",
            r.what,
            mib(r.growth_kib),
            r.growth_kib as f64 / idle.max(1) as f64,
            r.secs,
            r.outcome
        );
    }
}
