//! `metav1.Time`: RFC 3339 timestamps in UTC with second precision (`2026-11-22T10:00:00Z`).

/// Whether `s` has Go's `time.RFC3339` layout: `YYYY-MM-DDTHH:MM:SS[.frac](Z|±hh:mm)`.
/// jiff's parser also takes forms upstream refuses (a space for `T`, no offset), so the
/// shape is checked first and the calendar is jiff's.
fn rfc3339_shape(s: &str) -> bool {
    let b = s.as_bytes();
    let digits = |r: std::ops::Range<usize>| b.get(r).is_some_and(|d| d.iter().all(u8::is_ascii_digit));
    if b.len() < 20
        || !(digits(0..4) && digits(5..7) && digits(8..10) && digits(11..13) && digits(14..16) && digits(17..19))
        || b[4] != b'-'
        || b[7] != b'-'
        || !matches!(b[10], b'T' | b't')
        || b[13] != b':'
        || b[16] != b':'
    {
        return false;
    }
    let mut rest = &s[19..];
    if let Some(frac) = rest.strip_prefix('.') {
        let n = frac.bytes().take_while(u8::is_ascii_digit).count();
        if n == 0 {
            return false;
        }
        rest = &frac[n..];
    }
    match rest.as_bytes() {
        [b'Z' | b'z'] => true,
        [b'+' | b'-', h1, h2, b':', m1, m2] => [h1, h2, m1, m2].iter().all(|c| c.is_ascii_digit()),
        _ => false,
    }
}

/// Parses an RFC 3339 timestamp (`Z` or `±hh:mm` offset, optional fraction) to Unix seconds.
pub fn parse_rfc3339(s: &str) -> Option<i64> {
    if !rfc3339_shape(s) {
        return None;
    }
    s.parse::<jiff::Timestamp>().ok().map(jiff::Timestamp::as_second)
}

/// Formats Unix seconds as `metav1.Time` does: `YYYY-MM-DDTHH:MM:SSZ` (clamped to jiff's
/// range, within the years 0001–9999 RFC 3339 can write).
pub fn format_rfc3339(secs: i64) -> String {
    let t = jiff::Timestamp::from_second(secs).unwrap_or(if secs < 0 {
        jiff::Timestamp::MIN
    } else {
        jiff::Timestamp::MAX
    });
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// The UTC calendar date (year, month, day) of Unix seconds.
pub fn utc_date(secs: i64) -> (i16, i8, i8) {
    let t = jiff::Timestamp::from_second(secs).unwrap_or(jiff::Timestamp::UNIX_EPOCH);
    let d = t.to_zoned(jiff::tz::TimeZone::UTC).date();
    (d.year(), d.month(), d.day())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_offsets() {
        for t in [0, 951_782_400, 1_795_344_902, 4_102_444_800] {
            assert_eq!(parse_rfc3339(&format_rfc3339(t)), Some(t));
        }
        assert_eq!(format_rfc3339(1_795_344_902), "2026-11-22T10:55:02Z");
        assert_eq!(utc_date(0), (1970, 1, 1));
        assert_eq!(utc_date(11_016 * 86_400 + 86_399), (2000, 2, 29));
        assert_eq!(parse_rfc3339("2026-11-22T12:55:02.123+02:00"), Some(1_795_344_902));
        assert_eq!(parse_rfc3339("2026-11-22t10:55:02z"), Some(1_795_344_902));
        assert_eq!(format_rfc3339(i64::MAX), "9999-12-30T22:00:00Z", "jiff's latest instant");
        for bad in ["2026-13-01T00:00:00Z", "2026-02-30T00:00:00Z", "2026-11-22 10:55:02Z", "2026-11-22T10:55:02", "x"]
        {
            assert_eq!(parse_rfc3339(bad), None, "{bad}");
        }
    }
}
