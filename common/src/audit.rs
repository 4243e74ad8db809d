//! Writing audit records (see `bmcfleet_schema::audit`) to the audit stream.
//!
//! Each stream message holds a JSON array of records. A gateway admits
//! batches far faster than one stored message each would allow cheaply, so
//! its records go through a [`Batcher`]: one message per subject for every
//! records gathered within [`BATCH_DELAY`] (at most [`BATCH_RECORDS`]), each
//! acknowledged by the stream and retried on failure.

use async_nats::jetstream::Context;
use async_nats::HeaderMap;
use bmcfleet_schema::audit::AuditRecord;
use bmcfleet_schema::subject::CONTENT_TYPE;
use bmcfleet_schema::Encoding;

/// Which step of storing records failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// The records cannot be encoded as JSON.
    Encode,
    /// The message could not be published.
    Publish,
    /// The stream did not acknowledge the message (not stored, or unknown).
    Ack,
}

pub type Error = bmcfleet_schema::error::Error<ErrorKind>;

/// Store one record and wait for the stream's acknowledgement. `msg_id`
/// deduplicates records several writers make of one fact (a registry
/// revision seen by every gateway).
pub async fn write(js: &Context, subject: String, record: &AuditRecord, msg_id: Option<&str>) -> Result<(), Error> {
    write_many(js, subject, std::slice::from_ref(record), msg_id).await
}

/// Store several records as one message.
pub async fn write_many(
    js: &Context,
    subject: String,
    records: &[AuditRecord],
    msg_id: Option<&str>,
) -> Result<(), Error> {
    let body = serde_json::to_vec(records).map_err(|e| Error::with_source(ErrorKind::Encode, "", e))?;
    let mut h = HeaderMap::new();
    h.insert(CONTENT_TYPE, Encoding::Json.content_type());
    if let Some(id) = msg_id {
        h.insert(async_nats::header::NATS_MESSAGE_ID, id);
    }
    js.publish_with_headers(subject, h, body.into())
        .await
        .map_err(|e| Error::with_source(ErrorKind::Publish, "", e))?
        .await
        .map_err(|e| Error::with_source(ErrorKind::Ack, "", e))?;
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
            record: serde_json::from_slice(bytes)
                .unwrap_or_else(|_| String::from_utf8_lossy(bytes).into_owned().into()),
        },
        None => AuditEvent::MachineRemoved { machine: change.machine.clone(), revision: change.revision },
    };
    AuditRecord::new(crate::runtime::now_ms(), "registry", what)
}

/// Longest a record waits in a [`Batcher`] before it is written.
pub const BATCH_DELAY: std::time::Duration = std::time::Duration::from_millis(20);
/// Most records in one message.
pub const BATCH_RECORDS: usize = 256;

/// Gathers records and writes them in few messages (see the module docs).
/// Dropping every clone lets its task write what it holds and end.
#[derive(Clone)]
pub struct Batcher {
    tx: tokio::sync::mpsc::Sender<(String, AuditRecord)>,
}

impl Batcher {
    /// Start the writing task; await the handle after dropping the batcher to flush.
    pub fn start(js: Context) -> (Batcher, tokio::task::JoinHandle<()>) {
        let (tx, rx) = tokio::sync::mpsc::channel(16 * BATCH_RECORDS);
        (Batcher { tx }, tokio::spawn(run(js, rx)))
    }

    /// Queue a record (waits when the writer is behind: admission slows
    /// down rather than losing audit records).
    pub async fn record(&self, subject: String, record: AuditRecord) {
        if let Err(e) = self.tx.send((subject, record)).await {
            tracing::error!(record = %e.0 .1.describe(), "The audit writer has stopped; a record is lost.");
        }
    }
}

async fn run(js: Context, mut rx: tokio::sync::mpsc::Receiver<(String, AuditRecord)>) {
    let backoff = crate::backoff::Backoff::new(std::time::Duration::from_millis(50), std::time::Duration::from_secs(2));
    while let Some(first) = rx.recv().await {
        let mut groups: std::collections::BTreeMap<String, Vec<AuditRecord>> = Default::default();
        groups.entry(first.0).or_default().push(first.1);
        let mut count = 1;
        let until = tokio::time::Instant::now() + BATCH_DELAY;
        while count < BATCH_RECORDS {
            match tokio::time::timeout_at(until, rx.recv()).await {
                Ok(Some((subject, record))) => {
                    groups.entry(subject).or_default().push(record);
                    count += 1;
                }
                Ok(None) | Err(_) => break,
            }
        }
        for (subject, records) in groups {
            let mut attempt = 0;
            while let Err(e) = write_many(&js, subject.clone(), &records, None).await {
                if attempt == 5 {
                    tracing::error!(error = %e, records = records.len(), "Cannot store audit records; they are lost.");
                    break;
                }
                tokio::time::sleep(backoff.delay(attempt)).await;
                attempt += 1;
            }
        }
    }
}
