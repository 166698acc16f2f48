//! `podpass audit images`: one record of who pulled what, joined from the node's image
//! decisions (`podpass node run --audit-log-path`) and registry-auth's grants (its
//! `--audit-log-path`) on the keys both carry — pod UID, service account UID, node, the
//! credential id (`jti`) of the token a provider was given, image and digest. Files are
//! read a line at a time, so memory does not grow with the logs: a query holds its answer's
//! keys only (`--unused-grants` the credential ids the nodes used, at most
//! [`MAX_CREDENTIAL_IDS`]). Rotated files are given like the current one.

use std::collections::HashSet;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use serde_json::{Value, json};

/// `podpass audit …`.
#[derive(Debug, Subcommand)]
pub enum AuditCommand {
    /// Who pulled what: the nodes' image decisions joined with registry-auth's grants.
    Images(ImagesArgs),
}

/// Flags of `podpass audit images`.
#[derive(Debug, Args)]
pub struct ImagesArgs {
    /// A node's image decisions (its `--audit-log-path`; rotated files too), repeatable.
    #[arg(long = "node-log", required = true)]
    node_logs: Vec<PathBuf>,
    /// registry-auth's audit (its `--audit-log-path`; rotated files too), repeatable.
    #[arg(long = "registry-auth-log")]
    registry_auth_logs: Vec<PathBuf>,
    /// Which pods ran this digest (`sha256:…`).
    #[arg(long, group = "query")]
    digest: Option<String>,
    /// What this pod (`NAMESPACE/NAME` or its UID) pulled, and on whose credential: its
    /// decisions, then the grants made to the credentials it used.
    #[arg(long, group = "query")]
    pod: Option<String>,
    /// Grants of registry-auth whose credential no node decision used.
    #[arg(long, group = "query")]
    unused_grants: bool,
    /// `table` or `json` (one object per line).
    #[arg(short = 'o', long = "output", default_value = "table", value_parser = ["table", "json"])]
    output: String,
}

/// Longest line read as an event; longer ones are skipped (and counted).
const MAX_LINE: usize = 1 << 20;
/// Credential ids `--unused-grants` holds at most.
pub const MAX_CREDENTIAL_IDS: usize = 1_000_000;

/// Runs `audit images`: Ok(true) when anything matched.
pub fn run(cmd: AuditCommand) -> Result<bool> {
    let AuditCommand::Images(a) = cmd;
    let json = a.output == "json";
    let mut skipped = 0usize;
    let matched = if let Some(digest) = &a.digest {
        let mut out = Printer::new(json, &DECISION_COLUMNS);
        for_each_event(&a.node_logs, &mut skipped, |e| {
            if e["kind"] == "ImageDecision" && e["digest"] == digest.as_str() && e["decision"] != "refused" {
                out.row(decision_row(&e));
            }
            Ok(())
        })?;
        out.finish()
    } else if let Some(pod) = &a.pod {
        let mut used = HashSet::new();
        let mut out = Printer::new(json, &DECISION_COLUMNS);
        for_each_event(&a.node_logs, &mut skipped, |e| {
            if e["kind"] == "ImageDecision" && (e["pod"] == pod.as_str() || e["pod_uid"] == pod.as_str()) {
                if let Some(id) = jti(&e["credential_id"]) {
                    used.insert(id.to_owned());
                }
                out.row(decision_row(&e));
            }
            Ok(())
        })?;
        let decisions = out.finish();
        let mut grants = Printer::new(json, &GRANT_COLUMNS);
        for_each_event(&a.registry_auth_logs, &mut skipped, |e| {
            if is_grant(&e) && jti(&e["jti"]).is_some_and(|j| used.contains(j)) {
                grants.row(grant_row(&e));
            }
            Ok(())
        })?;
        decisions | grants.finish()
    } else if a.unused_grants {
        if a.registry_auth_logs.is_empty() {
            bail!("--unused-grants: give registry-auth's audit with --registry-auth-log");
        }
        let mut used = HashSet::new();
        for_each_event(&a.node_logs, &mut skipped, |e| {
            let pulled = matches!(e["decision"].as_str(), Some("pulled" | "verified_at_origin"));
            if e["kind"] == "ImageDecision"
                && pulled
                && let Some(id) = jti(&e["credential_id"])
            {
                if used.len() >= MAX_CREDENTIAL_IDS {
                    bail!("more than {MAX_CREDENTIAL_IDS} credential ids in the node logs: give fewer (newer) files");
                }
                used.insert(id.to_owned());
            }
            Ok(())
        })?;
        let mut out = Printer::new(json, &GRANT_COLUMNS);
        for_each_event(&a.registry_auth_logs, &mut skipped, |e| {
            if is_grant(&e) && !jti(&e["jti"]).is_some_and(|j| used.contains(j)) {
                out.row(grant_row(&e));
            }
            Ok(())
        })?;
        out.finish()
    } else {
        bail!("give one query: --digest DIGEST, --pod NAMESPACE/NAME|UID or --unused-grants");
    };
    if skipped > 0 {
        eprintln!("note: {skipped} lines were not audit events (or longer than {MAX_LINE} bytes) and were skipped");
    }
    Ok(matched)
}

