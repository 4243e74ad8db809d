//! # bmcfleet-sim
//!
//! A deterministic simulated BMC fleet (`bmc-sim`) and the worker-side
//! provider that talks to it (protocol `sim`).
//!
//! The simulator is a separate server (in the test process, or the `bmc-sim`
//! binary) reached over loopback TCP, so that a test can observe what every
//! worker *process* did to every BMC: the order of actions, concurrent
//! access, re-execution after a crash. One simulator serves any number of
//! BMCs, keyed by the batch's BMC key; each BMC keeps real state (power,
//! boot override, users, network source, virtual media).
//!
//! # Wire protocol
//! Newline-delimited JSON over TCP, one request and one response per line:
//! `{"bmc":KEY,"username":U,"password":P,"call":{..}|null,"action":ACTION|null}`
//! → `{"ok":DATA|null}` or `{"err":{"code":..,"message":..}}`. A request
//! without an action is a login check.
//!
//! # Faults, chosen by the BMC's hostname
//! - `hang-*`: accepts the connection, never answers.
//! - `slow-*`: answers after [`SimConfig::slow_latency`].
//! - `down-*`: closes the connection (→ `unreachable`).
//! - password `wrong`: `auth_failed`.
//! - `power nmi` and `bmc_reset warm` are unsupported on hosts named `basic-*`.
//! - at run time, per BMC key ([`server::SimServer::inject`]): refuse the next
//!   N logins, lose the replies of the next N actions (executed, unanswered),
//!   or hang. Every request received is recorded ([`server::SimServer::calls`]).
//!
//! # Layout
//! - [`proto`]: the wire messages.
//! - [`server`]: [`server::SimServer`], state and the execution log.
//! - [`client`]: [`client::SimConnector`], the `sim` provider.

pub mod client;
pub mod proto;
pub mod server;

pub use client::SimConnector;
pub use server::{CallRecord, Faults, LogEntry, SimConfig, SimServer};
