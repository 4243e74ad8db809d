//! Fencing at send time: a worker that froze (SIGSTOP) or lost its NATS
//! connection past its lease TTL, while other workers took its partitions
//! over, must not send one more request to those BMCs nor publish one more
//! event for their batches when it comes back.
//!
//! Real processes on loopback: nats-server, gateway, three workers, the
//! `bmc-sim` fleet recording every request with its arrival time. A KV
//! watch on the lease bucket records who owned each partition when (the
//! server's timestamps; a lease is held from its last write for one TTL, or
//! until another worker's write). A core subscription on the events subjects
//! sees every event published, also the ones the events stream would drop as
//! duplicates (what `bmcctl watch` and waiting producers see).
//!
//! Checked after each run:
//! - every request a BMC received came from the worker holding its
//!   partition's lease at the moment it arrived; the only exception allowed
//!   is one request per freeze that arrives right after the resume (the one
//!   whose fence check passed just before the SIGSTOP: the window between
//!   the check and the socket write, which no client-side fencing can close);
//! - every event was created by the worker holding the lease at its
//!   creation time (`at_ms`; events stamped before the check and delayed by
//!   a paused network are in flight, not late);
//! - per BMC, requests and executed actions follow submission order, no BMC
//!   saw two actions at once, and every batch has one final result.
//!
//! Scale: `BMCFLEET_FENCING_FREEZES` freezes per run (default 3).

use bmcfleet_schema::subject::WORKER_HEADER;
use bmcfleet_schema::*;
use bmcfleet_testing::{CallRecord, Faults, SimConfig, SimServer};
use bmcfleet_tests::checks::{assert_exactly_once, assert_ordered, mixed_actions, sim_batch, PerBmc};
use bmcfleet_tests::producer::{wait_final_statuses, wait_gateway, wait_partitions_owned, Topology};
use bmcfleet_tests::proxy::PausableProxy;
use bmcfleet_tests::{NatsServer, Process, Producer};
use futures::StreamExt;
use nix::sys::signal::Signal;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

const BMCS: usize = 50;
const TTL: Duration = Duration::from_secs(6);
/// Longer than the TTL plus a rebalance: the others take the partitions over.
const FREEZE: Duration = Duration::from_secs(10);
/// How soon after a resume the request in flight at the freeze may arrive.
const IN_FLIGHT_GRACE: Duration = Duration::from_millis(250);

/// Per partition: when a lease record was written, and by whom (`None`: deleted).
type History = HashMap<u16, Vec<(SystemTime, Option<String>)>>;

/// Who held each partition's lease when, from a KV watch on the lease bucket.
#[derive(Clone, Default)]
struct Leases(Arc<Mutex<History>>);

impl Leases {
    async fn watch(client: &async_nats::Client, subjects: &Subjects) -> Leases {
        let js = async_nats::jetstream::new(client.clone());
        let kv = js.get_key_value(subjects.leases_bucket()).await.expect("lease bucket");
        let mut watch = kv.watch_with_history(">").await.expect("watch leases");
        let leases = Leases::default();
        let record = leases.clone();
        tokio::spawn(async move {
            while let Some(Ok(e)) = watch.next().await {
                let Some(p) = e.key.strip_prefix('p').and_then(|p| p.parse::<u16>().ok()) else { continue };
                let worker = match e.operation {
                    async_nats::jetstream::kv::Operation::Put => serde_json::from_slice::<serde_json::Value>(&e.value)
                        .ok()
                        .and_then(|v| v["worker"].as_str().map(str::to_owned)),
                    _ => None,
                };
                let at: SystemTime = e.created.into();
                record.0.lock().unwrap().entry(p).or_default().push((at, worker));
            }
        });
        leases
    }

    /// How often a partition `worker` held passed to another worker.
    fn takeovers_from(&self, worker: &str) -> usize {
        let all = self.0.lock().unwrap();
        all.values()
            .map(|history| {
                let holders: Vec<&str> = history.iter().filter_map(|(_, w)| w.as_deref()).collect();
                holders.windows(2).filter(|w| w[0] == worker && w[1] != worker).count()
            })
            .sum()
    }

