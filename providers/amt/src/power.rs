//! Power control through `CIM_PowerManagementService.RequestPowerStateChange`
//! and power status through `CIM_AssociatedPowerManagementService.PowerState`.
//!
//! # Requested power states
//!
//! | bmcfleet op | `PowerState` sent | CIM name                  | what AMT does                         |
//! |-------------|-------------------|---------------------------|---------------------------------------|
//! | `on`        | 2                 | On                        | power up / wake                       |
//! | `off`       | 8                 | Off - Soft                | immediate power off (AMT's "power down"; no OS involvement) |
//! | `soft_off`  | 12                | Off - Soft Graceful       | OS shutdown (needs OS support; only when offered) |
//! | `cycle`     | 5                 | Power Cycle (Off - Soft)  | off, then on                          |
//! | `reset`     | 10                | Master Bus Reset          | hard reset                            |
//! | `nmi`       | 11                | Diagnostic Interrupt (NMI)| NMI (only when offered)               |
//!
//! The `ManagedElement` parameter is always the EPR of `CIM_ComputerSystem`
//! `Name=ManagedSystem` (the host), and the service is selected by its four
//! key properties.
//!
//! Before acting, the current state and `AvailableRequestedPowerStates` are
//! read: `on`/`off`/`soft_off` of a host already in that state succeed without
//! a request (idempotent, as redelivery needs); `cycle`/`reset` of a host that
//! is off power it on (AMT refuses to cycle an off host, and the intent is "boot
//! it now"); `soft_off` and `nmi` fail with `unsupported` when AMT does not list
//! them as available (older firmware, no OS agent).
//!
//! # Reported power states
//!
//! | `PowerState` read | meaning (CIM)               | bmcfleet  |
//! |-------------------|-----------------------------|-----------|
//! | 2                 | On (S0)                     | `on`      |
//! | 6, 8, 13          | Off - Hard / Off - Soft / Off - Hard Graceful (S5, G3) | `off` |
//! | 7                 | Hibernate (S4)              | `off`     |
//! | 3, 4              | Sleep - Light / Deep (S1, S3) | `unknown` |
//! | others            | transitions (cycle, reset…) | `unknown` |

use crate::error::AmtError;
use crate::wsman::client::WsmanClient;
use crate::wsman::response::{epr_resource_uri, epr_selectors, prop, props};
use crate::wsman::{names, ns, Epr, Param};
use bmcfleet_provider::Ctx;
use bmcfleet_schema::{PowerOp, PowerState};

pub const ON: u16 = 2;
pub const CYCLE: u16 = 5;
pub const OFF: u16 = 8;
pub const MASTER_BUS_RESET: u16 = 10;
pub const NMI: u16 = 11;
pub const OFF_GRACEFUL: u16 = 12;

/// CIM name of a `PowerState` value.
pub fn describe(v: u16) -> &'static str {
    match v {
        1 => "Other",
        2 => "On",
        3 => "Sleep - Light",
        4 => "Sleep - Deep",
        5 => "Power Cycle (Off - Soft)",
        6 => "Off - Hard",
        7 => "Hibernate (Off - Soft)",
        8 => "Off - Soft",
        9 => "Power Cycle (Off - Hard)",
        10 => "Master Bus Reset",
        11 => "Diagnostic Interrupt (NMI)",
        12 => "Off - Soft Graceful",
        13 => "Off - Hard Graceful",
        14 => "Master Bus Reset Graceful",
        15 => "Power Cycle (Off - Soft Graceful)",
        16 => "Power Cycle (Off - Hard Graceful)",
        _ => "unknown",
    }
}

/// bmcfleet's view of a reported `PowerState` (table in the module docs).
pub fn map_state(v: u16) -> PowerState {
    match v {
        2 => PowerState::On,
        6 | 7 | 8 | 13 => PowerState::Off,
        _ => PowerState::Unknown,
    }
}

/// The host's power state and what AMT offers from it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PowerStatus {
    pub state: u16,
    pub available: Vec<u16>,
}

impl PowerStatus {
    pub fn mapped(&self) -> PowerState {
        map_state(self.state)
    }

    fn offers(&self, v: u16) -> bool {
        self.available.contains(&v)
    }
}

/// Read `CIM_AssociatedPowerManagementService` for the managed host.
pub async fn status(client: &mut WsmanClient, ctx: &Ctx) -> Result<PowerStatus, AmtError> {
    let items = client.enumerate(ctx, "CIM_AssociatedPowerManagementService").await?;
    status_from(&items)
}

