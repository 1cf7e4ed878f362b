//! The one HTTP server behind both of the operator's ports (`/metrics` with the probes, and
//! the registry webhook), bounded against any peer: every pod of the cluster can connect to
//! them, so no peer may hold memory, a connection or a task for longer than the bounds
//! below. HTTP/1 only (axum is built without HTTP/2).
//!
//! | bound | default | what it stops |
//! |---|---|---|
//! | [`HEADER_READ_TIMEOUT`] | 10 s | a request head sent slowly (slowloris), and a kept-alive connection left idle: hyper runs one timer from the moment a connection waits for a request, first or next |
//! | [`MAX_HEAD_BYTES`] | 32 KiB | a request head too big to be one (answered 431 and closed, never buffered further) |
//! | [`MAX_CONNECTIONS`] | 256 | more connections than that: accepted and closed at once, never queued |
//! | [`MAX_CONNECTIONS_PER_PEER`] | 32 | one peer address holding the whole cap (a pod with 300 idle connections shutting out every scrape or push) |
//! | [`REQUEST_TIMEOUT`] | 30 s | a handler or a request body that stalls (answered 503 and closed) |
//! | [`WRITE_STALL_TIMEOUT`] | 30 s | a peer that stops reading its answer (the connection is closed) |
//! | [`RESERVED_CONNECTIONS`] | 16, 2 per peer address | the probes (or the webhook's pushes) starved by the cap (below) |
//! | `linger::LINGER` | 2 s, 4 MiB, 1 s quiet | after a 413, the peer's unsent body: read and dropped, so that the close is not a reset that loses the answer; the slot is held meanwhile |
//!
//! **The reserve under the cap.** A kubelet restarts the operator when `/healthz` fails
//! `failureThreshold` times in a row, so a peer that fills the connection cap must not also
//! fail the probes; nor should it shut out a registry's pushes. When the cap (or the
//! peer's share of it) is full, a connection may still take one of a few reserved slots, at
//! most [`RESERVED_PER_PEER`] per peer address (one pod filling the reserve leaves the
//! kubelet, which probes from its node's address, or the registry, their own). A reserved
//! slot serves one request, only a reserved path (the probes; the webhook's path; anything
//! else is 503), and waits [`RESERVED_HEADER_READ_TIMEOUT`] for its head: a kubelet or a
//! registry sends its request at once. Peers that fill the cap and the reserve from 16 or
//! more addresses can still make a probe race for a slot; a NetworkPolicy that admits only
//! the scraper, the registry and the node to the ports is the bound for that.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderValue, Request, Response, StatusCode, header};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio::time::Sleep;
use tower::ServiceExt;
use tracing::{debug, warn};

/// The longest a connection waits for a complete request head, first or next (so also the
/// keep-alive idle timeout). A real client sends its head in one packet; a scraper that
/// reconnects every scrape costs one handshake.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest request head read (hyper's read buffer). Real requests are under 8 KiB (a
/// service account token is about 1 KiB); `/metrics` refuses a token over 8 KiB anyway.
const MAX_HEAD_BYTES: usize = 32 * 1024;
/// Connections open at once, the reserve apart. Prometheus holds one or two; the
/// rest is headroom for retries and several scrapers.
const MAX_CONNECTIONS: usize = 256;
/// Of [`MAX_CONNECTIONS`], the most one peer address holds: a scraper holds one or two, a
/// registry sends a few notifications at once (the webhook handles one at a time anyway).
const MAX_CONNECTIONS_PER_PEER: usize = 32;
/// The longest a request takes from its head to its answer, body included: the webhook's
/// LIST and patches take seconds; more is a stall (the answer is 503, which a registry
/// retries).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// The longest a write of an answer may wait for the peer to read.
const WRITE_STALL_TIMEOUT: Duration = Duration::from_secs(30);
/// Slots kept for the reserved paths (the probes, the webhook's pushes) once
/// [`MAX_CONNECTIONS`] are open, or the peer's share of them.
const RESERVED_CONNECTIONS: usize = 16;
/// Reserved slots one peer address may hold at once (a kubelet's liveness and readiness
/// probes may overlap).
const RESERVED_PER_PEER: usize = 2;
/// How long a reserved slot waits for its request head.
const RESERVED_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(2);

/// hyper refuses a smaller read buffer (it panics): the floor of [`Limits::max_head`].
const MIN_HEAD_BYTES: usize = 8 * 1024;
/// The most permits a semaphore is given here (tokio's own bound is far above).
const MAX_PERMITS: usize = 1 << 20;

