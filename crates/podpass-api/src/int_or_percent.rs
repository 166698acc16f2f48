//! apimachinery's IntOrString as the workload fields use it (`maxSurge`, `maxUnavailable`):
//! an absolute count or a percentage of a total (`intstr.GetScaledValueFromIntOrPercent`),
//! and its validation (`ValidatePositiveIntOrPercent`, `IsNotMoreThan100Percent`).

/// A count or a percentage, as it was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IntOrPercent<'a> {
    /// An absolute count.
    Int(i32),
    /// A string, valid when it is digits followed by `%`.
    String(&'a str),
}

/// A string that is not a percentage.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid value for IntOrString: invalid value {0:?}: not a percentage")]
pub struct NotAPercent(pub String);

/// What `ValidatePositiveIntOrPercent` says of a string that is not `[0-9]+%`.
pub const PERCENT_FORMAT: &str = "a valid percent string must be a numeric string followed by an ending '%' (e.g. '1%',  or '93%', regex used for validation is '[0-9]+%')";

impl IntOrPercent<'_> {
    /// The percentage of a `[0-9]+%` string (apimachinery `IsValidPercent`), else `None`.
    pub fn percent(self) -> Option<i32> {
        let IntOrPercent::String(s) = self else { return None };
        let digits = s.strip_suffix('%')?;
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        digits.parse().ok()
    }

    /// The number as written: the count, or the percentage unscaled (`getIntOrPercentValue`).
    pub fn value(self) -> Result<i32, NotAPercent> {
        match self {
            IntOrPercent::Int(n) => Ok(n),
            IntOrPercent::String(s) => self.percent().ok_or_else(|| NotAPercent(s.to_owned())),
        }
    }

    /// The count this stands for out of `total`: a percentage rounded up or down
    /// (`GetScaledValueFromIntOrPercent`).
    pub fn scaled(self, total: i32, round_up: bool) -> Result<i32, NotAPercent> {
        let n = self.value()?;
        if let IntOrPercent::Int(_) = self {
            return Ok(n);
        }
        let product = i64::from(n) * i64::from(total);
        let scaled = if round_up { (product + 99).div_euclid(100) } else { product.div_euclid(100) };
        Ok(i32::try_from(scaled).unwrap_or(i32::MAX))
    }

    /// `ValidatePositiveIntOrPercent` and, with `at_most_100`, `IsNotMoreThan100Percent`:
    /// the reasons `field` is invalid, in upstream's words (`field: Invalid value: …`).
    pub fn errors(self, field: &str, at_most_100: bool) -> Vec<String> {
        let shown = match self {
            IntOrPercent::Int(n) => n.to_string(),
            IntOrPercent::String(s) => crate::validation::quote(s),
        };
        let mut errors = Vec::new();
        match self {
            IntOrPercent::String(_) => match self.percent() {
                None => errors.push(format!("{field}: Invalid value: {shown}: {PERCENT_FORMAT}")),
                Some(p) if at_most_100 && p > 100 => {
                    errors.push(format!("{field}: Invalid value: {shown}: must not be greater than 100%"));
                }
                Some(_) => {}
            },
            IntOrPercent::Int(n) if n < 0 => {
                errors.push(format!("{field}: Invalid value: {n}: must be greater than or equal to 0"));
            }
            IntOrPercent::Int(_) => {}
        }
        errors
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentages_scale_up_or_down_as_upstream() {
        assert_eq!(IntOrPercent::String("25%").scaled(10, true), Ok(3));
        assert_eq!(IntOrPercent::String("25%").scaled(10, false), Ok(2));
        assert_eq!(IntOrPercent::String("25%").scaled(0, true), Ok(0));
        assert_eq!(IntOrPercent::String("100%").scaled(7, false), Ok(7));
        assert_eq!(IntOrPercent::Int(4).scaled(10, true), Ok(4));
        assert!(IntOrPercent::String("a%").scaled(10, true).is_err());
        assert!(IntOrPercent::String("25").scaled(10, true).is_err());
        assert!(IntOrPercent::String("%").scaled(10, true).is_err());
    }

    #[test]
    fn invalid_values_are_named_in_upstreams_words() {
        assert!(IntOrPercent::String("10%").errors("f", true).is_empty());
        assert_eq!(
            IntOrPercent::String("110%").errors("f", true),
            ["f: Invalid value: \"110%\": must not be greater than 100%"]
        );
        assert!(IntOrPercent::String("110%").errors("f", false).is_empty());
        assert_eq!(
            IntOrPercent::Int(-1).errors("f", true),
            ["f: Invalid value: -1: must be greater than or equal to 0"]
        );
        let e = IntOrPercent::String("-1%").errors("f", true);
        assert!(e[0].ends_with(PERCENT_FORMAT), "{e:?}");
    }
}
