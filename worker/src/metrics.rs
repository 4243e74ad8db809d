//! The worker's Prometheus metrics, registered on a registry handed in.

use bmcfleet_schema::ActionResult;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ActionLabels {
    /// Action kind (`power_on`, `boot_device`, …).
    pub action: String,
    /// Provider that ran it, else the batch's protocol.
    pub protocol: String,
    /// `ok` or the error code.
    pub outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProtocolLabels {
    pub protocol: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PartitionLabels {
    pub partition: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ChangeLabels {
    /// `acquired`, `lost` or `released`.
    pub change: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    /// `resumed` (some actions were done before) or `redelivered` (none were).
    pub kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabels {
    pub state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MachineLabels {
    /// `on`, `off` or `unknown`.
    pub power: String,
    /// `true` or `false`.
    pub contactable: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    /// `ok`, an error code, or `skipped` (a batch was running).
    pub outcome: String,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

fn latency() -> Histogram {
    // 1 ms … ~65 s
    Histogram::new(exponential_buckets(0.001, 2.0, 17))
}

fn wait() -> Histogram {
    // 1 ms … ~9 h
    Histogram::new(exponential_buckets(0.001, 2.5, 18))
}

/// Everything the worker counts.
#[derive(Clone)]
pub struct Metrics {
    pub actions: Family<ActionLabels, Counter>,
    pub bmc_call_seconds: HistogramFamily<ProtocolLabels>,
    pub queue_wait_seconds: HistogramFamily<PartitionLabels>,
    pub lanes_in_flight: Family<PartitionLabels, Gauge>,
    pub partitions_owned: Gauge,
    pub lease_changes: Family<ChangeLabels, Counter>,
    pub redeliveries: Family<KindLabels, Counter>,
    pub batches_finished: Family<StateLabels, Counter>,
    /// Retries of BMC calls (an action's second and later attempts).
    pub bmc_retries: Family<ProtocolLabels, Counter>,
    /// BMC calls that failed because this worker ran out of file descriptors.
    pub worker_exhausted: Counter,
    /// Circuit breakers and how often they opened (shared by every lane's breaker).
    pub breakers: crate::guard::BreakerMetrics,
    /// Actions refused at once by an open breaker.
    pub breaker_rejections: Family<ProtocolLabels, Counter>,
    /// Machines this worker observes, by power and reachability.
    pub machines: Family<MachineLabels, Gauge>,
    /// Polls, by outcome.
    pub polls: Family<OutcomeLabels, Counter>,
    /// Time a poll took (session set-up included).
    pub poll_seconds: Histogram,
    /// How far the most overdue machine poll is behind its schedule (seconds), by partition.
    pub polls_behind_seconds: Family<PartitionLabels, Gauge<f64, std::sync::atomic::AtomicU64>>,
    /// Writes of observed state (changes and heartbeats).
    pub state_writes: Counter,
    /// Machine state events published, by kind.
    pub state_events: Family<KindLabels, Counter>,
}

impl Default for Metrics {
    /// Metrics on no registry (for code paths and tests that do not serve them).
    fn default() -> Self {
        Metrics::register(&mut Registry::default())
    }
}

impl Metrics {
    /// Create the metrics and register them under `bmcfleet_`.
    pub fn register(registry: &mut Registry) -> Metrics {
        let m = Metrics {
            actions: Family::default(),
            bmc_call_seconds: Family::new_with_constructor(latency as fn() -> Histogram),
            queue_wait_seconds: Family::new_with_constructor(wait as fn() -> Histogram),
            lanes_in_flight: Family::default(),
            partitions_owned: Gauge::default(),
            lease_changes: Family::default(),
            redeliveries: Family::default(),
            batches_finished: Family::default(),
            bmc_retries: Family::default(),
            worker_exhausted: Counter::default(),
            breakers: crate::guard::BreakerMetrics::default(),
            breaker_rejections: Family::default(),
            machines: Family::default(),
            polls: Family::default(),
            poll_seconds: latency(),
            polls_behind_seconds: Family::default(),
            state_writes: Counter::default(),
            state_events: Family::default(),
        };
        let r = registry.sub_registry_with_prefix("bmcfleet");
        r.register("actions", "Action results, by action kind, protocol and outcome (ok or error code)", m.actions.clone());
        r.register("bmc_call_duration_seconds", "Time spent in BMC calls for one action (session set-up included), by protocol", m.bmc_call_seconds.clone());
        r.register("queue_wait_seconds", "Time from admission to the start of a batch's first run, by partition", m.queue_wait_seconds.clone());
        r.register("lanes_in_flight", "BMC lanes executing a batch right now, by partition", m.lanes_in_flight.clone());
        r.register("partitions_owned", "Partitions this worker owns", m.partitions_owned.clone());
        r.register("lease_changes", "Partition lease changes (acquired, lost, released)", m.lease_changes.clone());
        r.register("redeliveries", "Batches delivered again (resumed after finished actions, or redelivered before any)", m.redeliveries.clone());
        r.register("batches_finished", "Batches finished by this worker, by final state", m.batches_finished.clone());
        r.register("fd_exhausted", "BMC calls that failed because this worker ran out of file descriptors (raise its limit)", m.worker_exhausted.clone());
        r.register("bmc_retries", "Retried BMC calls (retryable failures, within the action deadline), by protocol", m.bmc_retries.clone());
        r.register("breakers_open", "BMC circuit breakers on this worker that are open or half-open", m.breakers.open.clone());
        r.register("breaker_opens", "Times a BMC circuit breaker opened (or reopened after a failed probe)", m.breakers.opened.clone());
        r.register("breaker_rejections", "Actions failed fast with circuit_open, by protocol", m.breaker_rejections.clone());
        r.register("machines", "Registered machines this worker observes, by power state and contactable", m.machines.clone());
        r.register("polls", "Machine polls (power state and reachability), by outcome", m.polls.clone());
        r.register("poll_duration_seconds", "Time a machine poll took (session set-up included)", m.poll_seconds.clone());
        r.register("polls_behind_seconds", "How far the most overdue machine poll is behind its schedule", m.polls_behind_seconds.clone());
        r.register("state_writes", "Observed machine state written (changes and heartbeats)", m.state_writes.clone());
        r.register("state_events", "Machine state events published, by kind (power_changed, unreachable, recovered)", m.state_events.clone());
        m
    }

    pub fn action(&self, result: &ActionResult, protocol: &str) {
        let outcome = result.error.as_ref().map(|e| e.code.as_str()).unwrap_or("ok");
        let protocol = result.provider.as_deref().unwrap_or(protocol);
        self.actions
            .get_or_create(&ActionLabels { action: result.action.clone(), protocol: protocol.to_owned(), outcome: outcome.to_owned() })
            .inc();
    }

    pub fn lease(&self, change: &str) {
        self.lease_changes.get_or_create(&ChangeLabels { change: change.to_owned() }).inc();
    }

    pub fn partition_label(p: u16) -> PartitionLabels {
        PartitionLabels { partition: p.to_string() }
    }
}
