//! The JetStream resources of a deployment, defined once.
//!
//! | resource          | kind | retention / TTL                  | written by        |
//! |-------------------|------|----------------------------------|-------------------|
//! | `<S>_JOBS`        | stream, `<p>.jobs.>` | work-queue, file, dedupe window, per-BMC cap (discard new per subject) | gateway publishes, workers ack |
//! | `<S>_EVENTS`      | stream, `<p>.events.>` | limits, `events_max_age`     | workers           |
//! | `<S>_BATCHES`     | KV   | `status_max_age`                 | gateway + workers (CAS) |
//! | `<S>_LEASES`      | KV   | `lease_ttl` (expiry = lease loss)| workers (CAS)     |
//! | `<S>_WORKERS`     | KV   | `presence_ttl`                   | workers           |
//! | `<S>_CREDENTIALS` | KV   | none; values sealed to the workers' key | operators (`bmcctl cred`); workers read |
//! | `<S>_MACHINES`    | KV   | none; history 5                  | operators (`bmcctl machine`); gateways and workers watch |
//! | `<S>_ROLLOUTS`    | KV   | `status_max_age`                 | gateways (rollout endpoints and drivers, CAS) |
//! | `<S>_ROLLOUT_PARTS` | KV | `status_max_age`                 | gateways (spec and machine list at submit, outcomes by drivers) |
//! | `<S>_ROLLOUT_LEASES` | KV | `rollout_lease_ttl` (expiry = lease loss) | gateways' rollout drivers (CAS) |
//! | `<S>_AUDIT`       | stream, `<p>.audit.>` | limits, `audit_max_age`  | gateways (admitted batches, registry changes), `bmcctl machine` |
//!
//! The jobs stream records the partition count in its metadata
//! (`bmcfleet.partitions`); a component configured with another count
//! refuses to start instead of publishing to partitions nobody consumes.

use async_nats::jetstream::{self, kv, stream, Context};
use bmcfleet_schema::Subjects;
use futures::StreamExt;
use std::collections::HashMap;
use std::time::Duration;

pub const PARTITIONS_KEY: &str = "bmcfleet.partitions";

/// Default of `--max-queued-per-bmc`.
pub const DEFAULT_MAX_QUEUED_PER_BMC: i64 = 64;

/// A BMC may hold at most this share (1/N) of its partition's delivered,
/// unacknowledged jobs: workers hold at least N × the per-BMC queue cap.
pub const BMC_SHARE_DIVISOR: i64 = 4;

/// The most jobs of one BMC the jobs stream holds (its per-subject limit),
/// as found on the stream; `None` when unlimited.
pub fn max_queued_per_bmc(info: &stream::Config) -> Option<i64> {
    (info.max_messages_per_subject > 0).then_some(info.max_messages_per_subject)
}

#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error("JetStream {what}: {message}")]
    JetStream { what: String, message: String },
    #[error(
        "the jobs stream {stream} was created with {existing} partitions but this process is configured with {configured}; \
         use the same --partitions everywhere (see docs/PRODUCTION.md, \"Resizing partitions\")"
    )]
    PartitionMismatch { stream: String, existing: String, configured: u16 },
}

fn js_err(what: impl Into<String>, e: impl std::fmt::Display) -> SetupError {
    SetupError::JetStream { what: what.into(), message: e.to_string() }
}

/// Settings of the gateway-owned resources.
#[derive(Clone, Debug)]
pub struct StreamSettings {
    pub replicas: usize,
    /// JetStream duplicate window of the jobs stream (batch id dedupe).
    pub dedupe_window: Duration,
    /// How long events stay in the events stream.
    pub events_max_age: Duration,
    /// How long batch status records are kept.
    pub status_max_age: Duration,
    /// Largest message the jobs stream accepts.
    pub max_message_bytes: i32,
    /// How long audit records are kept.
    pub audit_max_age: Duration,
    /// Most batches queued for one BMC (one jobs subject): JetStream refuses
    /// a further publish to that subject, so nothing is stored.
    pub max_queued_per_bmc: i64,
}

