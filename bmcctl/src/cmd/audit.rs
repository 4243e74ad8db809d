//! `bmcctl audit [--since DURATION]`: the audit log (admitted batches and
//! machine registry changes, with who made them), oldest first; one JSON
//! line per record with `--output json`.

use crate::output::Format;
use bmcfleet_common::config::TopologyArgs;
use bmcfleet_schema::audit::AuditRecord;
use std::process::ExitCode;
use std::time::Duration;

pub async fn run(
    nats: async_nats::Client,
    topology: &TopologyArgs,
    since: Duration,
    format: Format,
) -> anyhow::Result<ExitCode> {
    let subjects = topology.subjects();
    super::replay::since(nats, subjects.audit_stream(), "the gateway", None, since, |msg, seq| {
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
        Ok(())
    })
    .await?;
    Ok(ExitCode::SUCCESS)
}
