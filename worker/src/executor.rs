//! Executing one batch: resume from the status record, run the remaining
//! actions in order, record progress after each, publish events, and finish
//! with the final result. Exactly-once per action is enforced here:
//! - a finished action is recorded (CAS) before the next one starts, so a
//!   redelivered batch resumes after it;
//! - a non-idempotent action is marked `in_progress` (CAS) before it runs; if
//!   the worker dies during it, the next owner reports `interrupted` instead
//!   of running it again;
//! - every write is a compare-and-set on the record's revision, and a record
//!   taken over by another worker stops this one (fencing at the data level);
//!   the result of an action that ran is written even when the lease lapsed
//!   meanwhile, fenced by that revision alone ([`Write::Done`]): unless a new
//!   owner claimed the batch first, it resumes after the action instead of
//!   running it again;
//! - nothing else leaves for the BMC, the record or the events stream unless the
//!   partition's lease is still held at that moment ([`Fence::valid`]): each
//!   BMC request passes the attempt's [`ActionGate`] right before it is sent,
//!   after pacing, backoff and session set-up. A non-idempotent action's
//!   `in_progress` marker is written by that gate before the action's first
//!   request, so an action fenced off before it sent anything is handed back
//!   untouched (the next owner runs it) rather than reported interrupted.
//! - an action that starts a long-running BMC task (a firmware update,
//!   [`bmcfleet_schema::Action::watches_task`]) records, through the same
//!   gate ([`bmcfleet_provider::TaskLog`]), that its starting request may
//!   leave (before it is sent) and then the task the BMC named; the next
//!   owner watches that task (or looks for it, `interrupted` when it cannot
//!   find it) instead of reporting the action interrupted or starting it
//!   again. The task's percentage goes out as `action_progress` events.

use crate::call::{protocol_label, Attempt, Call, Fencing, Purpose};
use crate::fence::Fence;
use crate::guard::BmcGuard;
use crate::session::SessionSlot;
use crate::Shared;
use async_nats::HeaderMap;
use bmcfleet_common::backoff::Backoff;
use bmcfleet_common::events;
use bmcfleet_common::runtime::now_ms;
use bmcfleet_common::status::{self, StatusError};
use bmcfleet_common::telemetry;
use bmcfleet_provider::{CallInfo, Ctx, ProviderError, SendGate};
use bmcfleet_schema::subject::WORKER_HEADER;
use bmcfleet_schema::{
    ActionResult, BatchId, BatchState, BatchStatus, ErrorBody, ErrorCode, Event, EventKind, EventsMode, Job, OnError,
};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use tracing::field::Empty;
use tracing::Instrument;

/// How a delivery ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The final result is stored and published: acknowledge the message.
    Done,
    /// Stopped early (lease lost or draining): leave the message unacknowledged
    /// for the partition's next owner, who resumes from the status record.
    HandBack,
}

struct Stop;

struct Run<'a> {
    shared: &'a Shared,
    job: &'a Job,
    fence: &'a Fence,
    trace: Option<&'a HeaderMap>,
    status: BatchStatus,
    revision: u64,
    /// Where the actions go: for a machine, its record in this worker's
    /// copy of the registry (never the job's copy); see [`Run::target`].
    target: bmcfleet_schema::BmcTarget,
    /// Encoded bytes of the results pushed since the record's size was
    /// last measured; `None` before the first measure (see [`Run::fit`]).
    unmeasured: Option<usize>,
}

/// Bytes a status record leaves below the NATS server's `max_payload`:
/// half for results pushed between two measures of its size, half for the
/// write's headers and the record's own fields (see [`Run::fit`]).
const RECORD_HEADROOM: usize = 16 * 1024;

/// The MessagePack size of `value` (what a write of it sends); an encoding
/// failure counts as too large.
fn encoded_len<T: serde::Serialize>(value: &T) -> usize {
    bmcfleet_schema::Encoding::MessagePack.encode(value).map_or(usize::MAX, |b| b.len())
}

/// What a status record write stands for, and so what fences it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Write {
    /// It comes before what this worker is about to do (a claim, an
    /// action's `in_progress` or task marker, a decision not to run):
    /// only while the lease is (locally) valid, like a request to the BMC.
    Ahead,
    /// It records what already happened (an action that ran, the final
    /// state): fenced by the record's revision alone. A worker whose lease
    /// lapsed (a renewal late on a starved host) still writes it unless
    /// another worker claimed the batch since (its claim changed the
    /// revision: the write conflicts and this worker stops); the next owner
    /// then resumes after the action instead of running it again. Retried
    /// until the lease is known lost.
    Done,
}

impl Write {
    /// Whether this write may still be made (or retried).
    fn allowed(self, fence: &Fence) -> bool {
        match self {
            Write::Ahead => fence.valid(),
            Write::Done => !fence.lost.is_cancelled(),
        }
    }
}

/// Back off on store errors while `write` is allowed ([`Write::Ahead`]:
/// while the lease holds).
async fn pause(fence: &Fence, write: Write, attempt: u32) -> Result<(), Stop> {
    if !write.allowed(fence) {
        return Err(Stop);
    }
    let d = Backoff::new(Duration::from_millis(50), Duration::from_secs(2)).delay(attempt);
    tokio::select! {
        _ = tokio::time::sleep(d) => Ok(()),
        _ = fence.lost.cancelled() => Err(Stop),
    }
}

/// Write `status` over the record at `revision` (CAS), fenced as `write`
/// says (a [`Write::Done`] is attempted once even when the lease is known
/// lost: the revision alone decides). On a conflict, merge what others may
/// change (the cancel flag) unless another worker took the batch over or
/// finished it.
async fn save_record(
    kv: &async_nats::jetstream::kv::Store,
    worker: &str,
    fence: &Fence,
    write: Write,
    status: &mut BatchStatus,
    revision: &mut u64,
) -> Result<(), Stop> {
    let id = status.id;
    let mut attempt = 0;
    loop {
        if write == Write::Ahead && !fence.valid() {
            return Err(Stop);
        }
        status.updated_at_ms = now_ms();
        match status::update(kv, status, *revision).await {
            Ok(rev) => {
                *revision = rev;
                return Ok(());
            }
            Err(StatusError::Conflict) => match status::load(kv, &id).await {
                Ok(Some(theirs)) => {
                    if theirs.status.worker.as_deref() != Some(worker) || theirs.status.state.is_final() {
                        tracing::warn!(batch = %id, now = ?theirs.status.worker, "Batch taken over by another worker; stopping.");
                        return Err(Stop);
                    }
                    status.cancel_requested |= theirs.status.cancel_requested;
                    *revision = theirs.revision;
                }
                Ok(None) => {
                    tracing::warn!(batch = %id, "Status record vanished; stopping.");
                    return Err(Stop);
                }
                Err(e) => {
                    tracing::warn!(batch = %id, error = %e, "Cannot reload the status record.");
                    pause(fence, write, attempt).await?;
                    attempt += 1;
                }
            },
            Err(e) => {
                tracing::warn!(batch = %id, error = %e, "Cannot save progress; retrying.");
                pause(fence, write, attempt).await?;
                attempt += 1;
            }
        }
    }
}

