//! bmcfleet on a real 3-node JetStream cluster with every stream and bucket
//! replicated 3 ways (`--replicas 3`): one NATS node (the jobs stream's
//! leader) and one worker are SIGKILLed while a few hundred batches run, and
//! still no batch is lost, each BMC's batches run in submission order, and no
//! non-idempotent action runs twice.
//!
//! The results are read back from the replicated events stream (not from a
//! core subscription, which would miss what is published while its server is
//! down), so "exactly one final result per batch" is checked on what the
//! cluster durably stored.

use bmcfleet_schema::*;
use bmcfleet_testing::{LogEntry, SimConfig, SimServer};
use bmcfleet_tests::checks::{assert_ordered, mixed_actions, sim_batch};
use bmcfleet_tests::cluster::NatsCluster;
use bmcfleet_tests::producer::{wait_partitions_owned, Topology};
use bmcfleet_tests::{Process, Producer};
use futures::StreamExt;
use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

const BMCS: usize = 20;
const BATCHES: usize = 400;

/// A sim batch whose id the producer chooses, so that a resubmission after a
/// failed request is the same batch.
fn batch(address: &str, actions: Vec<Action>) -> Batch {
    let mut b = sim_batch(address, actions);
    b.id = Some(ulid::Ulid::new());
    b
}

/// What the producer saw while submitting.
#[derive(Default)]
struct Submitted {
    ids: Vec<BatchId>,
    per_bmc: HashMap<String, Vec<BatchId>>,
    actions: HashMap<BatchId, Vec<Action>>,
    /// Requests repeated after no reply or an `unavailable` error.
    retries: usize,
    /// Accepted replies that said the batch id was already queued.
    duplicates: usize,
}

