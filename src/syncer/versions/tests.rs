use super::*;
use crate::api::FIELD_MANAGER;
use crate::syncer::tests::{arcs, channel, existing_version};
use serde_json::json;

fn item(name: &str, image: &str) -> ChannelVersion {
    ChannelVersion {
        name: name.into(),
        labels: BTreeMap::new(),
        annotations: BTreeMap::new(),
        spec: spec_of(
            json!({"version": "v1", "type": "container", "metadata": {"upgradeImage": image}}),
        ),
    }
}

fn config(ch: &ManagedOSVersionChannel) -> ChannelConfig {
    crate::config::resolve(&ch.spec, &Default::default()).unwrap()
}

#[test]
fn registry_joins_with_one_slash() {
    assert_eq!(with_registry("reg.io/", "/img:v1"), "reg.io/img:v1");
    assert_eq!(with_registry("reg.io", "img:v1"), "reg.io/img:v1");
}

#[test]
fn desired_version_carries_owner_label_registry_and_upgrade_container() {
    let mut ch = channel(
        json!({"type": "custom", "registry": "reg.io/", "options": {"image": "i"},
                                "upgradeContainer": {"image": "upgrader"}}),
    );
    ch.metadata.name = Some("chan".into());
    let v = desired(&ch, &config(&ch), &item("foo", "os:v1"));
    assert_eq!(v.labels()[CHANNEL_LABEL], "chan");
    assert_eq!(
        v.spec.metadata.as_ref().unwrap()["upgradeImage"],
        "reg.io/os:v1"
    );
    assert_eq!(
        v.spec.upgrade_container.as_ref().unwrap()["image"],
        "upgrader"
    );
    let owner = &v.owner_references()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.controller),
        ("ManagedOSVersionChannel", Some(true))
    );
    assert_eq!(v.metadata.namespace.as_deref(), Some("ns"));
}

#[test]
fn unchanged_versions_get_no_writes() {
    let ch = channel(json!({"type": "custom", "options": {"image": "i"}}));
    let want = desired(&ch, &config(&ch), &item("foo", "os:v1"));
    let have = existing_version(&ch, want.clone());
    let p = plan(
        &ch,
        Some((&config(&ch), &[item("foo", "os:v1")])),
        &arcs(&[have]),
        false,
    )
    .unwrap();
    assert_eq!(p, Plan::default());
    assert_eq!(p.summary(), "no changes");
}

#[test]
fn create_update_flag_unflag_and_delete() {
    let ch = channel(json!({"type": "custom", "options": {"image": "i"}}));
    let cfg = config(&ch);
    let old = existing_version(&ch, desired(&ch, &cfg, &item("changed", "os:v0")));
    let mut returning = existing_version(&ch, desired(&ch, &cfg, &item("back", "os:v1")));
    returning
        .annotations_mut()
        .insert(NO_LONGER_IN_SYNC_ANNOTATION.into(), "true".into());
    let gone = existing_version(&ch, desired(&ch, &cfg, &item("gone", "os:v1")));
    let listed = [
        item("new", "os:v1"),
        item("changed", "os:v1"),
        item("back", "os:v1"),
    ];
    let existing = [old, returning, gone];

    let p = plan(&ch, Some((&cfg, &listed)), &arcs(&existing), false).unwrap();
    assert_eq!((p.created, p.updated, p.flagged, p.deleted), (1, 1, 1, 0));
    let kinds: Vec<String> = p.effects.iter().map(Effect::describe).collect();
    assert_eq!(
        kinds,
        [
            "apply version new",
            "apply version changed",
            "unflag version back",
            "flag version gone"
        ]
    );
    assert_eq!(
        p.summary(),
        "1 created, 1 updated, 1 flagged as no longer in sync"
    );

    let p = plan(&ch, Some((&cfg, &listed)), &arcs(&existing), true).unwrap();
    assert_eq!(p.effects.last().unwrap().describe(), "delete version gone");
}

