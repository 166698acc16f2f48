//! The API server's own request latencies, as upstream's scalability SLIs read them:
//! `apiserver_request_duration_seconds` scraped before and after the measured phases, the
//! difference per (verb, resource, subresource, scope), and each class's p99 as
//! Prometheus' `histogram_quantile` computes it, the worst pair judged.

use std::collections::BTreeMap;

use anyhow::Result;

use crate::up::api::Api;

const METRIC: &str = "apiserver_request_duration_seconds_bucket{";

/// (verb, resource, subresource, scope).
type Key = (String, String, String, String);

/// Cumulative bucket counts per key, `(le, count)` in ascending `le`.
#[derive(Debug, Default, Clone, PartialEq)]
pub(super) struct Histograms(BTreeMap<Key, Vec<(f64, f64)>>);

fn label<'a>(labels: &'a str, name: &str) -> &'a str {
    let needle = format!("{name}=\"");
    labels.split_once(&needle).and_then(|(_, rest)| rest.split_once('"')).map_or("", |(value, _)| value)
}

impl Histograms {
    /// The server's `/metrics` now.
    pub(super) async fn scrape(api: &Api) -> Result<Histograms> {
        Ok(Histograms::parse(&api.get_text("/metrics").await?))
    }

    /// The duration buckets of a text exposition.
    pub(super) fn parse(text: &str) -> Histograms {
        let mut out: BTreeMap<Key, Vec<(f64, f64)>> = BTreeMap::new();
        for line in text.lines() {
            let Some(rest) = line.strip_prefix(METRIC) else { continue };
            let Some((labels, value)) = rest.rsplit_once("} ") else { continue };
            let le = match label(labels, "le") {
                "+Inf" => f64::INFINITY,
                le => match le.parse() {
                    Ok(v) => v,
                    Err(_) => continue,
                },
            };
            let Ok(count) = value.trim().parse::<f64>() else { continue };
            let key = (
                label(labels, "verb").to_owned(),
                label(labels, "resource").to_owned(),
                label(labels, "subresource").to_owned(),
                label(labels, "scope").to_owned(),
            );
            out.entry(key).or_default().push((le, count));
        }
        for buckets in out.values_mut() {
            buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        }
        Histograms(out)
    }

    /// What was observed since `earlier`.
    pub(super) fn minus(&self, earlier: &Histograms) -> Histograms {
        let mut out = BTreeMap::new();
        for (key, buckets) in &self.0 {
            let before = earlier.0.get(key);
            let diff: Vec<(f64, f64)> = buckets
                .iter()
                .map(|(le, count)| {
                    let old = before.and_then(|b| b.iter().find(|(l, _)| l == le)).map_or(0.0, |(_, c)| *c);
                    (*le, (count - old).max(0.0))
                })
                .collect();
            if diff.last().is_some_and(|(_, c)| *c > 0.0) {
                out.insert(key.clone(), diff);
            }
        }
        Histograms(out)
    }
}

/// Prometheus' `histogram_quantile`: linear within the bucket holding the rank; the
/// highest finite bound when it falls in `+Inf`.
fn quantile(q: f64, buckets: &[(f64, f64)]) -> f64 {
    let Some(&(_, total)) = buckets.last() else { return 0.0 };
    if total <= 0.0 {
        return 0.0;
    }
    let rank = q * total;
    let (mut lower, mut below) = (0.0, 0.0);
    for &(le, count) in buckets {
        if count >= rank {
            if le.is_infinite() {
                return lower;
            }
            let within = count - below;
            return if within <= 0.0 { le } else { lower + (le - lower) * (rank - below) / within };
        }
        (lower, below) = (le, count);
    }
    lower
}

/// One SLI: its worst pair's p99, that pair, and the calls counted.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct Sli {
    pub(super) p99_ms: f64,
    pub(super) worst: String,
    pub(super) calls: u64,
}

/// The SLIs upstream's SLOs judge.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct Slis {
    /// create/update/patch/delete of single objects (≤ 1 s).
    pub(super) mutating: Sli,
    /// get of one object (≤ 1 s).
    pub(super) readonly: Sli,
    /// list of a namespace's objects (≤ 5 s).
    pub(super) list: Sli,
    /// list across the cluster (≤ 30 s).
    pub(super) cluster_list: Sli,
}

