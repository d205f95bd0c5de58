//! The design references in the repository resolve inside the repository.
//!
//! Code and docs cite the design as `docs/<name>.md §N` (or `§N.M`, lists such as `§3, §5` and
//! ranges such as `§7–§10`). Every cited file must exist under `docs/` and every cited section
//! must be a heading of that file (`## §N. …`, `## N. …` or `### N.M …`). A bare `§N` in a doc
//! refers to a section of that same doc; a bare `§N` in Rust must continue a citation that names
//! its doc. And nothing may point at files outside the repository: the original product's
//! reference notes, the product spec or the machine's shared directory. This file is not
//! scanned: its checker test feeds the checker wrong citations on purpose.
//!
//! Plain string scanning over `crates/**/*.rs`, `README.md` and `docs/*.md`; no process, no
//! network.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Text that points outside the repository. Spelled in pieces so that this file itself does not
/// read as a reference to what it forbids.
const OUTSIDE: &[&str] = &[
    concat!("refer", "ence/"),
    concat!("runner", "-behavior.md"),
    concat!("hub", "-protocol.md"),
    concat!("..", "/shared"),
    concat!("/work", "/shared"),
    concat!("refer", "ence §"),
    concat!("SP", "EC §"),
    concat!("SP", "EC.md"),
];

/// This file: its test data is deliberately wrong, so it is not scanned.
const SELF: &str = "tests/docs_refs.rs";

/// Separators allowed between the sections of one citation list.
const LIST_SEPARATORS: &[&str] = &[", and ", " and ", " or ", ", ", "–", "-", "/"];

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("repository root")
}

/// Every file the check reads, relative to the root, sorted.
fn scanned_files(root: &Path) -> Vec<PathBuf> {
    fn walk(dir: &Path, ext: &str, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let p = e.path();
            let name = e.file_name();
            if name == "target" || name.to_string_lossy().starts_with('.') {
                continue;
            }
            if p.is_dir() {
                walk(&p, ext, out);
            } else if p.extension().is_some_and(|x| x == ext) {
                out.push(p);
            }
        }
    }
    let mut files = Vec::new();
    walk(&root.join("crates"), "rs", &mut files);
    if let Ok(entries) = std::fs::read_dir(root.join("docs")) {
        for e in entries.flatten() {
            let p = e.path();
            if p.is_file() && p.extension().is_some_and(|x| x == "md") {
                files.push(p);
            }
        }
    }
    let readme = root.join("README.md");
    if readme.is_file() {
        files.push(readme);
    }
    let mut rel: Vec<PathBuf> = files
        .into_iter()
        .map(|p| p.strip_prefix(root).map(Path::to_path_buf).unwrap_or(p))
        .filter(|p| !p.ends_with(SELF))
        .collect();
    rel.sort();
    rel
}

/// The section ids a doc's headings define: `## §3. X` → `3`, `### 3.1 X` → `3.1`.
fn headings(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter(|l| l.starts_with('#'))
        .filter_map(|l| {
            let rest = l.trim_start_matches('#').trim_start();
            let rest = rest.strip_prefix('§').unwrap_or(rest);
            let id: String = rest
                .chars()
                .take_while(|c| c.is_ascii_digit() || *c == '.')
                .collect();
            let id = id.trim_end_matches('.');
            (!id.is_empty()).then(|| id.to_string())
        })
        .collect()
}

/// One `§…` token at the start of `s`: its id and the rest. Letters glued to the number stay in
/// the id (`§4.8f`), so a leftover of an old numbering cannot resolve by accident.
fn section_at(s: &str) -> Option<(String, &str)> {
    let rest = s.strip_prefix('§')?;
    let len = rest
        .char_indices()
        .find(|(_, c)| !(c.is_ascii_alphanumeric() || *c == '.'))
        .map_or(rest.len(), |(i, _)| i);
    let id = rest[..len].trim_end_matches('.');
    if !id.starts_with(|c: char| c.is_ascii_digit()) {
        return None;
    }
    Some((id.to_string(), &rest[id.len()..]))
}

