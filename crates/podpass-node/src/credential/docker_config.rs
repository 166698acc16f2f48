//! Docker config credentials (credentialprovider/config.go): pull secrets of type
//! `kubernetes.io/dockerconfigjson` and `kubernetes.io/dockercfg`, and the node-wide
//! `<root-dir>/config.json`.

use std::collections::BTreeMap;
use std::path::Path;

use data_encoding::BASE64;
use serde::Deserialize;
use serde_json::Value;
use thiserror::Error;

/// One registry's credentials.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DockerConfigEntry {
    /// User name.
    pub username: String,
    /// Password.
    pub password: String,
    /// E-mail (kept: it is part of the credential hash).
    pub email: String,
}

/// Registry pattern → credentials.
pub type DockerConfig = BTreeMap<String, DockerConfigEntry>;

/// Credentials that could not be read.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum DockerConfigError {
    /// Not JSON of the expected shape.
    #[error("{0}")]
    Malformed(String),
    /// A Secret manifest that is not a usable pull secret.
    #[error("{0}")]
    Secret(String),
}

#[derive(Deserialize)]
struct RawEntry {
    #[serde(default)]
    username: String,
    #[serde(default)]
    password: String,
    #[serde(default)]
    email: String,
    #[serde(default)]
    auth: String,
}

/// `decodeDockerConfigFieldAuth`: base64 `user:password`.
fn decode_auth(auth: &str) -> Result<(String, String), DockerConfigError> {
    let bytes = BASE64
        .decode(auth.as_bytes())
        .or_else(|_| data_encoding::BASE64_NOPAD.decode(auth.trim_end_matches('=').as_bytes()))
        .map_err(|e| DockerConfigError::Malformed(format!("error decoding auth field: {e}")))?;
    let text = String::from_utf8(bytes).map_err(|_| DockerConfigError::Malformed("auth field is not UTF-8".into()))?;
    let (user, pass) = text
        .split_once(':')
        .ok_or_else(|| DockerConfigError::Malformed("error parsing auth field: missing ':'".into()))?;
    Ok((user.to_owned(), pass.trim_matches('\n').to_owned()))
}

fn entries(map: BTreeMap<String, RawEntry>) -> Result<DockerConfig, DockerConfigError> {
    let mut out = DockerConfig::new();
    for (registry, raw) in map {
        // As upstream: a non-empty `auth` replaces username and password.
        let (username, password) =
            if raw.auth.is_empty() { (raw.username, raw.password) } else { decode_auth(&raw.auth)? };
        out.insert(registry, DockerConfigEntry { username, password, email: raw.email });
    }
    Ok(out)
}

/// A `.dockerconfigjson` document (`{"auths": {...}}`).
pub fn parse_config_json(data: &[u8]) -> Result<DockerConfig, DockerConfigError> {
    #[derive(Deserialize)]
    struct Json {
        #[serde(default)]
        auths: BTreeMap<String, RawEntry>,
    }
    let json: Json = serde_json::from_slice(data).map_err(|e| DockerConfigError::Malformed(e.to_string()))?;
    entries(json.auths)
}

/// A legacy `.dockercfg` document (the registry map itself).
pub fn parse_dockercfg(data: &[u8]) -> Result<DockerConfig, DockerConfigError> {
    let map: BTreeMap<String, RawEntry> =
        serde_json::from_slice(data).map_err(|e| DockerConfigError::Malformed(e.to_string()))?;
    entries(map)
}

/// Node-wide credentials from `<root_dir>/config.json` (none when the file is absent).
pub fn read_node_config(root_dir: &Path) -> Result<DockerConfig, DockerConfigError> {
    let path = root_dir.join("config.json");
    match std::fs::read(&path) {
        Ok(data) => {
            parse_config_json(&data).map_err(|e| DockerConfigError::Malformed(format!("{}: {e}", path.display())))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(DockerConfig::new()),
        Err(e) => Err(DockerConfigError::Malformed(format!("{}: {e}", path.display()))),
    }
}

/// A docker config document parser.
type Parser = fn(&[u8]) -> Result<DockerConfig, DockerConfigError>;

/// A pull secret: its coordinates and credentials.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PullSecret {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// UID.
    pub uid: String,
    /// Its credentials.
    pub config: DockerConfig,
}

