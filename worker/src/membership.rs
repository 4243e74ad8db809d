//! Partition ownership: presence, leases and balancing.
//!
//! Each worker announces itself in the presence bucket (key = worker id,
//! expiring after the lease TTL) and owns partitions through leases in the
//! lease bucket (key = `p<N>`). Both buckets expire entries by age, so a
//! dead worker's presence and leases vanish after one TTL with no help.
//!
//! Every rebalance interval a worker:
//! 1. refreshes its presence;
//! 2. renews each lease with compare-and-set on the revision it holds; a
//!    failed CAS means the lease is gone: the partition is stopped at once.
//!    The lease's local validity ends a fifth of the TTL before the server
//!    could expire it (see [`crate::fence`]), so an owner cut off from NATS
//!    stops acting before anyone else can take over;
//! 3. computes its fair share `ceil(partitions / live workers)`, hands back
//!    surplus partitions gracefully (drain, then delete the lease) and creates
//!    leases for free partitions up to its share.

use crate::fence::Fence;
use crate::partition::{self, Settings};
use crate::providers::ProviderInfo;
use crate::Shared;
use async_nats::jetstream::kv;
use bmcfleet_common::runtime::now_ms;
use futures::TryStreamExt;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// How much longer than `--drain-timeout` a stop may take (releasing leases,
/// presence), however NATS behaves.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// A lease or presence bucket operation failed.
#[derive(Debug, thiserror::Error)]
#[error("{what}: {source}")]
pub struct MembershipError {
    /// What was being done.
    what: &'static str,
    #[source]
    source: Box<dyn std::error::Error + Send + Sync>,
}

impl MembershipError {
    fn new(what: &'static str, source: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        MembershipError { what, source: source.into() }
    }
}

/// Every key of a bucket.
async fn keys_of(store: &kv::Store, what: &'static str) -> Result<Vec<String>, MembershipError> {
    let keys = store.keys().await.map_err(|e| MembershipError::new(what, e))?;
    keys.try_collect().await.map_err(|e| MembershipError::new(what, e))
}

/// What a worker publishes about itself in the presence bucket.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct WorkerInfo {
    pub id: String,
    pub version: String,
    pub started_at_ms: u64,
    pub providers: Vec<ProviderInfo>,
    pub partitions: Vec<u16>,
}

/// A lease record.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Lease {
    worker: String,
    acquired_at_ms: u64,
}

struct Owned {
    revision: u64,
    fence: Fence,
    task: JoinHandle<()>,
    releasing: bool,
}

pub struct Membership {
    shared: Arc<Shared>,
    leases: kv::Store,
    presence: kv::Store,
    ttl: Duration,
    interval: Duration,
    settings: Settings,
    owned: BTreeMap<u16, Owned>,
    info: WorkerInfo,
}

fn kv_config(bucket: String, description: &str, ttl: Duration, replicas: usize) -> kv::Config {
    kv::Config {
        bucket,
        description: description.into(),
        history: 1,
        max_age: ttl,
        storage: async_nats::jetstream::stream::StorageType::File,
        num_replicas: replicas,
        ..Default::default()
    }
}

