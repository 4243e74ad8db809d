//! The discovery endpoint (`<service-prefix>.discover`, docs/BMCCTL.md
//! "Discovery"): operators only. A tenant is refused (`permission_denied`)
//! before anything else, and the shipped NATS accounts do not even export
//! the endpoint to tenants. The request's form and size are checked here
//! (the hard bounds of `bmcfleet_schema::discover`), then it is forwarded to
//! one worker (`<prefix>.discover.run`, a queue group): the worker has the
//! network reach and the operator's `--discover-allow` ranges, checks every
//! address against them before any probe, and answers the report, which is
//! passed back as it is. No worker with discovery on: `unavailable`.

use crate::requester::Requester;
use crate::service::{error, Gateway};
use bmcfleet_schema::discover::{self, DiscoverRequest};
use bmcfleet_schema::error::Coded;
use bmcfleet_schema::subject::CONTENT_TYPE;
use bmcfleet_schema::{Encoding, ErrorCode, Reply};
use std::time::Duration;

/// How much longer than the longest discovery the gateway waits for a worker's report.
const MARGIN: Duration = Duration::from_secs(30);

impl Gateway {
    pub(crate) async fn discover(
        &self,
        enc: Encoding,
        payload: &[u8],
        who: &Requester,
        headers: Option<&async_nats::HeaderMap>,
    ) -> Reply {
        if let Requester::Tenant(tenant) = who {
            return error(
                ErrorCode::PermissionDenied,
                format!("BMC discovery is for operators only; tenant `{tenant}` may not probe networks"),
            );
        }
        if payload.len() > self.limits.max_message_bytes {
            return error(
                ErrorCode::TooLarge,
                format!("a discovery request is at most {} bytes", self.limits.max_message_bytes),
            );
        }
        let request: DiscoverRequest = match enc.decode(payload) {
            Ok(r) => r,
            Err(e) => return error(ErrorCode::Malformed, format!("not a discovery request: {e}")),
        };
        let plan = match request.plan(discover::MAX_ADDRESSES) {
            Ok(p) => p,
            Err(e) => return error(e.kind().code(), e.context().to_owned()),
        };
        tracing::info!(targets = %request.targets.join(","), addresses = plan.addresses, "Discovery requested by an operator.");
        // Audited before any probe: who asked to probe what, whatever a worker answers.
        let kept = request.targets.len().min(bmcfleet_schema::audit::DISCOVERY_TARGETS_KEPT);
        let what = bmcfleet_schema::audit::AuditEvent::DiscoveryRequested {
            targets: request.targets[..kept].to_vec(),
            more_targets: u32::try_from(request.targets.len() - kept).unwrap_or(u32::MAX),
            addresses: plan.addresses,
        };
        let now = bmcfleet_common::runtime::now_ms();
        let record = crate::requester::audit_record(now, who, what, headers);
        self.audit.record(self.subjects.audit_discovery(), record).await;
        let body = match serde_json::to_vec(&request) {
            Ok(b) => b,
            Err(e) => return error(ErrorCode::Internal, format!("cannot encode the discovery request: {e}")),
        };
        let mut headers = async_nats::HeaderMap::new();
        headers.insert(CONTENT_TYPE, Encoding::Json.content_type());
        let ask = async_nats::Request::new()
            .headers(headers)
            .payload(body.into())
            .timeout(Some(discover::MAX_DURATION + MARGIN));
        let answer = tokio::select! {
            a = self.client.send_request(self.subjects.discover_run(), ask) => a,
            _ = self.stopping.cancelled() => return error(ErrorCode::Unavailable, "the gateway is stopping; discover again"),
        };
        let msg = match answer {
            Ok(m) => m,
            Err(e) if e.kind() == async_nats::RequestErrorKind::NoResponders => return error(
                ErrorCode::Unavailable,
                "no worker serves BMC discovery: start one with --discover-allow ranges (docs/BMCCTL.md, Discovery)",
            ),
            Err(e) => return error(ErrorCode::Unavailable, format!("no discovery report from a worker: {e}")),
        };
        let enc =
            Encoding::from_content_type(msg.headers.as_ref().and_then(|h| h.get(CONTENT_TYPE)).map(|v| v.as_str()))
                .unwrap_or(Encoding::Json);
        match enc.decode::<Reply>(&msg.payload) {
            Ok(reply @ (Reply::Discovery(_) | Reply::Error(_))) => reply,
            Ok(_) | Err(_) => {
                error(ErrorCode::Internal, "a worker answered the discovery with something else than a report")
            }
        }
    }
}