/// Reads a Secret manifest (YAML or JSON, as `kubectl get secret -o yaml` prints it) of
/// type `kubernetes.io/dockerconfigjson` or `kubernetes.io/dockercfg`.
pub fn parse_pull_secret(manifest: &[u8]) -> Result<PullSecret, DockerConfigError> {
    let bad = |m: String| DockerConfigError::Secret(m);
    let value: Value = serde_yaml_ng::from_slice(manifest).map_err(|e| bad(format!("not a Secret manifest: {e}")))?;
    if value.get("kind").and_then(Value::as_str) != Some("Secret") {
        return Err(bad("not a Secret manifest: kind is not Secret".into()));
    }
    // YAML may type a bare UID like 1234 as a number; the manifest meant its text.
    let meta = |k: &str| match value.pointer(&format!("/metadata/{k}")) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    };
    let (name, namespace, uid) = (meta("name"), meta("namespace"), meta("uid"));
    let secret_type = value.get("type").and_then(Value::as_str).unwrap_or("");
    let (key, parse): (&str, Parser) = match secret_type {
        "kubernetes.io/dockerconfigjson" => (".dockerconfigjson", parse_config_json),
        "kubernetes.io/dockercfg" => (".dockercfg", parse_dockercfg),
        other => return Err(bad(format!("secret {name:?} has type {other:?}, not a pull secret type"))),
    };
    let data =
        if let Some(encoded) = value.pointer(&format!("/data/{}", key.replace('/', "~1"))).and_then(Value::as_str) {
            BASE64.decode(encoded.as_bytes()).map_err(|e| bad(format!("secret {name:?} data[{key}]: {e}")))?
        } else if let Some(plain) = value.pointer(&format!("/stringData/{key}")).and_then(Value::as_str) {
            plain.as_bytes().to_vec()
        } else {
            return Err(bad(format!("secret {name:?} has no data[{key}]")));
        };
    let config = parse(&data).map_err(|e| bad(format!("secret {name:?} data[{key}]: {e}")))?;
    Ok(PullSecret { namespace, name, uid, config })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auth_field_replaces_username_and_password() {
        let auth = BASE64.encode(b"alice:s3cret");
        let json = format!(
            r#"{{"auths":{{"reg.example":{{"username":"x","password":"y","auth":"{auth}","email":"a@b"}},"other.example":{{"username":"u","password":"p"}}}}}}"#
        );
        let c = parse_config_json(json.as_bytes()).unwrap();
        assert_eq!(
            c["reg.example"],
            DockerConfigEntry { username: "alice".into(), password: "s3cret".into(), email: "a@b".into() }
        );
        assert_eq!(c["other.example"].username, "u");
        assert!(parse_config_json(br#"{"auths":{"r":{"auth":"bm9jb2xvbg=="}}}"#).is_err(), "no ':' in auth");
    }

    #[test]
    fn reads_pull_secret_manifests() {
        let inner = BASE64.encode(br#"{"auths":{"reg.example":{"username":"u","password":"p"}}}"#);
        let yaml = format!(
            "apiVersion: v1\nkind: Secret\nmetadata:\n  name: regcred\n  namespace: team\n  uid: 1234\ntype: kubernetes.io/dockerconfigjson\ndata:\n  .dockerconfigjson: {inner}\n"
        );
        let s = parse_pull_secret(yaml.as_bytes()).unwrap();
        assert_eq!((s.namespace.as_str(), s.name.as_str(), s.uid.as_str()), ("team", "regcred", "1234"));
        assert_eq!(s.config["reg.example"].password, "p");
        let cfg = BASE64.encode(br#"{"reg.example":{"auth":"dTpw"}}"#);
        let legacy = format!(
            r#"{{"kind":"Secret","metadata":{{"name":"old"}},"type":"kubernetes.io/dockercfg","data":{{".dockercfg":"{cfg}"}}}}"#
        );
        assert_eq!(parse_pull_secret(legacy.as_bytes()).unwrap().config["reg.example"].username, "u");
        let opaque = "kind: Secret\nmetadata: {name: x}\ntype: Opaque\n";
        assert_eq!(
            parse_pull_secret(opaque.as_bytes()).unwrap_err().to_string(),
            r#"secret "x" has type "Opaque", not a pull secret type"#
        );
    }
}