impl Membership {
    /// `control`: the connection for the lease and presence buckets, apart
    /// from the one carrying batches (see `run` in lib.rs).
    pub async fn new(
        shared: Arc<Shared>,
        control: async_nats::Client,
        ttl: Duration,
        interval: Duration,
        replicas: usize,
        settings: Settings,
        providers: Vec<ProviderInfo>,
    ) -> Result<Membership, MembershipError> {
        use bmcfleet_common::streams::{bucket, Mode};
        let js = &async_nats::jetstream::new(control);
        let leases = bucket(
            js,
            kv_config(shared.subjects.leases_bucket(), "bmcfleet partition leases", ttl, replicas),
            Mode::UseExisting,
        )
        .await
        .map_err(|e| MembershipError::new("setting up the lease bucket", e))?;
        let presence = bucket(
            js,
            kv_config(shared.subjects.workers_bucket(), "bmcfleet live workers", ttl, replicas),
            Mode::UseExisting,
        )
        .await
        .map_err(|e| MembershipError::new("setting up the presence bucket", e))?;
        let lease_status =
            leases.status().await.map_err(|e| MembershipError::new("reading the lease bucket's settings", e))?;
        let existing = lease_status.info.config.max_age;
        let ttl = if existing != ttl && !existing.is_zero() {
            tracing::warn!(configured = ?ttl, bucket = ?existing, "Lease TTL differs from the lease bucket's; using the bucket's so all workers agree.");
            existing
        } else {
            ttl
        };
        let info = WorkerInfo {
            id: shared.worker_id.clone(),
            version: env!("CARGO_PKG_VERSION").into(),
            started_at_ms: now_ms(),
            providers,
            partitions: vec![],
        };
        Ok(Membership { shared, leases, presence, ttl, interval, settings, owned: BTreeMap::new(), info })
    }

    fn valid_for(&self) -> Duration {
        self.ttl - self.ttl / 5
    }

    fn lease_value(&self) -> bytes::Bytes {
        serde_json::to_vec(&Lease { worker: self.shared.worker_id.clone(), acquired_at_ms: now_ms() })
            .unwrap_or_default()
            .into()
    }

    /// Partitions currently owned (including ones being handed back).
    pub fn owned(&self) -> Vec<u16> {
        self.owned.keys().copied().collect()
    }

