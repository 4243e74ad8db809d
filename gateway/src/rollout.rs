//! The rollout endpoints (`<service-prefix>.rollout.submit`, `.status`,
//! `.pause`, `.resume`, `.abort`, `.list`): admission of a rollout and the
//! operations on its record. Running it is [`crate::rollout_driver`]'s.
//!
//! A rollout is admitted like its batches would be, for the requester: the
//! selector is expanded in the registry copy against the requester's own
//! machines (another tenant's are invisible), and every machine's batch
//! meets every check a submit makes ([`Gateway::preflight`]) before
//! anything is stored. Then the spec and the machine list (in chunks), the
//! record, the `rollout_started` event and one audit record (with the
//! machine count) are written. Nothing runs here.

use crate::requester::Requester;
use crate::service::{error, header, Gateway};
use async_nats::service::Request;
use async_nats::HeaderMap;
use bmcfleet_common::rollouts::{self, RolloutStoreError, Store};
use bmcfleet_common::runtime::now_ms;
use bmcfleet_schema::audit::AuditEvent;
use bmcfleet_schema::rollout::{
    self, PartState, PartView, RolloutEvent, RolloutEventKind, RolloutIdRequest, RolloutListRequest, RolloutPart,
    RolloutRecord, RolloutRequest, RolloutSpec, RolloutState, RolloutStatusRequest, RolloutView,
};
use bmcfleet_schema::subject::CONTENT_TYPE;
use bmcfleet_schema::{Batch, Encoding, ErrorBody, ErrorCode, Reply};
use std::sync::Arc;

/// A rollout endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoint {
    Submit,
    Status,
    Pause,
    Resume,
    Abort,
    List,
}

impl Endpoint {
    pub const ALL: [Endpoint; 6] =
        [Endpoint::Submit, Endpoint::Status, Endpoint::Pause, Endpoint::Resume, Endpoint::Abort, Endpoint::List];

    /// Its name under the rollout group (`bmcfleet_schema::subject::ROLLOUT_ENDPOINTS`).
    pub fn name(self) -> &'static str {
        bmcfleet_schema::subject::ROLLOUT_ENDPOINTS[self as usize]
    }
}

/// Most rollouts `rollout.list` returns.
const LIST_LIMIT: usize = 1000;

/// The rollout endpoints' handlers.
pub struct Rollouts {
    gateway: Arc<Gateway>,
    store: Store,
}

fn store_error(e: RolloutStoreError) -> Reply {
    error(ErrorCode::Unavailable, format!("rollout store: {e}"))
}

fn not_found(id: &rollout::RolloutId) -> Reply {
    error(ErrorCode::NotFound, format!("no rollout {id} is known"))
}

/// The actor an audit record and a rollout record name.
pub fn actor(who: &Requester) -> String {
    crate::requester::actor(who)
}

/// The requester a rollout's batches are submitted as (its record's `requester`).
pub fn requester_of(actor: &str) -> Requester {
    match actor.strip_prefix("tenant:") {
        Some(t) => Requester::Tenant(t.to_owned()),
        None => Requester::Operator,
    }
}

/// How long a selector's expansion waits for the gateway's copy of the
/// registry to hold every write the bucket had stored.
const REGISTRY_CATCH_UP: std::time::Duration = std::time::Duration::from_secs(5);

/// Whether status record `s` is machine `machine`'s batch in a rollout of
/// `who`: a record under the machine's derived batch id that names another
/// machine, or a tenant the rollout's requester does not see, belongs to a
/// batch that took the id first, and is not the machine's outcome. (An
/// operator's rollout runs each batch for its machine's tenant.)
pub(crate) fn is_machines_batch(who: &Requester, machine: &str, s: &bmcfleet_schema::BatchStatus) -> bool {
    who.sees(&s.tenant) && s.bmc == bmcfleet_schema::BmcKey::machine(machine).to_string()
}

impl Rollouts {
    pub fn new(gateway: Arc<Gateway>, store: Store) -> Rollouts {
        Rollouts { gateway, store }
    }

    /// Handle one request and reply to it (always exactly one reply).
    pub async fn handle(&self, endpoint: Endpoint, request: Request, who: Result<Requester, String>) {
        let headers = request.message.headers.as_ref();
        let (encoding, reply) = match Encoding::from_content_type(header(headers, CONTENT_TYPE)) {
            Err(e) => (Encoding::Json, error(ErrorCode::Malformed, e.to_string())),
            Ok(enc) => {
                let reply = match who {
                    Err(why) => error(ErrorCode::PermissionDenied, why),
                    Ok(who) => self.dispatch(endpoint, enc, &request.message.payload, &who, headers).await,
                };
                (enc, reply)
            }
        };
        respond(endpoint, request, encoding, reply).await;
    }

