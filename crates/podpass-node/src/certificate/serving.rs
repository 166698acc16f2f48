//! The node's serving certificate as the kubelet's `serverTLSBootstrap` keeps it
//! (`pkg/kubelet/certificate.NewKubeletServerCertificateManager`): asked of the cluster
//! for the Node's addresses (signer `kubernetes.io/kubelet-serving`), stored as
//! `kubelet-server-current.pem`, shown by the node's HTTPS port from each handshake on, and
//! rotated as the client certificate is.

use std::sync::{Arc, RwLock};

use tokio_rustls::rustls;
use tokio_rustls::rustls::sign::CertifiedKey;

use super::CertificateError;
use super::manager::ShowsCertificate;
use super::request::Template;
use super::store::StoredPair;

/// The serving certificate the node's HTTPS port shows; none until one is issued (the
/// kubelet's `GetCertificate` answers "no serving certificate available" meanwhile).
#[derive(Debug, Default)]
pub struct ServingIdentity {
    current: RwLock<Option<Arc<CertifiedKey>>>,
}

impl ServingIdentity {
    fn get(&self) -> Option<Arc<CertifiedKey>> {
        match self.current.read() {
            Ok(current) => current.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }
}

impl ShowsCertificate for ServingIdentity {
    fn show(&self, pair: &StoredPair) -> Result<(), CertificateError> {
        let key = super::client::certified_key(pair)?;
        match self.current.write() {
            Ok(mut current) => *current = Some(key),
            Err(poisoned) => *poisoned.into_inner() = Some(key),
        }
        Ok(())
    }
}

impl rustls::server::ResolvesServerCert for ServingIdentity {
    fn resolve(&self, _hello: rustls::server::ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.get()
    }
}

/// Whether a stored serving pair can still be shown for `template` at `now` (Unix
/// seconds): issued by one of `ca_pem`'s certificates (a pair from another cluster is
/// not), for the template's subject and exactly its names, and not expired. Otherwise a new
/// one is asked for (client-go: a template whose names changed rotates at once).
pub fn still_serves(pair: &StoredPair, template: &Template, ca_pem: &str, now: i64) -> bool {
    if pair.common_name != template.common_name || now >= pair.not_after {
        return false;
    }
    let Some(leaf) = x509_parser::pem::Pem::iter_from_buffer(pair.cert_pem.as_bytes()).next().and_then(Result::ok)
    else {
        return false;
    };
    let Ok((_, cert)) = x509_parser::parse_x509_certificate(&leaf.contents) else { return false };
    let issued_here = x509_parser::pem::Pem::iter_from_buffer(ca_pem.as_bytes()).filter_map(Result::ok).any(|ca| {
        x509_parser::parse_x509_certificate(&ca.contents)
            .is_ok_and(|(_, ca)| ca.subject().as_raw() == cert.issuer().as_raw())
    });
    if !issued_here {
        return false;
    }
    let (mut dns, mut ips) = (Vec::new(), Vec::new());
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for name in &san.value.general_names {
            match name {
                x509_parser::extensions::GeneralName::DNSName(d) => dns.push((*d).to_owned()),
                x509_parser::extensions::GeneralName::IPAddress(raw) => match raw.len() {
                    4 => ips.push(std::net::IpAddr::from(<[u8; 4]>::try_from(*raw).unwrap_or_default())),
                    16 => ips.push(std::net::IpAddr::from(<[u8; 16]>::try_from(*raw).unwrap_or_default())),
                    _ => return false,
                },
                _ => return false,
            }
        }
    }
    dns == template.dns_names && ips == template.ip_addresses
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use k8s_openapi::api::core::v1::NodeAddress;

    use super::*;

    fn address(kind: &str, value: &str) -> NodeAddress {
        NodeAddress { type_: kind.into(), address: value.into() }
    }

