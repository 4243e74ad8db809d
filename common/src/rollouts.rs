//! Rollout storage: the record (KV `<S>_ROLLOUTS`, key = rollout id, CAS on
//! every write) and, in `<S>_ROLLOUT_PARTS`, the spec, the machine list in
//! chunks and each machine's outcome under keys of their own, so a rollout
//! of 10,000 machines never rewrites one large value per machine. What a
//! write may change is `bmcfleet_schema::rollout`'s; this module only
//! stores it, and publishes rollout events.

use async_nats::jetstream::{kv, Context};
use async_nats::HeaderMap;
use bmcfleet_schema::rollout::{RolloutEvent, RolloutId, RolloutPart, RolloutRecord, RolloutSpec};
use bmcfleet_schema::subject::{CONTENT_TYPE, EVENT_HEADER};
use bmcfleet_schema::{Encoding, Subjects};
use futures::TryStreamExt;
use serde::de::DeserializeOwned;
use serde::Serialize;

#[derive(Debug, thiserror::Error)]
pub enum RolloutStoreError {
    #[error("rollout store: {0}")]
    Store(String),
    #[error("rollout value {key} is corrupt: {reason}")]
    Corrupt { key: String, reason: String },
    /// Someone else wrote the record since we read it (or it exists already).
    #[error("rollout record changed concurrently")]
    Conflict,
}

fn store_err(e: impl std::fmt::Display) -> RolloutStoreError {
    RolloutStoreError::Store(e.to_string())
}

fn encode<T: Serialize>(v: &T) -> Result<bytes::Bytes, RolloutStoreError> {
    Encoding::MessagePack.encode(v).map(Into::into).map_err(store_err)
}

async fn get<T: DeserializeOwned>(kv: &kv::Store, key: &str) -> Result<Option<(T, u64)>, RolloutStoreError> {
    let Some(entry) = kv.entry(key).await.map_err(store_err)? else { return Ok(None) };
    if entry.operation != kv::Operation::Put {
        return Ok(None);
    }
    let v = Encoding::MessagePack
        .decode(&entry.value)
        .map_err(|e| RolloutStoreError::Corrupt { key: key.to_owned(), reason: e.to_string() })?;
    Ok(Some((v, entry.revision)))
}

/// The rollout buckets of a deployment.
#[derive(Clone)]
pub struct Store {
    pub records: kv::Store,
    pub parts: kv::Store,
    pub subjects: Subjects,
}

impl Store {
    pub fn new(records: kv::Store, parts: kv::Store, subjects: Subjects) -> Store {
        Store { records, parts, subjects }
    }

    pub async fn load(&self, id: &RolloutId) -> Result<Option<(RolloutRecord, u64)>, RolloutStoreError> {
        get(&self.records, &id.to_string()).await
    }

    /// Create the record; `Conflict` when one of this id exists.
    pub async fn create(&self, record: &RolloutRecord) -> Result<u64, RolloutStoreError> {
        self.records.create(record.id.to_string(), encode(record)?).await.map_err(|e| match e.kind() {
            kv::CreateErrorKind::AlreadyExists => RolloutStoreError::Conflict,
            _ => store_err(e),
        })
    }

    /// Replace the record read at `revision`; `Conflict` when it changed since.
    pub async fn update(&self, record: &RolloutRecord, revision: u64) -> Result<u64, RolloutStoreError> {
        self.records.update(record.id.to_string(), encode(record)?, revision).await.map_err(|e| match e.kind() {
            kv::UpdateErrorKind::WrongLastRevision => RolloutStoreError::Conflict,
            _ => store_err(e),
        })
    }