/// A BMC's words may echo what it was sent (a rejected password, a media
/// URL): every secret of the action and the login password are removed from
/// the error before anything logs, retries on, stores or publishes it.
fn scrub(
    mut e: ProviderError,
    action: &bmcfleet_schema::Action,
    creds: &bmcfleet_provider::ResolvedCredentials,
) -> ProviderError {
    let values = action.secret_values();
    let mut secrets: Vec<&str> = values.iter().map(String::as_str).collect();
    secrets.push(creds.password.expose());
    e.message = bmcfleet_schema::secret::scrub(&e.message, &secrets);
    e
}

/// What a BMC returns as data (event log messages, BIOS string attributes,
/// inventory text) is its text too, and may quote what it was sent (a login
/// failure logged with the password typed): the same secrets are removed
/// from every string in it. Data without such a string is returned as is.
fn scrub_data(
    data: bmcfleet_schema::ActionData,
    action: &bmcfleet_schema::Action,
    creds: &bmcfleet_provider::ResolvedCredentials,
) -> bmcfleet_schema::ActionData {
    // User names are the BMC's text, shown in tables like sensor names:
    // no control characters, whichever provider read them.
    let data = match data {
        bmcfleet_schema::ActionData::Users(mut users) => {
            for u in users.iter_mut().filter(|u| u.name.chars().any(char::is_control)) {
                u.name = bmcfleet_schema::components::clip(&u.name);
            }
            bmcfleet_schema::ActionData::Users(users)
        }
        other => other,
    };
    let values = action.secret_values();
    let mut secrets: Vec<&str> = values.iter().map(String::as_str).collect();
    secrets.push(creds.password.expose());
    fn walk(v: &mut serde_json::Value, secrets: &[&str], changed: &mut bool) {
        match v {
            serde_json::Value::String(s) => {
                let clean = bmcfleet_schema::secret::scrub(s, secrets);
                if clean != *s {
                    *s = clean;
                    *changed = true;
                }
            }
            serde_json::Value::Array(items) => items.iter_mut().for_each(|i| walk(i, secrets, changed)),
            serde_json::Value::Object(map) => map.values_mut().for_each(|i| walk(i, secrets, changed)),
            _ => {}
        }
    }
    let Ok(mut v) = serde_json::to_value(&data) else { return data };
    let mut changed = false;
    walk(&mut v, &secrets, &mut changed);
    if !changed {
        return data;
    }
    serde_json::from_value(v).unwrap_or(data)
}

/// Plan mode: an action's result with its plan. An action that reached a
/// state-changing request stopped there (nothing of it was sent): it is
/// `ok`, without data, its plan naming that request. One that only read
/// keeps its result (data or error). The plan loses the action's secrets
/// and the login password wherever a BMC or a path could have put them,
/// and a raw request's data or body.
fn plan_result(
    result: ActionResult,
    plan: &bmcfleet_provider::Plan,
    action: &bmcfleet_schema::Action,
    creds: &Result<bmcfleet_provider::ResolvedCredentials, ErrorBody>,
) -> ActionResult {
    let mut shown = plan.snapshot();
    let values = action.secret_values();
    let mut secrets: Vec<&str> = values.iter().map(String::as_str).collect();
    if let Ok(c) = creds {
        secrets.push(c.password.expose());
    }
    shown.strings_mut(&mut |s| *s = bmcfleet_schema::secret::scrub(s, &secrets));
    if matches!(action, bmcfleet_schema::Action::Raw(_)) {
        shown.reads.iter_mut().chain(shown.change.iter_mut()).for_each(|r| r.without_data());
    }
    let result = if plan.stopped() {
        ActionResult::ok(result.index, &result.action, result.provider, None, result.duration_ms)
    } else {
        result
    };
    result.with_plan(Some(shown))
}

/// The send gate of one action attempt (see the module doc): asked by the
/// provider immediately before each request leaves.
#[derive(Debug)]
struct ActionGate {
    fence: Fence,
    kv: async_nats::jetstream::kv::Store,
    worker: String,
    batch: BatchId,
    /// The `in_progress` marker of a non-idempotent action: written before
    /// its first request, then handed back to the run with the new revision.
    marker: tokio::sync::Mutex<Marker>,
    /// Set when the gate refused a request: the worker no longer holds the lease.
    refused: AtomicBool,
    /// The action's index, and what an earlier owner recorded about its BMC task.
    index: u32,
    resume: bmcfleet_schema::TaskResume,
    /// Where the action's progress events go.
    progress: Progress,
}

/// What an `action_progress` event needs.
#[derive(Debug)]
struct Progress {
    client: async_nats::Client,
    subject: String,
    headers: HeaderMap,
    action: String,
    /// `false` for a batch that publishes its final event only.
    publish: bool,
}

#[derive(Debug)]
enum Marker {
    /// Idempotent action, or the marker was taken back.
    None,
    /// To be written (CAS at `revision`) before the action's first request.
    Pending { status: Box<BatchStatus>, revision: u64 },
    /// Written: the record is now at `revision`.
    Written { status: Box<BatchStatus>, revision: u64 },
}

impl ActionGate {
    fn refuse(&self) -> ProviderError {
        self.refused.store(true, Ordering::SeqCst);
        tracing::warn!(batch = %self.batch, "Not sending: this worker no longer holds the lease of the BMC's partition.");
        ProviderError::new(
            ErrorCode::Interrupted,
            "this worker no longer holds the lease of the BMC's partition; nothing was sent",
        )
        .not_sent()
    }

    fn refused(&self) -> bool {
        self.refused.load(Ordering::SeqCst)
    }

    /// Change the marker's record (CAS, while the lease holds); it is then written.
    async fn record(&self, change: impl FnOnce(&mut BatchStatus)) -> bmcfleet_provider::Result<()> {
        let mut marker = self.marker.lock().await;
        let (Marker::Pending { status, revision } | Marker::Written { status, revision }) = &mut *marker else {
            return Err(ProviderError::new(
                ErrorCode::Internal,
                "a long-running action without its in-progress marker",
            )
            .not_sent());
        };
        change(status);
        if save_record(&self.kv, &self.worker, &self.fence, Write::Ahead, status, revision).await.is_err() {
            return Err(self.refuse());
        }
        *marker = match std::mem::replace(&mut *marker, Marker::None) {
            Marker::Pending { status, revision } => Marker::Written { status, revision },
            other => other,
        };
        Ok(())
    }

    /// The written marker, if the action got as far as its first request.
    async fn take_written(&self) -> Option<(BatchStatus, u64)> {
        match std::mem::replace(&mut *self.marker.lock().await, Marker::None) {
            Marker::Written { status, revision } => Some((*status, revision)),
            _ => None,
        }
    }
}

