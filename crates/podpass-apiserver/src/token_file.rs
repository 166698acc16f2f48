//! `--token-auth-file`: kube-apiserver's static token CSV (`token,user,uid,"g1,g2"`),
//! re-read whenever the file changes so that tokens can be added or revoked live.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, RwLock};
use std::time::{Instant, SystemTime};

use thiserror::Error;

/// Who a static token authenticates as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StaticUser {
    /// User name.
    pub name: String,
    /// UID.
    pub uid: String,
    /// Groups.
    pub groups: Vec<String>,
}

/// The token file is unusable (upstream messages where upstream has them).
#[derive(Debug, Error, PartialEq, Eq)]
pub enum TokenFileError {
    /// The file could not be read.
    #[error("reading token file {path:?}: {reason}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// A record has fewer than three columns.
    #[error("token file {path:?} must have at least 3 columns (token, user name, user uid), found {found}")]
    Columns {
        /// The file.
        path: PathBuf,
        /// Columns found.
        found: usize,
    },
    /// A quoted field is not terminated.
    #[error("token file {path:?} line {line}: unterminated quoted field")]
    Quote {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: usize,
    },
}

/// Splits one CSV record (RFC 4180 quoting, `""` escapes a quote).
fn csv_fields(line: &str) -> Option<Vec<String>> {
    let mut fields = Vec::new();
    let mut cur = String::new();
    let mut chars = line.chars().peekable();
    let mut quoted = false;
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('"', false) if cur.is_empty() => quoted = true,
            ('"', true) if chars.peek() == Some(&'"') => {
                cur.push('"');
                chars.next();
            }
            ('"', true) => quoted = false,
            (',', false) => fields.push(std::mem::take(&mut cur)),
            (c, _) => cur.push(c),
        }
    }
    if quoted {
        return None;
    }
    fields.push(cur);
    Some(fields)
}

/// Parses the file's contents.
pub fn parse(path: &Path, text: &str) -> Result<HashMap<String, StaticUser>, TokenFileError> {
    let mut users = HashMap::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() || line.trim_start().starts_with('#') {
            continue;
        }
        let fields = csv_fields(line).ok_or(TokenFileError::Quote { path: path.to_path_buf(), line: i + 1 })?;
        if fields.len() < 3 {
            return Err(TokenFileError::Columns { path: path.to_path_buf(), found: fields.len() });
        }
        let groups = fields
            .get(3)
            // As upstream: split on commas and nothing else; `" system:masters"` is not
            // `system:masters`.
            .map(|g| g.split(',').filter(|g| !g.is_empty()).map(str::to_owned).collect())
            .unwrap_or_default();
        // As upstream: a later duplicate replaces an earlier one.
        users.insert(fields[0].clone(), StaticUser { name: fields[1].clone(), uid: fields[2].clone(), groups });
    }
    Ok(users)
}

/// How long a token found in memory is trusted without checking the file for changes.
const RECHECK_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

/// What identifies one version of the file without reading it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Fingerprint {
    modified: Option<SystemTime>,
    len: u64,
    inode: u64,
}

fn fingerprint(path: &Path) -> Option<Fingerprint> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some(Fingerprint { modified: m.modified().ok(), len: m.len(), inode: m.ino() })
}

#[derive(Debug)]
struct Loaded {
    fingerprint: Option<Fingerprint>,
    content: Vec<u8>,
    users: HashMap<String, StaticUser>,
}

/// The token file, reloaded on change. A reload that fails keeps the last good contents.
///
/// A token not in memory makes the file's metadata be checked at once (a token added to the
/// file works on its first use); at most once per [`RECHECK_INTERVAL`] the content itself
/// is compared, so a change that keeps size and mtime (a same-second rewrite on a coarse
/// filesystem, a restored mtime) is seen within a second as well, and a removed line stops
/// authenticating within a second without a read per request.
#[derive(Debug)]
pub struct TokenFile {
    path: PathBuf,
    state: RwLock<Loaded>,
    checked: Mutex<Instant>,
}

impl TokenFile {
    /// Loads the file; an unreadable or malformed file is an error at start-up.
    pub fn load(path: &Path) -> Result<Self, TokenFileError> {
        let fp = fingerprint(path);
        let content = read(path)?;
        let users = parse(path, &String::from_utf8_lossy(&content))?;
        Ok(Self {
            path: path.to_path_buf(),
            state: RwLock::new(Loaded { fingerprint: fp, content, users }),
            checked: Mutex::new(Instant::now()),
        })
    }

    /// The user a token belongs to, reloading the file first if it changed.
    pub fn lookup(&self, token: &str) -> Option<StaticUser> {
        let due = self.checked.lock().unwrap_or_else(|p| p.into_inner()).elapsed() >= RECHECK_INTERVAL;
        if !due && let Some(user) = self.state.read().unwrap_or_else(|p| p.into_inner()).users.get(token) {
            return Some(user.clone());
        }
        self.reload_if_changed(due);
        self.state.read().unwrap_or_else(|p| p.into_inner()).users.get(token).cloned()
    }

