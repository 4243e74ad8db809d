//! The batch status record (KV `<S>_BATCHES`, key = batch id), read and
//! written with compare-and-set so that gateway (cancel) and worker
//! (progress) never overwrite each other. What a write may change is
//! `bmcfleet_schema::lifecycle`'s; this module only stores it.

use async_nats::jetstream::kv;
use bmcfleet_schema::{BatchId, BatchStatus, Encoding};
use bytes::Bytes;

#[derive(Debug, thiserror::Error)]
pub enum StatusError {
    #[error("status store: {0}")]
    Store(String),
    /// The record cannot be decoded; `revision` lets a writer replace it
    /// with compare-and-set (never a blind put).
    #[error("status record of {id} is corrupt: {reason}")]
    Corrupt { id: BatchId, revision: u64, reason: String },
    /// Someone else wrote the record since we read it.
    #[error("status record changed concurrently")]
    Conflict,
}

/// A status record with the revision it was read at.
#[derive(Clone, Debug)]
pub struct Versioned {
    pub status: BatchStatus,
    pub revision: u64,
}

pub async fn load(kv: &kv::Store, id: &BatchId) -> Result<Option<Versioned>, StatusError> {
    let entry = kv.entry(id.to_string()).await.map_err(|e| StatusError::Store(e.to_string()))?;
    let Some(entry) = entry else { return Ok(None) };
    if entry.operation != kv::Operation::Put {
        return Ok(None);
    }
    let status = Encoding::MessagePack.decode::<BatchStatus>(&entry.value).map_err(|e| StatusError::Corrupt {
        id: *id,
        revision: entry.revision,
        reason: e.to_string(),
    })?;
    Ok(Some(Versioned { status, revision: entry.revision }))
}

/// The record, read again until it is written or `within` has passed
/// (`None` then). Reads back off from 10 ms, doubling, so a record written
/// a moment later is seen at once and a missing one costs a handful of
/// direct reads (a watch would create a consumer on the bucket per wait).
pub async fn wait(kv: &kv::Store, id: &BatchId, within: std::time::Duration) -> Result<Option<Versioned>, StatusError> {
    let until = tokio::time::Instant::now() + within;
    let mut pause = std::time::Duration::from_millis(10);
    loop {
        if let Some(v) = load(kv, id).await? {
            return Ok(Some(v));
        }
        let now = tokio::time::Instant::now();
        if now >= until {
            return Ok(None);
        }
        tokio::time::sleep(pause.min(until - now)).await;
        pause = (pause * 2).min(std::time::Duration::from_millis(500));
    }
}

fn encode(status: &BatchStatus) -> Result<Bytes, StatusError> {
    Encoding::MessagePack.encode(status).map(Bytes::from).map_err(|e| StatusError::Store(e.to_string()))
}

/// Create the record; `Conflict` when it already exists.
pub async fn create(kv: &kv::Store, status: &BatchStatus) -> Result<u64, StatusError> {
    kv.create(status.id.to_string(), encode(status)?).await.map_err(|e| match e.kind() {
        kv::CreateErrorKind::AlreadyExists => StatusError::Conflict,
        _ => StatusError::Store(e.to_string()),
    })
}

/// Replace the record read at `revision`; `Conflict` when it changed since.
pub async fn update(kv: &kv::Store, status: &BatchStatus, revision: u64) -> Result<u64, StatusError> {
    kv.update(status.id.to_string(), encode(status)?, revision).await.map_err(|e| match e.kind() {
        kv::UpdateErrorKind::WrongLastRevision => StatusError::Conflict,
        _ => StatusError::Store(e.to_string()),
    })
}
