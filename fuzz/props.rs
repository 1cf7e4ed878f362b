//! The properties the fuzz targets check, one function per target. Shared, through
//! `#[path]`, by the cargo-fuzz targets (`fuzz/fuzz_targets/*.rs`) and by the bounded run
//! in `tests/fuzz_props.rs`, so both check exactly the same things.
//!
//! Each function takes arbitrary bytes and panics (a failed `assert!`) when a property
//! does not hold; the code under test must never panic by itself.

#![allow(dead_code)] // each fuzz target uses one of these

use std::collections::HashSet;
use std::time::Duration;

use rancheros_operator::api::ManagedOSVersionChannelSpec;
use rancheros_operator::channel::{self, ChannelVersion, MAX_DIAGNOSTICS, Severity};
use rancheros_operator::commands::validate;
use rancheros_operator::config::{self, Source};
use rancheros_operator::duration;
use rancheros_operator::syncer::frame::{self as display, Output};
use serde_json::{Map, Value, json};

const BOM: &[u8] = b"\xEF\xBB\xBF";

/// Characters as the diagnostics count them: bytes that do not continue a UTF-8 sequence.
fn count_chars(bytes: &[u8]) -> usize {
    bytes.iter().filter(|b| (**b as i8) >= -0x40).count()
}

/// What a sync keeps of versions listed more than once: the last entry, at the first place.
fn last_entry_wins(versions: &[ChannelVersion]) -> (Vec<ChannelVersion>, Vec<String>) {
    let mut out: Vec<ChannelVersion> = Vec::new();
    let mut duplicates = Vec::new();
    for v in versions {
        match out.iter_mut().find(|o| o.name == v.name) {
            Some(slot) => {
                if !duplicates.contains(&v.name) {
                    duplicates.push(v.name.clone());
                }
                *slot = v.clone();
            }
            None => out.push(v.clone()),
        }
    }
    (out, duplicates)
}

/// Channel data: `check` (what `validate` reports), `parse` (what a sync applies) and the
/// text and json renderings of `validate` agree on the same bytes.
pub fn channel_parse(data: &[u8]) {
    let report = channel::check(data);
    let shown = || String::from_utf8_lossy(data).into_owned();

    // Every diagnostic points into the data (positions after a BOM, as editors count).
    let body = data.strip_prefix(BOM).unwrap_or(data);
    let lines: Vec<&[u8]> = body.split(|b| *b == b'\n').collect();
    for d in &report.diagnostics {
        assert!(d.line >= 1 && d.column >= 1, "{d} in {:?}", shown());
        let line = lines.get(d.line - 1);
        assert!(line.is_some(), "{d}: no such line in {:?}", shown());
        let width = line.map_or(0, |l| count_chars(l));
        assert!(
            d.column <= width + 1,
            "{d}: past the line end in {:?}",
            shown()
        );
        assert!(!d.message.is_empty() && !d.message.contains('\n'), "{d:?}");
    }

    // parse fails exactly when check finds an error other than a duplicate name (past the
    // diagnostics' cap the last note counts errors of either kind, so it says nothing).
    let parsed = channel::parse(data);
    let errors: Vec<_> = report.errors().collect();
    let sync_errors = errors
        .iter()
        .filter(|d| !d.message.starts_with("duplicate name "))
        .count();
    if report.diagnostics.len() < MAX_DIAGNOSTICS {
        assert_eq!(
            parsed.is_ok(),
            sync_errors == 0,
            "parse {:?} but check {:?} for {:?}",
            parsed.as_ref().err(),
            errors,
            shown()
        );
    }
    match &parsed {
        Ok(p) => {
            // The versions of a sync: check's, one per name, the last entry winning.
            let (versions, duplicates) = last_entry_wins(&report.versions);
            assert_eq!(p.versions, versions, "for {:?}", shown());
            assert_eq!(p.duplicates, duplicates, "for {:?}", shown());
            let names: HashSet<&str> = p.versions.iter().map(|v| v.name.as_str()).collect();
            assert_eq!(names.len(), p.versions.len());
            for v in &p.versions {
                assert!(
                    channel::dns1123_subdomain_problem(&v.name).is_none(),
                    "{v:?}"
                );
                assert!(
                    v.spec.type_ == "container" || v.spec.type_ == "iso",
                    "{v:?}"
                );
            }
        }
        Err(e) => {
            // The reason given is one of the errors validate reports.
            assert!(e.total >= 1);
            assert!(e.total >= sync_errors, "{e} vs {sync_errors} errors");
            assert_eq!(e.first.severity, Severity::Error);
            assert!(
                report.diagnostics.contains(&e.first),
                "{e} is not among {:?}",
                report.diagnostics
            );
            assert!(e.to_string().starts_with("invalid channel data: "));
        }
    }

    // validate: the same diagnostics, sorted errors first, rendered as text and json.
    let r = validate::report("fuzz.json", data.to_vec());
    assert_eq!(r.errors, errors.len());
    assert_eq!(r.warnings, report.diagnostics.len() - errors.len());
    assert_eq!(r.valid, report.is_valid());
    assert_eq!(r.versions, if r.valid { report.versions.len() } else { 0 });
    let mut sorted = report.diagnostics.clone();
    sorted.sort_by_key(|d| (d.severity, d.line, d.column));
    assert_eq!(r.diagnostics, sorted);

    let mut text = Vec::new();
    let valid = validate::write(&mut text, std::slice::from_ref(&r), validate::Format::Text);
    assert_eq!(valid.ok(), Some(r.valid));
    let text = String::from_utf8(text).map_err(|e| e.to_string());
    assert!(text.is_ok(), "text output is not UTF-8: {text:?}");
    let text = text.unwrap_or_default();
    let locations: Vec<&str> = text.lines().filter(|l| l.starts_with("  --> ")).collect();
    let expected: Vec<String> = r
        .diagnostics
        .iter()
        .map(|d| format!("  --> fuzz.json:{}:{}", d.line, d.column))
        .collect();
    assert_eq!(locations, expected, "{text}");
    let summary = text.lines().last().unwrap_or_default();
    assert!(
        summary.starts_with(if r.valid {
            "fuzz.json: valid, "
        } else {
            "fuzz.json: invalid"
        }),
        "{text}"
    );

    let mut json = Vec::new();
    let valid = validate::write(&mut json, std::slice::from_ref(&r), validate::Format::Json);
    assert_eq!(valid.ok(), Some(r.valid));
    let doc: Result<Value, _> = serde_json::from_slice(&json);
    assert!(doc.is_ok(), "json output is not JSON: {doc:?}");
    let doc = doc.unwrap_or_default();
    assert_eq!(doc["valid"], r.valid);
    let file = &doc["files"][0];
    assert_eq!(file["errors"], r.errors);
    assert_eq!(file["warnings"], r.warnings);
    assert_eq!(
        file["diagnostics"].as_array().map(Vec::len),
        Some(r.diagnostics.len())
    );
}

