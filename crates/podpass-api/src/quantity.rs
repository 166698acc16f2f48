//! `resource.Quantity` strings (`250m`, `128Mi`, `1.5G`, `2e3`) read as numbers, as
//! apimachinery's `ParseQuantity` accepts them: a signed decimal, then a binary suffix
//! (Ki … Ei), a decimal suffix (n u m "" k M G T P E) or a decimal exponent (e/E).

/// A quantity that is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$': {0:?}")]
pub struct QuantityError(pub String);

/// The quantity's value multiplied by 1000 (milli-units: CPU millicores, or bytes × 1000),
/// rounded up as the kubelet's `MilliValue`; an error past ±9.2e15 units.
pub fn parse_milli(s: &str) -> Result<i128, QuantityError> {
    let err = || QuantityError(s.to_owned());
    let split = s.find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-')).unwrap_or(s.len());
    let (number, suffix) = s.split_at(split);
    let (negative, digits) = match number.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, number.strip_prefix('+').unwrap_or(number)),
    };
    let (whole, frac) = digits.split_once('.').unwrap_or((digits, ""));
    if (whole.is_empty() && frac.is_empty())
        || !whole.bytes().all(|b| b.is_ascii_digit())
        || !frac.bytes().all(|b| b.is_ascii_digit())
        || whole.len() + frac.len() > 30
    {
        return Err(err());
    }
    // The number as an integer of `frac.len()` decimal places, times 1000.
    let mantissa: i128 = format!("{whole}{frac}").parse().map_err(|_| err())?;
    let (mult, div_pow10): (i128, u32) = match suffix {
        "" => (1, 0),
        "n" => (1, 9),
        "u" => (1, 6),
        "m" => (1, 3),
        "k" => (1_000, 0),
        "M" => (1_000_000, 0),
        "G" => (1_000_000_000, 0),
        "T" => (1_000_000_000_000, 0),
        "P" => (1_000_000_000_000_000, 0),
        "E" => (1_000_000_000_000_000_000, 0),
        "Ki" => (1 << 10, 0),
        "Mi" => (1 << 20, 0),
        "Gi" => (1 << 30, 0),
        "Ti" => (1 << 40, 0),
        "Pi" => (1 << 50, 0),
        "Ei" => (1 << 60, 0),
        exp if exp.starts_with(['e', 'E']) => {
            let e: i32 = exp[1..].parse().map_err(|_| err())?;
            if !(-30..=30).contains(&e) {
                return Err(err());
            }
            if e >= 0 { (10_i128.pow(e.unsigned_abs()), 0) } else { (1, e.unsigned_abs()) }
        }
        _ => return Err(err()),
    };
    let scale = u32::try_from(frac.len()).map_err(|_| err())? + div_pow10;
    let numerator = mantissa.checked_mul(mult).and_then(|v| v.checked_mul(1000)).ok_or_else(err)?;
    let denominator = 10_i128.checked_pow(scale).ok_or_else(err)?;
    let value = numerator.checked_add(denominator - 1).ok_or_else(err)? / denominator;
    if value > 9_223_372_036_854_775 * 1000 {
        return Err(err());
    }
    Ok(if negative { -value } else { value })
}

/// A whole amount as `resource.Quantity` prints a BinarySI value: the largest binary
/// suffix that leaves a whole number (`30Mi`), else the number (`1000`).
pub fn format_binary_si(n: u64) -> String {
    for (suffix, shift) in [("Ei", 60), ("Pi", 50), ("Ti", 40), ("Gi", 30), ("Mi", 20), ("Ki", 10)] {
        if n != 0 && n.trailing_zeros() >= shift {
            return format!("{}{suffix}", n >> shift);
        }
    }
    n.to_string()
}

/// A whole amount as `resource.Quantity` prints a DecimalSI value (`16k`, `1500`).
pub fn format_decimal_si(n: u64) -> String {
    const FACTORS: [(&str, u64); 6] = [
        ("E", 1_000_000_000_000_000_000),
        ("P", 1_000_000_000_000_000),
        ("T", 1_000_000_000_000),
        ("G", 1_000_000_000),
        ("M", 1_000_000),
        ("k", 1_000),
    ];
    for (suffix, factor) in FACTORS {
        if n != 0 && n.is_multiple_of(factor) {
            return format!("{}{suffix}", n / factor);
        }
    }
    n.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_amounts_print_as_resource_quantity_does() {
        assert_eq!(
            (format_binary_si(30 << 20), format_binary_si(1000), format_binary_si(0)),
            ("30Mi".into(), "1000".into(), "0".into())
        );
        assert_eq!(format_binary_si(32_803_604 * 1024), "32803604Ki");
        assert_eq!(
            (format_decimal_si(16_000), format_decimal_si(1500), format_decimal_si(2_000_000)),
            ("16k".into(), "1500".into(), "2M".into())
        );
    }

    #[test]
    fn quantities_read_as_apimachinery_reads_them() {
        assert_eq!(parse_milli("250m"), Ok(250));
        assert_eq!(parse_milli("2"), Ok(2000));
        assert_eq!(parse_milli("0.5"), Ok(500));
        assert_eq!(parse_milli("128Mi"), Ok(128 * 1024 * 1024 * 1000));
        assert_eq!(parse_milli("1.5G"), Ok(1_500_000_000 * 1000));
        assert_eq!(parse_milli("2e3"), Ok(2_000_000));
        assert_eq!(parse_milli("1n"), Ok(1), "rounded up");
        assert_eq!(parse_milli("-1"), Ok(-1000));
        for bad in ["", "Mi", "1.2.3", "1Qi", "1e99", "abc", "1 Mi"] {
            assert!(parse_milli(bad).is_err(), "{bad}");
        }
    }
}
