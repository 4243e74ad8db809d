//! End to end through a real nats-server, gateway and worker processes, with
//! the simulated BMC fleet recording what every worker did.

use bmcfleet_schema::*;
use bmcfleet_testing::SimConfig;
use bmcfleet_tests::producer::{stream_messages, GatewayStack, SimStack};
use futures::StreamExt as _;
use std::time::Duration;

fn batch(address: &str, actions: Vec<Action>) -> Batch {
    let mut b = sim_batch(address, actions);
    b.deadline = Some(Duration::from_secs(60));
    b
}

async fn env(workers: usize) -> SimStack {
    SimStack::start(SimConfig::default()).await.with_workers(workers, &[]).await
}

#[tokio::test]
async fn submit_and_wait_returns_the_final_result() {
    let e = env(1).await;
    let b = batch(
        "10.0.0.5",
        vec![
            Action::BootDevice(BootDeviceRequest { device: BootDevice::Pxe, persistent: false, efi: true }),
            Action::Power(PowerOp::On),
            Action::Power(PowerOp::Status),
        ],
    );
    let reply = e.producer.submit(&b, true).await;
    let Reply::Result(r) = reply else { panic!("expected a result, got {reply:?}") };
    assert_eq!(r.state, BatchState::Succeeded, "{r:?}");
    assert_eq!(r.results.len(), 3);
    assert_eq!(r.results[2].data, Some(ActionData::PowerState(PowerState::On)));
    assert!(r.results.iter().all(|a| a.provider.as_deref() == Some("sim")));
    assert_eq!(e.sim.power("v4-10-0-0-5"), Some(PowerState::On));
    let boot = e.sim.boot("v4-10-0-0-5").unwrap();
    assert_eq!((boot.device, boot.efi), (BootDevice::Pxe, true));
    // The status endpoint serves the same final result.
    let Reply::Status(s) = e.producer.status(r.id).await else { panic!("status") };
    assert_eq!(s.state, BatchState::Succeeded);
    assert_eq!(s.result.unwrap(), r);
    // Work-queue: the finished job is gone from the jobs stream.
    let subjects = e.topology.subjects();
    bmcfleet_tests::eventually(Duration::from_secs(10), "job acknowledged", || {
        let c = e.producer.client.clone();
        let s = subjects.jobs_stream();
        async move { (stream_messages(&c, &s).await == 0).then_some(()) }
    })
    .await;
    drop(e.nats);
}

