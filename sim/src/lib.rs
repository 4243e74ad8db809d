//! # bmcfleet-sim
//!
//! The worker-side provider (protocol `sim`) for the deterministic simulated
//! BMC fleet, and the wire protocol they share. The simulator itself (the
//! `bmc-sim` server and binary) lives in the `bmcfleet-testing` crate, so
//! no production binary contains it.
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
//! - `slow-*`: answers after the simulator's `slow_latency`.
//! - `down-*`: closes the connection (→ `unreachable`).
//! - password `wrong`: `auth_failed`.
//! - `power nmi` and `bmc_reset warm` are unsupported on hosts named `basic-*`.
//! - at run time, per BMC key (`SimServer::inject`): refuse the next
//!   N logins, lose the replies of the next N actions (executed, unanswered),
//!   or hang. Every request received can be recorded (`SimServer::calls`).
//!
//! # Layout
//! - [`proto`]: the wire messages.
//! - [`client`]: [`client::SimConnector`], the `sim` provider.

pub mod client;
pub mod proto;

pub use client::SimConnector;
