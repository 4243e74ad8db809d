//! Worker configuration: every flag has a `BMCFLEET_*` environment twin.

use bmcfleet_common::config::{conflict, duration, positive_duration, ProcessArgs, ServiceConfig};
use bmcfleet_schema::machine::AdHocPolicy;
use bmcfleet_schema::{RawPolicy, Secret};
use clap::Parser;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Executes each BMC's batches strictly in order, one at a time, across a fleet of workers.
#[derive(Parser, Debug, Clone)]
#[command(name = "bmc-worker", version)]
#[command(mut_arg(bmcfleet_common::config::METRICS_ADDR_ARG, |a| a.default_value(bmcfleet_common::config::WORKER_METRICS_ADDR)))]
pub struct Config {
    #[command(flatten)]
    pub process: ProcessArgs,

    /// Unique name of this worker (default: host name, pid and a random suffix).
    #[arg(long, env = "BMCFLEET_WORKER_ID", value_parser = bmcfleet_common::config::token)]
    pub worker_id: Option<String>,
    /// Partition lease time-to-live: a dead worker's partitions move after at most this (plus one rebalance interval).
    #[arg(long, env = "BMCFLEET_LEASE_TTL", default_value = "15s", value_parser = positive_duration)]
    pub lease_ttl: Duration,
    /// How often leases are renewed and ownership is rebalanced (at most a third of the lease TTL).
    #[arg(long, env = "BMCFLEET_REBALANCE_INTERVAL", default_value = "3s", value_parser = positive_duration)]
    pub rebalance_interval: Duration,
    /// JetStream ack wait of the partition consumers (in-progress acks keep long batches alive).
    #[arg(long, env = "BMCFLEET_ACK_WAIT", default_value = "30s", value_parser = positive_duration)]
    pub ack_wait: Duration,
    /// Batches held (delivered, unacknowledged) per partition; raised to four
    /// times the jobs stream's per-BMC cap (`--max-queued-per-bmc` of the
    /// gateway) when lower, so one BMC holds at most a quarter of them.
    #[arg(long, env = "BMCFLEET_MAX_INFLIGHT_PER_PARTITION", default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub max_inflight_per_partition: u32,
    /// Batches executing at once on this worker (across all BMCs).
    #[arg(long, env = "BMCFLEET_MAX_CONCURRENT_BATCHES", default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub max_concurrent_batches: u32,
    /// Of those, how many one tenant's batches (and its machines' polls)
    /// may hold at once (default: half of --max-concurrent-batches, at
    /// least 1), so one tenant with many machines or slow batches leaves
    /// the other tenants the rest. The operator's own machines (tenant
    /// `default`) are not limited by it.
    #[arg(long, env = "BMCFLEET_MAX_BATCHES_PER_TENANT", value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub max_batches_per_tenant: Option<u32>,
    /// How long a machine may take to show a power change (on, off, cycle,
    /// reset) before the action fails with `not_reached`; an action's
    /// `power_settle.settle` overrides it. A soft off without one waits as
    /// long as the action may last.
    #[arg(long, env = "BMCFLEET_POWER_SETTLE_TIMEOUT", default_value = "60s", value_parser = positive_duration)]
    pub power_settle_timeout: Duration,
    /// Longest single action (further bounded by the batch deadline).
    #[arg(long, env = "BMCFLEET_ACTION_TIMEOUT", default_value = "2m", value_parser = positive_duration)]
    pub action_timeout: Duration,
    /// Idle time after which a BMC's lane and session are dropped.
    #[arg(long, env = "BMCFLEET_LANE_IDLE_TIMEOUT", default_value = "60s", value_parser = positive_duration)]
    pub lane_idle_timeout: Duration,
    /// How often each registered machine of an owned partition is polled
    /// for its power state and reachability (a machine's `poll_interval`
    /// overrides it); `off` disables polling. At least 1s (short intervals load the BMCs).
    #[arg(long, env = "BMCFLEET_POLL_INTERVAL", default_value = "3m", value_parser = poll_interval)]
    pub poll_interval: PollInterval,
    /// Longest time a poll (session set-up and the power read) may take.
    #[arg(long, env = "BMCFLEET_POLL_TIMEOUT", default_value = "30s", value_parser = positive_duration)]
    pub poll_timeout: Duration,
    /// How often a poll also reads the machine's inventory (firmware
    /// versions and components; a change is announced); `off` never.
    #[arg(long, env = "BMCFLEET_INVENTORY_INTERVAL", default_value = "24h", value_parser = poll_interval)]
    pub inventory_interval: PollInterval,
    /// Longest time an inventory read (every component collection of the
    /// BMC: processors, memory, drives, NICs, power supplies, firmware) may take.
    #[arg(long, env = "BMCFLEET_INVENTORY_TIMEOUT", default_value = "2m", value_parser = positive_duration)]
    pub inventory_timeout: Duration,
    /// How often a poll also checks the machine's health (issue 37): its
    /// sensors against their thresholds, the newest entries of its event
    /// log (--health-log-window) and the BMC's own health rollup (Redfish
    /// `Status.HealthRollup`), rolled up into one verdict (ok, warning,
    /// critical, with reasons) in the machine's state; a change is
    /// announced (`health_changed`). `off` (the default) never; 15m suits
    /// most fleets (docs/OBSERVABILITY.md).
    #[arg(long, env = "BMCFLEET_HEALTH_INTERVAL", default_value = "off", value_parser = poll_interval)]
    pub health_interval: PollInterval,
    /// Event log entries (warning, critical) older than this no longer
    /// count in the health verdict.
    #[arg(long, env = "BMCFLEET_HEALTH_LOG_WINDOW", default_value = "24h", value_parser = positive_duration)]
    pub health_log_window: Duration,
    /// How often a poll also reads the machine's power draw (watts: IPMI
    /// DCMI, Redfish power metrics) into its state and the metrics; `off`
    /// never (the default: not every BMC meters power).
    #[arg(long, env = "BMCFLEET_POWER_READING_INTERVAL", default_value = "off", value_parser = poll_interval)]
    pub power_reading_interval: PollInterval,
    /// How often a poll also reads the BMC's clock and its drift against
    /// the worker's into the machine's state and the metrics; `off` (the
    /// default) never; 1h suits most fleets.
    #[arg(long, env = "BMCFLEET_CLOCK_INTERVAL", default_value = "off", value_parser = poll_interval)]
    pub clock_interval: PollInterval,
    /// Also export each machine's latest power reading and clock drift as
    /// a series of its own (label `machine`): one series per machine and
    /// reading, for fleets small enough (the aggregates are always exported).
    #[arg(long, env = "BMCFLEET_PER_MACHINE_METRICS")]
    pub per_machine_metrics: bool,
    /// An unchanged machine state is rewritten (with its last-seen time) this often.
    #[arg(long, env = "BMCFLEET_STATE_HEARTBEAT", default_value = "15m", value_parser = positive_duration)]
    pub state_heartbeat: Duration,
    /// How often each owned partition's record of its polled machines'
    /// last observation and answer is written (one write per partition,
    /// whatever its size): what readers judge staleness and LAST SEEN by
    /// between a machine's own writes (on change and heartbeat).
    #[arg(long, env = "BMCFLEET_STATE_SEEN_INTERVAL", default_value = "15s", value_parser = positive_duration)]
    pub state_seen_interval: Duration,
    /// A polled machine's state is stale (readers show it `stale`, its power
    /// `unknown`) once its last observation is older than its poll
    /// interval plus what the schedule may add (a tenth of the interval,
    /// --poll-timeout, --state-seen-interval) plus this grace.
    #[arg(long, env = "BMCFLEET_STATE_STALE_GRACE", default_value = "15s", value_parser = duration)]
    pub state_stale_grace: Duration,
    /// Time allowed on SIGTERM for running actions to finish before they are handed back.
    #[arg(long, env = "BMCFLEET_DRAIN_TIMEOUT", default_value = "30s", value_parser = positive_duration)]
    pub drain_timeout: Duration,
    /// Extra attempts of an action's BMC call after a retryable failure (timeout,
    /// unreachable, HTTP 5xx, busy), never past the deadline; a non-idempotent
    /// action is retried only when the request provably never left. 0: no retries.
    #[arg(long, env = "BMCFLEET_RETRY_MAX", default_value_t = 2, value_parser = clap::value_parser!(u32).range(0..=10))]
    pub retry_max: u32,
    /// Wait before the first retry; doubled for each further one (capped at 5s), with jitter.
    #[arg(long, env = "BMCFLEET_RETRY_BACKOFF", default_value = "200ms", value_parser = positive_duration)]
    pub retry_backoff: Duration,
    /// Consecutive calls without an answer (timeouts, unreachable) that open a
    /// BMC's circuit breaker; its actions then fail fast with `circuit_open`. 0: never.
    #[arg(long, env = "BMCFLEET_BREAKER_THRESHOLD", default_value_t = 5, value_parser = clap::value_parser!(u32).range(0..=1000))]
    pub breaker_threshold: u32,
    /// How long an open breaker fails actions fast before one probe call may run.
    #[arg(long, env = "BMCFLEET_BREAKER_COOLDOWN", default_value = "30s", value_parser = positive_duration)]
    pub breaker_cooldown: Duration,
    /// A BMC call (an action, with session set-up) answered only after this long
    /// counts towards opening the BMC's breaker like one without an answer, so
    /// a BMC that answers but consistently too slowly fails fast instead of
    /// holding its lane. 0s: off.
    #[arg(long, env = "BMCFLEET_SLOW_CALL_THRESHOLD", default_value = "30s", value_parser = duration)]
    pub slow_call_threshold: Duration,
    /// Minimum time between the starts of two calls (actions or retries) to the same BMC. 0s: off.
    #[arg(long, env = "BMCFLEET_BMC_MIN_INTERVAL", default_value = "50ms", value_parser = duration)]
    pub bmc_min_interval: Duration,
    /// JSON file of named BMC credentials: {"name": {"username": "...", "password": "..."}}.
    #[arg(long, env = "BMCFLEET_CREDENTIALS_FILE")]
    pub credentials_file: Option<PathBuf>,
    /// File holding an xkey seed (`SX...`, from `bmcctl keygen`, mode 0600) that opens
    /// sealed credentials. Repeat (or comma-separate in the environment) to hold
    /// several during a key rotation: a box names the public key it was sealed to.
    #[arg(long, env = "BMCFLEET_SEALING_KEY_FILE", value_delimiter = ',')]
    pub sealing_key_file: Vec<PathBuf>,
    /// An xkey seed (`SX...`) given directly; prefer the environment variable over the flag.
    #[arg(long, env = "BMCFLEET_SEALING_KEY", hide_env_values = true)]
    pub sealing_key: Option<Secret>,
    /// How long a credential read from the credentials bucket is reused before it is read again.
    #[arg(long, env = "BMCFLEET_CREDENTIALS_CACHE_TTL", default_value = "10s", value_parser = bmcfleet_common::config::duration)]
    pub credentials_cache_ttl: Duration,
    /// Which raw passthrough requests this worker sends (checked again after the gateway):
    /// rules separated by `;`, `default`, `off`, or `@FILE`.
    #[arg(long, env = "BMCFLEET_RAW_POLICY", default_value = "default")]
    pub raw_policy: RawPolicy,
    /// Which tenants' batches may update firmware (`firmware_update`,
    /// checked again after the gateway, before anything is sent): `off` (the
    /// default), `all` (also a bare flag, or `true` in the environment), or
    /// tenant names separated by commas. Raw writes to update services stay
    /// with the raw policy (denied by default).
    #[arg(long, env = "BMCFLEET_ALLOW_FIRMWARE_UPDATE", default_value = "off", num_args = 0..=1, default_missing_value = "all")]
    pub allow_firmware_update: bmcfleet_schema::FirmwareUpdatePolicy,
    /// Longest a firmware update may be watched (its BMC task), instead of
    /// `--action-timeout`; further bounded by the batch deadline.
    #[arg(long, env = "BMCFLEET_FIRMWARE_UPDATE_TIMEOUT", default_value = "1h", value_parser = positive_duration)]
    pub firmware_update_timeout: Duration,
    /// Directory of the firmware images this worker may push to BMCs
    /// (`firmware_update.image_file`, Redfish multipart HTTP push): a
    /// batch names a file in it, never a path or URL; symbolic links must
    /// stay inside it. Unset: push updates are refused
    /// (`firmware_update_disabled`). Give every worker the same files.
    #[arg(long, env = "BMCFLEET_FIRMWARE_IMAGE_DIR", value_parser = image_dir)]
    pub firmware_image_dir: Option<PathBuf>,
    /// Largest firmware image this worker pushes, in bytes.
    #[arg(long, env = "BMCFLEET_FIRMWARE_IMAGE_MAX_BYTES", default_value_t = bmcfleet_provider::image::DEFAULT_MAX_IMAGE_BYTES, value_parser = clap::value_parser!(u64).range(1..))]
    pub firmware_image_max_bytes: u64,
    /// The most bytes of Redfish answers this worker holds at once, all
    /// BMCs together: each answer counts its body and an estimate of its
    /// parsed JSON (up to ~32 MiB for the largest, 8 MiB, answer). Past it a
    /// read fails `worker_exhausted` (retryable, not a BMC fault) instead of
    /// many BMCs answering large at once growing the worker without bound.
    #[arg(long, env = "BMCFLEET_REDFISH_MAX_BUFFERED_BYTES", default_value_t = 512 * 1024 * 1024, value_parser = redfish_buffered_bytes)]
    pub redfish_max_buffered_bytes: u64,
    /// Address ranges ad hoc batches (an address instead of a machine) may
    /// reach, checked after name resolution (comma-separated CIDRs), or
    /// `off` (the default). Loopback, link-local and metadata addresses need
    /// a range listed inside them.
    #[arg(long, env = "BMCFLEET_AD_HOC_TARGETS", default_value = "off", value_parser = AdHocPolicy::parse)]
    pub ad_hoc_targets: AdHocPolicy,
    /// Address ranges BMC discovery (`bmcctl discover`) may probe from this
    /// worker: a CIDR or address, repeatable or comma-separated. None (the
    /// default): discovery is off here. Loopback, link-local and metadata
    /// addresses need a range listed inside them (as for ad hoc targets).
    #[arg(long = "discover-allow", env = "BMCFLEET_DISCOVER_ALLOW", value_delimiter = ',', value_parser = discover_range)]
    pub discover_allow: Vec<bmcfleet_schema::machine::Cidr>,
    /// Most discovery probes this worker starts per second, every
    /// discovery together (one probe: one protocol on one port of one address).
    #[arg(long, env = "BMCFLEET_DISCOVER_RATE", default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub discover_rate: u32,
    /// Most addresses one discovery request may name (ranges expanded).
    #[arg(long, env = "BMCFLEET_DISCOVER_MAX_ADDRESSES", default_value_t = 1024, value_parser = clap::value_parser!(u64).range(1..=bmcfleet_schema::discover::MAX_ADDRESSES))]
    pub discover_max_addresses: u64,
    /// Protocols this worker speaks (comma-separated; `sim` also needs --sim-endpoint).
    #[arg(long, env = "BMCFLEET_PROTOCOLS", value_delimiter = ',', default_value = "ipmi,redfish,amt", value_parser = protocol)]
    pub protocols: Vec<bmcfleet_schema::Protocol>,
    /// Address of a `bmc-sim` server; enables the `sim` protocol (tests and demos).
    #[arg(long, env = "BMCFLEET_SIM_ENDPOINT")]
    pub sim_endpoint: Option<SocketAddr>,
}

