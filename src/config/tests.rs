use super::*;
use serde_json::json;

fn spec(v: Value) -> ManagedOSVersionChannelSpec {
    serde_json::from_value(v).unwrap()
}

#[test]
fn sample_custom_channel() {
    let c = resolve(
        &spec(json!({
            "type": "custom",
            "options": {"image": "opensuse/tumbleweed", "command": ["/bin/bash", "-c", "--"],
                        "args": ["echo"], "mountPath": "/output", "outputFile": "/output/data"},
            "upgradeContainer": {}
        })),
        &Limits::default(),
    )
    .unwrap();
    assert_eq!(c.sync_interval, DEFAULT_SYNC_INTERVAL);
    assert!(!c.delete_no_longer_in_sync);
    let Source::Custom(o) = c.source else {
        panic!("custom")
    };
    assert_eq!(o.output_file, "/output/data");
    assert_eq!(o.command.unwrap()[0], "/bin/bash");
    assert_eq!(o.timeout, None);
}

#[test]
fn custom_defaults() {
    let c = resolve(
        &spec(json!({"type": "custom", "options": {"image": "i"}})),
        &Limits::default(),
    )
    .unwrap();
    let Source::Custom(o) = c.source else {
        panic!("custom")
    };
    assert_eq!(o.mount_path, "/data");
    assert_eq!(o.output_file, "/data/output");
}

#[test]
fn invalid_configurations_name_the_field() {
    let cases = [
        (json!({}), "spec.type: required"),
        (
            json!({"type": "rpm"}),
            "spec.type: \"rpm\" is not a channel type",
        ),
        (json!({"type": "custom"}), "spec.options.image: required"),
        (
            json!({"type": "custom", "options": {"image": " "}}),
            "spec.options.image: required",
        ),
        (
            json!({"type": "custom", "syncInterval": "soon", "options": {"image": "i"}}),
            "spec.syncInterval: \"soon\" is not a duration",
        ),
        (
            json!({"type": "custom", "options": {"image": "i", "mountPath": "/out", "outputFile": "/tmp/x"}}),
            "spec.options.outputFile: \"/tmp/x\" must be a file inside mountPath \"/out\"",
        ),
        (
            json!({"type": "custom", "options": {"image": "i", "mountPath": "/out", "outputFile": "/out/../x"}}),
            "spec.options.outputFile",
        ),
        (
            json!({"type": "custom", "options": {"image": "i", "outputFile": "/data"}}),
            "spec.options.outputFile",
        ),
        (
            json!({"type": "custom", "options": {"image": "i", "mountPath": "rel"}}),
            "spec.options.mountPath",
        ),
        (
            json!({"type": "custom", "options": {"image": "i", "command": "sh"}}),
            "spec.options.command: must be a list of strings",
        ),
        (
            json!({"type": "custom", "options": {"image": "i", "imag": "x"}}),
            "spec.options.imag: not an option",
        ),
        (
            json!({"type": "custom", "options": {"image": "i", "timeout": "0s"}}),
            "spec.options.timeout",
        ),
        (
            json!({"type": "json", "options": {}}),
            "spec.options.uri: required",
        ),
        (
            json!({"type": "json", "options": {"uri": "ftp://x"}}),
            "must be an http:// or https:// URL",
        ),
        // Multi-byte characters where the scheme is compared (a panic, once).
        (
            json!({"type": "json", "options": {"uri": "http:€//x"}}),
            "must be an http:// or https:// URL",
        ),
        (
            json!({"type": "json", "options": {"uri": "€€€€€€€€"}}),
            "must be an http:// or https:// URL",
        ),
    ];
    for (s, want) in cases {
        let err = resolve(&spec(s.clone()), &Limits::default()).unwrap_err();
        assert!(err.starts_with(want) || err.contains(want), "{s}: {err}");
    }
}

#[test]
fn json_defaults_and_registry() {
    let c = resolve(
        &spec(json!({
            "type": "json", "registry": " reg.io/ ", "options": {"uri": "https://x/y.json"}
        })),
        &Limits::default(),
    )
    .unwrap();
    assert_eq!(c.registry.as_deref(), Some("reg.io/"));
    assert_eq!(
        c.source,
        Source::Json(JsonOptions {
            uri: "https://x/y.json".into(),
            timeout: DEFAULT_FETCH_TIMEOUT
        })
    );
}

#[test]
fn enabled_defaults_to_true() {
    assert!(enabled(&spec(json!({}))));
    assert!(!enabled(&spec(json!({"enabled": false}))));
}

fn custom(options: Value) -> ManagedOSVersionChannelSpec {
    let mut s = json!({"type": "custom", "options": {"image": "i"}});
    for (k, v) in options.as_object().unwrap() {
        s["options"][k] = v.clone();
    }
    spec(s)
}

