//! The `submit` endpoint: decode, validate, seal, dedupe and queue a batch,
//! and (with `Bmcfleet-Wait: true`) wait for its result.

use crate::requester::Requester;
use crate::service::{error, header, truthy, Gateway};
use async_nats::jetstream::context::PublishErrorKind;
use async_nats::HeaderMap;
use bmcfleet_common::runtime::now_ms;
use bmcfleet_common::sealing::Binding;
use bmcfleet_common::status::{self, StatusError};
use bmcfleet_common::telemetry;
use bmcfleet_schema::audit::AuditEvent;
use bmcfleet_schema::subject::{CONTENT_TYPE, WAIT_HEADER};
use bmcfleet_schema::validate::decode_batch;
use bmcfleet_schema::{
    Accepted, BatchId, BatchStatus, Credentials, Encoding, ErrorBody, ErrorCode, Event, EventKind, Job, Reply,
    SealedParam,
};
use futures::StreamExt;
use std::time::Duration;
use tracing::field::Empty;
use tracing::Instrument;

/// What admission produced: the queued job, the reply, and (when waiting) the results subscription.
struct Admission {
    job: Job,
    accepted: Accepted,
    events: Option<async_nats::Subscriber>,
}

/// How long a submit whose id JetStream already holds waits for that
/// batch's status record (written by its own admission right after the job,
/// or by the worker that claims it).
const DUPLICATE_RECORD_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Another tenant's batch holds the id: refused without saying anything about it.
fn id_taken() -> Reply {
    error(ErrorCode::InvalidField, "id: this batch id cannot be used; leave it out or choose another")
}

impl Gateway {
    /// Every admission check `batch` would meet for `who` (decoding,
    /// validation, raw policy, target and tenant rights, firmware policy),
    /// nothing queued: a rollout checks each machine's batch at submit.
    /// Returns the tenant the batch would run for.
    pub(crate) async fn preflight(&self, batch: &bmcfleet_schema::Batch, who: &Requester) -> Result<String, Reply> {
        let bytes = Encoding::MessagePack
            .encode(batch)
            .map_err(|e| error(ErrorCode::Internal, format!("cannot encode the batch: {e}")))?;
        let mut batch =
            decode_batch(&bytes, Encoding::MessagePack, &self.limits).map_err(|e| Reply::Error(e.into()))?;
        let (_, tenant) = self.target(&mut batch, who).await?;
        bmcfleet_schema::validate::check_firmware_updates(&batch, &tenant, &self.limits.firmware_update)
            .map_err(|e| Reply::Error(e.into()))?;
        Ok(tenant)
    }

    /// Validate, queue, and reply `Accepted` (or the final result when the
    /// request carries `Bmcfleet-Wait: true`). Admission runs in a
    /// `gateway.admit` span that continues the producer's trace (W3C
    /// `traceparent` in the request headers); the job carries its context.
    pub async fn submit(&self, enc: Encoding, payload: &[u8], headers: Option<&HeaderMap>, who: &Requester) -> Reply {
        self.submit_as(enc, payload, headers, who, false).await
    }

