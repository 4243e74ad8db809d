//! The `console.log` endpoint: one page of a machine's stored console
//! output (the console stream, docs/CONSOLE.md) for the machine's tenant
//! and operators. A tenant has no JetStream access of the operator's
//! account; this endpoint reads for it, scoped by who asks: the subject
//! read is built from the registered machine's own tenant and name, never
//! from request text, and another tenant's machine answers exactly like
//! an unregistered one.

use crate::requester::Requester;
use crate::service::{error, Gateway};
use async_nats::jetstream::consumer::{pull, DeliverPolicy};
use base64::Engine as _;
use bmcfleet_common::registry::Lookup;
use bmcfleet_schema::console::{
    ConsoleEntry, ConsoleLogPage, ConsoleLogRequest, CONSOLE_LOG_MAX_ENTRIES, CONSOLE_LOG_MAX_PAGE_BYTES,
    CONSOLE_LOG_PAGE_BYTES,
};
use bmcfleet_schema::subject::{
    CONSOLE_EVENT_HEADER, CONSOLE_GAP_BYTES_HEADER, CONSOLE_LOST_HEADER, CONSOLE_REASON_HEADER, CONSOLE_SEQ_HEADER,
    CONSOLE_SESSION_HEADER,
};
use bmcfleet_schema::{Encoding, ErrorCode, Reply};
use futures::StreamExt;
use std::time::Duration;

/// How long the read waits for the next stored message before the page ends.
const NEXT_TIMEOUT: Duration = Duration::from_secs(2);
/// Longest a header value is copied into an entry.
const MAX_HEADER: usize = 1024;

impl Gateway {
    pub async fn console_log(&self, enc: Encoding, payload: &[u8], who: &Requester) -> Reply {
        let req: ConsoleLogRequest = match enc.decode(payload) {
            Ok(r) => r,
            Err(e) => {
                return error(
                    ErrorCode::Malformed,
                    format!("expected {{\"machine\": \"<name>\", \"after\"?: <position>, \"since\"?: \"10m\", \"max_bytes\"?: <n>}}: {e}"),
                )
            }
        };
        let not_found =
            || error(ErrorCode::MachineNotFound, format!("no machine named `{}` is registered", req.machine));
        let machine = match self.registry.get_fresh(&req.machine).await {
            // Another tenant's machine answers exactly like a missing one.
            Lookup::Found(m) if who.sees(&m.tenant) => m,
            _ => return not_found(),
        };
        let since = match req.since.as_deref().map(bmcfleet_schema::duration::parse).transpose() {
            Ok(d) => d,
            Err(e) => return error(ErrorCode::InvalidField, format!("since: {e}")),
        };
        let max_bytes = req.max_bytes.unwrap_or(CONSOLE_LOG_PAGE_BYTES).clamp(1, CONSOLE_LOG_MAX_PAGE_BYTES) as usize;
        let subject = self.subjects.console_out(&machine.tenant, &machine.name);
        let deliver = match (req.after, since) {
            (Some(after), _) => DeliverPolicy::ByStartSequence { start_sequence: after.saturating_add(1) },
            (None, Some(d)) => DeliverPolicy::ByStartTime { start_time: time::OffsetDateTime::now_utc() - d },
            (None, None) => DeliverPolicy::All,
        };
        match self.read_console(&subject, deliver, max_bytes).await {
            Ok((entries, more)) => {
                let next = entries.last().map(|e| e.position).or(req.after);
                Reply::ConsoleLog(ConsoleLogPage { machine: machine.name.clone(), entries, next, more })
            }
            Err(e) => error(ErrorCode::Unavailable, format!("cannot read the console stream: {e}")),
        }
    }

    /// Up to `max_bytes` of output (at least one message) of `subject` from
    /// `deliver` on; and whether more was stored after the page.
    async fn read_console(
        &self,
        subject: &str,
        deliver: DeliverPolicy,
        max_bytes: usize,
    ) -> Result<(Vec<ConsoleEntry>, bool), String> {
        let stream = self.res.js.get_stream(self.subjects.console_stream()).await.map_err(|e| e.to_string())?;
        let consumer = stream
            .create_consumer(pull::OrderedConfig {
                deliver_policy: deliver,
                filter_subject: subject.to_owned(),
                ..Default::default()
            })
            .await
            .map_err(|e| e.to_string())?;
        // Nothing stored there from that point (as the consumer was created).
        if consumer.cached_info().num_pending == 0 {
            return Ok((Vec::new(), false));
        }
        let mut messages = consumer.messages().await.map_err(|e| e.to_string())?;
        let mut entries = Vec::new();
        let mut bytes = 0usize;
        loop {
            let Ok(Some(msg)) = tokio::time::timeout(NEXT_TIMEOUT, messages.next()).await else {
                return Ok((entries, false));
            };
            let msg = msg.map_err(|e| e.to_string())?;
            let Ok(meta) = msg.info() else { continue };
            let (position, pending) = (meta.stream_sequence, meta.pending);
            let published = meta.published;
            if !entries.is_empty()
                && (bytes + msg.payload.len() > max_bytes || entries.len() >= CONSOLE_LOG_MAX_ENTRIES)
            {
                return Ok((entries, true));
            }
            bytes += msg.payload.len();
            let get = |k: &str| {
                msg.headers
                    .as_ref()
                    .and_then(|h| h.get(k))
                    .map(|v| v.as_str().chars().take(MAX_HEADER).collect::<String>())
            };
            entries.push(ConsoleEntry {
                position,
                time: published.format(&time::format_description::well_known::Rfc3339).unwrap_or_default(),
                session: get(CONSOLE_SESSION_HEADER),
                seq: get(CONSOLE_SEQ_HEADER).and_then(|s| s.parse().ok()),
                event: get(CONSOLE_EVENT_HEADER),
                reason: get(CONSOLE_REASON_HEADER),
                lost: get(CONSOLE_LOST_HEADER).and_then(|s| s.parse().ok()),
                gap_bytes: get(CONSOLE_GAP_BYTES_HEADER).and_then(|s| s.parse().ok()),
                data: base64::engine::general_purpose::STANDARD.encode(&msg.payload),
            });
            if pending == 0 {
                return Ok((entries, false));
            }
        }
    }
}
