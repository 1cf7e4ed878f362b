//! The CustomResourceDefinitions as the cluster gets them: generated from the types in
//! `api`, stamped with a hash of their schema, written as YAML to `crds/` (and the chart's
//! copy) by [`manifests`], and checked against the installed ones at startup by
//! [`check_crd`], so that an operator never works silently on a CRD of another release.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, CustomResourceDefinitionSpec, JSONSchemaProps,
    JSONSchemaPropsOrArray, JSONSchemaPropsOrBool, JSONSchemaPropsOrStringArray,
};
use kube::CustomResourceExt;
use serde_json::Value;

use crate::api::{ManagedOSVersion, ManagedOSVersionChannel};

/// Annotation on every generated CRD: [`schema_hash`] of its spec.
pub const SCHEMA_HASH_ANNOTATION: &str = "rancheros.cattle.io/schema-hash";

/// Test-only: the cluster tests point the startup check at CRDs they made under this API
/// group, because the real CRDs are shared by every test on the cluster and must not be
/// changed. Not a setting for users.
pub const CHECK_GROUP_ENV: &str = "RANCHEROS_OPERATOR_CRD_CHECK_GROUP";

/// The fix named by every error about the installed CRDs.
const APPLY: &str =
    "`kubectl apply -f crds/` (the chart's crds/ holds the same files; Helm never upgrades CRDs)";

/// The two CRDs, each with its [`SCHEMA_HASH_ANNOTATION`].
pub fn crds() -> Vec<CustomResourceDefinition> {
    let mut channel = ManagedOSVersionChannel::crd();
    crate::schema::finish_channel_crd(&mut channel);
    [channel, ManagedOSVersion::crd()]
        .into_iter()
        .map(|mut crd| {
            for version in &mut crd.spec.versions {
                if let Some(root) = version
                    .schema
                    .as_mut()
                    .and_then(|s| s.open_api_v3_schema.as_mut())
                {
                    strip_unknown_formats(root);
                }
            }
            let hash = schema_hash(&crd.spec);
            crd.metadata
                .annotations
                .get_or_insert_with(Default::default)
                .insert(SCHEMA_HASH_ANNOTATION.into(), hash);
            crd
        })
        .collect()
}

/// String formats that every Kubernetes release since 1.0 knows, as the API server compares
/// them (without `-`, so `date-time` is `datetime`).
const STRING_FORMATS: [&str; 24] = [
    "bsonobjectid",
    "uri",
    "email",
    "hostname",
    "ipv4",
    "ipv6",
    "cidr",
    "mac",
    "uuid",
    "uuid3",
    "uuid4",
    "uuid5",
    "isbn",
    "isbn10",
    "isbn13",
    "creditcard",
    "ssn",
    "hexcolor",
    "rgbcolor",
    "byte",
    "password",
    "date",
    "duration",
    "datetime",
];

/// Whether the API server knows `format` on a schema of type `type_`: integers know `int32`
/// and `int64`, numbers `float` and `double`, strings (and untyped schemas) the
/// [`STRING_FORMATS`], other types none. It ignores any other format, and warns
/// `unrecognized format` at every apply of the CRD.
pub fn known_format(type_: Option<&str>, format: &str) -> bool {
    match type_ {
        None | Some("string") => STRING_FORMATS.contains(&format.replace('-', "").as_str()),
        Some("integer") => matches!(format, "int32" | "int64"),
        Some("number") => matches!(format, "float" | "double"),
        Some(_) => false,
    }
}

/// Drops every format the API server does not know from `schema` and below (schemars
/// writes `uint32`, `uint64`, `uint8`, ... for unsigned integers; their `minimum` stays).
fn strip_unknown_formats(schema: &mut JSONSchemaProps) {
    if schema
        .format
        .as_deref()
        .is_some_and(|f| !known_format(schema.type_.as_deref(), f))
    {
        schema.format = None;
    }
    for child in subschemas(schema) {
        strip_unknown_formats(child);
    }
}