    /// Run until `stop` is cancelled, then hand every partition back.
    pub async fn run(mut self, stop: CancellationToken) {
        let mut tick = tokio::time::interval(self.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tick.tick() => {}
            }
            // A stop cuts a round short: with NATS unreachable each lease
            // operation waits for its request timeout.
            let round = async {
                self.reap().await;
                self.renew().await;
                self.heartbeat().await;
                if let Err(e) = self.balance().await {
                    tracing::warn!(error = %e, "Rebalance failed; will retry.");
                }
            };
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = round => {}
            }
        }
        self.shutdown().await;
    }

    async fn heartbeat(&mut self) {
        self.info.partitions = self.owned();
        let body = serde_json::to_vec(&self.info).unwrap_or_default();
        if let Err(e) = self.presence.put(&self.shared.worker_id, body.into()).await {
            tracing::warn!(error = %e, "Cannot refresh worker presence.");
        }
    }

    /// Forget partitions whose runner ended; delete the lease if still ours.
    async fn reap(&mut self) {
        let finished: Vec<u16> = self.owned.iter().filter(|(_, o)| o.task.is_finished()).map(|(p, _)| *p).collect();
        for p in finished {
            let o = self.owned.remove(&p).expect("listed above");
            if !o.fence.lost.is_cancelled() {
                let key = self.shared.subjects.lease_key(p);
                let _ = self.leases.delete_expect_revision(&key, Some(o.revision)).await;
            }
            self.shared.metrics.lease(if o.fence.lost.is_cancelled() { "lost" } else { "released" });
            self.shared.metrics.partitions_owned.set(self.owned.len() as i64);
            tracing::info!(partition = p, "Partition released.");
        }
    }

    async fn renew(&mut self) {
        let value = self.lease_value();
        let valid_for = self.valid_for();
        for (p, o) in self.owned.iter_mut() {
            if o.fence.lost.is_cancelled() {
                continue;
            }
            let key = self.shared.subjects.lease_key(*p);
            let sent = Instant::now();
            match self.leases.update(&key, value.clone(), o.revision).await {
                Ok(rev) => {
                    o.revision = rev;
                    o.fence.extend_from(sent, valid_for);
                }
                Err(e) if e.kind() == kv::UpdateErrorKind::WrongLastRevision => {
                    tracing::warn!(partition = p, "Lease lost (expired or taken); stopping the partition now.");
                    o.fence.lost.cancel();
                }
                Err(e) => {
                    tracing::warn!(partition = p, error = %e, "Cannot renew the lease; the partition stops if this lasts.");
                    if !o.fence.valid() {
                        o.fence.lost.cancel();
                    }
                }
            }
        }
    }

    async fn live_workers(&self) -> Result<usize, MembershipError> {
        let keys = keys_of(&self.presence, "listing live workers").await?;
        Ok(keys.len().max(1))
    }

    async fn balance(&mut self) -> Result<(), MembershipError> {
        let total = self.shared.subjects.partitions as usize;
        let live = self.live_workers().await?;
        let share = total.div_ceil(live);
        let active: Vec<u16> =
            self.owned.iter().filter(|(_, o)| !o.releasing && !o.fence.lost.is_cancelled()).map(|(p, _)| *p).collect();
        if active.len() > share {
            for p in active.iter().rev().take(active.len() - share) {
                let o = self.owned.get_mut(p).expect("active");
                tracing::info!(partition = p, share, live, "Handing a partition back to rebalance.");
                o.releasing = true;
                o.fence.drain.cancel();
            }
            return Ok(());
        }
        let mut want = share - active.len();
        if want == 0 {
            return Ok(());
        }
        let taken: HashSet<String> = keys_of(&self.leases, "listing leases").await?.into_iter().collect();
        // Start the scan at a worker-specific offset so workers don't all race for partition 0.
        let offset =
            bmcfleet_schema::BmcKey::from_token(&self.shared.worker_id).map(|k| k.partition(total as u16)).unwrap_or(0);
        for i in 0..total {
            if want == 0 {
                break;
            }
            let p = ((offset as usize + i) % total) as u16;
            let key = self.shared.subjects.lease_key(p);
            if self.owned.contains_key(&p) || taken.contains(&key) {
                continue;
            }
            let sent = Instant::now();
            match self.leases.create(&key, self.lease_value()).await {
                Ok(revision) => {
                    let fence = Fence::new(sent, self.valid_for());
                    // The lease's creating revision names this ownership (its epoch).
                    let task = tokio::spawn(partition::run(
                        self.shared.clone(),
                        p,
                        revision,
                        fence.clone(),
                        self.settings.clone(),
                    ));
                    tracing::info!(partition = p, share, live, "Partition acquired.");
                    self.owned.insert(p, Owned { revision, fence, task, releasing: false });
                    self.shared.metrics.lease("acquired");
                    self.shared.metrics.partitions_owned.set(self.owned.len() as i64);
                    want -= 1;
                }
                Err(e) if e.kind() == kv::CreateErrorKind::AlreadyExists => {}
                Err(e) => return Err(MembershipError::new("creating a lease", e)),
            }
        }
        Ok(())
    }

    /// Graceful stop, bounded by the drain timeout plus [`SHUTDOWN_GRACE`]
    /// whatever NATS does: past it, every partition stops at once and the
    /// leases are left to expire on the server.
    async fn shutdown(&mut self) {
        tracing::info!(partitions = ?self.owned(), "Worker stopping; handing partitions back.");
        let limit = self.settings.drain_timeout + SHUTDOWN_GRACE;
        if tokio::time::timeout(limit, self.hand_back()).await.is_err() {
            tracing::warn!(
                limit = %bmcfleet_schema::duration::format(limit),
                "Could not hand the partitions back in time (is NATS reachable?); stopping now, the leases expire on the server."
            );
            for o in self.owned.values() {
                o.fence.lost.cancel();
                o.task.abort();
            }
        }
    }

    /// Drain every partition (keeping leases renewed while lanes finish
    /// their current action), then delete the leases.
    async fn hand_back(&mut self) {
        for o in self.owned.values() {
            o.fence.drain.cancel();
        }
        let mut tick = tokio::time::interval(self.interval);
        while self.owned.values().any(|o| !o.task.is_finished()) {
            tick.tick().await;
            self.renew().await;
        }
        self.reap().await;
        let _ = self.presence.delete(&self.shared.worker_id).await;
    }
}