/// `--poll-interval`: a duration of at least 10s, or `off`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PollInterval(pub Option<Duration>);

fn poll_interval(s: &str) -> Result<PollInterval, String> {
    if s.trim() == "off" {
        return Ok(PollInterval(None));
    }
    let d = bmcfleet_schema::duration::parse(s)?;
    if d < bmcfleet_schema::machine::MIN_POLL_INTERVAL {
        return Err(format!(
            "at least {} (or `off`)",
            bmcfleet_schema::duration::format(bmcfleet_schema::machine::MIN_POLL_INTERVAL)
        ));
    }
    Ok(PollInterval(Some(d)))
}

/// `--redfish-max-buffered-bytes`: room for at least the largest answer.
fn redfish_buffered_bytes(s: &str) -> Result<u64, String> {
    let n: u64 = s.trim().parse().map_err(|e| format!("a number of bytes: {e}"))?;
    let least = bmcfleet_redfish::RedfishConfig::default().largest_answer_charge() as u64;
    if n < least {
        return Err(format!(
            "at least {least} bytes (the largest Redfish answer a worker reads, with its parsed JSON)"
        ));
    }
    Ok(n)
}

/// `--firmware-image-dir`: an existing directory (checked at start: a
/// mistyped path fails the worker, exit 2, instead of every push batch).
fn image_dir(s: &str) -> Result<PathBuf, String> {
    let path = PathBuf::from(s);
    Ok(bmcfleet_provider::image::ImageDir::new(&path, 1).map(|_| path)?)
}

