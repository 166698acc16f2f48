//! keyring.go `BasicDockerKeyring`: credentials indexed by registry pattern, looked up by
//! image with `URLsMatch`, most specific pattern first, with the Docker Hub fallback; each
//! credential tracked with where it came from (KEP-2535 needs to know).

use std::collections::BTreeMap;

use podpass_api::image_url::{parse_schemeless, urls_match};
use serde::Serialize;

use super::docker_config::{DockerConfig, DockerConfigEntry};

/// Where a credential came from (KEP-2535 credential tracking).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum CredentialSource {
    /// A pull secret.
    #[serde(rename_all = "camelCase")]
    Secret {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
        /// UID.
        uid: String,
    },
    /// A credential provider plugin run with a pod's service account.
    #[serde(rename_all = "camelCase")]
    ServiceAccount {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
        /// UID.
        uid: String,
        /// The credential id (`JTI=…`) of the token the plugin was given (none: unknown).
        #[serde(default, skip_serializing_if = "String::is_empty")]
        credential_id: String,
    },
    /// Node-wide: `<root-dir>/config.json` or a plugin run without a service account.
    NodeWide,
}

/// A credential with its source and `AuthConfigHash`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TrackedAuth {
    /// User name.
    pub username: String,
    /// Password.
    pub password: String,
    /// E-mail.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub email: String,
    /// Where it came from.
    pub source: CredentialSource,
    /// hex(sha256(json(AuthConfig))) as the kubelet computes it for pull records.
    pub auth_config_hash: String,
}

/// The kubelet's `AuthConfig` JSON (fields omitted when empty, in this order), whose hash
/// identifies a credential in pull records.
pub fn auth_config_hash(entry: &DockerConfigEntry) -> String {
    // Written by hand: Go marshals struct fields in declaration order, serde_json's map
    // would sort them.
    let mut json = String::from("{");
    for (k, v) in [("username", &entry.username), ("password", &entry.password), ("email", &entry.email)] {
        if !v.is_empty() {
            if json.len() > 1 {
                json.push(',');
            }
            json.push_str(&format!("\"{k}\":{}", serde_json::Value::String(v.clone())));
        }
    }
    json.push('}');
    // encoding/json escapes HTML characters and the JS line separators; serde_json does not.
    let json = json
        .replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026")
        .replace('\u{2028}', "\\u2028")
        .replace('\u{2029}', "\\u2029")
        .into_bytes();
    data_encoding::HEXLOWER.encode(aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, &json).as_ref())
}

/// Credentials by registry pattern.
#[derive(Debug, Clone, Default)]
pub struct Keyring {
    creds: BTreeMap<String, Vec<TrackedAuth>>,
}

/// keyring.go `Add`: the registry key normalised (scheme dropped, `/v1/` or `/v2/` path
/// prefix stripped to `/`, host alone when the path is empty or `/`).
fn normalise_key(key: &str) -> Option<String> {
    let rest = key.strip_prefix("https://").or_else(|| key.strip_prefix("http://")).unwrap_or(key);
    let url = parse_schemeless(rest).ok()?;
    let mut path = url.path;
    if path.starts_with("/v1/") || path.starts_with("/v2/") {
        path = path[3..].to_owned();
    }
    if path.is_empty() || path == "/" { Some(url.host) } else { Some(format!("{}{}", url.host, path)) }
}

impl Keyring {
    /// An empty keyring.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds every entry of `config` with `source`. Unparsable keys are skipped, as upstream.
    pub fn add(&mut self, config: &DockerConfig, source: &CredentialSource) {
        for (key, entry) in config {
            let Some(key) = normalise_key(key) else { continue };
            self.creds.entry(key).or_default().push(TrackedAuth {
                username: entry.username.clone(),
                password: entry.password.clone(),
                email: entry.email.clone(),
                source: source.clone(),
                auth_config_hash: auth_config_hash(entry),
            });
        }
    }