    /// [`Gateway::submit`]; `record_at_claim`: a rollout's driver queues a
    /// machine's batch, and no `queued` status record is written (the
    /// rollout's record holds that state; see [`bmcfleet_schema::Job::record_at_claim`]).
    pub(crate) async fn submit_as(
        &self,
        enc: Encoding,
        payload: &[u8],
        headers: Option<&HeaderMap>,
        who: &Requester,
        record_at_claim: bool,
    ) -> Reply {
        let span = tracing::info_span!(
            "gateway.admit",
            otel.kind = "server",
            batch = Empty,
            bmc = Empty,
            protocol = Empty,
            actions = Empty,
            subject = Empty,
            duplicate = Empty,
            outcome = Empty,
            error.code = Empty,
        );
        telemetry::set_parent(&span, headers);
        let started = std::time::Instant::now();
        let admission = match self.admit(enc, payload, headers, who, record_at_claim).instrument(span.clone()).await {
            Ok(a) => a,
            Err(reply) => {
                if let Reply::Error(e) = &reply {
                    span.record("outcome", "rejected");
                    span.record("error.code", e.code.as_str());
                    self.metrics.rejected(e.code);
                }
                return reply;
            }
        };
        span.record("outcome", "accepted");
        self.metrics.admit_seconds.observe(started.elapsed().as_secs_f64());
        self.metrics
            .admitted
            .get_or_create(&crate::metrics::Admitted {
                protocol: admission.job.target.protocol.to_string(),
                duplicate: admission.accepted.duplicate.to_string(),
            })
            .inc();
        drop(span);
        let Admission { job, accepted, events } = admission;
        let id = job.id;
        let Some(mut events) = events else { return Reply::Accepted(accepted) };

        // Waiting on a duplicate: its final result may have been stored before
        // we subscribed. A batch queued just now cannot have finished before
        // the subscription (made before publishing), so only duplicates look.
        if accepted.duplicate {
            if let Ok(Some(v)) =
                status::load(&self.res.batches, &id).await.map(|v| v.filter(|v| v.status.tenant == job.tenant))
            {
                if let (true, Some(r)) = (v.status.state.is_final(), v.status.result) {
                    return Reply::Result(r);
                }
            }
        }
        // No worker owns the partition: waiting would only end at the
        // deadline. Said at once; the batch stays queued for the next owner.
        let partition = bmcfleet_schema::ordering_key(job.batch.machine.as_deref(), &job.target.address)
            .partition(self.subjects.partitions);
        if let Some(unowned) = self.ownership.unowned(partition).await {
            let _ = events.unsubscribe().await;
            tracing::info!(batch = %id, partition, reason = %unowned.message, "Waiting submit answered at once: no owner.");
            return Reply::Accepted(Accepted { unowned: Some(unowned), ..accepted });
        }
        let remaining = Duration::from_millis(job.deadline_at_ms.saturating_sub(now_ms()));
        // A little grace so the worker's own deadline_exceeded result wins the race.
        let limit = remaining.min(self.max_wait) + Duration::from_secs(2);
        let finished = async {
            while let Some(msg) = events.next().await {
                if let Ok(ev) = Encoding::MessagePack.decode::<Event>(&msg.payload) {
                    if let EventKind::BatchFinished { result } = ev.event {
                        return Some(result);
                    }
                }
            }
            None
        };
        let outcome = tokio::select! {
            outcome = tokio::time::timeout(limit, finished) => outcome,
            _ = self.stopping.cancelled() => {
                let _ = events.unsubscribe().await;
                return error(ErrorCode::Unavailable, format!("the gateway is stopping; batch {id} stays queued: query its status"));
            }
        };
        let _ = events.unsubscribe().await;
        match outcome {
            Ok(Some(result)) => Reply::Result(result),
            Ok(None) => error(ErrorCode::Unavailable, "lost the result subscription; query status"),
            Err(_) => error(
                ErrorCode::Timeout,
                format!(
                    "batch {id} is still queued or running after {}; query status",
                    bmcfleet_schema::duration::format(limit)
                ),
            ),
        }
    }

