//! The bodies of what is only created to be answered (TokenRequest, TokenReview), decoded
//! into their types: `apiVersion` and `kind` checked when given (as k8s-openapi's types
//! check them), `metadata` and `spec` typed, a key given twice taking its last value (as
//! Go's decoder; the duplicate itself is reported by field validation), and `status`, output
//! only, skipped unread as upstream's handlers overwrite it (client-go sends an empty one,
//! whose zero `expirationTimestamp` the typed status would refuse). Unknown fields are
//! skipped as `IgnoredAny`, where field validation's `serde_ignored` finds them.

use std::marker::PhantomData;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::de::{self, DeserializeOwned, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// A kind whose body is `metadata` + `spec`, with an output-only `status`.
pub(super) trait CreateOnly {
    /// The API group.
    const GROUP: &'static str = "authentication.k8s.io";
    /// The version.
    const VERSION: &'static str = "v1";
    /// `apiVersion`.
    const API_VERSION: &'static str;
    /// `kind`.
    const KIND: &'static str;
    /// The spec's type.
    type Spec: DeserializeOwned + Default;
}

/// `authentication.k8s.io/v1` TokenRequest.
pub(super) struct TokenRequestKind;

impl CreateOnly for TokenRequestKind {
    const API_VERSION: &'static str = "authentication.k8s.io/v1";
    const KIND: &'static str = "TokenRequest";
    type Spec = k8s_openapi::api::authentication::v1::TokenRequestSpec;
}

/// `authentication.k8s.io/v1` TokenReview.
pub(super) struct TokenReviewKind;

impl CreateOnly for TokenReviewKind {
    const API_VERSION: &'static str = "authentication.k8s.io/v1";
    const KIND: &'static str = "TokenReview";
    type Spec = k8s_openapi::api::authentication::v1::TokenReviewSpec;
}

/// A create-only body: its metadata and spec.
pub(super) struct Body<K: CreateOnly> {
    /// `metadata`.
    pub metadata: ObjectMeta,
    /// `spec`.
    pub spec: K::Spec,
}

impl<K: CreateOnly> Body<K> {
    /// Reads a field's value, the last one winning.
    fn field<'de, A: MapAccess<'de>, T: de::Deserialize<'de>>(
        map: &mut A,
        into: &mut Option<T>,
    ) -> Result<(), A::Error> {
        *into = Some(map.next_value()?);
        Ok(())
    }
}

impl<'de, K: CreateOnly> de::Deserialize<'de> for Body<K> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_struct(
            K::KIND,
            &["apiVersion", "kind", "metadata", "spec", "status"],
            BodyVisitor(PhantomData::<K>),
        )
    }
}

struct BodyVisitor<K>(PhantomData<K>);

