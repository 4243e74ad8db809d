//! Writing audit records (see `bmcfleet_schema::audit`) to the audit stream.

use async_nats::jetstream::Context;
use async_nats::HeaderMap;
use bmcfleet_schema::audit::AuditRecord;
use bmcfleet_schema::subject::CONTENT_TYPE;
use bmcfleet_schema::Encoding;

/// Store one record and wait for the stream's acknowledgement. `msg_id`
/// deduplicates records several writers make of one fact (a registry
/// revision seen by every gateway).
pub async fn write(js: &Context, subject: String, record: &AuditRecord, msg_id: Option<&str>) -> Result<(), String> {
    let body = serde_json::to_vec(record).map_err(|e| e.to_string())?;
    let mut h = HeaderMap::new();
    h.insert(CONTENT_TYPE, Encoding::Json.content_type());
    if let Some(id) = msg_id {
        h.insert(async_nats::header::NATS_MESSAGE_ID, id);
    }
    js.publish_with_headers(subject, h, body.into()).await.map_err(|e| e.to_string())?.await.map_err(|e| e.to_string())?;
    Ok(())
}

/// [`write`] in the background (the caller does not wait; a failure is logged).
pub fn write_soon(js: &Context, subject: String, record: AuditRecord, msg_id: Option<String>) {
    let js = js.clone();
    tokio::spawn(async move {
        if let Err(e) = write(&js, subject, &record, msg_id.as_deref()).await {
            tracing::error!(error = %e, record = %record.describe(), "Cannot store an audit record.");
        }
    });
}

/// The record of a registry change seen in the bucket.
pub fn registry_change(change: &crate::registry::Change) -> AuditRecord {
    use bmcfleet_schema::audit::AuditEvent;
    let what = match &change.value {
        Some(bytes) => AuditEvent::MachinePut {
            machine: change.machine.clone(),
            revision: change.revision,
            record: serde_json::from_slice(bytes).unwrap_or_else(|_| String::from_utf8_lossy(bytes).into_owned().into()),
        },
        None => AuditEvent::MachineRemoved { machine: change.machine.clone(), revision: change.revision },
    };
    AuditRecord { at_ms: crate::runtime::now_ms(), actor: "registry".into(), what }
}
