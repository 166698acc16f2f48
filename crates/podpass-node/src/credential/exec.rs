//! plugin.go `execPlugin.ExecPlugin`: run `<bin-dir>/<name> args…` with the request on
//! stdin, the agent's environment plus the configured `env` (later entries win), a hard
//! timeout, and stdout/stderr captured; then check the response in upstream order.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use podpass_api::credential_provider::{CredentialProvider, CredentialProviderRequest, CredentialProviderResponse};
use serde_json::Value;
use thiserror::Error;
use tokio::io::AsyncWriteExt;

/// The kubelet's fixed plugin timeout.
pub const PLUGIN_TIMEOUT: Duration = Duration::from_secs(60);

/// Why a plugin run gave no usable response.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum ExecError {
    /// The process failed, timed out or could not start (upstream wording; stderr appended).
    #[error("error execing credential provider plugin {name} for image {image}: {reason}")]
    Exec {
        /// Provider name.
        name: String,
        /// Image.
        image: String,
        /// `exit status N`, `context deadline exceeded`, or the spawn error, then `: <stderr>`.
        reason: String,
        /// The exit code, when it exited.
        code: Option<i32>,
        /// First line of stderr (secrets redacted).
        stderr_line: String,
    },
    /// stdout is not JSON with apiVersion/kind.
    #[error("error reading GVK from response: {0}")]
    Gvk(String),
    /// The response is in another apiVersion than configured.
    #[error(
        "apiVersion from credential plugin response did not match expected apiVersion:{want}, actual apiVersion:{got}"
    )]
    ApiVersion {
        /// Configured.
        want: String,
        /// Answered.
        got: String,
    },
    /// The plugin wrote more than [`MAX_STDOUT_BYTES`] to stdout; it was killed.
    #[error("credential provider plugin wrote more than {limit} bytes to stdout")]
    StdoutTooLarge {
        /// The limit.
        limit: usize,
    },
    /// Strict decoding failed; the inner error is dropped as upstream does (it may echo
    /// secrets).
    #[error("error decoding credential provider plugin response from stdout")]
    Decode,
}

impl ExecError {
    /// Whether upstream counts it in `kubelet_credential_provider_plugin_errors_total`
    /// (process failures only, not response problems).
    pub fn is_exec_failure(&self) -> bool {
        matches!(self, Self::Exec { .. })
    }
}

/// Replaces each secret in `text` with `<redacted>`.
pub fn redact(text: &str, secrets: &[&str]) -> String {
    secrets.iter().filter(|s| s.len() >= 4).fold(text.to_owned(), |t, s| t.replace(s, "<redacted>"))
}

