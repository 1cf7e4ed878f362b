//! Kubernetes Events on channels. A failure that repeats with the same message is one
//! Event whose series count grows (`kubectl get events` shows `x12`), not an Event per
//! attempt; anything else is a new Event. The last Event is kept in the channel's record.

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;

use crate::controller::Context;
use crate::controller::Key;
use crate::controller::io::ChannelIo;
use crate::controller::io::errors::is_status;
use crate::controller::records::LastEvent;
use crate::syncer::Note;

/// The longest note the operator writes (the API server takes 1 KiB).
const NOTE_BYTES: usize = 1000;

impl<I: ChannelIo> Context<I> {
    /// Publishes `note` on the channel (`uid`); the same note as the last one adds to its
    /// series.
    pub(in crate::controller) async fn publish(
        &self,
        key: &Key,
        uid: &str,
        regarding: ObjectReference,
        note: &Note,
    ) -> Result<(), kube::Error> {
        let namespace = key.namespace.clone().unwrap_or_default();
        let text = crate::text::clean(&note.message, NOTE_BYTES);
        let now = MicroTime(Timestamp::now());
        let repeat = self.with_record(key, uid, |r| {
            r.last_event
                .as_ref()
                .filter(|l| l.warning == note.warning && l.reason == note.reason && l.note == text)
                .map(|l| (l.name.clone(), l.uid.clone(), l.count.saturating_add(1)))
        });
        if let Some((name, event_uid, count)) = repeat.flatten() {
            let series = EventSeries {
                count,
                last_observed_time: now.clone(),
            };
            let patched = self
                .io
                .patch_event_series(&namespace, &name, event_uid.as_deref(), series)
                .await;
            match patched {
                Ok(()) => {
                    self.remember_event(key, uid, (name, event_uid), note, text, count);
                    return Ok(());
                }
                // Expired (the API server keeps Events an hour), or the name taken by
                // someone else since (the uid precondition): a new one.
                Err(e) if is_status(&e, 404) || is_status(&e, 409) => {}
                Err(e) => return Err(e),
            }
        }
        let name = format!("{}.{:x}", key.name, now.0.as_nanosecond().unsigned_abs());
        let event = Event {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(namespace.clone()),
                ..Default::default()
            },
            event_time: Some(now),
            type_: Some(if note.warning { "Warning" } else { "Normal" }.into()),
            reason: Some(note.reason.into()),
            note: Some(text.clone()),
            action: Some("Sync".into()),
            regarding: Some(regarding),
            reporting_controller: Some(self.reporter.controller.clone()),
            reporting_instance: Some(self.reporter.instance.clone()),
            ..Default::default()
        };
        let event_uid = self.io.create_event(&namespace, &event).await?;
        self.remember_event(key, uid, (name, event_uid), note, text, 1);
        Ok(())
    }

    fn remember_event(
        &self,
        key: &Key,
        uid: &str,
        (name, event_uid): (String, Option<String>),
        note: &Note,
        text: String,
        count: i32,
    ) {
        self.with_record(key, uid, |r| {
            r.last_event = Some(LastEvent {
                name,
                uid: event_uid,
                warning: note.warning,
                reason: note.reason,
                note: text,
                count,
            })
        });
    }
}
