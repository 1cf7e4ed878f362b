//! The Kubernetes rules for object names, label and annotation keys, and label values.

// Channel data is untrusted input: no indexing that could panic (checked access only).
#![cfg_attr(not(test), deny(clippy::indexing_slicing))]

/// Why `name` is not a DNS-1123 subdomain (the rule for Kubernetes object names), if it isn't.
pub fn dns1123_subdomain_problem(name: &str) -> Option<String> {
    if name.is_empty() {
        return Some("must not be empty".into());
    }
    if name.len() > 253 {
        return Some(format!(
            "must be at most 253 characters, has {}",
            name.len()
        ));
    }
    for part in name.split('.') {
        if part.is_empty() {
            return Some("must not have empty parts between dots".into());
        }
        if let Some(c) = part
            .chars()
            .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-'))
        {
            return Some(format!(
                "{c:?} is not allowed: use lower-case letters, digits, '-' and '.'"
            ));
        }
        if part.starts_with('-') || part.ends_with('-') {
            return Some("must start and end with a letter or digit".into());
        }
    }
    None
}

/// Kubernetes "qualified name" rule for label and annotation keys: `[prefix/]name`.
pub(super) fn qualified_name_problem(k: &str) -> Option<String> {
    let (prefix, name) = match k.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, k),
    };
    if let Some(p) = prefix
        && let Some(why) = dns1123_subdomain_problem(p)
    {
        return Some(format!("prefix {why}"));
    }
    if name.is_empty() || name.len() > 63 {
        return Some("the name part must be 1 to 63 characters".into());
    }
    name_part_problem(name)
}

pub(super) fn label_value_problem(v: &str) -> Option<String> {
    if v.is_empty() {
        return None;
    }
    if v.len() > 63 {
        return Some("must be at most 63 characters".into());
    }
    name_part_problem(v)
}

fn name_part_problem(s: &str) -> Option<String> {
    let ok = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    if let Some(c) = s.chars().find(|c| !ok(*c)) {
        return Some(format!("{c:?} is not allowed"));
    }
    let edge_ok = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    if !edge_ok(s.chars().next()) || !edge_ok(s.chars().last()) {
        return Some("must start and end with a letter or digit".into());
    }
    None
}
