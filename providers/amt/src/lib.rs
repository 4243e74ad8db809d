//! # bmcfleet-amt
//!
//! The Intel AMT provider: WS-Management (DMTF DSP0226/DSP0227) over HTTP
//! Digest authentication (RFC 7616), for machines that have AMT (vPro
//! desktops, NUCs) instead of a BMC.
//!
//! [`AmtConnector`] (protocol `amt`) opens an [`AmtSession`], which offers
//! power (status, on, off, soft off, cycle, reset, NMI), one-time boot device
//! (PXE, disk, CD/DVD, BIOS setup, safe mode) and inventory.
//!
//! # Layout
//! - [`connector`]: [`AmtConnector`], [`AmtConfig`], HTTP/TLS port selection.
//! - [`session`]: [`AmtSession`] and its capability trait impls.
//! - [`power`], [`boot`], [`inventory`]: one file per capability, with
//!   the AMT value tables and call sequences in their docs.
//! - [`client`]: the WS-Man client (spans, faults, Enumerate/Pull, Invoke).
//! - [`wsman`]: envelope building and reading, fault mapping.
//! - [`transport`]: HTTP POST with Digest rounds, bounded by the deadline.
//! - [`digest`]: RFC 7616 challenge parsing and response computation.
//! - [`xml`]: namespace-aware XML tree and escaping writer over `quick-xml`.
//! - [`tls`]: rustls configs (per-BMC CA or explicit insecure).
//! - [`error`]: [`AmtError`], its wire code and retry decision.
//! - Test doubles live in `bmcfleet-testing` (`amt::AmtFixtureServer`, a Digest-enforcing
//!   WS-Man peer answering with captured AMT responses).
//!
//! # Errors
//!
//! | failure                                   | code                |
//! |-------------------------------------------|---------------------|
//! | 401 after a fresh Digest challenge        | `auth_failed` (after exactly one retry) |
//! | connection refused / reset                | `unreachable`       |
//! | no full answer before `ctx.deadline`      | `timeout`           |
//! | deadline already passed                   | `deadline_exceeded` |
//! | TLS handshake / untrusted certificate     | `protocol_error`    |
//! | malformed XML, missing elements           | `protocol_error`    |
//! | WS-Man fault                              | see [`wsman::fault`] |
//! | `ReturnValue` ≠ 0                         | `bmc_error`         |
//! | persistent boot, NMI/soft-off not offered | `unsupported`       |

pub mod boot;
pub mod client;
pub mod connector;
pub mod digest;
pub mod error;
/// Fuzz entry points (cargo-fuzz targets, corpus replay in tests): only with
/// the `fuzzing` feature, so release builds do not contain them.
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
pub mod inventory;
pub mod power;
pub mod session;
pub mod tls;
pub mod transport;
pub mod wsman;
pub mod xml;


pub use connector::{AmtConfig, AmtConnector};
pub use error::AmtError;
pub use session::AmtSession;
