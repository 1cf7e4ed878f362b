//! The import graph of `src/`, read from the source: no two modules of one parent (or two
//! top-level modules) import each other, directly or around a circle. A circle means
//! neither can be read, changed or tested without the other: the shared piece belongs in
//! one of them, or in a module of its own.
//!
//! A module's "room" is the module with everything under it (`registry::layers::tests`
//! belongs to the room `registry::layers`); an arrow runs from a room to a sibling room
//! it names by a `crate::`, `super::` or `self::` path or a child's bare name, in a `use`
//! or inline. A path to an item of a parent (`super::Context`) is followed through the
//! parent's `use` items to the room that defines it; what the parent's own file defines
//! draws no arrow (the children build on it). Test code is left out
//! (test modules and files, `#[cfg(test)] mod` blocks): a test may use what it likes to
//! build its case. No compiler is involved, so paths built by macros are not seen; the
//! source has none that matter.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

type Module = Vec<String>;

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Every `.rs` file under `dir`.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The module a file is (`src/commands/sync/mod.rs`: `commands::sync`; `src/commands/cluster.rs`: `commands::cluster`; the
/// crate roots: the empty path). Files named by `#[path]` count as their own module under
/// their directory's: still inside the same room.
fn module_of(file: &Path) -> Module {
    let rel = file.strip_prefix(src()).unwrap().with_extension("");
    let mut parts: Module = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

/// Whether a module is test code by its name (`tests`, `tests_oci`, `version_index_tests`).
fn is_test(module: &Module) -> bool {
    module
        .iter()
        .any(|m| m == "tests" || m.starts_with("tests_") || m.ends_with("_tests"))
}

/// The source without `//` comments (doc comments name paths that are not imports) and
/// without inline `#[cfg(test)] mod name { ... }` blocks.
fn code(text: &str) -> String {
    let mut out = String::new();
    let mut lines = text
        .lines()
        .map(|l| l.split("//").next().unwrap_or_default());
    while let Some(line) = lines.next() {
        if line.trim() != "#[cfg(test)]" {
            out.push_str(line);
            out.push('\n');
            continue;
        }
        let Some(next) = lines.next() else { break };
        if !(next.trim_start().starts_with("mod ") && next.trim_end().ends_with('{')) {
            out.push_str(next);
            out.push('\n');
            continue;
        }
        // Skip to the block's closing brace.
        let mut depth = 1_i32;
        for inner in lines.by_ref() {
            depth += inner.matches('{').count() as i32 - inner.matches('}').count() as i32;
            if depth <= 0 {
                break;
            }
        }
    }
    out
}

/// The absolute paths a file names from `crate::`, `super::` or `self::`, or from one of
/// its own child modules by their bare name (`use context::Context;` in a `mod.rs`),
/// resolved against its module; one level of braces is expanded (`crate::{a, b::c}`).
fn named_paths(module: &Module, text: &str, modules: &BTreeSet<Module>) -> Vec<Module> {
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    let mut out = Vec::new();
    let bytes: Vec<char> = text.chars().collect();
    let mut i = 0;
    while i < bytes.len() {
        let starts_word = i == 0 || !(ident(bytes[i - 1]) || bytes[i - 1] == ':');
        let rest: String = bytes[i..bytes.len().min(i + 7)].iter().collect();
        let base = if !starts_word {
            None
        } else if rest.starts_with("crate::") {
            i += 7;
            Some(Vec::new())
        } else if rest.starts_with("super::") || rest.starts_with("self::") {
            let mut base = module.clone();
            while bytes[i..].iter().collect::<String>().starts_with("super::") {
                base.pop();
                i += 7;
            }
            if bytes[i..].iter().collect::<String>().starts_with("self::") {
                i += 6;
            }
            Some(base)
        } else {
            // A bare path: relative to the module when its first segment is a child.
            let word: String = bytes[i..].iter().take_while(|c| ident(**c)).collect();
            let mut child = module.clone();
            child.push(word.clone());
            let after: String = bytes[i + word.len()..].iter().take(2).collect();
            (!word.is_empty() && after == "::" && modules.contains(&child)).then(|| module.clone())
        };
        let Some(base) = base else {
            i += 1;
            continue;
        };
        // The path's segments up to a `{`, then the group's members (their first segments
        // are enough to find the room).
        let mut path = base;
        let mut segment = String::new();
        while i < bytes.len() && (ident(bytes[i]) || bytes[i] == ':') {
            if bytes[i] == ':' {
                if !segment.is_empty() {
                    path.push(std::mem::take(&mut segment));
                }
            } else {
                segment.push(bytes[i]);
            }
            i += 1;
        }
        if !segment.is_empty() {
            path.push(segment);
        }
        if bytes.get(i) == Some(&'{') {
            let end = bytes[i..]
                .iter()
                .position(|c| *c == '}')
                .map_or(bytes.len(), |p| i + p);
            let group: String = bytes[i + 1..end].iter().collect();
            for member in group.split([',', '{']) {
                let first: String = member.trim().chars().take_while(|c| ident(*c)).collect();
                if !first.is_empty() && first != "self" {
                    let mut p = path.clone();
                    p.push(first);
                    out.push(p);
                }
            }
            i = end;
        }
        out.push(path);
    }
    out
}

/// The names a file's `use` items bring into its module, each with the absolute path it
/// stands for (`use context::Context;` in `controller`: `Context` is
/// `controller::context::Context`); names from other crates are left out.
fn imports(module: &Module, text: &str, modules: &BTreeSet<Module>) -> BTreeMap<String, Module> {
    let mut out = BTreeMap::new();
    for statement in text.split(';') {
        let words: Vec<&str> = statement.split_whitespace().collect();
        let Some(at) = words.iter().position(|w| *w == "use") else {
            continue;
        };
        // Only a `use` item: what comes before it is a visibility or an attribute.
        if !words[..at]
            .iter()
            .all(|w| w.starts_with("pub") || w.starts_with("#[") || w.ends_with(']'))
        {
            continue;
        }
        let tree = words[at + 1..].join(" ");
        let mut leaves = Vec::new();
        use_leaves(&tree, &mut Vec::new(), &mut leaves);
        for (path, name) in leaves {
            let mut base = module.clone();
            let mut rest = path.as_slice();
            match rest.first().map(String::as_str) {
                Some("crate") => {
                    base.clear();
                    rest = &rest[1..];
                }
                Some("self") => rest = &rest[1..],
                Some("super") => {
                    while rest.first().map(String::as_str) == Some("super") {
                        base.pop();
                        rest = &rest[1..];
                    }
                }
                Some(first) => {
                    let mut child = module.clone();
                    child.push(first.to_string());
                    if !modules.contains(&child) {
                        continue;
                    }
                }
                None => continue,
            }
            base.extend(rest.iter().cloned());
            out.insert(name, base);
        }
    }
    out
}

/// The leaves of a use tree (`a::{b, c::d as e, self}`): each path with the name it is
/// known by (globs left out).
fn use_leaves(tree: &str, prefix: &mut Vec<String>, out: &mut Vec<(Vec<String>, String)>) {
    // Split at the top-level commas.
    let mut depth = 0;
    let mut parts = vec![String::new()];
    for c in tree.chars() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(String::new());
                continue;
            }
            _ => {}
        }
        parts.last_mut().unwrap().push(c);
    }
    for part in parts.iter().map(|p| p.trim()).filter(|p| !p.is_empty()) {
        if let Some(open) = part.find('{') {
            let head: Vec<String> = part[..open]
                .split("::")
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect();
            let inner = part[open + 1..]
                .strip_suffix('}')
                .unwrap_or(&part[open + 1..]);
            let len = prefix.len();
            prefix.extend(head);
            use_leaves(inner, prefix, out);
            prefix.truncate(len);
            continue;
        }
        let (path, alias) = match part.split_once(" as ") {
            Some((p, a)) => (p, Some(a.trim())),
            None => (part, None),
        };
        let mut full = prefix.clone();
        full.extend(
            path.split("::")
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(String::from),
        );
        if full.last().map(String::as_str) == Some("self") {
            full.pop();
        }
        let Some(last) = full.last().cloned() else {
            continue;
        };
        if last == "*" || alias == Some("_") {
            continue;
        }
        out.push((full, alias.map_or(last, String::from)));
    }
}

