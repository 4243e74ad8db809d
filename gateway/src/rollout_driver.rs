//! Rollout drivers: every gateway runs one; each rollout is driven by the
//! gateway holding its lease (KV `<S>_ROLLOUT_LEASES`, key = rollout id,
//! created with CAS, renewed with CAS every third of `--rollout-lease-ttl`,
//! expiring after it), as workers hold partitions. No other consensus.
//!
//! A driver keeps no rollout state of its own: each round it reads the
//! record, records the outcome of machines whose batch finished (the part
//! first, then the record with compare-and-set), decides what may start
//! ([`RolloutRecord::review`], `start`) and writes that *before* submitting
//! the batches, in process through [`Gateway::submit`] (every admission
//! check, as the rollout's requester) with the ids
//! [`bmcfleet_schema::rollout::batch_id`] derives. A machine in flight
//! whose batch has no status record is submitted again: the same id, so a
//! batch queued before a crash is a `duplicate` and runs once. The fence
//! (the lease's local validity, a fifth of the TTL short of the server's
//! expiry) is checked before every write and submit: a driver that lost its
//! lease stops at once; the next holder resumes from the record.
//!
//! Memory: the set of rollouts not final (from a watch of the records
//! bucket) and, per driven rollout, at most [`CHUNKS_KEPT`] chunks of its
//! machine list.

use crate::requester::Requester;
use crate::rollout::requester_of;
use crate::service::Gateway;
use async_nats::jetstream::kv;
use bmcfleet_common::rollouts::{self, RolloutStoreError, Store};
use bmcfleet_common::runtime::now_ms;
use bmcfleet_common::status;
use bmcfleet_schema::rollout::{
    self, PartOutcome, RolloutEvent, RolloutEventKind, RolloutId, RolloutPart, RolloutRecord, RolloutSpec,
};
use bmcfleet_schema::{Batch, BatchResult, Encoding, ErrorCode, Event, EventKind, EventsMode, IdRequest, Reply};
use futures::StreamExt;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Status reads, part writes and submits a driver has in flight at once.
const CONCURRENCY: usize = 64;

/// Chunks of a machine list a driver keeps: the machines in flight (at
/// most [`rollout::MAX_PARALLEL`], started in index order) span at most
/// three chunks of [`rollout::CHUNK`].
const CHUNKS_KEPT: usize = 4;

/// A driver following batch events reads every machine in flight once
/// every this many poll intervals (a missed event costs at most that long).
const SWEEP_EVERY: u32 = 60;

/// Refusals a driver retries (nothing was queued; it may be later).
fn retryable(code: ErrorCode) -> bool {
    matches!(code, ErrorCode::Unavailable | ErrorCode::BmcQueueFull | ErrorCode::Timeout)
}

/// A held lease's local validity (cf. the worker's fence).
#[derive(Clone)]
struct Fence {
    until: Arc<Mutex<Instant>>,
    lost: CancellationToken,
}

impl Fence {
    fn new(sent: Instant, valid_for: Duration) -> Fence {
        Fence { until: Arc::new(Mutex::new(sent + valid_for)), lost: CancellationToken::new() }
    }

    fn extend_from(&self, sent: Instant, valid_for: Duration) {
        let mut until = self.until.lock().expect("fence lock");
        *until = (*until).max(sent + valid_for);
    }

    fn valid(&self) -> bool {
        !self.lost.is_cancelled() && Instant::now() < *self.until.lock().expect("fence lock")
    }
}

struct Owned {
    revision: u64,
    fence: Fence,
    task: JoinHandle<()>,
}

/// Settings of the drivers.
#[derive(Clone, Debug)]
pub struct Settings {
    pub lease_ttl: Duration,
    pub poll: Duration,
    /// This gateway (written in the leases it holds).
    pub instance: String,
}

/// The drivers of one gateway.
pub struct Drivers {
    gateway: Arc<Gateway>,
    store: Store,
    leases: kv::Store,
    settings: Settings,
    owned: HashMap<RolloutId, Owned>,
    /// Rollouts not final, as the records bucket's watch says.
    active: HashSet<RolloutId>,
}

impl Drivers {
    pub fn new(gateway: Arc<Gateway>, store: Store, leases: kv::Store, settings: Settings) -> Drivers {
        Drivers { gateway, store, leases, settings, owned: HashMap::new(), active: HashSet::new() }
    }