/// The bounds of a server; [`Limits::default`] is the constants above, tests shrink them.
#[derive(Clone, Debug)]
pub struct Limits {
    pub header_read: Duration,
    pub max_head: usize,
    pub max_connections: usize,
    pub max_connections_per_peer: usize,
    pub request: Duration,
    pub write_stall: Duration,
    pub reserved_connections: usize,
    pub reserved_per_peer: usize,
    pub reserved_header_read: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            header_read: HEADER_READ_TIMEOUT,
            max_head: MAX_HEAD_BYTES,
            max_connections: MAX_CONNECTIONS,
            max_connections_per_peer: MAX_CONNECTIONS_PER_PEER,
            request: REQUEST_TIMEOUT,
            write_stall: WRITE_STALL_TIMEOUT,
            reserved_connections: RESERVED_CONNECTIONS,
            reserved_per_peer: RESERVED_PER_PEER,
            reserved_header_read: RESERVED_HEADER_READ_TIMEOUT,
        }
    }
}

/// Serves `app` on `listener` within `limits` until `shutdown` resolves, then lets the
/// open connections finish their requests (each within the limits) and returns.
/// `reserved_paths` are the paths the reserved slots serve; none: no reserve.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    reserved_paths: &'static [&'static str],
    limits: Limits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let reserved_slots = if reserved_paths.is_empty() {
        0
    } else {
        limits.reserved_connections
    };
    let general = Share::new(limits.max_connections, limits.max_connections_per_peer);
    let reserve = Share::new(reserved_slots, limits.reserved_per_peer);
    let limits = Arc::new(limits);
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors and the like: pause rather than spin.
                    warn!("cannot accept a connection: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let slot = match general.take(peer.ip()) {
            Some(held) => Slot {
                _held: held,
                reserved: false,
            },
            None => match reserve.take(peer.ip()) {
                Some(held) => Slot {
                    _held: held,
                    reserved: true,
                },
                None => {
                    // Refused, not queued: dropping the stream closes it at once.
                    debug!(%peer, "connection refused: the connection cap or the peer's share of it is reached");
                    continue;
                }
            },
        };
        let connection = Connection {
            app: app.clone(),
            limits: limits.clone(),
            reserved_paths,
            stop: stop_rx.clone(),
        };
        tokio::spawn(connection.run(stream, peer, slot));
    }
    // No new connection from here on; the open ones finish their request and close.
    drop(listener);
    let _ = stop_tx.send(true);
    general.pool.drained().await;
    reserve.pool.drained().await;
    Ok(())
}

/// A count of open connections: a slot is a permit, and shutdown takes them all back.
struct Pool {
    permits: Arc<Semaphore>,
    size: u32,
}

impl Pool {
    fn new(size: usize) -> Self {
        let size = u32::try_from(size.min(MAX_PERMITS)).unwrap_or(0);
        Pool {
            permits: Arc::new(Semaphore::new(usize::try_from(size).unwrap_or(0))),
            size,
        }
    }

    fn take(&self) -> Option<OwnedSemaphorePermit> {
        self.permits.clone().try_acquire_owned().ok()
    }

    /// Once every connection has given its slot back.
    async fn drained(&self) {
        let _ = self.permits.acquire_many(self.size).await;
    }
}

/// Slots of one kind (general or reserved): a pool, of which one peer address holds at
/// most `per_peer`. The map holds the addresses with a slot open, no more.
struct Share {
    pool: Pool,
    per_peer: usize,
    held: Mutex<HashMap<IpAddr, usize>>,
}

impl Share {
    fn new(size: usize, per_peer: usize) -> Arc<Self> {
        Arc::new(Share {
            pool: Pool::new(size),
            per_peer,
            held: Mutex::new(HashMap::new()),
        })
    }

    fn take(self: &Arc<Self>, peer: IpAddr) -> Option<Held> {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        let count = held.get(&peer).copied().unwrap_or(0);
        if count >= self.per_peer {
            return None;
        }
        let permit = self.pool.take()?;
        held.insert(peer, count.saturating_add(1));
        Some(Held {
            share: self.clone(),
            peer,
            _permit: permit,
        })
    }
}

/// A slot of a [`Share`], given back (and counted off its peer) when dropped.
struct Held {
    share: Arc<Share>,
    peer: IpAddr,
    _permit: OwnedSemaphorePermit,
}

impl Drop for Held {
    fn drop(&mut self) {
        let mut held = self
            .share
            .held
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = held.get_mut(&self.peer) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                held.remove(&self.peer);
            }
        }
    }
}

/// What a connection holds while it is open: a general slot or a reserved one.
struct Slot {
    _held: Held,
    reserved: bool,
}

struct Connection {
    app: Router,
    limits: Arc<Limits>,
    reserved_paths: &'static [&'static str],
    stop: watch::Receiver<bool>,
}

