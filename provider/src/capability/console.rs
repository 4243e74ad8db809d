//! The serial console. Unlike every other capability it serves no action:
//! a console is a long-lived session of its own, held by the worker that
//! owns the machine's partition (docs/CONSOLE.md); IPMI opens it with
//! `IpmiConnector::open_console`. What a regular session can do is read the
//! BMC's console settings, which tell whether a console can be had at all.

use crate::{Ctx, Result};
use async_trait::async_trait;
use bmcfleet_schema::{Action, ActionData};

/// The BMC's serial console settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConsoleSettings {
    /// Whether the BMC has the console enabled.
    pub enabled: bool,
    /// The serial bit rate, when the BMC names one.
    pub bit_rate: Option<u32>,
}

#[async_trait]
pub trait Console: Send {
    /// Read the BMC's console settings (nothing is changed).
    async fn console_settings(&mut self, ctx: &Ctx) -> Result<ConsoleSettings>;
}

/// No action is served by the console (see the module docs).
pub(super) fn handles(_action: &Action) -> bool {
    false
}

pub(super) async fn perform(_cap: &mut dyn Console, _ctx: &Ctx, action: &Action) -> Result<Option<ActionData>> {
    unreachable!("the console serves no action ({} dispatched here)", action.kind())
}
