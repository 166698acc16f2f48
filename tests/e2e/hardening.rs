//! End-to-end: the control plane under the attacks it was tried with (issue "Control plane
//! and node inputs under attack"). Each test is named after what it guards and drives the
//! real binary the way the attack did.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::*;

/// CPU seconds (user + system) a process has used, from /proc.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // fields after the parenthesised command name; utime and stime are 14th and 15th
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
    ticks / 100.0
}

#[test]
fn random_paths_and_methods_do_not_grow_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let s = start(dir.path(), &[]);
    let c = client(dir.path());
    for i in 0..600 {
        let method = reqwest::Method::from_bytes(format!("M{i}").as_bytes()).unwrap();
        let _ = c.request(method, format!("{}/api/v1/random-{i}/x", s.url)).send().unwrap();
        let _ = c.get(format!("{}/apis/g{i}.example/v{i}/things", s.url)).send().unwrap();
        let _ = c.get(format!("{}/unknown/{i}", s.url)).send().unwrap();
    }
    let metrics =
        c.get(format!("{}/metrics", s.url)).bearer_auth(admin_token(dir.path())).send().unwrap().text().unwrap();
    assert!(!metrics.contains("random-") && !metrics.contains("g1.example") && !metrics.contains("M1"), "{metrics}");
    let series = metrics.lines().filter(|l| l.starts_with("apiserver_request_total{")).count();
    assert!(series < 20, "{series} request series:\n{metrics}");
    assert!(metrics.len() < 64 * 1024, "{} bytes of metrics", metrics.len());
}

#[test]
fn idle_connections_past_the_file_limit_neither_spin_nor_take_the_server_down() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // 128 open files: the idle connections below exhaust them, so accept fails with EMFILE
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(format!("ulimit -n 128 && exec {PODPASS} apiserver --data-dir {} --secure-port 0", d.to_str().unwrap()))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let url = loop {
        if let Ok(u) = std::fs::read_to_string(d.join("server-url")) {
            break u;
        }
        assert!(Instant::now() < deadline, "server did not start");
        std::thread::sleep(Duration::from_millis(50));
    };
    let addr = url.trim_start_matches("https://").to_owned();
    let idle: Vec<TcpStream> = (0..300).filter_map(|_| TcpStream::connect(&addr).ok()).collect();
    assert!(idle.len() >= 200, "only {} connections", idle.len());
    // while the server is out of file descriptors it backs off instead of spinning
    std::thread::sleep(Duration::from_millis(500));
    let before = cpu_seconds(child.id());
    std::thread::sleep(Duration::from_secs(2));
    let used = cpu_seconds(child.id()) - before;
    assert!(used < 1.0, "server used {used:.2} CPU seconds in 2 s while out of file descriptors");
    // idle connections are closed by the handshake timeout and a real client gets through
    let c = reqwest::blocking::Client::builder()
        .tls_certs_only([reqwest::Certificate::from_pem(&std::fs::read(d.join("pki/ca.crt")).unwrap()).unwrap()])
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap();
    let resp = c.get(format!("{url}/version")).bearer_auth(admin_token(d)).send().unwrap();
    assert_eq!(resp.status(), 200);
    assert!(child.try_wait().unwrap().is_none(), "server exited");
    drop(idle);
    let _ = child.kill();
    let _ = child.wait();
}
