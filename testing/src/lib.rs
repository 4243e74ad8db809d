//! # bmcfleet-testing
//!
//! Harnesses and test doubles, kept out of every production crate: the
//! gateway, worker and bmcctl depend on this crate at most as a
//! dev-dependency, so no release binary contains a simulator.
//!
//! # Layout
//! - [`amt`]: `AmtFixtureServer`, a Digest-enforcing WS-Management peer
//!   answering with captured Intel AMT exchanges (HTTP or TLS), with faults.
//! - [`ipmi`]: `IpmiSim` (OpenIPMI `ipmi_sim` on a free loopback port, with
//!   templates from `tests/ipmi_sim`), `SpecBmc` (an in-process IPMI 2.0
//!   responder behind the IPMI provider's `Transport`) and `ipmi::lan`
//!   (`LanFleet`: the same semantics as RMCP+ BMCs on loopback UDP ports,
//!   thousands per process; the `bmc-ipmi-fleet` binary runs it).
//! - [`redfish`]: `SushyEmulator` (a real sushy-emulator), `MockupServer`
//!   (vendor mockups and spec-built resources over HTTPS, with faults),
//!   `ImageServer`, `SilentServer`, a per-test PKI, and where the shared
//!   fixtures are.
//! - [`sim`]: the `bmc-sim` server, a deterministic simulated BMC fleet
//!   with fault injection and an execution log, reached over loopback by the
//!   worker's `sim` provider (`bmcfleet_sim`); the `bmc-sim` binary runs it
//!   for demos and compose.
//! - [`peers`]: finding the third-party programs tests drive (ipmitool,
//!   FreeIPMI, prometheus, Python), skipping or failing when one is missing.
//! - [`logs`]: `LogCapture`, a log writer for asserting on log lines.

pub mod amt;
pub mod ipmi;
pub mod logs;
pub mod peers;
pub mod ports;
pub mod redfish;
pub mod sim;
pub mod tasks;

pub use logs::LogCapture;
pub use sim::{CallRecord, Faults, LogEntry, SimConfig, SimServer};
