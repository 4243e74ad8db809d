//! Every metric name the operator-facing files use exists in what a running
//! bmc-gateway and bmc-worker export: the Grafana dashboard
//! (deploy/grafana/bmcfleet.json), the Prometheus rules and alerts
//! (deploy/prometheus/*.yaml), the README and docs/*.md. A renamed or removed metric
//! fails here instead of leaving an empty panel or an alert that never fires.
//!
//! The exported names come from the code: every entry of the `metrics!`
//! blocks of gateway/src/metrics.rs and worker/src/metrics.rs, under the
//! prefix the macro registers with (common/src/serve.rs), expanded to the
//! series Prometheus stores by the field's type (`_total` for a counter, `_bucket`/`_sum`/
//! `_count` for a histogram). That reading of the code is itself checked
//! against `/metrics` of a real gateway and worker: every family they show
//! (labelled families appear only once they have a sample) must be in it.

use bmcfleet_tests::metrics::metrics_port;
use bmcfleet_tests::producer::{wait_gateway, Topology};
use bmcfleet_tests::{NatsServer, Producer};
use std::collections::BTreeSet;
use std::path::Path;

/// The series names `/metrics` of one process shows.
fn scraped(port: u16) -> BTreeSet<String> {
    let (code, body) = bmcfleet_tests::cluster::http_get(port, "/metrics").expect("GET /metrics");
    assert_eq!(code, 200, "{body}");
    let mut out = BTreeSet::new();
    for line in body.lines() {
        let Some(rest) = line.strip_prefix("# TYPE ") else { continue };
        let (name, kind) = rest.split_once(' ').expect("# TYPE name type");
        out.extend(series(name, kind.trim()));
    }
    out
}

/// The series Prometheus stores for a family of `kind`.
fn series(name: &str, kind: &str) -> Vec<String> {
    match kind {
        "counter" => vec![format!("{}_total", name.trim_end_matches("_total"))],
        "histogram" => ["_bucket", "_sum", "_count"].iter().map(|s| format!("{name}{s}")).collect(),
        "gauge" => vec![name.to_owned()],
        other => panic!("{name}: unexpected metric type {other}"),
    }
}

/// The prefix `metrics!` (common/src/serve.rs) registers every metric under.
fn prefix(macro_source: &str) -> String {
    macro_source
        .split("sub_registry_with_prefix(\"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .expect("a sub_registry_with_prefix(\"...\") in the metrics! macro")
        .to_owned()
}

/// The series a metrics.rs declares: each `field: Type = init, "name";` of
/// its `metrics!` block, typed by `Type`.
fn registered(source: &str, prefix: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for line in source.lines().map(str::trim) {
        let Some(entry) = line.strip_suffix("\";") else { continue };
        let (Some((decl, name)), Some((_, rest))) = (entry.rsplit_once(", \""), entry.split_once(": ")) else {
            continue;
        };
        let Some((ty, _)) = rest.split_once(" = ") else { continue };
        let full = format!("{prefix}_{name}");
        match ty {
            t if t.contains("Histogram") => out.extend(series(&full, "histogram")),
            t if t.contains("Counter") => out.extend(series(&full, "counter")),
            t if t.contains("Gauge") => out.extend(series(&full, "gauge")),
            other => panic!("{decl}: a metric of unknown type {other}"),
        }
    }
    assert!(!out.is_empty(), "no metrics! entry found");
    out
}

/// The `bmcfleet_*` metric names in a text (PromQL, YAML or prose):
/// identifiers with no `:` (recording rules' names have them).
fn used(text: &str) -> BTreeSet<String> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        .filter(|t| t.starts_with("bmcfleet_") && t.len() > "bmcfleet_".len() && !t.contains(':'))
        .map(str::to_owned)
        .collect()
}

