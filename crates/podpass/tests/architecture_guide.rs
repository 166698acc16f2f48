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

#[test]
fn every_item_in_the_index_is_defined_in_its_file() {
    let (root, text) = guide();
    let mut checked = 0;
    for line in text.lines().filter(|l| l.starts_with("| ")) {
        let spans = code_spans(line);
        let (Some(file), Some(item)) = (spans.iter().find(|s| s.ends_with(".rs")), spans.last()) else { continue };
        let Some((kind, name)) = item.split_once(' ') else { continue };
        if !["fn", "struct", "enum", "trait"].contains(&kind) {
            continue;
        }
        let source = std::fs::read_to_string(root.join(file)).unwrap();
        let defined = source.lines().any(|l| {
            let l = l.trim_start();
            let l = ["pub(crate) ", "pub(super) ", "pub "].iter().find_map(|p| l.strip_prefix(p)).unwrap_or(l);
            let l = l.strip_prefix("async ").unwrap_or(l);
            l.strip_prefix(kind).and_then(|rest| rest.strip_prefix(' ')).is_some_and(|rest| {
                rest.strip_prefix(name).is_some_and(|after| after.starts_with(['(', '<', ' ', '{', ';', ':']))
            })
        });
        assert!(defined, "ARCHITECTURE.md: {file} defines no `{item}`");
        checked += 1;
    }
    assert!(checked >= 30, "only {checked} index entries found: has the guide's format changed?");
}
