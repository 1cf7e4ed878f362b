//! How deeply channel data may nest: a version nested deeper than a client's decoder goes
//! (serde_json stops at 128 levels) would stop every watch that lists it, so data nested
//! past [`MAX_DEPTH`] levels is invalid, long before that.

use serde_json::Value;

use super::Segment;

/// The deepest nesting of arrays and objects channel data may have, counting the
/// top-level array as the first level.
pub const MAX_DEPTH: usize = 32;

/// Whether an array or object at or below `v` (itself at `level`) lies deeper than
/// [`MAX_DEPTH`]; if so, `path` (which leads to `v`) is extended to the first such one.
pub(super) fn too_deep(v: &Value, level: usize, path: &mut Vec<Segment>) -> bool {
    let children: Vec<(Segment, &Value)> = match v {
        Value::Array(items) => items
            .iter()
            .enumerate()
            .map(|(i, v)| (Segment::Index(i), v))
            .collect(),
        Value::Object(map) => map.iter().map(|(k, v)| (super::key(k), v)).collect(),
        _ => return false,
    };
    if level > MAX_DEPTH {
        return true;
    }
    for (segment, child) in children {
        path.push(segment);
        if too_deep(child, level.saturating_add(1), path) {
            return true;
        }
        path.pop();
    }
    false
}
