//! CronJob schedules as kube-controller-manager reads them (robfig/cron v3 `ParseStandard`,
//! with the `TZ=`/`CRON_TZ=` prefix the controller adds for `spec.timeZone`): five fields —
//! minute, hour, day of month, month, day of week — each `*`, `?`, a value or name, a range
//! `a-b`, a step `/n`, or a list of those; the descriptors `@yearly` (`@annually`),
//! `@monthly`, `@weekly`, `@daily` (`@midnight`), `@hourly` and `@every <duration>`. When
//! both day fields are restricted a day matching either runs (cron's rule); when one is `*`
//! both must match. [`Schedule::next`] is robfig's `Next`: the first time after the given
//! one, in the schedule's zone, within five years.

use jiff::civil::{Date, DateTime};
use jiff::tz::TimeZone;
use jiff::{Timestamp, ToSpan};

/// A schedule that does not parse, in robfig's words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ScheduleError(pub String);

/// A parsed schedule.
#[derive(Debug, Clone)]
pub enum Schedule {
    /// Five cron fields as bit sets.
    Fields {
        /// Minutes 0–59.
        minute: u64,
        /// Hours 0–23.
        hour: u64,
        /// Days of the month 1–31.
        dom: u64,
        /// Months 1–12.
        month: u64,
        /// Days of the week 0–6 (Sunday 0).
        dow: u64,
        /// Whether the day-of-month field was `*` or `?`.
        dom_star: bool,
        /// Whether the day-of-week field was `*` or `?`.
        dow_star: bool,
        /// The zone the fields are read in.
        zone: TimeZone,
    },
    /// `@every <duration>`: a constant delay, whole seconds.
    Every(std::time::Duration),
}

const MONTHS: [&str; 12] = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"];
const DAYS: [&str; 7] = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];

/// `getRange`/`getField`: the bits of one field between `min` and `max`; names are looked
/// up in `names` (numbered from `min`).
fn field(text: &str, min: u32, max: u32, names: &[&str]) -> Result<(u64, bool), ScheduleError> {
    let mut bits = 0u64;
    let mut star = false;
    for part in text.split(',') {
        let (range, step) = match part.split_once('/') {
            Some((r, s)) => {
                let step: u32 =
                    s.parse().map_err(|_| ScheduleError(format!("failed to parse int from {s}: invalid syntax")))?;
                if step == 0 {
                    return Err(ScheduleError(format!("step of range should be a positive number: {part}")));
                }
                (r, Some(step))
            }
            None => (part, None),
        };
        let value = |s: &str| -> Result<u32, ScheduleError> {
            if let Some(i) = names.iter().position(|n| n.eq_ignore_ascii_case(s)) {
                return Ok(min + u32::try_from(i).unwrap_or(0));
            }
            s.parse::<u32>().map_err(|_| ScheduleError(format!("failed to parse int from {s}: invalid syntax")))
        };
        let (start, end) = if range == "*" || range == "?" {
            if step.is_none() {
                star = true;
            }
            (min, max)
        } else if let Some((a, b)) = range.split_once('-') {
            (value(a)?, value(b)?)
        } else {
            let v = value(range)?;
            // `a/n` runs from a to the field's end.
            (v, if step.is_some() { max } else { v })
        };
        if start < min {
            return Err(ScheduleError(format!("beginning of range ({start}) below minimum ({min}): {part}")));
        }
        if end > max {
            return Err(ScheduleError(format!("end of range ({end}) above maximum ({max}): {part}")));
        }
        if start > end {
            return Err(ScheduleError(format!("beginning of range ({start}) beyond end of range ({end}): {part}")));
        }
        let step = step.unwrap_or(1);
        let mut v = start;
        while v <= end {
            bits |= 1 << v;
            v += step;
        }
    }
    Ok((bits, star))
}