#[async_trait::async_trait]
impl SendGate for ActionGate {
    async fn admit(&self, for_action: bool) -> bmcfleet_provider::Result<()> {
        if for_action {
            let mut marker = self.marker.lock().await;
            if let Marker::Pending { status, revision } = &mut *marker {
                if save_record(&self.kv, &self.worker, &self.fence, Write::Ahead, status, revision).await.is_err() {
                    return Err(self.refuse());
                }
                *marker = match std::mem::replace(&mut *marker, Marker::None) {
                    Marker::Pending { status, revision } => Marker::Written { status, revision },
                    other => other,
                };
            }
        }
        // The last thing before the request leaves, on the monotonic clock.
        if !self.fence.valid() {
            return Err(self.refuse());
        }
        Ok(())
    }

    fn holds(&self) -> bool {
        self.fence.valid()
    }

    /// The fence alone: the session outlives this action, and must not keep
    /// its status record, event headers and NATS handles alive.
    fn for_session(self: Arc<Self>) -> Arc<dyn SendGate> {
        self.fence.gate()
    }
}

/// The guarded path asks the action's gate: a refusal here is recorded like
/// one at a request, so the run hands the batch back.
impl Fencing for ActionGate {
    fn admit(&self) -> Result<(), ProviderError> {
        if self.fence.valid() {
            Ok(())
        } else {
            Err(self.refuse())
        }
    }

    fn refused(&self) -> bool {
        ActionGate::refused(self)
    }
}

#[async_trait::async_trait]
impl bmcfleet_provider::TaskLog for ActionGate {
    fn resume(&self) -> bmcfleet_schema::TaskResume {
        self.resume.clone()
    }

    async fn requesting(&self) -> bmcfleet_provider::Result<()> {
        self.record(|s| s.task_requested(self.index)).await
    }

    async fn started(&self, task: &str) -> bmcfleet_provider::Result<()> {
        tracing::info!(batch = %self.batch, index = self.index, %task, "BMC task recorded.");
        self.record(|s| s.task_started(self.index, task)).await
    }

    fn progress(&self, percent: Option<u8>, state: Option<&str>) {
        tracing::info!(batch = %self.batch, index = self.index, percent, state, "BMC task progress.");
        let p = &self.progress;
        if !p.publish {
            return;
        }
        let event = EventKind::ActionProgress {
            index: self.index,
            action: p.action.clone(),
            percent,
            state: state.map(str::to_owned),
        };
        publish_event(&p.client, p.subject.clone(), &p.headers, &self.fence, self.batch, event);
    }
}

/// Publishes one event of `batch` without waiting (a core publish: the
/// events stream stores it), unless the fence has run out by then. Stamped
/// before the fence check: an event is never stamped later than the last
/// moment this worker was seen to hold the lease.
fn publish_event(
    client: &async_nats::Client,
    subject: String,
    base: &HeaderMap,
    fence: &Fence,
    batch: BatchId,
    event: EventKind,
) {
    let ev = Event { batch, at_ms: now_ms(), event };
    let headers = events::headers(&ev, Some(base));
    let Ok(body) = bmcfleet_schema::Encoding::MessagePack.encode(&ev) else { return };
    let (client, fence) = (client.clone(), fence.clone());
    tokio::spawn(async move {
        if fence.valid() {
            let _ = client.publish_with_headers(subject, headers, body.into()).await;
        }
    });
}

/// One attempt of an action, as the guarded path runs it: its calls
/// ([`Run::call`]), the BMC's text scrubbed of the action's secrets.
struct ActionCall<'r, 'a> {
    run: &'r Run<'a>,
    ctx: &'r Ctx,
    action: &'r bmcfleet_schema::Action,
    creds: &'r bmcfleet_provider::ResolvedCredentials,
    protocol: &'r str,
}

impl Attempt for ActionCall<'_, '_> {
    type Output = Option<bmcfleet_schema::ActionData>;

    fn attempt<'s>(
        &'s mut self,
        slot: &'s mut SessionSlot,
        retry: u32,
    ) -> impl std::future::Future<Output = Result<Self::Output, ProviderError>> + Send + 's {
        let ActionCall { run, ctx, action, creds, protocol } = *self;
        async move {
            run.call(slot, ctx, action, creds, protocol, retry)
                .await
                .map(|d| d.map(|d| scrub_data(d, action, creds)))
                .map_err(|e| scrub(e, action, creds))
        }
    }
}

/// Execute (or resume) one batch.
pub async fn execute(
    shared: &Shared,
    job: &Job,
    trace: Option<&HeaderMap>,
    slot: &mut SessionSlot,
    guard: &mut BmcGuard,
    fence: &Fence,
    first_delivery: bool,
) -> Outcome {
    let mut run = match Run::begin(shared, job, fence, trace, first_delivery).await {
        Ok(run) => run,
        Err(outcome) => return outcome,
    };
    tracing::Span::current().record("attempt", run.status.deliveries);
    run.count_delivery();
    if run.status.state.is_final() {
        // Finished before (the ack was lost): publish the result again; the
        // events stream drops the duplicate by its message id.
        return match run.publish_final().await {
            Ok(()) => Outcome::Done,
            Err(Stop) => Outcome::HandBack,
        };
    }
    let ran = async {
        run.actions(slot, guard).await?;
        run.finish().await
    };
    match ran.await {
        Ok(()) => Outcome::Done,
        Err(Stop) => Outcome::HandBack,
    }
}

impl<'a> Run<'a> {
    /// Metrics of this delivery: a redelivery, or (first run) the time the batch queued.
    fn count_delivery(&self) {
        let m = &self.shared.metrics;
        let s = &self.status;
        let kind = match (s.state.is_final(), s.deliveries) {
            (true, d) if d >= 1 => Some("redelivered"),
            (false, d) if d > 1 => Some(if s.results.is_empty() { "redelivered" } else { "resumed" }),
            (false, _) => {
                let partition = self.job.key().partition(self.shared.subjects.partitions);
                let waited = now_ms().saturating_sub(self.job.admitted_at_ms) as f64 / 1000.0;
                m.queue_wait_seconds
                    .get_or_create(&crate::metrics::Metrics::partition_label(partition))
                    .observe(waited);
                None
            }
            _ => None,
        };
        if let Some(kind) = kind {
            m.redeliveries.get_or_create(&crate::metrics::KindLabels { kind: kind.into() }).inc();
        }
    }