    /// Credentials for `image`: every matching pattern, reverse-lexicographic (most specific
    /// first); else, for Docker Hub images, those under `index.docker.io`.
    pub fn lookup(&self, image: &str) -> Vec<TrackedAuth> {
        let Ok(target) = parse_schemeless(image) else { return Vec::new() };
        let mut found = Vec::new();
        for (key, creds) in self.creds.iter().rev() {
            if parse_schemeless(key).is_ok_and(|glob| urls_match(&glob, &target)) {
                found.extend(creds.iter().cloned());
            }
        }
        if found.is_empty()
            && is_default_registry_match(image)
            && let Some(hub) = self.creds.get("index.docker.io")
        {
            found.extend(hub.iter().cloned());
        }
        found
    }
}

/// keyring.go `isDefaultRegistryMatch`: images that live on Docker Hub.
pub fn is_default_registry_match(image: &str) -> bool {
    let Some((first, _)) = image.split_once('/') else { return true };
    if first.is_empty() {
        return false;
    }
    first == "docker.io" || first == "index.docker.io" || (!first.contains('.') && !first.contains(':'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(user: &str) -> DockerConfigEntry {
        DockerConfigEntry { username: user.into(), password: "p".into(), email: String::new() }
    }

    fn users(found: &[TrackedAuth]) -> Vec<&str> {
        found.iter().map(|a| a.username.as_str()).collect()
    }

    #[test]
    fn specific_patterns_first_and_all_matches_kept() {
        let mut k = Keyring::new();
        let config: DockerConfig = [
            ("https://registry.example/v2/".to_owned(), entry("host")),
            ("registry.example/team".to_owned(), entry("team")),
            ("*.example".to_owned(), entry("wild")),
            ("other.example".to_owned(), entry("other")),
            ("%bad%".to_owned(), entry("bad")),
        ]
        .into();
        k.add(&config, &CredentialSource::NodeWide);
        k.add(&[("registry.example".to_owned(), entry("second"))].into(), &CredentialSource::NodeWide);
        assert_eq!(users(&k.lookup("registry.example/team/app:1")), ["team", "host", "second", "wild"]);
        assert_eq!(users(&k.lookup("registry.example/else/app")), ["host", "second", "wild"]);
        assert!(k.lookup("registry.example:5000/team/app").is_empty(), "ports must match");
    }

    #[test]
    fn hostile_pull_secret_keys_are_skipped_not_fatal() {
        // Any namespace user can create a pull secret; its keys must never stop lookups.
        let mut k = Keyring::new();
        let config: DockerConfig = [
            ("registry.example/%aé".to_owned(), entry("cut-utf8")),
            ("%é".to_owned(), entry("escape-then-utf8")),
            ("é%".to_owned(), entry("trailing-escape")),
            ("[::1".to_owned(), entry("open-bracket")),
            ("registry.example".to_owned(), entry("good")),
        ]
        .into();
        k.add(&config, &CredentialSource::NodeWide);
        assert_eq!(users(&k.lookup("registry.example/team/app")), ["good"]);
        assert!(k.lookup("registry.example/%aé").is_empty());
    }

    #[test]
    fn docker_hub_fallback() {
        let mut k = Keyring::new();
        k.add(&[("https://index.docker.io/v1/".to_owned(), entry("hub"))].into(), &CredentialSource::NodeWide);
        assert_eq!(users(&k.lookup("ubuntu")), ["hub"]);
        assert_eq!(users(&k.lookup("library/ubuntu")), ["hub"]);
        assert_eq!(users(&k.lookup("docker.io/library/ubuntu")), ["hub"]);
        assert!(k.lookup("quay.io/x/y").is_empty());
        assert!(k.lookup("localhost:5000/x").is_empty());
        assert!(!is_default_registry_match("/x"));
    }

    #[test]
    fn hash_is_sha256_of_the_omitempty_auth_config_json() {
        let e = entry("u");
        let want = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, br#"{"username":"u","password":"p"}"#);
        assert_eq!(auth_config_hash(&e), data_encoding::HEXLOWER.encode(want.as_ref()));
    }
}
