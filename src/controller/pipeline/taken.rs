//! A sync's second look at the versions its listing would create (the cache gives each
//! sync only its own channel's).

use super::{Attempt, ChannelIo, Decision, Effect, Error, kube_err};

impl<I: ChannelIo> Attempt<'_, I> {
    /// The cache gave this sync its channel's versions only: should the decision create a
    /// version whose name exists (another channel's, or one nobody controls), it decides
    /// again knowing it (a conflict, or an adoption), as it would have with every version.
    pub(super) async fn taken_names(&mut self, decision: &mut Decision) -> Result<(), Error> {
        let creates: Vec<String> = decision
            .effects
            .iter()
            .filter_map(|e| match e {
                Effect::ApplyVersion {
                    want,
                    replaces: None,
                } => want.metadata.name.clone(),
                _ => None,
            })
            .collect();
        let Some(seen) = self.seen.versions.as_mut() else {
            return Ok(());
        };
        if creates.is_empty() {
            return Ok(());
        }
        let ns = &self.namespace;
        let taken = self
            .ctx
            .io
            .versions_named(ns, &creates)
            .await
            .map_err(kube_err(format!("listing ManagedOSVersions in {ns}")))?;
        if !taken.is_empty() {
            seen.extend(taken);
            self.counts.observed();
            *decision = self.decide();
        }
        Ok(())
    }
}
