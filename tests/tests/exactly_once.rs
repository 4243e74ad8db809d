//! Exactly once with no worker dying: an action that a live worker ran is
//! never run a second time, also when that worker stops a partition on its
//! own (one lane's batch handed back) or its lease lapses (a renewal late on
//! a starved host). The chaos suite's SIGKILL run found both ("ran again
//! after a run on w0-g8, which was not killed"): one lane's progress write
//! met a lapsed fence, its hand-back cut every other lane of the partition
//! short mid-action, and the same worker, taking the partition again, ran
//! those actions (and the first lane's) again.
//!
//! Real processes on loopback: nats-server, gateway, one worker, and the
//! `bmc-sim` fleet (in process) logging every action it starts with its
//! batch, index, worker and delivery. One partition, so every BMC shares one
//! consumer and one lease. A `slow-*` BMC takes [`SLOW`] per action.

use bmcfleet_schema::*;
use bmcfleet_testing::{SimConfig, SimServer};
use bmcfleet_tests::producer::{machine_batch, wait_final_statuses, SimStack, Topology};
use bmcfleet_tests::proxy::PausableProxy;
use std::time::{Duration, Instant};

/// How long an action takes on a `slow-*` BMC.
const SLOW: Duration = Duration::from_secs(4);

async fn stack() -> SimStack {
    let sim = SimConfig { slow_latency: SLOW, record_calls: true, ..SimConfig::default() };
    SimStack::start_with(sim, Topology { partitions: 1, ..Topology::default() }, &[]).await
}

fn sim_target(address: &str) -> BmcTarget {
    BmcTarget {
        address: address.parse().unwrap(),
        protocol: Protocol::Sim,
        credentials: Credentials::Inline { username: "admin".into(), password: Secret::new("pw") },
        tls: TlsOptions::default(),
        system_id: None,
        options: Default::default(),
    }
}

/// Submit without waiting; the batch's id.
async fn submit(e: &SimStack, machine: &str, actions: Vec<Action>) -> BatchId {
    match e.producer.submit(&machine_batch(machine, actions), false).await {
        Reply::Accepted(a) => a.id,
        other => panic!("expected an admission, got {other:?}"),
    }
}

/// Each run of action `index` of `batch` the BMCs saw: `worker#delivery`.
fn runs(sim: &SimServer, batch: BatchId, index: u32) -> Vec<String> {
    let log = sim.log();
    let calls = log.iter().filter_map(|e| e.call.as_ref()).filter(|c| c.batch == batch && c.index == index);
    calls.map(|c| format!("{}#{}", c.worker, c.delivery)).collect()
}

/// When action `index` of `batch` first reached its BMC (waits for it).
async fn started(sim: &SimServer, batch: BatchId, index: u32) -> Instant {
    let seen = |log: &[bmcfleet_testing::LogEntry]| {
        log.iter().any(|e| e.call.as_ref().is_some_and(|c| c.batch == batch && c.index == index))
    };
    assert!(sim.wait_for(Duration::from_secs(60), seen).await, "action {index} of {batch} never started");
    let bmc = sim.log().into_iter().find(|e| e.call.as_ref().is_some_and(|c| c.batch == batch)).unwrap().bmc;
    sim.calls(&bmc)
        .into_iter()
        .find(|c| c.action.is_some() && c.call.as_ref().is_some_and(|c| c.batch == batch && c.index == index))
        .expect("recorded call")
        .at
}

