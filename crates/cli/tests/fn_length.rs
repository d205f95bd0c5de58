//! No function over [`LIMIT`] lines outside tables and tests (docs/architecture.md §9).
//!
//! Every `.rs` file under `crates/*/src` is parsed with `syn`; each `fn` and method (a trait's
//! default bodies included) is measured from its `fn` line to its closing brace. Skipped: test
//! code (`#[cfg(test)]` modules and items, `#[test]` and `#[tokio::test]` functions, files under
//! `tests/`, and the files in [`TEST_CODE`]). A long function is allowed only when it is a data
//! table ([`TABLES`]) or still waits for its split ([`NOT_YET_SPLIT`]); every entry of both lists
//! must still name a function over the limit, so the lists can only shrink.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use syn::visit::Visit;

/// The longest a function may be, in lines (its `fn` line to its closing brace, both counted).
const LIMIT: usize = 120;

/// Functions that are data tables, with why: (file, function, reason).
const TABLES: &[(&str, &str, &str)] = &[(
    "crates/hub/src/routes/mod.rs",
    "table",
    "the hub's route table: one `(method, path, handler, policy)` row per route, read top to \
     bottom against docs/protocol.md",
)];

/// Source files that are test code although they live under `src/`: (file, reason).
const TEST_CODE: &[(&str, &str)] = &[(
    "crates/store/src/conformance.rs",
    "the store conformance suite: test bodies every backend runs as its tests \
     (`conformance_suite!`), compiled only with the `conformance` feature",
)];

/// Long functions not split yet (issue #26). The list has shrunk to empty and stays so: a long
/// function is split into named steps, never added here.
const NOT_YET_SPLIT: &[(&str, &str)] = &[];

/// One measured function.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Measured {
    /// `Type::method` inside an `impl` or a trait, `module::name` inside an inline module.
    name: String,
    /// The line of its `fn` keyword.
    line: usize,
    /// Its length in lines.
    lines: usize,
}

/// Whether attributes mark test code: `#[cfg(test)]`, `#[test]`, `#[tokio::test]`.
fn is_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        let path = a.path();
        if path.segments.last().is_some_and(|s| s.ident == "test") {
            return true;
        }
        match &a.meta {
            syn::Meta::List(l) if path.is_ident("cfg") => l.tokens.to_string().trim() == "test",
            _ => false,
        }
    })
}

/// The line of a span's start or end (1-based), from `proc-macro2`'s span locations.
fn line(span: proc_macro2::Span, end: bool) -> usize {
    if end {
        span.end().line
    } else {
        span.start().line
    }
}

/// Walks one file, measuring every function that is not test code.
#[derive(Default)]
struct Measure {
    /// The inline modules and the `impl` or trait the walk is in.
    scope: Vec<String>,
    found: Vec<Measured>,
}

impl Measure {
    fn record(&mut self, ident: &syn::Ident, sig: &syn::Signature, block: &syn::Block) {
        let start = line(sig.fn_token.span, false);
        let end = line(block.brace_token.span.close(), true);
        let mut name = self.scope.clone();
        name.push(ident.to_string());
        self.found.push(Measured {
            name: name.join("::"),
            line: start,
            lines: end + 1 - start,
        });
    }
}

/// The last segment of a type's path (`PgStore` for `crate::PgStore<T>`).
fn type_name(ty: &syn::Type) -> String {
    match ty {
        syn::Type::Path(p) => p
            .path
            .segments
            .last()
            .map(|s| s.ident.to_string())
            .unwrap_or_default(),
        _ => "_".to_string(),
    }
}

impl<'ast> Visit<'ast> for Measure {
    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        if is_test(&m.attrs) {
            return;
        }
        self.scope.push(m.ident.to_string());
        syn::visit::visit_item_mod(self, m);
        self.scope.pop();
    }

    fn visit_item_impl(&mut self, i: &'ast syn::ItemImpl) {
        if is_test(&i.attrs) {
            return;
        }
        self.scope.push(type_name(&i.self_ty));
        syn::visit::visit_item_impl(self, i);
        self.scope.pop();
    }

    fn visit_item_trait(&mut self, t: &'ast syn::ItemTrait) {
        if is_test(&t.attrs) {
            return;
        }
        self.scope.push(t.ident.to_string());
        syn::visit::visit_item_trait(self, t);
        self.scope.pop();
    }

    fn visit_item_fn(&mut self, f: &'ast syn::ItemFn) {
        if is_test(&f.attrs) {
            return;
        }
        self.record(&f.sig.ident, &f.sig, &f.block);
        syn::visit::visit_item_fn(self, f);
    }

    fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
        if is_test(&f.attrs) {
            return;
        }
        self.record(&f.sig.ident, &f.sig, &f.block);
        syn::visit::visit_impl_item_fn(self, f);
    }

    fn visit_trait_item_fn(&mut self, f: &'ast syn::TraitItemFn) {
        if is_test(&f.attrs) {
            return;
        }
        if let Some(block) = &f.default {
            self.record(&f.sig.ident, &f.sig, block);
        }
        syn::visit::visit_trait_item_fn(self, f);
    }
}

/// Every function of one source text that is not test code.
fn measure(text: &str) -> syn::Result<Vec<Measured>> {
    let file = syn::parse_file(text)?;
    let mut m = Measure::default();
    m.visit_file(&file);
    Ok(m.found)
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("repository root")
}

