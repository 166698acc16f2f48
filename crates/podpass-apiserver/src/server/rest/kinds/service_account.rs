//! ServiceAccount (pkg/registry/core/serviceaccount): its table. Its `token`
//! subresource (TokenRequest) is served by `rest/token.rs`.

use serde_json::json;

use super::super::table::{age_column, column, count, name_column, name_middle_age};
use super::{Printer, Strategy};

/// The service account strategy.
pub(crate) struct ServiceAccount;

/// Registered in the resource table.
pub(crate) static SERVICE_ACCOUNT: ServiceAccount = ServiceAccount;

impl Strategy for ServiceAccount {
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
