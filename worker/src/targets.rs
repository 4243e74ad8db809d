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
//!   of a registered machine: its address as registered, an address a
//!   name the producer gave resolves to, or an address the host name a
//!   machine is registered by resolves to (those names are resolved when
//!   an ad hoc batch needs them and kept [`NAME_TTL`]).
//!
//! A refusal fails every action of the batch before anything is sent.
//!
//! The addresses a name resolved to, once checked, go with the target
//! (`options.resolved`): the providers connect to them and never resolve
//! the name again, so a DNS answer that changes in between (rebinding)
//! cannot send the request elsewhere.

use bmcfleet_common::registry::{Lookup, Registry};
use bmcfleet_schema::machine::AdHocPolicy;
use bmcfleet_schema::{BmcTarget, ErrorBody, ErrorCode, Host, Job};
use futures::StreamExt;
use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// Longest wait for a name to resolve.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long what a registered machine's host name resolved to is used
/// before it is resolved again.
pub const NAME_TTL: Duration = Duration::from_secs(60);
/// Registered host names resolved at once.
const LOOKUPS_AT_ONCE: usize = 32;

pub struct Targets {
    pub machines: Registry,
    pub ad_hoc: AdHocPolicy,
    /// What registered machines' host names resolved to, and when.
    names: tokio::sync::Mutex<HashMap<String, (Instant, Vec<IpAddr>)>>,
}

/// The addresses `host` resolves to (within [`RESOLVE_TIMEOUT`]).
async fn lookup(host: &str, port: u16) -> Result<Vec<IpAddr>, ErrorBody> {
    match tokio::time::timeout(RESOLVE_TIMEOUT, tokio::net::lookup_host((host, port))).await {
        Ok(Ok(addrs)) => Ok(addrs.map(|a| a.ip()).collect()),
        Ok(Err(e)) => Err(ErrorBody::new(ErrorCode::Unreachable, format!("{host} does not resolve: {e}"))),
        Err(_) => {
            Err(ErrorBody::new(ErrorCode::Unreachable, format!("{host} did not resolve within {RESOLVE_TIMEOUT:?}")))
        }
    }
}

fn forbidden(message: impl Into<String>) -> ErrorBody {
    ErrorBody::new(ErrorCode::TargetForbidden, message)
}

impl Targets {
    pub fn new(machines: Registry, ad_hoc: AdHocPolicy) -> Targets {
        Targets { machines, ad_hoc, names: Default::default() }
    }

    /// The registered machines whose host name resolves to one of `ips`,
    /// whatever their ports (names resolved more than [`NAME_TTL`] ago, or
    /// never, are resolved now; a name that does not resolve stands for no
    /// address).
    async fn machines_named_at(&self, ips: &[IpAddr]) -> Vec<String> {
        // A `sim` machine's name only labels a simulated BMC: never resolved.
        let named: Vec<(String, String)> = self
            .machines
            .machines(|m| matches!(m.address.host, Host::Name(_)) && m.protocol != bmcfleet_schema::Protocol::Sim)
            .iter()
            .map(|m| (m.address.host_string(), m.name.clone()))
            .collect();
        if named.is_empty() || ips.is_empty() {
            return Vec::new();
        }
        let mut names = self.names.lock().await;
        let now = Instant::now();
        names.retain(|_, (at, _)| now.duration_since(*at) < NAME_TTL);
        let mut stale: Vec<String> =
            named.iter().map(|(host, _)| host).filter(|h| !names.contains_key(*h)).cloned().collect();
        stale.sort();
        stale.dedup();
        let resolved: Vec<(String, Vec<IpAddr>)> = futures::stream::iter(stale)
            .map(|host| async move {
                let ips = lookup(&host, 1).await.unwrap_or_default();
                (host, ips)
            })
            .buffer_unordered(LOOKUPS_AT_ONCE)
            .collect()
            .await;
        names.extend(resolved.into_iter().map(|(host, ips)| (host, (now, ips))));
        named
            .into_iter()
            .filter(|(host, _)| names.get(host).is_some_and(|(_, resolved)| resolved.iter().any(|ip| ips.contains(ip))))
            .map(|(_, machine)| machine)
            .collect()
    }

