//! Argument groups shared by the binaries. Every flag has an `env` twin
//! parsed by the same value parser, so `BMCFLEET_X=15` fails exactly like
//! `--x 15` when a duration needs a unit.

use bmcfleet_schema::{Secret, Subjects};
use clap::Args;
use std::path::PathBuf;
use std::time::Duration;

/// Parse a duration that must carry a unit (`15s`, `250ms`).
pub fn duration(s: &str) -> Result<Duration, String> {
    bmcfleet_schema::duration::parse(s)
}

/// Parse a duration that must be positive.
pub fn positive_duration(s: &str) -> Result<Duration, String> {
    let d = duration(s)?;
    if d.is_zero() {
        return Err("must be greater than zero".into());
    }
    Ok(d)
}

/// Parse a NATS server URL (or a comma-separated list of them).
pub fn nats_url(s: &str) -> Result<String, String> {
    if s.trim().is_empty() {
        return Err("empty NATS URL".into());
    }
    for part in s.split(',') {
        let part = part.trim();
        let rest = part
            .split_once("://")
            .map(|(scheme, rest)| {
                if matches!(scheme, "nats" | "tls" | "ws" | "wss") {
                    Ok(rest)
                } else {
                    Err(format!("`{part}`: scheme must be nats://, tls://, ws:// or wss://"))
                }
            })
            .unwrap_or(Ok(part))?;
        let hostport = rest.rsplit('@').next().unwrap_or(rest);
        if hostport.is_empty() || hostport.contains(char::is_whitespace) {
            return Err(format!("`{part}` is not a server address"));
        }
        if let Some((_, port)) = hostport.rsplit_once(':') {
            if !hostport.ends_with(']') && port.parse::<u16>().is_err() {
                return Err(format!("`{part}`: port `{port}` is not a number"));
            }
        }
    }
    Ok(s.to_owned())
}

/// A secret from a flag or environment variable.
pub fn secret(s: &str) -> Result<Secret, String> {
    Ok(Secret::new(s))
}

/// Token-safe names (subject prefix, stream stem).
pub fn token(s: &str) -> Result<String, String> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-') {
        return Err(format!("`{s}` must be non-empty and use only [A-Za-z0-9_-]"));
    }
    Ok(s.to_owned())
}

/// How to reach NATS.
#[derive(Args, Debug, Clone)]
pub struct NatsArgs {
    /// NATS server URL(s), comma-separated.
    #[arg(long = "nats-url", env = "BMCFLEET_NATS_URL", default_value = "nats://127.0.0.1:4222", value_parser = nats_url)]
    pub url: String,
    /// NATS credentials file (JWT + nkey seed).
    #[arg(long = "nats-creds", env = "BMCFLEET_NATS_CREDS")]
    pub creds: Option<PathBuf>,
    /// NATS user name (with --nats-password).
    #[arg(long = "nats-user", env = "BMCFLEET_NATS_USER", requires = "password")]
    pub user: Option<String>,
    /// NATS password (with --nats-user).
    #[arg(long = "nats-password", env = "BMCFLEET_NATS_PASSWORD", value_parser = secret, requires = "user", hide_env_values = true)]
    pub password: Option<Secret>,
    /// CA certificate (PEM) to verify the NATS server; implies TLS.
    #[arg(long = "nats-tls-ca", env = "BMCFLEET_NATS_TLS_CA")]
    pub tls_ca: Option<PathBuf>,
    /// Client certificate (PEM) for mutual TLS (with --nats-tls-key).
    #[arg(long = "nats-tls-cert", env = "BMCFLEET_NATS_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// Client key (PEM) for mutual TLS (with --nats-tls-cert).
    #[arg(long = "nats-tls-key", env = "BMCFLEET_NATS_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Time allowed to reach NATS at start before giving up.
    #[arg(long = "nats-connect-timeout", env = "BMCFLEET_NATS_CONNECT_TIMEOUT", default_value = "10s", value_parser = positive_duration)]
    pub connect_timeout: Duration,
}

/// Subject/stream layout; must be identical on gateway and workers.
#[derive(Args, Debug, Clone)]
pub struct TopologyArgs {
    /// Subject prefix (`<prefix>.jobs.…`, `<prefix>.events.…`).
    #[arg(long, env = "BMCFLEET_SUBJECT_PREFIX", default_value = "bmc", value_parser = token)]
    pub subject_prefix: String,
    /// Stem of stream and bucket names (`<stem>_JOBS`, …).
    #[arg(long, env = "BMCFLEET_STREAM", default_value = "BMCFLEET", value_parser = token)]
    pub stream: String,
    /// Number of job partitions (the unit of worker ownership). Changing it
    /// on a live deployment needs the resize procedure in the README.
    #[arg(long, env = "BMCFLEET_PARTITIONS", default_value_t = 16, value_parser = clap::value_parser!(u16).range(1..=4096))]
    pub partitions: u16,
    /// JetStream replicas for streams and buckets (1 or 3 in a cluster).
    #[arg(long, env = "BMCFLEET_REPLICAS", default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=5))]
    pub replicas: u8,
}

impl TopologyArgs {
    pub fn subjects(&self) -> Subjects {
        Subjects::new(self.subject_prefix.clone(), self.stream.clone(), self.partitions)
    }
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    Pretty,
    Json,
}

/// Logging.
#[derive(Args, Debug, Clone)]
pub struct LogArgs {
    /// Log format.
    #[arg(long, env = "BMCFLEET_LOG_FORMAT", value_enum, default_value = "pretty")]
    pub log_format: LogFormat,
    /// Log filter (tracing env-filter syntax, e.g. `info,bmcfleet_worker=debug`).
    #[arg(long, env = "BMCFLEET_LOG", default_value = "info")]
    pub log: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser, Debug)]
    struct T {
        #[command(flatten)]
        nats: NatsArgs,
        #[command(flatten)]
        topo: TopologyArgs,
    }

    #[test]
    fn parsers() {
        assert!(duration("15").is_err());
        assert!(positive_duration("0s").is_err());
        assert!(nats_url("nats://127.0.0.1:4222").is_ok());
        assert!(nats_url("127.0.0.1:4222,nats://b:4222").is_ok());
        assert!(nats_url("http://x").is_err());
        assert!(nats_url("nats://x:port").is_err());
        assert!(token("a.b").is_err());
    }

    #[test]
    fn user_needs_password() {
        assert!(T::try_parse_from(["t", "--nats-user", "u"]).is_err());
        let t = T::try_parse_from(["t", "--nats-user", "u", "--nats-password", "p", "--partitions", "8"]).unwrap();
        assert_eq!(format!("{:?}", t.nats.password), "Some([redacted])");
        assert!(T::try_parse_from(["t", "--partitions", "0"]).is_err());
    }
}
