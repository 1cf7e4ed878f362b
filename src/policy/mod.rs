//! Channel policy (`spec.versions`): which listed versions a channel publishes, their
//! order, and the newest. Pure: the operator's sync and `validate --policy` both call
//! [`apply`], so they agree.
//!
//! The rules run in this order, and a version is counted under the first that holds it
//! back: `platforms`, `include`, `exclude`, `minAge`, `keep`. The policy never deletes:
//! a version it holds back is not created, and one that exists is flagged.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

use crate::api::VersionsPolicy;
use crate::channel::ChannelVersion;
use crate::platform::Platform;

pub mod semver;

use semver::{Range, Version};

mod glob;
pub use glob::{Glob, glob};

/// At most this many versions are timed for `minAge` at once (`status.firstSeen`).
pub const MAX_FIRST_SEEN: usize = 512;
const MAX_PATTERNS: usize = 32;
const MAX_PATTERN_BYTES: usize = 256;
/// The longest text a pattern is matched against: a Kubernetes name's length, and more
/// than any real version (an image tag is at most 128). A longer name or version is matched
/// by no pattern and is no semver, whatever the data: a pattern costs at most its length
/// times this many steps per text (a `spec.version` may otherwise be 1 MiB).
pub const MAX_MATCHED_CHARS: usize = 253;

/// Whether `text` is at most [`MAX_MATCHED_CHARS`] characters (reads at most one more).
pub fn matchable(text: &str) -> bool {
    text.chars().nth(MAX_MATCHED_CHARS).is_none()
}

/// A rule of the policy, as the status and reports name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Rule {
    Platforms,
    Include,
    Exclude,
    MinAge,
    Keep,
}

impl Rule {
    pub fn key(self) -> &'static str {
        match self {
            Rule::Platforms => "platforms",
            Rule::Include => "include",
            Rule::Exclude => "exclude",
            Rule::MinAge => "minAge",
            Rule::Keep => "keep",
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
enum Pattern {
    Range(Range),
    Glob(Glob),
}

impl Pattern {
    fn matches(&self, item: &ChannelVersion) -> bool {
        let version = item.spec.version.as_deref();
        match self {
            Pattern::Range(r) => version
                .and_then(Version::parse)
                .is_some_and(|v| r.holds(&v)),
            Pattern::Glob(g) => g.matches(&item.name) || version.is_some_and(|v| g.matches(v)),
        }
    }
}

/// A checked `spec.versions`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Policy {
    platforms: Vec<Platform>,
    include: Vec<Pattern>,
    exclude: Vec<Pattern>,
    pub min_age: Option<Duration>,
    keep: Option<usize>,
}

impl Policy {
    /// Checks a `spec.versions`; the error names the field (`spec.versions.include[1]`).
    pub fn compile(spec: &VersionsPolicy) -> Result<Policy, String> {
        let field = |f: &str| format!("spec.versions.{f}");
        let patterns = |name: &str, list: &[String]| -> Result<Vec<Pattern>, String> {
            if list.len() > MAX_PATTERNS {
                return Err(format!("{}: more than {MAX_PATTERNS}", field(name)));
            }
            list.iter()
                .enumerate()
                .map(|(i, p)| {
                    let at = field(&format!("{name}[{i}]"));
                    let p = p.trim();
                    if p.is_empty() || p.len() > MAX_PATTERN_BYTES {
                        return Err(format!("{at}: empty or over {MAX_PATTERN_BYTES} bytes"));
                    }
                    if p.starts_with(['<', '>', '=']) {
                        Range::parse(p)
                            .map(Pattern::Range)
                            .map_err(|e| format!("{at}: {e}"))
                    } else {
                        Ok(Pattern::Glob(Glob::new(p)))
                    }
                })
                .collect()
        };
        if spec.platforms.len() > MAX_PATTERNS {
            return Err(format!("{}: more than {MAX_PATTERNS}", field("platforms")));
        }
        let platforms = spec
            .platforms
            .iter()
            .enumerate()
            .map(|(i, p)| {
                Platform::loose(p).ok_or_else(|| {
                    format!(
                        "{}: {:?} is not a platform; use os/arch, like linux/arm64",
                        field(&format!("platforms[{i}]")),
                        crate::text::head(p, 64)
                    )
                })
            })
            .collect::<Result<_, _>>()?;
        let min_age = spec
            .min_age
            .as_deref()
            .map(|t| {
                let d =
                    crate::duration::parse(t).map_err(|e| format!("{}: {e}", field("minAge")))?;
                if d > Duration::from_secs(366 * 24 * 3600) {
                    return Err(format!("{}: longer than a year", field("minAge")));
                }
                Ok(d)
            })
            .transpose()?
            .filter(|d| !d.is_zero());
        let keep = match spec.keep {
            Some(0) => return Err(format!("{}: at least 1", field("keep"))),
            k => k.and_then(|k| usize::try_from(k).ok()),
        };
        Ok(Policy {
            platforms,
            include: patterns("include", &spec.include)?,
            exclude: patterns("exclude", &spec.exclude)?,
            min_age,
            keep,
        })
    }
}

/// Whether an entry's free-form `platforms` keeps it: no such key (or not a list of
/// strings) keeps it, else one of its platforms must be wanted.
fn platform_kept(wanted: &[Platform], item: &ChannelVersion) -> bool {
    let listed = item
        .spec
        .metadata
        .as_ref()
        .and_then(|m| m.get("platforms"))
        .and_then(|p| p.as_array());
    let Some(listed) = listed else {
        return true;
    };
    let platforms: Vec<_> = listed
        .iter()
        .filter_map(|p| p.as_str().and_then(Platform::loose))
        .collect();
    if platforms.is_empty() && !listed.is_empty() {
        return true;
    }
    platforms
        .iter()
        .any(|p| wanted.iter().any(|w| w.same_machine(p)))
}

/// Whether `item` runs on the platform `text` (`os/arch`) as the `platforms` rule judges
/// it (an entry without the key runs anywhere); `None`: `text` is no platform. The channel
/// server's `?platform=` narrows with it.
pub fn runs_on(text: &str, item: &ChannelVersion) -> Option<bool> {
    let wanted = Platform::loose(text)?;
    Some(platform_kept(std::slice::from_ref(&wanted), item))
}

/// The newest of `items` by [`newest_first`], when it is semver (else "newest" would mean
/// nothing): `status.latestVersion`, and the channel server's `/latest`.
pub fn newest<'a>(
    items: impl IntoIterator<Item = &'a ChannelVersion>,
) -> Option<&'a ChannelVersion> {
    items
        .into_iter()
        .min_by(|a, b| newest_first(a, b))
        .filter(|i| order_key(i).is_some())
}