#[test]
fn durations_are_bounded_by_the_flags_and_a_year() {
    let limits = Limits::default();
    let interval = |text: &str| {
        let mut s = custom(json!({}));
        s.sync_interval = Some(text.into());
        resolve(&s, &limits).map(|c| c.sync_interval)
    };
    assert_eq!(interval("1m"), Ok(Duration::from_secs(60)));
    assert_eq!(interval("8760h"), Ok(MAX_DURATION));
    for short in ["0", "0s", "59s", "1ms"] {
        let e = interval(short).unwrap_err();
        assert!(
            e.starts_with("spec.syncInterval: ")
                && e.contains("shorter than this operator's minimum of 1m (--min-sync-interval)"),
            "{short}: {e}"
        );
    }
    for long in ["8760h1ns", "8761h", "5124095576030431h"] {
        let e = interval(long).unwrap_err();
        assert!(
            e.starts_with("spec.syncInterval: ") && e.contains("use at most 8760h"),
            "{long}: {e}"
        );
    }
    let timeout = |text: &str, limits: &Limits| {
        resolve(&custom(json!({"timeout": text})), limits).map(|c| match c.source {
            Source::Custom(o) => o.timeout,
            _ => unreachable!(),
        })
    };
    assert_eq!(timeout("1h", &limits), Ok(Some(Duration::from_secs(3600))));
    for long in ["1h1s", "8761h", "5124095576030431h"] {
        let e = timeout(long, &limits).unwrap_err();
        assert!(
            e.starts_with("spec.options.timeout: ")
                && e.ends_with("is longer than this operator's maximum of 1h (--max-sync-timeout)"),
            "{long}: {e}"
        );
    }
    // The flags move the bounds, within a year.
    let loose = Limits {
        max_sync_timeout: MAX_DURATION,
        min_sync_interval: Duration::from_secs(1),
        allow_privileged_runners: false,
        allow_insecure_registries: false,
    };
    assert_eq!(timeout("8760h", &loose), Ok(Some(MAX_DURATION)));
    assert!(timeout("8761h", &loose).is_err());
    let mut s = custom(json!({}));
    s.sync_interval = Some("1s".into());
    assert!(resolve(&s, &loose).is_ok());
    s.sync_interval = Some("0s".into());
    assert!(resolve(&s, &loose).is_err(), "zero is never an interval");
    // json channels too; their default timeout stays within the flag.
    let json_timeout = |options: Value, limits: &Limits| {
        resolve(&spec(json!({"type": "json", "options": options})), limits).map(|c| {
            match c.source {
                Source::Json(o) => o.timeout,
                _ => unreachable!(),
            }
        })
    };
    assert!(
        json_timeout(json!({"uri": "http://x", "timeout": "2h"}), &limits)
            .unwrap_err()
            .contains("(--max-sync-timeout)")
    );
    let tight = Limits {
        max_sync_timeout: Duration::from_secs(5),
        ..Limits::default()
    };
    assert_eq!(
        json_timeout(json!({"uri": "http://x"}), &tight),
        Ok(Duration::from_secs(5))
    );
    // A channel without an interval gets the default, or the minimum if that is longer.
    let slow = Limits {
        min_sync_interval: Duration::from_secs(7200),
        ..Limits::default()
    };
    assert_eq!(
        resolve(&custom(json!({})), &slow).unwrap().sync_interval,
        Duration::from_secs(7200)
    );
}

#[test]
fn privileged_runners_are_refused_naming_the_field_and_the_flag() {
    let cases = [
        (json!({"privileged": true}), "privileged"),
        (
            json!({"allowPrivilegeEscalation": true}),
            "allowPrivilegeEscalation",
        ),
        (
            json!({"capabilities": {"add": ["SYS_ADMIN"]}}),
            "capabilities.add",
        ),
        (
            json!({"capabilities": {"add": ["NET_BIND_SERVICE"], "drop": ["ALL"]}}),
            "capabilities.add",
        ),
        (json!({"runAsUser": 0}), "runAsUser"),
        (
            json!({"seLinuxOptions": {"type": "spc_t"}}),
            "seLinuxOptions",
        ),
        (
            json!({"seLinuxOptions": {"user": "system_u"}}),
            "seLinuxOptions",
        ),
        (json!({"procMount": "Unmasked"}), "procMount"),
        (
            json!({"seccompProfile": {"type": "Unconfined"}}),
            "seccompProfile.type",
        ),
        (
            json!({"appArmorProfile": {"type": "Unconfined"}}),
            "appArmorProfile.type",
        ),
        (
            json!({"windowsOptions": {"hostProcess": true}}),
            "windowsOptions.hostProcess",
        ),
    ];
    let allowed = Limits {
        allow_privileged_runners: true,
        ..Limits::default()
    };
    for (sc, field) in cases {
        let s = custom(json!({"securityContext": sc}));
        let e = resolve(&s, &Limits::default()).unwrap_err();
        assert!(
            e.starts_with(&format!("spec.options.securityContext.{field}: "))
                && e.ends_with("(its admin can allow them with --allow-privileged-runners)"),
            "{sc}: {e}"
        );
        let c = resolve(&s, &allowed).unwrap_or_else(|e| panic!("{sc}: {e}"));
        let Source::Custom(o) = c.source else {
            panic!("custom")
        };
        assert!(o.security_context.is_some());
    }
    // What a restricted or an ordinary container asks for is fine.
    for sc in [
        json!({"runAsNonRoot": true, "runAsUser": 1000}),
        json!({"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"], "add": []}}),
        json!({"readOnlyRootFilesystem": false, "runAsGroup": 0}),
        json!({"seccompProfile": {"type": "RuntimeDefault"}, "procMount": "Default"}),
        json!({"seLinuxOptions": {"type": "container_t", "level": "s0:c1,c2"}}),
        json!({"privileged": false}),
    ] {
        let s = custom(json!({"securityContext": sc}));
        assert!(resolve(&s, &Limits::default()).is_ok(), "{sc}");
    }
}

