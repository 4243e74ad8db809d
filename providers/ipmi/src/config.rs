//! Provider configuration.

use crate::rmcp::RmcpConfig;

/// Provider configuration.
#[derive(Clone, Debug, Default)]
pub struct IpmiConfig {
    /// Session timing (retransmits, keep-alive).
    pub rmcp: RmcpConfig,
    /// LAN channel for user access and LAN configuration commands. `None`:
    /// the channel the session arrived on (Get Channel Info, channel 0x0E).
    pub channel: Option<u8>,
    /// How power actions are verified (poll interval, longest wait).
    pub verify: crate::session::Verify,
}