impl Slis {
    pub(super) fn of(h: &Histograms) -> Slis {
        let mut slis = Slis::default();
        for ((verb, resource, subresource, scope), buckets) in &h.0 {
            let sli = match (verb.as_str(), scope.as_str()) {
                ("create" | "update" | "patch" | "delete", "resource" | "namespace" | "cluster") => &mut slis.mutating,
                ("get", "resource") => &mut slis.readonly,
                ("list", "namespace") => &mut slis.list,
                ("list", "cluster") => &mut slis.cluster_list,
                _ => continue,
            };
            let calls = buckets.last().map_or(0.0, |(_, c)| *c);
            sli.calls += calls as u64;
            let p99 = quantile(0.99, buckets) * 1000.0;
            if p99 > sli.p99_ms {
                sli.p99_ms = p99;
                let sub = if subresource.is_empty() { String::new() } else { format!("/{subresource}") };
                sli.worst = format!("{verb} {resource}{sub} ({scope}, {calls} calls)");
            }
        }
        slis
    }

    /// One line per SLI, beside its goal.
    pub(super) fn lines(&self) -> Vec<String> {
        [
            ("mutating", &self.mutating, 1000),
            ("readonly", &self.readonly, 1000),
            ("list", &self.list, 5000),
            ("cluster_list", &self.cluster_list, 30000),
        ]
        .iter()
        .map(|(name, sli, goal)| {
            format!("{name}_p99_ms={:.0} (goal <= {goal}) calls={} worst: {}", sli.p99_ms, sli.calls, sli.worst)
        })
        .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = r#"# HELP apiserver_request_duration_seconds x
apiserver_request_duration_seconds_bucket{verb="get",resource="pods",subresource="",scope="resource",le="0.005"} 90
apiserver_request_duration_seconds_bucket{verb="get",resource="pods",subresource="",scope="resource",le="0.01"} 99
apiserver_request_duration_seconds_bucket{verb="get",resource="pods",subresource="",scope="resource",le="0.025"} 100
apiserver_request_duration_seconds_bucket{verb="get",resource="pods",subresource="",scope="resource",le="+Inf"} 100
apiserver_request_duration_seconds_bucket{verb="create",resource="serviceaccounts",subresource="token",scope="resource",le="0.005"} 0
apiserver_request_duration_seconds_bucket{verb="create",resource="serviceaccounts",subresource="token",scope="resource",le="+Inf"} 10
apiserver_request_duration_seconds_count{verb="get",resource="pods",subresource="",scope="resource"} 100
"#;

    #[test]
    fn p99_is_prometheus_histogram_quantile() {
        let h = Histograms::parse(TEXT);
        let slis = Slis::of(&h);
        // Rank 99 of 100 is the end of the 0.005–0.01 bucket.
        assert!((slis.readonly.p99_ms - 10.0).abs() < 1e-9, "{slis:?}");
        assert_eq!(slis.readonly.calls, 100);
        // Everything past the last finite bound reads as that bound.
        assert!((slis.mutating.p99_ms - 5.0).abs() < 1e-9, "{slis:?}");
        assert!(slis.mutating.worst.starts_with("create serviceaccounts/token"), "{slis:?}");
        assert!((quantile(0.5, &[(0.1, 50.0), (0.2, 100.0), (f64::INFINITY, 100.0)]) - 0.1).abs() < 1e-9);
        assert!((quantile(0.75, &[(0.1, 50.0), (0.2, 100.0), (f64::INFINITY, 100.0)]) - 0.15).abs() < 1e-9);
    }

    #[test]
    fn only_what_happened_since_is_counted() {
        let before = Histograms::parse(TEXT);
        let later =
            TEXT.replace("le=\"+Inf\"} 100", "le=\"+Inf\"} 101").replace("le=\"0.025\"} 100", "le=\"0.025\"} 101");
        let diff = Histograms::parse(&later).minus(&before);
        let slis = Slis::of(&diff);
        assert_eq!(slis.readonly.calls, 1);
        assert!((slis.readonly.p99_ms - 24.85).abs() < 0.01, "{slis:?}");
        assert_eq!(slis.mutating, Sli::default(), "nothing new");
    }
}
