//! Test harness for Redfish end-to-end tests.
//!
//! Everything listens on 127.0.0.1 only, on a free port, and is torn down
//! on `Drop`. Nothing waits with fixed sleeps: readiness is polled against a
//! deadline.
//!
//! - [`SushyEmulator`]: a real `sushy-emulator` (PyPI `sushy-tools`) with the
//!   fake driver, HTTPS with a certificate from a per-instance [`TestPki`],
//!   Basic auth from a bcrypt (cost 4) htpasswd, its own state directory.
//! - [`MockupServer`]: an HTTPS server that serves Redfish mockups (vendor
//!   captures under `testdata/`, or resources built from the spec
//!   in the test), records every request, applies PATCH/POST/DELETE to its
//!   state, emulates SessionService, ETags, Task Monitors, and injects
//!   faults ([`Fault`]).
//! - [`ImageServer`]: plain-HTTP file server for virtual media images.
//! - [`SilentServer`]: accepts TCP connections and never says a word.
//! - [`bmcweb`]: a model of OpenBMC's bmcweb built from its public source
//!   (log services, virtual media slots, software inventory, ActionInfo).
//! - [`fixtures`]: where the fixtures are (`testdata/`, or `BMCFLEET_FIXTURES`).
//!
//! Environment:
//! - `BMCFLEET_FIXTURES`: fixtures root (default `<workspace>/testdata`).
//! - `BMCFLEET_SUSHY_EMULATOR`: path of the `sushy-emulator` executable
//!   (default: found on `PATH`).
//! - `BMCFLEET_REQUIRE_PEERS=1`: a missing `sushy-emulator` fails instead of skipping.

/// Builder methods that each set one field to the value given:
/// `$(#[doc])* method(field: Type);` (the field may be a path, `rules.basic`).
macro_rules! setters {
    ($( $(#[$doc:meta])* $method:ident($($field:ident).+: $ty:ty); )+) => {
        $(
            $(#[$doc])*
            pub fn $method(mut self, value: $ty) -> Self {
                self.$($field).+ = value;
                self
            }
        )+
    };
}

pub mod bmcweb;
pub mod fixtures;
mod image;
mod mockup;
pub mod multipart;
mod pki;
mod server;
mod silent;
pub mod spec;
mod sushy;

pub use image::{image_bytes, sha256_hex, ImageServer};
pub use mockup::{
    Fault, MockupBuilder, MockupServer, PushReceived, RecordedRequest, UpdateBehaviour, CERTIFICATE_SERVICE,
    MULTIPART_PUSH, REPLACE_CERTIFICATE, SIMPLE_UPDATE,
};
pub use pki::{ServedCert, TestPki};
pub use silent::SilentServer;
pub use sushy::{FakeSystem, SushyBuilder, SushyEmulator};

use bmcfleet_provider::ResolvedCredentials;
use bmcfleet_schema::{BmcAddress, BmcTarget, Credentials, Protocol, Secret, TlsOptions};
use std::net::SocketAddr;

/// Why a harness component could not be provided.
#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    /// A peer program is not installed (tests skip unless told to require it).
    #[error("{what} is not installed: {hint}")]
    NotInstalled { what: String, hint: String },
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Start(String),
    #[error("fixture: {0}")]
    Fixture(String),
    #[error("certificate generation: {0}")]
    Pki(String),
}

impl HarnessError {
    pub(crate) fn io(what: impl Into<String>, source: std::io::Error) -> Self {
        HarnessError::Io { what: what.into(), source }
    }

    /// True when the cause is a missing program or fixture (a skip, not a bug).
    pub fn is_missing(&self) -> bool {
        matches!(self, HarnessError::NotInstalled { .. })
    }
}

/// Whether `NAME=1|true|yes` is set.
pub(crate) fn env_flag(name: &str) -> bool {
    std::env::var(name)
        .map(|v| matches!(v.trim().to_ascii_lowercase().as_str(), "1" | "true" | "yes" | "on"))
        .unwrap_or(false)
}

/// A Redfish target for a loopback test peer: inline credentials, the
/// peer's test CA as `tls.ca_pem` (verification stays on).
pub fn loopback_target(addr: SocketAddr, username: &str, password: &str, ca_pem: &str) -> BmcTarget {
    BmcTarget {
        address: format!("127.0.0.1:{}", addr.port()).parse::<BmcAddress>().expect("loopback address parses"),
        protocol: Protocol::Redfish,
        credentials: Credentials::Inline { username: username.to_owned(), password: Secret::new(password) },
        tls: TlsOptions { insecure: false, ca_pem: Some(ca_pem.to_owned()), pin_sha256: None, allow_plain_http: false },
        system_id: None,
        options: Default::default(),
    }
}

/// Resolved credentials as a worker would hand them to the connector.
pub fn credentials(username: &str, password: &str) -> ResolvedCredentials {
    ResolvedCredentials { username: username.to_owned(), password: Secret::new(password) }
}
