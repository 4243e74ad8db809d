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

#[cfg(test)]
mod tests {
    use super::*;

    /// A BMC with the SEL only (IPMI): counts the reads.
    struct SelOnly(u32);

    #[async_trait]
    impl EventLog for SelOnly {
        async fn read_event_log(&mut self, _ctx: &Ctx, _limit: u32, _offset: u32) -> Result<EventLogData> {
            self.0 += 1;
            Ok(EventLogData::default())
        }
        async fn clear_event_log(&mut self, _ctx: &Ctx) -> Result<()> {
            unreachable!("no test clears")
        }
    }

    #[tokio::test]
    async fn other_logs_of_a_sel_only_bmc_are_unsupported_and_nothing_is_read() {
        let ctx = Ctx::with_timeout(std::time::Duration::from_secs(1));
        let mut bmc = SelOnly(0);
        let other = Action::EventLog(EventLogOp::Read { limit: None, offset: 0, logs: LogSet::Other });
        let e = perform(&mut bmc, &ctx, &other).await.unwrap_err();
        assert_eq!((e.code, bmc.0), (ErrorCode::Unsupported, 0));
        for logs in [LogSet::Event, LogSet::All] {
            let read = Action::EventLog(EventLogOp::Read { limit: None, offset: 0, logs });
            assert!(matches!(perform(&mut bmc, &ctx, &read).await, Ok(Some(ActionData::EventLog(_)))));
        }
        assert_eq!(bmc.0, 2);
    }
}
