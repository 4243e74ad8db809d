//! Hostile or careless producers against real processes (issue 16): one
//! producer holding many waiting submits cannot freeze the gateway for
//! status, cancel, other submits or a stop.

use bmcfleet_schema::*;
use bmcfleet_tests::checks::sim_batch;
use bmcfleet_tests::metrics::{metrics_port, scrape, value};
use bmcfleet_tests::producer::{lease_every_partition_to_nobody, wait_gateway, GatewayStack, Topology};
use bmcfleet_tests::Producer;
use std::time::Duration;

fn unavailable(r: &Reply) -> Option<&str> {
    match r {
        Reply::Error(e) if e.code == ErrorCode::Unavailable => Some(e.message.as_str()),
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_submits_cannot_starve_the_gateway() {
    let GatewayStack { nats, topology: topo, gateway: mut gw, producer: a } =
        GatewayStack::start(&["--max-concurrent-requests", "32", "--max-waiting-submits", "96"]).await;

    // Every partition leased, but no worker runs: every waiting submit stays open.
    lease_every_partition_to_nobody(&nats.client().await, &topo.subjects()).await;
    // A (an operator: its
    // share is half the waiting submits, 48) asks for 64.
    let mut waiters = tokio::task::JoinSet::new();
    for i in 0..64 {
        let a = a.clone();
        waiters.spawn(async move {
            a.submit(&sim_batch(&format!("10.16.5.{}", i % 50 + 1), vec![Action::Power(PowerOp::On)]), true).await
        });
    }
    // The 16 beyond A's share are refused at once, not queued behind the others.
    let mut refused = 0;
    while refused < 16 {
        let r = tokio::time::timeout(Duration::from_secs(20), waiters.join_next())
            .await
            .expect("a refusal within 20 s")
            .unwrap()
            .unwrap();
        let why = unavailable(&r).unwrap_or_else(|| panic!("expected a refusal, got {r:?}"));
        assert!(why.contains("this tenant already has 48 waiting submits"), "{why}");
        refused += 1;
    }

    // Meanwhile A itself still gets answers for everything else, promptly.
    let status =
        tokio::time::timeout(Duration::from_secs(3), a.status(ulid::Ulid::new())).await.expect("status answered");
    assert!(matches!(&status, Reply::Error(e) if e.code == ErrorCode::NotFound), "{status:?}");
    let queued = tokio::time::timeout(
        Duration::from_secs(3),
        a.submit(&sim_batch("10.16.6.1", vec![Action::Power(PowerOp::On)]), false),
    )
    .await
    .expect("a plain submit answered");
    assert!(matches!(queued, Reply::Accepted(_)), "{queued:?}");

    // Another connection of the same requester is not another share: budgets
    // are keyed by who asks, never by reply subject (issue 32).
    let b = Producer::new(nats.client().await);
    let b_reply = b.submit(&sim_batch("10.16.7.1", vec![Action::Power(PowerOp::On)]), true).await;
    assert!(unavailable(&b_reply).is_some_and(|m| m.contains("this tenant already has 48")), "{b_reply:?}");

    // Admitted so far: A's 48 waiting submits and its plain one.
    let port = metrics_port(&gw).await;
    bmcfleet_tests::eventually(Duration::from_secs(20), "A's waiting submits admitted", || async {
        (value(&scrape(port), "bmcfleet_batches_admitted_total", &[]) == 49.0).then_some(())
    })
    .await;

    // SIGTERM: the gateway answers every waiting submit and exits promptly.
    let started = std::time::Instant::now();
    let exit = gw.terminate(Duration::from_secs(20));
    assert!(
        exit.is_some_and(|s| s.success()),
        "the gateway did not stop cleanly within 20 s: {exit:?}\n{}",
        gw.log_tail(20)
    );
    assert!(started.elapsed() < Duration::from_secs(8), "stopping took {:?}", started.elapsed());
    let mut answered = 0;
    while let Some(r) = waiters.join_next().await {
        let r = r.unwrap();
        assert!(unavailable(&r).is_some_and(|m| m.contains("stopping")), "{r:?}");
        answered += 1;
    }
    assert_eq!(answered, 48, "every admitted waiting submit of A got an answer");
}

/// The raw policy cannot be bypassed by spelling a path differently: every
/// spelling of a write to the update service is refused at admission with
/// nothing stored, and what is stored (and later sent) is the canonical path.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_redfish_paths_are_judged_and_stored_in_their_canonical_form() {
    let GatewayStack { nats: _nats, topology: topo, gateway: _gw, producer: p } = GatewayStack::start(&[]).await;
    let jobs = topo.subjects().jobs_stream();
    let raw = |method: HttpMethod, path: &str| {
        sim_batch(
            "10.16.8.1",
            vec![Action::Raw(RawRequest::Redfish(RawRedfish { method, path: path.into(), body: None }))],
        )
    };
    let before = bmcfleet_tests::producer::stream_messages(&p.client, &jobs).await;
    for path in [
        "/redfish/v1/UpdateService/Actions/UpdateService.SimpleUpdate",
        "/redfish/v1/Update%53ervice/Actions/UpdateService.SimpleUpdate",
        "//redfish/v1//updateservice/",
        "/redfish/v1/Update%2553ervice",
        "/redfish/v1/Systems/../UpdateService",
        "/redfish/v1/UpdateService;x=1",
    ] {
        let Reply::Error(e) = p.submit(&raw(HttpMethod::Post, path), false).await else {
            panic!("POST {path} admitted")
        };
        assert!(matches!(e.code, ErrorCode::RawNotAllowed | ErrorCode::InvalidField), "POST {path}: {e:?}");
    }
    assert_eq!(bmcfleet_tests::producer::stream_messages(&p.client, &jobs).await, before, "a refused batch was stored");

    let Reply::Accepted(a) = p.submit(&raw(HttpMethod::Get, "//redfish/v1//%53ystems/"), false).await else {
        panic!("GET refused")
    };
    let js = async_nats::jetstream::new(p.client.clone());
    let stored = js.get_stream(&jobs).await.unwrap().get_raw_message(a.stream_sequence).await.unwrap();
    let job: Job = Encoding::MessagePack.decode(&stored.payload).unwrap();
    let Action::Raw(RawRequest::Redfish(r)) = &job.batch.actions[0] else { panic!("{job:?}") };
    assert_eq!(r.path, "/redfish/v1/Systems", "the stored (and sent) path is the canonical one");
}

/// Issue 16 item 7: a worker out of file descriptors says so (its own
/// error code, a metric, an error log) instead of blaming the BMCs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn running_out_of_descriptors_is_the_workers_fault_not_the_bmcs() {
    use bmcfleet_tests::producer::{batch_for, Stack};
    let stack =
        Stack::start(1, &["--protocols", "redfish", "--metrics-addr", "127.0.0.1:0", "--lane-idle-timeout", "10m"])
            .await;
    let worker = &stack.workers[0];
    assert!(worker.log_text().contains("Open-files limit"), "the worker does not log its descriptor budget");
    // Leave the worker a handful of descriptors beyond what it holds now.
    let pid = worker.pid().expect("worker pid");
    let open = std::fs::read_dir(format!("/proc/{pid}/fd")).unwrap().count();
    let limit = open + 6;
    // The soft limit only (`N:`), so it can be raised back without privileges.
    let prlimit = |soft: String| {
        let status = std::process::Command::new("prlimit")
            .args(["--pid", &pid.to_string(), &format!("--nofile={soft}:")])
            .status()
            .expect("prlimit");
        assert!(status.success());
    };
    prlimit(limit.to_string());

    // Distinct Redfish BMCs, one batch each: every lane keeps its session (a
    // connection) open, so descriptors run out after a few.
    let mut servers = vec![];
    let mut codes = vec![];
    for _ in 0..16 {
        let server = bmcfleet_testing::redfish::spec::spec_service().start().await.unwrap();
        let r = stack.run(&batch_for(server.target(), vec![Action::Power(PowerOp::Status)])).await;
        codes.push(r.results[0].error.as_ref().map(|e| e.code));
        servers.push(server);
    }
    assert!(codes.iter().take(2).all(|c| c.is_none()), "the first BMCs should work: {codes:?}");
    assert!(codes.contains(&Some(ErrorCode::WorkerExhausted)), "{codes:?}");
    assert!(!codes.contains(&Some(ErrorCode::Unreachable)), "descriptor exhaustion was blamed on a BMC: {codes:?}");
    // Room again, to read the metrics.
    let hard = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let hard = hard
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(4))
        .unwrap()
        .to_owned();
    prlimit(hard);
    let metrics = scrape(metrics_port(worker).await);
    assert!(value(&metrics, "bmcfleet_fd_exhausted_total", &[]) >= 1.0);
    assert!(worker.log_text().contains("ran out of file descriptors"));
}

