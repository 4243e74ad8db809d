//! Power control and power state, with verified effects: a change of power
//! succeeds only when the machine reports the state it leads to (on for
//! on, cycle and reset; off for off and soft off), read back every
//! [`VERIFY_POLL`] for at most the settle timeout; otherwise `not_reached`
//! with what the machine reported. The settle timeout is the action's own
//! (`power_settle.settle`), else the worker's (`Ctx::settle`, its
//! `--power-settle-timeout`), else [`DEFAULT_SETTLE`]; a soft off without
//! one waits as long as the action may last (the operating system shuts
//! down). `power_settle` with `escalate_after` turns a soft off that has
//! not taken effect after that long into a hard off. Providers that verify
//! on their own (IPMI) return the verified state and use `Ctx::settle`.

use crate::{Ctx, ProviderError, Result};
use async_trait::async_trait;
use bmcfleet_schema::{Action, ActionData, ErrorCode, PowerOp, PowerState};
use std::time::Duration;
use tokio::time::Instant;

/// Interval of the read-backs that verify a power change.
pub const VERIFY_POLL: Duration = Duration::from_millis(500);
/// Settle timeout when neither the action nor the worker names one.
pub const DEFAULT_SETTLE: Duration = Duration::from_secs(60);

#[async_trait]
pub trait Power: Send {
    /// Performs `op`; returns the power state for [`PowerOp::Status`] (and
    /// may return it for other ops when the BMC reports it for free, or the
    /// provider verified the change itself).
    async fn power(&mut self, ctx: &Ctx, op: PowerOp) -> Result<Option<PowerState>>;
}

pub(super) fn handles(action: &Action) -> bool {
    matches!(action, Action::Power(_) | Action::PowerSettle(_))
}

/// The state a power change leads to.
pub fn leads_to(op: PowerOp) -> Option<PowerState> {
    match op {
        PowerOp::On | PowerOp::Cycle | PowerOp::Reset => Some(PowerState::On),
        PowerOp::Off | PowerOp::SoftOff => Some(PowerState::Off),
        PowerOp::Nmi | PowerOp::Status => None,
    }
}

pub(super) async fn perform(cap: &mut dyn Power, ctx: &Ctx, action: &Action) -> Result<Option<ActionData>> {
    let (op, settle, escalate_after) = match action {
        Action::Power(op) => (*op, None, None),
        Action::PowerSettle(p) => (p.op, p.settle, p.escalate_after),
        _ => unreachable!("dispatched by `handles`"),
    };
    let effective = |op: PowerOp, own: Option<Duration>| match (own, op) {
        (Some(d), _) => Some(d),
        (None, PowerOp::SoftOff) => None,
        (None, _) => Some(ctx.settle.unwrap_or(DEFAULT_SETTLE)),
    };
    if let (PowerOp::SoftOff, Some(after)) = (op, escalate_after) {
        let soft = ctx.clone().with_settle(Some(after));
        match change(cap, &soft, PowerOp::SoftOff).await {
            Err(e) if e.code == ErrorCode::NotReached => {
                tracing::warn!(escalate_after = ?after, reason = %e.message, "Soft off did not take effect in time; switching off hard.");
                let hard = ctx.clone().with_settle(effective(PowerOp::Off, settle));
                return change(cap, &hard, PowerOp::Off).await;
            }
            other => return other,
        }
    }
    let ctx = ctx.clone().with_settle(effective(op, settle));
    change(cap, &ctx, op).await
}

/// `op`, then its effect verified (see the module docs).
async fn change(cap: &mut dyn Power, ctx: &Ctx, op: PowerOp) -> Result<Option<ActionData>> {
    let reported = cap.power(ctx, op).await?;
    let Some(want) = leads_to(op) else {
        return match (op, reported) {
            (_, Some(s)) => Ok(Some(ActionData::PowerState(s))),
            (PowerOp::Status, None) => {
                Err(ProviderError::new(ErrorCode::ProtocolError, "the BMC returned no power state"))
            }
            _ => Ok(None),
        };
    };
    if reported == Some(want) {
        return Ok(Some(ActionData::PowerState(want)));
    }
    let started = Instant::now();
    let give_up = ctx.settle.map(|d| started + d).unwrap_or(ctx.deadline).min(ctx.deadline);
    let mut last = reported;
    loop {
        match cap.power(ctx, PowerOp::Status).await {
            Ok(Some(s)) if s == want => return Ok(Some(ActionData::PowerState(s))),
            Ok(s) => last = s.or(last),
            // A read cut short by the deadline: the change was accepted, its effect unseen.
            Err(e)
                if matches!(e.code, ErrorCode::DeadlineExceeded | ErrorCode::Timeout) && Instant::now() >= give_up => {}
            Err(e) => return Err(e),
        }
        let now = Instant::now();
        if now + VERIFY_POLL >= give_up {
            return Err(not_reached(op, want, last, now.duration_since(started)));
        }
        tokio::time::sleep(VERIFY_POLL).await;
    }
}

