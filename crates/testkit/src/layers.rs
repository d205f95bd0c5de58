//! The import scanner the layer tests share (`crates/hub/tests/layers.rs`,
//! `crates/runner/tests/layers.rs`): a crate's source files, the module each belongs to, the
//! `crate::…` paths each names, and the names that break a declared top-to-bottom order.

use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read the source folder") {
        let path = entry.expect("a folder entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Every source file under `src` but `lib.rs` (the root, which wires every module together),
/// relative to `src`, with its text, in path order.
pub fn sources(src: &Path) -> Vec<(PathBuf, String)> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files.sort();
    files
        .into_iter()
        .filter_map(|path| {
            let rel = path.strip_prefix(src).expect("under src").to_path_buf();
            (rel != Path::new("lib.rs")).then(|| {
                (
                    rel,
                    std::fs::read_to_string(&path).expect("read a source file"),
                )
            })
        })
        .collect()
}

/// The module a source file belongs to: its first folder, or its own name for a top-level file.
pub fn module_of(rel: &Path) -> String {
    let first = rel.components().next().expect("a relative path");
    let first = first.as_os_str().to_string_lossy();
    first.strip_suffix(".rs").unwrap_or(&first).to_string()
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The names of a `{…}` group's top level (the text after its `{`).
fn group_names(group: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut depth = 0;
    let mut start = true;
    for (j, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => break,
            '}' => depth -= 1,
            ',' if depth == 0 => start = true,
            c if start && is_ident(c) => {
                start = false;
                names.push(group[j..].chars().take_while(|&c| is_ident(c)).collect());
            }
            c if !c.is_whitespace() => start = false,
            _ => {}
        }
    }
    names
}

/// Every `<prefix>…` path in one file's code (comments dropped): (line, each first segment that
/// follows the prefix; for a group `{a, b::c}` each of its top-level names, and `{` first).
pub fn paths_after(text: &str, prefix: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let code = line.split("//").next().unwrap_or("");
        let mut rest = code;
        let mut offset = 0;
        while let Some(at) = rest.find(prefix) {
            let before = code[..offset + at].chars().next_back();
            let after = &rest[at + prefix.len()..];
            if !before.is_some_and(|c| is_ident(c) || c == '$' || c == ':') {
                if let Some(group) = after.strip_prefix('{') {
                    found.push((i + 1, "{".to_string()));
                    found.extend(group_names(group).into_iter().map(|n| (i + 1, n)));
                } else {
                    let segment: String = after.chars().take_while(|&c| is_ident(c)).collect();
                    found.push((i + 1, segment));
                }
            }
            offset += at + prefix.len();
            rest = after;
        }
    }
    found
}

/// The first segment of every `crate::…` path (a group is `{`, its members left out).
pub fn crate_paths(text: &str) -> Vec<(usize, String)> {
    let mut found: Vec<(usize, String)> = Vec::new();
    for (line, seg) in paths_after(text, "crate::") {
        if found.last().is_some_and(|(l, s)| *l == line && s == "{") && seg != "{" {
            continue;
        }
        found.push((line, seg));
    }
    found
}

/// Every break of `order` (the modules from the top: one may name its own and any after it)
/// in `files`, one line each; `noun` is what the test calls an entry (`layer`, `module`).
pub fn order_violations(files: &[(PathBuf, String)], order: &[&str], noun: &str) -> Vec<String> {
    let mut bad = Vec::new();
    for (rel, text) in files {
        let module = module_of(rel);
        let Some(mine) = order.iter().position(|m| *m == module) else {
            bad.push(format!(
                "{}: `{module}` is in no layer of LAYERS",
                rel.display()
            ));
            continue;
        };
        for (line, segment) in crate_paths(text) {
            let at = format!("{}:{line}", rel.display());
            match order.iter().position(|m| *m == segment) {
                None => bad.push(format!(
                    "{at}: `crate::{segment}` does not name a {noun} (name it: crate::<{noun}>::…)"
                )),
                Some(theirs) if theirs < mine => bad.push(format!(
                    "{at}: `{module}` imports from `{segment}`, a {noun} above it"
                )),
                Some(_) => {}
            }
        }
    }
    bad
}