/// Submit one by one (a well-defined order per BMC), repeating a request with
/// the same batch id until the gateway accepts it, as a producer must when a
/// NATS server goes away under it.
async fn submit_all(p: Producer, batches: Vec<Batch>) -> Submitted {
    let mut out = Submitted::default();
    for b in batches {
        let id = b.id.expect("ids are chosen by the producer");
        let body = Encoding::MessagePack.encode(&b).unwrap();
        let subject = format!("{}.submit", p.prefix);
        let give_up = Instant::now() + Duration::from_secs(45);
        let accepted = loop {
            let req = async_nats::Request::new().payload(body.clone().into()).timeout(Some(Duration::from_secs(5)));
            let why = match p.client.send_request(subject.clone(), req).await {
                Ok(msg) => match Encoding::MessagePack.decode::<Reply>(&msg.payload) {
                    Ok(Reply::Accepted(a)) => break a,
                    Ok(Reply::Error(e)) if matches!(e.code, ErrorCode::Unavailable | ErrorCode::Timeout) => {
                        format!("{}: {}", e.code, e.message)
                    }
                    other => panic!("batch {id}: unexpected reply {other:?}"),
                },
                Err(e) => e.to_string(),
            };
            assert!(Instant::now() < give_up, "batch {id} was not accepted within 45s; last error: {why}");
            out.retries += 1;
            // Back off before asking again (a retry pause, not a synchronisation).
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        assert_eq!(accepted.id, id);
        out.duplicates += usize::from(accepted.duplicate);
        out.ids.push(id);
        out.per_bmc.entry(b.bmc.as_ref().unwrap().address.key().to_string()).or_default().push(id);
        out.actions.insert(id, b.actions.clone());
    }
    out
}

/// Read the events stream from its start with an ordered consumer (which
/// re-creates itself if its server dies) until every id in `want` has a
/// final result and everything stored up to then is read. Returns every
/// `batch_finished` event per batch id.
async fn read_final_results(
    client: &async_nats::Client,
    subjects: &Subjects,
    want: &HashSet<BatchId>,
    timeout: Duration,
) -> HashMap<BatchId, Vec<BatchResult>> {
    use async_nats::jetstream::consumer::{pull::OrderedConfig, DeliverPolicy};
    let js = async_nats::jetstream::new(client.clone());
    let config = OrderedConfig {
        filter_subject: subjects.events_all(),
        deliver_policy: DeliverPolicy::All,
        ..Default::default()
    };
    let mut messages = js_retry("an ordered consumer on the events stream", || {
        let (js, config) = (js.clone(), config.clone());
        async move {
            js.get_stream(subjects.events_stream())
                .await?
                .create_consumer(config)
                .await?
                .messages()
                .await
                .map_err(Into::into)
        }
    })
    .await;
    let mut finals: HashMap<BatchId, Vec<BatchResult>> = HashMap::new();
    let end = tokio::time::Instant::now() + timeout;
    // Once every wanted id is seen, read on to the stream's last sequence at
    // that moment so a late duplicate stored before it would be counted too.
    let mut read_to: Option<u64> = None;
    loop {
        let msg = match tokio::time::timeout_at(end, messages.next()).await {
            Ok(Some(Ok(m))) => m,
            Ok(Some(Err(e))) => {
                eprintln!("events consumer hiccup (it re-creates itself): {e}");
                continue;
            }
            Ok(None) => panic!("events consumer ended"),
            Err(_) => {
                let missing: Vec<_> = want.iter().filter(|id| !finals.contains_key(id)).collect();
                panic!(
                    "timed out: {} of {} batches have no final result in the events stream, e.g. {:?}",
                    missing.len(),
                    want.len(),
                    missing.iter().take(5).collect::<Vec<_>>()
                );
            }
        };
        let seq = msg.info().map(|i| i.stream_sequence).unwrap_or(0);
        if let Ok(ev) = Encoding::MessagePack.decode::<Event>(&msg.payload) {
            if let EventKind::BatchFinished { result } = ev.event {
                finals.entry(result.id).or_default().push(result);
            }
        }
        if read_to.is_none() && want.iter().all(|id| finals.contains_key(id)) {
            read_to = Some(stream_info(&js, &subjects.events_stream()).await.state.last_sequence);
        }
        if read_to.is_some_and(|last| seq >= last) {
            return finals;
        }
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A JetStream API call from the test's own client, repeated while the
/// cluster elects new leaders after a node loss (requests time out or get
/// "no responders" meanwhile), for at most 30 s.
async fn js_retry<T, F, Fut>(what: &str, mut call: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, BoxError>>,
{
    let end = Instant::now() + Duration::from_secs(30);
    loop {
        match call().await {
            Ok(v) => return v,
            Err(e) if Instant::now() < end => eprintln!("{what}: {e}; retrying"),
            Err(e) => panic!("{what}: {e}"),
        }
        // Back off before asking again (a retry pause, not a synchronisation).
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn stream_info(js: &async_nats::jetstream::Context, name: &str) -> async_nats::jetstream::stream::Info {
    js_retry(&format!("info of stream {name}"), || async move {
        let mut s = js.get_stream(name).await?;
        Ok(s.info().await?.clone())
    })
    .await
}

/// A batch's status record through the gateway, repeated like a producer would.
async fn batch_status(p: &Producer, id: BatchId) -> BatchStatus {
    let body = Encoding::MessagePack.encode(&IdRequest { id }).unwrap();
    js_retry(&format!("status of {id}"), || {
        let req = async_nats::Request::new().payload(body.clone().into()).timeout(Some(Duration::from_secs(5)));
        let c = p.client.clone();
        let subject = format!("{}.status", p.prefix);
        async move {
            let msg = c.send_request(subject, req).await?;
            match Encoding::MessagePack.decode::<Reply>(&msg.payload)? {
                Reply::Status(s) => Ok(s),
                Reply::Error(e) if e.code == ErrorCode::Unavailable => Err(e.message.into()),
                other => panic!("status of {id}: unexpected reply {other:?}"),
            }
        }
    })
    .await
}

/// Fail with the process's log if it already exited (e.g. refused its flags).
fn assert_running(p: &mut Process) {
    if let Some(status) = p.try_wait() {
        panic!("{} exited at start ({status}); log:\n{}", p.name, p.log_text());
    }
}

/// On a failing assertion, show the tails of the component logs.
struct LogsOnPanic {
    logs: Vec<(String, std::path::PathBuf)>,
}

impl LogsOnPanic {
    fn of<'a>(procs: impl IntoIterator<Item = &'a Process>) -> Self {
        LogsOnPanic { logs: procs.into_iter().map(|p| (p.name.clone(), p.log.clone())).collect() }
    }
}

impl Drop for LogsOnPanic {
    fn drop(&mut self) {
        if std::thread::panicking() {
            for (name, path) in &self.logs {
                let text = std::fs::read_to_string(path).unwrap_or_default();
                // Without backtrace frames, so an error's own message shows.
                let is_frame = |l: &str| {
                    let t = l.trim_start();
                    t.starts_with("at ")
                        || t.split_once(": ")
                            .is_some_and(|(n, _)| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()))
                };
                let tail: Vec<&str> = text.lines().filter(|l| !is_frame(l)).rev().take(40).collect();
                eprintln!("--- last lines of {name} ---");
                for l in tail.into_iter().rev() {
                    eprintln!("{l}");
                }
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r3_cluster_loses_no_batch_when_a_nats_node_and_a_worker_die() {
    let started = Instant::now();
    let mut cluster = NatsCluster::start(3);
    cluster.wait_for_placement(3).await;
    let sim = SimServer::start(SimConfig { latency: Duration::from_millis(50), ..SimConfig::default() }).await.unwrap();
    // Leases outlive a JetStream leader election of the lease bucket more often
    // than not; a lease lost anyway is a (safe) hand-over, which the checks allow.
    let topo = Topology { partitions: 8, lease_ttl: "6s", rebalance: "2s", ..Topology::default() };
    let subjects = topo.subjects();

    // Batches queue up while NATS nodes fail: no per-BMC cap here.
    let mut gateway = cluster.gateway(&topo, 3, &["--max-queued-per-bmc", "100000"]);
    let client = cluster.client().await;
    let p = Producer::new(client.clone());
    bmcfleet_tests::eventually(Duration::from_secs(20), "gateway service on the cluster", || {
        assert_running(&mut gateway);
        let c = p.client.clone();
        async move {
            let req =
                async_nats::Request::new().payload(b"{}".to_vec().into()).timeout(Some(Duration::from_millis(500)));
            c.send_request("bmcfleet.status", req).await.ok().map(|_| ())
        }
    })
    .await;
    let mut workers: Vec<Process> =
        (0..3).map(|i| cluster.worker(&topo, 3, &format!("w{i}"), sim.addr(), &[])).collect();
    for w in &mut workers {
        assert_running(w);
    }
    let _logs = LogsOnPanic::of(std::iter::once(&gateway).chain(workers.iter()));
    wait_partitions_owned(&client, &subjects).await;
    // The first worker up takes every partition; wait for the rebalance so
    // that each worker owns some, and a kill hits a worker with work.
    let js = async_nats::jetstream::new(client.clone());
    let leases = js_retry("the lease bucket", || async { Ok(js.get_key_value(subjects.leases_bucket()).await?) }).await;
    bmcfleet_tests::eventually(Duration::from_secs(30), "partitions spread over all three workers", || {
        let leases = leases.clone();
        async move {
            let owners: HashSet<String> = futures::future::join_all((0..topo.partitions).map(|p| {
                let leases = leases.clone();
                async move {
                    let v = leases.get(format!("p{p}")).await.ok()??;
                    serde_json::from_slice::<serde_json::Value>(&v).ok()?.get("worker")?.as_str().map(str::to_owned)
                }
            }))
            .await
            .into_iter()
            .collect::<Option<_>>()?;
            (owners.len() == 3).then_some(())
        }
    })
    .await;

    // Every stream and bucket is replicated on all three nodes.
    for name in [
        subjects.jobs_stream(),
        subjects.events_stream(),
        format!("KV_{}", subjects.batches_bucket()),
        format!("KV_{}", subjects.leases_bucket()),
        format!("KV_{}", subjects.workers_bucket()),
    ] {
        let info = stream_info(&js, &name).await;
        assert_eq!(info.config.num_replicas, 3, "{name} is not R3");
        let c = info.cluster.unwrap_or_else(|| panic!("{name} has no cluster info"));
        assert!(c.leader.is_some(), "{name} has no leader");
        assert_eq!(c.replicas.len(), 2, "{name}: a leader and two followers expected, got {:?}", c.replicas);
    }

    let ready = started.elapsed();
    let batches: Vec<Batch> =
        (0..BATCHES).map(|i| batch(&format!("10.9.0.{}", i % BMCS + 1), mixed_actions(i / BMCS))).collect();
    let expected_actions: usize = batches.iter().map(|b| b.actions.len()).sum();
    let submitter = tokio::spawn(submit_all(p.clone(), batches));

    // 1. SIGKILL the jobs stream's leader once execution is well under way.
    assert!(
        sim.wait_for(Duration::from_secs(30), |log| log.len() >= expected_actions / 7).await,
        "execution did not start"
    );
    let leader = stream_info(&js, &subjects.jobs_stream())
        .await
        .cluster
        .and_then(|c| c.leader)
        .expect("the jobs stream has a leader");
    let victim = cluster.index_of(&leader).unwrap_or_else(|| panic!("unknown leader {leader}"));
    let nats_killed_at = sim.log().len();
    cluster.kill(victim);
    eprintln!(
        "{:5.1}s killed nats node {leader} (jobs stream leader) after {nats_killed_at} of {expected_actions} actions",
        started.elapsed().as_secs_f64()
    );

    // 2. Once the fleet demonstrably executes again, SIGKILL the worker that
    //    has been the busiest since (so the kill lands on running lanes).
    let recovered =
        sim.wait_for(Duration::from_secs(40), |log| log.len() >= nats_killed_at + expected_actions / 10).await;
    assert!(recovered, "execution did not resume within 40s of losing NATS node {leader}");
    let log = sim.log();
    let mut busy: HashMap<&str, usize> = HashMap::new();
    for e in &log[nats_killed_at..] {
        *busy.entry(e.call.as_ref().map(|c| c.worker.as_str()).unwrap_or("")).or_default() += 1;
    }
    let (victim_worker, _) =
        busy.iter().max_by_key(|(w, n)| (**n, **w)).map(|(w, n)| (w.to_string(), *n)).expect("someone executed");
    let victim_index: usize = victim_worker.trim_start_matches('w').parse().expect("worker ids are w<N>");
    // Kill it while it has an action in flight: the simulator logs an
    // action as it starts, then answers after its 50 ms; a batch whose
    // action has just started is not acknowledged yet, so its job is
    // redelivered to another worker. (Killed between two of its batches,
    // the kill would hit nothing, and the run would prove nothing.)
    let seen = sim.log().len();
    let starting = sim
        .wait_for(Duration::from_secs(20), |log| {
            log[seen..].iter().any(|e| e.call.as_ref().is_some_and(|c| c.worker == victim_worker))
        })
        .await;
    assert!(starting, "worker {victim_worker} started no action within 20 s");
    let worker_killed_at = sim.log().len();
    workers[victim_index].kill();
    eprintln!(
        "{:5.1}s killed worker {victim_worker} after {worker_killed_at} of {expected_actions} actions (executed since the nats kill: {busy:?})",
        started.elapsed().as_secs_f64()
    );

    let sub = submitter.await.expect("submitter task");
    let want: HashSet<BatchId> = sub.ids.iter().copied().collect();
    assert_eq!(want.len(), BATCHES, "every batch was accepted once, under its own id");
    let finals = read_final_results(&client, &subjects, &want, Duration::from_secs(60)).await;
    let all_done = started.elapsed();

    // No batch lost, none finished twice: exactly one durable final result each.
    assert_eq!(
        finals.len(),
        BATCHES,
        "final results for unknown batches: {:?}",
        finals.keys().filter(|id| !want.contains(id)).collect::<Vec<_>>()
    );
    for (id, results) in &finals {
        assert_eq!(results.len(), 1, "batch {id} has {} final results: {results:?}", results.len());
    }
    // The status record agrees with the published result.
    for id in &sub.ids {
        let s = batch_status(&p, *id).await;
        assert!(s.state.is_final(), "batch {id} is still {:?}", s.state);
        assert_eq!(s.result.as_ref(), Some(&finals[id][0]), "batch {id}: status record and final event differ");
    }

    let log = sim.log();
    assert_ordered(&log, &sub.per_bmc);

    // Failures are only non-idempotent actions interrupted by a kill (never
    // re-run) and what on_error: stop skipped after them.
    let mut interrupted = 0;
    for r in finals.values().map(|v| &v[0]) {
        assert_eq!(r.results.len(), sub.actions[&r.id].len(), "batch {}: one result per action", r.id);
        for a in &r.results {
            if let Some(e) = &a.error {
                assert!(
                    matches!(e.code, ErrorCode::Interrupted | ErrorCode::Skipped),
                    "unexpected failure {a:?} in batch {}",
                    r.id
                );
                if e.code == ErrorCode::Interrupted {
                    interrupted += 1;
                    assert!(
                        !sub.actions[&r.id][a.index as usize].is_idempotent(),
                        "an idempotent action was reported interrupted: {a:?}"
                    );
                }
            }
        }
    }
    // Exactly once for non-idempotent actions. An idempotent one may run again
    // when its first run was cut short: by the worker kill, or (unlike the
    // single-server suites, hence no checks::assert_exactly_once here) by a
    // surviving worker whose lease lapsed while the lease bucket elected a new
    // leader, which stops its lanes mid-action by design.
    let mut runs: HashMap<(BatchId, u32), Vec<&LogEntry>> = HashMap::new();
    for e in &log {
        let c = e.call.as_ref().unwrap();
        runs.entry((c.batch, c.index)).or_default().push(e);
    }
    let (mut reruns, mut reruns_after_lapse) = (0, 0);
    for ((batch_id, index), entries) in &runs {
        let action = &sub.actions[batch_id][*index as usize];
        if entries.len() > 1 {
            assert!(
                action.is_idempotent(),
                "non-idempotent {} of {batch_id}/{index} ran {} times: {entries:?}",
                action.kind(),
                entries.len()
            );
            reruns += entries.len() - 1;
            reruns_after_lapse += entries[..entries.len() - 1]
                .iter()
                .filter(|e| e.call.as_ref().unwrap().worker != victim_worker)
                .count();
        }
    }
    let succeeded = finals.values().filter(|v| v[0].state == BatchState::Succeeded).count();
    let resumed = finals.values().filter(|v| v[0].deliveries > 1).count();
    assert!(resumed >= 1, "no batch was resumed by another worker: the kills hit nothing");
    let workers_used: HashSet<&str> = finals.values().map(|v| v[0].worker.as_str()).collect();

    // The work queue drains: every job was acknowledged.
    // (Read with stream_info, which retries, rather than stream_messages, which reads an error as 0.)
    bmcfleet_tests::eventually(Duration::from_secs(20), "jobs stream empty", || {
        let (js, name) = (js.clone(), subjects.jobs_stream());
        async move { (stream_info(&js, &name).await.state.messages == 0).then_some(()) }
    })
    .await;

    // The killed node comes back from its store and catches up: all replicas current.
    cluster.restart(victim);
    bmcfleet_tests::eventually(Duration::from_secs(30), "restarted node current on every stream", || {
        let js = js.clone();
        let names = [subjects.jobs_stream(), subjects.events_stream(), format!("KV_{}", subjects.batches_bucket())];
        async move {
            for name in names {
                let mut s = js.get_stream(&name).await.ok()?;
                let c = s.info().await.ok()?.cluster.clone()?;
                if c.replicas.len() != 2 || !c.replicas.iter().all(|r| r.current && !r.offline) {
                    return None;
                }
            }
            Some(())
        }
    })
    .await;

    eprintln!(
        "cluster failover: {BATCHES} batches ({expected_actions} actions) over {BMCS} BMCs, R3 on 3 nodes; \
         killed nats {leader} at action {nats_killed_at} and {victim_worker} at {worker_killed_at}; \
         {} final results, {succeeded} succeeded, {resumed} resumed on another worker, {interrupted} interrupted, \
         {reruns} idempotent re-runs ({reruns_after_lapse} after a lease lapse), {} submit retries, {} duplicate submits; workers {:?}; \
         ready at {:.1}s, all results at {:.1}s, done at {:.1}s",
        finals.len(),
        sub.retries,
        sub.duplicates,
        workers_used,
        ready.as_secs_f64(),
        all_done.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
}
