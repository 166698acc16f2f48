//! Replay defence: a pod's token that names a node is accepted only from that node. The
//! request proves a node identity with a TLS client certificate of the node, verified
//! against `--client-ca-file` (`CN=system:node:<name>`, `O=system:nodes`, as kubelet client
//! certificates are). `require` refuses node-claiming tokens without a proof, `prefer`
//! accepts them (and says so in the audit line) but refuses a proof of another node,
//! `off` ignores node claims.
//!
//! Why a certificate and never a token: the proof must be a credential only the node
//! holds. A service-account token bound to a Node is not one: anyone who may create a
//! token for their own service account may bind it to any Node (kube-apiserver allows
//! `kubectl create token app --bound-object-kind Node --bound-object-name node-1`), so a
//! tenant could present one beside a stolen pod token, or beside forged annotations. The
//! node's own API credential would qualify but must never be handed to a third party
//! (registry-auth could then act as the node against the API server); a TLS client
//! certificate proves possession of the node's key without revealing it.

use podpass_token::ObjectRef;
use thiserror::Error;

/// The `--node-binding` mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NodeBinding {
    /// A token naming a node needs a proof from that node.
    Require,
    /// A proof, when given, must name the token's node.
    #[default]
    Prefer,
    /// Node claims are not checked.
    Off,
}

impl std::str::FromStr for NodeBinding {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "require" => Ok(Self::Require),
            "prefer" => Ok(Self::Prefer),
            "off" => Ok(Self::Off),
            other => Err(format!("{other:?} is not one of require, prefer, off")),
        }
    }
}

/// The node identity a request proved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeProof {
    /// None.
    None,
    /// A client certificate for this node name.
    Certificate(String),
}

impl NodeProof {
    /// Label for audit lines: `none` or `certificate:<node>`.
    pub fn audit_label(&self) -> String {
        match self {
            Self::None => "none".into(),
            Self::Certificate(node) => format!("certificate:{node}"),
        }
    }
}

/// What the check concluded, for the audit line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeCheck {
    /// The token names no node.
    NotBound,
    /// Checking is off.
    Skipped,
    /// The request proved the token's node.
    Proven,
    /// No proof was given (`prefer`).
    Unproven,
}

impl NodeCheck {
    /// Label for audit lines.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NotBound => "not-bound",
            Self::Skipped => "skipped",
            Self::Proven => "proven",
            Self::Unproven => "unproven",
        }
    }
}

/// The token names a node the request did not prove.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum NodeBindingError {
    /// `require` and no proof.
    #[error("token is bound to node {node:?}; present that node's client certificate")]
    Unproven {
        /// The token's node.
        node: String,
    },
    /// The proof names another node (or the same name with another UID).
    #[error("token is bound to node {claimed:?} but the request proves node {proven:?}")]
    Mismatch {
        /// The token's node.
        claimed: String,
        /// The node proven.
        proven: String,
    },
}

/// Checks `claimed` (the token's node) against `proof` under `mode`.
pub fn check(mode: NodeBinding, claimed: Option<&ObjectRef>, proof: &NodeProof) -> Result<NodeCheck, NodeBindingError> {
    if mode == NodeBinding::Off {
        return Ok(NodeCheck::Skipped);
    }
    let Some(claimed) = claimed.filter(|c| !c.name.is_empty()) else { return Ok(NodeCheck::NotBound) };
    let name = match proof {
        NodeProof::None if mode == NodeBinding::Require => {
            return Err(NodeBindingError::Unproven { node: claimed.name.clone() });
        }
        NodeProof::None => return Ok(NodeCheck::Unproven),
        NodeProof::Certificate(name) => name,
    };
    if *name != claimed.name {
        return Err(NodeBindingError::Mismatch { claimed: claimed.name.clone(), proven: name.clone() });
    }
    Ok(NodeCheck::Proven)
}

/// The node name a client certificate (DER, verified by the TLS layer) stands for: subject
/// `CN=system:node:<name>` with `O=system:nodes`, or `None`.
pub fn node_from_certificate(der: &[u8]) -> Option<String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let subject = cert.subject();
    let in_group = subject.iter_organization().any(|o| o.as_str().is_ok_and(|o| o == "system:nodes"));
    let mut names = subject.iter_common_name().filter_map(|cn| cn.as_str().ok());
    let name = names.next()?.strip_prefix("system:node:")?;
    // one CN only: two would make the identity ambiguous
    (in_group && names.next().is_none() && !name.is_empty()).then(|| name.to_owned())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn node(name: &str, uid: &str) -> ObjectRef {
        ObjectRef::new(name, uid)
    }

    #[test]
    fn each_mode_decides_as_documented() {
        let n1 = node("n1", "u1");
        let proof_n1 = NodeProof::Certificate("n1".into());
        let proof_n2 = NodeProof::Certificate("n2".into());
        use NodeBinding::*;
        assert_eq!(check(Require, Some(&n1), &proof_n1), Ok(NodeCheck::Proven));
        assert!(matches!(check(Require, Some(&n1), &NodeProof::None), Err(NodeBindingError::Unproven { .. })));
        assert!(matches!(check(Require, Some(&n1), &proof_n2), Err(NodeBindingError::Mismatch { .. })));
        assert_eq!(check(Prefer, Some(&n1), &NodeProof::None), Ok(NodeCheck::Unproven));
        assert!(matches!(check(Prefer, Some(&n1), &proof_n2), Err(NodeBindingError::Mismatch { .. })));
        assert_eq!(check(Require, None, &NodeProof::None), Ok(NodeCheck::NotBound));
        assert_eq!(check(Off, Some(&n1), &proof_n2), Ok(NodeCheck::Skipped));
        let err = check(Require, Some(&n1), &proof_n2).unwrap_err();
        assert_eq!(err.to_string(), r#"token is bound to node "n1" but the request proves node "n2""#);
        assert_eq!(NodeProof::None.audit_label(), "none");
        assert_eq!(proof_n1.audit_label(), "certificate:n1");
    }

    fn cert(cn: &str, org: Option<&str>) -> Vec<u8> {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::default();
        params.distinguished_name.push(rcgen::DnType::CommonName, cn);
        if let Some(o) = org {
            params.distinguished_name.push(rcgen::DnType::OrganizationName, o);
        }
        params.self_signed(&key).unwrap().der().to_vec()
    }

    #[test]
    fn node_certificates_are_kubelet_shaped() {
        assert_eq!(node_from_certificate(&cert("system:node:n1", Some("system:nodes"))), Some("n1".into()));
        assert_eq!(node_from_certificate(&cert("system:node:n1", None)), None);
        assert_eq!(node_from_certificate(&cert("n1", Some("system:nodes"))), None);
        assert_eq!(node_from_certificate(&cert("system:node:", Some("system:nodes"))), None);
        assert_eq!(node_from_certificate(b"not der"), None);
    }
}
