//! Reading a stream from a point in time up to the message that was last
//! when the read began: `bmcctl audit --since` and `bmcctl console log
//! --since` (an ordered consumer, nothing left on the server).

use anyhow::Context;
use async_nats::jetstream::consumer::{pull, DeliverPolicy};
use async_nats::jetstream::Message;
use futures::StreamExt;
use std::time::Duration;

/// How long a replay waits for the next message before it ends.
const NEXT_TIMEOUT: Duration = Duration::from_secs(2);

/// Calls `each` with every message of `stream` (named to the operator as
/// created by `creator`) published within `since`, on `filter` if given,
/// oldest first; `each` gets the message and its stream sequence.
pub async fn since(
    nats: async_nats::Client,
    stream: String,
    creator: &str,
    filter: Option<String>,
    since: Duration,
    mut each: impl FnMut(&Message, u64) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let js = async_nats::jetstream::new(nats);
    let mut handle =
        js.get_stream(&stream).await.with_context(|| format!("the stream {stream} ({creator} creates it)"))?;
    let last = handle.info().await?.state.last_sequence;
    if last == 0 {
        return Ok(());
    }
    let start = time::OffsetDateTime::now_utc() - since;
    let consumer = handle
        .create_consumer(pull::OrderedConfig {
            deliver_policy: DeliverPolicy::ByStartTime { start_time: start },
            filter_subject: filter.unwrap_or_default(),
            ..Default::default()
        })
        .await?;
    let mut messages = consumer.messages().await?;
    loop {
        let Ok(Some(msg)) = tokio::time::timeout(NEXT_TIMEOUT, messages.next()).await else { break };
        let msg = msg?;
        let info = msg.info().ok();
        let seq = info.as_ref().map(|i| i.stream_sequence).unwrap_or(last);
        let pending = info.as_ref().map(|i| i.pending).unwrap_or(0);
        each(&msg, seq)?;
        if seq >= last || pending == 0 {
            break;
        }
    }
    Ok(())
}