/// The spec fields that take free text, with the spec that carries each.
const TEXT_FIELDS: [&str; 5] = [
    "syncInterval",
    "options.uri",
    "options.mountPath",
    "options.outputFile",
    "options.timeout",
];

fn spec_with(field: &str, text: &str) -> Value {
    match field {
        "syncInterval" => {
            json!({"type": "json", "syncInterval": text, "options": {"uri": "http://x"}})
        }
        "options.uri" => json!({"type": "json", "options": {"uri": text}}),
        "options.timeout" => {
            json!({"type": "json", "options": {"uri": "http://x", "timeout": text}})
        }
        "options.mountPath" => {
            json!({"type": "custom", "options": {"image": "i", "mountPath": text}})
        }
        _ => json!({"type": "custom", "options": {"image": "i", "outputFile": text}}),
    }
}

/// The operator's defaults, and flags at the ends of their ranges.
fn limits() -> [config::Limits; 3] {
    [
        config::Limits::default(),
        config::Limits {
            max_sync_timeout: config::MAX_DURATION,
            min_sync_interval: Duration::from_secs(1),
            allow_privileged_runners: true,
            allow_insecure_registries: true,
        },
        config::Limits {
            max_sync_timeout: Duration::from_secs(1),
            min_sync_interval: config::MAX_DURATION,
            allow_privileged_runners: false,
            allow_insecure_registries: false,
        },
    ]
}

/// Resolves a spec and checks what a channel's configuration promises.
fn resolve_and_check(spec: &ManagedOSVersionChannelSpec) {
    for limits in limits() {
        resolve_and_check_with(spec, &limits);
    }
}

fn resolve_and_check_with(spec: &ManagedOSVersionChannelSpec, limits: &config::Limits) {
    let _ = config::enabled(spec);
    let resolved = config::resolve(spec, limits);
    let c = match resolved {
        Err(e) => {
            // Every refusal names the field it is about.
            assert!(e.starts_with("spec."), "{e:?} for {spec:?}");
            return;
        }
        Ok(c) => c,
    };
    // Every duration within the flags' bounds, and so within a year.
    assert!(
        c.sync_interval >= limits.min_sync_interval.max(Duration::from_secs(1))
            && c.sync_interval <= config::MAX_DURATION,
        "{c:?}"
    );
    match &c.source {
        Source::Json(o) => {
            let head = o.uri.as_bytes();
            let scheme = |s: &str| {
                head.len() > s.len()
                    && head
                        .get(..s.len())
                        .is_some_and(|h| h.eq_ignore_ascii_case(s.as_bytes()))
            };
            assert!(scheme("http://") || scheme("https://"), "{c:?}");
            assert_eq!(o.uri.trim(), o.uri, "{c:?}");
            assert!(
                o.timeout >= Duration::from_secs(1).min(limits.max_sync_timeout)
                    && o.timeout <= limits.max_sync_timeout,
                "{c:?}"
            );
        }
        Source::Oci(o) => {
            assert!(o.path.starts_with('/') && o.path != "/", "{c:?}");
            assert!(o.insecure <= limits.allow_insecure_registries, "{c:?}");
            assert!(
                o.timeout >= Duration::from_secs(1).min(limits.max_sync_timeout)
                    && o.timeout <= limits.max_sync_timeout,
                "{c:?}"
            );
        }
        Source::Custom(o) => {
            assert!(!o.image.is_empty() && o.image.trim() == o.image, "{c:?}");
            assert!(
                o.mount_path.starts_with('/') && o.mount_path != "/",
                "{c:?}"
            );
            assert!(
                o.output_file.starts_with(&format!("{}/", o.mount_path)),
                "{c:?}"
            );
            assert!(
                o.timeout
                    .is_none_or(|t| t >= Duration::from_secs(1) && t <= limits.max_sync_timeout),
                "{c:?}"
            );
            // A runner that could escape its pod only where the flag allows it.
            if !limits.allow_privileged_runners {
                assert!(
                    o.security_context
                        .as_ref()
                        .and_then(config::runner_privilege)
                        .is_none(),
                    "{c:?}"
                );
            }
        }
    }
}

