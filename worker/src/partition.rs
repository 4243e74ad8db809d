//! One owned partition: its JetStream consumer, the dispatcher that routes
//! each job to its BMC's lane in stream order, and the lanes.
//!
//! On taking a partition the owner deletes every earlier consumer of the
//! partition and creates its own, named after its lease epoch (the lease's
//! creating revision): one per tenant with jobs in the partition,
//! `part-<partition>-<epoch>-<tenant>` (filter
//! `<prefix>.jobs.<partition>.<tenant>.*`), and one for the jobs queued by
//! releases before the tenant token, `part-<partition>-<epoch>`. Each
//! tenant's consumer has a window of its own (`max_ack_pending`, see
//! [`held_per_partition`]): a tenant whose slow or hung BMCs hold every job
//! of its window stops only its own pulls, never another tenant's (issue
//! 32: with one consumer per partition, four hung BMCs of one tenant held
//! the whole window and no other job of the partition was pulled). Within
//! a tenant's window one BMC holds at most a quarter (its queue is capped by
//! the stream). A BMC's jobs of one tenant are on one subject, so one
//! consumer delivers them in stream order: per-BMC order holds. The tenants
//! are found in the machine registry (those with machines in the
//! partition) and, for ad hoc targets, in the stream's subjects (listed
//! every [`DISCOVER_EVERY`]); the `default` tenant always has its consumer.
//! The job stream is a work
//! queue (acknowledged jobs are gone), so the new consumer starts at the
//! oldest unfinished job: jobs the previous owner held but never
//! acknowledged come first, in order, with no wait for their ack timer.
//! Because the name is new, the previous owner's late pulls and
//! acknowledgements (from a process that froze and resumed, or whose
//! connection delivers them late) address a consumer that no longer exists
//! and go nowhere; under the old name they would be served by the successor
//! and take jobs out of order.
//!
//! A lane runs one BMC's batches one after the other. Lanes of different
//! BMCs run concurrently, bounded by the worker-wide slots, of which each
//! tenant holds at most its share ([`crate::slots`]). Idle lanes
//! are dropped (and their BMC sessions closed) after the idle timeout.

use crate::executor::{execute, Outcome};
use crate::fence::Fence;
use crate::session::SessionSlot;
use crate::Shared;
use async_nats::jetstream::consumer::{pull, AckPolicy, DeliverPolicy};
use async_nats::jetstream::{self, AckKind};
use bmcfleet_common::streams::BMC_SHARE_DIVISOR;
use bmcfleet_schema::{BmcKey, Encoding, Job};
use futures::{StreamExt, TryStreamExt};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tracing::Instrument;

/// Held-job slots a partition keeps allocated once its burst is over.
const HELD_KEPT: usize = 64;

/// How often a partition looks for tenants without a consumer yet: in the
/// registry (when it changed) and in the job stream's subjects (a tenant's
/// ad hoc targets are in no registry).
const DISCOVER_EVERY: Duration = Duration::from_secs(1);

/// The merged pull streams of a partition's consumers.
type Pulls =
    futures::stream::SelectAll<futures::stream::BoxStream<'static, Result<jetstream::Message, pull::MessagesError>>>;

/// Settings of a partition runner.
#[derive(Clone, Debug)]
pub struct Settings {
    pub ack_wait: Duration,
    pub max_inflight: u32,
    pub lane_idle_timeout: Duration,
    pub drain_timeout: Duration,
}

struct Delivery {
    seq: u64,
    msg: jetstream::Message,
    job: Job,
}

/// What a lane is given to do, in order.
enum Work {
    Batch(Box<Delivery>),
    /// Poll the machine's power and reachability (see [`crate::state`]),
    /// with the readings due (inventory, health, power draw, clock).
    Poll(Arc<bmcfleet_schema::Machine>, crate::state::Due),
}

/// What a lane reports back.
enum Done {
    /// A batch finished (its stream sequence).
    Batch(BmcKey, u64),
    /// A poll finished; when the lane called the BMC, the start of its last call.
    Polled(BmcKey, Option<Instant>),
}

