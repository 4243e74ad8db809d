//! The gateway's Prometheus metrics, registered on a registry handed in.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

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

/// Admission counters and latency.
#[derive(Clone)]
pub struct Metrics {
    pub admitted: Family<Admitted, Counter>,
    pub rejected: Family<Rejected, Counter>,
    /// Submit handling up to the reply `Accepted` (validation, dedupe check, durable publish).
    pub admit_seconds: Histogram,
    /// Jobs in the job stream: queued, or held by a worker and not finished
    /// (the work-queue stream drops a job when its worker acknowledges it).
    /// The autoscaling signal (KEDA `metrics-api`): partition consumers are
    /// renamed at every lease epoch, so there is no fixed consumer to read.
    pub jobs_backlog: Gauge,
}

impl Metrics {
    /// Create the metrics and register them under `bmcfleet_`.
    pub fn register(registry: &mut Registry) -> Metrics {
        let m = Metrics {
            admitted: Family::default(),
            rejected: Family::default(),
            admit_seconds: Histogram::new(exponential_buckets(0.0005, 2.0, 16)),
            jobs_backlog: Gauge::default(),
        };
        let r = registry.sub_registry_with_prefix("bmcfleet");
        r.register("batches_admitted", "Batches admitted by the gateway (queued, or known duplicates)", m.admitted.clone());
        r.register("batches_rejected", "Submissions refused by the gateway, by error code", m.rejected.clone());
        r.register("admit_duration_seconds", "Time to admit a batch (validate, dedupe, durable publish)", m.admit_seconds.clone());
        r.register("jobs_backlog", "Jobs queued or running (messages in the job stream), read every few seconds", m.jobs_backlog.clone());
        m
    }

    pub fn rejected(&self, code: bmcfleet_schema::ErrorCode) {
        self.rejected.get_or_create(&Rejected { reason: code.as_str().to_owned() }).inc();
    }
}
