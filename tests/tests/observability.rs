//! Observability end to end: OTLP traces across the gateway and worker
//! processes (exported to an in-test collector), Prometheus metrics scraped
//! from `/metrics`, health endpoints, redaction of secrets in logs and spans,
//! and the Grafana dashboard.

use async_nats::HeaderMap;
use bmcfleet_schema::subject::WAIT_HEADER;
use bmcfleet_schema::*;
use bmcfleet_testing::{SimConfig, SimServer};
use bmcfleet_tests::cluster::http_get;
use bmcfleet_tests::metrics::{metrics_port, scrape, value};
use bmcfleet_tests::otlp::{OtlpCollector, Span};
use bmcfleet_tests::producer::{wait_gateway, wait_partitions_owned, SimStack, Topology};
use bmcfleet_tests::{NatsServer, Process, Producer};
use futures::StreamExt;
use std::time::Duration;

/// Filter that logs everything our own crates emit, down to trace level.
const TRACE_ALL: &str = "info,bmcfleet_gateway=trace,bmcfleet_worker=trace,bmcfleet_common=trace,bmcfleet_sim=trace,bmcfleet_provider=trace,bmcfleet_schema=trace";

struct Env {
    sim: SimServer,
    producer: Producer,
    gateway: Process,
    worker: Process,
    _nats: NatsServer,
}

/// NATS, sim, a gateway and one worker, both exporting spans to `collector`
/// (when given) and serving metrics on a free port.
async fn env(collector: Option<&OtlpCollector>, log: &str) -> Env {
    let nats = NatsServer::start();
    let sim = SimServer::start(SimConfig::default()).await.unwrap();
    let topo = Topology::default();
    let mut env: Vec<(&str, String)> = vec![("OTEL_BSP_SCHEDULE_DELAY", "100".into())];
    let mut otel = vec![];
    if let Some(c) = collector {
        otel = vec![
            "--otlp-endpoint".to_string(),
            c.endpoint(),
            "--otlp-protocol".into(),
            c.protocol().into(),
            "--otel-filter".into(),
            TRACE_ALL.into(),
        ];
    } else {
        env.push(("OTEL_EXPORTER_OTLP_ENDPOINT", String::new()));
    }
    let common = |extra: &[&str]| {
        let mut a = topo.common_args(&nats);
        a.extend(["--metrics-addr".into(), "127.0.0.1:0".into(), "--log".into(), log.into()]);
        a.extend(otel.iter().cloned());
        a.extend(extra.iter().map(|s| s.to_string()));
        a
    };
    let mut gateway_args = common(&["--allow-sim", "true"]);
    gateway_args.extend(topo.sealing.gateway_args());
    let gateway = Process::spawn("bmc-gateway", &gateway_args, &env);
    let producer = Producer::new(nats.client().await);
    wait_gateway(&producer).await;
    let sim_addr = sim.addr().to_string();
    let mut worker_args = common(&[
        "--worker-id",
        "w0",
        "--lease-ttl",
        topo.lease_ttl,
        "--rebalance-interval",
        topo.rebalance,
        "--ack-wait",
        "5s",
        "--drain-timeout",
        "5s",
        "--sim-endpoint",
        &sim_addr,
    ]);
    worker_args.extend(topo.sealing.worker_args());
    let worker = Process::spawn("bmc-worker:w0", &worker_args, &env);
    wait_partitions_owned(&producer.client, &topo.subjects()).await;
    Env { sim, producer, gateway, worker, _nats: nats }
}

fn target(address: &str, password: &str) -> BmcTarget {
    BmcTarget {
        address: address.parse().unwrap(),
        protocol: Protocol::Sim,
        credentials: Credentials::Inline { username: "admin".into(), password: Secret::new(password) },
        tls: TlsOptions::default(),
        system_id: None,
        options: Default::default(),
    }
}

fn batch(target: BmcTarget, actions: Vec<Action>) -> Batch {
    Batch {
        plan: false,
        events: Default::default(),
        id: None,
        machine: None,
        bmc: Some(target),
        actions,
        on_error: OnError::Stop,
        deadline: Some(Duration::from_secs(60)),
    }
}

