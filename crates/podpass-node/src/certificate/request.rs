//! A certificate asked of the cluster (client-go `certificate/csr`): a
//! CertificateSigningRequest created, then watched until it is issued, denied or failed.

use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::ByteString;
use k8s_openapi::api::certificates::v1::{CertificateSigningRequest, CertificateSigningRequestSpec};
use kube::api::{Api, ObjectMeta, PostParams};
use kube::runtime::{WatchStreamExt, watcher};

use super::CertificateError;

/// The kubelet's client signer.
pub const KUBELET_CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";

/// The kubelet's serving signer.
pub const KUBELET_SERVING_SIGNER: &str = "kubernetes.io/kubelet-serving";

/// The Organization of every node's certificate.
pub const NODES_GROUP: &str = "system:nodes";

/// How often a pending request is looked at again.
const POLL: Duration = Duration::from_secs(1);

/// A new private key as the kubelet makes them (`keyutil.MakeEllipticPrivateKeyPEM`: ECDSA
/// P-256), PKCS#8 PEM.
pub fn new_private_key() -> Result<String, CertificateError> {
    rcgen::KeyPair::generate().map(|k| k.serialize_pem()).map_err(|e| CertificateError::Key(e.to_string()))
}

/// What a certificate is asked for: its subject and usages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    /// The subject's CN (`system:node:<name>`).
    pub common_name: String,
    /// The subject's Os.
    pub organizations: Vec<String>,
    /// The usages, as `certificates.k8s.io` names them.
    pub usages: Vec<String>,
    /// The signer.
    pub signer_name: &'static str,
    /// The DNS names asked for (a serving certificate's).
    pub dns_names: Vec<String>,
    /// The IP addresses asked for (a serving certificate's).
    pub ip_addresses: Vec<std::net::IpAddr>,
}

impl Template {
    /// A node's client certificate (kubelet `requestNodeCertificate`): `system:node:<name>`
    /// in `system:nodes`, digital signature and client auth (key encipherment is only asked
    /// for RSA keys, and the kubelet's keys are ECDSA).
    pub fn kubelet_client(node: &str) -> Self {
        Self {
            common_name: format!("system:node:{node}"),
            organizations: vec![NODES_GROUP.to_owned()],
            usages: vec!["digital signature".to_owned(), "client auth".to_owned()],
            signer_name: KUBELET_CLIENT_SIGNER,
            dns_names: Vec::new(),
            ip_addresses: Vec::new(),
        }
    }

    /// A node's serving certificate (kubelet `NewKubeletServerCertificateManager`):
    /// `system:node:<name>` in `system:nodes`, digital signature and server auth, for the
    /// Node's addresses (`addressesToHostnamesAndIPs`: its Hostname and DNS addresses as DNS
    /// names, its IPs as IP addresses, each once, in order).
    pub fn kubelet_serving(node: &str, addresses: &[k8s_openapi::api::core::v1::NodeAddress]) -> Self {
        let mut dns_names: Vec<String> = Vec::new();
        let mut ip_addresses: Vec<std::net::IpAddr> = Vec::new();
        for a in addresses {
            match a.type_.as_str() {
                "Hostname" | "InternalDNS" | "ExternalDNS"
                    if !a.address.is_empty() && !dns_names.contains(&a.address) =>
                {
                    dns_names.push(a.address.clone());
                }
                "InternalIP" | "ExternalIP" => {
                    if let Ok(ip) = a.address.parse()
                        && !ip_addresses.contains(&ip)
                    {
                        ip_addresses.push(ip);
                    }
                }
                _ => {}
            }
        }
        Self {
            common_name: format!("system:node:{node}"),
            organizations: vec![NODES_GROUP.to_owned()],
            usages: vec!["digital signature".to_owned(), "server auth".to_owned()],
            signer_name: KUBELET_SERVING_SIGNER,
            dns_names,
            ip_addresses,
        }
    }
}

/// The PKIX SubjectPublicKeyInfo (DER) of a PEM private key.
pub fn public_key_der(key_pem: &str) -> Result<Vec<u8>, CertificateError> {
    let key = rcgen::KeyPair::from_pem(key_pem).map_err(|e| CertificateError::Key(e.to_string()))?;
    use rcgen::PublicKeyData;
    Ok(key.subject_public_key_info())
}