    /// Load or create the status record and claim it for this worker;
    /// `Err` with what to do with the job when there is nothing to run.
    async fn begin(
        shared: &'a Shared,
        job: &'a Job,
        fence: &'a Fence,
        trace: Option<&'a HeaderMap>,
        first_delivery: bool,
    ) -> Result<Run<'a>, Outcome> {
        let kv = &shared.res.batches;
        let mut attempt = 0;
        // A rollout machine's batch that only reads (or only plans), on its
        // first delivery: nothing is written before it runs. Running it
        // twice changes nothing, so it needs no claim; its record is
        // created by its first write (revision 0: only if there is none),
        // and a record found then (a cancel, another worker) stops it. A
        // redelivery claims as any batch, so one that finished is seen.
        let reads_only = job.batch.plan || job.batch.actions.iter().all(bmcfleet_schema::plan::reads_only);
        let unclaimed = job.record_at_claim && first_delivery && reads_only;
        // Any other rollout machine's batch has no `queued` record either:
        // claim it by creating the record, with no read first. A record
        // already there (a redelivery; a cancel before any claim) is read below.
        let mut create_first = job.record_at_claim && !unclaimed;
        loop {
            if !fence.valid() {
                return Err(Outcome::HandBack);
            }
            let step = if unclaimed {
                Ok(Some((BatchStatus::running(job, &shared.worker_id, now_ms()), 0)))
            } else if std::mem::take(&mut create_first) {
                let s = BatchStatus::running(job, &shared.worker_id, now_ms());
                status::create(kv, &s).await.map(|rev| Some((s, rev)))
            } else {
                match status::load(kv, &job.id).await {
                    Ok(None) => {
                        let s = BatchStatus::running(job, &shared.worker_id, now_ms());
                        status::create(kv, &s).await.map(|rev| Some((s, rev)))
                    }
                    // The id is another tenant's batch (its record): this job is
                    // neither run into that record (its results would be the other
                    // tenant's to read) nor given its result. Acknowledged unrun.
                    Ok(Some(v)) if v.status.tenant != job.tenant => {
                        tracing::error!(
                            batch = %job.id, tenant = %job.tenant, record_tenant = %v.status.tenant,
                            "The batch's status record belongs to another tenant; not running this job (nothing is sent)."
                        );
                        return Err(Outcome::Done);
                    }
                    // Another admission's record of this id (a resubmission past
                    // the JetStream dedupe window was queued again before the
                    // gateway found the record, and answered `duplicate`): that
                    // batch runs, or ran, from its own job; this copy never runs.
                    Ok(Some(v)) if v.status.admitted_at_ms != job.admitted_at_ms => {
                        tracing::info!(
                            batch = %job.id, admitted_at_ms = job.admitted_at_ms, record_admitted_at_ms = v.status.admitted_at_ms,
                            "A second admission of a batch id; not running this copy (nothing is sent)."
                        );
                        return Err(Outcome::Done);
                    }
                    Ok(Some(v)) if v.status.state.is_final() => Ok(Some((v.status, v.revision))),
                    Ok(Some(v)) => {
                        let mut s = v.status;
                        if s.state == BatchState::Running && s.worker.as_deref() != Some(&shared.worker_id) {
                            tracing::info!(batch = %job.id, previous = ?s.worker, done = s.results.len(), "Resuming a batch from another worker.");
                        }
                        s.claim(&shared.worker_id, now_ms());
                        status::update(kv, &s, v.revision).await.map(|rev| Some((s, rev)))
                    }
                    Err(StatusError::Corrupt { id, revision, reason }) => {
                        // Unknown how far it ran: finish it interrupted (no action
                        // runs again), replacing exactly the record that was read.
                        tracing::error!(batch = %id, error = %reason, "Corrupt status record; finishing the batch as interrupted without running anything.");
                        let s = BatchStatus::unreadable(job, &shared.worker_id, now_ms());
                        status::update(kv, &s, revision).await.map(|rev| Some((s, rev)))
                    }
                    Err(e) => Err(e),
                }
            };
            match step {
                Ok(Some((status, revision))) => {
                    return Ok(Run {
                        shared,
                        job,
                        fence,
                        trace,
                        status,
                        revision,
                        target: job.target.clone(),
                        unmeasured: None,
                    })
                }
                Ok(None) => unreachable!(),
                Err(StatusError::Conflict) => continue,
                Err(e) => {
                    tracing::warn!(batch = %job.id, error = %e, "Cannot read or claim the status record; retrying.");
                    pause(fence, Write::Ahead, attempt).await.map_err(|Stop| Outcome::HandBack)?;
                    attempt += 1;
                }
            }
        }
    }

    /// Write the record (CAS) while the lease holds; see [`save_record`].
    async fn save(&mut self) -> Result<(), Stop> {
        self.write(Write::Ahead).await
    }

    /// Record what ran (CAS; fenced by the record's revision, see [`Write::Done`]).
    async fn record(&mut self) -> Result<(), Stop> {
        self.write(Write::Done).await
    }

    async fn write(&mut self, write: Write) -> Result<(), Stop> {
        let (kv, worker) = (&self.shared.res.batches, &self.shared.worker_id);
        save_record(kv, worker, self.fence, write, &mut self.status, &mut self.revision).await
    }

    /// Headers of this worker's events: trace context and who published it.
    fn event_headers(&self) -> HeaderMap {
        let mut h = telemetry::trace_headers(&tracing::Span::current(), self.trace);
        h.insert(WORKER_HEADER, self.shared.worker_id.as_str());
        h
    }

    /// Publish one of the batch's per-action events, unless the batch asked
    /// for its final event only ([`EventsMode::Final`]).
    fn publish_soon(&self, event: EventKind) {
        if self.job.batch.events == EventsMode::Final {
            return;
        }
        let subject = self.shared.subjects.events(&self.job.tenant, &self.job.id);
        publish_event(&self.shared.client, subject, &self.event_headers(), self.fence, self.job.id, event);
    }

    fn push(&mut self, result: ActionResult) {
        let result = self.fit(result);
        self.shared.metrics.action(&result, &self.target.protocol.to_string());
        self.status.results.push(result.clone());
        self.publish_soon(EventKind::ActionFinished { result });
    }

    /// `result` if the batch's status record can hold it, else the same
    /// action failed `too_large`. A BMC's answer (an event log, a raw body)
    /// can be larger than one NATS message may be (the server's
    /// `max_payload`): a record or event that large is refused however
    /// often it is written, and the batch would never finish. The record's
    /// size is measured when growth since the last measure could reach
    /// [`RECORD_HEADROOM`]` / 2`; the other half is left for the write's
    /// headers and the record's own fields.
    fn fit(&mut self, result: ActionResult) -> ActionResult {
        let size = encoded_len(&result);
        if let Some(grown) = self.unmeasured.filter(|g| g.saturating_add(size) < RECORD_HEADROOM / 2) {
            self.unmeasured = Some(grown + size);
            return result;
        }
        let max = self.shared.client.server_info().max_payload;
        let taken = encoded_len(&self.status);
        if taken.saturating_add(size).saturating_add(RECORD_HEADROOM) <= max {
            self.unmeasured = Some(0);
            return result;
        }
        tracing::warn!(batch = %self.job.id, index = result.index, action = %result.action, bytes = size, max_payload = max,
            "An action's result is too large for the batch's status record; it is dropped.");
        let message = format!(
            "the action ran, but its result ({size} bytes encoded) does not fit the batch's status record: NATS max_payload is {max} \
             bytes here and the record already takes {taken}; ask for less (a smaller event_log limit, a narrower raw request) or \
             split the batch"
        );
        ActionResult::err(
            result.index,
            &result.action,
            result.provider,
            ErrorBody::new(ErrorCode::TooLarge, message),
            result.duration_ms,
        )
    }

    fn fill_remaining(&mut self, code: ErrorCode, message: &str) {
        let start = self.status.results.len();
        for (i, action) in self.job.batch.actions.iter().enumerate().skip(start) {
            self.push(ActionResult::err(i as u32, action.kind(), None, ErrorBody::new(code, message), 0));
        }
    }

    fn failed(&self) -> bool {
        self.status.results.iter().any(|r| !r.is_ok())
    }

    async fn actions(&mut self, slot: &mut SessionSlot, guard: &mut BmcGuard) -> Result<(), Stop> {
        let batch = &self.job.batch;
        let key = self.job.key();
        self.resume_in_progress().await?;
        if self.status.results.len() < batch.actions.len() {
            match self.shared.targets.resolve(self.job).await {
                Ok(target) => self.target = target,
                Err(e) => {
                    tracing::warn!(batch = %self.job.id, bmc = %key, code = %e.code, error = %e.message, "Refusing the batch's target; nothing is sent.");
                    self.fill_remaining(e.code, &e.message);
                    return Ok(());
                }
            }
        }
        let creds = self.shared.credentials.resolve(&self.target.credentials, &self.job.key()).await;
        while self.status.results.len() < batch.actions.len() {
            if let Some((code, message)) = self.not_started() {
                self.fill_remaining(code, message);
                break;
            }
            if !self.fence.may_act() {
                return Err(Stop);
            }
            self.action(slot, guard, self.status.results.len(), &creds).await?;
            // After the last action, `finish` records the result and the final
            // state in one write: a crash before it leaves exactly what a crash
            // before this progress write would (the action is redone if
            // idempotent, reported interrupted if not). The action ran: its
            // result is recorded even if the lease lapsed meanwhile, unless
            // another worker claimed the batch (see `Write::Done`).
            if self.status.results.len() < batch.actions.len() {
                self.record().await?;
            }
        }
        Ok(())
    }

    /// A non-idempotent action that a previous owner started but never
    /// recorded: reported interrupted (never run twice), or, when it
    /// started a BMC task, taken over (its task is watched).
    async fn resume_in_progress(&mut self) -> Result<(), Stop> {
        let batch = &self.job.batch;
        let Some(i) = self.status.in_progress.take() else { return Ok(()) };
        let i = i as usize;
        if i == self.status.results.len() && i < batch.actions.len() && batch.actions[i].watches_task() {
            // Its BMC task is watched (or looked for), never started again: see `TaskLog`.
            let resume = self.status.task_resume(i as u32);
            tracing::info!(batch = %self.job.id, bmc = %self.job.key(), index = i, action = batch.actions[i].kind(), ?resume, "Taking over a long-running action that a previous worker started.");
        } else if i == self.status.results.len() && i < batch.actions.len() && !batch.actions[i].is_idempotent() {
            let kind = batch.actions[i].kind();
            tracing::warn!(batch = %self.job.id, bmc = %self.job.key(), index = i, action = kind, "Not re-running an interrupted non-idempotent action.");
            self.push(ActionResult::err(
                i as u32,
                kind,
                None,
                ErrorBody::new(ErrorCode::Interrupted, "a worker stopped while this action ran; it may or may not have taken effect, so it was not run again"),
                0,
            ));
        }
        self.save().await
    }

    /// Why the next action may not start, as the code and message every
    /// remaining action is given: the batch was cancelled, an earlier action
    /// failed (`on_error: stop`), or the batch deadline passed.
    fn not_started(&self) -> Option<(ErrorCode, &'static str)> {
        if self.status.cancel_requested {
            return Some((ErrorCode::Cancelled, "the batch was cancelled before this action ran"));
        }
        if self.failed() && self.job.batch.on_error == OnError::Stop {
            return Some((ErrorCode::Skipped, "not run: an earlier action failed (on_error: stop)"));
        }
        if now_ms() >= self.job.deadline_at_ms {
            return Some((ErrorCode::DeadlineExceeded, "the batch deadline passed before this action could start"));
        }
        None
    }

    /// Run action `i` in its `worker.action` span: its events, its send
    /// gate and context, the guarded attempt ([`Run::attempt`]), and its
    /// result pushed. `Err(Stop)` when the lease is lost on the way.
    async fn action(
        &mut self,
        slot: &mut SessionSlot,
        guard: &mut BmcGuard,
        i: usize,
        creds: &Result<bmcfleet_provider::ResolvedCredentials, ErrorBody>,
    ) -> Result<(), Stop> {
        let action = &self.job.batch.actions[i];
        let key = self.job.key();
        let gate = Arc::new(self.gate(i, action));
        let span = tracing::info_span!(
            "worker.action",
            batch = %self.job.id,
            bmc = %key,
            protocol = %self.target.protocol,
            index = i,
            action = action.kind(),
            attempt = self.status.deliveries,
            provider = Empty,
            outcome = Empty,
            error.code = Empty,
            duration_ms = Empty,
        );
        span.in_scope(|| {
            self.publish_soon(EventKind::ActionStarted { index: i as u32, action: action.kind().to_owned() })
        });
        let plan = self.job.batch.plan.then(bmcfleet_provider::Plan::new);
        let ctx = self.ctx(i, action, &gate, plan.as_ref());
        let started = Instant::now();
        let work = async {
            let action = self.with_secrets(i, action)?;
            self.attempt(slot, guard, &ctx, &action, creds, &gate).await
        };
        let outcome = tokio::select! {
            r = work.instrument(span.clone()) => r,
            _ = self.fence.lost.cancelled() => return Err(Stop),
        };
        if let Some((marked, revision)) = gate.take_written().await {
            self.revision = revision;
            self.status.in_progress = marked.in_progress;
            self.status.task = marked.task;
            self.status.cancel_requested |= marked.cancel_requested;
        }
        if gate.refused() {
            // Fenced off: before the first request the action is handed
            // back untouched; after it, the marker makes the next owner
            // report it interrupted (non-idempotent) or run it again.
            return Err(Stop);
        }
        let ms = started.elapsed().as_millis() as u64;
        let mut result = self.result(i, action, outcome, slot.provider().map(str::to_owned), ms);
        result.cipher_suite = slot.cipher_suite();
        let result = match &plan {
            Some(plan) => plan_result(result, plan, action, creds),
            None => result,
        };
        self.observe_power(&result).await;
        self.observe_certificate(&result).await;
        span.record("provider", result.provider.as_deref().unwrap_or("-"));
        span.record("outcome", result.error.as_ref().map(|e| e.code.as_str()).unwrap_or("ok"));
        if let Some(e) = &result.error {
            span.record("error.code", e.code.as_str());
        }
        span.record("duration_ms", ms);
        self.status.in_progress = None;
        self.status.task = None;
        span.in_scope(|| {
            tracing::info!(
                batch = %self.job.id, bmc = %key, index = i, action = action.kind(), params = %action.loggable(),
                outcome = ?result.outcome, error = ?result.error, duration_ms = ms, "Action finished."
            );
            self.push(result);
        });
        Ok(())
    }

    /// The send gate of action `i`'s attempt; a non-idempotent action's
    /// `in_progress` marker waits in it for the action's first request.
    fn gate(&self, i: usize, action: &bmcfleet_schema::Action) -> ActionGate {
        // Plan mode (see `plan_result`): nothing that could take effect is sent.
        let marker = if action.is_idempotent() || self.job.batch.plan {
            Marker::None
        } else {
            let mut status = self.status.clone();
            status.in_progress = Some(i as u32);
            Marker::Pending { status: Box::new(status), revision: self.revision }
        };
        ActionGate {
            fence: self.fence.clone(),
            kv: self.shared.res.batches.clone(),
            worker: self.shared.worker_id.clone(),
            batch: self.job.id,
            marker: tokio::sync::Mutex::new(marker),
            refused: AtomicBool::new(false),
            index: i as u32,
            resume: self.status.task_resume(i as u32),
            progress: Progress {
                client: self.shared.client.clone(),
                subject: self.shared.subjects.events(&self.job.tenant, &self.job.id),
                headers: self.event_headers(),
                action: action.kind().to_owned(),
                publish: self.job.batch.events != EventsMode::Final,
            },
        }
    }

    /// Action `i`'s context: its deadline (the batch's, bounded by
    /// `--action-timeout`, or `--firmware-update-timeout` for an action that
    /// watches a BMC task), `gate` as its send gate and task log, and the
    /// worker's settle timeout, firmware images and quirk log (once per BMC).
    /// In plan mode, `plan` records the action's requests and no task log is kept.
    fn ctx(
        &self,
        i: usize,
        action: &bmcfleet_schema::Action,
        gate: &Arc<ActionGate>,
        plan: Option<&Arc<bmcfleet_provider::Plan>>,
    ) -> Ctx {
        let left = Duration::from_millis(self.job.deadline_at_ms.saturating_sub(now_ms()));
        let longest =
            if action.watches_task() { self.shared.firmware_update_timeout } else { self.shared.action_timeout };
        let ctx = Ctx::new(Instant::now() + left.min(longest))
            .with_call(CallInfo {
                batch: self.job.id,
                index: i as u32,
                delivery: self.status.deliveries,
                worker: self.shared.worker_id.clone(),
            })
            .with_gate(gate.clone())
            .with_settle(Some(self.shared.power_settle))
            .with_images(self.shared.firmware_images.clone())
            .with_quirks(self.shared.quirks.for_bmc(&self.job.key()));
        match plan {
            Some(plan) => ctx.with_plan(plan.clone()),
            None => ctx.with_tasks(gate.clone()),
        }
    }

    /// Action `i`'s result from its attempt's outcome.
    fn result(
        &self,
        i: usize,
        action: &bmcfleet_schema::Action,
        outcome: Result<Option<bmcfleet_schema::ActionData>, ProviderError>,
        provider: Option<String>,
        ms: u64,
    ) -> ActionResult {
        match outcome {
            Ok(data) => ActionResult::ok(i as u32, action.kind(), provider, data, ms),
            // A call cut short by the batch deadline is the deadline's doing.
            Err(e) if e.code == ErrorCode::Timeout && now_ms() >= self.job.deadline_at_ms => ActionResult::err(
                i as u32,
                action.kind(),
                provider,
                ErrorBody::new(
                    ErrorCode::DeadlineExceeded,
                    format!("the batch deadline passed during the action ({})", e.message),
                ),
                ms,
            ),
            Err(e) => ActionResult::err(i as u32, action.kind(), provider, e.into(), ms),
        }
    }

    /// A registered machine's certificate read (or replaced) by a batch
    /// refreshes its expiry in the observed state.
    async fn observe_certificate(&self, result: &ActionResult) {
        if let (Some(machine), Some(bmcfleet_schema::ActionData::BmcCertificate(c))) =
            (&self.job.batch.machine, &result.data)
        {
            if self.fence.valid() {
                self.shared.state.certificate(self.shared, machine, &self.job.tenant, c.not_after_unix).await;
            }
        }
    }

    /// A registered machine's power read by a batch refreshes its observed state.
    async fn observe_power(&self, result: &ActionResult) {
        if let (Some(machine), Some(bmcfleet_schema::ActionData::PowerState(power))) =
            (&self.job.batch.machine, &result.data)
        {
            if self.fence.valid() {
                let seen = crate::state::Observation::Answered {
                    power: Some(*power),
                    provider: result.provider.clone(),
                    readings: Default::default(),
                };
                self.shared.state.observe(self.shared, machine, &self.job.tenant, seen).await;
            }
        }
    }

    /// The action with its sealed parameters (if any) opened and put back;
    /// a parameter that does not open fails the action before anything is sent.
    fn with_secrets<'b>(
        &self,
        i: usize,
        action: &'b bmcfleet_schema::Action,
    ) -> Result<std::borrow::Cow<'b, bmcfleet_schema::Action>, ProviderError> {
        let mut params = self.job.sealed_params.iter().filter(|p| p.action as usize == i).peekable();
        if params.peek().is_none() {
            return Ok(std::borrow::Cow::Borrowed(action));
        }
        let mut action = action.clone();
        let batch = self.job.id.to_string();
        for p in params {
            let context = bmcfleet_common::sealing::Binding::param(&batch, i as u32, p.field.as_str(), 0).context;
            let value = self
                .shared
                .credentials
                .open_param(&p.sealed, &context)
                .map_err(|e| ProviderError::new(e.code, e.message).not_sent())?;
            if !action.set_secret_param(p.field, value.expose().to_owned()) {
                return Err(ProviderError::new(
                    ErrorCode::Internal,
                    format!("a sealed {} for an action without one", p.field.as_str()),
                )
                .not_sent());
            }
        }
        Ok(std::borrow::Cow::Owned(action))
    }

    /// An action's BMC work: refused before anything is sent when the
    /// worker's policies forbid it ([`Run::admissible`]), else its calls
    /// ([`Run::call`]) on the lane's one guarded path ([`crate::call`]:
    /// breaker, pacing, fence, retries), with the BMC's text scrubbed of
    /// the action's secrets.
    async fn attempt(
        &self,
        slot: &mut SessionSlot,
        guard: &mut BmcGuard,
        ctx: &Ctx,
        action: &bmcfleet_schema::Action,
        creds: &Result<bmcfleet_provider::ResolvedCredentials, ErrorBody>,
        gate: &ActionGate,
    ) -> Result<Option<bmcfleet_schema::ActionData>, ProviderError> {
        let creds = self.admissible(action, creds).await?;
        let key = self.job.key();
        let protocol = self.target.protocol.to_string();
        let call = Call { bmc: &key, purpose: Purpose::Action(action), protocol: &protocol, deadline: ctx.deadline };
        let attempt = ActionCall { run: self, ctx, action, creds, protocol: &protocol };
        crate::call::guarded(self.shared, guard, slot, call, gate, attempt).await
    }

    /// What this worker refuses to send whatever the gateway admitted (the
    /// raw policy, firmware updates, the login account, another machine's
    /// address), and the credentials to log in with; every refusal is
    /// before anything is sent.
    async fn admissible<'c>(
        &self,
        action: &bmcfleet_schema::Action,
        creds: &'c Result<bmcfleet_provider::ResolvedCredentials, ErrorBody>,
    ) -> Result<&'c bmcfleet_provider::ResolvedCredentials, ProviderError> {
        if matches!(action, bmcfleet_schema::Action::Raw(_)) || action.is_destructive() {
            self.shared.raw_policy.check(action.into()).map_err(|why| ProviderError::new(why.code(), why))?;
        }
        if let bmcfleet_schema::Action::FirmwareUpdate(update) = action {
            self.shared
                .firmware_update
                .check(&self.job.tenant)
                .map_err(|why| ProviderError::new(why.code(), format!("{why}; nothing was sent")).not_sent())?;
            if update.image_file.is_some() && self.shared.firmware_images.is_none() {
                return Err(ProviderError::new(
                    ErrorCode::FirmwareUpdateDisabled,
                    "this worker has no firmware image directory (--firmware-image-dir): push updates (image_file) are off; nothing was sent",
                )
                .not_sent());
            }
        }
        let creds = creds.as_ref().map_err(|e| ProviderError::new(e.code, e.message.clone()))?;
        // On a registered machine the account the worker logs in with is
        // the operator's (the machine's credential): a tenant's batch may
        // not create another of that name, change it or delete it, which
        // would lock the operator out of the machine (or, with IPMI
        // name-only lookup, let a second account of that name answer for
        // it). The operator's own machines' batches may. An ad hoc target's
        // login is the producer's own credential: its to change.
        if let Some(name) = action.user_changed() {
            let operators =
                self.job.batch.machine.is_some() && self.job.tenant != bmcfleet_schema::machine::DEFAULT_TENANT;
            if operators && name.trim().eq_ignore_ascii_case(creds.username.trim()) {
                return Err(ProviderError::new(
                    ErrorCode::TargetForbidden,
                    format!("user `{name}` is the account this worker logs in to the BMC with (the machine's credential): a tenant's batch may not create, change or delete it; nothing was sent"),
                )
                .not_sent());
            }
        }
        if let bmcfleet_schema::Action::NetworkSource(bmcfleet_schema::NetworkSourceOp::Static(s)) = action {
            if let Some(refusal) = self.shared.targets.static_address_refusal(self.job, s.address).await {
                return Err(ProviderError::new(refusal.code, refusal.message).not_sent());
            }
        }
        Ok(creds)
    }

    /// One call: session set-up (when needed) and the action, in one `bmc.call` span.
    async fn call(
        &self,
        slot: &mut SessionSlot,
        ctx: &Ctx,
        action: &bmcfleet_schema::Action,
        creds: &bmcfleet_provider::ResolvedCredentials,
        protocol: &str,
        retry: u32,
    ) -> Result<Option<bmcfleet_schema::ActionData>, ProviderError> {
        // One span per call (session set-up and the provider's calls, which
        // open their own per-request spans beneath it); retries get their own.
        let span = tracing::info_span!(
            "bmc.call",
            otel.kind = "client",
            bmc = %self.job.key(),
            protocol = %protocol,
            provider = Empty,
            action = action.kind(),
            attempt = ctx.call.as_ref().map(|c| c.delivery).unwrap_or(0),
            retry,
            outcome = Empty,
            error.code = Empty,
        );
        let work = async {
            // A session that cannot be opened never carried the action.
            let session = slot
                .get(&self.shared.providers, ctx, &self.target, creds, false)
                .await
                .map_err(ProviderError::not_sent)?;
            tracing::Span::current().record("provider", session.provider());
            // What the session open sent is not the action's: "not sent"
            // is judged from the action's own first request on.
            if let Some(plan) = ctx.plan() {
                // A retried attempt's plan starts afresh.
                plan.restart();
            }
            bmcfleet_provider::perform(session, &ctx.for_attempt(), action).await
        }
        .instrument(span.clone());
        let left = ctx.deadline.saturating_duration_since(Instant::now());
        let started = Instant::now();
        let result = match tokio::time::timeout(left, work).await {
            Ok(r) => r,
            Err(_) => {
                // The provider overran its deadline: the session's state is
                // unknown, and its BMC is not answering: the logout is not
                // waited for (it would overrun the deadline by its own timeout).
                slot.close_in_background(self.fence.valid());
                let code =
                    if now_ms() >= self.job.deadline_at_ms { ErrorCode::DeadlineExceeded } else { ErrorCode::Timeout };
                Err(ProviderError::new(code, format!("no answer within {}", bmcfleet_schema::duration::format(left))))
            }
        };
        self.shared
            .metrics
            .bmc_call_seconds
            .get_or_create(&protocol_label(slot, protocol))
            .observe(started.elapsed().as_secs_f64());
        match &result {
            Ok(_) => span.record("outcome", "ok"),
            Err(e) => span.record("outcome", e.code.as_str()).record("error.code", e.code.as_str()),
        };
        result
    }

    async fn finish(&mut self) -> Result<(), Stop> {
        let state = self.status.finish(&self.shared.worker_id, now_ms()).state;
        self.record().await?;
        self.shared
            .metrics
            .batches_finished
            .get_or_create(&crate::metrics::StateLabels { state: format!("{state:?}").to_lowercase() })
            .inc();
        tracing::Span::current().record("state", tracing::field::debug(state));
        tracing::info!(batch = %self.job.id, bmc = %self.status.bmc, state = ?state, "Batch finished.");
        self.publish_final().await
    }

    /// Publish the stored final result durably (retried while the lease
    /// holds); a rollout's batch without waiting for the stream's
    /// acknowledgement ([`events::publish_unacked`]: its record has it).
    async fn publish_final(&mut self) -> Result<(), Stop> {
        let Some(result) = self.status.result.clone() else {
            return Ok(());
        };
        let mut ev = Event { batch: self.job.id, at_ms: now_ms(), event: EventKind::BatchFinished { result } };
        let headers = self.event_headers();
        let mut attempt = 0;
        loop {
            if !self.fence.valid() {
                return Err(Stop);
            }
            let (js, subjects, tenant) = (&self.shared.res.js, &self.shared.subjects, &self.job.tenant);
            let published = if self.job.record_at_claim {
                events::publish_unacked(&js.client(), subjects, tenant, &ev, Some(&headers)).await
            } else {
                events::publish(js, subjects, tenant, &ev, Some(&headers)).await
            };
            match published {
                Ok(()) => return Ok(()),
                // Sending it again cannot help: the result goes without its
                // actions' data (states and errors stay; the status record
                // has it all), and failing that, the batch is done without
                // its final event rather than its lane retrying forever.
                Err(e) if e.permanent => {
                    if without_data(&mut ev) {
                        tracing::warn!(batch = %self.job.id, error = %e, "The final result cannot be published whole; publishing it without its actions' data (the status record has it).");
                        continue;
                    }
                    tracing::error!(batch = %self.job.id, error = %e, "The final result cannot be published; the batch is done (its status record has the result).");
                    return Ok(());
                }
                Err(e) => {
                    tracing::warn!(batch = %self.job.id, error = %e, "Cannot publish the final result; retrying.");
                    pause(self.fence, Write::Ahead, attempt).await?;
                    attempt += 1;
                }
            }
        }
    }
}

