//! What the memory benchmarks (cache_memory, sync_memory) share: their allocator, and the
//! versions they measure.

pub mod counting;

use serde_json::{Value, json};

/// The spec of version `i`, shaped like published channel data (free-form `displayName`,
/// `platforms`, `created` in `spec.metadata`).
pub fn published_spec(i: usize) -> Value {
    json!({
        "version": format!("v1.{i}"), "type": "container", "minVersion": "0.0.0",
        "metadata": {
            "upgradeImage": format!("registry.example.com/os/sle-micro:v1.{i}"),
            "displayName": format!("SLE Micro v1.{i}"),
            "platforms": ["linux/amd64", "linux/arm64"],
            "created": "2026-11-01T10:00:00Z"
        }
    })
}
