//! CertificateSigningRequest (certificates.k8s.io/v1, pkg/registry/certificates): a
//! request for a certificate from a named signer. The server records who asked
//! (`spec.username`, `uid`, `groups`, `extra`) whatever the body says; the spec never
//! changes after; `Approved`/`Denied` are written through `/approval` only (and exclude each
//! other), `Failed` and the certificate through `/status`; a certificate once issued is
//! never replaced, and an approval, denial or failure is never taken back. Validated and
//! printed (`kubectl get csr`) as upstream; `kubectl certificate approve|deny` work through
//! `/approval`.

use podpass_api::validation::FieldError;
use serde_json::{Value, json};

use super::super::table::{age_column, column, human_duration, name_column, name_middle_age, text};
use super::{BeginWrite, Names, Part, Printer, Reserved, Resource, Serves, Strategy, Subresource, invalid};
use crate::field::Field;
use crate::server::AppState;
use crate::server::status::StatusError;
use crate::store::BoxFuture;

/// The CSR strategy.
pub(crate) struct CertificateSigningRequest;

/// The resource.
pub(crate) const RESOURCE: Resource = Resource::stored(
    Names {
        group: "certificates.k8s.io",
        kind: "CertificateSigningRequest",
        plural: "certificatesigningrequests",
        singular: "certificatesigningrequest",
    },
    &CertificateSigningRequest,
    &super::types::TypeOf::<k8s_openapi::api::certificates::v1::CertificateSigningRequest>::NEW,
)
.cluster_scoped()
.with_short_names(&["csr"]);

/// The key usages a request may name (`allValidUsages`).
const USAGES: [&str; 23] = [
    "signing",
    "digital signature",
    "content commitment",
    "key encipherment",
    "key agreement",
    "data encipherment",
    "cert sign",
    "crl sign",
    "encipher only",
    "decipher only",
    "any",
    "server auth",
    "client auth",
    "code signing",
    "email protection",
    "s/mime",
    "ipsec end system",
    "ipsec tunnel",
    "ipsec user",
    "timestamping",
    "ocsp signing",
    "microsoft sgc",
    "netscape sgc",
];
/// The conditions only `True` may be said of, and that are never taken back.
const FINAL_CONDITIONS: [&str; 3] = ["Approved", "Denied", "Failed"];
/// The conditions `/approval` writes.
const APPROVAL: [&str; 2] = ["Approved", "Denied"];
/// The shortest certificate lifetime a request may ask for.
const MIN_EXPIRATION_SECONDS: i64 = 600;

/// The bytes of a base64 field (`spec.request`, `status.certificate`); `None` when absent.
fn bytes(object: &Value, path: &str) -> Option<Result<Vec<u8>, ()>> {
    let text = object.field(path).and_then(Value::as_str).filter(|s| !s.is_empty())?;
    Some(data_encoding::BASE64.decode(text.as_bytes()).map_err(|_| ()))
}

/// `certificates.ParseCSR`: one PEM block of type CERTIFICATE REQUEST whose signature holds.
fn request_problem(der_or_pem: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(der_or_pem);
    let Some(start) = text.find("-----BEGIN ") else {
        return Some("PEM block type must be CERTIFICATE REQUEST".into());
    };
    if !text[start..].starts_with("-----BEGIN CERTIFICATE REQUEST-----") {
        return Some("PEM block type must be CERTIFICATE REQUEST".into());
    }
    rcgen::CertificateSigningRequestParams::from_pem(&text[start..]).err().map(|e| e.to_string())
}

/// `validateCertificate`: PEM blocks of type CERTIFICATE, each an X.509 certificate.
fn certificate_problem(pem: &[u8]) -> Option<String> {
    let mut blocks = 0;
    for block in x509_parser::pem::Pem::iter_from_buffer(pem) {
        let Ok(block) = block else {
            return Some("must be a sequence of one or more PEM-encoded CERTIFICATE blocks".into());
        };
        if block.label != "CERTIFICATE" {
            return Some(format!("only CERTIFICATE PEM blocks are allowed, found {:?}", block.label));
        }
        if x509_parser::parse_x509_certificate(&block.contents).is_err() {
            return Some("invalid certificate content".into());
        }
        blocks += 1;
    }
    (blocks == 0).then(|| "must contain at least one CERTIFICATE PEM block".into())
}

