//! `podpass-loopback`, the CNI plugin of podpass's own pod network: each pod gets its own
//! network namespace with loopback up and nothing reaching beyond it.
//!
//! containerd's CRI (1.6) refuses a sandbox whose CNI result has no `eth0` with an address
//! (`failed to find network info for sandbox`), so Debian's `loopback` plugin alone cannot
//! serve. This plugin brings `lo` up, and gives the namespace an `eth0` that is one end of a
//! veth pair whose other end ([`PEER`], down) is in the same namespace — so no packet
//! leaves the pod (kernels without the `dummy` device have veth) — holding one address of
//! 127.128.0.0/9 derived from the sandbox ID, which is what the pod reports as its IP. It
//! speaks CNI 0.4.0 (ADD, DEL, CHECK, VERSION) and uses util-linux's `nsenter` and
//! iproute2's `ip`.

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

use aws_lc_rs::digest;
use serde_json::{Value, json};

/// The plugin's name: its executable in the CNI bin dir, and the `type` of its network.
pub const PLUGIN: &str = "podpass-loopback";
/// The `loopback` plugin containerd's CRI runs for every sandbox on its own (go-cni's
/// loopback network), served by the same binary: `lo` up and nothing else.
pub const LOOPBACK: &str = "loopback";
/// Every plugin name this binary answers to.
pub const PLUGINS: [&str; 2] = [PLUGIN, LOOPBACK];
/// The CNI version spoken.
pub const CNI_VERSION: &str = "0.4.0";
/// The other end of the pod's `eth0`, kept down in the pod's own namespace.
pub const PEER: &str = "podpass-peer";

/// A CNI error, printed as the spec's error object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CniError {
    /// The spec's code (4: invalid environment variables, 7: invalid network config,
    /// 11: try again later, 100+: the plugin's).
    pub code: u32,
    /// What went wrong.
    pub msg: String,
}

impl CniError {
    /// The spec's JSON error.
    pub fn to_json(&self) -> String {
        json!({"cniVersion": CNI_VERSION, "code": self.code, "msg": self.msg}).to_string()
    }
}

fn env<'a>(vars: &'a HashMap<String, String>, name: &str) -> Result<&'a str, CniError> {
    vars.get(name)
        .map(String::as_str)
        .filter(|v| !v.is_empty())
        .ok_or_else(|| CniError { code: 4, msg: format!("{name} is not set") })
}

/// The address of a sandbox: 127.128.0.0/9 plus 23 bits of SHA-256 of its ID (never .0).
pub fn address_of(container_id: &str) -> String {
    let h = digest::digest(&digest::SHA256, container_id.as_bytes());
    let b = h.as_ref();
    let (x, y, mut z) = (128 | (b[0] & 0x7f), b[1], b[2]);
    if z == 0 || z == 255 {
        z = 1;
    }
    format!("127.{x}.{y}.{z}")
}

/// Why an `ip` command in a pod's namespace failed.
#[derive(Debug, thiserror::Error)]
enum IpError {
    /// nsenter could not be run.
    #[error("running nsenter ip {args}: {source}")]
    Spawn { args: String, source: std::io::Error },
    /// `ip` refused.
    #[error("ip {args}: {stderr}")]
    Failed { args: String, stderr: String },
}

/// A failed `ip` is the plugin's generic failure (code 100), with what `ip` said.
impl From<IpError> for CniError {
    fn from(e: IpError) -> Self {
        CniError { code: 100, msg: e.to_string() }
    }
}

/// Runs `ip args…` in the network namespace at `netns`.
fn ip_in(netns: &str, args: &[&str]) -> Result<(), IpError> {
    let out = Command::new("nsenter")
        .arg(format!("--net={netns}"))
        .arg("ip")
        .args(args)
        .output()
        .map_err(|source| IpError::Spawn { args: args.join(" "), source })?;
    if out.status.success() {
        Ok(())
    } else {
        Err(IpError::Failed { args: args.join(" "), stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned() })
    }
}

