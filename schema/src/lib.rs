//! # bmcfleet-schema
//!
//! The wire contract between producers, the gateway and the workers. Every
//! other crate speaks through these types; nothing else names a subject.
//!
//! # Layout
//! - [`secret`]: [`Secret`], a string that never prints.
//! - [`bmc`]: [`BmcAddress`] parsing/normalisation and the subject-safe [`BmcKey`].
//! - [`action`]: [`Batch`], [`BmcTarget`] and the closed [`Action`] set.
//! - [`machine`]: [`Machine`], the operator's registry record, and [`machine::AdHocPolicy`].
//! - [`result`]: [`ActionResult`], [`BatchResult`], [`Event`], [`BatchStatus`].
//! - [`error`]: [`ErrorCode`], the documented codes a producer can receive.
//! - [`subject`]: subject and stream names, partitioning.
//! - [`codec`]: MessagePack (default) and JSON encoding.
//! - [`validate`]: [`Limits`] and batch validation.
//! - [`raw_policy`]: [`RawPolicy`], which raw passthrough requests a deployment allows.
//! - [`components`]: typed components of an [`Inventory`], their bounds and drift.
//! - [`rollout`]: rollouts (one request, many machines, driven server-side): wire types and state machine.
//! - [`plan`]: [`plan::ActionPlan`], what an action of a plan batch read and would send.
//! - [`state`]: [`state::MachineState`] and [`state::MachineEvent`], the observed state of registered machines.

pub mod action;
pub mod audit;
pub mod bmc;
pub mod codec;
pub mod components;
pub mod console;
pub mod discover;
pub mod duration;
pub mod error;
/// Fuzz entry points (cargo-fuzz targets, corpus replay in tests): only with
/// the `fuzzing` feature, so release builds do not contain them.
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
pub mod health;
pub mod lifecycle;
pub mod machine;
pub mod plan;
pub mod raw_policy;
pub mod result;
pub mod rollout;
pub mod secret;
pub mod state;
pub mod subject;
pub mod validate;

pub use action::*;
pub use bmc::{BmcAddress, BmcKey, Host};
pub use codec::Encoding;
pub use console::{ConsoleEntry, ConsoleLogPage, ConsoleLogRequest};
pub use error::{ErrorBody, ErrorCode};
pub use lifecycle::TaskResume;
pub use machine::Machine;
pub use raw_policy::RawPolicy;
pub use result::*;
pub use secret::Secret;
pub use subject::Subjects;
pub use validate::{FirmwareUpdatePolicy, Limits, ValidationError};
