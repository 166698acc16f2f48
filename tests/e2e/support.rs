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
    let deadline = Instant::now() + Duration::from_secs(30);
    let url = loop {
        if let Ok(u) = std::fs::read_to_string(dir.join("server-url")) {
            break u;
        }
        assert!(Instant::now() < deadline, "server did not start");
        std::thread::sleep(Duration::from_millis(50));
    };
    Server { child, url, dir: dir.to_path_buf() }
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