/// A channel's spec: the bytes as a JSON spec, and each line of them (as text) in each
/// free-text field of a spec that is otherwise valid, so no other field hides a problem.
pub fn channel_config(data: &[u8]) {
    if let Ok(spec) = serde_json::from_slice::<ManagedOSVersionChannelSpec>(data) {
        resolve_and_check(&spec);
    }
    let text = String::from_utf8_lossy(data);
    for piece in text.split('\n').take(8) {
        for field in TEXT_FIELDS {
            let value = spec_with(field, piece);
            let spec = serde_json::from_value::<ManagedOSVersionChannelSpec>(value);
            assert!(spec.is_ok(), "{spec:?}");
            if let Ok(spec) = spec {
                resolve_and_check(&spec);
            }
        }
    }
    // And the whole text in a spec with every field at once, options of both types mixed.
    let mut options = Map::new();
    for (key, value) in [("uri", &text), ("mountPath", &text), ("timeout", &text)] {
        options.insert(key.into(), Value::String(value.to_string()));
    }
    for type_ in ["json", "custom", text.as_ref()] {
        let spec = ManagedOSVersionChannelSpec {
            type_: type_.to_string(),
            sync_interval: Some(text.to_string()),
            options: Some(options.clone()),
            registry: Some(text.to_string()),
            ..Default::default()
        };
        resolve_and_check(&spec);
    }
}

fn framed(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let written = display::write_framed(&mut out, data);
    assert!(written.is_ok(), "{written:?}");
    out
}

/// The display framing: any log decodes without a panic and a `Complete` result is what
/// the header announced; framed data decodes to itself, every cut of it is incomplete.
pub fn display_decode(data: &[u8]) {
    // The first 8 bytes choose the cap (small caps often, to reach TooLarge), the rest is
    // the log.
    let (cap, log) = match data.split_first_chunk::<8>() {
        Some((cap, log)) => {
            let cap = u64::from_le_bytes(*cap);
            (
                if cap & 1 == 0 {
                    cap >> 1
                } else {
                    (cap >> 1) % 4096
                },
                log,
            )
        }
        None => (u64::MAX, data),
    };
    match display::decode(log, cap) {
        Output::Complete(d) => {
            // The header line announces the length (`display` writes it plainly; a
            // reader also takes "007" or "+7", which is harmless).
            assert!(d.len() as u64 <= cap);
            let begin = b"#rancheros-operator:begin bytes=";
            let newline = log.iter().position(|b| *b == b'\n').unwrap_or(log.len());
            let header = log.get(..newline).unwrap_or_default();
            let number = header.strip_prefix(begin).unwrap_or_default();
            let announced = std::str::from_utf8(number)
                .ok()
                .and_then(|n| n.parse().ok());
            assert_eq!(announced, Some(d.len() as u64), "{log:?}");
            let rest = log.get(newline + 1..).unwrap_or_default();
            assert!(rest.starts_with(d));
            let end = rest.get(d.len()..).unwrap_or_default();
            assert!(end.starts_with(b"\n#rancheros-operator:end\n"), "{log:?}");
        }
        Output::TooLarge { bytes } => assert!(bytes > cap, "{bytes} <= {cap}"),
        Output::Incomplete => {}
        Output::Corrupt(why) => assert!(!why.is_empty()),
    }

    // Round trip of the same bytes as data.
    let frame = framed(log);
    let len = log.len() as u64;
    assert_eq!(display::decode(&frame, u64::MAX), Output::Complete(log));
    assert_eq!(display::decode(&frame, len), Output::Complete(log));
    if len > 0 {
        assert_eq!(
            display::decode(&frame, len - 1),
            Output::TooLarge { bytes: len }
        );
    }
    // What follows the end marker in the log does not matter.
    let mut longer = frame.clone();
    longer.extend_from_slice(data);
    assert_eq!(display::decode(&longer, len), Output::Complete(log));
    // A log cut anywhere is incomplete, never corrupt nor complete (a few cuts per input).
    let cuts = [
        0,
        1,
        frame.len() / 2,
        frame.len().saturating_sub(1),
        cap as usize % frame.len().max(1),
    ];
    for cut in cuts {
        let part = frame.get(..cut.min(frame.len() - 1)).unwrap_or_default();
        assert_eq!(
            display::decode(part, u64::MAX),
            Output::Incomplete,
            "cut at {cut} of {frame:?}"
        );
    }
}

/// Durations: any text parses or is refused with a message, without a panic; what parses
/// formats to text that parses back to the same duration (to the millisecond, all that
/// `format` shows).
pub fn duration_parse(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    match duration::parse(&text) {
        Err(e) => assert!(!e.is_empty()),
        Ok(d) => {
            let shown = duration::format(d);
            let again = duration::parse(&shown);
            let millis = Duration::new(d.as_secs(), d.subsec_millis() * 1_000_000);
            assert_eq!(
                again,
                Ok(millis),
                "{text:?} parses to {d:?}, formatted {shown:?}"
            );
            assert_eq!(duration::format(millis), shown);
        }
    }
}