impl<'de, K: CreateOnly> Visitor<'de> for BodyVisitor<K> {
    type Value = Body<K>;
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(K::KIND)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Body<K>, A::Error> {
        let (mut metadata, mut spec) = (None, None);
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            match key.as_ref() {
                "apiVersion" | "kind" => {
                    let value: std::borrow::Cow<'de, str> = map.next_value()?;
                    let expected = if key == "kind" { K::KIND } else { K::API_VERSION };
                    if value != expected {
                        return Err(de::Error::invalid_value(de::Unexpected::Str(&value), &expected));
                    }
                }
                "metadata" => Body::<K>::field(&mut map, &mut metadata)?,
                "spec" => Body::<K>::field(&mut map, &mut spec)?,
                "status" => {
                    map.next_value::<Discard>()?;
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(Body { metadata: metadata.unwrap_or_default(), spec: spec.unwrap_or_default() })
    }
}

/// Any value, read and dropped without being reported as unknown (it is not: `status` is
/// part of the kind, only not read).
struct Discard;

impl<'de> de::Deserialize<'de> for Discard {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(Discard)
    }
}

impl<'de> Visitor<'de> for Discard {
    type Value = Discard;
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any value")
    }
    fn visit_bool<E>(self, _: bool) -> Result<Discard, E> {
        Ok(Discard)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Discard, E> {
        Ok(Discard)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Discard, E> {
        Ok(Discard)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Discard, E> {
        Ok(Discard)
    }
    fn visit_str<E>(self, _: &str) -> Result<Discard, E> {
        Ok(Discard)
    }
    fn visit_unit<E>(self) -> Result<Discard, E> {
        Ok(Discard)
    }
    fn visit_none<E>(self) -> Result<Discard, E> {
        Ok(Discard)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Discard, A::Error> {
        while seq.next_element::<Discard>()?.is_some() {}
        Ok(Discard)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Discard, A::Error> {
        while map.next_entry::<Discard, Discard>()?.is_some() {}
        Ok(Discard)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::rest::field_validation::{FieldValidation, decode_json};
    use crate::server::status::StatusError;

    fn token_request(mode: FieldValidation, body: &str) -> Result<(Body<TokenRequestKind>, Vec<String>), StatusError> {
        decode_json(mode, "authentication.k8s.io", "v1", "TokenRequest", body.as_bytes())
    }

    #[test]
    fn a_client_go_token_request_decodes_with_its_empty_status_skipped() {
        let body = r#"{"kind":"TokenRequest","apiVersion":"authentication.k8s.io/v1","metadata":{"creationTimestamp":null},
            "spec":{"audiences":["registry.example"],"expirationSeconds":600,
                    "boundObjectRef":{"kind":"Pod","apiVersion":"v1","name":"web","uid":"u-1"}},
            "status":{"token":"","expirationTimestamp":null}}"#;
        let (request, warnings) = token_request(FieldValidation::Strict, body).unwrap();
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(request.spec.audiences, ["registry.example"]);
        assert_eq!(request.spec.expiration_seconds, Some(600));
        assert_eq!(request.spec.bound_object_ref.and_then(|b| b.uid).as_deref(), Some("u-1"));
        // apiVersion and kind may be left out; null is no value
        let (bare, _) = token_request(FieldValidation::Strict, r#"{"spec":{"audiences":null}}"#).unwrap();
        assert!(bare.spec.audiences.is_empty() && bare.metadata.name.is_none());
    }

    #[test]
    fn unknown_and_duplicate_fields_are_found_as_on_a_tree_and_the_last_value_wins() {
        let body = r#"{"apiVersion":"authentication.k8s.io/v1","kind":"TokenRequest","extra":{"deep":[1]},
            "metadata":{"name":"a","name":"b","bogus":1},"spec":{"audiences":["x"],"expirationSecs":1},
            "spec":{"audiences":["y"],"expirationSeconds":700}}"#;
        let err = token_request(FieldValidation::Strict, body).err().unwrap().message;
        assert_eq!(
            err,
            "TokenRequest in version \"authentication.k8s.io/v1\" cannot be handled as a TokenRequest: strict decoding error: \
             unknown field \"extra\", unknown field \"metadata.bogus\", unknown field \"spec.expirationSecs\", \
             duplicate field \"metadata.name\", duplicate field \"spec\""
        );
        let (request, warnings) = token_request(FieldValidation::Warn, body).unwrap();
        assert_eq!(warnings.len(), 5, "{warnings:?}");
        assert_eq!(request.metadata.name.as_deref(), Some("b"), "the last one, as Go's decoder");
        assert_eq!((request.spec.audiences, request.spec.expiration_seconds), (vec!["y".to_owned()], Some(700)));
        let (_, none) = token_request(FieldValidation::Ignore, body).unwrap();
        assert!(none.is_empty());
    }

    #[test]
    fn wrong_kinds_types_syntax_and_depth_are_400s_naming_what() {
        let wrong_kind = token_request(FieldValidation::Warn, r#"{"kind":"Pod"}"#).err().unwrap().message;
        assert!(
            wrong_kind.contains("cannot be handled as a TokenRequest") && wrong_kind.contains("Pod"),
            "{wrong_kind}"
        );
        let wrong_version = token_request(FieldValidation::Warn, r#"{"apiVersion":"v1"}"#).err().unwrap().message;
        assert!(wrong_version.contains("expected authentication.k8s.io/v1"), "{wrong_version}");
        let wrong_type =
            token_request(FieldValidation::Ignore, r#"{"spec":{"expirationSeconds":"1h"}}"#).err().unwrap().message;
        assert!(wrong_type.contains("cannot be handled as a TokenRequest: invalid type: string"), "{wrong_type}");
        let syntax = token_request(FieldValidation::Warn, r#"{"spec":{}"#).err().unwrap().message;
        assert!(syntax.starts_with("error decoding request body: "), "{syntax}");
        let trailing = token_request(FieldValidation::Warn, r#"{"spec":{}} {}"#).err().unwrap().message;
        assert!(trailing.starts_with("error decoding request body: trailing characters"), "{trailing}");
        // nesting is bounded before decoding, also inside an unknown field or the status
        let deep = format!(r#"{{"status":{}{}}}"#, "[".repeat(64), "]".repeat(64));
        let err = token_request(FieldValidation::Ignore, &deep).err().unwrap().message;
        assert_eq!(err, "error decoding request body: object nesting depth 65 exceeds the limit of 64");
        let ok = format!(r#"{{"status":{}{}}}"#, "[".repeat(63), "]".repeat(63));
        assert!(token_request(FieldValidation::Strict, &ok).is_ok(), "64 levels: the limit itself");
    }

    #[test]
    fn the_depth_scan_skips_strings_and_escapes() {
        use crate::server::rest::field_validation::json_depth;
        assert_eq!(json_depth(br#"{"a":"[[[{{{","b":[{"c":"\"[["}]}"#), 3);
        assert_eq!(json_depth(br#"{"a":"\\","b":[[]]}"#), 3, "an escaped backslash ends the escape");
        assert_eq!(json_depth(b"]]]"), 0);
        assert_eq!(json_depth(b""), 0);
    }

    #[test]
    fn a_token_review_decodes_its_spec() {
        let body = r#"{"apiVersion":"authentication.k8s.io/v1","kind":"TokenReview",
            "spec":{"token":"abc","audiences":["a"]},"status":{"user":{}}}"#;
        let (review, warnings): (Body<TokenReviewKind>, _) =
            decode_json(FieldValidation::Strict, "authentication.k8s.io", "v1", "TokenReview", body.as_bytes())
                .map_err(|e| e.message)
                .unwrap();
        assert!(warnings.is_empty());
        assert_eq!(review.spec.token.as_deref(), Some("abc"));
        assert_eq!(review.spec.audiences, Some(vec!["a".to_owned()]));
    }
}
