//! The runner's layers, enforced (docs/architecture.md §2): every module of `crates/runner/src`
//! names the layer it imports from (`crate::sys::fsx`, never a root alias or `crate::{…}`), and
//! names only its own layer or one below it. The order is declared once, in [`LAYERS`], and the
//! crate documentation (`src/lib.rs`'s `# Layout`) and the design (`docs/architecture.md` §2)
//! must list the same layers in the same order.

use std::path::{Path, PathBuf};
use trantor_testkit::layers::crate_paths;

/// The layers, from the top: a module may name its own layer and any after it here.
const LAYERS: &[&str] = &[
    "seat",
    "turn",
    "periphery",
    "hub",
    "triage",
    "config",
    "sys",
];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Every violation in the runner's sources, one line each.
fn violations() -> Vec<String> {
    let files = trantor_testkit::layers::sources(&src());
    trantor_testkit::layers::order_violations(&files, LAYERS, "layer")
}

#[test]
fn no_module_imports_from_a_layer_above_its_own_or_through_a_root_alias() {
    let bad = violations();
    assert!(bad.is_empty(), "layer violations:\n{}", bad.join("\n"));
}

#[test]
fn every_top_level_module_is_a_declared_layer() {
    let lib = std::fs::read_to_string(src().join("lib.rs")).expect("lib.rs");
    let mut declared: Vec<&str> = lib
        .lines()
        .filter_map(|l| l.strip_prefix("mod ")?.strip_suffix(';'))
        .collect();
    declared.sort_unstable();
    let mut layers = LAYERS.to_vec();
    layers.sort_unstable();
    assert_eq!(declared, layers, "lib.rs's `mod` lines against LAYERS");
}

/// The layer names in a list whose items start with a layer in backticks (`` `seat/` `` or
/// `` `config.rs` ``), in the order they appear.
fn listed_layers<'a>(lines: impl Iterator<Item = &'a str>) -> Vec<String> {
    lines
        .filter_map(|l| {
            let (_, tail) = l.split_once('`')?;
            let (name, _) = tail.split_once('`')?;
            let name = name.strip_suffix('/').or(name.strip_suffix(".rs"))?;
            LAYERS.contains(&name).then(|| name.to_string())
        })
        .collect()
}

#[test]
fn lib_rs_lists_the_layers_in_the_declared_order() {
    let lib = std::fs::read_to_string(src().join("lib.rs")).expect("lib.rs");
    let items = lib
        .lines()
        .skip_while(|l| *l != "//! # Layout")
        .take_while(|l| l.starts_with("//!"))
        .filter_map(|l| l.strip_prefix("//! - "));
    assert_eq!(listed_layers(items), LAYERS, "lib.rs's `# Layout` list");
}

#[test]
fn the_architecture_document_lists_the_layers_in_the_declared_order() {
    let doc = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/architecture.md");
    let doc = std::fs::read_to_string(doc).expect("docs/architecture.md");
    let items = doc
        .lines()
        .skip_while(|l| !l.starts_with("## \u{a7}2. The runner's layers"))
        .skip(1)
        .take_while(|l| !l.starts_with("## "))
        .filter(|l| {
            l.split_once(". **")
                .is_some_and(|(n, _)| n.parse::<u32>().is_ok())
        })
        .filter_map(|l| l.split_once("** (").map(|(_, tail)| tail));
    assert_eq!(
        listed_layers(items),
        LAYERS,
        "docs/architecture.md §2's list"
    );
}

#[test]
fn the_scan_sees_a_path_through_a_group_an_alias_and_a_layer() {
    let text = "use crate::{fsx, gitx};\nuse crate::sys::fsx; // crate::seat in a comment\n\
                let x = crate::wake::classify(); macro!($crate::x); pub(crate) fn f() {}\n";
    assert_eq!(
        crate_paths(text),
        vec![
            (1, "{".to_string()),
            (2, "sys".to_string()),
            (3, "wake".to_string())
        ]
    );
}
