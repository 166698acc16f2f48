//! The client of the Kubernetes remote-command protocol `v4.channel.k8s.io` over SPDY
//! (client-go `remotecommand` `streamProtocolV4`), as the kubelet's streaming proxy meets the
//! runtime: the URL containerd answers a CRI `Exec` or `Attach` with is dialled
//! ([`super::dial`]: loopback only), upgraded to SPDY/3.1, and one stream opened per channel — `error` first, then
//! `stdin`, `stdout`, `stderr` (none with a TTY) and `resize` (with one) — each named by its
//! `streamType` header. The error stream carries the command's end as a `Status`.

use serde_json::Value;
use thiserror::Error;

use super::dial::{self, DialError};
use super::spdy::{self, Connection, SpdyError, StreamReader, StreamWriter};

/// The protocol version asked for and required.
pub const PROTOCOL_V4: &str = "v4.channel.k8s.io";

/// The channels a command has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Channels {
    /// Standard input.
    pub stdin: bool,
    /// Standard output.
    pub stdout: bool,
    /// Standard error (never with a TTY: it is merged into stdout).
    pub stderr: bool,
    /// A TTY (and its resize channel).
    pub tty: bool,
}

/// Opening the streams failed.
#[derive(Debug, Error)]
pub enum RemoteCommandError {
    /// Dialling the runtime's stream server.
    #[error(transparent)]
    Dial(#[from] DialError),
    /// The runtime upgraded to another protocol than the one asked.
    #[error("the runtime chose protocol {0:?}, not {PROTOCOL_V4}")]
    Protocol(String),
    /// The SPDY connection.
    #[error(transparent)]
    Spdy(#[from] SpdyError),
}

/// A running command's streams.
pub struct RemoteCommand {
    /// Its input (closing it is the command's end of input).
    pub stdin: Option<StreamWriter>,
    /// Its output.
    pub stdout: Option<StreamReader>,
    /// Its error output.
    pub stderr: Option<StreamReader>,
    /// TTY size changes (JSON `{"Width": w, "Height": h}`).
    pub resize: Option<StreamWriter>,
    /// The command's end: a `Status` (JSON), once it has exited.
    pub error: StreamReader,
    /// The connection, closed on drop.
    pub connection: Connection,
}

/// Dials `url` (the runtime's answer to Exec or Attach) and opens the streams of `channels`.
pub async fn connect(url: &str, channels: Channels) -> Result<RemoteCommand, RemoteCommandError> {
    let parsed = dial::loopback_url(url)?;
    let handshake = [
        (http::header::CONNECTION, http::HeaderValue::from_static("Upgrade")),
        (http::header::UPGRADE, http::HeaderValue::from_static(spdy::UPGRADE)),
        (http::HeaderName::from_static("x-stream-protocol-version"), http::HeaderValue::from_static(PROTOCOL_V4)),
    ];
    let upgraded = dial::upgrade(&parsed, http::Method::POST, &handshake).await?;
    let chosen = upgraded.headers.get("X-Stream-Protocol-Version").and_then(|v| v.to_str().ok()).unwrap_or("");
    if chosen != PROTOCOL_V4 {
        return Err(RemoteCommandError::Protocol(chosen.to_owned()));
    }
    let io = upgraded.io;
    let connection = Connection::start(io)?;
    let open = |kind: &'static str| {
        let c = &connection;
        async move { c.open(&[("streamtype", kind)]).await }
    };
    let (_, error) = open("error").await?;
    let stdin = if channels.stdin { Some(open("stdin").await?.0) } else { None };
    let stdout = if channels.stdout { Some(open("stdout").await?.1) } else { None };
    let stderr = if channels.stderr && !channels.tty { Some(open("stderr").await?.1) } else { None };
    let resize = if channels.tty { Some(open("resize").await?.0) } else { None };
    Ok(RemoteCommand { stdin, stdout, stderr, resize, error, connection })
}

/// A command that did not run to an exit code: the runtime's message.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{0}")]
pub struct CommandError(pub String);

/// The exit code a v4 error stream's `Status` gives: 0 for Success, the `ExitCode` cause of
/// a `NonZeroExitCode` failure; another failure is its message.
pub fn exit_code(status: &[u8]) -> Result<i32, CommandError> {
    if status.is_empty() {
        return Ok(0);
    }
    let v: Value = serde_json::from_slice(status).map_err(|e| CommandError(format!("the runtime's status: {e}")))?;
    if v["status"] == "Success" {
        return Ok(0);
    }
    if v["reason"] == "NonZeroExitCode"
        && let Some(code) = v["details"]["causes"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["reason"] == "ExitCode")
            .and_then(|c| c["message"].as_str()?.parse().ok())
    {
        return Ok(code);
    }
    Err(CommandError(v["message"].as_str().unwrap_or("the command failed").to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exit_code_is_read_from_the_status_as_client_go_reads_it() {
        assert_eq!(exit_code(b""), Ok(0));
        assert_eq!(exit_code(br#"{"status":"Success"}"#), Ok(0));
        let failed = br#"{"status":"Failure","reason":"NonZeroExitCode","message":"command terminated with non-zero exit code: 3","details":{"causes":[{"reason":"ExitCode","message":"3"}]}}"#;
        assert_eq!(exit_code(failed), Ok(3));
        assert_eq!(
            exit_code(br#"{"status":"Failure","message":"executable file not found"}"#),
            Err(CommandError("executable file not found".into()))
        );
        assert!(exit_code(b"not json").is_err());
    }

    #[tokio::test]
    async fn only_a_loopback_http_url_is_dialled() {
        for url in ["https://127.0.0.1:1/exec/x", "http://10.0.0.1:1/exec/x", "http://example.com/x", "nonsense"] {
            assert!(
                matches!(connect(url, Channels::default()).await, Err(RemoteCommandError::Dial(DialError::Url(_)))),
                "{url}"
            );
        }
    }
}
