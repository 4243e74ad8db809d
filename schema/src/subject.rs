//! Subject and stream names. This module is the only place that spells them.
//!
//! | what                       | subject / name                                   |
//! |----------------------------|--------------------------------------------------|
//! | jobs of one tenant for one BMC | `<prefix>.jobs.<partition>.<tenant>.<bmc-key>` |
//! | events of one batch        | `<prefix>.events.<tenant>.<batch-id>`            |
//! | gateway micro service      | `<service-prefix>.submit` / `.status` / `.cancel`|
//! | rollout endpoints          | `<service-prefix>.rollout.submit` / `.status` / `.pause` / `.resume` / `.abort` / `.list` |
//! | BMC discovery (operators)  | `<service-prefix>.discover` (gateway), forwarded to `<prefix>.discover.run` (workers, queue group `bmcfleet-discover`) |
//! | events of one rollout      | `<prefix>.events.<tenant>.rollout.<rollout-id>`  |
//! | rollout records KV         | `<STREAM>_ROLLOUTS` (key: rollout id)            |
//! | rollout machines and parts | `<STREAM>_ROLLOUT_PARTS` (`<id>.spec`, `<id>.m.<chunk>`, `<id>.p.<index>`) |
//! | rollout driver leases KV   | `<STREAM>_ROLLOUT_LEASES` (key: rollout id)      |
//! | job stream                 | `<STREAM>_JOBS` (work-queue, file)               |
//! | event stream               | `<STREAM>_EVENTS` (limits, file)                 |
//! | batch status KV            | `<STREAM>_BATCHES`                               |
//! | partition lease KV         | `<STREAM>_LEASES`                                |
//! | worker presence KV         | `<STREAM>_WORKERS`                               |
//! | machine registry KV        | `<STREAM>_MACHINES`                              |
//! | audit stream               | `<STREAM>_AUDIT`, `<prefix>.audit.>`             |
//! | console output of one machine | `<prefix>.console.out.<tenant>.<machine>` (stream `<STREAM>_CONSOLE`) |
//! | console input of one machine  | `<prefix>.console.in.<tenant>.<machine>` (core NATS, not stored) |
//! | console viewers' heartbeats   | `<prefix>.console.watch.<tenant>.<machine>` (core NATS) |
//! | console stream             | `<STREAM>_CONSOLE` (limits, file; per-machine bound) |
//! | partition consumers        | `part-<partition>-<lease epoch>-<tenant>` (one per tenant), `part-<partition>-<lease epoch>` (jobs of earlier releases) |
//!
//! Jobs carry their tenant in the subject so that each tenant has a
//! consumer (and a window of delivered jobs, `max_ack_pending`) of its own
//! in every partition: one tenant's held jobs never keep another's from
//! being pulled. Releases before issue 32 queued `<prefix>.jobs.<partition>.<bmc-key>`;
//! a worker still drains those with a consumer of their own ([`Subjects::jobs_partition_legacy`]).
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
    /// Number of partitions. Changing it remaps keys: see docs/PRODUCTION.md, "Resizing partitions".
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

    /// The subject of `tenant`'s jobs for the BMC of `key` (`tenant` a
    /// tenant name: a DNS label, one token).
    pub fn job(&self, tenant: &str, key: &BmcKey) -> String {
        format!("{}.jobs.{}.{}.{}", self.prefix, key.partition(self.partitions), tenant, key)
    }

    /// All job subjects (stream filter).
    pub fn jobs_all(&self) -> String {
        format!("{}.jobs.>", self.prefix)
    }

    /// Job subjects of one partition, every tenant's and of any release.
    pub fn jobs_partition(&self, partition: u16) -> String {
        format!("{}.jobs.{}.>", self.prefix, partition)
    }

    /// Job subjects of one tenant in one partition (its consumer's filter).
    pub fn jobs_partition_tenant(&self, partition: u16, tenant: &str) -> String {
        format!("{}.jobs.{}.{}.*", self.prefix, partition, tenant)
    }

    /// Job subjects of one partition queued by a release before issue 32
    /// (no tenant token: `<prefix>.jobs.<partition>.<bmc-key>`), drained by a
    /// consumer of their own. It does not overlap any tenant's filter (one
    /// token fewer), as a work-queue stream requires.
    pub fn jobs_partition_legacy(&self, partition: u16) -> String {
        format!("{}.jobs.{}.*", self.prefix, partition)
    }

    /// Events of one batch of `tenant` (`<prefix>.events.<tenant>.<batch>`):
    /// the tenant token lets NATS export each tenant only its own events.
    pub fn events(&self, tenant: &str, id: &BatchId) -> String {
        format!("{}.events.{}.{}", self.prefix, tenant, id)
    }

    /// Events of one batch, whatever its tenant (a subscription filter).
    pub fn events_of_batch(&self, id: &BatchId) -> String {
        format!("{}.events.*.{}", self.prefix, id)
    }

    /// The batch events of one tenant, none of its machine or rollout
    /// events (a subscription filter: one token for the batch id).
    pub fn tenant_batch_events(&self, tenant: &str) -> String {
        format!("{}.events.{}.*", self.prefix, tenant)
    }

    /// The batch events of every tenant, none of their machine or rollout
    /// events (a subscription filter: one token for the tenant, one for the
    /// batch id).
    pub fn batch_events_any(&self) -> String {
        format!("{}.events.*.*", self.prefix)
    }

    /// Every event of one tenant (what its account may import).
    pub fn tenant_events(&self, tenant: &str) -> String {
        format!("{}.events.{}.>", self.prefix, tenant)
    }

    /// Observed-state events of one machine of `tenant`
    /// (`<prefix>.events.<tenant>.machine.<name>`): under the tenant's
    /// events, so the same export delivers them to the tenant.
    pub fn machine_events(&self, tenant: &str, machine: &str) -> String {
        format!("{}.events.{}.machine.{}", self.prefix, tenant, machine)
    }

    /// Observed-state events of every machine (operators' `bmcctl machine watch`).
    pub fn machine_events_all(&self) -> String {
        format!("{}.events.*.machine.*", self.prefix)
    }

    /// Whether `subject` carries machine-state events (not a batch's).
    pub fn is_machine_event(&self, subject: &str) -> bool {
        let mut t = subject.split('.');
        t.next() == Some(self.prefix.as_str())
            && t.next() == Some("events")
            && t.next().is_some()
            && t.next() == Some("machine")
    }

    /// Events of one rollout of `tenant`: under the tenant's events, so the
    /// same export delivers them.
    pub fn rollout_events(&self, tenant: &str, id: &crate::rollout::RolloutId) -> String {
        format!("{}.events.{}.rollout.{}", self.prefix, tenant, id)
    }

    /// Events of one rollout, whatever its tenant (a subscription filter).
    pub fn rollout_events_any(&self, id: &crate::rollout::RolloutId) -> String {
        format!("{}.events.*.rollout.{}", self.prefix, id)
    }

    /// Audit records of admitted rollouts of `tenant`.
    pub fn audit_rollout(&self, tenant: &str) -> String {
        format!("{}.audit.rollout.{}", self.prefix, tenant)
    }

    /// Key of a rollout's spec (actions) in the parts bucket.
    pub fn rollout_spec_key(&self, id: &crate::rollout::RolloutId) -> String {
        format!("{id}.spec")
    }

    /// Key of chunk `chunk` of a rollout's machine list in the parts bucket.
    pub fn rollout_chunk_key(&self, id: &crate::rollout::RolloutId, chunk: u32) -> String {
        format!("{id}.m.{chunk}")
    }

    /// Key of machine `index`'s recorded outcome in the parts bucket.
    pub fn rollout_part_key(&self, id: &crate::rollout::RolloutId, index: u32) -> String {
        format!("{id}.p.{index}")
    }

    pub fn events_all(&self) -> String {
        format!("{}.events.>", self.prefix)
    }

    /// Every audit subject (stream filter).
    pub fn audit_all(&self) -> String {
        format!("{}.audit.>", self.prefix)
    }

    /// Audit records of admitted batches of `tenant`.
    pub fn audit_batch(&self, tenant: &str) -> String {
        format!("{}.audit.batch.{}", self.prefix, tenant)
    }

    /// Audit records of BMC discovery requests.
    pub fn audit_discovery(&self) -> String {
        format!("{}.audit.discovery", self.prefix)
    }

    /// Audit records of registry changes.
    pub fn audit_registry(&self) -> String {
        format!("{}.audit.registry", self.prefix)
    }

    /// Console output of one machine of `tenant` (stored in the console stream).
    pub fn console_out(&self, tenant: &str, machine: &str) -> String {
        format!("{}.console.out.{}.{}", self.prefix, tenant, machine)
    }

    /// Every console output subject (the console stream's filter).
    pub fn console_out_all(&self) -> String {
        format!("{}.console.out.>", self.prefix)
    }

    /// Console output of every machine of `tenant` (what its account may import).
    pub fn tenant_console_out(&self, tenant: &str) -> String {
        format!("{}.console.out.{}.*", self.prefix, tenant)
    }

    /// Console input of one machine of `tenant`: typed bytes, break (core NATS, not stored).
    pub fn console_in(&self, tenant: &str, machine: &str) -> String {
        format!("{}.console.in.{}.{}", self.prefix, tenant, machine)
    }

    /// Viewers' heartbeats for one machine's console of `tenant` (core NATS).
    pub fn console_watch(&self, tenant: &str, machine: &str) -> String {
        format!("{}.console.watch.{}.{}", self.prefix, tenant, machine)
    }

    /// Discovery requests the gateway forwards to a worker (core NATS
    /// request-reply; workers with `--discover-allow` ranges subscribe in
    /// the queue group [`DISCOVER_QUEUE`], so one of them answers).
    pub fn discover_run(&self) -> String {
        format!("{}.discover.run", self.prefix)
    }

    /// Console input of every machine (what a worker subscribes to, then filters by partition).
    pub fn console_in_all(&self) -> String {
        format!("{}.console.in.*.*", self.prefix)
    }

    /// Viewers' heartbeats of every machine (what a worker subscribes to).
    pub fn console_watch_all(&self) -> String {
        format!("{}.console.watch.*.*", self.prefix)
    }

    /// The tenant and machine of a console input or watch subject.
    pub fn parse_console_subject<'s>(&self, subject: &'s str) -> Option<(&'s str, &'s str)> {
        let rest = subject.strip_prefix(&self.prefix)?.strip_prefix(".console.")?;
        let (_, rest) = rest.split_once('.').filter(|(kind, _)| matches!(*kind, "in" | "watch" | "out"))?;
        let (tenant, machine) = rest.split_once('.')?;
        (!tenant.is_empty() && !machine.is_empty() && !machine.contains('.')).then_some((tenant, machine))
    }

    /// The consumer of one owner of a partition: named after the lease
    /// epoch (the lease's creating revision), so an earlier owner's late
    /// pulls and acks never reach it.
    /// (This one drains the jobs of earlier releases: see
    /// [`Subjects::jobs_partition_legacy`].)
    pub fn partition_consumer(&self, partition: u16, epoch: u64) -> String {
        format!("part-{partition}-{epoch}")
    }

    /// The consumer of `tenant`'s jobs in a partition, for one owner (see
    /// [`Subjects::partition_consumer`]).
    pub fn partition_tenant_consumer(&self, partition: u16, epoch: u64, tenant: &str) -> String {
        format!("part-{partition}-{epoch}-{tenant}")
    }

    /// Whether `name` is a consumer of `partition` (any epoch and tenant,
    /// or the epoch-less name of earlier releases).
    pub fn is_partition_consumer(&self, partition: u16, name: &str) -> bool {
        let base = format!("part-{partition}");
        if name == base {
            return true;
        }
        let Some(rest) = name.strip_prefix(&base).and_then(|r| r.strip_prefix('-')) else { return false };
        let (epoch, tenant) = match rest.split_once('-') {
            Some((epoch, tenant)) => (epoch, Some(tenant)),
            None => (rest, None),
        };
        !epoch.is_empty()
            && epoch.bytes().all(|b| b.is_ascii_digit())
            && tenant.is_none_or(|t| {
                !t.is_empty() && t.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            })
    }

    pub fn lease_key(&self, partition: u16) -> String {
        format!("p{partition}")
    }

    /// The key of a partition's [`crate::state::PartitionSeen`] record in
    /// the state bucket.
    pub fn seen_key(&self, partition: u16) -> String {
        format!("{}{partition}", crate::state::SEEN_KEY_PREFIX)
    }

    /// The partition, tenant and BMC key of a job subject, if the subject
    /// is one of ours (the tenant `None` on a subject of a release before
    /// issue 32, which had no tenant token).
    pub fn parse_job_subject<'s>(&self, subject: &'s str) -> Option<(u16, Option<&'s str>, BmcKey)> {
        let rest = subject.strip_prefix(&self.prefix)?.strip_prefix(".jobs.")?;
        let (p, rest) = rest.split_once('.')?;
        let (tenant, key) = match rest.split_once('.') {
            Some((tenant, key)) => (Some(tenant), key),
            None => (None, rest),
        };
        Some((p.parse().ok()?, tenant, BmcKey::from_token(key)?))
    }

    /// The BMC key of a job subject, if the subject is one of ours.
    pub fn key_of_job_subject(&self, subject: &str) -> Option<(u16, BmcKey)> {
        self.parse_job_subject(subject).map(|(p, _, key)| (p, key))
    }
}

