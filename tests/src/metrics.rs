//! Reading a bmcfleet process's Prometheus endpoint in tests: find the port
//! it logged, scrape `/metrics`, parse it with a Prometheus text-format parser.

use crate::cluster::http_get;
use crate::Process;
use std::time::Duration;

/// The port a process logged as `Metrics listening on <addr>`.
pub async fn metrics_port(p: &Process) -> u16 {
    crate::eventually(Duration::from_secs(20), "the metrics address in the log", || {
        let log = p.log_text();
        async move {
            log.lines().find_map(|l| {
                let rest = l.split_once("Metrics listening on ")?.1;
                let addr: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | ':' | '[' | ']'))
                    .collect();
                addr.trim_end_matches('.').parse::<std::net::SocketAddr>().ok().map(|a| a.port())
            })
        }
    })
    .await
}

/// Scrape `/metrics` and parse it with a Prometheus text-format parser.
pub fn scrape(port: u16) -> prometheus_parse::Scrape {
    let (code, body) = http_get(port, "/metrics").expect("GET /metrics");
    assert_eq!(code, 200, "{body}");
    prometheus_parse::Scrape::parse(body.lines().map(|l| Ok(l.to_owned()))).expect("parsable metrics")
}

/// A sample's value (counter or gauge), or a histogram's count; 0 when absent.
pub fn value(s: &prometheus_parse::Scrape, metric: &str, labels: &[(&str, &str)]) -> f64 {
    use prometheus_parse::Value;
    s.samples
        .iter()
        .filter(|x| x.metric == metric && labels.iter().all(|(k, v)| x.labels.get(k) == Some(*v)))
        .map(|x| match &x.value {
            Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => *v,
            Value::Histogram(b) => b.iter().find(|c| c.less_than.is_infinite()).map(|c| c.count).unwrap_or(0.0),
            Value::Summary(_) => 0.0,
        })
        .sum()
}

/// A sample expected by [`assert_values`]: metric, labels, [`value`].
pub struct Expect<'a>(pub &'a str, pub &'a [(&'a str, &'a str)], pub f64);

/// Every [`Expect`] holds in `s` (a failure names the metric).
pub fn assert_values(s: &prometheus_parse::Scrape, expected: &[Expect]) {
    for Expect(metric, labels, want) in expected {
        assert_eq!(value(s, metric, labels), *want, "{metric} {labels:?}");
    }
}