/// The managed host's power state among enumerated
/// `CIM_AssociatedPowerManagementService` instances (the one whose
/// `UserOfService` names the host, else the first).
pub fn status_from(items: &[crate::xml::Element]) -> Result<PowerStatus, AmtError> {
    let is_host = |i: &crate::xml::Element| {
        i.child_local("UserOfService").is_some_and(|u| {
            epr_resource_uri(u).is_some_and(|r| r.ends_with("/CIM_ComputerSystem"))
                && epr_selectors(u).iter().any(|(k, v)| k == "Name" && v == names::MANAGED_SYSTEM)
        })
    };
    let item = items
        .iter()
        .find(|i| i.name == "CIM_AssociatedPowerManagementService" && is_host(i))
        .or_else(|| items.iter().find(|i| i.name == "CIM_AssociatedPowerManagementService"))
        .ok_or_else(|| AmtError::Protocol("CIM_AssociatedPowerManagementService: no instance for the host".into()))?;
    let raw = prop(item, "PowerState")
        .ok_or_else(|| AmtError::Protocol("CIM_AssociatedPowerManagementService: no PowerState".into()))?;
    let state = raw.parse::<u16>().map_err(|_| {
        AmtError::Protocol(format!("CIM_AssociatedPowerManagementService: PowerState `{raw}` is not a number"))
    })?;
    let available = props(item, "AvailableRequestedPowerStates").iter().filter_map(|v| v.parse().ok()).collect();
    Ok(PowerStatus { state, available })
}

/// Send `RequestPowerStateChange(value)` for the managed host.
pub async fn request(client: &mut WsmanClient, ctx: &Ctx, value: u16) -> Result<(), AmtError> {
    let managed = Epr::new(
        ns::cim("CIM_ComputerSystem"),
        &[("CreationClassName", "CIM_ComputerSystem"), ("Name", names::MANAGED_SYSTEM)],
    );
    client
        .invoke_service(
            ctx,
            "CIM_PowerManagementService",
            names::POWER_SERVICE,
            "RequestPowerStateChange",
            vec![
                Param::Value { name: "PowerState", value: value.to_string() },
                Param::Ref { name: "ManagedElement", epr: managed },
            ],
        )
        .await
}

/// Run one power operation (see the module docs for the rules).
pub async fn power(client: &mut WsmanClient, ctx: &Ctx, op: PowerOp) -> Result<Option<PowerState>, AmtError> {
    let st = status(client, ctx).await?;
    let now = st.mapped();
    let value = match op {
        PowerOp::Status => return Ok(Some(now)),
        PowerOp::On if now == PowerState::On => return Ok(Some(now)),
        PowerOp::Off | PowerOp::SoftOff if now == PowerState::Off => return Ok(Some(now)),
        PowerOp::On => ON,
        PowerOp::Off => OFF,
        PowerOp::Cycle | PowerOp::Reset if now == PowerState::Off => ON,
        PowerOp::Cycle => CYCLE,
        PowerOp::Reset => MASTER_BUS_RESET,
        PowerOp::SoftOff | PowerOp::Nmi => {
            let (v, what) = if op == PowerOp::SoftOff {
                (OFF_GRACEFUL, "graceful power off (PowerState 12)")
            } else {
                (NMI, "NMI (PowerState 11)")
            };
            if op == PowerOp::Nmi && now == PowerState::Off {
                return Err(AmtError::InvalidState(format!(
                    "cannot send an NMI: the host is off (PowerState {} {})",
                    st.state,
                    describe(st.state)
                )));
            }
            if !st.offers(v) {
                return Err(AmtError::Unsupported(format!(
                    "this AMT does not offer {what} in the current state (PowerState {} {}); it offers {:?}",
                    st.state,
                    describe(st.state),
                    st.available
                )));
            }
            v
        }
    };
    tracing::debug!(bmc = %client.bmc(), from = st.state, requested = value, "Requesting AMT power state change.");
    request(client, ctx, value).await?;
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mapping() {
        assert_eq!(map_state(2), PowerState::On);
        for off in [6, 7, 8, 13] {
            assert_eq!(map_state(off), PowerState::Off, "{off}");
        }
        for other in [0, 1, 3, 4, 5, 9, 10, 11, 12, 14, 15, 16, 99] {
            assert_eq!(map_state(other), PowerState::Unknown, "{other}");
        }
        assert_eq!(describe(10), "Master Bus Reset");
    }
}