/// Submit and wait for the final result, with optional extra request headers.
async fn run(p: &Producer, b: &Batch, extra: HeaderMap) -> BatchResult {
    let mut h = extra;
    h.insert(WAIT_HEADER, "true");
    let body = Encoding::MessagePack.encode(b).unwrap();
    match p.raw("submit", h, body, Duration::from_secs(60)).await.1 {
        Reply::Result(r) => r,
        other => panic!("expected a result, got {other:?}"),
    }
}

fn one<'a>(spans: &'a [Span], name: &str) -> &'a Span {
    let found: Vec<&Span> = spans.iter().filter(|s| s.name == name).collect();
    assert_eq!(found.len(), 1, "expected one {name} span, got {found:?}");
    found[0]
}

#[tokio::test]
async fn one_batch_is_one_connected_trace_across_processes() {
    connected_trace(OtlpCollector::start().await).await;
}

/// The same trace exported over OTLP/gRPC (HTTP/2) instead of HTTP/protobuf.
#[tokio::test]
async fn the_trace_is_exported_over_grpc_too() {
    connected_trace(OtlpCollector::start_grpc().await).await;
}

async fn connected_trace(collector: OtlpCollector) {
    let e = env(Some(&collector), "info").await;
    let mut events = e.producer.client.subscribe("bmc.events.>").await.unwrap();
    e.producer.client.flush().await.unwrap();

    // The producer starts the trace.
    let trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
    let parent_id = "00f067aa0ba902b7";
    let mut h = HeaderMap::new();
    h.insert("traceparent", format!("00-{trace_id}-{parent_id}-01").as_str());
    h.insert("tracestate", "producer=test");
    let b = batch(target("10.9.0.1", "pw"), vec![Action::Power(PowerOp::On), Action::Power(PowerOp::Status)]);
    let r = run(&e.producer, &b, h).await;
    assert_eq!(r.state, BatchState::Succeeded, "{r:?}");

    let spans = collector
        .wait_trace(trace_id, Duration::from_secs(30), |s| {
            let n = |name: &str| s.iter().filter(|x| x.name == name).count();
            n("gateway.admit") == 1 && n("worker.execute") == 1 && n("worker.action") == 2 && n("bmc.call") == 2
        })
        .await;
    let admit = one(&spans, "gateway.admit");
    assert_eq!(admit.service, "bmc-gateway");
    assert_eq!(admit.parent_span_id, parent_id, "the gateway span continues the producer's trace");
    assert_eq!(admit.attr("batch"), Some(r.id.to_string().as_str()));
    assert_eq!(admit.attr("bmc"), Some("v4-10-9-0-1"));
    assert_eq!(admit.attr("protocol"), Some("sim"));
    assert_eq!(admit.attr("outcome"), Some("accepted"));

    let exec = one(&spans, "worker.execute");
    assert_eq!(exec.service, "bmc-worker");
    assert_eq!(exec.parent_span_id, admit.span_id, "the worker continues the gateway's span through JetStream");
    assert_eq!(exec.attr("bmc"), Some("v4-10-9-0-1"));
    assert_eq!(exec.attr("attempt"), Some("1"));
    assert_eq!(exec.attr("outcome"), Some("done"));

    let mut actions: Vec<&Span> = spans.iter().filter(|s| s.name == "worker.action").collect();
    actions.sort_by_key(|s| s.attr("index").map(str::to_owned));
    assert_eq!(actions.iter().map(|s| s.attr("action").unwrap()).collect::<Vec<_>>(), ["power_on", "power_status"]);
    for a in &actions {
        assert_eq!(a.parent_span_id, exec.span_id);
        assert_eq!(a.attr("provider"), Some("sim"));
        assert_eq!(a.attr("outcome"), Some("ok"));
        assert_eq!(a.attr("attempt"), Some("1"));
        assert_eq!(a.attr("bmc"), Some("v4-10-9-0-1"));
        let call: Vec<&Span> = spans.iter().filter(|s| s.name == "bmc.call" && s.parent_span_id == a.span_id).collect();
        assert_eq!(call.len(), 1, "one BMC call span under each action");
        let call = call[0];
        assert_eq!(call.attr("protocol"), Some("sim"));
        assert_eq!(call.attr("provider"), Some("sim"));
        assert_eq!(call.attr("action"), a.attr("action"));
        assert_eq!(call.attr("outcome"), Some("ok"));
        assert_eq!(call.attr("attempt"), Some("1"));
    }
    assert!(spans.iter().all(|s| s.trace_id == trace_id));

    // Result events carry the trace on.
    let end = tokio::time::Instant::now() + Duration::from_secs(10);
    let finished = loop {
        let msg = tokio::time::timeout_at(end, events.next()).await.expect("final event").unwrap();
        let ev: Event = Encoding::MessagePack.decode(&msg.payload).unwrap();
        if ev.batch == r.id && matches!(ev.event, EventKind::BatchFinished { .. }) {
            break msg;
        }
    };
    let tp = finished
        .headers
        .as_ref()
        .and_then(|h| h.get("traceparent"))
        .map(|v| v.as_str().to_owned())
        .expect("traceparent on the result");
    assert!(tp.starts_with(&format!("00-{trace_id}-")), "{tp}");
    assert_eq!(tp.split('-').nth(2), Some(exec.span_id.as_str()), "the final event names the worker's batch span");
    drop(e.sim);
}

