//! `credentialMapping`: normalised image name → credentials, as a sorted vector. Records
//! almost always map one or two names; a `BTreeMap` spends a whole node (~1 KiB) on that,
//! and a node holds thousands of records in memory. Serialised as a JSON object in key
//! order, as Go marshals a `map[string]…`.

use serde::de::{MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::records::ImagePullCredentials;

/// Image name → credentials, sorted by name, names unique.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CredentialMapping(Vec<(String, ImagePullCredentials)>);

impl CredentialMapping {
    /// Empty.
    pub fn new() -> Self {
        Self(Vec::new())
    }

    fn find(&self, key: &str) -> Result<usize, usize> {
        self.0.binary_search_by(|(k, _)| k.as_str().cmp(key))
    }

    /// The credentials for `key`.
    pub fn get(&self, key: &str) -> Option<&ImagePullCredentials> {
        self.find(key).ok().map(|i| &self.0[i].1)
    }

    /// The credentials for `key`, to change.
    pub fn get_mut(&mut self, key: &str) -> Option<&mut ImagePullCredentials> {
        self.find(key).ok().map(|i| &mut self.0[i].1)
    }

    /// Sets `key`, returning what it replaced.
    pub fn insert(&mut self, key: String, value: ImagePullCredentials) -> Option<ImagePullCredentials> {
        match self.find(&key) {
            Ok(i) => Some(std::mem::replace(&mut self.0[i].1, value)),
            Err(i) => {
                self.0.insert(i, (key, value));
                None
            }
        }
    }

    /// No names.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// How many names.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Names and credentials in name order.
    pub fn iter(&self) -> impl Iterator<Item = (&String, &ImagePullCredentials)> {
        self.0.iter().map(|(k, v)| (k, v))
    }
}

impl std::ops::Index<&str> for CredentialMapping {
    type Output = ImagePullCredentials;
    fn index(&self, key: &str) -> &ImagePullCredentials {
        match self.get(key) {
            Some(v) => v,
            None => panic!("no credential mapping for {key:?}"),
        }
    }
}

impl<'a> IntoIterator for &'a CredentialMapping {
    type Item = (&'a String, &'a ImagePullCredentials);
    type IntoIter = std::iter::Map<
        std::slice::Iter<'a, (String, ImagePullCredentials)>,
        fn(&'a (String, ImagePullCredentials)) -> (&'a String, &'a ImagePullCredentials),
    >;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter().map(|(k, v)| (k, v))
    }
}

impl FromIterator<(String, ImagePullCredentials)> for CredentialMapping {
    fn from_iter<I: IntoIterator<Item = (String, ImagePullCredentials)>>(iter: I) -> Self {
        let mut m = Self::new();
        for (k, v) in iter {
            m.insert(k, v);
        }
        m.0.shrink_to_fit();
        m
    }
}

impl Serialize for CredentialMapping {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for CredentialMapping {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = CredentialMapping;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a map of image names to credentials")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<CredentialMapping, A::Error> {
                let mut m = CredentialMapping(Vec::with_capacity(access.size_hint().unwrap_or(1).min(16)));
                // A repeated name: the last one wins, as Go's decoder does.
                while let Some((k, v)) = access.next_entry::<String, ImagePullCredentials>()? {
                    m.insert(k, v);
                }
                m.0.shrink_to_fit();
                Ok(m)
            }
        }
        d.deserialize_map(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open() -> ImagePullCredentials {
        ImagePullCredentials { node_pods_accessible: true, ..Default::default() }
    }

    #[test]
    fn sorted_unique_and_serialised_as_a_go_map() {
        let mut m = CredentialMapping::new();
        m.insert("b.io/x".into(), open());
        m.insert("a.io/x".into(), ImagePullCredentials::default());
        assert!(m.insert("b.io/x".into(), open()).is_some());
        assert_eq!(m.len(), 2);
        assert_eq!(serde_json::to_string(&m).unwrap(), r#"{"a.io/x":{},"b.io/x":{"nodePodsAccessible":true}}"#);
        let back: CredentialMapping =
            serde_json::from_str(r#"{"b.io/x":{},"a.io/x":{},"b.io/x":{"nodePodsAccessible":true}}"#).unwrap();
        assert_eq!(back, m, "decoded sorted, last duplicate wins");
        assert!(serde_json::from_str::<CredentialMapping>(r#"{"a":{"x":1}}"#).is_err(), "strict inside");
        assert!(serde_json::from_str::<CredentialMapping>("[]").is_err());
    }
}