/// The other side of the test above: a BMC cannot make the worker blame
/// itself. An error answer whose text reads like descriptor exhaustion is
/// the BMC's error (`bmc_error`), counted against the BMC, not
/// `worker_exhausted`: the worker decides that from the typed I/O error of
/// a socket it could not make, never from what a BMC wrote.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bmc_cannot_pass_its_errors_off_as_the_workers() {
    use bmcfleet_testing::redfish::Fault;
    use bmcfleet_tests::producer::{batch_for, Stack};
    let stack = Stack::start(1, &["--protocols", "redfish", "--metrics-addr", "127.0.0.1:0", "--retry-max", "0"]).await;
    let server = bmcfleet_testing::redfish::spec::spec_service().start().await.unwrap();
    let spoof = "Too many open files (os error 24)";
    server.push_fault(Fault::status("GET", bmcfleet_testing::redfish::spec::SYSTEM, 500).json(&serde_json::json!({
        "error": {"code": "Base.1.0.InternalError", "message": spoof,
                  "@Message.ExtendedInfo": [{"MessageId": "Base.1.0.InternalError", "Message": format!("connect: {spoof}; os error 23")}]}
    })));
    let r = stack.run(&batch_for(server.target(), vec![Action::Power(PowerOp::Status)])).await;
    let e = r.results[0].error.as_ref().expect("the injected error");
    assert_eq!(e.code, ErrorCode::BmcError, "{e:?}");
    let worker = &stack.workers[0];
    assert_eq!(value(&scrape(metrics_port(worker).await), "bmcfleet_fd_exhausted_total", &[]), 0.0);
    assert!(!worker.log_text().contains("ran out of file descriptors"), "{}", worker.log_tail(20));
}

