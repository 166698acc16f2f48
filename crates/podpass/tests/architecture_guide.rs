//! ARCHITECTURE.md's map stays true: every path it names exists, and every `fn`, `struct`,
//! `enum` or `trait` its index names is defined in the file beside it.

#![allow(clippy::unwrap_used)]

use std::path::Path;

fn guide() -> (std::path::PathBuf, String) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let text = std::fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap();
    (root, text)
}

/// The backticked spans of a line.
fn code_spans(line: &str) -> Vec<&str> {
    line.split('`').skip(1).step_by(2).collect()
}

#[test]
fn every_path_in_the_guide_exists() {
    let (root, text) = guide();
    let mut checked = 0;
    for span in text.lines().flat_map(code_spans) {
        if span.starts_with("crates/") || span.starts_with("tests/") {
            assert!(root.join(span).exists(), "ARCHITECTURE.md names {span}, which does not exist");
            checked += 1;
        }
    }
    assert!(checked >= 40, "only {checked} paths found: has the guide's format changed?");
}

/// Whether `file` defines `item` (`fn x`, `struct x`, `enum x` or `trait x`); `None` when
/// the span names no such item.
fn defines(root: &Path, file: &str, item: &str) -> Option<bool> {
    let (kind, name) = item.split_once(' ')?;
    if !["fn", "struct", "enum", "trait"].contains(&kind) {
        return None;
    }
    let source = std::fs::read_to_string(root.join(file)).unwrap();
    Some(source.lines().any(|l| {
        let l = l.trim_start();
        let l = ["pub(crate) ", "pub(super) ", "pub "].iter().find_map(|p| l.strip_prefix(p)).unwrap_or(l);
        let l = l.strip_prefix("async ").unwrap_or(l);
        l.strip_prefix(kind).and_then(|rest| rest.strip_prefix(' ')).is_some_and(|rest| {
            rest.strip_prefix(name).is_some_and(|after| after.starts_with(['(', '<', ' ', '{', ';', ':']))
        })
    }))
}

#[test]
fn every_item_in_the_index_is_defined_in_its_file() {
    let (root, text) = guide();
    let mut checked = 0;
    for line in text.lines().filter(|l| l.starts_with("| ")) {
        let spans = code_spans(line);
        let (Some(file), Some(item)) = (spans.iter().find(|s| s.ends_with(".rs")), spans.last()) else { continue };
        let Some(defined) = defines(&root, file, item) else { continue };
        assert!(defined, "ARCHITECTURE.md: {file} defines no `{item}`");
        checked += 1;
    }
    assert!(checked >= 30, "only {checked} index entries found: has the guide's format changed?");
}

/// "How a pull flows" names, for each step, a file and the item in it that does the work:
/// every (`file.rs`, `fn x`) pair of that section is defined there.
#[test]
fn every_step_of_the_pull_flow_names_a_defined_item() {
    let (root, text) = guide();
    let section = text
        .split("## How a pull flows")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .expect("ARCHITECTURE.md has a \"How a pull flows\" section");
    let spans: Vec<&str> = section.lines().flat_map(code_spans).collect();
    let mut checked = 0;
    for pair in spans.windows(2) {
        let (file, item) = (pair[0], pair[1]);
        if !file.ends_with(".rs") {
            continue;
        }
        let Some(defined) = defines(&root, file, item) else { continue };
        assert!(defined, "ARCHITECTURE.md's pull flow: {file} defines no `{item}`");
        checked += 1;
    }
    assert!(checked >= 15, "only {checked} (file, item) pairs in the pull flow: has its format changed?");
}

/// The parts table's "depends on" column is each crate's podpass dependencies, exactly.
#[test]
fn the_parts_table_names_each_crates_podpass_dependencies() {
    let (root, text) = guide();
    let mut checked = 0;
    for line in text.lines().filter(|l| l.starts_with("| `crates/")) {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let (Some(krate), Some(depends)) = (cells.get(1), cells.get(3)) else { continue };
        let krate = krate.trim_matches('`');
        let claimed: std::collections::BTreeSet<String> = if depends.starts_with("nothing of podpass") {
            Default::default()
        } else {
            depends
                .split(',')
                .map(|d| d.split_whitespace().next().unwrap_or_default().to_owned())
                .filter(|d| !d.is_empty())
                .collect()
        };
        let manifest = std::fs::read_to_string(root.join(krate).join("Cargo.toml")).unwrap();
        let mut in_dependencies = false;
        let mut actual = std::collections::BTreeSet::new();
        for l in manifest.lines() {
            let l = l.trim();
            if l.starts_with('[') {
                in_dependencies = l == "[dependencies]";
                continue;
            }
            if in_dependencies && let Some(rest) = l.strip_prefix("podpass-") {
                let name: String = rest.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '-').collect();
                actual.insert(name);
            }
        }
        assert_eq!(claimed, actual, "ARCHITECTURE.md's parts table for {krate} (depends on: {depends})");
        checked += 1;
    }
    assert!(checked >= 9, "only {checked} crates in the parts table: has its format changed?");
}