    /// Decode, validate, dedupe and queue (durably) one batch.
    async fn admit(
        &self,
        enc: Encoding,
        payload: &[u8],
        headers: Option<&HeaderMap>,
        who: &Requester,
        record_at_claim: bool,
    ) -> Result<Admission, Reply> {
        let mut batch = decode_batch(payload, enc, &self.limits).map_err(|e| Reply::Error(e.into()))?;
        let (mut target, tenant) = self.target(&mut batch, who).await?;
        bmcfleet_schema::validate::check_firmware_updates(&batch, &tenant, &self.limits.firmware_update)
            .map_err(|e| Reply::Error(e.into()))?;
        let wait = truthy(header(headers, WAIT_HEADER));
        let id: BatchId = *batch.id.get_or_insert_with(ulid::Ulid::new);
        let key = bmcfleet_schema::ordering_key(batch.machine.as_deref(), &target.address);
        let subject = self.subjects.job(&tenant, &key);
        let admitted_at_ms = now_ms();
        let deadline = batch.deadline.unwrap_or(self.limits.default_deadline);
        let deadline_at_ms = admitted_at_ms + deadline.as_millis() as u64;
        // Inline passwords never reach the job stream: seal them for the
        // workers, bound to this target and to the batch's deadline.
        if let Credentials::Inline { username, password } = &target.credentials {
            let Some(sealer) = &self.seal_to else {
                return Err(error(
                    ErrorCode::InlineCredentialsDisabled,
                    "this deployment accepts no inline credentials: name a registered machine",
                ));
            };
            let binding = Binding::target(&key, deadline_at_ms);
            let sealed =
                sealer.seal(username, password, &binding).map_err(|e| error(ErrorCode::Internal, e.to_string()))?;
            target.credentials = Credentials::Sealed(sealed);
        }
        let sealed_params = self.seal_params(&mut batch, &id.to_string(), deadline_at_ms).map_err(Reply::Error)?;
        let span = tracing::Span::current();
        span.record("batch", tracing::field::display(id));
        span.record("bmc", tracing::field::display(&key));
        span.record("protocol", tracing::field::display(target.protocol));
        span.record("actions", batch.actions.len());
        span.record("subject", subject.as_str());
        let by_operator = *who == Requester::Operator;
        let job = Job {
            id,
            admitted_at_ms,
            deadline_at_ms,
            batch,
            target,
            tenant,
            sealed_params,
            by_operator,
            record_at_claim,
        };

        // Subscribed before publishing: a batch queued just now cannot finish before it.
        let mut events = None;
        if wait {
            match self.client.subscribe(self.subjects.events(&job.tenant, &id)).await {
                Ok(s) => events = Some(s),
                Err(e) => return Err(error(ErrorCode::Unavailable, format!("cannot subscribe to results: {e}"))),
            }
        }
        // Dedupe without a read first: JetStream's `Nats-Msg-Id` within its
        // window, the status record's create past it (see `publish`).
        let accepted = self.publish(&job, &subject, headers).await?;
        span.record("duplicate", accepted.duplicate);
        if !accepted.duplicate {
            let what = AuditEvent::BatchAdmitted {
                batch: id,
                tenant: job.tenant.clone(),
                target: key.to_string(),
                machine: job.batch.machine.clone(),
                actions: job.batch.actions.iter().map(|a| a.kind().to_owned()).collect(),
                plan: job.batch.plan,
            };
            let record = crate::requester::audit_record(job.admitted_at_ms, who, what, headers);
            self.audit.record(self.subjects.audit_batch(&job.tenant), record).await;
        }
        // Action kinds only: parameters may carry secrets (raw data, media URLs, new passwords).
        let kinds: Vec<&str> = job.batch.actions.iter().map(|a| a.kind()).collect();
        tracing::info!(
            batch = %id, bmc = %key, machine = job.batch.machine.as_deref().unwrap_or("-"), protocol = %job.target.protocol,
            subject = %subject, seq = accepted.stream_sequence, duplicate = accepted.duplicate,
            deadline_ms = deadline.as_millis() as u64, on_error = ?job.batch.on_error, actions = ?kinds,
            credentials = job.target.credentials.kind(), "Batch admitted."
        );
        Ok(Admission { job, accepted, events })
    }

    /// Take every secret parameter (new users' passwords, media URLs with
    /// credentials or signed queries, raw request data and bodies) out of
    /// the actions, sealed to the
    /// workers and bound to this batch, action and field. Without a workers'
    /// key (`--workers-public-key`) they stay in the job (warned at start).
    fn seal_params(
        &self,
        batch: &mut bmcfleet_schema::Batch,
        id: &str,
        expires_at_ms: u64,
    ) -> Result<Vec<SealedParam>, ErrorBody> {
        let Some(sealer) = &self.params_sealer else { return Ok(vec![]) };
        let mut out = vec![];
        for (i, action) in batch.actions.iter_mut().enumerate() {
            let Some((field, value)) = action.secret_param() else { continue };
            let binding = Binding::param(id, i as u32, field.as_str(), expires_at_ms);
            let sealed = sealer
                .seal("", &bmcfleet_schema::Secret::new(value), &binding)
                .map_err(|e| ErrorBody::new(ErrorCode::Internal, e.to_string()))?;
            action.hide_secret_param();
            out.push(SealedParam { action: i as u32, field, sealed });
        }
        Ok(out)
    }