use bmcfleet_tests::checks::{assert_exactly_once, assert_ordered, mixed_actions, sim_batch, submit_all};
use bmcfleet_tests::producer::ResultCollector;
use std::collections::HashMap;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_bmc_order_holds_across_three_workers() {
    let stack = SimStack::start(SimConfig { latency: Duration::from_millis(1), ..SimConfig::default() })
        .await
        .with_workers(3, &[])
        .await;
    let (p, topo, sim) = (&stack.producer, &stack.topology, &stack.sim);
    let mut results = ResultCollector::start(&p.client, &topo.subjects()).await;

    // 2,000 batches over 50 BMCs, interleaved.
    let batches: Vec<Batch> =
        (0..2000).map(|i| batch(&format!("10.1.0.{}", i % 50 + 1), mixed_actions(i / 50))).collect();
    let (ids, per_bmc) = submit_all(p, batches).await;
    results.wait_all(&ids, Duration::from_secs(240)).await;

    assert!(results.results.values().all(|r| r.state == BatchState::Succeeded), "every batch succeeds");
    let log = sim.log();
    for (bmc, submitted) in &per_bmc {
        for id in submitted {
            if !log.iter().any(|e| e.call.as_ref().is_some_and(|c| c.batch == *id)) {
                eprintln!("batch {id} of {bmc} never reached the simulator; result: {:?}", results.results.get(id));
            }
        }
    }
    assert_ordered(&log, &per_bmc);
    // Exactly once: every action of every batch ran once.
    let mut count: HashMap<(BatchId, u32), usize> = HashMap::new();
    for e in &log {
        let c = e.call.as_ref().unwrap();
        *count.entry((c.batch, c.index)).or_default() += 1;
    }
    let expected: usize = results.results.values().map(|r| r.results.len()).sum();
    assert_eq!(count.len(), expected);
    assert!(count.values().all(|n| *n == 1), "an action ran twice");
    // Work was spread: more than one worker executed batches.
    let workers: std::collections::HashSet<_> = results.results.values().map(|r| r.worker.clone()).collect();
    assert!(workers.len() >= 2, "all batches ran on {workers:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_of_a_worker_loses_nothing_and_keeps_order() {
    let mut stack = SimStack::start(SimConfig { latency: Duration::from_millis(5), ..SimConfig::default() })
        .await
        .with_workers(3, &[])
        .await;
    let (p, topo, sim) = (&stack.producer, &stack.topology, &stack.sim);
    let mut results = ResultCollector::start(&p.client, &topo.subjects()).await;

    let batches: Vec<Batch> =
        (0..600).map(|i| batch(&format!("10.2.0.{}", i % 20 + 1), mixed_actions(i / 20))).collect();
    let (ids, per_bmc) = submit_all(p, batches).await;
    // Kill w0 once it has demonstrably been executing.
    assert!(
        sim.wait_for(Duration::from_secs(60), |log| log
            .iter()
            .filter(|e| e.call.as_ref().is_some_and(|c| c.worker == "w0"))
            .count()
            > 20)
            .await,
        "w0 never executed anything"
    );
    stack.workers[0].kill();
    results.wait_all(&ids, Duration::from_secs(240)).await;

    let log = sim.log();
    assert_ordered(&log, &per_bmc);
    // Nothing lost, and only an action in flight on w0 when it died may run
    // again (idempotent) or be reported interrupted (non-idempotent).
    let killed = std::collections::HashSet::from(["w0".to_string()]);
    let cost = assert_exactly_once(&log, &ids, &results.results, &killed);
    let (reruns, interrupted) = (cost.reruns, cost.interrupted);
    // At most one action per BMC lane was in flight on w0 when it died.
    assert!(reruns + interrupted <= 20, "reruns {reruns} + interrupted {interrupted} exceed the lanes in flight");
    eprintln!("failover: {} batches, {reruns} idempotent re-runs, {interrupted} interrupted", ids.len());
}

#[tokio::test]
async fn the_same_batch_id_executes_once() {
    let e = env(1).await;
    let mut b = batch("10.3.0.1", vec![Action::Power(PowerOp::Cycle)]);
    let id = ulid::Ulid::new();
    b.id = Some(id);
    let Reply::Accepted(first) = e.producer.submit(&b, false).await else { panic!("first submit") };
    let Reply::Accepted(second) = e.producer.submit(&b, false).await else { panic!("second submit") };
    assert_eq!((first.id, second.id), (id, id));
    assert!(!first.duplicate && second.duplicate);
    // Waiting on a third copy returns the one result.
    let Reply::Result(r) = e.producer.submit(&b, true).await else { panic!("wait") };
    assert_eq!(r.state, BatchState::Succeeded);
    // Once finished and acknowledged, the id is still remembered (status record).
    let Reply::Accepted(late) = e.producer.submit(&b, false).await else { panic!("late submit") };
    assert!(late.duplicate);
    // Waiting on a copy of a finished batch answers from its status record
    // (no result event will come again).
    let Reply::Result(again) = e.producer.submit(&b, true).await else { panic!("wait on a finished duplicate") };
    assert_eq!((again.id, again.state), (id, BatchState::Succeeded));
    let runs = e.sim.log().iter().filter(|x| x.call.as_ref().is_some_and(|c| c.batch == id)).count();
    assert_eq!(runs, 1, "power cycle ran {runs} times");
}

/// Past JetStream's dedupe window the status record is what remembers a
/// batch id (admission does not read it first): a resubmission is answered
/// `duplicate`, and the copy it stored on the way never runs.
#[tokio::test]
async fn a_batch_id_past_the_dedupe_window_is_a_duplicate_and_runs_once() {
    let e = SimStack::start_with(SimConfig::default(), Default::default(), &["--dedupe-window", "1s"])
        .await
        .with_workers(1, &[])
        .await;
    let mut b = batch("10.3.0.9", vec![Action::Power(PowerOp::Cycle)]);
    let id = ulid::Ulid::new();
    b.id = Some(id);
    let Reply::Result(r) = e.producer.submit(&b, true).await else { panic!("first submit") };
    assert_eq!(r.state, BatchState::Succeeded, "{r:?}");
    let jobs = e.topology.subjects().jobs_stream();
    // JetStream forgets the id after its window (checked below: the copy is stored).
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let before = bmcfleet_tests::producer::stream_last_sequence(&e.producer.client, &jobs).await;
    let Reply::Accepted(late) = e.producer.submit(&b, false).await else { panic!("late submit") };
    assert!(late.duplicate && late.id == id, "{late:?}");
    assert_eq!(
        bmcfleet_tests::producer::stream_last_sequence(&e.producer.client, &jobs).await,
        before + 1,
        "past the window JetStream stores the copy (else this test proves nothing)"
    );
    // Waiting on it answers the one result from the record.
    let Reply::Result(again) = e.producer.submit(&b, true).await else { panic!("wait on the duplicate") };
    assert_eq!((again.id, again.state), (id, BatchState::Succeeded));
    bmcfleet_tests::eventually(Duration::from_secs(30), "the copies taken off the queue", || {
        let (client, jobs) = (e.producer.client.clone(), jobs.clone());
        async move { (stream_messages(&client, &jobs).await == 0).then_some(()) }
    })
    .await;
    let runs = e.sim.log().iter().filter(|x| x.call.as_ref().is_some_and(|c| c.batch == id)).count();
    assert_eq!(runs, 1, "power cycle ran {runs} times");
}

#[tokio::test]
async fn bad_input_gets_a_typed_error_and_nothing_is_stored() {
    use async_nats::HeaderMap;
    let GatewayStack { nats: _nats, topology: topo, gateway: _gw, producer: p } =
        GatewayStack::start(&["--max-message-bytes", "4096"]).await;
    let json = || {
        let mut h = HeaderMap::new();
        h.insert("Content-Type", "application/json");
        h
    };
    let cases: Vec<(&str, HeaderMap, Vec<u8>, ErrorCode)> = vec![
        ("malformed msgpack", HeaderMap::new(), vec![0xc1, 0x00, 0xff], ErrorCode::Malformed),
        ("malformed json", json(), b"{\"bmc\": ".to_vec(), ErrorCode::Malformed),
        (
            "unknown field",
            json(),
            br#"{"machine":"m1","actions":["inventory"],"priority":9}"#.to_vec(),
            ErrorCode::Malformed,
        ),
        ("oversized", json(), vec![b' '; 5000], ErrorCode::TooLarge),
        (
            "invalid address",
            json(),
            br#"{"bmc":{"address":"300.1.1.1","credentials":{"ref":"r"}},"actions":["inventory"]}"#.to_vec(),
            ErrorCode::InvalidAddress,
        ),
        ("empty batch", json(), br#"{"machine":"m1","actions":[]}"#.to_vec(), ErrorCode::EmptyBatch),
        (
            "update without name",
            json(),
            br#"{"machine":"m1","actions":[{"user":{"update":{"name":" ","enabled":false}}}]}"#.to_vec(),
            ErrorCode::InvalidField,
        ),
        (
            "unknown content type",
            {
                let mut h = HeaderMap::new();
                h.insert("Content-Type", "text/xml");
                h
            },
            b"<batch/>".to_vec(),
            ErrorCode::Malformed,
        ),
    ];
    for (what, headers, body, code) in cases {
        let (h, reply) = p.raw("submit", headers, body, Duration::from_secs(10)).await;
        let Reply::Error(err) = reply else { panic!("{what}: expected an error, got {reply:?}") };
        assert_eq!(err.code, code, "{what}: {err}");
        assert!(!err.message.is_empty());
        assert_eq!(
            h.get("Nats-Service-Error-Code").map(|v| v.as_str().to_owned()),
            Some(code.status().to_string()),
            "{what}"
        );
    }
    let subjects = topo.subjects();
    assert_eq!(stream_messages(&p.client, &subjects.jobs_stream()).await, 0, "a refused batch was queued");
    assert_eq!(
        stream_messages(&p.client, &format!("KV_{}", subjects.batches_bucket())).await,
        0,
        "a refused batch left a status"
    );
    // A status query for an unknown id is a typed not_found.
    let Reply::Error(e) = p.status(ulid::Ulid::new()).await else { panic!("status of unknown id") };
    assert_eq!(e.code, ErrorCode::NotFound);
}

#[tokio::test]
async fn failures_are_typed_results_and_the_lane_goes_on() {
    let e = env(1).await;
    // Unknown credential reference.
    let b = bmcfleet_tests::producer::ref_machine_batch(
        &e.producer.client,
        &e.topology.subjects(),
        "10.4.0.1",
        "no-such-cred",
        vec![Action::Power(PowerOp::On), Action::Power(PowerOp::Status)],
    )
    .await;
    let Reply::Result(r) = e.producer.submit(&b, true).await else { panic!("result") };
    assert_eq!(r.state, BatchState::Failed);
    assert_eq!(r.results[0].error.as_ref().unwrap().code, ErrorCode::UnknownCredential);
    assert_eq!(r.results[1].error.as_ref().unwrap().code, ErrorCode::Skipped);
    // Wrong password, then the same BMC works with the right one.
    let mut b = batch("10.4.0.2", vec![Action::Power(PowerOp::On)]);
    b.bmc.as_mut().unwrap().credentials =
        Credentials::Inline { username: "admin".into(), password: Secret::new("wrong") };
    let Reply::Result(r) = e.producer.submit(&b, true).await else { panic!("result") };
    assert_eq!(r.results[0].error.as_ref().unwrap().code, ErrorCode::AuthFailed);
    let Reply::Result(r) = e.producer.submit(&batch("10.4.0.2", vec![Action::Power(PowerOp::On)]), true).await else {
        panic!()
    };
    assert_eq!(r.state, BatchState::Succeeded);
    // on_error: continue runs past a failure; unsupported operations are typed.
    let mut b = batch("basic-1.lab", vec![Action::Power(PowerOp::Nmi), Action::Power(PowerOp::Status)]);
    b.on_error = OnError::Continue;
    let Reply::Result(r) = e.producer.submit(&b, true).await else { panic!() };
    assert_eq!(r.results[0].error.as_ref().unwrap().code, ErrorCode::Unsupported);
    assert!(r.results[1].is_ok());
    // A missing user is never created by an update.
    let upd = Action::User(UserOp::Update(UserUpdate {
        name: "ghost".into(),
        password: Some("x".into()),
        role: None,
        enabled: None,
    }));
    let Reply::Result(r) = e.producer.submit(&batch("10.4.0.3", vec![upd, Action::User(UserOp::List)]), true).await
    else {
        panic!()
    };
    assert_eq!(r.results[0].error.as_ref().unwrap().code, ErrorCode::TargetNotFound);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_bmc_hits_its_deadline_without_stalling_others() {
    let e = env(1).await;
    let mut hung = batch("hang-7.lab", vec![Action::Power(PowerOp::Status), Action::Power(PowerOp::On)]);
    hung.deadline = Some(Duration::from_secs(3));
    let p2 = e.producer.clone();
    let hung_result = tokio::spawn(async move { p2.submit(&hung, true).await });
    // Meanwhile other BMCs (likely on the same worker and partition) keep working.
    for i in 0..20 {
        let Reply::Result(r) =
            e.producer.submit(&batch(&format!("10.5.0.{i}"), vec![Action::Power(PowerOp::On)]), true).await
        else {
            panic!()
        };
        assert_eq!(r.state, BatchState::Succeeded);
    }
    let Reply::Result(r) = hung_result.await.unwrap() else { panic!("hung batch result") };
    assert_eq!(r.state, BatchState::Failed);
    let codes: Vec<_> = r.results.iter().map(|a| a.error.as_ref().unwrap().code).collect();
    assert_eq!(codes, vec![ErrorCode::DeadlineExceeded, ErrorCode::Skipped]);
}

#[tokio::test]
async fn cancel_a_queued_and_a_running_batch() {
    let e = env(1).await;
    // A slow BMC keeps batch 1 busy; batch 2 waits behind it in the lane.
    let b1 = batch(
        "slow-1.lab",
        vec![Action::Power(PowerOp::On), Action::Power(PowerOp::Status), Action::Power(PowerOp::Status)],
    );
    let b2 = batch("slow-1.lab", vec![Action::Power(PowerOp::Off)]);
    let Reply::Accepted(a1) = e.producer.submit(&b1, false).await else { panic!() };
    let Reply::Accepted(a2) = e.producer.submit(&b2, false).await else { panic!() };
    let mut results = ResultCollector::start(&e.producer.client, &e.topology.subjects()).await;
    assert!(
        e.sim
            .wait_for(Duration::from_secs(20), |log| log
                .iter()
                .any(|x| x.call.as_ref().is_some_and(|c| c.batch == a1.id)))
            .await
    );
    let Reply::Cancelled { state, .. } = e.producer.cancel(a2.id).await else { panic!("cancel queued") };
    assert_eq!(state, BatchState::Cancelled);
    let Reply::Cancelled { state, .. } = e.producer.cancel(a1.id).await else { panic!("cancel running") };
    assert_eq!(state, BatchState::Running);
    results.wait_all(&[a1.id, a2.id], Duration::from_secs(30)).await;
    let r1 = &results.results[&a1.id];
    assert_eq!(r1.state, BatchState::Cancelled);
    assert!(r1.results[0].is_ok(), "the running action finished");
    assert_eq!(r1.results.last().unwrap().error.as_ref().unwrap().code, ErrorCode::Cancelled);
    assert_eq!(results.results[&a2.id].state, BatchState::Cancelled);
    // Batch 2 never touched the BMC, and cancelling a finished batch is a conflict.
    assert!(!e.sim.log().iter().any(|x| x.call.as_ref().is_some_and(|c| c.batch == a2.id)));
    let Reply::Error(err) = e.producer.cancel(a1.id).await else { panic!() };
    assert_eq!(err.code, ErrorCode::Conflict);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_hands_partitions_back_and_work_completes() {
    let stack = SimStack::start(SimConfig { latency: Duration::from_millis(20), ..SimConfig::default() }).await;
    let (p, topo, sim) = (&stack.producer, &stack.topology, &stack.sim);
    let mut w0 = stack.worker("w0", &[]);
    stack.wait_partitions_owned().await;
    let mut results = ResultCollector::start(&p.client, &topo.subjects()).await;
    let batches: Vec<Batch> = (0..100).map(|i| batch(&format!("10.6.0.{}", i % 10), mixed_actions(i / 10))).collect();
    let (ids, per_bmc) = submit_all(p, batches).await;
    let _w1 = stack.worker("w1", &[]);
    assert!(sim.wait_for(Duration::from_secs(30), |log| log.len() > 10).await);
    let status = w0.terminate(Duration::from_secs(20)).expect("w0 exits on SIGTERM within the drain timeout");
    assert!(status.success(), "w0 exit status {status:?}");
    results.wait_all(&ids, Duration::from_secs(60)).await;
    assert!(
        results.results.values().all(|r| r.state == BatchState::Succeeded),
        "a graceful hand-over interrupts nothing"
    );
    let log = sim.log();
    for id in &ids {
        if !log.iter().any(|e| e.call.as_ref().is_some_and(|c| c.batch == *id)) {
            eprintln!("batch {id} never reached the simulator; result: {:?}", results.results.get(id));
            for l in w0.log_text().lines().chain(_w1.log_text().lines()).filter(|l| l.contains(&id.to_string())) {
                eprintln!("  {l}");
            }
        }
    }
    assert_ordered(&log, &per_bmc);
}

#[test]
fn contradictory_gateway_flags_stop_it_at_start() {
    use bmcfleet_tests::Process;
    let mut g = Process::spawn(
        "bmc-gateway",
        &["--default-deadline".into(), "3h".into()],
        &[("BMCFLEET_MAX_DEADLINE", "1h".into())],
    );
    let status = g.wait();
    assert_eq!(status.code(), Some(2), "{}", g.log_text());
    assert!(g.log_text().contains("--default-deadline (3h) must not exceed --max-deadline (1h)"), "{}", g.log_text());
    // A tenant's share of a budget larger than the budget, by flag or by environment.
    let mut g = Process::spawn(
        "bmc-gateway",
        &["--max-concurrent-requests".into(), "10".into(), "--max-requests-per-tenant".into(), "11".into()],
        &[],
    );
    assert_eq!(g.wait().code(), Some(2), "{}", g.log_text());
    assert!(
        g.log_text().contains("--max-requests-per-tenant (11) must not exceed --max-concurrent-requests (10)"),
        "{}",
        g.log_text()
    );
    let mut g = Process::spawn("bmc-gateway", &[], &[("BMCFLEET_MAX_WAITING_PER_TENANT", "2000".into())]);
    assert_eq!(g.wait().code(), Some(2), "{}", g.log_text());
    assert!(
        g.log_text().contains("--max-waiting-per-tenant (2000) must not exceed --max-waiting-submits (1024)"),
        "{}",
        g.log_text()
    );
}

#[test]
fn environment_variables_are_validated_exactly_like_flags() {
    use bmcfleet_tests::Process;
    let cases: [(&str, &str, &str, &str); 5] = [
        ("bmc-gateway", "--max-wait", "BMCFLEET_MAX_WAIT", "30"),
        ("bmc-gateway", "--nats-url", "BMCFLEET_NATS_URL", "http://127.0.0.1:4222"),
        ("bmc-worker", "--lease-ttl", "BMCFLEET_LEASE_TTL", "15"),
        ("bmc-worker", "--partitions", "BMCFLEET_PARTITIONS", "0"),
        // Less than the largest Redfish answer's charge: no such answer could ever be read.
        ("bmc-worker", "--redfish-max-buffered-bytes", "BMCFLEET_REDFISH_MAX_BUFFERED_BYTES", "1048576"),
    ];
    for (bin, flag, var, bad) in cases {
        let mut by_flag = Process::spawn(bin, &[flag.into(), bad.into()], &[]);
        let mut by_env = Process::spawn(bin, &[], &[(var, bad.into())]);
        let (s1, s2) = (by_flag.wait(), by_env.wait());
        assert_eq!(s1.code(), Some(2), "{bin} {flag} {bad}: {}", by_flag.log_text());
        assert_eq!(s2.code(), Some(2), "{bin} {var}={bad}: {}", by_env.log_text());
        let (l1, l2) = (by_flag.log_text(), by_env.log_text());
        // Same parser, same complaint (clap names the flag in both).
        let reason = |l: &str| {
            l.lines().find(|x| x.starts_with("error:")).map(|x| x.split(": ").last().unwrap_or("").to_owned())
        };
        assert_eq!(reason(&l1), reason(&l2), "{bin}: flag said {l1:?}, env said {l2:?}");
        assert!(l1.contains(flag) && l2.contains(flag), "{l1}\n{l2}");
    }
}

#[tokio::test]
async fn the_gateway_is_a_discoverable_micro_service() {
    let e = env(1).await;
    let reply = e.producer.client.request("$SRV.INFO.bmcfleet-gateway", "".into()).await.expect("service info");
    let info: serde_json::Value = serde_json::from_slice(&reply.payload).unwrap();
    assert_eq!(info["name"], "bmcfleet-gateway");
    let subjects: Vec<&str> =
        info["endpoints"].as_array().unwrap().iter().map(|e| e["subject"].as_str().unwrap()).collect();
    for s in ["bmcfleet.submit", "bmcfleet.status", "bmcfleet.cancel"] {
        assert!(subjects.contains(&s), "{subjects:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_longer_than_ack_wait_is_not_redelivered() {
    // Workers run with --ack-wait 5s; this batch takes about 8 s (4 actions × 2 s on a slow-* BMC).
    let e = env(1).await;
    let b = batch(
        "slow-9.lab",
        vec![
            Action::Power(PowerOp::On),
            Action::Power(PowerOp::Cycle),
            Action::Power(PowerOp::Status),
            Action::Inventory,
        ],
    );
    let Reply::Result(r) = e.producer.submit(&b, true).await else { panic!("result") };
    assert_eq!(r.state, BatchState::Succeeded, "{r:?}");
    assert_eq!(r.deliveries, 1, "in-progress acks keep a long batch from being redelivered");
    let runs = e.sim.log().iter().filter(|x| x.call.as_ref().is_some_and(|c| c.batch == r.id)).count();
    assert_eq!(runs, 4);
}

#[tokio::test]
async fn idle_lanes_are_evicted_and_their_sessions_closed() {
    let stack = SimStack::start(SimConfig::default()).await.with_workers(1, &["--lane-idle-timeout", "1s"]).await;
    let (p, sim) = (&stack.producer, &stack.sim);
    for i in 0..5 {
        let Reply::Result(r) =
            p.submit(&batch(&format!("10.11.0.{i}"), vec![Action::Power(PowerOp::Status)]), true).await
        else {
            panic!()
        };
        assert_eq!(r.state, BatchState::Succeeded);
    }
    assert_eq!(sim.connections(), 5, "one session per BMC lane");
    // Each idle lane is dropped and closes its BMC session.
    bmcfleet_tests::eventually(Duration::from_secs(15), "idle lanes evicted", || {
        let closed = sim.closed_connections();
        async move { (closed == 5).then_some(()) }
    })
    .await;
    // A new batch for an evicted BMC opens a new session.
    let Reply::Result(r) = p.submit(&batch("10.11.0.0", vec![Action::Power(PowerOp::Status)]), true).await else {
        panic!()
    };
    assert_eq!(r.state, BatchState::Succeeded);
    assert_eq!(sim.connections(), 6);
}

#[tokio::test]
async fn bmcctl_submits_waits_and_reports() {
    let e = env(1).await;
    // Async process handling: the simulated BMC runs on this test's runtime.
    let url = e.nats.url();
    let bmcctl = |args: &[&str]| {
        let mut cmd = tokio::process::Command::new(bmcfleet_tests::bin("bmcctl"));
        cmd.args(["--nats-url", &url]).args(args).env("BMC_PW", "from-the-environment");
        async move {
            let out = cmd.output().await.unwrap();
            (
                out.status.code(),
                String::from_utf8_lossy(&out.stdout).into_owned(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            )
        }
    };
    // A copy of every submit request as it travels from bmcctl to the gateway.
    let mut submits = e.nats.client().await.subscribe("bmcfleet.submit").await.unwrap();
    let (code, out, err) = bmcctl(&[
        "power",
        "on",
        "--bmc",
        "10.12.0.1",
        "--protocol",
        "sim",
        "--user",
        "admin",
        "--password-env",
        "BMC_PW",
        "--wait",
    ])
    .await;
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("Succeeded") && out.contains("power_on"), "{out}");
    assert_eq!(e.sim.power("v4-10-12-0-1"), Some(PowerState::On));
    assert!(!out.contains("from-the-environment") && !err.contains("from-the-environment"));
    let seen = tokio::time::timeout(Duration::from_secs(5), submits.next()).await.unwrap().unwrap();
    assert!(
        String::from_utf8_lossy(&seen.payload).contains("from-the-environment"),
        "inline: in clear up to the gateway"
    );

    // With the workers' key, bmcctl seals the password itself: the request
    // carries only the box, and the batch still runs (the worker opens it).
    let public = e.topology.sealing.public.clone();
    for args in [
        vec![
            "power",
            "off",
            "--bmc",
            "10.12.0.1",
            "--protocol",
            "sim",
            "--user",
            "admin",
            "--password-env",
            "BMC_PW",
            "--wait",
            "--workers-public-key",
            &public,
        ],
        vec!["submit", "-", "--wait", "--workers-public-key", &public],
    ] {
        let mut cmd = tokio::process::Command::new(bmcfleet_tests::bin("bmcctl"));
        cmd.args(["--nats-url", &url]).args(&args).env("BMC_PW", "from-the-environment");
        cmd.stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let mut child = cmd.spawn().unwrap();
        let body = r#"{"bmc":{"address":"10.12.0.1","protocol":"sim","credentials":{"inline":{"username":"admin","password":"from-the-environment"}}},"actions":[{"power":"on"}]}"#;
        use tokio::io::AsyncWriteExt;
        child.stdin.take().unwrap().write_all(body.as_bytes()).await.unwrap();
        let out = child.wait_with_output().await.unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {text}{}", String::from_utf8_lossy(&out.stderr));
        assert!(text.contains("Succeeded"), "{text}");
        let seen = tokio::time::timeout(Duration::from_secs(5), submits.next()).await.unwrap().unwrap();
        let payload = String::from_utf8_lossy(&seen.payload);
        assert!(
            !payload.contains("from-the-environment") && payload.contains("sealed") && payload.contains(&public),
            "{payload}"
        );
    }
    assert_eq!(e.sim.power("v4-10-12-0-1"), Some(PowerState::On), "off, then on again");
    // A key that is not a workers' public key is refused when parsing flags.
    let (code, _, err) = bmcctl(&[
        "power",
        "on",
        "--bmc",
        "10.12.0.1",
        "--user",
        "admin",
        "--password-env",
        "BMC_PW",
        "--workers-public-key",
        "SXnope",
    ])
    .await;
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("not a public xkey"), "{err}");

    let (code, out, _) = bmcctl(&[
        "--json",
        "boot",
        "pxe",
        "--once",
        "--efi",
        "--bmc",
        "10.12.0.1",
        "--protocol",
        "sim",
        "--user",
        "admin",
        "--password-env",
        "BMC_PW",
        "--no-wait",
    ])
    .await;
    assert_eq!(code, Some(0));
    let reply: Reply = serde_json::from_str(&out).expect("--json prints a reply");
    let Reply::Accepted(a) = reply else { panic!("{out}") };
    let (code, out, _) = bmcctl(&["watch", &a.id.to_string()]).await;
    // The batch may have finished before watch subscribed: status is the reliable read.
    let _ = (code, out);
    let (code, out, _) = bmcctl(&["status", &a.id.to_string()]).await;
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains(&a.id.to_string()));
    // Table mode reads every result as text, never as raw JSON.
    let sim_target =
        ["--bmc", "10.12.0.1", "--protocol", "sim", "--user", "admin", "--password-env", "BMC_PW", "--wait"];
    for (command, says) in [(&["boot", "get"][..], "boot=pxe"), (&["user", "list"], " users")] {
        let (code, out, err) = bmcctl(&[command, &sim_target[..]].concat()).await;
        assert_eq!(code, Some(0), "{command:?}: {out}{err}");
        assert!(out.contains(says) && !out.contains('{'), "{command:?}: {out}");
    }

    // A failing batch exits 1; a refused one exits 3 with the typed error.
    let dir = tempfile::tempdir().unwrap();
    let failing = dir.path().join("fail.json");
    std::fs::write(&failing, r#"{"bmc":{"address":"basic-2.lab","protocol":"sim","credentials":{"inline":{"username":"admin","password":"pw"}}},"actions":[{"power":"nmi"}]}"#).unwrap();
    let (code, out, _) = bmcctl(&["submit", failing.to_str().unwrap(), "--wait"]).await;
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("unsupported"), "{out}");
    let refused = dir.path().join("bad.json");
    std::fs::write(&refused, r#"{"bmc":{"address":"10.12.0.300","credentials":{"ref":"r"}},"actions":["inventory"]}"#)
        .unwrap();
    let (code, _, err) = bmcctl(&["submit", refused.to_str().unwrap()]).await;
    assert_eq!(code, Some(3));
    assert!(err.contains("invalid_address"), "{err}");
}

/// A status record that cannot be read is never overwritten blindly: how
/// far the batch ran is unknown, so the worker finishes it with every action
/// `interrupted`, runs none of them, and replaces exactly the record it read.
#[tokio::test]
async fn a_corrupt_status_record_finishes_the_batch_interrupted_and_runs_nothing() {
    let stack = SimStack::start(SimConfig { record_calls: true, ..SimConfig::default() }).await;
    let (p, topo, sim) = (&stack.producer, &stack.topology, &stack.sim);
    // No worker yet: the batch stays queued while its record is damaged.
    let Reply::Accepted(a) = p.submit(&sim_batch("10.6.9.1", vec![Action::Power(PowerOp::Cycle)]), false).await else {
        panic!("not accepted")
    };
    let js = async_nats::jetstream::new(p.client.clone());
    let kv = js.get_key_value(topo.subjects().batches_bucket()).await.unwrap();
    kv.put(a.id.to_string(), "not a status record".into()).await.unwrap();
    let _w = stack.worker("w0", &[]);
    let results =
        bmcfleet_tests::producer::wait_final_statuses(&p.client, &topo.subjects(), &[a.id], Duration::from_secs(60))
            .await;
    let r = &results[&a.id];
    assert_eq!(r.state, BatchState::Failed, "{r:?}");
    assert!(r.results.iter().all(|x| x.error.as_ref().is_some_and(|e| e.code == ErrorCode::Interrupted)), "{r:?}");
    assert!(sim.log().is_empty(), "the power cycle ran: {:?}", sim.log());
    assert!(sim.calls("v4-10-6-9-1").is_empty(), "the BMC was contacted: {:?}", sim.calls("v4-10-6-9-1"));
}

/// `events: final` (what a rollout's batches use): the batch runs and
/// reports exactly as before, and its only event is `batch_finished`; the
/// same batch with the default publishes every action's events. The second
/// batch runs on the same BMC after the first (per-BMC order), so once its
/// events are stored any event the first had published is stored too.
#[tokio::test]
async fn a_batch_with_final_events_only_publishes_its_result_alone() {
    let e = env(1).await;
    let subjects = e.topology.subjects();
    let actions = vec![Action::Power(PowerOp::On), Action::Power(PowerOp::Status)];
    let quiet = Batch { events: EventsMode::Final, ..batch("10.0.0.9", actions.clone()) };
    let Reply::Result(r) = e.producer.submit(&quiet, true).await else { panic!("expected a result") };
    assert_eq!(r.state, BatchState::Succeeded, "{r:?}");
    assert_eq!(r.results.len(), 2);
    assert_eq!(r.results[1].data, Some(ActionData::PowerState(PowerState::On)));
    let Reply::Status(s) = e.producer.status(r.id).await else { panic!("status") };
    assert_eq!(s.result.unwrap(), r, "the status record holds the same result");

    let loud = batch("10.0.0.9", actions);
    let Reply::Result(r2) = e.producer.submit(&loud, true).await else { panic!("expected a result") };
    assert_eq!(r2.state, BatchState::Succeeded, "{r2:?}");
    let want = ["action_started", "action_finished", "action_started", "action_finished", "batch_finished"];
    bmcfleet_tests::eventually(Duration::from_secs(10), "every event of the default batch stored", || {
        let (c, s) = (e.producer.client.clone(), subjects.clone());
        async move {
            let mut kinds = bmcfleet_tests::producer::stored_event_kinds(&c, &s, &r2.id).await;
            kinds.sort();
            let mut w = want.map(str::to_owned).to_vec();
            w.sort();
            (kinds == w).then_some(())
        }
    })
    .await;
    assert_eq!(
        bmcfleet_tests::producer::stored_event_kinds(&e.producer.client, &subjects, &r.id).await,
        vec!["batch_finished".to_owned()]
    );
    drop(e.nats);
}
