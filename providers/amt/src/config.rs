//! [`AmtConfig`]: the `amt` connector's settings.

use std::time::Duration;

/// Connector settings.
#[derive(Clone, Debug)]
pub struct AmtConfig {
    /// Refuse plain HTTP (Digest over HTTP exposes the hash exchange).
    pub require_tls: bool,
    /// Upper bound for the TCP (and TLS) connect; the action deadline bounds it too.
    pub connect_timeout: Duration,
    /// Largest response body accepted.
    pub max_response_bytes: usize,
}

impl Default for AmtConfig {
    fn default() -> Self {
        AmtConfig { require_tls: false, connect_timeout: Duration::from_secs(10), max_response_bytes: 4 * 1024 * 1024 }
    }
}
