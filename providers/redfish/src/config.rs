//! Connector tunables. Every bound here is an upper limit: each call is also
//! cut short by the action deadline in [`bmcfleet_provider::Ctx`].

use std::time::Duration;

/// How the Redfish connector talks to BMCs.
#[derive(Clone, Debug)]
pub struct RedfishConfig {
    /// Longest a single HTTP exchange (connect, TLS, request, whole response
    /// body) may take. BMCs are slow, but one that has not answered in this
    /// long is hung. Default 30 s.
    pub request_timeout: Duration,
    /// Longest the TCP connect plus TLS handshake may take. Default 10 s.
    pub connect_timeout: Duration,
    /// Largest response body accepted, in bytes; a bigger one is a
    /// `protocol_error` rather than unbounded memory. Default 8 MiB.
    pub max_response_bytes: usize,
    /// The most bytes of BMC answers all sessions of one connector (one
    /// worker) hold at once, each answer counted as its body plus an
    /// estimate of its parsed JSON (48 bytes per
    /// value). An answer that would go past it fails `worker_exhausted`
    /// (retryable, not a BMC fault) instead of the worker growing without
    /// bound when many BMCs send large answers at once. Default 512 MiB;
    /// at least [`RedfishConfig::largest_answer_charge`].
    pub max_buffered_bytes: usize,
    /// Largest raw-passthrough request body, in bytes (the gateway enforces
    /// the same default limit at admission). Default 64 KiB.
    pub max_raw_body_bytes: usize,
    /// Interval between polls of a Task Monitor when the BMC sends no
    /// `Retry-After`. Default 1 s.
    pub task_poll_interval: Duration,
    /// Interval between power-state reads while emulating a power cycle as
    /// ForceOff + On. Default 1 s.
    pub state_poll_interval: Duration,
    /// Time allowed to log out (DELETE the Redfish session) on close. Default 5 s.
    pub close_timeout: Duration,
    /// `User-Agent` sent to BMCs.
    pub user_agent: String,
}

impl Default for RedfishConfig {
    fn default() -> Self {
        RedfishConfig {
            request_timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(10),
            max_response_bytes: 8 * 1024 * 1024,
            max_buffered_bytes: 512 * 1024 * 1024,
            max_raw_body_bytes: 64 * 1024,
            task_poll_interval: Duration::from_secs(1),
            state_poll_interval: Duration::from_secs(1),
            close_timeout: Duration::from_secs(5),
            user_agent: concat!("bmcfleet-redfish/", env!("CARGO_PKG_VERSION")).to_owned(),
        }
    }
}

impl RedfishConfig {
    /// What the largest answer this config accepts may be charged against
    /// [`RedfishConfig::max_buffered_bytes`]: its body, and every value a
    /// body that size may hold, parsed.
    pub fn largest_answer_charge(&self) -> usize {
        self.max_response_bytes + crate::json::MAX_VALUES.min(self.max_response_bytes) * crate::json::PARSED_VALUE_BYTES
    }
}
