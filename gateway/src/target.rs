//! Where a submitted batch goes: its registered machine's target, or an
//! ad hoc target, and the tenant it belongs to.

use crate::requester::Requester;
use crate::service::{error, Gateway};
use bmcfleet_common::registry::Lookup;
use bmcfleet_schema::validate::check_target;
use bmcfleet_schema::{BmcTarget, ErrorCode, Reply};

impl Gateway {
    /// Where the batch goes: its machine's registered target, or the ad hoc
    /// target (taken out of the batch: the job carries it once), which may
    /// not be a registered machine's address.
    pub(crate) async fn target(
        &self,
        batch: &mut bmcfleet_schema::Batch,
        who: &Requester,
    ) -> Result<(BmcTarget, String), Reply> {
        let not_found =
            |name: &str| error(ErrorCode::MachineNotFound, format!("no machine named `{name}` is registered"));
        let (target, tenant) = match (&batch.machine, batch.bmc.take()) {
            (Some(name), _) => match self.registry.get_fresh(name).await {
                // Another tenant's machine answers exactly like a missing one.
                Lookup::Found(m) if !who.sees(&m.tenant) => return Err(not_found(name)),
                Lookup::Found(m) => (m.target(), m.tenant.clone()),
                Lookup::NotFound => return Err(not_found(name)),
                Lookup::Invalid(_) | Lookup::Conflict(_) if *who != Requester::Operator => return Err(not_found(name)),
                Lookup::Invalid(why) => {
                    return Err(error(
                        ErrorCode::MachineNotFound,
                        format!("the record of machine `{name}` is unusable: {why}"),
                    ))
                }
                Lookup::Conflict(why) => return Err(error(ErrorCode::Conflict, why)),
            },
            (None, Some(mut target)) => {
                // One spelling per BMC: one ordering key, queue and per-BMC cap.
                target.address = target.address.canonical();
                if let Some(machine) = self.registry.machine_at(&target.address) {
                    let message = match who {
                        Requester::Operator => format!(
                            "{} is registered as machine `{machine}`: name the machine instead",
                            target.address.host_string()
                        ),
                        Requester::Tenant(_) => format!(
                            "{} is a registered machine's address: name the machine instead",
                            target.address.host_string()
                        ),
                    };
                    return Err(error(ErrorCode::TargetForbidden, message));
                }
                let tenant = match who {
                    Requester::Operator => bmcfleet_schema::machine::DEFAULT_TENANT.to_owned(),
                    Requester::Tenant(t) => t.clone(),
                };
                (target, tenant)
            }
            (None, None) => return Err(error(ErrorCode::InvalidField, "the batch names no target")),
        };
        check_target(&target, &self.limits).map_err(|e| Reply::Error(e.into()))?;
        // A BMC given another registered machine's address would be sent
        // that machine's credentials by the worker (checked there again).
        for (i, action) in batch.actions.iter().enumerate() {
            if let bmcfleet_schema::Action::NetworkSource(bmcfleet_schema::NetworkSourceOp::Static(s)) = action {
                if let Some(other) =
                    self.registry.machine_at_ip(s.address.into()).filter(|m| Some(m) != batch.machine.as_ref())
                {
                    let whose = match who {
                        Requester::Operator => format!("registered machine `{other}`"),
                        Requester::Tenant(_) => "a registered machine".to_owned(),
                    };
                    return Err(error(
                        ErrorCode::TargetForbidden,
                        format!("actions[{i}]: {} is the address of {whose}: a BMC may not be given another machine's address", s.address),
                    ));
                }
            }
        }
        Ok((target, tenant))
    }
}
