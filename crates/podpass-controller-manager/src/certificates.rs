//! The certificate controllers (`pkg/controller/certificates`), on kube-runtime's
//! Controller over CertificateSigningRequests, writing as `certificate-controller`:
//!
//! - the approver (`approver/sarapprove.go`): a valid kubelet client request
//!   (`kubernetes.io/kube-apiserver-client-kubelet`) is approved, `AutoApproved`, when a
//!   SubjectAccessReview says its requester may `create certificatesigningrequests/
//!   selfnodeclient` (renewing its own node's) or `/nodeclient` (a new node's);
//!   beyond upstream (which leaves them to a person), a kubelet-serving request is
//!   approved when a node asks for its own name and every DNS name and IP address it
//!   names is one of its Node's `status.addresses` ([`serving_refusal`]);
//! - the signer (`signer/signer.go`): an approved, unfailed, unsigned request for
//!   `kubernetes.io/kube-apiserver-client-kubelet` or `kubernetes.io/kubelet-serving` is
//!   signed with the cluster CA (`--cluster-signing-cert-file`/`-key-file`) for
//!   `--cluster-signing-duration` or the shorter `expirationSeconds`, valid from five
//!   minutes back; one its signer's rules refuse gets `Failed`/`SignerValidationFailure`.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::authorization::v1::{ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec};
use k8s_openapi::api::certificates::v1::{CertificateSigningRequest, CertificateSigningRequestCondition};
use kube::api::PostParams;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::{Api, ResourceExt};

use crate::credentials::Credentials;
pub use crate::sync_error::SyncError;

/// The approver's name (`--controllers`; alias `csrapproving`).
pub const APPROVER: &str = "certificatesigningrequest-approving-controller";
/// The signer's name (`--controllers`; alias `csrsigning`).
pub const SIGNER: &str = "certificatesigningrequest-signing-controller";
/// Their service account (upstream's, `system:controller:certificate-controller`).
pub const ACCOUNT: &str = "certificate-controller";
/// The kubelet client signer.
pub const KUBELET_CLIENT: &str = "kubernetes.io/kube-apiserver-client-kubelet";
/// The kubelet serving signer.
pub const KUBELET_SERVING: &str = "kubernetes.io/kubelet-serving";
/// How far back a signed certificate is valid from (clock skew).
const BACKDATE: Duration = Duration::from_secs(300);

/// What a request asks for, read from its PEM.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Request {
    /// Subject common name.
    pub common_name: String,
    /// Subject organizations, in order.
    pub organizations: Vec<String>,
    /// DNS names asked for.
    pub dns_names: Vec<String>,
    /// IP addresses asked for.
    pub ip_addresses: Vec<std::net::IpAddr>,
    /// Email addresses or URIs asked for (no kubelet certificate carries them).
    pub other_names: usize,
}

/// Reads a PEM certificate request's subject and alternative names.
pub(crate) fn read_request(pem: &[u8]) -> Option<Request> {
    use x509_parser::prelude::{FromDer, GeneralName, ParsedExtension, X509CertificationRequest};
    let (_, block) = x509_parser::pem::parse_x509_pem(pem).ok()?;
    let (_, csr) = X509CertificationRequest::from_der(&block.contents).ok()?;
    let subject = &csr.certification_request_info.subject;
    let mut request = Request {
        common_name: subject.iter_common_name().next().and_then(|c| c.as_str().ok()).unwrap_or_default().to_owned(),
        organizations: subject.iter_organization().filter_map(|o| o.as_str().ok().map(str::to_owned)).collect(),
        ..Request::default()
    };
    for extension in csr.requested_extensions().into_iter().flatten() {
        if let ParsedExtension::SubjectAlternativeName(san) = extension {
            for name in &san.general_names {
                match name {
                    GeneralName::DNSName(d) => request.dns_names.push((*d).to_owned()),
                    GeneralName::IPAddress(bytes) => match bytes.len() {
                        4 => request.ip_addresses.push(std::net::IpAddr::from(<[u8; 4]>::try_from(*bytes).ok()?)),
                        16 => request.ip_addresses.push(std::net::IpAddr::from(<[u8; 16]>::try_from(*bytes).ok()?)),
                        _ => return None,
                    },
                    _ => request.other_names += 1,
                }
            }
        }
    }
    Some(request)
}