/// The code of a Rust file that names things: up to its first `#[cfg(test)]`, without
/// comments (a doc comment may mention any kind).
fn code_of(source: &str) -> String {
    let code = source.split("#[cfg(test)]").next().unwrap_or_default();
    code.lines().map(|l| l.split("//").next().unwrap_or_default()).collect::<Vec<_>>().join("\n")
}

/// Whether `code` holds `word` with no identifier character on either side.
fn names_word(code: &str, word: &str) -> bool {
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    code.match_indices(word).any(|(at, _)| {
        let before = code[..at].chars().next_back();
        let after = code[at + word.len()..].chars().next();
        !before.is_some_and(ident) && !after.is_some_and(ident)
    })
}

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// "To add a kind": a kind is declared in one file and listed in one place; besides those,
/// only its admission or controller and the bootstrap roles name it. Generated files (the
/// protobuf schema, written from the declarations) are derived, not declarations.
const BOOTSTRAP_ROLES: &str = "crates/podpass-apiserver/src/server/authz/bootstrap.rs";

#[test]
fn a_kind_is_named_in_at_most_four_files_of_the_api_server() {
    let (root, text) = guide();
    assert!(text.contains("## To add a kind"), "ARCHITECTURE.md explains how to add a kind");
    let mut files = Vec::new();
    rust_files(&root.join("crates/podpass-apiserver/src"), &mut files);
    let sources: Vec<(String, String)> = files
        .iter()
        .map(|f| (f.strip_prefix(&root).unwrap().display().to_string(), std::fs::read_to_string(f).unwrap()))
        .filter(|(_, source)| !source.starts_with("// @generated"))
        .map(|(name, source)| (name, code_of(&source)))
        .collect();
    let kinds = [
        ("ResourceQuota", "resourcequotas", "resource_quota"),
        ("LimitRange", "limitranges", "limit_range"),
        ("EndpointSlice", "endpointslices", "endpoint_slice"),
    ];
    for (kind, plural, module) in kinds {
        // The bootstrap roles are one policy in two files: the cluster's and the components'.
        let mut naming: Vec<&str> = sources
            .iter()
            .filter(|(_, code)| [kind, plural, module].iter().any(|w| names_word(code, w)))
            .map(|(name, _)| name.as_str())
            .map(|name| if name.ends_with("authz/controller_policy.rs") { BOOTSTRAP_ROLES } else { name })
            .collect();
        naming.sort_unstable();
        naming.dedup();
        let declared = format!("crates/podpass-apiserver/src/server/rest/kinds/{module}.rs");
        assert!(naming.contains(&declared.as_str()), "{kind} is declared in {declared}: {naming:?}");
        assert!(naming.contains(&"crates/podpass-apiserver/src/server/rest/kinds/mod.rs"), "{kind} is listed");
        assert!(naming.len() <= 4, "{kind} is named in {} files: {naming:#?}", naming.len());
    }
    assert!(names_word("a ResourceQuota b", "ResourceQuota") && !names_word("ResourceQuotaStrategy", "ResourceQuota"));
}

/// The error types of every `Result<…>` written in `code`.
fn result_error_types(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (at, _) in code.match_indices("Result<") {
        let rest = &code[at + "Result<".len()..];
        let (mut depth, mut comma) = (0usize, None);
        for (i, c) in rest.char_indices() {
            match c {
                '<' | '(' | '[' => depth += 1,
                ')' | ']' => depth = depth.saturating_sub(1),
                '>' if depth == 0 => {
                    if let Some(start) = comma {
                        out.push(rest[start..i].trim().to_owned());
                    }
                    break;
                }
                '>' => depth -= 1,
                ',' if depth == 0 => comma = Some(i + 1),
                _ => {}
            }
        }
    }
    out
}

/// Libraries return typed errors: no `Result<_, String>` in the node or the API server,
/// tests included.
#[test]
fn the_node_and_the_api_server_return_typed_errors() {
    let (root, _) = guide();
    let mut files = Vec::new();
    for krate in ["crates/podpass-node/src", "crates/podpass-apiserver/src"] {
        rust_files(&root.join(krate), &mut files);
    }
    let mut stringly = Vec::new();
    for file in &files {
        let source = std::fs::read_to_string(file).unwrap();
        if result_error_types(&source).iter().any(|e| e == "String") {
            stringly.push(file.strip_prefix(&root).unwrap().display().to_string());
        }
    }
    assert!(stringly.is_empty(), "Result<_, String> in {stringly:#?}");
    assert_eq!(result_error_types("fn f() -> Result<BTreeMap<String, String>, MalformedPair>"), ["MalformedPair"]);
    assert_eq!(result_error_types("Result<(), String>"), ["String"]);
}
