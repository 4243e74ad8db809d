//! Gateway configuration: every flag has a `BMCFLEET_*` environment twin.

use bmcfleet_common::config::{conflict, duration, positive_duration, ProcessArgs, ServiceConfig};
use bmcfleet_common::streams::StreamSettings;
use bmcfleet_schema::machine::AdHocPolicy;
use bmcfleet_schema::{Limits, RawPolicy};
use clap::builder::BoolishValueParser;
use clap::Parser;
use std::time::Duration;

/// Admits action batches from producers and queues them per BMC on NATS JetStream.
#[derive(Parser, Debug, Clone)]
#[command(name = "bmc-gateway", version)]
pub struct Config {
    #[command(flatten)]
    pub process: ProcessArgs,

    #[command(flatten)]
    pub service: bmcfleet_common::config::ServiceArgs,
    /// Most actions in one batch.
    #[arg(long, env = "BMCFLEET_MAX_ACTIONS", default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub max_actions: u32,
    /// Largest submit message in bytes.
    #[arg(long, env = "BMCFLEET_MAX_MESSAGE_BYTES", default_value_t = 256 * 1024, value_parser = clap::value_parser!(u32).range(1024..=8 * 1024 * 1024))]
    pub max_message_bytes: u32,
    /// Deadline of a batch that names none.
    #[arg(long, env = "BMCFLEET_DEFAULT_DEADLINE", default_value = "10m", value_parser = positive_duration)]
    pub default_deadline: Duration,
    /// Longest deadline a batch may ask for.
    #[arg(long, env = "BMCFLEET_MAX_DEADLINE", default_value = "24h", value_parser = positive_duration)]
    pub max_deadline: Duration,
    /// Inline BMC credentials: `off` refuses them (`inline_credentials_disabled`);
    /// `sealed` seals each password to --workers-public-key before the job is
    /// stored, and also accepts credentials producers sealed to that key.
    #[arg(long, env = "BMCFLEET_INLINE_CREDENTIALS", default_value = "off", value_enum)]
    pub inline_credentials: InlineCredentials,
    /// The workers' public sealing key (`X...`, from `bmcctl keygen`); required with `--inline-credentials sealed`.
    #[arg(long, env = "BMCFLEET_WORKERS_PUBLIC_KEY", value_parser = workers_public_key, required_if_eq("inline_credentials", "sealed"))]
    pub workers_public_key: Option<String>,
    /// Which raw passthrough requests are admitted: rules separated by `;`
    /// (e.g. `deny ipmi:netfn=0x08; allow ipmi:*`), `default`, `off`, or `@FILE`.
    #[arg(long, env = "BMCFLEET_RAW_POLICY", default_value = "default")]
    pub raw_policy: RawPolicy,
    /// Which tenants' batches may carry `firmware_update`: `off` (the
    /// default: refused with `firmware_update_disabled`, nothing stored),
    /// `all` (also a bare flag, or `true` in the environment), or tenant
    /// names separated by commas. Workers check their own flag again.
    #[arg(long, env = "BMCFLEET_ALLOW_FIRMWARE_UPDATE", default_value = "off", num_args = 0..=1, default_missing_value = "all")]
    pub allow_firmware_update: bmcfleet_schema::FirmwareUpdatePolicy,
    /// Address ranges a batch may target itself instead of naming a
    /// registered machine (comma-separated CIDRs), or `off` (the default).
    /// Loopback, link-local and metadata addresses need a range listed
    /// inside them. Workers check the same list after name resolution.
    #[arg(long, env = "BMCFLEET_AD_HOC_TARGETS", default_value = "off", value_parser = AdHocPolicy::parse)]
    pub ad_hoc_targets: AdHocPolicy,
    /// Accept the `sim` protocol (test and demo deployments only).
    #[arg(long, env = "BMCFLEET_ALLOW_SIM", default_value = "false", value_parser = BoolishValueParser::new(), action = clap::ArgAction::Set)]
    pub allow_sim: bool,
    /// Most batches queued (not yet finished) for one BMC; a further submit is
    /// refused with `bmc_queue_full` and nothing is stored. Enforced by the jobs
    /// stream itself (a per-subject limit), so every gateway agrees.
    #[arg(long, env = "BMCFLEET_MAX_QUEUED_PER_BMC", default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub max_queued_per_bmc: u32,
    /// JetStream duplicate window for batch ids.
    #[arg(long, env = "BMCFLEET_DEDUPE_WINDOW", default_value = "10m", value_parser = positive_duration)]
    pub dedupe_window: Duration,
    /// How long events are kept.
    #[arg(long, env = "BMCFLEET_EVENTS_MAX_AGE", default_value = "24h", value_parser = positive_duration)]
    pub events_max_age: Duration,
    /// How long batch status records are kept (also how long a resubmitted id stays a no-op).
    #[arg(long, env = "BMCFLEET_STATUS_MAX_AGE", default_value = "7d", value_parser = positive_duration)]
    pub status_max_age: Duration,
    /// How long audit records (admitted batches, registry changes) are kept.
    #[arg(long, env = "BMCFLEET_AUDIT_MAX_AGE", default_value = "90d", value_parser = positive_duration)]
    pub audit_max_age: Duration,
    /// Longest time a waiting submit is held open.
    #[arg(long, env = "BMCFLEET_MAX_WAIT", default_value = "15m", value_parser = duration)]
    pub max_wait: Duration,
    /// Short requests (submit without waiting, status, cancel) handled at
    /// once; past it a request is answered `unavailable` at once.
    #[arg(long, env = "BMCFLEET_MAX_CONCURRENT_REQUESTS", default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_concurrent_requests: u32,
    /// Waiting submits (`Bmcfleet-Wait: true`) held open at once, apart from
    /// short requests; past it a waiting submit is answered `unavailable`.
    #[arg(long, env = "BMCFLEET_MAX_WAITING_SUBMITS", default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_waiting_submits: u32,
    /// Waiting submits one of a tenant's connections may hold at once, when
    /// nats-server names the connection in `Nats-Request-Info` (a service
    /// import with `share: true`, as in the shipped accounts config); a
    /// connection it does not name is bounded by its tenant's share only.
    #[arg(long, env = "BMCFLEET_MAX_WAITING_PER_CLIENT", default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_waiting_per_client: u32,
    /// Short requests one tenant (one NATS account; the operator's own
    /// account counts as one) may have in progress at once [default: half
    /// of --max-concurrent-requests].
    #[arg(long, env = "BMCFLEET_MAX_REQUESTS_PER_TENANT", value_parser = clap::value_parser!(u32).range(1..))]
    pub max_requests_per_tenant: Option<u32>,
    /// Waiting submits one tenant may hold at once, over all its connections
    /// [default: half of --max-waiting-submits].
    #[arg(long, env = "BMCFLEET_MAX_WAITING_PER_TENANT", value_parser = clap::value_parser!(u32).range(1..))]
    pub max_waiting_per_tenant: Option<u32>,
    /// NATS accounts whose users are operators (comma-separated), reaching
    /// the service through a service import with `share: true` like
    /// tenants do: nats-server then names each request's user, and the
    /// audit records it. Operators in the gateway's own account need no
    /// entry but are audited by account only. An account not listed is a
    /// tenant.
    #[arg(long, env = "BMCFLEET_OPERATOR_ACCOUNTS", value_delimiter = ',', value_parser = account_name)]
    pub operator_accounts: Vec<String>,
    /// How long a rollout driver's lease lasts unrenewed: after a gateway
    /// dies, another takes its rollouts over within about this long.
    #[arg(long, env = "BMCFLEET_ROLLOUT_LEASE_TTL", default_value = "10s", value_parser = positive_duration)]
    pub rollout_lease_ttl: Duration,
    /// How often a rollout driver reads its machines' batch status (and starts more).
    #[arg(long, env = "BMCFLEET_ROLLOUT_POLL_INTERVAL", default_value = "500ms", value_parser = positive_duration)]
    pub rollout_poll_interval: Duration,
}