    fn valid_for(&self) -> Duration {
        self.settings.lease_ttl - self.settings.lease_ttl / 5
    }

    /// Run until `stop`; then stop every driven rollout and hand its lease back.
    pub async fn run(mut self, stop: CancellationToken) {
        let mut tick = tokio::time::interval(self.settings.lease_ttl / 3);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut watch = None;
        loop {
            if watch.is_none() {
                match self.store.records.watch_all().await {
                    Ok(w) => watch = Some(w),
                    Err(e) => tracing::warn!(error = %e, "Cannot watch rollout records; retrying."),
                }
            }
            tokio::select! {
                _ = stop.cancelled() => break,
                entry = async { watch.as_mut().expect("set").next().await }, if watch.is_some() => match entry {
                    Some(Ok(entry)) => {
                        // A new rollout starts now, not at the next tick.
                        if self.seen(entry) {
                            self.acquire().await;
                        }
                    }
                    Some(Err(e)) => {
                        tracing::warn!(error = %e, "Rollout watch failed; watching again.");
                        watch = None;
                    }
                    None => watch = None,
                },
                _ = tick.tick() => {
                    self.reap().await;
                    self.renew().await;
                    self.acquire().await;
                }
            }
        }
        for (id, o) in self.owned.drain() {
            o.fence.lost.cancel();
            o.task.abort();
            let _ = self.leases.delete_expect_revision(id.to_string(), Some(o.revision)).await;
        }
    }

    /// Note a record's change; `true` when the rollout is active and nobody here drives it.
    fn seen(&mut self, entry: kv::Entry) -> bool {
        let Ok(id) = entry.key.parse::<RolloutId>() else { return false };
        let active = entry.operation == kv::Operation::Put
            && Encoding::MessagePack.decode::<RolloutRecord>(&entry.value).is_ok_and(|r| !r.state.is_final());
        if active {
            self.active.insert(id) && !self.owned.contains_key(&id)
        } else {
            self.active.remove(&id);
            false
        }
    }

    /// Forget rollouts whose driver ended; hand back a lease still ours.
    async fn reap(&mut self) {
        let done: Vec<RolloutId> = self.owned.iter().filter(|(_, o)| o.task.is_finished()).map(|(id, _)| *id).collect();
        for id in done {
            let o = self.owned.remove(&id).expect("listed");
            if !o.fence.lost.is_cancelled() {
                let _ = self.leases.delete_expect_revision(id.to_string(), Some(o.revision)).await;
            }
        }
    }

    async fn renew(&mut self) {
        let value = self.settings.instance.clone();
        let valid_for = self.valid_for();
        for (id, o) in self.owned.iter_mut() {
            if o.fence.lost.is_cancelled() {
                continue;
            }
            let sent = Instant::now();
            match self.leases.update(id.to_string(), value.clone().into(), o.revision).await {
                Ok(rev) => {
                    o.revision = rev;
                    o.fence.extend_from(sent, valid_for);
                }
                Err(e) if e.kind() == kv::UpdateErrorKind::WrongLastRevision => {
                    tracing::warn!(rollout = %id, "Rollout lease lost; this gateway stops driving it now.");
                    o.fence.lost.cancel();
                }
                Err(e) => {
                    tracing::warn!(rollout = %id, error = %e, "Cannot renew a rollout lease.");
                    if !o.fence.valid() {
                        o.fence.lost.cancel();
                    }
                }
            }
        }
    }

    async fn acquire(&mut self) {
        let free: Vec<RolloutId> = self.active.iter().filter(|id| !self.owned.contains_key(id)).copied().collect();
        for id in free {
            let sent = Instant::now();
            match self.leases.create(id.to_string(), self.settings.instance.clone().into()).await {
                Ok(revision) => {
                    let fence = Fence::new(sent, self.valid_for());
                    let driver = Driver {
                        gateway: self.gateway.clone(),
                        store: self.store.clone(),
                        id,
                        fence: fence.clone(),
                        poll: self.settings.poll,
                        chunks: Vec::new(),
                        cancelled: HashSet::new(),
                        heard: Arc::default(),
                        wake: Arc::default(),
                        swept: None,
                        recheck: HashSet::new(),
                        queued: HashSet::new(),
                        listening: None,
                    };
                    tracing::info!(rollout = %id, "Driving a rollout.");
                    let task = tokio::spawn(driver.run());
                    self.owned.insert(id, Owned { revision, fence, task });
                }
                Err(e) if e.kind() == kv::CreateErrorKind::AlreadyExists => {}
                Err(e) => tracing::warn!(rollout = %id, error = %e, "Cannot take a rollout lease."),
            }
        }
    }
}

