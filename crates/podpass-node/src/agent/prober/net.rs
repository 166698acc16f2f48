//! Reaching a pod from the node for its probes. Pods are loopback-only, in network
//! namespaces of their own: a probe's socket is made inside the pod's namespace (on a
//! thread of its own, as a namespace is entered per thread), and stays there once that
//! thread ends, so the connection runs from the pod's side — as the kubelet's would reach
//! the pod IP over the pod network. A `hostNetwork` pod is probed from the node's own
//! namespace. Also the tcpSocket probe (kubelet `tcp.DoTCPProbe`).

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::{ProbeError, Probed};

/// Where a probe reaches the pod.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Target {
    /// The pod's network namespace (`None`: the node's, a `hostNetwork` pod).
    pub netns: Option<PathBuf>,
    /// The pod's IP: a probe's host when it names none.
    pub pod_ip: String,
}

/// Go's `net.Dial` words for an error: `connect: connection refused`, `i/o timeout`.
fn go_words(e: &io::Error) -> String {
    if e.kind() == io::ErrorKind::TimedOut {
        return "i/o timeout".to_owned();
    }
    // Rust says "Connection refused (os error 111)"; Go, "connect: connection refused".
    let text = e.to_string();
    let text = text.split(" (os error").next().unwrap_or(&text);
    let mut chars = text.chars();
    let lower = chars.next().map(|c| c.to_ascii_lowercase().to_string() + chars.as_str()).unwrap_or_default();
    if e.raw_os_error().is_some() { format!("connect: {lower}") } else { lower }
}

/// A TCP socket made in the namespace at `netns`. Blocking: run on a blocking thread.
fn socket_in(netns: &Path, v6: bool) -> io::Result<std::net::TcpStream> {
    let netns = netns.to_owned();
    std::thread::spawn(move || {
        use rustix::net::{AddressFamily, SocketFlags, SocketType};
        let ns = std::fs::File::open(&netns)?;
        rustix::thread::move_into_link_name_space(ns.as_fd(), Some(rustix::thread::LinkNameSpaceType::Network))
            .map_err(io::Error::from)?;
        let family = if v6 { AddressFamily::INET6 } else { AddressFamily::INET };
        let fd =
            rustix::net::socket_with(family, SocketType::STREAM, SocketFlags::CLOEXEC | SocketFlags::NONBLOCK, None)
                .map_err(io::Error::from)?;
        Ok(std::net::TcpStream::from(fd))
    })
    .join()
    .map_err(|_| io::Error::other("the namespace thread panicked"))?
}

/// The address of `host` (empty: the pod's IP) at `port`, resolved from the node.
async fn address(target: &Target, host: &str, port: u16) -> io::Result<SocketAddr> {
    let host = if host.is_empty() { target.pod_ip.as_str() } else { host };
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(SocketAddr::new(ip, port));
    }
    tokio::net::lookup_host((host, port))
        .await?
        .next()
        .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, format!("lookup {host}: no such host")))
}

/// A connection to `host:port` (empty host: the pod's IP) from the pod's namespace, within
/// `timeout`; the error in Go's words (`dial tcp 127.128.0.9:80: connect: connection refused`).
pub(crate) async fn connect(
    target: &Target,
    host: &str,
    port: u16,
    timeout: Duration,
) -> Result<tokio::net::TcpStream, ProbeError> {
    let shown = if host.is_empty() { target.pod_ip.as_str() } else { host };
    let dial = |e: io::Error| ProbeError::Dial { addr: join_host_port(shown, port), why: go_words(&e) };
    let addr = address(target, host, port).await.map_err(dial)?;
    let attempt = async {
        match &target.netns {
            None => tokio::net::TcpStream::connect(addr).await,
            Some(netns) => {
                let (netns, v6) = (netns.clone(), addr.is_ipv6());
                let std = tokio::task::spawn_blocking(move || socket_in(&netns, v6))
                    .await
                    .map_err(|_| io::Error::other("the namespace task panicked"))??;
                tokio::net::TcpSocket::from_std_stream(std).connect(addr).await
            }
        }
    };
    match tokio::time::timeout(timeout, attempt).await {
        Ok(Ok(stream)) => Ok(stream),
        Ok(Err(e)) => Err(dial(e)),
        Err(_) => Err(dial(io::Error::from(io::ErrorKind::TimedOut))),
    }
}

/// Go's `net.JoinHostPort`.
pub(crate) fn join_host_port(host: &str, port: u16) -> String {
    if host.contains(':') { format!("[{host}]:{port}") } else { format!("{host}:{port}") }
}

/// kubelet `tcp.DoTCPProbe`: success once a connection opens, closed at once.
pub(crate) async fn tcp_probe(target: &Target, host: &str, port: u16, timeout: Duration) -> Probed {
    match connect(target, host, port, timeout).await {
        Ok(stream) => {
            drop(stream);
            Probed::Success(String::new())
        }
        Err(e) => Probed::Failure(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_listening_port_succeeds_and_a_closed_one_fails_in_gos_words() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap_or_else(|e| panic!("{e}"));
        let port = listener.local_addr().map(|a| a.port()).unwrap_or_default();
        let target = Target { netns: None, pod_ip: "127.0.0.1".into() };
        assert_eq!(tcp_probe(&target, "", port, Duration::from_secs(5)).await, Probed::Success(String::new()));
        drop(listener);
        assert_eq!(
            tcp_probe(&target, "", port, Duration::from_secs(5)).await,
            Probed::Failure(format!("dial tcp 127.0.0.1:{port}: connect: connection refused"))
        );
    }

    #[tokio::test]
    async fn a_namespace_that_is_gone_is_a_failure_not_a_panic() {
        let target = Target { netns: Some("/nonexistent/netns".into()), pod_ip: "127.0.0.1".into() };
        let Probed::Failure(why) = tcp_probe(&target, "", 80, Duration::from_secs(5)).await else {
            panic!("a missing namespace succeeded")
        };
        assert!(why.starts_with("dial tcp 127.0.0.1:80: "), "{why}");
    }
}
