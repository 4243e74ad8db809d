//! The gateway's Prometheus metrics, registered on a registry handed in.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Admitted {
    /// The batch's BMC protocol (`ipmi`, `redfish`, `amt`, `auto`, `sim`).
    pub protocol: String,
    /// `true` when the id was known and nothing was queued again.
    pub duplicate: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Rejected {
    /// The error code of the refusal (`malformed`, `too_many_actions`, …).
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FreshnessLabels {
    /// `current`, `stale` (older than its poll interval plus the grace:
    /// no worker polls it), `unknown` (not polled, or never observed).
    pub freshness: String,
}

bmcfleet_common::metrics! {
    /// Admission counters and latency.
    pub struct Metrics {
        /// Batches admitted by the gateway (queued, or known duplicates)
        admitted: Family<Admitted, Counter> = Family::default(), "batches_admitted";
        /// Submissions refused by the gateway, by error code
        rejected: Family<Rejected, Counter> = Family::default(), "batches_rejected";
        /// Time to admit a batch (validate, dedupe, durable publish)
        admit_seconds: Histogram = Histogram::new(exponential_buckets(0.0005, 2.0, 16)), "admit_duration_seconds";
        // The work-queue stream drops a job when its worker acknowledges it.
        // The autoscaling signal (KEDA `metrics-api`): partition consumers are
        // renamed at every lease epoch, so there is no fixed consumer to read.
        /// Jobs queued or running (messages in the job stream), read every few seconds
        jobs_backlog: Gauge = Gauge::default(), "jobs_backlog";
        /// Registered machines by the freshness of their observed state, counted every 30 s
        machines_state: Family<FreshnessLabels, Gauge> = Family::default(), "machines_state";
    }
}

impl Metrics {
    pub fn rejected(&self, code: bmcfleet_schema::ErrorCode) {
        self.rejected.get_or_create(&Rejected { reason: code.as_str().to_owned() }).inc();
    }
}
