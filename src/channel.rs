//! Channel data: the JSON array of versions a channel produces, and the rules it must
//! follow. This is the one implementation of those rules: `validate` reports what
//! [`check`] finds, the operator refuses a sync when [`parse`] fails.

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use serde_json::{Map, Value};

use crate::api::ManagedOSVersionSpec;

/// Metadata keys a channel item may carry that are copied to the version.
const KEPT_METADATA: [&str; 3] = ["name", "labels", "annotations"];
/// Item keys accepted without a warning: they are natural in a copied Kubernetes object.
const QUIET_ITEM_KEYS: [&str; 4] = ["apiVersion", "kind", "metadata", "spec"];
const SPEC_KEYS: [&str; 5] = [
    "version",
    "type",
    "minVersion",
    "metadata",
    "upgradeContainer",
];
/// The API server refuses objects much above 1 MiB (etcd's limit is 1.5 MiB).
pub const MAX_ITEM_BYTES: usize = 1024 * 1024;

/// One version as the channel lists it, checked and ready to become a `ManagedOSVersion`.
#[derive(Clone, Debug, PartialEq)]
pub struct ChannelVersion {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub spec: ManagedOSVersionSpec,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Error,
    Warning,
}

/// One problem found in channel data, with where it is.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Diagnostic {
    pub severity: Severity,
    /// JSON path of the offending value, like `[1].spec.type`; empty for the whole document.
    pub path: String,
    /// 1-based line and column of the offending value (or of the syntax error).
    pub line: usize,
    pub column: usize,
    pub message: String,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}, column {}: ", self.line, self.column)?;
        if !self.path.is_empty() {
            write!(f, "{}: ", self.path)?;
        }
        f.write_str(&self.message)
    }
}

/// Everything [`check`] found: the versions (complete only when there are no errors) and
/// every diagnostic, in document order.
#[derive(Debug, Default)]
pub struct Report {
    pub versions: Vec<ChannelVersion>,
    pub diagnostics: Vec<Diagnostic>,
}

impl Report {
    pub fn errors(&self) -> impl Iterator<Item = &Diagnostic> {
        self.diagnostics
            .iter()
            .filter(|d| d.severity == Severity::Error)
    }
    pub fn is_valid(&self) -> bool {
        self.errors().next().is_none()
    }
}

/// Channel data that breaks a rule: the first errors, for a status message.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("invalid channel data: {first}{more}", more = more_suffix(*.total))]
pub struct InvalidChannelData {
    pub first: Diagnostic,
    pub total: usize,
}

fn more_suffix(total: usize) -> String {
    match total {
        0 | 1 => String::new(),
        2 => " (and 1 more problem; run `rancheros-operator validate` on the data for all)".into(),
        n => format!(
            " (and {} more problems; run `rancheros-operator validate` on the data for all)",
            n - 1
        ),
    }
}

/// Parses channel data for a sync: the versions, or the reason the whole sync must fail.
pub fn parse(data: &[u8]) -> Result<Vec<ChannelVersion>, InvalidChannelData> {
    let report = check(data);
    let total = report.errors().count();
    let first = report.errors().next().cloned();
    match first {
        None => Ok(report.versions),
        Some(first) => Err(InvalidChannelData { first, total }),
    }
}

/// Applies every rule to `data` and reports every problem.
pub fn check(data: &[u8]) -> Report {
    let mut report = Report::default();
    let root: Value = match serde_json::from_slice(data) {
        Ok(v) => v,
        Err(e) => {
            report.diagnostics.push(Diagnostic {
                severity: Severity::Error,
                path: String::new(),
                line: e.line().max(1),
                column: e.column().max(1),
                message: syntax_message(&e),
            });
            return report;
        }
    };
    let mut checker = Checker {
        data,
        found: Vec::new(),
    };
    let Value::Array(items) = root else {
        checker.error(
            vec![],
            format!(
                "channel data must be a JSON array of versions, found {}",
                kind_of(&root)
            ),
        );
        report.diagnostics = checker.finish();
        return report;
    };
    let mut first_use: HashMap<String, usize> = HashMap::with_capacity(items.len());
    for (i, item) in items.into_iter().enumerate() {
        if let Some(version) = checker.item(i, item, &mut first_use) {
            report.versions.push(version);
        }
    }
    report.diagnostics = checker.finish();
    report
}

