//! Leader election on a `coordination.k8s.io` Lease, so that several replicas can run and
//! only one acts.
//!
//! Safety rule: the leader acts only while its last successful renewal is younger than the
//! lease duration less a margin, timed on its own monotonic clock from the moment the
//! renewal was *sent*. Another replica may take the Lease only after it has seen the same
//! renew time unchanged for a whole lease duration, so the two never act at once, whatever
//! the API server or the network does meanwhile.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::{info, warn};

use crate::api::FIELD_MANAGER;

#[derive(Clone, Debug)]
pub struct LeaseConfig {
    pub name: String,
    pub identity: String,
    /// How long a Lease holds without renewal.
    pub duration: Duration,
    /// How often the leader renews (and a follower tries).
    pub renew_every: Duration,
    /// The leader stops acting this long before its Lease could expire.
    pub margin: Duration,
}

impl LeaseConfig {
    pub fn new(name: String, identity: String) -> Self {
        Self {
            name,
            identity,
            duration: Duration::from_secs(15),
            renew_every: Duration::from_secs(3),
            margin: Duration::from_secs(3),
        }
    }
}

/// What a follower saw of someone else's Lease, and when (on its own clock).
struct Observed {
    holder: Option<String>,
    renew_time: Option<Timestamp>,
    duration: Duration,
    seen_at: Instant,
}

pub struct Elector {
    api: Api<Lease>,
    config: LeaseConfig,
    standing: Standing,
}

/// Where this replica stands, on its own monotonic clock: the state the election changes.
/// Pure: every change takes the time it happens at (the loop passes `Instant::now()`).
#[derive(Default)]
struct Standing {
    /// While leading: the instant it must stop acting unless renewed before.
    held_until: Option<Instant>,
    /// A follower's last sight of someone else's Lease.
    observed: Option<Observed>,
}

impl Standing {
    fn leading(&self) -> bool {
        self.held_until.is_some()
    }

    /// The Lease was taken or renewed by a request sent at `sent`: it may act until the
    /// Lease's duration less the margin has passed since; whether it just became leader.
    fn held(&mut self, sent: Instant, config: &LeaseConfig) -> bool {
        // A time past what an `Instant` holds is "now": step down rather than overflow.
        let hold = config.duration.saturating_sub(config.margin);
        let became = !self.leading();
        self.held_until = Some(sent.checked_add(hold).unwrap_or(sent));
        self.observed = None;
        became
    }

    /// Someone else holds the Lease; whether this replica was leading until now.
    fn lost(&mut self) -> bool {
        self.held_until.take().is_some()
    }

    /// Whether the renewal is overdue at `now`: then it stops leading at once.
    fn overdue(&mut self, now: Instant) -> bool {
        let overdue = self.held_until.is_some_and(|until| now >= until);
        if overdue {
            self.held_until = None;
        }
        overdue
    }

    /// When to try again after a round sent at `sent`: the next renewal, or sooner the
    /// instant the Lease must be given up.
    fn next_round(&self, sent: Instant, renew_every: Duration) -> Instant {
        let next = sent.checked_add(renew_every).unwrap_or(sent);
        self.held_until.map_or(next, |until| next.min(until))
    }

    /// Whether another holder's Lease has gone unrenewed for its whole duration, as seen on
    /// this replica's clock (never by comparing clocks across machines): the same holder
    /// and renew time first seen at least a duration before `now`.
    fn expired(&mut self, spec: &LeaseSpec, now: Instant) -> bool {
        let holder = spec.holder_identity.clone();
        let renew_time = spec.renew_time.as_ref().map(|t| t.0);
        let duration = Duration::from_secs(
            u64::try_from(spec.lease_duration_seconds.unwrap_or(15)).unwrap_or(15),
        );
        match &self.observed {
            Some(o) if o.holder == holder && o.renew_time == renew_time => {
                now.saturating_duration_since(o.seen_at) >= o.duration
            }
            _ => {
                self.observed = Some(Observed {
                    holder,
                    renew_time,
                    duration,
                    seen_at: now,
                });
                false
            }
        }
    }
}

enum Round {
    /// We hold the Lease, renewed by a request sent at this instant.
    Held(Instant),
    /// Someone else holds it.
    Other(Option<String>),
}

impl Elector {
    pub fn new(api: Api<Lease>, config: LeaseConfig) -> Self {
        Self {
            api,
            config,
            standing: Standing::default(),
        }
    }

