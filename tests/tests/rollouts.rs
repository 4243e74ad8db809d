//! Rollouts (issue 35): one request, many machines, driven server-side by
//! whichever gateway holds the rollout's lease, against real processes
//! (nats-server, gateways, workers) and `bmc-sim`, which records every
//! action with its batch id:
//! - waves: the canaries run alone and finish before any other machine
//!   starts; at most `max_parallel` batches overlap; every machine runs its
//!   batch (the id derived from rollout and machine) exactly once; a batch
//!   submitted to one of the machines meanwhile keeps its place in that
//!   machine's order; events `rollout_started`, one `rollout_progress` per
//!   machine, `rollout_finished`;
//! - pause stops new starts (those in flight finish), resume goes on, abort
//!   ends the rollout with the rest never started;
//! - SIGKILL of the driving gateway, of a worker, and the client gone: the
//!   surviving gateway takes the lease over and finishes; each machine's
//!   non-idempotent action ran at most once (never re-run: `interrupted` if
//!   its worker died mid-action) and every machine has exactly one batch.

use bmcfleet_schema::rollout::{
    self, PartOutcome, RolloutEvent, RolloutEventKind, RolloutRecord, RolloutRequest, RolloutState, RolloutView,
};
use bmcfleet_schema::{Action, BmcAddress, Encoding, OnError, PowerOp, Reply, Subjects};
use bmcfleet_testing::{SimConfig, SimServer};
use bmcfleet_tests::producer::{machine_batch, wait_final_statuses, wait_gateway, wait_partitions_owned, Topology};
use bmcfleet_tests::{NatsServer, Process, Producer};
use futures::StreamExt;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

const GATEWAY_ARGS: [&str; 4] = ["--rollout-lease-ttl", "3s", "--rollout-poll-interval", "100ms"];

/// nats-server, the simulator, one gateway and one worker that owns every
/// partition (fields in drop order: the processes go before the server).
struct Stack {
    _worker: Process,
    _gw: Process,
    p: Producer,
    topo: Topology,
    sim: SimServer,
    nats: NatsServer,
}

async fn stack(sim: SimConfig) -> Stack {
    let nats = NatsServer::start();
    let sim = SimServer::start(sim).await.unwrap();
    let topo = Topology::default();
    let _gw = topo.gateway(&nats, &GATEWAY_ARGS);
    let p = Producer::new(nats.client().await);
    wait_gateway(&p).await;
    let _worker = topo.worker(&nats, "w0", sim.addr(), &[]);
    wait_partitions_owned(&p.client, &topo.subjects()).await;
    Stack { _worker, _gw, p, topo, sim, nats }
}

/// Register `count` sim machines `node-<i>` at `10.77.<rack>.<i>`, labelled
/// `rack=<rack>`, with the sealed credential `fleet`; returns their names.
async fn register(client: &async_nats::Client, topo: &Topology, rack: u8, count: usize) -> Vec<String> {
    register_for(client, topo, rack, count, "default").await
}

/// [`register`] for `tenant`.
async fn register_for(
    client: &async_nats::Client,
    topo: &Topology,
    rack: u8,
    count: usize,
    tenant: &str,
) -> Vec<String> {
    use bmcfleet_common::streams::{bucket, credentials_config, machines_config, Mode};
    let subjects = topo.subjects();
    let js = async_nats::jetstream::new(client.clone());
    let creds = bucket(&js, credentials_config(&subjects, 1), Mode::UseExisting).await.unwrap();
    let sealed = bmcfleet_common::sealing::Sealer::new(&topo.sealing.public)
        .unwrap()
        .seal(
            "admin",
            &bmcfleet_schema::Secret::new("pw".to_owned()),
            &bmcfleet_common::sealing::Binding::credential("fleet"),
        )
        .unwrap();
    creds.put("fleet", serde_json::to_vec(&sealed).unwrap().into()).await.unwrap();
    let machines = bucket(&js, machines_config(&subjects, 1), Mode::UseExisting).await.unwrap();
    let mut names = vec![];
    for i in 1..=count {
        let name = format!("r{rack}-node-{i:02}");
        let address: BmcAddress = format!("10.77.{rack}.{i}").parse().unwrap();
        let mut m = bmcfleet_schema::Machine::new(name.clone(), address, bmcfleet_schema::Protocol::Sim, "fleet");
        m.labels = BTreeMap::from([("rack".to_owned(), rack.to_string())]);
        m.tenant = tenant.to_owned();
        bmcfleet_common::registry::put(&machines, &m).await.unwrap();
        names.push(name);
    }
    names
}

/// Whether a batch finished `succeeded` (by its status record).
async fn results_of(p: &Producer, subjects: &Subjects, batch: ulid::Ulid) -> bool {
    let r = wait_final_statuses(&p.client, subjects, &[batch], Duration::from_secs(30)).await;
    r[&batch].state == bmcfleet_schema::BatchState::Succeeded
}

fn key(rack: u8, i: usize) -> String {
    format!("10.77.{rack}.{i}").parse::<BmcAddress>().unwrap().key().to_string()
}

async fn call(p: &Producer, endpoint: &str, body: &impl serde::Serialize) -> Reply {
    let bytes = Encoding::MessagePack.encode(body).unwrap();
    p.raw(&format!("rollout.{endpoint}"), Default::default(), bytes, Duration::from_secs(30)).await.1
}