struct Lane {
    /// A futures channel, not tokio's: an idle lane keeps its channel for
    /// as long as its BMC's session (minutes, for thousands of BMCs), and
    /// tokio's allocates a block of 32 slots up front (~550 bytes against
    /// ~150).
    tx: futures::channel::mpsc::UnboundedSender<Work>,
    pending: usize,
    /// A poll is queued or running.
    polling: bool,
    /// Opened for a poll (no batch since): dropped, with its session, as
    /// soon as the poll is done, so an idle machine costs no lane.
    poll_only: bool,
    last_active: Instant,
}

/// Run partition `p` until its fence is drained or lost.
pub async fn run(shared: Arc<Shared>, p: u16, epoch: u64, fence: Fence, settings: Settings) {
    let window = held_per_partition(&shared, settings.max_inflight).await;
    let mut consumers = Consumers { p, epoch, window, tenants: Default::default(), registry_generation: None };
    // The jobs of earlier releases first: creating it removes every earlier owner's consumer.
    let consumer = match open_consumer(&shared, &consumers, None, &fence, &settings).await {
        Some(c) => c,
        None => return,
    };
    let mut messages = Pulls::new();
    if let Err(e) = pull_from(&mut messages, consumer, &settings).await {
        tracing::warn!(partition = p, error = %e, "Cannot pull from the partition consumer.");
        fence.drain.cancel();
        return;
    }
    consumers.discover(&shared, &fence, &settings, &mut messages).await;
    tracing::info!(partition = p, tenants = consumers.tenants.len(), "Partition started.");
    // The serial consoles of the partition's machines (docs/CONSOLE.md).
    let console_stop = tokio_util::sync::CancellationToken::new();
    let console = tokio::spawn(crate::console::run(shared.clone(), p, fence.clone(), console_stop.clone()));
    let mut discover = tokio::time::interval(DISCOVER_EVERY);
    discover.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);

    let (done_tx, mut done_rx) = mpsc::unbounded_channel::<Done>();
    let mut lanes: HashMap<BmcKey, Lane> = HashMap::new();
    // The last call start of BMCs whose poll-only lane was dropped less than
    // `--bmc-min-interval` ago: the next lane of that BMC is paced from it.
    let mut paced: HashMap<BmcKey, Instant> = HashMap::new();
    let min_interval = shared.guard.min_interval;
    // Held jobs (queued behind a busy lane, or running) by stream sequence:
    // the reply subject their in-progress acks go to, not the message (a
    // message with its JetStream context is ~350 bytes, a subject 32).
    let mut held: HashMap<u64, async_nats::Subject> = HashMap::new();
    let mut lane_tasks = tokio::task::JoinSet::new();
    let mut progress = tokio::time::interval((settings.ack_wait / 3).max(Duration::from_millis(300)));
    let mut sweep = tokio::time::interval((settings.lane_idle_timeout / 2).max(Duration::from_millis(100)));
    // Polls of the partition's registered machines.
    let mut schedule = crate::state::Schedule::default();
    let mut poll_tick = tokio::time::interval(Duration::from_secs(1));
    poll_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let partitions = shared.subjects.partitions;
    let in_partition = |name: &str| BmcKey::machine(name).partition(partitions) == p;
    // The polled machines' last observations, one write for the partition.
    let mut seen_tick = tokio::time::interval(shared.state.settings().seen_every);
    seen_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);

    loop {
        tokio::select! {
            biased;
            _ = fence.lost.cancelled() => break,
            _ = fence.drain.cancelled() => break,
            Some(done) = done_rx.recv() => match done {
                Done::Batch(key, seq) => {
                    held.remove(&seq);
                    if held.is_empty() && held.capacity() > HELD_KEPT {
                        // A burst's table (a reply subject each) is not kept for the idle time after it.
                        held.shrink_to(HELD_KEPT);
                    }
                    if let Some(lane) = lanes.get_mut(&key) {
                        lane.pending = lane.pending.saturating_sub(1);
                        lane.last_active = Instant::now();
                    }
                }
                Done::Polled(key, last_start) => {
                    if let Some(lane) = lanes.get_mut(&key) {
                        lane.polling = false;
                        if lane.poll_only && lane.pending == 0 {
                            lanes.remove(&key);
                            if let Some(at) = last_start.filter(|at| at.elapsed() < min_interval) {
                                paced.insert(key, at);
                            }
                        }
                    }
                }
            },
            _ = poll_tick.tick(), if shared.state.settings().poll_interval.is_some() => {
                if !fence.may_act() {
                    continue;
                }
                let now = Instant::now();
                let registry = &shared.targets.machines;
                let generation = registry.generation();
                schedule.refresh(generation, || registry.machines(|m| in_partition(&m.name)), shared.state.settings(), now);
                shared.metrics.polls_behind_seconds.get_or_create(&crate::metrics::Metrics::partition_label(p)).set(schedule.behind(now).as_secs_f64());
                for (machine, due) in schedule.take_due(now, shared.state.settings()) {
                    let key = machine.key();
                    let lane = lanes.entry(key.clone()).or_insert_with(|| {
                        let (tx, rx) = futures::channel::mpsc::unbounded();
                        lane_tasks.spawn(lane(shared.clone(), key.clone(), rx, fence.clone(), done_tx.clone(), paced.remove(&key)));
                        Lane { tx, pending: 0, polling: false, poll_only: true, last_active: Instant::now() }
                    });
                    if lane.pending > 0 || lane.polling {
                        // A batch is queued or running (its power reads
                        // refresh the state), or the last poll is still on.
                        shared.metrics.polls.get_or_create(&crate::metrics::OutcomeLabels { outcome: "skipped".into() }).inc();
                        continue;
                    }
                    lane.polling = true;
                    if lane.tx.unbounded_send(Work::Poll(machine, due)).is_err() {
                        break;
                    }
                }
            }
            _ = seen_tick.tick(), if shared.state.settings().poll_interval.is_some() => {
                if fence.may_act() && !schedule.is_empty() {
                    shared.state.write_seen(&shared, p, &schedule.machines()).await;
                }
            }
            _ = progress.tick() => {
                // Keep held jobs (queued behind a busy lane, or running) from being redelivered.
                for reply in held.values() {
                    let _ = shared.client.publish(reply.clone(), AckKind::Progress.into()).await;
                }
            }
            Some(_) = lane_tasks.join_next() => {}
            _ = discover.tick() => {
                if fence.may_act() {
                    consumers.discover(&shared, &fence, &settings, &mut messages).await;
                }
            }
            _ = sweep.tick() => {
                let idle = settings.lane_idle_timeout;
                lanes.retain(|_, lane| lane.pending > 0 || lane.polling || lane.last_active.elapsed() < idle);
                paced.retain(|_, at| at.elapsed() < min_interval);
            }
            next = messages.next() => {
                let msg = match next {
                    Some(Ok(m)) => m,
                    Some(Err(e)) => {
                        use async_nats::jetstream::consumer::pull::MessagesErrorKind as K;
                        match e.kind() {
                            K::ConsumerDeleted | K::PushBasedConsumer => {
                                tracing::warn!(partition = p, error = %e, "Partition consumer gone; handing the partition back.");
                                break;
                            }
                            _ => {
                                tracing::debug!(partition = p, error = %e, "Pull stream hiccup.");
                                continue;
                            }
                        }
                    }
                    None => break,
                };
                if !fence.valid() {
                    break; // not ours any more: leave it for the next owner
                }
                let Ok(info) = msg.info() else {
                    tracing::error!(partition = p, subject = %msg.subject, "Message without JetStream metadata; terminating it.");
                    let _ = msg.ack_with(AckKind::Term).await;
                    continue;
                };
                let seq = info.stream_sequence;
                // (`info` came from the reply subject: there is one.)
                let Some(reply) = msg.reply.clone() else { continue };
                if held.contains_key(&seq) {
                    continue; // a redelivery of a job we already hold
                }
                let job = match decode(&shared, &msg) {
                    Ok(job) => job,
                    Err(unusable) => {
                        tracing::error!(partition = p, seq, subject = %msg.subject, reason = %unusable.why(), "Unusable job; terminating it (it will not run).");
                        if let Unusable::Unreadable(_) = unusable {
                            finish_unread(&shared, &msg).await;
                        }
                        let _ = msg.ack_with(AckKind::Term).await;
                        continue;
                    }
                };
                let key = job.key();
                let lane = lanes.entry(key.clone()).or_insert_with(|| {
                    let (tx, rx) = futures::channel::mpsc::unbounded();
                    lane_tasks.spawn(lane(shared.clone(), key.clone(), rx, fence.clone(), done_tx.clone(), paced.remove(&key)));
                    Lane { tx, pending: 0, polling: false, poll_only: false, last_active: Instant::now() }
                });
                lane.poll_only = false;
                lane.pending += 1;
                held.insert(seq, reply);
                if lane.tx.unbounded_send(Work::Batch(Box::new(Delivery { seq, msg, job }))).is_err() {
                    // The lane stopped (handed back): stop the partition, keep order.
                    held.remove(&seq);
                    break;
                }
            }
        }
    }

    // Stop: no new pulls, lanes finish their current action then hand back.
    drop(messages);
    fence.drain.cancel();
    lanes.clear();
    let drained =
        tokio::time::timeout(settings.drain_timeout, async { while lane_tasks.join_next().await.is_some() {} }).await;
    if drained.is_err() {
        tracing::warn!(partition = p, "Lanes did not finish in the drain timeout; aborting them.");
        fence.lost.cancel();
        while lane_tasks.join_next().await.is_some() {}
    }
    console_stop.cancel();
    if tokio::time::timeout(Duration::from_secs(10), console).await.is_err() {
        tracing::warn!(partition = p, "Console sessions did not close in time.");
    }
    // Another worker observes these machines now; a later take-over reads
    // their state afresh.
    shared.state.forget(|name| !in_partition(name));
    shared.metrics.polls_behind_seconds.remove(&crate::metrics::Metrics::partition_label(p));
    tracing::info!(partition = p, "Partition stopped.");
}