/// A final event's result without its actions' data (states, errors and
/// timings stay); `false` when it had none to drop.
fn without_data(ev: &mut Event) -> bool {
    let EventKind::BatchFinished { result } = &mut ev.event else { return false };
    let mut dropped = false;
    for r in &mut result.results {
        dropped |= r.data.take().is_some();
    }
    dropped
}

#[cfg(test)]
mod scrub_tests {
    use super::*;
    use bmcfleet_schema::{Action, ActionData, EventLog, EventLogEntry, EventLogOp, Secret};

    #[test]
    fn a_final_event_loses_its_actions_data_once_and_keeps_the_rest() {
        use bmcfleet_schema::{ActionResult, BatchResult, BatchState, PowerState};
        let result = BatchResult {
            id: ulid::Ulid::new(),
            bmc: "v4-10-0-0-1".into(),
            state: BatchState::Succeeded,
            results: vec![ActionResult::ok(
                0,
                "power_status",
                Some("sim".into()),
                Some(ActionData::PowerState(PowerState::On)),
                3,
            )],
            worker: "w".into(),
            deliveries: 1,
            admitted_at_ms: 1,
            finished_at_ms: 2,
        };
        let mut ev = Event { batch: result.id, at_ms: 2, event: EventKind::BatchFinished { result } };
        assert!(without_data(&mut ev));
        let EventKind::BatchFinished { result } = &ev.event else { unreachable!() };
        assert_eq!(
            (result.results[0].data.as_ref(), result.results[0].action.as_str(), result.state),
            (None, "power_status", BatchState::Succeeded)
        );
        assert!(!without_data(&mut ev), "nothing left to drop: give up");
    }

