//! What one sync may write (`--max-sync-write-bytes`): the versions a plan creates or
//! updates, counted as the JSON the API server receives, before anything is written.

use super::Effect;

/// The serialised bytes of every version a plan applies (annotation changes and deletes
/// are small and not counted). Summed saturating: a bound, never a panic.
pub fn write_bytes(effects: &[Effect]) -> usize {
    effects
        .iter()
        .map(|e| match e {
            Effect::ApplyVersion { want, .. } => {
                serde_json::to_vec(want.as_ref()).map_or(usize::MAX, |b| b.len())
            }
            _ => 0,
        })
        .fold(0, usize::saturating_add)
}