/// Reads arbitrary bytes as a series of choices (`arbitrary::Unstructured`, the reader
/// cargo-fuzz targets use); past the end every choice is the first (0, `false`).
struct Choices<'a>(arbitrary::Unstructured<'a>);

impl Choices<'_> {
    fn byte(&mut self) -> u8 {
        self.0.arbitrary().unwrap_or(0)
    }
    fn pick<'t, T>(&mut self, items: &'t [T]) -> &'t T {
        let at = self.0.choose_index(items.len()).unwrap_or(0);
        &items[at]
    }
    fn flag(&mut self) -> bool {
        self.0.arbitrary().unwrap_or(false)
    }
    fn i64(&mut self) -> i64 {
        self.0.arbitrary().unwrap_or(0)
    }
    /// The next `n` bytes (fewer at the end).
    fn bytes(&mut self, n: usize) -> &[u8] {
        let n = n.min(self.0.len());
        self.0.bytes(n).unwrap_or_default()
    }
}

/// The decision core on arbitrary observations and times, asked again as the controller
/// does while it needs more: it never panics, never loops, and keeps its promises (a failed
/// or paused sync writes no version; a written status is for the current generation and
/// says `Ready`; requeues stay within a year; messages stay bounded).
pub fn syncer_decide(data: &[u8]) {
    use k8s_openapi::api::core::v1::Pod;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;
    use rancheros_operator::api::{ManagedOSVersion, ManagedOSVersionChannel};
    use rancheros_operator::failure::{ErrorClass, SyncFailure};
    use rancheros_operator::syncer::{self, Effect, Fetched, Observation, Outcome, Settings};
    use std::sync::Arc;

    let mut c = Choices(arbitrary::Unstructured::new(data));
    let time = |c: &mut Choices, base: i64| -> Timestamp {
        let offset = match c.byte() % 4 {
            0 => i64::from(c.byte()),
            1 => -i64::from(c.byte()),
            2 => c.i64() % 100_000_000_000,
            _ => c.i64(),
        };
        Timestamp::from_second(
            base.saturating_add(offset)
                .clamp(-377_705_116_800, 253_402_207_199),
        )
        .unwrap_or(Timestamp::UNIX_EPOCH)
    };
    let base = 1_700_000_000;
    let durations = [
        "",
        "1s",
        "0",
        "0s",
        "90s",
        "1h",
        "5124095576030431h",
        "8760h",
        "8761h",
        "1ms",
        "€",
        "1.5h",
        "-1s",
    ];
    let mut options = json!({"image": "runner:1"});
    let custom = c.flag();
    if !custom {
        options =
            json!({"uri": *c.pick(&["http://10.0.0.1/c.json", "https://x/y", "ftp://x", ""])});
    }
    let timeout = *c.pick(&durations);
    if !timeout.is_empty() {
        options["timeout"] = json!(timeout);
    }
    if c.flag() {
        options["env"] =
            json!([{"name": "T", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]);
    }
    if c.flag() {
        options["securityContext"] = json!(*c.pick(&[
            json!({"runAsUser": 0}),
            json!({"privileged": true}),
            json!({"runAsNonRoot": true, "runAsUser": 1000}),
            json!({"capabilities": {"add": ["SYS_ADMIN"]}}),
        ]));
    }
    let mut spec = json!({"type": if custom { "custom" } else { "json" }, "options": options});
    let interval = *c.pick(&durations);
    if !interval.is_empty() {
        spec["syncInterval"] = json!(interval);
    }
    for key in ["enabled", "suspend", "deleteNoLongerInSyncVersions"] {
        if c.byte() % 3 == 0 {
            spec[key] = json!(c.flag());
        }
    }
    let Ok(spec) = serde_json::from_value(spec) else {
        return;
    };
    let mut ch = ManagedOSVersionChannel::new("chan", spec);
    ch.metadata.namespace = Some("ns".into());
    ch.metadata.uid = Some("uid-1".into());
    let generation = *c.pick(&[1, 2, 7, i64::MAX, -1, 0]);
    ch.metadata.generation = Some(generation);
    if c.byte() % 8 == 0 {
        ch.metadata.deletion_timestamp = Some(Time(time(&mut c, base)));
    }
    if c.flag() {
        ch.metadata.annotations.get_or_insert_default().insert(
            "rancheros.cattle.io/sync-requested-at".into(),
            c.pick(&["a", "b"]).to_string(),
        );
    }
    if c.flag() {
        let reasons = [
            "Synchronized",
            "Synchronizing",
            "FailedToSync",
            "FailedToCreatePod",
            "InvalidConfiguration",
            "ChannelDisabled",
            "Suspended",
            "Other",
        ];
        let mut conditions = Vec::new();
        for type_ in ["Ready", "Reconciling", "Stalled"] {
            if c.byte() % 3 != 0 {
                conditions.push(json!({
                    "type": type_, "status": *c.pick(&["True", "False", "Unknown"]),
                    "reason": *c.pick(&reasons), "message": "m",
                    "observedGeneration": *c.pick(&[generation, generation.wrapping_sub(1), 0]),
                    "lastTransitionTime": Time(time(&mut c, base)),
                }));
            }
        }
        let status = json!({
            "conditions": conditions,
            "failedSynchronizationAttempts": *c.pick(&[0, 1, 3, 4, 5, i64::MAX, -1, i64::MIN]),
            "lastSyncAttemptTime": Time(time(&mut c, base)),
            "syncRequestedAt": *c.pick(&["a", "b"]),
        });
        ch.status = serde_json::from_value(status).ok();
    }
    let settings = Settings {
        operator_image: "op:1".into(),
        sync_timeout: *c.pick(&[
            Duration::from_secs(300),
            Duration::from_secs(1),
            Duration::MAX,
        ]),
        max_output_bytes: *c.pick(&[1 << 20, 16, u64::MAX]),
        retry_delay: *c.pick(&[Duration::from_secs(10), Duration::ZERO, Duration::MAX]),
        queue_poll: *c.pick(&[Duration::from_secs(30), Duration::ZERO, Duration::MAX]),
        max_concurrent_syncs: 10,
        json_cache_bytes: 1 << 20,
        max_versions_per_channel: *c.pick(&[10_000, 1, 0]),
        max_sync_write_bytes: *c.pick(&[32 << 20, 0, usize::MAX]),
        syncer_image_pull_secrets: Vec::new(),
        max_sync_timeout: *c.pick(&[
            config::DEFAULT_MAX_SYNC_TIMEOUT,
            config::MAX_DURATION,
            Duration::from_secs(1),
            Duration::MAX,
        ]),
        min_sync_interval: *c.pick(&[
            config::DEFAULT_MIN_SYNC_INTERVAL,
            Duration::from_secs(1),
            Duration::ZERO,
            Duration::MAX,
        ]),
        allow_privileged_runners: c.flag(),
        allow_insecure_registries: c.flag(),
        interval_jitter_percent: *c.pick(&[0, 10, 100]),
        ..Settings::default()
    };
    // The pod named after the channel: none, ours (the decision's own shape), or a stranger.
    let pod: Option<Pod> = match c.byte() % 3 {
        0 => None,
        n => {
            let now = Timestamp::from_second(base).unwrap_or(Timestamp::UNIX_EPOCH);
            let probe = syncer::decide(
                &Observation::new(&ch, now),
                &settings,
                &settings.resolve_channel(&ch),
            );
            let mut pod = probe.pod_to_create().cloned().unwrap_or_default();
            pod.metadata.name = Some("chan".into());
            pod.metadata.uid = Some("pod-uid".into());
            if n == 2 {
                pod.metadata.owner_references = None;
            }
            pod.metadata.creation_timestamp = Some(Time(time(&mut c, base)));
            if c.byte() % 6 == 0 {
                pod.metadata.deletion_timestamp = Some(Time(time(&mut c, base)));
            }
            let finished = Time(time(&mut c, base));
            let code = i32::from(c.byte()) - 1;
            let status = match c.byte() % 5 {
                0 => json!({"phase": "Pending"}),
                1 => {
                    json!({"phase": "Failed", "initContainerStatuses": [{"name": "runner", "ready": false,
                    "restartCount": 0, "image": "", "imageID": "sha256:x",
                    "state": {"terminated": {"exitCode": code, "finishedAt": finished}}}]})
                }
                2 => json!({"phase": "Running",
                    "initContainerStatuses": [{"name": "runner", "ready": true, "restartCount": 0,
                        "image": "", "imageID": "", "state": {"terminated": {"exitCode": 0}}}],
                    "containerStatuses": [{"name": "display", "ready": true, "restartCount": 0,
                        "image": "", "imageID": "", "state": {"running": {}}}]}),
                3 => {
                    json!({"phase": "Running", "containerStatuses": [{"name": "display", "ready": false,
                    "restartCount": 0, "image": "", "imageID": "",
                    "state": {"terminated": {"exitCode": code}}}]})
                }
                _ => {
                    json!({"phase": "Failed", "reason": "DeadlineExceeded", "message": "€".repeat(100)})
                }
            };
            pod.status = serde_json::from_value(status).ok();
            Some(pod)
        }
    };
    let version_names = ["foo", "bar", "baz"];
    let versions: Vec<Arc<ManagedOSVersion>> = (0..c.byte() % 4)
        .map(|i| {
            let mut v =
                ManagedOSVersion::new(version_names[usize::from(i) % 3], Default::default());
            v.metadata.namespace = Some("ns".into());
            v.metadata.uid = Some(format!("v{i}"));
            if c.flag() {
                v.metadata.owner_references = ch.metadata.uid.as_ref().map(|uid| {
                    vec![
                        k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                            api_version: "rancheros.cattle.io/v1".into(),
                            kind: "ManagedOSVersionChannel".into(),
                            name: "chan".into(),
                            uid: uid.clone(),
                            controller: Some(true),
                            ..Default::default()
                        },
                    ]
                });
            }
            Arc::new(v)
        })
        .collect();
    let failure = SyncFailure::Api {
        class: ErrorClass::Retryable,
        message: "boom".into(),
    };
    let error = (c.byte() % 8 == 0).then_some(&failure);
    let pod_create_error = (c.byte() % 8 == 0).then_some(&failure);
    let queued = c.byte() % 4 == 0;
    let now = time(&mut c, base);
    // What the rest of the bytes are, when asked: the display log or the fetched body.
    let rest = c.bytes(usize::MAX).to_vec();
    let mut framed = Vec::new();
    let _ = display::write_framed(&mut framed, &rest);
    let fetched = Fetched::Body {
        data: rest.clone().into(),
        validators: rancheros_operator::fetch::Validators {
            etag: Some("\"e\"".into()),
            last_modified: None,
        },
        not_modified: rest.first().is_some_and(|b| b % 2 == 1),
        changelogs: None,
    };
    let log = String::from_utf8_lossy(&rest).into_owned();

    let mut obs = Observation {
        pod: pod.as_ref(),
        pod_create_error,
        error,
        queued,
        ..Observation::new(&ch, now)
    };
    // Resolved once, as an attempt resolves it, however many rounds decide on it.
    let resolved = settings.resolve_channel(obs.channel);
    let mut decision = syncer::decide(&obs, &settings, &resolved);
    for _round in 0..4 {
        let needs = decision.needs.clone();
        if !needs.any() {
            break;
        }
        let asked_again = (needs.display_log && obs.display_log.is_some())
            || (needs.runner_log && obs.runner_log.is_some())
            || (needs.versions && obs.versions.is_some())
            || (needs.fetch.is_some() && obs.fetched.is_some());
        assert!(!asked_again, "asked again for what it was given: {needs:?}");
        if needs.display_log {
            obs.display_log = Some(if rest.first() == Some(&0) {
                &rest
            } else {
                &framed
            });
        }
        if needs.runner_log {
            obs.runner_log = Some(&log);
        }
        if needs.versions {
            obs.versions = Some(&versions);
        }
        if needs.fetch.is_some() {
            obs.fetched = Some(&fetched);
        }
        decision = syncer::decide(&obs, &settings, &resolved);
    }
    assert!(
        !decision.needs.any(),
        "still needs more after every need was met: {decision:?}"
    );

    let writes_versions = decision.effects.iter().any(|e| {
        matches!(
            e,
            Effect::ApplyVersion { .. } | Effect::MarkVersion { .. } | Effect::DeleteVersion { .. }
        )
    });
    let creates = decision
        .effects
        .iter()
        .filter(|e| matches!(e, Effect::CreatePod(_)))
        .count();
    assert!(creates <= 1, "{decision:?}");
    if matches!(decision.outcome, Some(Outcome::Failed(_))) {
        assert!(
            !writes_versions,
            "a failed sync writes versions: {decision:?}"
        );
    }
    if ch.spec.suspend == Some(true) || ch.metadata.deletion_timestamp.is_some() {
        assert!(
            !writes_versions && creates == 0,
            "a paused or deleted channel acted: {decision:?}"
        );
    }
    if let Some(requeue) = decision.requeue {
        assert!(requeue <= config::MAX_DURATION, "requeue after {requeue:?}");
    }
    // A sync starts only for a spec within the operator's bounds, and its pod asks for
    // nothing the flags refuse; its deadline is a year at most (plus the kubelet's margin).
    let starts = creates > 0 || decision.needs.fetch.is_some() || obs.fetched.is_some();
    if starts && decision.outcome.is_none() {
        let c = config::resolve(&ch.spec, &settings.limits());
        assert!(c.is_ok(), "a sync of a refused spec: {c:?}");
    }
    for e in &decision.effects {
        let Effect::CreatePod(pod) = e else { continue };
        let spec = pod.spec.as_ref();
        let deadline = spec.and_then(|s| s.active_deadline_seconds).unwrap_or(0);
        assert!(
            deadline > 0 && deadline <= 8760 * 3600 + 60,
            "activeDeadlineSeconds {deadline}"
        );
        let runner = spec
            .and_then(|s| s.init_containers.as_ref())
            .and_then(|c| c.first())
            .and_then(|c| c.security_context.as_ref());
        if !settings.allow_privileged_runners {
            let privilege = runner.and_then(config::runner_privilege);
            assert!(privilege.is_none(), "a privileged runner: {privilege:?}");
        }
        // The pod-level settings are the operator's own.
        let spec = spec.cloned().unwrap_or_default();
        assert!(
            spec.host_network.is_none()
                && spec.host_pid.is_none()
                && spec.host_ipc.is_none()
                && spec.volumes.iter().flatten().all(|v| v.empty_dir.is_some()),
            "{spec:?}"
        );
    }
    if let Some(next) = decision
        .status
        .as_ref()
        .and_then(|s| s.next_sync_time.as_ref())
    {
        let span = next.0.duration_since(now);
        assert!(
            span <= k8s_openapi::jiff::SignedDuration::from_secs(8760 * 3600),
            "nextSyncTime {next:?} is more than a year after {now:?}"
        );
    }
    if let Some(status) = &decision.status {
        assert_eq!(status.observed_generation, Some(generation));
        let ready = status
            .condition("Ready")
            .expect("a written status says Ready");
        assert!(
            ready.message.len() <= 16 * 1024,
            "a Ready message of {} bytes",
            ready.message.len()
        );
    }
    for note in &decision.events {
        assert!(
            note.message.len() <= 16 * 1024,
            "an event of {} bytes",
            note.message.len()
        );
    }
}