    #[test]
    fn user_names_a_bmc_reads_back_have_no_control_characters() {
        use bmcfleet_schema::{UserInfo, UserOp};
        let creds =
            bmcfleet_provider::ResolvedCredentials { username: "admin".into(), password: Secret::new("hunter2-pw") };
        let user = |name: &str| UserInfo { id: "3".into(), name: name.into(), role: None, enabled: true };
        let data = ActionData::Users(vec![user("ops\n\u{1b}[2Jx"), user("admin")]);
        let ActionData::Users(users) = scrub_data(data, &Action::User(UserOp::List), &creds) else { unreachable!() };
        assert_eq!((users[0].name.as_str(), users[1].name.as_str()), ("ops  [2Jx", "admin"));
    }

    #[test]
    fn bmc_text_in_data_loses_the_login_password() {
        let creds =
            bmcfleet_provider::ResolvedCredentials { username: "admin".into(), password: Secret::new("hunter2-pw") };
        let entry = |m: &str| EventLogEntry { id: "1".into(), message: m.into(), ..EventLogEntry::default() };
        let data = ActionData::EventLog(EventLog {
            total: Some(2),
            entries: vec![entry("login failed: admin/hunter2-pw"), entry("fan ok")],
        });
        let ActionData::EventLog(log) = scrub_data(data, &Action::EventLog(EventLogOp::read()), &creds) else {
            unreachable!()
        };
        assert_eq!(log.entries[0].message, "login failed: admin/[redacted]");
        assert_eq!(log.entries[1].message, "fan ok");
    }