/// A credential id as a bare `jti` (the node writes `JTI=<jti>`, registry-auth `<jti>`).
fn jti(v: &Value) -> Option<&str> {
    let s = v.as_str()?;
    let s = s.strip_prefix("JTI=").unwrap_or(s);
    (!s.is_empty()).then_some(s)
}

fn is_grant(e: &Value) -> bool {
    matches!(e["decision"].as_str(), Some("granted" | "partial"))
}

const DECISION_COLUMNS: [(&str, usize); 7] =
    [("TIME", 20), ("NODE", 10), ("POD", 24), ("DECISION", 19), ("IMAGE", 40), ("DIGEST", 19), ("CREDENTIAL", 0)];

const GRANT_COLUMNS: [(&str, usize); 6] =
    [("TIME", 20), ("SERVICE ACCOUNT", 24), ("POD", 24), ("NODE", 10), ("SCOPE", 40), ("CREDENTIAL", 0)];

fn text(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_owned()
}

fn decision_row(e: &Value) -> Value {
    let credential = match (jti(&e["credential_id"]), e["credential"]["type"].as_str()) {
        (Some(id), _) => format!("JTI={id}"),
        (None, Some("secret")) => {
            format!("secret {}/{}", text(&e["credential"]["namespace"]), text(&e["credential"]["name"]))
        }
        (None, Some(other)) => other.to_owned(),
        (None, None) => String::new(),
    };
    json!({
        "time": e["time"], "node": e["node"], "pod": e["pod"], "pod_uid": e["pod_uid"],
        "service_account": e["service_account"], "service_account_uid": e["service_account_uid"],
        "decision": e["decision"], "reason": e["reason"], "image": e["image"], "digest": e["digest"],
        "credential_id": e["credential_id"], "credential": credential,
    })
}

fn grant_row(e: &Value) -> Value {
    json!({
        "time": e["time"], "service_account": e["service_account"], "service_account_uid": e["service_account_uid"],
        "pod": e["pod"], "pod_uid": e["pod_uid"], "node": e["node"], "scope": e["scope_granted"],
        "credential": e["credential"], "credential_id": jti(&e["jti"]).map(|j| format!("JTI={j}")),
        "decision": e["decision"],
    })
}

/// Prints rows as they come: JSON lines, or a table of fixed-width columns (a header
/// first), so nothing is held.
struct Printer {
    json: bool,
    columns: &'static [(&'static str, usize)],
    rows: usize,
}

