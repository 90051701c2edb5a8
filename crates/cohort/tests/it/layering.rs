//! The layers `docs/design.md` ("Layers") describes, checked on the source:
//! every module of the crate has a place in [`LAYERS`], a module's code uses
//! (`crate::x`) only modules listed before it, and no two files of one
//! module import each other, directly or round a longer circle. Unit-test
//! modules (`#[cfg(test)] mod tests`, `tests.rs`) may use anything.
//!
//! The only exceptions are [`FACADES`]: a `pub use` that gives an item of a
//! higher module its public path in a lower one. Its code uses nothing of
//! that module; the line only re-exports.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The crate's modules, bottom first, with what each is for. A module may
/// use the ones above it in this list, never the ones below.
const LAYERS: &[(&str, &str)] = &[
    (
        "sql",
        "SQL text: quoted identifiers, statements, transactions; no domain",
    ),
    (
        "error",
        "the one error, and the failure reports its variants carry",
    ),
    (
        "policy",
        "periods, strategies, rules, the host's rule provider",
    ),
    ("catalog", "reads of PostgreSQL's catalog"),
    (
        "model",
        "retained-type descriptors, their builder and resolution",
    ),
    ("config", "options and the worker's schedule"),
    (
        "schema",
        "Cohort's tables: spec, migrations, readiness, key registry",
    ),
    (
        "validate",
        "start-up validation of options, model, catalog and privileges",
    ),
    ("ledger", "audit events, observers, the ledger writer"),
    ("metrics", "counters through the `metrics` facade"),
    (
        "evidence",
        "the evidence chain, exports, certificates, the report",
    ),
    (
        "handlers",
        "row handlers: their types, registry and queue SQL",
    ),
    ("engine", "the state every operation runs on"),
    (
        "events",
        "event-based retention's events: record, withdraw, read",
    ),
    ("holds", "legal holds and host deletions"),
    (
        "disposition",
        "disposition review: batches and the decisions on them",
    ),
    (
        "run",
        "preview, sweeps, erasure: the executor and its batches",
    ),
    ("dispatch", "the row-handler dispatcher"),
    ("worker", "the scheduled worker"),
    ("cohort", "the handle and its builder"),
    ("lib", "the crate root: public paths"),
];

/// `pub use` lines that re-export an item of a higher module at a lower
/// module's public path: (file, the higher module, why).
const FACADES: &[(&str, &str, &str)] = &[
    (
        "schema/mod.rs",
        "validate",
        "`cohort::schema::{RoleNames, RoleGrants, role_grants}` are generated from the privilege \
         catalogue, which validation also checks against the live database",
    ),
    (
        "handlers/mod.rs",
        "dispatch",
        "`cohort::handlers::Dispatcher` runs on the engine, a layer above the handlers' types",
    ),
];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read a source directory") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The code of a source file: its unit tests cut off, comments removed.
fn code_lines(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut lines = text.lines().enumerate().peekable();
    while let Some((n, line)) = lines.next() {
        if line.trim() == "#[cfg(test)]"
            && lines
                .peek()
                .is_some_and(|(_, next)| next.trim_start().starts_with("mod tests"))
        {
            break;
        }
        let code = line.split("//").next().unwrap_or("");
        out.push((n + 1, code.to_owned()));
    }
    out
}

/// The modules of the crate named in `code` as `crate::<module>`.
fn crate_uses(code: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find("crate::") {
        let before = rest[..i].chars().last();
        let after = &rest[i + "crate::".len()..];
        let name: String = after
            .chars()
            .take_while(|c| c.is_ascii_lowercase() || *c == '_')
            .collect();
        // `$crate::` and `cohort_crate::` are not this crate's paths.
        if before.is_none_or(|c| !(c.is_alphanumeric() || c == '_' || c == '$')) && !name.is_empty()
        {
            found.push(name);
        }
        rest = after;
    }
    found
}

/// Every upward use in the files given as (path relative to `src/`, text).
fn upward_uses(files: &[(String, String)]) -> Vec<String> {
    let rank: BTreeMap<&str, usize> = LAYERS
        .iter()
        .enumerate()
        .map(|(i, (m, _))| (*m, i))
        .collect();
    let mut offences = Vec::new();
    for (path, text) in files {
        if path.ends_with("/tests.rs") {
            continue;
        }
        let module = path
            .split('/')
            .next()
            .unwrap_or("")
            .trim_end_matches(".rs")
            .to_owned();
        let Some(&own) = rank.get(module.as_str()) else {
            offences.push(format!(
                "{path}: module `{module}` has no place in LAYERS (docs/design.md, \"Layers\")"
            ));
            continue;
        };
        for (n, code) in code_lines(text) {
            if code.contains("super::super") {
                offences.push(format!(
                    "{path}:{n}: `super::super` hides which layer it reaches: {}",
                    code.trim()
                ));
            }
            for used in crate_uses(&code) {
                let Some(&theirs) = rank.get(used.as_str()) else {
                    continue;
                };
                if theirs <= own {
                    continue;
                }
                let facade = code.trim_start().starts_with("pub use crate::")
                    && FACADES
                        .iter()
                        .any(|(file, target, _)| file == path && *target == used);
                if !facade {
                    offences.push(format!(
                        "{path}:{n}: `{module}` uses `{used}`, a layer above it: {}",
                        code.trim()
                    ));
                }
            }
        }
    }
    offences
}