    /// Answer `unavailable` at once (no capacity now).
    pub async fn refuse(&self, endpoint: Endpoint, request: Request, why: String) {
        let encoding = Encoding::from_content_type(header(request.message.headers.as_ref(), CONTENT_TYPE))
            .unwrap_or(Encoding::Json);
        respond(endpoint, request, encoding, error(ErrorCode::Unavailable, why)).await;
    }

    /// Answer one request of `who`; `headers` name who asked for the audit log.
    pub async fn dispatch(
        &self,
        endpoint: Endpoint,
        enc: Encoding,
        payload: &[u8],
        who: &Requester,
        headers: Option<&HeaderMap>,
    ) -> Reply {
        match endpoint {
            Endpoint::Submit => self.submit(enc, payload, who, headers).await,
            Endpoint::Status => self.status(enc, payload, who).await,
            Endpoint::Pause | Endpoint::Resume | Endpoint::Abort => {
                self.change(endpoint, enc, payload, who, headers).await
            }
            Endpoint::List => self.list(enc, payload, who).await,
        }
    }

    async fn submit(&self, enc: Encoding, payload: &[u8], who: &Requester, headers: Option<&HeaderMap>) -> Reply {
        let (res, subjects, limits, registry) = self.gateway.parts();
        if payload.len() > limits.max_message_bytes {
            return error(
                ErrorCode::TooLarge,
                format!("message is {} bytes; the limit is {}", payload.len(), limits.max_message_bytes),
            );
        }
        let req: RolloutRequest = match enc.decode(payload) {
            Ok(r) => r,
            Err(e) => return error(ErrorCode::Malformed, format!("expected a rollout request: {e}")),
        };
        if let Err(why) = rollout::check_request(&req) {
            return error(ErrorCode::InvalidField, why);
        }
        if let Some(d) = req.batch_deadline {
            if d.is_zero() || d > limits.max_deadline {
                return error(
                    ErrorCode::InvalidField,
                    format!(
                        "batch_deadline must be between 1ms and {}",
                        bmcfleet_schema::duration::format(limits.max_deadline)
                    ),
                );
            }
        }
        // (`Ulid::default()` is the nil id, not a fresh one.)
        let id = match req.id {
            Some(id) => id,
            None => ulid::Ulid::new(),
        };
        match self.store.load(&id).await {
            Ok(Some((r, _))) if who.sees(&r.tenant) => {
                return Reply::Rollout(RolloutView { rollout: r, parts: vec![], duplicate: true })
            }
            Ok(Some(_)) => {
                return error(
                    ErrorCode::InvalidField,
                    "id: this rollout id cannot be used; leave it out or choose another",
                )
            }
            Ok(None) => {}
            Err(e) => return store_error(e),
        }
        // The machine list, fixed now: the names as given, or the
        // requester's machines matching the selector, by name.
        let machines: Vec<String> = match &req.selector {
            Some(selector) => {
                // Every machine registered before this request, however
                // recently: the copy catches up with the bucket first.
                if !registry.caught_up(REGISTRY_CATCH_UP).await {
                    return error(
                        ErrorCode::Unavailable,
                        "the machine registry could not be read up to date; nothing was started: retry",
                    );
                }
                let mut names: Vec<String> = registry
                    .machines(|m| who.sees(&m.tenant) && rollout::selects(selector, &m.labels))
                    .iter()
                    .map(|m| m.name.clone())
                    .collect();
                names.sort();
                if names.is_empty() {
                    return error(ErrorCode::MachineNotFound, "no registered machine matches the selector");
                }
                if names.len() > rollout::MAX_MACHINES {
                    return error(
                        ErrorCode::InvalidField,
                        format!(
                            "the selector matches {} machines; a rollout names at most {}",
                            names.len(),
                            rollout::MAX_MACHINES
                        ),
                    );
                }
                names
            }
            None => {
                let mut seen = std::collections::HashSet::new();
                if let Some(twice) = req.machines.iter().find(|m| !seen.insert(m.as_str())) {
                    return error(ErrorCode::InvalidField, format!("machines: `{twice}` is named twice"));
                }
                req.machines.clone()
            }
        };
        // Each machine's batch, checked as a submit would check it.
        for (i, name) in machines.iter().enumerate() {
            let batch = Batch {
                // A rollout runs its batches (plan mode is a single batch's or bmcctl's fleet plan).
                plan: false,
                events: Default::default(),
                id: None,
                machine: Some(name.clone()),
                bmc: None,
                actions: req.actions.clone(),
                on_error: req.on_error,
                deadline: req.batch_deadline,
            };
            match self.gateway.preflight(&batch, who).await {
                Ok(_) => {}
                Err(Reply::Error(e)) => {
                    return Reply::Error(ErrorBody::new(e.code, format!("machines[{i}] ({name}): {}", e.message)))
                }
                Err(other) => return other,
            }
        }
        // A tenant's rollout is its own; an operator's is the default tenant's
        // (each batch still runs for its machine's tenant).
        let tenant = match who {
            Requester::Tenant(t) => t.clone(),
            Requester::Operator => bmcfleet_schema::machine::DEFAULT_TENANT.to_owned(),
        };
        let now = now_ms();
        let record = RolloutRecord::new(id, &req, &tenant, &actor(who), machines.len() as u32, now);
        let spec = RolloutSpec {
            actions: req.actions.clone(),
            on_error: req.on_error,
            batch_deadline: req.batch_deadline,
            plan: req.plan,
        };
        if let Err(e) = self.store.put_plan(&id, &spec, &machines).await {
            return store_error(e);
        }
        match self.store.create(&record).await {
            Ok(_) => {}
            // The same id submitted twice at once: the first one's record answers.
            Err(RolloutStoreError::Conflict) => {
                return match self.store.load(&id).await {
                    Ok(Some((r, _))) if who.sees(&r.tenant) => {
                        Reply::Rollout(RolloutView { rollout: r, parts: vec![], duplicate: true })
                    }
                    Ok(_) => error(
                        ErrorCode::InvalidField,
                        "id: this rollout id cannot be used; leave it out or choose another",
                    ),
                    Err(e) => store_error(e),
                }
            }
            Err(e) => return store_error(e),
        }
        let event = RolloutEvent {
            rollout: id,
            at_ms: now,
            event: RolloutEventKind::RolloutStarted { machines: record.machines, actions: record.actions.clone() },
        };
        if let Err(e) = rollouts::publish_event(&res.js, subjects, &tenant, &event, "0").await {
            tracing::warn!(rollout = %id, error = %e, "Cannot publish rollout_started.");
        }
        let what = AuditEvent::RolloutAdmitted {
            rollout: id,
            tenant: tenant.clone(),
            machines: record.machines,
            actions: record.actions.clone(),
        };
        self.gateway
            .audit()
            .record(subjects.audit_rollout(&tenant), crate::requester::audit_record(now, who, what, headers))
            .await;
        tracing::info!(
            rollout = %id, tenant = %tenant, machines = record.machines, max_parallel = record.max_parallel,
            canary = record.canary, actions = ?record.actions, "Rollout admitted."
        );
        Reply::Rollout(RolloutView { rollout: record, parts: vec![], duplicate: false })
    }

