//! The exec probe (kubelet `exec.Prober` over CRI `ExecSync`): the command runs in the
//! container; exit code 0 is success, any other a failure whose message is what it wrote
//! (stdout then stderr, at most 10 KiB, as the kubelet's `maxReadLength`); a command still
//! running at `timeoutSeconds` is a failure, `command "…" timed out`.

use std::time::Duration;

use super::{ProbeError, Probed};
use crate::runtime::{CriRuntime, RuntimeError};

/// The most of a probe command's output kept (kubelet: `maxReadLength`, 10 KiB).
pub(crate) const MAX_OUTPUT: usize = 10 * 1024;

/// What an exec probe's answer means.
pub(crate) fn judge(
    cmd: &[String],
    answer: Result<(i32, Vec<u8>, Vec<u8>), RuntimeError>,
) -> Result<Probed, ProbeError> {
    match answer {
        Ok((code, mut stdout, stderr)) => {
            stdout.extend_from_slice(&stderr);
            stdout.truncate(MAX_OUTPUT);
            let output = String::from_utf8_lossy(&stdout).into_owned();
            Ok(if code == 0 { Probed::Success(output) } else { Probed::Failure(output) })
        }
        Err(e) if timed_out(&e) => Ok(Probed::Failure(format!("command {:?} timed out", cmd.join(" ")))),
        Err(e) => Err(ProbeError::Runtime(e)),
    }
}

/// The call's deadline passed, or the runtime stopped the command at its timeout
/// (containerd: `timeout 1s exceeded: context deadline exceeded`).
fn timed_out(e: &RuntimeError) -> bool {
    match e {
        RuntimeError::Rpc { code, message, .. } => {
            code == "DeadlineExceeded" || (message.contains("timeout") && message.contains("exceeded"))
        }
        RuntimeError::Connect { .. } => false,
    }
}

/// Runs `cmd` in container `id` through the runtime.
pub(crate) async fn exec_probe(
    cri: &CriRuntime,
    id: &str,
    cmd: &[String],
    timeout: Duration,
) -> Result<Probed, ProbeError> {
    let answer = cri.exec_sync(id, cmd.to_vec(), timeout).await.map(|r| (r.exit_code, r.stdout, r.stderr));
    judge(cmd, answer)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmd() -> Vec<String> {
        vec!["cat".into(), "/tmp/ready".into()]
    }

    #[test]
    fn the_exit_code_decides_and_the_output_is_the_message() {
        assert_eq!(judge(&cmd(), Ok((0, b"ok\n".to_vec(), vec![]))).ok(), Some(Probed::Success("ok\n".into())));
        assert_eq!(
            judge(&cmd(), Ok((1, b"out ".to_vec(), b"cat: can't open '/tmp/ready'".to_vec()))).ok(),
            Some(Probed::Failure("out cat: can't open '/tmp/ready'".into()))
        );
        let long = judge(&cmd(), Ok((1, vec![b'x'; MAX_OUTPUT * 2], vec![])));
        assert!(matches!(long, Ok(Probed::Failure(m)) if m.len() == MAX_OUTPUT));
    }

    #[test]
    fn a_timeout_is_a_failure_and_other_runtime_errors_are_errors() {
        let rpc = |code: &str, message: &str| RuntimeError::Rpc {
            method: "ExecSync",
            code: code.into(),
            message: message.into(),
        };
        let timeout = rpc("Unknown", "failed to exec in container: timeout 1s exceeded: context deadline exceeded");
        assert_eq!(
            judge(&cmd(), Err(timeout)).ok(),
            Some(Probed::Failure("command \"cat /tmp/ready\" timed out".into()))
        );
        assert_eq!(
            judge(&cmd(), Err(rpc("DeadlineExceeded", "context deadline exceeded"))).ok(),
            Some(Probed::Failure("command \"cat /tmp/ready\" timed out".into()))
        );
        assert!(judge(&cmd(), Err(rpc("NotFound", "container not found"))).is_err());
    }
}