    /// A CA, and a leaf it signs for `cn` with these names, as stored.
    fn issued(
        ca: &(rcgen::Issuer<'static, rcgen::KeyPair>, String),
        cn: &str,
        dns: &[&str],
        ips: &[&str],
    ) -> StoredPair {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params =
            rcgen::CertificateParams::new(dns.iter().map(|d| (*d).to_owned()).collect::<Vec<_>>()).unwrap();
        params.subject_alt_names.extend(ips.iter().map(|ip| rcgen::SanType::IpAddress(ip.parse().unwrap())));
        params.distinguished_name = rcgen::DistinguishedName::new();
        params.distinguished_name.push(rcgen::DnType::CommonName, cn);
        let cert = params.signed_by(&key, &ca.0).unwrap();
        super::super::store::parse_pair(&format!("{}{}", cert.pem(), key.serialize_pem())).unwrap()
    }

    fn ca(name: &str) -> (rcgen::Issuer<'static, rcgen::KeyPair>, String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(rcgen::DnType::CommonName, name);
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let pem = params.self_signed(&key).unwrap().pem();
        (rcgen::Issuer::new(params, key), pem)
    }

    #[test]
    fn the_template_names_the_nodes_addresses_each_once_in_order() {
        let t = Template::kubelet_serving(
            "n1",
            &[
                address("InternalIP", "10.0.0.1"),
                address("Hostname", "n1"),
                address("InternalIP", "10.0.0.1"),
                address("ExternalDNS", "n1.example.com"),
                address("ExternalIP", "::1"),
                address("InternalIP", "not an ip"),
                address("Weird", "x"),
            ],
        );
        assert_eq!(t.common_name, "system:node:n1");
        assert_eq!(t.organizations, ["system:nodes"]);
        assert_eq!(t.usages, ["digital signature", "server auth"]);
        assert_eq!(t.signer_name, "kubernetes.io/kubelet-serving");
        assert_eq!(t.dns_names, ["n1", "n1.example.com"]);
        assert_eq!(t.ip_addresses, ["10.0.0.1".parse::<std::net::IpAddr>().unwrap(), "::1".parse().unwrap()]);
        // The request carries them, as the approver reads them.
        let pem = super::super::request::csr_pem(&t, &super::super::request::new_private_key().unwrap()).unwrap();
        assert!(pem.contains("BEGIN CERTIFICATE REQUEST"));
    }

    #[test]
    fn a_stored_pair_serves_only_for_its_cluster_its_names_and_its_life() {
        let cluster = ca("cluster");
        let t = Template::kubelet_serving("n1", &[address("InternalIP", "127.0.0.1"), address("Hostname", "n1")]);
        let good = issued(&cluster, "system:node:n1", &["n1"], &["127.0.0.1"]);
        let now = good.not_before + 60;
        assert!(still_serves(&good, &t, &cluster.1, now));
        assert!(!still_serves(&good, &t, &cluster.1, good.not_after), "expired");
        assert!(!still_serves(&good, &t, &ca("another").1, now), "another cluster's CA");
        let other_ip = issued(&cluster, "system:node:n1", &["n1"], &["127.0.0.2"]);
        assert!(!still_serves(&other_ip, &t, &cluster.1, now), "the node's address changed");
        let more = issued(&cluster, "system:node:n1", &["n1", "extra"], &["127.0.0.1"]);
        assert!(!still_serves(&more, &t, &cluster.1, now), "a name the Node no longer has");
        let n2 = issued(&cluster, "system:node:n2", &["n1"], &["127.0.0.1"]);
        assert!(!still_serves(&n2, &t, &cluster.1, now), "another node's subject");
    }

    #[test]
    fn nothing_is_served_until_a_pair_is_shown() {
        let identity = ServingIdentity::default();
        assert!(identity.get().is_none());
        let cluster = ca("cluster");
        identity.show(&issued(&cluster, "system:node:n1", &["n1"], &[])).unwrap();
        assert!(identity.get().is_some());
        let _: &dyn rustls::server::ResolvesServerCert = &identity;
    }
}
