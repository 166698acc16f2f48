//! The plugin binary as a kubelet runs it: a request on stdin, the response on stdout, a
//! message on stderr and exit 1 on failure, never a token on stderr.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::process::{Command, Output, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_podpass-credential-provider");

fn run(args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(BIN)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // A plugin refusing its flags exits without reading stdin: the pipe may be closed.
    match child.stdin.take().unwrap().write_all(stdin.as_bytes()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
        other => other.unwrap(),
    }
    child.wait_with_output().unwrap()
}

fn request(token: &str) -> String {
    format!(
        r#"{{"kind":"CredentialProviderRequest","apiVersion":"credentialprovider.kubelet.k8s.io/v1","image":"registry.example:5000/team-a/app:v1","serviceAccountToken":"{token}"}}"#
    )
}

#[test]
fn passthrough_answers_the_token_for_the_images_registry() {
    let out = run(&["--mode", "passthrough"], &request("h.eyJleHAiOjF9.s"));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let response: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(response["kind"], "CredentialProviderResponse");
    assert_eq!(response["apiVersion"], "credentialprovider.kubelet.k8s.io/v1");
    assert_eq!(response["cacheKeyType"], "Registry");
    assert_eq!(response["auth"]["registry.example:5000"]["password"], "h.eyJleHAiOjF9.s");
}

#[test]
fn failures_exit_1_with_a_message_and_never_print_the_token() {
    let secret = "h.eyJzZWNyZXQiOnRydWV9.s";
    // registry-auth is not listening there
    let out = run(&["--mode", "exchange", "--exchange-url", "http://127.0.0.1:1"], &request(secret));
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.starts_with("podpass-credential-provider: exchange at http://127.0.0.1:1/token"), "{stderr}");
    assert!(!stderr.contains(secret) && out.stdout.is_empty(), "{stderr}");
    // a plain-HTTP exchange URL off loopback is refused before any request
    let out = run(&["--mode", "exchange", "--exchange-url", "http://registry-auth.example"], &request(secret));
    assert!(String::from_utf8_lossy(&out.stderr).contains("https://"), "{}", String::from_utf8_lossy(&out.stderr));
    // no token: says what to configure
    let out = run(&["--mode", "passthrough"], &request(""));
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("tokenAttributes"));
    // not a request
    let out = run(&["--mode", "passthrough"], "{}");
    assert_eq!(out.status.code(), Some(1));
    // exchange mode needs its URL
    let out = run(&["--mode", "exchange"], &request(secret));
    assert_eq!(out.status.code(), Some(2), "clap usage error");
}
