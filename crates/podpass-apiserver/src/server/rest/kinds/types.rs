//! The k8s-openapi type of each kind served, for what needs the type rather than the JSON:
//! field validation (decoding) and the OpenAPI documents (schemas).

use k8s_openapi::api::{authentication, authorization, coordination, core, discovery, events, rbac};

/// What a kind's type must offer.
pub trait KindType: serde::de::DeserializeOwned + schemars::JsonSchema {}

impl<T: serde::de::DeserializeOwned + schemars::JsonSchema> KindType for T {}

/// Something done with a kind's type.
pub trait KindTypeVisitor {
    /// The result.
    type Output;
    /// Does it with `T`.
    fn visit<T: KindType>(self) -> Self::Output;
}

/// Calls `visitor` with the type of `kind` in `group` (version v1 for all served kinds);
/// `None` when no kind of that name is served.
pub fn with_kind_type<V: KindTypeVisitor>(group: &str, kind: &str, visitor: V) -> Option<V::Output> {
    Some(match (group, kind) {
        ("", "Namespace") => visitor.visit::<core::v1::Namespace>(),
        ("", "ServiceAccount") => visitor.visit::<core::v1::ServiceAccount>(),
        ("", "Pod") => visitor.visit::<core::v1::Pod>(),
        ("", "Node") => visitor.visit::<core::v1::Node>(),
        ("", "Secret") => visitor.visit::<core::v1::Secret>(),
        ("", "ConfigMap") => visitor.visit::<core::v1::ConfigMap>(),
        ("", "ResourceQuota") => visitor.visit::<core::v1::ResourceQuota>(),
        ("", "LimitRange") => visitor.visit::<core::v1::LimitRange>(),
        ("", "Event") => visitor.visit::<core::v1::Event>(),
        ("", "Binding") => visitor.visit::<core::v1::Binding>(),
        ("", "Service") => visitor.visit::<core::v1::Service>(),
        ("", "Endpoints") => visitor.visit::<core::v1::Endpoints>(),
        ("discovery.k8s.io", "EndpointSlice") => visitor.visit::<discovery::v1::EndpointSlice>(),
        ("events.k8s.io", "Event") => visitor.visit::<events::v1::Event>(),
        ("coordination.k8s.io", "Lease") => visitor.visit::<coordination::v1::Lease>(),
        (super::revoked_token::GROUP, "RevokedToken") => visitor.visit::<super::revoked_token::RevokedToken>(),
        ("rbac.authorization.k8s.io", "Role") => visitor.visit::<rbac::v1::Role>(),
        ("rbac.authorization.k8s.io", "RoleBinding") => visitor.visit::<rbac::v1::RoleBinding>(),
        ("rbac.authorization.k8s.io", "ClusterRole") => visitor.visit::<rbac::v1::ClusterRole>(),
        ("rbac.authorization.k8s.io", "ClusterRoleBinding") => visitor.visit::<rbac::v1::ClusterRoleBinding>(),
        ("authentication.k8s.io", "TokenRequest") => visitor.visit::<authentication::v1::TokenRequest>(),
        ("authentication.k8s.io", "TokenReview") => visitor.visit::<authentication::v1::TokenReview>(),
        ("authentication.k8s.io", "SelfSubjectReview") => visitor.visit::<authentication::v1::SelfSubjectReview>(),
        ("authorization.k8s.io", "SubjectAccessReview") => visitor.visit::<authorization::v1::SubjectAccessReview>(),
        ("authorization.k8s.io", "SelfSubjectAccessReview") => {
            visitor.visit::<authorization::v1::SelfSubjectAccessReview>()
        }
        ("authorization.k8s.io", "LocalSubjectAccessReview") => {
            visitor.visit::<authorization::v1::LocalSubjectAccessReview>()
        }
        ("authorization.k8s.io", "SelfSubjectRulesReview") => {
            visitor.visit::<authorization::v1::SelfSubjectRulesReview>()
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Named;

    impl KindTypeVisitor for Named {
        type Output = String;
        fn visit<T: KindType>(self) -> String {
            T::schema_name().into_owned()
        }
    }

    /// Field validation and the OpenAPI documents cover every kind a client may send.
    #[test]
    fn every_served_kind_has_its_type() {
        for res in crate::server::rest::resources::RESOURCES.iter() {
            let name = with_kind_type(res.group, res.kind, Named);
            let name = name.unwrap_or_else(|| panic!("no type for {} {}", res.group, res.kind));
            assert!(name.ends_with(&format!(".{}", res.kind)), "{name} for {} {}", res.group, res.kind);
        }
    }
}
