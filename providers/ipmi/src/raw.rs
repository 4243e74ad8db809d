//! Raw passthrough of one IPMI request.

use crate::cmd::Command;
use crate::error::CommandId;
use crate::session::{invalid, IpmiSession, MAX_RAW_DATA};
use crate::transport::{Retry, Transport};
use async_trait::async_trait;
use bmcfleet_provider::{Ctx, Raw, Result};
use bmcfleet_schema::{RawRequest, RawResponse};

/// The name a raw request's command carries (plan mode hides its data).
pub(crate) const RAW: &str = "raw";

#[async_trait]
impl<T: Transport> Raw for IpmiSession<T> {
    /// Any request netfn (even, below 0x40) and command, data up to 255
    /// bytes; sent once (raw requests are not idempotent). The completion
    /// code is returned as `status`, never turned into an error.
    async fn raw(&mut self, ctx: &Ctx, req: &RawRequest) -> Result<RawResponse> {
        let raw = match req {
            RawRequest::Ipmi(raw) => raw,
            RawRequest::Redfish(_) => return Err(invalid("a Redfish raw request cannot be sent to an IPMI BMC")),
        };
        if raw.netfn >= 0x40 || raw.netfn % 2 != 0 {
            return Err(invalid(format!(
                "netfn 0x{:02X} is not a request network function (even, below 0x40)",
                raw.netfn
            )));
        }
        if raw.data.len() > MAX_RAW_DATA {
            return Err(invalid(format!("raw data is {} bytes; the limit is {MAX_RAW_DATA}", raw.data.len())));
        }
        let command =
            Command { id: CommandId { name: RAW, netfn: raw.netfn, cmd: raw.cmd }, retry: Retry::Once, specific: &[] };
        let response = self.send(ctx, &command, raw.data.clone()).await?;
        Ok(RawResponse { status: u16::from(response.cc), data: response.data, body: None })
    }
}