/// What a path names once the `use` items of the modules it passes through are followed:
/// the module it lands in, and the module whose own file defines the item (the same, or
/// the module when it names a module).
fn resolve(
    mut path: Module,
    modules: &BTreeSet<Module>,
    imports: &BTreeMap<Module, BTreeMap<String, Module>>,
) -> Option<Module> {
    for _ in 0..16 {
        // The longest prefix of the path that is a module: what it names.
        let target = (0..=path.len())
            .rev()
            .map(|n| path[..n].to_vec())
            .find(|p| modules.contains(p))?;
        let Some(item) = path.get(target.len()) else {
            return Some(target);
        };
        match imports.get(&target).and_then(|names| names.get(item)) {
            Some(real) if *real != path[..=target.len()] => {
                let mut next = real.clone();
                next.extend(path[target.len() + 1..].iter().cloned());
                path = next;
            }
            _ => return Some(target),
        }
    }
    None
}

/// The arrows between sibling rooms: for each parent, from child room to child room, with
/// a file that draws it. An item a file names through its parent (`super::Context`, where
/// the parent's file has `use context::Context`) is followed to the module that defines
/// it. An item the parent's own file defines draws no arrow: that file is the room's
/// ground, which its children build on (and which names them).
fn arrows() -> BTreeMap<Module, BTreeMap<(String, String), String>> {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    // (main.rs is a crate of its own, beside lib.rs)
    files.retain(|f| f != &src().join("main.rs"));
    let modules: BTreeSet<Module> = files.iter().map(|f| module_of(f)).collect();
    let texts: Vec<(Module, String)> = files
        .iter()
        .map(|f| (module_of(f), code(&std::fs::read_to_string(f).unwrap())))
        .collect();
    let mut imported: BTreeMap<Module, BTreeMap<String, Module>> = BTreeMap::new();
    for (module, text) in &texts {
        imported
            .entry(module.clone())
            .or_default()
            .extend(imports(module, text, &modules));
    }
    let mut arrows: BTreeMap<Module, BTreeMap<(String, String), String>> = BTreeMap::new();
    for (file, (from, text)) in files.iter().zip(&texts) {
        if is_test(from) {
            continue;
        }
        for to in named_paths(from, text, &modules) {
            let Some(target) = resolve(to, &modules, &imported) else {
                continue;
            };
            // The first level where the two differ: the parent and the two rooms in it.
            let common = from.iter().zip(&target).take_while(|(a, b)| a == b).count();
            if let (Some(a), Some(b)) = (from.get(common), target.get(common)) {
                let name = file.strip_prefix(src()).unwrap().display().to_string();
                arrows
                    .entry(from[..common].to_vec())
                    .or_default()
                    .entry((a.clone(), b.clone()))
                    .or_insert(name);
            }
        }
    }
    arrows
}

