//! Publishing batch events durably (into the events stream) with a
//! `Nats-Msg-Id`, so a re-published event after a crash is stored once.

use async_nats::jetstream::Context;
use async_nats::HeaderMap;
use bmcfleet_schema::subject::{CONTENT_TYPE, EVENT_HEADER};
use bmcfleet_schema::{Encoding, Event, EventKind, Subjects};

pub fn kind_name(kind: &EventKind) -> &'static str {
    match kind {
        EventKind::ActionStarted { .. } => "action_started",
        EventKind::ActionFinished { .. } => "action_finished",
        EventKind::ActionProgress { .. } => "action_progress",
        EventKind::BatchFinished { .. } => "batch_finished",
    }
}

/// The dedupe id of an event: one per action start/finish, one per
/// progress step (percentage and task state), one final.
pub fn msg_id(event: &Event) -> String {
    match &event.event {
        EventKind::ActionStarted { index, .. } => format!("{}.{index}.started", event.batch),
        EventKind::ActionFinished { result } => format!("{}.{}.finished", event.batch, result.index),
        EventKind::ActionProgress { index, percent, state, .. } => format!(
            "{}.{index}.progress.{}.{}",
            event.batch,
            percent.map(|p| p.to_string()).unwrap_or_else(|| "-".into()),
            state.as_deref().unwrap_or("-").chars().filter(char::is_ascii_alphanumeric).take(32).collect::<String>()
        ),
        EventKind::BatchFinished { .. } => format!("{}.final", event.batch),
    }
}

/// Headers for an event; `extra` (trace context) is copied in.
pub fn headers(event: &Event, extra: Option<&HeaderMap>) -> HeaderMap {
    let mut h = extra.cloned().unwrap_or_default();
    h.insert(CONTENT_TYPE, Encoding::MessagePack.content_type());
    h.insert(EVENT_HEADER, kind_name(&event.event));
    h.insert(async_nats::header::NATS_MESSAGE_ID, msg_id(event).as_str());
    h
}

/// Why an event was not stored.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct PublishError {
    pub message: String,
    /// Sending the same event again cannot succeed (it does not encode, or
    /// it is larger than the server takes); anything else may be retried.
    pub permanent: bool,
}

/// Publish an event of a batch of `tenant` and wait for the stream's acknowledgement.
pub async fn publish(
    js: &Context,
    subjects: &Subjects,
    tenant: &str,
    event: &Event,
    extra: Option<&HeaderMap>,
) -> Result<(), PublishError> {
    use async_nats::jetstream::context::PublishErrorKind;
    let failed = |e: async_nats::jetstream::context::PublishError| PublishError {
        permanent: e.kind() == PublishErrorKind::MaxPayloadExceeded,
        message: e.to_string(),
    };
    let body =
        Encoding::MessagePack.encode(event).map_err(|e| PublishError { message: e.to_string(), permanent: true })?;
    js.publish_with_headers(subjects.events(tenant, &event.batch), headers(event, extra), body.into())
        .await
        .map_err(failed)?
        .await
        .map_err(failed)?;
    Ok(())
}

/// Publish an event of a batch of `tenant` into the events stream without
/// asking for the stream's acknowledgement (one message instead of two):
/// for the final event of a rollout's batch ([`bmcfleet_schema::Job::record_at_claim`]),
/// whose outcome is durable in its status record, stored before, and read
/// from there by the rollout's driver when it misses the event. It leaves
/// on the connection before the job's acknowledgement, so the server
/// stores it first unless the stream refuses it.
pub async fn publish_unacked(
    client: &async_nats::Client,
    subjects: &Subjects,
    tenant: &str,
    event: &Event,
    extra: Option<&HeaderMap>,
) -> Result<(), PublishError> {
    let body =
        Encoding::MessagePack.encode(event).map_err(|e| PublishError { message: e.to_string(), permanent: true })?;
    client
        .publish_with_headers(subjects.events(tenant, &event.batch), headers(event, extra), body.into())
        .await
        .map_err(|e| PublishError {
            permanent: e.kind() == async_nats::client::PublishErrorKind::MaxPayloadExceeded,
            message: e.to_string(),
        })
}