impl Config {
    /// The firmware image directory, when push updates are on.
    pub fn firmware_images(&self) -> Option<bmcfleet_provider::image::ImageDir> {
        let dir = self.firmware_image_dir.as_deref()?;
        match bmcfleet_provider::image::ImageDir::new(dir, self.firmware_image_max_bytes) {
            Ok(d) => Some(d),
            Err(e) => {
                // Checked when parsed; gone since: push updates stay off.
                tracing::error!(error = %e, "The firmware image directory is gone; push updates are off.");
                None
            }
        }
    }
}

fn discover_range(s: &str) -> Result<bmcfleet_schema::machine::Cidr, String> {
    s.parse().map_err(|e: bmcfleet_schema::machine::Error| e.to_string())
}

fn protocol(s: &str) -> Result<bmcfleet_schema::Protocol, String> {
    use bmcfleet_schema::Protocol::*;
    match s.trim() {
        "ipmi" => Ok(Ipmi),
        "redfish" => Ok(Redfish),
        "amt" => Ok(Amt),
        "sim" => Ok(Sim),
        other => Err(format!("unknown protocol `{other}` (ipmi, redfish, amt, sim)")),
    }
}

impl ServiceConfig for Config {
    fn process(&self) -> &ProcessArgs {
        &self.process
    }
    fn validate(&self) -> Result<(), clap::Error> {
        if self.rebalance_interval * 3 > self.lease_ttl {
            return Err(conflict::<Self>(format!(
                "--rebalance-interval ({}) must be at most a third of --lease-ttl ({}) so leases are renewed in time",
                bmcfleet_schema::duration::format(self.rebalance_interval),
                bmcfleet_schema::duration::format(self.lease_ttl)
            )));
        }
        if let Some(every) = self.poll_interval.0 {
            if self.poll_timeout >= every {
                return Err(conflict::<Self>(format!(
                    "--poll-timeout ({}) must be shorter than --poll-interval ({})",
                    bmcfleet_schema::duration::format(self.poll_timeout),
                    bmcfleet_schema::duration::format(every)
                )));
            }
        }
        if let Some(n) = self.max_batches_per_tenant {
            if n > self.max_concurrent_batches {
                return Err(conflict::<Self>(format!(
                    "--max-batches-per-tenant ({n}) must be at most --max-concurrent-batches ({})",
                    self.max_concurrent_batches
                )));
            }
        }
        if self.ack_wait < Duration::from_secs(1) {
            return Err(conflict::<Self>("--ack-wait must be at least 1s"));
        }
        let fmt = bmcfleet_schema::duration::format;
        for (short, short_flag, long, long_flag, why) in [
            (
                self.retry_backoff,
                "--retry-backoff",
                self.action_timeout,
                "--action-timeout",
                ", or no retry could ever start",
            ),
            (self.bmc_min_interval, "--bmc-min-interval", self.action_timeout, "--action-timeout", ""),
            (
                self.bmc_min_interval,
                "--bmc-min-interval",
                self.lane_idle_timeout,
                "--lane-idle-timeout",
                ": the last start is kept by the lane",
            ),
        ] {
            if short >= long {
                return Err(conflict::<Self>(format!(
                    "{short_flag} ({}) must be shorter than {long_flag} ({}){why}",
                    fmt(short),
                    fmt(long)
                )));
            }
        }
        Ok(())
    }
}

