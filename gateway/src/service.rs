//! The gateway's service: [`Gateway`], the state every endpoint handler
//! shares, and how a request is dispatched to its endpoint and answered.
//! The endpoints are one module each: `submit` (with `target`), `status`,
//! `cancel`, `discover`, `console_log`; who asks is `requester`.

use crate::requester::Requester;
use async_nats::service::Request;
use async_nats::HeaderMap;
use bmcfleet_common::registry::Registry;
use bmcfleet_common::streams::Resources;
use bmcfleet_common::telemetry;
use bmcfleet_schema::subject::{CONTENT_TYPE, WAIT_HEADER};
use bmcfleet_schema::{Encoding, ErrorBody, ErrorCode, Limits, Reply, Subjects};
use std::sync::Arc;
use std::time::Duration;

/// Trace-context headers read from a request; the job carries the admit span's context.
pub const TRACE_HEADERS: [&str; 2] = telemetry::TRACE_HEADERS;

#[derive(Clone, Copy, Debug)]
pub enum Endpoint {
    Submit,
    Status,
    Cancel,
    /// BMC discovery (operators only), answered by a worker.
    Discover,
    /// `console.log`: a machine's stored console output (`console_log`).
    ConsoleLog,
}

impl Endpoint {
    /// Its name in logs.
    pub fn name(self) -> &'static str {
        match self {
            Endpoint::Submit => "submit",
            Endpoint::Status => "status",
            Endpoint::Cancel => "cancel",
            Endpoint::Discover => bmcfleet_schema::subject::DISCOVER_ENDPOINT,
            Endpoint::ConsoleLog => "console.log",
        }
    }
}

/// Shared state of the request handlers.
pub struct Gateway {
    pub(crate) client: async_nats::Client,
    pub(crate) res: Resources,
    pub(crate) subjects: Subjects,
    pub(crate) limits: Limits,
    /// The machine registry (a watched copy: no round trip per batch).
    pub(crate) registry: Registry,
    pub(crate) max_wait: Duration,
    pub(crate) metrics: crate::metrics::Metrics,
    /// The workers' public key when inline credentials are sealed (`None`: refused by `limits`).
    pub(crate) seal_to: Option<bmcfleet_common::sealing::Sealer>,
    /// Audit records of admitted batches, written in few messages.
    pub(crate) audit: bmcfleet_common::audit::Batcher,
    /// The workers' public key for secret action parameters (whenever one is configured).
    pub(crate) params_sealer: Option<Arc<bmcfleet_common::sealing::Sealer>>,
    /// Cancelled when the gateway stops: waiting submits answer at once.
    pub(crate) stopping: tokio_util::sync::CancellationToken,
    /// Which partitions a worker owns: a waiting submit for one no worker
    /// owns is answered at once.
    pub(crate) ownership: crate::ownership::Ownership,
}

pub(crate) fn header<'a>(headers: Option<&'a HeaderMap>, name: &str) -> Option<&'a str> {
    headers.and_then(|h| h.get(name)).map(|v| v.as_str())
}

pub(crate) fn truthy(v: Option<&str>) -> bool {
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
pub(crate) fn one_line(message: &str) -> String {
    let mut out = String::with_capacity(message.len().min(MAX_ERROR_HEADER));
    for c in message.chars() {
        if out.len() + c.len_utf8() > MAX_ERROR_HEADER {
            break;
        }
        out.push(if c.is_control() { ' ' } else { c });
    }
    out
}

pub(crate) fn error(code: ErrorCode, message: impl Into<String>) -> Reply {
    Reply::Error(ErrorBody::new(code, message))
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
        let ownership = crate::ownership::Ownership::new(res.js.clone(), subjects.clone());
        Gateway {
            ownership,
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

    /// The shared resources, topology, limits and registry (for the rollout endpoints and drivers).
    pub(crate) fn parts(&self) -> (&Resources, &Subjects, &Limits, &Registry) {
        (&self.res, &self.subjects, &self.limits, &self.registry)
    }

    /// The audit writer (for the rollout endpoints).
    pub(crate) fn audit(&self) -> &bmcfleet_common::audit::Batcher {
        &self.audit
    }

    /// Cancel to make every waiting submit answer now (the gateway stops).
    pub fn stopping(&self) -> tokio_util::sync::CancellationToken {
        self.stopping.clone()
    }

    /// Whether a request waits long: a submit that waits for the batch's
    /// result, or a discovery (which waits for a worker's probes).
    pub fn waits(endpoint: Endpoint, request: &Request) -> bool {
        matches!(endpoint, Endpoint::Discover)
            || matches!(endpoint, Endpoint::Submit) && truthy(header(request.message.headers.as_ref(), WAIT_HEADER))
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
                        Endpoint::Cancel => self.cancel(enc, &request.message.payload, &who, headers).await,
                        Endpoint::Discover => self.discover(enc, &request.message.payload, &who, headers).await,
                        Endpoint::ConsoleLog => self.console_log(enc, &request.message.payload, &who).await,
                    },
                };
                (enc, reply)
            }
        };
        self.respond(endpoint, request, encoding, reply).await;
    }

    async fn respond(&self, endpoint: Endpoint, request: Request, encoding: Encoding, reply: Reply) {
        send_reply(endpoint.name(), request, encoding, reply).await
    }
}

/// Send `reply` to `request` in `encoding`: the one place every endpoint
/// (batch or rollout) answers. A refusal also goes into the micro service's
/// error headers, as one bounded line, and the log.
pub(crate) async fn send_reply(endpoint: &str, request: Request, encoding: Encoding, reply: Reply) {
    let mut out = HeaderMap::new();
    out.insert(CONTENT_TYPE, encoding.content_type());
    if let Reply::Error(e) = &reply {
        let line = one_line(&e.message);
        tracing::info!(endpoint, code = %e.code, message = %line, "Request refused.");
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
