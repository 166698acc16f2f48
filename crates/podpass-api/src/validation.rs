//! Field errors worded as apimachinery's `field.Error` and `utilerrors.Aggregate`, and the
//! content checks (`IsLabelKey`/`IsQualifiedName`, `IsDNS1123Subdomain`) whose messages
//! users see in them.

use std::fmt;

/// What went wrong with a field (`field.ErrorType`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FieldErrorKind {
    /// `Required value`.
    Required,
    /// `Invalid value: <value>`.
    Invalid(String),
    /// `Duplicate value: <value>`.
    Duplicate(String),
    /// `Unsupported value: <value>: supported values: ...` (the list is in the detail).
    Unsupported(String),
    /// `Forbidden`.
    Forbidden,
    /// `Not found: <value>`.
    NotFound(String),
    /// `Too many: <count>`.
    TooMany(usize),
}

/// One field error: `<path>: <kind>[: <detail>]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// Field path, dotted (`providers.tokenAttributes.cacheType`).
    pub path: String,
    /// The error type and offending value, already rendered as Go renders it.
    pub kind: FieldErrorKind,
    /// Explanation.
    pub detail: String,
}

/// A Go string literal as `%q` prints it (close enough for the ASCII values configs hold).
pub fn quote(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| format!("\"{s}\""))
}

impl FieldError {
    /// `field.Required`.
    pub fn required(path: &str, detail: impl Into<String>) -> Self {
        Self { path: path.into(), kind: FieldErrorKind::Required, detail: detail.into() }
    }

    /// `field.Invalid` of a string value.
    pub fn invalid(path: &str, value: &str, detail: impl Into<String>) -> Self {
        Self { path: path.into(), kind: FieldErrorKind::Invalid(quote(value)), detail: detail.into() }
    }

    /// `field.Invalid` of a value already rendered (e.g. a list `["a","b"]`).
    pub fn invalid_rendered(path: &str, rendered: String, detail: impl Into<String>) -> Self {
        Self { path: path.into(), kind: FieldErrorKind::Invalid(rendered), detail: detail.into() }
    }

    /// `field.Duplicate` of a string value.
    pub fn duplicate(path: &str, value: &str) -> Self {
        Self { path: path.into(), kind: FieldErrorKind::Duplicate(quote(value)), detail: String::new() }
    }

    /// `field.NotSupported`: the supported values are listed sorted and quoted.
    pub fn not_supported(path: &str, value: &str, supported: &[&str]) -> Self {
        let mut list: Vec<String> = supported.iter().map(|s| quote(s)).collect();
        list.sort();
        Self {
            path: path.into(),
            kind: FieldErrorKind::Unsupported(quote(value)),
            detail: format!("supported values: {}", list.join(", ")),
        }
    }

    /// `field.NotFound` of a string value.
    pub fn not_found(path: &str, value: &str) -> Self {
        Self { path: path.into(), kind: FieldErrorKind::NotFound(quote(value)), detail: String::new() }
    }

    /// `field.Forbidden`.
    pub fn forbidden(path: &str, detail: impl Into<String>) -> Self {
        Self { path: path.into(), kind: FieldErrorKind::Forbidden, detail: detail.into() }
    }

    /// `field.Invalid` whose value is not shown (`Invalid value: must be a list`).
    pub fn invalid_unshown(path: &str, detail: impl Into<String>) -> Self {
        Self { path: path.into(), kind: FieldErrorKind::Invalid(String::new()), detail: detail.into() }
    }

    /// `field.TooMany`: `count` items where at most `max` are allowed.
    pub fn too_many(path: &str, count: usize, max: usize) -> Self {
        Self {
            path: path.into(),
            kind: FieldErrorKind::TooMany(count),
            detail: format!("must have at most {max} items"),
        }
    }

    /// `field.NotSupported` with the supported values in the order given (some upstream
    /// messages list them unsorted).
    pub fn not_supported_in_order(path: &str, value: &str, supported: &[&str]) -> Self {
        let list: Vec<String> = supported.iter().map(|s| quote(s)).collect();
        Self {
            path: path.into(),
            kind: FieldErrorKind::Unsupported(quote(value)),
            detail: format!("supported values: {}", list.join(", ")),
        }
    }
}

impl std::error::Error for FieldError {}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (kind, value) = match &self.kind {
            FieldErrorKind::Required => ("Required value", None),
            FieldErrorKind::Invalid(v) => ("Invalid value", Some(v)),
            FieldErrorKind::Duplicate(v) => ("Duplicate value", Some(v)),
            FieldErrorKind::Unsupported(v) => ("Unsupported value", Some(v)),
            FieldErrorKind::Forbidden => ("Forbidden", None),
            FieldErrorKind::NotFound(v) => ("Not found", Some(v)),
            FieldErrorKind::TooMany(n) => {
                write!(f, "{}: Too many: {n}", self.path)?;
                if !self.detail.is_empty() {
                    write!(f, ": {}", self.detail)?;
                }
                return Ok(());
            }
        };
        write!(f, "{}: {kind}", self.path)?;
        if let Some(v) = value.filter(|v| !v.is_empty()) {
            write!(f, ": {v}")?;
        }
        if !self.detail.is_empty() {
            write!(f, ": {}", self.detail)?;
        }
        Ok(())
    }
}

/// Errors accumulated by a validation; prints as `utilerrors.NewAggregate` does (one error
/// bare, several as `[e1, e2]`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FieldErrors(pub Vec<FieldError>);

