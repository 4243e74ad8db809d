//! # bmcfleet-ipmi
//!
//! The IPMI 2.0 provider: RMCP+ sessions (cipher suites 17 and 3) kept open
//! per BMC and multiplexed over a few shared UDP sockets, typed IPMI
//! commands behind the `bmcfleet-provider` capability traits.
//!
//! # Layout (the same anatomy as every provider; modules are private, the
//! crate root re-exports what others use)
//! - `config`: [`IpmiConfig`]; `connector`: [`IpmiConnector`] (protocol
//!   `ipmi`, UDP port 623 unless the address names another).
//! - `session`: [`IpmiSession`], the typed command layer and the capability
//!   accessors, generic over a [`Transport`]; one module per capability
//!   implements it: `power`, `boot`, `users`, `manager` (BMC reset, network
//!   source), `raw`, `inventory`.
//! - `transport`: the [`Transport`] trait — one request (netfn, cmd, data)
//!   in, completion code and data out.
//! - `rmcp`: [`RmcpTransport`], our RMCP+ session layer (handshake, cipher
//!   suites 17/3 — and 2/1 for library users — on RustCrypto, privilege,
//!   retransmits, reply matching, replay window, keep-alive, Close
//!   Session) over [`RmcpSockets`], the connector's shared tokio UDP
//!   sockets: no thread and no socket per BMC (see that module).
//! - [`probe`]: session-less Get Channel Authentication Capabilities
//!   (presence check, IPMI 2.0 check; public for the `ipmi_sim` harness).
//! - `cmd`: command table and pure encoders/decoders; `fru`: FRU parsing.
//! - `error`: completion codes → [`bmcfleet_schema::ErrorCode`] ([`TransportError`]).
//! - Test doubles live in `bmcfleet-testing` (`ipmi::IpmiSim`, the OpenIPMI
//!   `ipmi_sim` launcher, and `ipmi::SpecBmc`, an in-process spec responder).
//!
//! # Capabilities and their IPMI commands
//! | capability | IPMI command (netfn / cmd) |
//! |---|---|
//! | power status | Get Chassis Status (chassis 0x00 / 0x01), byte 1 bit 0 |
//! | power on, off, cycle, reset, NMI, soft off | Chassis Control (0x00 / 0x02) with 1, 0, 2, 3, 4 (diagnostic interrupt), 5 (ACPI soft shutdown) |
//! | boot device set | Set System Boot Options (0x00 / 0x08), parameter 5: valid, persistent (bit 6), EFI (bit 5), selector PXE 1, disk 2, safe 3, CD/DVD 5, BIOS setup 6 |
//! | boot device get | Get System Boot Options (0x00 / 0x09), parameter 5 (valid bit clear → `none`) |
//! | users list | Get User Access (app 0x06 / 0x44), Get User Name (0x06 / 0x46) |
//! | user create | free slot (empty name), Set User Name (0x06 / 0x45), Set User Password (0x06 / 0x47, set), Set User Access (0x06 / 0x43, privilege + IPMI messaging on the LAN channel), Set User Password (enable/disable) |
//! | user update | existing user only (else `target_not_found`): Set User Password / Set User Access / enable-disable as named |
//! | user delete | Set User Password (disable), Set User Access (No Access, messaging off), Set User Name (empty) |
//! | BMC reset | Cold Reset (0x06 / 0x02), Warm Reset (0x06 / 0x03) |
//! | network source | Get/Set LAN Configuration Parameters (transport 0x0C / 0x02, 0x01): 4 IP source, 3 address, 6 netmask, 12 gateway, 0 set-in-progress |
//! | raw | any request netfn/cmd, data ≤ 255 bytes, completion code returned as `status` |
//! | identify get | Get Chassis Status byte 3: bit 6 identify state reported, bits 5:4 off / timed on / on (not reported: no `light`, a `note`) |
//! | identify set | Chassis Identify (0x00 / 0x04): `[0]` off, `[0, 1]` Force Identify On, `[seconds]` timed; read back through Get Chassis Status where reported |
//! | power reading | DCMI Get Power Reading (group 0x2C / 0x02, `DC 01 00 00`: system power statistics): current, min, max, average watts, statistics period; measurement inactive → `unsupported` |
//! | power limit get / set | DCMI Get Power Limit (0x2C / 0x03; 0x80 = set, not active), Set Power Limit (0x04; watts only changed, the rest as read), Activate/Deactivate (0x05); read back with Get Power Limit |
//! | BMC clock get / sync | Get SEL Time (storage 0x0A / 0x48), drift against the worker; Set SEL Time (0x0A / 0x49) with the worker's UTC second, read back within 2 s |
//! | inventory | Get Device ID (0x06 / 0x01), Get Chassis Status, Get FRU Inventory Area Info (storage 0x0A / 0x10), Read FRU Data (0x0A / 0x11): board and product areas |
//!
//! Session-level commands: Get Channel Authentication Capabilities
//! (0x06 / 0x38, before the handshake), Set Session Privilege Level
//! (0x06 / 0x3B, the configured privilege), Get Device ID as keep-alive,
//! Close Session (0x06 / 0x3C) on close.
//!
//! # Privilege
//! A machine's `ipmi.privilege` (user, operator, administrator; default
//! administrator) is what RAKP 1 asks for (username+privilege lookup) and
//! what the session raises itself to. A session offers only the
//! capabilities its privilege allows (IPMI v2.0 appendix G: power, raw and
//! inventory at user; boot device, users, network source and identify from operator;
//! BMC reset at administrator), and a command above the privilege (power
//! control at user, a user change at operator) fails with
//! `permission_denied` before anything is sent. The LAN
//! channel for user/LAN commands comes from Get Channel Info (0x06 / 0x42,
//! channel 0x0E) unless configured.
//!
//! # Why our own session layer, and what ipmi-rs still does
//! ipmi-rs 0.6.0 is blocking (a thread and a socket per session), hard-wires
//! cipher suite 3 and Administrator, hides its session id (no Close
//! Session) and panics on some BMC input; a worker with thousands of BMCs
//! cannot run on it. The RMCP+ session layer and the cipher-suite crypto
//! are ours (`rmcp`), written from the IPMI v2.0 specification; ipmi-rs
//! still parses Get Device ID answers (`inventory`).
//!
//! # Tested against
//! `tests/` run every capability against OpenIPMI `ipmi_sim` (cipher suite
//! 3; it refuses 17, so the default order falls back), cross-checked with
//! `ipmitool -I lanplus -C 3` both ways; cipher suite 17, privilege levels
//! and wire faults run against `bmcfleet_testing::ipmi::LanFleet`, an RMCP+
//! responder that `ipmitool -C 17`/`-C 3` and FreeIPMI are tested against. What `ipmi_sim` refuses or
//! ignores — NMI, warm reset, persistent/EFI boot flags, safe-mode boot,
//! privilege errors — runs against `bmcfleet_testing::ipmi::SpecBmc`, a responder built
//! from the IPMI 2.0 spec, over the same `IpmiSession` code.