#[test]
fn already_flagged_versions_are_not_written_again() {
    let ch = channel(json!({"type": "custom", "options": {"image": "i"}}));
    let mut gone = existing_version(&ch, desired(&ch, &config(&ch), &item("gone", "os:v1")));
    gone.annotations_mut()
        .insert(NO_LONGER_IN_SYNC_ANNOTATION.into(), "true".into());
    let p = plan(&ch, None, &arcs(&[gone]), false).unwrap();
    assert_eq!(p, Plan::default());
}

#[test]
fn versions_of_others_are_conflicts_and_never_touched() {
    let ch = channel(json!({"type": "custom", "options": {"image": "i"}}));
    let mut other = channel(json!({"type": "custom", "options": {"image": "i"}}));
    other.metadata.name = Some("other".into());
    other.metadata.uid = Some("other-uid".into());
    let theirs = existing_version(&other, desired(&other, &config(&other), &item("foo", "x")));
    let mut orphan = theirs.clone();
    orphan.metadata.name = Some("bar".into());
    orphan.metadata.owner_references = None;
    let listed = [
        item("foo", "os:v1"),
        item("bar", "os:v1"),
        item("new", "os:v1"),
    ];
    let err = plan(
        &ch,
        Some((&config(&ch), &listed)),
        &arcs(&[theirs.clone(), orphan]),
        false,
    )
    .unwrap_err();
    assert!(
        err.contains(
            "\"foo\" already exists and is controlled by ManagedOSVersionChannel \"other\""
        ),
        "{err}"
    );
    assert!(
        err.contains("\"bar\" already exists and is not controlled by any channel"),
        "{err}"
    );
    // Not listed, not ours: left alone.
    let p = plan(&ch, Some((&config(&ch), &[])), &arcs(&[theirs]), true).unwrap();
    assert_eq!(p, Plan::default());
}

/// What counts as a change of an existing version.
mod change_detection {

    use super::*;
    use crate::syncer::tests::{applied_by_operator, arcs, channel, existing_version};
    use serde_json::json;

    fn version(labels: Value, spec: Value) -> ManagedOSVersion {
        let mut v = ManagedOSVersion::new("foo", spec_of(spec));
        v.metadata.labels = serde_json::from_value(labels).unwrap();
        v
    }

    #[test]
    fn only_what_the_operator_owns_counts() {
        let ch = channel(json!({"type": "custom", "options": {"image": "i"}}));
        let want = version(
            json!({"a": "1", CHANNEL_LABEL: "chan"}),
            json!({"type": "container", "version": "v1", "metadata": {"upgradeImage": "x", "size": 1}}),
        );
        let have = existing_version(&ch, want.clone());
        assert!(!differs(&have, &want));

        // Fields another manager added (a label, a spec key) are not the operator's business.
        let mut foreign = have.clone();
        foreign.labels_mut().insert("team".into(), "os".into());
        foreign
            .spec
            .metadata
            .as_mut()
            .unwrap()
            .insert("note".into(), json!("hi"));
        assert!(!differs(&foreign, &want));

        // Numbers compare by value.
        let mut float = have.clone();
        float.spec.metadata.as_mut().unwrap()["size"] = json!(1.0);
        assert!(!differs(&float, &want));

        // An edit of an owned field, or a removed owned label, is drift.
        let mut edited = have.clone();
        edited.spec.version = Some("v2".into());
        assert!(differs(&edited, &want));
        let mut unlabelled = have.clone();
        unlabelled.labels_mut().remove("a");
        assert!(differs(&unlabelled, &want));

        // A label or spec key the channel data dropped must be removed: write.
        let dropped = version(
            json!({CHANNEL_LABEL: "chan"}),
            json!({"type": "container", "version": "v1", "metadata": {"upgradeImage": "x", "size": 1}}),
        );
        assert!(differs(&have, &dropped));
        let smaller = version(
            json!({"a": "1", CHANNEL_LABEL: "chan"}),
            json!({"type": "container", "version": "v1", "metadata": {"upgradeImage": "x"}}),
        );
        assert!(differs(&have, &smaller));

        // Never applied by the operator (no managedFields record): write once.
        let mut unknown = have.clone();
        unknown.metadata.managed_fields = None;
        assert!(differs(&unknown, &want));
        unknown.metadata.managed_fields = Some(vec![applied_by_operator(&want)]);
        assert!(!differs(&unknown, &want));

        // As the operator's create recorded it (an Update entry): the same fields are its.
        let mut created = have.clone();
        let mut entry = applied_by_operator(&want);
        entry.operation = Some("Update".into());
        created.metadata.managed_fields = Some(vec![entry]);
        assert!(!differs(&created, &want));
        assert!(differs(&created, &dropped));
        assert!(differs(&created, &smaller));
    }

