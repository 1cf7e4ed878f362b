//! Decoding that no single object can break. A LIST page or watch event is parsed as a
//! whole, with serde_json's nesting limit of 128 levels: one object nested deeper (any
//! free-form field a tenant may fill) would fail the whole page, and with it every other
//! namespace's cache. Here each object is first taken as raw text (serde_json skips raw
//! text without recursing, so without that limit), then decoded on its own: one that does
//! not decode is left out of the cache, logged and counted, and the rest are served.

use std::borrow::Cow;

use futures::{Stream, StreamExt};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use kube::runtime::watcher;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;
use tracing::warn;

use crate::metrics::Metrics;

/// An object of kind `K` as a watch or list returned it: decoded, or what identifies it
/// and why it did not decode.
#[derive(Clone, Debug)]
pub enum Lenient<K> {
    Decoded(K),
    Undecodable {
        metadata: Box<ObjectMeta>,
        error: String,
    },
}

/// What identifies an object: read from the raw text, skipping everything else (skipping
/// does not recurse, so it succeeds at any depth).
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct Identity {
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    resource_version: Option<String>,
}

#[derive(Deserialize)]
struct Envelope {
    #[serde(default)]
    metadata: Identity,
}

/// One object from its JSON text.
pub fn decode<K: DeserializeOwned>(text: &str) -> Lenient<K> {
    match serde_json::from_str::<K>(text) {
        Ok(k) => Lenient::Decoded(k),
        Err(e) => {
            let id = serde_json::from_str::<Envelope>(text)
                .map(|e| e.metadata)
                .unwrap_or_default();
            Lenient::Undecodable {
                metadata: Box::new(ObjectMeta {
                    name: id.name,
                    namespace: id.namespace,
                    uid: id.uid,
                    resource_version: id.resource_version,
                    ..Default::default()
                }),
                error: e.to_string(),
            }
        }
    }
}

impl<'de, K: DeserializeOwned> Deserialize<'de> for Lenient<K> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = Box::<RawValue>::deserialize(d)?;
        Ok(decode(raw.get()))
    }
}

impl<K: Resource> Resource for Lenient<K> {
    type DynamicType = K::DynamicType;
    type Scope = K::Scope;

    fn kind(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::kind(dt)
    }
    fn group(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::group(dt)
    }
    fn version(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::version(dt)
    }
    fn plural(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::plural(dt)
    }
    fn metadata_api() -> bool {
        K::metadata_api()
    }
    fn meta(&self) -> &ObjectMeta {
        match self {
            Lenient::Decoded(k) => k.meta(),
            Lenient::Undecodable { metadata, .. } => metadata,
        }
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        match self {
            Lenient::Decoded(k) => k.meta_mut(),
            Lenient::Undecodable { metadata, .. } => metadata,
        }
    }
}

/// The decoded objects of a lenient watch; an undecodable one is logged, counted under
/// `kind` and left out (as if it were not there: a cache keeps what it last decoded of an
/// object that stops decoding, until the next re-list drops it).
pub fn skip_undecodable<K, S>(
    events: S,
    kind: &'static str,
    metrics: std::sync::Arc<Metrics>,
) -> impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send
where
    K: Send + 'static,
    S: Stream<Item = Result<watcher::Event<Lenient<K>>, watcher::Error>> + Send,
{
    events.filter_map(move |event| {
        let kept = match event {
            Err(e) => Some(Err(e)),
            Ok(event) => keep(event, kind, &metrics).map(Ok),
        };
        futures::future::ready(kept)
    })
}

fn decoded<K>(object: Lenient<K>, kind: &'static str, metrics: &Metrics) -> Option<K> {
    match object {
        Lenient::Decoded(k) => Some(k),
        Lenient::Undecodable { metadata, error } => {
            metrics.undecodable(kind);
            warn!(
                kind,
                namespace = metadata.namespace.as_deref().unwrap_or_default(),
                name = metadata.name.as_deref().unwrap_or_default(),
                "skipping an object that cannot be decoded: {error}"
            );
            None
        }
    }
}

