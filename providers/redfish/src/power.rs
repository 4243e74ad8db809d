//! Power: `ComputerSystem.Reset` with the reset type the BMC allows.
//!
//! | op        | reset types tried, in order                         | when already there |
//! |-----------|-----------------------------------------------------|--------------------|
//! | on        | `On`, `ForceOn`, `PushPowerButton` (only from Off)  | nothing sent       |
//! | off       | `ForceOff`                                          | nothing sent       |
//! | soft_off  | `GracefulShutdown`, `PushPowerButton` (only from On)| nothing sent       |
//! | cycle     | `PowerCycle`; else `ForceOff`, wait for Off, `On`/`ForceOn`; else `ForceRestart` | — |
//! | reset     | `ForceRestart`, `PowerCycle`                        | —                  |
//! | nmi       | `Nmi`                                               | —                  |
//!
//! `on`/`off`/`soft_off` read the power state first, so repeating them is a
//! no-op (several BMCs answer `409` to `On` when the host is on).

use crate::discovery::ResetAction;
use crate::error::unsupported;
use crate::session::RedfishSession;
use bmcfleet_provider::{Ctx, Power, ProviderError, Result};
use bmcfleet_schema::{ErrorCode, PowerOp, PowerState};
use serde_json::{json, Value};

/// What to send for a power operation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Plan {
    /// Already in the requested state.
    Noop(PowerState),
    Send(&'static str),
    /// Power cycle emulated: hard off, wait until the BMC reports Off, on.
    OffThenOn {
        off: &'static str,
        on: &'static str,
    },
}

/// Whether `plan` needs the current power state to decide.
pub(crate) fn needs_state(op: PowerOp, reset: &ResetAction) -> bool {
    match op {
        PowerOp::On | PowerOp::Off | PowerOp::SoftOff => true,
        PowerOp::Cycle => reset.pick(&["PowerCycle"]).is_none(),
        _ => false,
    }
}

pub(crate) fn plan(op: PowerOp, reset: &ResetAction, current: Option<PowerState>) -> Result<Plan> {
    let none = |what: &str| {
        unsupported(format!(
            "the BMC allows no reset type for {what} (ComputerSystem.Reset allows: {})",
            reset.describe_allowed()
        ))
    };
    Ok(match op {
        PowerOp::Status => return Err(ProviderError::new(ErrorCode::Internal, "power status is not a reset")),
        PowerOp::On => {
            if current == Some(PowerState::On) {
                return Ok(Plan::Noop(PowerState::On));
            }
            match reset.pick(&["On", "ForceOn"]) {
                Some(t) => Plan::Send(t),
                None if current == Some(PowerState::Off) && reset.allows("PushPowerButton") => {
                    Plan::Send("PushPowerButton")
                }
                None => return Err(none("power on")),
            }
        }
        PowerOp::Off => {
            if current == Some(PowerState::Off) {
                return Ok(Plan::Noop(PowerState::Off));
            }
            Plan::Send(reset.pick(&["ForceOff"]).ok_or_else(|| none("hard power off"))?)
        }
        PowerOp::SoftOff => {
            if current == Some(PowerState::Off) {
                return Ok(Plan::Noop(PowerState::Off));
            }
            match reset.pick(&["GracefulShutdown"]) {
                Some(t) => Plan::Send(t),
                None if current == Some(PowerState::On) && reset.allows("PushPowerButton") => {
                    Plan::Send("PushPowerButton")
                }
                None => return Err(none("graceful shutdown")),
            }
        }
        PowerOp::Cycle => {
            if let Some(t) = reset.pick(&["PowerCycle"]) {
                Plan::Send(t)
            } else if let (Some(off), Some(on)) = (reset.pick(&["ForceOff"]), reset.pick(&["On", "ForceOn"])) {
                if current == Some(PowerState::Off) {
                    Plan::Send(on)
                } else {
                    Plan::OffThenOn { off, on }
                }
            } else if let Some(t) = reset.pick(&["ForceRestart"]) {
                Plan::Send(t)
            } else {
                return Err(none("power cycle"));
            }
        }
        PowerOp::Reset => Plan::Send(reset.pick(&["ForceRestart", "PowerCycle"]).ok_or_else(|| none("hard reset"))?),
        PowerOp::Nmi => Plan::Send(reset.pick(&["Nmi"]).ok_or_else(|| none("NMI"))?),
    })
}

