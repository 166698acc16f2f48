//! A kind's k8s-openapi type, for what needs the type rather than the JSON: field
//! validation (decoding), the OpenAPI documents (schemas), the protobuf decoder (the
//! message of a body) and the strategies that read structs. Each kind's declaration
//! names its type ([`TypeOf`]); this module only gives it an object-safe face.

use std::marker::PhantomData;

use schemars::{JsonSchema, SchemaGenerator};
use serde::de::DeserializeOwned;
use serde_json::Value;

/// What the server does with a kind's type, whatever the type.
pub(crate) trait Typed: Send + Sync {
    /// Its OpenAPI schema name (`io.k8s.api.core.v1.ResourceQuota`).
    fn schema_name(&self) -> String;
    /// Adds its schema, and everything it refers to, to `generator`; its schema name.
    fn add_schema(&self, generator: &mut SchemaGenerator) -> String;
    /// The fields of `object` the type does not have (as `spec.foo[0].bar`), or why
    /// `object` does not decode as the type.
    fn unknown_fields(&self, object: &Value) -> Result<Vec<String>, serde_json::Error>;
    /// Its protobuf message in k8s.io/api's generated.proto (`api.core.v1.ResourceQuota`):
    /// k8s-openapi names schemas after the Go package, which the proto package mirrors.
    fn protobuf_message(&self) -> String {
        let name = self.schema_name();
        name.strip_prefix("io.k8s.").map(str::to_owned).unwrap_or(name)
    }
}

/// The type `T`, as a [`Typed`] a declaration can hold in a `const`.
pub(crate) struct TypeOf<T>(PhantomData<fn() -> T>);

impl<T> TypeOf<T> {
    /// The value to declare a kind with (`&TypeOf::<core::v1::ResourceQuota>::NEW`).
    pub(crate) const NEW: Self = Self(PhantomData);
}

impl<T: DeserializeOwned + JsonSchema> Typed for TypeOf<T> {
    fn schema_name(&self) -> String {
        T::schema_name().into_owned()
    }

    fn add_schema(&self, generator: &mut SchemaGenerator) -> String {
        generator.subschema_for::<T>();
        T::schema_name().into_owned()
    }

    fn unknown_fields(&self, object: &Value) -> Result<Vec<String>, serde_json::Error> {
        crate::server::rest::field_validation::unknown_as::<T>(object)
    }
}

/// `object` read as its kind's type `T`, for a strategy's validation or table. Field
/// validation has decoded every written body as `T` already, so this fails only for an
/// object that never went through it; the error is upstream's for a body that does not
/// decode.
pub(crate) fn read<T: DeserializeOwned>(object: &Value) -> Result<T, crate::server::status::StatusError> {
    T::deserialize(object).map_err(|e| crate::server::status::StatusError::bad_request(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::super::type_of;

    /// Field validation, the OpenAPI documents and the protobuf decoder cover every kind a
    /// client may send, each through the type its declaration names.
    #[test]
    fn every_served_kind_has_its_type() {
        for res in crate::server::rest::resources::RESOURCES.iter() {
            let typed =
                type_of(res.group, res.kind).unwrap_or_else(|| panic!("no type for {} {}", res.group, res.kind));
            let name = typed.schema_name();
            assert!(name.ends_with(&format!(".{}", res.kind)), "{name} for {} {}", res.group, res.kind);
        }
        let quota = type_of("", "ResourceQuota").map(|t| t.protobuf_message());
        assert_eq!(quota.as_deref(), Some("api.core.v1.ResourceQuota"));
        let slice = type_of("discovery.k8s.io", "EndpointSlice").map(|t| t.protobuf_message());
        assert_eq!(slice.as_deref(), Some("api.discovery.v1.EndpointSlice"));
        let token = type_of("authentication.k8s.io", "TokenRequest").map(|t| t.protobuf_message());
        assert_eq!(token.as_deref(), Some("api.authentication.v1.TokenRequest"));
        assert!(type_of("", "Binding").is_some(), "pods/binding's body");
        assert!(type_of("", "Widget").is_none());
    }
}