/// The rooms that lie on a circle, in the order they were found.
fn circles(edges: &BTreeSet<(String, String)>) -> Vec<Vec<String>> {
    let next = |n: &str| -> Vec<&String> {
        edges
            .iter()
            .filter(|(a, _)| a == n)
            .map(|(_, b)| b)
            .collect()
    };
    let reaches = |from: &str, to: &str| {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.to_string()];
        while let Some(n) = todo.pop() {
            if n == to {
                return true;
            }
            if seen.insert(n.clone()) {
                todo.extend(next(&n).into_iter().cloned());
            }
        }
        false
    };
    // Strongly connected components, by mutual reachability (the graphs are small).
    let nodes: BTreeSet<&String> = edges.iter().flat_map(|(a, b)| [a, b]).collect();
    let mut found: Vec<Vec<String>> = Vec::new();
    for n in &nodes {
        if found.iter().any(|c| c.contains(n)) {
            continue;
        }
        let component: Vec<String> = nodes
            .iter()
            .filter(|m| reaches(n, m) && reaches(m, n))
            .map(|m| m.to_string())
            .collect();
        if component.len() > 1 {
            found.push(component);
        }
    }
    found
}

#[test]
fn no_import_circle_between_sibling_modules() {
    let arrows = arrows();
    assert!(
        arrows.values().map(BTreeMap::len).sum::<usize>() > 50,
        "{arrows:?}"
    );
    let circles: Vec<String> = arrows
        .iter()
        .flat_map(|(parent, edges)| {
            let parent = if parent.is_empty() {
                "crate".to_string()
            } else {
                parent.join("::")
            };
            let pairs: BTreeSet<(String, String)> = edges.keys().cloned().collect();
            circles(&pairs).into_iter().map(move |c| {
                let drawn: Vec<String> = edges
                    .iter()
                    .filter(|((a, b), _)| c.contains(a) && c.contains(b))
                    .map(|((a, b), file)| format!("{a} -> {b} (src/{file})"))
                    .collect();
                format!("{parent}: {}; {}", c.join(" <-> "), drawn.join(", "))
            })
        })
        .collect();
    assert!(circles.is_empty(), "import circles: {circles:#?}");
}