/// The list of sections at the start of `s` (`§3, §5.1–§5.4 and §7`), and the rest of `s`.
fn section_list(s: &str) -> (Vec<String>, &str) {
    let mut ids = Vec::new();
    let mut rest = s;
    let Some((id, r)) = section_at(rest) else {
        return (ids, s);
    };
    ids.push(id);
    rest = r;
    'more: loop {
        for sep in LIST_SEPARATORS {
            if let Some(after) = rest.strip_prefix(sep)
                && let Some((id, r)) = section_at(after)
            {
                ids.push(id);
                rest = r;
                continue 'more;
            }
        }
        return (ids, rest);
    }
}

/// A design citation found in a line.
#[derive(Debug, PartialEq)]
struct Citation {
    /// `runner` for `docs/runner.md`; `None` for a bare `§N`.
    doc: Option<String>,
    /// The cited sections (empty: the file as a whole).
    sections: Vec<String>,
}

/// The doc a line ends with (`… (docs/runner.md`), for a citation continued on the next line.
fn trailing_doc(line: &str) -> Option<String> {
    let t = line.trim_end().trim_end_matches('`');
    let name = t.strip_suffix(".md")?;
    let start = name.rfind("docs/")? + "docs/".len();
    let name = &name[start..];
    (!name.is_empty() && name.chars().all(is_name_char)).then(|| name.to_string())
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '-' || c == '_'
}

/// Every citation in `line`: `docs/<name>.md` with an optional section list after it, and bare
/// section lists. `carried` is the doc the previous line ended with.
fn citations(line: &str, carried: Option<&str>) -> Vec<Citation> {
    let mut out = Vec::new();
    let mut rest = line;
    // A line that starts (after comment markers) with a section list continues the previous
    // line's citation.
    if let Some(doc) = carried {
        let body = line
            .trim_start()
            .trim_start_matches(['/', '!'])
            .trim_start();
        let (ids, r) = section_list(body);
        if !ids.is_empty() {
            out.push(Citation {
                doc: Some(doc.to_string()),
                sections: ids,
            });
            rest = r;
        }
    }
    while !rest.is_empty() {
        let next_doc = rest.find("docs/");
        let next_sec = rest.find('§');
        match (next_doc, next_sec) {
            (Some(d), s) if s.is_none_or(|s| d < s) => {
                let after = &rest[d + "docs/".len()..];
                let len = after
                    .char_indices()
                    .find(|(_, c)| !is_name_char(*c))
                    .map_or(after.len(), |(i, _)| i);
                let name = &after[..len];
                let Some(tail) = after[len..].strip_prefix(".md") else {
                    rest = &after[len..];
                    continue;
                };
                if name.is_empty() {
                    rest = tail;
                    continue;
                }
                let tail_list = tail.trim_start_matches('`').trim_start_matches(' ');
                let (ids, r) = section_list(tail_list);
                out.push(Citation {
                    doc: Some(name.to_string()),
                    sections: ids.clone(),
                });
                rest = if ids.is_empty() { tail } else { r };
            }
            (_, Some(s)) => {
                let (ids, r) = section_list(&rest[s..]);
                if ids.is_empty() {
                    rest = &rest[s + '§'.len_utf8()..];
                } else {
                    out.push(Citation {
                        doc: None,
                        sections: ids,
                    });
                    rest = r;
                }
            }
            _ => break,
        }
    }
    out
}

