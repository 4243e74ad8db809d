//! # bmcfleet-bench
//!
//! `bmc-bench`: side-by-side benchmarks of bmcfleet, each comparing bmcfleet
//! with a reference measured in the same run (raw JetStream, `ipmitool`,
//! FreeIPMI, python `sushy`, an unordered consumer), reporting medians over
//! repetitions, and `bmc-bench all --out docs/BENCHMARKS.md` to regenerate
//! the published table. Nothing here hard-codes a result: every figure is
//! measured when the command runs.
//!
//! # Layout
//! - [`harness`]: child processes (killed on drop), nats-server, readiness
//!   polling with deadlines, RSS and socket counts from `/proc`.
//! - [`proc`]: CPU time per process from `/proc/PID/stat`.
//! - [`fleet`]: a bmcfleet deployment (nats-server, gateway, workers as
//!   processes), submitting batches and collecting final results.
//! - [`stats`]: medians, percentiles, rates, number formatting.
//! - [`report`]: tables, goals, findings; terminal text and Markdown.
//! - one module per benchmark: [`pipeline`], [`ipmi`], [`ipmi_fleet`],
//!   [`redfish`], [`scale`], [`ordering`], [`isolation`]; `rollout-fleet`
//!   is [`ipmi_fleet::rollout`] (§8's responder, each workload one rollout).

pub mod console;
pub mod fairness;
pub mod fleet;
pub mod harness;
pub mod ipmi;
pub mod ipmi_fleet;
pub mod isolation;
pub mod ordering;
pub mod pipeline;
pub mod poll;
pub mod proc;
pub mod redfish;
pub mod report;
pub mod scale;
pub mod stats;