/// A BMC's error text may echo what it was sent. The new user's password
/// and the login password a hostile (or merely verbose) BMC writes back,
/// as written or percent-encoded, in its message or in MessageArgs, reach
/// neither the result nor the worker's log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_a_bmc_echoes_back_are_scrubbed() {
    use bmcfleet_testing::redfish::Fault;
    use bmcfleet_tests::producer::{batch_for, Stack};
    let stack = Stack::start(1, &["--protocols", "redfish", "--retry-max", "0", "--log", "trace"]).await;
    let server = bmcfleet_testing::redfish::spec::spec_service()
        .resource(
            "/redfish/v1/AccountService",
            serde_json::json!({"@odata.id": "/redfish/v1/AccountService", "Id": "AccountService",
            "Accounts": {"@odata.id": "/redfish/v1/AccountService/Accounts"}}),
        )
        .resource(
            "/redfish/v1/AccountService/Accounts",
            serde_json::json!({"@odata.id": "/redfish/v1/AccountService/Accounts",
            "Members": [], "Members@odata.count": 0}),
        )
        .credentials("admin", "L0gin-S3cret!")
        .start()
        .await
        .unwrap();
    let new_password = "N3w-user/pass@word";
    let login = server.credentials().password.expose().to_owned();
    server.push_fault(Fault::status("POST", "/redfish/v1/AccountService/Accounts", 400).json(&serde_json::json!({
        "error": {"code": "Base.1.4.GeneralError",
                  "message": format!("The value '{new_password}' is not a valid password (login was {login})"),
                  "@Message.ExtendedInfo": [{"MessageId": "Base.1.4.PropertyValueFormatError",
                      "MessageArgs": ["N3w-user%2Fpass%40word", "Password"], "RelatedProperties": ["#/Password"]}]}
    })));
    let create = Action::User(UserOp::Create(UserSpec {
        name: "eve".into(),
        password: Secret::new(new_password),
        role: UserRole::Operator,
        enabled: true,
    }));
    let r = stack.run(&batch_for(server.target(), vec![create])).await;
    let e = r.results[0].error.as_ref().expect("the injected refusal");
    assert_eq!(e.code, ErrorCode::BmcError, "{e:?}");
    assert!(e.message.contains("[redacted]") && e.message.contains("#/Password"), "{}", e.message);
    for leak in [new_password, "N3w-user%2Fpass%40word", login.as_str()] {
        assert!(!e.message.contains(leak), "{leak} in the result: {}", e.message);
        assert!(!stack.workers[0].log_text().contains(leak), "{leak} in the worker log");
    }
}