fn conditions(object: &Value) -> Vec<Value> {
    object.field("/status/conditions").and_then(Value::as_array).cloned().unwrap_or_default()
}

fn condition_type(c: &Value) -> &str {
    c.get("type").and_then(Value::as_str).unwrap_or_default()
}

/// `ValidateCertificateSigningRequestCreate`'s field errors.
fn errors(object: &Value) -> Vec<String> {
    let mut errors = Vec::new();
    match bytes(object, "/spec/request") {
        None => errors.push(FieldError::required("spec.request", "").to_string()),
        Some(Err(())) => errors.push(FieldError::invalid_unshown("spec.request", "must be base64").to_string()),
        Some(Ok(request)) => {
            if let Some(problem) = request_problem(&request) {
                errors.push(FieldError::invalid_unshown("spec.request", problem).to_string());
            }
        }
    }
    match object.field("/spec/signerName").and_then(Value::as_str).unwrap_or_default() {
        "" => errors.push(FieldError::required("spec.signerName", "").to_string()),
        name if !name.contains('/') || name.starts_with('/') || name.ends_with('/') => errors.push(
            FieldError::invalid(
                "spec.signerName",
                name,
                "must be a fully qualified domain and path of the form 'example.com/signer-name'",
            )
            .to_string(),
        ),
        _ => {}
    }
    if let Some(seconds) = object.field("/spec/expirationSeconds").and_then(Value::as_i64)
        && seconds < MIN_EXPIRATION_SECONDS
    {
        errors.push(format!(
            "spec.expirationSeconds: Invalid value: {seconds}: may not specify a duration less than 600 seconds (10 minutes)"
        ));
    }
    let usages: Vec<&str> = object
        .field("/spec/usages")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    if usages.is_empty() {
        errors.push(FieldError::required("spec.usages", "usages must be provided").to_string());
    }
    let mut seen = std::collections::HashSet::new();
    for (i, usage) in usages.iter().enumerate() {
        let path = format!("spec.usages[{i}]");
        if !USAGES.contains(usage) {
            errors.push(FieldError::not_supported(&path, usage, &USAGES).to_string());
        } else if !seen.insert(*usage) {
            errors.push(FieldError::duplicate(&path, usage).to_string());
        }
    }
    let mut types = std::collections::HashSet::new();
    for (i, c) in conditions(object).iter().enumerate() {
        let kind = condition_type(c);
        let status = c.get("status").and_then(Value::as_str).unwrap_or_default();
        let path = format!("status.conditions[{i}]");
        if kind.is_empty() {
            errors.push(FieldError::required(&format!("{path}.type"), "").to_string());
        } else if !types.insert(kind.to_owned()) {
            errors.push(FieldError::duplicate(&format!("{path}.type"), kind).to_string());
        }
        if FINAL_CONDITIONS.contains(&kind) && status != "True" {
            errors.push(FieldError::not_supported(&format!("{path}.status"), status, &["True"]).to_string());
        } else if !["True", "False", "Unknown"].contains(&status) {
            errors.push(
                FieldError::not_supported(&format!("{path}.status"), status, &["False", "True", "Unknown"]).to_string(),
            );
        }
    }
    if types.contains("Approved") && types.contains("Denied") {
        errors.push(
            FieldError::invalid_unshown("status.conditions", "Approved and Denied conditions are mutually exclusive")
                .to_string(),
        );
    }
    if let Some(certificate) = bytes(object, "/status/certificate") {
        let problem = match certificate {
            Err(()) => Some("must be base64".to_owned()),
            Ok(pem) => certificate_problem(&pem),
        };
        if let Some(problem) = problem {
            errors.push(FieldError::invalid_unshown("status.certificate", problem).to_string());
        }
    }
    errors
}

