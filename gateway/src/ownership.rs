//! Who owns which partition, as far as a gateway needs to know (issue 34):
//! a waiting submit for a partition no worker owns is answered at once
//! (`accepted`, with [`Unowned`]: the batch stays queued) instead of
//! waiting in vain for its deadline. Read from the workers' lease bucket
//! (`<STREAM>_LEASES`, key `p<N>`), which only workers write; and the
//! fleet-state census behind `bmcfleet_machines_state`.

use async_nats::jetstream::kv::{Operation, Store};
use bmcfleet_common::runtime::now_ms;
use bmcfleet_schema::state::{Freshness, PartitionSeen};
use bmcfleet_schema::{Subjects, Unowned};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

/// The lease bucket, opened on first need (it exists once a worker has run).
pub struct Ownership {
    js: async_nats::jetstream::Context,
    subjects: Subjects,
    leases: tokio::sync::OnceCell<(Store, Duration)>,
    /// When this gateway first found each partition free (no record that says since when).
    free_since: Mutex<HashMap<u16, u64>>,
}

impl Ownership {
    pub fn new(js: async_nats::jetstream::Context, subjects: Subjects) -> Ownership {
        Ownership { js, subjects, leases: Default::default(), free_since: Default::default() }
    }

    /// The lease bucket and its TTL, or `None` when it does not exist yet
    /// (no worker has ever run: nobody owns anything).
    async fn leases(&self) -> Result<Option<&(Store, Duration)>, String> {
        if let Some(l) = self.leases.get() {
            return Ok(Some(l));
        }
        match self.js.get_key_value(self.subjects.leases_bucket()).await {
            Ok(store) => {
                let ttl = match store.status().await {
                    Ok(s) => s.info.config.max_age,
                    Err(e) => return Err(e.to_string()),
                };
                Ok(Some(self.leases.get_or_init(|| async { (store, ttl) }).await))
            }
            Err(e) if stream_missing(&e) => Ok(None),
            Err(e) => Err(e.to_string()),
        }
    }

    /// `Some` when no worker holds a live lease on `partition` now; `None`
    /// when one does, or when the leases cannot be read (then the submit
    /// waits as before: never a false "no owner").
    pub async fn unowned(&self, partition: u16) -> Option<Unowned> {
        let now = now_ms();
        let since = match self.leases().await {
            Ok(None) => None,
            Ok(Some((store, ttl))) => match store.entry(self.subjects.lease_key(partition)).await {
                Ok(Some(e)) => {
                    let at = (e.created.unix_timestamp_nanos() / 1_000_000).max(0) as u64;
                    match e.operation {
                        // Handed back (deleted or purged) at `at`.
                        Operation::Delete | Operation::Purge => Some(at),
                        // Renewed at `at`: live until the TTL runs out.
                        Operation::Put if ttl.is_zero() || at + ttl.as_millis() as u64 > now => {
                            self.free_since.lock().expect("ownership lock").remove(&partition);
                            return None;
                        }
                        Operation::Put => Some(at + ttl.as_millis() as u64),
                    }
                }
                Ok(None) => None,
                Err(e) => {
                    tracing::debug!(partition, error = %e, "Cannot read the partition's lease.");
                    return None;
                }
            },
            Err(e) => {
                tracing::debug!(partition, error = %e, "Cannot open the lease bucket.");
                return None;
            }
        };
        let since = since.or_else(|| {
            // Expired leases leave no trace: since this gateway first saw it free.
            Some(*self.free_since.lock().expect("ownership lock").entry(partition).or_insert(now))
        });
        Some(Unowned::new(partition, since))
    }
}

/// Whether opening a bucket failed because its stream does not exist.
fn stream_missing(e: &async_nats::jetstream::context::KeyValueError) -> bool {
    use async_nats::jetstream::context::{GetStreamError, GetStreamErrorKind};
    use async_nats::jetstream::ErrorCode;
    std::error::Error::source(e).and_then(|s| s.downcast_ref::<GetStreamError>()).is_some_and(
        |s| matches!(s.kind(), GetStreamErrorKind::JetStream(j) if j.error_code() == ErrorCode::STREAM_NOT_FOUND),
    )
}

/// How often the gateway counts the registered machines by freshness
/// (`bmcfleet_machines_state`): one read per partition, plus a record read
/// for each machine no partition record mentions.
pub const CENSUS_EVERY: Duration = Duration::from_secs(30);

/// Keep `gauges` (by freshness) at the registered machines' counts.
pub async fn census(
    js: async_nats::jetstream::Context,
    subjects: Subjects,
    registry: bmcfleet_common::registry::Registry,
    gauges: prometheus_client::metrics::family::Family<
        crate::metrics::FreshnessLabels,
        prometheus_client::metrics::gauge::Gauge,
    >,
) {
    let mut tick = tokio::time::interval(CENSUS_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut store = None;
    loop {
        tick.tick().await;
        if store.is_none() {
            store = js.get_key_value(subjects.state_bucket()).await.ok();
        }
        let Some(kv) = &store else { continue };
        let counts = count(kv, &subjects, &registry).await;
        for f in [Freshness::Current, Freshness::Stale, Freshness::Unknown] {
            let n = counts.get(&f).copied().unwrap_or(0);
            gauges.get_or_create(&crate::metrics::FreshnessLabels { freshness: f.as_str().to_owned() }).set(n);
        }
    }
}

/// The registered machines by freshness at now, from the partitions'
/// records alone (no read per machine): a machine no partition record
/// mentions has not been polled by any worker (or not since its partition
/// record was written): `unknown`.
pub async fn count(
    kv: &Store,
    subjects: &Subjects,
    registry: &bmcfleet_common::registry::Registry,
) -> HashMap<Freshness, i64> {
    let mut seen: HashMap<String, bmcfleet_schema::state::SeenAt> = HashMap::new();
    for p in 0..subjects.partitions {
        if let Ok(Some(bytes)) = kv.get(subjects.seen_key(p)).await {
            if let Ok(record) = serde_json::from_slice::<PartitionSeen>(&bytes) {
                for (name, at) in record.machines {
                    match seen.get(&name) {
                        Some(had) if had.observed_ms >= at.observed_ms => {}
                        _ => {
                            seen.insert(name, at);
                        }
                    }
                }
            }
        }
    }
    let now = now_ms();
    let mut out = HashMap::new();
    for m in registry.machines(|_| true) {
        let freshness = seen.get(&m.name).map_or(Freshness::Unknown, |at| at.freshness(now));
        *out.entry(freshness).or_insert(0) += 1;
    }
    out
}