pub(crate) fn parse_power_state(v: &Value) -> PowerState {
    match v.get("PowerState").and_then(Value::as_str) {
        Some("On") => PowerState::On,
        Some("Off") => PowerState::Off,
        _ => PowerState::Unknown,
    }
}

impl RedfishSession {
    pub(crate) async fn power_state(&mut self, ctx: &Ctx) -> Result<PowerState> {
        let path = self.service.system.path.clone();
        let r = self.transport.get(ctx, &path).await?;
        Ok(parse_power_state(&r.body))
    }

    async fn send_reset(&mut self, ctx: &Ctx, target: &str, reset_type: &str) -> Result<()> {
        tracing::info!(bmc = %self.transport.bmc(), reset_type, "Sending ComputerSystem.Reset.");
        self.transport.post(ctx, target, &json!({ "ResetType": reset_type })).await?;
        Ok(())
    }

    /// Poll the power state until it reads `want`, for at most the settle
    /// timeout and never past the deadline: `not_reached` when the system
    /// kept reporting another state, `timeout` when no read answered.
    async fn wait_for_state(&mut self, ctx: &Ctx, want: PowerState, after: &str) -> Result<()> {
        let interval = self.transport.config().state_poll_interval;
        let give_up = ctx.settle.map(|d| tokio::time::Instant::now() + d).unwrap_or(ctx.deadline).min(ctx.deadline);
        let mut seen = None;
        let too_late = |seen: Option<PowerState>| {
            match seen {
            Some(s) => ProviderError::new(
                ErrorCode::NotReached,
                format!("{after} was accepted but the system still reported {s:?}, not {want:?}, when the wait ended; the rest of the power cycle was not sent"),
            ),
            None => ProviderError::new(
                ErrorCode::Timeout,
                format!("{after} was accepted but no read of the power state answered before the deadline; the rest of the power cycle was not sent"),
            ),
        }
        };
        loop {
            let read = tokio::time::timeout_at(give_up, self.power_state(ctx)).await;
            match read {
                Ok(Ok(s)) if s == want => return Ok(()),
                Ok(Ok(s)) => seen = Some(s),
                Ok(Err(e)) if e.code == ErrorCode::DeadlineExceeded => return Err(too_late(seen)),
                // A read-back cut short by the deadline is the same story: the
                // first half was sent, the second was not.
                Ok(Err(e)) if e.code == ErrorCode::Timeout && ctx.remaining().is_err() => return Err(too_late(seen)),
                Ok(Err(e)) => return Err(e),
                Err(_) => return Err(too_late(seen)),
            }
            let now = tokio::time::Instant::now();
            if now >= give_up {
                return Err(too_late(seen));
            }
            tokio::time::sleep(interval.min(give_up - now)).await;
        }
    }
}