    /// Every stored record (the retention of the bucket bounds them).
    pub async fn list(&self) -> Result<Vec<RolloutRecord>, RolloutStoreError> {
        let keys: Vec<String> = match self.records.keys().await {
            Ok(k) => k.try_collect().await.map_err(store_err)?,
            Err(e) => return Err(store_err(e)),
        };
        let mut out = Vec::with_capacity(keys.len());
        for key in keys {
            match get::<RolloutRecord>(&self.records, &key).await {
                Ok(Some((r, _))) => out.push(r),
                Ok(None) => {}
                Err(RolloutStoreError::Corrupt { key, reason }) => {
                    tracing::warn!(%key, %reason, "Skipping an unreadable rollout record.")
                }
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }

    /// Store what the rollout runs and its machines (before its record, so a
    /// record always has them).
    pub async fn put_plan(
        &self,
        id: &RolloutId,
        spec: &RolloutSpec,
        machines: &[String],
    ) -> Result<(), RolloutStoreError> {
        self.parts.put(self.subjects.rollout_spec_key(id), encode(spec)?).await.map_err(store_err)?;
        for (i, chunk) in bmcfleet_schema::rollout::chunks(machines) {
            self.parts.put(self.subjects.rollout_chunk_key(id, i), encode(&chunk)?).await.map_err(store_err)?;
        }
        Ok(())
    }

    pub async fn spec(&self, id: &RolloutId) -> Result<Option<RolloutSpec>, RolloutStoreError> {
        Ok(get(&self.parts, &self.subjects.rollout_spec_key(id)).await?.map(|(v, _)| v))
    }

    /// Chunk `chunk` of the machine list.
    pub async fn chunk(&self, id: &RolloutId, chunk: u32) -> Result<Option<Vec<String>>, RolloutStoreError> {
        Ok(get(&self.parts, &self.subjects.rollout_chunk_key(id, chunk)).await?.map(|(v, _)| v))
    }

    /// Record a machine's outcome (the same value whoever writes it).
    pub async fn put_part(&self, id: &RolloutId, part: &RolloutPart) -> Result<(), RolloutStoreError> {
        self.parts.put(self.subjects.rollout_part_key(id, part.index), encode(part)?).await.map_err(store_err)?;
        Ok(())
    }

    pub async fn part(&self, id: &RolloutId, index: u32) -> Result<Option<RolloutPart>, RolloutStoreError> {
        Ok(get(&self.parts, &self.subjects.rollout_part_key(id, index)).await?.map(|(v, _)| v))
    }
}

/// The dedupe id of a rollout event: `unique` names the fact (a machine's
/// index, a record revision), so publishing it again after a crash stores it once.
pub fn event_msg_id(event: &RolloutEvent, unique: &str) -> String {
    format!("rollout.{}.{}.{unique}", event.rollout, event.event.name())
}

fn event_message(event: &RolloutEvent, unique: &str) -> Result<(HeaderMap, bytes::Bytes), String> {
    let body = Encoding::MessagePack.encode(event).map_err(|e| e.to_string())?;
    let mut h = HeaderMap::new();
    h.insert(CONTENT_TYPE, Encoding::MessagePack.content_type());
    h.insert(EVENT_HEADER, event.event.name());
    h.insert(async_nats::header::NATS_MESSAGE_ID, event_msg_id(event, unique).as_str());
    Ok((h, body.into()))
}

/// Publish a rollout event of `tenant` into the events stream and wait
/// until the stream stored it.
pub async fn publish_event(
    js: &Context,
    subjects: &Subjects,
    tenant: &str,
    event: &RolloutEvent,
    unique: &str,
) -> Result<(), String> {
    let (h, body) = event_message(event, unique)?;
    js.publish_with_headers(subjects.rollout_events(tenant, &event.rollout), h, body)
        .await
        .map_err(|e| e.to_string())?
        .await
        .map_err(|e| e.to_string())?;
    Ok(())
}

/// Publish a rollout event of `tenant` into the events stream without
/// asking for the stream's acknowledgement (one message instead of two):
/// for `rollout_progress`, whose facts are stored before it (the machine's
/// part, the record's counts), so a lost one is not sent again. Events
/// published on one connection are stored in the order sent.
pub async fn publish_event_unacked(
    client: &async_nats::Client,
    subjects: &Subjects,
    tenant: &str,
    event: &RolloutEvent,
    unique: &str,
) -> Result<(), String> {
    let (h, body) = event_message(event, unique)?;
    client
        .publish_with_headers(subjects.rollout_events(tenant, &event.rollout), h, body)
        .await
        .map_err(|e| e.to_string())
}