/// Why a job message cannot run.
enum Unusable {
    /// It does not decode as a job (a release that seals a field this one
    /// does not know, a corrupt message).
    Unreadable(String),
    /// It decodes, but not as a job of its subject (or of its own batch id).
    Mismatch(String),
}

impl Unusable {
    fn why(&self) -> &str {
        match self {
            Unusable::Unreadable(why) | Unusable::Mismatch(why) => why,
        }
    }
}

fn decode(shared: &Shared, msg: &jetstream::Message) -> Result<Job, Unusable> {
    let job: Job = Encoding::MessagePack.decode(&msg.payload).map_err(|e| Unusable::Unreadable(e.to_string()))?;
    let (_, tenant, key) = shared
        .subjects
        .parse_job_subject(&msg.subject)
        .ok_or_else(|| Unusable::Mismatch(format!("subject {} is not a job subject", msg.subject)))?;
    // (A subject without a tenant token was queued by an earlier release.)
    if key != job.key() || job.batch.id != Some(job.id) || tenant.is_some_and(|t| t != job.tenant) {
        return Err(Unusable::Mismatch("job does not match its subject".into()));
    }
    Ok(job)
}

/// A job this worker cannot read still gets a result: the batch its
/// message id names, if still queued, finishes Failed (every action
/// `internal`, nothing run; see `BatchStatus::unread`) and its final event
/// is published, so a producer waiting for it hears why instead of
/// waiting for ever. (Not for a job that reads but does not match its
/// subject: the batch it names may be queued elsewhere, whole.) The
/// decoder's own words stay in the log: they may quote the message.
async fn finish_unread(shared: &Shared, msg: &jetstream::Message) {
    use bmcfleet_schema::{BatchId, Event, EventKind};
    let id = msg
        .headers
        .as_ref()
        .and_then(|h| h.get(async_nats::header::NATS_MESSAGE_ID))
        .and_then(|v| v.as_str().parse::<BatchId>().ok());
    let Some(id) = id else { return };
    let batches = &shared.res.batches;
    let Ok(Some(v)) = bmcfleet_common::status::load(batches, &id).await else { return };
    let now = bmcfleet_common::runtime::now_ms();
    let Some(done) = v.status.unread(&shared.worker_id, now, "it does not decode as a job of this worker's release")
    else {
        return;
    };
    if bmcfleet_common::status::update(batches, &done, v.revision).await.is_err() {
        return;
    }
    if let Some(result) = done.result.clone() {
        let ev = Event { batch: id, at_ms: now, event: EventKind::BatchFinished { result } };
        if let Err(e) =
            bmcfleet_common::events::publish(&shared.res.js, &shared.subjects, &done.tenant, &ev, None).await
        {
            tracing::warn!(batch = %id, error = %e, "Cannot publish the final result of an unreadable job (its status record has it).");
        }
    }
}

