//! Request handlers: submit, status, cancel.

use async_nats::jetstream::context::PublishErrorKind;
use async_nats::service::Request;
use async_nats::HeaderMap;
use bmcfleet_common::events;
use bmcfleet_common::registry::{Lookup, Registry};
use bmcfleet_common::runtime::now_ms;
use bmcfleet_common::sealing::Binding;
use bmcfleet_common::status::{self, StatusError};
use bmcfleet_common::streams::Resources;
use bmcfleet_common::telemetry;
use bmcfleet_schema::audit::{AuditEvent, AuditRecord};
use bmcfleet_schema::lifecycle::Cancel;
use bmcfleet_schema::subject::{CONTENT_TYPE, REQUEST_INFO_HEADER, WAIT_HEADER};
use bmcfleet_schema::validate::{check_target, decode_batch};
use bmcfleet_schema::{
    Accepted, BatchId, BatchStatus, BmcTarget, Credentials, Encoding, ErrorBody, ErrorCode, Event, EventKind,
    IdRequest, Job, Limits, Reply, SealedParam, Subjects,
};
use futures::StreamExt;
use std::sync::Arc;
use std::time::Duration;
use tracing::field::Empty;
use tracing::Instrument;

/// Trace-context headers read from a request; the job carries the admit span's context.
pub const TRACE_HEADERS: [&str; 2] = telemetry::TRACE_HEADERS;

#[derive(Clone, Copy, Debug)]
pub enum Endpoint {
    Submit,
    Status,
    Cancel,
}

/// Shared state of the request handlers.
pub struct Gateway {
    client: async_nats::Client,
    res: Resources,
    subjects: Subjects,
    limits: Limits,
    /// The machine registry (a watched copy: no round trip per batch).
    registry: Registry,
    max_wait: Duration,
    metrics: crate::metrics::Metrics,
    /// The workers' public key when inline credentials are sealed (`None`: refused by `limits`).
    seal_to: Option<bmcfleet_common::sealing::Sealer>,
    /// Audit records of admitted batches, written in few messages.
    audit: bmcfleet_common::audit::Batcher,
    /// The workers' public key for secret action parameters (whenever one is configured).
    params_sealer: Option<Arc<bmcfleet_common::sealing::Sealer>>,
    /// Cancelled when the gateway stops: waiting submits answer at once.
    stopping: tokio_util::sync::CancellationToken,
}

/// What admission produced: the queued job, the reply, and (when waiting) the results subscription.
struct Admission {
    job: Job,
    accepted: Accepted,
    events: Option<async_nats::Subscriber>,
}

/// Who sent a request: an operator (a client of the gateway's own NATS
/// account: no request-info header), or a tenant (another account, which
/// reaches the service through an import; nats-server names the account in
/// `Nats-Request-Info`, which the client cannot forge across the import).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Requester {
    Operator,
    Tenant(String),
}

impl Requester {
    /// From the request's headers; `Err` when the header is there but names
    /// no usable tenant (refused: never treated as an operator).
    pub fn of(headers: Option<&HeaderMap>) -> Result<Requester, String> {
        let Some(info) = header(headers, REQUEST_INFO_HEADER) else { return Ok(Requester::Operator) };
        let account = bmcfleet_schema::subject::request_account(info)?;
        if !bmcfleet_schema::machine::valid_name(&account) {
            return Err(format!(
                "the requesting NATS account `{}` is not a tenant name ({}); name tenant accounts that way",
                account.chars().take(64).collect::<String>(),
                bmcfleet_schema::machine::NAME_RULE
            ));
        }
        Ok(Requester::Tenant(account))
    }

    /// Whose share of the gateway's budgets its requests take (`budget`):
    /// `""` for the operator's own account, else the tenant. (A request
    /// that names no usable tenant shares `"?"`; it is refused anyway.)
    pub fn budget_key(who: &Result<Requester, String>) -> &str {
        match who {
            Ok(Requester::Operator) => "",
            Ok(Requester::Tenant(t)) => t,
            Err(_) => "?",
        }
    }

    /// Whether this requester may see a batch of `tenant`.
    fn sees(&self, tenant: &str) -> bool {
        match self {
            Requester::Operator => true,
            Requester::Tenant(t) => t == tenant,
        }
    }
}