/// The metric names prose quotes: `bmcfleet_*` followed by a backtick or `{`
/// (crate names such as `bmcfleet_ipmi=debug` in a log filter are not metrics).
fn quoted(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (i, _) in text.match_indices("bmcfleet_") {
        let name: String = text[i..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
        if matches!(text[i + name.len()..].chars().next(), Some('`' | '{')) {
            out.insert(name);
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_the_dashboard_rules_and_readme_use_is_exported() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let read = |p: &str| std::fs::read_to_string(root.join(p)).unwrap_or_else(|e| panic!("{p}: {e}"));
    let prefix = prefix(&read("common/src/serve.rs"));
    let mut names = registered(&read("gateway/src/metrics.rs"), &prefix);
    names.extend(registered(&read("worker/src/metrics.rs"), &prefix));
    for expected in [
        "bmcfleet_batches_rejected_total",
        "bmcfleet_partitions_owned",
        "bmcfleet_queue_wait_seconds_bucket",
        "bmcfleet_machines",
        "bmcfleet_polls_behind_seconds",
    ] {
        assert!(names.contains(expected), "{expected} not registered: {names:?}");
    }
    assert!(!names.contains("bmcfleet_polls_behind_seconds_bucket"), "a gauge read as a histogram");

    // The reading of the code against real processes.
    let nats = NatsServer::start();
    let topo = Topology::default();
    let gateway = topo.gateway(&nats, &[]);
    wait_gateway(&Producer::new(nats.client().await)).await;
    let worker = topo.worker_plain(&nats, "w0", &[]);
    let mut live = scraped(metrics_port(&gateway).await);
    live.extend(scraped(metrics_port(&worker).await));
    assert!(live.len() >= 5, "{live:?}");
    let unknown: Vec<_> = live.difference(&names).collect();
    assert!(unknown.is_empty(), "exported but not found in the code's metrics! entries: {unknown:?}");

    let dashboard: serde_json::Value = serde_json::from_str(&read("deploy/grafana/bmcfleet.json")).unwrap();
    let mut exprs = Vec::new();
    fn collect(v: &serde_json::Value, out: &mut Vec<String>) {
        match v {
            serde_json::Value::Object(m) => {
                for (k, v) in m {
                    match v {
                        serde_json::Value::String(s) if k == "expr" || k == "query" => out.push(s.clone()),
                        _ => collect(v, out),
                    }
                }
            }
            serde_json::Value::Array(a) => a.iter().for_each(|v| collect(v, out)),
            _ => {}
        }
    }
    collect(&dashboard, &mut exprs);
    let sources = [
        ("deploy/grafana/bmcfleet.json", exprs.join("\n")),
        ("deploy/prometheus/rules.yaml", read("deploy/prometheus/rules.yaml")),
        ("deploy/prometheus/alerts.yaml", read("deploy/prometheus/alerts.yaml")),
    ];
    let mut missing = Vec::new();
    // Prose may name a histogram by its family name.
    let mut families = names.clone();
    families.extend(names.iter().filter_map(|n| n.strip_suffix("_bucket")).map(str::to_owned));
    // Prose: the README and every page of docs/ (OBSERVABILITY.md lists them all).
    let mut pages = vec!["README.md".to_owned()];
    for entry in std::fs::read_dir(root.join("docs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            pages.push(format!("docs/{}", path.file_name().unwrap().to_string_lossy()));
        }
    }
    let observability = quoted(&read("docs/OBSERVABILITY.md"));
    assert!(observability.len() >= 10, "{observability:?}");
    for page in &pages {
        missing.extend(quoted(&read(page)).difference(&families).map(|n| format!("{page}: {n}")));
    }
    for (file, text) in &sources {
        let names_used = used(text);
        assert!(!names_used.is_empty() || *file == "deploy/prometheus/alerts.yaml", "{file} uses no bmcfleet_ metric?");
        missing.extend(names_used.difference(&names).map(|n| format!("{file}: {n}")));
    }
    assert!(
        missing.is_empty(),
        "metric names used but not exported by the gateway or worker:\n{}\nexported: {names:?}",
        missing.join("\n")
    );
}

#[test]
fn a_renamed_metric_is_noticed() {
    let exported: BTreeSet<String> = ["bmcfleet_breakers_open".to_owned()].into();
    let used = used("sum(bmcfleet_breaker_open) > 1 # instance:bmcfleet_breakers_open:sum, every bmcfleet_* name");
    assert_eq!(used.difference(&exported).cloned().collect::<Vec<_>>(), ["bmcfleet_breaker_open"]);
    let prose =
        quoted("`bmcfleet_breakers_opened` and `bmcfleet_polls_total{outcome}`, not `info,bmcfleet_ipmi=debug`");
    assert_eq!(prose.into_iter().collect::<Vec<_>>(), ["bmcfleet_breakers_opened", "bmcfleet_polls_total"]);
}
