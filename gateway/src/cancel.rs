//! The `cancel` endpoint: cancel a queued batch outright, or ask a running
//! one to stop after its current action.

use crate::requester::Requester;
use crate::service::{error, Gateway};
use bmcfleet_common::events;
use bmcfleet_common::runtime::now_ms;
use bmcfleet_common::status::{self, StatusError};
use bmcfleet_schema::lifecycle::Cancel;
use bmcfleet_schema::{Encoding, ErrorCode, Event, EventKind, IdRequest, Reply};

impl Gateway {
    /// Cancel a queued batch outright, or ask a running one to stop after its
    /// current action.
    pub async fn cancel(
        &self,
        enc: Encoding,
        payload: &[u8],
        who: &Requester,
        headers: Option<&async_nats::HeaderMap>,
    ) -> Reply {
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
                    let what = bmcfleet_schema::audit::AuditEvent::CancelRequested {
                        batch: s.id,
                        tenant: s.tenant.clone(),
                        state: s.state,
                    };
                    let record = crate::requester::audit_record(now, who, what, headers);
                    self.audit.record(self.subjects.audit_batch(&s.tenant), record).await;
                    return Reply::Cancelled { id: s.id, state: s.state };
                }
                Err(StatusError::Conflict) => continue,
                Err(e) => return error(ErrorCode::Unavailable, e.to_string()),
            }
        }
        error(ErrorCode::Unavailable, "the batch status kept changing; try again")
    }
}
