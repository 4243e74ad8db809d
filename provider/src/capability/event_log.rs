//! The system event log: read a page (newest first), clear. Clearing
//! touches the event log only, never another log of the BMC (diagnostic
//! dumps, journals, POST codes, crash data); reading covers the event log
//! unless the action asks for other logs ([`LogSet`]). An action may name
//! the logs by the BMC's own ids (`log_ids`): exactly those are read or
//! cleared, a name the BMC does not have is `target_not_found` with
//! nothing done, and a clear never touches a diagnostic data service even
//! when it is named.

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

    /// Entries of the logs named by the BMC's ids, newest first. A provider
    /// whose BMC keeps the event log only (IPMI) knows one name,
    /// [`SEL_LOG_ID`]; any other is `target_not_found`, nothing read.
    async fn read_named_logs(&mut self, ctx: &Ctx, limit: u32, offset: u32, ids: &[String]) -> Result<EventLogData> {
        only_the_sel(ids)?;
        self.read_event_log(ctx, limit, offset).await
    }

    /// Erases the logs named by the BMC's ids and nothing else; every name
    /// is checked before anything is sent. The default (a BMC with the event
    /// log only) knows [`SEL_LOG_ID`].
    async fn clear_named_logs(&mut self, ctx: &Ctx, ids: &[String]) -> Result<()> {
        only_the_sel(ids)?;
        self.clear_event_log(ctx).await
    }
}

/// The name of the system event log of a BMC that keeps no other log
/// (IPMI's SEL), as an action names it (`log_ids: ["sel"]`, any case).
pub const SEL_LOG_ID: &str = "sel";

/// `target_not_found` unless every name is [`SEL_LOG_ID`].
pub fn only_the_sel(ids: &[String]) -> Result<()> {
    let unknown: Vec<&str> = ids.iter().map(String::as_str).filter(|i| !i.eq_ignore_ascii_case(SEL_LOG_ID)).collect();
    if unknown.is_empty() {
        return Ok(());
    }
    Err(ProviderError::new(
        ErrorCode::TargetNotFound,
        format!(
            "this BMC has no log named {}: its only log is the system event log, named `{SEL_LOG_ID}`; nothing was done",
            unknown.iter().map(|u| format!("`{u}`")).collect::<Vec<_>>().join(", ")
        ),
    ))
}

pub(super) fn handles(action: &Action) -> bool {
    matches!(action, Action::EventLog(_))
}

pub(super) async fn perform(cap: &mut dyn EventLog, ctx: &Ctx, action: &Action) -> Result<Option<ActionData>> {
    let Action::EventLog(op) = action else { unreachable!("dispatched by `handles`") };
    match op {
        EventLogOp::Read { limit, offset, logs, log_ids } => {
            let limit = limit.unwrap_or(EventLogOp::DEFAULT_LIMIT).min(EventLogOp::MAX_LIMIT);
            let log = if log_ids.is_empty() {
                cap.read_logs(ctx, limit, *offset, *logs).await?
            } else {
                cap.read_named_logs(ctx, limit, *offset, log_ids).await?
            };
            Ok(Some(ActionData::EventLog(log)))
        }
        EventLogOp::Clear { log_ids } if log_ids.is_empty() => cap.clear_event_log(ctx).await.map(|_| None),
        EventLogOp::Clear { log_ids } => cap.clear_named_logs(ctx, log_ids).await.map(|_| None),
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
            self.0 += 100;
            Ok(())
        }
    }

    #[tokio::test]
    async fn other_logs_of_a_sel_only_bmc_are_unsupported_and_nothing_is_read() {
        let ctx = Ctx::with_timeout(std::time::Duration::from_secs(1));
        let mut bmc = SelOnly(0);
        let other = Action::EventLog(EventLogOp::Read { limit: None, offset: 0, logs: LogSet::Other, log_ids: vec![] });
        let e = perform(&mut bmc, &ctx, &other).await.unwrap_err();
        assert_eq!((e.code, bmc.0), (ErrorCode::Unsupported, 0));
        for logs in [LogSet::Event, LogSet::All] {
            let read = Action::EventLog(EventLogOp::Read { limit: None, offset: 0, logs, log_ids: vec![] });
            assert!(matches!(perform(&mut bmc, &ctx, &read).await, Ok(Some(ActionData::EventLog(_)))));
        }
        assert_eq!(bmc.0, 2);
    }

    #[tokio::test]
    async fn a_sel_only_bmc_knows_the_name_sel_and_refuses_others_untouched() {
        let ctx = Ctx::with_timeout(std::time::Duration::from_secs(1));
        let mut bmc = SelOnly(0);
        for op in [
            EventLogOp::clear_logs(["EventLog"]),
            EventLogOp::clear_logs(["sel", "PostCodes"]),
            EventLogOp::Read { limit: None, offset: 0, logs: LogSet::Event, log_ids: vec!["Dump".into()] },
        ] {
            let e = perform(&mut bmc, &ctx, &Action::EventLog(op)).await.unwrap_err();
            assert_eq!(e.code, ErrorCode::TargetNotFound, "{e:?}");
            assert!(e.message.contains("named `sel`"), "{}", e.message);
        }
        assert_eq!(bmc.0, 0, "nothing read or cleared");
        let read = EventLogOp::Read { limit: None, offset: 0, logs: LogSet::Event, log_ids: vec!["SEL".into()] };
        assert!(perform(&mut bmc, &ctx, &Action::EventLog(read)).await.is_ok());
        perform(&mut bmc, &ctx, &Action::EventLog(EventLogOp::clear_logs(["sel"]))).await.unwrap();
        assert_eq!(bmc.0, 101);
    }
}
