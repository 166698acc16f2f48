//! Container logs as the kubelet serves them (`pkg/kubelet/kuberuntime/logs`): the CRI log
//! files of a container (`<ns>_<pod>_<uid>/<container>/<restart>.log`, one line per record:
//! `<RFC 3339 nano> <stream> <P|F> <content>`), read back as the container wrote them —
//! partial records joined, optionally with timestamps, the last `tailLines`, those since a
//! time, at most `limitBytes` — from the current instance or the previous one.

/// `PodLogOptions`, as the query carries them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogOptions {
    /// `follow`.
    pub follow: bool,
    /// `previous`: the instance before the current one.
    pub previous: bool,
    /// `timestamps`: each line prefixed with its RFC 3339 time.
    pub timestamps: bool,
    /// `tailLines`.
    pub tail_lines: Option<usize>,
    /// `limitBytes`.
    pub limit_bytes: Option<usize>,
    /// `sinceSeconds` or `sinceTime`, as Unix nanoseconds.
    pub since_nanos: Option<i128>,
}

/// A log query parameter with a value the kubelet refuses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{parameter}: invalid value {value:?}")]
pub struct InvalidLogOption {
    /// The parameter (`tailLines`).
    pub parameter: &'static str,
    /// Its value.
    pub value: String,
}

impl LogOptions {
    /// From the query parameters; a bad value is an error naming it.
    pub fn from_query(pairs: &[(String, String)], now_nanos: i128) -> Result<Self, InvalidLogOption> {
        let mut o = LogOptions::default();
        let flag = |v: &str| v == "true" || v == "1";
        for (k, v) in pairs {
            let invalid = |parameter: &'static str| InvalidLogOption { parameter, value: v.clone() };
            let number =
                |parameter: &'static str| v.parse::<i64>().ok().filter(|n| *n >= 0).ok_or_else(|| invalid(parameter));
            match k.as_str() {
                "follow" => o.follow = flag(v),
                "previous" => o.previous = flag(v),
                "timestamps" => o.timestamps = flag(v),
                "tailLines" => o.tail_lines = Some(usize::try_from(number("tailLines")?).unwrap_or(usize::MAX)),
                "limitBytes" => {
                    o.limit_bytes = Some(usize::try_from(number("limitBytes")?).unwrap_or(usize::MAX).max(1))
                }
                "sinceSeconds" => o.since_nanos = Some(now_nanos - i128::from(number("sinceSeconds")?) * 1_000_000_000),
                "sinceTime" => {
                    let t: jiff::Timestamp = v.parse().map_err(|_| invalid("sinceTime"))?;
                    o.since_nanos = Some(t.as_nanosecond());
                }
                _ => {}
            }
        }
        Ok(o)
    }
}

/// One CRI log record.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Record<'a> {
    time: &'a str,
    partial: bool,
    content: &'a str,
}

fn parse(line: &str) -> Option<Record<'_>> {
    let mut parts = line.splitn(4, ' ');
    let time = parts.next()?;
    let _stream = parts.next()?;
    let tag = parts.next()?;
    let content = parts.next().unwrap_or_default();
    Some(Record { time, partial: tag.split(':').next() == Some("P"), content })
}

fn nanos(time: &str) -> Option<i128> {
    time.parse::<jiff::Timestamp>().ok().map(jiff::Timestamp::as_nanosecond)
}

/// Renders the complete records of `text` (a CRI log file's contents) as the container's
/// output under `o` (everything but `follow` and `previous`). Returns the bytes and how
/// much of `text` was consumed (a trailing line without its newline is left for later).
pub fn render(text: &str, o: &LogOptions) -> (Vec<u8>, usize) {
    let consumed = text.rfind('\n').map_or(0, |i| i + 1);
    // (time, content, ended by a full record)
    let mut lines: Vec<(String, String, bool)> = Vec::new();
    let mut pending: Option<(String, String)> = None;
    for line in text[..consumed].lines() {
        let Some(r) = parse(line) else { continue };
        if o.since_nanos.is_some_and(|since| nanos(r.time).is_some_and(|t| t < since)) {
            continue;
        }
        let entry = pending.get_or_insert_with(|| (r.time.to_owned(), String::new()));
        entry.1.push_str(r.content);
        if !r.partial
            && let Some((time, content)) = pending.take()
        {
            lines.push((time, content, true));
        }
    }
    // Output the container has not ended with a newline yet (or never will: it exited)
    // is shown as it is, without one, as the kubelet shows partial records.
    if let Some((time, content)) = pending {
        lines.push((time, content, false));
    }
    if let Some(n) = o.tail_lines {
        let skip = lines.len().saturating_sub(n);
        lines.drain(..skip);
    }
    let mut out = Vec::new();
    for (time, content, complete) in lines {
        if o.timestamps {
            out.extend_from_slice(time.as_bytes());
            out.push(b' ');
        }
        out.extend_from_slice(content.as_bytes());
        if complete {
            out.push(b'\n');
        }
    }
    if let Some(limit) = o.limit_bytes {
        out.truncate(limit);
    }
    (out, consumed)
}

