//! kubeadm's token discovery (`cmd/kubeadm/app/discovery/token`,
//! `util/pubkeypin`): a joining machine reads `kube-public/cluster-info` without trusting
//! the server, and believes the kubeconfig in it only when its bootstrap token's detached
//! JWS over it holds (the server knows the token's secret) and, when the CA is pinned with
//! `--discovery-token-ca-cert-hash`, its CA's public key hash is one of the pins. Pure:
//! the fetching is the caller's.

use serde_json::Value;

use podpass_api::bootstrap_token::{KUBECONFIG_KEY, SIGNATURE_PREFIX, parse, signature_is_valid};

/// Why a cluster-info is not believed, in kubeadm's words where it has them.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DiscoveryError {
    /// A `--discovery-token-ca-cert-hash` that is not `sha256:<64 hex digits>`.
    #[error("--discovery-token-ca-cert-hash {0:?}: {1}")]
    BadPin(String, String),
    /// The token is not `<id>.<secret>`.
    #[error("--token: the bootstrap token must be of the form \"[a-z0-9]{{6}}.[a-z0-9]{{16}}\"")]
    BadToken,
    /// The ConfigMap has no kubeconfig.
    #[error(
        "there is no {KUBECONFIG_KEY} key in the cluster-info ConfigMap. This API Server isn't set up for token bootstrapping, can't connect"
    )]
    NoKubeconfig,
    /// No signature by the token: unknown or expired.
    #[error(
        "there is no JWS signed token in the cluster-info ConfigMap. This token id {0:?} is invalid for this cluster or it has expired. Use \"podpass token create\" on the control-plane node to create a new valid token"
    )]
    NotSigned(String),
    /// A signature that does not hold.
    #[error("failed to verify JWS signature of received cluster info object, can't trust this API Server")]
    BadSignature,
    /// The kubeconfig is not one cluster with a server and a CA.
    #[error("the kubeconfig in the cluster-info ConfigMap: {0}")]
    BadKubeconfig(String),
    /// The CA's key is not pinned.
    #[error("cluster CA found in cluster-info ConfigMap is invalid: none of the public keys {0:?} are pinned")]
    NotPinned(String),
}

/// What a joining node takes from a believed cluster-info.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterInfo {
    /// The API server's URL.
    pub server: String,
    /// The cluster CA (PEM).
    pub ca_pem: String,
}

/// `pubkeypin.Hash`: `sha256:` and the lowercase hex SHA-256 of a certificate's DER
/// SubjectPublicKeyInfo.
pub fn ca_cert_hash(certificate_der: &[u8]) -> Result<String, DiscoveryError> {
    let (_, cert) = x509_parser::parse_x509_certificate(certificate_der)
        .map_err(|e| DiscoveryError::BadKubeconfig(format!("its CA does not parse: {e}")))?;
    let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, cert.tbs_certificate.subject_pki.raw);
    Ok(format!("sha256:{}", data_encoding::HEXLOWER.encode(digest.as_ref())))
}

/// [`ca_cert_hash`] of each certificate of a PEM bundle, in its order.
pub fn ca_cert_hashes(pem: &str) -> Result<Vec<String>, DiscoveryError> {
    let mut hashes = Vec::new();
    for block in x509_parser::pem::Pem::iter_from_buffer(pem.as_bytes()) {
        let block = block.map_err(|e| DiscoveryError::BadKubeconfig(format!("its CA: {e}")))?;
        hashes.push(ca_cert_hash(&block.contents)?);
    }
    Ok(hashes)
}

/// `pubkeypin.Set.Allow`: a pin is `sha256:` and 64 hex digits (case as written).
pub fn check_pin(pin: &str) -> Result<String, DiscoveryError> {
    let bad = |why: &str| DiscoveryError::BadPin(pin.to_owned(), why.to_owned());
    let Some((format, value)) = pin.split_once(':') else {
        return Err(bad("invalid hash, expected \"format:hex-value\". Known format(s) are: sha256"));
    };
    if !format.eq_ignore_ascii_case("sha256") {
        return Err(bad(&format!("unknown hash format {format:?}. Known format(s) are: sha256")));
    }
    let bytes = data_encoding::HEXLOWER_PERMISSIVE.decode(value.as_bytes()).map_err(|_| bad("not hexadecimal"))?;
    if bytes.len() != 32 {
        return Err(bad(&format!("expected a 32 byte SHA-256 hash, found {} bytes", bytes.len())));
    }
    Ok(format!("sha256:{}", data_encoding::HEXLOWER.encode(&bytes)))
}

