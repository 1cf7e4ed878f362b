//! The rules for one item: what its metadata (name, labels, annotations) and its spec
//! must be, and what becomes of it (a [`ChannelVersion`], or diagnostics).

// Channel data is untrusted input: no indexing that could panic (checked access only).
#![cfg_attr(not(test), deny(clippy::indexing_slicing))]

use std::collections::{BTreeMap, HashMap};

use serde_json::{Map, Value};

use super::checker::Checker;
use super::names::{dns1123_subdomain_problem, label_value_problem, qualified_name_problem};
use super::{ChannelVersion, MAX_ANNOTATIONS_BYTES, MAX_DEPTH, MAX_ITEM_BYTES, Segment, key};
use crate::api::{CHANNEL_LABEL, ManagedOSVersionSpec, NO_LONGER_IN_SYNC_ANNOTATION};
use crate::schema::{OLD_ENV, OLD_ENV_NOTE};

/// Metadata keys a channel item may carry that are copied to the version.
const KEPT_METADATA: [&str; 3] = ["name", "labels", "annotations"];
/// Item keys accepted without a warning: they are natural in a copied Kubernetes object.
const QUIET_ITEM_KEYS: [&str; 4] = ["apiVersion", "kind", "metadata", "spec"];
const SPEC_KEYS: [&str; 5] = [
    "version",
    "type",
    "minVersion",
    "metadata",
    "upgradeContainer",
];
/// The rules for names, keys and label values, for messages that may not quote the value.
const NAME_RULE: &str = "a name is a DNS-1123 subdomain: at most 253 characters, lower-case letters, digits, '-' and '.', each part between dots starting and ending with a letter or digit";
const KEY_RULE: &str = "a key is [prefix/]name: the name 1 to 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit; the prefix a DNS-1123 subdomain";
const LABEL_VALUE_RULE: &str = "a label value is empty or at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit";
/// Values longer than this many characters are shortened when quoted in a message.
const QUOTE_CHARS: usize = 60;

impl Checker {
    pub(super) fn item(
        &mut self,
        i: usize,
        item: Value,
        first_use: &mut HashMap<String, usize>,
    ) -> Option<ChannelVersion> {
        let at = |rest: &[&str]| {
            let mut p = vec![Segment::Index(i)];
            p.extend(rest.iter().map(|k| key(k)));
            p
        };
        let mut deep = vec![Segment::Index(i)];
        if super::depth::too_deep(&item, 2, &mut deep) {
            self.error(
                deep,
                format!(
                    "nested deeper than {MAX_DEPTH} levels of arrays and objects (the top-level array counts as one)"
                ),
            );
            return None;
        }
        let Value::Object(mut obj) = item else {
            self.error(
                at(&[]),
                format!(
                    "each version must be a JSON object, found {}",
                    kind_of(&item)
                ),
            );
            return None;
        };
        // A duplicate name alone does not keep the item from a sync (the last entry wins).
        let errors_before = self.errors.saturating_sub(self.duplicate_errors);
        for k in obj.keys() {
            if !QUIET_ITEM_KEYS.contains(&k.as_str()) {
                self.warn(at(&[k]), "unknown key, ignored".into());
            }
        }

        // metadata: name, labels, annotations
        let mut name = None;
        let mut labels = BTreeMap::new();
        let mut annotations = BTreeMap::new();
        match obj.remove("metadata") {
            None => self.error(at(&["metadata"]), "required object is missing".into()),
            Some(Value::Object(mut meta)) => {
                for k in meta.keys() {
                    if !KEPT_METADATA.contains(&k.as_str()) {
                        self.warn(
                            at(&["metadata", k]),
                            "ignored: only name, labels and annotations are taken from a version's metadata".into(),
                        );
                    }
                }
                match meta.remove("name") {
                    None => {
                        self.error(at(&["metadata", "name"]), "required name is missing".into())
                    }
                    Some(Value::String(n)) => match dns1123_subdomain_problem(&n) {
                        Some(why) => self.error_quoting(
                            at(&["metadata", "name"]),
                            format!("{} is not a valid name: {why}", quote(&n)),
                            format!("not a valid name: {NAME_RULE}"),
                        ),
                        None => {
                            if let Some(first) = first_use.get(&n) {
                                self.duplicate_name(
                                    at(&["metadata", "name"]),
                                    &n,
                                    format!("duplicate name {n:?}, already used by [{first}]"),
                                    format!("duplicate name, already used by [{first}]"),
                                );
                                name = Some(n);
                            } else {
                                first_use.insert(n.clone(), i);
                                name = Some(n);
                            }
                        }
                    },
                    Some(other) => self.error(
                        at(&["metadata", "name"]),
                        format!("must be a string, found {}", kind_of(&other)),
                    ),
                }
                for (field, is_label) in [("labels", true), ("annotations", false)] {
                    if let Some(v) = meta.remove(field) {
                        let target = if is_label {
                            &mut labels
                        } else {
                            &mut annotations
                        };
                        self.string_map(at(&["metadata", field]), v, is_label, target);
                    }
                }
                let annotation_bytes: usize = annotations.iter().fold(0, |n: usize, (k, v)| {
                    n.saturating_add(k.len()).saturating_add(v.len())
                });
                if annotation_bytes > MAX_ANNOTATIONS_BYTES {
                    self.error(
                        at(&["metadata", "annotations"]),
                        format!(
                            "annotations hold {annotation_bytes} bytes, more than the {MAX_ANNOTATIONS_BYTES} bytes Kubernetes allows"
                        ),
                    );
                }
            }
            Some(other) => self.error(
                at(&["metadata"]),
                format!("must be an object, found {}", kind_of(&other)),
            ),
        }

        // spec
        let spec = match obj.remove("spec") {
            None => {
                self.error(at(&["spec"]), "required object is missing".into());
                None
            }
            Some(Value::Object(spec)) => self.spec(&at(&["spec"]), spec),
            Some(other) => {
                self.error(
                    at(&["spec"]),
                    format!("must be an object, found {}", kind_of(&other)),
                );
                None
            }
        };

        if self.errors.saturating_sub(self.duplicate_errors) > errors_before {
            return None;
        }
        let version = ChannelVersion {
            name: name?,
            labels,
            annotations,
            spec: spec?,
        };
        let size = approx_size(&version);
        if size > MAX_ITEM_BYTES {
            self.error(
                at(&[]),
                format!(
                    "version is about {size} bytes, more than the {MAX_ITEM_BYTES} bytes a Kubernetes object can hold"
                ),
            );
            return None;
        }
        Some(version)
    }

