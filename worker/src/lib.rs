//! # bmcfleet-worker
//!
//! Executes action batches so that each BMC's batches run strictly in
//! stream order, one at a time, on exactly one worker, while different BMCs
//! run in parallel.
//!
//! # Layout
//! - [`config`]: flags and environment.
//! - [`membership`]: presence, partition leases, balancing, graceful hand-over.
//! - [`fence`]: the local view of a lease that stops an owner in time.
//! - [`partition`]: a partition's consumer, dispatcher and per-BMC lanes.
//! - [`executor`]: one batch: resume, run, record progress, publish results.
//! - [`session`]: a lane's BMC session and action dispatch onto capabilities.
//! - [`guard`]: per-BMC retries with backoff, circuit breaker and pacing (the pure state machines).
//! - [`call`]: the one guarded path of every BMC call (batch actions and polls): breaker, pacing, fence, retries.
//! - [`providers`]: available providers; [`credentials`]: named credentials.
//! - [`state`]: polls of registered machines, their observed state and its events.
//! - [`console`]: serial consoles (IPMI SOL) of the owned partitions' machines over NATS.
//! - [`discover`]: BMC discovery for operators (`--discover-allow`): paced, unauthenticated probes of allowed ranges.
//! - [`metrics`]: what the worker counts (served on `/metrics`).

pub mod call;
pub mod config;
pub mod console;
pub mod credentials;
pub mod discover;
pub mod executor;
pub mod fence;
pub mod guard;
pub mod membership;
pub mod metrics;
pub mod partition;
pub mod providers;
pub mod quirks;
pub mod session;
pub mod slots;
pub mod state;
pub mod targets;

pub use config::Config;

use anyhow::Context as _;
use bmcfleet_common::streams::{self, Mode, Resources, StreamSettings};
use bmcfleet_schema::Subjects;
use credentials::CredentialStore;
use providers::Providers;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// What every partition, lane and executor of this worker shares.
pub struct Shared {
    pub worker_id: String,
    pub client: async_nats::Client,
    pub res: Resources,
    pub subjects: Subjects,
    pub providers: Providers,
    pub credentials: CredentialStore,
    /// The machine registry and the ad hoc ranges: where actions may go.
    pub targets: targets::Targets,
    /// Raw passthrough requests this worker sends (checked again after the gateway).
    pub raw_policy: bmcfleet_schema::RawPolicy,
    /// `--allow-firmware-update`: which tenants may update firmware.
    pub firmware_update: bmcfleet_schema::FirmwareUpdatePolicy,
    /// `--firmware-update-timeout`: how long a firmware update may be watched.
    pub firmware_update_timeout: Duration,
    /// `--firmware-image-dir`: the images push updates may send; none: push updates are off.
    pub firmware_images: Option<Arc<bmcfleet_provider::image::ImageDir>>,
    pub action_timeout: Duration,
    /// `--power-settle-timeout`: how long a power change may take to show.
    pub power_settle: Duration,
    /// Retries, circuit breaker and pacing (applied per BMC lane).
    pub guard: guard::Settings,
    /// Worker-wide bound on batches executing at once, and each tenant's share of it.
    pub slots: slots::Slots,
    /// Counters and histograms served on `/metrics`.
    pub metrics: metrics::Metrics,
    /// Observed state of the machines this worker polls.
    pub state: state::StateBook,
    /// Which machine has shown which known BMC quirk (logged once per machine).
    pub quirks: Arc<quirks::QuirkBook>,
    /// The serial console's IPMI connector (SOL sessions have sockets of
    /// their own); `None` when this worker does not speak IPMI.
    pub console: Option<Arc<bmcfleet_ipmi::IpmiConnector>>,
    pub console_settings: console::Settings,
}

fn default_worker_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| {
            h.trim().chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '-' }).collect::<String>()
        })
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "worker".into());
    let suffix = ulid::Ulid::new().to_string();
    format!("{host}-{}-{}", std::process::id(), &suffix[suffix.len() - 6..]).to_ascii_lowercase()
}

/// The providers this build offers, given the configuration.
pub fn providers(config: &Config) -> Providers {
    use bmcfleet_schema::Protocol;
    let mut r = Providers::default();
    for p in &config.protocols {
        r = match p {
            Protocol::Ipmi => r.with(Arc::new(bmcfleet_ipmi::IpmiConnector::new(bmcfleet_ipmi::IpmiConfig::default()))),
            Protocol::Redfish => {
                r.with(Arc::new(bmcfleet_redfish::RedfishConnector::new(bmcfleet_redfish::RedfishConfig {
                    max_buffered_bytes: usize::try_from(config.redfish_max_buffered_bytes).unwrap_or(usize::MAX),
                    ..bmcfleet_redfish::RedfishConfig::default()
                })))
            }
            Protocol::Amt => r.with(Arc::new(bmcfleet_amt::AmtConnector::new(bmcfleet_amt::AmtConfig::default()))),
            Protocol::Sim | Protocol::Auto => r,
        };
    }
    if let Some(endpoint) = config.sim_endpoint {
        r = r.with(Arc::new(bmcfleet_sim::SimConnector::new(endpoint)));
    }
    r
}

