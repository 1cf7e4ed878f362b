//! Kubernetes Events on channels. A failure that repeats with the same message is one
//! Event whose series count grows (`kubectl get events` shows `x12`), not an Event per
//! attempt; anything else is a new Event.

use std::collections::HashMap;
use std::sync::Mutex;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

use super::errors::is_status;
use super::slots::Key;
use crate::syncer::Note;

/// The longest note the operator writes (the API server takes 1 KiB).
const NOTE_BYTES: usize = 1000;

/// The last Event published on a channel.
struct Last {
    name: String,
    warning: bool,
    reason: &'static str,
    note: String,
    count: i32,
}

pub struct Events {
    client: Client,
    controller: String,
    instance: String,
    last: Mutex<HashMap<Key, Last>>,
}

impl Events {
    pub fn new(client: Client, controller: &str, instance: String) -> Self {
        Events {
            client,
            controller: controller.into(),
            instance,
            last: Mutex::default(),
        }
    }

    /// Publishes `note` on the channel; the same note as the last one adds to its series.
    pub async fn publish(
        &self,
        key: &Key,
        regarding: ObjectReference,
        note: &Note,
    ) -> Result<(), kube::Error> {
        let namespace = key.namespace.clone().unwrap_or_default();
        let api: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
        let text = crate::text::head(&note.message, NOTE_BYTES);
        let now = MicroTime(Timestamp::now());
        let repeat = self.last.lock().ok().and_then(|last| {
            last.get(key)
                .filter(|l| l.warning == note.warning && l.reason == note.reason && l.note == text)
                .map(|l| (l.name.clone(), l.count.saturating_add(1)))
        });
        if let Some((name, count)) = repeat {
            let series = json!({"series": EventSeries { count, last_observed_time: now.clone() }});
            match api
                .patch(&name, &PatchParams::default(), &Patch::Merge(series))
                .await
            {
                Ok(_) => {
                    self.remember(key, name, note, text, count);
                    return Ok(());
                }
                // Expired (the API server keeps Events an hour): a new one.
                Err(e) if is_status(&e, 404) => {}
                Err(e) => return Err(e),
            }
        }
        let name = format!("{}.{:x}", key.name, now.0.as_nanosecond().unsigned_abs());
        let event = Event {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(namespace),
                ..Default::default()
            },
            event_time: Some(now),
            type_: Some(if note.warning { "Warning" } else { "Normal" }.into()),
            reason: Some(note.reason.into()),
            note: Some(text.clone()),
            action: Some("Sync".into()),
            regarding: Some(regarding),
            reporting_controller: Some(self.controller.clone()),
            reporting_instance: Some(self.instance.clone()),
            ..Default::default()
        };
        api.create(&PostParams::default(), &event).await?;
        self.remember(key, name, note, text, 1);
        Ok(())
    }

    fn remember(&self, key: &Key, name: String, note: &Note, text: String, count: i32) {
        if let Ok(mut last) = self.last.lock() {
            last.insert(
                key.clone(),
                Last {
                    name,
                    warning: note.warning,
                    reason: note.reason,
                    note: text,
                    count,
                },
            );
        }
    }

    /// The channel is gone.
    pub fn forget(&self, key: &Key) {
        if let Ok(mut last) = self.last.lock() {
            last.remove(key);
        }
    }
}
