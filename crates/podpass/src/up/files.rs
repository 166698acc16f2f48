//! The files `podpass up` keeps in its data dir besides the control plane's own: the
//! registry-auth signer and policy (made once, then the user's to edit), and the configs it
//! rewrites at every start from the ports of that run.

use std::path::Path;

use anyhow::{Context, Result};
use podpass_apiserver::write_atomic;

/// The audience pod tokens carry to registry-auth (the provider's
/// `serviceAccountTokenAudience`).
pub const AUDIENCE: &str = "podpass-registry-auth";
/// The registry's `auth.token.service` (the registry tokens' audience).
pub const REGISTRY_SERVICE: &str = "podpass-registry";
/// The registry's `auth.token.issuer`.
pub const TOKEN_ISSUER: &str = "podpass-registry-auth";
/// The service account the demo pushes with (the default policy lets it push anywhere).
pub const PUBLISHER: (&str, &str) = ("kube-system", "podpass-publisher");

/// The default policy: each namespace's service accounts may pull `<namespace>/*`; the
/// publisher may push.
const DEFAULT_POLICY: &str = "\
# podpass up's default registry policy (yours to edit; registry-auth reads it at start).
# Each namespace's service accounts may pull <namespace>/*: a pod of team-a pulls
# team-a/app, never team-b/app.
rules:
- serviceAccount: {namespace: \"*\", name: \"*\"}
  repositories: [\"{namespace}/*\"]
  actions: [pull]
# The demo pushes its image as kube-system/podpass-publisher.
- serviceAccount: {namespace: kube-system, name: podpass-publisher}
  repositories: [\"**\"]
  actions: [pull, push]
";

/// Writes registry-auth's signing key (PKCS#8, 0600) and its self-signed certificate (the
/// registry's `rootcertbundle`) unless they exist; and the default policy unless one exists.
pub fn ensure_registry_auth_files(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let key = dir.join("signer.key");
    let cert = dir.join("signer.crt");
    if !key.exists() || !cert.exists() {
        let pair = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).context("generating a signing key")?;
        let mut params = rcgen::CertificateParams::default();
        params.distinguished_name.push(rcgen::DnType::CommonName, "podpass registry-auth");
        params.not_after = rcgen::date_time_ymd(2099, 1, 1);
        let certificate = params.self_signed(&pair).context("signing the registry-auth certificate")?;
        write_atomic(&key, pair.serialize_pem().as_bytes(), 0o600, true)?;
        write_atomic(&cert, certificate.pem().as_bytes(), 0o644, true)?;
    }
    let policy = dir.join("policy.yaml");
    if !policy.exists() {
        write_atomic(&policy, DEFAULT_POLICY.as_bytes(), 0o644, true)?;
    }
    Ok(())
}

/// The CNCF registry's config: storage in `dir/storage`, token auth against registry-auth.
pub fn write_registry_config(
    dir: &Path,
    port: u16,
    realm: &str,
    bundle: &Path,
    tls: &(std::path::PathBuf, std::path::PathBuf),
) -> Result<()> {
    std::fs::create_dir_all(dir.join("storage")).with_context(|| format!("creating {}", dir.display()))?;
    let config = format!(
        "# written by podpass up at every start\nversion: 0.1\nlog:\n  level: info\nstorage:\n  filesystem:\n    rootdirectory: {storage}\n  delete:\n    enabled: true\nhttp:\n  addr: 127.0.0.1:{port}\n  secret: {secret}\n  tls:\n    certificate: {cert}\n    key: {key}\n{auth}",
        cert = tls.0.display(),
        key = tls.1.display(),
        storage = dir.join("storage").display(),
        secret = "podpass-up-loopback-only",
        auth = token_auth_block(realm, bundle),
    );
    write_atomic(&dir.join("config.yml"), config.as_bytes(), 0o644, true)?;
    Ok(())
}

/// The registry's `auth.token` block trusting registry-auth.
pub fn token_auth_block(realm: &str, bundle: &Path) -> String {
    format!(
        "auth:\n  token:\n    realm: {realm}\n    service: {REGISTRY_SERVICE}\n    issuer: {TOKEN_ISSUER}\n    rootcertbundle: {}\n",
        bundle.display()
    )
}

/// The kubelet CredentialProviderConfig of node `node`: `podpass-credential-provider` in
/// exchange mode for the registry's host, fed with the pod's service-account token.
pub fn write_provider_config(
    path: &Path,
    registry_host: &str,
    exchange_url: &str,
    ca: &Path,
    node_dir: &Path,
) -> Result<()> {
    // The plugin verifies registry-auth against the cluster's CA and shows it the node's
    // client certificate (registry-auth's --node-binding require), the current one of its
    // rotation (read afresh at each run).
    let cert = super::node_certificate(node_dir);
    let key = cert.clone();
    let (ca, cert, key) = (ca.display(), cert.display(), key.display());
    let config = format!(
        "# written by podpass up or podpass node join at every start\napiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders:\n- name: podpass-credential-provider\n  apiVersion: credentialprovider.kubelet.k8s.io/v1\n  matchImages: [\"{registry_host}\"]\n  defaultCacheDuration: 10m\n  args: [\"--mode\", \"exchange\", \"--exchange-url\", \"{exchange_url}\", \"--exchange-ca\", \"{ca}\", \"--client-certificate\", \"{cert}\", \"--client-key\", \"{key}\"]\n  tokenAttributes:\n    serviceAccountTokenAudience: {AUDIENCE}\n    cacheType: Token\n    requireServiceAccount: true\n"
    );
    write_atomic(path, config.as_bytes(), 0o644, true)?;
    Ok(())
}

/// The KubeletConfiguration of each node: `seccompDefault: true`, so a tenant's container that
/// names no seccomp profile runs under the runtime's default one, never unconfined; pulls
/// in parallel (`serializeImagePulls: false`, `maxParallelImagePulls: 4`), so one tenant's
/// pull from a registry that never answers holds at most its share (half) of the node's
/// pulls, not every pod's; and bounds every pod to 1024 processes (`podPidsLimit`, beyond
/// upstream's unbounded default), so no tenant's fork bomb takes the node's; with the
/// eviction settings `podpass up` was given (none: upstream's defaults).
pub fn write_kubelet_config(path: &Path, eviction: &EvictionSettings) -> Result<()> {
    let config = format!("# written by podpass up at every start\n{}", kubelet_config_text(eviction));
    write_atomic(path, config.as_bytes(), 0o644, true)?;
    Ok(())
}

/// The KubeletConfiguration [`write_kubelet_config`] writes, as YAML: what every node of
/// the cluster runs with, joined ones too (`kube-system/kubelet-config`).
pub fn kubelet_config_text(eviction: &EvictionSettings) -> String {
    let mut config = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nseccompDefault: true\nserializeImagePulls: false\nmaxParallelImagePulls: 4\npodPidsLimit: 1024\n".to_owned();
    if let Some(hard) = &eviction.hard {
        config.push_str("evictionHard:\n");
        for (signal, value) in hard {
            // JSON strings are YAML strings: whatever the flag held stays one scalar.
            config.push_str(&format!(
                "  {}: {}\n",
                serde_json::Value::from(signal.as_str()),
                serde_json::Value::from(value.as_str())
            ));
        }
    }
    if let Some(period) = &eviction.transition_period {
        config.push_str(&format!("evictionPressureTransitionPeriod: {}\n", serde_json::Value::from(period.as_str())));
    }
    config
}

/// The node's eviction settings from `podpass up`'s flags.
#[derive(Debug, Clone, Default)]
pub struct EvictionSettings {
    /// `--eviction-hard`, as a map.
    pub hard: Option<std::collections::BTreeMap<String, String>>,
    /// `--eviction-pressure-transition-period`.
    pub transition_period: Option<String>,
}

/// The control plane's AdmissionConfiguration: Pod Security for a cluster that runs
/// tenants' pods — enforce baseline, warn and audit restricted, `kube-system` exempt.
pub fn write_admission_config(path: &Path) -> Result<()> {
    let config = "# written by podpass up at every start\napiVersion: apiserver.config.k8s.io/v1\nkind: AdmissionConfiguration\nplugins:\n- name: PodSecurity\n  configuration:\n    apiVersion: pod-security.admission.config.k8s.io/v1\n    kind: PodSecurityConfiguration\n    defaults:\n      enforce: baseline\n      enforce-version: latest\n      audit: restricted\n      audit-version: latest\n      warn: restricted\n      warn-version: latest\n    exemptions:\n      namespaces: [kube-system]\n";
    write_atomic(path, config.as_bytes(), 0o644, true)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kubelet_config_carries_the_eviction_flags_the_node_reads_back() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("kubelet.yaml");
        write_kubelet_config(&path, &EvictionSettings::default()).unwrap_or_else(|e| panic!("{e}"));
        let defaults = podpass_node::read_kubelet_config(&path).unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(defaults.eviction_hard.len(), 5, "upstream's defaults");
        let hard = podpass_node::parse_eviction_hard_flag("nodefs.inodesFree<12345,memory.available<1Gi")
            .unwrap_or_else(|e| panic!("{e}"));
        let settings = EvictionSettings { hard: Some(hard), transition_period: Some("5s".into()) };
        write_kubelet_config(&path, &settings).unwrap_or_else(|e| panic!("{e}"));
        let c = podpass_node::read_kubelet_config(&path).unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(c.eviction_hard.len(), 2, "{c:?}");
        assert_eq!(c.eviction_pressure_transition_period, std::time::Duration::from_secs(5));
        assert!(c.seccomp_default && c.pod_pids_limit == 1024);
    }
}