/// `retrieveValidatedConfigInfo`'s checks of a fetched `cluster-info` (its JSON) for
/// `token`, against `pins` (none: the CA is taken on the signature alone, kubeadm's
/// `--discovery-token-unsafe-skip-ca-verification`).
pub fn validate(cluster_info: &Value, token: &str, pins: &[String]) -> Result<ClusterInfo, DiscoveryError> {
    let pins = pins.iter().map(|p| check_pin(p)).collect::<Result<Vec<_>, _>>()?;
    let (id, secret) = parse(token).ok_or(DiscoveryError::BadToken)?;
    let data = cluster_info.get("data");
    let kubeconfig =
        data.and_then(|d| d.get(KUBECONFIG_KEY)).and_then(Value::as_str).ok_or(DiscoveryError::NoKubeconfig)?;
    let signature = data
        .and_then(|d| d.get(format!("{SIGNATURE_PREFIX}{id}")))
        .and_then(Value::as_str)
        .ok_or_else(|| DiscoveryError::NotSigned(id.to_owned()))?;
    if !signature_is_valid(signature, kubeconfig, id, secret) {
        return Err(DiscoveryError::BadSignature);
    }
    let config =
        kube::config::Kubeconfig::from_yaml(kubeconfig).map_err(|e| DiscoveryError::BadKubeconfig(e.to_string()))?;
    let [cluster] = config.clusters.as_slice() else {
        return Err(DiscoveryError::BadKubeconfig(format!("{} clusters, not one", config.clusters.len())));
    };
    let cluster = cluster.cluster.as_ref().ok_or_else(|| DiscoveryError::BadKubeconfig("an empty cluster".into()))?;
    let server = cluster.server.clone().ok_or_else(|| DiscoveryError::BadKubeconfig("no server".into()))?;
    let ca = cluster
        .certificate_authority_data
        .as_ref()
        .and_then(|b64| data_encoding::BASE64.decode(b64.as_bytes()).ok())
        .ok_or_else(|| DiscoveryError::BadKubeconfig("no certificate-authority-data".into()))?;
    let ca_pem = String::from_utf8(ca).map_err(|_| DiscoveryError::BadKubeconfig("a CA that is no PEM".into()))?;
    if !pins.is_empty() {
        let hashes = ca_cert_hashes(&ca_pem)?;
        if !hashes.iter().any(|h| pins.contains(h)) {
            return Err(DiscoveryError::NotPinned(hashes.join(":")));
        }
    }
    Ok(ClusterInfo { server, ca_pem })
}

#[cfg(test)]
mod tests {
    use super::*;
    use podpass_api::bootstrap_token::detached_signature;
    use serde_json::json;

    const TOKEN: &str = "abcdef.0123456789abcdef";

    fn ca() -> (String, Vec<u8>) {
        let key = rcgen::KeyPair::generate().unwrap_or_else(|e| panic!("{e}"));
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap_or_else(|e| panic!("{e}"));
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let cert = params.self_signed(&key).unwrap_or_else(|e| panic!("{e}"));
        (cert.pem(), cert.der().to_vec())
    }

    fn cluster_info(ca_pem: &str, sign_with: Option<&str>) -> Value {
        let kubeconfig = format!(
            "apiVersion: v1\nclusters:\n- cluster:\n    certificate-authority-data: {}\n    server: https://127.0.0.1:6443\n  name: \"\"\nkind: Config\n",
            data_encoding::BASE64.encode(ca_pem.as_bytes())
        );
        let mut data = json!({"kubeconfig": kubeconfig});
        if let Some(token) = sign_with {
            let (id, secret) = parse(token).unwrap_or_default();
            data[format!("jws-kubeconfig-{id}")] = json!(detached_signature(&kubeconfig, id, secret));
        }
        json!({"data": data})
    }

    #[test]
    fn a_signed_cluster_info_with_a_pinned_ca_is_believed() {
        let (pem, der) = ca();
        let pin = ca_cert_hash(&der).unwrap_or_default();
        assert!(pin.starts_with("sha256:") && pin.len() == 7 + 64, "{pin}");
        let info = validate(&cluster_info(&pem, Some(TOKEN)), TOKEN, &[pin.to_uppercase().replace("SHA256", "sha256")]);
        assert_eq!(info, Ok(ClusterInfo { server: "https://127.0.0.1:6443".into(), ca_pem: pem.clone() }));
        assert!(validate(&cluster_info(&pem, Some(TOKEN)), TOKEN, &[]).is_ok(), "unpinned: the signature alone");
    }

    #[test]
    fn anything_else_is_refused_saying_why() {
        let (pem, _) = ca();
        let (_, other) = ca();
        let other_pin = ca_cert_hash(&other).unwrap_or_default();
        assert_eq!(validate(&cluster_info(&pem, None), TOKEN, &[]), Err(DiscoveryError::NotSigned("abcdef".into())));
        assert_eq!(
            validate(&cluster_info(&pem, Some("abcdef.ffffffffffffffff")), TOKEN, &[]),
            Err(DiscoveryError::BadSignature),
            "signed with another secret"
        );
        assert!(matches!(
            validate(&cluster_info(&pem, Some(TOKEN)), TOKEN, &[other_pin]),
            Err(DiscoveryError::NotPinned(_))
        ));
        assert_eq!(validate(&json!({"data": {}}), TOKEN, &[]), Err(DiscoveryError::NoKubeconfig));
        assert_eq!(validate(&cluster_info(&pem, Some(TOKEN)), "nope", &[]), Err(DiscoveryError::BadToken));
        assert!(matches!(check_pin("md5:00"), Err(DiscoveryError::BadPin(..))));
        assert!(matches!(check_pin("sha256:00"), Err(DiscoveryError::BadPin(..))));
        assert!(matches!(check_pin("deadbeef"), Err(DiscoveryError::BadPin(..))));
    }
}