/// Why a driver round ended early.
#[derive(Debug)]
enum Stop {
    /// The lease is lost or ran out locally: stop now.
    Fenced,
    /// The record changed under us: read it again.
    Conflict,
    /// The rollout is final.
    Done,
    Store(String),
}

impl From<RolloutStoreError> for Stop {
    fn from(e: RolloutStoreError) -> Self {
        match e {
            RolloutStoreError::Conflict => Stop::Conflict,
            e => Stop::Store(e.to_string()),
        }
    }
}

/// Drives one rollout while its lease holds.
struct Driver {
    gateway: Arc<Gateway>,
    store: Store,
    id: RolloutId,
    fence: Fence,
    poll: Duration,
    /// The chunks of the machine list read last (at most [`CHUNKS_KEPT`],
    /// the oldest dropped first): the machines in flight span a few.
    chunks: Vec<(u32, Vec<String>)>,
    /// Batches this driver asked to cancel (abort), so it asks once.
    cancelled: HashSet<u32>,
    /// The results of the batches whose `batch_finished` this driver heard
    /// (published by a worker once the batch's final status record is
    /// stored, so a result heard is one stored; the machine's outcome is
    /// taken from it without reading the record).
    heard: Arc<Mutex<HashMap<ulid::Ulid, BatchResult>>>,
    /// Rung when a batch finishes: the next round starts at once.
    wake: Arc<tokio::sync::Notify>,
    /// When every machine in flight was last read (`None`: never, by this driver).
    swept: Option<Instant>,
    /// Machines to read next round whatever was heard (a submit to retry).
    recheck: HashSet<u32>,
    /// Machines in flight this driver queued itself (accepted): a batch
    /// queued for a rollout has no status record until a worker claims it
    /// ([`bmcfleet_schema::Job::record_at_claim`]), so "no record" means
    /// still queued for these, and possibly never queued for the others
    /// (a driver before a takeover may have died between its record write
    /// and its submits): those are submitted again, the same id.
    queued: HashSet<u32>,
    /// Ends the events listener when the driver ends (or its lease is lost).
    listening: Option<tokio_util::sync::DropGuard>,
}

impl Driver {
    async fn run(mut self) {
        let spec = loop {
            match self.store.spec(&self.id).await {
                Ok(Some(s)) => break s,
                Ok(None) => {
                    tracing::error!(rollout = %self.id, "The rollout has no spec; it cannot be driven.");
                    return;
                }
                Err(e) => tracing::warn!(rollout = %self.id, error = %e, "Cannot read the rollout's spec."),
            }
            if self.pause().await {
                return;
            }
        };
        let mut listening = false;
        loop {
            if !listening {
                if let Ok(Some((record, _))) = self.store.load(&self.id).await {
                    listening = self.listen(&record.tenant, &record.requester).await;
                }
            }
            match self.round(&spec, listening).await {
                Ok(true) => continue,
                Ok(false) => {}
                Err(Stop::Conflict) => continue,
                Err(Stop::Fenced) => {
                    tracing::warn!(rollout = %self.id, "Rollout lease no longer valid; stopped driving it.");
                    return;
                }
                Err(Stop::Done) => return,
                Err(Stop::Store(e)) => {
                    tracing::warn!(rollout = %self.id, error = %e, "Rollout round failed; retrying.")
                }
            }
            if self.pause().await {
                return;
            }
        }
    }

    /// Wait one poll interval; `true` when the lease was lost meanwhile.
    async fn pause(&self) -> bool {
        tokio::select! {
            _ = self.fence.lost.cancelled() => true,
            _ = self.wake.notified() => false,
            _ = tokio::time::sleep(self.poll) => false,
        }
    }

