//! LimitRange (pkg/registry/core/limitrange): `spec.limits` validated as
//! `ValidateLimitRange` (known types, quantities that parse and are not negative, `min` ≤
//! `defaultRequest` ≤ `default` ≤ `max`). What a LimitRange does to a pod is LimitRanger
//! admission's ([`crate::server::rest::admission::limit_ranger`]).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{LimitRange, LimitRangeItem};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde_json::Value;

use super::types::read;
use super::{Strategy, invalid};
use crate::server::status::StatusError;

/// The LimitRange strategy.
pub(crate) struct LimitRangeStrategy;

/// The registered strategy.
pub(crate) static LIMIT_RANGE: LimitRangeStrategy = LimitRangeStrategy;

/// The resource.
pub(crate) const RESOURCE: super::Resource = super::Resource::stored(
    super::Names { group: "", kind: "LimitRange", plural: "limitranges", singular: "limitrange" },
    &LIMIT_RANGE,
    &super::types::TypeOf::<k8s_openapi::api::core::v1::LimitRange>::NEW,
)
.with_short_names(&["limits"]);

/// One of an item's maps of quantities, by its JSON name.
fn quantities<'a>(item: &'a LimitRangeItem, field: &str) -> Option<&'a BTreeMap<String, Quantity>> {
    match field {
        "max" => item.max.as_ref(),
        "min" => item.min.as_ref(),
        "default" => item.default.as_ref(),
        "defaultRequest" => item.default_request.as_ref(),
        "maxLimitRequestRatio" => item.max_limit_request_ratio.as_ref(),
        _ => None,
    }
}

/// `ValidateLimitRange`'s rules on `spec.limits`.
fn spec_errors(range: &LimitRange) -> Vec<String> {
    let quote = podpass_api::validation::quote;
    let mut errors = Vec::new();
    for (i, item) in range.spec.iter().flat_map(|s| &s.limits).enumerate() {
        let at = format!("spec.limits[{i}]");
        let kind = item.type_.as_str();
        if !matches!(kind, "Container" | "Pod" | "PersistentVolumeClaim") {
            errors.push(format!("{at}.type: Unsupported value: {}", quote(kind)));
        }
        for field in ["max", "min", "default", "defaultRequest", "maxLimitRequestRatio"] {
            for (name, quantity) in quantities(item, field).into_iter().flatten() {
                let text = quantity.0.as_str();
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
        if kind == "Pod" && item.default.as_ref().is_some_and(|d| !d.is_empty()) {
            errors.push(format!("{at}.default: Forbidden: may not be specified when `type` is 'Pod'"));
        }
        // min <= defaultRequest <= default <= max, per resource.
        let order = [("min", "defaultRequest"), ("defaultRequest", "default"), ("min", "max"), ("default", "max")];
        let milli = |q: &Quantity| podpass_api::quantity::parse_milli(&q.0).ok();
        for (low, high) in order {
            for (name, l) in quantities(item, low).into_iter().flatten() {
                let Some(h) = quantities(item, high).and_then(|m| m.get(name)) else { continue };
                if let (Some(lm), Some(hm)) = (milli(l), milli(h))
                    && lm > hm
                {
                    errors.push(format!(
                        "{at}.{low}[{name}]: Invalid value: {}: {low} value {} is greater than {high} value {}",
                        quote(&l.0),
                        l.0,
                        h.0
                    ));
                }
            }
        }
    }
    errors
}

impl Strategy for LimitRangeStrategy {
    fn validate(&self, name: &str, object: &Value) -> Result<(), StatusError> {
        invalid("LimitRange", name, spec_errors(&read(object)?))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    #[test]
    fn limits_are_validated_as_upstream() {
        let lr = json!({"spec": {"limits": [
            {"type": "Container", "min": {"cpu": "500m"}, "max": {"cpu": "250m"}, "default": {"memory": "lots"}},
            {"type": "Pod", "default": {"cpu": "1"}},
            {"type": "Widget"}]}});
        let errors = spec_errors(&read(&lr).unwrap());
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