/// The streams and KV buckets of a deployment, each named
/// `<STREAM>_<SUFFIX>`: one method per name.
macro_rules! stream_names {
    ($( $(#[$doc:meta])* $method:ident => $suffix:literal; )+) => {
        impl Subjects {
            $(
                $(#[$doc])*
                pub fn $method(&self) -> String {
                    format!(concat!("{}_", $suffix), self.stream)
                }
            )+
        }
    };
}

stream_names! {
    jobs_stream => "JOBS";
    events_stream => "EVENTS";
    batches_bucket => "BATCHES";
    leases_bucket => "LEASES";
    workers_bucket => "WORKERS";
    /// Audit stream name.
    audit_stream => "AUDIT";
    /// KV bucket of the machine registry (key: machine name, value: JSON [`crate::Machine`]).
    machines_bucket => "MACHINES";
    /// KV bucket of observed machine state (key: machine name, value: JSON
    /// [`crate::state::MachineState`]); written by workers only.
    state_bucket => "STATE";
    /// KV bucket of named BMC credentials, each value sealed to the workers' key.
    credentials_bucket => "CREDENTIALS";
    /// KV bucket of rollout records (key: rollout id), written with CAS.
    rollouts_bucket => "ROLLOUTS";
    /// KV bucket of each rollout's spec, machine list chunks and per-machine outcomes.
    rollout_parts_bucket => "ROLLOUT_PARTS";
    /// KV bucket of rollout driver leases (entries expire after the lease TTL).
    rollout_leases_bucket => "ROLLOUT_LEASES";
    /// Stream of console output (`<prefix>.console.out.>`), bounded per machine.
    console_stream => "CONSOLE";
}

/// The gateway micro service's endpoints (`<service-prefix>.<endpoint>`).
pub const ENDPOINTS: [&str; 3] = ["submit", "status", "cancel"];

/// The rollout endpoints (`<service-prefix>.rollout.<endpoint>`).
pub const ROLLOUT_ENDPOINTS: [&str; 6] = ["submit", "status", "pause", "resume", "abort", "list"];

/// The gateway endpoint of BMC discovery (`<service-prefix>.discover`), operators only.
pub const DISCOVER_ENDPOINT: &str = "discover";

/// The queue group of the workers serving [`Subjects::discover_run`].
pub const DISCOVER_QUEUE: &str = "bmcfleet-discover";

/// The group of the rollout endpoints under the service prefix.
pub const ROLLOUT_GROUP: &str = "rollout";

/// The subject of a rollout endpoint (one of [`ROLLOUT_ENDPOINTS`]).
pub fn rollout_subject(service_prefix: &str, endpoint: &str) -> String {
    format!("{service_prefix}.{ROLLOUT_GROUP}.{endpoint}")
}

/// Group of the console endpoints under the service prefix (`<service>.console.<endpoint>`).
pub const CONSOLE_GROUP: &str = "console";
/// Console endpoints: `log` (a machine's stored output, paginated).
pub const CONSOLE_ENDPOINTS: [&str; 1] = ["log"];

/// The subject of a console endpoint (one of [`CONSOLE_ENDPOINTS`]).
pub fn console_endpoint_subject(service_prefix: &str, endpoint: &str) -> String {
    format!("{service_prefix}.{CONSOLE_GROUP}.{endpoint}")
}

/// The subject of a gateway endpoint (one of [`ENDPOINTS`]).
pub fn service_subject(service_prefix: &str, endpoint: &str) -> String {
    format!("{service_prefix}.{endpoint}")
}

/// Header carrying the encoding of a message body.
pub const CONTENT_TYPE: &str = "Content-Type";
/// Header on a submit request asking the gateway to reply with the final result.
pub const WAIT_HEADER: &str = "Bmcfleet-Wait";
/// Header naming the event kind on event messages.
pub const EVENT_HEADER: &str = "Bmcfleet-Event";
/// Header naming the worker that published an event.
pub const WORKER_HEADER: &str = "Bmcfleet-Worker";
/// Console output: the id of the SOL session that produced it (new on
/// every activation and after a failover).
pub const CONSOLE_SESSION_HEADER: &str = "Bmc-Console-Session";
/// Console output: the chunk's number in its session (1, 2, …).
pub const CONSOLE_SEQ_HEADER: &str = "Bmc-Console-Seq";
/// Console output: bytes of output lost right before this chunk (a slow
/// reader in the worker, the BMC's own overrun is `Bmc-Console-Event: overrun`,
/// or the unknown gap of a take-over: see [`CONSOLE_EVENT_HEADER`]).
pub const CONSOLE_LOST_HEADER: &str = "Bmc-Console-Lost";
/// Console output: a marker, not host output (empty body): `started`,
/// `ended`, `takeover`, `overrun`, `break`.
pub const CONSOLE_EVENT_HEADER: &str = "Bmc-Console-Event";
/// Console output markers: why a session ended (`ended`) or what it took over from.
pub const CONSOLE_REASON_HEADER: &str = "Bmc-Console-Reason";
/// Console `takeover` marker after a failover: the most bytes of host
/// output the gap can have cost (line rate × gap time + what the old owner
/// held; a bound, not a count: the BMC does not say what it dropped).
pub const CONSOLE_GAP_BYTES_HEADER: &str = "Bmc-Console-Gap-Bytes";
/// Console `takeover` marker after a failover: milliseconds from the old
/// session's last stored chunk to the new activation.
pub const CONSOLE_GAP_MS_HEADER: &str = "Bmc-Console-Gap-Ms";
/// Every marker of [`CONSOLE_EVENT_HEADER`].
pub const CONSOLE_EVENTS: [&str; 7] = ["started", "takeover", "break", "overrun", "ended", "error", "unsupported"];
/// Console input: `break` sends a serial break (the body is ignored).
pub const CONSOLE_OP_HEADER: &str = "Bmc-Console-Op";
/// Console heartbeats: the viewer's id (one per `bmcctl console` process).
pub const CONSOLE_VIEWER_HEADER: &str = "Bmc-Console-Viewer";

/// Set by nats-server on a request that crossed a service import from
/// another account: JSON whose `acc` names the requesting account (the
/// tenant). A client cannot forge it across the import.
pub const REQUEST_INFO_HEADER: &str = "Nats-Request-Info";

/// An operator name a client may send with a request (bmcctl sends the
/// identity it has): recorded in the audit log as `claimed_operator`, an
/// UNVERIFIED annotation, never as who asked (see [`request_identity`]).
pub const OPERATOR_CLAIM_HEADER: &str = "Bmcfleet-Operator";

/// Longest claimed operator name kept (longer ones are cut).
pub const OPERATOR_CLAIM_MAX: usize = 128;

/// Why a header was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// A [`REQUEST_INFO_HEADER`] that is not the JSON nats-server writes
    /// (the source is the JSON error).
    RequestInfo,
}

impl crate::error::Coded for ErrorKind {
    /// The gateway refuses a request whose requester it cannot tell.
    fn code(self) -> crate::ErrorCode {
        crate::ErrorCode::PermissionDenied
    }
}

pub type Error = crate::error::Error<ErrorKind>;

/// The requesting connection named by a [`REQUEST_INFO_HEADER`] value, as
/// `<account>/<server id>/<client id>`: nats-server names it only when the
/// service import shares the requester's information (`share: true`, as in
/// the shipped accounts config); `None` otherwise. (The reply subject names
/// no connection: a service import rewrites it to one `_R_.<prefix>.*` for
/// every importing account.)
pub fn request_connection(header: &str) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Info {
        acc: String,
        #[serde(default)]
        server: String,
        #[serde(default)]
        id: u64,
    }
    let info = serde_json::from_str::<Info>(header).ok()?;
    (!info.server.is_empty() && info.id != 0).then(|| format!("{}/{}/{}", info.acc, info.server, info.id))
}

/// The requesting account and user named by a [`REQUEST_INFO_HEADER`]
/// value, as nats-server authenticated them (the user is named when the
/// service import shares the requester's information, `share: true`).
pub fn request_identity(header: &str) -> Result<crate::audit::NatsIdentity, Error> {
    #[derive(serde::Deserialize)]
    struct Info {
        acc: String,
        #[serde(default)]
        user: String,
    }
    serde_json::from_str::<Info>(header)
        .map(|i| crate::audit::NatsIdentity { account: i.acc, user: (!i.user.is_empty()).then_some(i.user) })
        .map_err(|e| Error::with_source(ErrorKind::RequestInfo, format!("unreadable {REQUEST_INFO_HEADER} header"), e))
}

/// The requesting account named by a [`REQUEST_INFO_HEADER`] value.
pub fn request_account(header: &str) -> Result<String, Error> {
    #[derive(serde::Deserialize)]
    struct Info {
        acc: String,
    }
    serde_json::from_str::<Info>(header)
        .map(|i| i.acc)
        .map_err(|e| Error::with_source(ErrorKind::RequestInfo, format!("unreadable {REQUEST_INFO_HEADER} header"), e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::BmcAddress;

    #[test]
    fn the_request_info_header_names_the_account_or_is_refused() {
        assert_eq!(request_account(r#"{"acc":"tenant-a","rtt":1}"#).unwrap(), "tenant-a");
        let e = request_account("{not json").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::RequestInfo);
        assert_eq!(e.code(), crate::ErrorCode::PermissionDenied);
        assert!(e.to_string().starts_with("unreadable Nats-Request-Info header: "), "{e}");
        assert!(std::error::Error::source(&e).unwrap().downcast_ref::<serde_json::Error>().is_some());
    }

    #[test]
    fn a_requesting_connection_is_named_only_when_the_import_shares_it() {
        let shared = r#"{"start":"2026-12-06T02:05:44Z","host":"127.0.0.1","id":10,"acc":"tenant-a","user":"producer-a","rtt":245269,"server":"NCGQ","kind":"Client"}"#;
        assert_eq!(request_connection(shared).as_deref(), Some("tenant-a/NCGQ/10"));
        assert_eq!(request_account(shared).unwrap(), "tenant-a");
        let who = request_identity(shared).unwrap();
        assert_eq!((who.account.as_str(), who.user.as_deref()), ("tenant-a", Some("producer-a")));
        let unshared = request_identity(r#"{"acc":"tenant-a","rtt":1}"#).unwrap();
        assert_eq!((unshared.account.as_str(), unshared.user), ("tenant-a", None));
        assert_eq!(request_connection(r#"{"acc":"tenant-a","rtt":628540}"#), None, "an import without `share`");
        assert_eq!(request_connection("not json"), None);
    }

    #[test]
    fn partition_consumers_are_named_per_epoch() {
        let s = Subjects::new("bmc", "BMCFLEET", 64);
        assert_eq!(s.partition_consumer(1, 42), "part-1-42");
        assert!(s.is_partition_consumer(1, "part-1-42"));
        assert!(s.is_partition_consumer(1, "part-1"), "the epoch-less name of earlier releases");
        for other in ["part-10-42", "part-10", "part-1-", "part-1-x", "part-1-x-2", "part-2-42"] {
            assert!(!s.is_partition_consumer(1, other), "{other} is not partition 1's");
        }
        // (`part-1-4-2` is partition 1's: epoch 4, tenant `2`.)
        assert!(s.is_partition_consumer(1, "part-1-4-2"));
    }

    #[test]
    fn streams_and_buckets_are_named_after_the_stream_stem() {
        let s = Subjects::new("bmc", "FLEET", 4);
        let names = [
            s.jobs_stream(),
            s.events_stream(),
            s.batches_bucket(),
            s.leases_bucket(),
            s.workers_bucket(),
            s.audit_stream(),
            s.machines_bucket(),
            s.state_bucket(),
            s.credentials_bucket(),
            s.rollouts_bucket(),
            s.rollout_parts_bucket(),
            s.rollout_leases_bucket(),
            s.console_stream(),
        ];
        assert_eq!(
            names,
            [
                "FLEET_JOBS",
                "FLEET_EVENTS",
                "FLEET_BATCHES",
                "FLEET_LEASES",
                "FLEET_WORKERS",
                "FLEET_AUDIT",
                "FLEET_MACHINES",
                "FLEET_STATE",
                "FLEET_CREDENTIALS",
                "FLEET_ROLLOUTS",
                "FLEET_ROLLOUT_PARTS",
                "FLEET_ROLLOUT_LEASES",
                "FLEET_CONSOLE"
            ]
        );
    }

    #[test]
    fn job_subject_round_trips() {
        let s = Subjects::new("bmc", "BMCFLEET", 64);
        let key = "[fe80::1]:623".parse::<BmcAddress>().unwrap().key();
        let subject = s.job("tenant-a", &key);
        assert!(subject.starts_with("bmc.jobs."));
        assert_eq!(subject.split('.').count(), 5);
        let (p, k) = s.key_of_job_subject(&subject).unwrap();
        assert_eq!(k, key);
        assert_eq!(p, key.partition(64));
        assert_eq!(s.parse_job_subject(&subject), Some((p, Some("tenant-a"), key.clone())));
        // A subject of a release before the tenant token still reads.
        let legacy = format!("bmc.jobs.{p}.{key}");
        assert_eq!(s.parse_job_subject(&legacy), Some((p, None, key.clone())));
        // The filters: a tenant's and the earlier releases' never overlap.
        assert_eq!(s.jobs_partition_tenant(p, "tenant-a"), format!("bmc.jobs.{p}.tenant-a.*"));
        assert_eq!(s.jobs_partition_legacy(p), format!("bmc.jobs.{p}.*"));
    }

    #[test]
    fn console_subjects_name_tenant_and_machine() {
        let s = Subjects::default();
        assert_eq!(s.console_out("tenant-a", "node3"), "bmc.console.out.tenant-a.node3");
        assert_eq!(s.console_in("tenant-a", "node3"), "bmc.console.in.tenant-a.node3");
        assert_eq!(s.console_watch("tenant-a", "node3"), "bmc.console.watch.tenant-a.node3");
        for subject in [
            s.console_in("tenant-a", "node3"),
            s.console_watch("tenant-a", "node3"),
            s.console_out("tenant-a", "node3"),
        ] {
            assert_eq!(s.parse_console_subject(&subject), Some(("tenant-a", "node3")), "{subject}");
        }
        for other in [
            "bmc.console.in.tenant-a",
            "bmc.console.x.a.b",
            "bmc.console.in.a.b.c",
            "bmc.jobs.1.a.b",
            "bmc.console.in..b",
        ] {
            assert_eq!(s.parse_console_subject(other), None, "{other}");
        }
    }

    #[test]
    fn tenant_consumers_belong_to_their_partition() {
        let s = Subjects::new("bmc", "BMCFLEET", 64);
        assert_eq!(s.partition_tenant_consumer(1, 42, "tenant-a"), "part-1-42-tenant-a");
        for mine in ["part-1-42-tenant-a", "part-1-42-default", "part-1-7-b"] {
            assert!(s.is_partition_consumer(1, mine), "{mine}");
        }
        for other in ["part-10-42-tenant-a", "part-1-42-", "part-1-x-a", "part-1-42-A.b"] {
            assert!(!s.is_partition_consumer(1, other), "{other} is not partition 1's");
        }
    }
}