#[test]
fn the_checker_sees_paths_and_circles() {
    let m = |s: &str| -> Module { s.split("::").map(String::from).collect() };
    let modules: BTreeSet<Module> = ["cli", "cli::sync", "cli::wait", "cli::sync::steps"]
        .iter()
        .map(|s| m(s))
        .collect();
    let paths = named_paths(
        &m("cli::sync"),
        "use super::wait::Waits;\nuse crate::{duration, syncer::versions};\nx::crate::no",
        &modules,
    );
    assert!(paths.contains(&m("cli::wait::Waits")), "{paths:?}");
    assert!(paths.contains(&m("duration")), "{paths:?}");
    assert!(paths.contains(&m("syncer")), "{paths:?}");
    assert!(
        !paths.iter().any(|p| p.contains(&"no".to_string())),
        "{paths:?}"
    );
    // An item of the parent, brought in by its `use`, is followed to the room defining it.
    let rooms: BTreeSet<Module> = [
        "api",
        "controller",
        "controller::context",
        "controller::events",
    ]
    .iter()
    .map(|s| m(s))
    .collect();
    let parent =
        "use context::{self, Context};\npub use crate::api::ChannelKey as Key;\nfn own() {}";
    let imported = BTreeMap::from([(m("controller"), imports(&m("controller"), parent, &rooms))]);
    let found = |text: &str| -> Vec<Module> {
        named_paths(&m("controller::events"), text, &rooms)
            .into_iter()
            .filter_map(|p| resolve(p, &rooms, &imported))
            .collect()
    };
    assert_eq!(found("use super::Context;"), vec![m("controller::context")]);
    assert_eq!(
        found("use super::{Key, own};"),
        vec![m("api"), m("controller"), m("controller")]
    );
    assert_eq!(
        named_paths(&m("controller"), "context::Context::new()", &rooms),
        vec![m("controller::context::Context::new")]
    );
    let stripped =
        code("use a; // crate::b\n#[cfg(test)]\nmod tests {\n    use crate::c;\n}\nuse d;");
    assert_eq!(stripped, "use a; \nuse d;\n");
    let edges = |list: &[(&str, &str)]| -> BTreeSet<(String, String)> {
        list.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    };
    assert_eq!(
        circles(&edges(&[("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")])),
        vec![vec!["a".to_string(), "b".into(), "c".into()]]
    );
    assert!(circles(&edges(&[("a", "b"), ("b", "c"), ("a", "c")])).is_empty());
}

/// No file of `src/` is over 450 lines: a file longer than that holds more than one
/// concern, or one told at too great a length, for a reader who meets it first.
#[test]
fn no_source_file_over_450_lines() {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let long: Vec<String> = files
        .iter()
        .filter_map(|f| {
            let lines = std::fs::read_to_string(f).unwrap().lines().count();
            let name = f.strip_prefix(src()).unwrap().display();
            (lines > 450).then(|| format!("src/{name} ({lines})"))
        })
        .collect();
    assert!(long.is_empty(), "files over 450 lines: {long:#?}");
}

/// The controller is kept in rooms (folders, each with its own map in its `mod.rs`): only
/// its own map and `Context` sit at its top, so a reader finds a file by its room.
#[test]
fn the_controller_has_only_its_map_and_context_outside_its_rooms() {
    let dir = src().join("controller");
    let mut loose: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .filter(|name| name != "mod.rs" && name != "context.rs")
        .collect();
    loose.sort();
    assert!(
        loose.is_empty(),
        "files at the top of src/controller/: {loose:?}"
    );
}

/// Every module of `src/lib.rs` has its paragraph in CONTRIBUTING.md's map of the house,
/// where its name stands in bold (`**`name`**`): a module added without one is a room a
/// newcomer cannot find.
#[test]
fn every_module_of_the_crate_has_a_paragraph_in_contributing() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let lib = std::fs::read_to_string(src().join("lib.rs")).unwrap();
    let guide = std::fs::read_to_string(root.join("CONTRIBUTING.md")).unwrap();
    let modules: Vec<&str> = lib
        .lines()
        .filter_map(|l| {
            let l = l.trim().strip_prefix("pub ").unwrap_or(l.trim());
            l.strip_prefix("mod ")?.strip_suffix(';')
        })
        .collect();
    assert!(modules.len() > 20, "{modules:?}");
    let missing: Vec<&&str> = modules
        .iter()
        .filter(|m| !guide.contains(&format!("**`{m}`**")))
        .collect();
    assert!(
        missing.is_empty(),
        "modules of src/lib.rs without a paragraph in CONTRIBUTING.md: {missing:?}"
    );
}
