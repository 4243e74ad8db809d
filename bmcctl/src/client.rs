//! Talking to the gateway's micro service: one request, one decoded reply,
//! and the exit code a reply means.

use crate::output::Format;
use async_nats::HeaderMap;
use bmcfleet_schema::subject::{rollout_subject, service_subject, CONTENT_TYPE, OPERATOR_CLAIM_HEADER, WAIT_HEADER};
use bmcfleet_schema::{BatchState, Encoding, Reply};
use std::process::ExitCode;
use std::time::Duration;

/// A connection to the gateway, with how to print what it answers.
pub struct Client {
    pub nats: async_nats::Client,
    /// The gateway's service prefix (`--service-prefix`).
    prefix: String,
    /// `--output` (`--json`): how replies read.
    pub format: Format,
    /// Trace-context headers added to every request (`--trace`).
    trace: HeaderMap,
    /// The operator name sent as `Bmcfleet-Operator` (the gateway keeps it
    /// as an unverified annotation of its audit records).
    pub claim: Option<String>,
}

impl Client {
    pub fn new(nats: async_nats::Client, prefix: &str, format: Format, trace: HeaderMap) -> Client {
        Client { nats, prefix: prefix.to_owned(), format, trace, claim: None }
    }

    /// Send `body` (JSON) to one endpoint and decode the reply. A request
    /// that got no answer keeps its `async_nats::RequestError` as the source.
    pub async fn request(&self, endpoint: &str, wait: bool, body: Vec<u8>, timeout: Duration) -> anyhow::Result<Reply> {
        self.request_to(service_subject(&self.prefix, endpoint), wait, body, timeout).await
    }

    /// [`Client::request`] to a rollout endpoint (`<prefix>.rollout.<endpoint>`).
    pub async fn rollout(&self, endpoint: &str, body: Vec<u8>, timeout: Duration) -> anyhow::Result<Reply> {
        self.request_to(rollout_subject(&self.prefix, endpoint), false, body, timeout).await
    }

    async fn request_to(&self, subject: String, wait: bool, body: Vec<u8>, timeout: Duration) -> anyhow::Result<Reply> {
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, Encoding::Json.content_type());
        if wait {
            headers.insert(WAIT_HEADER, "true");
        }
        if let Some(claim) = &self.claim {
            headers.insert(OPERATOR_CLAIM_HEADER, claim.as_str());
        }
        bmcfleet_common::telemetry::merge(&mut headers, &self.trace);
        let req = async_nats::Request::new().headers(headers).payload(body.into()).timeout(Some(timeout));
        let msg = self
            .nats
            .send_request(subject.clone(), req)
            .await
            .map_err(|e| anyhow::Error::new(e).context(format!("no answer from the gateway on {subject}")))?;
        let enc =
            Encoding::from_content_type(msg.headers.as_ref().and_then(|h| h.get(CONTENT_TYPE)).map(|v| v.as_str()))?;
        Ok(enc.decode(&msg.payload)?)
    }

    /// Print a reply (in the `--output` format) and return its exit code.
    pub fn print(&self, reply: &Reply) -> ExitCode {
        if self.format.is_json() {
            println!("{}", serde_json::to_string_pretty(reply).unwrap_or_default());
        } else if let Reply::Accepted(bmcfleet_schema::Accepted { id, unowned: Some(u), .. }) = reply {
            // Waited in vain: said at once, with the reason.
            println!("queued {id}: {}", u.message);
        } else {
            crate::output::reply(reply, self.format.is_wide());
        }
        crate::exit::of_reply(reply)
    }
}

/// The exit code of a finished batch: 0 only when it succeeded.
pub fn finished(state: BatchState) -> ExitCode {
    if state == BatchState::Succeeded {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// Trace headers for `--trace`: the current (exported) span's context when an
/// OTLP endpoint is configured, else a fresh sampled `traceparent`. Prints the trace id.
pub fn start_trace() -> HeaderMap {
    let mut h = bmcfleet_common::telemetry::trace_headers(&tracing::Span::current(), None);
    let trace_id = match h.get("traceparent").and_then(|v| v.as_str().split('-').nth(1).map(str::to_owned)) {
        Some(id) => id,
        None => {
            let (traceparent, id) = bmcfleet_common::telemetry::new_traceparent();
            h.insert("traceparent", traceparent.as_str());
            id
        }
    };
    eprintln!("trace id: {trace_id}");
    h
}