    /// Note every `batch_finished` of the rollout's batches (a core
    /// subscription to the batch events of the rollout's tenant, or of
    /// every tenant for an operator's rollout, whose batches run for their
    /// machines' tenants; one token per batch id, so no machine or rollout
    /// events) until the lease is lost. A missed one is found by the next
    /// sweep ([`SWEEP_EVERY`] polls).
    async fn listen(&mut self, tenant: &str, requester: &str) -> bool {
        let (_, subjects, _, _) = self.gateway.parts();
        // An operator's rollout runs each batch for its machine's tenant:
        // its batches' events are on every tenant's subjects.
        let filter = match requester_of(requester) {
            Requester::Operator => subjects.batch_events_any(),
            Requester::Tenant(_) => subjects.tenant_batch_events(tenant),
        };
        let mut sub = match self.gateway.client.subscribe(filter).await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(rollout = %self.id, error = %e, "Cannot follow batch events; reading every machine each round.");
                return false;
            }
        };
        let stop = self.fence.lost.child_token();
        self.listening = Some(stop.clone().drop_guard());
        let (heard, wake, rollout) = (self.heard.clone(), self.wake.clone(), self.id);
        tokio::spawn(async move {
            loop {
                let msg = tokio::select! {
                    _ = stop.cancelled() => break,
                    m = sub.next() => match m { Some(m) => m, None => break },
                };
                let finished = msg
                    .headers
                    .as_ref()
                    .and_then(|h| h.get(bmcfleet_schema::subject::EVENT_HEADER))
                    .is_some_and(|v| v.as_str() == "batch_finished");
                let batch = msg.subject.rsplit('.').next().and_then(|t| t.parse::<ulid::Ulid>().ok());
                // A rollout's batch ids carry the rollout's timestamp: the
                // tenant's other batches are not decoded.
                let Some(batch) = batch.filter(|b| finished && b.timestamp_ms() == rollout.timestamp_ms()) else {
                    continue;
                };
                if let Ok(Event { event: EventKind::BatchFinished { result }, .. }) =
                    Encoding::MessagePack.decode::<Event>(&msg.payload)
                {
                    if result.id == batch {
                        heard.lock().expect("heard lock").insert(batch, result);
                        wake.notify_one();
                    }
                }
            }
            let _ = sub.unsubscribe().await;
        });
        true
    }

    fn fenced(&self) -> Result<(), Stop> {
        if self.fence.valid() {
            Ok(())
        } else {
            Err(Stop::Fenced)
        }
    }

    async fn machine(&mut self, index: u32) -> Result<String, Stop> {
        let (c, at) = rollout::chunk_of(index);
        if !self.chunks.iter().any(|(n, _)| *n == c) {
            match self.store.chunk(&self.id, c).await? {
                Some(names) => {
                    if self.chunks.len() >= CHUNKS_KEPT {
                        self.chunks.remove(0);
                    }
                    self.chunks.push((c, names));
                }
                None => return Err(Stop::Store(format!("chunk {c} of the machine list is missing"))),
            }
        }
        self.chunks
            .iter()
            .find(|(n, _)| *n == c)
            .and_then(|(_, names)| names.get(at).cloned())
            .ok_or_else(|| Stop::Store(format!("machine {index} is not in the machine list")))
    }

    /// One round: record finished machines, start what may start, settle.
    /// `Ok(true)`: something changed, go again at once.
    async fn round(&mut self, spec: &RolloutSpec, listening: bool) -> Result<bool, Stop> {
        self.fenced()?;
        let Some((mut record, revision)) = self.store.load(&self.id).await? else { return Err(Stop::Done) };
        let who = requester_of(&record.requester);
        let gateway = self.gateway.clone();
        let (res, subjects, _, _) = gateway.parts();
        let (js, subjects) = (res.js.clone(), subjects.clone());
        if record.state.is_final() {
            self.finished_event(&record).await;
            return Err(Stop::Done);
        }
        let now = now_ms();
        // 1. Machines in flight: finished, still running, or not queued yet.
        // Their status records are read [`CONCURRENCY`] at a time (a round
        // over a thousand machines in flight is not a thousand round trips
        // in a row); what each says is then handled in order.
        // Which to read: every one on a sweep (the first round of this
        // driver, e.g. after a takeover; every [`SWEEP_EVERY`] polls; while
        // aborting; when not following events), else those whose
        // `batch_finished` was heard and those whose submit is retried.
        let sweep = !listening
            || record.state == rollout::RolloutState::Aborting
            || self.swept.is_none_or(|at| at.elapsed() >= self.poll * SWEEP_EVERY);
        if sweep {
            self.swept = Some(Instant::now());
        }
        // A snapshot: what it holds is forgotten only once this round has
        // stored what it says (a round that fails, e.g. on a conflict with a
        // pause or an abort, uses it again; not only the next sweep would).
        let heard: HashMap<ulid::Ulid, BatchResult> = self.heard.lock().expect("heard lock").clone();
        let recheck = std::mem::take(&mut self.recheck);
        let mut flying = Vec::with_capacity(record.in_flight.len());
        let mut finished = vec![];
        for index in record.in_flight.clone() {
            let machine = self.machine(index).await?;
            let batch = rollout::batch_id(self.id, index, &machine);
            if let Some(result) = heard.get(&batch) {
                // Its final record is stored (the event follows it): no read.
                finished.push(RolloutPart::of_result(index, machine, batch, result, spec.plan));
            } else if sweep || recheck.contains(&index) {
                flying.push((index, machine, batch));
            }
        }
        let batches = &res.batches;
        let loaded: Vec<_> = futures::stream::iter(flying)
            .map(|(index, machine, batch)| async move { (index, machine, batch, status::load(batches, &batch).await) })
            .buffered(CONCURRENCY)
            .collect()
            .await;
        let mut to_write = vec![];
        let mut unqueued = vec![];
        for (index, machine, batch, loaded) in loaded {
            // A record under this machine's batch id that is another batch's
            // (an id a producer took first) is not this machine's outcome.
            let loaded = match loaded {
                Ok(Some(v)) if !crate::rollout::is_machines_batch(&who, &machine, &v.status) => {
                    tracing::warn!(rollout = %self.id, index, batch = %batch, "The machine's batch id has another batch's status record; the machine is refused.");
                    let part = RolloutPart {
                        index,
                        machine,
                        batch,
                        outcome: PartOutcome::Refused,
                        error: Some(bmcfleet_schema::ErrorBody::new(
                            ErrorCode::InvalidField,
                            "id: this machine's batch id is taken by another batch",
                        )),
                        finished_at_ms: now,
                        plan: None,
                    };
                    to_write.push(part);
                    continue;
                }
                other => other,
            };
            match loaded {
                // The machine's outcome is its batch's status record (durable,
                // read by `rollout.status` too): no part of its own.
                Ok(Some(v)) => match RolloutPart::of_status(index, machine, batch, &v.status, spec.plan) {
                    Some(part) => finished.push(part),
                    None => {
                        if record.state == rollout::RolloutState::Aborting && self.cancelled.insert(index) {
                            self.cancel(batch, &who).await;
                        }
                    }
                },
                // No record. Queued by this driver: not claimed yet. Else
                // refused at submit (its part is recorded), or perhaps never
                // queued (a driver before a takeover may have died between
                // its record write and its submits): submitted again, the
                // same id (a `duplicate` if it was queued). When aborting,
                // it is cancelled by creating its record `cancelled`, which
                // the worker that pulls its job (if any) finds.
                Ok(None) => {
                    let part = match self.queued.contains(&index) {
                        true => None,
                        false => self.store.part(&self.id, index).await?,
                    };
                    match part {
                        Some(part) => finished.push(part),
                        None if record.state == rollout::RolloutState::Aborting => {
                            if self.cancelled.insert(index)
                                && !self.cancel_unclaimed(spec, &record.tenant, &machine, batch, &who).await
                            {
                                self.cancelled.remove(&index);
                            }
                            self.recheck.insert(index);
                        }
                        None if self.queued.contains(&index) => {}
                        None => unqueued.push((index, machine, batch)),
                    }
                }
                Err(e) => return Err(Stop::Store(e.to_string())),
            }
        }
        // A refusal found here (another tenant's record) is stored as the
        // machine's part before the record counts it (fenced before each
        // write), [`CONCURRENCY`] at a time.
        let this = &*self;
        let written: Vec<Result<RolloutPart, Stop>> = futures::stream::iter(to_write)
            .map(|part| async move {
                this.fenced()?;
                this.store.put_part(&this.id, &part).await?;
                Ok(part)
            })
            .buffered(CONCURRENCY)
            .collect()
            .await;
        for part in written {
            finished.push(part?);
        }
        let mut changed = false;
        for part in &finished {
            changed |= record.finish(part.index, part.outcome, now);
        }
        changed |= record.review(now);
        let mut started = vec![];
        while let Some(index) = record.start(now) {
            started.push(index);
        }
        let settled = record.settle(now);
        if changed || !started.is_empty() || settled {
            // 2. The record first: machines are claimed before their batches exist.
            self.fenced()?;
            self.store.update(&record, revision).await?;
            // Counts as each machine was recorded (all in this one write),
            // published [`CONCURRENCY`] at a time in the order they finished.
            let mut counts = record.counts;
            let mut progress = Vec::with_capacity(finished.len());
            for part in finished.iter().rev() {
                progress.push(RolloutEvent {
                    rollout: self.id,
                    at_ms: now,
                    event: RolloutEventKind::RolloutProgress {
                        index: part.index,
                        machine: part.machine.clone(),
                        batch: part.batch,
                        outcome: part.outcome,
                        counts,
                        error: part.error.clone(),
                    },
                });
                uncount(&mut counts, part.outcome);
            }
            progress.reverse();
            // Without the stream's acknowledgement: what each says is stored
            // already (the parts, the record just written).
            let client = js.client();
            for event in progress {
                let RolloutEventKind::RolloutProgress { index, .. } = &event.event else { continue };
                if let Err(e) =
                    rollouts::publish_event_unacked(&client, &subjects, &record.tenant, &event, &index.to_string())
                        .await
                {
                    tracing::warn!(rollout = %self.id, error = %e, "Cannot publish rollout_progress.");
                }
            }
            if settled {
                self.finished_event(&record).await;
                tracing::info!(
                    rollout = %self.id, state = crate::rollout::state_name(record.state), succeeded = record.counts.succeeded,
                    not_succeeded = record.counts.not_succeeded(), not_started = record.not_started(), "Rollout finished."
                );
                return Err(Stop::Done);
            }
        }
        // 3. Submit: machines just claimed, and claimed ones never queued.
        for index in started {
            let machine = self.machine(index).await?;
            let batch = rollout::batch_id(self.id, index, &machine);
            unqueued.push((index, machine, batch));
        }
        let (this, who) = (&*self, &who);
        let submitted: Vec<Result<Submitted, Stop>> = futures::stream::iter(unqueued)
            .map(|(index, machine, batch)| async move {
                this.fenced()?;
                this.submit(spec, index, machine, batch, who).await
            })
            .buffer_unordered(CONCURRENCY)
            .collect()
            .await;
        for outcome in submitted {
            match outcome? {
                Submitted::Queued(index) => {
                    self.queued.insert(index);
                }
                Submitted::Retry(index) => {
                    self.recheck.insert(index);
                }
                Submitted::Refused => {}
            }
        }
        for part in &finished {
            self.queued.remove(&part.index);
        }
        // Recorded now, or (not in flight any more) recorded before.
        let mut still = self.heard.lock().expect("heard lock");
        for batch in heard.keys() {
            still.remove(batch);
        }
        Ok(changed)
    }

    /// Submit machine `index`'s batch as the rollout's requester. A refusal
    /// that may pass later is retried next round (`Some(index)`: read it
    /// again then); any other is the machine's outcome (`refused`).
    async fn submit(
        &self,
        spec: &RolloutSpec,
        index: u32,
        machine: String,
        batch: ulid::Ulid,
        who: &Requester,
    ) -> Result<Submitted, Stop> {
        let body = Batch {
            // A plan rollout plans every machine's batch: nothing that changes state is sent.
            plan: spec.plan,
            // The rollout reports each machine's progress (`rollout_progress`)
            // from its status record: no per-action events (see docs/BATCHES.md).
            events: EventsMode::Final,
            id: Some(batch),
            machine: Some(machine.clone()),
            bmc: None,
            actions: spec.actions.clone(),
            on_error: spec.on_error,
            deadline: spec.batch_deadline,
        };
        let bytes = Encoding::MessagePack.encode(&body).map_err(|e| Stop::Store(e.to_string()))?;
        // No `queued` status record: the rollout's record holds that state.
        match self.gateway.submit_as(Encoding::MessagePack, &bytes, None, who, true).await {
            Reply::Accepted(a) => {
                tracing::debug!(rollout = %self.id, index, %machine, batch = %batch, duplicate = a.duplicate, "Rollout batch queued.");
                return Ok(Submitted::Queued(index));
            }
            Reply::Error(e) if retryable(e.code) => {
                tracing::info!(rollout = %self.id, index, %machine, code = %e.code, "Rollout batch not queued yet; retrying.");
                return Ok(Submitted::Retry(index));
            }
            Reply::Error(e) => {
                tracing::info!(rollout = %self.id, index, %machine, code = %e.code, "Rollout batch refused.");
                let part = RolloutPart {
                    index,
                    machine,
                    batch,
                    outcome: PartOutcome::Refused,
                    error: Some(e),
                    finished_at_ms: now_ms(),
                    plan: None,
                };
                self.fenced()?;
                self.store.put_part(&self.id, &part).await?;
            }
            other => {
                tracing::warn!(rollout = %self.id, index, reply = ?other, "Unexpected submit reply.");
                return Ok(Submitted::Retry(index));
            }
        }
        Ok(Submitted::Refused)
    }

    /// Abort: cancel machine `machine`'s batch, queued by this driver and
    /// claimed by no worker (it has no status record), by creating its
    /// record already `cancelled`; when a worker claimed it meanwhile (the
    /// record exists), cancel it as any running batch.
    async fn cancel_unclaimed(
        &self,
        spec: &RolloutSpec,
        tenant: &str,
        machine: &str,
        batch: ulid::Ulid,
        who: &Requester,
    ) -> bool {
        let (res, _, _, _) = self.gateway.parts();
        let s = bmcfleet_schema::BatchStatus::cancelled_unclaimed(
            batch,
            bmcfleet_schema::BmcKey::machine(machine).to_string(),
            tenant.to_owned(),
            spec.actions.iter().map(|a| a.kind().to_owned()).collect(),
            now_ms(),
        );
        if self.fenced().is_err() {
            return false;
        }
        match status::create(&res.batches, &s).await {
            Ok(_) => {
                tracing::info!(rollout = %self.id, batch = %batch, "Cancelled a rollout batch no worker had claimed.");
                true
            }
            Err(status::StatusError::Conflict) => {
                self.cancel(batch, who).await;
                true
            }
            Err(e) => {
                tracing::warn!(rollout = %self.id, batch = %batch, error = %e, "Cannot cancel a queued rollout batch; retrying next round.");
                false
            }
        }
    }

    async fn cancel(&self, batch: ulid::Ulid, who: &Requester) {
        let Ok(body) = Encoding::MessagePack.encode(&IdRequest { id: batch }) else { return };
        if let Reply::Error(e) = self.gateway.cancel(Encoding::MessagePack, &body, who, None).await {
            tracing::debug!(rollout = %self.id, batch = %batch, code = %e.code, "Cancel of a rollout batch refused.");
        }
    }

    /// `rollout_finished` (deduplicated: every driver that sees the final record may send it).
    async fn finished_event(&self, record: &RolloutRecord) {
        let (res, subjects, _, _) = self.gateway.parts();
        let event = RolloutEvent {
            rollout: record.id,
            at_ms: record.finished_at_ms.unwrap_or_else(now_ms),
            event: RolloutEventKind::RolloutFinished {
                state: record.state,
                counts: record.counts,
                not_started: record.not_started(),
                stop: record.stop,
            },
        };
        if let Err(e) = rollouts::publish_event(&res.js, subjects, &record.tenant, &event, "0").await {
            tracing::warn!(rollout = %record.id, error = %e, "Cannot publish rollout_finished.");
        }
    }
}

/// What a submit did to a machine.
enum Submitted {
    /// Queued (or queued before: a duplicate).
    Queued(u32),
    /// Not queued yet; try again next round.
    Retry(u32),
    /// Refused: the machine's outcome is recorded.
    Refused,
}

fn uncount(c: &mut rollout::Counts, o: PartOutcome) {
    match o {
        PartOutcome::Succeeded => c.succeeded = c.succeeded.saturating_sub(1),
        PartOutcome::Failed => c.failed = c.failed.saturating_sub(1),
        PartOutcome::Cancelled => c.cancelled = c.cancelled.saturating_sub(1),
        PartOutcome::Refused => c.refused = c.refused.saturating_sub(1),
    }
}