    /// Competes for the Lease until `stop` fires, publishing on `leading` whether this
    /// replica may act. Steps down as soon as a renewal is overdue; releases the Lease when
    /// stopped while holding it.
    pub async fn run(mut self, leading: watch::Sender<bool>, mut stop: watch::Receiver<bool>) {
        loop {
            let sent = Instant::now();
            let round = tokio::time::timeout(self.config.renew_every, self.round()).await;
            match round {
                Ok(Ok(Round::Held(at))) => {
                    if self.standing.held(at, &self.config) {
                        info!(lease = %self.config.name, identity = %self.config.identity, "became the leader");
                    }
                    leading.send_if_modified(|l| !std::mem::replace(l, true));
                }
                Ok(Ok(Round::Other(holder))) => {
                    if self.standing.lost() {
                        warn!(holder = ?holder, "another replica took the leader lease");
                    }
                    leading.send_if_modified(|l| std::mem::replace(l, false));
                }
                Ok(Err(e)) => warn!(lease = %self.config.name, "leader election: {e}"),
                Err(_) => {
                    warn!(lease = %self.config.name, "leader election: the API server did not answer in time")
                }
            }
            let next = self.standing.next_round(sent, self.config.renew_every);
            tokio::select! {
                _ = tokio::time::sleep_until(next) => {}
                _ = stop.wait_for(|s| *s) => break,
            }
            if self.standing.overdue(Instant::now()) {
                warn!(lease = %self.config.name, "could not renew the leader lease in time: stepping down");
                leading.send_if_modified(|l| std::mem::replace(l, false));
            }
        }
        if self.standing.leading() {
            leading.send_if_modified(|l| std::mem::replace(l, false));
            if let Err(e) = self.release().await {
                warn!("could not release the leader lease: {e}");
            }
        }
    }

    /// One try to take or renew the Lease.
    async fn round(&mut self) -> Result<Round, kube::Error> {
        let sent = Instant::now();
        let now = Timestamp::now();
        let seconds = i32::try_from(self.config.duration.as_secs()).unwrap_or(15);
        let Some(lease) = self.api.get_opt(&self.config.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.config.name.clone()),
                    ..Default::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(self.config.identity.clone()),
                    lease_duration_seconds: Some(seconds),
                    acquire_time: Some(MicroTime(now)),
                    renew_time: Some(MicroTime(now)),
                    lease_transitions: Some(0),
                    ..Default::default()
                }),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(Round::Held(sent)),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(Round::Other(None)),
                Err(e) => Err(e),
            };
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().filter(|h| !h.is_empty());
        let ours = holder.as_deref() == Some(self.config.identity.as_str());
        if !ours && holder.is_some() && !self.standing.expired(&spec, Instant::now()) {
            return Ok(Round::Other(holder));
        }
        let transitions = spec.lease_transitions.unwrap_or(0);
        // The resourceVersion makes the patch conditional: of two replicas, one wins.
        let patch = json!({
            "metadata": {"resourceVersion": lease.resource_version()},
            "spec": {
                "holderIdentity": self.config.identity,
                "leaseDurationSeconds": seconds,
                "renewTime": MicroTime(now),
                "acquireTime": if ours { spec.acquire_time.clone() } else { Some(MicroTime(now)) },
                "leaseTransitions": if ours { transitions } else { transitions.saturating_add(1) },
            }
        });
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..Default::default()
        };
        match self
            .api
            .patch(&self.config.name, &params, &Patch::Merge(patch))
            .await
        {
            Ok(_) => Ok(Round::Held(sent)),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(Round::Other(holder)),
            Err(e) => Err(e),
        }
    }

    /// Hands the Lease back, so a standby can take over at once; only while it is ours.
    async fn release(&self) -> Result<(), kube::Error> {
        let Some(lease) = self.api.get_opt(&self.config.name).await? else {
            return Ok(());
        };
        let holder = lease
            .spec
            .as_ref()
            .and_then(|s| s.holder_identity.as_deref());
        if holder != Some(self.config.identity.as_str()) {
            return Ok(());
        }
        let patch = json!({
            "metadata": {"resourceVersion": lease.resource_version()},
            "spec": {"holderIdentity": null, "leaseDurationSeconds": 1}
        });
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..Default::default()
        };
        self.api
            .patch(&self.config.name, &params, &Patch::Merge(patch))
            .await
            .map(drop)
    }
}

#[cfg(test)]
mod tests;