    /// A BMC may echo a media URL's secrets as it decoded them, re-encoded
    /// in its own way, or one query parameter alone: every form is removed.
    #[test]
    fn bmc_echoes_of_a_media_url_lose_its_credentials_and_signature_in_any_form() {
        use bmcfleet_schema::{MediaKind, VirtualMediaOp};
        let creds =
            bmcfleet_provider::ResolvedCredentials { username: "admin".into(), password: Secret::new("hunter2-pw") };
        let url = "https://media:p%40ss%3Aw%2Frd@img.example/x.iso?X-Amz-Signature=9f8e7d6c5b4a&sig=S1g%2Bv%2Fal&token=T0k+en";
        let action = Action::VirtualMedia(VirtualMediaOp::Insert { url: url.into(), media: MediaKind::Cd });
        for echo in [
            "mount failed: password p@ss:w/rd rejected",
            "cannot log in as media:p@ss:w/rd",
            "auth media:p%40ss%3Aw%2Frd failed",
            "bad password p%40ss%3aw%2frd",
            "fetching https://media:p@ss:w/rd@img.example/x.iso failed",
            "signature 9f8e7d6c5b4a expired",
            "sig S1g+v/al refused",
            "sig S1g%2Bv%2Fal refused",
            "sig S1g%2bv%2fal refused",
            "token T0k en unknown",
            "token T0k+en unknown",
        ] {
            let e = scrub(ProviderError::new(ErrorCode::BmcError, echo), &action, &creds);
            for secret in ["p@ss", "p%40ss", "9f8e7d6c5b4a", "S1g", "T0k"] {
                assert!(!e.message.contains(secret), "`{secret}` survives in {echo:?} -> {:?}", e.message);
            }
            assert!(e.message.contains("[redacted]"), "{echo:?} -> {:?}", e.message);
        }
        // A firmware ImageURI is scrubbed the same way.
        let fw = Action::FirmwareUpdate(bmcfleet_schema::FirmwareUpdate {
            image_uri: Some(url.into()),
            ..Default::default()
        });
        let e = scrub(
            ProviderError::new(ErrorCode::BmcError, "download of p@ss:w/rd with 9f8e7d6c5b4a failed"),
            &fw,
            &creds,
        );
        assert!(!e.message.contains("p@ss") && !e.message.contains("9f8e7d6c5b4a"), "{}", e.message);
    }
}
