//! The seam between typed IPMI commands and the wire.
//!
//! A [`Transport`] sends one IPMI request (netfn, command, data) and returns
//! the completion code and response data. The typed command layer
//! ([`crate::IpmiSession`]) only ever talks to this trait, so the same code
//! runs over RMCP+ ([`crate::RmcpTransport`]) and over the in-process
//! spec responder used by tests (`bmcfleet_testing::ipmi::SpecBmc`).

use crate::error::TransportError;
use async_trait::async_trait;
use std::fmt;
use tokio::time::Instant;

/// Whether a request may be sent again when no reply came.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Retry {
    /// Idempotent (reads, setting a value): retransmitted per the spec's
    /// retry rules until the deadline, across a session re-establishment.
    Safe,
    /// Has an effect that must not happen twice (power cycle, reset, NMI,
    /// raw passthrough): sent once; a missing reply is a `Timeout` and the
    /// effect is unknown.
    Once,
}

/// One IPMI request to the BMC (IPMB address 0x20, LUN 0).
#[derive(Clone, PartialEq, Eq)]
pub struct Request {
    /// Request network function (even, `< 0x40`).
    pub netfn: u8,
    pub cmd: u8,
    pub data: Vec<u8>,
    pub retry: Retry,
}

impl fmt::Debug for Request {
    // Request data can carry a password (Set User Password): never print it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Request")
            .field("netfn", &format_args!("0x{:02X}", self.netfn))
            .field("cmd", &format_args!("0x{:02X}", self.cmd))
            .field("data_len", &self.data.len())
            .field("retry", &self.retry)
            .finish()
    }
}

/// The BMC's answer: completion code plus response data (without the code).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Response {
    pub cc: u8,
    pub data: Vec<u8>,
}

/// Sends IPMI requests to one BMC.
#[async_trait]
pub trait Transport: Send {
    /// Sends `request` and waits for its response, never past `deadline`.
    async fn call(&mut self, deadline: Instant, request: &Request) -> Result<Response, TransportError>;

    /// False after a fatal transport error (the owner should reconnect).
    fn is_healthy(&self) -> bool {
        true
    }

    /// The privilege level the session runs at (what the BMC lets it do).
    fn privilege(&self) -> crate::Privilege {
        crate::Privilege::Administrator
    }

    /// The RMCP+ cipher suite id the session runs, where there is one.
    fn cipher_suite(&self) -> Option<u8> {
        None
    }

    /// Ends the session on the BMC (Close Session). Best effort.
    async fn close(&mut self) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_hides_data() {
        let r = Request { netfn: 0x06, cmd: 0x47, data: b"secret-password".to_vec(), retry: Retry::Safe };
        let s = format!("{r:?}");
        assert!(!s.contains("secret"), "{s}");
        assert!(s.contains("data_len: 15"), "{s}");
    }
}