/// Runs plugin `name` ([`PLUGINS`]) for one invocation: the environment (`CNI_COMMAND`,
/// `CNI_NETNS`, `CNI_IFNAME`, `CNI_CONTAINERID`) and the network config on stdin; the
/// result to print.
pub fn run(name: &str, vars: &HashMap<String, String>, stdin: &[u8]) -> Result<String, CniError> {
    let command = env(vars, "CNI_COMMAND")?;
    if command == "VERSION" {
        return Ok(json!({"cniVersion": CNI_VERSION, "supportedVersions": ["0.3.0", "0.3.1", "0.4.0"]}).to_string());
    }
    let config: Value = serde_json::from_slice(stdin)
        .map_err(|e| CniError { code: 7, msg: format!("the network config is not JSON: {e}") })?;
    let version = config.get("cniVersion").and_then(Value::as_str).unwrap_or(CNI_VERSION).to_owned();
    let ifname = env(vars, "CNI_IFNAME")?;
    if ifname.len() > 15 || !ifname.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') {
        return Err(CniError { code: 4, msg: format!("CNI_IFNAME {ifname:?} is not an interface name") });
    }
    match command {
        "ADD" if name == LOOPBACK => {
            let netns = env(vars, "CNI_NETNS")?;
            ip_in(netns, &["link", "set", "lo", "up"])?;
            Ok(json!({
                "cniVersion": version,
                "interfaces": [{"name": "lo", "sandbox": netns}],
                "ips": [{"version": "4", "address": "127.0.0.1/8", "interface": 0}],
                "dns": {},
            })
            .to_string())
        }
        "DEL" | "CHECK" if name == LOOPBACK => Ok(String::new()),
        "ADD" => {
            let netns = env(vars, "CNI_NETNS")?;
            let address = address_of(env(vars, "CNI_CONTAINERID")?);
            ip_in(netns, &["link", "set", "lo", "up"])?;
            ip_in(netns, &["link", "add", ifname, "type", "veth", "peer", "name", PEER])?;
            ip_in(netns, &["addr", "add", &format!("{address}/32"), "dev", ifname])?;
            ip_in(netns, &["link", "set", ifname, "up"])?;
            Ok(json!({
                "cniVersion": version,
                "interfaces": [{"name": ifname, "sandbox": netns}],
                "ips": [{"version": "4", "address": format!("{address}/32"), "interface": 0}],
                "dns": {},
            })
            .to_string())
        }
        // A namespace already gone took its devices with it; deleting one end of a veth
        // pair deletes both.
        "DEL" => {
            if let Ok(netns) = env(vars, "CNI_NETNS")
                && Path::new(netns).exists()
            {
                let _ = ip_in(netns, &["link", "del", ifname]);
            }
            Ok(String::new())
        }
        "CHECK" => Ok(String::new()),
        other => Err(CniError { code: 4, msg: format!("unknown CNI_COMMAND {other:?}") }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn addresses_stay_inside_127_128_0_0_slash_9_and_are_stable() {
        for id in ["a", "b", "3ba0aa1b5c42b07a0f4b9bb6cd41ecfe9cf82556ced9bd9c1876e62525eac915"] {
            let a = address_of(id);
            let parts: Vec<u8> = a.split('.').map(|p| p.parse().unwrap_or(0)).collect();
            assert_eq!(parts[0], 127);
            assert!(parts[1] >= 128 && parts[3] != 0 && parts[3] != 255, "{a}");
            assert_eq!(a, address_of(id));
        }
        assert_ne!(address_of("a"), address_of("b"));
    }

    #[test]
    fn version_and_bad_invocations_answer_as_the_spec_says() {
        let v: Value =
            serde_json::from_str(&run(PLUGIN, &vars(&[("CNI_COMMAND", "VERSION")]), b"").unwrap_or_default())
                .unwrap_or_default();
        assert_eq!(v["supportedVersions"][2], "0.4.0");
        assert_eq!(run(PLUGIN, &vars(&[]), b"{}").unwrap_err().code, 4);
        let add = vars(&[("CNI_COMMAND", "ADD"), ("CNI_IFNAME", "eth0")]);
        assert_eq!(run(PLUGIN, &add, b"not json").unwrap_err().code, 7);
        assert_eq!(run(PLUGIN, &add, b"{}").unwrap_err().msg, "CNI_NETNS is not set");
        assert_eq!(run(LOOPBACK, &add, b"{}").unwrap_err().msg, "CNI_NETNS is not set");
        let hostile = vars(&[("CNI_COMMAND", "ADD"), ("CNI_IFNAME", "eth0; reboot")]);
        assert_eq!(run(PLUGIN, &hostile, b"{}").unwrap_err().code, 4);
        let del = vars(&[("CNI_COMMAND", "DEL"), ("CNI_IFNAME", "eth0"), ("CNI_NETNS", "/nonexistent/ns")]);
        assert_eq!(run(PLUGIN, &del, b"{}"), Ok(String::new()), "a namespace already gone is fine");
    }
}
