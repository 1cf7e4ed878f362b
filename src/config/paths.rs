//! Paths and quoted values of a channel's options: where the output volume may be mounted,
//! and how a tenant's value appears in a message.

/// Where the `display` binary lives in the operator's image: the output volume, mounted in
/// `display` too, must not cover it (the runner could replace it).
pub const DISPLAY_BIN_DIR: &str = "/usr/local/bin";
/// Directories the output volume may not be mounted on or above: the system's, in both
/// containers. Below `/dev`, `/proc` and `/sys` is refused as well.
const SYSTEM_PATHS: [&str; 10] = [
    "/",
    "/bin",
    "/sbin",
    "/usr",
    "/usr/bin",
    DISPLAY_BIN_DIR,
    "/etc",
    "/dev",
    "/proc",
    "/sys",
];

/// Why a (clean, absolute) mount path would cover a system directory or `display`.
pub(super) fn mount_path_problem(path: &str) -> Option<String> {
    let below = |dir: &str| path.strip_prefix(dir).is_some_and(|r| r.starts_with('/'));
    let above = |dir: &str| dir.strip_prefix(path).is_some_and(|r| r.starts_with('/'));
    let covered = SYSTEM_PATHS
        .iter()
        .find(|dir| path == **dir || above(dir))
        .or_else(|| ["/dev", "/proc", "/sys"].iter().find(|dir| below(dir)))?;
    Some(if *covered == DISPLAY_BIN_DIR {
        format!(
            "would cover {DISPLAY_BIN_DIR}, where the syncer pod's display binary lives; mount the output volume elsewhere (default /data)"
        )
    } else {
        format!(
            "would cover the system directory {covered}; mount the output volume elsewhere (default /data)"
        )
    })
}

/// The most bytes of a tenant's value quoted in a message: the rest of the message (the
/// rule, the fix) must fit in the status's bound.
pub(super) const QUOTE_BYTES: usize = 200;

/// A value of the spec quoted for a message: cut, without control characters.
pub(super) fn quote(s: &str) -> String {
    format!("{:?}", crate::text::clean(s, QUOTE_BYTES))
}

/// Normalises an absolute path (`.`, `..`, repeated and trailing `/`); `None` when relative
/// or when `..` climbs above the root.
pub(super) fn clean_path(path: &str) -> Option<String> {
    if !path.starts_with('/') {
        return None;
    }
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            p => parts.push(p),
        }
    }
    Some(format!("/{}", parts.join("/")))
}