impl Default for StreamSettings {
    fn default() -> Self {
        StreamSettings {
            replicas: 1,
            dedupe_window: Duration::from_secs(600),
            events_max_age: Duration::from_secs(24 * 3600),
            status_max_age: Duration::from_secs(7 * 24 * 3600),
            max_message_bytes: 1024 * 1024,
            audit_max_age: Duration::from_secs(90 * 24 * 3600),
            max_queued_per_bmc: DEFAULT_MAX_QUEUED_PER_BMC,
        }
    }
}

/// Handles to the shared resources.
#[derive(Clone)]
pub struct Resources {
    pub js: Context,
    pub jobs: stream::Stream,
    pub events: stream::Stream,
    pub batches: kv::Store,
    pub audit: stream::Stream,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Create or update to this configuration (the gateway, which owns it).
    Update,
    /// Create when missing, otherwise use as found (workers, bmcctl).
    UseExisting,
}

fn jobs_config(s: &Subjects, set: &StreamSettings) -> stream::Config {
    stream::Config {
        name: s.jobs_stream(),
        description: Some("bmcfleet action batches, one subject per BMC".into()),
        subjects: vec![s.jobs_all()],
        retention: stream::RetentionPolicy::WorkQueue,
        storage: stream::StorageType::File,
        num_replicas: set.replicas,
        duplicate_window: set.dedupe_window,
        max_message_size: set.max_message_bytes,
        discard: stream::DiscardPolicy::New,
        // One subject per BMC: JetStream itself refuses a job beyond the cap
        // for that BMC (and only that BMC), storing nothing.
        max_messages_per_subject: set.max_queued_per_bmc,
        discard_new_per_subject: true,
        metadata: HashMap::from([(PARTITIONS_KEY.to_owned(), s.partitions.to_string())]),
        ..Default::default()
    }
}

fn events_config(s: &Subjects, set: &StreamSettings) -> stream::Config {
    stream::Config {
        allow_direct: true,
        ..limits_stream(
            s.events_stream(),
            "bmcfleet per-batch events and results",
            s.events_all(),
            set,
            set.events_max_age,
        )
    }
}

fn audit_config(s: &Subjects, set: &StreamSettings) -> stream::Config {
    limits_stream(
        s.audit_stream(),
        "bmcfleet audit log: admitted batches and machine registry changes",
        s.audit_all(),
        set,
        set.audit_max_age,
    )
}

/// A file-backed stream of one subject tree that keeps messages for `max_age`.
fn limits_stream(
    name: String,
    description: &str,
    subjects: String,
    set: &StreamSettings,
    max_age: Duration,
) -> stream::Config {
    stream::Config {
        name,
        description: Some(description.into()),
        subjects: vec![subjects],
        retention: stream::RetentionPolicy::Limits,
        storage: stream::StorageType::File,
        num_replicas: set.replicas,
        max_age,
        duplicate_window: set.dedupe_window.min(max_age),
        ..Default::default()
    }
}

/// Bounds of the console stream (docs/CONSOLE.md).
#[derive(Clone, Debug)]
pub struct ConsoleStreamSettings {
    /// Chunks kept per machine (one subject): with [`CONSOLE_CHUNK_BYTES`]
    /// per chunk at most, the per-machine byte bound. Oldest go first.
    pub max_chunks_per_machine: i64,
    /// How long console output is kept.
    pub max_age: Duration,
    /// Bytes the whole stream keeps (oldest go first); -1: no bound beyond the per-machine one.
    pub max_bytes: i64,
}

/// Largest chunk of console output one message carries.
pub const CONSOLE_CHUNK_BYTES: usize = 4096;