/// What the gateway does with inline credentials.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum InlineCredentials {
    /// Refuse them: producers name credentials (`{"ref": name}`).
    Off,
    /// Seal the password to the workers' public key before storing the job.
    Sealed,
}

/// A NATS account name: not empty, no whitespace, dots, wildcards or `>`.
fn account_name(s: &str) -> Result<String, String> {
    let s = s.trim();
    if s.is_empty() || s.chars().any(|c| c.is_whitespace() || matches!(c, '.' | '*' | '>')) {
        return Err(format!("`{s}` is not a NATS account name (no spaces, dots, `*` or `>`)"));
    }
    Ok(s.to_owned())
}

fn workers_public_key(s: &str) -> Result<String, String> {
    bmcfleet_common::sealing::public_key(s).map(|k| k.public_key()).map_err(|e| e.to_string())
}

impl ServiceConfig for Config {
    fn process(&self) -> &ProcessArgs {
        &self.process
    }
    fn validate(&self) -> Result<(), clap::Error> {
        let fmt = bmcfleet_schema::duration::format;
        if self.default_deadline > self.max_deadline {
            return Err(conflict::<Self>(format!(
                "--default-deadline ({}) must not exceed --max-deadline ({}), or a batch that names no deadline would get one no batch may ask for",
                fmt(self.default_deadline),
                fmt(self.max_deadline)
            )));
        }
        for (flag, share, of, total) in [
            (
                "--max-requests-per-tenant",
                self.max_requests_per_tenant,
                "--max-concurrent-requests",
                self.max_concurrent_requests,
            ),
            (
                "--max-waiting-per-tenant",
                self.max_waiting_per_tenant,
                "--max-waiting-submits",
                self.max_waiting_submits,
            ),
        ] {
            if share.is_some_and(|s| s > total) {
                return Err(conflict::<Self>(format!(
                    "{flag} ({}) must not exceed {of} ({total}): it is a tenant's share of that budget",
                    share.unwrap_or(0)
                )));
            }
        }
        Ok(())
    }
}