impl Config {
    /// The worker's batch slots and each tenant's share of them.
    /// The discovery flags.
    pub fn discovery(&self) -> crate::discover::Settings {
        crate::discover::Settings {
            allow: self.discover_allow.clone(),
            rate: self.discover_rate,
            max_addresses: self.discover_max_addresses,
        }
    }

    pub fn slots(&self) -> crate::slots::Slots {
        let total = self.max_concurrent_batches as usize;
        crate::slots::Slots::new(total, self.max_batches_per_tenant.map_or(total / 2, |n| n as usize))
    }

    /// Polling and state settings.
    pub fn state(&self) -> crate::state::Settings {
        crate::state::Settings {
            poll_interval: self.poll_interval.0,
            heartbeat: self.state_heartbeat,
            poll_timeout: self.poll_timeout,
            inventory_interval: self.inventory_interval.0,
            inventory_timeout: self.inventory_timeout,
            seen_every: self.state_seen_interval,
            stale_grace: self.state_stale_grace,
            health_interval: self.health_interval.0,
            health_log_window: self.health_log_window,
            power_reading_interval: self.power_reading_interval.0,
            clock_interval: self.clock_interval.0,
            per_machine_metrics: self.per_machine_metrics,
        }
    }

    /// The retry, breaker and pacing settings.
    pub fn guard(&self) -> crate::guard::Settings {
        crate::guard::Settings {
            retry_max: self.retry_max,
            retry_backoff: self.retry_backoff,
            breaker_threshold: self.breaker_threshold,
            breaker_cooldown: self.breaker_cooldown,
            slow_call: self.slow_call_threshold,
            min_interval: self.bmc_min_interval,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_default_to_another_port_than_the_gateways() {
        // Issue 34: with one default, the second process on a host exited
        // with `Address already in use`. (Skipped when the environment sets it.)
        if std::env::var_os("BMCFLEET_METRICS_ADDR").is_some() {
            return;
        }
        let c = Config::try_parse_from(["w"]).unwrap();
        assert_eq!(c.process.metrics.addr.0, Some("0.0.0.0:9091".parse().unwrap()));
        assert_ne!(bmcfleet_common::config::WORKER_METRICS_ADDR, bmcfleet_common::config::GATEWAY_METRICS_ADDR);
        let c = Config::try_parse_from(["w", "--metrics-addr", "127.0.0.1:0"]).unwrap();
        assert_eq!(c.process.metrics.addr.0, Some("127.0.0.1:0".parse().unwrap()));
        assert_eq!(Config::try_parse_from(["w", "--metrics-addr", "off"]).unwrap().process.metrics.addr.0, None);
    }

    #[test]
    fn lease_must_outlive_renewals() {
        let c = Config::try_parse_from(["w", "--lease-ttl", "5s", "--rebalance-interval", "2s"]).unwrap();
        assert!(c.validate().is_err());
        let c = Config::try_parse_from(["w", "--lease-ttl", "6s", "--rebalance-interval", "2s"]).unwrap();
        c.validate().unwrap();
        assert!(Config::try_parse_from(["w", "--lease-ttl", "6"]).is_err());
    }

    #[test]
    fn resilience_flags_parse_and_validate() {
        let c = Config::try_parse_from(["w"]).unwrap();
        c.validate().unwrap();
        assert_eq!(c.guard(), crate::guard::Settings::default(), "the documented defaults");
        let c = Config::try_parse_from([
            "w",
            "--retry-max",
            "0",
            "--retry-backoff",
            "50ms",
            "--breaker-threshold",
            "0",
            "--breaker-cooldown",
            "2s",
            "--bmc-min-interval",
            "0s",
        ])
        .unwrap();
        c.validate().unwrap();
        assert_eq!((c.retry_max, c.breaker_threshold, c.bmc_min_interval), (0, 0, Duration::ZERO));
        // Durations need a unit; counts have bounds; zero is refused where it makes no sense.
        for bad in [
            &["--retry-backoff", "200"][..],
            &["--retry-backoff", "0s"],
            &["--retry-max", "11"],
            &["--retry-max", "-1"],
            &["--breaker-threshold", "1001"],
            &["--breaker-cooldown", "0s"],
            &["--breaker-cooldown", "30"],
            &["--bmc-min-interval", "50"],
        ] {
            assert!(Config::try_parse_from(["w"].iter().chain(bad.iter())).is_err(), "{bad:?} accepted");
        }
        // Cross-checks at start, with a message naming both flags.
        let c = Config::try_parse_from(["w", "--retry-backoff", "5s", "--action-timeout", "5s"]).unwrap();
        assert!(c.validate().unwrap_err().to_string().contains("--retry-backoff"));
        let c = Config::try_parse_from(["w", "--bmc-min-interval", "2s", "--lane-idle-timeout", "1s"]).unwrap();
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("--bmc-min-interval") && e.contains("--lane-idle-timeout"), "{e}");
        let c = Config::try_parse_from(["w", "--bmc-min-interval", "3m"]).unwrap();
        assert!(c.validate().unwrap_err().to_string().contains("--action-timeout"));
    }

    #[test]
    fn a_tenant_holds_half_of_the_batch_slots_by_default() {
        let c = Config::try_parse_from(["w", "--max-concurrent-batches", "10"]).unwrap();
        assert_eq!(c.slots().per_tenant(), 5);
        assert_eq!(Config::try_parse_from(["w", "--max-concurrent-batches", "1"]).unwrap().slots().per_tenant(), 1);
        let c =
            Config::try_parse_from(["w", "--max-concurrent-batches", "10", "--max-batches-per-tenant", "10"]).unwrap();
        c.validate().unwrap();
        assert_eq!(c.slots().per_tenant(), 10);
        let c =
            Config::try_parse_from(["w", "--max-concurrent-batches", "10", "--max-batches-per-tenant", "11"]).unwrap();
        assert!(c.validate().unwrap_err().to_string().contains("--max-batches-per-tenant"));
        assert!(Config::try_parse_from(["w", "--max-batches-per-tenant", "0"]).is_err());
    }

    #[test]
    fn discovery_is_off_unless_ranges_are_allowed() {
        let c = Config::try_parse_from(["w"]).unwrap();
        assert!(c.discovery().allow.is_empty(), "off by default");
        assert_eq!((c.discovery().rate, c.discovery().max_addresses), (50, 1024));
        let c = Config::try_parse_from([
            "w",
            "--discover-allow",
            "10.20.0.0/16,10.30.1.7",
            "--discover-allow",
            "127.0.0.0/8",
        ])
        .unwrap();
        let ranges: Vec<String> = c.discovery().allow.iter().map(|r| r.to_string()).collect();
        assert_eq!(ranges, ["10.20.0.0/16", "10.30.1.7/32", "127.0.0.0/8"]);
        for bad in [
            &["--discover-allow", "10.20.0.1/16"][..],
            &["--discover-allow", "rack7.example.com"],
            &["--discover-rate", "0"],
            &["--discover-max-addresses", "100000"],
        ] {
            let e = Config::try_parse_from(["w"].iter().chain(bad.iter())).unwrap_err();
            assert_eq!(e.exit_code(), 2, "{bad:?}");
        }
    }

    #[test]
    fn poll_flags_parse_and_validate() {
        let c = Config::try_parse_from(["w"]).unwrap();
        assert_eq!(c.state().poll_interval, Some(Duration::from_secs(180)), "the documented default");
        assert_eq!(Config::try_parse_from(["w", "--poll-interval", "off"]).unwrap().state().poll_interval, None);
        for bad in [&["--poll-interval", "500ms"][..], &["--poll-interval", "60"], &["--state-heartbeat", "0s"]] {
            assert!(Config::try_parse_from(["w"].iter().chain(bad.iter())).is_err(), "{bad:?} accepted");
        }
        let c = Config::try_parse_from(["w", "--poll-interval", "20s", "--poll-timeout", "30s"]).unwrap();
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("--poll-timeout") && e.contains("--poll-interval"), "{e}");
    }