impl Default for ConsoleStreamSettings {
    fn default() -> Self {
        // 2,048 chunks of ≤ 4 KiB: at most 8 MiB per machine.
        ConsoleStreamSettings { max_chunks_per_machine: 2048, max_age: Duration::from_secs(24 * 3600), max_bytes: -1 }
    }
}

/// The console output stream: one subject per machine
/// (`<prefix>.console.out.<tenant>.<machine>`), bounded per machine by
/// chunks (so bytes: each chunk at most [`CONSOLE_CHUNK_BYTES`] plus
/// headers) and by age, discarding the oldest output.
pub fn console_config(s: &Subjects, set: &ConsoleStreamSettings, replicas: usize) -> stream::Config {
    stream::Config {
        name: s.console_stream(),
        description: Some("bmcfleet serial console output, one subject per machine".into()),
        subjects: vec![s.console_out_all()],
        retention: stream::RetentionPolicy::Limits,
        storage: stream::StorageType::File,
        num_replicas: replicas,
        max_age: set.max_age,
        max_bytes: set.max_bytes,
        max_messages_per_subject: set.max_chunks_per_machine,
        max_message_size: (CONSOLE_CHUNK_BYTES + 1024) as i32,
        discard: stream::DiscardPolicy::Old,
        allow_direct: true,
        ..Default::default()
    }
}

/// The console stream, created when missing (`Mode::Update`: brought up to date).
pub async fn console_stream(
    js: &Context,
    s: &Subjects,
    set: &ConsoleStreamSettings,
    replicas: usize,
    mode: Mode,
) -> Result<stream::Stream, SetupError> {
    stream(js, console_config(s, set, replicas), mode).await
}

fn batches_config(s: &Subjects, set: &StreamSettings) -> kv::Config {
    kv::Config {
        bucket: s.batches_bucket(),
        description: "bmcfleet batch status and per-action progress".into(),
        history: 1,
        max_age: set.status_max_age,
        storage: stream::StorageType::File,
        num_replicas: set.replicas,
        ..Default::default()
    }
}

fn rollouts_config(s: &Subjects, set: &StreamSettings) -> kv::Config {
    kv::Config {
        bucket: s.rollouts_bucket(),
        description: "bmcfleet rollout records: settings, counters, machines in flight".into(),
        history: 1,
        max_age: set.status_max_age,
        storage: stream::StorageType::File,
        num_replicas: set.replicas,
        ..Default::default()
    }
}

fn rollout_parts_config(s: &Subjects, set: &StreamSettings) -> kv::Config {
    kv::Config {
        bucket: s.rollout_parts_bucket(),
        description: "bmcfleet rollout specs, machine lists and per-machine outcomes".into(),
        history: 1,
        max_age: set.status_max_age,
        storage: stream::StorageType::File,
        num_replicas: set.replicas,
        ..Default::default()
    }
}

/// The rollout drivers' lease bucket: an entry expires `ttl` after its
/// last write, which is how a dead driver's rollouts become free.
pub fn rollout_leases_config(s: &Subjects, ttl: Duration, replicas: usize) -> kv::Config {
    kv::Config {
        bucket: s.rollout_leases_bucket(),
        description: "bmcfleet rollout driver leases".into(),
        history: 1,
        max_age: ttl,
        storage: stream::StorageType::File,
        num_replicas: replicas,
        ..Default::default()
    }
}

/// The rollout buckets (records and parts), created or updated by gateways.
pub async fn rollout_buckets(
    js: &Context,
    subjects: &Subjects,
    settings: &StreamSettings,
    mode: Mode,
) -> Result<(kv::Store, kv::Store), SetupError> {
    let records = bucket(js, rollouts_config(subjects, settings), mode).await?;
    let parts = bucket(js, rollout_parts_config(subjects, settings), mode).await?;
    Ok((records, parts))
}