#[tokio::test]
async fn metrics_count_what_was_executed() {
    let e = env(None, "info").await;
    let gw = metrics_port(&e.gateway).await;
    let wk = metrics_port(&e.worker).await;
    for port in [gw, wk] {
        assert_eq!(http_get(port, "/healthz").map(|r| r.0), Some(200));
        assert_eq!(http_get(port, "/readyz").map(|r| r.0), Some(200));
    }

    // Succeeds: 2 actions.
    let ok = run(
        &e.producer,
        &batch(target("10.9.1.1", "pw"), vec![Action::Power(PowerOp::On), Action::Power(PowerOp::Status)]),
        HeaderMap::new(),
    )
    .await;
    assert_eq!(ok.state, BatchState::Succeeded, "{ok:?}");
    // Fails: NMI unsupported on `basic-*`, the next action is skipped.
    let bad = run(
        &e.producer,
        &batch(target("basic-1.example", "pw"), vec![Action::Power(PowerOp::Nmi), Action::Power(PowerOp::On)]),
        HeaderMap::new(),
    )
    .await;
    assert_eq!(bad.state, BatchState::Failed, "{bad:?}");
    assert_eq!(bad.results[0].error.as_ref().unwrap().code, ErrorCode::Unsupported);
    assert_eq!(bad.results[1].error.as_ref().unwrap().code, ErrorCode::Skipped);
    // Refused: empty.
    let Reply::Error(err) = e.producer.submit(&batch(target("10.9.1.2", "pw"), vec![]), false).await else {
        panic!("empty batch accepted")
    };
    assert_eq!(err.code, ErrorCode::EmptyBatch);
    // A duplicate of the first batch.
    let mut dup = batch(target("10.9.1.1", "pw"), vec![Action::Power(PowerOp::On), Action::Power(PowerOp::Status)]);
    dup.id = Some(ok.id);
    let Reply::Accepted(a) = e.producer.submit(&dup, false).await else { panic!("duplicate refused") };
    assert!(a.duplicate);

    let g = scrape(gw);
    assert_eq!(value(&g, "bmcfleet_batches_admitted_total", &[("protocol", "sim"), ("duplicate", "false")]), 2.0);
    assert_eq!(value(&g, "bmcfleet_batches_admitted_total", &[("protocol", "sim"), ("duplicate", "true")]), 1.0);
    assert_eq!(value(&g, "bmcfleet_batches_rejected_total", &[("reason", "empty_batch")]), 1.0);
    assert_eq!(value(&g, "bmcfleet_batches_rejected_total", &[]), 1.0);
    assert_eq!(value(&g, "bmcfleet_admit_duration_seconds", &[]), 3.0);

    let w = scrape(wk);
    let actions = |action, outcome| {
        value(&w, "bmcfleet_actions_total", &[("action", action), ("protocol", "sim"), ("outcome", outcome)])
    };
    assert_eq!(actions("power_on", "ok"), 1.0);
    assert_eq!(actions("power_status", "ok"), 1.0);
    assert_eq!(actions("power_nmi", "unsupported"), 1.0);
    assert_eq!(actions("power_on", "skipped"), 1.0);
    assert_eq!(value(&w, "bmcfleet_actions_total", &[]), 4.0);
    assert_eq!(value(&w, "bmcfleet_batches_finished_total", &[("state", "succeeded")]), 1.0);
    assert_eq!(value(&w, "bmcfleet_batches_finished_total", &[("state", "failed")]), 1.0);
    // Three BMC calls ran (the skipped action made none).
    assert_eq!(value(&w, "bmcfleet_bmc_call_duration_seconds", &[("protocol", "sim")]), 3.0);
    assert_eq!(value(&w, "bmcfleet_queue_wait_seconds", &[]), 2.0);
    assert_eq!(value(&w, "bmcfleet_partitions_owned", &[]), 8.0);
    assert_eq!(value(&w, "bmcfleet_lease_changes_total", &[("change", "acquired")]), 8.0);
    assert_eq!(value(&w, "bmcfleet_redeliveries_total", &[]), 0.0);
    assert_eq!(value(&w, "bmcfleet_lanes_in_flight", &[]), 0.0);
    assert!(w.docs.contains_key("bmcfleet_lanes_in_flight"));
    drop(e.sim);
}