impl Connection {
    async fn run(mut self, stream: TcpStream, peer: SocketAddr, slot: Slot) {
        let reserved = slot.reserved;
        let mut http = http1::Builder::new();
        http.timer(TokioTimer::new())
            .header_read_timeout(if reserved {
                self.limits.reserved_header_read
            } else {
                self.limits.header_read
            })
            .max_buf_size(self.limits.max_head.max(MIN_HEAD_BYTES))
            // A reserved slot serves one request and is free again.
            .keep_alive(!reserved);
        let app = self.app.clone();
        let request_timeout = self.limits.request;
        let only = reserved.then_some(self.reserved_paths);
        // Set when an answer went out before its request body was read whole (a 413).
        let unread = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = Arc::clone(&unread);
        let service = hyper::service::service_fn(move |request: Request<Incoming>| {
            let flag = Arc::clone(&flag);
            let answered = answer(app.clone(), request, request_timeout, only);
            async move {
                let response = answered.await?;
                if response.status() == StatusCode::PAYLOAD_TOO_LARGE {
                    flag.store(true, std::sync::atomic::Ordering::Relaxed);
                }
                Ok::<_, Infallible>(response)
            }
        });
        // A second handle on the socket, for the lingering close below.
        let linger = stream
            .into_std()
            .and_then(|s| Ok((s.try_clone()?, s)))
            .and_then(|(copy, s)| Ok((TcpStream::from_std(copy)?, TcpStream::from_std(s)?)));
        let (linger, stream) = match linger {
            Ok((copy, stream)) => (Some(copy), stream),
            Err(e) => {
                debug!(%peer, "connection dropped: {e}");
                return;
            }
        };
        let io = TokioIo::new(WriteStall::new(stream, self.limits.write_stall));
        let connection = http.serve_connection(io, service);
        let mut connection = std::pin::pin!(connection);
        let result = tokio::select! {
            result = connection.as_mut() => result,
            () = async { let _ = self.stop.wait_for(|stop| *stop).await; } => {
                // Shutting down: the request under way is answered, no next one is read.
                connection.as_mut().graceful_shutdown();
                connection.await
            }
        };
        if let Err(e) = result {
            // A peer's timeouts, oversized heads and hang-ups: its business, not an error.
            debug!(%peer, "connection ended: {e}");
        }
        if let Some(socket) = linger
            && unread.load(std::sync::atomic::Ordering::Relaxed)
        {
            linger_close(socket).await;
        }
        drop(slot);
    }
}

/// One request: the app's answer within `timeout`; on a reserved slot, only `only`'s paths.
async fn answer(
    app: Router,
    request: Request<Incoming>,
    timeout: Duration,
    only: Option<&'static [&'static str]>,
) -> Result<Response<Body>, Infallible> {
    if only.is_some_and(|paths| !paths.contains(&request.uri().path())) {
        return Ok(closing(
            StatusCode::SERVICE_UNAVAILABLE,
            "too many connections; retry later\n",
        ));
    }
    // Dropping the app's future on timeout also ends any body read it was doing.
    match tokio::time::timeout(timeout, app.oneshot(request.map(Body::new))).await {
        Ok(Ok(response)) => Ok(response),
        Ok(Err(never)) => match never {},
        Err(_) => Ok(closing(
            StatusCode::SERVICE_UNAVAILABLE,
            "the request took too long; retry later\n",
        )),
    }
}

/// An answer after which the connection closes (its request may be half read).
fn closing(status: StatusCode, text: &'static str) -> Response<Body> {
    let mut response = Response::new(Body::from(text));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// A stream whose writes fail once one has waited `stall` for the peer to read: a peer that
/// never reads its answer would otherwise hold its connection (and slot) for ever.
struct WriteStall<S> {
    inner: S,
    stall: Duration,
    /// Running while a write waits.
    timer: Option<Pin<Box<Sleep>>>,
}

impl<S> WriteStall<S> {
    fn new(inner: S, stall: Duration) -> Self {
        WriteStall {
            inner,
            stall,
            timer: None,
        }
    }

    /// After a write that returned `poll`: keeps it, or fails it if it waited too long.
    fn watch<T>(&mut self, cx: &mut Context<'_>, poll: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        if poll.is_ready() {
            self.timer = None;
            return poll;
        }
        let stall = self.stall;
        let timer = self
            .timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(stall)));
        if timer.as_mut().poll(cx).is_ready() {
            self.timer = None;
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the peer did not read its answer",
            )));
        }
        Poll::Pending
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for WriteStall<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for WriteStall<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.watch(cx, poll)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let poll = Pin::new(&mut self.inner).poll_flush(cx);
        self.watch(cx, poll)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let poll = Pin::new(&mut self.inner).poll_shutdown(cx);
        self.watch(cx, poll)
    }
}

mod linger;
use linger::linger_close;

#[cfg(test)]
pub(crate) mod tests;
