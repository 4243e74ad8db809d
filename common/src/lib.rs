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
//! - [`rollouts`]: rollout records (CAS), specs, machine lists, outcomes, rollout events.
//! - [`runtime`]: shutdown signal, clocks.
//! - [`sealing`]: sealing BMC passwords to the workers' xkey, and opening them.
//! - [`telemetry`]: logs, OTLP span export, W3C trace context over NATS headers.
//! - [`serve`]: the `/metrics`, `/healthz`, `/readyz` HTTP endpoint.

pub mod audit;
pub mod backoff;
pub mod config;
pub mod events;
pub mod nats;
pub mod registry;
pub mod rollouts;
pub mod runtime;
pub mod sealing;
pub mod serve;
pub mod status;
pub mod streams;
pub mod telemetry;