/// The consumers of one owned partition: one per tenant seen, each with a
/// window of its own.
struct Consumers {
    p: u16,
    epoch: u64,
    /// `max_ack_pending` of each (see [`held_per_partition`]).
    window: i64,
    /// The tenants that have their consumer.
    tenants: std::collections::HashSet<String>,
    /// The registry generation last looked at.
    registry_generation: Option<u64>,
}

impl Consumers {
    /// Open a consumer for every tenant that has none yet: the `default`
    /// tenant, the tenants with machines in the partition (when the registry
    /// changed), and those with jobs queued in the partition's subjects. A
    /// tenant whose consumer cannot be created now is tried again next time.
    async fn discover(&mut self, shared: &Shared, fence: &Fence, settings: &Settings, pulls: &mut Pulls) {
        let mut wanted = vec![bmcfleet_schema::machine::DEFAULT_TENANT.to_owned()];
        let registry = &shared.targets.machines;
        let generation = registry.generation();
        if self.registry_generation != Some(generation) {
            self.registry_generation = Some(generation);
            let (p, partitions) = (self.p, shared.subjects.partitions);
            let machines = registry.machines(|m| BmcKey::machine(&m.name).partition(partitions) == p);
            wanted.extend(machines.iter().map(|m| m.tenant.clone()));
        }
        let queued = format!("{}.*", shared.subjects.jobs_partition_legacy(self.p));
        match shared.res.jobs.info_with_subjects(&queued).await {
            Ok(subjects) => {
                let subjects: Vec<_> = subjects.try_collect().await.unwrap_or_default();
                for (subject, _) in subjects {
                    if let Some((_, Some(tenant), _)) = shared.subjects.parse_job_subject(&subject) {
                        wanted.push(tenant.to_owned());
                    }
                }
            }
            Err(e) => tracing::debug!(partition = self.p, error = %e, "Cannot list the partition's job subjects."),
        }
        for tenant in wanted {
            if self.tenants.contains(&tenant) || !bmcfleet_schema::machine::valid_name(&tenant) {
                continue;
            }
            let Some(consumer) = open_consumer(shared, self, Some(&tenant), fence, settings).await else { continue };
            match pull_from(pulls, consumer, settings).await {
                Ok(()) => {
                    tracing::debug!(partition = self.p, tenant = %tenant, "Tenant consumer opened.");
                    self.tenants.insert(tenant);
                }
                Err(e) => {
                    tracing::warn!(partition = self.p, tenant = %tenant, error = %e, "Cannot pull from a tenant's consumer; retrying later.")
                }
            }
        }
    }
}

