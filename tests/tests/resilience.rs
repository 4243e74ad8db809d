//! Resilience against real processes: a real nats-server, gateway and worker
//! processes, and the `bmc-sim` fleet with faults injected per BMC
//! ([`Faults`]) and every request it received recorded ([`SimServer::calls`]),
//! so each test asserts exact call counts.
//!
//! - bounded retries of retryable failures, with backoff, counted in
//!   `bmcfleet_bmc_retries_total`;
//! - no retry of a non-idempotent action that may have reached the BMC, but
//!   a retry when it provably never left (refused login);
//! - auth failures are never retried and never trip the breaker;
//! - the per-BMC circuit breaker: opens after N silent calls, fails fast with
//!   `circuit_open`, probes once after the cooldown, reopens or closes;
//! - the per-BMC minimum interval between calls;
//! - a hung BMC occupies only its own lane (one partition, one worker).
//!
//! Every test uses `--partitions 1`, so all its BMCs share one partition,
//! one consumer and one worker.

use bmcfleet_schema::*;
use bmcfleet_testing::{Faults, SimConfig};
use bmcfleet_tests::checks::sim_batch;
use bmcfleet_tests::metrics::{assert_values, metrics_port, scrape, value, Expect};
use bmcfleet_tests::producer::{ResultCollector, SimStack, Topology};
use bmcfleet_tests::Process;
use std::time::Duration;

async fn env(worker_args: &[&str]) -> SimStack {
    let topology = Topology { partitions: 1, ..Topology::default() };
    SimStack::start_with(SimConfig { record_calls: true, ..SimConfig::default() }, topology, &[])
        .await
        .with_workers(1, worker_args)
        .await
}

/// Requests the BMC received: (logins, action calls of `kind`).
fn calls(e: &SimStack, bmc: &str, kind: &str) -> (usize, usize) {
    let calls = e.sim.calls(bmc);
    (
        calls.iter().filter(|c| c.action.is_none()).count(),
        calls.iter().filter(|c| c.action.as_deref() == Some(kind)).count(),
    )
}

/// The worker's metrics.
async fn metrics(e: &SimStack) -> prometheus_parse::Scrape {
    scrape(metrics_port(&e.workers[0]).await)
}

fn batch(address: &str, actions: Vec<Action>) -> Batch {
    let mut b = sim_batch(address, actions);
    b.deadline = Some(Duration::from_secs(60));
    b
}

