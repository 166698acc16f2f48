//! ConfigMap (pkg/registry/core/configmap): keys as `IsConfigMapKey`, no key in both
//! `data` and `binaryData`, and `immutable` freezing the data.

use serde_json::{Value, json};

use super::super::table::{age, age_column, column, count, name_column, text};
use super::projection::{immutability_errors, key_errors};
use super::{Printer, Strategy, invalid};
use crate::server::status::StatusError;

/// The config map strategy.
pub(crate) struct ConfigMap;

/// Registered in the resource table.
pub(crate) static CONFIG_MAP: ConfigMap = ConfigMap;

/// The resource.
pub(crate) const RESOURCE: super::Resource = super::Resource::stored(
    super::Names { group: "", kind: "ConfigMap", plural: "configmaps", singular: "configmap" },
    &CONFIG_MAP,
    &super::types::TypeOf::<k8s_openapi::api::core::v1::ConfigMap>::NEW,
)
.with_short_names(&["cm"]);

impl Strategy for ConfigMap {
    fn validate(&self, name: &str, object: &Value) -> Result<(), StatusError> {
        let mut errors = key_errors(object, &["data", "binaryData"], true);
        errors.extend(super::projection::config_map_size_errors(object));
        invalid("ConfigMap", name, errors)
    }

    fn validate_update(&self, name: &str, object: &Value, old: &Value) -> Result<(), StatusError> {
        let mut errors = key_errors(object, &["data", "binaryData"], true);
        errors.extend(super::projection::config_map_size_errors(object));
        errors.extend(immutability_errors(object, old, &["data", "binaryData"]));
        invalid("ConfigMap", name, errors)
    }

    fn printer(&self) -> Option<Printer> {
        Some((
            vec![
                name_column(),
                column("Data", "string", "", "The number of entries in the configmap", 0),
                age_column(),
            ],
            |o, now| {
                let data = count(o, "/data") + count(o, "/binaryData");
                vec![json!(text(o, "/metadata/name")), json!(data), json!(age(o, "/metadata/creationTimestamp", now))]
            },
        ))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn immutable_config_maps_keep_their_data() {
        let frozen = json!({"immutable": true, "data": {"a": "1"}});
        assert!(CONFIG_MAP.validate_update("c", &frozen, &frozen).is_ok(), "metadata-only changes pass");
        let changed = json!({"immutable": true, "data": {"a": "2"}});
        assert_eq!(
            CONFIG_MAP.validate_update("c", &changed, &frozen).unwrap_err().message,
            "ConfigMap \"c\" is invalid: data: Forbidden: field is immutable when `immutable` is set"
        );
        let thawed = json!({"data": {"a": "2"}, "binaryData": {"b": "eA=="}});
        let e = CONFIG_MAP.validate_update("c", &thawed, &frozen).unwrap_err();
        assert_eq!(e.code, axum::http::StatusCode::UNPROCESSABLE_ENTITY);
        assert!(
            e.message.contains("[immutable: Forbidden") && e.message.contains("binaryData: Forbidden"),
            "{}",
            e.message
        );
        let mutable = json!({"data": {"a": "1"}});
        assert!(CONFIG_MAP.validate_update("c", &thawed, &mutable).is_ok());
    }

    #[test]
    fn a_key_in_data_and_binary_data_is_refused() {
        let both = json!({"data": {"k": "v"}, "binaryData": {"k": "eA=="}});
        let e = CONFIG_MAP.validate("c", &both).unwrap_err();
        assert!(
            e.message.contains("data[k]: Invalid value: \"k\": duplicate of key present in binaryData"),
            "{}",
            e.message
        );
    }
}