    #[test]
    fn updates_carry_the_uid_and_deletes_come_last() {
        let ch = channel(json!({"type": "custom", "options": {"image": "i"}}));
        let cfg = crate::config::resolve(&ch.spec, &Default::default()).unwrap();
        let item = |name: &str, image: &str| ChannelVersion {
            name: name.into(),
            labels: BTreeMap::new(),
            annotations: BTreeMap::new(),
            spec: spec_of(
                json!({"version": "v1", "type": "container", "metadata": {"upgradeImage": image}}),
            ),
        };
        let gone = existing_version(&ch, desired(&ch, &cfg, &item("a-gone", "x")));
        let changed = existing_version(&ch, desired(&ch, &cfg, &item("b", "old")));
        let p = plan(
            &ch,
            Some((&cfg, &[item("b", "new"), item("c", "x")])),
            &arcs(&[gone, changed]),
            true,
        )
        .unwrap();
        let kinds: Vec<String> = p.effects.iter().map(Effect::describe).collect();
        assert_eq!(
            kinds,
            [
                "apply version b",
                "apply version c",
                "delete version a-gone"
            ]
        );
        let Effect::ApplyVersion { want: b, .. } = &p.effects[0] else {
            unreachable!()
        };
        assert_eq!(b.metadata.uid.as_deref(), Some("b-uid"));
        let Effect::ApplyVersion { want: c, .. } = &p.effects[1] else {
            unreachable!()
        };
        assert_eq!(
            c.metadata.uid, None,
            "a create has nothing to be conditional on"
        );
    }
}

/// The metadata-only cache: a version is what its content hash says, unless someone else
/// wrote it after the operator (then it is read in full).
mod metadata_only_cache;

/// Channel data as Elemental's documentation writes an upgrade container: the environment
/// under `spec.upgradeContainer`, with host volumes; `env` is the old spelling.
fn elemental_item(env_key: &str) -> ChannelVersion {
    let data = json!([{
        "metadata": {"name": "v2.1.1"},
        "spec": {"version": "v2.1.1", "type": "container",
            "metadata": {"upgradeImage": "registry.example.com/os:v2.1.1"},
            "upgradeContainer": {
                "image": "registry.example.com/os:v2.1.1",
                "command": ["/usr/sbin/suc-upgrade"],
                env_key: [{"name": "FORCE", "value": "true"},
                          {"name": "UPGRADE_RECOVERY", "value": "false"}],
                "volumes": [{"name": "host-root", "source": "/", "destination": "/host"}],
                "securityContext": {"privileged": true}}}
    }]);
    let mut parsed = crate::channel::parse(data.to_string().as_bytes()).unwrap();
    parsed.versions.remove(0)
}

