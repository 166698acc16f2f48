//! Helpers shared by the end-to-end tests: a `podpass apiserver` process on a free port.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub const PODPASS: &str = env!("CARGO_BIN_EXE_podpass");

/// A server process, killed on drop.
pub struct Server {
    pub child: Child,
    pub url: String,
    pub dir: PathBuf,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn start(dir: &Path, extra: &[&str]) -> Server {
    start_on(dir, "0", extra)
}

pub fn start_on(dir: &Path, port: &str, extra: &[&str]) -> Server {
    let _ = std::fs::remove_file(dir.join("server-url"));
    let child = Command::new(PODPASS)
        .args(["apiserver", "--data-dir", dir.to_str().unwrap(), "--secure-port", port])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let url = wait_for_url(dir);
    Server { child, url, dir: dir.to_path_buf() }
}

/// The URL a starting server writes to `<dir>/server-url` once it listens (30 s at most).
pub fn wait_for_url(dir: &Path) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(u) = std::fs::read_to_string(dir.join("server-url")) {
            return u;
        }
        assert!(Instant::now() < deadline, "server did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A client for streaming reads (watches) that gives up after `timeout`.
pub fn streaming_client(dir: &Path, timeout: Duration) -> reqwest::blocking::Client {
    let ca = reqwest::Certificate::from_pem(&std::fs::read(dir.join("pki/ca.crt")).unwrap()).unwrap();
    reqwest::blocking::Client::builder().tls_certs_only([ca]).timeout(timeout).build().unwrap()
}

/// The real kubectl with `kubeconfig` and its own cache dir.
pub fn kubectl_with(kubeconfig: &Path, cache: &Path, args: &[&str]) -> Output {
    Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("--cache-dir")
        .arg(cache)
        .args(args)
        .output()
        .expect("kubectl is installed (scripts/test installs it)")
}

/// `podpass apiserver kubeconfig` for `user` in `groups` (the raw output).
pub fn identity_output(dir: &Path, user: &str, groups: &[&str]) -> Output {
    let mut cmd = Command::new(PODPASS);
    cmd.args(["apiserver", "kubeconfig", "--data-dir", dir.to_str().unwrap(), "--user", user]);
    for g in groups {
        cmd.args(["--group", g]);
    }
    cmd.output().unwrap()
}

pub fn client(dir: &Path) -> reqwest::blocking::Client {
    let ca = reqwest::Certificate::from_pem(&std::fs::read(dir.join("pki/ca.crt")).unwrap()).unwrap();
    reqwest::blocking::Client::builder().tls_certs_only([ca]).build().unwrap()
}

pub fn admin_token(dir: &Path) -> String {
    let line = std::fs::read_to_string(dir.join("tokens.csv")).unwrap();
    line.split(',').next().unwrap().to_owned()
}

pub fn ok(out: Output, what: &str) -> String {
    assert!(out.status.success(), "{what}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}
