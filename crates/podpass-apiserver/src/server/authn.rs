//! Authentication, in kube-apiserver's order: a client certificate the TLS layer verified
//! against `--client-ca-file` (`x509.CommonNameUserConversion`), then the bearer token of a
//! request (`bearertoken.Authenticator`), checked against the static token file, then as a
//! bootstrap token (with `--enable-bootstrap-token-auth`), then as a service-account token;
//! neither is `system:anonymous`.

use super::AppState;
use super::status::StatusError;
use crate::token_file::StaticUser;
use tokio_rustls::rustls::pki_types::CertificateDer;

/// The authenticated user of a request.
#[derive(Debug, Clone)]
pub struct User {
    /// User name.
    pub name: String,
    /// UID.
    pub uid: String,
    /// Groups, `system:authenticated` included.
    pub groups: Vec<String>,
    /// Extra attributes (service-account tokens: pod, node, credential id).
    pub extra: std::collections::BTreeMap<String, Vec<String>>,
}

impl From<StaticUser> for User {
    fn from(u: StaticUser) -> Self {
        let mut groups = u.groups;
        groups.push("system:authenticated".into());
        Self { name: u.name, uid: u.uid, groups, extra: Default::default() }
    }
}

/// Authenticates a request: its verified client certificate first, then its bearer token
/// (static token file, bootstrap tokens, service-account tokens validated against the
/// store). Neither is `system:anonymous`; a bad token is 401.
pub(crate) async fn authenticate(
    state: &AppState,
    client_certificates: &[CertificateDer<'_>],
    authorization: Option<String>,
) -> Result<User, StatusError> {
    if let Some(user) = client_certificates.first().and_then(|leaf| certificate_user(leaf)) {
        return Ok(user);
    }
    let anonymous = || User {
        name: "system:anonymous".into(),
        uid: String::new(),
        groups: vec!["system:unauthenticated".into()],
        extra: Default::default(),
    };
    let Some(header) = authorization else { return Ok(anonymous()) };
    let Some(token) = bearer_token(&header)? else { return Ok(anonymous()) };
    if let Some(user) = state.token_file.lookup(token) {
        return Ok(user.into());
    }
    if state.bootstrap_token_auth
        && let Some((id, _)) = podpass_api::bootstrap_token::parse(token)
    {
        return bootstrap_user(state, id, token).await;
    }
    match state.authenticate_cached(token, None).await {
        Ok(a) => Ok(User::from_token(&a)),
        Err(_) => Err(StatusError::unauthorized()),
    }
}

/// A bootstrap token's user (upstream `TokenAuthenticator.AuthenticateToken`), from its
/// Secret `kube-system/bootstrap-token-<id>` as the store has it now: a token whose Secret
/// is missing, deleting, of another type or secret, expired, not for authentication or with
/// a bad extra group is 401, the reason logged and never told.
async fn bootstrap_user(state: &AppState, id: &str, token: &str) -> Result<User, StatusError> {
    use podpass_api::bootstrap_token::{NAMESPACE, SECRET_PREFIX, TokenSecret};
    let key = crate::store::ObjectKey::namespaced("secrets", NAMESPACE, &format!("{SECRET_PREFIX}{id}"));
    let secret = match state.store.get_shared(&key).await {
        Ok(secret) => TokenSecret::from_secret(&secret.object),
        Err(crate::store::StoreError::NotFound { .. }) => {
            tracing::debug!(token_id = id, "no secret to match a bootstrap bearer token");
            return Err(StatusError::unauthorized());
        }
        Err(e) => return Err(e.into()),
    };
    match secret.authenticate(token, podpass_token::now_unix()) {
        Ok((name, mut groups)) => {
            groups.push("system:authenticated".into());
            Ok(User { name, uid: String::new(), groups, extra: Default::default() })
        }
        Err(why) => {
            tracing::debug!(token_id = id, "bootstrap token secret {SECRET_PREFIX}{id} {why}");
            Err(StatusError::unauthorized())
        }
    }
}

/// `x509.CommonNameUserConversion`: the user of a client certificate the TLS layer
/// verified, its subject's common name, with its organizations as groups (in the
/// certificate's order). A certificate without a common name authenticates nobody, and
/// the request goes on to its bearer token, as upstream's union of authenticators.
fn certificate_user(der: &CertificateDer<'_>) -> Option<User> {
    let (_, cert) = x509_parser::parse_x509_certificate(der.as_ref()).ok()?;
    let subject = cert.subject();
    let name = subject.iter_common_name().next()?.as_str().ok()?;
    if name.is_empty() {
        return None;
    }
    let mut groups: Vec<String> =
        subject.iter_organization().filter_map(|o| o.as_str().ok()).map(str::to_owned).collect();
    groups.push("system:authenticated".into());
    Some(User { name: name.to_owned(), uid: String::new(), groups, extra: Default::default() })
}

/// `bearertoken.Authenticator`: the token of an `Authorization` header. The scheme is
/// case-insensitive; a header of another scheme (or none) carries no bearer token
/// (`Ok(None)`: the request is anonymous); an empty token is refused.
pub fn bearer_token(header: &str) -> Result<Option<&str>, StatusError> {
    let header = header.trim();
    let mut parts = header.splitn(3, ' ');
    let scheme = parts.next().unwrap_or_default();
    match parts.next() {
        Some(token) if scheme.eq_ignore_ascii_case("bearer") => {
            if token.is_empty() {
                Err(StatusError::unauthorized())
            } else {
                Ok(Some(token))
            }
        }
        _ => Ok(None),
    }
}

impl User {
    fn from_token(a: &podpass_token::Authenticated) -> Self {
        let mut groups = a.user.groups.clone();
        groups.push("system:authenticated".into());
        Self { name: a.user.username.clone(), uid: a.user.uid.clone(), groups, extra: a.user.extra.clone() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_tokens_as_upstream() {
        assert_eq!(bearer_token("Bearer abc"), Ok(Some("abc")));
        assert_eq!(bearer_token("bearer abc"), Ok(Some("abc")));
        assert_eq!(bearer_token("  BEARER abc  "), Ok(Some("abc")));
        // a third part is ignored, as Go's SplitN(…, 3) leaves it
        assert_eq!(bearer_token("Bearer abc def"), Ok(Some("abc")));
        assert_eq!(bearer_token("Bearer"), Ok(None));
        assert_eq!(bearer_token("Basic dTpw"), Ok(None));
        assert_eq!(bearer_token(""), Ok(None));
        assert_eq!(bearer_token("Bearer  x"), Err(StatusError::unauthorized()));
    }

    #[test]
    fn every_authenticated_user_is_in_the_authenticated_group() {
        let u: User = StaticUser { name: "alice".into(), uid: "1".into(), groups: vec!["dev".into()] }.into();
        assert_eq!(u.groups, ["dev", "system:authenticated"]);
    }
}