/// Issue 16 item 1: with `protocol: auto`, a Redfish service that answers
/// with a certificate the worker cannot verify ends the probe: the password
/// is not then offered over IPMI or to AMT over plain HTTP.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_stops_at_the_first_service_that_answers() {
    use bmcfleet_tests::producer::{batch_for, Stack};
    let stack = Stack::start(1, &[]).await;
    let server = bmcfleet_testing::redfish::spec::spec_service().start().await.unwrap();
    let mut target = server.target();
    target.protocol = Protocol::Auto;
    // The system roots do not know the test CA: the TLS handshake fails.
    target.tls = TlsOptions::default();
    let r = stack.run(&batch_for(target, vec![Action::Power(PowerOp::Status)])).await;
    let e = r.results[0].error.as_ref().expect("refused");
    assert_eq!(e.code, ErrorCode::ProtocolError, "{r:?}");
    let log = stack.workers[0].log_text();
    let tried: Vec<&str> = log.lines().filter(|l| l.contains("BMC session failed to open.")).collect();
    assert_eq!(tried.len(), 1, "more than one protocol was tried: {tried:#?}");
    assert!(tried[0].contains("redfish"), "{tried:#?}");
}

/// The state of batch `id` as the gateway reports it.
async fn state_of(p: &Producer, id: BatchId) -> Option<BatchStatus> {
    match p.status(id).await {
        Reply::Status(s) => Some(s),
        _ => None,
    }
}

