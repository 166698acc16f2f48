//! The certificate admission plugins (plugin/pkg/admission/certificates):
//! CertificateApproval (an approval or denial through `/approval` needs `approve` on the
//! request's signer), CertificateSigning (a certificate written through `/status` needs
//! `sign` on it), and CertificateSubjectRestriction (no `system:masters` certificate from
//! the `kubernetes.io/kube-apiserver-client` signer). A signer is authorized by its name or
//! by its domain's wildcard (`example.com/*`), as upstream's `IsAuthorizedForSignerName`.

use serde_json::Value;

use crate::field::Field;
use crate::server::AppState;
use crate::server::authn::User;
use crate::server::authz::{self, Attributes, AuthorizationDecision};
use crate::server::rest::kinds::Part;
use crate::server::status::StatusError;

/// The signer whose certificates authenticate to the API server as their subject.
const APISERVER_CLIENT: &str = "kubernetes.io/kube-apiserver-client";

fn signer_of(object: &Value) -> &str {
    object.field("/spec/signerName").and_then(Value::as_str).unwrap_or_default()
}

fn approvals(object: &Value) -> Vec<Value> {
    object
        .field("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|c| matches!(c.get("type").and_then(Value::as_str), Some("Approved" | "Denied")))
        .cloned()
        .collect()
}

/// `IsAuthorizedForSignerName`: `verb` on `signers/<name>`, or on `signers/<domain>/*`.
async fn authorized_for_signer(state: &AppState, user: &User, verb: &str, signer: &str) -> bool {
    let group = "certificates.k8s.io";
    let mut names = vec![signer.to_owned()];
    if let Some((domain, _)) = signer.split_once('/') {
        names.push(format!("{domain}/*"));
    }
    for name in names {
        let attrs = Attributes::resource(user, verb, group, "signers", "", &name);
        if let Ok(AuthorizationDecision::Allow(_)) =
            authz::authorize(state.authz(), &state.authorization_modes, &attrs).await
        {
            return true;
        }
    }
    false
}

/// A write of a request through `part` (`/approval`, `/status`), `old` being what it replaces.
pub(super) async fn admit_part(
    state: &AppState,
    user: &User,
    part: Part,
    object: &Value,
    old: &Value,
) -> Result<(), StatusError> {
    let signer = signer_of(old);
    // Only an approval (CertificateApproval) or a certificate (CertificateSigning) that
    // changes needs the signer's verb.
    let verb = match part {
        Part::Approval if approvals(object) != approvals(old) => "approve",
        Part::Status if object.field("/status/certificate") != old.field("/status/certificate") => "sign",
        _ => return Ok(()),
    };
    if !authorized_for_signer(state, user, verb, signer).await {
        return Err(StatusError::forbidden_raw(format!(
            "certificatesigningrequests.certificates.k8s.io {:?} is forbidden: user not permitted to {verb} requests with signerName {signer:?}",
            old.field("/metadata/name").and_then(Value::as_str).unwrap_or_default()
        )));
    }
    Ok(())
}

/// CertificateSubjectRestriction: a new request to the API server's client signer may not
/// ask for `system:masters`.
pub(super) fn admit_create(name: &str, object: &Value) -> Result<(), StatusError> {
    if signer_of(object) != APISERVER_CLIENT {
        return Ok(());
    }
    let pem = object
        .field("/spec/request")
        .and_then(Value::as_str)
        .and_then(|b| data_encoding::BASE64.decode(b.as_bytes()).ok())
        .unwrap_or_default();
    let masters = organizations_name_masters(&pem);
    if masters {
        return Err(StatusError::forbidden_raw(format!(
            "certificatesigningrequests.certificates.k8s.io {name:?} is forbidden: use of {APISERVER_CLIENT} signer with system:masters group is not allowed"
        )));
    }
    Ok(())
}

/// Whether any subject organization of a PEM request is `system:masters` (each one
/// read: a request may name several).
fn organizations_name_masters(pem: &[u8]) -> bool {
    use x509_parser::prelude::{FromDer, X509CertificationRequest};
    let Ok((_, block)) = x509_parser::pem::parse_x509_pem(pem) else { return false };
    let Ok((_, csr)) = X509CertificationRequest::from_der(&block.contents) else { return false };
    csr.certification_request_info.subject.iter_organization().any(|o| o.as_str().ok() == Some("system:masters"))
}
