//! Where a batch's actions may go, decided by the worker itself.
//!
//! The gateway already refused what it could, but the worker holds the
//! credentials, so it checks again with its own information:
//! - a batch for a machine uses the machine's record from this worker's
//!   copy of the registry (never the target the job carries), so a named
//!   credential only ever reaches the address the operator bound it to, and
//!   only while the machine still belongs to the batch's tenant;
//! - an ad hoc batch (an address in the batch) must fall inside the
//!   worker's `--ad-hoc-targets` ranges *after* name resolution (a name
//!   resolving to loopback or a metadata address is refused), may not use a
//!   named credential or producer TLS options, and may not be the address
//!   of a registered machine.
//!
//! A refusal fails every action of the batch before anything is sent.
//!
//! The addresses a name resolved to, once checked, go with the target
//! (`options.resolved`): the providers connect to them and never resolve
//! the name again, so a DNS answer that changes in between (rebinding)
//! cannot send the request elsewhere.

use bmcfleet_common::registry::{Lookup, Registry};
use bmcfleet_schema::machine::AdHocPolicy;
use bmcfleet_schema::{BmcTarget, ErrorBody, ErrorCode, Job};
use std::net::IpAddr;
use std::time::Duration;

/// Longest wait for a name to resolve.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(5);

pub struct Targets {
    pub machines: Registry,
    pub ad_hoc: AdHocPolicy,
}

fn forbidden(message: impl Into<String>) -> ErrorBody {
    ErrorBody::new(ErrorCode::TargetForbidden, message)
}

impl Targets {
    /// The target to use for `job`, or why nothing may be sent.
    pub async fn resolve(&self, job: &Job) -> Result<BmcTarget, ErrorBody> {
        if let Some(name) = &job.batch.machine {
            let gone = || ErrorBody::new(ErrorCode::MachineNotFound, format!("machine `{name}` is not registered (any more)"));
            return match self.machines.get_fresh(name).await {
                // Moved to another tenant since admission: no longer this batch's machine.
                Lookup::Found(m) if m.tenant != job.tenant => Err(gone()),
                Lookup::Found(m) => Ok(m.target()),
                Lookup::NotFound => Err(gone()),
                Lookup::Invalid(why) => Err(ErrorBody::new(ErrorCode::MachineNotFound, format!("the record of machine `{name}` is unusable: {why}"))),
                Lookup::Conflict(why) => Err(forbidden(why)),
            };
        }
        let t = &job.target;
        if let Some(why) = bmcfleet_schema::machine::ad_hoc_refusal(t) {
            return Err(forbidden(why));
        }
        if let Some(machine) = self.machines.machine_at(&t.address) {
            return Err(forbidden(format!("{} is registered as machine `{machine}`: name the machine instead", t.address.host_string())));
        }
        let mut ips = self.addresses(t).await?;
        // A stable order, so the lane's session is reused across batches.
        ips.sort();
        ips.dedup();
        for ip in &ips {
            self.ad_hoc.check(*ip).map_err(|why| forbidden(format!("{}: {why}", t.address.host_string())))?;
            // A name that resolves to a registered machine is that machine.
            if t.address.ip().is_none() && self.machines.machine_at_host(&ip.to_string()).is_some() {
                return Err(forbidden(format!("{} resolves to a registered machine's address: name the machine instead", t.address.host_string())));
            }
        }
        let mut target = t.clone();
        if t.address.ip().is_none() {
            // What was checked is what the provider connects to: no second lookup.
            target.options.resolved = ips;
        }
        Ok(target)
    }

    /// Every address the target's host stands for.
    async fn addresses(&self, t: &BmcTarget) -> Result<Vec<IpAddr>, ErrorBody> {
        if let Some(ip) = t.address.ip() {
            return Ok(vec![ip]);
        }
        // A `sim` target's name only labels a simulated BMC behind
        // --sim-endpoint: it is never resolved or contacted.
        if t.protocol == bmcfleet_schema::Protocol::Sim && !self.ad_hoc.is_off() {
            return Ok(vec![]);
        }
        if self.ad_hoc.is_off() {
            return Err(forbidden("ad hoc targets are off on this worker (--ad-hoc-targets)"));
        }
        let host = t.address.host_string();
        let lookup = tokio::net::lookup_host((host.as_str(), t.address.port.unwrap_or(1)));
        let ips: Vec<IpAddr> = match tokio::time::timeout(RESOLVE_TIMEOUT, lookup).await {
            Ok(Ok(addrs)) => addrs.map(|a| a.ip()).collect(),
            Ok(Err(e)) => return Err(ErrorBody::new(ErrorCode::Unreachable, format!("{host} does not resolve: {e}"))),
            Err(_) => return Err(ErrorBody::new(ErrorCode::Unreachable, format!("{host} did not resolve within {RESOLVE_TIMEOUT:?}"))),
        };
        if ips.is_empty() {
            return Err(ErrorBody::new(ErrorCode::Unreachable, format!("{host} resolves to no address")));
        }
        Ok(ips)
    }
}