impl Config {
    /// The admission budgets (`budget`), a tenant's shares resolved.
    pub fn budgets(&self) -> crate::budget::Limits {
        let half = |n: u32| (n / 2).max(1) as usize;
        crate::budget::Limits {
            short: self.max_concurrent_requests as usize,
            short_per_tenant: self.max_requests_per_tenant.map_or(half(self.max_concurrent_requests), |n| n as usize),
            waiting: self.max_waiting_submits as usize,
            waiting_per_tenant: self.max_waiting_per_tenant.map_or(half(self.max_waiting_submits), |n| n as usize),
            waiting_per_client: self.max_waiting_per_client as usize,
        }
    }

    pub fn limits(&self) -> Limits {
        Limits {
            max_actions: self.max_actions as usize,
            max_message_bytes: self.max_message_bytes as usize,
            default_deadline: self.default_deadline,
            max_deadline: self.max_deadline,
            allow_inline_credentials: self.inline_credentials == InlineCredentials::Sealed,
            sealing_key: match self.inline_credentials {
                InlineCredentials::Sealed => self.workers_public_key.clone(),
                InlineCredentials::Off => None,
            },
            raw_policy: self.raw_policy.clone(),
            allow_sim: self.allow_sim,
            ad_hoc: self.ad_hoc_targets.clone(),
            firmware_update: self.allow_firmware_update.clone(),
            ..Limits::default()
        }
    }

