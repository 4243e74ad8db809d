//! Chaos: real nats-server, gateway and workers as separate OS processes, the
//! `bmc-sim` fleet recording every action. Workers are SIGKILLed and
//! restarted over and over, and nats-server itself is killed and restarted;
//! afterwards every batch has exactly one final result, per-BMC order equals
//! submission order, no BMC saw two actions at once, and no action finished
//! by a live worker ran again.
//!
//! Scale: `BMCFLEET_CHAOS_BATCHES` (default 10,000 over 200 BMCs) and
//! `BMCFLEET_CHAOS_KILLS` (default 20).

use bmcfleet_schema::*;
use bmcfleet_testing::{SimConfig, SimServer};
use bmcfleet_tests::checks::{assert_exactly_once, assert_ordered, mixed_actions, sim_batch, submit_all};
use bmcfleet_tests::producer::{wait_final_statuses, wait_gateway, wait_partitions_owned, Topology};
use bmcfleet_tests::{NatsServer, Process, Producer};
use std::collections::HashSet;
use std::time::{Duration, Instant};

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeated_worker_sigkills_lose_nothing_and_keep_order() {
    let batches_n = env_usize("BMCFLEET_CHAOS_BATCHES", 10_000);
    let kills_n = env_usize("BMCFLEET_CHAOS_KILLS", 20);
    let bmcs = 200;
    let nats = NatsServer::start();
    let sim = SimServer::start(SimConfig { latency: Duration::from_millis(1), ..SimConfig::default() }).await.unwrap();
    let topo = Topology { partitions: 16, ..Topology::default() };
    // Whole workloads are queued ahead of the workers: no per-BMC cap here.
    let _gw = topo.gateway(&nats, &["--max-queued-per-bmc", "100000"]);
    let p = Producer::new(nats.client().await);
    wait_gateway(&p).await;
    let mut generation = [0usize; 3];
    let mut workers: Vec<Process> = (0..3).map(|i| topo.worker(&nats, &format!("w{i}-g0"), sim.addr(), &[])).collect();
    wait_partitions_owned(&p.client, &topo.subjects()).await;

    let started = Instant::now();
    let batches: Vec<Batch> = (0..batches_n)
        .map(|i| sim_batch(&format!("10.9.{}.{}", i % bmcs / 250, i % bmcs % 250 + 1), mixed_actions(i / bmcs)))
        .collect();
    let submitter = {
        let p = p.clone();
        tokio::spawn(async move { submit_all(&p, batches).await })
    };

    // Kill a pseudo-random worker every 3 s and start a fresh incarnation.
    let mut killed = HashSet::new();
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    for _ in 0..kills_n {
        tokio::time::sleep(Duration::from_secs(3)).await; // pacing of the fault injection, not synchronisation
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let i = (rng % 3) as usize;
        workers[i].kill();
        killed.insert(format!("w{i}-g{}", generation[i]));
        generation[i] += 1;
        workers[i] = topo.worker(&nats, &format!("w{i}-g{}", generation[i]), sim.addr(), &[]);
    }
    let (ids, per_bmc) = submitter.await.unwrap();
    let results = wait_final_statuses(&p.client, &topo.subjects(), &ids, Duration::from_secs(900)).await;

    let log = sim.log();
    assert_ordered(&log, &per_bmc);
    let cost = assert_exactly_once(&log, &ids, &results, &killed);
    let actions: usize = results.values().map(|r| r.results.len()).sum();
    let resumed = results.values().filter(|r| r.deliveries > 1).count();
    eprintln!(
        "chaos: {} batches ({actions} actions) over {bmcs} BMCs, 3 workers, {} SIGKILLs in {:.0?}: \
         {resumed} batches delivered more than once, {} idempotent actions re-run, {} interrupted (not re-run), \
         0 order violations, 0 concurrent BMC accesses",
        ids.len(),
        killed.len(),
        started.elapsed(),
        cost.reruns,
        cost.interrupted
    );
    assert_eq!(killed.len(), kills_n);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_server_sigkill_and_restart_mid_run() {
    let mut nats = NatsServer::start();
    let sim = SimServer::start(SimConfig { latency: Duration::from_millis(5), ..SimConfig::default() }).await.unwrap();
    let topo = Topology::default();
    // Whole workloads are queued ahead of the workers: no per-BMC cap here.
    let _gw = topo.gateway(&nats, &["--max-queued-per-bmc", "100000"]);
    let p = Producer::new(nats.client().await);
    wait_gateway(&p).await;
    let _workers: Vec<Process> = (0..2).map(|i| topo.worker(&nats, &format!("w{i}"), sim.addr(), &[])).collect();
    wait_partitions_owned(&p.client, &topo.subjects()).await;

    let batches: Vec<Batch> =
        (0..600).map(|i| sim_batch(&format!("10.8.0.{}", i % 20 + 1), mixed_actions(i / 20))).collect();
    let (ids, per_bmc) = submit_all(&p, batches).await;
    assert!(sim.wait_for(Duration::from_secs(60), |log| log.len() > 100).await, "work started");
    nats.kill();
    // While NATS is down a producer gets an error, never silence.
    let down = tokio::time::timeout(Duration::from_secs(10), p.client.request("bmcfleet.status", "{}".into())).await;
    assert!(matches!(down, Ok(Err(_)) | Err(_)), "a request while NATS is down must fail: {down:?}");
    nats.restart();
    let results = wait_final_statuses(&p.client, &topo.subjects(), &ids, Duration::from_secs(180)).await;
    let log = sim.log();
    assert_ordered(&log, &per_bmc);
    // Any action in flight while NATS was down may have been re-run (if
    // idempotent) or reported interrupted: both workers count as "killed".
    let everyone = HashSet::from(["w0".to_string(), "w1".to_string()]);
    let cost = assert_exactly_once(&log, &ids, &results, &everyone);
    eprintln!("nats restart: {} batches, {} re-runs, {} interrupted", ids.len(), cost.reruns, cost.interrupted);
    // After the restart the gateway serves again.
    let Reply::Accepted(_) = p.submit(&sim_batch("10.8.1.1", vec![Action::Power(PowerOp::Status)]), false).await else {
        panic!("gateway after restart")
    };
}