fn keep<K>(
    event: watcher::Event<Lenient<K>>,
    kind: &'static str,
    metrics: &Metrics,
) -> Option<watcher::Event<K>> {
    use watcher::Event;
    let (object, wrap): (_, fn(K) -> Event<K>) = match event {
        Event::Init => return Some(Event::Init),
        Event::InitDone => return Some(Event::InitDone),
        Event::InitApply(o) => (o, Event::InitApply),
        Event::Apply(o) => (o, Event::Apply),
        Event::Delete(o) => (o, Event::Delete),
    };
    decoded(object, kind, metrics).map(wrap)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::ManagedOSVersionChannel;
    use kube::api::ObjectList;

    /// A channel whose `options` nest `depth` objects.
    fn deep_channel(name: &str, depth: usize) -> String {
        let nested = format!("{}1{}", "{\"a\":".repeat(depth), "}".repeat(depth));
        format!(
            r#"{{"apiVersion":"rancheros.cattle.io/v1","kind":"ManagedOSVersionChannel","metadata":{{"name":"{name}","namespace":"a","uid":"u-{name}","resourceVersion":"7","managedFields":[{{"fieldsV1":{nested}}}]}},"spec":{{"type":"json","options":{nested}}}}}"#
        )
    }

    #[test]
    fn one_deep_object_leaves_the_rest_of_a_page_decoded() {
        let page = format!(
            r#"{{"apiVersion":"v1","kind":"List","metadata":{{"resourceVersion":"9"}},"items":[{},{}]}}"#,
            deep_channel("deep", 200),
            deep_channel("fine", 3)
        );
        // What kube does without the lenient layer: the whole page fails.
        let whole = serde_json::from_str::<ObjectList<ManagedOSVersionChannel>>(&page);
        assert!(whole.unwrap_err().to_string().contains("recursion limit"));
        let list: ObjectList<Lenient<ManagedOSVersionChannel>> =
            serde_json::from_str(&page).unwrap();
        match &list.items[0] {
            Lenient::Undecodable { metadata, error } => {
                assert_eq!(metadata.name.as_deref(), Some("deep"));
                assert_eq!(metadata.resource_version.as_deref(), Some("7"));
                assert!(error.contains("recursion limit"), "{error}");
            }
            Lenient::Decoded(_) => panic!("a 200-deep object decoded"),
        }
        assert!(
            matches!(&list.items[1], Lenient::Decoded(c) if c.metadata.name.as_deref() == Some("fine"))
        );
    }

    #[tokio::test]
    async fn undecodable_objects_are_skipped_and_counted() {
        let metrics = std::sync::Arc::new(Metrics::default());
        let deep: Lenient<ManagedOSVersionChannel> = decode(&deep_channel("deep", 200));
        let fine: Lenient<ManagedOSVersionChannel> = decode(&deep_channel("fine", 1));
        let events = vec![
            Ok(watcher::Event::Init),
            Ok(watcher::Event::InitApply(deep.clone())),
            Ok(watcher::Event::InitApply(fine)),
            Ok(watcher::Event::InitDone),
            Ok(watcher::Event::Apply(deep)),
        ];
        let names: Vec<String> =
            skip_undecodable(futures::stream::iter(events), "channel", metrics.clone())
                .map(|e| match e.unwrap() {
                    watcher::Event::InitApply(c) | watcher::Event::Apply(c) => {
                        c.metadata.name.unwrap()
                    }
                    watcher::Event::Init => "init".into(),
                    watcher::Event::InitDone => "done".into(),
                    watcher::Event::Delete(_) => "delete".into(),
                })
                .collect()
                .await;
        assert_eq!(names, ["init", "fine", "done"]);
        assert!(
            metrics
                .encode()
                .contains("rancheros_operator_undecodable_objects_total{kind=\"channel\"} 2")
        );
    }
}