    fn reload_if_changed(&self, compare_content: bool) {
        if compare_content {
            *self.checked.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
        }
        let fp = fingerprint(&self.path);
        if !compare_content && fp == self.state.read().unwrap_or_else(|p| p.into_inner()).fingerprint {
            return;
        }
        let Ok(content) = read(&self.path) else { return };
        if content == self.state.read().unwrap_or_else(|p| p.into_inner()).content {
            self.state.write().unwrap_or_else(|p| p.into_inner()).fingerprint = fp;
            return;
        }
        if let Ok(users) = parse(&self.path, &String::from_utf8_lossy(&content)) {
            *self.state.write().unwrap_or_else(|p| p.into_inner()) = Loaded { fingerprint: fp, content, users };
        }
    }
}

/// Largest token file read (a file of thousands of identities is a few hundred KiB).
const MAX_FILE_BYTES: u64 = 16 << 20;

fn read(path: &Path) -> Result<Vec<u8>, TokenFileError> {
    use std::io::Read;
    let err = |reason: String| TokenFileError::Read { path: path.to_path_buf(), reason };
    let file = std::fs::File::open(path).map_err(|e| err(e.to_string()))?;
    let mut content = Vec::new();
    file.take(MAX_FILE_BYTES + 1).read_to_end(&mut content).map_err(|e| err(e.to_string()))?;
    if content.len() as u64 > MAX_FILE_BYTES {
        return Err(err(format!("larger than {MAX_FILE_BYTES} bytes")));
    }
    Ok(content)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::time::Duration;

    #[test]
    fn parses_upstream_csv() {
        let users = parse(Path::new("t"), "tok1,alice,u1,\"system:masters,dev\"\n# comment\n\ntok2,bob,u2\n").unwrap();
        assert_eq!(users["tok1"].groups, ["system:masters", "dev"]);
        // groups are not trimmed, as upstream: a leading space makes another group
        let spaced = parse(Path::new("t"), "tok,eve,u,\"dev, system:masters\"\n").unwrap();
        assert_eq!(spaced["tok"].groups, ["dev", " system:masters"]);
        assert_eq!(users["tok2"], StaticUser { name: "bob".into(), uid: "u2".into(), groups: vec![] });
        assert_eq!(
            parse(Path::new("t"), "tok,alice\n").unwrap_err().to_string(),
            r#"token file "t" must have at least 3 columns (token, user name, user uid), found 2"#
        );
        assert!(matches!(parse(Path::new("t"), "a,b,c,\"d\n"), Err(TokenFileError::Quote { line: 1, .. })));
    }

    #[test]
    fn reloads_when_the_file_changes_and_keeps_last_good() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("tokens.csv");
        std::fs::write(&p, "t1,alice,u1\n").unwrap();
        let f = TokenFile::load(&p).unwrap();
        assert_eq!(f.lookup("t1").unwrap().name, "alice");
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::write(&p, "t2,bob,u2\n").unwrap();
        // make sure the mtime moves even on coarse filesystems
        let later = SystemTime::now() + std::time::Duration::from_secs(2);
        std::fs::File::options().write(true).open(&p).unwrap().set_modified(later).unwrap();
        assert_eq!(f.lookup("t2").unwrap().name, "bob", "a new token works on first use");
        assert_eq!(f.lookup("t1"), None, "revoked by the same reload");
        // A known token is rechecked at most once per interval: revoked within it.
        std::fs::write(&p, "t3,carol,u3\n").unwrap();
        std::fs::File::options().write(true).open(&p).unwrap().set_modified(later + Duration::from_secs(1)).unwrap();
        std::thread::sleep(RECHECK_INTERVAL + Duration::from_millis(50));
        assert_eq!(f.lookup("t2"), None, "revoked after the recheck interval");
        std::fs::write(&p, "t2,bob,u2\n").unwrap();
        std::fs::File::options().write(true).open(&p).unwrap().set_modified(later + Duration::from_secs(3)).unwrap();
        assert_eq!(f.lookup("t2").unwrap().name, "bob");
        std::fs::write(&p, "broken\n").unwrap();
        std::fs::File::options().write(true).open(&p).unwrap().set_modified(later + Duration::from_secs(5)).unwrap();
        assert_eq!(f.lookup("t2").unwrap().name, "bob", "a broken reload keeps the last good file");
    }

    #[test]
    fn a_content_change_that_keeps_size_and_mtime_is_seen_within_the_interval() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("tokens.csv");
        std::fs::write(&p, "t1,alice,u1\n").unwrap();
        let mtime = std::fs::metadata(&p).unwrap().modified().unwrap();
        let f = TokenFile::load(&p).unwrap();
        assert_eq!(f.lookup("t1").unwrap().name, "alice");
        // same length, same mtime, same inode: only the bytes differ
        std::fs::File::options().write(true).open(&p).unwrap().write_all(b"t9,alice,u1\n").unwrap();
        std::fs::File::options().write(true).open(&p).unwrap().set_modified(mtime).unwrap();
        std::thread::sleep(RECHECK_INTERVAL + Duration::from_millis(50));
        assert_eq!(f.lookup("t1"), None, "revoked although size and mtime did not change");
        assert_eq!(f.lookup("t9").unwrap().name, "alice");
    }
}
