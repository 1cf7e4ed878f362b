use super::*;
use serde_json::json;

fn item(name: &str, version: Option<&str>, platforms: Option<&[&str]>) -> ChannelVersion {
    let mut metadata = serde_json::Map::new();
    metadata.insert("upgradeImage".into(), json!(format!("r/os:{name}")));
    if let Some(p) = platforms {
        metadata.insert("platforms".into(), json!(p));
    }
    ChannelVersion {
        name: name.into(),
        labels: Default::default(),
        annotations: Default::default(),
        spec: crate::api::ManagedOSVersionSpec {
            version: version.map(str::to_string),
            type_: "container".into(),
            metadata: Some(metadata),
            ..Default::default()
        },
    }
}

/// Elemental's shape: an OS image and an ISO per version, both architectures or one.
fn elemental() -> Vec<ChannelVersion> {
    let both: &[&str] = &["linux/x86_64", "linux/aarch64"];
    let x86: &[&str] = &["linux/x86_64"];
    vec![
        item("base-v2.2.0-3.15-os", Some("v2.2.0-3.15"), Some(both)),
        item("base-v2.2.0-3.15-iso", Some("v2.2.0-3.15"), Some(both)),
        item("base-v2.2.0-3.7-os", Some("v2.2.0-3.7"), Some(x86)),
        item("base-v2.1.4-6.118-os", Some("v2.1.4-6.118"), Some(x86)),
        item("base-v2.2.0-3.13-os", Some("v2.2.0-3.13"), None),
        item("nightly", None, Some(both)),
    ]
}

fn policy(v: serde_json::Value) -> Policy {
    Policy::compile(&serde_json::from_value(v).unwrap()).unwrap()
}

fn names(items: &[ChannelVersion]) -> Vec<&str> {
    items.iter().map(|i| i.name.as_str()).collect()
}

/// The published names, newest first.
fn newest(a: &Applied) -> Vec<&str> {
    let mut p: Vec<&ChannelVersion> = a.published.iter().collect();
    p.sort_by(|x, y| newest_first(x, y));
    p.into_iter().map(|i| i.name.as_str()).collect()
}

fn now() -> Timestamp {
    "2026-12-03T12:00:00Z".parse().unwrap()
}

fn run(p: &Policy, items: &[ChannelVersion]) -> Applied {
    apply(p, items.to_vec(), &HashSet::new(), &BTreeMap::new(), now())
}

#[test]
fn no_policy_publishes_everything_in_the_sources_order_and_finds_the_newest() {
    let a = run(&Policy::default(), &elemental());
    assert_eq!(names(&a.published), names(&elemental()));
    assert_eq!(
        newest(&a),
        [
            "base-v2.2.0-3.15-iso",
            "base-v2.2.0-3.15-os",
            "base-v2.2.0-3.13-os",
            "base-v2.2.0-3.7-os",
            "base-v2.1.4-6.118-os",
            "nightly"
        ]
    );
    assert_eq!(a.latest.as_deref(), Some("base-v2.2.0-3.15-iso"));
    assert!(a.held.is_empty() && a.summary().is_none());
}

#[test]
fn platforms_take_the_kernels_names_both_ways_and_keep_entries_without_the_key() {
    for wanted in ["linux/arm64", "linux/aarch64", "Linux/ARM64/v8"] {
        let a = run(&policy(json!({"platforms": [wanted]})), &elemental());
        assert_eq!(
            newest(&a),
            [
                "base-v2.2.0-3.15-iso",
                "base-v2.2.0-3.15-os",
                "base-v2.2.0-3.13-os",
                "nightly"
            ],
            "{wanted}"
        );
        assert_eq!(a.counts(), BTreeMap::from([("platforms".into(), 2)]));
    }
    let a = run(&policy(json!({"platforms": ["linux/amd64"]})), &elemental());
    assert_eq!(a.published.len(), 6);
    assert!(
        Policy::compile(&serde_json::from_value(json!({"platforms": ["arm64"]})).unwrap()).is_err()
    );
}