/// Pull from `consumer` into `pulls`.
async fn pull_from(
    pulls: &mut Pulls,
    consumer: async_nats::jetstream::consumer::Consumer<pull::Config>,
    settings: &Settings,
) -> Result<(), async_nats::jetstream::consumer::StreamError> {
    let stream = consumer
        .stream()
        .max_messages_per_batch(settings.max_inflight.min(256) as usize)
        .heartbeat(Duration::from_secs(5))
        .messages()
        .await?;
    pulls.push(stream.boxed());
    Ok(())
}

/// Create the consumer of `tenant`'s jobs in the partition (`None`: of the
/// jobs of earlier releases, created first). Every earlier consumer of the
/// partition that is not one of this owner's is deleted first (a work-queue
/// stream allows one consumer per subject). Retried with backoff while the
/// lease holds, `None` once it does not; a tenant's is tried twice only
/// (`None`: the next discovery tries again), so that the partition's loop
/// (in-progress acks, finished batches) never waits on it for long.
async fn open_consumer(
    shared: &Shared,
    c: &Consumers,
    tenant: Option<&str>,
    fence: &Fence,
    settings: &Settings,
) -> Option<async_nats::jetstream::consumer::Consumer<pull::Config>> {
    let (p, epoch) = (c.p, c.epoch);
    let (name, filter_subject) = match tenant {
        Some(t) => {
            (shared.subjects.partition_tenant_consumer(p, epoch, t), shared.subjects.jobs_partition_tenant(p, t))
        }
        None => (shared.subjects.partition_consumer(p, epoch), shared.subjects.jobs_partition_legacy(p)),
    };
    let ours = |n: &str| {
        n == shared.subjects.partition_consumer(p, epoch)
            || c.tenants.iter().any(|t| n == shared.subjects.partition_tenant_consumer(p, epoch, t))
    };
    let config = pull::Config {
        durable_name: Some(name.clone()),
        description: Some(format!(
            "bmcfleet partition {p}, tenant {}, owned by {}",
            tenant.unwrap_or("(earlier releases)"),
            shared.worker_id
        )),
        filter_subject,
        deliver_policy: DeliverPolicy::All,
        ack_policy: AckPolicy::Explicit,
        ack_wait: settings.ack_wait,
        max_deliver: -1,
        max_ack_pending: c.window,
        ..Default::default()
    };
    let mut attempt = 0u32;
    loop {
        if !fence.may_act() {
            return None;
        }
        let stream = &shared.res.jobs;
        // The first consumer of this owner (or a retry) clears the earlier
        // owners' (and a leftover of a failed attempt of this one).
        if tenant.is_none() || attempt > 0 {
            match stream.consumer_names().try_collect::<Vec<String>>().await {
                Ok(names) => {
                    for old in names
                        .iter()
                        .filter(|n| shared.subjects.is_partition_consumer(p, n) && (tenant.is_none() || !ours(n)))
                    {
                        let _ = stream.delete_consumer(old).await;
                    }
                }
                Err(e) => tracing::warn!(partition = p, error = %e, "Cannot list the job stream's consumers."),
            }
        }
        match stream.create_consumer(config.clone()).await {
            Ok(c) => return Some(c),
            Err(e) => {
                tracing::warn!(partition = p, consumer = %name, error = %e, "Cannot create a partition consumer; retrying.");
                attempt += 1;
                if tenant.is_some() && attempt >= 2 {
                    return None;
                }
                let d = bmcfleet_common::backoff::Backoff::new(Duration::from_millis(100), Duration::from_secs(2))
                    .delay(attempt);
                tokio::select! {
                    _ = tokio::time::sleep(d) => {}
                    _ = fence.lost.cancelled() => return None,
                    _ = fence.drain.cancelled() => return None,
                }
            }
        }
    }
}

