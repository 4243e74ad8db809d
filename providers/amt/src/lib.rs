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
//! Private modules, the same anatomy as every provider:
//! - `config`: [`AmtConfig`]; `connector`: [`AmtConnector`], HTTP/TLS port
//!   selection; `session`: [`AmtSession`] and its capability trait impls.
//! - `power`, `boot`, `inventory`: one file per capability, with the AMT
//!   value tables and call sequences in their docs.
//! - `transport`: HTTP POST with Digest rounds, bounded by the deadline;
//!   `tls`: rustls configs (per-BMC CA or explicit insecure).
//! - `error`: [`AmtError`], its wire code and retry decision.
//!
//! Public because the test double (`bmcfleet-testing`'s `amt::AmtFixtureServer`,
//! a Digest-enforcing WS-Man peer answering with captured AMT responses) must
//! speak exactly the same wire formats:
//! - [`wsman`]: envelope building and reading, fault mapping (its private
//!   `client` runs Enumerate/Pull, Get, Put and Invoke with spans);
//! - [`digest`]: RFC 7616 challenge parsing and response computation;
//! - [`xml`]: namespace-aware XML tree and escaping writer over `quick-xml`.
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

mod boot;
mod certificates;
mod config;
mod connector;
pub mod digest;
mod error;
/// Fuzz entry points (cargo-fuzz targets, corpus replay in tests): only with
/// the `fuzzing` feature, so release builds do not contain them.
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
mod inventory;
mod power;
pub mod probe;
mod session;
mod tls;
mod transport;
pub mod wsman;
pub mod xml;

// What an AMT session offers: one capability file above each, listed once here.
impl bmcfleet_provider::Offer for AmtSession {
    bmcfleet_provider::offer!(power, boot, inventory, bmc_certificates);
}

/// Why the serial console is not offered over AMT: Intel AMT's SOL runs
/// over the redirection protocol (ports 16994/16995), which this provider
/// does not implement (it speaks WS-Management only).
pub const CONSOLE_UNSUPPORTED: &str = "the AMT provider speaks WS-Management only; AMT Serial over LAN needs the redirection protocol (ports 16994/16995), which is not implemented";

pub use config::AmtConfig;
pub use connector::{AmtConnector, HTTP_PORT, TLS_PORT};
pub use error::AmtError;
pub use session::AmtSession;
pub use transport::WSMAN_PATH;