/// One image layer searched for a file (`registry::layers::search`): the bytes as a tar
/// stream, sent plain, as gzip and as zstd of it (valid compressed streams), then the bytes
/// themselves as a gzip and a zstd blob; with small bounds.
pub fn layer_walk(data: &[u8]) {
    layer_walk_once(data);
    // Mutated headers mostly fail their checksum: again with every block that looks like a
    // header (its magic, `ustar`, in place) summed anew, so the fields changed are read.
    let mut fixed = data.to_vec();
    for block in fixed.chunks_exact_mut(512) {
        if block.get(257..262) == Some(&b"ustar"[..]) {
            block[148..156].fill(b' ');
            let sum: u32 = block.iter().map(|b| u32::from(*b)).sum();
            block[148..155].copy_from_slice(format!("{sum:06o}\0").as_bytes());
        }
    }
    if fixed != data {
        layer_walk_once(&fixed);
    }
}

fn layer_walk_once(data: &[u8]) {
    use rancheros_operator::registry::layers::{self, Bounds, Found, LayerError};
    use rancheros_operator::registry::manifest::Compression;
    use rancheros_operator::registry::sha256;
    use std::io::Write;

    const MAX_FILE: u64 = 64;
    const BUDGET: u64 = 64 << 10;
    let search = |blob: &[u8], c: Compression| {
        let mut bounds = Bounds {
            max_file: MAX_FILE,
            layer_budget: BUDGET,
            layer_limit: BUDGET,
            // (changelogs collected on the way: the walk then reads a layer to its end)
            changelogs: Some(Default::default()),
        };
        let found = layers::search(
            blob,
            c,
            "/channel.json",
            &sha256(blob),
            blob.len() as u64,
            &mut bounds,
        );
        // Within the bounds whatever the bytes.
        assert!(bounds.layer_budget <= BUDGET, "{c:?}");
        if let Ok(Found::File(file)) = &found {
            assert!(file.len() as u64 <= MAX_FILE, "{c:?}: {} bytes", file.len());
        }
        (found, bounds.layer_budget)
    };

    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(data).expect("a Vec takes every write");
    let gz = gz.finish().expect("a Vec takes every write");
    let zst = ruzstd::encoding::compress_to_vec(data, ruzstd::encoding::CompressionLevel::Fastest);

    // The same tar stream says the same thing however it is compressed, and as much of the
    // budget is read: only the kind named in a corrupt stream's message differs.
    let plain = search(data, Compression::None);
    for (blob, c) in [(gz, Compression::Gzip), (zst, Compression::Zstd)] {
        let other = search(&blob, c);
        match (&plain.0, &other.0) {
            (Ok(a), Ok(b)) => assert_eq!(a, b, "{c:?}"),
            (Err(LayerError::Corrupt { why: a, .. }), Err(LayerError::Corrupt { why: b, .. })) => {
                assert_eq!(a, b, "{c:?}")
            }
            (Err(a), Err(b)) => assert_eq!(
                a.to_string().replace(&sha256(data), ""),
                b.to_string().replace(&sha256(&blob), ""),
                "{c:?}"
            ),
            (a, b) => panic!("plain {a:?} but {c:?} {b:?}"),
        }
        assert_eq!(plain.1, other.1, "{c:?}: budget left");
    }

    // The bytes as a compressed blob: no panic, within the bounds.
    let _ = search(data, Compression::Gzip);
    let _ = search(data, Compression::Zstd);
}

