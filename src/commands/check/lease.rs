//! Whether a leader holds the operator's Lease, as `check` judges it from one read: a
//! holder is named and its last renewal is younger than the Lease's duration (plus a few
//! seconds for the clocks of this machine and the leader's to differ).

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::Timestamp;

use crate::commands::status::table::human;

/// How far this machine's clock may be off the leader's before a live Lease looks stale.
const SKEW: Duration = Duration::from_secs(5);
/// A Lease that does not say its duration: the operator's (see `leader`).
const DEFAULT_DURATION: Duration = Duration::from_secs(15);

/// `Ok`: who holds `lease` (named `what`, `NS/NAME`) and since when it was renewed; `Err`:
/// why no leader holds it.
pub fn verdict(lease: &Lease, what: &str, now: Timestamp) -> Result<String, String> {
    let spec = lease.spec.clone().unwrap_or_default();
    let Some(holder) = spec.holder_identity.filter(|h| !h.is_empty()) else {
        return Err(format!(
            "no leader holds the Lease {what} (it names no holder: the last leader released it); is the operator running?"
        ));
    };
    let Some(renewed) = spec.renew_time.map(|t| t.0) else {
        return Err(format!(
            "the Lease {what} names {holder} but no renew time; is the operator running?"
        ));
    };
    let duration = spec
        .lease_duration_seconds
        .and_then(|s| u64::try_from(s).ok())
        .map_or(DEFAULT_DURATION, Duration::from_secs);
    // A renewal "in the future" is this machine's clock running behind: just renewed.
    let age = Duration::try_from(now.duration_since(renewed)).unwrap_or_default();
    if age > duration.saturating_add(SKEW) {
        return Err(format!(
            "no leader holds the Lease {what}: {holder} last renewed it {} ago, and it lasts {}; is the operator running?",
            human(age),
            human(duration)
        ));
    }
    Ok(format!(
        "{holder} holds the Lease {what} (renewed {} ago)",
        human(age)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn lease(holder: Option<&str>, renewed: i64) -> Lease {
        serde_json::from_value(json!({
            "metadata": {"name": "l", "namespace": "ops"},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15,
                     "renewTime": Timestamp::from_second(renewed).unwrap().to_string()},
        }))
        .unwrap()
    }

    const NOW: i64 = 1_750_000_000;

    #[test]
    fn held_released_and_stale() {
        let now = Timestamp::from_second(NOW).unwrap();
        assert_eq!(
            verdict(&lease(Some("op-1"), NOW - 2), "ops/l", now),
            Ok("op-1 holds the Lease ops/l (renewed 2s ago)".into())
        );
        // Within the duration and the allowed skew, also "from the future".
        assert!(verdict(&lease(Some("op-1"), NOW - 20), "ops/l", now).is_ok());
        assert!(verdict(&lease(Some("op-1"), NOW + 3), "ops/l", now).is_ok());
        let e = verdict(&lease(Some("op-1"), NOW - 21), "ops/l", now).unwrap_err();
        assert_eq!(
            e,
            "no leader holds the Lease ops/l: op-1 last renewed it 21s ago, and it lasts 15s; is the operator running?"
        );
        let e = verdict(&lease(None, NOW), "ops/l", now).unwrap_err();
        assert!(
            e.starts_with("no leader holds the Lease ops/l (it names no holder"),
            "{e}"
        );
        let e = verdict(&lease(Some(""), NOW), "ops/l", now).unwrap_err();
        assert!(e.starts_with("no leader holds"), "{e}");
    }
}