/// A PEM PKCS#10 request for `template`, signed by the key.
pub fn csr_pem(template: &Template, key_pem: &str) -> Result<String, CertificateError> {
    let key = rcgen::KeyPair::from_pem(key_pem).map_err(|e| CertificateError::Key(e.to_string()))?;
    let mut params =
        rcgen::CertificateParams::new(Vec::<String>::new()).map_err(|e| CertificateError::Key(e.to_string()))?;
    params.distinguished_name = rcgen::DistinguishedName::new();
    params.distinguished_name.push(rcgen::DnType::CommonName, template.common_name.as_str());
    for o in &template.organizations {
        params.distinguished_name.push(rcgen::DnType::OrganizationName, o.as_str());
    }
    for dns in &template.dns_names {
        let name =
            rcgen::string::Ia5String::try_from(dns.as_str()).map_err(|e| CertificateError::Key(e.to_string()))?;
        params.subject_alt_names.push(rcgen::SanType::DnsName(name));
    }
    params.subject_alt_names.extend(template.ip_addresses.iter().map(|ip| rcgen::SanType::IpAddress(*ip)));
    params.serialize_request(&key).and_then(|r| r.pem()).map_err(|e| CertificateError::Key(e.to_string()))
}

/// kubelet bootstrap `digestedName`: `node-csr-` and the unpadded base64url SHA-512/256 of
/// the public key, the CN, each O and each usage, every item base64url-encoded and ended
/// by `|` (outside that alphabet, so no two inputs hash the same stream). The same key
/// and subject name the same request, so a node that restarts mid-bootstrap finds its own.
pub fn digested_name(public_key_der: &[u8], template: &Template) -> String {
    use aws_lc_rs::digest;
    let encode = |data: &[u8]| data_encoding::BASE64URL_NOPAD.encode(data);
    let mut ctx = digest::Context::new(&digest::SHA512_256);
    let mut write = |data: &[u8]| {
        ctx.update(encode(data).as_bytes());
        ctx.update(b"|");
    };
    write(public_key_der);
    write(template.common_name.as_bytes());
    for o in &template.organizations {
        write(o.as_bytes());
    }
    for u in &template.usages {
        write(u.as_bytes());
    }
    format!("node-csr-{}", encode(ctx.finish().as_ref()))
}

