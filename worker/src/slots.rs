//! The worker's `--max-concurrent-batches` slots, shared between tenants.
//!
//! A batch (or a state poll) runs in one of the worker's slots, and a
//! tenant's first takes one of its tenant's share of them
//! (`--max-batches-per-tenant`, by default half of the slots). The
//! operator's own work has no share: batches an operator submitted (from
//! the gateway's own NATS account) for its own machines (tenant `default`),
//! and the polls of those machines. A deployment without tenants keeps
//! every slot, and the operator may use what the tenants leave. The
//! `default` account's own producers, when a deployment gives it some, are
//! a tenant like any other: their batches take the `default` share (issue
//! 32; before, they counted as the operator's and could take every slot).
//! A tenant with many machines, or with many
//! slow batches (long power settles, firmware updates, BMCs that answer
//! slowly), therefore holds at most its share, and the other tenants'
//! batches still find slots: without the share, one tenant's lanes could
//! take every slot and the other tenants' batches would wait behind them
//! until their deadlines passed. A lane whose tenant holds its whole share
//! waits for it without holding a worker slot, so it keeps no other
//! tenant waiting.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The worker's slots and every tenant's share of them.
#[derive(Debug)]
pub struct Slots {
    all: Arc<Semaphore>,
    per_tenant: usize,
    /// One share per tenant seen (tenants are NATS accounts: few).
    tenants: Mutex<HashMap<String, Arc<Semaphore>>>,
}

/// What asks for a slot, as the log line written when it has to wait names it.
#[derive(Clone, Copy, Debug)]
pub enum For<'a> {
    Batch(&'a bmcfleet_schema::BatchId),
    /// A state poll of the machine of this name.
    Poll(&'a str),
}

impl std::fmt::Display for For<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            For::Batch(id) => write!(f, "batch {id}"),
            For::Poll(machine) => write!(f, "poll of machine {machine}"),
        }
    }
}

/// One slot, with its tenant's share (none for the operator's own): both
/// given back when dropped.
#[derive(Debug)]
pub struct Slot {
    _all: OwnedSemaphorePermit,
    _tenant: Option<OwnedSemaphorePermit>,
}

impl Slots {
    /// `total` slots, of which one tenant may hold `per_tenant` (at least 1, at most `total`).
    pub fn new(total: usize, per_tenant: usize) -> Slots {
        let total = total.max(1);
        Slots {
            all: Arc::new(Semaphore::new(total)),
            per_tenant: per_tenant.clamp(1, total),
            tenants: Mutex::default(),
        }
    }

    /// Whose share work of `tenant` takes: none (`None`) for the
    /// operator's own (`by_operator` and tenant `default`), else the
    /// tenant's.
    pub fn share_of(tenant: &str, by_operator: bool) -> Option<&str> {
        (!(by_operator && tenant == bmcfleet_schema::machine::DEFAULT_TENANT)).then_some(tenant)
    }

    /// How many slots one tenant may hold.
    pub fn per_tenant(&self) -> usize {
        self.per_tenant
    }

    fn share(&self, tenant: &str) -> Arc<Semaphore> {
        let mut tenants = self.tenants.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(share) = tenants.get(tenant) {
            return share.clone();
        }
        tenants.entry(tenant.to_owned()).or_insert_with(|| Arc::new(Semaphore::new(self.per_tenant))).clone()
    }

    /// A slot for work of `tenant`, or of the operator's own (`None`: no
    /// share; see [`Slots::share_of`]). `work` names it in the log line
    /// written when the tenant's share is spent and it has to wait for it.
    pub async fn acquire(&self, tenant: Option<&str>, work: For<'_>) -> Slot {
        let Some(tenant) = tenant else {
            let all = self.all.clone().acquire_owned().await.expect("the worker's slots are never closed");
            return Slot { _all: all, _tenant: None };
        };
        let share = self.share(tenant);
        let mine = match share.clone().try_acquire_owned() {
            Ok(p) => p,
            Err(_) => {
                tracing::info!(
                    tenant, per_tenant = self.per_tenant, work = %work,
                    "Waiting for a slot of this tenant's share (--max-batches-per-tenant): its other batches hold all of it."
                );
                share.acquire_owned().await.expect("tenant shares are never closed")
            }
        };
        let all = self.all.clone().acquire_owned().await.expect("the worker's slots are never closed");
        Slot { _all: all, _tenant: Some(mine) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;

    #[tokio::test]
    async fn a_tenant_holds_at_most_its_share_and_leaves_the_rest() {
        let slots = Slots::new(4, 2);
        let a1 = slots.acquire(Some("a"), For::Poll("a1")).await;
        let _a2 = slots.acquire(Some("a"), For::Poll("a2")).await;
        // A third of tenant a waits for a's share, holding no worker slot...
        let mut a3 = Box::pin(slots.acquire(Some("a"), For::Poll("a3")));
        assert!((&mut a3).now_or_never().is_none());
        // ... so the other tenants find theirs.
        let _b1 = slots.acquire(Some("b"), For::Poll("b1")).await;
        let _op = slots.acquire(None, For::Poll("op")).await;
        assert!(
            Box::pin(slots.acquire(Some("b"), For::Poll("b2"))).now_or_never().is_none(),
            "every slot of the worker is taken"
        );
        drop(a1);
        let _a3 = a3.await;
        // The operator's own machines have no share: all the slots.
        let few = Slots::new(3, 1);
        let _ops = [
            few.acquire(None, For::Poll("1")).await,
            few.acquire(None, For::Poll("2")).await,
            few.acquire(None, For::Poll("3")).await,
        ];
        assert!(Box::pin(few.acquire(None, For::Poll("4"))).now_or_never().is_none(), "still at most every slot");
        assert_eq!(Slots::new(1, 0).per_tenant(), 1, "a tenant may always run something");
        // Only the operator's own work goes without a share: the `default`
        // account's producers are a tenant like any other (issue 32).
        assert_eq!(Slots::share_of("default", true), None);
        assert_eq!(Slots::share_of("default", false), Some("default"));
        assert_eq!(Slots::share_of("tenant-a", true), Some("tenant-a"), "an operator acting for a tenant");
        let two = Slots::new(2, 1);
        let _d1 = two.acquire(Slots::share_of("default", false), For::Poll("d1")).await;
        assert!(
            Box::pin(two.acquire(Slots::share_of("default", false), For::Poll("d2"))).now_or_never().is_none(),
            "a default-account producer holds its share only"
        );
        let _b = two.acquire(Some("b"), For::Poll("b")).await;
        assert_eq!(Slots::new(2, 9).per_tenant(), 2);
    }
}
