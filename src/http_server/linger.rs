//! The lingering close after an answer sent before its request was read whole.

use std::time::Duration;

use tokio::net::TcpStream;

/// How long, and how many bytes, a closed connection is still read from: see [`linger_close`].
const LINGER: Duration = Duration::from_secs(2);
const LINGER_BYTES: usize = 4 << 20;
// A second: a peer descheduled for a moment on a loaded node must not lose its answer.
const LINGER_QUIET: Duration = Duration::from_secs(1);

/// Closes as web servers do after an answer sent before its request was read whole (a 413):
/// the write side is shut (the peer sees the answer end), and what the peer still sends is
/// read and dropped for a moment. Closing a socket with unread bytes sends a reset, and a
/// reset can discard the answer before the peer reads it. A peer that has closed, or is
/// quiet for 250 ms, is not waited for.
pub(super) async fn linger_close(mut socket: TcpStream) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let _ = socket.shutdown().await;
    let mut buf = vec![0u8; 16 << 10];
    let mut read = 0usize;
    let _ = tokio::time::timeout(LINGER, async {
        while read < LINGER_BYTES {
            // A peer that closes, or sends nothing for a moment, is done.
            match tokio::time::timeout(LINGER_QUIET, socket.read(&mut buf)).await {
                Ok(Ok(0) | Err(_)) | Err(_) => break,
                Ok(Ok(n)) => read = read.saturating_add(n),
            }
        }
    })
    .await;
}
