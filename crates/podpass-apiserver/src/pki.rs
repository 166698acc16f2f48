//! The control plane's own PKI for embedded defaults: on first start a CA is created in
//! the data directory; at every start a serving certificate for the loopback names (and
//! the bind address) is issued from it, so clients pin the CA once and the serving
//! certificate never goes stale.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose,
    SanType,
};
use thiserror::Error;

use crate::files::{WriteError, write_atomic};

/// Validity of the generated CA.
const CA_DAYS: i64 = 3650;
/// Validity of each serving certificate (re-issued at every start).
const SERVING_DAYS: i64 = 365;

/// The PKI could not be prepared.
#[derive(Debug, Error)]
pub enum PkiError {
    /// Certificate generation failed.
    #[error("generating {what}: {source}")]
    Generate {
        /// Which certificate.
        what: &'static str,
        /// Why.
        source: rcgen::Error,
    },
    /// A file could not be read.
    #[error("reading {}: {source}", .path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A file could not be written.
    #[error(transparent)]
    Write(#[from] WriteError),
}

/// PEM material of the serving identity.
#[derive(Debug, Clone)]
pub struct ServingPki {
    /// The CA certificate clients trust (`certificate-authority-data`).
    pub ca_pem: String,
    /// Serving certificate chain: leaf then CA.
    pub cert_chain_pem: String,
    /// Serving private key (PKCS#8).
    pub key_pem: String,
}

fn generate(what: &'static str) -> impl FnOnce(rcgen::Error) -> PkiError {
    move |source| PkiError::Generate { what, source }
}

fn read(path: &Path) -> Result<String, PkiError> {
    std::fs::read_to_string(path).map_err(|source| PkiError::Read { path: path.to_path_buf(), source })
}

/// Ensures `<dir>/ca.crt` + `ca.key` exist (created once, key mode 0600) and issues a fresh
/// serving certificate for `localhost`, `127.0.0.1`, `::1`, `extra_ips` and `extra_names`
/// (the `kubernetes` Service's address and names), written to `<dir>/apiserver.crt` and
/// `apiserver.key`.
pub fn ensure_serving_pki(dir: &Path, extra_ips: &[IpAddr], extra_names: &[&str]) -> Result<ServingPki, PkiError> {
    std::fs::create_dir_all(dir).map_err(|source| PkiError::Read { path: dir.to_path_buf(), source })?;
    let (ca_crt, ca_key) = (dir.join("ca.crt"), dir.join("ca.key"));
    if !ca_crt.exists() || !ca_key.exists() {
        let key = KeyPair::generate().map_err(generate("CA key"))?;
        let mut params = CertificateParams::default();
        params.distinguished_name.push(DnType::CommonName, "podpass-ca");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages =
            vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
        let (y, m, d) = yesterday();
        params.not_before = rcgen::date_time_ymd(y, m, d);
        params.not_after = params.not_before + std::time::Duration::from_secs(CA_DAYS as u64 * 86_400);
        let cert = params.self_signed(&key).map_err(generate("CA certificate"))?;
        // Key first: a CA certificate without its key would never be regenerated.
        write_atomic(&ca_key, key.serialize_pem().as_bytes(), 0o600, true)?;
        write_atomic(&ca_crt, cert.pem().as_bytes(), 0o644, true)?;
    }
    let ca_pem = read(&ca_crt)?;
    let ca_key_pair = KeyPair::from_pem(&read(&ca_key)?).map_err(generate("CA key (reading)"))?;
    let issuer = Issuer::from_ca_cert_pem(&ca_pem, ca_key_pair).map_err(generate("CA certificate (reading)"))?;

    let mut sans = vec![
        SanType::DnsName("localhost".try_into().map_err(generate("serving certificate names"))?),
        SanType::IpAddress(IpAddr::from([127, 0, 0, 1])),
        SanType::IpAddress(IpAddr::from(std::net::Ipv6Addr::LOCALHOST)),
    ];
    for ip in extra_ips {
        if !ip.is_unspecified() && !sans.contains(&SanType::IpAddress(*ip)) {
            sans.push(SanType::IpAddress(*ip));
        }
    }
    for name in extra_names {
        sans.push(SanType::DnsName((*name).try_into().map_err(generate("serving certificate names"))?));
    }
    let key = KeyPair::generate().map_err(generate("serving key"))?;
    let mut params = CertificateParams::default();
    params.distinguished_name.push(DnType::CommonName, "podpass-apiserver");
    params.subject_alt_names = sans;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let (y, m, d) = yesterday();
    params.not_before = rcgen::date_time_ymd(y, m, d);
    params.not_after = params.not_before + std::time::Duration::from_secs(SERVING_DAYS as u64 * 86_400);
    let cert = params.signed_by(&key, &issuer).map_err(generate("serving certificate"))?;
    let key_pem = key.serialize_pem();
    let cert_chain_pem = format!("{}{}", cert.pem(), ca_pem);
    write_atomic(&dir.join("apiserver.key"), key_pem.as_bytes(), 0o600, true)?;
    write_atomic(&dir.join("apiserver.crt"), cert_chain_pem.as_bytes(), 0o644, true)?;
    Ok(ServingPki { ca_pem, cert_chain_pem, key_pem })
}

/// What a certificate issued by [`issue_certificate`] is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CertificateUse {
    /// A TLS server (`serverAuth`).
    Server,
    /// A TLS client (`clientAuth`).
    Client,
}