/// `mirror`'s rewriting of channel data: every image the data names (an `upgradeImage`, an
/// iso's `uri` that is an image reference) that a runtime reads is rewritten to a DEST
/// prefix, pinned by digest; each rewritten reference parses, names DEST and that digest,
/// and nothing else in the data changes.
pub fn mirror_rewrite(data: &[u8]) {
    use rancheros_operator::channel::images;
    use rancheros_operator::commands::mirror::plan;
    use rancheros_operator::reference::Reference;
    let Ok(value) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let found = images::images(&value);
    for prefix in [
        "registry.site.lan/os",
        "127.0.0.1:5000",
        "site.example:8443/a/b-c",
    ] {
        let rewritten_to = |reference: &str| -> Option<(String, String)> {
            let image = plan::image(reference).ok()?;
            let digest = format!(
                "sha256:{}",
                reference
                    .bytes()
                    .chain(prefix.bytes())
                    .map(|b| format!("{:02x}", b % 16))
                    .chain(std::iter::repeat("0".into()))
                    .take(64)
                    .collect::<String>()
                    .get(..64)
                    .unwrap_or_default()
            );
            Some((plan::dest_reference(prefix, &image, &digest), digest))
        };
        let mut out = value.clone();
        images::rewrite(&mut out, |f| rewritten_to(&f.reference).map(|(r, _)| r));
        let after = images::images(&out);
        assert_eq!(after.len(), found.len(), "the fields found changed: {out}");
        for (before, now) in found.iter().zip(&after) {
            assert_eq!((before.index, before.field), (now.index, now.field));
            match rewritten_to(&before.reference) {
                None => assert_eq!(now.reference, before.reference, "left as it was"),
                Some((_, digest)) => {
                    let parsed = Reference::parse(&now.reference)
                        .unwrap_or_else(|e| panic!("{:?} does not parse: {e}", now.reference));
                    assert!(
                        now.reference.starts_with(&format!("{prefix}/")),
                        "{:?} is not under {prefix}",
                        now.reference
                    );
                    assert_eq!(parsed.digest.as_deref(), Some(digest.as_str()));
                    assert_eq!(
                        format!("{}/{}", parsed.registry, parsed.repository),
                        now.reference.split('@').next().unwrap_or_default(),
                        "{:?} names another repository",
                        now.reference
                    );
                }
            }
        }
        // Nothing but those fields changed.
        let mut back = out.clone();
        let originals: std::collections::HashMap<(usize, &str), String> = found
            .iter()
            .map(|f| ((f.index, f.field), f.reference.clone()))
            .collect();
        images::rewrite(&mut back, |f| originals.get(&(f.index, f.field)).cloned());
        assert_eq!(
            back, value,
            "the rewrite changed more than the image fields"
        );
    }
}