#[test]
fn limits_out_of_range_are_named() {
    assert_eq!(Limits::default().problem(), None);
    let long = Limits {
        max_sync_timeout: Duration::from_secs(8761 * 3600),
        ..Limits::default()
    };
    assert!(
        long.problem()
            .unwrap()
            .starts_with("--max-sync-timeout 8761h")
    );
    let zero = Limits {
        min_sync_interval: Duration::ZERO,
        ..Limits::default()
    };
    assert!(
        zero.problem()
            .unwrap()
            .starts_with("--min-sync-interval 0s")
    );
}

#[test]
fn a_large_or_unknown_upgrade_container_or_long_registry_is_invalid() {
    let big = resolve(
        &spec(json!({"type": "json", "options": {"uri": "https://x"},
            "upgradeContainer": {"args": ["x".repeat(400 * 1024)]}})),
        &Limits::default(),
    )
    .unwrap_err();
    assert!(big.starts_with("spec.upgradeContainer: 4096"), "{big}");
    assert!(big.contains("64 KiB"), "{big}");
    let unknown = resolve(
        &spec(json!({"type": "json", "options": {"uri": "https://x"},
            "upgradeContainer": {"nested": {"a": {"b": 1}}}})),
        &Limits::default(),
    )
    .unwrap_err();
    assert!(unknown.contains("unknown field `nested`"), "{unknown}");
    let registry = resolve(
        &spec(json!({"type": "json", "options": {"uri": "https://x"},
            "registry": "r".repeat(513)})),
        &Limits::default(),
    )
    .unwrap_err();
    assert_eq!(
        registry,
        "spec.registry: 513 bytes, more than the 512 a registry may have"
    );
    assert!(
        resolve(
            &spec(json!({"type": "json", "options": {"uri": "https://x"},
                "registry": "r".repeat(512), "upgradeContainer": {"image": "u"}})),
            &Limits::default(),
        )
        .is_ok()
    );
}

#[test]
fn a_300_kib_pull_policy_or_type_is_quoted_short_without_control_characters() {
    let policy = format!("\u{1b}[2J{}", "A".repeat(300 * 1024));
    let err = resolve(
        &spec(json!({"type": "custom", "options": {"image": "i", "imagePullPolicy": policy}})),
        &Limits::default(),
    )
    .unwrap_err();
    assert!(err.len() < 400, "{}", err.len());
    assert!(!err.contains('\u{1b}'), "{err}");
    assert!(
        err.ends_with("…\" is not a pull policy; use Always, IfNotPresent or Never"),
        "{err}"
    );
    let err = resolve(
        &spec(json!({"type": "x".repeat(100_000)})),
        &Limits::default(),
    )
    .unwrap_err();
    assert!(
        err.len() < 400 && err.contains("is not a channel type"),
        "{err}"
    );
}

#[test]
fn a_mount_path_over_display_or_a_system_directory_is_invalid() {
    let mount = |path: &str| {
        resolve(
            &spec(json!({"type": "custom", "options": {"image": "i", "mountPath": path}})),
            &Limits::default(),
        )
    };
    let err = mount("/usr/local/bin").unwrap_err();
    assert!(err.starts_with("spec.options.mountPath: \"/usr/local/bin\": would cover /usr/local/bin, where the syncer pod's display binary lives"), "{err}");
    for path in ["/usr/local", "/usr/local/bin/", "/usr/./local/bin"] {
        assert!(
            mount(path).unwrap_err().contains("display binary"),
            "{path}"
        );
    }
    for path in [
        "/bin", "/sbin", "/usr", "/usr/bin", "/etc", "/dev", "/proc", "/sys", "/dev/shm", "/proc/1",
    ] {
        let err = mount(path).unwrap_err();
        assert!(
            err.contains("would cover the system directory"),
            "{path}: {err}"
        );
    }
    for path in [
        "/data",
        "/output",
        "/usr/local/bin/x",
        "/etc/channel",
        "/tmp",
        "/devices",
    ] {
        assert!(mount(path).is_ok(), "{path}");
    }
}
