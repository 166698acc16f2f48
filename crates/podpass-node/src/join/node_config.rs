//! What a joining node reads from the cluster once it trusts it, as kubeadm's `join` does
//! (`[kubelet-start] Downloading configuration for the kubelet from the "kubelet-config"
//! ConfigMap in the kube-system namespace`): the cluster's KubeletConfiguration
//! (`kube-system/kubelet-config`, key `kubelet`) and, beyond kubeadm, podpass's registry
//! (`kube-system/podpass-registry`): the host the node's credential provider answers for,
//! registry-auth's exchange URL, and how containerd reaches the registry. Both are read with
//! the bootstrap token over TLS pinned to the discovered CA (kubeadm's `kubeadm:kubelet-config`
//! Role grants the default node token's group and `system:nodes` `get` on them); a cluster
//! without them, or without that Role, leaves the node on its defaults (kubeadm would fail
//! the join; a cluster podpass did not make need not have them).

use std::time::Duration;

use serde_json::Value;
use thiserror::Error;

use super::discovery::ClusterInfo;
use super::fetch::JoinError;

/// The ConfigMap of the cluster's KubeletConfiguration (kubeadm `KubeletBaseConfigurationConfigMap`).
pub const KUBELET_CONFIG_MAP: &str = "kubelet-config";
/// Its key (kubeadm `KubeletBaseConfigurationConfigMapKey`).
pub const KUBELET_CONFIG_KEY: &str = "kubelet";
/// podpass's ConfigMap naming the cluster's registry for joining nodes.
pub const REGISTRY_CONFIG_MAP: &str = "podpass-registry";
/// The namespace of both.
pub const NAMESPACE: &str = "kube-system";

/// How long one request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest answer read: a ConfigMap is at most 1 MiB of data.
const MAX_BODY_BYTES: usize = 1024 * 1024 + 64 * 1024;
/// Largest host or URL taken from the registry ConfigMap.
const MAX_FIELD_BYTES: usize = 2048;

/// How containerd reaches the cluster's registry (`podpass-registry`'s `transport`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RegistryTransport {
    /// HTTPS verified against the cluster's CA, the node showing its own client certificate
    /// (registry-auth's node proof): podpass's own registry.
    ClusterCa,
    /// Plain HTTP (a registry on loopback).
    Http,
    /// HTTPS verified against the system's roots: containerd's defaults.
    System,
}

impl RegistryTransport {
    /// Its name in the ConfigMap.
    pub fn as_str(self) -> &'static str {
        match self {
            RegistryTransport::ClusterCa => "cluster-ca",
            RegistryTransport::Http => "http",
            RegistryTransport::System => "system",
        }
    }
}

/// A `podpass-registry` ConfigMap's data that is not valid: the key and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("data.{key}: {problem}")]
pub struct RegistryConfigError {
    /// The key.
    pub key: &'static str,
    /// What is wrong with it, in upstream's field-error words.
    pub problem: String,
}

/// The cluster's registry, as a joining node configures its credential provider and
/// containerd for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegistryConfig {
    /// `host:port` of the registry (the provider's `matchImages`).
    pub host: String,
    /// registry-auth's exchange URL (`https://…`).
    pub exchange_url: String,
    /// How containerd reaches it.
    pub transport: RegistryTransport,
}

impl RegistryConfig {
    /// The ConfigMap's `data`.
    pub fn to_data(&self) -> Value {
        serde_json::json!({"registry": self.host, "exchangeURL": self.exchange_url, "transport": self.transport.as_str()})
    }

    /// Reads a ConfigMap's `data`; each problem names its key.
    pub fn from_data(data: &Value) -> Result<RegistryConfig, RegistryConfigError> {
        let bad = |key: &'static str, problem: String| RegistryConfigError { key, problem };
        let field = |key: &'static str| -> Result<&str, RegistryConfigError> {
            let v = data.get(key).and_then(Value::as_str).ok_or_else(|| bad(key, "Required value".into()))?;
            if v.len() > MAX_FIELD_BYTES {
                return Err(bad(key, format!("Too long: may not be more than {MAX_FIELD_BYTES} bytes")));
            }
            Ok(v)
        };
        let host = field("registry")?;
        // It lands in a YAML and a TOML file and a directory name: host:port and nothing else.
        let valid_host = host.rsplit_once(':').is_some_and(|(name, port)| {
            !name.is_empty()
                && port.parse::<u16>().is_ok_and(|p| p > 0)
                && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"-.[]:".contains(&b))
        });
        if !valid_host {
            return Err(bad("registry", format!("Invalid value: {host:?}: must be host:port")));
        }
        let exchange_url = field("exchangeURL")?;
        match url::Url::parse(exchange_url) {
            Ok(u) if u.scheme() == "https" && u.host_str().is_some() && !exchange_url.contains(['"', '\\', '\n']) => {}
            _ => return Err(bad("exchangeURL", format!("Invalid value: {exchange_url:?}: must be an https:// URL"))),
        }
        let transport = match field("transport")? {
            "cluster-ca" => RegistryTransport::ClusterCa,
            "http" => RegistryTransport::Http,
            "system" => RegistryTransport::System,
            other => {
                return Err(bad(
                    "transport",
                    format!("Unsupported value: {other:?}: supported values: \"cluster-ca\", \"http\", \"system\""),
                ));
            }
        };
        Ok(RegistryConfig { host: host.to_owned(), exchange_url: exchange_url.to_owned(), transport })
    }
}

