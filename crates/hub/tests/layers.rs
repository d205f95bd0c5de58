//! The hub's layers, enforced (docs/architecture.md §8): every module of `crates/hub/src` names
//! the module it imports from (`crate::domain::cards`, never a root item or `crate::{…}`), and
//! names only its own module or one listed after it in [`LAYERS`], so no two top-level modules
//! import each other, through any number of steps. Inside a folder (`routes/`, `domain/`,
//! `auth/`), the files import each other without a circle either (the folder's `mod.rs`, which
//! declares them and holds what they share, is left out). The order is declared once, here; the
//! crate documentation (`src/lib.rs`'s `# Layout`) and the design (`docs/architecture.md` §8)
//! must list the same layers and modules in the same order.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use trantor_testkit::layers::{crate_paths, paths_after};

/// The layers from the top, each with its modules from the top: a module may name its own
/// module and any listed after it (in its layer or a lower one).
const LAYERS: &[(&str, &[&str])] = &[
    (
        "http",
        &[
            "routes", "sse", "openapi", "ui", "auth", "ops", "extract", "front", "conn",
        ],
    ),
    (
        "periodic",
        &["reaper", "overseer", "duty", "cluster", "trim"],
    ),
    ("domain", &["domain"]),
    (
        "core",
        &["state", "config", "presence", "wake", "metrics", "error"],
    ),
];

/// Every module in the declared order.
fn modules() -> Vec<&'static str> {
    LAYERS.iter().flat_map(|(_, m)| m.iter().copied()).collect()
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Every source file but `lib.rs`, relative to `src`, with its text.
fn sources() -> Vec<(PathBuf, String)> {
    trantor_testkit::layers::sources(&src())
}

/// Every violation of the module order, one line each.
fn violations(files: &[(PathBuf, String)]) -> Vec<String> {
    trantor_testkit::layers::order_violations(files, &modules(), "module")
}

/// The sibling files each file of a folder names (`super::x`, `crate::<folder>::x`), by folder.
fn folder_edges(
    files: &[(PathBuf, String)],
) -> BTreeMap<String, BTreeMap<String, BTreeSet<String>>> {
    let mut folders: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    let stem = |p: &Path| p.file_stem().map(|s| s.to_string_lossy().to_string());
    for (rel, _) in files {
        if let (Some(parent), Some(name)) =
            (rel.parent().filter(|p| *p != Path::new("")), stem(rel))
            && name != "mod"
        {
            folders
                .entry(parent.to_string_lossy().to_string())
                .or_default()
                .entry(name)
                .or_default();
        }
    }
    for (rel, text) in files {
        let (Some(parent), Some(name)) = (rel.parent(), stem(rel)) else {
            continue;
        };
        let folder = parent.to_string_lossy().to_string();
        if name == "mod" || !folders.contains_key(&folder) {
            continue;
        }
        let siblings: BTreeSet<String> = folders[&folder].keys().cloned().collect();
        let own = format!("crate::{}::", folder.replace('/', "::"));
        let named = paths_after(text, "super::")
            .into_iter()
            .chain(paths_after(text, &own))
            .map(|(_, s)| s)
            .filter(|s| siblings.contains(s) && *s != name);
        let entry = folders
            .get_mut(&folder)
            .and_then(|f| f.get_mut(&name))
            .expect("listed above");
        entry.extend(named);
    }
    folders
}

/// A circle among the files of one folder, if there is one (`a -> b -> a`).
fn circle(edges: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        at: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|p| p == at) {
            let mut c = path[i..].to_vec();
            c.push(at.to_string());
            return Some(c);
        }
        if done.contains(at) {
            return None;
        }
        path.push(at.to_string());
        for next in edges.get(at).into_iter().flatten() {
            if let Some(c) = visit(next, edges, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(at.to_string());
        None
    }
    let mut done = BTreeSet::new();
    edges
        .keys()
        .find_map(|k| visit(k, edges, &mut Vec::new(), &mut done))
}

#[test]
fn no_module_imports_from_a_module_above_its_own_or_through_a_root_item() {
    let bad = violations(&sources());
    assert!(bad.is_empty(), "layer violations:\n{}", bad.join("\n"));
}

#[test]
fn no_circle_among_the_files_of_a_folder() {
    let circles: Vec<String> = folder_edges(&sources())
        .iter()
        .filter_map(|(folder, edges)| {
            circle(edges).map(|c| format!("{folder}/: {}", c.join(" -> ")))
        })
        .collect();
    assert!(
        circles.is_empty(),
        "import circles:\n{}",
        circles.join("\n")
    );
}