/// The `not_reached` error of a change that did not show in time.
pub fn not_reached(op: PowerOp, want: PowerState, last: Option<PowerState>, after: Duration) -> ProviderError {
    ProviderError::new(
        ErrorCode::NotReached,
        format!(
            "the BMC accepted power {} but the machine still reported {} after {} ms (wanted {})",
            format!("{op:?}").to_lowercase(),
            last.map(|s| format!("{s:?}").to_lowercase()).unwrap_or_else(|| "nothing".into()),
            after.as_millis(),
            format!("{want:?}").to_lowercase()
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;

    /// A machine that takes `lag` status reads to reach what it was told.
    struct Lagging {
        state: PowerState,
        target: Option<PowerState>,
        lag: usize,
        reads: usize,
        sent: Vec<PowerOp>,
        refuse_soft: bool,
        statuses: VecDeque<PowerState>,
    }

    impl Lagging {
        fn new(state: PowerState, lag: usize) -> Self {
            Lagging { state, target: None, lag, reads: 0, sent: vec![], refuse_soft: false, statuses: VecDeque::new() }
        }
    }

    #[async_trait]
    impl Power for Lagging {
        async fn power(&mut self, _ctx: &Ctx, op: PowerOp) -> Result<Option<PowerState>> {
            if op == PowerOp::Status {
                self.reads += 1;
                if let Some(t) = self.target {
                    if self.reads >= self.lag {
                        self.state = t;
                    }
                }
                self.statuses.push_back(self.state);
                return Ok(Some(self.state));
            }
            self.sent.push(op);
            if !(op == PowerOp::SoftOff && self.refuse_soft) {
                self.target = leads_to(op);
                self.reads = 0;
            }
            Ok(None)
        }
    }

    fn ctx(settle: Option<Duration>) -> Ctx {
        Ctx::with_timeout(Duration::from_secs(30)).with_settle(settle)
    }

    #[tokio::test(start_paused = true)]
    async fn a_change_succeeds_when_the_machine_shows_it() {
        let mut m = Lagging::new(PowerState::Off, 3);
        let r = perform(&mut m, &ctx(None), &Action::Power(PowerOp::On)).await.unwrap();
        assert_eq!(r, Some(ActionData::PowerState(PowerState::On)));
        assert_eq!(m.sent, vec![PowerOp::On], "sent once, then read back");
        assert!(m.reads >= 3);
    }

    #[tokio::test(start_paused = true)]
    async fn a_change_that_does_not_show_is_not_reached_at_the_settle_timeout() {
        let mut m = Lagging::new(PowerState::Off, usize::MAX);
        let started = Instant::now();
        let e = perform(&mut m, &ctx(Some(Duration::from_secs(5))), &Action::Power(PowerOp::On)).await.unwrap_err();
        assert_eq!(e.code, ErrorCode::NotReached, "{e}");
        assert!(e.message.contains("still reported off") && e.message.contains("wanted on"), "{e}");
        assert!(!e.not_sent && !e.retryable);
        let waited = started.elapsed();
        assert!(waited >= Duration::from_secs(4) && waited <= Duration::from_secs(5), "{waited:?}");
        // The action's own settle overrides the worker's.
        let mut m = Lagging::new(PowerState::Off, usize::MAX);
        let started = Instant::now();
        let own = Action::PowerSettle(bmcfleet_schema::PowerSettle {
            op: PowerOp::On,
            settle: Some(Duration::from_secs(2)),
            escalate_after: None,
        });
        assert_eq!(
            perform(&mut m, &ctx(Some(Duration::from_secs(20))), &own).await.unwrap_err().code,
            ErrorCode::NotReached
        );
        assert!(started.elapsed() <= Duration::from_secs(2));
    }

    #[tokio::test(start_paused = true)]
    async fn a_soft_off_escalates_to_a_hard_off_only_when_asked() {
        // The OS ignores the ACPI request.
        let mut m = Lagging::new(PowerState::On, 1);
        m.refuse_soft = true;
        let escalating = Action::PowerSettle(bmcfleet_schema::PowerSettle {
            op: PowerOp::SoftOff,
            settle: None,
            escalate_after: Some(Duration::from_secs(3)),
        });
        let r = perform(&mut m, &ctx(None), &escalating).await.unwrap();
        assert_eq!(r, Some(ActionData::PowerState(PowerState::Off)));
        assert_eq!(m.sent, vec![PowerOp::SoftOff, PowerOp::Off], "soft first, hard after the escalation time");
        // Without escalation the soft off waits until the action's deadline and fails.
        let mut m = Lagging::new(PowerState::On, 1);
        m.refuse_soft = true;
        let short = Ctx::with_timeout(Duration::from_secs(8));
        let e = perform(&mut m, &short, &Action::Power(PowerOp::SoftOff)).await.unwrap_err();
        assert_eq!(e.code, ErrorCode::NotReached);
        assert_eq!(m.sent, vec![PowerOp::SoftOff], "never switched off hard unasked");
        // A soft off that works does not escalate.
        let mut m = Lagging::new(PowerState::On, 2);
        assert_eq!(
            perform(&mut m, &ctx(None), &escalating).await.unwrap(),
            Some(ActionData::PowerState(PowerState::Off))
        );
        assert_eq!(m.sent, vec![PowerOp::SoftOff]);
    }

    #[tokio::test(start_paused = true)]
    async fn status_and_nmi_are_not_verified() {
        let mut m = Lagging::new(PowerState::On, 1);
        assert_eq!(
            perform(&mut m, &ctx(None), &Action::Power(PowerOp::Status)).await.unwrap(),
            Some(ActionData::PowerState(PowerState::On))
        );
        assert_eq!(perform(&mut m, &ctx(None), &Action::Power(PowerOp::Nmi)).await.unwrap(), None);
        assert_eq!(m.statuses.len(), 1, "one read for the status, none for the NMI");
    }
}