/// The order of versions, newest first: by semver of `spec.version` (else of the name),
/// then those that are not semver, by name; ties by name. Total and stable.
pub fn newest_first(a: &ChannelVersion, b: &ChannelVersion) -> Ordering {
    match (order_key(a), order_key(b)) {
        (Some(x), Some(y)) => y.cmp(&x),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => Ordering::Equal,
    }
    .then_with(|| a.name.cmp(&b.name))
}

fn order_key(item: &ChannelVersion) -> Option<Version> {
    item.spec
        .version
        .as_deref()
        .and_then(Version::parse)
        .or_else(|| Version::parse(&item.name))
}

/// What the policy made of a listing.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Applied {
    /// The entries published, in the source's order.
    pub published: Vec<ChannelVersion>,
    /// Names held back, each with the first rule that held it.
    pub held: BTreeMap<String, Rule>,
    /// `status.firstSeen` as it should be now.
    pub first_seen: BTreeMap<String, Timestamp>,
    /// The name of the newest version published (none is semver: `None`).
    pub latest: Option<String>,
    /// When the next version `minAge` holds comes of age.
    pub ripens_in: Option<Duration>,
    /// Names of versions whose name or `spec.version` is over [`MAX_MATCHED_CHARS`]
    /// characters, when the policy has `include` or `exclude` patterns: no pattern matched
    /// that text.
    pub unmatched: BTreeSet<String>,
}

impl Applied {
    /// How many each rule held back (the status's `heldBack`).
    pub fn counts(&self) -> BTreeMap<String, i64> {
        let mut counts = BTreeMap::new();
        for rule in self.held.values() {
            let n: &mut i64 = counts.entry(rule.key().to_string()).or_default();
            *n = n.saturating_add(1);
        }
        counts
    }