    async fn status(&self, enc: Encoding, payload: &[u8], who: &Requester) -> Reply {
        let req: RolloutStatusRequest = match enc.decode(payload) {
            Ok(r) => r,
            Err(e) => return error(ErrorCode::Malformed, format!("expected {{\"id\": \"<ULID>\"}}: {e}")),
        };
        let record = match self.store.load(&req.id).await {
            Ok(Some((r, _))) if who.sees(&r.tenant) => r,
            Ok(_) => return not_found(&req.id),
            Err(e) => return store_error(e),
        };
        let (res, _, _, _) = self.gateway.parts();
        let requester = requester_of(&record.requester);
        let end = req.from.saturating_add(req.limit.min(rollout::CHUNK)).min(record.machines);
        let mut parts = Vec::with_capacity(end.saturating_sub(req.from) as usize);
        let mut chunk: Option<(u32, Vec<String>)> = None;
        for index in req.from..end {
            let (c, at) = rollout::chunk_of(index);
            if chunk.as_ref().is_none_or(|(n, _)| *n != c) {
                match self.store.chunk(&req.id, c).await {
                    Ok(Some(names)) => chunk = Some((c, names)),
                    Ok(None) => return error(ErrorCode::Internal, format!("rollout {} lost its machine list", req.id)),
                    Err(e) => return store_error(e),
                }
            }
            let Some(machine) = chunk.as_ref().and_then(|(_, names)| names.get(at)).cloned() else { break };
            let batch = rollout::batch_id(req.id, index, &machine);
            let (state, error, plan) = if index >= record.next {
                (PartState::Pending, None, None)
            } else if record.in_flight.contains(&index) {
                (PartState::Running, None, None)
            } else {
                // A machine whose batch ran has its outcome in the batch's
                // status record; a refused one (or one finished by a release
                // that stored every outcome) has a part of its own.
                let status = match bmcfleet_common::status::load(&res.batches, &batch).await {
                    Ok(v) => v.filter(|v| is_machines_batch(&requester, &machine, &v.status)),
                    Err(e) => return error(ErrorCode::Unavailable, format!("cannot read batch status: {e}")),
                };
                match status.and_then(|v| RolloutPart::of_status(index, machine.clone(), batch, &v.status, record.plan))
                {
                    Some(p) => (p.outcome.into(), p.error, p.plan),
                    None => match self.store.part(&req.id, index).await {
                        Ok(Some(p)) => (p.outcome.into(), p.error, p.plan),
                        Ok(None) => (PartState::Running, None, None),
                        Err(e) => return store_error(e),
                    },
                }
            };
            parts.push(PartView { index, machine, batch, state, error, plan });
        }
        Reply::Rollout(RolloutView { rollout: record, parts, duplicate: false })
    }

