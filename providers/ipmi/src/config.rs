//! Provider configuration.

use crate::rmcp::RmcpConfig;
use std::sync::Arc;

/// Provider configuration.
#[derive(Clone, Debug)]
pub struct IpmiConfig {
    /// Session timing (retransmits, keep-alive), cipher suites, privilege:
    /// shared by every session without settings of its machine's own.
    pub rmcp: Arc<RmcpConfig>,
    /// UDP sockets per address family that all sessions share.
    pub sockets: usize,
    /// LAN channel for user access and LAN configuration commands. `None`:
    /// the channel the session arrived on (Get Channel Info, channel 0x0E).
    pub channel: Option<u8>,
    /// How power actions are verified (poll interval, longest wait).
    pub verify: crate::session::Verify,
}

impl Default for IpmiConfig {
    fn default() -> Self {
        IpmiConfig { rmcp: Default::default(), sockets: 4, channel: None, verify: Default::default() }
    }
}