    /// The lease holder of `p` at `t`: the writer of the last lease record
    /// before `t`, while that record is younger than the TTL.
    fn owner(&self, p: u16, t: SystemTime) -> Option<String> {
        let all = self.0.lock().unwrap();
        let (at, worker) = all.get(&p)?.iter().filter(|(at, _)| *at <= t).max_by_key(|(at, _)| *at)?;
        (t < *at + TTL).then(|| worker.clone()).flatten()
    }
}

/// One event as a live subscriber saw it.
struct Seen {
    worker: Option<String>,
    event: Event,
}

/// Every event published on the events subjects, as live subscribers see them.
async fn record_events(nats: &NatsServer, subjects: &Subjects) -> Arc<Mutex<Vec<Seen>>> {
    let client =
        async_nats::ConnectOptions::new().subscription_capacity(1 << 20).connect(nats.url()).await.expect("connect");
    let mut sub = client.subscribe(subjects.events_all()).await.expect("subscribe events");
    client.flush().await.expect("flush");
    let seen = Arc::new(Mutex::new(vec![]));
    let out = seen.clone();
    tokio::spawn(async move {
        let _client = client;
        while let Some(msg) = sub.next().await {
            let worker = msg.headers.as_ref().and_then(|h| h.get(WORKER_HEADER)).map(|v| v.to_string());
            if let Ok(event) = Encoding::MessagePack.decode::<Event>(&msg.payload) {
                out.lock().unwrap().push(Seen { worker, event });
            }
        }
    });
    seen
}

struct Freeze {
    worker: String,
    resumed: SystemTime,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Fault {
    /// SIGSTOP the worker, SIGCONT it later.
    Freeze,
    /// Pause the relay between the worker and nats-server; the worker runs on.
    CutNats,
}

struct Scenario {
    name: &'static str,
    fault: Fault,
    worker_args: &'static [&'static str],
    /// Make every lane fail one call right before each fault, so lanes sit in retry backoff.
    lose_replies: bool,
    /// Each BMC gets a new batch this often.
    submit_every: Duration,
    workload: fn(usize) -> Vec<Action>,
}

impl Scenario {
    /// `fault` on a worker with no extra flags, lanes without lost replies,
    /// mixed actions submitted to each BMC every `submit_every`.
    fn new(name: &'static str, fault: Fault, submit_every: Duration) -> Scenario {
        Scenario { name, fault, worker_args: &[], lose_replies: false, submit_every, workload: mixed_actions }
    }
}