fn view(reply: Reply) -> RolloutView {
    match reply {
        Reply::Rollout(v) => v,
        other => panic!("expected a rollout, got {other:?}"),
    }
}

fn request(selector: &[(&str, &str)], actions: Vec<Action>) -> RolloutRequest {
    RolloutRequest {
        id: None,
        selector: Some(selector.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()),
        machines: vec![],
        actions,
        on_error: OnError::Stop,
        max_parallel: None,
        canary: None,
        canary_successes: None,
        stop_after_failures: None,
        deadline: None,
        batch_deadline: Some(Duration::from_secs(120)),
        plan: false,
    }
}

/// The rollout's record. A request sent as a gateway is SIGKILLed can go to
/// its subscription before the server has seen the connection close, and be
/// lost: a status read is asked again then (as any producer would).
async fn status(p: &Producer, id: rollout::RolloutId) -> RolloutRecord {
    let body = Encoding::MessagePack.encode(&rollout::RolloutStatusRequest { id, from: 0, limit: 0 }).unwrap();
    for _ in 0..5 {
        let req = async_nats::Request::new().payload(body.clone().into()).timeout(Some(Duration::from_secs(5)));
        match p.client.send_request(format!("{}.rollout.status", p.prefix), req).await {
            Ok(msg) => return view(Encoding::MessagePack.decode(&msg.payload).expect("a reply")).rollout,
            Err(e) => eprintln!("rollout status: {e}; asking again"),
        }
    }
    panic!("no gateway answered rollout.status five times")
}

