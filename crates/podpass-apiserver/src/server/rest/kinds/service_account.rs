//! ServiceAccount (pkg/registry/core/serviceaccount): its table. Its `token`
//! subresource (TokenRequest) is served by `rest/token.rs`.

use serde_json::json;

use super::super::table::{age_column, column, count, name_column, name_middle_age};
use super::{Printer, Strategy};

/// The service account strategy.
pub(crate) struct ServiceAccount;

/// Registered in the resource table.
pub(crate) static SERVICE_ACCOUNT: ServiceAccount = ServiceAccount;

/// The resource.
pub(crate) const RESOURCE: super::Resource = super::Resource::stored(
    super::Names { group: "", kind: "ServiceAccount", plural: "serviceaccounts", singular: "serviceaccount" },
    &SERVICE_ACCOUNT,
    &super::types::TypeOf::<k8s_openapi::api::core::v1::ServiceAccount>::NEW,
)
.with_short_names(&["sa"]);

/// The body of `serviceaccounts/token`.
pub(crate) const TOKEN_REQUEST: super::Body = super::Body {
    group: "authentication.k8s.io",
    kind: "TokenRequest",
    typed: &super::types::TypeOf::<k8s_openapi::api::authentication::v1::TokenRequest>::NEW,
};

impl Strategy for ServiceAccount {
    /// Upstream's storage sets `ReturnDeletedObject`.
    fn returns_deleted_object(&self) -> bool {
        true
    }

    fn subresources(&self) -> &'static [super::Subresource] {
        const SUBRESOURCES: [super::Subresource; 1] =
            [super::Subresource { name: "token", kind: "TokenRequest", serves: super::Serves::Token }];
        &SUBRESOURCES
    }

    fn printer(&self) -> Option<Printer> {
        Some((
            vec![
                name_column(),
                column(
                    "Secrets",
                    "string",
                    "",
                    "Secrets is a list of the secrets in the same namespace that pods running using this ServiceAccount are allowed to use.",
                    0,
                ),
                age_column(),
            ],
            |o, now| name_middle_age(o, vec![json!(count(o, "/secrets"))], now),
        ))
    }
}