fn idempotent_actions(i: usize) -> Vec<Action> {
    match i % 3 {
        0 => vec![
            Action::BootDevice(BootDeviceRequest { device: BootDevice::Pxe, persistent: false, efi: true }),
            Action::Power(PowerOp::On),
        ],
        1 => vec![Action::Power(PowerOp::Status)],
        _ => vec![Action::Power(PowerOp::Off), Action::Power(PowerOp::On)],
    }
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Wall-clock time of a simulator arrival (`Instant`), via one anchor pair.
struct Clock {
    instant: Instant,
    wall: SystemTime,
}

impl Clock {
    fn now() -> Clock {
        Clock { instant: Instant::now(), wall: SystemTime::now() }
    }
    fn wall(&self, at: Instant) -> SystemTime {
        match at.checked_duration_since(self.instant) {
            Some(d) => self.wall + d,
            None => self.wall - self.instant.duration_since(at),
        }
    }
}

fn ms(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_millis() as u64
}

async fn run(s: Scenario) {
    let freezes_n = env_usize("BMCFLEET_FENCING_FREEZES", 3);
    let nats = NatsServer::start();
    let sim =
        SimServer::start(SimConfig { latency: Duration::from_millis(20), record_calls: true, ..SimConfig::default() })
            .await
            .unwrap();
    let clock = Clock::now();
    let topo = Topology { partitions: 8, lease_ttl: "6s", rebalance: "1s", ..Topology::default() };
    let subjects = topo.subjects();
    // Queues pile up on purpose while a worker is frozen: no per-BMC cap here.
    let _gw = topo.gateway(&nats, &["--max-queued-per-bmc", "100000"]);
    let p = Producer::new(nats.client().await);
    wait_gateway(&p).await;
    let events = record_events(&nats, &subjects).await;
    let proxy = PausableProxy::start(([127, 0, 0, 1], nats.port).into()).await;
    let sim_addr = sim.addr().to_string();
    let mut args = vec!["--sim-endpoint", sim_addr.as_str()];
    args.extend_from_slice(s.worker_args);
    let workers: Vec<(String, Process)> = (0..3)
        .map(|i| {
            let id = format!("w{i}");
            // w0 reaches NATS through the relay the cut scenario pauses.
            let url = if i == 0 { proxy.url() } else { nats.url() };
            let w = topo.worker_at(&url, &id, &args);
            (id, w)
        })
        .collect();
    wait_partitions_owned(&p.client, &subjects).await;
    let leases = Leases::watch(&p.client, &subjects).await;

    // Every BMC gets a fresh batch every `submit_every`, for the whole run.
    let stop = Arc::new(AtomicBool::new(false));
    let mut submitters = tokio::task::JoinSet::new();
    let keys: Vec<String> = (0..BMCS).map(|b| format!("10.13.0.{}", b + 1)).collect();
    for addr in keys.clone() {
        let (p, stop, every, workload) = (p.clone(), stop.clone(), s.submit_every, s.workload);
        submitters.spawn(async move {
            let mut ids = vec![];
            let mut tick = tokio::time::interval(every);
            let mut i = 0;
            while !stop.load(Ordering::SeqCst) {
                tick.tick().await;
                let batch = sim_batch(&addr, workload(i));
                i += 1;
                match p.submit(&batch, false).await {
                    Reply::Accepted(a) => ids.push(a.id),
                    other => panic!("batch for {addr} not accepted: {other:?}"),
                }
            }
            (batch_key(&addr), ids)
        });
    }

    let mut freezes = vec![];
    for k in 0..freezes_n {
        tokio::time::sleep(Duration::from_secs(3)).await; // let lanes get busy (fault pacing, not synchronisation)
        if s.lose_replies {
            for addr in &keys {
                sim.inject(&batch_key(addr), Faults { lose_replies: 1, ..Faults::default() });
            }
            tokio::time::sleep(Duration::from_millis(600)).await; // lanes now wait in retry backoff
        }
        let i = if s.fault == Fault::CutNats { 0 } else { k % 3 };
        let (id, w) = &workers[i];
        match s.fault {
            Fault::Freeze => w.signal(Signal::SIGSTOP),
            Fault::CutNats => proxy.pause(),
        }
        tokio::time::sleep(FREEZE).await;
        match s.fault {
            Fault::Freeze => w.signal(Signal::SIGCONT),
            Fault::CutNats => proxy.resume(),
        }
        freezes.push(Freeze { worker: id.clone(), resumed: SystemTime::now() });
        eprintln!("{}: fault {k} on {id} over", s.name);
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop.store(true, Ordering::SeqCst);
    let mut per_bmc = PerBmc::new();
    let mut ids = vec![];
    while let Some(r) = submitters.join_next().await {
        let (key, batch_ids) = r.unwrap();
        ids.extend(batch_ids.iter().copied());
        per_bmc.insert(key, batch_ids);
    }
    let results = wait_final_statuses(&p.client, &subjects, &ids, Duration::from_secs(300)).await;
    // Let late publishes of a resumed worker arrive before judging.
    tokio::time::sleep(Duration::from_secs(2)).await;

    let mut violations = vec![];
    let mut allowed = HashSet::new();
    // The requests in flight at a freeze (see docs/DESIGN.md, "The limit no
    // client-side fencing can close"): exempt from the order checks too.
    let mut late: HashSet<(String, BatchId, u32, String)> = HashSet::new();
    let owned_by = |key: &str| BmcKey::from_token(key).expect("bmc key").partition(subjects.partitions);
    for key in per_bmc.keys() {
        let part = owned_by(key);
        for c in sim.calls(key) {
            let call = c.call.as_ref().expect("worker requests carry call info");
            let at = clock.wall(c.at);
            let owner = leases.owner(part, at);
            if owner.as_deref() == Some(call.worker.as_str()) {
                continue;
            }
            let in_flight = freezes
                .iter()
                .position(|f| f.worker == call.worker && at >= f.resumed && at < f.resumed + IN_FLIGHT_GRACE);
            if let Some(f) = in_flight.filter(|f| allowed.insert(*f)) {
                eprintln!(
                    "{}: request in flight at freeze {f}: {key} {:?} from {} at {}",
                    s.name,
                    c.action,
                    call.worker,
                    ms(at)
                );
                late.insert((key.clone(), call.batch, call.index, call.worker.clone()));
                continue;
            }
            violations.push(describe_call(key, &c, at, owner));
        }
    }
    let batch_bmc: HashMap<BatchId, &str> =
        per_bmc.iter().flat_map(|(k, ids)| ids.iter().map(move |id| (*id, k.as_str()))).collect();
    let mut events_checked = 0;
    for seen in events.lock().unwrap().iter() {
        let worker = seen.worker.clone().or_else(|| match &seen.event.event {
            EventKind::BatchFinished { result } => Some(result.worker.clone()),
            _ => None,
        });
        let (Some(worker), Some(key)) = (worker, batch_bmc.get(&seen.event.batch)) else { continue };
        events_checked += 1;
        let at = SystemTime::UNIX_EPOCH + Duration::from_millis(seen.event.at_ms);
        let owner = leases.owner(owned_by(key), at);
        if owner.as_deref() != Some(worker.as_str()) {
            violations.push(format!(
                "event {} of batch {} ({key}) published by {worker} at {}, when the lease of partition {} was held by {owner:?}",
                bmcfleet_common::events::kind_name(&seen.event.event),
                seen.event.batch,
                ms(at),
                owned_by(key)
            ));
        }
    }
    for v in violations.iter().take(40) {
        eprintln!("{}: VIOLATION {v}", s.name);
    }
    let calls: usize = per_bmc.keys().map(|k| sim.calls(k).len()).sum();
    eprintln!(
        "{}: {} batches, {calls} requests and {events_checked} events checked against the lease history, {} violations",
        s.name,
        ids.len(),
        violations.len()
    );
    if !violations.is_empty() {
        for (id, w) in &workers {
            eprintln!("--- {id} log tail ---\n{}", w.log_tail(60));
        }
    }
    assert!(
        violations.is_empty(),
        "{}: {} requests or events from a worker that did not hold the lease",
        s.name,
        violations.len()
    );
    // The run tested something: work flowed, events were seen, and every
    // faulted worker's partitions really moved to another worker.
    assert!(
        calls > ids.len() && events_checked > ids.len(),
        "{}: too little traffic to judge ({calls} requests, {events_checked} events)",
        s.name
    );
    for f in &freezes {
        assert!(
            leases.takeovers_from(&f.worker) > 0,
            "{}: no partition of {} was taken over while it was frozen or cut off",
            s.name,
            f.worker
        );
    }
    assert_call_order(&sim, &per_bmc, &late);
    assert_ordered(&without_late(sim.log(), &late), &per_bmc);
    // A frozen or cut-off worker counts as killed: its action in flight may be re-run (idempotent) or reported interrupted.
    let frozen: HashSet<String> = if s.lose_replies {
        workers.iter().map(|(id, _)| id.clone()).collect()
    } else {
        freezes.iter().map(|f| f.worker.clone()).collect()
    };
    // A request in flight at a freeze may run an action a second time,
    // after the new owner's run: that is the documented residual window,
    // counted and printed rather than failed.
    let cost = assert_exactly_once(&without_late(sim.log(), &late), &ids, &results, &frozen);
    if !late.is_empty() {
        eprintln!("{}: {} request(s) in flight at a freeze arrived late: {late:?}", s.name, late.len());
    }
    eprintln!("{}: {} re-runs, {} interrupted", s.name, cost.reruns, cost.interrupted);
}

/// The BMC key the simulator files a batch address under.
fn batch_key(addr: &str) -> String {
    addr.parse::<BmcAddress>().expect("address").key().to_string()
}

fn describe_call(key: &str, c: &CallRecord, at: SystemTime, owner: Option<String>) -> String {
    let call = c.call.as_ref().unwrap();
    format!(
        "{key} received {} of batch {} (action {}, delivery {}) from {} at {}, when the lease was held by {owner:?}",
        c.action.as_deref().unwrap_or("a login"),
        call.batch,
        call.index,
        call.delivery,
        call.worker,
        ms(at)
    )
}

fn is_late(late: &HashSet<(String, BatchId, u32, String)>, bmc: &str, call: &bmcfleet_sim::proto::Call) -> bool {
    late.contains(&(bmc.to_owned(), call.batch, call.index, call.worker.clone()))
}

/// The simulator's log without the requests in flight at a freeze, and
/// without the overlap the first of them may have had with the action the
/// new owner was running on that BMC.
fn without_late(
    log: Vec<bmcfleet_testing::sim::LogEntry>,
    late: &HashSet<(String, BatchId, u32, String)>,
) -> Vec<bmcfleet_testing::sim::LogEntry> {
    let mut overlapped: HashSet<String> = HashSet::new();
    let mut out = Vec::with_capacity(log.len());
    for mut e in log {
        if e.call.as_ref().is_some_and(|c| is_late(late, &e.bmc, c)) {
            overlapped.insert(e.bmc.clone());
            continue;
        }
        if e.concurrent == 2 && overlapped.remove(&e.bmc) {
            e.concurrent = 1;
        }
        out.push(e);
    }
    out
}

/// Per BMC, every request (logins included), in arrival order, belongs to
/// batches in submission order: a batch's requests form one run. A request
/// in flight at a freeze (`late`) is the one documented exception.
fn assert_call_order(sim: &SimServer, per_bmc: &PerBmc, late: &HashSet<(String, BatchId, u32, String)>) {
    for (key, submitted) in per_bmc {
        let mut runs: Vec<BatchId> = vec![];
        for c in sim.calls(key) {
            if c.call.as_ref().is_some_and(|call| is_late(late, key, call)) {
                continue;
            }
            let batch = c.call.as_ref().expect("call info").batch;
            if runs.last() != Some(&batch) {
                assert!(
                    !runs.contains(&batch),
                    "{key}: a request of batch {batch} arrived after a later batch's: {c:?}"
                );
                runs.push(batch);
            }
        }
        let order: Vec<usize> =
            runs.iter().map(|b| submitted.iter().position(|s| s == b).expect("a submitted batch")).collect();
        assert!(order.windows(2).all(|w| w[0] < w[1]), "{key}: requests out of submission order: {order:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frozen_worker_with_fast_bmcs_sends_nothing_after_resume() {
    run(Scenario::new("freeze", Fault::Freeze, Duration::from_millis(250))).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frozen_worker_with_raised_pacing_sends_nothing_after_resume() {
    run(Scenario {
        worker_args: &["--bmc-min-interval", "400ms"],
        ..Scenario::new("freeze-pacing", Fault::Freeze, Duration::from_millis(900))
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frozen_worker_in_retry_backoff_sends_nothing_after_resume() {
    run(Scenario {
        worker_args: &["--retry-backoff", "2s", "--retry-max", "3"],
        lose_replies: true,
        workload: idempotent_actions,
        ..Scenario::new("freeze-backoff", Fault::Freeze, Duration::from_millis(400))
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_cut_off_from_nats_sends_nothing_after_its_lease() {
    run(Scenario {
        worker_args: &["--bmc-min-interval", "200ms"],
        ..Scenario::new("cut", Fault::CutNats, Duration::from_millis(500))
    })
    .await;
}
