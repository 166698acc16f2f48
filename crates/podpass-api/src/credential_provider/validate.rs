//! plugin/config.go `validateCredentialProviderConfig`: every rule, errors accumulated,
//! field paths without indexes, upstream wording.

use std::collections::BTreeSet;

use super::config::CredentialProviderConfig;
use super::wire::PROVIDER_API_VERSIONS;
use crate::image_url::parse_schemeless;
use crate::validation::{FieldError, FieldErrors, is_qualified_name, quote};

/// `tokenAttributes.cacheType` values.
pub const CACHE_TYPES: [&str; 2] = ["ServiceAccount", "Token"];

/// Validates a merged config; `sa_token_feature` is the
/// `KubeletServiceAccountTokenForCredentialProviders` gate.
pub fn validate(config: &CredentialProviderConfig, sa_token_feature: bool) -> FieldErrors {
    let mut errs = Vec::new();
    if config.providers.is_empty() {
        errs.push(FieldError::required("providers", "at least 1 item in plugins is required"));
    }
    let mut seen = std::collections::HashSet::new();
    for p in &config.providers {
        let name = p.name.as_str();
        if name.contains('/') {
            errs.push(FieldError::invalid("providers.name", name, "provider name cannot contain '/'"));
        }
        if name.contains(' ') {
            errs.push(FieldError::invalid("providers.name", name, "provider name cannot contain spaces"));
        }
        if name == "." {
            errs.push(FieldError::invalid("providers.name", name, "provider name cannot be '.'"));
        }
        if name == ".." {
            errs.push(FieldError::invalid("providers.name", name, "provider name cannot be '..'"));
        }
        if !seen.insert(name) {
            errs.push(FieldError::duplicate("providers.name", name));
        }
        if p.api_version.is_empty() {
            errs.push(FieldError::required("providers.apiVersion", ""));
        } else if !PROVIDER_API_VERSIONS.contains(&p.api_version.as_str()) {
            errs.push(FieldError::not_supported("providers.apiVersion", &p.api_version, &PROVIDER_API_VERSIONS));
        }
        if p.match_images.is_empty() {
            errs.push(FieldError::required("providers.matchImages", "at least 1 item in matchImages is required"));
        }
        for m in &p.match_images {
            if let Err(e) = parse_schemeless(m) {
                errs.push(FieldError::invalid("providers.matchImages", m, format!("match image is invalid: {e}")));
            }
        }
        match p.default_cache_duration {
            None => errs.push(FieldError::required("providers.defaultCacheDuration", "")),
            Some(d) if d.0 < 0 => errs.push(FieldError::invalid(
                "providers.defaultCacheDuration",
                &d.to_string(),
                "must be greater than or equal to 0",
            )),
            Some(_) => {}
        }
        let Some(t) = &p.token_attributes else { continue };
        let path = "providers.tokenAttributes";
        if !sa_token_feature {
            errs.push(FieldError::forbidden(
                path,
                "tokenAttributes is not supported when KubeletServiceAccountTokenForCredentialProviders feature gate is disabled",
            ));
        }
        if t.service_account_token_audience.is_empty() {
            errs.push(FieldError::required("providers.tokenAttributes.serviceAccountTokenAudience", ""));
        }
        if t.require_service_account.is_none() {
            errs.push(FieldError::required("providers.tokenAttributes.requireServiceAccount", ""));
        }
        if p.api_version != super::wire::V1 {
            errs.push(FieldError::forbidden(
                path,
                format!("tokenAttributes is only supported for {} API version", super::wire::V1),
            ));
        }
        if t.require_service_account == Some(false) && !t.required_service_account_annotation_keys.is_empty() {
            errs.push(FieldError::forbidden(
                "providers.tokenAttributes.requiredServiceAccountAnnotationKeys",
                "requireServiceAccount cannot be false when requiredServiceAccountAnnotationKeys is set",
            ));
        }
        annotation_keys(
            "providers.tokenAttributes.requiredServiceAccountAnnotationKeys",
            &t.required_service_account_annotation_keys,
            &mut errs,
        );
        annotation_keys(
            "providers.tokenAttributes.optionalServiceAccountAnnotationKeys",
            &t.optional_service_account_annotation_keys,
            &mut errs,
        );
        let required: BTreeSet<&str> = t.required_service_account_annotation_keys.iter().map(String::as_str).collect();
        let optional: BTreeSet<&str> = t.optional_service_account_annotation_keys.iter().map(String::as_str).collect();
        let both: Vec<String> = required.intersection(&optional).map(|k| quote(k)).collect();
        if !both.is_empty() {
            errs.push(FieldError::invalid_rendered(
                path,
                format!("[{}]", both.join(",")),
                "annotation keys cannot be both required and optional",
            ));
        }
        match &t.cache_type {
            super::TokenCacheType::Unset => errs.push(FieldError::required(
                "providers.tokenAttributes.cacheType",
                format!(
                    "cacheType is required to be set when tokenAttributes is specified. Supported values are: {}",
                    CACHE_TYPES.join(", ")
                ),
            )),
            super::TokenCacheType::Unsupported(other) => {
                errs.push(FieldError::not_supported("providers.tokenAttributes.cacheType", other, &CACHE_TYPES))
            }
            super::TokenCacheType::ServiceAccount | super::TokenCacheType::Token => {}
        }
    }
    FieldErrors(errs)
}