mod cmd;
mod config;
mod connector;
mod error;
mod fru;
/// Fuzz entry points (cargo-fuzz targets, corpus replay in tests): only with
/// the `fuzzing` feature, so release builds do not contain them.
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
pub mod probe;
mod rmcp;
mod session;
mod transport;

// One module per capability (implementations on `IpmiSession`).
mod bmc_clock;
mod boot;
mod console;
mod identify;
mod inventory;
mod manager;
mod power;
mod power_capping;
mod raw;
mod sel;
mod sensors;
mod users;

/// What every IPMI session offers (a contract test checks this against a
/// real session's accessors).
pub const CAPABILITIES: &[bmcfleet_provider::Capability] = &[
    bmcfleet_provider::Capability::Power,
    bmcfleet_provider::Capability::BootDevice,
    bmcfleet_provider::Capability::Users,
    bmcfleet_provider::Capability::BmcReset,
    bmcfleet_provider::Capability::NetworkSource,
    bmcfleet_provider::Capability::Raw,
    bmcfleet_provider::Capability::Inventory,
    bmcfleet_provider::Capability::EventLog,
    bmcfleet_provider::Capability::Sensors,
    bmcfleet_provider::Capability::Console,
    bmcfleet_provider::Capability::Identify,
    bmcfleet_provider::Capability::PowerCapping,
    bmcfleet_provider::Capability::BmcClock,
];

// What the session's privilege allows (IPMI v2.0 appendix G): a capability
// is offered when at least one of its operations is; an operation above the
// privilege fails before it is sent (`send`).
impl<T: Transport + 'static> bmcfleet_provider::Offer for IpmiSession<T> {
    bmcfleet_provider::offer!(@accessors power, raw, inventory, event_log, sensors, console, power_capping, bmc_clock);
    fn boot(&mut self) -> Option<&mut dyn bmcfleet_provider::BootControl> {
        self.allows(Privilege::Operator).then_some(self)
    }
    fn users(&mut self) -> Option<&mut dyn bmcfleet_provider::Users> {
        self.allows(Privilege::Operator).then_some(self)
    }
    fn network_source(&mut self) -> Option<&mut dyn bmcfleet_provider::NetworkSource> {
        self.allows(Privilege::Operator).then_some(self)
    }
    fn identify(&mut self) -> Option<&mut dyn bmcfleet_provider::Identify> {
        self.allows(Privilege::Operator).then_some(self)
    }
    fn bmc_reset(&mut self) -> Option<&mut dyn bmcfleet_provider::BmcReset> {
        self.allows(Privilege::Administrator).then_some(self)
    }
    fn offered() -> &'static [bmcfleet_provider::Capability] {
        CAPABILITIES
    }
}

pub use cmd::reads_only;
pub use config::IpmiConfig;
pub use connector::{IpmiConnector, DEFAULT_PORT};
pub use error::{TransportError, TransportErrorKind};
pub use rmcp::sol::{
    bit_rate, sol_configuration, SolConfiguration, SolEnd, SolError, SolEvent, SolOptions, SolSession, SolStats,
    SOL_INSTANCE,
};
pub use rmcp::{CipherSuite, Privilege, RmcpConfig, RmcpSockets, RmcpTransport, MAX_CONCURRENT_PROBES};
pub use session::{IpmiSession, Verify};
pub use transport::{Request, Response, Retry, Transport};
