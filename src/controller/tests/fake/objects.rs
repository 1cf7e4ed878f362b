//! The fake's objects other than channels and versions (pods, ConfigMaps, Events), as the
//! API server reads, writes and deletes them: preconditions included.

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::events::v1::{Event, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;

use super::{Key, Kind, World, status_error};

impl World {
    pub(in crate::controller) fn read_meta(
        &mut self,
        kind: Kind,
        key: &Key,
    ) -> Result<Option<ObjectMeta>, kube::Error> {
        Ok(match kind {
            Kind::Pod => {
                self.call("get_pod", &key.name)?;
                self.pods.get(key).map(|p| p.metadata.clone())
            }
            Kind::ConfigMap => {
                self.call("get_configmap", &key.name)?;
                self.configmaps.get(key).map(|m| m.metadata.clone())
            }
        })
    }

    /// A uid precondition that differs is a 409, an absent object 404.
    pub(in crate::controller) fn delete_object(
        &mut self,
        kind: Kind,
        key: &Key,
        uid: &str,
    ) -> Result<(), kube::Error> {
        let found = match kind {
            Kind::Pod => {
                self.call("delete_pod", &key.name)?;
                self.pods.get(key).map(|p| p.metadata.uid.clone())
            }
            Kind::ConfigMap => {
                self.call("delete_configmap", &key.name)?;
                self.configmaps.get(key).map(|m| m.metadata.uid.clone())
            }
        };
        match found {
            Some(found) if found.as_deref() == Some(uid) => {
                match kind {
                    Kind::Pod => drop(self.pods.remove(key)),
                    Kind::ConfigMap => drop(self.configmaps.remove(key)),
                }
                Ok(())
            }
            Some(_) => Err(status_error(409)),
            None => Err(status_error(404)),
        }
    }

    /// Server-side apply, forced: the create-only resourceVersion refuses an existing
    /// object (409), a uid that differs from the object's is a 409; the applied labels,
    /// owners and data replace the object's.
    pub(in crate::controller) fn apply_config_map(
        &mut self,
        key: &Key,
        map: &ConfigMap,
    ) -> Result<(), kube::Error> {
        self.call("apply_configmap", &key.name)?;
        let existing = self.configmaps.get(key).map(|m| m.metadata.uid.clone());
        let create_only = map.metadata.resource_version.as_deref() == Some("1");
        let uid = match (existing, &map.metadata.uid) {
            (Some(_), _) if create_only => return Err(status_error(409)),
            (Some(have), Some(want)) if have.as_ref() != Some(want) => {
                return Err(status_error(409));
            }
            (Some(have), _) => have,
            (None, _) => Some(format!("cm-{}", self.next())),
        };
        let mut stored = map.clone();
        stored.metadata.namespace = key.namespace.clone();
        stored.metadata.uid = uid;
        stored.metadata.resource_version = Some(self.next());
        self.configmaps.insert(key.clone(), stored);
        Ok(())
    }

    pub(in crate::controller) fn create_event(
        &mut self,
        event: &Event,
    ) -> Result<Option<String>, kube::Error> {
        self.call("create_event", &event.name_any())?;
        let mut event = event.clone();
        event.metadata.uid = Some(format!("ev-{}", self.next()));
        self.events.push(event.clone());
        Ok(event.metadata.uid)
    }

    /// The uid a precondition (409 when it differs).
    pub(in crate::controller) fn patch_event_series(
        &mut self,
        name: &str,
        uid: Option<&str>,
        series: EventSeries,
    ) -> Result<(), kube::Error> {
        self.call("patch_event", name)?;
        match self
            .events
            .iter_mut()
            .find(|e| e.metadata.name.as_deref() == Some(name))
        {
            Some(event) if uid.is_some_and(|u| event.metadata.uid.as_deref() != Some(u)) => {
                Err(status_error(409))
            }
            Some(event) => {
                event.series = Some(series);
                Ok(())
            }
            None => Err(status_error(404)),
        }
    }
}
