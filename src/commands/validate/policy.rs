//! `validate --policy FILE`: what a channel's `spec.versions` would publish of the data,
//! by the operator's own rules (`crate::policy`), as a channel created now would.

use std::collections::{BTreeMap, HashSet};
use std::io::Write;
use std::path::Path;

use serde::Serialize;
use serde_json::Value;

use crate::api::VersionsPolicy;
use crate::policy::{self, Policy};

/// The largest policy file read.
const MAX_POLICY_BYTES: u64 = 1 << 20;
/// At most this many held-back versions are named in the text output (json names all).
const NAMED: usize = 20;

/// Reads a policy: a `spec.versions` object, or a whole `ManagedOSVersionChannel` (its
/// `spec.versions`), in YAML or JSON.
pub fn load(path: &Path) -> Result<Policy, String> {
    use std::io::Read;
    let shown = path.display();
    let mut data = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| {
            f.take(MAX_POLICY_BYTES.saturating_add(1))
                .read_to_end(&mut data)
        })
        .map_err(|e| format!("cannot read the policy {shown}: {e}"))?;
    if data.len() as u64 > MAX_POLICY_BYTES {
        return Err(format!("the policy {shown} is over 1 MiB"));
    }
    let text = String::from_utf8(data).map_err(|_| format!("the policy {shown} is not UTF-8"))?;
    let doc: Value = serde_saphyr::from_str(&text).map_err(|e| {
        format!(
            "the policy {shown} is not YAML or JSON: {}",
            first_line(&e.to_string())
        )
    })?;
    let versions = match (doc.pointer("/spec/versions"), doc.get("kind")) {
        (Some(v), _) => v.clone(),
        (None, Some(kind)) => {
            return Err(format!(
                "the policy {shown} is a {kind} without spec.versions"
            ));
        }
        (None, None) => doc,
    };
    let spec: VersionsPolicy = serde_json::from_value(versions)
        .map_err(|e| format!("the policy {shown}: spec.versions: {e}"))?;
    Policy::compile(&spec).map_err(|e| format!("the policy {shown}: {e}"))
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or(s)
}

/// What the policy makes of one valid input.
#[derive(Debug, Serialize)]
pub struct PolicyReport {
    pub published: usize,
    /// The name of the newest version published.
    pub latest: Option<String>,
    /// How many each rule holds back.
    pub held_back: BTreeMap<String, i64>,
    /// Each version held back, with the rule (in the data's order).
    pub held: Vec<Held>,
    /// Versions whose name or `spec.version` is too long for any pattern to match (in the
    /// data's order; only when the policy has `include` or `exclude`).
    pub unmatched: Vec<String>,
}

#[derive(Debug, Serialize)]
pub struct Held {
    pub name: String,
    pub rule: &'static str,
}

/// The policy over `data` (valid channel data), as the first sync of a new channel.
pub fn report(policy: &Policy, data: &[u8]) -> Option<PolicyReport> {
    let items = crate::channel::parse(data).ok()?.versions;
    let now = k8s_openapi::jiff::Timestamp::now();
    let applied = policy::apply(policy, &items, &HashSet::new(), &BTreeMap::new(), now);
    let held = items
        .iter()
        .filter_map(|i| {
            applied.held.get(&i.name).map(|r| Held {
                name: i.name.clone(),
                rule: r.key(),
            })
        })
        .collect();
    let unmatched = items
        .iter()
        .filter(|i| applied.unmatched.contains(&i.name))
        .map(|i| i.name.clone())
        .collect();
    Some(PolicyReport {
        published: applied.published.len(),
        latest: applied.latest.clone(),
        held_back: applied.counts(),
        held,
        unmatched,
    })
}

pub fn write_text(out: &mut impl Write, file: &str, r: &PolicyReport) -> std::io::Result<()> {
    let held: Vec<String> = r
        .held_back
        .iter()
        .map(|(k, n)| format!("{k} {n}"))
        .collect();
    let held = if held.is_empty() {
        "none held back".to_string()
    } else {
        format!("{} held back ({})", r.held.len(), held.join(", "))
    };
    let latest = r
        .latest
        .as_deref()
        .map(|l| format!("; newest: {l}"))
        .unwrap_or_default();
    writeln!(
        out,
        "{file}: policy: {} published, {held}{latest}",
        r.published
    )?;
    for h in r.held.iter().take(NAMED) {
        writeln!(out, "  held back: {} ({})", h.name, h.rule)?;
    }
    more(out, r.held.len())?;
    for name in r.unmatched.iter().take(NAMED) {
        writeln!(
            out,
            "  not matched: {name} (its name or version is over {} characters; no pattern matches it)",
            policy::MAX_MATCHED_CHARS
        )?;
    }
    more(out, r.unmatched.len())
}

/// The line after the first [`NAMED`] of `listed`, if there were more.
fn more(out: &mut impl Write, listed: usize) -> std::io::Result<()> {
    if listed > NAMED {
        writeln!(
            out,
            "  ... and {} more (--format json lists all)",
            listed.saturating_sub(NAMED)
        )?;
    }
    Ok(())
}
