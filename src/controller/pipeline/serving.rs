//! The channel server's store kept in step with the channels: a successful sync of a
//! served channel publishes what it wrote; a channel that stops being served, or goes,
//! leaves the store; after a start (when no sync runs for a channel until it is due), a
//! served channel is published once from its versions as the API server has them. A GET
//! of the server reads the store only.

use kube::ResourceExt;
use tracing::warn;

use crate::api::{ManagedOSVersion, ManagedOSVersionChannel};
use crate::channel_server::{ChannelKey, Entry};
use crate::controller::Context;
use crate::controller::Key;
use crate::controller::io::ChannelIo;
use crate::syncer::versions::published_by;

fn id(key: &Key) -> ChannelKey {
    (key.namespace.clone().unwrap_or_default(), key.name.clone())
}

impl<I: ChannelIo> Context<I> {
    /// Serves what a successful sync published.
    pub(in crate::controller) fn serve_published(&self, key: &Key, published: &[ManagedOSVersion]) {
        if let Some(store) = &self.served {
            store.publish(id(key), Entry::render(published));
        }
    }

    /// The channel is not served (any more).
    pub(in crate::controller) fn unserve(&self, key: &Key) {
        if let Some(store) = &self.served {
            store.remove(&id(key));
        }
    }

    /// Before each attempt: a channel without `spec.serve: true` is not served; a disabled
    /// one publishes nothing; a served one that has not been published since the operator
    /// started is published from its versions now (read once, never per request).
    pub(in crate::controller) async fn keep_served(
        &self,
        key: &Key,
        channel: &ManagedOSVersionChannel,
    ) {
        let Some(store) = &self.served else {
            return;
        };
        if channel.spec.serve != Some(true) || channel.metadata.deletion_timestamp.is_some() {
            store.remove(&id(key));
            return;
        }
        if !crate::config::enabled(&channel.spec) {
            store.publish(id(key), Entry::render(&[]));
            return;
        }
        if store.holds(&id(key)) {
            return;
        }
        match self.read_published(key, channel).await {
            Ok(versions) => store.publish(id(key), Entry::render(&versions)),
            // Tried again at the channel's next attempt; its next sync publishes anyway.
            Err(e) => warn!(
                channel = %key,
                "cannot read the published versions for the channel server: {}",
                crate::text::message(&e.to_string())
            ),
        }
    }

    /// The versions the channel publishes now, read in full (the cache holds no spec).
    async fn read_published(
        &self,
        key: &Key,
        channel: &ManagedOSVersionChannel,
    ) -> Result<Vec<ManagedOSVersion>, kube::Error> {
        let ns = key.namespace.as_deref().unwrap_or_default();
        let (cached, _) = self.io.versions(ns, channel).await?;
        let mut out = Vec::new();
        for v in cached.iter().filter(|v| published_by(v, channel)) {
            if let Some(full) = self.io.read_version(ns, &v.name_any()).await?
                && published_by(&full, channel)
            {
                out.push(full);
            }
        }
        Ok(out)
    }
}
