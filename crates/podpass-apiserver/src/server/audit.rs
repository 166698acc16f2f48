//! `--audit-log-path`: one `audit.k8s.io/v1` Event per request at Metadata level, as JSON
//! lines — with the user's `authentication.kubernetes.io/credential-id` extra for
//! service-account tokens and the `authentication.k8s.io/issued-credential-id` annotation
//! on token creation, so "who issued the token that did X" is two greps.
//!
//! Events are written by a dedicated thread so that no request blocks on file I/O; the
//! file is opened in append mode and each event is one `write` of one line.

use std::io::Write;
use std::path::Path;
use std::sync::mpsc;

use serde_json::Value;

/// Sends events to the writer thread.
#[derive(Debug, Clone)]
pub struct AuditLog {
    tx: mpsc::Sender<Vec<u8>>,
}

impl AuditLog {
    /// Opens (creating, mode 0600) the log for appending and starts its writer.
    pub fn open(path: &Path) -> std::io::Result<Self> {
        use std::os::unix::fs::OpenOptionsExt;
        let mut file = std::fs::OpenOptions::new().create(true).append(true).mode(0o600).open(path)?;
        let (tx, rx) = mpsc::channel::<Vec<u8>>();
        std::thread::Builder::new().name("audit-log".into()).spawn(move || {
            for line in rx {
                // An unwritable audit log must be visible to the operator, not fatal to requests.
                if let Err(e) = file.write_all(&line) {
                    eprintln!("audit log write failed: {e}");
                }
            }
        })?;
        Ok(Self { tx })
    }

    /// Queues one event.
    pub fn record(&self, event: &Value) {
        if let Ok(mut line) = serde_json::to_vec(event) {
            line.push(b'\n');
            let _ = self.tx.send(line);
        }
    }
}

/// Audit annotations a handler attaches to its response (e.g.
/// `authentication.k8s.io/issued-credential-id` = `JTI=<jti>`).
#[derive(Debug, Clone, Default)]
pub struct Annotations(pub std::collections::BTreeMap<String, String>);