/// The name a request is created under: a fixed one (bootstrap) or `generateName`
/// (rotation's `csr-`).
#[derive(Debug, Clone)]
pub enum RequestName {
    /// This name; an existing request of this name is taken if it asks the same.
    Fixed(String),
    /// A server-chosen name with this prefix.
    Generate(&'static str),
}

/// Asks the cluster for a certificate of `template` for `key_pem` and waits (at most
/// `timeout`) until it is issued; the PEM chain. A request already there under a fixed name
/// is waited on when it asks the same (subject, signer, usages, public key), an error
/// otherwise (client-go `ensureCompatible`). A denied or failed request is an error with the
/// condition's reason and message; a certificate for another key is refused.
pub async fn request_certificate(
    client: &kube::Client,
    template: &Template,
    key_pem: &str,
    name: RequestName,
    timeout: Duration,
) -> Result<String, CertificateError> {
    let deadline = Instant::now() + timeout;
    let public_key = public_key_der(key_pem)?;
    let request = csr_pem(template, key_pem)?;
    let api: Api<CertificateSigningRequest> = Api::all(client.clone());
    let mut meta = ObjectMeta::default();
    match &name {
        RequestName::Fixed(n) => meta.name = Some(n.clone()),
        RequestName::Generate(prefix) => meta.generate_name = Some((*prefix).to_owned()),
    }
    let csr = CertificateSigningRequest {
        metadata: meta,
        spec: CertificateSigningRequestSpec {
            request: ByteString(request.into_bytes()),
            signer_name: template.signer_name.to_owned(),
            usages: Some(template.usages.clone()),
            ..Default::default()
        },
        status: None,
    };
    let label = |n: &str| format!("certificatesigningrequest {n}");
    // Created, or (bootstrap only) found; the API may still be starting, so a failure to
    // reach it is retried until the deadline.
    let created = loop {
        match api.create(&PostParams::default(), &csr).await {
            Ok(created) => break created,
            Err(kube::Error::Api(status)) if status.code == 409 => {
                let RequestName::Fixed(n) = &name else {
                    return Err(CertificateError::request(label("csr-"), kube::Error::Api(status)));
                };
                let existing = api.get(n).await.map_err(|e| CertificateError::request(label(n), e))?;
                ensure_compatible(&existing, template, &public_key)
                    .map_err(|e| CertificateError::Conflict { name: n.clone(), reason: e.to_string() })?;
                break existing;
            }
            Err(e @ kube::Error::Api(_)) => {
                let n = match &name {
                    RequestName::Fixed(n) => n.clone(),
                    RequestName::Generate(p) => format!("{p}…"),
                };
                return Err(CertificateError::request(label(&n), e));
            }
            Err(e) => {
                if Instant::now() >= deadline {
                    return Err(CertificateError::request(label("(not created)"), e));
                }
                tracing::info!(error = %e, "the API server is not answering yet; asking again");
                tokio::time::sleep(POLL * 2).await;
            }
        }
    };
    let csr_name = created.metadata.name.clone().unwrap_or_default();
    tracing::info!(csr = %csr_name, signer = template.signer_name, "certificate requested; waiting for it to be issued");
    let mut current = created;
    // client-go's WaitForCertificate watches the request: the certificate is taken the
    // moment it is issued. The poll stays beside it, for a watch that fails or misses the
    // request's deletion.
    let by_name = watcher::Config::default().fields(&format!("metadata.name={csr_name}"));
    let mut updates = std::pin::pin!(watcher(api.clone(), by_name).default_backoff().applied_objects());
    loop {
        if let Some(status) = &current.status {
            for c in status.conditions.iter().flatten() {
                let (reason, message) = (c.reason.clone().unwrap_or_default(), c.message.clone().unwrap_or_default());
                if c.status == "True" && c.type_ == "Denied" {
                    return Err(CertificateError::Denied { name: csr_name, reason, message });
                }
                if c.status == "True" && c.type_ == "Failed" {
                    return Err(CertificateError::Failed { name: csr_name, reason, message });
                }
            }
            if let Some(cert) = status.certificate.as_ref().filter(|c| !c.0.is_empty()) {
                let pem = String::from_utf8(cert.0.clone())
                    .map_err(|_| CertificateError::Issued { reason: "the certificate is not PEM text".into() })?;
                check_issued_for(&pem, &public_key)?;
                return Ok(pem);
            }
        }
        if Instant::now() >= deadline {
            return Err(CertificateError::Timeout { name: csr_name, seconds: timeout.as_secs() });
        }
        let watched = tokio::select! {
            next = updates.next() => match next {
                Some(Ok(csr)) => Some(csr).filter(|c| c.metadata.name.as_deref() == Some(csr_name.as_str())),
                Some(Err(_)) => None,
                // The watch never ends by itself; if it did, the poll alone goes on.
                None => {
                    tokio::time::sleep(POLL).await;
                    None
                }
            },
            () = tokio::time::sleep(POLL) => None,
        };
        if let Some(csr) = watched {
            current = csr;
            continue;
        }
        match api.get(&csr_name).await {
            Ok(csr) => current = csr,
            Err(kube::Error::Api(status)) if status.code == 404 => {
                return Err(CertificateError::Failed {
                    name: csr_name,
                    reason: "NotFound".into(),
                    message: "the request was deleted before it was issued".into(),
                });
            }
            Err(e) => tracing::info!(csr = %csr_name, error = %e, "looking at the certificate request failed; again"),
        }
    }
}

/// How an existing request differs from ours.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
struct Mismatch(String);

impl From<&str> for Mismatch {
    fn from(s: &str) -> Self {
        Self(s.to_owned())
    }
}

/// client-go `ensureCompatible`: an existing request of our name asks what we ask.
fn ensure_compatible(
    existing: &CertificateSigningRequest,
    template: &Template,
    public_key: &[u8],
) -> Result<(), Mismatch> {
    use x509_parser::prelude::{FromDer, X509CertificationRequest};
    if existing.spec.signer_name != template.signer_name {
        return Err(Mismatch(format!("it is for signer {:?}", existing.spec.signer_name)));
    }
    if existing.spec.usages.as_deref().unwrap_or_default() != template.usages.as_slice() {
        return Err(Mismatch(format!("it asks for usages {:?}", existing.spec.usages.as_deref().unwrap_or_default())));
    }
    let (_, block) =
        x509_parser::pem::parse_x509_pem(&existing.spec.request.0).map_err(|_| "its request is not PEM")?;
    let (_, req) = X509CertificationRequest::from_der(&block.contents).map_err(|_| "its request is not a CSR")?;
    let info = &req.certification_request_info;
    if info.subject_pki.raw != public_key {
        return Err("it is for another private key".into());
    }
    let cn: Vec<&str> = info.subject.iter_common_name().filter_map(|c| c.as_str().ok()).collect();
    let orgs: Vec<&str> = info.subject.iter_organization().filter_map(|c| c.as_str().ok()).collect();
    if cn != [template.common_name.as_str()] || orgs != template.organizations {
        return Err(Mismatch(format!("it is for subject CN={cn:?} O={orgs:?}")));
    }
    Ok(())
}

/// The issued leaf is for our key (a signer's mistake would otherwise leave a node with a
/// certificate it cannot use).
fn check_issued_for(pem: &str, public_key: &[u8]) -> Result<(), CertificateError> {
    let issued = |reason: &str| CertificateError::Issued { reason: reason.to_owned() };
    let (_, block) = x509_parser::pem::parse_x509_pem(pem.as_bytes()).map_err(|_| issued("not PEM"))?;
    let (_, cert) = x509_parser::parse_x509_certificate(&block.contents).map_err(|_| issued("not a certificate"))?;
    if cert.public_key().raw != public_key {
        return Err(issued("the certificate is for another key"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_digested_name_follows_the_kubelets_stream() {
        let t = Template::kubelet_client("n1");
        // Restated by hand: each item base64url (no padding), then '|'.
        let key = b"\x30\x59spki";
        let mut stream = Vec::new();
        for item in [&key[..], b"system:node:n1", b"system:nodes", b"digital signature", b"client auth"] {
            stream.extend(data_encoding::BASE64URL_NOPAD.encode(item).into_bytes());
            stream.push(b'|');
        }
        let sum = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA512_256, &stream);
        let want = format!("node-csr-{}", data_encoding::BASE64URL_NOPAD.encode(sum.as_ref()));
        assert_eq!(digested_name(key, &t), want);
        assert_eq!(want.len(), "node-csr-".len() + 43, "32 bytes, unpadded base64url");
        // Another node, another name; the same inputs, the same name.
        assert_ne!(digested_name(key, &Template::kubelet_client("n2")), want);
        assert_eq!(digested_name(key, &t), digested_name(key, &t));
    }

    #[test]
    fn a_request_carries_the_subject_and_key_it_names() {
        let key = new_private_key().unwrap();
        let t = Template::kubelet_client("n1");
        let pem = csr_pem(&t, &key).unwrap();
        let existing = CertificateSigningRequest {
            metadata: ObjectMeta::default(),
            spec: CertificateSigningRequestSpec {
                request: ByteString(pem.into_bytes()),
                signer_name: KUBELET_CLIENT_SIGNER.into(),
                usages: Some(t.usages.clone()),
                ..Default::default()
            },
            status: None,
        };
        let spki = public_key_der(&key).unwrap();
        assert_eq!(ensure_compatible(&existing, &t, &spki), Ok(()));
        let other = public_key_der(&new_private_key().unwrap()).unwrap();
        assert_eq!(ensure_compatible(&existing, &t, &other), Err("it is for another private key".into()));
        let n2 = Template::kubelet_client("n2");
        assert!(ensure_compatible(&existing, &n2, &spki).unwrap_err().0.contains("system:node:n1"));
        let mut serving = t.clone();
        serving.signer_name = "kubernetes.io/kubelet-serving";
        assert!(ensure_compatible(&existing, &serving, &spki).unwrap_err().0.contains("signer"));
    }
}