/// Wait (up to `within`) until the rollout's record satisfies `done`.
async fn wait_record(
    p: &Producer,
    id: rollout::RolloutId,
    within: Duration,
    what: &str,
    done: impl Fn(&RolloutRecord) -> bool,
) -> RolloutRecord {
    let end = tokio::time::Instant::now() + within;
    loop {
        let r = status(p, id).await;
        if done(&r) {
            return r;
        }
        assert!(tokio::time::Instant::now() < end, "timed out waiting for {what}: {r:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Events of one rollout, as they arrive.
struct Events(async_nats::Subscriber);

impl Events {
    async fn start(client: &async_nats::Client, subjects: &Subjects) -> Events {
        let sub = client.subscribe(format!("{}.events.*.rollout.*", subjects.prefix)).await.unwrap();
        client.flush().await.unwrap();
        Events(sub)
    }

    /// The next event for which `want` holds (others are skipped).
    async fn until(&mut self, within: Duration, want: impl Fn(&RolloutEventKind) -> bool) -> Vec<RolloutEvent> {
        let end = tokio::time::Instant::now() + within;
        let mut seen = vec![];
        loop {
            let msg = tokio::time::timeout_at(end, self.0.next()).await.expect("rollout event in time").unwrap();
            let ev: RolloutEvent = Encoding::MessagePack.decode(&msg.payload).expect("a rollout event");
            let hit = want(&ev.event);
            seen.push(ev);
            if hit {
                return seen;
            }
        }
    }
}

/// The batches the sim saw per BMC key: batch id → actions, in start order.
fn batches_by_bmc(sim: &SimServer) -> HashMap<String, Vec<(String, Vec<String>)>> {
    let mut out: HashMap<String, Vec<(String, Vec<String>)>> = HashMap::new();
    for e in sim.log() {
        let batch = e.call.as_ref().map(|c| c.batch.to_string()).unwrap_or_default();
        let list = out.entry(e.bmc.clone()).or_default();
        match list.iter_mut().find(|(b, _)| *b == batch) {
            Some((_, actions)) => actions.push(e.action),
            None => list.push((batch, vec![e.action])),
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollout_runs_in_waves_after_its_canaries_once_per_machine_in_order() {
    let nats = NatsServer::start();
    let sim =
        SimServer::start(SimConfig { latency: Duration::from_millis(150), ..SimConfig::default() }).await.unwrap();
    let topo = Topology::default();
    let _gw = topo.gateway(&nats, &GATEWAY_ARGS);
    let p = Producer::new(nats.client().await);
    wait_gateway(&p).await;
    let _workers: Vec<Process> = (0..2).map(|i| topo.worker(&nats, &format!("w{i}"), sim.addr(), &[])).collect();
    wait_partitions_owned(&p.client, &topo.subjects()).await;
    let names = register(&p.client, &topo, 1, 8).await;
    register(&p.client, &topo, 2, 2).await; // not selected
    let mut events = Events::start(&p.client, &topo.subjects()).await;

    let mut req = request(&[("rack", "1")], vec![Action::Power(PowerOp::Cycle), Action::Power(PowerOp::Status)]);
    req.canary = Some(2);
    req.max_parallel = Some(3);
    let v = view(call(&p, "submit", &req).await);
    let id = v.rollout.id;
    assert_eq!((v.rollout.machines, v.rollout.state, v.duplicate), (8, RolloutState::Running, false));
    // A second submit of the same id is answered with the same rollout.
    req.id = Some(id);
    assert!(view(call(&p, "submit", &req).await).duplicate);

    // Meanwhile, an ordinary batch on the last machine: it keeps its place in that machine's order.
    let other = machine_batch(&names[7], vec![Action::Power(PowerOp::Status)]);
    let Reply::Accepted(other) = p.submit(&other, false).await else { panic!("other batch refused") };

    let seen = events.until(Duration::from_secs(120), |e| matches!(e, RolloutEventKind::RolloutFinished { .. })).await;
    let kinds: Vec<&str> = seen.iter().map(|e| e.event.name()).collect();
    assert_eq!(kinds.first(), Some(&"rollout_started"), "{kinds:?}");
    assert_eq!(kinds.iter().filter(|k| **k == "rollout_progress").count(), 8, "{kinds:?}");
    let RolloutEventKind::RolloutFinished { state, counts, not_started, .. } = &seen.last().unwrap().event else {
        unreachable!()
    };
    assert_eq!((*state, counts.succeeded, *not_started), (RolloutState::Succeeded, 8, 0));

    // Each machine ran exactly one batch of the rollout: the derived id, both actions once.
    let by_bmc = batches_by_bmc(&sim);
    let mut windows = vec![];
    let log = sim.log();
    for (i, name) in names.iter().enumerate() {
        let bid = rollout::batch_id(id, i as u32, name).to_string();
        let batches = &by_bmc[&key(1, i + 1)];
        let mine: Vec<_> = batches.iter().filter(|(b, _)| *b == bid).collect();
        assert_eq!(mine.len(), 1, "{name}: {batches:?}");
        assert_eq!(mine[0].1, ["power_cycle", "power_status"], "{name}");
        let seqs: Vec<u64> =
            log.iter().filter(|e| e.call.as_ref().is_some_and(|c| c.batch.to_string() == bid)).map(|e| e.seq).collect();
        windows.push((*seqs.iter().min().unwrap(), *seqs.iter().max().unwrap()));
    }
    for rack2 in 1..=2 {
        assert!(!by_bmc.contains_key(&key(2, rack2)), "an unselected machine ran nothing");
    }
    // The canaries (machines 0 and 1) finished before any other machine started.
    let canaries_done = windows[0].1.max(windows[1].1);
    assert!(windows[2..].iter().all(|(first, _)| *first > canaries_done), "{windows:?}");
    // Never more than max_parallel (3) machines at once, as the simulator saw them.
    for (first, _) in &windows {
        let overlapping = windows.iter().filter(|(a, b)| a <= first && first <= b).count();
        assert!(overlapping <= 3, "{overlapping} machines at once: {windows:?}");
    }
    // The other batch and the rollout's batch on the last machine ran in admission order, unmixed.
    let results = wait_final_statuses(&p.client, &topo.subjects(), &[other.id], Duration::from_secs(60)).await;
    assert!(results[&other.id].results.iter().all(|r| r.is_ok()));
    let last = &by_bmc[&key(1, 8)];
    assert_eq!(last.len(), 2, "{last:?}");
    let rollout_batch = rollout::batch_id(id, 7, &names[7]).to_string();
    let js = async_nats::jetstream::new(p.client.clone());
    let kv = js.get_key_value(topo.subjects().batches_bucket()).await.unwrap();
    // Admission order, as the gateway stamped it (a worker may write a record
    // before the gateway's, without the stream sequence; the admission time is in both).
    let admitted = |b: &str| {
        let kv = kv.clone();
        let b: ulid::Ulid = b.parse().unwrap();
        async move { bmcfleet_common::status::load(&kv, &b).await.unwrap().unwrap().status.admitted_at_ms }
    };
    let (rollout_at, other_at) = (admitted(&rollout_batch).await, admitted(&other.id.to_string()).await);
    assert!(other_at < rollout_at, "the other batch was admitted first ({other_at} < {rollout_at})");
    let admitted_first = other.id.to_string();
    assert_eq!(last[0].0, admitted_first, "the machine ran its batches in admission order: {last:?}");

    // The lighter path: a rollout's batches publish their final event only
    // (the rollout reports their progress); the ordinary batch, every action's.
    let subjects = topo.subjects();
    for (i, name) in names.iter().enumerate() {
        let b = rollout::batch_id(id, i as u32, name);
        let kinds = bmcfleet_tests::producer::stored_event_kinds(&p.client, &subjects, &b).await;
        assert_eq!(kinds, ["batch_finished"], "{name}");
    }
    bmcfleet_tests::eventually(Duration::from_secs(10), "the ordinary batch's three events", || {
        let (c, s, other) = (p.client.clone(), subjects.clone(), other.id);
        async move {
            let mut kinds = bmcfleet_tests::producer::stored_event_kinds(&c, &s, &other).await;
            kinds.sort();
            (kinds == ["action_finished", "action_started", "batch_finished"]).then_some(())
        }
    })
    .await;

    // Status pages name each machine with its batch and outcome.
    let page = view(call(&p, "status", &rollout::RolloutStatusRequest { id, from: 6, limit: 10 }).await);
    assert_eq!(page.parts.len(), 2);
    assert_eq!(page.parts[0].machine, names[6]);
    assert_eq!(page.parts[0].batch, rollout::batch_id(id, 6, &names[6]));
    assert_eq!(page.parts[0].state, rollout::PartState::Succeeded);
    // And the list shows it among finished rollouts only.
    let Reply::Rollouts { rollouts } = call(&p, "list", &rollout::RolloutListRequest { all: true }).await else {
        panic!()
    };
    assert!(rollouts.iter().any(|r| r.id == id));
    let Reply::Rollouts { rollouts } = call(&p, "list", &rollout::RolloutListRequest { all: false }).await else {
        panic!()
    };
    assert!(rollouts.iter().all(|r| r.id != id));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_holds_new_starts_resume_goes_on_abort_ends_it() {
    let Stack { nats: _nats, sim, topo, p, _gw, _worker } =
        stack(SimConfig { latency: Duration::from_millis(300), ..SimConfig::default() }).await;
    register(&p.client, &topo, 3, 10).await;
    let mut events = Events::start(&p.client, &topo.subjects()).await;

    let mut req = request(&[("rack", "3")], vec![Action::Power(PowerOp::On)]);
    req.max_parallel = Some(2);
    let id = view(call(&p, "submit", &req).await).rollout.id;
    events.until(Duration::from_secs(60), |e| matches!(e, RolloutEventKind::RolloutProgress { .. })).await;

    let paused = view(call(&p, "pause", &rollout::RolloutIdRequest { id }).await).rollout;
    assert_eq!(paused.state, RolloutState::Paused);
    // Those in flight finish; then nothing starts while paused.
    let drained =
        wait_record(&p, id, Duration::from_secs(60), "in-flight machines to finish", |r| r.in_flight.is_empty()).await;
    let starts_at_pause = drained.next;
    assert!(starts_at_pause < 10, "{drained:?}");
    // Another driver round has seen the paused record (a round reads, then writes only on change):
    // the leased record stays unchanged across several poll intervals of the driver.
    let again =
        wait_record(&p, id, Duration::from_secs(10), "a paused record", |r| r.state == RolloutState::Paused).await;
    assert_eq!((again.next, again.in_flight.len()), (starts_at_pause, 0));
    let ran_while_paused = sim.log().len();

    let resumed = view(call(&p, "resume", &rollout::RolloutIdRequest { id }).await).rollout;
    assert_eq!(resumed.state, RolloutState::Running);
    wait_record(&p, id, Duration::from_secs(60), "a start after resume", |r| r.next > starts_at_pause).await;
    assert!(ran_while_paused as u32 <= starts_at_pause, "nothing ran beyond what had started before the pause");

    let aborting = view(call(&p, "abort", &rollout::RolloutIdRequest { id }).await).rollout;
    assert!(matches!(aborting.state, RolloutState::Aborting | RolloutState::Aborted), "{aborting:?}");
    let seen = events.until(Duration::from_secs(60), |e| matches!(e, RolloutEventKind::RolloutFinished { .. })).await;
    let RolloutEventKind::RolloutFinished { state, not_started, counts, .. } = &seen.last().unwrap().event else {
        unreachable!()
    };
    assert_eq!(*state, RolloutState::Aborted);
    assert!(*not_started > 0, "abort left machines unstarted");
    assert_eq!(counts.finished() + not_started, 10, "{:?}\n{seen:?}", status(&p, id).await);
    let kinds: HashSet<&str> = seen.iter().map(|e| e.event.name()).collect();
    for k in ["rollout_paused", "rollout_resumed", "rollout_aborting"] {
        assert!(kinds.contains(k), "{k} in {kinds:?}");
    }
    // A finished rollout can be neither resumed nor aborted.
    let Reply::Error(e) = call(&p, "resume", &rollout::RolloutIdRequest { id }).await else { panic!() };
    assert_eq!(e.code, bmcfleet_schema::ErrorCode::Conflict);
    // Every machine ran its one action at most once, and only machines that were started.
    let record = status(&p, id).await;
    let by_bmc = batches_by_bmc(&sim);
    assert!(by_bmc.values().all(|b| b.len() == 1 && b[0].1.len() == 1), "{by_bmc:?}");
    assert!(by_bmc.len() as u32 <= record.next, "{record:?}");
}

/// The status record writes of a rollout's batches (a spy on the status
/// bucket's subjects): a batch that only reads is written once, by its
/// result (no `queued` record, no claim: running it twice changes nothing);
/// a batch that changes something is claimed before it runs, then written
/// with its result. Both finish, with one record each, of their tenant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_rollout_batch_is_written_once_and_a_changing_one_claimed_first() {
    let Stack { nats: _nats, sim, topo, p, _gw, _worker } = stack(SimConfig::default()).await;
    let subjects = topo.subjects();
    let js = async_nats::jetstream::new(p.client.clone());
    let batches = js.get_key_value(subjects.batches_bucket()).await.unwrap();
    let mut writes = p.client.subscribe(format!("$KV.{}.>", subjects.batches_bucket())).await.unwrap();
    p.client.flush().await.unwrap();

    let mut runs = vec![];
    for (rack, action) in [(6, Action::Power(PowerOp::Status)), (7, Action::Power(PowerOp::On))] {
        let names = register(&p.client, &topo, rack, 3).await;
        let id = view(call(&p, "submit", &request(&[("rack", &rack.to_string())], vec![action])).await).rollout.id;
        let done = wait_record(&p, id, Duration::from_secs(60), "the rollout to finish", |r| r.state.is_final()).await;
        assert_eq!((done.state, done.counts.succeeded), (RolloutState::Succeeded, 3), "{done:?}");
        let ids: Vec<ulid::Ulid> = names.iter().enumerate().map(|(i, n)| rollout::batch_id(id, i as u32, n)).collect();
        runs.push(ids);
    }
    // Each batch's writes, up to its final one (a batch's writes arrive in order).
    let mut states: HashMap<String, Vec<bmcfleet_schema::BatchState>> = HashMap::new();
    let ended = |states: &HashMap<String, Vec<bmcfleet_schema::BatchState>>| {
        runs.iter()
            .flatten()
            .all(|b| states.get(&b.to_string()).is_some_and(|v| v.last().is_some_and(|s| s.is_final())))
    };
    while !ended(&states) {
        let m = tokio::time::timeout(Duration::from_secs(30), writes.next()).await.expect("status writes").unwrap();
        let key = m.subject.rsplit('.').next().unwrap().to_owned();
        let s: bmcfleet_schema::BatchStatus = Encoding::MessagePack.decode(&m.payload).unwrap();
        states.entry(key).or_default().push(s.state);
    }
    use bmcfleet_schema::BatchState::{Running, Succeeded};
    for b in &runs[0] {
        assert_eq!(states.get(&b.to_string()), Some(&vec![Succeeded]), "power status: one write, the result");
    }
    for b in &runs[1] {
        assert_eq!(states.get(&b.to_string()), Some(&vec![Running, Succeeded]), "power on: claimed, then the result");
    }
    for b in runs.iter().flatten() {
        let s = bmcfleet_common::status::load(&batches, b).await.unwrap().unwrap().status;
        assert_eq!((s.state, s.tenant.as_str(), s.deliveries), (Succeeded, "default", 1), "{s:?}");
    }
    assert_eq!(batches_by_bmc(&sim).len(), 6, "each machine ran its batch");
}

/// How many jobs the jobs stream holds (queued, not yet acknowledged).
async fn jobs_queued(client: &async_nats::Client, subjects: &Subjects) -> u64 {
    let js = async_nats::jetstream::new(client.clone());
    let mut stream = js.get_stream(subjects.jobs_stream()).await.unwrap();
    stream.info().await.unwrap().state.messages
}

/// A rollout's machine batch is queued with no status record (the
/// rollout's record holds its queued state; the worker creates the record
/// at its claim). Aborting while no worker has claimed them cancels them by
/// creating their records `cancelled`: the rollout ends `aborted` with no
/// worker running, and the worker that later pulls the jobs runs none of
/// them. Without the driver's cancel of unclaimed batches the rollout would
/// wait for them, and they would run once a worker came.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abort_cancels_queued_batches_no_worker_claimed_and_they_never_run() {
    let nats = NatsServer::start();
    let sim = SimServer::start(SimConfig::default()).await.unwrap();
    let topo = Topology::default();
    let _gw = topo.gateway(&nats, &GATEWAY_ARGS);
    let p = Producer::new(nats.client().await);
    wait_gateway(&p).await;
    let names = register(&p.client, &topo, 5, 6).await;
    let subjects = topo.subjects();

    // No worker: the first wave is queued and stays so.
    let mut req = request(&[("rack", "5")], vec![Action::Power(PowerOp::Reset)]);
    req.max_parallel = Some(3);
    let id = view(call(&p, "submit", &req).await).rollout.id;
    let end = tokio::time::Instant::now() + Duration::from_secs(60);
    while jobs_queued(&p.client, &subjects).await < 3 {
        assert!(tokio::time::Instant::now() < end, "the first wave was never queued");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let record = status(&p, id).await;
    assert_eq!(record.in_flight.len(), 3, "{record:?}");
    let js = async_nats::jetstream::new(p.client.clone());
    let batches = js.get_key_value(subjects.batches_bucket()).await.unwrap();
    let in_flight: Vec<ulid::Ulid> =
        record.in_flight.iter().map(|&i| rollout::batch_id(id, i, &names[i as usize])).collect();
    for b in &in_flight {
        assert!(
            bmcfleet_common::status::load(&batches, b).await.unwrap().is_none(),
            "a queued rollout batch has no status record (the lighter path)"
        );
    }

    let aborting = view(call(&p, "abort", &rollout::RolloutIdRequest { id }).await).rollout;
    assert!(matches!(aborting.state, RolloutState::Aborting | RolloutState::Aborted), "{aborting:?}");
    let done =
        wait_record(&p, id, Duration::from_secs(60), "the abort to finish with no worker", |r| r.state.is_final())
            .await;
    assert_eq!(done.state, RolloutState::Aborted, "{done:?}");
    assert_eq!((done.counts.cancelled, done.not_started()), (3, 3), "{done:?}");
    for b in &in_flight {
        let s = bmcfleet_common::status::load(&batches, b).await.unwrap().expect("a cancelled record").status;
        assert_eq!(s.state, bmcfleet_schema::BatchState::Cancelled, "{s:?}");
        assert!(s
            .results
            .iter()
            .all(|r| r.error.as_ref().is_some_and(|e| e.code == bmcfleet_schema::ErrorCode::Cancelled)));
    }

    // A worker now pulls the three jobs and acknowledges them unrun.
    let _worker = topo.worker(&nats, "w0", sim.addr(), &[]);
    let end = tokio::time::Instant::now() + Duration::from_secs(60);
    while jobs_queued(&p.client, &subjects).await > 0 {
        assert!(tokio::time::Instant::now() < end, "the worker never took the queued jobs");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(sim.log().is_empty(), "nothing ran: {:?}", batches_by_bmc(&sim));
    for b in &in_flight {
        let s = bmcfleet_common::status::load(&batches, b).await.unwrap().unwrap().status;
        assert_eq!(s.state, bmcfleet_schema::BatchState::Cancelled, "still cancelled: {s:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_driving_gateway_a_worker_and_the_client_loses_and_repeats_nothing() {
    let nats = NatsServer::start();
    let sim =
        SimServer::start(SimConfig { latency: Duration::from_millis(300), ..SimConfig::default() }).await.unwrap();
    let topo = Topology::default();
    let mut gateways = [topo.gateway(&nats, &GATEWAY_ARGS), topo.gateway(&nats, &GATEWAY_ARGS)];
    let p = Producer::new(nats.client().await);
    wait_gateway(&p).await;
    let mut workers: Vec<Process> = (0..2).map(|i| topo.worker(&nats, &format!("w{i}"), sim.addr(), &[])).collect();
    wait_partitions_owned(&p.client, &topo.subjects()).await;
    let names = register(&p.client, &topo, 4, 24).await;

    // The client submits on a connection of its own and goes away.
    let client = Producer::new(nats.client().await);
    // The simulated BMCs start off: on (idempotent), then the non-idempotent reset.
    let actions = vec![Action::Power(PowerOp::On), Action::Power(PowerOp::Reset), Action::Power(PowerOp::Status)];
    let mut req = request(&[("rack", "4")], actions);
    req.max_parallel = Some(4);
    let id = view(call(&client, "submit", &req).await).rollout.id;
    drop(client);

    let early = wait_record(&p, id, Duration::from_secs(60), "some progress", |r| r.counts.finished() >= 3).await;
    if early.counts.succeeded == 0 {
        let page = view(call(&p, "status", &rollout::RolloutStatusRequest { id, from: 0, limit: 4 }).await);
        panic!("the first machines did not succeed: {:?}", page.parts);
    }
    // SIGKILL the gateway that drives it (its pid is in the lease).
    let js = async_nats::jetstream::new(p.client.clone());
    let leases = js.get_key_value(topo.subjects().rollout_leases_bucket()).await.unwrap();
    let holder = String::from_utf8(leases.get(id.to_string()).await.unwrap().expect("a lease").to_vec()).unwrap();
    let pid: u32 = holder.split('-').next().unwrap().parse().unwrap();
    let driving = gateways.iter().position(|g| g.pid() == Some(pid)).expect("a test gateway drives it");
    gateways[driving].kill();
    let before = status(&p, id).await;
    assert!(before.state == RolloutState::Running && before.next < 24, "killed mid-rollout: {before:?}");
    // And a worker, while batches run.
    workers[0].kill();
    workers.push(topo.worker(&nats, "w2", sim.addr(), &[]));

    let done = wait_record(&p, id, Duration::from_secs(180), "the rollout to finish", |r| r.state.is_final()).await;
    let holder2 = leases.get(id.to_string()).await.unwrap();
    assert!(holder2.is_none_or(|h| h.to_vec() != holder.as_bytes()), "another gateway took it over");
    assert_eq!(done.counts.finished(), 24, "{done:?}");
    assert_eq!(done.not_started(), 0);

    // Exactly one batch per machine, its derived id; the non-idempotent reset never ran twice.
    let by_bmc = batches_by_bmc(&sim);
    let killed_mid_action = done.counts.not_succeeded();
    for (i, name) in names.iter().enumerate() {
        let bid = rollout::batch_id(id, i as u32, name).to_string();
        let batches = by_bmc.get(&key(4, i + 1)).cloned().unwrap_or_default();
        assert!(batches.iter().all(|(b, _)| *b == bid), "{name} ran only its rollout batch: {batches:?}");
        assert!(batches.len() <= 1, "{name}: {batches:?}");
        let resets = batches.iter().flat_map(|(_, a)| a).filter(|a| *a == "power_reset").count();
        assert!(resets <= 1, "{name}: the reset never ran twice: {batches:?}");
        let succeeded = results_of(&p, &topo.subjects(), rollout::batch_id(id, i as u32, name)).await;
        if succeeded {
            assert_eq!(resets, 1, "{name}: a succeeded batch ran its reset once: {batches:?}");
        }
    }
    // Each machine's recorded outcome is its batch's.
    let ids: Vec<ulid::Ulid> = names.iter().enumerate().map(|(i, n)| rollout::batch_id(id, i as u32, n)).collect();
    let results = wait_final_statuses(&p.client, &topo.subjects(), &ids, Duration::from_secs(30)).await;
    let page = view(call(&p, "status", &rollout::RolloutStatusRequest { id, from: 0, limit: 24 }).await);
    for part in &page.parts {
        let expect = PartOutcome::of(results[&part.batch].state);
        assert_eq!(part.state, expect.into(), "{part:?}");
    }
    eprintln!("rollout chaos: 24 machines, driving gateway and a worker SIGKILLed; {killed_mid_action} not succeeded (interrupted, never re-run)");
}

/// `bmcctl` with the stack's NATS: (exit code, stdout, stderr).
async fn bmcctl(nats: &NatsServer, args: &[&str], stdin: &str) -> (Option<i32>, String, String) {
    use tokio::io::AsyncWriteExt;
    let mut child = tokio::process::Command::new(bmcfleet_tests::bin("bmcctl"))
        .args(["--nats-url", &nats.url()])
        .args(args)
        .env_remove("RUST_LOG")
        .env_remove("BMCCTL_OUTPUT")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn bmcctl");
    child.stdin.take().unwrap().write_all(stdin.as_bytes()).await.unwrap();
    let out = child.wait_with_output().await.unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bmcctl_submits_follows_and_lists_rollouts() {
    let Stack { nats, sim: _sim, topo, p, _gw, _worker } = stack(SimConfig::default()).await;
    let names = register(&p.client, &topo, 5, 3).await;

    let file = r#"{"selector": {"rack": "5"}, "actions": [{"power": "on"}], "max_parallel": 2, "canary": 1}"#;
    let (code, out, err) = bmcctl(&nats, &["rollout", "submit", "-", "--watch"], file).await;
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("succeeded: 3 succeeded, 0 failed"), "{out}");
    for name in &names {
        assert!(out.contains(&format!("{name} succeeded (batch ")), "{out}");
    }
    let id = out.split_whitespace().nth(1).unwrap().to_owned();
    let (code, out, err) = bmcctl(&nats, &["--json", "rollout", "status", &id, "--machines"], "").await;
    assert_eq!(code, Some(0), "{out}{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["rollout"]["rollout"]["state"], "succeeded", "{v}");
    assert_eq!(v["rollout"]["parts"].as_array().unwrap().len(), 3, "{v}");
    let (code, out, _) = bmcctl(&nats, &["rollout", "list", "--all"], "").await;
    assert_eq!(code, Some(0));
    assert!(out.contains(&id) && out.contains("succeeded"), "{out}");
    // A finished rollout cannot be paused: a refusal, exit 3.
    let (code, _, err) = bmcctl(&nats, &["rollout", "pause", &id], "").await;
    assert_eq!(code, Some(3), "{err}");
    assert!(err.contains("conflict"), "{err}");
    // A refused submit stores nothing and says why; a selector matching no
    // machine exits 2 like an unknown machine in every form (docs/BMCCTL.md).
    let bad = r#"{"selector": {"rack": "nope"}, "actions": [{"power": "on"}]}"#;
    let (code, _, err) = bmcctl(&nats, &["rollout", "submit", "-"], bad).await;
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("machine_not_found"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_the_shipped_accounts_a_tenant_rolls_out_to_its_own_machines_only() {
    use bmcfleet_tests::shipped::{connect, shipped_with, PASSWORDS};
    let stack = shipped_with(Topology::default(), SimConfig::default(), &GATEWAY_ARGS, &[]).await;
    let (admin, _) = connect(&stack.nats, "admin", PASSWORDS[4].1).await;
    let (a, _) = stack.producer("producer-a", PASSWORDS[5].1).await;
    let (b, _) = stack.producer("producer-b", PASSWORDS[6].1).await;
    stack.wait_partitions_owned().await;
    let mine = register_for(&admin, &stack.topo, 6, 2, "tenant-a").await;
    register_for(&admin, &stack.topo, 7, 2, "tenant-b").await;
    let mut a_events = a.client.subscribe("bmc.events.tenant-a.rollout.>").await.unwrap();
    a.client.flush().await.unwrap();

    // `{}`: every machine of the requesting tenant, and only those.
    let v = view(call(&a, "submit", &request(&[], vec![Action::Power(PowerOp::On)])).await);
    let id = v.rollout.id;
    assert_eq!((v.rollout.machines, v.rollout.tenant.as_str()), (2, "tenant-a"), "{v:?}");
    let end = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let msg = tokio::time::timeout_at(end, a_events.next()).await.expect("tenant A's rollout events").unwrap();
        let ev: RolloutEvent = Encoding::MessagePack.decode(&msg.payload).unwrap();
        if let RolloutEventKind::RolloutFinished { state, counts, .. } = ev.event {
            assert_eq!((state, counts.succeeded), (RolloutState::Succeeded, 2));
            break;
        }
    }
    let page = view(call(&a, "status", &rollout::RolloutStatusRequest { id, from: 0, limit: 10 }).await);
    let names: Vec<&str> = page.parts.iter().map(|p| p.machine.as_str()).collect();
    assert_eq!(names, mine.iter().map(String::as_str).collect::<Vec<_>>());

    // Tenant B: A's rollout answers like an unknown one; A's machines cannot be named.
    let unknown = ulid::Ulid::new();
    for endpoint in ["pause", "abort"] {
        let Reply::Error(e) = call(&b, endpoint, &rollout::RolloutIdRequest { id }).await else { panic!() };
        let Reply::Error(u) = call(&b, endpoint, &rollout::RolloutIdRequest { id: unknown }).await else { panic!() };
        assert_eq!(e.code, bmcfleet_schema::ErrorCode::NotFound);
        assert_eq!(e.message.replace(&id.to_string(), "ID"), u.message.replace(&unknown.to_string(), "ID"));
    }
    let Reply::Rollouts { rollouts } = call(&b, "list", &rollout::RolloutListRequest { all: true }).await else {
        panic!()
    };
    assert!(rollouts.is_empty(), "{rollouts:?}");
    let mut theirs = request(&[], vec![Action::Power(PowerOp::On)]);
    theirs.selector = None;
    theirs.machines = vec![mine[0].clone()];
    let Reply::Error(e) = call(&b, "submit", &theirs).await else { panic!("B named A's machine") };
    assert_eq!(e.code, bmcfleet_schema::ErrorCode::MachineNotFound, "{e:?}");
    // Reusing A's rollout id tells B nothing of it.
    let mut replay = request(&[], vec![Action::Power(PowerOp::On)]);
    replay.id = Some(id);
    let Reply::Error(e) = call(&b, "submit", &replay).await else { panic!("B reused A's id") };
    assert_eq!(e.code, bmcfleet_schema::ErrorCode::InvalidField, "{e:?}");
    // B's `{}` selects B's machines only: two, neither of A's.
    let v = view(call(&b, "submit", &request(&[], vec![Action::Power(PowerOp::Status)])).await);
    assert_eq!((v.rollout.machines, v.rollout.tenant.as_str()), (2, "tenant-b"));
}

/// A plan rollout: every machine's batch runs in plan mode. Nothing that
/// changes state reaches any BMC (the simulator logs every action it is
/// sent), every machine is planned after its canary, and the status groups
/// the machines by their identical plans.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_rollout_changes_nothing_and_groups_the_machines_plans() {
    let Stack { nats: _nats, sim, topo, p, _gw, _worker } = stack(SimConfig::default()).await;
    let names = register(&p.client, &topo, 3, 5).await;

    let mut req = request(&[("rack", "3")], vec![Action::Power(PowerOp::Off), Action::Power(PowerOp::Status)]);
    req.plan = true;
    req.canary = Some(1);
    let v = view(call(&p, "submit", &req).await);
    assert!(v.rollout.plan, "the record says it is a plan");
    let id = v.rollout.id;
    let done =
        wait_record(&p, id, Duration::from_secs(120), "the plan rollout to finish", |r| r.state.is_final()).await;
    assert_eq!((done.state, done.counts.succeeded, done.plan), (RolloutState::Succeeded, 5, true), "{done:?}");

    // Nothing state-changing was sent: the simulator never saw a power off.
    let log = sim.log();
    assert!(log.iter().all(|e| e.action != "power_off"), "{log:?}");
    // Every machine's batch was a plan batch of the rollout.
    let js = async_nats::jetstream::new(p.client.clone());
    let kv = js.get_key_value(topo.subjects().batches_bucket()).await.unwrap();
    for (i, name) in names.iter().enumerate() {
        let b = rollout::batch_id(id, i as u32, name);
        let st = bmcfleet_common::status::load(&kv, &b).await.unwrap().expect("a status").status;
        let r = st.result.expect("a result");
        let off = &r.results[0];
        let plan = off.plan.as_ref().expect("power_off has a plan");
        assert!(plan.change.is_some(), "{name}: the change it would send: {plan:?}");
    }

    // The status shows each machine's plan, grouped: one plan for all five.
    let reply = call(&p, "status", &rollout::RolloutStatusRequest { id, from: 0, limit: 100 }).await;
    let parts = view(reply).parts;
    assert_eq!(parts.len(), 5);
    assert!(parts.iter().all(|p| p.plan.is_some()), "{parts:?}");
    let groups = rollout::plan_groups(&parts);
    assert_eq!(groups.len(), 1, "{groups:?}");
    assert_eq!(groups[0].1.len(), 5);
    assert!(groups[0].0.contains("power_off: ") && groups[0].0.contains("power_status: no change"), "{}", groups[0].0);
}

/// Canaries mean in a plan rollout what they mean in a run: a canary whose
/// plan could not be made (here: its credential does not exist) counts as
/// failed, and no other machine is planned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_rollout_stops_after_a_canary_whose_plan_failed() {
    use bmcfleet_common::streams::{bucket, machines_config, Mode};
    let Stack { nats: _nats, sim, topo, p, _gw, _worker } = stack(SimConfig::default()).await;
    register(&p.client, &topo, 4, 3).await;
    // First by name, so the canary: a machine whose credential does not exist.
    let js = async_nats::jetstream::new(p.client.clone());
    let machines = bucket(&js, machines_config(&topo.subjects(), 1), Mode::UseExisting).await.unwrap();
    let mut m = bmcfleet_schema::Machine::new(
        "r4-node-00".to_owned(),
        "10.77.4.200".parse().unwrap(),
        bmcfleet_schema::Protocol::Sim,
        "missing",
    );
    m.labels = BTreeMap::from([("rack".to_owned(), "4".to_owned())]);
    bmcfleet_common::registry::put(&machines, &m).await.unwrap();

    let mut req = request(&[("rack", "4")], vec![Action::Power(PowerOp::Off)]);
    req.plan = true;
    req.canary = Some(1);
    let id = view(call(&p, "submit", &req).await).rollout.id;
    let done = wait_record(&p, id, Duration::from_secs(120), "the plan rollout to stop", |r| r.state.is_final()).await;
    assert_eq!(
        (done.state, done.stop, done.counts.failed, done.not_started()),
        (RolloutState::Failed, Some(rollout::StopReason::Canary), 1, 3),
        "{done:?}"
    );
    assert!(sim.log().is_empty(), "nothing reached any BMC: {:?}", sim.log());
    let parts = view(call(&p, "status", &rollout::RolloutStatusRequest { id, from: 0, limit: 100 }).await).parts;
    assert_eq!(parts[0].plan.as_deref(), Some("unknown_credential"), "{parts:?}");
    assert_eq!(rollout::plan_groups(&parts), [("unknown_credential".to_owned(), vec!["r4-node-00".to_owned()])]);
}
