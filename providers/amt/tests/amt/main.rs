//! End-to-end tests of the AMT provider against `AmtFixtureServer`
//! (captured AMT responses behind real Digest authentication).
//!
//! Every test that needs the captured fixtures prints why it skips when
//! the folder is absent (see `bmcfleet_testing::amt::fixtures_root`).

mod common;

mod boot;
mod connector;
mod digest;
mod faults;
mod inventory;
mod plan;
mod power;
mod timeouts;
mod tls;
mod transcripts;
