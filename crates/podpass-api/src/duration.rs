//! Go `time.Duration` text, as `metav1.Duration` carries it in JSON and YAML
//! (`time.ParseDuration` and `Duration.String`), in nanoseconds.

use std::fmt;

use thiserror::Error;

/// A duration in nanoseconds that parses and prints as Go's `time.Duration`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct GoDuration(pub i64);

/// Text that `time.ParseDuration` refuses (its message).
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum DurationError {
    /// Malformed.
    #[error("time: invalid duration {0:?}")]
    Invalid(String),
    /// A unit that is not one of ns, us, µs, ms, s, m, h.
    #[error("time: unknown unit {unit:?} in duration {text:?}")]
    UnknownUnit {
        /// The unit.
        unit: String,
        /// The whole text.
        text: String,
    },
    /// A number without a unit.
    #[error("time: missing unit in duration {0:?}")]
    MissingUnit(String),
}

const NANOS_PER: [(&str, u128); 9] = [
    ("ns", 1),
    ("us", 1_000),
    ("\u{b5}s", 1_000),
    ("\u{3bc}s", 1_000),
    ("ms", 1_000_000),
    ("s", 1_000_000_000),
    ("m", 60_000_000_000),
    ("h", 3_600_000_000_000),
    ("", 0),
];

impl GoDuration {
    /// From whole seconds.
    pub fn from_secs(secs: i64) -> Self {
        Self(secs.saturating_mul(1_000_000_000))
    }

    /// As a std duration; negative durations are `None`.
    pub fn to_std(self) -> Option<std::time::Duration> {
        u64::try_from(self.0).ok().map(std::time::Duration::from_nanos)
    }

    /// `time.ParseDuration`.
    pub fn parse(text: &str) -> Result<Self, DurationError> {
        let invalid = || DurationError::Invalid(text.to_owned());
        let (negative, mut rest) = match text.as_bytes().first() {
            Some(b'-') => (true, &text[1..]),
            Some(b'+') => (false, &text[1..]),
            _ => (false, text),
        };
        if rest == "0" {
            return Ok(Self(0));
        }
        if rest.is_empty() {
            return Err(invalid());
        }
        let mut total: u128 = 0;
        while !rest.is_empty() {
            let int_len = rest.bytes().take_while(u8::is_ascii_digit).count();
            let (int_part, after) = rest.split_at(int_len);
            let (frac_part, after) = match after.strip_prefix('.') {
                Some(a) => {
                    let n = a.bytes().take_while(u8::is_ascii_digit).count();
                    a.split_at(n)
                }
                None => ("", after),
            };
            if int_part.is_empty() && frac_part.is_empty() {
                return Err(invalid());
            }
            let unit_len = after.find(|c: char| c == '.' || c.is_ascii_digit()).unwrap_or(after.len());
            let (unit, after) = after.split_at(unit_len);
            if unit.is_empty() {
                return Err(DurationError::MissingUnit(text.to_owned()));
            }
            let scale = NANOS_PER
                .iter()
                .find(|(u, _)| *u == unit && !u.is_empty())
                .map(|(_, s)| *s)
                .ok_or_else(|| DurationError::UnknownUnit { unit: unit.to_owned(), text: text.to_owned() })?;
            let int: u128 = if int_part.is_empty() { 0 } else { int_part.parse().map_err(|_| invalid())? };
            let mut value = int.checked_mul(scale).ok_or_else(invalid)?;
            // Fractional digits beyond nanosecond precision are dropped, as Go does.
            let mut place = scale;
            for d in frac_part.bytes() {
                place /= 10;
                if place == 0 {
                    break;
                }
                value += u128::from(d - b'0') * place;
            }
            total = total.checked_add(value).ok_or_else(invalid)?;
            if total > i64::MAX as u128 + u128::from(negative) {
                return Err(invalid());
            }
            rest = after;
        }
        let total = total as i128;
        let signed = if negative { -total } else { total };
        i64::try_from(signed).map(Self).map_err(|_| invalid())
    }
}