/// How many delivered, unacknowledged jobs each of a partition's consumers
/// (one per tenant) holds: the
/// configured count, raised when needed so that one BMC (whose queue the jobs
/// stream caps at `max_messages_per_subject`) can fill at most a
/// 1/[`BMC_SHARE_DIVISOR`] share of it. Without that, a slow BMC with a long
/// queue would hold every slot and its partition's other BMCs would wait.
async fn held_per_partition(shared: &Shared, configured: u32) -> i64 {
    let mut jobs = shared.res.jobs.clone();
    let cap = match jobs.info().await {
        Ok(info) => bmcfleet_common::streams::max_queued_per_bmc(&info.config),
        Err(e) => {
            tracing::warn!(error = %e, "Cannot read the jobs stream's per-BMC cap; using the cap seen at start.");
            bmcfleet_common::streams::max_queued_per_bmc(&jobs.cached_info().config)
        }
    };
    share_bound(configured, cap)
}

/// [`held_per_partition`]'s rule.
pub(crate) fn share_bound(configured: u32, per_bmc_cap: Option<i64>) -> i64 {
    let configured = i64::from(configured);
    match per_bmc_cap {
        Some(cap) => configured.max(cap.saturating_mul(BMC_SHARE_DIVISOR)),
        None => configured,
    }
}