/// Channel policy (`spec.versions`): its first line is a policy (JSON), the rest channel
/// data. Compiling never panics; applied, every listed version is published or held back
/// (never both, never lost), the newest is published and no published version is newer,
/// the counts add up, and a glob always matches its own text (when the text is short enough
/// to be matched at all: 253 characters).
pub fn policy_apply(data: &[u8]) {
    use rancheros_operator::policy::{self, Policy, semver};
    let text = String::from_utf8_lossy(data);
    let (first, rest) = text.split_once('\n').unwrap_or((&text, ""));
    let _ = semver::Range::parse(first);
    let _ = semver::Version::parse(first);
    assert!(
        !policy::matchable(first) || policy::glob(first, first),
        "{first:?} does not match itself"
    );
    let Ok(spec) = serde_json::from_str(first) else {
        return;
    };
    let Ok(p) = Policy::compile(&spec) else {
        return;
    };
    let Ok(parsed) = channel::parse(rest.as_bytes()) else {
        return;
    };
    let items = parsed.versions;
    let now: k8s_openapi::jiff::Timestamp = "2026-12-03T12:00:00Z".parse().unwrap();
    let a = policy::apply(&p, items.clone(), &HashSet::new(), &Default::default(), now);
    assert_eq!(
        a.published.len() + a.held.len(),
        items.len(),
        "lost or doubled"
    );
    for i in &a.published {
        assert!(
            !a.held.contains_key(&i.name),
            "{} published and held",
            i.name
        );
    }
    assert_eq!(
        a.counts().values().sum::<i64>(),
        a.held.len() as i64,
        "the counts"
    );
    match &a.latest {
        // None: no published version is semver.
        None => assert!(a.published.iter().all(|i| {
            i.spec
                .version
                .as_deref()
                .and_then(semver::Version::parse)
                .is_none()
                && semver::Version::parse(&i.name).is_none()
        })),
        Some(latest) => {
            let newest = a
                .published
                .iter()
                .find(|i| &i.name == latest)
                .expect("published");
            for i in &a.published {
                assert_ne!(
                    policy::newest_first(i, newest),
                    std::cmp::Ordering::Less,
                    "{} is newer than the latest {latest}",
                    i.name
                );
            }
        }
    }
}

