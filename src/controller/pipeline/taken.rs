//! A sync's second look at the versions its listing would create (the cache gives each
//! sync only its own channel's).

use super::{Attempt, ChannelIo, Decision, Effect, Error, kube_err};

impl<I: ChannelIo> Attempt<'_, I> {
    /// The cache gave this sync its channel's versions only: should the decision create a
    /// version whose name exists (another channel's, or one nobody controls), it decides
    /// again knowing it (a conflict, or an adoption), as it would have with every version;
    /// whether it found one.
    pub(super) async fn taken_names(&mut self, decision: &Decision) -> Result<bool, Error> {
        let mut creates: Vec<String> = decision
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
            return Ok(false);
        };
        // Names already seen were decided on: asking again could only loop.
        let known: std::collections::HashSet<&str> = seen
            .iter()
            .filter_map(|v| v.metadata.name.as_deref())
            .collect();
        creates.retain(|name| !known.contains(name.as_str()));
        if creates.is_empty() {
            return Ok(false);
        }
        let ns = &self.namespace;
        let taken = self
            .ctx
            .io
            .versions_named(ns, &creates)
            .await
            .map_err(kube_err(format!("listing ManagedOSVersions in {ns}")))?;
        if taken.is_empty() {
            return Ok(false);
        }
        seen.extend(taken);
        self.counts.observed();
        Ok(true)
    }
}