/// Every `.rs` file under `crates/*/src` (never under a `tests/` folder), relative to the
/// root, sorted.
fn source_files(root: &Path) -> Vec<String> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                if e.file_name() != "tests" {
                    walk(&p, out);
                }
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    let mut files = Vec::new();
    let crates = std::fs::read_dir(root.join("crates")).expect("read crates/");
    for c in crates.flatten() {
        walk(&c.path().join("src"), &mut files);
    }
    let mut rel: Vec<String> = files
        .iter()
        .map(|p| {
            p.strip_prefix(root)
                .expect("under the root")
                .to_string_lossy()
                .replace('\\', "/")
        })
        .collect();
    rel.sort();
    rel
}

/// Every function over the limit in the workspace's sources: (file, name) → (line, lines).
fn long_functions(root: &Path) -> BTreeMap<(String, String), (usize, usize)> {
    let mut long = BTreeMap::new();
    for rel in source_files(root) {
        if TEST_CODE.iter().any(|(f, _)| *f == rel) {
            continue;
        }
        let text = std::fs::read_to_string(root.join(&rel)).expect("read a source file");
        let found = measure(&text).unwrap_or_else(|e| panic!("{rel}: syn cannot parse it: {e}"));
        for m in found.into_iter().filter(|m| m.lines > LIMIT) {
            long.insert((rel.clone(), m.name), (m.line, m.lines));
        }
    }
    long
}

/// What is wrong, one line each: long functions not listed, and listed ones no longer long.
fn violations(long: &BTreeMap<(String, String), (usize, usize)>) -> Vec<String> {
    let listed = |file: &str, name: &str| {
        TABLES.iter().any(|(f, n, _)| *f == file && *n == name)
            || NOT_YET_SPLIT.iter().any(|(f, n)| *f == file && *n == name)
    };
    let mut bad = Vec::new();
    for ((file, name), (line, lines)) in long {
        if !listed(file, name) {
            bad.push(format!(
                "{file}:{line}: `{name}` is {lines} lines, over {LIMIT}: split it into named \
                 steps (docs/architecture.md §9)"
            ));
        }
    }
    let entries = TABLES
        .iter()
        .map(|(f, n, _)| ("TABLES", *f, *n))
        .chain(NOT_YET_SPLIT.iter().map(|(f, n)| ("NOT_YET_SPLIT", *f, *n)));
    for (list, file, name) in entries {
        if !long.contains_key(&(file.to_string(), name.to_string())) {
            bad.push(format!(
                "{file}: `{name}` is listed in {list} but is no longer over {LIMIT} lines (or \
                 is gone): remove it from the list"
            ));
        }
    }
    bad
}

#[test]
fn no_function_is_over_the_limit_outside_tables_and_tests() {
    let root = repo_root();
    let long = long_functions(&root);
    let bad = violations(&long);
    assert!(
        bad.is_empty(),
        "{} problem(s) with function length:\n  {}",
        bad.len(),
        bad.join("\n  ")
    );
}

#[test]
fn the_lists_name_real_files() {
    let root = repo_root();
    let files = TABLES
        .iter()
        .map(|(f, _, _)| *f)
        .chain(TEST_CODE.iter().map(|(f, _)| *f))
        .chain(NOT_YET_SPLIT.iter().map(|(f, _)| *f));
    for f in files {
        assert!(root.join(f).is_file(), "{f} is listed but does not exist");
    }
}

/// The measure itself: lengths, names, and what it skips.
#[test]
fn the_measure_counts_lines_and_skips_test_code() {
    let body = |n: usize| "    let _ = 1;\n".repeat(n);
    let text = format!(
        "fn short() {{\n{}}}\n\
         pub async fn long() {{\n{}}}\n\
         struct S;\n\
         impl S {{\n    fn method(&self) {{\n{}    }}\n}}\n\
         trait T {{\n    fn provided(&self) {{}}\n    fn required(&self);\n}}\n\
         mod inner {{\n    fn nested() {{}}\n}}\n\
         #[test]\nfn a_test() {{\n{}}}\n\
         #[tokio::test]\nasync fn an_async_test() {{}}\n\
         #[cfg(test)]\nmod tests {{\n    fn helper() {{\n{}    }}\n}}\n",
        body(3),
        body(LIMIT - 1),
        body(LIMIT - 2),
        body(LIMIT + 5),
        body(LIMIT + 5),
    );
    let found = measure(&text).expect("parse the sample");
    let got: Vec<(&str, usize)> = found.iter().map(|m| (m.name.as_str(), m.lines)).collect();
    assert_eq!(
        got,
        vec![
            ("short", 5),
            ("long", LIMIT + 1),
            ("S::method", LIMIT),
            ("T::provided", 1),
            ("inner::nested", 1),
        ]
    );
    assert_eq!(found[1].line, 6, "a function starts at its `fn` line");

    // Over the limit and not listed: named with its file, line and length.
    let mut long = BTreeMap::new();
    long.insert(
        ("crates/x/src/lib.rs".to_string(), "long".to_string()),
        (6, 121),
    );
    for (f, n) in NOT_YET_SPLIT {
        long.insert((f.to_string(), n.to_string()), (1, 200));
    }
    for (f, n, _) in TABLES {
        long.insert((f.to_string(), n.to_string()), (1, 200));
    }
    let bad = violations(&long);
    assert_eq!(bad.len(), 1, "{bad:?}");
    assert!(
        bad[0].starts_with("crates/x/src/lib.rs:6: `long` is 121 lines, over 120"),
        "{bad:?}"
    );

    // A listed function that is now short (or gone) is an error too: the lists only shrink
    // (shown on the route table while NOT_YET_SPLIT is empty).
    if let Some((f, n, _)) = TABLES.first() {
        long.remove(&(f.to_string(), n.to_string()));
        let bad = violations(&long);
        assert_eq!(bad.len(), 2, "{bad:?}");
        assert!(
            bad[1].contains("listed in TABLES but is no longer over 120 lines"),
            "{bad:?}"
        );
    }
}