/// What is wrong with one file's citations, as `path:line: …` lines.
fn check_file(
    rel: &Path,
    text: &str,
    docs: &BTreeMap<String, BTreeSet<String>>,
    problems: &mut Vec<String>,
) {
    let in_doc = rel.starts_with("docs") && rel.extension().is_some_and(|e| e == "md");
    let own_doc = in_doc
        .then(|| rel.file_stem().map(|s| s.to_string_lossy().to_string()))
        .flatten();
    let mut carried: Option<String> = None;
    for (i, line) in text.lines().enumerate() {
        let at = format!("{}:{}", rel.display(), i + 1);
        for c in citations(line, carried.as_deref()) {
            let doc = match (&c.doc, &own_doc) {
                (Some(d), _) => d.clone(),
                (None, Some(own)) => own.clone(),
                (None, None) => {
                    problems.push(format!(
                        "{at}: bare {} — name the doc it belongs to (docs/runner.md, docs/protocol.md or docs/architecture.md)",
                        c.sections
                            .iter()
                            .map(|s| format!("§{s}"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ));
                    continue;
                }
            };
            let Some(ids) = docs.get(&doc) else {
                problems.push(format!("{at}: cites docs/{doc}.md, which does not exist"));
                continue;
            };
            for s in &c.sections {
                if !ids.contains(s) {
                    problems.push(format!(
                        "{at}: cites docs/{doc}.md §{s}, which has no such section heading"
                    ));
                }
            }
        }
        carried = trailing_doc(line);
    }
}

fn load_docs(root: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut docs = BTreeMap::new();
    if let Ok(entries) = std::fs::read_dir(root.join("docs")) {
        for e in entries.flatten() {
            let p = e.path();
            if p.extension().is_some_and(|x| x == "md")
                && let (Some(stem), Ok(text)) = (p.file_stem(), std::fs::read_to_string(&p))
            {
                docs.insert(stem.to_string_lossy().to_string(), headings(&text));
            }
        }
    }
    docs
}

fn report(what: &str, problems: &[String]) {
    assert!(
        problems.is_empty(),
        "{} {what}:\n{}",
        problems.len(),
        problems.join("\n")
    );
}

#[test]
fn design_citations_resolve() {
    let root = repo_root();
    let docs = load_docs(&root);
    for required in ["architecture", "protocol", "runner"] {
        assert!(docs.contains_key(required), "docs/{required}.md is missing");
    }
    let mut problems = Vec::new();
    for rel in scanned_files(&root) {
        let text = std::fs::read_to_string(root.join(&rel)).expect("readable source file");
        check_file(&rel, &text, &docs, &mut problems);
    }
    report("design citations do not resolve", &problems);
}

#[test]
fn nothing_refers_outside_the_repository() {
    let root = repo_root();
    let mut problems = Vec::new();
    for rel in scanned_files(&root) {
        let text = std::fs::read_to_string(root.join(&rel)).expect("readable source file");
        for (i, line) in text.lines().enumerate() {
            for p in OUTSIDE {
                if line.contains(p) {
                    problems.push(format!(
                        "{}:{}: refers outside the repository ({p}): {}",
                        rel.display(),
                        i + 1,
                        line.trim()
                    ));
                }
            }
        }
    }
    report("references to files outside the repository", &problems);
}

/// The checker itself: it must find what is wrong, or the two tests above prove nothing.
#[test]
fn the_checker_finds_bad_citations() {
    let doc = "# T\n\n## §1. One\n\n### 1.2 Sub\n\n## 2. Two\n";
    assert_eq!(
        headings(doc),
        ["1", "1.2", "2"].map(String::from).into_iter().collect()
    );
    let docs: BTreeMap<String, BTreeSet<String>> = [("runner".to_string(), headings(doc))]
        .into_iter()
        .collect();
    let check = |path: &str, text: &str| {
        let mut p = Vec::new();
        check_file(Path::new(path), text, &docs, &mut p);
        p
    };
    // Good: a list, a range, a continued line, a file-level citation, a bare § in a doc.
    assert!(check("crates/x.rs", "/// (docs/runner.md §1, §1.2 and §2)").is_empty());
    assert!(check("crates/x.rs", "/// `docs/runner.md` §1–§2.").is_empty());
    assert!(check("crates/x.rs", "//! one (docs/runner.md\n//! §1.2), two").is_empty());
    assert!(check("crates/x.rs", "/// see docs/runner.md (parking)").is_empty());
    assert!(check("docs/runner.md", "as in §2").is_empty());
    // Bad: a missing section, an old suffix, a missing doc, a bare § in code.
    assert_eq!(check("crates/x.rs", "/// (docs/runner.md §3)").len(), 1);
    assert_eq!(
        check("crates/x.rs", "/// (docs/runner.md §1, §1.9)").len(),
        1
    );
    assert_eq!(check("crates/x.rs", "/// (docs/runner.md §1.2f)").len(), 1);
    assert_eq!(check("crates/x.rs", "/// (docs/hub.md §1)").len(), 1);
    assert_eq!(check("crates/x.rs", "/// the rule (§1)").len(), 1);
    assert_eq!(check("docs/runner.md", "as in §7").len(), 1);
}
