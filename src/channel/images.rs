//! The images channel data names, for `mirror`: each version's `spec.metadata.upgradeImage`,
//! and an iso version's `spec.metadata.uri` when it is an image reference (Elemental ships
//! ISOs in images) rather than a URL. The one statement of that rule; `mirror` copies what
//! it finds and rewrites those fields.

use serde_json::Value;

/// Where channel data names an image.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageField {
    /// The version's index in the array.
    pub index: usize,
    /// `upgradeImage` or `uri` (of `spec.metadata`).
    pub field: &'static str,
    pub reference: String,
}

/// Every image the data names, in document order.
pub fn images(data: &Value) -> Vec<ImageField> {
    let mut found = Vec::new();
    for (index, version) in data.as_array().into_iter().flatten().enumerate() {
        let spec = &version["spec"];
        let metadata = &spec["metadata"];
        if let Some(image) = metadata["upgradeImage"].as_str().filter(|s| !s.is_empty()) {
            found.push(ImageField {
                index,
                field: "upgradeImage",
                reference: image.to_string(),
            });
        }
        if spec["type"] == "iso"
            && let Some(uri) = metadata["uri"].as_str().filter(|u| is_image_reference(u))
        {
            found.push(ImageField {
                index,
                field: "uri",
                reference: uri.to_string(),
            });
        }
    }
    found
}

/// Whether an iso's `uri` names an image: no URL scheme, and a reference a container
/// runtime reads.
pub fn is_image_reference(uri: &str) -> bool {
    !uri.contains("://") && crate::reference::Reference::parse(uri).is_ok()
}

/// Sets each field [`images`] found to what `new` says (left as it is where `None`).
pub fn rewrite(data: &mut Value, new: impl Fn(&ImageField) -> Option<String>) {
    for f in images(data) {
        if let Some(to) = new(&f)
            && let Some(slot) = data
                .get_mut(f.index)
                .and_then(|v| v.get_mut("spec"))
                .and_then(|s| s.get_mut("metadata"))
                .and_then(|m| m.get_mut(f.field))
        {
            *slot = Value::String(to);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn data() -> Value {
        json!([
            {"metadata": {"name": "a"}, "spec": {"type": "container",
                "metadata": {"upgradeImage": "registry.suse.com/suse/os:6.1", "displayName": "A"}}},
            {"metadata": {"name": "iso-oci"}, "spec": {"type": "iso",
                "metadata": {"uri": "registry.suse.com/suse/iso:6.1"}}},
            {"metadata": {"name": "iso-url"}, "spec": {"type": "iso",
                "metadata": {"uri": "https://download.example/os.iso"}}},
            {"metadata": {"name": "container-uri"}, "spec": {"type": "container",
                "metadata": {"upgradeImage": "busybox", "uri": "registry.suse.com/not/an-iso:1"}}},
        ])
    }

    #[test]
    fn upgrade_images_and_iso_uris_that_are_references_are_found() {
        let found: Vec<(usize, &str, String)> = images(&data())
            .into_iter()
            .map(|f| (f.index, f.field, f.reference))
            .collect();
        assert_eq!(
            found,
            [
                (
                    0,
                    "upgradeImage",
                    "registry.suse.com/suse/os:6.1".to_string()
                ),
                (1, "uri", "registry.suse.com/suse/iso:6.1".to_string()),
                (3, "upgradeImage", "busybox".to_string()),
            ]
        );
    }

    #[test]
    fn rewriting_touches_only_the_fields_found() {
        let mut d = data();
        rewrite(&mut d, |f| Some(format!("site.lan/{}", f.index)));
        assert_eq!(d[0]["spec"]["metadata"]["upgradeImage"], "site.lan/0");
        assert_eq!(d[0]["spec"]["metadata"]["displayName"], "A");
        assert_eq!(d[1]["spec"]["metadata"]["uri"], "site.lan/1");
        assert_eq!(
            d[2]["spec"]["metadata"]["uri"],
            "https://download.example/os.iso"
        );
        assert_eq!(
            d[3]["spec"]["metadata"]["uri"],
            "registry.suse.com/not/an-iso:1"
        );
        assert_eq!(d[3]["spec"]["metadata"]["upgradeImage"], "site.lan/3");
    }

    #[test]
    fn data_that_is_not_an_array_names_no_image() {
        assert!(images(&json!({"spec": {}})).is_empty());
        assert!(images(&json!("text")).is_empty());
    }
}
