//! The syncer pod: creating and deleting it as decided (over the I/O boundary), and
//! reading its logs (for the API server's implementation of it).

use futures::AsyncReadExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::LogParams;
use kube::{Api, ResourceExt};
use tracing::info;

use crate::api::ManagedOSVersionChannel;
use crate::budget::Hold;
use crate::controller::io::Kind;
use crate::controller::io::errors::{Error, api_message, classify, is_status, kube_err};
use crate::controller::io::{ObjectIo, PodIo};
use crate::controller::objects::owned::{self, Done};
use crate::failure::SyncFailure;
use crate::metrics::Metrics;
use crate::syncer::frame::FRAME_OVERHEAD;
use crate::syncer::{Effect, pod};

/// What the pod effects of a decision did.
#[derive(Debug, Default)]
pub struct PodChanges {
    /// The uid of the pod created, as the API server returned it.
    pub created: Option<String>,
    /// Why the API server did not create it, and whether a pod of that name exists.
    pub refused: Option<(SyncFailure, bool)>,
    /// uids of the pods deleted.
    pub deleted: Vec<String>,
}

/// Creates or deletes `channel`'s syncer pod as decided (a delete through `super::owned`:
/// only while the channel controls the pod). A refused creation is reported in the result
/// (a `FailedToCreatePod`); other errors end the attempt.
pub async fn perform(
    effects: &[Effect],
    channel: &ManagedOSVersionChannel,
    io: &(impl PodIo + ObjectIo),
    metrics: &Metrics,
) -> Result<PodChanges, Error> {
    let namespace = channel.namespace().unwrap_or_default();
    let namespace = namespace.as_str();
    let mut changes = PodChanges::default();
    for effect in effects {
        match effect {
            Effect::CreatePod(pod) => {
                metrics.wrote("create_pod");
                match io.create_pod(namespace, pod).await {
                    Ok(created) => {
                        info!(pod = %created.name_any(), "started the syncer pod");
                        changes.created = created.uid();
                    }
                    Err(e) => {
                        let failure = SyncFailure::PodRefused {
                            pod: pod.name_any(),
                            class: classify(&e),
                            message: api_message(&e),
                        };
                        changes.refused = Some((failure, is_status(&e, 409)));
                        return Ok(changes);
                    }
                }
            }
            Effect::DeletePod { name, uid } => {
                match owned::delete(io, metrics, Kind::Pod, namespace, name, uid, channel).await {
                    // Gone already, or replaced by another pod of that name: not ours to
                    // delete, and the pod decided on is gone.
                    Ok(Done::Changed | Done::Nothing | Done::Replaced) => {
                        changes.deleted.push(uid.clone())
                    }
                    // No longer the channel's (its owner reference changed since the cache
                    // saw it): left alone; the next decision sees whose it is.
                    Ok(Done::Conflict(why)) => info!(pod = %name, "not deleting the pod: {why}"),
                    Err(e) => return Err(kube_err(format!("deleting pod {name}"))(e)),
                }
            }
            _ => {}
        }
    }
    Ok(changes)
}

/// The display container's log, capped at the output limit plus the frame; its bytes take
/// room in `hold` as they arrive, and a log that stops arriving for the budget's idle
/// bound fails the read.
pub async fn display_log(
    api: &Api<Pod>,
    name: &str,
    max_bytes: u64,
    hold: &mut Hold,
) -> Result<Vec<u8>, Error> {
    let cap = max_bytes.saturating_add(FRAME_OVERHEAD);
    let params = LogParams {
        container: Some(pod::DISPLAY.into()),
        limit_bytes: Some(i64::try_from(cap).unwrap_or(i64::MAX)),
        ..Default::default()
    };
    let budget = hold.budget().clone();
    let stalled = |stall: crate::budget::Stall| Error::Log {
        container: pod::DISPLAY,
        pod: name.into(),
        source: std::io::Error::new(std::io::ErrorKind::TimedOut, stall),
    };
    let stream = budget
        .step(api.log_stream(name, &params))
        .await
        .map_err(stalled)?
        .map_err(kube_err(format!("reading the display log of pod {name}")))?;
    let mut stream = stream.take(cap);
    let mut out = Vec::new();
    let mut chunk = vec![0; 64 << 10];
    loop {
        let read = budget
            .step(stream.read(&mut chunk))
            .await
            .map_err(stalled)?
            .map_err(|source| Error::Log {
                container: pod::DISPLAY,
                pod: name.into(),
                source,
            })?;
        let Some(bytes) = chunk.get(..read).filter(|b| !b.is_empty()) else {
            break;
        };
        hold.grow(out.len().saturating_add(read))
            .await
            .map_err(stalled)?;
        out.extend_from_slice(bytes);
    }
    Ok(out)
}

/// The end of the runner's log, or why it could not be read (it goes into a message).
pub async fn runner_tail(api: &Api<Pod>, name: &str) -> String {
    let params = LogParams {
        container: Some(pod::RUNNER.into()),
        tail_lines: Some(20),
        limit_bytes: Some(64 * 1024),
        ..Default::default()
    };
    match api.logs(name, &params).await {
        Ok(log) => log,
        Err(e) => format!("(its log could not be read: {})", api_message(&e)),
    }
}