fn usages_are(usages: &[String], allowed: &[&[&str]]) -> bool {
    let mut have: Vec<&str> = usages.iter().map(String::as_str).collect();
    have.sort_unstable();
    have.dedup();
    allowed.iter().any(|set| {
        let mut want = set.to_vec();
        want.sort_unstable();
        want == have
    })
}

/// `ValidateKubeletClientCSR`: `O=[system:nodes]`, `CN=system:node:<name>`, no alternative
/// names, usages {digital signature, (key encipherment), client auth}.
pub(crate) fn kubelet_client_problem(request: &Request, usages: &[String]) -> Option<&'static str> {
    if request.organizations != ["system:nodes"] {
        return Some("subject organization is not system:nodes");
    }
    if !request.common_name.starts_with("system:node:") {
        return Some("subject common name does not begin with system:node:");
    }
    if !request.dns_names.is_empty() || !request.ip_addresses.is_empty() || request.other_names > 0 {
        return Some("a kubelet client certificate names no DNS names, IP addresses, emails or URIs");
    }
    let ok = usages_are(
        usages,
        &[&["digital signature", "key encipherment", "client auth"], &["digital signature", "client auth"]],
    );
    (!ok).then_some("usages must be digital signature, (key encipherment), client auth")
}

/// `ValidateKubeletServingCSR`: the same subject, at least one DNS name or IP address, no
/// email or URI, usages {digital signature, (key encipherment), server auth}.
pub(crate) fn kubelet_serving_problem(request: &Request, usages: &[String]) -> Option<&'static str> {
    if request.organizations != ["system:nodes"] {
        return Some("subject organization is not system:nodes");
    }
    if !request.common_name.starts_with("system:node:") {
        return Some("subject common name does not begin with system:node:");
    }
    if request.dns_names.is_empty() && request.ip_addresses.is_empty() {
        return Some("a kubelet serving certificate names at least one DNS name or IP address");
    }
    if request.other_names > 0 {
        return Some("a kubelet serving certificate names no emails or URIs");
    }
    let ok = usages_are(
        usages,
        &[&["digital signature", "key encipherment", "server auth"], &["digital signature", "server auth"]],
    );
    (!ok).then_some("usages must be digital signature, (key encipherment), server auth")
}

/// Why podpass does not approve a kubelet serving request (`None`: it does): the
/// requester must be the node the subject names, in `system:nodes`, whose Node exists, and
/// every DNS name and IP address asked for must be among that Node's addresses (its
/// hostname, internal or external DNS names and IPs). A node therefore never gets a
/// serving certificate for another node's name, nor for an address that is not its own.
pub(crate) fn serving_refusal(
    request: &Request,
    requester: &str,
    groups: &[String],
    node: Option<&k8s_openapi::api::core::v1::Node>,
) -> Option<String> {
    if requester != request.common_name || !groups.iter().any(|g| g == "system:nodes") {
        return Some(format!("{requester:?} asks for {:?}: a node asks for its own name only", request.common_name));
    }
    let Some(node) = node else {
        return Some(format!("no Node {:?}", request.common_name.trim_start_matches("system:node:")));
    };
    let addresses = node.status.as_ref().and_then(|s| s.addresses.as_deref()).unwrap_or_default();
    let named =
        |kinds: &[&str], value: &str| addresses.iter().any(|a| kinds.contains(&a.type_.as_str()) && a.address == value);
    for dns in &request.dns_names {
        if !named(&["Hostname", "InternalDNS", "ExternalDNS"], dns) {
            return Some(format!("DNS name {dns:?} is not one of the Node's addresses"));
        }
    }
    for ip in &request.ip_addresses {
        if !named(&["InternalIP", "ExternalIP"], &ip.to_string()) {
            return Some(format!("IP address {ip} is not one of the Node's addresses"));
        }
    }
    None
}

/// The certificate's lifetime (`duration`): the signer's, or the shorter one asked for
/// (never under ten minutes).
pub(crate) fn lifetime(max: Duration, expiration_seconds: Option<i32>) -> Duration {
    match expiration_seconds.and_then(|s| u64::try_from(s).ok()) {
        Some(s) => max.min(Duration::from_secs(s.max(600))),
        None => max,
    }
}