/// One BMC's lane: its batches, one at a time, in order.
///
/// A lane lives as long as its BMC's session (up to `--lane-idle-timeout`
/// after its last batch), and a task is as large as the largest state it
/// can await in. So the lane itself only waits for its queue; each piece
/// of work runs in a boxed [`serve`] (allocated for that work only), and an
/// idle lane's task holds no more than its queue, fence, session slot and
/// guard (its future 384 bytes instead of 1,568 with the work inline).
async fn lane(
    shared: Arc<Shared>,
    key: BmcKey,
    mut rx: futures::channel::mpsc::UnboundedReceiver<Work>,
    fence: Fence,
    done: mpsc::UnboundedSender<Done>,
    paced_from: Option<Instant>,
) {
    let mut slot = SessionSlot::default();
    // Retries, breaker and pacing state of this BMC live and die with its
    // lane; a lane that follows a dropped poll-only lane within
    // `--bmc-min-interval` is paced from that lane's last call.
    let mut guard = crate::guard::BmcGuard::new(&shared.guard, shared.metrics.breakers());
    if let Some(at) = paced_from {
        guard.pacer.started(at);
    }
    while let Some(work) = rx.next().await {
        if !fence.may_act() {
            // This lane runs nothing more (its lease lapsed, or the partition
            // stops), and its queued batches stay unacknowledged for the next
            // owner: the partition must not go on without it, or its
            // in-progress acks would keep those batches from everyone.
            hand_back(&fence);
            break;
        }
        let with = LaneRefs { shared: &shared, key: &key, fence: &fence, done: &done };
        if Box::pin(serve(with, work, &mut slot, &mut guard)).await == Flow::Stop {
            break;
        }
    }
    // Logging out is a request too: not after the lease is gone.
    Box::pin(slot.close_if(fence.valid())).await;
}

/// What a lane shares with the work it serves.
#[derive(Clone, Copy)]
struct LaneRefs<'a> {
    shared: &'a Arc<Shared>,
    key: &'a BmcKey,
    fence: &'a Fence,
    done: &'a mpsc::UnboundedSender<Done>,
}

/// Whether a lane goes on after a piece of work.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Flow {
    Continue,
    Stop,
}

/// One of the worker's `--max-concurrent-batches` slots, taken from
/// `tenant`'s share of them (`None`: the operator's own work, no share; see
/// [`crate::slots`]), or `None` when the partition is drained or lost first.
async fn permit(
    shared: &Shared,
    fence: &Fence,
    tenant: Option<&str>,
    work: crate::slots::For<'_>,
) -> Option<crate::slots::Slot> {
    tokio::select! {
        p = shared.slots.acquire(tenant, work) => Some(p),
        _ = fence.drain.cancelled() => None,
        _ = fence.lost.cancelled() => None,
    }
}