/// `validateCertificateSigningRequestUpdate`'s additions: an issued certificate stays, and
/// no approval, denial or failure is taken back.
fn update_errors(object: &Value, old: &Value) -> Vec<String> {
    let mut errors = errors(object);
    let old_certificate = object_text(old, "/status/certificate");
    if !old_certificate.is_empty() && object_text(object, "/status/certificate") != old_certificate {
        errors.push(
            FieldError::forbidden("status.certificate", "updates may not modify existing certificate content")
                .to_string(),
        );
    }
    let now: Vec<String> = conditions(object).iter().map(|c| condition_type(c).to_owned()).collect();
    for c in conditions(old) {
        let kind = condition_type(&c);
        if FINAL_CONDITIONS.contains(&kind) && !now.iter().any(|t| t == kind) {
            errors.push(
                FieldError::forbidden(
                    "status.conditions",
                    format!("updates may not remove a condition of type {kind:?}"),
                )
                .to_string(),
            );
        }
    }
    errors
}

fn object_text<'a>(object: &'a Value, path: &str) -> &'a str {
    object.field(path).and_then(Value::as_str).unwrap_or_default()
}

/// `populateConditionTimestamps`: a condition without times gets now; one that changed
/// status a new transition time.
fn stamp_conditions(object: &mut Value, old: &Value) {
    let now = crate::time::format_rfc3339(podpass_token::now_unix());
    let before = conditions(old);
    let Some(list) = object.pointer_mut("/status/conditions").and_then(Value::as_array_mut) else { return };
    for c in list {
        let same = before.iter().find(|b| condition_type(b) == condition_type(c) && b.get("status") == c.get("status"));
        if c.get("lastUpdateTime").is_none_or(Value::is_null) {
            c["lastUpdateTime"] = json!(now);
        }
        if c.get("lastTransitionTime").is_none_or(Value::is_null) {
            let since = same.and_then(|b| b.get("lastTransitionTime")).cloned().unwrap_or_else(|| json!(now));
            c["lastTransitionTime"] = since;
        }
    }
}

/// `extractCSRStatus`: Denied, else Approved, else Pending; then Failed and Issued.
fn condition_column(object: &Value) -> String {
    let has = |t: &str| conditions(object).iter().any(|c| condition_type(c) == t);
    let mut status = if has("Denied") {
        "Denied"
    } else if has("Approved") {
        "Approved"
    } else {
        "Pending"
    }
    .to_owned();
    if has("Failed") {
        status.push_str(",Failed");
    }
    if !object_text(object, "/status/certificate").is_empty() {
        status.push_str(",Issued");
    }
    status
}

impl Strategy for CertificateSigningRequest {
    /// `ValidateCertificateRequestName` takes any name ("we don't care what you call your
    /// certificate requests": the kubelet's are base64url, capitals included); only what
    /// cannot be a path segment is refused, as the registry's key function does.
    fn name_problem(&self, name: &str) -> Option<String> {
        super::rbac::rbac_name_problem(name)
    }

    fn prepare_for_create(&self, object: &mut Value) {
        if let Some(obj) = object.as_object_mut() {
            obj.remove("status");
        }
    }

    /// `csrStrategy.PrepareForUpdate`: only metadata changes through the main resource.
    fn prepare_for_update(&self, object: &mut Value, old: &Value) {
        for part in ["spec", "status"] {
            match old.get(part) {
                Some(v) => object[part] = v.clone(),
                None => {
                    if let Some(obj) = object.as_object_mut() {
                        obj.remove(part);
                    }
                }
            }
        }
    }

    fn prepare_for_part_update(&self, part: Part, object: &mut Value, old: &Value) {
        let take = |from: &Value, wanted: &dyn Fn(&str) -> bool| -> Vec<Value> {
            conditions(from).into_iter().filter(|c| wanted(condition_type(c))).collect()
        };
        let merged = match part {
            // csrStatusStrategy: approvals stay as they were.
            Part::Status => {
                let mut list = take(object, &|t| !APPROVAL.contains(&t));
                list.extend(take(old, &|t| APPROVAL.contains(&t)));
                list
            }
            // csrApprovalStrategy: only the approvals change; the certificate stays.
            Part::Approval => {
                let mut list = take(old, &|t| !APPROVAL.contains(&t));
                list.extend(take(object, &|t| APPROVAL.contains(&t)));
                match old.pointer("/status/certificate") {
                    Some(c) => object["status"]["certificate"] = c.clone(),
                    None => {
                        if let Some(status) = object.get_mut("status").and_then(Value::as_object_mut) {
                            status.remove("certificate");
                        }
                    }
                }
                list
            }
            _ => return,
        };
        if !object["status"].is_object() {
            object["status"] = json!({});
        }
        object["status"]["conditions"] = json!(merged);
        stamp_conditions(object, old);
    }