impl Printer {
    fn new(json: bool, columns: &'static [(&'static str, usize)]) -> Self {
        Self { json, columns, rows: 0 }
    }

    fn row(&mut self, row: Value) {
        if self.json {
            outln!("{row}");
        } else {
            if self.rows == 0 {
                outln!("{}", self.line(|name| name.to_owned()));
            }
            outln!("{}", self.line(|name| cell(&row, name)));
        }
        self.rows += 1;
    }

    fn line(&self, value: impl Fn(&str) -> String) -> String {
        let mut line = String::new();
        for (name, width) in self.columns {
            let v = value(name);
            if *width == 0 {
                line.push_str(&v);
            } else {
                let v: String =
                    if v.chars().count() > *width { v.chars().take(width - 1).chain(['…']).collect() } else { v };
                line.push_str(&format!("{v:<width$}  "));
            }
        }
        line.trim_end().to_owned()
    }

    /// Whether any row was printed.
    fn finish(self) -> bool {
        self.rows > 0
    }
}

/// A table cell of `row` for column `name`.
fn cell(row: &Value, name: &str) -> String {
    let key = name.to_lowercase().replace(' ', "_");
    let v = &row[key.as_str()];
    let s = v.as_str().map_or_else(|| if v.is_null() { String::new() } else { v.to_string() }, str::to_owned);
    if key == "digest" {
        s.strip_prefix("sha256:").map_or(s.clone(), |h| format!("sha256:{}", &h[..h.len().min(12)]))
    } else {
        s
    }
}

/// Calls `f` with each JSON event of `files`, in order; lines that are not JSON objects or
/// longer than [`MAX_LINE`] are counted in `skipped`.
fn for_each_event(files: &[PathBuf], skipped: &mut usize, mut f: impl FnMut(Value) -> Result<()>) -> Result<()> {
    for path in files {
        let file = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
        each_line(BufReader::new(file), path, skipped, &mut f)?;
    }
    Ok(())
}

fn each_line(
    mut reader: impl BufRead,
    path: &Path,
    skipped: &mut usize,
    f: &mut impl FnMut(Value) -> Result<()>,
) -> Result<()> {
    let mut line = Vec::new();
    loop {
        line.clear();
        let n = reader
            .by_ref()
            .take(MAX_LINE as u64 + 1)
            .read_until(b'\n', &mut line)
            .with_context(|| format!("reading {}", path.display()))?;
        if n == 0 {
            return Ok(());
        }
        if line.len() > MAX_LINE && line.last() != Some(&b'\n') {
            // The rest of an overlong line, without holding it.
            *skipped += 1;
            let mut rest = Vec::new();
            loop {
                rest.clear();
                let m = reader.by_ref().take(64 << 10).read_until(b'\n', &mut rest)?;
                if m == 0 || rest.last() == Some(&b'\n') {
                    break;
                }
            }
            continue;
        }
        match serde_json::from_slice::<Value>(&line) {
            Ok(v) if v.is_object() => f(v)?,
            _ if line.iter().all(u8::is_ascii_whitespace) => {}
            _ => *skipped += 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_bounded_and_what_is_not_an_event_is_counted() {
        let long = "x".repeat(MAX_LINE + 10);
        let input = format!("{{\"a\":1}}\nnot json\n{long}\n\n{{\"a\":2}}\n[1]\n{{\"a\":3}}");
        let (mut seen, mut skipped) = (Vec::new(), 0);
        each_line(input.as_bytes(), Path::new("t"), &mut skipped, &mut |v| {
            seen.push(v["a"].as_i64().unwrap_or_default());
            Ok(())
        })
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(seen, [1, 2, 3]);
        assert_eq!(skipped, 3, "not json, overlong, not an object");
    }

    #[test]
    fn credential_ids_join_whoever_wrote_them() {
        assert_eq!(jti(&json!("JTI=abc")), Some("abc"));
        assert_eq!(jti(&json!("abc")), Some("abc"));
        assert_eq!(jti(&json!("")), None);
        assert_eq!(jti(&Value::Null), None);
    }

    #[test]
    fn table_cells_fit_their_columns() {
        let p = Printer::new(false, &GRANT_COLUMNS);
        let row = json!({"time": "t", "service_account": "a".repeat(40), "scope": "repository:x:pull"});
        let line = p.line(|name| cell(&row, name));
        assert!(line.contains(&format!("{}…", "a".repeat(23))), "{line}");
        assert!(line.contains("repository:x:pull"));
    }
}