/// kubelet `calcRestartCountByLogDir`: one more than the largest `<n>` of the container's
/// log files (`<n>.log`, rotated ones `<n>.log.<suffix>` included), 0 when there are none.
/// Blocking.
pub(crate) fn restart_count_by_log_dir(dir: &std::path::Path) -> u32 {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name();
            let name = name.to_str()?;
            let (n, rest) = name.split_once(".log")?;
            (rest.is_empty() || rest.starts_with('.')).then_some(())?;
            (!n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())).then(|| n.parse::<u32>().ok())?
        })
        .max()
        .map_or(0, |n| n.saturating_add(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lost_containers_restart_count_goes_on_from_its_logs() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(restart_count_by_log_dir(&dir.path().join("missing")), 0);
        assert_eq!(restart_count_by_log_dir(dir.path()), 0);
        for f in ["0.log", "3.log.20261201-120000", "2.log", "notes.txt", "x.log", "9.logs", ".log"] {
            std::fs::write(dir.path().join(f), "").unwrap_or_else(|e| panic!("{e}"));
        }
        assert_eq!(restart_count_by_log_dir(dir.path()), 4, "after 3.log (rotated)");
    }

    const LOG: &str = "2026-11-25T10:00:00.000000001Z stdout F hello\n\
        2026-11-25T10:00:01.000000000Z stderr P par\n\
        2026-11-25T10:00:01.000000001Z stderr F tial\n\
        2026-11-25T10:00:02.000000000Z stdout F last\n\
        2026-11-25T10:00:03.000000000Z stdout F unfinished";

    #[test]
    fn records_come_back_as_written_with_the_kubelets_options() {
        let (out, consumed) = render(LOG, &LogOptions::default());
        assert_eq!(String::from_utf8_lossy(&out), "hello\npartial\nlast\n");
        assert_eq!(&LOG[consumed..], "2026-11-25T10:00:03.000000000Z stdout F unfinished");
        let tail = LogOptions { tail_lines: Some(1), timestamps: true, ..Default::default() };
        assert_eq!(String::from_utf8_lossy(&render(LOG, &tail).0), "2026-11-25T10:00:02.000000000Z last\n");
        let since = LogOptions { since_nanos: nanos("2026-11-25T10:00:01.5Z"), ..Default::default() };
        assert_eq!(String::from_utf8_lossy(&render(LOG, &since).0), "last\n");
        let limited = LogOptions { limit_bytes: Some(3), ..Default::default() };
        assert_eq!(render(LOG, &limited).0, b"hel");
    }

    #[test]
    fn output_without_a_final_newline_is_shown_as_it_is() {
        let log = "2026-11-25T10:00:00Z stdout F first\n2026-11-25T10:00:01Z stdout P no newline\n";
        assert_eq!(String::from_utf8_lossy(&render(log, &LogOptions::default()).0), "first\nno newline");
        let tail = LogOptions { tail_lines: Some(1), ..Default::default() };
        assert_eq!(String::from_utf8_lossy(&render(log, &tail).0), "no newline");
    }

    #[test]
    fn query_values_are_checked() {
        let q = |k: &str, v: &str| vec![(k.to_owned(), v.to_owned())];
        assert_eq!(LogOptions::from_query(&q("tailLines", "3"), 0).unwrap().tail_lines, Some(3));
        assert_eq!(
            LogOptions::from_query(&q("tailLines", "-1"), 0).unwrap_err().to_string(),
            r#"tailLines: invalid value "-1""#
        );
        assert_eq!(
            LogOptions::from_query(&q("sinceSeconds", "2"), 5_000_000_000).unwrap().since_nanos,
            Some(3_000_000_000)
        );
        assert!(LogOptions::from_query(&q("sinceTime", "yesterday"), 0).is_err());
        assert!(LogOptions::from_query(&q("follow", "true"), 0).unwrap().follow);
    }
}