fn code(r: &ActionResult) -> Option<ErrorCode> {
    r.error.as_ref().map(|e| e.code)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retryable_failure_of_an_idempotent_action_is_retried_until_it_succeeds() {
    let e = env(&["--retry-backoff", "50ms"]).await;
    let bmc = "v4-10-20-0-1";
    // The BMC executes the first two power-on requests but their replies are lost.
    e.sim.inject(bmc, Faults { lose_replies: 2, ..Faults::default() });
    let r = e.run(&batch("10.20.0.1", vec![Action::Power(PowerOp::On)])).await;
    assert_eq!(r.state, BatchState::Succeeded, "{r:#?}");
    assert_eq!(r.results[0].data, Some(ActionData::PowerState(PowerState::On)));
    // Exactly three calls: the first and two retries, each on a fresh session
    // (a lost reply breaks the connection, so the session is reopened).
    assert_eq!(calls(&e, bmc, "power_on"), (3, 3));
    assert_values(
        &metrics(&e).await,
        &[
            Expect("bmcfleet_bmc_retries_total", &[("protocol", "sim")], 2.0),
            Expect("bmcfleet_actions_total", &[("action", "power_on"), ("outcome", "ok")], 1.0),
        ],
    );

    // Bounded: three lost replies exhaust --retry-max 2 and the action fails, typed.
    let bmc = "v4-10-20-0-2";
    e.sim.inject(bmc, Faults { lose_replies: 3, ..Faults::default() });
    let r = e.run(&batch("10.20.0.2", vec![Action::Power(PowerOp::On)])).await;
    assert_eq!(code(&r.results[0]), Some(ErrorCode::Unreachable), "{r:#?}");
    assert_eq!(calls(&e, bmc, "power_on"), (3, 3));
    assert_eq!(value(&metrics(&e).await, "bmcfleet_bmc_retries_total", &[("protocol", "sim")]), 4.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_non_idempotent_action_is_retried_only_when_it_never_left() {
    let e = env(&["--retry-backoff", "50ms"]).await;
    // The power cycle reached the BMC (and took effect) but its reply was lost:
    // it may have happened, so it is not sent again.
    let bmc = "v4-10-21-0-1";
    e.sim.inject(bmc, Faults { lose_replies: 2, ..Faults::default() });
    let r = e.run(&batch("10.21.0.1", vec![Action::Power(PowerOp::Cycle), Action::Power(PowerOp::Status)])).await;
    assert_eq!(r.state, BatchState::Failed);
    assert_eq!(code(&r.results[0]), Some(ErrorCode::Unreachable), "{r:#?}");
    assert_eq!(code(&r.results[1]), Some(ErrorCode::Skipped));
    assert_eq!(calls(&e, bmc, "power_cycle"), (1, 1), "a power cycle that may have reached the BMC was sent again");
    let runs = e.sim.log().iter().filter(|x| x.bmc == bmc && x.action == "power_cycle").count();
    assert_eq!(runs, 1);
    assert_eq!(value(&metrics(&e).await, "bmcfleet_bmc_retries_total", &[("protocol", "sim")]), 0.0);

    // Refused logins: the session never opened, the power cycle never left,
    // so retrying it is safe; it then runs exactly once.
    let bmc = "v4-10-21-0-2";
    e.sim.inject(bmc, Faults { refuse_logins: 2, ..Faults::default() });
    let r = e.run(&batch("10.21.0.2", vec![Action::Power(PowerOp::Cycle)])).await;
    assert_eq!(r.state, BatchState::Succeeded, "{r:#?}");
    assert_eq!(calls(&e, bmc, "power_cycle"), (3, 1), "three logins, one power cycle");
    assert_eq!(value(&metrics(&e).await, "bmcfleet_bmc_retries_total", &[("protocol", "sim")]), 2.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_failures_are_never_retried_and_do_not_trip_the_breaker() {
    // A breaker that would open on the first silent call.
    let e = env(&["--retry-backoff", "50ms", "--breaker-threshold", "1"]).await;
    let bmc = "v4-10-22-0-1";
    let mut wrong = batch("10.22.0.1", vec![Action::Power(PowerOp::Status)]);
    wrong.bmc.as_mut().unwrap().credentials =
        Credentials::Inline { username: "admin".into(), password: Secret::new("wrong") };
    for n in 1..=3 {
        let r = e.run(&wrong).await;
        assert_eq!(code(&r.results[0]), Some(ErrorCode::AuthFailed), "{r:#?}");
        assert_eq!(calls(&e, bmc, "power_status"), (n, 0), "one login per batch, never retried");
    }
    // Answers, even refusals, are health: the breaker stayed closed.
    let r = e.run(&batch("10.22.0.1", vec![Action::Power(PowerOp::Status)])).await;
    assert_eq!(r.state, BatchState::Succeeded, "{r:#?}");
    assert_values(
        &metrics(&e).await,
        &[Expect("bmcfleet_bmc_retries_total", &[], 0.0), Expect("bmcfleet_breaker_opens_total", &[], 0.0)],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_bmc_opens_its_breaker_fails_fast_and_a_probe_decides() {
    let action_timeout = Duration::from_secs(3);
    let cooldown = Duration::from_secs(2);
    let e = env(&[
        "--action-timeout",
        "3s",
        "--breaker-threshold",
        "2",
        "--breaker-cooldown",
        "2s",
        "--retry-backoff",
        "50ms",
    ])
    .await;
    let bmc = "v4-10-23-0-1";
    e.sim.inject(bmc, Faults { hang: true, ..Faults::default() });
    let status = || batch("10.23.0.1", vec![Action::Power(PowerOp::Status)]);
    let logins = |e: &SimStack| calls(e, bmc, "power_status").0;

    // Two silent calls, each waiting for its action timeout (no time is left to retry).
    for n in 1..=2 {
        let r = e.run(&status()).await;
        assert_eq!(code(&r.results[0]), Some(ErrorCode::Timeout), "{r:#?}");
        assert!(r.results[0].duration_ms >= 2_500, "{r:#?}");
        assert_eq!(logins(&e), n);
    }
    // Open: actions fail at once, without a call, long before their 3 s action timeout.
    for _ in 0..2 {
        let r = e.run(&status()).await;
        assert_eq!(code(&r.results[0]), Some(ErrorCode::CircuitOpen), "{r:#?}");
        assert!(r.results[0].duration_ms < action_timeout.as_millis() as u64 / 3, "not fast: {r:#?}");
        assert!(r.results[0].error.as_ref().unwrap().message.contains("2 consecutive"), "{r:#?}");
    }
    assert_eq!(logins(&e), 2, "an open breaker sends nothing");
    assert_values(
        &metrics(&e).await,
        &[
            Expect("bmcfleet_breakers_open", &[], 1.0),
            Expect("bmcfleet_breaker_opens_total", &[], 1.0),
            Expect("bmcfleet_breaker_rejections_total", &[("protocol", "sim")], 2.0),
            Expect("bmcfleet_actions_total", &[("outcome", "circuit_open")], 2.0),
        ],
    );

    // The breaker opened before the last result was published; after the
    // cooldown one probe runs. The BMC is still silent: it reopens.
    tokio::time::sleep(cooldown + Duration::from_millis(200)).await;
    let r = e.run(&status()).await;
    assert_eq!(code(&r.results[0]), Some(ErrorCode::Timeout), "the probe: {r:#?}");
    assert_eq!(logins(&e), 3, "one probe call, no retries");
    let r = e.run(&status()).await;
    assert_eq!(code(&r.results[0]), Some(ErrorCode::CircuitOpen), "reopened: {r:#?}");
    assert_eq!(logins(&e), 3);

    // The BMC recovers; after the cooldown the probe succeeds and closes the breaker.
    e.sim.inject(bmc, Faults::default());
    tokio::time::sleep(cooldown + Duration::from_millis(200)).await;
    for _ in 0..2 {
        let r = e.run(&status()).await;
        assert_eq!(r.state, BatchState::Succeeded, "{r:#?}");
    }
    assert_eq!(calls(&e, bmc, "power_status").1, 2);
    assert_values(
        &metrics(&e).await,
        &[Expect("bmcfleet_breakers_open", &[], 0.0), Expect("bmcfleet_breaker_opens_total", &[], 2.0)],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_to_one_bmc_are_paced_and_other_bmcs_are_not_held_back() {
    let interval = Duration::from_millis(200);
    let e = env(&["--bmc-min-interval", "200ms"]).await;
    let mut results = ResultCollector::start(&e.producer.client, &e.topology.subjects()).await;
    let paced = "v4-10-24-0-1";
    let Reply::Accepted(a) =
        e.producer.submit(&batch("10.24.0.1", vec![Action::Power(PowerOp::Status); 6]), false).await
    else {
        panic!()
    };
    // Once the paced BMC is under way, ten other BMCs of the same partition get one action each.
    assert!(e.sim.wait_for(Duration::from_secs(20), |log| log.iter().any(|x| x.bmc == paced)).await);
    let mut ids = vec![a.id];
    for i in 0..10 {
        let Reply::Accepted(b) =
            e.producer.submit(&batch(&format!("10.24.1.{i}"), vec![Action::Power(PowerOp::On)]), false).await
        else {
            panic!()
        };
        ids.push(b.id);
    }
    results.wait_all(&ids, Duration::from_secs(60)).await;
    assert!(ids.iter().all(|id| results.results[id].state == BatchState::Succeeded));

    // Consecutive call starts on the paced BMC are at least the interval apart
    // (measured at the simulator; 20 ms allowance for loopback delivery of the
    // earlier request, while unpaced calls are about a millisecond apart).
    let starts: Vec<_> = e.sim.calls(paced).iter().filter(|c| c.action.is_some()).map(|c| c.at).collect();
    assert_eq!(starts.len(), 6);
    for w in starts.windows(2) {
        let gap = w[1] - w[0];
        assert!(gap >= interval - Duration::from_millis(20), "calls {gap:?} apart: {starts:?}");
    }
    assert!(starts[5] - starts[0] >= interval * 5 - Duration::from_millis(20));
    // The other BMCs are not spaced by the paced one's interval: their calls
    // (one per BMC, all in the same partition) start closer together than it.
    let mut others: Vec<_> = (0..10)
        .flat_map(|i| e.sim.calls(&format!("v4-10-24-1-{i}")))
        .filter(|c| c.action.is_some())
        .map(|c| c.at)
        .collect();
    others.sort();
    assert_eq!(others.len(), 10);
    let closest = others.windows(2).map(|w| w[1] - w[0]).min().unwrap();
    assert!(closest < interval, "calls to different BMCs were spaced {closest:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_bmc_times_out_while_twenty_others_on_its_partition_complete() {
    // One partition, one worker: every BMC below shares the hung one's consumer.
    let e = env(&["--action-timeout", "15s"]).await;
    let hung_key = "v4-10-25-0-99";
    e.sim.inject(hung_key, Faults { hang: true, ..Faults::default() });
    let hung = {
        let p = e.producer.clone();
        let b = batch("10.25.0.99", vec![Action::Power(PowerOp::Status), Action::Power(PowerOp::On)]);
        tokio::spawn(async move { p.submit(&b, true).await })
    };
    // The hung BMC holds a request (its login) that it will never answer.
    bmcfleet_tests::eventually(Duration::from_secs(20), "the hung BMC's first request", || {
        let n = e.sim.calls(hung_key).len();
        async move { (n >= 1).then_some(()) }
    })
    .await;
    // Meanwhile 20 other BMCs on the same partition and worker run to completion.
    let mut others = tokio::task::JoinSet::new();
    for i in 0..20 {
        let p = e.producer.clone();
        others.spawn(async move {
            p.submit(
                &batch(&format!("10.25.1.{i}"), vec![Action::Power(PowerOp::On), Action::Power(PowerOp::Status)]),
                true,
            )
            .await
        });
    }
    while let Some(r) = others.join_next().await {
        let Reply::Result(r) = r.unwrap() else { panic!("a healthy BMC got no result") };
        assert_eq!(r.state, BatchState::Succeeded, "{r:#?}");
    }
    // Causal order: all twenty finished while the hung action was still waiting for its deadline.
    assert!(!hung.is_finished(), "the hung BMC's deadline fired before the healthy BMCs finished");
    let Reply::Result(r) = hung.await.unwrap() else { panic!("hung batch result") };
    assert_eq!(r.state, BatchState::Failed);
    assert_eq!(
        r.results.iter().map(code).collect::<Vec<_>>(),
        vec![Some(ErrorCode::Timeout), Some(ErrorCode::Skipped)],
        "{r:#?}"
    );
    assert_eq!(e.sim.calls(hung_key).len(), 1, "the deadline left no time for a retry");
}

#[test]
fn resilience_flags_are_validated_with_their_environment_twins() {
    let cases: [(&str, &str, &str); 5] = [
        ("--retry-max", "BMCFLEET_RETRY_MAX", "11"),
        ("--retry-backoff", "BMCFLEET_RETRY_BACKOFF", "200"),
        ("--breaker-threshold", "BMCFLEET_BREAKER_THRESHOLD", "many"),
        ("--breaker-cooldown", "BMCFLEET_BREAKER_COOLDOWN", "0s"),
        ("--bmc-min-interval", "BMCFLEET_BMC_MIN_INTERVAL", "50"),
    ];
    for (flag, var, bad) in cases {
        let mut by_flag = Process::spawn("bmc-worker", &[flag.into(), bad.into()], &[]);
        let mut by_env = Process::spawn("bmc-worker", &[], &[(var, bad.into())]);
        assert_eq!(by_flag.wait().code(), Some(2), "{flag} {bad}: {}", by_flag.log_text());
        assert_eq!(by_env.wait().code(), Some(2), "{var}={bad}: {}", by_env.log_text());
        assert!(
            by_flag.log_text().contains(flag) && by_env.log_text().contains(flag),
            "{}\n{}",
            by_flag.log_text(),
            by_env.log_text()
        );
    }
    // Cross-checks run at start, before NATS is contacted, with a clear message.
    let mut p = Process::spawn(
        "bmc-worker",
        &["--bmc-min-interval".into(), "2s".into(), "--lane-idle-timeout".into(), "1s".into()],
        &[],
    );
    assert_eq!(p.wait().code(), Some(2));
    assert!(
        p.log_text().contains("--bmc-min-interval (2s) must be shorter than --lane-idle-timeout (1s)"),
        "{}",
        p.log_text()
    );
}

/// SIGTERM while NATS is gone: the worker still exits within its drain
/// timeout plus a small constant (it cannot renew or release its leases;
/// they expire on the server), with a lane busy on a BMC that never answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_stops_within_its_drain_timeout_when_nats_is_gone() {
    let mut stack = SimStack::start(SimConfig { record_calls: true, ..SimConfig::default() }).await;
    // Topology workers drain for at most 5 s (--drain-timeout 5s).
    let mut w = stack.worker("w0", &["--action-timeout", "60s"]);
    stack.wait_partitions_owned().await;
    let (p, sim) = (&stack.producer, &stack.sim);
    let Reply::Accepted(_) = p.submit(&sim_batch("hang-1.example", vec![Action::Power(PowerOp::Status)]), false).await
    else {
        panic!("not accepted")
    };
    bmcfleet_tests::eventually(Duration::from_secs(20), "the hung BMC's lane busy", || {
        let key = "hang-1.example".parse::<BmcAddress>().unwrap().key().to_string();
        let busy = !sim.calls(&key).is_empty(); // the login hangs: the lane is busy
        async move { busy.then_some(()) }
    })
    .await;
    stack.nats.kill();
    let started = std::time::Instant::now();
    let status = w.terminate(Duration::from_secs(60));
    let took = started.elapsed();
    assert!(status.is_some(), "the worker did not exit within 60 s of SIGTERM with NATS gone:\n{}", w.log_tail(30));
    assert!(took < Duration::from_secs(5 + 6), "took {took:?} (drain timeout 5 s + 6 s):\n{}", w.log_tail(30));
}