/// How far ahead `bmc_certificates_expiring` looks: 30 days.
const CERTIFICATE_WARNING_MS: u64 = 30 * 24 * 3600 * 1000;

/// Keeps the `machines` gauge (by power and reachability) and the
/// `bmc_certificates_expiring` gauge current.
async fn census(shared: Arc<Shared>, stop: CancellationToken) {
    let mut tick = tokio::time::interval(std::time::Duration::from_secs(10));
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        let now = bmcfleet_common::runtime::now_ms();
        shared.metrics.certificates_expiring.set(shared.state.certificates_expiring(now, CERTIFICATE_WARNING_MS));
        let counts = shared.state.census();
        shared.metrics.machines.clear();
        for ((power, contactable), n) in counts {
            shared
                .metrics
                .machines
                .get_or_create(&metrics::MachineLabels { power, contactable: contactable.to_string() })
                .set(n);
        }
        let r = shared.state.readings_census();
        let m = &shared.metrics;
        m.machines_health.clear();
        for (health, n) in r.health {
            m.machines_health.get_or_create(&metrics::HealthLabels { health: health.to_owned() }).set(n);
        }
        m.machines_power_watts.set(r.power_watts_sum);
        m.machines_power_read.set(r.power_machines);
        m.machines_clock_drift_max_seconds.set(r.clock_drift_max_seconds);
        m.machines_clock_read.set(r.clock_machines);
        m.machine_power_watts.clear();
        m.machine_clock_drift_seconds.clear();
        for (machine, watts, drift) in r.per_machine {
            let labels = metrics::MachineNameLabels { machine };
            if let Some(w) = watts {
                m.machine_power_watts.get_or_create(&labels).set(w);
            }
            if let Some(d) = drift {
                m.machine_clock_drift_seconds.get_or_create(&labels).set(d);
            }
        }
    }
}