/// Go's `time.ParseDuration` for `@every` (whole units of h, m, s, ms).
fn every(text: &str) -> Result<std::time::Duration, ScheduleError> {
    let d = crate::duration::GoDuration::parse(text)
        .map_err(|e| ScheduleError(format!("failed to parse duration {text}: {e}")))?;
    let d = d.to_std().ok_or_else(|| ScheduleError(format!("failed to parse duration {text}: negative")))?;
    // robfig: at least a second, whole seconds.
    Ok(std::time::Duration::from_secs(d.as_secs().max(1)))
}

impl Schedule {
    /// Parses `spec` (with an optional `TZ=<zone> ` or `CRON_TZ=<zone> ` prefix) in `zone`
    /// unless the prefix names another.
    pub fn parse(spec: &str, zone: TimeZone) -> Result<Schedule, ScheduleError> {
        let spec = spec.trim();
        if spec.is_empty() {
            return Err(ScheduleError("empty spec string".into()));
        }
        let (zone, spec) = match spec.strip_prefix("TZ=").or_else(|| spec.strip_prefix("CRON_TZ=")) {
            Some(rest) => {
                let (name, fields) = rest.split_once(' ').unwrap_or((rest, ""));
                let zone =
                    TimeZone::get(name).map_err(|e| ScheduleError(format!("provided bad location {name}: {e}")))?;
                (zone, fields.trim())
            }
            None => (zone, spec),
        };
        let standard = match spec {
            "@yearly" | "@annually" => "0 0 1 1 *",
            "@monthly" => "0 0 1 * *",
            "@weekly" => "0 0 * * 0",
            "@daily" | "@midnight" => "0 0 * * *",
            "@hourly" => "0 * * * *",
            other if other.starts_with("@every ") => {
                return Ok(Schedule::Every(every(other["@every ".len()..].trim())?));
            }
            other if other.starts_with('@') => return Err(ScheduleError(format!("unrecognized descriptor: {other}"))),
            other => other,
        };
        let fields: Vec<&str> = standard.split_whitespace().collect();
        if fields.len() != 5 {
            return Err(ScheduleError(format!("expected exactly 5 fields, found {}: {spec}", fields.len())));
        }
        let (minute, _) = field(fields[0], 0, 59, &[])?;
        let (hour, _) = field(fields[1], 0, 23, &[])?;
        let (dom, dom_star) = field(fields[2], 1, 31, &[])?;
        let (month, _) = field(fields[3], 1, 12, &MONTHS)?;
        let (dow, dow_star) = field(fields[4], 0, 6, &DAYS)?;
        Ok(Schedule::Fields { minute, hour, dom, month, dow, dom_star, dow_star, zone })
    }

    /// The first activation after `t` (robfig `Next`), or `None` if none within five years.
    pub fn next(&self, t: Timestamp) -> Option<Timestamp> {
        let (minute, hour, dom, month, dow, dom_star, dow_star, zone) = match self {
            Schedule::Every(d) => {
                let secs = i64::try_from(d.as_secs()).ok()?;
                return Timestamp::from_second(t.as_second().checked_add(secs)?).ok();
            }
            Schedule::Fields { minute, hour, dom, month, dow, dom_star, dow_star, zone } => {
                (*minute, *hour, *dom, *month, *dow, *dom_star, *dow_star, zone)
            }
        };
        let has = |bits: u64, v: i8| bits & (1 << u32::try_from(v).unwrap_or(63)) != 0;
        let day_matches = |d: Date| {
            let dom_match = has(dom, d.day());
            let dow_match = has(dow, d.weekday().to_sunday_zero_offset());
            if dom_star || dow_star { dom_match && dow_match } else { dom_match || dow_match }
        };
        // The next whole minute after t, in the zone's civil time.
        let start = t.to_zoned(zone.clone()).datetime();
        let mut c: DateTime = start.date().at(start.hour(), start.minute(), 0, 0).checked_add(1.minute()).ok()?;
        let limit = c.year() + 5;
        'wrap: loop {
            if c.year() > limit {
                return None;
            }
            while !has(month, c.month()) {
                c = c.date().first_of_month().checked_add(1.month()).ok()?.at(0, 0, 0, 0);
                if c.month() == 1 {
                    continue 'wrap;
                }
            }
            while !day_matches(c.date()) {
                c = c.date().checked_add(1.day()).ok()?.at(0, 0, 0, 0);
                if c.day() == 1 {
                    continue 'wrap;
                }
            }
            while !has(hour, c.hour()) {
                c = c.date().at(c.hour(), 0, 0, 0).checked_add(1.hour()).ok()?;
                if c.hour() == 0 {
                    continue 'wrap;
                }
            }
            while !has(minute, c.minute()) {
                c = c.checked_add(1.minute()).ok()?;
                if c.minute() == 0 {
                    continue 'wrap;
                }
            }
            let at = zone.to_ambiguous_zoned(c).compatible().ok()?.timestamp();
            // A civil time a DST change folded onto or before t: look further.
            if at <= t {
                c = c.checked_add(1.minute()).ok()?;
                continue 'wrap;
            }
            return Some(at);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap_or_default()
    }

