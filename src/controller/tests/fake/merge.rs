//! JSON merge patches in the fake, as the API server applies them.

use crate::controller::tests::fake::status_error;

/// `object` with a JSON merge patch applied, as the API server does it: the patch's uid and
/// resourceVersion are preconditions (409 when they differ), the result gets `rv`.
pub(in crate::controller) fn merged<K>(
    object: &K,
    patch: &serde_json::Value,
    rv: String,
) -> Result<K, kube::Error>
where
    K: serde::Serialize + serde::de::DeserializeOwned,
{
    fn merge(target: &mut serde_json::Value, patch: &serde_json::Value) {
        match (target, patch) {
            (serde_json::Value::Object(t), serde_json::Value::Object(p)) => {
                for (k, v) in p {
                    if v.is_null() {
                        t.remove(k);
                    } else {
                        merge(t.entry(k.clone()).or_insert(serde_json::Value::Null), v);
                    }
                }
            }
            (t, p) => *t = p.clone(),
        }
    }
    let mut value = serde_json::to_value(object).map_err(kube::Error::SerdeError)?;
    for field in ["uid", "resourceVersion"] {
        let want = &patch["metadata"][field];
        if !want.is_null() && *want != value["metadata"][field] {
            return Err(status_error(409));
        }
    }
    merge(&mut value, patch);
    value["metadata"]["resourceVersion"] = serde_json::Value::String(rv);
    serde_json::from_value(value).map_err(kube::Error::SerdeError)
}
