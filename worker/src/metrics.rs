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

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReadingLabels {
    /// `health`, `power` or `clock`.
    pub reading: String,
    /// `ok` or the error code.
    pub outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HealthLabels {
    /// `ok`, `warning`, `critical` or `unknown` (not checked lately, or nothing read).
    pub health: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MachineNameLabels {
    /// The registered machine's name (only with --per-machine-metrics).
    pub machine: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SuiteLabels {
    /// The RMCP+ cipher suite id (`17`, `3`).
    pub cipher_suite: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QuirkLabels {
    /// The quirk's stable name (`ipmi_boot_flags_reported_invalid`, ...).
    pub quirk: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DirectionLabels {
    /// `out` (host to viewers) or `in` (viewers to host).
    pub direction: String,
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

bmcfleet_common::metrics! {
    /// Everything the worker counts.
    pub struct Metrics {
        /// Action results, by action kind, protocol and outcome (ok or error code)
        actions: Family<ActionLabels, Counter> = Family::default(), "actions";
        /// Time spent in BMC calls for one action (session set-up included), by protocol
        bmc_call_seconds: HistogramFamily<ProtocolLabels> = Family::new_with_constructor(latency as fn() -> Histogram), "bmc_call_duration_seconds";
        /// Time from admission to the start of a batch's first run, by partition
        queue_wait_seconds: HistogramFamily<PartitionLabels> = Family::new_with_constructor(wait as fn() -> Histogram), "queue_wait_seconds";
        /// BMC lanes executing a batch right now, by partition
        lanes_in_flight: Family<PartitionLabels, Gauge> = Family::default(), "lanes_in_flight";
        /// Partitions this worker owns
        partitions_owned: Gauge = Gauge::default(), "partitions_owned";
        /// Partition lease changes (acquired, lost, released)
        lease_changes: Family<ChangeLabels, Counter> = Family::default(), "lease_changes";
        /// Batches delivered again (resumed after finished actions, or redelivered before any)
        redeliveries: Family<KindLabels, Counter> = Family::default(), "redeliveries";
        /// Batches finished by this worker, by final state
        batches_finished: Family<StateLabels, Counter> = Family::default(), "batches_finished";
        /// Retried BMC calls (retryable failures, within the action deadline), by protocol
        bmc_retries: Family<ProtocolLabels, Counter> = Family::default(), "bmc_retries";
        /// BMC calls that failed because this worker ran out of file descriptors or of Redfish answer memory (raise its limit)
        worker_exhausted: Counter = Counter::default(), "fd_exhausted";
        /// BMC circuit breakers on this worker that are open or half-open
        breakers_open: Gauge = Gauge::default(), "breakers_open";
        /// Times a BMC circuit breaker opened (or reopened after a failed probe)
        breaker_opens: Counter = Counter::default(), "breaker_opens";
        /// Actions failed fast with circuit_open, by protocol
        breaker_rejections: Family<ProtocolLabels, Counter> = Family::default(), "breaker_rejections";
        /// Registered machines this worker observes, by power state and contactable
        machines: Family<MachineLabels, Gauge> = Family::default(), "machines";
        /// Machines this worker observes whose BMC HTTPS certificate expires within 30 days (or has expired)
        certificates_expiring: Gauge = Gauge::default(), "bmc_certificates_expiring";
        /// Machine polls (power state and reachability), by outcome
        polls: Family<OutcomeLabels, Counter> = Family::default(), "polls";
        /// Time a machine poll took (session set-up included)
        poll_seconds: Histogram = latency(), "poll_duration_seconds";
        /// Optional readings taken with polls (health, power, clock), by reading and outcome
        poll_readings: Family<ReadingLabels, Counter> = Family::default(), "poll_readings";
        /// Registered machines this worker observes, by health verdict (unknown: not checked within three --health-interval)
        machines_health: Family<HealthLabels, Gauge> = Family::default(), "machines_health";
        /// Sum of this worker's machines' current power readings (watts)
        machines_power_watts: Gauge<f64, std::sync::atomic::AtomicU64> = Gauge::default(), "machines_power_watts";
        /// This worker's machines with a current power reading
        machines_power_read: Gauge = Gauge::default(), "machines_power_read";
        /// The largest absolute BMC clock drift among this worker's machines' current clock readings (seconds)
        machines_clock_drift_max_seconds: Gauge<f64, std::sync::atomic::AtomicU64> = Gauge::default(), "machines_clock_drift_max_seconds";
        /// This worker's machines with a current clock reading
        machines_clock_read: Gauge = Gauge::default(), "machines_clock_read";
        /// A machine's current power reading, watts (only with --per-machine-metrics)
        machine_power_watts: Family<MachineNameLabels, Gauge<f64, std::sync::atomic::AtomicU64>> = Family::default(), "machine_power_watts";
        /// A machine's current BMC clock drift, BMC minus worker, seconds (only with --per-machine-metrics)
        machine_clock_drift_seconds: Family<MachineNameLabels, Gauge<f64, std::sync::atomic::AtomicU64>> = Family::default(), "machine_clock_drift_seconds";
        /// How far the most overdue machine poll is behind its schedule
        polls_behind_seconds: Family<PartitionLabels, Gauge<f64, std::sync::atomic::AtomicU64>> = Family::default(), "polls_behind_seconds";
        /// IPMI actions, by the RMCP+ cipher suite of the session that ran them
        ipmi_actions: Family<SuiteLabels, Counter> = Family::default(), "ipmi_actions";
        /// Known BMC quirks worked around (each logged once per machine), by quirk
        bmc_quirks: Family<QuirkLabels, Counter> = Family::default(), "bmc_quirks";
        /// Observed machine state written (changes and heartbeats)
        state_writes: Counter = Counter::default(), "state_writes";
        /// Partition records of the polled machines' last observations written (one per partition every --state-seen-interval)
        state_seen_writes: Counter = Counter::default(), "state_seen_writes";
        /// Machine state events published, by kind (power_changed, unreachable, recovered)
        state_events: Family<KindLabels, Counter> = Family::default(), "state_events";
        /// Serial console (SOL) sessions this worker holds right now
        console_sessions: Gauge = Gauge::default(), "console_sessions";
        /// Serial console sessions opened, by outcome (ok or the error code)
        console_opens: Family<OutcomeLabels, Counter> = Family::default(), "console_opens";
        /// Serial console bytes, by direction (out: host to the console stream; in: viewers to the host)
        console_bytes: Family<DirectionLabels, Counter> = Family::default(), "console_bytes";
        /// Console output bytes lost (reader behind, publish refused) and reported in Bmc-Console-Lost
        console_lost_bytes: Counter = Counter::default(), "console_lost_bytes";
        /// Console sessions taken over from a previous owner that ended without closing (failover)
        console_takeovers: Counter = Counter::default(), "console_takeovers";
        /// Bound of console output bytes failover gaps can have cost (sum of Bmc-Console-Gap-Bytes)
        console_gap_bytes: Counter = Counter::default(), "console_gap_bytes";
    }
}

impl Default for Metrics {
    /// Metrics on no registry (for code paths and tests that do not serve them).
    fn default() -> Self {
        Metrics::register(&mut Registry::default())
    }
}

impl Metrics {
    /// What every lane's circuit breaker counts into.
    pub fn breakers(&self) -> crate::guard::BreakerMetrics {
        crate::guard::BreakerMetrics { open: self.breakers_open.clone(), opened: self.breaker_opens.clone() }
    }

    pub fn action(&self, result: &ActionResult, protocol: &str) {
        if let Some(suite) = result.cipher_suite {
            self.ipmi_actions.get_or_create(&SuiteLabels { cipher_suite: suite.to_string() }).inc();
        }
        let outcome = result.error.as_ref().map(|e| e.code.as_str()).unwrap_or("ok");
        let protocol = result.provider.as_deref().unwrap_or(protocol);
        self.actions
            .get_or_create(&ActionLabels {
                action: result.action.clone(),
                protocol: protocol.to_owned(),
                outcome: outcome.to_owned(),
            })
            .inc();
    }

    pub fn lease(&self, change: &str) {
        self.lease_changes.get_or_create(&ChangeLabels { change: change.to_owned() }).inc();
    }

    pub fn partition_label(p: u16) -> PartitionLabels {
        PartitionLabels { partition: p.to_string() }
    }
}