fn header<'a>(headers: Option<&'a HeaderMap>, name: &str) -> Option<&'a str> {
    headers.and_then(|h| h.get(name)).map(|v| v.as_str())
}

fn truthy(v: Option<&str>) -> bool {
    matches!(v.map(|s| s.trim().to_ascii_lowercase()).as_deref(), Some("1" | "true" | "yes" | "on"))
}

/// Longest refusal message the `Nats-Service-Error` header carries (the
/// reply's body carries it whole).
const MAX_ERROR_HEADER: usize = 1024;

/// A refusal's message as a header value and a log line: control
/// characters (line breaks above all: a header value cannot hold one, and
/// `HeaderValue::from` panics on them) as spaces, at most
/// [`MAX_ERROR_HEADER`] bytes. A message may quote what a producer sent
/// (an unknown field, a duration, an address), line breaks included.
fn one_line(message: &str) -> String {
    let mut out = String::with_capacity(message.len().min(MAX_ERROR_HEADER));
    for c in message.chars() {
        if out.len() + c.len_utf8() > MAX_ERROR_HEADER {
            break;
        }
        out.push(if c.is_control() { ' ' } else { c });
    }
    out
}

fn error(code: ErrorCode, message: impl Into<String>) -> Reply {
    Reply::Error(ErrorBody::new(code, message))
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
    pub fn new(
        client: async_nats::Client,
        res: Resources,
        subjects: Subjects,
        limits: Limits,
        registry: Registry,
        audit: bmcfleet_common::audit::Batcher,
        max_wait: Duration,
    ) -> Self {
        let metrics = crate::metrics::Metrics::register(&mut prometheus_client::registry::Registry::default());
        let seal_to = limits
            .sealing_key
            .as_deref()
            .map(|k| bmcfleet_common::sealing::Sealer::new(k).expect("validated at start"));
        Gateway {
            client,
            res,
            subjects,
            limits,
            registry,
            audit,
            max_wait,
            metrics,
            seal_to,
            params_sealer: None,
            stopping: Default::default(),
        }
    }

    /// Seal secret action parameters to the workers' public key `key` (`X...`).
    pub fn with_params_key(mut self, key: Option<&str>) -> Result<Self, bmcfleet_common::sealing::KeyError> {
        self.params_sealer = key.map(bmcfleet_common::sealing::Sealer::new).transpose()?.map(Arc::new);
        Ok(self)
    }

    /// Count admissions and refusals on these (registered) metrics.
    pub fn with_metrics(mut self, metrics: crate::metrics::Metrics) -> Self {
        self.metrics = metrics;
        self
    }

    /// Cancel to make every waiting submit answer now (the gateway stops).
    pub fn stopping(&self) -> tokio_util::sync::CancellationToken {
        self.stopping.clone()
    }

    /// Whether a request is a submit that waits for the batch's result.
    pub fn waits(endpoint: Endpoint, request: &Request) -> bool {
        matches!(endpoint, Endpoint::Submit) && truthy(header(request.message.headers.as_ref(), WAIT_HEADER))
    }

    /// Answer `unavailable` at once (no capacity for this request now).
    pub async fn refuse(&self, endpoint: Endpoint, request: Request, why: String) {
        if matches!(endpoint, Endpoint::Submit) {
            self.metrics.rejected(ErrorCode::Unavailable);
        }
        let encoding = Encoding::from_content_type(header(request.message.headers.as_ref(), CONTENT_TYPE))
            .unwrap_or(Encoding::Json);
        self.respond(endpoint, request, encoding, error(ErrorCode::Unavailable, why)).await;
    }

    /// Handle one request of `who` (`Requester::of` its headers) and reply
    /// to it (always exactly one reply).
    pub async fn handle(&self, endpoint: Endpoint, request: Request, who: Result<Requester, String>) {
        let headers = request.message.headers.as_ref();
        let (encoding, reply) = match Encoding::from_content_type(header(headers, CONTENT_TYPE)) {
            Err(e) => {
                if matches!(endpoint, Endpoint::Submit) {
                    self.metrics.rejected(ErrorCode::Malformed);
                }
                (Encoding::Json, error(ErrorCode::Malformed, e.to_string()))
            }
            Ok(enc) => {
                let reply = match who {
                    Err(why) => error(ErrorCode::PermissionDenied, why),
                    Ok(who) => match endpoint {
                        Endpoint::Submit => self.submit(enc, &request.message.payload, headers, &who).await,
                        Endpoint::Status => self.status(enc, &request.message.payload, &who).await,
                        Endpoint::Cancel => self.cancel(enc, &request.message.payload, &who).await,
                    },
                };
                (enc, reply)
            }
        };
        self.respond(endpoint, request, encoding, reply).await;
    }

    async fn respond(&self, endpoint: Endpoint, request: Request, encoding: Encoding, reply: Reply) {
        let mut out = HeaderMap::new();
        out.insert(CONTENT_TYPE, encoding.content_type());
        if let Reply::Error(e) = &reply {
            let line = one_line(&e.message);
            tracing::info!(endpoint = ?endpoint, code = %e.code, message = %line, "Request refused.");
            out.insert(async_nats::service::NATS_SERVICE_ERROR, line.as_str());
            out.insert(async_nats::service::NATS_SERVICE_ERROR_CODE, e.code.status().to_string().as_str());
        }
        let body = match encoding.encode(&reply) {
            Ok(b) => b,
            Err(e) => {
                tracing::error!(error = %e, "Cannot encode a reply.");
                return;
            }
        };
        if let Err(e) = request.respond_with_headers(Ok(body.into()), out).await {
            tracing::warn!(error = %e, "Cannot send a reply.");
        }
    }

    /// Validate, queue, and reply `Accepted` (or the final result when the
    /// request carries `Bmcfleet-Wait: true`). Admission runs in a
    /// `gateway.admit` span that continues the producer's trace (W3C
    /// `traceparent` in the request headers); the job carries its context.
    pub async fn submit(&self, enc: Encoding, payload: &[u8], headers: Option<&HeaderMap>, who: &Requester) -> Reply {
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
        let admission = match self.admit(enc, payload, headers, who).instrument(span.clone()).await {
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
        let job = Job { id, admitted_at_ms, deadline_at_ms, batch, target, tenant, sealed_params, by_operator };

        // A batch id seen before (even past the JetStream dedupe window) is not queued again.
        let known = status::load(&self.res.batches, &id)
            .await
            .map_err(|e| error(ErrorCode::Unavailable, format!("cannot read batch status: {e}")))?;
        let mut events = None;
        if wait {
            match self.client.subscribe(self.subjects.events(&job.tenant, &id)).await {
                Ok(s) => events = Some(s),
                Err(e) => return Err(error(ErrorCode::Unavailable, format!("cannot subscribe to results: {e}"))),
            }
        }
        let accepted = match known {
            // Another tenant's id: refused without saying anything about that batch.
            Some(v) if v.status.tenant != job.tenant => return Err(id_taken()),
            Some(v) => Accepted {
                id,
                stream_sequence: v.status.stream_sequence.unwrap_or(0),
                duplicate: true,
                subject: subject.clone(),
            },
            None => self.publish(&job, &subject, headers).await?,
        };
        span.record("duplicate", accepted.duplicate);
        if !accepted.duplicate {
            let actor = match who {
                Requester::Operator => "operator".to_owned(),
                Requester::Tenant(t) => format!("tenant:{t}"),
            };
            let what = AuditEvent::BatchAdmitted {
                batch: id,
                tenant: job.tenant.clone(),
                target: key.to_string(),
                machine: job.batch.machine.clone(),
                actions: job.batch.actions.iter().map(|a| a.kind().to_owned()).collect(),
            };
            let record = AuditRecord { at_ms: job.admitted_at_ms, actor, what };
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

    /// Where the batch goes: its machine's registered target, or the ad hoc
    /// target (taken out of the batch: the job carries it once), which may
    /// not be a registered machine's address.
    async fn target(&self, batch: &mut bmcfleet_schema::Batch, who: &Requester) -> Result<(BmcTarget, String), Reply> {
        let not_found =
            |name: &str| error(ErrorCode::MachineNotFound, format!("no machine named `{name}` is registered"));
        let (target, tenant) = match (&batch.machine, batch.bmc.take()) {
            (Some(name), _) => match self.registry.get_fresh(name).await {
                // Another tenant's machine answers exactly like a missing one.
                Lookup::Found(m) if !who.sees(&m.tenant) => return Err(not_found(name)),
                Lookup::Found(m) => (m.target(), m.tenant.clone()),
                Lookup::NotFound => return Err(not_found(name)),
                Lookup::Invalid(_) | Lookup::Conflict(_) if *who != Requester::Operator => return Err(not_found(name)),
                Lookup::Invalid(why) => {
                    return Err(error(
                        ErrorCode::MachineNotFound,
                        format!("the record of machine `{name}` is unusable: {why}"),
                    ))
                }
                Lookup::Conflict(why) => return Err(error(ErrorCode::Conflict, why)),
            },
            (None, Some(mut target)) => {
                // One spelling per BMC: one ordering key, queue and per-BMC cap.
                target.address = target.address.canonical();
                if let Some(machine) = self.registry.machine_at(&target.address) {
                    let message = match who {
                        Requester::Operator => format!(
                            "{} is registered as machine `{machine}`: name the machine instead",
                            target.address.host_string()
                        ),
                        Requester::Tenant(_) => format!(
                            "{} is a registered machine's address: name the machine instead",
                            target.address.host_string()
                        ),
                    };
                    return Err(error(ErrorCode::TargetForbidden, message));
                }
                let tenant = match who {
                    Requester::Operator => bmcfleet_schema::machine::DEFAULT_TENANT.to_owned(),
                    Requester::Tenant(t) => t.clone(),
                };
                (target, tenant)
            }
            (None, None) => return Err(error(ErrorCode::InvalidField, "the batch names no target")),
        };
        check_target(&target, &self.limits).map_err(|e| Reply::Error(e.into()))?;
        // A BMC given another registered machine's address would be sent
        // that machine's credentials by the worker (checked there again).
        for (i, action) in batch.actions.iter().enumerate() {
            if let bmcfleet_schema::Action::NetworkSource(bmcfleet_schema::NetworkSourceOp::Static(s)) = action {
                if let Some(other) =
                    self.registry.machine_at_ip(s.address.into()).filter(|m| Some(m) != batch.machine.as_ref())
                {
                    let whose = match who {
                        Requester::Operator => format!("registered machine `{other}`"),
                        Requester::Tenant(_) => "a registered machine".to_owned(),
                    };
                    return Err(error(
                        ErrorCode::TargetForbidden,
                        format!("actions[{i}]: {} is the address of {whose}: a BMC may not be given another machine's address", s.address),
                    ));
                }
            }
        }
        Ok((target, tenant))
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
        let ack = async {
            self.res.js.publish_with_headers(subject.to_owned(), h, body.into()).await?.await
        }
        .await
        .map_err(|e| {
            if per_bmc_cap_reached(&e) {
                return error(
                    ErrorCode::BmcQueueFull,
                    format!("{} already has as many batches queued as this deployment allows (--max-queued-per-bmc); nothing was stored: retry once some have run", job.key()),
                );
            }
            let code = match e.kind() {
                PublishErrorKind::MaxPayloadExceeded => ErrorCode::TooLarge,
                _ => ErrorCode::Unavailable,
            };
            error(code, format!("could not queue the batch: {e}"))
        })?;
        if ack.duplicate {
            // JetStream already held a job of this id, whose record we had
            // not seen: it is its own admission's (or its worker's) to
            // write, and may be another tenant's batch. Only that record
            // says whose, so this answer waits for it; without one, saying
            // "duplicate" would claim a batch nobody may have queued for us.
            return match status::wait(&self.res.batches, &job.id, DUPLICATE_RECORD_WAIT).await {
                Ok(Some(v)) if v.status.tenant != job.tenant => Err(id_taken()),
                Ok(Some(v)) => Ok(Accepted { id: job.id, stream_sequence: v.status.stream_sequence.unwrap_or(ack.sequence), duplicate: true, subject: subject.to_owned() }),
                Ok(None) => Err(error(
                    ErrorCode::Unavailable,
                    "a batch of this id is being queued and has no status record yet; nothing new was stored: retry with the same id shortly",
                )),
                Err(e) => Err(error(ErrorCode::Unavailable, format!("cannot read batch status: {e}"))),
            };
        }
        let record = BatchStatus::queued(job, ack.sequence, now_ms());
        // The worker may already have written a newer record: creating fails then, which is right.
        match status::create(&self.res.batches, &record).await {
            Ok(_) | Err(StatusError::Conflict) => {}
            Err(e) => tracing::warn!(batch = %job.id, error = %e, "Cannot record queued status; the worker will."),
        }
        Ok(Accepted {
            id: job.id,
            stream_sequence: ack.sequence,
            duplicate: ack.duplicate,
            subject: subject.to_owned(),
        })
    }

    pub async fn status(&self, enc: Encoding, payload: &[u8], who: &Requester) -> Reply {
        let req: IdRequest = match enc.decode(payload) {
            Ok(r) => r,
            Err(e) => return error(ErrorCode::Malformed, format!("expected {{\"id\": \"<ULID>\"}}: {e}")),
        };
        match status::load(&self.res.batches, &req.id).await {
            // Another tenant's batch answers exactly like an unknown one.
            Ok(Some(v)) if who.sees(&v.status.tenant) => Reply::Status(v.status),
            Ok(Some(_)) => error(ErrorCode::NotFound, format!("no batch {} is known", req.id)),
            Ok(None) => error(ErrorCode::NotFound, format!("no batch {} is known", req.id)),
            Err(e) => error(ErrorCode::Unavailable, e.to_string()),
        }
    }

    /// Cancel a queued batch outright, or ask a running one to stop after its
    /// current action.
    pub async fn cancel(&self, enc: Encoding, payload: &[u8], who: &Requester) -> Reply {
        let req: IdRequest = match enc.decode(payload) {
            Ok(r) => r,
            Err(e) => return error(ErrorCode::Malformed, format!("expected {{\"id\": \"<ULID>\"}}: {e}")),
        };
        for _ in 0..16 {
            let v = match status::load(&self.res.batches, &req.id).await {
                Ok(Some(v)) if who.sees(&v.status.tenant) => v,
                Ok(_) => return error(ErrorCode::NotFound, format!("no batch {} is known", req.id)),
                Err(e) => return error(ErrorCode::Unavailable, e.to_string()),
            };
            let mut s = v.status;
            let now = now_ms();
            let queued = match s.cancel(now) {
                Err(state) => {
                    return error(ErrorCode::Conflict, format!("batch {} already finished ({state:?})", req.id))
                }
                Ok(outcome) => outcome == Cancel::Finished,
            };
            match status::update(&self.res.batches, &s, v.revision).await {
                Ok(_) => {
                    if let (true, Some(result)) = (queued, s.result.clone()) {
                        let ev = Event { batch: s.id, at_ms: now, event: EventKind::BatchFinished { result } };
                        if let Err(e) = events::publish(&self.res.js, &self.subjects, &s.tenant, &ev, None).await {
                            tracing::warn!(batch = %s.id, error = %e, "Cannot publish the cancellation event.");
                        }
                    }
                    tracing::info!(batch = %s.id, state = ?s.state, "Cancel requested.");
                    return Reply::Cancelled { id: s.id, state: s.state };
                }
                Err(StatusError::Conflict) => continue,
                Err(e) => return error(ErrorCode::Unavailable, e.to_string()),
            }
        }
        error(ErrorCode::Unavailable, "the batch status kept changing; try again")
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusal_headers_are_one_bounded_line() {
        assert_eq!(one_line("unknown field `x\r\nInjected: 1`"), "unknown field `x  Injected: 1`");
        assert_eq!(one_line("plain"), "plain");
        let long = "é".repeat(2000);
        let cut = one_line(&long);
        assert!(cut.len() <= MAX_ERROR_HEADER && cut.chars().all(|c| c == 'é'), "{}", cut.len());
        // What the header is built from never panics.
        let mut h = HeaderMap::new();
        h.insert(async_nats::service::NATS_SERVICE_ERROR, one_line("a\nb\u{0}c").as_str());
    }
}
