//! A borrowed view of a token's claims, for the verification hot path.
//!
//! Verification needs to read every claim but to keep only a few: parsing into borrowed
//! strings (copying only strings that contain JSON escapes) halves the parse cost of
//! parsing into the owned [`crate::Claims`], and parsing dominated the non-crypto half of
//! verification. Field names, optionality, `aud` as string-or-array and NumericDate
//! handling are exactly those of `Claims`; duplicate members are refused the same way.

use std::borrow::Cow;

use serde::Deserialize;
use serde::de::{self, Deserializer, SeqAccess, Visitor};

use crate::claims::{ObjectRef, numeric_date};

/// A JSON string, borrowed from the payload unless it had escapes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Text<'a>(pub Cow<'a, str>);

impl<'a> Text<'a> {
    pub fn as_str(&self) -> &str {
        &self.0
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Text<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Text<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Text(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Text(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
                Ok(Text(Cow::Owned(v)))
            }
        }
        d.deserialize_str(V)
    }
}

#[derive(Debug, Deserialize, Default)]
pub(crate) struct WireRef<'a> {
    #[serde(borrow, default)]
    pub name: Text<'a>,
    #[serde(borrow, default)]
    pub uid: Text<'a>,
}

impl WireRef<'_> {
    pub fn to_owned_ref(&self) -> ObjectRef {
        ObjectRef::new(self.name.as_str(), self.uid.as_str())
    }
}

#[derive(Debug, Deserialize, Default)]
pub(crate) struct WireKubernetes<'a> {
    #[serde(borrow, default)]
    pub namespace: Text<'a>,
    #[serde(borrow, default)]
    pub node: Option<WireRef<'a>>,
    #[serde(borrow, default)]
    pub pod: Option<WireRef<'a>>,
    #[serde(borrow, default)]
    pub secret: Option<WireRef<'a>>,
    #[serde(borrow, default)]
    pub serviceaccount: WireRef<'a>,
    #[serde(default, deserialize_with = "numeric_date")]
    pub warnafter: Option<i64>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct WireClaims<'a> {
    #[serde(borrow, default, deserialize_with = "audience")]
    pub aud: Vec<Text<'a>>,
    #[serde(default, deserialize_with = "numeric_date")]
    pub exp: Option<i64>,
    #[serde(default, deserialize_with = "numeric_date")]
    pub iat: Option<i64>,
    #[serde(borrow, default)]
    pub iss: Text<'a>,
    #[serde(borrow, default)]
    pub jti: Option<Text<'a>>,
    #[serde(borrow, rename = "kubernetes.io", default)]
    pub kubernetes: Option<WireKubernetes<'a>>,
    #[serde(default, deserialize_with = "numeric_date")]
    pub nbf: Option<i64>,
    #[serde(borrow, default)]
    pub sub: Text<'a>,
}

/// A JOSE header, borrowed. `crit` is only detected, never interpreted.
#[derive(Debug, Deserialize)]
pub(crate) struct WireHeader<'a> {
    #[serde(borrow)]
    pub alg: Text<'a>,
    #[serde(borrow, default)]
    pub kid: Option<Text<'a>>,
    #[serde(default)]
    pub crit: Option<serde::de::IgnoredAny>,
}

/// go-jose `Audience`: a single string or an array of strings (null = none).
pub(crate) fn audience<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Text<'de>>, D::Error> {
    struct V;
    impl<'de> Visitor<'de> for V {
        type Value = Vec<Text<'de>>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a string or an array of strings")
        }
        fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
            Ok(vec![Text(Cow::Borrowed(v))])
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
            Ok(vec![Text(Cow::Owned(v.to_owned()))])
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(1));
            while let Some(s) = seq.next_element::<Text<'de>>()? {
                out.push(s);
            }
            Ok(out)
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(Vec::new())
        }
    }
    d.deserialize_any(V)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::claims::Claims;

    #[test]
    fn borrows_plain_strings_and_copies_escaped_ones() {
        let json = br#"{"aud":["a","b\"c"],"iss":"i","sub":"s\u0041","kubernetes.io":{"namespace":"n"}}"#;
        let w: WireClaims<'_> = serde_json::from_slice(json).unwrap();
        assert!(matches!(w.aud[0].0, Cow::Borrowed("a")));
        assert_eq!(w.aud[1].as_str(), "b\"c");
        assert_eq!(w.sub.as_str(), "sA");
        assert_eq!(w.kubernetes.unwrap().namespace.as_str(), "n");
    }

    #[test]
    fn accepts_and_refuses_exactly_what_owned_claims_do() {
        for json in [
            r#"{"aud":"one","exp":12.9}"#,
            r#"{"aud":null,"exp":null}"#,
            r#"{"aud":[1]}"#,
            r#"{"exp":"soon"}"#,
            r#"{"exp":1e300}"#,
            r#"{"sub":"a","sub":"b"}"#,
            r#"{"kubernetes.io":{"pod":{"name":5}}}"#,
            r#"{"kubernetes.io":null}"#,
            r#"{"extra":{"nested":[1,2,{"x":null}]}}"#,
            r#"[]"#,
        ] {
            let owned = serde_json::from_str::<Claims>(json);
            let wire = serde_json::from_str::<WireClaims<'_>>(json);
            assert_eq!(owned.is_ok(), wire.is_ok(), "{json}");
            if let (Ok(o), Ok(w)) = (owned, wire) {
                assert_eq!(o.aud, w.aud.iter().map(|a| a.as_str().to_owned()).collect::<Vec<_>>());
                assert_eq!(o.exp, w.exp);
            }
        }
    }
}
