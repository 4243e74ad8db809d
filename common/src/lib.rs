//! # bmcfleet-common
//!
//! Plumbing shared by `bmc-gateway`, `bmc-worker` and `bmcctl`.
//!
//! # Layout
//! - [`config`]: clap argument groups (`NatsArgs`, `TopologyArgs`, `LogArgs`)
//!   with an `env` twin for every flag, and the value parsers they share.
//! - [`nats`]: connecting with credentials/TLS.
//! - [`streams`]: the streams and KV buckets, created idempotently by one
//!   definition so gateway and workers always agree.
//! - [`runtime`]: logging set-up, shutdown signal, clocks.

pub mod config;
pub mod events;
pub mod nats;
pub mod runtime;
pub mod status;
pub mod streams;
