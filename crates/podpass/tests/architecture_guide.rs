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