    /// The target to use for `job`, or why nothing may be sent.
    pub async fn resolve(&self, job: &Job) -> Result<BmcTarget, ErrorBody> {
        if let Some(name) = &job.batch.machine {
            let gone =
                || ErrorBody::new(ErrorCode::MachineNotFound, format!("machine `{name}` is not registered (any more)"));
            return match self.machines.get_fresh(name).await {
                // Moved to another tenant since admission: no longer this batch's machine.
                Lookup::Found(m) if m.tenant != job.tenant => Err(gone()),
                Lookup::Found(m) => Ok(m.target()),
                Lookup::NotFound => Err(gone()),
                Lookup::Invalid(why) => Err(ErrorBody::new(
                    ErrorCode::MachineNotFound,
                    format!("the record of machine `{name}` is unusable: {why}"),
                )),
                Lookup::Conflict(why) => Err(forbidden(why)),
            };
        }
        let t = &job.target;
        if let Some(why) = bmcfleet_schema::machine::ad_hoc_refusal(t) {
            return Err(forbidden(why));
        }
        if let Some(machine) = self.machines.machine_at(&t.address) {
            return Err(forbidden(format!(
                "{} is registered as machine `{machine}`: name the machine instead",
                t.address.host_string()
            )));
        }
        let mut ips = self.addresses(t).await?;
        // A stable order, so the lane's session is reused across batches.
        ips.sort();
        ips.dedup();
        for ip in &ips {
            self.ad_hoc.check(*ip).map_err(|why| forbidden(format!("{}: {why}", t.address.host_string())))?;
            // A name that resolves to a registered machine is that machine.
            if t.address.ip().is_none() && self.machines.machine_at_ip(*ip).is_some() {
                return Err(forbidden(format!(
                    "{} resolves to a registered machine's address: name the machine instead",
                    t.address.host_string()
                )));
            }
        }
        // An address a registered machine's host name resolves to is that machine.
        if let Some(machine) = self.machines_named_at(&ips).await.into_iter().next() {
            return Err(forbidden(format!(
                "{} is an address of registered machine `{machine}` (registered by host name): name the machine instead",
                t.address.host_string()
            )));
        }
        let mut target = t.clone();
        if t.address.ip().is_none() {
            // What was checked is what the provider connects to: no second lookup.
            target.options.resolved = ips;
        }
        Ok(target)
    }

    /// Why a `network_source static` action of `job` may not give its
    /// BMC `address`: it is another registered machine's (as registered,
    /// or what a machine's host name resolves to). The worker would then
    /// send that machine's credentials to this BMC.
    pub async fn static_address_refusal(&self, job: &Job, address: std::net::Ipv4Addr) -> Option<ErrorBody> {
        let ip = IpAddr::V4(address);
        let own = job.batch.machine.as_deref();
        // Every machine of that IP, whatever its port (several BMCs may
        // share an IP; a BMC answers on every port of its address).
        let mut at = self.machines.machines_at_ip(ip);
        at.extend(self.machines_named_at(&[ip]).await);
        at.into_iter().find(|m| Some(m.as_str()) != own).map(|m| {
            // Another tenant's machine is not named to a tenant.
            let whose = if job.tenant == bmcfleet_schema::machine::DEFAULT_TENANT { format!("registered machine `{m}`") } else { "a registered machine".to_owned() };
            forbidden(format!("{address} is the address of {whose}: a BMC may not be given another machine's address; nothing was sent"))
        })
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
        let ips = lookup(&host, t.address.port.unwrap_or(1)).await?;
        if ips.is_empty() {
            return Err(ErrorBody::new(ErrorCode::Unreachable, format!("{host} resolves to no address")));
        }
        Ok(ips)
    }
}