#[test]
fn every_top_level_module_is_in_a_layer() {
    let lib = std::fs::read_to_string(src().join("lib.rs")).expect("lib.rs");
    let mut declared: Vec<&str> = lib
        .lines()
        .filter_map(|l| {
            let l = l.strip_prefix("pub ").unwrap_or(l);
            l.strip_prefix("mod ")?.strip_suffix(';')
        })
        .collect();
    declared.sort_unstable();
    let mut listed = modules();
    listed.sort_unstable();
    assert_eq!(declared, listed, "lib.rs's `mod` lines against LAYERS");
}

/// The layer headings (`[http]`) and module names (the first word of an indented line, a
/// folder's `/` dropped; a description's continuation starts with none) of a drawing, in the
/// order they appear.
fn drawn<'a>(lines: impl Iterator<Item = &'a str>) -> (Vec<String>, Vec<String>) {
    let (mut layers, mut mods) = (Vec::new(), Vec::new());
    let known = modules();
    for l in lines {
        let t = l.trim();
        if let Some(name) = t.strip_prefix('[').and_then(|t| t.split_once(']')) {
            layers.push(name.0.to_string());
        } else if l.starts_with("  ") {
            let word = t.split_whitespace().next().unwrap_or("");
            let word = word.strip_suffix('/').unwrap_or(word);
            if known.contains(&word) {
                mods.push(word.to_string());
            }
        }
    }
    (layers, mods)
}

fn declared() -> (Vec<String>, Vec<String>) {
    (
        LAYERS.iter().map(|(l, _)| l.to_string()).collect(),
        modules().iter().map(|m| m.to_string()).collect(),
    )
}

#[test]
fn lib_rs_draws_the_layers_in_the_declared_order() {
    let lib = std::fs::read_to_string(src().join("lib.rs")).expect("lib.rs");
    let lines = lib
        .lines()
        .skip_while(|l| *l != "//! # Layout")
        .take_while(|l| l.starts_with("//!"))
        .filter_map(|l| l.strip_prefix("//! "));
    assert_eq!(drawn(lines), declared(), "lib.rs's `# Layout`");
}

#[test]
fn the_architecture_document_draws_the_layers_in_the_declared_order() {
    let doc = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/architecture.md");
    let doc = std::fs::read_to_string(doc).expect("docs/architecture.md");
    let lines = doc
        .lines()
        .skip_while(|l| !l.starts_with("## \u{a7}8. The hub's layers"))
        .skip_while(|l| !l.starts_with("```"))
        .skip(1)
        .take_while(|l| !l.starts_with("```"));
    assert_eq!(
        drawn(lines),
        declared(),
        "docs/architecture.md §8's drawing"
    );
}

#[test]
fn the_scan_sees_groups_aliases_modules_and_siblings() {
    let text = "use crate::{state, error};\nuse crate::domain::cards; // crate::routes in a comment\n\
                let x = crate::Busy::new(); macro!($crate::x); pub(crate) fn f() {}\n\
                use super::{bus, RouteDoc};\n";
    assert_eq!(
        crate_paths(text),
        vec![
            (1, "{".to_string()),
            (2, "domain".to_string()),
            (3, "Busy".to_string())
        ]
    );
    assert_eq!(
        paths_after(text, "super::"),
        vec![
            (4, "{".to_string()),
            (4, "bus".to_string()),
            (4, "RouteDoc".to_string())
        ]
    );
}

#[test]
fn a_planted_upward_import_and_a_planted_circle_are_caught() {
    let files = vec![
        (
            PathBuf::from("state.rs"),
            "use crate::routes::meta;\n".to_string(),
        ),
        (
            PathBuf::from("domain/a.rs"),
            "use super::b::x;\n".to_string(),
        ),
        (
            PathBuf::from("domain/b.rs"),
            "use crate::domain::a::y;\n".to_string(),
        ),
        (
            PathBuf::from("domain/mod.rs"),
            "pub mod a;\npub mod b;\n".to_string(),
        ),
    ];
    let bad = violations(&files);
    assert_eq!(bad.len(), 1, "{bad:?}");
    assert!(bad[0].contains("`state` imports from `routes`"), "{bad:?}");
    let edges = folder_edges(&files);
    assert_eq!(
        circle(&edges["domain"]),
        Some(vec!["a".to_string(), "b".to_string(), "a".to_string()])
    );
}