/// One piece of a lane's work: a state poll or a batch.
async fn serve(with: LaneRefs<'_>, work: Work, slot: &mut SessionSlot, guard: &mut crate::guard::BmcGuard) -> Flow {
    let LaneRefs { shared, key, fence, done } = with;
    let d = match work {
        // Kept boxed: the delivery (job and message) is not copied around.
        Work::Batch(d) => d,
        Work::Poll(machine, due) => {
            // A poll is the worker's own doing: the operator's for its own machines.
            let share = crate::slots::Slots::share_of(&machine.tenant, true);
            let Some(permit) = permit(shared, fence, share, crate::slots::For::Poll(&machine.name)).await else {
                return Flow::Stop;
            };
            crate::state::poll(shared, &machine, due, slot, guard, fence)
                .instrument(tracing::debug_span!("worker.poll", machine = %machine.name))
                .await;
            drop(permit);
            let _ = done.send(Done::Polled(key.clone(), guard.pacer.last_start()));
            return Flow::Continue;
        }
    };
    let share = crate::slots::Slots::share_of(&d.job.tenant, d.job.by_operator);
    let Some(permit) = permit(shared, fence, share, crate::slots::For::Batch(&d.job.id)).await else {
        return Flow::Stop;
    };
    let partition = key.partition(shared.subjects.partitions);
    let span = tracing::info_span!(
        "worker.execute",
        otel.kind = "consumer",
        batch = %d.job.id,
        bmc = %key,
        protocol = %d.job.target.protocol,
        partition,
        worker = %shared.worker_id,
        stream_seq = d.seq,
        actions = d.job.batch.actions.len(),
        attempt = tracing::field::Empty,
        outcome = tracing::field::Empty,
        state = tracing::field::Empty,
    );
    // Continue the producer → gateway trace carried in the job's headers.
    bmcfleet_common::telemetry::set_parent(&span, d.msg.headers.as_ref());
    let in_flight =
        shared.metrics.lanes_in_flight.get_or_create(&crate::metrics::Metrics::partition_label(partition)).clone();
    in_flight.inc();
    // JetStream's own count: 1 on the job's first delivery to any worker.
    let first_delivery = d.msg.info().is_ok_and(|i| i.delivered == 1);
    let outcome = execute(shared, &d.job, d.msg.headers.as_ref(), slot, guard, fence, first_delivery)
        .instrument(span.clone())
        .await;
    in_flight.dec();
    span.record("outcome", if outcome == Outcome::Done { "done" } else { "handed_back" });
    drop(permit);
    match outcome {
        Outcome::Done => {
            if let Err(e) = d.msg.ack().await {
                tracing::warn!(bmc = %key, batch = %d.job.id, error = %e, "Cannot acknowledge a finished job; it will be redelivered and recognised as done.");
            }
            let _ = done.send(Done::Batch(key.clone(), d.seq));
            Flow::Continue
        }
        Outcome::HandBack => {
            tracing::info!(bmc = %key, batch = %d.job.id, "Handing the batch back unfinished.");
            // The lane stops with the batch unfinished (its lease lapsed, or
            // another worker took the batch over), and the BMC's later jobs
            // must wait for it.
            hand_back(fence);
            Flow::Stop
        }
    }
}

/// A lane stopped with its BMC's jobs unfinished: unless the partition is
/// already stopping, the whole partition is handed back, to be re-taken
/// with a fresh consumer, so order is kept and nothing stays held by a lane
/// that is gone. Gracefully (drain): the other lanes finish the action they
/// are in and record it (their requests and writes are fenced on their
/// own). Cutting them short (`lost`) dropped the results of actions whose
/// requests had reached their BMCs, and the next owner ran those actions
/// again although no worker had died.
fn hand_back(fence: &Fence) {
    if !fence.drain.is_cancelled() && !fence.lost.is_cancelled() {
        fence.drain.cancel();
    }
}

#[cfg(test)]
mod tests {
    use super::share_bound;

    #[test]
    fn one_bmc_holds_at_most_a_quarter_of_a_partitions_slots() {
        assert_eq!(share_bound(256, Some(64)), 256);
        assert_eq!(share_bound(8, Some(4)), 16, "raised so a full BMC queue is a quarter");
        assert_eq!(share_bound(256, None), 256, "an uncapped stream (created before the cap) keeps the setting");
        assert_eq!(share_bound(1, Some(i64::MAX)), i64::MAX, "no overflow");
    }
}
