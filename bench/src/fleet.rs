//! A bmcfleet deployment for one benchmark: nats-server, the gateway and
//! any number of workers as separate processes, plus the producer's side
//! (submit, collect final results, read partition leases).

use crate::harness::{self, workspace_bin, Bench as _, Child, Nats};
use anyhow::{bail, Context as _};
use async_nats::HeaderMap;
use bmcfleet_schema::subject::{CONTENT_TYPE, EVENT_HEADER, WAIT_HEADER};
use bmcfleet_schema::{
    Action, Batch, BatchId, BatchResult, BatchState, Encoding, Event, EventKind, PowerOp, Protocol, Reply, Secret,
    Subjects,
};
use futures::StreamExt;
use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How to start the deployment.
#[derive(Clone, Debug)]
pub struct FleetOptions {
    pub partitions: u16,
    /// `bmc-sim` endpoint the workers use for protocol `sim`.
    pub sim: Option<SocketAddr>,
    pub lease_ttl: String,
    pub rebalance: String,
    /// Extra worker flags (e.g. `--lane-idle-timeout 20s`).
    pub worker_args: Vec<String>,
    /// The gateway's `--max-queued-per-bmc`.
    pub max_queued_per_bmc: u32,
    /// `--ad-hoc-targets` of the gateway and the workers: the simulated
    /// BMCs' made-up addresses by default; `ipmi-fleet` adds loopback,
    /// where its responder listens.
    pub ad_hoc_targets: String,
}

impl Default for FleetOptions {
    fn default() -> Self {
        FleetOptions {
            partitions: 16,
            sim: None,
            lease_ttl: "15s".into(),
            rebalance: "3s".into(),
            worker_args: vec![],
            max_queued_per_bmc: 1024,
            ad_hoc_targets: "10.0.0.0/8".into(),
        }
    }
}

/// nats-server + gateway (+ workers), all killed on drop.
pub struct Fleet {
    pub workers: BTreeMap<String, Child>,
    pub gateway: Child,
    pub client: async_nats::Client,
    pub subjects: Subjects,
    pub options: FleetOptions,
    /// The workers' sealing key pair (seed, public key): the gateway seals
    /// the benchmark's inline credentials to it.
    pub sealing: (Secret, String),
    /// Dropped last: the server outlives its clients.
    pub nats: Nats,
}

/// A 1-action-or-more batch for a simulated BMC.
pub fn sim_batch(address: &str, actions: Vec<Action>) -> anyhow::Result<Batch> {
    target_batch(address, Protocol::Sim, "bench", actions)
}

/// A batch for the ad hoc target `address` (`host` or `host:port`) spoken
/// to with `protocol`, inline credentials `admin`/`password`.
pub fn target_batch(address: &str, protocol: Protocol, password: &str, actions: Vec<Action>) -> anyhow::Result<Batch> {
    let address = address.parse().with_context(|| format!("address {address}"))?;
    Ok(Batch {
        id: Some(ulid::Ulid::new()),
        ..bmcfleet_tests::checks::target_batch(address, protocol, password, actions)
    })
}

/// The address of simulated BMC number `i` (distinct for i < 2^24).
pub fn sim_address(i: usize) -> String {
    format!("10.{}.{}.{}", (i >> 16) & 0xff, (i >> 8) & 0xff, i & 0xff)
}

impl Fleet {
    /// Start nats-server and the gateway and wait until the gateway answers.
    pub async fn start(options: FleetOptions) -> anyhow::Result<Fleet> {
        let nats = Nats::start().await?;
        let subjects = Subjects::new("bmc", "BMCFLEET", options.partitions);
        let mut args = common_args(&nats, options.partitions, &options.ad_hoc_targets);
        args.extend(["--allow-sim".into(), "true".into()]);
        // The ordering workloads queue up to 500 batches per BMC before the
        // workers start (hence 1024 by default); `isolation` uses the default cap.
        args.extend(["--max-queued-per-bmc".into(), options.max_queued_per_bmc.to_string()]);
        let sealing = bmcfleet_common::sealing::generate();
        let env =
            [("BMCFLEET_INLINE_CREDENTIALS", "sealed".to_owned()), ("BMCFLEET_WORKERS_PUBLIC_KEY", sealing.1.clone())];
        let gateway = harness::spawn(&workspace_bin("bmc-gateway")?, "bmc-gateway", &args, &env)?;
        let client = nats.client().await?;
        let mut fleet = Fleet { workers: BTreeMap::new(), gateway, client, subjects, options, sealing, nats };
        fleet.wait_gateway().await?;
        Ok(fleet)
    }