    pub fn stream_settings(&self) -> StreamSettings {
        StreamSettings {
            replicas: self.process.topology.replicas as usize,
            dedupe_window: self.dedupe_window,
            events_max_age: self.events_max_age,
            status_max_age: self.status_max_age,
            // Room for the job envelope around the largest accepted batch.
            max_message_bytes: (self.max_message_bytes as i32).saturating_add(64 * 1024),
            audit_max_age: self.audit_max_age,
            max_queued_per_bmc: i64::from(self.max_queued_per_bmc),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_default_to_9090() {
        if std::env::var_os("BMCFLEET_METRICS_ADDR").is_some() {
            return;
        }
        let c = Config::try_parse_from(["g"]).unwrap();
        assert_eq!(c.process.metrics.addr.0, Some("0.0.0.0:9090".parse().unwrap()));
    }

    #[test]
    fn boolish_flags() {
        let c = Config::try_parse_from(["g", "--allow-sim", "1"]).unwrap();
        assert!(c.allow_sim);
        assert!(Config::try_parse_from(["g", "--allow-sim", "maybe"]).is_err());
    }

    #[test]
    fn inline_credentials_are_off_unless_sealed_to_a_valid_key() {
        let c = Config::try_parse_from(["g"]).unwrap();
        assert_eq!(c.inline_credentials, InlineCredentials::Off);
        assert!(!c.limits().allow_inline_credentials && c.limits().sealing_key.is_none());
        // sealed needs the workers' public key, in the right format.
        assert!(Config::try_parse_from(["g", "--inline-credentials", "sealed"]).is_err());
        let (seed, public) = bmcfleet_common::sealing::generate();
        assert!(Config::try_parse_from(["g", "--inline-credentials", "sealed", "--workers-public-key", seed.expose()])
            .is_err());
        assert!(
            Config::try_parse_from(["g", "--inline-credentials", "sealed", "--workers-public-key", "Xnope"]).is_err()
        );
        assert!(Config::try_parse_from(["g", "--inline-credentials", "plain"]).is_err());
        let c =
            Config::try_parse_from(["g", "--inline-credentials", "sealed", "--workers-public-key", &public]).unwrap();
        assert!(c.limits().allow_inline_credentials);
        assert_eq!(c.limits().sealing_key.as_deref(), Some(public.as_str()));
    }

    #[test]
    fn firmware_update_flag() {
        use bmcfleet_schema::FirmwareUpdatePolicy;
        assert_eq!(
            Config::try_parse_from(["g"]).unwrap().limits().firmware_update,
            FirmwareUpdatePolicy::Off,
            "off by default"
        );
        assert_eq!(
            Config::try_parse_from(["g", "--allow-firmware-update"]).unwrap().allow_firmware_update,
            FirmwareUpdatePolicy::All,
            "a bare flag"
        );
        let some = Config::try_parse_from(["g", "--allow-firmware-update=t1,t2"]).unwrap().allow_firmware_update;
        assert!(some.check("t2").is_ok() && some.check("t3").is_err());
        assert!(Config::try_parse_from(["g", "--allow-firmware-update=Not_A_Tenant"]).is_err());
    }

    #[test]
    fn raw_policy_flag() {
        assert_eq!(Config::try_parse_from(["g"]).unwrap().raw_policy, RawPolicy::default());
        assert_eq!(Config::try_parse_from(["g", "--raw-policy", "off"]).unwrap().raw_policy, RawPolicy::off());
        assert!(Config::try_parse_from(["g", "--raw-policy", "allow everything"]).is_err());
        let c = Config::try_parse_from(["g", "--raw-policy", "deny ipmi:netfn=0x2c,cmd=0x01; allow ipmi:*"]).unwrap();
        assert!(c.raw_policy.check(bmcfleet_schema::raw_policy::RawTarget::Ipmi { netfn: 0x2c, cmd: 0x01 }).is_err());
    }

    #[test]
    fn flags_are_checked_against_each_other() {
        let c = Config::try_parse_from(["g", "--default-deadline", "3h", "--max-deadline", "1h"]).unwrap();
        let e = c.validate().unwrap_err();
        assert_eq!(e.kind(), clap::error::ErrorKind::ArgumentConflict);
        let e = e.to_string();
        assert!(e.contains("--default-deadline (3h) must not exceed --max-deadline (1h)"), "{e}");
        Config::try_parse_from(["g", "--default-deadline", "1h", "--max-deadline", "1h"]).unwrap().validate().unwrap();
        Config::try_parse_from(["g"]).unwrap().validate().unwrap();
    }

    #[test]
    fn durations_need_units() {
        assert!(Config::try_parse_from(["g", "--max-wait", "30"]).is_err());
        assert_eq!(Config::try_parse_from(["g", "--max-wait", "30s"]).unwrap().max_wait, Duration::from_secs(30));
        assert!(Config::try_parse_from(["g", "--service-prefix", "a..b"]).is_err());
    }
}