    /// Pause, resume or abort: one compare-and-set of the record.
    async fn change(
        &self,
        endpoint: Endpoint,
        enc: Encoding,
        payload: &[u8],
        who: &Requester,
        headers: Option<&HeaderMap>,
    ) -> Reply {
        let req: RolloutIdRequest = match enc.decode(payload) {
            Ok(r) => r,
            Err(e) => return error(ErrorCode::Malformed, format!("expected {{\"id\": \"<ULID>\"}}: {e}")),
        };
        let (res, subjects, _, _) = self.gateway.parts();
        for _ in 0..16 {
            let (mut record, revision) = match self.store.load(&req.id).await {
                Ok(Some((r, rev))) if who.sees(&r.tenant) => (r, rev),
                Ok(_) => return not_found(&req.id),
                Err(e) => return store_error(e),
            };
            let now = now_ms();
            let (changed, kind) = match endpoint {
                Endpoint::Pause => (record.pause(now), RolloutEventKind::RolloutPaused),
                Endpoint::Resume => (record.resume(now), RolloutEventKind::RolloutResumed),
                _ => (record.abort(now), RolloutEventKind::RolloutAborting),
            };
            match changed {
                Err(state) => {
                    return error(
                        ErrorCode::Conflict,
                        format!("rollout {} is {}: it cannot be {}d", req.id, state_name(state), endpoint.name()),
                    )
                }
                Ok(false) => return Reply::Rollout(RolloutView { rollout: record, parts: vec![], duplicate: false }),
                Ok(true) => {}
            }
            match self.store.update(&record, revision).await {
                Ok(new_revision) => {
                    let event = RolloutEvent { rollout: record.id, at_ms: now, event: kind };
                    let unique = new_revision.to_string();
                    if let Err(e) = rollouts::publish_event(&res.js, subjects, &record.tenant, &event, &unique).await {
                        tracing::warn!(rollout = %record.id, error = %e, "Cannot publish a rollout event.");
                    }
                    tracing::info!(rollout = %record.id, state = state_name(record.state), "Rollout {}d.", endpoint.name());
                    let what = AuditEvent::RolloutChanged {
                        rollout: record.id,
                        tenant: record.tenant.clone(),
                        change: endpoint.name().to_owned(),
                    };
                    let audit = crate::requester::audit_record(now, who, what, headers);
                    self.gateway.audit().record(subjects.audit_rollout(&record.tenant), audit).await;
                    return Reply::Rollout(RolloutView { rollout: record, parts: vec![], duplicate: false });
                }
                Err(RolloutStoreError::Conflict) => continue,
                Err(e) => return store_error(e),
            }
        }
        error(ErrorCode::Unavailable, "the rollout record kept changing; try again")
    }

    async fn list(&self, enc: Encoding, payload: &[u8], who: &Requester) -> Reply {
        let req: RolloutListRequest = if payload.is_empty() {
            RolloutListRequest::default()
        } else {
            match enc.decode(payload) {
                Ok(r) => r,
                Err(e) => return error(ErrorCode::Malformed, format!("expected {{\"all\": false}}: {e}")),
            }
        };
        let mut rollouts: Vec<RolloutRecord> = match self.store.list().await {
            Ok(all) => all.into_iter().filter(|r| who.sees(&r.tenant) && (req.all || !r.state.is_final())).collect(),
            Err(e) => return store_error(e),
        };
        rollouts.sort_by_key(|r| std::cmp::Reverse(r.id));
        rollouts.truncate(LIST_LIMIT);
        Reply::Rollouts { rollouts }
    }
}

pub fn state_name(state: RolloutState) -> &'static str {
    match state {
        RolloutState::Running => "running",
        RolloutState::Paused => "paused",
        RolloutState::Aborting => "aborting",
        RolloutState::Succeeded => "succeeded",
        RolloutState::Failed => "failed",
        RolloutState::Aborted => "aborted",
    }
}

async fn respond(endpoint: Endpoint, request: Request, encoding: Encoding, reply: Reply) {
    crate::service::send_reply(endpoint.name(), request, encoding, reply).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rollouts_batches_are_submitted_as_its_requester() {
        for who in [Requester::Operator, Requester::Tenant("tenant-a".into())] {
            assert_eq!(requester_of(&actor(&who)), who);
        }
        assert_eq!(Endpoint::ALL.map(Endpoint::name), bmcfleet_schema::subject::ROLLOUT_ENDPOINTS);
    }
}