fn syntax_message(e: &serde_json::Error) -> String {
    use serde_json::error::Category;
    let text = e.to_string();
    // serde_json appends " at line L column C"; the diagnostic carries the position itself.
    let text = match text.rfind(" at line ") {
        Some(cut) => text[..cut].to_string(),
        None => text,
    };
    match e.classify() {
        Category::Eof => format!("not valid JSON, the data ends too early (truncated?): {text}"),
        _ => format!("not valid JSON: {text}"),
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Segment {
    Index(usize),
    Key(String),
}

pub fn path_string(path: &[Segment]) -> String {
    let mut out = String::new();
    for seg in path {
        match seg {
            Segment::Index(i) => out.push_str(&format!("[{i}]")),
            Segment::Key(k) => {
                let ident = !k.is_empty()
                    && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                    && !k.starts_with(|c: char| c.is_ascii_digit());
                if ident {
                    out.push('.');
                    out.push_str(k);
                } else {
                    out.push_str(&format!("[{}]", Value::String(k.clone())));
                }
            }
        }
    }
    out
}

struct Checker<'a> {
    data: &'a [u8],
    found: Vec<(Severity, Vec<Segment>, String)>,
}

fn key(k: &str) -> Segment {
    Segment::Key(k.to_string())
}

impl Checker<'_> {
    fn error(&mut self, path: Vec<Segment>, message: String) {
        self.found.push((Severity::Error, path, message));
    }
    fn warn(&mut self, path: Vec<Segment>, message: String) {
        self.found.push((Severity::Warning, path, message));
    }

    /// Resolves positions only now, so that valid data never pays for them.
    fn finish(self) -> Vec<Diagnostic> {
        let data = self.data;
        self.found
            .into_iter()
            .map(|(severity, path, message)| {
                let (line, column) = locate::position(data, &path);
                Diagnostic {
                    severity,
                    path: path_string(&path),
                    line,
                    column,
                    message,
                }
            })
            .collect()
    }

    fn item(
        &mut self,
        i: usize,
        item: Value,
        first_use: &mut HashMap<String, usize>,
    ) -> Option<ChannelVersion> {
        let at = |rest: &[&str]| {
            let mut p = vec![Segment::Index(i)];
            p.extend(rest.iter().map(|k| key(k)));
            p
        };
        let Value::Object(mut obj) = item else {
            self.error(
                at(&[]),
                format!(
                    "each version must be a JSON object, found {}",
                    kind_of(&item)
                ),
            );
            return None;
        };
        let errors_before = self.errors();
        for k in obj.keys() {
            if !QUIET_ITEM_KEYS.contains(&k.as_str()) {
                self.warn(at(&[k]), "unknown key, ignored".into());
            }
        }

        // metadata: name, labels, annotations
        let mut name = None;
        let mut labels = BTreeMap::new();
        let mut annotations = BTreeMap::new();
        match obj.remove("metadata") {
            None => self.error(at(&["metadata"]), "required object is missing".into()),
            Some(Value::Object(meta)) => {
                for k in meta.keys() {
                    if !KEPT_METADATA.contains(&k.as_str()) {
                        self.warn(
                            at(&["metadata", k]),
                            "ignored: only name, labels and annotations are taken from a version's metadata".into(),
                        );
                    }
                }
                match meta.get("name") {
                    None => {
                        self.error(at(&["metadata", "name"]), "required name is missing".into())
                    }
                    Some(Value::String(n)) => match dns1123_subdomain_problem(n) {
                        Some(why) => self.error(
                            at(&["metadata", "name"]),
                            format!("{n:?} is not a valid name: {why}"),
                        ),
                        None => {
                            if let Some(first) = first_use.get(n) {
                                self.error(
                                    at(&["metadata", "name"]),
                                    format!("duplicate name {n:?}, already used by [{first}]"),
                                );
                            } else {
                                first_use.insert(n.clone(), i);
                                name = Some(n.clone());
                            }
                        }
                    },
                    Some(other) => self.error(
                        at(&["metadata", "name"]),
                        format!("must be a string, found {}", kind_of(other)),
                    ),
                }
                for (field, is_label) in [("labels", true), ("annotations", false)] {
                    if let Some(v) = meta.get(field) {
                        let target = if is_label {
                            &mut labels
                        } else {
                            &mut annotations
                        };
                        self.string_map(at(&["metadata", field]), v, is_label, target);
                    }
                }
            }
            Some(other) => self.error(
                at(&["metadata"]),
                format!("must be an object, found {}", kind_of(&other)),
            ),
        }

        // spec
        let spec = match obj.remove("spec") {
            None => {
                self.error(at(&["spec"]), "required object is missing".into());
                None
            }
            Some(Value::Object(spec)) => self.spec(&at(&["spec"]), spec),
            Some(other) => {
                self.error(
                    at(&["spec"]),
                    format!("must be an object, found {}", kind_of(&other)),
                );
                None
            }
        };

        if self.errors() > errors_before {
            return None;
        }
        let version = ChannelVersion {
            name: name?,
            labels,
            annotations,
            spec: spec?,
        };
        let size = approx_size(&version);
        if size > MAX_ITEM_BYTES {
            self.error(
                at(&[]),
                format!(
                    "version is about {size} bytes, more than the {MAX_ITEM_BYTES} bytes a Kubernetes object can hold"
                ),
            );
            return None;
        }
        Some(version)
    }

    fn errors(&self) -> usize {
        self.found
            .iter()
            .filter(|(s, _, _)| *s == Severity::Error)
            .count()
    }

    fn string_map(
        &mut self,
        path: Vec<Segment>,
        value: &Value,
        is_label: bool,
        into: &mut BTreeMap<String, String>,
    ) {
        let Value::Object(map) = value else {
            self.error(
                path,
                format!("must be an object of strings, found {}", kind_of(value)),
            );
            return;
        };
        for (k, v) in map {
            let mut p = path.clone();
            p.push(key(k));
            let Value::String(s) = v else {
                self.error(p, format!("must be a string, found {}", kind_of(v)));
                continue;
            };
            if let Some(why) = qualified_name_problem(k) {
                self.error(p, format!("{k:?} is not a valid key: {why}"));
                continue;
            }
            if is_label && let Some(why) = label_value_problem(s) {
                self.error(p, format!("{s:?} is not a valid label value: {why}"));
                continue;
            }
            into.insert(k.clone(), s.clone());
        }
    }

    fn spec(
        &mut self,
        path: &[Segment],
        mut spec: Map<String, Value>,
    ) -> Option<ManagedOSVersionSpec> {
        let at = |k: &str| {
            let mut p = path.to_vec();
            p.push(key(k));
            p
        };
        for k in spec.keys() {
            if !SPEC_KEYS.contains(&k.as_str()) {
                self.warn(at(k), "unknown key, ignored".into());
            }
        }
        let before = self.errors();
        let optional_string =
            |this: &mut Self, k: &str, spec: &mut Map<String, Value>| match spec.remove(k) {
                None | Some(Value::Null) => None,
                Some(Value::String(s)) => Some(s),
                Some(other) => {
                    this.error(
                        at(k),
                        format!("must be a string, found {}", kind_of(&other)),
                    );
                    None
                }
            };
        let version = optional_string(self, "version", &mut spec);
        let min_version = optional_string(self, "minVersion", &mut spec);
        let type_ = match spec.remove("type") {
            Some(Value::String(t)) if t == "container" || t == "iso" => t,
            None => {
                self.error(at("type"), "required: \"container\" or \"iso\"".into());
                String::new()
            }
            Some(other) => {
                self.error(
                    at("type"),
                    format!("must be \"container\" or \"iso\", found {other}"),
                );
                String::new()
            }
        };
        let object = |this: &mut Self, k: &str, spec: &mut Map<String, Value>| match spec.remove(k)
        {
            None | Some(Value::Null) => None,
            Some(Value::Object(m)) => Some(m),
            Some(other) => {
                this.error(
                    at(k),
                    format!("must be an object, found {}", kind_of(&other)),
                );
                None
            }
        };
        let metadata = object(self, "metadata", &mut spec);
        let upgrade_container = object(self, "upgradeContainer", &mut spec);
        let required = match type_.as_str() {
            "container" => Some("upgradeImage"),
            "iso" => Some("uri"),
            _ => None,
        };
        if let Some(field) = required {
            let mut p = at("metadata");
            p.push(key(field));
            match metadata.as_ref().and_then(|m| m.get(field)) {
                Some(Value::String(s)) if !s.trim().is_empty() => {}
                Some(Value::String(_)) => {
                    self.error(p, format!("must not be empty for a {type_} version"))
                }
                Some(other) => self.error(p, format!("must be a string, found {}", kind_of(other))),
                None if metadata.is_none() => self.error(
                    at("metadata"),
                    format!("required: a {type_} version needs metadata.{field}"),
                ),
                None => self.error(p, format!("required for a {type_} version")),
            }
        }
        (self.errors() == before).then_some(ManagedOSVersionSpec {
            version,
            type_,
            min_version,
            metadata,
            upgrade_container,
        })
    }
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn approx_size(v: &ChannelVersion) -> usize {
    fn value(v: &Value) -> usize {
        match v {
            Value::String(s) => s.len() + 2,
            Value::Array(a) => a.iter().map(value).sum::<usize>() + a.len() + 2,
            Value::Object(m) => m.iter().map(|(k, v)| k.len() + 3 + value(v)).sum::<usize>() + 2,
            _ => 8,
        }
    }
    let maps =
        |m: &BTreeMap<String, String>| m.iter().map(|(k, v)| k.len() + v.len() + 6).sum::<usize>();
    let objects =
        |m: &Option<Map<String, Value>>| m.as_ref().map_or(0, |m| value(&Value::Object(m.clone())));
    v.name.len()
        + maps(&v.labels)
        + maps(&v.annotations)
        + objects(&v.spec.metadata)
        + objects(&v.spec.upgrade_container)
        + v.spec.version.as_ref().map_or(0, String::len)
        + v.spec.min_version.as_ref().map_or(0, String::len)
}

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
fn qualified_name_problem(k: &str) -> Option<String> {
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

fn label_value_problem(v: &str) -> Option<String> {
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

/// Finds where a JSON path's value starts in the raw text. Only used to place diagnostics,
/// so it favours simplicity over speed; the text is known to be valid JSON.
mod locate {
    use super::Segment;

    pub fn position(data: &[u8], path: &[Segment]) -> (usize, usize) {
        let offset = find(data, path).unwrap_or(0);
        line_col(data, offset)
    }

    fn line_col(data: &[u8], offset: usize) -> (usize, usize) {
        let before = &data[..offset.min(data.len())];
        let line = before.iter().filter(|b| **b == b'\n').count() + 1;
        let line_start = before
            .iter()
            .rposition(|b| *b == b'\n')
            .map_or(0, |p| p + 1);
        // Columns count characters, not bytes.
        let column = String::from_utf8_lossy(&before[line_start..])
            .chars()
            .count()
            + 1;
        (line, column)
    }

    fn find(data: &[u8], path: &[Segment]) -> Option<usize> {
        let mut pos = skip_ws(data, 0);
        for seg in path {
            pos = match seg {
                Segment::Index(want) => {
                    if data.get(pos) != Some(&b'[') {
                        return Some(pos);
                    }
                    let mut p = skip_ws(data, pos + 1);
                    for _ in 0..*want {
                        p = skip_ws(data, skip_value(data, p)?);
                        p = skip_ws(data, p + 1); // the comma
                    }
                    p
                }
                Segment::Key(want) => {
                    if data.get(pos) != Some(&b'{') {
                        return Some(pos);
                    }
                    let mut p = skip_ws(data, pos + 1);
                    let mut found = None;
                    // The last duplicate key wins, as when parsing; so keep scanning.
                    while data.get(p) == Some(&b'"') {
                        let key_end = skip_string(data, p)?;
                        let key: String = serde_json::from_slice(&data[p..key_end]).ok()?;
                        let value_start = skip_ws(data, skip_ws(data, key_end) + 1);
                        if &key == want {
                            found = Some(value_start);
                        }
                        p = skip_ws(data, skip_value(data, value_start)?);
                        if data.get(p) == Some(&b',') {
                            p = skip_ws(data, p + 1);
                        }
                    }
                    found.unwrap_or(pos)
                }
            };
        }
        Some(pos)
    }

    fn skip_ws(data: &[u8], mut p: usize) -> usize {
        while matches!(data.get(p), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            p += 1;
        }
        p
    }

    fn skip_string(data: &[u8], mut p: usize) -> Option<usize> {
        p += 1;
        loop {
            match data.get(p)? {
                b'\\' => p += 2,
                b'"' => return Some(p + 1),
                _ => p += 1,
            }
        }
    }

    /// The offset just past the value that starts at `p`.
    fn skip_value(data: &[u8], p: usize) -> Option<usize> {
        match data.get(p)? {
            b'"' => skip_string(data, p),
            b'{' | b'[' => {
                let mut depth = 0usize;
                let mut q = p;
                loop {
                    match data.get(q)? {
                        b'"' => {
                            q = skip_string(data, q)?;
                            continue;
                        }
                        b'{' | b'[' => depth += 1,
                        b'}' | b']' => {
                            depth -= 1;
                            if depth == 0 {
                                return Some(q + 1);
                            }
                        }
                        _ => {}
                    }
                    q += 1;
                }
            }
            _ => {
                let mut q = p;
                while !matches!(
                    data.get(q),
                    None | Some(b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r')
                ) {
                    q += 1;
                }
                Some(q)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use indoc::indoc;

    const SAMPLE: &str = r#"[{"metadata":{"name":"foo"},"spec":{"version":"v1","type":"container","minVersion":"0.0.0","metadata":{"upgradeImage":"registry.com/repository/image:v1"}}},{"metadata":{"name":"bar"},"spec":{"version":"v2","type":"container","minVersion":"0.0.0","metadata":{"upgradeImage":"registry.com/repository/image:v2"}}}]"#;

    fn errors(data: &str) -> Vec<String> {
        check(data.as_bytes())
            .errors()
            .map(|d| format!("{}@{}:{} {}", d.path, d.line, d.column, d.message))
            .collect()
    }

    #[test]
    fn the_sample_parses_to_two_versions() {
        let versions = parse(SAMPLE.as_bytes()).unwrap();
        assert_eq!(versions.len(), 2);
        assert_eq!(versions[0].name, "foo");
        assert_eq!(versions[0].spec.version.as_deref(), Some("v1"));
        assert_eq!(versions[0].spec.type_, "container");
        assert_eq!(
            versions[1].spec.metadata.as_ref().unwrap()["upgradeImage"],
            "registry.com/repository/image:v2"
        );
    }

    #[test]
    fn an_empty_array_is_valid() {
        assert_eq!(parse(b"[]").unwrap(), vec![]);
    }

    #[test]
    fn syntax_errors_carry_their_position() {
        let e = parse(b"[\n  {\"metadata\": }\n]").unwrap_err();
        assert_eq!((e.first.line, e.first.column), (2, 16));
        assert!(
            e.first.message.starts_with("not valid JSON"),
            "{}",
            e.first.message
        );
        let e = parse(b"[{\"metadata\":").unwrap_err();
        assert!(e.first.message.contains("truncated"), "{}", e.first.message);
        assert!(!e.to_string().contains(" at line "), "{e}");
    }

    #[test]
    fn not_an_array() {
        assert_eq!(
            errors(r#"{"a":1}"#),
            ["@1:1 channel data must be a JSON array of versions, found an object"]
        );
    }

    #[test]
    fn rule_violations_are_all_reported_with_paths_and_positions() {
        let data = indoc! {r#"
            [
              {"metadata": {"name": "ok"}, "spec": {"type": "iso", "metadata": {"uri": "http://x"}}},
              {"metadata": {"name": "Bad_Name"}, "spec": {"type": "container", "metadata": {"upgradeImage": "i"}}},
              {"metadata": {"name": "ok"}, "spec": {"type": "rpm"}},
              {"spec": {"type": "container", "metadata": {"upgradeImage": ""}}},
              {"metadata": {"name": "x"}, "spec": {"type": "iso", "version": 3}},
              7
            ]
        "#};
        assert_eq!(
            errors(data),
            [
                r#"[1].metadata.name@3:25 "Bad_Name" is not a valid name: 'B' is not allowed: use lower-case letters, digits, '-' and '.'"#,
                r#"[2].metadata.name@4:25 duplicate name "ok", already used by [0]"#,
                r#"[2].spec.type@4:49 must be "container" or "iso", found "rpm""#,
                r#"[3].metadata@5:3 required object is missing"#,
                r#"[3].spec.metadata.upgradeImage@5:63 must not be empty for a container version"#,
                r#"[4].spec.version@6:66 must be a string, found a number"#,
                r#"[4].spec.metadata@6:39 required: a iso version needs metadata.uri"#,
                r#"[5]@7:3 each version must be a JSON object, found a number"#,
            ]
        );
    }

    #[test]
    fn ignored_metadata_and_unknown_keys_are_warnings_and_dropped() {
        let data = r#"[{"kind":"ManagedOSVersion","status":{},"metadata":{"name":"a","namespace":"x","ownerReferences":[],"labels":{"l":"v"},"annotations":{"a/b":"c"}},"spec":{"type":"iso","extra":1,"metadata":{"uri":"u","displayName":"A"}}}]"#;
        let report = check(data.as_bytes());
        assert!(report.is_valid());
        let warnings: Vec<_> = report.diagnostics.iter().map(|d| d.path.as_str()).collect();
        assert_eq!(
            warnings,
            [
                "[0].status",
                "[0].metadata.namespace",
                "[0].metadata.ownerReferences",
                "[0].spec.extra"
            ]
        );
        let v = &report.versions[0];
        assert_eq!(v.labels["l"], "v");
        assert_eq!(v.annotations["a/b"], "c");
        assert_eq!(v.spec.metadata.as_ref().unwrap()["displayName"], "A");
    }

    #[test]
    fn labels_must_be_valid_kubernetes_labels() {
        let data = r#"[{"metadata":{"name":"a","labels":{"ok":"","-bad":"v","k":"white space","n":1}},"spec":{"type":"iso","metadata":{"uri":"u"}}}]"#;
        let errs = errors(data);
        assert_eq!(errs.len(), 3, "{errs:?}");
        assert!(
            errs[0].starts_with("[0].metadata.labels[\"-bad\"]"),
            "{errs:?}"
        );
    }

    #[test]
    fn oversized_versions_are_refused() {
        let big = "x".repeat(MAX_ITEM_BYTES + 1);
        let data = format!(
            r#"[{{"metadata":{{"name":"a"}},"spec":{{"type":"iso","metadata":{{"uri":"u","blob":"{big}"}}}}}}]"#
        );
        let errs = errors(&data);
        assert_eq!(errs.len(), 1);
        assert!(errs[0].contains("more than the"), "{errs:?}");
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_crash() {
        let data = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        let e = parse(data.as_bytes()).unwrap_err();
        assert!(e.first.message.contains("recursion limit"), "{e}");
    }

    #[test]
    fn dns_names() {
        assert_eq!(dns1123_subdomain_problem("a.b-c.1"), None);
        assert!(dns1123_subdomain_problem("a..b").is_some());
        assert!(dns1123_subdomain_problem("-a").is_some());
        assert!(dns1123_subdomain_problem(&"a".repeat(254)).is_some());
    }

    #[test]
    fn paths_quote_keys_that_are_not_identifiers() {
        let p = [Segment::Index(1), key("spec"), key("a/b")];
        assert_eq!(path_string(&p), r#"[1].spec["a/b"]"#);
    }

    #[test]
    fn error_summary_counts_the_rest() {
        let e = parse(br#"[1,2,3]"#).unwrap_err();
        assert_eq!(e.total, 3);
        assert!(e.to_string().contains("and 2 more problems"), "{e}");
    }
}