/// Runs the plugin once and decodes its answer.
pub async fn exec_plugin(
    bin_dir: &Path,
    provider: &CredentialProvider,
    request: &CredentialProviderRequest,
    timeout: Duration,
) -> Result<CredentialProviderResponse, ExecError> {
    let fail = |reason: String, code: Option<i32>, stderr: &str| {
        let secrets = [request.service_account_token.as_str()];
        let stderr = redact(stderr, &secrets);
        let stderr_line = stderr.lines().next().unwrap_or("").to_owned();
        let reason = if stderr.is_empty() { reason } else { format!("{reason}: {stderr}") };
        ExecError::Exec { name: provider.name.clone(), image: request.image.clone(), reason, code, stderr_line }
    };
    let input = serde_json::to_vec(request).map_err(|e| fail(e.to_string(), None, ""))?;
    let mut command = tokio::process::Command::new(bin_dir.join(&provider.name));
    command
        .args(&provider.args)
        .envs(provider.env.iter().map(|e| (&e.name, &e.value)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = command.spawn().map_err(|e| fail(e.to_string(), None, ""))?;
    let mut stdin = child.stdin.take();
    let (stdout, stderr) = (child.stdout.take(), child.stderr.take());
    let run = async {
        let feed = async {
            if let Some(stdin) = stdin.as_mut() {
                // A plugin that exits without reading its input is not an error by itself.
                let _ = stdin.write_all(&input).await;
            }
            drop(stdin);
        };
        // stdout past its cap ends the run at once: stderr stops being read and the plugin
        // is killed, rather than left blocked on a full pipe until the timeout.
        let overflow = tokio::sync::Notify::new();
        let out = async {
            let read = read_capped(stdout, MAX_STDOUT_BYTES, true).await;
            if matches!(&read, Ok(c) if c.overflowed) {
                overflow.notify_one();
            }
            read
        };
        let err = async {
            tokio::select! {
                read = read_capped(stderr, MAX_STDERR_BYTES, false) => read,
                () = overflow.notified() => Ok(Capped::default()),
            }
        };
        let (_, out, err) = tokio::join!(feed, out, err);
        let out = out?;
        if out.overflowed {
            let _ = child.start_kill();
        }
        let status = child.wait().await?;
        Ok::<_, std::io::Error>((status, out, err?))
    };
    let (status, stdout, stderr) = match tokio::time::timeout(timeout, run).await {
        Err(_) => return Err(fail("context deadline exceeded".into(), None, "")),
        Ok(Err(e)) => return Err(fail(e.to_string(), None, "")),
        Ok(Ok(o)) => o,
    };
    let stderr = String::from_utf8_lossy(&stderr.bytes).trim_end().to_owned();
    if stdout.overflowed {
        return Err(ExecError::StdoutTooLarge { limit: MAX_STDOUT_BYTES });
    }
    if !status.success() {
        let code = status.code();
        let reason = code.map_or_else(|| "signal: killed".to_owned(), |c| format!("exit status {c}"));
        return Err(fail(reason, code, &stderr));
    }
    decode_response(&stdout.bytes, &provider.api_version)
}

/// Most of a plugin's stdout read: a CredentialProviderResponse is a few KiB.
pub const MAX_STDOUT_BYTES: usize = 1 << 20;
/// Most of a plugin's stderr kept for the error message (the rest is read and dropped).
pub const MAX_STDERR_BYTES: usize = 64 << 10;

#[derive(Default)]
struct Capped {
    bytes: Vec<u8>,
    overflowed: bool,
}

/// Reads `pipe` keeping at most `cap` bytes. With `stop`, reading ends at the cap (the
/// plugin is killed when dropped); without, the rest is drained so the plugin never blocks.
async fn read_capped<R: tokio::io::AsyncRead + Unpin>(
    pipe: Option<R>,
    cap: usize,
    stop: bool,
) -> std::io::Result<Capped> {
    use tokio::io::AsyncReadExt;
    let mut out = Capped { bytes: Vec::new(), overflowed: false };
    let Some(mut pipe) = pipe else { return Ok(out) };
    let mut buf = vec![0u8; 16 << 10];
    loop {
        let n = pipe.read(&mut buf).await?;
        if n == 0 {
            return Ok(out);
        }
        let room = cap.saturating_sub(out.bytes.len());
        out.bytes.extend_from_slice(&buf[..n.min(room)]);
        if n > room {
            out.overflowed = true;
            if stop {
                return Ok(out);
            }
        }
    }
}

/// Response checks in upstream order: GVK readable, apiVersion as configured, strict decode
/// with the right kind.
pub fn decode_response(stdout: &[u8], want_api_version: &str) -> Result<CredentialProviderResponse, ExecError> {
    let value: Value = serde_json::from_slice(stdout).map_err(|e| ExecError::Gvk(e.to_string()))?;
    let got = value.get("apiVersion").and_then(Value::as_str).unwrap_or("").to_owned();
    if got != want_api_version {
        return Err(ExecError::ApiVersion { want: want_api_version.to_owned(), got });
    }
    let response: CredentialProviderResponse = serde_json::from_value(value).map_err(|_| ExecError::Decode)?;
    if response.kind != "CredentialProviderResponse" {
        return Err(ExecError::Decode);
    }
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn response_checks_in_order() {
        let v1 = podpass_api::credential_provider::wire::V1;
        assert!(matches!(decode_response(b"not json", v1), Err(ExecError::Gvk(_))));
        let beta = br#"{"kind":"CredentialProviderResponse","apiVersion":"credentialprovider.kubelet.k8s.io/v1beta1","cacheKeyType":"Image"}"#;
        assert_eq!(
            decode_response(beta, v1).unwrap_err().to_string(),
            "apiVersion from credential plugin response did not match expected apiVersion:credentialprovider.kubelet.k8s.io/v1, actual apiVersion:credentialprovider.kubelet.k8s.io/v1beta1"
        );
        let secret = br#"{"kind":"CredentialProviderResponse","apiVersion":"credentialprovider.kubelet.k8s.io/v1","auth":{"r":{"username":"u","password":"hunter2","extra":"x"}}}"#;
        let err = decode_response(secret, v1).unwrap_err().to_string();
        assert_eq!(err, "error decoding credential provider plugin response from stdout");
        assert!(!err.contains("hunter2"));
        let wrong_kind = br#"{"kind":"Other","apiVersion":"credentialprovider.kubelet.k8s.io/v1"}"#;
        assert_eq!(decode_response(wrong_kind, v1), Err(ExecError::Decode));
    }

    #[test]
    fn redaction() {
        assert_eq!(redact("token eyJabc leaked", &["eyJabc"]), "token <redacted> leaked");
        assert_eq!(redact("x", &[""]), "x");
    }
}
