//! The system event log: read a page (newest first), clear. Clearing
//! touches the event log only, never another log of the BMC (diagnostic
//! dumps, journals, POST codes, crash data); reading covers the event log
//! unless the action asks for other logs ([`LogSet`]).

use crate::{Ctx, ProviderError, Result};
use async_trait::async_trait;
use bmcfleet_schema::{Action, ActionData, ErrorCode, EventLog as EventLogData, EventLogOp, LogSet};

#[async_trait]
pub trait EventLog: Send {
    /// Event log entries newest first: `offset` skipped, at most `limit` returned.
    async fn read_event_log(&mut self, ctx: &Ctx, limit: u32, offset: u32) -> Result<EventLogData>;

    /// Entries of the logs in `logs`, newest first. A provider whose BMC
    /// keeps no log but the event log (IPMI: the SEL) answers `other` with
    /// `unsupported`.
    async fn read_logs(&mut self, ctx: &Ctx, limit: u32, offset: u32, logs: LogSet) -> Result<EventLogData> {
        match logs {
            LogSet::Event | LogSet::All => self.read_event_log(ctx, limit, offset).await,
            LogSet::Other => Err(ProviderError::new(
                ErrorCode::Unsupported,
                "this BMC keeps no log but the system event log (logs: other)",
            )),
        }
    }

    /// Erases every entry of the event log, and nothing else.
    async fn clear_event_log(&mut self, ctx: &Ctx) -> Result<()>;
}

pub(super) fn handles(action: &Action) -> bool {
    matches!(action, Action::EventLog(_))
}

pub(super) async fn perform(cap: &mut dyn EventLog, ctx: &Ctx, action: &Action) -> Result<Option<ActionData>> {
    let Action::EventLog(op) = action else { unreachable!("dispatched by `handles`") };
    match *op {
        EventLogOp::Read { limit, offset, logs } => {
            let limit = limit.unwrap_or(EventLogOp::DEFAULT_LIMIT).min(EventLogOp::MAX_LIMIT);
            Ok(Some(ActionData::EventLog(cap.read_logs(ctx, limit, offset, logs).await?)))
        }
        EventLogOp::Clear => cap.clear_event_log(ctx).await.map(|_| None),
    }
}