/// `channel_server_answer`: the first line is a request's path and query, the second its
/// `If-None-Match`, the rest channel data published by channel `ns/ch`; the channel server
/// answers it from its store.
pub fn channel_server_answer(data: &[u8]) {
    use rancheros_operator::api::ManagedOSVersion;
    use rancheros_operator::channel_server::{Entry, Request, Store, answer};
    let text = String::from_utf8_lossy(data);
    let mut lines = text.splitn(3, '\n');
    let target = lines.next().unwrap_or_default();
    let inm = lines.next().filter(|l| !l.is_empty());
    let rest = lines.next().unwrap_or_default();
    let (path, query) = match target.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (target, None),
    };
    let items = channel::parse(rest.as_bytes())
        .map(|p| p.versions)
        .unwrap_or_default();
    let versions: Vec<ManagedOSVersion> = items
        .iter()
        .map(|i| {
            let mut v = ManagedOSVersion::new(&i.name, i.spec.clone());
            v.metadata.labels = Some(i.labels.clone());
            v.metadata.annotations = Some(i.annotations.clone());
            v
        })
        .collect();
    let entry = Entry::render(&versions);
    let etag = entry.etag.clone();
    let store = std::sync::Arc::new(Store::new(64 << 20));
    let _active = store.activate();
    store.publish(("ns".into(), "ch".into()), entry.clone());
    let request = Request {
        method: "GET",
        path,
        query,
        if_none_match: inm,
    };
    let a = answer(&store, request);
    // The body always reads back as the versions, by name.
    let back = channel::parse(&entry.body).expect("the served body is channel data");
    let mut names: Vec<&str> = items.iter().map(|i| i.name.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    let served: Vec<&str> = back.versions.iter().map(|i| i.name.as_str()).collect();
    assert_eq!(served, names, "the served names");
    assert_ne!(a.status, 503, "an active store with room answered 503");
    match a.status {
        304 => assert!(
            inm.is_some_and(|h| h.split(',').any(|t| {
                let t = t.trim();
                t == "*" || t.trim_start_matches("W/") == etag
            })),
            "304 without a matching If-None-Match"
        ),
        302 => {
            let location = a.header("location").expect("a Location");
            let tag = location.rsplit('/').next().unwrap_or_default();
            assert!(
                entry.items.iter().any(|i| i.tag.as_deref() == Some(tag)),
                "{location} names no served tag"
            );
        }
        _ => {}
    }
}