fn has(csr: &CertificateSigningRequest, kind: &str) -> bool {
    csr.status.as_ref().and_then(|s| s.conditions.as_ref()).is_some_and(|c| c.iter().any(|c| c.type_ == kind))
}

fn request_bytes(csr: &CertificateSigningRequest) -> Option<&[u8]> {
    csr.spec.request.0.as_slice().into()
}

fn condition(kind: &str, reason: &str, message: &str) -> CertificateSigningRequestCondition {
    let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now());
    CertificateSigningRequestCondition {
        type_: kind.to_owned(),
        status: "True".to_owned(),
        reason: Some(reason.to_owned()),
        message: Some(message.to_owned()),
        last_update_time: Some(now.clone()),
        last_transition_time: Some(now),
    }
}

fn error_policy<C>(_csr: Arc<CertificateSigningRequest>, error: &SyncError, _ctx: Arc<C>) -> Action {
    tracing::warn!(error = %error, "certificate sync failed; retrying");
    Action::requeue(if error.is_conflict() { Duration::from_millis(200) } else { Duration::from_secs(5) })
}

/// Runs the approver until its stream ends.
pub async fn run_approver(credentials: Credentials) {
    let controller =
        Controller::new(Api::<CertificateSigningRequest>::all(credentials.root()), watcher::Config::default());
    controller
        .run(approve, error_policy, Arc::new(credentials))
        .for_each(|r| async move {
            if let Err(e) = r {
                tracing::debug!(error = %e, "approver sync");
            }
        })
        .await;
}