    #[test]
    fn sealing_keys_repeat_and_never_print() {
        let c = Config::try_parse_from([
            "w",
            "--sealing-key-file",
            "/a",
            "--sealing-key-file",
            "/b",
            "--sealing-key",
            "SXsecret",
        ])
        .unwrap();
        assert_eq!(c.sealing_key_file.len(), 2);
        assert!(!format!("{c:?}").contains("SXsecret"));
        assert_eq!(c.raw_policy, RawPolicy::default());
        assert_eq!(
            c.allow_firmware_update,
            bmcfleet_schema::FirmwareUpdatePolicy::Off,
            "firmware updates are off by default"
        );
    }

    #[test]
    fn the_firmware_image_dir_must_be_a_directory() {
        let c = Config::try_parse_from(["w"]).unwrap();
        assert!(c.firmware_images().is_none(), "push updates are off by default");
        assert_eq!(c.firmware_image_max_bytes, 512 * 1024 * 1024);
        let dir = std::env::temp_dir();
        let c = Config::try_parse_from([
            "w",
            "--firmware-image-dir",
            dir.to_str().unwrap(),
            "--firmware-image-max-bytes",
            "1000",
        ])
        .unwrap();
        assert_eq!(c.firmware_images().map(|d| d.max_bytes()), Some(1000));
        for bad in [
            &["--firmware-image-dir", "/nonexistent/images"][..],
            &["--firmware-image-dir", "/etc/hostname"],
            &["--firmware-image-max-bytes", "0"],
        ] {
            let e = Config::try_parse_from(["w"].iter().chain(bad.iter())).unwrap_err();
            assert_eq!(e.exit_code(), 2, "{bad:?}");
        }
    }
}
