//! Bound-object lookups for token validation, answered from the store as upstream's
//! `NewGetterFromClient` answers them: from the cache when the object is there (informer
//! listers upstream), else with a consistent read (a live GET), so an object created a
//! moment ago is found.

use crate::field::Field;
use podpass_token::{BoundObject, BoundObjectLookup, LookupError};
use serde_json::Value;

use crate::store::{ObjectKey, ReadConsistency, Store, StoreError};
use crate::time::parse_rfc3339;

/// Reads service accounts, pods, secrets and nodes for the token validator.
pub struct StoreLookup<'a> {
    /// The store.
    pub store: &'a dyn Store,
}

fn bound(object: &Value) -> BoundObject {
    BoundObject {
        uid: object.field("/metadata/uid").and_then(Value::as_str).unwrap_or_default().to_owned(),
        deletion_timestamp: object.field("/metadata/deletionTimestamp").and_then(Value::as_str).and_then(parse_rfc3339),
    }
}

impl StoreLookup<'_> {
    async fn get(&self, key: ObjectKey) -> Result<BoundObject, LookupError> {
        let found = match self.store.get_with(&key, ReadConsistency::Any).await {
            Err(StoreError::NotFound { .. }) => self.store.get_with(&key, ReadConsistency::Consistent).await,
            other => other,
        };
        match found {
            Ok(stored) => Ok(bound(&stored.object)),
            Err(StoreError::NotFound { .. }) => {
                Err(LookupError::NotFound { resource: resource_name(&key.resource), name: key.name })
            }
            Err(e) => Err(LookupError::Other(e.to_string())),
        }
    }
}

fn resource_name(resource: &str) -> &'static str {
    match resource {
        "serviceaccounts" => "serviceaccounts",
        "pods" => "pods",
        "secrets" => "secrets",
        _ => "nodes",
    }
}

impl BoundObjectLookup for StoreLookup<'_> {
    async fn service_account(&self, namespace: &str, name: &str) -> Result<BoundObject, LookupError> {
        self.get(ObjectKey::namespaced("serviceaccounts", namespace, name)).await
    }
    async fn secret(&self, namespace: &str, name: &str) -> Result<BoundObject, LookupError> {
        self.get(ObjectKey::namespaced("secrets", namespace, name)).await
    }
    async fn pod(&self, namespace: &str, name: &str) -> Result<BoundObject, LookupError> {
        self.get(ObjectKey::namespaced("pods", namespace, name)).await
    }
    async fn node(&self, name: &str) -> Result<BoundObject, LookupError> {
        self.get(ObjectKey::cluster("nodes", name)).await
    }
}
