//! Shared helpers.

use bmcfleet_amt::{AmtConnector, AmtSession};
use bmcfleet_provider::{Ctx, ProviderError};
use bmcfleet_testing::amt::{AmtFixtureServer, Injection, Op, ServerOptions};
use std::time::Duration;

/// A generous per-test deadline: tests that are about timing set their own.
pub fn ctx() -> Ctx {
    Ctx::with_timeout(Duration::from_secs(15))
}

/// Start a server (it panics, saying why, when it cannot).
pub async fn server(opts: ServerOptions) -> AmtFixtureServer {
    AmtFixtureServer::start_for_test(opts).await
}

pub async fn open(server: &AmtFixtureServer) -> Result<AmtSession, ProviderError> {
    AmtConnector::default().open(&ctx(), &server.target(), &server.credentials()).await
}

pub async fn session(server: &AmtFixtureServer) -> AmtSession {
    open(server).await.expect("session against the fixture server")
}

/// A session to `server`, which then answers `op` with the captured
/// exchange `transcript` (a file of the AMT fixtures).
pub async fn session_replaying(server: &AmtFixtureServer, op: Op, transcript: &str) -> AmtSession {
    let s = session(server).await;
    server.inject(op, Injection::Transcript(transcript.into()));
    s
}

/// `let server = fixture_server!(opts);`: the AMT fixture server, started or the test failed.
#[macro_export]
macro_rules! fixture_server {
    ($opts:expr) => {
        $crate::common::server($opts).await
    };
    () => {
        fixture_server!(bmcfleet_testing::amt::ServerOptions::default())
    };
}