/// Issue 16 item 4: a slow BMC cannot stall its partition. Its queue is
/// capped by the jobs stream itself (`bmc_queue_full`, nothing stored), its
/// queued jobs hold at most a quarter of the partition's delivered slots (a
/// healthy BMC queued behind them runs at once), and its consistently slow
/// answers open its breaker so the rest of its queue fails fast.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_bmc_is_capped_at_admission_and_cannot_stall_its_partition() {
    use bmcfleet_tests::shipped::{connect, gateway_user, worker_user, PASSWORDS};
    // The shipped accounts config: the cap and the share work under each role's least privilege.
    let nats = bmcfleet_tests::shipped::nats();
    // One partition: the slow and the healthy BMC share it.
    let topo = Topology { partitions: 1, ..Topology::default() };
    let slow_latency = Duration::from_secs(4);
    let sim = bmcfleet_testing::sim::SimServer::start(bmcfleet_testing::sim::SimConfig {
        latency: Duration::from_millis(1),
        slow_latency,
        ..Default::default()
    })
    .await
    .unwrap();
    let _gw = topo.gateway(&nats, &[&gateway_user()[..], &["--max-queued-per-bmc", "4"]].concat());
    let p = Producer::new(connect(&nats, "producer", PASSWORDS[2].1).await.0);
    // Producers have no JetStream access: the stream is observed as the gateway.
    let observer = connect(&nats, "gateway", PASSWORDS[0].1).await.0;
    wait_gateway(&p).await;
    let jobs = topo.subjects().jobs_stream();
    let status = || vec![Action::Power(PowerOp::Status)];

    // No worker yet: the slow BMC's queue fills up to its cap.
    let mut slow_ids = Vec::new();
    for _ in 0..4 {
        let Reply::Accepted(a) = p.submit(&sim_batch("slow-1.test", status()), false).await else {
            panic!("refused below the cap")
        };
        slow_ids.push(a.id);
    }
    let stored = bmcfleet_tests::producer::stream_messages(&observer, &jobs).await;
    let mut over = sim_batch("slow-1.test", status());
    let over_id = BatchId::new();
    over.id = Some(over_id);
    match p.submit(&over, false).await {
        Reply::Error(e) => {
            assert_eq!(e.code, ErrorCode::BmcQueueFull, "{e:?}");
            assert!(e.message.contains("--max-queued-per-bmc"), "{}", e.message);
        }
        other => panic!("a fifth batch for a BMC capped at four was {other:?}"),
    }
    assert_eq!(bmcfleet_tests::producer::stream_messages(&observer, &jobs).await, stored, "a refused batch was stored");
    assert!(
        matches!(p.status(over_id).await, Reply::Error(e) if e.code == ErrorCode::NotFound),
        "no status record for a refused batch"
    );
    // The cap is per BMC: another BMC's batch (queued behind the slow ones) is admitted.
    let Reply::Accepted(healthy) = p.submit(&sim_batch("10.16.9.1", status()), false).await else {
        panic!("a healthy BMC's batch was refused")
    };

    // A worker configured to hold 2 jobs per partition would take two of the
    // slow BMC's four and wait on them; the per-BMC share raises it to 16.
    let _w = topo.worker(
        &nats,
        "w1",
        sim.addr(),
        &[
            &worker_user()[..],
            &[
                "--max-inflight-per-partition",
                "2",
                "--slow-call-threshold",
                "1s",
                "--breaker-threshold",
                "2",
                "--retry-max",
                "0",
            ],
        ]
        .concat(),
    );
    let done = bmcfleet_tests::eventually(Duration::from_secs(30), "the healthy BMC's batch finished", || async {
        state_of(&p, healthy.id).await.filter(|s| s.state.is_final())
    })
    .await;
    assert_eq!(done.state, BatchState::Succeeded, "{done:?}");
    let first_slow = state_of(&p, slow_ids[0]).await.expect("the first slow batch has a status");
    assert!(
        !first_slow.state.is_final(),
        "the healthy batch waited behind the slow BMC's first batch ({} per action): {first_slow:?}",
        bmcfleet_schema::duration::format(slow_latency)
    );

    // Two slow answers open the breaker: the slow BMC's other batches fail at once.
    let mut finals = Vec::new();
    for id in &slow_ids {
        finals.push(
            bmcfleet_tests::eventually(Duration::from_secs(60), "a slow batch finished", || async {
                state_of(&p, *id).await.filter(|s| s.state.is_final())
            })
            .await,
        );
    }
    assert_eq!(finals[0].state, BatchState::Succeeded, "{:?}", finals[0]);
    assert_eq!(finals[1].state, BatchState::Succeeded, "{:?}", finals[1]);
    for s in &finals[2..] {
        let code = s.results.first().and_then(|r| r.error.as_ref()).map(|e| e.code);
        assert_eq!(code, Some(ErrorCode::CircuitOpen), "{s:?}");
        assert!(s.results[0].error.as_ref().unwrap().message.contains("answered only after"), "{s:?}");
    }
}

/// Lowering `--max-queued-per-bmc` never deletes queued batches: JetStream
/// enforces a lowered per-subject limit by dropping the oldest messages, so
/// the gateway keeps the cap at the longest queue it finds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lowering_the_per_bmc_cap_never_deletes_queued_batches() {
    let GatewayStack { nats, topology: topo, gateway: mut gw, producer: p } =
        GatewayStack::start(&["--max-queued-per-bmc", "8"]).await;
    let jobs = topo.subjects().jobs_stream();
    for _ in 0..5 {
        assert!(matches!(
            p.submit(&sim_batch("10.16.10.1", vec![Action::Power(PowerOp::On)]), false).await,
            Reply::Accepted(_)
        ));
    }
    assert!(gw.terminate(Duration::from_secs(20)).is_some_and(|s| s.success()));

    let gw = topo.gateway(&nats, &["--max-queued-per-bmc", "2"]);
    wait_gateway(&p).await;
    assert_eq!(bmcfleet_tests::producer::stream_messages(&p.client, &jobs).await, 5, "queued batches were deleted");
    let over = p.submit(&sim_batch("10.16.10.1", vec![Action::Power(PowerOp::On)]), false).await;
    assert!(matches!(&over, Reply::Error(e) if e.code == ErrorCode::BmcQueueFull), "{over:?}");
    assert!(gw.log_text().contains("kept at that queue's length"), "{}", gw.log_tail(20));
}