#[async_trait::async_trait]
impl Power for RedfishSession {
    async fn power(&mut self, ctx: &Ctx, op: PowerOp) -> Result<Option<PowerState>> {
        if op == PowerOp::Status {
            return self.power_state(ctx).await.map(Some);
        }
        let reset = self.service.system.reset.clone().ok_or_else(|| {
            unsupported(format!("system {} has no ComputerSystem.Reset action", self.service.system.path))
        })?;
        let current = if needs_state(op, &reset) { Some(self.power_state(ctx).await?) } else { None };
        match plan(op, &reset, current)? {
            Plan::Noop(state) => {
                tracing::debug!(bmc = %self.transport.bmc(), ?op, "Already in the requested power state; nothing sent.");
                Ok(Some(state))
            }
            Plan::Send(t) => {
                self.send_reset(ctx, &reset.target, t).await?;
                Ok(None)
            }
            Plan::OffThenOn { off, on } => {
                self.send_reset(ctx, &reset.target, off).await?;
                self.wait_for_state(ctx, PowerState::Off, off).await?;
                self.send_reset(ctx, &reset.target, on).await?;
                Ok(None)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn action(v: &[&str]) -> ResetAction {
        ResetAction { target: "/t".into(), allowed: Some(v.iter().map(|s| s.to_string()).collect()) }
    }

    #[test]
    fn on_prefers_on_then_force_on() {
        let lenovo =
            action(&["On", "ForceOff", "GracefulShutdown", "GracefulRestart", "ForceRestart", "Nmi", "ForceOn"]);
        assert_eq!(plan(PowerOp::On, &lenovo, Some(PowerState::Off)).unwrap(), Plan::Send("On"));
        let only_force = action(&["ForceOn", "ForceOff"]);
        assert_eq!(plan(PowerOp::On, &only_force, Some(PowerState::Off)).unwrap(), Plan::Send("ForceOn"));
        assert_eq!(plan(PowerOp::On, &only_force, Some(PowerState::On)).unwrap(), Plan::Noop(PowerState::On));
        let button = action(&["PushPowerButton"]);
        assert_eq!(plan(PowerOp::On, &button, Some(PowerState::Off)).unwrap(), Plan::Send("PushPowerButton"));
        assert_eq!(plan(PowerOp::On, &button, Some(PowerState::Unknown)).unwrap_err().code, ErrorCode::Unsupported);
    }

    #[test]
    fn cycle_adapts() {
        let dell = action(&[
            "On",
            "ForceOff",
            "ForceRestart",
            "GracefulRestart",
            "GracefulShutdown",
            "PushPowerButton",
            "Nmi",
            "PowerCycle",
        ]);
        assert_eq!(plan(PowerOp::Cycle, &dell, None).unwrap(), Plan::Send("PowerCycle"));
        let lenovo = action(&["On", "ForceOff", "GracefulShutdown", "ForceRestart", "Nmi", "ForceOn"]);
        assert!(needs_state(PowerOp::Cycle, &lenovo));
        assert_eq!(
            plan(PowerOp::Cycle, &lenovo, Some(PowerState::On)).unwrap(),
            Plan::OffThenOn { off: "ForceOff", on: "On" }
        );
        assert_eq!(plan(PowerOp::Cycle, &lenovo, Some(PowerState::Off)).unwrap(), Plan::Send("On"));
        let restart_only = action(&["ForceRestart"]);
        assert_eq!(plan(PowerOp::Cycle, &restart_only, Some(PowerState::On)).unwrap(), Plan::Send("ForceRestart"));
        assert_eq!(
            plan(PowerOp::Cycle, &action(&["On"]), Some(PowerState::On)).unwrap_err().code,
            ErrorCode::Unsupported
        );
    }

    #[test]
    fn off_soft_off_reset_nmi() {
        let a = action(&["On", "ForceOff", "GracefulShutdown", "ForceRestart", "Nmi"]);
        assert_eq!(plan(PowerOp::Off, &a, Some(PowerState::On)).unwrap(), Plan::Send("ForceOff"));
        assert_eq!(plan(PowerOp::Off, &a, Some(PowerState::Off)).unwrap(), Plan::Noop(PowerState::Off));
        assert_eq!(plan(PowerOp::SoftOff, &a, Some(PowerState::On)).unwrap(), Plan::Send("GracefulShutdown"));
        assert_eq!(plan(PowerOp::Reset, &a, None).unwrap(), Plan::Send("ForceRestart"));
        assert_eq!(plan(PowerOp::Nmi, &a, None).unwrap(), Plan::Send("Nmi"));
        let no_nmi = action(&["On"]);
        let e = plan(PowerOp::Nmi, &no_nmi, None).unwrap_err();
        assert_eq!(e.code, ErrorCode::Unsupported);
        assert!(e.message.contains("allows: On"), "{}", e.message);
    }

    #[test]
    fn unadvertised_values_send_the_standard_one() {
        let open = ResetAction { target: "/t".into(), allowed: None };
        assert_eq!(plan(PowerOp::Cycle, &open, None).unwrap(), Plan::Send("PowerCycle"));
        assert_eq!(plan(PowerOp::On, &open, Some(PowerState::Off)).unwrap(), Plan::Send("On"));
    }
}