impl FieldErrors {
    /// No errors.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Display for FieldErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0.as_slice() {
            [] => Ok(()),
            [one] => write!(f, "{one}"),
            many => {
                f.write_str("[")?;
                for (i, e) in many.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{e}")?;
                }
                f.write_str("]")
            }
        }
    }
}

impl std::error::Error for FieldErrors {}

const LABEL_KEY_MSG: &str =
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const LABEL_KEY_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const DNS1123_SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character";
const DNS1123_SUBDOMAIN_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";

/// apimachinery `RegexError`.
fn regex_error(msg: &str, re: &str, examples: &[&str]) -> String {
    if examples.is_empty() {
        return format!("{msg} (regex used for validation is '{re}')");
    }
    let mut out = format!("{msg} (e.g. ");
    for (i, e) in examples.iter().enumerate() {
        if i > 0 {
            out.push_str(" or ");
        }
        out.push_str(&format!("'{e}', "));
    }
    out.push_str(&format!("regex used for validation is '{re}')"));
    out
}

fn is_label_key_name(name: &str) -> bool {
    let b = name.as_bytes();
    let alnum = |c: &u8| c.is_ascii_alphanumeric();
    match b {
        [] => false,
        [one] => alnum(one),
        [first, middle @ .., last] => {
            alnum(first) && alnum(last) && middle.iter().all(|c| alnum(c) || matches!(c, b'-' | b'_' | b'.'))
        }
    }
}

fn is_dns1123_label(label: &str) -> bool {
    let b = label.as_bytes();
    let ok = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    match b {
        [] => false,
        [one] => ok(one),
        [first, middle @ .., last] => ok(first) && ok(last) && middle.iter().all(|c| ok(c) || *c == b'-'),
    }
}

/// `IsDNS1123Subdomain`.
pub fn is_dns1123_subdomain(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > 253 {
        errs.push("must be no more than 253 bytes".to_owned());
    }
    if !value.split('.').all(is_dns1123_label) {
        errs.push(regex_error(DNS1123_SUBDOMAIN_MSG, DNS1123_SUBDOMAIN_FMT, &["example.com"]));
    }
    errs
}

/// `IsQualifiedName` (= `IsLabelKey`), the rule for annotation and label keys.
pub fn is_qualified_name(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    let parts: Vec<&str> = value.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errs.push("prefix part must be non-empty".to_owned());
            } else {
                errs.extend(is_dns1123_subdomain(prefix).into_iter().map(|m| format!("prefix part {m}")));
            }
            *name
        }
        _ => {
            errs.push(format!(
                "a valid label key {} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                regex_error(LABEL_KEY_MSG, LABEL_KEY_FMT, &["MyName", "my.name", "123-abc"])
            ));
            return errs;
        }
    };
    if name.is_empty() {
        errs.push("name part must be non-empty".to_owned());
    } else if name.len() > 63 {
        errs.push("name part must be no more than 63 bytes".to_owned());
    }
    if !is_label_key_name(name) {
        errs.push(format!(
            "name part {}",
            regex_error(LABEL_KEY_MSG, LABEL_KEY_FMT, &["MyName", "my.name", "123-abc"])
        ));
    }
    errs
}

/// The capabilities Pod Security's baseline lets a container add (the container runtime's
/// default set, `pkg/security/podsecurity` "capabilities_baseline"): admission allows no
/// others, and the node honours no others in `capabilities.add`.
pub const BASELINE_CAPABILITIES: [&str; 13] = [
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_like_field_errors_and_aggregates() {
        let e = FieldError::invalid("providers.name", "a/b", "provider name cannot contain '/'");
        assert_eq!(e.to_string(), r#"providers.name: Invalid value: "a/b": provider name cannot contain '/'"#);
        let r = FieldError::required("providers.apiVersion", "");
        assert_eq!(r.to_string(), "providers.apiVersion: Required value");
        let u = FieldError::not_supported("x", "v", &["b", "a"]);
        assert_eq!(u.to_string(), r#"x: Unsupported value: "v": supported values: "a", "b""#);
        assert_eq!(FieldErrors(vec![r.clone()]).to_string(), r.to_string());
        assert_eq!(FieldErrors(vec![r.clone(), e.clone()]).to_string(), format!("[{r}, {e}]"));
        assert_eq!(FieldError::forbidden("p", "no").to_string(), "p: Forbidden: no");
        assert_eq!(FieldError::duplicate("p", "k").to_string(), r#"p: Duplicate value: "k""#);
    }

    #[test]
    fn qualified_names() {
        for ok in ["a", "example.com/key", "a.b-c_d", "x/y", "A1"] {
            assert!(is_qualified_name(ok).is_empty(), "{ok}");
        }
        assert_eq!(is_qualified_name("/x"), ["prefix part must be non-empty"]);
        assert_eq!(is_qualified_name("a/b/c").len(), 1);
        assert!(is_qualified_name("a/b/c")[0].starts_with("a valid label key must consist of"));
        let bad = is_qualified_name("Bad_Prefix/-x");
        assert_eq!(bad.len(), 2);
        assert!(bad[0].starts_with("prefix part a lowercase RFC 1123 subdomain"));
        assert!(bad[1].starts_with("name part must consist of alphanumeric characters"));
        assert!(bad[1].ends_with("regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"));
        assert_eq!(is_qualified_name("x/").len(), 2, "empty name: non-empty and regex errors");
        let long = "a".repeat(64);
        assert_eq!(is_qualified_name(&long), ["name part must be no more than 63 bytes"]);
    }
}