    async fn wait_gateway(&mut self) -> anyhow::Result<()> {
        let end = Instant::now() + Duration::from_secs(30);
        loop {
            self.gateway.ensure_running()?;
            let req =
                async_nats::Request::new().payload(b"{}".to_vec().into()).timeout(Some(Duration::from_millis(500)));
            if self.client.send_request("bmcfleet.status", req).await.is_ok() {
                return Ok(());
            }
            if Instant::now() >= end {
                bail!("the gateway did not answer; log:\n{}", self.gateway.log_tail(30));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The workers' sealing key, to open sealed credentials outside a worker.
    pub fn sealing_keys(&self) -> anyhow::Result<bmcfleet_common::sealing::SealingKeys> {
        let mut keys = bmcfleet_common::sealing::SealingKeys::default();
        keys.add_seed(&self.sealing.0).map_err(anyhow::Error::msg)?;
        Ok(keys)
    }

    /// Start a worker named `id`.
    pub fn spawn_worker(&mut self, id: &str, extra: &[String]) -> anyhow::Result<()> {
        let mut args = common_args(&self.nats, self.options.partitions, &self.options.ad_hoc_targets);
        args.extend([
            "--worker-id".into(),
            id.into(),
            "--lease-ttl".into(),
            self.options.lease_ttl.clone(),
            "--rebalance-interval".into(),
            self.options.rebalance.clone(),
        ]);
        if let Some(sim) = self.options.sim {
            args.extend(["--sim-endpoint".into(), sim.to_string()]);
        }
        // Per-BMC pacing (default 50ms between call starts) is a protection
        // policy, not pipeline cost: the benchmarks measure the pipeline with
        // it off unless a benchmark's own worker_args or `extra` set it.
        let flag = "--bmc-min-interval";
        if !self.options.worker_args.iter().chain(extra).any(|a| a == flag || a.starts_with("--bmc-min-interval=")) {
            args.extend([flag.into(), "0s".into()]);
        }
        args.extend(self.options.worker_args.iter().cloned());
        args.extend(extra.iter().cloned());
        let env = [("BMCFLEET_SEALING_KEY", self.sealing.0.expose().to_owned())];
        let child = harness::spawn(&workspace_bin("bmc-worker")?, &format!("bmc-worker:{id}"), &args, &env)?;
        self.workers.insert(id.to_owned(), child);
        Ok(())
    }

    pub fn worker(&mut self, id: &str) -> anyhow::Result<&mut Child> {
        self.workers.get_mut(id).with_context(|| format!("no worker {id}"))
    }

    /// Partition → lease holder, read from the lease bucket.
    pub async fn lease_owners(&self) -> anyhow::Result<BTreeMap<u16, String>> {
        let js = async_nats::jetstream::new(self.client.clone());
        let kv = js.get_key_value(self.subjects.leases_bucket()).await.context("lease bucket")?;
        let mut out = BTreeMap::new();
        for p in 0..self.subjects.partitions {
            if let Some(entry) = kv.entry(self.subjects.lease_key(p)).await.context("reading a lease")? {
                if entry.operation != async_nats::jetstream::kv::Operation::Put {
                    continue;
                }
                let v: serde_json::Value = serde_json::from_slice(&entry.value).unwrap_or_default();
                if let Some(w) = v.get("worker").and_then(|w| w.as_str()) {
                    out.insert(p, w.to_owned());
                }
            }
        }
        Ok(out)
    }

    /// Wait until every partition is leased by one of `workers` (each
    /// holding at least `min_each`).
    pub async fn wait_owned_by(&mut self, workers: &[&str], min_each: usize, timeout: Duration) -> anyhow::Result<()> {
        let end = Instant::now() + timeout;
        loop {
            for w in self.workers.values_mut() {
                w.ensure_running()?;
            }
            if let Ok(owners) = self.lease_owners().await {
                let all = owners.len() == self.subjects.partitions as usize
                    && owners.values().all(|o| workers.contains(&o.as_str()));
                let fair = workers.iter().all(|w| owners.values().filter(|o| o == w).count() >= min_each);
                if all && fair {
                    return Ok(());
                }
            }
            if Instant::now() >= end {
                bail!("partitions not owned by {workers:?} within {timeout:?}: {:?}", self.lease_owners().await.ok());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Submit a batch; returns the gateway's reply.
    pub async fn submit(&self, batch: &Batch, wait: bool) -> anyhow::Result<Reply> {
        submit(&self.client, batch, wait).await
    }

    /// Submit `batches` with `concurrency` requests in flight, not waiting for
    /// results; fails on any refusal. Returns the time it took and each
    /// batch's stream sequence (its position in its BMC's queue).
    pub async fn submit_all(
        &self,
        batches: Arc<Vec<Batch>>,
        concurrency: usize,
    ) -> anyhow::Result<(Duration, HashMap<BatchId, u64>)> {
        let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let started = Instant::now();
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..concurrency.max(1) {
            let (client, batches, next) = (self.client.clone(), batches.clone(), next.clone());
            tasks.spawn(async move {
                let mut seqs = vec![];
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(b) = batches.get(i) else { return Ok::<_, anyhow::Error>(seqs) };
                    match submit(&client, b, false).await? {
                        Reply::Accepted(a) if !a.duplicate => seqs.push((a.id, a.stream_sequence)),
                        other => bail!("submit refused: {other:?}"),
                    }
                }
            });
        }
        let mut seqs = HashMap::with_capacity(batches.len());
        while let Some(r) = tasks.join_next().await {
            seqs.extend(r.context("submit task")??);
        }
        Ok((started.elapsed(), seqs))
    }
}

fn common_args(nats: &Nats, partitions: u16, ad_hoc_targets: &str) -> Vec<String> {
    vec![
        "--nats-url".into(),
        nats.url(),
        "--partitions".into(),
        partitions.to_string(),
        "--log-format".into(),
        "json".into(),
        "--ad-hoc-targets".into(),
        ad_hoc_targets.into(),
    ]
}

/// Submit through the gateway's micro service.
pub async fn submit(client: &async_nats::Client, batch: &Batch, wait: bool) -> anyhow::Result<Reply> {
    let mut h = HeaderMap::new();
    if wait {
        h.insert(WAIT_HEADER, "true");
    }
    let body = Encoding::MessagePack.encode(batch)?;
    let req = async_nats::Request::new().headers(h).payload(body.into()).timeout(Some(Duration::from_secs(120)));
    let msg = client.send_request("bmcfleet.submit", req).await.context("gateway request")?;
    let enc = Encoding::from_content_type(msg.headers.as_ref().and_then(|h| h.get(CONTENT_TYPE)).map(|v| v.as_str()))?;
    Ok(enc.decode::<Reply>(&msg.payload)?)
}

/// Ask the gateway to cancel batch `id`.
pub async fn cancel(client: &async_nats::Client, id: BatchId) -> anyhow::Result<Reply> {
    by_id(client, "bmcfleet.cancel", id).await
}

/// Ask the gateway for batch `id`'s status.
pub async fn status(client: &async_nats::Client, id: BatchId) -> anyhow::Result<Reply> {
    by_id(client, "bmcfleet.status", id).await
}

async fn by_id(client: &async_nats::Client, subject: &'static str, id: BatchId) -> anyhow::Result<Reply> {
    let body = Encoding::MessagePack.encode(&bmcfleet_schema::IdRequest { id })?;
    let req = async_nats::Request::new().payload(body.into()).timeout(Some(Duration::from_secs(30)));
    let msg = client.send_request(subject, req).await.context("gateway request")?;
    let enc = Encoding::from_content_type(msg.headers.as_ref().and_then(|h| h.get(CONTENT_TYPE)).map(|v| v.as_str()))?;
    Ok(enc.decode::<Reply>(&msg.payload)?)
}

/// One bmcfleet submit → result: a `power status` batch for simulated BMC
/// number `bmc`, waited for; an error unless it succeeded.
pub async fn status_round_trip(client: &async_nats::Client, bmc: usize) -> anyhow::Result<()> {
    let batch = sim_batch(&sim_address(bmc), vec![Action::Power(PowerOp::Status)])?;
    match submit(client, &batch, true).await? {
        Reply::Result(r) if r.state == BatchState::Succeeded => Ok(()),
        other => bail!("the power-status batch for BMC {} failed: {other:?}", sim_address(bmc)),
    }
}

/// A final result as the collector saw it.
#[derive(Clone, Debug)]
pub struct Finished {
    pub at: Instant,
    pub state: BatchState,
    pub worker: String,
}

/// Collects `BatchFinished` events from the events subjects.
///
/// A core subscription can lose messages under load (a slow consumer), so
/// when results stop arriving while some are missing, the collector reads
/// the missing batches' status records: a final record is counted (with its
/// own finish time) and reported as recovered, a record that is not final
/// is reported with its state when the wait gives up.
pub struct Collector {
    finished: Arc<Mutex<HashMap<BatchId, Finished>>>,
    task: tokio::task::JoinHandle<()>,
    client: async_nats::Client,
    bucket: String,
}

impl Collector {
    /// Subscribe (before submitting, so nothing is missed).
    pub async fn start(client: &async_nats::Client, subjects: &Subjects) -> anyhow::Result<Collector> {
        let mut sub = client.subscribe(subjects.events_all()).await.context("subscribing to events")?;
        client.flush().await.context("flush")?;
        let finished = Arc::new(Mutex::new(HashMap::new()));
        let sink = finished.clone();
        let task = tokio::spawn(async move {
            while let Some(msg) = sub.next().await {
                let at = Instant::now();
                let kind = msg.headers.as_ref().and_then(|h| h.get(EVENT_HEADER)).map(|v| v.as_str().to_owned());
                if kind.as_deref().is_some_and(|k| k != "batch_finished") {
                    continue;
                }
                if let Ok(Event { event: EventKind::BatchFinished { result }, .. }) =
                    Encoding::MessagePack.decode::<Event>(&msg.payload)
                {
                    let BatchResult { id, state, worker, .. } = result;
                    sink.lock().expect("collector lock").entry(id).or_insert(Finished { at, state, worker });
                }
            }
        });
        Ok(Collector { finished, task, client: client.clone(), bucket: subjects.batches_bucket() })
    }

    /// Status records of `missing` (at most 1,000): final ones are added to
    /// the finished set; returns a description of the others.
    async fn recover(&self, missing: &[BatchId]) -> anyhow::Result<(usize, Vec<String>)> {
        let kv = async_nats::jetstream::new(self.client.clone())
            .get_key_value(&self.bucket)
            .await
            .context("status bucket")?;
        let now_ms =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_millis() as u64;
        let (mut recovered, mut pending) = (0, vec![]);
        for id in missing.iter().take(1000) {
            let status = match kv.get(id.to_string()).await.context("status read")? {
                Some(bytes) => Encoding::MessagePack.decode::<bmcfleet_schema::BatchStatus>(&bytes).ok(),
                None => None,
            };
            match status {
                Some(bmcfleet_schema::BatchStatus { result: Some(r), .. }) => {
                    let ago = Duration::from_millis(now_ms.saturating_sub(r.finished_at_ms));
                    let at = Instant::now().checked_sub(ago).unwrap_or_else(Instant::now);
                    self.finished.lock().expect("collector lock").entry(*id).or_insert(Finished {
                        at,
                        state: r.state,
                        worker: r.worker,
                    });
                    recovered += 1;
                }
                Some(s) => pending.push(format!(
                    "{id}: {:?} on {:?}, {} of {} actions done, {} deliveries",
                    s.state,
                    s.worker,
                    s.results.len(),
                    s.actions.len(),
                    s.deliveries
                )),
                None => pending.push(format!("{id}: no status record")),
            }
        }
        Ok((recovered, pending))
    }

    /// How many of `ids` have finished.
    pub fn count(&self, ids: &[BatchId]) -> usize {
        let f = self.finished.lock().expect("collector lock");
        ids.iter().filter(|id| f.contains_key(id)).count()
    }

    /// Wait until every id in `ids` finished; returns their records in order.
    pub async fn wait_all(&self, ids: &[BatchId], timeout: Duration) -> anyhow::Result<Vec<Finished>> {
        let every = Duration::from_millis(if ids.len() > 20_000 { 100 } else { 10 });
        let end = Instant::now() + timeout;
        let (mut seen, mut since) = (0, Instant::now());
        let mut pending = vec![];
        loop {
            let (done, missing): (Vec<Option<Finished>>, Vec<BatchId>) = {
                let f = self.finished.lock().expect("collector lock");
                let done: Vec<Option<Finished>> = ids.iter().map(|id| f.get(id).cloned()).collect();
                let missing = ids.iter().zip(&done).filter(|(_, d)| d.is_none()).map(|(id, _)| *id).collect();
                (done, missing)
            };
            if missing.is_empty() {
                return Ok(done.into_iter().flatten().collect());
            }
            let count = ids.len() - missing.len();
            if count != seen {
                (seen, since) = (count, Instant::now());
            } else if since.elapsed() >= Duration::from_secs(5) && missing.len() <= 1000 {
                // Stalled with a few missing: events lost, or batches stuck?
                let (recovered, still) = self.recover(&missing).await?;
                if recovered > 0 {
                    eprintln!("collector: {recovered} final result(s) read from status records (their events were not received)");
                }
                pending = still;
                since = Instant::now();
                continue;
            }
            if Instant::now() >= end {
                bail!(
                    "{count} of {} batches finished; timed out after {timeout:?} waiting for final results; not final: {}",
                    ids.len(),
                    if pending.is_empty() { "(not checked)".to_owned() } else { pending.join("; ") }
                );
            }
            tokio::time::sleep(every).await;
        }
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        self.task.abort();
    }
}
