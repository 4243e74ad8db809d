//! A real Prometheus (Debian `prometheus`) scrapes a running bmc-gateway and
//! bmc-worker, loads deploy/prometheus/rules.yaml and alerts.yaml, and
//! answers every query of the Grafana dashboard (deploy/grafana/bmcfleet.json):
//! each must be valid PromQL and, after a little traffic (batches that
//! succeed and fail, a refused submission, machine polls), return series.
//! Every rule must evaluate without error.
//!
//! Skips with a note without the `prometheus` binary, unless
//! `BMCFLEET_REQUIRE_PEERS=1` (scripts/test.sh; scripts/setup.sh installs it).

use bmcfleet_schema::{Action, PowerOp, Reply};
use bmcfleet_testing::{peers, SimConfig};
use bmcfleet_tests::checks::sim_batch;
use bmcfleet_tests::cluster::http_get;
use bmcfleet_tests::metrics::metrics_port;
use bmcfleet_tests::producer::SimStack;
use std::path::{Path, PathBuf};
use std::time::Duration;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn prometheus() -> Option<PathBuf> {
    peers::program("prometheus", &[], "Debian: apt-get install prometheus, or run scripts/setup.sh")
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// `GET /api/v1/query?query=...` → the parsed answer.
fn query(port: u16, promql: &str) -> serde_json::Value {
    let (code, body) = http_get(port, &format!("/api/v1/query?query={}", encode(promql))).expect("prometheus answers");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{code} {body}: {e}"));
    assert_eq!(v["status"], "success", "query `{promql}` failed: {body}");
    v
}

/// A Prometheus server killed on drop.
struct Prometheus {
    child: std::process::Child,
    _dir: tempfile::TempDir,
    port: u16,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_prometheus(binary: &Path, gateway: u16, worker: u16) -> Prometheus {
    let dir = tempfile::tempdir().unwrap();
    let rules = root().join("deploy/prometheus");
    let config = format!(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files:\n  - {}\n  - {}\nscrape_configs:\n  - job_name: bmc-gateway\n    static_configs: [{{targets: ['127.0.0.1:{gateway}']}}]\n  - job_name: bmc-worker\n    static_configs: [{{targets: ['127.0.0.1:{worker}']}}]\n",
        rules.join("rules.yaml").display(),
        rules.join("alerts.yaml").display()
    );
    std::fs::write(dir.path().join("prometheus.yml"), config).unwrap();
    let port = free_port();
    let log = std::fs::File::create(dir.path().join("prometheus.log")).unwrap();
    let child = std::process::Command::new(binary)
        .arg(format!("--config.file={}", dir.path().join("prometheus.yml").display()))
        .arg(format!("--storage.tsdb.path={}", dir.path().join("data").display()))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .expect("start prometheus");
    Prometheus { child, _dir: dir, port }
}

/// Every PromQL expression of the dashboard, with Grafana's variables
/// replaced as Grafana would (`$job` = All, `$__rate_interval` ≥ 4 scrapes).
fn dashboard_queries() -> Vec<(String, String)> {
    let d: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(root().join("deploy/grafana/bmcfleet.json")).unwrap()).unwrap();
    let mut out = Vec::new();
    for p in d["panels"].as_array().unwrap() {
        for t in p["targets"].as_array().into_iter().flatten() {
            if let Some(expr) = t["expr"].as_str() {
                let q = expr.replace("$__rate_interval", "30s").replace("$job", ".*");
                assert!(!q.contains('$'), "an unknown dashboard variable in `{expr}`");
                out.push((p["title"].as_str().unwrap_or("?").to_owned(), q));
            }
        }
    }
    assert!(out.len() >= 10, "{out:?}");
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_scrapes_the_processes_and_the_dashboard_queries_return_series() {
    let Some(binary) = prometheus() else { return };
    let stack = SimStack::start(SimConfig::default())
        .await
        .with_workers(1, &["--poll-interval", "10s", "--poll-timeout", "2s"])
        .await;
    let (producer, topo, sim) = (&stack.producer, &stack.topology, &stack.sim);
    let prom = start_prometheus(&binary, metrics_port(&stack.gateway).await, metrics_port(&stack.workers[0]).await);

    // Traffic: a batch that succeeds (its first reply lost: one retry), one
    // that fails at its BMC, a refusal; machine polls.
    sim.inject("v4-10-0-0-8", bmcfleet_testing::Faults { lose_replies: 1, ..Default::default() });
    let mut ids = Vec::new();
    for address in ["10.0.0.8", "fail-2.example"] {
        let mut batch = sim_batch(address, vec![Action::Power(PowerOp::On), Action::Power(PowerOp::Status)]);
        batch.machine = Some(topo.register_machine(&producer.client, &batch.bmc.take().unwrap()).await);
        match producer.submit(&batch, true).await {
            Reply::Result(r) => ids.push(r.id),
            other => panic!("{other:?}"),
        }
    }
    let Reply::Error(_) = producer.submit_json(r#"{"machine": "m", "actions": []}"#, false).await else {
        panic!("an empty batch accepted")
    };

    // Both targets up, then every dashboard query returns series.
    bmcfleet_tests::eventually(Duration::from_secs(30), "prometheus scraping both targets", || async {
        let v = query(prom.port, "up");
        let up = v["data"]["result"].as_array()?.iter().filter(|r| r["value"][1] == "1").count();
        (up == 2).then_some(())
    })
    .await;
    let queries = dashboard_queries();
    for (_, q) in &queries {
        query(prom.port, q); // valid PromQL, at once
    }
    // Series that only faults this test does not cause create (a worker
    // killed mid-batch, an open circuit breaker: pipeline.rs and
    // resilience.rs cause them); their queries must still be valid above.
    let fault_only = ["bmcfleet_redeliveries_total", "bmcfleet_breaker_rejections_total"];
    let empty = || -> Vec<String> {
        queries
            .iter()
            .filter(|(_, q)| !fault_only.iter().any(|m| q.contains(m)))
            .filter(|(_, q)| query(prom.port, q)["data"]["result"].as_array().is_none_or(|r| r.is_empty()))
            .map(|(title, q)| format!("{title}: {q}"))
            .collect()
    };
    let waited = bmcfleet_tests::poll_until(Duration::from_secs(60), Duration::from_millis(500), || async {
        empty().is_empty().then_some(())
    })
    .await;
    assert!(waited.is_some(), "dashboard queries without series:\n{}", empty().join("\n"));

    // Every recording and alerting rule loaded and evaluates without error
    // (the recording group runs every 30 s: wait for its first evaluation).
    let rules = || -> Vec<serde_json::Value> {
        let (_, body) = http_get(prom.port, "/api/v1/rules").expect("rules");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        v["data"]["groups"]
            .as_array()
            .expect("rule groups")
            .iter()
            .flat_map(|g| g["rules"].as_array().unwrap().clone())
            .collect()
    };
    let evaluated = bmcfleet_tests::poll_until(Duration::from_secs(60), Duration::from_millis(500), || async {
        let all = rules();
        all.iter().all(|r| r["health"] != "unknown").then_some(all)
    })
    .await
    .unwrap_or_else(|| panic!("rules not evaluated within 60 s: {:?}", rules()));
    assert!(evaluated.len() >= 20, "{} rules loaded", evaluated.len());
    for r in &evaluated {
        assert_eq!(r["health"], "ok", "rule {} does not evaluate: {}", r["name"], r["lastError"]);
    }
    // A rule group's first evaluation may precede the first scrape of the
    // worker (an empty result, health "ok"): the recorded series appears at
    // the group's next evaluation, at most one interval (30 s) later.
    let partitions = topo.partitions.to_string();
    let recorded = bmcfleet_tests::poll_until(Duration::from_secs(75), Duration::from_millis(500), || async {
        let v = query(prom.port, "bmcfleet:partitions_owned:sum");
        (v["data"]["result"][0]["value"][1] == partitions.as_str()).then_some(())
    })
    .await;
    assert!(
        recorded.is_some(),
        "bmcfleet:partitions_owned:sum is not {partitions}: {}",
        query(prom.port, "bmcfleet:partitions_owned:sum")
    );
}
