use super::*;

#[test]
fn sources_and_destinations_are_told_apart() {
    for (text, parsed) in [
        ("dir:bundle", Some(Source::Dir("bundle".into()))),
        (
            "https://example.com/c.json",
            Some(Source::Url("https://example.com/c.json".into())),
        ),
        (
            "registry.example/os/channel:v1",
            Some(Source::Oci("registry.example/os/channel:v1".into())),
        ),
        // No tag.
        ("registry.example/os/channel", None),
    ] {
        assert_eq!(source(text).ok(), parsed, "{text}");
    }
    for (text, parsed) in [
        (
            "registry.site.lan/os/",
            Some(Dest::Registry("registry.site.lan/os".into())),
        ),
        (
            "127.0.0.1:5000",
            Some(Dest::Registry("127.0.0.1:5000".into())),
        ),
        ("dir:/tmp/b", Some(Dest::Dir("/tmp/b".into()))),
        ("dir:", None),
        // A bare word names no registry.
        ("os", None),
        ("Registry.Example/UPPER", None),
    ] {
        assert_eq!(dest(text).ok(), parsed, "{text}");
    }
}

#[test]
fn images_resolve_as_a_runtime_reads_them() {
    let i = image("busybox").unwrap();
    assert_eq!(i.to_string(), "registry-1.docker.io/library/busybox:latest");
    let i = image("registry.suse.com/suse/os:6.1").unwrap();
    assert_eq!(i.repository, "suse/os");
    assert_eq!(
        dest_repo("site.lan/os", &i.repository),
        "site.lan/os/suse/os"
    );
}

#[test]
fn the_channel_keeps_its_path_and_tag_or_is_named_by_its_data() {
    let oci = Source::Oci("r.example/rancher/channels/sl-micro:2.1".into());
    assert_eq!(channel_name(&oci, b"[]"), "rancher/channels/sl-micro:2.1");
    let file = Source::File("/tmp/SL Micro 6.1.json".into());
    let a = channel_name(&file, b"[1]");
    assert!(a.starts_with("sl-micro-6:data-"), "{a}");
    assert_ne!(a, channel_name(&file, b"[2]"), "other data, another tag");
    assert_eq!(a, channel_name(&file, b"[1]"));
    let url = Source::Url("https://h.example/c/channel.json?x=1".into());
    assert!(channel_name(&url, b"[]").starts_with("channel:data-"));
    assert_eq!(object_name("rancher/channels/sl-micro"), "sl-micro");
    assert_eq!(object_name("a/B_c.d"), "b-c-d");
}

#[test]
fn an_index_narrowed_to_platforms_keeps_only_their_entries() {
    let index = json!({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
    "manifests": [
        {"digest": "sha256:a", "size": 1, "platform": {"os": "linux", "architecture": "amd64"}},
        {"digest": "sha256:b", "size": 1, "platform": {"os": "linux", "architecture": "arm64"},
            "annotations": {"k": "v"}},
        {"digest": "sha256:c", "size": 1, "platform": {"os": "linux", "architecture": "s390x"}},
    ]})
    .to_string();
    let p = |t: &str| crate::config::Platform::parse(t).unwrap();
    let narrowed = narrow_index(
        index.as_bytes(),
        None,
        &[p("linux/arm64"), p("linux/amd64")],
    )
    .unwrap()
    .unwrap();
    let v: Value = serde_json::from_slice(&narrowed).unwrap();
    let kept: Vec<&str> = v["manifests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["digest"].as_str().unwrap())
        .collect();
    assert_eq!(kept, ["sha256:a", "sha256:b"], "in the index's order");
    assert_eq!(v["manifests"][1]["annotations"]["k"], "v");
    let e = narrow_index(index.as_bytes(), None, &[p("linux/riscv64")]).unwrap_err();
    assert!(
        e.contains("linux/amd64, linux/arm64") || e.contains("linux/amd64"),
        "{e}"
    );
    let image = br#"{"mediaType":"application/vnd.oci.image.manifest.v1+json","layers":[]}"#;
    assert_eq!(
        narrow_index(image, None, &[p("linux/arm64")]).unwrap(),
        None
    );
}

#[test]
fn the_artifact_is_what_oci_channels_read() {
    let m: Value = serde_json::from_slice(&artifact(b"[]")).unwrap();
    assert_eq!(m["artifactType"], CHANNEL_TYPE);
    assert_eq!(m["layers"][0]["mediaType"], CHANNEL_TYPE);
    assert_eq!(m["layers"][0]["digest"], crate::registry::sha256(b"[]"));
    assert_eq!(m["config"]["digest"], crate::registry::sha256(EMPTY));
    assert_eq!(size(512), "512 B");
    assert_eq!(size(3 << 20), "3.0 MiB");
}
