//! `bmcctl audit [--since DURATION]`: the audit log (admitted batches and
//! machine registry changes, with who made them), oldest first; one JSON
//! line per record with `--output json`.

use crate::output::Format;
use anyhow::Context;
use async_nats::jetstream::consumer::{pull, DeliverPolicy};
use bmcfleet_common::config::TopologyArgs;
use bmcfleet_schema::audit::AuditRecord;
use futures::StreamExt;
use std::process::ExitCode;
use std::time::Duration;

pub async fn run(
    nats: async_nats::Client,
    topology: &TopologyArgs,
    since: Duration,
    format: Format,
) -> anyhow::Result<ExitCode> {
    let subjects = topology.subjects();
    let js = async_nats::jetstream::new(nats);
    let name = subjects.audit_stream();
    let mut stream =
        js.get_stream(&name).await.with_context(|| format!("the audit stream {name} (the gateway creates it)"))?;
    let last = stream.info().await?.state.last_sequence;
    if last == 0 {
        return Ok(ExitCode::SUCCESS);
    }
    let start = time::OffsetDateTime::now_utc() - since;
    let consumer = stream
        .create_consumer(pull::OrderedConfig {
            deliver_policy: DeliverPolicy::ByStartTime { start_time: start },
            ..Default::default()
        })
        .await?;
    let mut messages = consumer.messages().await?;
    loop {
        let Ok(Some(msg)) = tokio::time::timeout(Duration::from_secs(2), messages.next()).await else { break };
        let msg = msg?;
        let seq = msg.info().map(|i| i.stream_sequence).unwrap_or(last);
        match serde_json::from_slice::<Vec<AuditRecord>>(&msg.payload) {
            Ok(records) => {
                for r in records {
                    if format.is_json() {
                        println!("{}", serde_json::to_string(&r)?);
                    } else {
                        println!("{}", crate::output::audit_line(&r, format.is_wide()));
                    }
                }
            }
            Err(e) => eprintln!("message {seq} is unreadable: {e}"),
        }
        if seq >= last {
            break;
        }
    }
    Ok(ExitCode::SUCCESS)
}