/// A BMC's answer can be larger than a NATS message may be (`max_payload`,
/// 1 MiB by default): here an event log of 1,000 entries of a kilobyte
/// each. Its result cannot go into the batch's status record or its
/// events, so the action fails `too_large`, saying why, and the batch goes
/// on and finishes: the record is never retried forever with the lane held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_too_large_for_the_status_record_fails_the_action_not_the_lane() {
    use bmcfleet_testing::redfish::spec::SYSTEM;
    use bmcfleet_tests::producer::{batch_for, Stack};
    use serde_json::json;
    let stack = Stack::start(1, &["--protocols", "redfish", "--retry-max", "0"]).await;
    let log = format!("{SYSTEM}/LogServices/Log1");
    let entries: Vec<serde_json::Value> = (0..1000)
        .map(|i| {
            json!({"@odata.id": format!("{log}/Entries/{i}"), "Id": i.to_string(), "EntryType": "Event",
            "Created": "2024-01-01T00:00:00Z", "Severity": "OK", "Message": format!("{i:04} {}", "x".repeat(1000))})
        })
        .collect();
    let server = bmcfleet_testing::redfish::spec::spec_service()
        .resource(
            &format!("{SYSTEM}/LogServices"),
            json!({"@odata.id": format!("{SYSTEM}/LogServices"), "Members": [{"@odata.id": log}]}),
        )
        .resource(&log, json!({"@odata.id": log, "Id": "Log1", "Entries": {"@odata.id": format!("{log}/Entries")}}))
        .resource(
            &format!("{log}/Entries"),
            json!({"@odata.id": format!("{log}/Entries"), "Members": entries, "Members@odata.count": 1000}),
        )
        .start()
        .await
        .unwrap();
    server.merge_resource(SYSTEM, &json!({"LogServices": {"@odata.id": format!("{SYSTEM}/LogServices")}}));
    let mut batch = batch_for(
        server.target(),
        vec![
            Action::EventLog(EventLogOp::Read {
                limit: Some(1000),
                offset: 0,
                logs: Default::default(),
                log_ids: vec![],
            }),
            Action::EventLog(EventLogOp::Read { limit: Some(5), offset: 0, logs: Default::default(), log_ids: vec![] }),
        ],
    );
    batch.deadline = Some(Duration::from_secs(20));
    let r = stack.run(&batch).await;
    let e = r.results[0]
        .error
        .as_ref()
        .unwrap_or_else(|| panic!("the first read should not fit: {:?}", r.results[0].outcome));
    assert_eq!(e.code, ErrorCode::TooLarge, "{e:?}");
    assert!(e.message.contains("max_payload") && e.message.contains("limit"), "{}", e.message);
    assert!(r.results[0].data.is_none());
    // The next action ran, and its (small) result is kept.
    let Some(ActionData::EventLog(small)) = &r.results[1].data else { panic!("{:?}", r.results[1]) };
    assert_eq!(small.entries.len(), 5);
    assert_eq!(small.entries[0].id, "999", "newest first");
    assert_eq!(r.state, BatchState::Failed);
}

/// Every spelling of one ad hoc BMC is one BMC: an IPv4-mapped IPv6
/// address is queued on the IPv4 address's subject (one queue, one per-BMC
/// cap, one lane), not beside it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ipv4_mapped_spelling_of_an_ad_hoc_bmc_shares_its_queue() {
    let GatewayStack { nats: _nats, topology: _topo, gateway: _gw, producer: p } =
        GatewayStack::start(&["--max-queued-per-bmc", "1"]).await;
    let Reply::Accepted(first) = p.submit(&sim_batch("10.16.9.1:623", vec![Action::Power(PowerOp::On)]), false).await
    else {
        panic!("accepted")
    };
    let again = p.submit(&sim_batch("[::ffff:10.16.9.1]:623", vec![Action::Power(PowerOp::Off)]), false).await;
    let Reply::Error(e) = again else { panic!("a second batch for the same BMC past its cap of 1: {again:?}") };
    assert_eq!(e.code, ErrorCode::BmcQueueFull, "{e:?}");
    assert!(first.subject.ends_with("v4-10-16-9-1-P623"), "{}", first.subject);
}