    fn next(spec: &str, after: &str) -> Option<String> {
        Schedule::parse(spec, TimeZone::UTC).ok()?.next(ts(after)).map(|t| t.to_string())
    }

    #[test]
    fn fields_and_descriptors_run_when_cron_says() {
        assert_eq!(next("*/5 * * * *", "2026-01-01T00:02:30Z").as_deref(), Some("2026-01-01T00:05:00Z"));
        assert_eq!(next("0 3 * * *", "2026-01-01T03:00:00Z").as_deref(), Some("2026-01-02T03:00:00Z"));
        assert_eq!(next("@hourly", "2026-01-01T00:59:59Z").as_deref(), Some("2026-01-01T01:00:00Z"));
        assert_eq!(next("@monthly", "2026-01-15T00:00:00Z").as_deref(), Some("2026-02-01T00:00:00Z"));
        assert_eq!(next("0 0 29 2 *", "2026-03-01T00:00:00Z").as_deref(), Some("2028-02-29T00:00:00Z"));
        assert_eq!(next("30 9 * JAN-MAR mon", "2026-03-31T10:00:00Z").as_deref(), Some("2027-01-04T09:30:00Z"));
        // Both days restricted: either matches (the 1st, or a Friday).
        assert_eq!(next("0 0 1 * fri", "2026-01-01T00:00:00Z").as_deref(), Some("2026-01-02T00:00:00Z"));
        assert_eq!(next("@every 90s", "2026-01-01T00:00:00Z").as_deref(), Some("2026-01-01T00:01:30Z"));
        assert_eq!(next("0 0 30 2 *", "2026-01-01T00:00:00Z"), None, "never within five years");
    }

    #[test]
    fn zones_read_the_fields_in_local_time() {
        let ny = TimeZone::get("America/New_York").unwrap_or(TimeZone::UTC);
        let s = Schedule::parse("0 9 * * *", ny).ok();
        assert_eq!(
            s.and_then(|s| s.next(ts("2026-07-01T00:00:00Z"))).map(|t| t.to_string()).as_deref(),
            Some("2026-07-01T13:00:00Z")
        );
        assert_eq!(
            next("TZ=Asia/Tokyo 0 9 * * *", "2026-07-01T00:00:00Z").as_deref(),
            Some("2026-07-02T00:00:00Z"),
            "a prefix names the zone"
        );
    }

    #[test]
    fn bad_schedules_say_why_as_robfig() {
        let err = |spec: &str| Schedule::parse(spec, TimeZone::UTC).err().map(|e| e.0).unwrap_or_default();
        assert_eq!(err("* * * *"), "expected exactly 5 fields, found 4: * * * *");
        assert_eq!(err("61 * * * *"), "end of range (61) above maximum (59): 61");
        assert_eq!(err("* * 0 * *"), "beginning of range (0) below minimum (1): 0");
        assert_eq!(err("*/0 * * * *"), "step of range should be a positive number: */0");
        assert_eq!(err("@fortnightly"), "unrecognized descriptor: @fortnightly");
        assert!(err("x * * * *").starts_with("failed to parse int from x"));
        assert!(err("TZ=Mars/Olympus 0 * * * *").starts_with("provided bad location Mars/Olympus"));
        assert_eq!(err(""), "empty spec string");
    }
}
