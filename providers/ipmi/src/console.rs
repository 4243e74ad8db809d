//! Console: the SOL configuration (Get SOL Configuration Parameters,
//! `rmcp::sol::sol_configuration`) read on a regular session. The console
//! itself is `IpmiConnector::open_console` (a session of its own).

use crate::session::IpmiSession;
use crate::transport::Transport;
use async_trait::async_trait;
use bmcfleet_provider::{Console, ConsoleSettings, Ctx, Result};

#[async_trait]
impl<T: Transport + 'static> Console for IpmiSession<T> {
    async fn console_settings(&mut self, ctx: &Ctx) -> Result<ConsoleSettings> {
        ctx.remaining()?;
        let config = crate::rmcp::sol::sol_configuration(&mut self.transport, ctx.deadline).await?;
        Ok(ConsoleSettings { enabled: config.enabled, bit_rate: config.bit_rate })
    }
}
