//! LimitRange (pkg/registry/core/limitrange): `spec.limits` validated as
//! `ValidateLimitRange` (known types, quantities that parse and are not negative, `min` ≤
//! `defaultRequest` ≤ `default` ≤ `max`). What a LimitRange does to a pod is LimitRanger
//! admission's ([`crate::server::rest::admission::limit_ranger`]).

use serde_json::Value;

use super::{Strategy, invalid};
use crate::field::Field;
use crate::server::status::StatusError;

/// The LimitRange strategy.
pub(crate) struct LimitRangeStrategy;

/// The registered strategy.
pub(crate) static LIMIT_RANGE: LimitRangeStrategy = LimitRangeStrategy;

fn milli(v: Option<&Value>) -> Option<i128> {
    v.and_then(Value::as_str).and_then(|s| podpass_api::quantity::parse_milli(s).ok())
}

fn spec_errors(object: &Value) -> Vec<String> {
    let quote = podpass_api::validation::quote;
    let mut errors = Vec::new();
    for (i, item) in object.field("/spec/limits").and_then(Value::as_array).into_iter().flatten().enumerate() {
        let at = format!("spec.limits[{i}]");
        let kind = item.get("type").and_then(Value::as_str).unwrap_or_default();
        if !matches!(kind, "Container" | "Pod" | "PersistentVolumeClaim") {
            errors.push(format!("{at}.type: Unsupported value: {}", quote(kind)));
        }
        for field in ["max", "min", "default", "defaultRequest", "maxLimitRequestRatio"] {
            for (name, v) in item.get(field).and_then(Value::as_object).into_iter().flatten() {
                let text = v.as_str().unwrap_or_default();
                match podpass_api::quantity::parse_milli(text) {
                    Ok(m) if m < 0 => errors.push(format!(
                        "{at}.{field}[{name}]: Invalid value: {}: must be greater than or equal to 0",
                        quote(text)
                    )),
                    Ok(_) => {}
                    Err(e) => errors.push(format!("{at}.{field}[{name}]: Invalid value: {}: {e}", quote(text))),
                }
            }
        }
        if kind == "Pod" && item.get("default").is_some_and(|d| d.as_object().is_some_and(|m| !m.is_empty())) {
            errors.push(format!("{at}.default: Forbidden: may not be specified when `type` is 'Pod'"));
        }
        // min <= defaultRequest <= default <= max, per resource.
        let order = [("min", "defaultRequest"), ("defaultRequest", "default"), ("min", "max"), ("default", "max")];
        for (low, high) in order {
            for (name, _) in item.get(low).and_then(Value::as_object).into_iter().flatten() {
                let (l, h) =
                    (milli(item.pointer(&format!("/{low}/{name}"))), milli(item.pointer(&format!("/{high}/{name}"))));
                if let (Some(l), Some(h)) = (l, h)
                    && l > h
                {
                    let shown = item.pointer(&format!("/{low}/{name}")).and_then(Value::as_str).unwrap_or_default();
                    errors.push(format!(
                        "{at}.{low}[{name}]: Invalid value: {}: {low} value {shown} is greater than {high} value {}",
                        quote(shown),
                        item.pointer(&format!("/{high}/{name}")).and_then(Value::as_str).unwrap_or_default()
                    ));
                }
            }
        }
    }
    errors
}

impl Strategy for LimitRangeStrategy {
    fn validate(&self, name: &str, object: &Value) -> Result<(), StatusError> {
        invalid("LimitRange", name, spec_errors(object))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn limits_are_validated_as_upstream() {
        let lr = json!({"spec": {"limits": [
            {"type": "Container", "min": {"cpu": "500m"}, "max": {"cpu": "250m"}, "default": {"memory": "lots"}},
            {"type": "Pod", "default": {"cpu": "1"}},
            {"type": "Widget"}]}});
        let errors = spec_errors(&lr);
        assert!(
            errors.iter().any(|e| e.starts_with(r#"spec.limits[0].default[memory]: Invalid value: "lots""#)),
            "{errors:?}"
        );
        assert!(
            errors.iter().any(|e| e
                == r#"spec.limits[0].min[cpu]: Invalid value: "500m": min value 500m is greater than max value 250m"#),
            "{errors:?}"
        );
        assert!(
            errors.iter().any(|e| e == "spec.limits[1].default: Forbidden: may not be specified when `type` is 'Pod'"),
            "{errors:?}"
        );
        assert!(errors.iter().any(|e| e == r#"spec.limits[2].type: Unsupported value: "Widget""#), "{errors:?}");
    }
}
