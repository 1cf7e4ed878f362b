//! Step 1 of an attempt: the channel as the decision may read it.

use std::sync::Arc;

use super::{ChannelIo, Context, Error, Key, ManagedOSVersionChannel, kube_err};

/// Step 1: the channel as the decision may read it, and whether its pod must be read fresh;
/// `None`: it is gone. The cache shows the operator's own writes (each one waits for it);
/// only after a wait that gave up is the channel read fresh, once.
pub(super) async fn refresh<I: ChannelIo>(
    ctx: &Context<I>,
    key: &Key,
    uid: &str,
    cached: Arc<ManagedOSVersionChannel>,
) -> Result<Option<(Arc<ManagedOSVersionChannel>, bool)>, Error> {
    let stale = ctx
        .with_record(key, uid, |r| std::mem::take(&mut r.stale))
        .unwrap_or(false);
    if !stale {
        return Ok(Some((cached, false)));
    }
    let ns = key.namespace.as_deref().unwrap_or_default();
    match ctx.io.read_channel(key).await {
        Ok(Some(fresh)) => Ok(Some((Arc::new(fresh), true))),
        Ok(None) => Ok(None),
        Err(e) => {
            // Not read: still stale for the next attempt.
            ctx.with_record(key, uid, |r| r.stale = true);
            Err(kube_err(format!("reading channel {ns}/{}", key.name))(e))
        }
    }
}