/// A certificate to issue from the data dir's CA.
#[derive(Debug, Clone)]
pub struct CertificateRequest<'a> {
    /// Files: `<dir>/<file_stem>.crt` and `.key`.
    pub file_stem: &'a str,
    /// Subject CN (a client certificate's user name).
    pub common_name: &'a str,
    /// Subject O (a client certificate's groups).
    pub organizations: &'a [&'a str],
    /// DNS names (servers).
    pub dns_names: &'a [&'a str],
    /// IP addresses (servers).
    pub ips: &'a [IpAddr],
    /// Server or client.
    pub usage: CertificateUse,
}

/// Issues a fresh certificate from the CA in `dir` (made by [`ensure_serving_pki`]),
/// written to `<dir>/<file_stem>.crt` (leaf then CA) and `.key` (0600); returns the
/// certificate chain and key PEM. Parts of an embedded cluster (registry-auth, the
/// registry, a node's client identity) get theirs at every start, as the API server does.
pub fn issue_certificate(dir: &Path, request: &CertificateRequest<'_>) -> Result<(String, String), PkiError> {
    let ca_pem = read(&dir.join("ca.crt"))?;
    let ca_key = KeyPair::from_pem(&read(&dir.join("ca.key"))?).map_err(generate("CA key (reading)"))?;
    let issuer = Issuer::from_ca_cert_pem(&ca_pem, ca_key).map_err(generate("CA certificate (reading)"))?;
    let key = KeyPair::generate().map_err(generate("certificate key"))?;
    let mut params = CertificateParams::default();
    params.distinguished_name.push(DnType::CommonName, request.common_name);
    for o in request.organizations {
        params.distinguished_name.push(DnType::OrganizationName, *o);
    }
    for name in request.dns_names {
        params.subject_alt_names.push(SanType::DnsName((*name).try_into().map_err(generate("certificate names"))?));
    }
    params.subject_alt_names.extend(request.ips.iter().map(|ip| SanType::IpAddress(*ip)));
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![match request.usage {
        CertificateUse::Server => ExtendedKeyUsagePurpose::ServerAuth,
        CertificateUse::Client => ExtendedKeyUsagePurpose::ClientAuth,
    }];
    let (y, m, d) = yesterday();
    params.not_before = rcgen::date_time_ymd(y, m, d);
    params.not_after = params.not_before + std::time::Duration::from_secs(SERVING_DAYS as u64 * 86_400);
    let cert = params.signed_by(&key, &issuer).map_err(generate("certificate"))?;
    let (chain_pem, key_pem) = (format!("{}{}", cert.pem(), ca_pem), key.serialize_pem());
    write_atomic(&dir.join(format!("{}.key", request.file_stem)), key_pem.as_bytes(), 0o600, true)?;
    write_atomic(&dir.join(format!("{}.crt", request.file_stem)), chain_pem.as_bytes(), 0o644, true)?;
    Ok((chain_pem, key_pem))
}

/// Issues a fresh client certificate the API server shows nodes when it proxies to them
/// (upstream's `--kubelet-client-certificate`): CN `kube-apiserver-kubelet-client` in
/// `system:masters`, from the CA in `dir`, written to `<dir>/apiserver-kubelet-client.{crt,key}`.
/// Returns the certificate and key PEM.
pub fn issue_kubelet_client(dir: &Path) -> Result<(String, String), PkiError> {
    issue_certificate(
        dir,
        &CertificateRequest {
            file_stem: "apiserver-kubelet-client",
            common_name: "kube-apiserver-kubelet-client",
            organizations: &["system:masters"],
            dns_names: &[],
            ips: &[],
            usage: CertificateUse::Client,
        },
    )
}

/// The start of yesterday (UTC), so that clients with a slightly slow clock accept the
/// certificate (rcgen takes calendar dates).
fn yesterday() -> (i32, u8, u8) {
    let (y, m, d) = crate::time::utc_date(podpass_token::now_unix() - 86_400);
    (i32::from(y), u8::try_from(m).unwrap_or(1), u8::try_from(d).unwrap_or(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn creates_ca_once_and_issues_serving_certs_from_it() {
        let dir = tempfile::tempdir().unwrap();
        let first = ensure_serving_pki(dir.path(), &[], &[]).unwrap();
        let second =
            ensure_serving_pki(dir.path(), &[IpAddr::from([10, 96, 0, 1])], &["kubernetes.default.svc"]).unwrap();
        assert_eq!(first.ca_pem, second.ca_pem, "the CA is kept");
        assert_ne!(first.key_pem, second.key_pem, "serving keys are fresh");
        use std::os::unix::fs::PermissionsExt;
        for key in ["ca.key", "apiserver.key"] {
            assert_eq!(std::fs::metadata(dir.path().join(key)).unwrap().permissions().mode() & 0o777, 0o600);
        }
        // openssl agrees that the serving certificate chains to the CA and names 127.0.0.1
        let out = std::process::Command::new("openssl")
            .args(["verify", "-CAfile"])
            .arg(dir.path().join("ca.crt"))
            .arg(dir.path().join("apiserver.crt"))
            .output();
        if let Ok(out) = out {
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
            let text = std::process::Command::new("openssl")
                .args(["x509", "-noout", "-ext", "subjectAltName", "-in"])
                .arg(dir.path().join("apiserver.crt"))
                .output()
                .unwrap();
            let sans = String::from_utf8_lossy(&text.stdout);
            assert!(sans.contains("IP Address:127.0.0.1") && sans.contains("DNS:localhost"), "{sans}");
            assert!(sans.contains("IP Address:10.96.0.1") && sans.contains("DNS:kubernetes.default.svc"), "{sans}");
        }
    }
}