async fn approve(csr: Arc<CertificateSigningRequest>, credentials: Arc<Credentials>) -> Result<Action, SyncError> {
    let span = tracing::info_span!("reconcile", controller = APPROVER, csr = %csr.name_any());
    let work = async {
        if has(&csr, "Approved") || has(&csr, "Denied") {
            return Ok(Action::await_change());
        }
        if csr.spec.signer_name == KUBELET_SERVING {
            return approve_serving(&csr, &credentials).await;
        }
        if csr.spec.signer_name != KUBELET_CLIENT {
            return Ok(Action::await_change());
        }
        let usages = csr.spec.usages.clone().unwrap_or_default();
        let Some(request) = request_bytes(&csr).and_then(read_request) else { return Ok(Action::await_change()) };
        if kubelet_client_problem(&request, &usages).is_some() {
            return Ok(Action::await_change());
        }
        let requester = csr.spec.username.clone().unwrap_or_default();
        let own = requester == request.common_name;
        let subresource = if own { "selfnodeclient" } else { "nodeclient" };
        let client = credentials.client(ACCOUNT).await?;
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(requester),
                uid: csr.spec.uid.clone(),
                groups: csr.spec.groups.clone(),
                extra: csr.spec.extra.clone(),
                resource_attributes: Some(ResourceAttributes {
                    group: Some("certificates.k8s.io".into()),
                    resource: Some("certificatesigningrequests".into()),
                    subresource: Some(subresource.into()),
                    verb: Some("create".into()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let answer = Api::<SubjectAccessReview>::all(client.clone()).create(&PostParams::default(), &review).await?;
        if !answer.status.is_some_and(|s| s.allowed) {
            return Ok(Action::await_change());
        }
        let message = if own {
            "Auto approving self kubelet client certificate after SubjectAccessReview."
        } else {
            "Auto approving kubelet client certificate after SubjectAccessReview."
        };
        let mut approved = (*csr).clone();
        approved.status.get_or_insert_default().conditions.get_or_insert_default().push(condition(
            "Approved",
            "AutoApproved",
            message,
        ));
        Api::<CertificateSigningRequest>::all(client)
            .replace_subresource("approval", &csr.name_any(), &PostParams::default(), &approved)
            .await?;
        tracing::info!(via = subresource, "kubelet client certificate request approved");
        Ok(Action::await_change())
    };
    tracing::Instrument::instrument(work, span).await
}

/// A kubelet serving request: approved when [`serving_refusal`] finds nothing against it;
/// otherwise left for a person, as upstream leaves every one.
async fn approve_serving(csr: &CertificateSigningRequest, credentials: &Credentials) -> Result<Action, SyncError> {
    let usages = csr.spec.usages.clone().unwrap_or_default();
    let Some(request) = request_bytes(csr).and_then(read_request) else { return Ok(Action::await_change()) };
    if kubelet_serving_problem(&request, &usages).is_some() {
        return Ok(Action::await_change());
    }
    let client = credentials.client(ACCOUNT).await?;
    let requester = csr.spec.username.clone().unwrap_or_default();
    let groups = csr.spec.groups.clone().unwrap_or_default();
    let node = match request.common_name.strip_prefix("system:node:") {
        Some(name) if requester == request.common_name => {
            Api::<k8s_openapi::api::core::v1::Node>::all(client.clone()).get_opt(name).await?
        }
        _ => None,
    };
    if let Some(why) = serving_refusal(&request, &requester, &groups, node.as_ref()) {
        tracing::info!(reason = %why, "kubelet serving request left for a person");
        // Its own name: the Node may not have posted its addresses yet, look again in a
        // while. Another's: never.
        return Ok(if requester == request.common_name {
            Action::requeue(Duration::from_secs(30))
        } else {
            Action::await_change()
        });
    }
    let mut approved = csr.clone();
    approved.status.get_or_insert_default().conditions.get_or_insert_default().push(condition(
        "Approved",
        "AutoApproved",
        "Auto approving kubelet serving certificate: its names and addresses are its Node's.",
    ));
    Api::<CertificateSigningRequest>::all(client)
        .replace_subresource("approval", &csr.name_any(), &PostParams::default(), &approved)
        .await?;
    tracing::info!("kubelet serving certificate request approved");
    Ok(Action::await_change())
}

/// The cluster CA the signer signs with, and the longest lifetime it gives.
pub struct SigningCa {
    /// The CA certificate (PEM).
    pub cert_pem: String,
    /// Its key.
    pub key: rcgen::KeyPair,
    /// `--cluster-signing-duration`.
    pub duration: Duration,
}

/// Runs the signer until its stream ends.
pub async fn run_signer(credentials: Credentials, ca: SigningCa) {
    let controller =
        Controller::new(Api::<CertificateSigningRequest>::all(credentials.root()), watcher::Config::default());
    controller
        .run(sign, error_policy, Arc::new((credentials, ca)))
        .for_each(|r| async move {
            if let Err(e) = r {
                tracing::debug!(error = %e, "signer sync");
            }
        })
        .await;
}

/// The certificate for `pem` (a request the signer's rules accept), PEM.
pub(crate) fn issue(ca: &SigningCa, pem: &str, usages: &[String], expiration: Option<i32>) -> Result<String, String> {
    let issuer = rcgen::Issuer::from_ca_cert_pem(&ca.cert_pem, &ca.key).map_err(|e| format!("the CA: {e}"))?;
    let mut request = rcgen::CertificateSigningRequestParams::from_pem(pem).map_err(|e| e.to_string())?;
    let now = k8s_openapi::jiff::Timestamp::now().as_second();
    let life = i64::try_from(lifetime(ca.duration, expiration).as_secs()).unwrap_or(i64::MAX);
    let backdate = i64::try_from(BACKDATE.as_secs()).unwrap_or(0);
    let at = |s: i64| time::OffsetDateTime::from_unix_timestamp(s).unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    request.params.not_before = at(now - backdate);
    request.params.not_after = at(now + life);
    request.params.is_ca = rcgen::IsCa::ExplicitNoCa;
    request.params.key_usages = usages
        .iter()
        .filter_map(|u| match u.as_str() {
            "digital signature" => Some(rcgen::KeyUsagePurpose::DigitalSignature),
            "key encipherment" => Some(rcgen::KeyUsagePurpose::KeyEncipherment),
            _ => None,
        })
        .collect();
    request.params.extended_key_usages = usages
        .iter()
        .filter_map(|u| match u.as_str() {
            "client auth" => Some(rcgen::ExtendedKeyUsagePurpose::ClientAuth),
            "server auth" => Some(rcgen::ExtendedKeyUsagePurpose::ServerAuth),
            _ => None,
        })
        .collect();
    request.params.use_authority_key_identifier_extension = true;
    let certificate = request.signed_by(&issuer).map_err(|e| e.to_string())?;
    Ok(certificate.pem())
}

async fn sign(csr: Arc<CertificateSigningRequest>, ctx: Arc<(Credentials, SigningCa)>) -> Result<Action, SyncError> {
    let (credentials, ca) = (&ctx.0, &ctx.1);
    let span = tracing::info_span!("reconcile", controller = SIGNER, csr = %csr.name_any());
    let work = async {
        let signer = csr.spec.signer_name.as_str();
        let issued = csr.status.as_ref().and_then(|s| s.certificate.as_ref()).is_some_and(|c| !c.0.is_empty());
        if ![KUBELET_CLIENT, KUBELET_SERVING].contains(&signer)
            || !has(&csr, "Approved")
            || has(&csr, "Failed")
            || issued
        {
            return Ok(Action::await_change());
        }
        let usages = csr.spec.usages.clone().unwrap_or_default();
        let pem = String::from_utf8_lossy(&csr.spec.request.0).into_owned();
        let problem = match read_request(pem.as_bytes()) {
            None => Some("the request does not parse"),
            Some(r) if signer == KUBELET_CLIENT => kubelet_client_problem(&r, &usages),
            Some(r) => kubelet_serving_problem(&r, &usages),
        };
        let api = Api::<CertificateSigningRequest>::all(credentials.client(ACCOUNT).await?);
        let mut updated = (*csr).clone();
        match problem {
            Some(why) => {
                updated.status.get_or_insert_default().conditions.get_or_insert_default().push(condition(
                    "Failed",
                    "SignerValidationFailure",
                    why,
                ));
                tracing::info!(reason = why, "certificate request failed the signer's rules");
            }
            None => {
                let certificate = issue(ca, &pem, &usages, csr.spec.expiration_seconds).map_err(SyncError::Internal)?;
                updated.status.get_or_insert_default().certificate =
                    Some(k8s_openapi::ByteString(certificate.into_bytes()));
                tracing::info!(signer, "certificate issued");
            }
        }
        api.replace_status(&csr.name_any(), &PostParams::default(), &updated).await?;
        Ok(Action::await_change())
    };
    tracing::Instrument::instrument(work, span).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request_pem(cn: &str, orgs: &[&str], sans: &[&str]) -> String {
        let key = rcgen::KeyPair::generate().unwrap_or_else(|e| panic!("{e}"));
        let mut params = rcgen::CertificateParams::new(sans.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>())
            .unwrap_or_else(|e| panic!("{e}"));
        params.distinguished_name.push(rcgen::DnType::CommonName, cn);
        for o in orgs {
            params.distinguished_name.push(rcgen::DnType::OrganizationName, *o);
        }
        params.serialize_request(&key).and_then(|r| r.pem()).unwrap_or_else(|e| panic!("{e}"))
    }

    fn usages(list: &[&str]) -> Vec<String> {
        list.iter().map(|u| (*u).to_owned()).collect()
    }

    #[test]
    fn a_node_gets_a_serving_certificate_only_for_its_own_names_and_addresses() {
        use k8s_openapi::api::core::v1::{Node, NodeAddress, NodeStatus};
        let node = Node {
            status: Some(NodeStatus {
                addresses: Some(vec![
                    NodeAddress { type_: "InternalIP".into(), address: "127.0.0.1".into() },
                    NodeAddress { type_: "Hostname".into(), address: "n1".into() },
                ]),
                ..Default::default()
            }),
            ..Default::default()
        };
        let nodes = vec!["system:nodes".to_owned()];
        let ask = |cn: &str, sans: &[&str]| {
            read_request(request_pem(cn, &["system:nodes"], sans).as_bytes()).unwrap_or_default()
        };
        let own = ask("system:node:n1", &["n1", "127.0.0.1"]);
        assert_eq!(serving_refusal(&own, "system:node:n1", &nodes, Some(&node)), None);
        // Another node's name, asked by n1.
        let other = ask("system:node:n2", &["n2"]);
        let why = serving_refusal(&other, "system:node:n1", &nodes, Some(&node)).unwrap_or_default();
        assert!(why.contains("its own name only"), "{why}");
        // Its own name, an address that is not its Node's.
        let stray = ask("system:node:n1", &["n1", "10.0.0.9"]);
        let why = serving_refusal(&stray, "system:node:n1", &nodes, Some(&node)).unwrap_or_default();
        assert!(why.contains("10.0.0.9"), "{why}");
        let name = ask("system:node:n1", &["evil.example"]);
        assert!(serving_refusal(&name, "system:node:n1", &nodes, Some(&node)).is_some());
        // Not a node, or no Node yet.
        assert!(serving_refusal(&own, "system:node:n1", &[], Some(&node)).is_some());
        assert!(serving_refusal(&own, "system:node:n1", &nodes, None).is_some_and(|w| w.contains("no Node")));
    }

    #[test]
    fn kubelet_requests_are_judged_by_upstreams_rules() {
        let client = read_request(request_pem("system:node:n1", &["system:nodes"], &[]).as_bytes());
        let client = client.unwrap_or_default();
        assert_eq!(
            (client.common_name.as_str(), client.organizations.clone()),
            ("system:node:n1", vec!["system:nodes".to_owned()])
        );
        assert_eq!(kubelet_client_problem(&client, &usages(&["digital signature", "client auth"])), None);
        assert_eq!(
            kubelet_client_problem(&client, &usages(&["digital signature", "key encipherment", "client auth"])),
            None
        );
        assert!(kubelet_client_problem(&client, &usages(&["server auth"])).is_some());
        assert!(kubelet_serving_problem(&client, &usages(&["digital signature", "server auth"])).is_some(), "no names");
        let serving = read_request(request_pem("system:node:n1", &["system:nodes"], &["n1", "127.0.0.1"]).as_bytes());
        let serving = serving.unwrap_or_default();
        assert_eq!(serving.dns_names, ["n1"]);
        assert_eq!(serving.ip_addresses, [std::net::IpAddr::from([127, 0, 0, 1])]);
        assert_eq!(kubelet_serving_problem(&serving, &usages(&["digital signature", "server auth"])), None);
        assert!(kubelet_client_problem(&serving, &usages(&["digital signature", "client auth"])).is_some(), "names");
        let admin =
            read_request(request_pem("system:node:n1", &["system:masters"], &[]).as_bytes()).unwrap_or_default();
        assert_eq!(
            kubelet_client_problem(&admin, &usages(&["client auth", "digital signature"])),
            Some("subject organization is not system:nodes")
        );
    }

    #[test]
    fn the_lifetime_is_the_signers_or_the_shorter_asked_never_under_ten_minutes() {
        let year = Duration::from_secs(365 * 86_400);
        assert_eq!(lifetime(year, None), year);
        assert_eq!(lifetime(year, Some(3600)), Duration::from_secs(3600));
        assert_eq!(lifetime(year, Some(60)), Duration::from_secs(600));
        assert_eq!(lifetime(Duration::from_secs(1200), Some(7200)), Duration::from_secs(1200));
    }

    #[test]
    fn an_issued_certificate_carries_the_requests_subject_under_the_ca() {
        let ca_key = rcgen::KeyPair::generate().unwrap_or_else(|e| panic!("{e}"));
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap_or_else(|e| panic!("{e}"));
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca_params.distinguished_name.push(rcgen::DnType::CommonName, "podpass-ca");
        let ca_cert = ca_params.self_signed(&ca_key).unwrap_or_else(|e| panic!("{e}"));
        let ca = SigningCa { cert_pem: ca_cert.pem(), key: ca_key, duration: Duration::from_secs(365 * 86_400) };
        let pem = request_pem("system:node:n1", &["system:nodes"], &[]);
        let issued = issue(&ca, &pem, &usages(&["digital signature", "client auth"]), Some(3600))
            .unwrap_or_else(|e| panic!("{e}"));
        let (_, block) = x509_parser::pem::parse_x509_pem(issued.as_bytes()).unwrap_or_else(|e| panic!("{e}"));
        let (_, cert) = x509_parser::parse_x509_certificate(&block.contents).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(cert.subject().iter_common_name().next().and_then(|c| c.as_str().ok()), Some("system:node:n1"));
        assert_eq!(cert.issuer().iter_common_name().next().and_then(|c| c.as_str().ok()), Some("podpass-ca"));
        let validity = cert.validity();
        let life = validity.not_after.timestamp() - validity.not_before.timestamp();
        assert_eq!(life, 3600 + 300, "an hour, from five minutes back");
    }
}