#[test]
fn include_and_exclude_take_ranges_over_versions_and_globs_over_names() {
    let a = run(&policy(json!({"include": [">=2.2.0 <3"]})), &elemental());
    assert_eq!(a.held.get("base-v2.1.4-6.118-os"), Some(&Rule::Include));
    assert_eq!(
        a.held.get("nightly"),
        Some(&Rule::Include),
        "no version: no range holds"
    );
    assert_eq!(a.published.len(), 4);
    let a = run(
        &policy(json!({"exclude": ["*-iso", "=2.2.0-3.7"]})),
        &elemental(),
    );
    assert_eq!(a.held.len(), 2);
    assert!(a.held.values().all(|r| *r == Rule::Exclude));
    let a = run(&policy(json!({"include": ["v2.2.0-3.1?"]})), &elemental());
    assert_eq!(
        newest(&a),
        [
            "base-v2.2.0-3.15-iso",
            "base-v2.2.0-3.15-os",
            "base-v2.2.0-3.13-os"
        ]
    );
    for bad in [
        json!({"include": [">=two"]}),
        json!({"exclude": [""]}),
        json!({"keep": 0}),
        json!({"minAge": "soon"}),
    ] {
        let spec = serde_json::from_value(bad.clone()).unwrap();
        let e = Policy::compile(&spec).unwrap_err();
        assert!(e.starts_with("spec.versions."), "{bad}: {e}");
    }
}

#[test]
fn the_first_rule_that_holds_a_version_back_counts_it() {
    let p = policy(json!({"platforms": ["linux/arm64"], "exclude": ["base-v2.2.0-3.7-os"]}));
    let a = run(&p, &elemental());
    assert_eq!(a.held.get("base-v2.2.0-3.7-os"), Some(&Rule::Platforms));
    assert_eq!(
        a.summary().unwrap(),
        "2 held back by spec.versions (platforms 2)"
    );
}

#[test]
fn keep_counts_versions_not_entries_and_keeps_the_newest() {
    let a = run(&policy(json!({"keep": 2})), &elemental());
    assert_eq!(
        newest(&a),
        [
            "base-v2.2.0-3.15-iso",
            "base-v2.2.0-3.15-os",
            "base-v2.2.0-3.13-os"
        ]
    );
    assert_eq!(a.counts(), BTreeMap::from([("keep".into(), 3)]));
}

#[test]
fn min_age_delays_only_new_versions_and_remembers_when_it_first_saw_them() {
    let p = policy(json!({"minAge": "24h"}));
    let items = elemental();
    let exists: HashSet<String> = ["base-v2.1.4-6.118-os".to_string()].into();
    let first = apply(&p, items.clone(), &exists, &BTreeMap::new(), now());
    assert_eq!(newest(&first), ["base-v2.1.4-6.118-os"]);
    assert_eq!(first.first_seen.len(), 5);
    assert!(first.first_seen.values().all(|t| *t == now()));
    assert_eq!(first.ripens_in, Some(Duration::from_secs(24 * 3600)));
    // Later syncs (a restart between: only the status carries the times).
    let later: Timestamp = "2026-12-04T11:00:00Z".parse().unwrap();
    let a = apply(&p, items.clone(), &exists, &first.first_seen, later);
    assert_eq!(a.published.len(), 1);
    assert_eq!(a.ripens_in, Some(Duration::from_secs(3600)));
    let day: Timestamp = "2026-12-04T12:00:00Z".parse().unwrap();
    let a = apply(&p, items.clone(), &exists, &first.first_seen, day);
    assert_eq!(a.published.len(), 6);
    assert!(a.first_seen.is_empty() && a.ripens_in.is_none());
    // A version the source drops while it waits is forgotten: listed again, it waits anew.
    let fewer: Vec<_> = items
        .iter()
        .filter(|i| i.name != "nightly")
        .cloned()
        .collect();
    let a = apply(&p, fewer.clone(), &exists, &first.first_seen, later);
    assert!(!a.first_seen.contains_key("nightly"));
}

#[test]
fn first_seen_is_bounded_and_an_untimed_version_waits_never_less_than_its_age() {
    let p = policy(json!({"minAge": "1h"}));
    let items: Vec<_> = (0..MAX_FIRST_SEEN + 10)
        .map(|i| item(&format!("v1.0.{i}"), Some(&format!("1.0.{i}")), None))
        .collect();
    let a = run(&p, &items);
    assert_eq!(a.first_seen.len(), MAX_FIRST_SEEN);
    assert_eq!(a.held.len(), items.len());
    let hour: Timestamp = "2026-12-03T13:00:00Z".parse().unwrap();
    let b = apply(&p, items.clone(), &HashSet::new(), &a.first_seen, hour);
    assert_eq!(b.published.len(), MAX_FIRST_SEEN);
    assert_eq!(b.first_seen.len(), 10, "the rest are timed now");
}

#[test]
fn globs_match_whole_texts() {
    assert!(glob("*", ""));
    assert!(glob("base-*-os", "base-v2.2.0-3.15-os"));
    assert!(!glob("base-*-os", "base-v2.2.0-3.15-iso"));
    assert!(glob("a*b*c", "aXbYbZc"));
    assert!(!glob("a?c", "ac"));
    assert!(glob("ü?", "üß"));
    // A pathological pattern stays fast (bounded steps).
    let text = "a".repeat(250);
    assert!(!glob(&format!("{}b", "*a".repeat(100)), &text));
}

