//! The audit log: who admitted which batch, and every change of the machine
//! registry, kept in the `<STREAM>_AUDIT` stream (`<prefix>.audit.>`).
//!
//! | record                  | subject                          | written by |
//! |-------------------------|----------------------------------|------------|
//! | a batch was admitted    | `<prefix>.audit.batch.<tenant>`  | the gateway, once per admitted batch |
//! | a rollout was admitted | `<prefix>.audit.rollout.<tenant>` | the gateway, once per rollout (with its machine count) |
//! | a batch's cancel was asked | `<prefix>.audit.batch.<tenant>` | the gateway, once per cancel it applied |
//! | a rollout was paused, resumed or aborted | `<prefix>.audit.rollout.<tenant>` | the gateway, once per change |
//! | the registry changed    | `<prefix>.audit.registry`        | every gateway watching it (deduplicated by revision) |
//! | an operator changed it  | `<prefix>.audit.registry`        | `bmcctl machine`, with the operator's identity |
//!
//! Who asked is the identity nats-server vouches for ([`NatsIdentity`]:
//! the requesting account and user, from the `Nats-Request-Info` header a
//! service import with `share: true` adds, which no client can forge), and
//! never a name the client claims: a claimed operator name (the
//! `Bmcfleet-Operator` header) is kept only as `claimed_operator`,
//! unverified.
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
    /// The requester as nats-server authenticated it (absent: a request
    /// from the gateway's own account, where the server names no one, or
    /// a record not made of a request).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nats: Option<NatsIdentity>,
    /// The operator name the client claimed (`Bmcfleet-Operator` header):
    /// UNVERIFIED, an annotation only; `nats` says who asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claimed_operator: Option<String>,
}

/// A requester as nats-server names it in the `Nats-Request-Info` header.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NatsIdentity {
    /// The requesting account.
    pub account: String,
    /// The authenticated user (absent: the server named none, as with a
    /// token, nkey-less or anonymous connection).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
}

impl NatsIdentity {
    /// `user@account`, or the account alone.
    pub fn describe(&self) -> String {
        match &self.user {
            Some(u) => format!("{u}@{}", self.account),
            None => self.account.clone(),
        }
    }
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
    /// A batch's cancel was applied (`state`: the batch's state after it:
    /// `cancelled` if it was queued, else still `running` until it stops).
    CancelRequested {
        batch: BatchId,
        tenant: String,
        state: crate::result::BatchState,
    },
    /// A rollout was paused, resumed or aborted (`change`: `pause`, `resume`, `abort`).
    RolloutChanged {
        rollout: crate::rollout::RolloutId,
        tenant: String,
        change: String,
    },
    /// An operator asked for a BMC discovery (what was to be probed: the
    /// targets as asked, at most [`DISCOVERY_TARGETS_KEPT`] of them, and
    /// how many addresses they hold), recorded before it is handed to a
    /// worker, whatever the worker then answers.
    DiscoveryRequested {
        targets: Vec<String>,
        /// Targets past the ones kept.
        #[serde(default, skip_serializing_if = "is_zero")]
        more_targets: u32,
        addresses: u64,
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

/// How many of a discovery's targets its audit record keeps.
pub const DISCOVERY_TARGETS_KEPT: usize = 32;

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl AuditRecord {
    /// A record of `actor` doing `what`, with no identity beyond the actor.
    pub fn new(at_ms: u64, actor: impl Into<String>, what: AuditEvent) -> AuditRecord {
        AuditRecord { at_ms, actor: actor.into(), what, nats: None, claimed_operator: None }
    }

    /// Who did it, for people: the actor, the NATS identity and any
    /// claimed name (marked unverified).
    pub fn who(&self) -> String {
        let mut who = self.actor.clone();
        if let Some(n) = &self.nats {
            who.push_str(&format!(" (nats {})", n.describe()));
        }
        if let Some(c) = &self.claimed_operator {
            who.push_str(&format!(" (claims {c}, unverified)"));
        }
        who
    }

    /// A one-line human description.
    pub fn describe(&self) -> String {
        let actor = self.who();
        match &self.what {
            AuditEvent::BatchAdmitted { batch, tenant, target, machine, actions, plan } => format!(
                "{} admitted {}batch {batch} for {} (tenant {tenant}): {}",
                actor,
                if *plan { "plan " } else { "" },
                machine.as_deref().unwrap_or(target),
                actions.join(", ")
            ),
            AuditEvent::RolloutAdmitted { rollout, tenant, machines, actions } => format!(
                "{} admitted rollout {rollout} of {machines} machines (tenant {tenant}): {}",
                actor,
                actions.join(", ")
            ),
            AuditEvent::CancelRequested { batch, tenant, state } => {
                format!("{actor} asked to cancel batch {batch} (tenant {tenant}): now {state:?}")
            }
            AuditEvent::RolloutChanged { rollout, tenant, change } => {
                format!("{actor} {change}d rollout {rollout} (tenant {tenant})")
            }
            AuditEvent::DiscoveryRequested { targets, more_targets, addresses } => {
                let more = if *more_targets > 0 { format!(" and {more_targets} more") } else { String::new() };
                format!("{actor} asked to discover BMCs in {}{more} ({addresses} addresses)", targets.join(", "))
            }
            AuditEvent::MachinePut { machine, revision, .. } => {
                format!("{} put machine {machine} (revision {revision})", actor)
            }
            AuditEvent::MachineRemoved { machine, revision } => {
                format!("{} removed machine {machine} (revision {revision})", actor)
            }
        }
    }
}