impl std::str::FromStr for GoDuration {
    type Err = DurationError;
    /// [`GoDuration::parse`], for flag parsers.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Self::parse(text)
    }
}

impl fmt::Display for GoDuration {
    /// `Duration.String`: `1h2m3.5s`, `1.5ms`, `0s`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let negative = self.0 < 0;
        let mut u = self.0.unsigned_abs();
        let sign = if negative { "-" } else { "" };
        if u == 0 {
            return f.write_str("0s");
        }
        if u < 1_000_000_000 {
            let (unit, scale) = match u {
                0..1_000 => ("ns", 1u64),
                1_000..1_000_000 => ("\u{b5}s", 1_000),
                _ => ("ms", 1_000_000),
            };
            return write!(f, "{sign}{}{unit}", fraction(u, scale));
        }
        let hours = u / 3_600_000_000_000;
        u -= hours * 3_600_000_000_000;
        let minutes = u / 60_000_000_000;
        u -= minutes * 60_000_000_000;
        let seconds = fraction(u, 1_000_000_000);
        if hours > 0 {
            write!(f, "{sign}{hours}h{minutes}m{seconds}s")
        } else if minutes > 0 {
            write!(f, "{sign}{minutes}m{seconds}s")
        } else {
            write!(f, "{sign}{seconds}s")
        }
    }
}

/// `value / scale` with the fraction's trailing zeros removed (`1.5`, `2`).
fn fraction(value: u64, scale: u64) -> String {
    let whole = value / scale;
    let rem = value % scale;
    if rem == 0 {
        return whole.to_string();
    }
    let width = scale.ilog10() as usize;
    let digits = format!("{rem:0width$}");
    format!("{whole}.{}", digits.trim_end_matches('0'))
}

impl serde::Serialize for GoDuration {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for GoDuration {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        Self::parse(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_like_time_parse_duration() {
        let cases: &[(&str, i64)] = &[
            ("0", 0),
            ("5m", 300_000_000_000),
            ("1h30m", 5_400_000_000_000),
            ("-1m", -60_000_000_000),
            ("1.5s", 1_500_000_000),
            (".5s", 500_000_000),
            ("1.s", 1_000_000_000),
            ("100ms", 100_000_000),
            ("3us", 3_000),
            ("3\u{b5}s", 3_000),
            ("2h45m0.5s", 9_900_500_000_000),
            ("+10s", 10_000_000_000),
            ("0s", 0),
            ("9223372036854775807ns", i64::MAX),
            ("-9223372036854775808ns", i64::MIN),
        ];
        for (text, nanos) in cases {
            assert_eq!(GoDuration::parse(text), Ok(GoDuration(*nanos)), "{text}");
        }
    }

    #[test]
    fn refuses_with_go_messages() {
        assert_eq!(GoDuration::parse("").unwrap_err().to_string(), r#"time: invalid duration """#);
        assert_eq!(GoDuration::parse("5").unwrap_err().to_string(), r#"time: missing unit in duration "5""#);
        assert_eq!(GoDuration::parse("5d").unwrap_err().to_string(), r#"time: unknown unit "d" in duration "5d""#);
        assert_eq!(GoDuration::parse(".s").unwrap_err().to_string(), r#"time: invalid duration ".s""#);
        assert_eq!(GoDuration::parse("-").unwrap_err().to_string(), r#"time: invalid duration "-""#);
        assert!(GoDuration::parse("9223372036854775808ns").is_err());
    }

    #[test]
    fn prints_like_duration_string() {
        let cases: &[(i64, &str)] = &[
            (0, "0s"),
            (-60_000_000_000, "-1m0s"),
            (300_000_000_000, "5m0s"),
            (3_600_000_000_000, "1h0m0s"),
            (1_500_000_000, "1.5s"),
            (1_500_000, "1.5ms"),
            (1_000, "1\u{b5}s"),
            (999, "999ns"),
            (9_900_500_000_000, "2h45m0.5s"),
        ];
        for (nanos, text) in cases {
            assert_eq!(GoDuration(*nanos).to_string(), *text);
        }
    }
}