/// A small deterministic generator for the properties below.
pub(super) struct Rng(pub(super) u64);

impl Rng {
    pub(super) fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn version(&mut self) -> Option<String> {
        let n = self.next();
        match n % 6 {
            0 => None,
            1 => Some(format!("junk{}", n % 7)),
            2 => Some(format!("v{}.{}.{}", n % 3, (n >> 8) % 3, (n >> 16) % 3)),
            _ => Some(format!(
                "{}.{}.{}-{}.{}",
                n % 3,
                (n >> 8) % 3,
                (n >> 16) % 3,
                (n >> 24) % 12,
                (n >> 32) % 3
            )),
        }
    }
}

#[test]
fn the_order_is_total_and_stable_whatever_the_input_order() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for round in 0..200 {
        let items: Vec<_> = (0..12)
            .map(|i| {
                let v = rng.version();
                item(&format!("e{}-{i}", rng.next() % 5), v.as_deref(), None)
            })
            .collect();
        for a in &items {
            assert_eq!(newest_first(a, a), Ordering::Equal);
            for b in &items {
                assert_eq!(newest_first(a, b), newest_first(b, a).reverse(), "{round}");
                for c in &items {
                    if newest_first(a, b) != Ordering::Greater
                        && newest_first(b, c) != Ordering::Greater
                    {
                        assert_ne!(newest_first(a, c), Ordering::Greater, "{round}");
                    }
                }
            }
        }
        let mut reversed = items.clone();
        reversed.reverse();
        let (x, y) = (
            run(&Policy::default(), &items),
            run(&Policy::default(), &reversed),
        );
        assert_eq!(newest(&x), newest(&y), "{round}");
        assert_eq!(x.latest, y.latest, "{round}");
    }
}

#[test]
fn every_listed_version_is_published_or_held_and_never_both() {
    let mut rng = Rng(42);
    let policies = [
        json!({"keep": 3}),
        json!({"platforms": ["linux/arm64"], "minAge": "1h"}),
        json!({"include": [">=1.1.0"], "exclude": ["e1-*"], "keep": 1}),
    ];
    for round in 0..100 {
        let items: Vec<_> = (0..10)
            .map(|i| {
                let v = rng.version();
                let p: &[&str] = if rng.next().is_multiple_of(2) {
                    &["linux/aarch64"]
                } else {
                    &["linux/x86_64"]
                };
                item(&format!("e{}-{i}", rng.next() % 3), v.as_deref(), Some(p))
            })
            .collect();
        for p in &policies {
            let a = run(&policy(p.clone()), &items);
            assert_eq!(a.published.len() + a.held.len(), items.len(), "{round} {p}");
            assert!(
                a.published.iter().all(|i| !a.held.contains_key(&i.name)),
                "{round} {p}"
            );
        }
    }
}

#[test]
fn a_version_over_253_characters_is_matched_by_no_pattern_and_reported() {
    let at_most = format!("1.0.0-{}", "a".repeat(MAX_MATCHED_CHARS - 6));
    let over = format!("1.0.0-{}", "a".repeat(1 << 20));
    let items = vec![
        item("fits", Some(&at_most), None),
        item("long", Some(&over), None),
    ];
    // Each pattern matches both versions' texts, and neither name.
    for include in ["1.0.0-*", ">=1.0.0-a"] {
        let a = run(&policy(json!({ "include": [include] })), &items);
        assert_eq!(names(&a.published), ["fits"], "{include}");
        assert_eq!(a.held.get("long"), Some(&Rule::Include), "{include}");
        assert_eq!(a.unmatched, BTreeSet::from(["long".to_string()]));
        let said = a.summary().unwrap();
        assert!(
            said.contains("1 with a name or version over 253 characters"),
            "{said}"
        );
    }
    let a = run(&policy(json!({ "exclude": ["1.0.0-*"] })), &items);
    assert_eq!(names(&a.published), ["long"], "not excluded either");
    assert_eq!(a.unmatched.len(), 1);
    assert!(a.summary().is_some(), "said even when nothing is held back");
    // Without patterns the length changes nothing, and nothing is said.
    let a = run(&policy(json!({ "keep": 5 })), &items);
    assert_eq!(a.published.len(), 2);
    assert!(a.unmatched.is_empty() && a.summary().is_none());
    assert!(Version::parse(&over).is_none() && Version::parse(&at_most).is_some());
}