/// Run the worker until `shutdown` resolves, then hand its partitions back.
pub async fn run(config: Config, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
    bmcfleet_common::config::ServiceConfig::validate(&config).map_err(anyhow::Error::msg)?;
    let worker_id = config.worker_id.clone().unwrap_or_else(default_worker_id);
    let subjects = config.process.topology.subjects();
    let credentials = match &config.credentials_file {
        Some(path) => CredentialStore::load(path).map_err(anyhow::Error::msg)?,
        None => CredentialStore::default(),
    };
    let mut keys = bmcfleet_common::sealing::SealingKeys::default();
    for path in &config.sealing_key_file {
        keys.add_file(path)?;
    }
    if let Some(seed) = &config.sealing_key {
        keys.add_seed(seed).map_err(|e| anyhow::anyhow!("BMCFLEET_SEALING_KEY: {e}"))?;
    }
    let sealing_keys = keys.public_keys();
    match bmcfleet_common::runtime::raise_fd_limit() {
        Ok(l) => tracing::info!(
            before = l.before,
            now = l.now,
            hard = l.hard,
            "Open-files limit: each BMC session and connection holds one."
        ),
        Err(e) => tracing::warn!(error = %e, "Cannot read or raise the open-files limit."),
    }
    let providers = providers(&config);
    let mut prometheus = prometheus_client::registry::Registry::default();
    let metrics = metrics::Metrics::register(&mut prometheus);
    // Ready while connected to NATS with the membership loop running.
    let ready = bmcfleet_common::serve::Ready::new();
    let server =
        bmcfleet_common::serve::start_unless_off(config.process.metrics.addr.0, prometheus, ready.check()).await?;
    let client = bmcfleet_common::nats::connect(&config.process.nats, &format!("bmc-worker {worker_id}")).await?;
    ready.connected(&client);
    // Lease renewals on a connection of their own: nats-server reads one
    // connection's messages in order, so on the shared one a renewal would
    // wait behind every status write and event of thousands of running
    // batches, and a lease could lapse under load although the worker is
    // healthy (its batches then end `interrupted`).
    let control =
        bmcfleet_common::nats::connect(&config.process.nats, &format!("bmc-worker {worker_id} leases")).await?;
    let settings = StreamSettings { replicas: config.process.topology.replicas as usize, ..StreamSettings::default() };
    let res = streams::ensure_with_retry(
        client.clone(),
        &subjects,
        &settings,
        Mode::UseExisting,
        std::time::Duration::from_secs(60),
    )
    .await
    .context("setting up JetStream streams and buckets")?;
    let credentials = credentials.with_keys(keys).with_bucket(
        async_nats::jetstream::new(client.clone()),
        subjects.credentials_bucket(),
        config.credentials_cache_ttl,
    );
    let stop = CancellationToken::new();
    let replicas = usize::from(config.process.topology.replicas);
    let machines = streams::retry_setup(
        "machine registry",
        std::time::Duration::from_secs(60),
        |_| false,
        || bmcfleet_common::registry::Registry::start(&res.js, &subjects, replicas, stop.child_token()),
    )
    .await
    .context("reading the machine registry")?;
    let state_store = streams::retry_setup(
        "the machine state bucket",
        std::time::Duration::from_secs(60),
        |_| false,
        || streams::bucket(&res.js, streams::state_config(&subjects, replicas), Mode::UseExisting),
    )
    .await
    .context("setting up the machine state bucket")?;
    let console_stream = streams::ConsoleStreamSettings::default();
    streams::retry_setup(
        "the console stream",
        std::time::Duration::from_secs(60),
        |_| false,
        || streams::console_stream(&res.js, &subjects, &console_stream, replicas, Mode::UseExisting),
    )
    .await
    .context("setting up the console stream")?;
    let offered = providers.describe();
    tracing::info!(
        worker = %worker_id, providers = ?offered, credentials = credentials.len(), sealing_keys = ?sealing_keys,
        raw_policy = %config.raw_policy.describe(), firmware_update = %config.allow_firmware_update.describe(),
        firmware_image_dir = %config.firmware_image_dir.as_deref().map(|d| d.display().to_string()).unwrap_or_else(|| "off".into()), machines = machines.len(), ad_hoc_targets = %config.ad_hoc_targets,
        "Worker starting."
    );
    let shared = Arc::new(Shared {
        worker_id,
        client: client.clone(),
        res,
        subjects,
        providers,
        credentials,
        targets: targets::Targets::new(machines, config.ad_hoc_targets.clone()),
        raw_policy: config.raw_policy.clone(),
        firmware_update: config.allow_firmware_update.clone(),
        firmware_update_timeout: config.firmware_update_timeout,
        firmware_images: config.firmware_images().map(Arc::new),
        action_timeout: config.action_timeout,
        power_settle: config.power_settle_timeout,
        guard: config.guard(),
        slots: config.slots(),
        quirks: Arc::new(quirks::QuirkBook::new(&metrics)),
        metrics,
        state: state::StateBook::new(state_store, config.state()),
        console: config
            .protocols
            .contains(&bmcfleet_schema::Protocol::Ipmi)
            .then(|| Arc::new(bmcfleet_ipmi::IpmiConnector::new(bmcfleet_ipmi::IpmiConfig::default()))),
        console_settings: console::Settings::default(),
    });
    // The lease and presence buckets, like the streams: a fresh cluster may
    // refuse them for a while.
    let membership = streams::retry_setup(
        "the partition lease buckets",
        std::time::Duration::from_secs(60),
        |_| false,
        || {
            membership::Membership::new(
                shared.clone(),
                control.clone(),
                config.lease_ttl,
                config.rebalance_interval,
                config.process.topology.replicas as usize,
                partition::Settings {
                    ack_wait: config.ack_wait,
                    max_inflight: config.max_inflight_per_partition,
                    lane_idle_timeout: config.lane_idle_timeout,
                    drain_timeout: config.drain_timeout,
                },
                offered.clone(),
            )
        },
    )
    .await
    .context("setting up the partition lease buckets")?;
    let discovery = discover::subscribe(&client, &shared.subjects, &config.discovery()).await.map(|requests| {
        tokio::spawn(discover::serve(
            requests,
            client.clone(),
            shared.worker_id.clone(),
            config.discovery(),
            stop.clone(),
        ))
    });
    let task = tokio::spawn(membership.run(stop.clone()));
    tokio::spawn(census(shared.clone(), stop.clone()));
    ready.running(true);
    shutdown.await;
    ready.running(false);
    stop.cancel();
    task.await.context("membership task")?;
    if let Some(discovery) = discovery {
        let _ = tokio::time::timeout(std::time::Duration::from_secs(5), discovery).await;
    }
    // Bounded: with NATS gone a flush would wait for the reconnection.
    let _ = tokio::time::timeout(std::time::Duration::from_secs(1), client.flush()).await;
    let _ = tokio::time::timeout(std::time::Duration::from_secs(1), control.flush()).await;
    if let Some(server) = server {
        server.stop().await;
    }
    tracing::info!("Worker stopped.");
    Ok(())
}