/// Annotation keys: qualified names once lowercased, no duplicates (case-sensitive).
fn annotation_keys(path: &str, keys: &[String], errs: &mut Vec<FieldError>) {
    let mut seen = std::collections::HashSet::new();
    for k in keys {
        for msg in is_qualified_name(&k.to_lowercase()) {
            errs.push(FieldError::invalid(path, k, msg));
        }
        if !seen.insert(k.as_str()) {
            errs.push(FieldError::duplicate(path, k));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::config::{CredentialProvider, ServiceAccountTokenAttributes};
    use super::*;
    use crate::duration::GoDuration;

    fn provider(name: &str) -> CredentialProvider {
        CredentialProvider {
            name: name.into(),
            match_images: vec!["*.registry.example".into()],
            default_cache_duration: Some(GoDuration::from_secs(300)),
            api_version: super::super::wire::V1.into(),
            ..Default::default()
        }
    }

    fn errors(providers: Vec<CredentialProvider>, gate: bool) -> Vec<String> {
        validate(&CredentialProviderConfig { providers }, gate).0.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn a_good_config_passes() {
        assert!(errors(vec![provider("a"), provider("b")], true).is_empty());
    }

    #[test]
    fn names_versions_images_and_durations() {
        assert_eq!(errors(vec![], true), ["providers: Required value: at least 1 item in plugins is required"]);
        let mut p = provider("a/b c");
        p.api_version = "credentialprovider.kubelet.k8s.io/v2".into();
        p.match_images = vec!["%invalid%".into()];
        p.default_cache_duration = Some(GoDuration::from_secs(-60));
        assert_eq!(
            errors(vec![p, provider("."), provider(".."), provider("x"), provider("x")], true),
            [
                r#"providers.name: Invalid value: "a/b c": provider name cannot contain '/'"#,
                r#"providers.name: Invalid value: "a/b c": provider name cannot contain spaces"#,
                r#"providers.apiVersion: Unsupported value: "credentialprovider.kubelet.k8s.io/v2": supported values: "credentialprovider.kubelet.k8s.io/v1", "credentialprovider.kubelet.k8s.io/v1alpha1", "credentialprovider.kubelet.k8s.io/v1beta1""#,
                r#"providers.matchImages: Invalid value: "%invalid%": match image is invalid: parse "https://%invalid%": invalid URL escape "%in""#,
                r#"providers.defaultCacheDuration: Invalid value: "-1m0s": must be greater than or equal to 0"#,
                r#"providers.name: Invalid value: ".": provider name cannot be '.'"#,
                r#"providers.name: Invalid value: "..": provider name cannot be '..'"#,
                r#"providers.name: Duplicate value: "x""#,
            ]
        );
        let mut q = provider("q");
        q.api_version.clear();
        q.match_images.clear();
        q.default_cache_duration = None;
        assert_eq!(
            errors(vec![q], true),
            [
                "providers.apiVersion: Required value",
                "providers.matchImages: Required value: at least 1 item in matchImages is required",
                "providers.defaultCacheDuration: Required value",
            ]
        );
        let mut zero = provider("z");
        zero.default_cache_duration = Some(GoDuration(0));
        assert!(errors(vec![zero], true).is_empty(), "zero is a valid cache duration");
    }

    #[test]
    fn token_attributes_rules() {
        let mut p = provider("sa");
        p.api_version = super::super::wire::V1BETA1.into();
        p.token_attributes = Some(ServiceAccountTokenAttributes {
            service_account_token_audience: String::new(),
            cache_type: "Pod".into(),
            require_service_account: Some(false),
            required_service_account_annotation_keys: vec![
                "Example.com/Role".into(),
                "bad key".into(),
                "k".into(),
                "k".into(),
            ],
            optional_service_account_annotation_keys: vec!["k".into()],
        });
        let got = errors(vec![p], false);
        assert_eq!(
            got[0],
            "providers.tokenAttributes: Forbidden: tokenAttributes is not supported when KubeletServiceAccountTokenForCredentialProviders feature gate is disabled"
        );
        assert_eq!(got[1], "providers.tokenAttributes.serviceAccountTokenAudience: Required value");
        assert_eq!(
            got[2],
            "providers.tokenAttributes: Forbidden: tokenAttributes is only supported for credentialprovider.kubelet.k8s.io/v1 API version"
        );
        assert_eq!(
            got[3],
            "providers.tokenAttributes.requiredServiceAccountAnnotationKeys: Forbidden: requireServiceAccount cannot be false when requiredServiceAccountAnnotationKeys is set"
        );
        assert!(got[4].starts_with(r#"providers.tokenAttributes.requiredServiceAccountAnnotationKeys: Invalid value: "bad key": name part must consist of alphanumeric characters"#), "{}", got[4]);
        assert_eq!(got[5], r#"providers.tokenAttributes.requiredServiceAccountAnnotationKeys: Duplicate value: "k""#);
        assert_eq!(
            got[6],
            r#"providers.tokenAttributes: Invalid value: ["k"]: annotation keys cannot be both required and optional"#
        );
        assert_eq!(
            got[7],
            r#"providers.tokenAttributes.cacheType: Unsupported value: "Pod": supported values: "ServiceAccount", "Token""#
        );
        assert_eq!(got.len(), 8, "{got:#?}");

        let mut q = provider("q");
        q.token_attributes =
            Some(ServiceAccountTokenAttributes { service_account_token_audience: "aud".into(), ..Default::default() });
        assert_eq!(
            errors(vec![q], true),
            [
                "providers.tokenAttributes.requireServiceAccount: Required value",
                "providers.tokenAttributes.cacheType: Required value: cacheType is required to be set when tokenAttributes is specified. Supported values are: ServiceAccount, Token",
            ]
        );
    }
}
