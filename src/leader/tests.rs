//! The election's state changes on a clock the tests hold: leading, renewing, stepping down,
//! and a follower's view of another holder's Lease expiring.

use super::*;

const SECOND: Duration = Duration::from_secs(1);

fn config() -> LeaseConfig {
    // 15 s Lease, renewed every 3 s, given up 3 s before it could expire.
    LeaseConfig::new("lease".into(), "me".into())
}

/// A clock's start, and a standing that has seen no Lease yet.
fn start() -> (Instant, Standing) {
    (Instant::now(), Standing::default())
}

/// Asserts that `lease`, first seen (or seen changed) at `seen`, expires a whole
/// `duration` later, and not a moment sooner.
#[track_caller]
fn assert_waited_out(s: &mut Standing, lease: &LeaseSpec, seen: Instant, duration: Duration) {
    assert!(!s.expired(lease, seen));
    assert!(!s.expired(lease, seen + duration - SECOND));
    assert!(s.expired(lease, seen + duration));
}

fn spec(holder: &str, renewed_at: i64) -> LeaseSpec {
    LeaseSpec {
        holder_identity: Some(holder.into()),
        lease_duration_seconds: Some(15),
        renew_time: Some(MicroTime(Timestamp::from_second(renewed_at).unwrap())),
        ..Default::default()
    }
}

#[test]
fn a_holder_acts_until_its_lease_less_the_margin_then_steps_down() {
    let (t0, mut s) = start();
    assert!(!s.leading());
    assert!(s.held(t0, &config()), "the first hold makes it leader");
    assert!(s.leading());
    // Timed from when the renewal was sent: 15 s less the 3 s margin.
    assert!(!s.overdue(t0 + 12 * SECOND - Duration::from_millis(1)));
    assert!(s.leading());
    assert!(s.overdue(t0 + 12 * SECOND));
    assert!(!s.leading());
    // Overdue once: nothing more to step down from.
    assert!(!s.overdue(t0 + 20 * SECOND));
}

#[test]
fn a_renewal_moves_the_deadline_and_is_not_a_new_leadership() {
    let (t0, mut s) = start();
    s.held(t0, &config());
    assert!(!s.held(t0 + 3 * SECOND, &config()), "already leading");
    // The old deadline passed; the renewed one (3 s + 12 s) holds.
    assert!(!s.overdue(t0 + 14 * SECOND));
    assert!(s.overdue(t0 + 15 * SECOND));
}

#[test]
fn the_next_round_is_the_renewal_or_sooner_the_deadline() {
    let (t0, mut s) = start();
    assert_eq!(s.next_round(t0, 3 * SECOND), t0 + 3 * SECOND);
    let tight = LeaseConfig {
        duration: 4 * SECOND,
        margin: 2 * SECOND,
        ..config()
    };
    s.held(t0, &tight);
    // Renewing every 3 s would be past the 2 s it may act: it wakes to step down.
    assert_eq!(s.next_round(t0, 3 * SECOND), t0 + 2 * SECOND);
    assert_eq!(s.next_round(t0, SECOND), t0 + SECOND);
}

#[test]
fn another_holder_ends_leadership_once() {
    let (t0, mut s) = start();
    assert!(!s.lost(), "never led");
    s.held(t0, &config());
    assert!(s.lost());
    assert!(!s.leading());
    assert!(!s.lost());
    assert!(!s.overdue(t0 + 60 * SECOND));
}

#[test]
fn a_margin_past_the_duration_means_no_time_to_act() {
    let (t0, mut s) = start();
    let odd = LeaseConfig {
        margin: 20 * SECOND,
        ..config()
    };
    s.held(t0, &odd);
    assert!(s.overdue(t0));
}

#[test]
fn another_lease_expires_after_a_whole_duration_unchanged_on_our_clock() {
    let (t0, mut s) = start();
    // First sight: never expired, whatever its renew time says (clocks are not compared).
    assert_waited_out(&mut s, &spec("other", 0), t0, 15 * SECOND);
}

#[test]
fn a_renewal_or_a_new_holder_starts_the_wait_again() {
    let (t0, mut s) = start();
    assert!(!s.expired(&spec("other", 0), t0));
    // Renewed: seen anew at 10 s, so not expired at 15 s.
    assert_waited_out(&mut s, &spec("other", 5), t0 + 10 * SECOND, 15 * SECOND);
    // Another holder with the same renew time: a new Lease to wait out.
    assert_waited_out(&mut s, &spec("third", 5), t0 + 26 * SECOND, 15 * SECOND);
}

#[test]
fn taking_the_lease_forgets_what_was_seen_of_the_last_holder() {
    let (t0, mut s) = start();
    s.expired(&spec("other", 0), t0);
    s.held(t0 + 15 * SECOND, &config());
    s.lost();
    // Seen again after it lost the Lease: a fresh wait, not the old sighting.
    assert!(!s.expired(&spec("other", 0), t0 + 30 * SECOND));
}

#[test]
fn a_lease_of_its_own_duration_is_waited_out_by_it() {
    let (t0, mut s) = start();
    let long = LeaseSpec {
        lease_duration_seconds: Some(60),
        ..spec("other", 0)
    };
    assert_waited_out(&mut s, &long, t0, 60 * SECOND);
}
