//! The audit log: who admitted which batch, and every change of the machine
//! registry, kept in the `<STREAM>_AUDIT` stream (`<prefix>.audit.>`).
//!
//! | record                  | subject                          | written by |
//! |-------------------------|----------------------------------|------------|
//! | a batch was admitted    | `<prefix>.audit.batch.<tenant>`  | the gateway, once per admitted batch |
//! | a rollout was admitted | `<prefix>.audit.rollout.<tenant>` | the gateway, once per rollout (with its machine count) |
//! | the registry changed    | `<prefix>.audit.registry`        | every gateway watching it (deduplicated by revision) |
//! | an operator changed it  | `<prefix>.audit.registry`        | `bmcctl machine`, with the operator's identity |
//!
//! Each stream message holds a JSON array of records (a gateway batches
//! them). Records hold no secret: action kinds, never parameters; machine records
//! hold no password (only a credential's name).

use crate::action::BatchId;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuditRecord {
    pub at_ms: u64,
    /// Who: `tenant:<name>` (the requesting NATS account), `operator`
    /// (the gateway's own account), `operator:<user>` (bmcctl, with its NATS
    /// or system user), or `registry` (a change seen in the bucket).
    pub actor: String,
    pub what: AuditEvent,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum AuditEvent {
    BatchAdmitted {
        batch: BatchId,
        tenant: String,
        /// The ordering key (`m-<machine>` or the ad hoc address's key).
        target: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        machine: Option<String>,
        actions: Vec<String>,
        /// A plan batch (`Batch::plan`): it changes nothing on the machine.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        plan: bool,
    },
    /// A rollout was admitted (its machines' batches are audited as each is admitted).
    RolloutAdmitted {
        rollout: crate::rollout::RolloutId,
        tenant: String,
        machines: u32,
        actions: Vec<String>,
    },
    MachinePut {
        machine: String,
        revision: u64,
        /// The record as written (no secret: a credential is named, not held).
        record: serde_json::Value,
    },
    MachineRemoved {
        machine: String,
        revision: u64,
    },
}

impl AuditRecord {
    /// A one-line human description.
    pub fn describe(&self) -> String {
        match &self.what {
            AuditEvent::BatchAdmitted { batch, tenant, target, machine, actions, plan } => format!(
                "{} admitted {}batch {batch} for {} (tenant {tenant}): {}",
                self.actor,
                if *plan { "plan " } else { "" },
                machine.as_deref().unwrap_or(target),
                actions.join(", ")
            ),
            AuditEvent::RolloutAdmitted { rollout, tenant, machines, actions } => format!(
                "{} admitted rollout {rollout} of {machines} machines (tenant {tenant}): {}",
                self.actor,
                actions.join(", ")
            ),
            AuditEvent::MachinePut { machine, revision, .. } => {
                format!("{} put machine {machine} (revision {revision})", self.actor)
            }
            AuditEvent::MachineRemoved { machine, revision } => {
                format!("{} removed machine {machine} (revision {revision})", self.actor)
            }
        }
    }
}