/// The schemas directly below `schema`, wherever a schema may nest one.
fn subschemas(schema: &mut JSONSchemaProps) -> Vec<&mut JSONSchemaProps> {
    let JSONSchemaProps {
        properties,
        pattern_properties,
        definitions,
        all_of,
        any_of,
        one_of,
        not,
        items,
        additional_items,
        additional_properties,
        dependencies,
        ..
    } = schema;
    let mut out: Vec<&mut JSONSchemaProps> = Vec::new();
    for map in [properties, pattern_properties, definitions] {
        out.extend(map.iter_mut().flat_map(|m| m.values_mut()));
    }
    for list in [all_of, any_of, one_of] {
        out.extend(list.iter_mut().flatten());
    }
    out.extend(not.as_deref_mut());
    match items {
        Some(JSONSchemaPropsOrArray::Schema(one)) => out.push(one),
        Some(JSONSchemaPropsOrArray::Schemas(many)) => out.extend(many.iter_mut()),
        None => {}
    }
    for or_bool in [additional_items, additional_properties] {
        if let Some(JSONSchemaPropsOrBool::Schema(one)) = or_bool {
            out.push(one);
        }
    }
    for dependency in dependencies.iter_mut().flat_map(|m| m.values_mut()) {
        if let JSONSchemaPropsOrStringArray::Schema(one) = dependency {
            out.push(one);
        }
    }
    out
}

/// Hex SHA-256 of the canonical JSON of a CRD spec (see [`canonical_json`]). Only the spec
/// counts: the schema, names, scope and printer columns are what an operator depends on,
/// while labels or the YAML layout of the file may change without a new schema.
pub fn schema_hash(spec: &CustomResourceDefinitionSpec) -> String {
    // A CRD spec is plain data (strings, numbers, maps, lists): serializing cannot fail.
    let value = serde_json::to_value(spec).unwrap_or_default();
    sha256_hex(&canonical_json(&value))
}

fn sha256_hex(text: &str) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, text.as_bytes());
    digest.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// JSON with object keys sorted (by their bytes) and no whitespace, strings and numbers as
/// serde_json writes them: the same text for the same data, whatever order the keys were
/// built in.
fn canonical_json(value: &Value) -> String {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<_> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            let inner: Vec<String> = entries
                .into_iter()
                .map(|(k, v)| format!("{}:{}", Value::String(k.clone()), canonical_json(v)))
                .collect();
            format!("{{{}}}", inner.join(","))
        }
        Value::Array(items) => {
            let inner: Vec<String> = items.iter().map(canonical_json).collect();
            format!("[{}]", inner.join(","))
        }
        scalar => scalar.to_string(),
    }
}

/// The CRD manifests as written to `crds/`: (file name, YAML), one document each.
pub fn manifests() -> Result<Vec<(String, String)>, serde_saphyr::SerializeError> {
    crds()
        .into_iter()
        .map(|crd| {
            let file = format!("{}.yaml", crd.spec.names.plural);
            // Through a JSON value, whose map keeps its keys sorted: the file's key order
            // then does not depend on k8s-openapi's field order.
            let value = serde_json::to_value(&crd).unwrap_or_default();
            Ok((file, format!("---\n{}", serde_saphyr::to_string(&value)?)))
        })
        .collect()
}

/// The CRDs the operator checks at startup, as (name, expected schema hash). `group`
/// replaces the API group in the names (see [`CHECK_GROUP_ENV`]); the hashes stay those of
/// this build.
pub fn expected(group: Option<&str>) -> Vec<(String, String)> {
    crds()
        .into_iter()
        .map(|crd| {
            let group = group.unwrap_or(&crd.spec.group);
            let name = format!("{}.{group}", crd.spec.names.plural);
            (name, schema_hash(&crd.spec))
        })
        .collect()
}

/// Why the operator refuses to start on the installed CRDs.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum CrdMismatch {
    #[error(
        "the CRD {name} is not installed in the cluster; install the CRDs with `kubectl apply -f crds/` or the Helm chart"
    )]
    NotInstalled { name: String },
    #[error(
        "the installed CRD {name} has no {SCHEMA_HASH_ANNOTATION} annotation: it is not the one this operator was built for (schema hash {expected}); apply the CRDs of this release: {APPLY}"
    )]
    NoSchemaHash { name: String, expected: String },
    #[error(
        "the installed CRD {name} has schema hash {installed}, this operator was built for {expected}; apply the CRDs of this release: {APPLY}"
    )]
    OtherSchemaHash {
        name: String,
        installed: String,
        expected: String,
    },
}

/// Whether an installed CRD carries the schema hash this build expects.
pub fn check_crd(installed: &CustomResourceDefinition, expected: &str) -> Result<(), CrdMismatch> {
    let name = installed.metadata.name.clone().unwrap_or_default();
    let hash = installed
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(SCHEMA_HASH_ANNOTATION));
    match hash {
        Some(h) if h.trim() == expected => Ok(()),
        Some(h) => Err(CrdMismatch::OtherSchemaHash {
            name,
            installed: h.trim().to_string(),
            expected: expected.to_string(),
        }),
        None => Err(CrdMismatch::NoSchemaHash {
            name,
            expected: expected.to_string(),
        }),
    }
}

#[cfg(test)]
mod tests;