/// The machine registry (created by the gateway, or `bmcctl machine`;
/// written by operators only, watched by gateways and workers).
pub fn machines_config(s: &Subjects, replicas: usize) -> kv::Config {
    kv::Config {
        bucket: s.machines_bucket(),
        description: "bmcfleet machine registry: operator-owned BMC targets".into(),
        history: 5,
        storage: stream::StorageType::File,
        num_replicas: replicas,
        ..Default::default()
    }
}

/// Observed machine state (created and written by workers; operators read it).
pub fn state_config(s: &Subjects, replicas: usize) -> kv::Config {
    kv::Config {
        bucket: s.state_bucket(),
        description: "bmcfleet observed machine state: power, reachability, last seen".into(),
        history: 1,
        storage: stream::StorageType::File,
        num_replicas: replicas,
        ..Default::default()
    }
}

/// The credentials bucket (created by `bmcctl cred put`; workers only read it).
pub fn credentials_config(s: &Subjects, replicas: usize) -> kv::Config {
    kv::Config {
        bucket: s.credentials_bucket(),
        description: "bmcfleet named BMC credentials, sealed to the workers' xkey".into(),
        history: 1,
        storage: stream::StorageType::File,
        num_replicas: replicas,
        ..Default::default()
    }
}

async fn stream(js: &Context, config: stream::Config, mode: Mode) -> Result<stream::Stream, SetupError> {
    let name = config.name.clone();
    match mode {
        Mode::Update => {
            js.create_or_update_stream(config).await.map_err(|e| js_err(format!("stream {name}"), e))?;
        }
        Mode::UseExisting => {
            js.get_or_create_stream(config).await.map_err(|e| js_err(format!("stream {name}"), e))?;
        }
    }
    js.get_stream(&name).await.map_err(|e| js_err(format!("stream {name}"), e))
}

/// Key-value bucket, created when missing; with `Mode::Update` its config is
/// brought up to date.
pub async fn bucket(js: &Context, config: kv::Config, mode: Mode) -> Result<kv::Store, SetupError> {
    let name = config.bucket.clone();
    let what = || format!("bucket {name}");
    match js.get_key_value(&name).await {
        Ok(store) if mode == Mode::UseExisting => Ok(store),
        Ok(_) => {
            js.update_key_value(config).await.map_err(|e| js_err(what(), e))?;
            js.get_key_value(&name).await.map_err(|e| js_err(what(), e))
        }
        Err(_) => match js.create_key_value(config).await {
            Ok(store) => Ok(store),
            // Lost a creation race with another process: use theirs.
            Err(e) => js.get_key_value(&name).await.map_err(|_| js_err(what(), e)),
        },
    }
}

fn check_partitions(subjects: &Subjects, metadata: &HashMap<String, String>) -> Result<(), SetupError> {
    match metadata.get(PARTITIONS_KEY) {
        Some(p) if *p == subjects.partitions.to_string() => Ok(()),
        Some(p) => Err(SetupError::PartitionMismatch {
            stream: subjects.jobs_stream(),
            existing: p.clone(),
            configured: subjects.partitions,
        }),
        None => Err(SetupError::PartitionMismatch {
            stream: subjects.jobs_stream(),
            existing: "an unknown number of".into(),
            configured: subjects.partitions,
        }),
    }
}

/// The per-BMC cap to set on an existing jobs stream. JetStream enforces a
/// lowered per-subject limit by deleting the oldest messages, which in a work
/// queue are jobs nobody ran: so the cap is never set below the longest queue
/// the stream holds now (with a warning saying so); the configured cap takes
/// effect at the next start after those queues drained.
async fn safe_cap(jobs: &stream::Stream, existing: &stream::Config, configured: i64) -> Result<i64, SetupError> {
    let current = existing.max_messages_per_subject;
    if current > 0 && current <= configured {
        return Ok(configured); // raising (or keeping) the cap deletes nothing
    }
    let mut longest = 0i64;
    let mut subjects = jobs.info_with_subjects(">").await.map_err(|e| js_err("jobs stream subjects", e))?;
    while let Some(entry) = subjects.next().await {
        let (_, count) = entry.map_err(|e| js_err("jobs stream subjects", e))?;
        longest = longest.max(i64::try_from(count).unwrap_or(i64::MAX));
    }
    if longest > configured {
        tracing::warn!(
            configured,
            longest_queue = longest,
            "A BMC has more batches queued than --max-queued-per-bmc; the jobs stream's cap is kept at that queue's \
             length so no queued batch is deleted. Restart the gateway once the queue drained to apply the cap."
        );
        return Ok(longest);
    }
    Ok(configured)
}