    fn string_map(
        &mut self,
        path: Vec<Segment>,
        value: Value,
        is_label: bool,
        into: &mut BTreeMap<String, String>,
    ) {
        let map = match value {
            Value::Object(map) => map,
            Value::Null => return,
            other => {
                self.error(
                    path,
                    format!("must be an object of strings, found {}", kind_of(&other)),
                );
                return;
            }
        };
        for (k, v) in map {
            let at = || {
                let mut p = path.clone();
                p.push(key(&k));
                p
            };
            let Value::String(s) = v else {
                self.error(at(), format!("must be a string, found {}", kind_of(&v)));
                continue;
            };
            if let Some(why) = qualified_name_problem(&k) {
                self.error_quoting(
                    at(),
                    format!("{} is not a valid key: {why}", quote(&k)),
                    format!("not a valid key: {KEY_RULE}"),
                );
                continue;
            }
            if is_label && let Some(why) = label_value_problem(&s) {
                self.error_quoting(
                    at(),
                    format!("{} is not a valid label value: {why}", quote(&s)),
                    format!("not a valid label value: {LABEL_VALUE_RULE}"),
                );
                continue;
            }
            if is_label && k == CHANNEL_LABEL {
                self.warn(
                    at(),
                    "ignored: the operator sets this label to the channel's name".into(),
                );
            }
            if !is_label && k == NO_LONGER_IN_SYNC_ANNOTATION {
                self.warn(
                    at(),
                    "ignored: the operator manages this annotation itself".into(),
                );
            }
            into.insert(k, s);
        }
    }

    /// Takes the optional field `k` out of `spec`: `None` when it is missing or null, or
    /// when `pick` gives it back as not `what` (an error at `path.k`).
    fn optional<T>(
        &mut self,
        path: &[Segment],
        spec: &mut Map<String, Value>,
        k: &str,
        what: &str,
        pick: fn(Value) -> Result<T, Value>,
    ) -> Option<T> {
        let other = match pick(spec.remove(k).filter(|v| !v.is_null())?) {
            Ok(value) => return Some(value),
            Err(other) => other,
        };
        let mut p = path.to_vec();
        p.push(key(k));
        self.error(p, format!("must be {what}, found {}", kind_of(&other)));
        None
    }