    fn validate(&self, name: &str, object: &Value) -> Result<(), StatusError> {
        invalid("CertificateSigningRequest", name, errors(object))
    }

    fn validate_update(&self, name: &str, object: &Value, old: &Value) -> Result<(), StatusError> {
        invalid("CertificateSigningRequest", name, update_errors(object, old))
    }

    fn subresources(&self) -> &'static [Subresource] {
        const SUBRESOURCES: [Subresource; 2] = [
            super::status("CertificateSigningRequest"),
            Subresource { name: "approval", kind: "CertificateSigningRequest", serves: Serves::Part(Part::Approval) },
        ];
        &SUBRESOURCES
    }

    fn selectable_fields(&self) -> &'static [&'static str] {
        &["spec.signerName"]
    }

    /// The requester, as the server authenticated it: what signers and approvers trust.
    fn begin_write<'a>(
        &'a self,
        _state: &'a AppState,
        write: BeginWrite<'a>,
        object: &'a mut Value,
    ) -> BoxFuture<'a, Result<Reserved, StatusError>> {
        if write.old.is_none() {
            if !object["spec"].is_object() {
                object["spec"] = json!({});
            }
            let user = write.user;
            object["spec"]["username"] = json!(user.name);
            object["spec"]["uid"] = json!(user.uid);
            object["spec"]["groups"] = json!(user.groups);
            if user.extra.is_empty() {
                if let Some(spec) = object["spec"].as_object_mut() {
                    spec.remove("extra");
                }
            } else {
                object["spec"]["extra"] = json!(user.extra);
            }
        }
        Box::pin(std::future::ready(Ok(Reserved::default())))
    }

    fn printer(&self) -> Option<Printer> {
        Some((
            vec![
                name_column(),
                age_column(),
                column("SignerName", "string", "", "The signer of the certificate", 0),
                column("Requestor", "string", "", "The user that asked for the certificate", 0),
                column("RequestedDuration", "string", "", "The lifetime asked for", 0),
                column("Condition", "string", "", "Pending, Approved, Denied; Failed, Issued", 0),
            ],
            |o, now| {
                let duration = o
                    .field("/spec/expirationSeconds")
                    .and_then(Value::as_i64)
                    .map_or_else(|| "<none>".to_owned(), human_duration);
                let mut cells = name_middle_age(o, Vec::new(), now);
                cells.extend([
                    json!(text(o, "/spec/signerName")),
                    json!(text(o, "/spec/username")),
                    json!(duration),
                    json!(condition_column(o)),
                ]);
                cells
            },
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn csr_pem() -> String {
        let key = rcgen::KeyPair::generate().unwrap_or_else(|e| panic!("{e}"));
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap_or_else(|e| panic!("{e}"));
        params.distinguished_name.push(rcgen::DnType::CommonName, "system:node:n1");
        params.distinguished_name.push(rcgen::DnType::OrganizationName, "system:nodes");
        params.serialize_request(&key).and_then(|r| r.pem()).unwrap_or_else(|e| panic!("{e}"))
    }

    fn csr(usages: &[&str]) -> Value {
        json!({"spec": {"request": data_encoding::BASE64.encode(csr_pem().as_bytes()),
                        "signerName": "kubernetes.io/kube-apiserver-client-kubelet", "usages": usages}})
    }

    #[test]
    fn any_name_that_is_a_path_segment_is_taken() {
        let s = CertificateSigningRequest;
        assert_eq!(s.name_problem("node-csr-VgD4xBj8ib5120-AcJAdievQQ_xBYC6TMbpTY827zbA0"), None);
        assert_eq!(s.name_problem("csr-Ab.9"), None);
        assert_eq!(s.name_problem("a/b").as_deref(), Some("may not contain '/'"));
        assert_eq!(s.name_problem("..").as_deref(), Some("may not be '..'"));
    }

    #[test]
    fn a_request_names_a_signer_known_usages_and_a_real_csr() {
        assert!(errors(&csr(&["digital signature", "client auth"])).is_empty(), "{:?}", errors(&csr(&["client auth"])));
        let mut bad = csr(&["client auth", "client auth", "root"]);
        bad["spec"]["signerName"] = json!("kubelet");
        bad["spec"]["expirationSeconds"] = json!(599);
        bad["spec"]["request"] =
            json!(data_encoding::BASE64.encode(b"-----BEGIN CERTIFICATE-----\nAA==\n-----END CERTIFICATE-----\n"));
        let found = errors(&bad);
        for expected in [
            "spec.request: Invalid value: PEM block type must be CERTIFICATE REQUEST",
            "spec.signerName: Invalid value: \"kubelet\": must be a fully qualified domain and path of the form 'example.com/signer-name'",
            "spec.expirationSeconds: Invalid value: 599: may not specify a duration less than 600 seconds (10 minutes)",
            "spec.usages[1]: Duplicate value: \"client auth\"",
        ] {
            assert!(found.iter().any(|e| e == expected), "{expected:?} not in {found:?}");
        }
        assert!(found.iter().any(|e| e.starts_with("spec.usages[2]: Unsupported value: \"root\"")), "{found:?}");
        assert_eq!(errors(&json!({"spec": {}})).len(), 3, "request, signer and usages are required");
    }

    #[test]
    fn approvals_are_final_exclusive_and_only_true() {
        let mut both = csr(&["client auth"]);
        both["status"] =
            json!({"conditions": [{"type": "Approved", "status": "True"}, {"type": "Denied", "status": "True"}]});
        assert!(errors(&both).iter().any(|e| e.contains("Approved and Denied conditions are mutually exclusive")));
        let mut unsure = csr(&["client auth"]);
        unsure["status"] = json!({"conditions": [{"type": "Approved", "status": "False"}]});
        assert!(
            errors(&unsure).iter().any(|e| e.starts_with("status.conditions[0].status: Unsupported value: \"False\""))
        );
        let mut approved = csr(&["client auth"]);
        approved["status"] = json!({"conditions": [{"type": "Approved", "status": "True"}]});
        let taken_back = csr(&["client auth"]);
        assert_eq!(
            update_errors(&taken_back, &approved),
            [r#"status.conditions: Forbidden: updates may not remove a condition of type "Approved""#]
        );
    }

    #[test]
    fn status_keeps_the_approval_and_approval_keeps_the_certificate() {
        let mut old = csr(&["client auth"]);
        old["status"] = json!({"conditions": [{"type": "Approved", "status": "True", "reason": "AutoApproved"}],
                               "certificate": "Y2VydA=="});
        // /status cannot deny what was approved
        let mut through_status = old.clone();
        through_status["status"]["conditions"] =
            json!([{"type": "Denied", "status": "True"}, {"type": "Failed", "status": "True"}]);
        CertificateSigningRequest.prepare_for_part_update(Part::Status, &mut through_status, &old);
        let kinds: Vec<&str> =
            through_status["status"]["conditions"].as_array().into_iter().flatten().map(condition_type).collect();
        assert_eq!(kinds, ["Failed", "Approved"]);
        // /approval cannot issue a certificate
        let mut through_approval = old.clone();
        through_approval["status"]["certificate"] = json!("Zm9yZ2Vk");
        CertificateSigningRequest.prepare_for_part_update(Part::Approval, &mut through_approval, &old);
        assert_eq!(through_approval["status"]["certificate"], "Y2VydA==");
        assert!(through_approval["status"]["conditions"][0]["lastTransitionTime"].is_string());
        assert_eq!(condition_column(&through_approval), "Approved,Issued");
        assert_eq!(condition_column(&csr(&[])), "Pending");
    }
}
