//! Stop signals, shared by `operator` and `display`.
//!
//! Handlers are installed before any work starts. A signal that arrives before its handler
//! is lost when the process inherited it as ignored (a shell's background job ignores
//! SIGINT) and also as PID 1 of a container, where the kernel drops signals without a
//! handler; the process would then hang until it is killed.

use tokio::signal::unix::{Signal, SignalKind, signal};

/// SIGTERM and SIGINT, caught from the moment this is built.
pub struct StopSignals {
    term: Signal,
    int: Signal,
}

impl StopSignals {
    /// Installs the handlers; call it first, inside the runtime.
    pub fn install() -> std::io::Result<Self> {
        Ok(Self {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
        })
    }

    /// Waits for either signal and names it.
    pub async fn recv(mut self) -> &'static str {
        tokio::select! {
            _ = self.term.recv() => "SIGTERM",
            _ = self.int.recv() => "SIGINT",
        }
    }
}