    fn spec(
        &mut self,
        path: &[Segment],
        mut spec: Map<String, Value>,
    ) -> Option<ManagedOSVersionSpec> {
        let at = |k: &str| {
            let mut p = path.to_vec();
            p.push(key(k));
            p
        };
        for k in spec.keys() {
            if !SPEC_KEYS.contains(&k.as_str()) {
                self.warn(at(k), "unknown key, ignored".into());
            }
        }
        let before = self.errors;
        let string = |v: Value| match v {
            Value::String(s) => Ok(s),
            other => Err(other),
        };
        let version = self.optional(path, &mut spec, "version", "a string", string);
        let min_version = self.optional(path, &mut spec, "minVersion", "a string", string);
        let type_ = match spec.remove("type") {
            Some(Value::String(t)) if t == "container" || t == "iso" => t,
            None => {
                self.error(at("type"), "required: \"container\" or \"iso\"".into());
                String::new()
            }
            Some(other) => {
                self.error_quoting(
                    at("type"),
                    format!("must be \"container\" or \"iso\", found {}", show(&other)),
                    format!(
                        "must be \"container\" or \"iso\", found {}",
                        kind_of(&other)
                    ),
                );
                String::new()
            }
        };
        let object = |v: Value| match v {
            Value::Object(m) => Ok(m),
            other => Err(other),
        };
        let errors_before_metadata = self.errors;
        let metadata = self.optional(path, &mut spec, "metadata", "an object", object);
        // A metadata of the wrong type was reported already: no need to say what it lacks.
        let metadata_reported = self.errors > errors_before_metadata;
        let upgrade_container = self
            .optional(path, &mut spec, "upgradeContainer", "an object", object)
            .and_then(|c| {
                let typed = crate::schema::typed_upgrade_container(&c)
                    .map_err(|why| self.error(at("upgradeContainer"), why))
                    .ok()?;
                if c.get(OLD_ENV).is_some_and(|v| !v.is_null()) {
                    let mut p = at("upgradeContainer");
                    p.push(key(OLD_ENV));
                    self.warn(p, OLD_ENV_NOTE.into());
                }
                Some(typed)
            });
        let required = match type_.as_str() {
            "container" => Some("upgradeImage"),
            "iso" => Some("uri"),
            _ => None,
        };
        if let Some(field) = required.filter(|_| !metadata_reported) {
            let mut p = at("metadata");
            p.push(key(field));
            match metadata.as_ref().and_then(|m| m.get(field)) {
                Some(Value::String(s)) if !s.trim().is_empty() => {}
                Some(Value::String(_)) => self.error(
                    p,
                    format!("must not be empty for {} version", article(&type_)),
                ),
                Some(other) => self.error(p, format!("must be a string, found {}", kind_of(other))),
                None if metadata.is_none() => self.error(
                    at("metadata"),
                    format!(
                        "required: {} version needs metadata.{field}",
                        article(&type_)
                    ),
                ),
                None => self.error(p, format!("required for {} version", article(&type_))),
            }
        }
        (self.errors == before).then_some(ManagedOSVersionSpec {
            version,
            type_,
            min_version,
            metadata,
            upgrade_container,
        })
    }
}

/// Whether `k` is a key the rules name (so not one the data chose): the keys of an item,
/// of its metadata and spec, and the fields a version type requires.
pub(super) fn is_schema_key(k: &str) -> bool {
    QUIET_ITEM_KEYS.contains(&k)
        || KEPT_METADATA.contains(&k)
        || SPEC_KEYS.contains(&k)
        || matches!(k, "upgradeImage" | "uri")
}

/// "a container" / "an iso".
fn article(type_: &str) -> String {
    if type_.starts_with(['a', 'e', 'i', 'o', 'u']) {
        format!("an {type_}")
    } else {
        format!("a {type_}")
    }
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// A value for a message: scalars as JSON (long strings shortened), containers by kind.
fn show(v: &Value) -> String {
    match v {
        Value::String(s) => quote(s),
        Value::Array(_) | Value::Object(_) => kind_of(v).into(),
        scalar => scalar.to_string(),
    }
}

/// A string quoted for a message; one too long to read is shortened and its length given.
fn quote(s: &str) -> String {
    let count = s.chars().count();
    if count <= QUOTE_CHARS {
        return format!("{s:?}");
    }
    let head: String = s.chars().take(QUOTE_CHARS - 20).collect();
    format!("{head:?}... ({count} characters)")
}

fn approx_size(v: &ChannelVersion) -> usize {
    // Sizes of what is in memory, summed saturating: a bound, never a panic.
    fn total(parts: impl IntoIterator<Item = usize>) -> usize {
        parts.into_iter().fold(0, usize::saturating_add)
    }
    fn value(v: &Value) -> usize {
        match v {
            Value::String(s) => s.len().saturating_add(2),
            Value::Array(a) => total(a.iter().map(value).chain([a.len(), 2])),
            Value::Object(m) => object(m),
            _ => 8,
        }
    }
    fn object(m: &Map<String, Value>) -> usize {
        total(
            m.iter()
                .map(|(k, v)| total([k.len(), 3, value(v)]))
                .chain([2]),
        )
    }
    let maps =
        |m: &BTreeMap<String, String>| total(m.iter().map(|(k, v)| total([k.len(), v.len(), 6])));
    total([
        v.name.len(),
        maps(&v.labels),
        maps(&v.annotations),
        v.spec.metadata.as_ref().map_or(0, object),
        v.spec.upgrade_container.as_ref().map_or(0, object),
        v.spec.version.as_ref().map_or(0, String::len),
        v.spec.min_version.as_ref().map_or(0, String::len),
    ])
}