/// One lane's batch is handed back (another worker claimed it) while a
/// second lane's batch is on its way: the partition stops gracefully, the
/// second lane finishes the action it is in and records it, and no action
/// of its batch runs twice. Before the fix the hand-back cancelled the
/// partition at once (`lost`), the result of the action in flight was
/// dropped after its BMC had run it, and the same worker ran it again when
/// it took the partition back. (Y's three slow actions keep one of them in
/// flight at X's hand-back whatever the host's pace.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_handed_back_lets_the_partitions_other_lanes_record_their_actions() {
    let e = stack().await.with_workers(1, &[]).await;
    let x = e.topology.register_machine(&e.producer.client, &sim_target("slow-1.example")).await;
    let y = e.topology.register_machine(&e.producer.client, &sim_target("slow-2.example")).await;
    let x_id = submit(&e, &x, vec![Action::Power(PowerOp::Status)]).await;
    let x_at = started(&e.sim, x_id, 0).await;
    // Another worker claims X's batch while its action runs: X's lane will
    // find the record taken over when it comes to write the result.
    let js = async_nats::jetstream::new(e.producer.client.clone());
    let batches = js.get_key_value(e.topology.subjects().batches_bucket()).await.unwrap();
    let mut record = bmcfleet_common::status::load(&batches, &x_id).await.unwrap().expect("X's record");
    record.status.claim("w-elsewhere", 1);
    bmcfleet_common::status::update(&batches, &record.status, record.revision).await.expect("claim X");
    // Y's batch starts while X's action still runs.
    let y_actions = vec![Action::Power(PowerOp::Status), Action::Power(PowerOp::Off), Action::Power(PowerOp::On)];
    let y_id = submit(&e, &y, y_actions).await;
    let y_at = started(&e.sim, y_id, 0).await;
    assert!(
        y_at < x_at + SLOW,
        "precondition: Y's batch reached its BMC {:?} after X's action, not while it ran (a host too slow for this test)",
        y_at - x_at
    );

    let results = wait_final_statuses(&e.producer.client, &e.topology.subjects(), &[x_id, y_id], SLOW * 15).await;
    let y = &results[&y_id];
    assert_eq!(y.state, BatchState::Succeeded, "{y:#?}");
    for i in 0..3 {
        assert_eq!(runs(&e.sim, y_id, i).len(), 1, "Y's action {i} ran once: {:?}", runs(&e.sim, y_id, i));
    }
    // X's result was not this worker's to record (the batch was claimed
    // away): it ran X again when it took the partition back.
    assert_eq!(results[&x_id].state, BatchState::Succeeded, "{:#?}", results[&x_id]);
    let x_runs = runs(&e.sim, x_id, 0);
    assert!(x_runs.len() == 2 && x_runs.iter().all(|r| r.starts_with("w0#")), "{x_runs:?}");
}

/// The worker is cut off from NATS (its lease renewals go unanswered) while
/// an action runs, and the action's answer comes after the lease's local
/// validity ran out: the result is still written (the record's revision
/// fences it; no other worker claimed the batch), so when the worker takes
/// the partition back the batch resumes after that action. Before the fix
/// the write was refused for the lapsed lease and the action ran again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_action_answered_after_the_lease_lapsed_is_recorded_and_not_run_again() {
    let mut e = stack().await;
    let proxy = PausableProxy::start(([127, 0, 0, 1], e.nats.port).into()).await;
    let sim = e.sim.addr().to_string();
    e.workers.push(e.topology.worker_at(&proxy.url(), "w0", &["--sim-endpoint", sim.as_str()]));
    e.wait_partitions_owned().await;
    let x = e.topology.register_machine(&e.producer.client, &sim_target("slow-1.example")).await;
    let id = submit(&e, &x, vec![Action::Power(PowerOp::Off), Action::Power(PowerOp::On)]).await;
    let at = started(&e.sim, id, 0).await;
    proxy.pause();
    let paused = Instant::now();
    // The lease (TTL 3 s) was last renewed before the pause, so its local
    // validity (4/5 of the TTL) ends by `paused` + 2.4 s, before the answer
    // (`at` + SLOW). The first renewal sent during the pause times out 5 s
    // after it was sent (the JetStream request timeout): the lease is not
    // known lost before the answer.
    assert!(
        paused < at + SLOW - Duration::from_millis(2_600),
        "precondition: paused {:?} after the action started (a host too slow for this test)",
        paused - at
    );
    tokio::time::sleep_until((at + SLOW + Duration::from_secs(1)).into()).await;
    proxy.resume();

    let results = wait_final_statuses(&e.producer.client, &e.topology.subjects(), &[id], SLOW * 15).await;
    let r = &results[&id];
    assert_eq!(r.state, BatchState::Succeeded, "{r:#?}");
    assert_eq!(runs(&e.sim, id, 0), ["w0#1"], "the action that ran before the lapse ran once");
    assert_eq!(runs(&e.sim, id, 1).len(), 1, "the next action ran once, after the take-back");
    assert!(r.deliveries >= 2, "the batch was handed back and resumed: {r:#?}");
}
