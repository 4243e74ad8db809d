//! The `status` endpoint: a batch's status record, for whoever may see it.

use crate::requester::Requester;
use crate::service::{error, Gateway};
use bmcfleet_common::status;
use bmcfleet_schema::{Encoding, ErrorCode, IdRequest, Reply};

impl Gateway {
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
}