    /// `3 held back by spec.versions (keep 2, platforms 1)`, and how many texts were too
    /// long for the patterns; or nothing.
    pub fn summary(&self) -> Option<String> {
        let mut said = Vec::new();
        if !self.held.is_empty() {
            let parts: Vec<String> = self
                .counts()
                .iter()
                .map(|(k, n)| format!("{k} {n}"))
                .collect();
            said.push(format!(
                "{} held back by spec.versions ({})",
                self.held.len(),
                parts.join(", ")
            ));
        }
        if !self.unmatched.is_empty() {
            said.push(format!(
                "{} with a name or version over {MAX_MATCHED_CHARS} characters, which no pattern matches",
                self.unmatched.len()
            ));
        }
        (!said.is_empty()).then(|| said.join("; "))
    }
}

/// Applies `policy` to what the source listed. `exists`: the names of versions the channel
/// already has (`minAge` delays only what is new); `first_seen`: the status's record;
/// `now`: the decision's clock.
pub fn apply(
    policy: &Policy,
    items: &[ChannelVersion],
    exists: &HashSet<String>,
    first_seen: &BTreeMap<String, Timestamp>,
    now: Timestamp,
) -> Applied {
    let mut out = Applied::default();
    let mut candidates = Vec::new();
    let mut timed = Vec::new();
    let patterns = !policy.include.is_empty() || !policy.exclude.is_empty();
    for item in items {
        let long =
            !matchable(&item.name) || item.spec.version.as_deref().is_some_and(|v| !matchable(v));
        if patterns && long {
            out.unmatched.insert(item.name.clone());
        }
        let rule = if !policy.platforms.is_empty() && !platform_kept(&policy.platforms, item) {
            Some(Rule::Platforms)
        } else if !policy.include.is_empty() && !policy.include.iter().any(|p| p.matches(item)) {
            Some(Rule::Include)
        } else if policy.exclude.iter().any(|p| p.matches(item)) {
            Some(Rule::Exclude)
        } else {
            None
        };
        match rule {
            Some(r) => {
                out.held.insert(item.name.clone(), r);
            }
            None => match policy.min_age {
                Some(age) if !exists.contains(&item.name) => timed.push((item, age)),
                _ => candidates.push(item.clone()),
            },
        }
    }
    // The oldest first seen keep their places when there are more than the status holds.
    timed.sort_by_key(|(item, _)| {
        (
            first_seen.get(&item.name).copied().unwrap_or(now),
            item.name.clone(),
        )
    });
    for (item, age) in timed {
        let seen = match first_seen.get(&item.name) {
            Some(t) => Some(*t),
            None if out.first_seen.len() < MAX_FIRST_SEEN => Some(now),
            None => None,
        };
        // (a time ahead of the clock counts as just seen)
        let waited = seen.map(|t| {
            let d = now.duration_since(t);
            if d.is_negative() {
                Duration::ZERO
            } else {
                d.unsigned_abs()
            }
        });
        match waited {
            Some(w) if w >= age => candidates.push(item.clone()),
            _ => {
                if let Some(t) = seen
                    && out.first_seen.len() < MAX_FIRST_SEEN
                {
                    out.first_seen.insert(item.name.clone(), t);
                    let left = age.saturating_sub(waited.unwrap_or_default());
                    out.ripens_in = Some(out.ripens_in.map_or(left, |r| r.min(left)));
                }
                out.held.insert(item.name.clone(), Rule::MinAge);
            }
        }
    }
    candidates.sort_by(newest_first);
    if let Some(keep) = policy.keep {
        let mut versions_kept: HashSet<String> = HashSet::new();
        candidates.retain(|item| {
            // Entries of one version (an OS image and its ISO) count once.
            let key = item
                .spec
                .version
                .clone()
                .unwrap_or_else(|| item.name.clone());
            if versions_kept.contains(&key) {
                return true;
            }
            if versions_kept.len() < keep {
                versions_kept.insert(key);
                return true;
            }
            out.held.insert(item.name.clone(), Rule::Keep);
            false
        });
    }
    // (none when no published version is semver: "newest" would mean nothing)
    out.latest = newest(&candidates).map(|i| i.name.clone());
    // Written in the source's order, as without a policy.
    let place: std::collections::HashMap<&str, usize> = items
        .iter()
        .enumerate()
        .map(|(n, i)| (i.name.as_str(), n))
        .collect();
    candidates.sort_by_key(|i| place.get(i.name.as_str()).copied());
    out.published = candidates;
    out
}

#[cfg(test)]
mod tests;
