//! The system event log: read a page (newest first), clear.

use crate::{Ctx, Result};
use async_trait::async_trait;
use bmcfleet_schema::{Action, ActionData, EventLog as EventLogData, EventLogOp};

#[async_trait]
pub trait EventLog: Send {
    /// Entries newest first: `offset` skipped, at most `limit` returned.
    async fn read_event_log(&mut self, ctx: &Ctx, limit: u32, offset: u32) -> Result<EventLogData>;
    /// Erases every entry.
    async fn clear_event_log(&mut self, ctx: &Ctx) -> Result<()>;
}

pub(super) fn handles(action: &Action) -> bool {
    matches!(action, Action::EventLog(_))
}

pub(super) async fn perform(cap: &mut dyn EventLog, ctx: &Ctx, action: &Action) -> Result<Option<ActionData>> {
    let Action::EventLog(op) = action else { unreachable!("dispatched by `handles`") };
    match *op {
        EventLogOp::Read { limit, offset } => {
            let limit = limit.unwrap_or(EventLogOp::DEFAULT_LIMIT).min(EventLogOp::MAX_LIMIT);
            Ok(Some(ActionData::EventLog(cap.read_event_log(ctx, limit, offset).await?)))
        }
        EventLogOp::Clear => cap.clear_event_log(ctx).await.map(|_| None),
    }
}