/// The autoscaling signal: the gateway's `bmcfleet_jobs_backlog` follows the
/// job stream (queued jobs count while no worker runs, and drop to zero
/// once a worker finished them).
#[tokio::test]
async fn gateway_exports_the_job_backlog_for_autoscaling() {
    let stack = SimStack::start(SimConfig::default()).await;
    let port = metrics_port(&stack.gateway).await;
    for i in 0..5 {
        let b = batch(target(&format!("10.9.4.{}", i % 2 + 1), "pw"), vec![Action::Power(PowerOp::Status)]);
        let Reply::Accepted(_) = stack.producer.submit(&b, false).await else { panic!("not accepted") };
    }
    let backlog = || value(&scrape(port), "bmcfleet_jobs_backlog", &[]);
    let within = Duration::from_secs(15); // the gateway reads the stream every 5 s
    bmcfleet_tests::eventually(within, "a backlog of 5 jobs", || async { (backlog() == 5.0).then_some(()) }).await;
    let _worker = stack.worker("w0", &[]);
    bmcfleet_tests::eventually(within + Duration::from_secs(20), "the backlog drained", || async {
        (backlog() == 0.0).then_some(())
    })
    .await;
}

#[tokio::test]
async fn secrets_never_reach_logs_or_spans() {
    const INLINE: &str = "pw-inline-S3cr3t-7731";
    const RAW: &str = "pw-raw-body-S3cr3t-4417";
    const NEW_USER: &str = "pw-new-user-S3cr3t-9902";
    let collector = OtlpCollector::start().await;
    let e = env(Some(&collector), TRACE_ALL).await;
    let trace_id = "0af7651916cd43dd8448eb211c80319c";
    let mut h = HeaderMap::new();
    h.insert("traceparent", format!("00-{trace_id}-b7ad6b7169203331-01").as_str());
    let mut b = batch(
        target("10.9.2.1", INLINE),
        vec![
            Action::Raw(RawRequest::Redfish(RawRedfish {
                method: HttpMethod::Patch,
                path: "/redfish/v1/Systems/1/Bios/Settings".into(),
                body: Some(serde_json::json!({"Attributes": {"AdminPassword": RAW}})),
            })),
            Action::User(UserOp::Create(UserSpec {
                name: "ops2".into(),
                password: Secret::new(NEW_USER),
                role: UserRole::Operator,
                enabled: true,
            })),
            Action::Power(PowerOp::Status),
        ],
    );
    b.on_error = OnError::Continue;
    let r = run(&e.producer, &b, h).await;
    assert_eq!(r.results.len(), 3, "{r:?}");
    let spans = collector
        .wait_trace(trace_id, Duration::from_secs(30), |s| {
            s.iter().filter(|x| x.name == "worker.action").count() == 3 && s.iter().any(|x| x.name == "worker.execute")
        })
        .await;

    // The logs did record the batch and each action with parameters (redacted).
    let gw_log = e.gateway.log_text();
    let wk_log = e.worker.log_text();
    assert!(gw_log.contains("Batch admitted."), "{gw_log}");
    assert!(gw_log.contains(r#""credentials":"sealed""#), "credentials are logged by kind only: {gw_log}");
    assert_eq!(wk_log.matches("Action finished.").count(), 3, "{wk_log}");
    assert!(wk_log.contains("Bios/Settings"), "raw request parameters are logged");
    for line in gw_log.lines().chain(wk_log.lines()) {
        assert!(serde_json::from_str::<serde_json::Value>(line).is_ok(), "not a JSON log line: {line}");
        for secret in [INLINE, RAW, NEW_USER] {
            assert!(!line.contains(secret), "secret in a log line: {line}");
        }
    }
    // Every span attribute and event attribute, and every exported byte.
    let all = collector.spans();
    assert!(all.len() >= spans.len());
    for s in &all {
        let texts =
            s.attributes.values().chain(s.events.iter().flat_map(|(n, a)| std::iter::once(n).chain(a.values())));
        for t in texts {
            for secret in [INLINE, RAW, NEW_USER] {
                assert!(!t.contains(secret), "secret in span {} attribute/event: {t}", s.name);
            }
        }
    }
    assert!(
        all.iter().any(|s| s.events.iter().any(|(_, a)| a.values().any(|v| v.contains("Bios/Settings")))),
        "span events carry the parameters logs may show"
    );
    for body in collector.raw_bodies() {
        for secret in [INLINE, RAW, NEW_USER] {
            assert!(!body.windows(secret.len()).any(|w| w == secret.as_bytes()), "secret in an OTLP export");
        }
    }
    drop(e.sim);
}

#[test]
fn grafana_dashboard_covers_the_metrics() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/grafana/bmcfleet.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let d: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");
    assert!(d["title"].as_str().is_some_and(|t| !t.is_empty()));
    assert!(d["uid"].as_str().is_some());
    let panels = d["panels"].as_array().expect("panels");
    let titles: Vec<&str> = panels.iter().filter_map(|p| p["title"].as_str()).collect();
    for expected in [
        "Throughput",
        "Error rate by protocol",
        "BMC call latency p50 / p99",
        "Queue wait",
        "Partitions owned",
        "Rejected",
    ] {
        assert!(titles.iter().any(|t| t.starts_with(expected)), "missing panel `{expected}` in {titles:?}");
    }
    let exprs: Vec<&str> = panels
        .iter()
        .flat_map(|p| p["targets"].as_array().into_iter().flatten())
        .filter_map(|t| t["expr"].as_str())
        .collect();
    for metric in [
        "bmcfleet_batches_admitted_total",
        "bmcfleet_batches_rejected_total",
        "bmcfleet_actions_total",
        "bmcfleet_bmc_call_duration_seconds_bucket",
        "bmcfleet_queue_wait_seconds_bucket",
        "bmcfleet_partitions_owned",
        "bmcfleet_lanes_in_flight",
        "bmcfleet_lease_changes_total",
        "bmcfleet_redeliveries_total",
        "bmcfleet_bmc_retries_total",
        "bmcfleet_breakers_open",
        "bmcfleet_breaker_opens_total",
        "bmcfleet_breaker_rejections_total",
        "bmcfleet_jobs_backlog",
    ] {
        assert!(exprs.iter().any(|e| e.contains(metric)), "no panel queries {metric}");
    }
    for p in panels {
        assert!(p["type"].as_str().is_some() && p["gridPos"].is_object(), "panel without type/gridPos: {p}");
    }
}
