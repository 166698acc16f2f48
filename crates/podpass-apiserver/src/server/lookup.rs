//! Bound-object lookups for token validation, answered from the store as upstream's
//! `NewGetterFromClient` answers them: from the cache when the object is there (informer
//! listers upstream), else with a consistent read (a live GET), so an object created a
//! moment ago is found.

use crate::field::Field;
use podpass_token::{
    BoundObject, BoundObjectLookup, LegacySecret, LegacyServiceAccount, LegacyTokenLookup, LookupError,
};
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
        self.object(key).await.map(|s| bound(&s.object))
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

impl StoreLookup<'_> {
    /// The object at `key`: the cache first, the store when the cache has not seen it.
    async fn object(&self, key: ObjectKey) -> Result<std::sync::Arc<crate::store::Stored>, LookupError> {
        let found = match self.store.get_with(&key, ReadConsistency::Any).await {
            Err(StoreError::NotFound { .. }) => self.store.get_with(&key, ReadConsistency::Consistent).await,
            other => other,
        };
        match found {
            Ok(stored) => Ok(stored),
            Err(StoreError::NotFound { .. }) => {
                Err(LookupError::NotFound { resource: resource_name(&key.resource), name: key.name })
            }
            Err(e) => Err(LookupError::Other(e.to_string())),
        }
    }
}

impl LegacyTokenLookup for StoreLookup<'_> {
    async fn legacy_secret(&self, namespace: &str, name: &str) -> Result<LegacySecret, LookupError> {
        let stored = self.object(ObjectKey::namespaced("secrets", namespace, name)).await?;
        let secret = &stored.object;
        let token = secret
            .field("/data/token")
            .and_then(Value::as_str)
            .and_then(|t| data_encoding::BASE64.decode(t.as_bytes()).ok())
            .unwrap_or_default();
        Ok(LegacySecret {
            token,
            uid: secret.field("/metadata/uid").and_then(Value::as_str).unwrap_or_default().to_owned(),
            deleting: secret.field("/metadata/deletionTimestamp").is_some_and(|t| !t.is_null()),
            invalid_since: secret
                .field("/metadata/labels")
                .and_then(|l| l.get(podpass_token::legacy::INVALID_SINCE_LABEL))
                .and_then(Value::as_str)
                .map(str::to_owned),
        })
    }

    async fn legacy_service_account(&self, namespace: &str, name: &str) -> Result<LegacyServiceAccount, LookupError> {
        let stored = self.object(ObjectKey::namespaced("serviceaccounts", namespace, name)).await?;
        let sa = &stored.object;
        let secrets = sa.get("secrets").and_then(Value::as_array).into_iter().flatten();
        Ok(LegacyServiceAccount {
            uid: sa.field("/metadata/uid").and_then(Value::as_str).unwrap_or_default().to_owned(),
            deleting: sa.field("/metadata/deletionTimestamp").is_some_and(|t| !t.is_null()),
            secrets: secrets.filter_map(|s| s.get("name").and_then(Value::as_str)).map(str::to_owned).collect(),
        })
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
