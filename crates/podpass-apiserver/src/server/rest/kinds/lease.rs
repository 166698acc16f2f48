//! Lease (pkg/registry/coordination/lease): its table. Nodes' writes of their own lease
//! are NodeRestriction's (see `admission`).

use serde_json::json;

use super::super::table::{age_column, column, name_column, name_middle_age, or_none, text};
use super::{Printer, Strategy};

/// The lease strategy.
pub(crate) struct Lease;

/// Registered in the resource table.
pub(crate) static LEASE: Lease = Lease;

impl Strategy for Lease {
    fn printer(&self) -> Option<Printer> {
        Some((
            vec![name_column(), column("Holder", "string", "", "The holder of the lease", 0), age_column()],
            |o, now| name_middle_age(o, vec![json!(or_none(text(o, "/spec/holderIdentity")))], now),
        ))
    }
}