/// Circles among the files of one module directory (its `mod.rs` aside:
/// it declares and re-exports its files, and they use its items).
fn file_circles(files: &[(String, String)]) -> Vec<String> {
    let mut dirs: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    for (path, text) in files {
        if let Some((dir, file)) = path.rsplit_once('/') {
            let stem = file.trim_end_matches(".rs").to_owned();
            dirs.entry(dir.to_owned())
                .or_default()
                .insert(stem, text.clone());
        }
    }
    let mut circles = Vec::new();
    for (dir, members) in &dirs {
        let names: BTreeSet<&str> = members
            .keys()
            .map(String::as_str)
            .filter(|n| *n != "mod")
            .collect();
        let full = format!("crate::{}::", dir.replace('/', "::"));
        let mut edges: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
        for (stem, text) in members {
            if stem == "mod" || stem == "tests" {
                continue;
            }
            for (_, code) in code_lines(text) {
                for prefix in ["super::", full.as_str()] {
                    let mut rest = code.as_str();
                    while let Some(i) = rest.find(prefix) {
                        let after = &rest[i + prefix.len()..];
                        let name: String = after
                            .chars()
                            .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                            .collect();
                        if let Some(target) = names.get(name.as_str())
                            && *target != stem.as_str()
                        {
                            edges.entry(stem.as_str()).or_default().insert(target);
                        }
                        rest = after;
                    }
                }
            }
        }
        // A circle through `start`: a path from one of its targets back to it.
        for start in &names {
            let mut stack: Vec<Vec<&str>> = vec![vec![start]];
            let mut seen: BTreeSet<&str> = BTreeSet::new();
            while let Some(path) = stack.pop() {
                let last = path[path.len() - 1];
                for next in edges.get(last).into_iter().flatten() {
                    if next == start {
                        let mut circle = path.clone();
                        circle.push(next);
                        circles.push(format!("src/{dir}: {}", circle.join(" -> ")));
                    } else if seen.insert(next) {
                        let mut longer = path.clone();
                        longer.push(next);
                        stack.push(longer);
                    }
                }
            }
        }
    }
    circles.sort();
    circles.dedup();
    circles
}

fn sources() -> Vec<(String, String)> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut paths = Vec::new();
    rust_files(&src, &mut paths);
    paths.sort();
    paths
        .iter()
        .map(|p| {
            let rel = p
                .strip_prefix(&src)
                .expect("under src")
                .to_string_lossy()
                .replace('\\', "/");
            (rel, std::fs::read_to_string(p).expect("read a source file"))
        })
        .collect()
}

#[test]
fn every_module_uses_only_the_layers_below_it() {
    let files = sources();
    assert!(files.len() > 50, "the crate's files: {}", files.len());
    let offences = upward_uses(&files);
    assert!(
        offences.is_empty(),
        "the layers of docs/design.md (\"Layers\") are broken:\n{}",
        offences.join("\n")
    );
}

#[test]
fn no_two_files_of_a_module_import_each_other() {
    let circles = file_circles(&sources());
    assert!(
        circles.is_empty(),
        "files of one module in a circle:\n{}",
        circles.join("\n")
    );
}

#[test]
fn every_layer_is_a_module_of_the_crate() {
    let files = sources();
    for (module, _) in LAYERS {
        assert!(
            files
                .iter()
                .any(|(p, _)| p == &format!("{module}.rs") || p.starts_with(&format!("{module}/"))),
            "LAYERS names `{module}`, which is not a module of the crate"
        );
    }
}

// The checks themselves: an upward import injected into a copy of the real
// sources is found, in a bottom file and in an engine; a facade line is not
// an offence only where it is listed; a circle between two files is found.
#[test]
fn the_checks_find_an_injected_upward_import_and_an_injected_circle() {
    let real = sources();
    for (file, line) in [
        ("sql/mod.rs", "use crate::cohort::Cohort;"),
        ("error/mod.rs", "use crate::schema::SchemaName;"),
        ("run/execute.rs", "fn handle(_: &crate::cohort::Cohort) {}"),
        ("config/mod.rs", "pub use crate::worker::Worker;"),
    ] {
        let mut files = real.clone();
        let entry = files
            .iter_mut()
            .find(|(p, _)| p == file)
            .unwrap_or_else(|| panic!("no {file}"));
        entry.1 = format!("{line}\n{}", entry.1);
        let offences = upward_uses(&files);
        assert!(
            offences
                .iter()
                .any(|o| o.starts_with(&format!("{file}:1:"))),
            "the injected `{line}` in {file} was not found: {offences:?}"
        );
    }
    let mut files = real.clone();
    for (path, text) in files.iter_mut() {
        if path == "schema/ddl.rs" {
            *text = format!("use super::migrations::MIGRATIONS;\n{text}");
        }
    }
    let circles = file_circles(&files);
    assert!(
        circles
            .iter()
            .any(|c| c.contains("ddl") && c.contains("migrations")),
        "the injected circle was not found: {circles:?}"
    );
}