/// What the cluster says of its nodes; `None` where it says nothing (no such ConfigMap).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeConfiguration {
    /// The KubeletConfiguration (YAML), checked to parse.
    pub kubelet: Option<String>,
    /// The cluster's registry.
    pub registry: Option<RegistryConfig>,
    /// The ConfigMaps the token may not read (a cluster without kubeadm's
    /// `kubeadm:kubelet-config` Role), each as `namespace/name`: the node runs without them.
    pub forbidden: Vec<String>,
}

/// Reads the cluster's node configuration with `token` over TLS pinned to `info`'s CA.
pub async fn node_configuration(info: &ClusterInfo, token: &str) -> Result<NodeConfiguration, JoinError> {
    let fail = JoinError::Configuration;
    let ca = reqwest::Certificate::from_pem(info.ca_pem.as_bytes()).map_err(|e| fail(e.to_string()))?;
    let client = reqwest::Client::builder()
        .tls_certs_only([ca])
        .timeout(REQUEST_TIMEOUT)
        .build()
        .map_err(|e| fail(e.to_string()))?;
    let get = |name: &'static str| {
        let url = format!("{}/api/v1/namespaces/{NAMESPACE}/configmaps/{name}", info.server);
        let client = client.clone();
        async move { config_map(&client, &url, token).await.map_err(|e| fail(format!("{NAMESPACE}/{name}: {e}"))) }
    };
    let mut forbidden = Vec::new();
    let mut found = |name: &str, lookup: Lookup| match lookup {
        Lookup::Found(cm) => Some(cm),
        Lookup::Missing => None,
        Lookup::Forbidden => {
            forbidden.push(format!("{NAMESPACE}/{name}"));
            None
        }
    };
    let kubelet = match found(KUBELET_CONFIG_MAP, get(KUBELET_CONFIG_MAP).await?) {
        None => None,
        Some(cm) => {
            let text = cm.pointer(&format!("/data/{KUBELET_CONFIG_KEY}")).and_then(Value::as_str).ok_or_else(|| {
                fail(format!("{NAMESPACE}/{KUBELET_CONFIG_MAP}: data.{KUBELET_CONFIG_KEY}: Required value"))
            })?;
            crate::kubelet_config::parse(text.as_bytes()).map_err(|e| {
                fail(format!("{NAMESPACE}/{KUBELET_CONFIG_MAP}: data.{KUBELET_CONFIG_KEY}: {}", e.join("; ")))
            })?;
            Some(text.to_owned())
        }
    };
    let registry = match found(REGISTRY_CONFIG_MAP, get(REGISTRY_CONFIG_MAP).await?) {
        None => None,
        Some(cm) => Some(
            RegistryConfig::from_data(&cm["data"])
                .map_err(|e| fail(format!("{NAMESPACE}/{REGISTRY_CONFIG_MAP}: {e}")))?,
        ),
    };
    Ok(NodeConfiguration { kubelet, registry, forbidden })
}

/// A GET of a ConfigMap that failed, as one line.
#[derive(Debug, Error)]
#[error("{0}")]
struct FetchProblem(String);

/// What a GET of a ConfigMap found.
enum Lookup {
    Found(Value),
    Missing,
    /// Not this token's to read: RBAC answers 403 whether or not it exists.
    Forbidden,
}

/// One ConfigMap; its body bounded.
async fn config_map(client: &reqwest::Client, url: &str, token: &str) -> Result<Lookup, FetchProblem> {
    let fail = FetchProblem;
    let resp = client.get(url).bearer_auth(token).send().await.map_err(|e| fail(e.to_string()))?;
    let status = resp.status();
    match status {
        reqwest::StatusCode::NOT_FOUND => return Ok(Lookup::Missing),
        reqwest::StatusCode::FORBIDDEN => return Ok(Lookup::Forbidden),
        _ => {}
    }
    let body = super::fetch::bounded_body(resp, MAX_BODY_BYTES).await.map_err(|e| fail(e.into()))?;
    if !status.is_success() {
        let message = serde_json::from_slice::<Value>(&body)
            .ok()
            .and_then(|v| v["message"].as_str().map(str::to_owned))
            .unwrap_or_default();
        return Err(fail(format!("{status} {message}").trim_end().to_owned()));
    }
    serde_json::from_slice(&body).map(Lookup::Found).map_err(|e| fail(format!("not a ConfigMap: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_registry_config_round_trips_and_each_bad_key_is_named() {
        let good = RegistryConfig {
            host: "127.0.0.1:5443".into(),
            exchange_url: "https://127.0.0.1:5080/exchange".into(),
            transport: RegistryTransport::ClusterCa,
        };
        assert_eq!(RegistryConfig::from_data(&good.to_data()), Ok(good.clone()));
        let with = |key: &str, value: Value| {
            let mut data = good.to_data();
            data[key] = value;
            RegistryConfig::from_data(&data).err().map(|e| e.to_string()).unwrap_or_default()
        };
        for host in ["127.0.0.1", "a b:5", "h:0", "h:99999", "\"]\n[x:1", "h/x:5", ":5"] {
            assert!(with("registry", host.into()).starts_with("data.registry: Invalid value"), "{host}");
        }
        assert!(with("registry", Value::Null).starts_with("data.registry: Required value"));
        assert!(with("registry", "h".repeat(3000).into()).starts_with("data.registry: Too long"));
        for url in ["http://h:1/x", "not a url", "https://h:1/\"x"] {
            assert!(with("exchangeURL", url.into()).starts_with("data.exchangeURL: Invalid value"), "{url}");
        }
        assert!(with("transport", "ftp".into()).starts_with("data.transport: Unsupported value: \"ftp\""));
        assert!(RegistryConfig::from_data(&with_host("[::1]:5000")).is_ok());
    }

    fn with_host(host: &str) -> Value {
        serde_json::json!({"registry": host, "exchangeURL": "https://h:1/", "transport": "http"})
    }
}