/// Ensure the jobs/events streams and the status bucket exist.
///
/// An existing jobs stream is checked for its partition count *before*
/// anything is updated, so a gateway started with another `--partitions`
/// refuses to start instead of rewriting the deployment's partitioning
/// under workers that still consume the old one.
pub async fn ensure(
    client: async_nats::Client,
    subjects: &Subjects,
    settings: &StreamSettings,
    mode: Mode,
) -> Result<Resources, SetupError> {
    let js = jetstream::new(client);
    let mut jobs_settings = settings.clone();
    if let Ok(mut existing) = js.get_stream(subjects.jobs_stream()).await {
        let config = existing.info().await.map_err(|e| js_err("jobs stream info", e))?.config.clone();
        check_partitions(subjects, &config.metadata)?;
        if mode == Mode::Update {
            jobs_settings.max_queued_per_bmc = safe_cap(&existing, &config, settings.max_queued_per_bmc).await?;
        }
    }
    let mut jobs = stream(&js, jobs_config(subjects, &jobs_settings), mode).await?;
    let info = jobs.info().await.map_err(|e| js_err("jobs stream info", e))?;
    check_partitions(subjects, &info.config.metadata)?;
    let events = stream(&js, events_config(subjects, settings), mode).await?;
    let batches = bucket(&js, batches_config(subjects, settings), mode).await?;
    let audit = stream(&js, audit_config(subjects, settings), mode).await?;
    Ok(Resources { js, jobs, events, batches, audit })
}

/// [`ensure`], retried with capped exponential backoff while JetStream is not
/// ready yet (a cluster still electing its meta leader, a server starting).
/// A partition mismatch is a configuration error and is returned at once.
pub async fn ensure_with_retry(
    client: async_nats::Client,
    subjects: &Subjects,
    settings: &StreamSettings,
    mode: Mode,
    give_up_after: Duration,
) -> Result<Resources, SetupError> {
    retry_setup(
        "stream setup",
        give_up_after,
        |e| matches!(e, SetupError::PartitionMismatch { .. }),
        || ensure(client.clone(), subjects, settings, mode),
    )
    .await
}

/// Run a start-up step against JetStream until it succeeds, with capped
/// exponential backoff (100 ms doubling to 5 s), for at most
/// `give_up_after`: a fresh cluster answers "no suitable peers", timeouts or
/// "no responders" until its meta and stream leaders exist. An error for
/// which `fatal` holds (a configuration error) is returned at once.
pub async fn retry_setup<T, E, F, Fut>(
    what: &str,
    give_up_after: Duration,
    fatal: impl Fn(&E) -> bool,
    mut step: F,
) -> Result<T, E>
where
    E: std::fmt::Display,
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, E>>,
{
    let deadline = tokio::time::Instant::now() + give_up_after;
    let backoff = crate::backoff::Backoff::new(Duration::from_millis(100), Duration::from_secs(5));
    let mut retry = 0;
    loop {
        let delay = backoff.delay(retry);
        match step().await {
            Ok(v) => return Ok(v),
            Err(e) if fatal(&e) => return Err(e),
            Err(e) if tokio::time::Instant::now() + delay >= deadline => return Err(e),
            Err(e) => {
                tracing::warn!(error = %e, retry_in = ?delay, "JetStream is not ready; retrying {what}.");
                tokio::time::sleep(delay).await;
                retry += 1;
            }
        }
    }
}
