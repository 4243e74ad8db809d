//! Gateway configuration: every flag has a `BMCFLEET_*` environment twin.

use bmcfleet_common::config::{duration, positive_duration, LogArgs, MetricsArgs, NatsArgs, OtelArgs, TopologyArgs};
use bmcfleet_common::streams::StreamSettings;
use bmcfleet_schema::Limits;
use clap::builder::BoolishValueParser;
use clap::Parser;
use std::time::Duration;

/// Admits action batches from producers and queues them per BMC on NATS JetStream.
#[derive(Parser, Debug, Clone)]
#[command(name = "bmc-gateway", version)]
pub struct Config {
    #[command(flatten)]
    pub nats: NatsArgs,
    #[command(flatten)]
    pub topology: TopologyArgs,
    #[command(flatten)]
    pub log: LogArgs,
    #[command(flatten)]
    pub otel: OtelArgs,
    #[command(flatten)]
    pub metrics: MetricsArgs,

    /// Subject prefix of the service endpoints (`<prefix>.submit`, `.status`, `.cancel`).
    #[arg(long, env = "BMCFLEET_SERVICE_PREFIX", default_value = "bmcfleet", value_parser = service_prefix)]
    pub service_prefix: String,
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
    /// Accept inline BMC credentials (otherwise only `{"ref": name}`).
    #[arg(long, env = "BMCFLEET_ALLOW_INLINE_CREDENTIALS", default_value = "true", value_parser = BoolishValueParser::new(), action = clap::ArgAction::Set)]
    pub allow_inline_credentials: bool,
    /// Accept the `sim` protocol (test and demo deployments only).
    #[arg(long, env = "BMCFLEET_ALLOW_SIM", default_value = "false", value_parser = BoolishValueParser::new(), action = clap::ArgAction::Set)]
    pub allow_sim: bool,
    /// JetStream duplicate window for batch ids.
    #[arg(long, env = "BMCFLEET_DEDUPE_WINDOW", default_value = "10m", value_parser = positive_duration)]
    pub dedupe_window: Duration,
    /// How long events are kept.
    #[arg(long, env = "BMCFLEET_EVENTS_MAX_AGE", default_value = "24h", value_parser = positive_duration)]
    pub events_max_age: Duration,
    /// How long batch status records are kept (also how long a resubmitted id stays a no-op).
    #[arg(long, env = "BMCFLEET_STATUS_MAX_AGE", default_value = "7d", value_parser = positive_duration)]
    pub status_max_age: Duration,
    /// Longest time a waiting submit is held open.
    #[arg(long, env = "BMCFLEET_MAX_WAIT", default_value = "15m", value_parser = duration)]
    pub max_wait: Duration,
    /// Requests handled at once.
    #[arg(long, env = "BMCFLEET_MAX_CONCURRENT_REQUESTS", default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_concurrent_requests: u32,
}

fn service_prefix(s: &str) -> Result<String, String> {
    let ok = !s.is_empty()
        && s.split('.').all(|t| !t.is_empty() && t.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-'));
    if ok {
        Ok(s.to_owned())
    } else {
        Err(format!("`{s}` must be dot-separated tokens of [A-Za-z0-9_-]"))
    }
}

impl Config {
    pub fn limits(&self) -> Limits {
        Limits {
            max_actions: self.max_actions as usize,
            max_message_bytes: self.max_message_bytes as usize,
            default_deadline: self.default_deadline,
            max_deadline: self.max_deadline,
            allow_inline_credentials: self.allow_inline_credentials,
            allow_sim: self.allow_sim,
            ..Limits::default()
        }
    }

    pub fn stream_settings(&self) -> StreamSettings {
        StreamSettings {
            replicas: self.topology.replicas as usize,
            dedupe_window: self.dedupe_window,
            events_max_age: self.events_max_age,
            status_max_age: self.status_max_age,
            // Room for the job envelope around the largest accepted batch.
            max_message_bytes: (self.max_message_bytes as i32).saturating_add(64 * 1024),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boolish_flags() {
        let c = Config::try_parse_from(["g", "--allow-sim", "1", "--allow-inline-credentials", "no"]).unwrap();
        assert!(c.allow_sim);
        assert!(!c.allow_inline_credentials);
        assert!(Config::try_parse_from(["g", "--allow-sim", "maybe"]).is_err());
    }

    #[test]
    fn durations_need_units() {
        assert!(Config::try_parse_from(["g", "--max-wait", "30"]).is_err());
        assert_eq!(Config::try_parse_from(["g", "--max-wait", "30s"]).unwrap().max_wait, Duration::from_secs(30));
        assert!(Config::try_parse_from(["g", "--service-prefix", "a..b"]).is_err());
    }
}