    async fn publish(&self, job: &Job, subject: &str, req_headers: Option<&HeaderMap>) -> Result<Accepted, Reply> {
        let body = Encoding::MessagePack
            .encode(job)
            .map_err(|e| error(ErrorCode::Internal, format!("cannot encode the job: {e}")))?;
        let mut h = HeaderMap::new();
        h.insert(async_nats::header::NATS_MESSAGE_ID, job.id.to_string().as_str());
        h.insert(CONTENT_TYPE, Encoding::MessagePack.content_type());
        // The admit span's context when spans are exported, else the producer's unchanged.
        telemetry::merge(&mut h, &telemetry::trace_headers(&tracing::Span::current(), req_headers));
        let published = async { self.res.js.publish_with_headers(subject.to_owned(), h, body.into()).await?.await };
        let ack = match published.await {
            Ok(ack) => ack,
            // A full queue still answers a batch admitted before as the duplicate it is.
            Err(e) if per_bmc_cap_reached(&e) => {
                let full = error(
                    ErrorCode::BmcQueueFull,
                    format!("{} already has as many batches queued as this deployment allows (--max-queued-per-bmc); nothing was stored: retry once some have run", job.key()),
                );
                return self.known(job, subject, 0).await?.ok_or(full);
            }
            Err(e) => {
                let code = match e.kind() {
                    PublishErrorKind::MaxPayloadExceeded => ErrorCode::TooLarge,
                    _ => ErrorCode::Unavailable,
                };
                return Err(error(code, format!("could not queue the batch: {e}")));
            }
        };
        if ack.duplicate && job.record_at_claim {
            // Queued before (a rollout's driver submits again after a
            // takeover): there may be no record yet, and none is waited for.
            // A record of another tenant means the id is taken.
            let known = self.known(job, subject, ack.sequence).await?;
            return Ok(known.unwrap_or_else(|| accepted(job, subject, ack.sequence, true)));
        }
        if ack.duplicate {
            // JetStream already held a job of this id, whose record we had
            // not seen: it is its own admission's (or its worker's) to
            // write, and may be another tenant's batch. Only that record
            // says whose, so this answer waits for it; without one, saying
            // "duplicate" would claim a batch nobody may have queued for us.
            return match status::wait(&self.res.batches, &job.id, DUPLICATE_RECORD_WAIT).await {
                Ok(Some(v)) if v.status.tenant != job.tenant => Err(id_taken()),
                Ok(Some(v)) => Ok(accepted(job, subject, v.status.stream_sequence.unwrap_or(ack.sequence), true)),
                Ok(None) => Err(error(
                    ErrorCode::Unavailable,
                    "a batch of this id is being queued and has no status record yet; nothing new was stored: retry with the same id shortly",
                )),
                Err(e) => Err(error(ErrorCode::Unavailable, format!("cannot read batch status: {e}"))),
            };
        }
        // A rollout's batch: the worker creates the record at its claim.
        let created = match job.record_at_claim {
            true => Ok(0),
            false => status::create(&self.res.batches, &BatchStatus::queued(job, ack.sequence, now_ms())).await,
        };
        match created {
            Ok(_) => {}
            // A record exists: the worker's for this very job (it was
            // faster), or an earlier admission's of this id past the
            // JetStream dedupe window. The job queued just now then never
            // runs: the worker runs a job only into its own admission's
            // record (`admitted_at_ms`), and leaves another tenant's alone.
            Err(StatusError::Conflict) => match status::load(&self.res.batches, &job.id).await {
                Ok(Some(v)) if v.status.tenant != job.tenant => return Err(id_taken()),
                Ok(Some(v)) if v.status.admitted_at_ms != job.admitted_at_ms => {
                    tracing::info!(batch = %job.id, seq = ack.sequence, "A batch id admitted before, past the dedupe window: answered duplicate; the worker will leave the copy just queued.");
                    return Ok(accepted(job, subject, v.status.stream_sequence.unwrap_or(ack.sequence), true));
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(batch = %job.id, error = %e, "Cannot read the status record a worker wrote first.")
                }
            },
            Err(e) => tracing::warn!(batch = %job.id, error = %e, "Cannot record queued status; the worker will."),
        }
        Ok(accepted(job, subject, ack.sequence, false))
    }

    /// The answer to a batch whose id has a status record already: a
    /// duplicate of the requester's own batch (at the record's stream
    /// sequence, else `seq`), another tenant's id refused, `None` when
    /// there is no record.
    async fn known(&self, job: &Job, subject: &str, seq: u64) -> Result<Option<Accepted>, Reply> {
        match status::load(&self.res.batches, &job.id).await {
            Ok(Some(v)) if v.status.tenant != job.tenant => Err(id_taken()),
            Ok(Some(v)) => Ok(Some(accepted(job, subject, v.status.stream_sequence.unwrap_or(seq), true))),
            Ok(None) => Ok(None),
            Err(e) => Err(error(ErrorCode::Unavailable, format!("cannot read batch status: {e}"))),
        }
    }
}

/// The answer to `job` queued at `stream_sequence` on `subject`.
fn accepted(job: &Job, subject: &str, stream_sequence: u64, duplicate: bool) -> Accepted {
    Accepted { id: job.id, stream_sequence, duplicate, subject: subject.to_owned(), unowned: None }
}

/// Whether JetStream refused a job because its BMC's subject holds the most
/// messages allowed (`max_messages_per_subject` with discard-new per subject).
fn per_bmc_cap_reached(e: &async_nats::jetstream::context::PublishError) -> bool {
    let Some(js) = std::error::Error::source(e).and_then(|s| s.downcast_ref::<async_nats::jetstream::Error>()) else {
        return false;
    };
    js.error_code() == async_nats::jetstream::ErrorCode::STREAM_STORE_FAILED
        && js.to_string().to_ascii_lowercase().contains("maximum messages per subject")
}
