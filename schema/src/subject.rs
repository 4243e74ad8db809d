//! Subject and stream names. This module is the only place that spells them.
//!
//! | what                       | subject / name                                   |
//! |----------------------------|--------------------------------------------------|
//! | jobs for one BMC           | `<prefix>.jobs.<partition>.<bmc-key>`            |
//! | events of one batch        | `<prefix>.events.<batch-id>`                     |
//! | gateway micro service      | `<service-prefix>.submit` / `.status` / `.cancel`|
//! | job stream                 | `<STREAM>_JOBS` (work-queue, file)               |
//! | event stream               | `<STREAM>_EVENTS` (limits, file)                 |
//! | batch status KV            | `<STREAM>_BATCHES`                               |
//! | partition lease KV         | `<STREAM>_LEASES`                                |
//! | worker presence KV         | `<STREAM>_WORKERS`                               |
//! | partition consumer         | `part-<partition>` on the job stream             |
//!
//! `<prefix>` defaults to `bmc`, `<STREAM>` to `BMCFLEET`.

use crate::action::BatchId;
use crate::bmc::BmcKey;

/// Subject and stream naming for one deployment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Subjects {
    /// Subject prefix, e.g. `bmc`.
    pub prefix: String,
    /// Stream/bucket name stem, e.g. `BMCFLEET`.
    pub stream: String,
    /// Number of partitions. Changing it remaps keys: see the README.
    pub partitions: u16,
}

impl Default for Subjects {
    fn default() -> Self {
        Subjects { prefix: "bmc".into(), stream: "BMCFLEET".into(), partitions: 16 }
    }
}

impl Subjects {
    pub fn new(prefix: impl Into<String>, stream: impl Into<String>, partitions: u16) -> Self {
        Subjects { prefix: prefix.into(), stream: stream.into(), partitions: partitions.max(1) }
    }

    pub fn job(&self, key: &BmcKey) -> String {
        format!("{}.jobs.{}.{}", self.prefix, key.partition(self.partitions), key)
    }

    /// All job subjects (stream filter).
    pub fn jobs_all(&self) -> String {
        format!("{}.jobs.>", self.prefix)
    }

    /// Job subjects of one partition (consumer filter).
    pub fn jobs_partition(&self, partition: u16) -> String {
        format!("{}.jobs.{}.>", self.prefix, partition)
    }

    pub fn events(&self, id: &BatchId) -> String {
        format!("{}.events.{}", self.prefix, id)
    }

    pub fn events_all(&self) -> String {
        format!("{}.events.>", self.prefix)
    }

    pub fn jobs_stream(&self) -> String {
        format!("{}_JOBS", self.stream)
    }

    pub fn events_stream(&self) -> String {
        format!("{}_EVENTS", self.stream)
    }

    pub fn batches_bucket(&self) -> String {
        format!("{}_BATCHES", self.stream)
    }

    pub fn leases_bucket(&self) -> String {
        format!("{}_LEASES", self.stream)
    }

    pub fn workers_bucket(&self) -> String {
        format!("{}_WORKERS", self.stream)
    }

    /// KV bucket of named BMC credentials, each value sealed to the workers' key.
    pub fn credentials_bucket(&self) -> String {
        format!("{}_CREDENTIALS", self.stream)
    }

    pub fn partition_consumer(&self, partition: u16) -> String {
        format!("part-{partition}")
    }

    pub fn lease_key(&self, partition: u16) -> String {
        format!("p{partition}")
    }

    /// The BMC key of a job subject, if the subject is one of ours.
    pub fn key_of_job_subject(&self, subject: &str) -> Option<(u16, BmcKey)> {
        let rest = subject.strip_prefix(&self.prefix)?.strip_prefix(".jobs.")?;
        let (p, key) = rest.split_once('.')?;
        Some((p.parse().ok()?, BmcKey::from_token(key)?))
    }
}

/// Header carrying the encoding of a message body.
pub const CONTENT_TYPE: &str = "Content-Type";
/// Header on a submit request asking the gateway to reply with the final result.
pub const WAIT_HEADER: &str = "Bmcfleet-Wait";
/// Header naming the event kind on event messages.
pub const EVENT_HEADER: &str = "Bmcfleet-Event";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::BmcAddress;

    #[test]
    fn job_subject_round_trips() {
        let s = Subjects::new("bmc", "BMCFLEET", 64);
        let key = "[fe80::1]:623".parse::<BmcAddress>().unwrap().key();
        let subject = s.job(&key);
        assert!(subject.starts_with("bmc.jobs."));
        assert_eq!(subject.split('.').count(), 4);
        let (p, k) = s.key_of_job_subject(&subject).unwrap();
        assert_eq!(k, key);
        assert_eq!(p, key.partition(64));
    }
}