/// What a system-upgrade-controller Plan gets from a version: the version's
/// `upgradeContainer` as `spec.upgrade`, as Elemental builds it. SUC itself cannot be
/// installed here: the Plan is read with its type's JSON names (`crate::schema::suc`),
/// strictly, so a field SUC lacks (as `env`, before `envs`) fails the read.
#[test]
fn a_suc_plan_built_from_a_synced_version_takes_its_upgrade_container_as_it_is() {
    use crate::schema::suc;
    let ch = channel(json!({"type": "custom", "options": {"image": "i"}}));
    for env_key in ["envs", "env"] {
        let v = desired(&ch, &config(&ch), &elemental_item(env_key));
        let container = Value::Object(v.spec.upgrade_container.clone().unwrap());
        let plan = json!({
            "apiVersion": "upgrade.cattle.io/v1", "kind": "Plan",
            "metadata": {"name": "os-upgrade", "namespace": "cattle-system"},
            "spec": {"concurrency": 1, "version": v.spec.version, "upgrade": container},
        });
        let read: suc::Plan =
            serde_json::from_value(plan).unwrap_or_else(|e| panic!("{env_key}: {e}"));
        let upgrade = &read.spec.upgrade;
        assert_eq!(
            upgrade
                .env
                .iter()
                .map(|e| (e.name.as_str(), e.value.as_deref()))
                .collect::<Vec<_>>(),
            [("FORCE", Some("true")), ("UPGRADE_RECOVERY", Some("false"))],
            "{env_key}"
        );
        assert_eq!(
            upgrade.volumes,
            [suc::VolumeSpec {
                name: "host-root".into(),
                source: "/".into(),
                destination: "/host".into()
            }]
        );
        // Written back with SUC's names, the Plan's container is the version's.
        assert_eq!(
            serde_json::to_value(upgrade).unwrap(),
            container,
            "{env_key}"
        );
    }
}

#[test]
fn a_version_stored_with_the_old_env_is_rewritten_with_envs() {
    let ch = channel(json!({"type": "custom", "options": {"image": "i"}}));
    let cfg = config(&ch);
    let listed = [elemental_item("env")];
    let want = desired(&ch, &cfg, &listed[0]);
    let written = want.spec.upgrade_container.as_ref().unwrap();
    assert!(written.contains_key("envs") && !written.contains_key("env"));
    // As an operator that wrote `env` stored it: same variables, its own hash.
    let mut old = want.clone();
    let container = old.spec.upgrade_container.as_mut().unwrap();
    let vars = container.remove("envs").unwrap();
    container.insert("env".into(), vars);
    let hash = content_hash(&old);
    assert_ne!(Some(&hash), want.annotations().get(CONTENT_HASH_ANNOTATION));
    old.annotations_mut()
        .insert(CONTENT_HASH_ANNOTATION.into(), hash);
    let stored = existing_version(&ch, old);
    let p = plan(&ch, Some((&cfg, &listed)), &arcs(&[stored]), false).unwrap();
    assert_eq!((p.created, p.updated), (0, 1));
    // Once rewritten, nothing more to do.
    let rewritten = existing_version(&ch, want);
    let p = plan(&ch, Some((&cfg, &listed)), &arcs(&[rewritten]), false).unwrap();
    assert_eq!(p, Plan::default());
}

#[test]
fn a_channels_old_env_is_written_as_envs_on_every_version_and_both_are_refused() {
    let vars = json!([{"name": "FORCE", "value": "true"}]);
    let ch = channel(json!({"type": "custom", "options": {"image": "i"},
                            "upgradeContainer": {"env": vars.clone()}}));
    for name in ["a", "b"] {
        let v = desired(&ch, &config(&ch), &item(name, "os:v1"));
        assert_eq!(
            Value::Object(v.spec.upgrade_container.unwrap()),
            json!({"envs": vars.clone()})
        );
    }
    let both = channel(json!({"type": "custom", "options": {"image": "i"},
                              "upgradeContainer": {"env": vars.clone(), "envs": vars}}));
    let why = crate::config::resolve(&both.spec, &Default::default()).unwrap_err();
    assert_eq!(
        why,
        "spec.upgradeContainer: has both `envs` and `env`, its old spelling: give only `envs`"
    );
}
