//! # bmcfleet-redfish
//!
//! The Redfish (DMTF DSP0266) provider: a [`RedfishConnector`] opens a
//! [`RedfishSession`] per BMC over HTTPS (reqwest + rustls, verification on
//! by default), authenticates with a SessionService token (HTTP Basic when
//! the BMC has none), discovers the system and manager once, and implements
//! every capability trait of `bmcfleet-provider`.
//!
//! Vendor differences are handled from what the BMC *advertises* (reset
//! types, boot override values, transfer parameters, ETags, empty account
//! slots), never from a vendor name.
//!
//! # Layout
//! - `connector`: [`RedfishConnector`] (TLS per BMC, login, discovery).
//! - `config`: [`RedfishConfig`] timeouts and bounds.
//! - `transport`: the per-BMC transport: auth, bounded exchanges, tracing
//!   spans, Task Monitors, the one safe resend (after a `401` on a token).
//! - `error`: HTTP/transport → [`bmcfleet_provider::ProviderError`] mapping.
//! - `discovery`: service root, system/manager choice, reset types.
//! - `session`: [`RedfishSession`] and its accessors.
//! - one module per capability: `power`, `boot`, `users`, `manager` (BMC
//!   reset, network source), `virtual_media`, `raw`, `inventory`,
//!   `event_log`, `sensors`, `bios`, `secure_boot`, `firmware_update`, `identify`, `power_capping`, `bmc_clock` (with NTP),
//!   `certificates`.
//! - `tls`: rustls client config (system roots, per-BMC CA, insecure).
//! - Test doubles (`SushyEmulator`, `MockupServer` and friends) live in
//!   `bmcfleet-testing` (`redfish`).

mod bios;
mod bmc_clock;
mod boot;
mod certificates;
mod config;
mod connector;
mod discovery;
mod error;
mod event_log;
mod firmware_update;
/// Fuzz entry points (cargo-fuzz targets, corpus replay in tests): only with
/// the `fuzzing` feature, so release builds do not contain them.
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
mod identify;
mod inventory;
mod json;
mod manager;
mod power;
mod power_capping;
pub mod probe;
mod raw;
mod secure_boot;
mod sensors;
mod session;
mod tls;
mod transport;
mod users;
mod virtual_media;

// What a Redfish session offers: one capability file above each, listed once here.
impl bmcfleet_provider::Offer for RedfishSession {
    bmcfleet_provider::offer!(
        power,
        boot,
        users,
        bmc_reset,
        network_source,
        raw,
        virtual_media,
        inventory,
        event_log,
        sensors,
        bios,
        secure_boot,
        firmware_update,
        identify,
        power_capping,
        bmc_clock,
        bmc_certificates
    );
}

/// Why the serial console is not offered over Redfish: DMTF's
/// `ComputerSystem.SerialConsole` only advertises other protocols (SSH,
/// IPMI SOL, Telnet) and their ports; Redfish itself carries no console
/// payload. Register the machine with `protocol: ipmi` for SOL.
pub const CONSOLE_UNSUPPORTED: &str = "Redfish carries no serial console: ComputerSystem.SerialConsole only names SSH/IPMI/Telnet services; register the machine with protocol ipmi for Serial over LAN";

pub use config::RedfishConfig;
pub use connector::RedfishConnector;
pub use discovery::ResetAction;
pub use error::bmc_messages;
pub use session::RedfishSession;
pub use transport::AuthKind;