/// A job the worker cannot read (here bytes that are no job; in a rollout,
/// a job sealing a field an older worker does not know) is not dropped
/// silently: its queued batch finishes Failed, every action `internal`,
/// nothing run, and its final event reaches whoever waits for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_the_worker_cannot_read_still_gets_its_batch_a_result() {
    use bmcfleet_tests::producer::{wait_final_statuses, Stack};
    let stack = Stack::start(1, &[]).await;
    let (client, subjects) = (&stack.producer.client, stack.topology.subjects());
    let tenant = bmcfleet_schema::machine::DEFAULT_TENANT.to_owned();
    let job = bmcfleet_tests::producer::job_of(
        sim_batch("10.16.11.1", vec![Action::Power(PowerOp::On), Action::Power(PowerOp::Status)]),
        &tenant,
    );
    let id = job.id;
    // The queued record as the gateway writes it, then a job message that does not decode.
    let js = async_nats::jetstream::new(client.clone());
    let batches = js.get_key_value(subjects.batches_bucket()).await.unwrap();
    bmcfleet_common::status::create(&batches, &BatchStatus::queued(&job, 1, 1)).await.unwrap();
    let mut events = client.subscribe(subjects.events(&tenant, &id)).await.unwrap();
    bmcfleet_tests::producer::queue_job_bytes(client, &subjects, &job, vec![0x93, 0x01, 0x02, 0x03]).await;

    let results = wait_final_statuses(client, &subjects, &[id], Duration::from_secs(30)).await;
    let r = &results[&id];
    assert_eq!(r.state, BatchState::Failed, "{r:?}");
    assert_eq!(r.results.len(), 2, "{r:?}");
    for a in &r.results {
        let e = a.error.as_ref().expect("an error");
        assert_eq!(e.code, ErrorCode::Internal, "{e:?}");
        assert!(e.message.contains("does not decode") && e.message.contains("nothing of it was run"), "{}", e.message);
    }
    let ev = tokio::time::timeout(Duration::from_secs(10), futures::StreamExt::next(&mut events))
        .await
        .expect("the final event")
        .unwrap();
    let ev: Event = Encoding::MessagePack.decode(&ev.payload).unwrap();
    assert!(
        matches!(ev.event, EventKind::BatchFinished { ref result } if result.state == BatchState::Failed),
        "{ev:?}"
    );
}

/// An event the server can never take (larger than its `max_payload`) is a
/// permanent failure, which the worker does not retry as it is; one the
/// events stream did not store for another reason may be retried.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_larger_than_the_server_takes_is_a_permanent_failure() {
    let GatewayStack { nats: _nats, topology: topo, gateway: _gw, producer: p } = GatewayStack::start(&[]).await;
    let js = async_nats::jetstream::new(p.client.clone());
    let subjects = topo.subjects();
    let entry = EventLogEntry { id: "1".into(), message: "x".repeat(2 << 20), ..EventLogEntry::default() };
    let data = ActionData::EventLog(EventLog { total: Some(1), entries: vec![entry] });
    let result = BatchResult {
        id: ulid::Ulid::new(),
        bmc: "v4-10-16-12-1".into(),
        state: BatchState::Succeeded,
        results: vec![ActionResult::ok(0, "event_log_read", Some("sim".into()), Some(data), 1)],
        worker: "w".into(),
        deliveries: 1,
        admitted_at_ms: 1,
        finished_at_ms: 2,
    };
    let mut ev = Event { batch: result.id, at_ms: 2, event: EventKind::BatchFinished { result } };
    let e = bmcfleet_common::events::publish(&js, &subjects, "default", &ev, None).await.unwrap_err();
    assert!(e.permanent, "{e}");
    // Without the data it is stored.
    let EventKind::BatchFinished { result } = &mut ev.event else { unreachable!() };
    result.results[0].data = None;
    bmcfleet_common::events::publish(&js, &subjects, "default", &ev, None).await.unwrap();
    // Another stream's subjects (none stores them): not permanent.
    let other = Subjects::new("nope", "NOPE", 8);
    let e = tokio::time::timeout(
        Duration::from_secs(30),
        bmcfleet_common::events::publish(&js, &other, "default", &ev, None),
    )
    .await
    .expect("an answer")
    .unwrap_err();
    assert!(!e.permanent, "{e}");
}
