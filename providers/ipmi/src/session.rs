//! [`IpmiSession`]: the typed command layer (send, exec, the LAN channel),
//! generic over a [`Transport`], and its capability accessors. Each
//! capability is implemented in its own module (`power`, `boot`, `users`,
//! `manager`, `raw`, `inventory`).

use crate::cmd::{self, Command, CURRENT_CHANNEL};
use crate::error::{completion_code_error, CommandId};
use crate::transport::{Request, Response, Transport};
use crate::Privilege;
use async_trait::async_trait;
use bmcfleet_provider::{BmcSession, Ctx, Outgoing, PlannedRequest, ProviderError, Result};
use bmcfleet_schema::ErrorCode;
use tracing::Instrument;

/// Largest raw IPMI request data (one IPMI message; matches the schema's
/// default `max_raw_ipmi_bytes`).
pub const MAX_RAW_DATA: usize = 255;

/// An IPMI conversation with one BMC over any [`Transport`].
pub struct IpmiSession<T> {
    pub(crate) transport: T,
    /// The BMC as named in logs and spans (its address).
    pub(crate) bmc: String,
    /// The LAN channel used for user access and LAN configuration:
    /// configured, or discovered with Get Channel Info on first use.
    pub(crate) channel: Option<u8>,
    /// How power actions are verified (see [`Verify`]).
    pub(crate) verify: Verify,
}

/// How a power action's effect is verified: Get Chassis Status every
/// `poll` until the chassis reports the state the action leads to, for at
/// most `limit` (and never past the action's deadline).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Verify {
    pub poll: std::time::Duration,
    pub limit: std::time::Duration,
}

impl Default for Verify {
    fn default() -> Self {
        Verify { poll: std::time::Duration::from_millis(500), limit: std::time::Duration::from_secs(60) }
    }
}

pub(crate) fn invalid(message: impl Into<String>) -> ProviderError {
    ProviderError::new(ErrorCode::InvalidField, message)
}

pub(crate) fn protocol(command: CommandId, what: impl std::fmt::Display) -> ProviderError {
    ProviderError::new(ErrorCode::ProtocolError, format!("{command}: {what}"))
}

impl<T: Transport> IpmiSession<T> {
    pub fn new(transport: T, bmc: impl Into<String>) -> Self {
        IpmiSession { transport, bmc: bmc.into(), channel: None, verify: Verify::default() }
    }

    /// How power actions are verified (default: poll every 500 ms, up to 60 s).
    pub fn with_verify(mut self, verify: Verify) -> Self {
        self.verify = verify;
        self
    }

    /// Uses `channel` for user access and LAN configuration instead of the
    /// channel the session arrived on.
    pub fn with_channel(mut self, channel: u8) -> Self {
        self.channel = Some(channel & 0x0F);
        self
    }

    pub fn transport(&self) -> &T {
        &self.transport
    }

    pub fn transport_mut(&mut self) -> &mut T {
        &mut self.transport
    }

    /// The session's transport, for a payload of its own (SOL).
    pub fn into_transport(self) -> T {
        self.transport
    }

    /// Sends one command and returns the BMC's completion code and data,
    /// whatever the code. One `ipmi_call` span per call.
    pub async fn send(&mut self, ctx: &Ctx, command: &Command, data: Vec<u8>) -> Result<Response> {
        ctx.remaining()?;
        let id = command.id;
        let privilege = self.transport.privilege();
        if let Some(needed) = cmd::required_privilege(id.netfn, id.cmd).filter(|needed| *needed > privilege) {
            // Nothing is sent: the BMC would refuse it (0xD4).
            return Err(ProviderError::new(
                ErrorCode::PermissionDenied,
                format!("{id} needs the {needed} privilege; this machine's IPMI session runs at {privilege} (machine option ipmi.privilege)"),
            )
            .with_not_sent(true));
        }
        let span = tracing::debug_span!(
            "ipmi_call",
            bmc = %self.bmc,
            protocol = "ipmi",
            netfn = id.netfn,
            cmd = id.cmd,
            command = id.name,
            outcome = tracing::field::Empty,
        );
        let request = Request { netfn: id.netfn, cmd: id.cmd, data, retry: command.retry };
        let sent_before = ctx.sending_request(|| planned(command, &request.data)).await?;
        let result = self.transport.call(ctx.deadline, &request).instrument(span.clone()).await;
        match &result {
            Ok(r) if r.cc == 0 => span.record("outcome", "ok"),
            Ok(r) => span.record("outcome", format!("cc 0x{:02X}", r.cc)),
            Err(e) => span.record("outcome", format!("{:?}", e.kind)),
        };
        result.map_err(|e| ctx.settle(sent_before, ProviderError::from(e)))
    }

    /// Sends one command and requires completion code 0; returns the data.
    pub async fn exec(&mut self, ctx: &Ctx, command: &Command, data: Vec<u8>) -> Result<Vec<u8>> {
        let response = self.send(ctx, command, data).await?;
        if response.cc != 0 {
            return Err(completion_code_error(command.id, response.cc, command.specific));
        }
        Ok(response.data)
    }

    pub(crate) fn allows(&self, needed: Privilege) -> bool {
        self.transport.privilege() >= needed
    }

    /// The channel for user and LAN commands.
    pub(crate) async fn channel(&mut self, ctx: &Ctx) -> Result<u8> {
        if let Some(c) = self.channel {
            return Ok(c);
        }
        let data = self.exec(ctx, &cmd::GET_CHANNEL_INFO, vec![CURRENT_CHANNEL]).await?;
        let channel = data.first().ok_or_else(|| protocol(cmd::GET_CHANNEL_INFO.id, "empty response"))? & 0x0F;
        self.channel = Some(channel);
        Ok(channel)
    }
}

/// One request as plan mode records it: netfn, command, its name, the data
/// in hex, or `[redacted]` for a password command's and a raw request's
/// data. Reading commands ([`cmd::reads_only`]) are reads; everything else changes state.
fn planned(command: &Command, data: &[u8]) -> Outgoing {
    let id = command.id;
    let raw = id.name == crate::raw::RAW;
    let data = if data.is_empty() {
        String::new()
    } else if raw || cmd::secret_data(id.netfn, id.cmd) {
        bmcfleet_schema::plan::REDACTED.to_owned()
    } else if cmd::is_clock(id.netfn, id.cmd) {
        "x".repeat(data.len() * 2)
    } else if data.len() >= 2 && cmd::starts_with_reservation(id.netfn, id.cmd) {
        format!("xxxx{}", bmcfleet_provider::hex(&data[2..]))
    } else {
        bmcfleet_provider::hex(data)
    };
    let request = PlannedRequest::Ipmi { netfn: id.netfn, cmd: id.cmd, name: (!raw).then(|| id.name.to_owned()), data };
    if cmd::reads_only(id.netfn, id.cmd) {
        Outgoing::read(request)
    } else {
        Outgoing::change(request)
    }
}

#[async_trait]
impl<T: Transport + 'static> BmcSession for IpmiSession<T> {
    fn provider(&self) -> &'static str {
        "ipmi"
    }
    fn is_healthy(&self) -> bool {
        self.transport.is_healthy()
    }
    async fn close(&mut self) {
        self.transport.close().await;
    }
    fn cipher_suite(&self) -> Option<u8> {
        self.transport.cipher_suite()
    }
}
