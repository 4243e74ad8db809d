//! Argument groups shared by the binaries. Every flag has an `env` twin
//! parsed by the same value parser, so `BMCFLEET_X=15` fails exactly like
//! `--x 15` when a duration needs a unit.

use bmcfleet_schema::{Secret, Subjects};
use clap::Args;
use std::path::PathBuf;
use std::time::Duration;

/// Parse a duration that must carry a unit (`15s`, `250ms`).
pub fn duration(s: &str) -> Result<Duration, String> {
    bmcfleet_schema::duration::parse(s).map_err(String::from)
}

/// Parse a duration that must be positive.
pub fn positive_duration(s: &str) -> Result<Duration, String> {
    let d = duration(s)?;
    if d.is_zero() {
        return Err("must be greater than zero".into());
    }
    Ok(d)
}

/// Where the metrics endpoint listens; `None` when turned off.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MetricsAddr(pub Option<std::net::SocketAddr>);

/// A socket address, or `off` for no endpoint.
pub fn metrics_addr(s: &str) -> Result<MetricsAddr, String> {
    match s.trim() {
        "off" | "none" => Ok(MetricsAddr(None)),
        a => a
            .parse()
            .map(|a| MetricsAddr(Some(a)))
            .map_err(|e| format!("`{a}`: {e}; expected IP:PORT (e.g. 0.0.0.0:9090) or `off`")),
    }
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

/// The flags every long-running service (gateway, worker) shares: NATS,
/// topology, logging, tracing and metrics.
#[derive(Args, Debug, Clone)]
pub struct ProcessArgs {
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
}

/// A service's whole configuration: parsed by clap, then cross-checked.
pub trait ServiceConfig: clap::Parser {
    /// Checks across flags (clap checks each flag alone): a [`conflict`]
    /// whose message names the flags.
    fn validate(&self) -> Result<(), clap::Error>;
    fn process(&self) -> &ProcessArgs;
}

/// Flags of `C` that contradict each other, reported as clap reports its
/// own errors (`ArgumentConflict`: the usage, exit code 2).
pub fn conflict<C: clap::CommandFactory>(message: impl std::fmt::Display) -> clap::Error {
    C::command().error(clap::error::ErrorKind::ArgumentConflict, message)
}

/// Subject/stream layout; must be identical on gateway, workers and bmcctl.
/// (`global`: bmcctl accepts them after a subcommand too.)
#[derive(Args, Debug, Clone)]
pub struct TopologyArgs {
    /// Subject prefix (`<prefix>.jobs.…`, `<prefix>.events.…`).
    #[arg(long, env = "BMCFLEET_SUBJECT_PREFIX", default_value = "bmc", value_parser = token, global = true)]
    pub subject_prefix: String,
    /// Stem of stream and bucket names (`<stem>_JOBS`, …).
    #[arg(long, env = "BMCFLEET_STREAM", default_value = "BMCFLEET", value_parser = token, global = true)]
    pub stream: String,
    /// Number of job partitions (the unit of worker ownership). Changing it
    /// on a live deployment needs the resize procedure in docs/PRODUCTION.md.
    #[arg(long, env = "BMCFLEET_PARTITIONS", default_value_t = 16, value_parser = clap::value_parser!(u16).range(1..=4096), global = true)]
    pub partitions: u16,
    /// JetStream replicas for streams and buckets (1 or 3 in a cluster).
    #[arg(long, env = "BMCFLEET_REPLICAS", default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=5), global = true)]
    pub replicas: u8,
}

impl TopologyArgs {
    pub fn subjects(&self) -> Subjects {
        Subjects::new(self.subject_prefix.clone(), self.stream.clone(), self.partitions)
    }
}

/// Where producers reach the gateway's micro service (gateway and bmcctl).
#[derive(Args, Debug, Clone)]
pub struct ServiceArgs {
    /// Subject prefix of the service endpoints (`<prefix>.submit`, `.status`, `.cancel`).
    #[arg(long, env = "BMCFLEET_SERVICE_PREFIX", default_value = "bmcfleet", value_parser = service_prefix, global = true)]
    pub service_prefix: String,
}

/// A service prefix: dot-separated tokens of `[A-Za-z0-9_-]`.
pub fn service_prefix(s: &str) -> Result<String, String> {
    let ok = !s.is_empty()
        && s.split('.')
            .all(|t| !t.is_empty() && t.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-'));
    if ok {
        Ok(s.to_owned())
    } else {
        Err(format!("`{s}` must be dot-separated tokens of [A-Za-z0-9_-]"))
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

/// Wire protocol of the OTLP trace exporter (the values of `OTEL_EXPORTER_OTLP_PROTOCOL`).
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum OtlpProtocol {
    /// OTLP over gRPC (usually port 4317).
    #[value(name = "grpc")]
    Grpc,
    /// OTLP over HTTP with protobuf bodies (usually port 4318, `/v1/traces`).
    #[value(name = "http/protobuf")]
    HttpProtobuf,
}

/// An OTLP endpoint: an absolute `http://` or `https://` URL.
/// Empty means "not set" (export off), as OpenTelemetry SDKs treat it.
pub fn otlp_endpoint(s: &str) -> Result<String, String> {
    let s = s.trim();
    if s.is_empty() {
        return Ok(String::new());
    }
    let rest = s
        .strip_prefix("http://")
        .or_else(|| s.strip_prefix("https://"))
        .ok_or_else(|| format!("`{s}`: an OTLP endpoint is an http:// or https:// URL"))?;
    if rest.is_empty() || rest.starts_with('/') || rest.contains(char::is_whitespace) {
        return Err(format!("`{s}` has no host"));
    }
    Ok(s.to_owned())
}

/// OpenTelemetry trace export (OTLP). Off unless an endpoint is given; the
/// environment variables are the standard OpenTelemetry ones.
#[derive(Args, Debug, Clone)]
pub struct OtelArgs {
    /// OTLP collector endpoint (base URL; `/v1/traces` is appended for http/protobuf). Unset: no export.
    #[arg(long = "otlp-endpoint", env = "OTEL_EXPORTER_OTLP_ENDPOINT", value_parser = otlp_endpoint)]
    pub endpoint: Option<String>,
    /// OTLP protocol.
    #[arg(long = "otlp-protocol", env = "OTEL_EXPORTER_OTLP_PROTOCOL", value_enum, default_value = "http/protobuf")]
    pub protocol: OtlpProtocol,
    /// `service.name` of exported spans (default: the binary's name).
    #[arg(long = "otel-service-name", env = "OTEL_SERVICE_NAME")]
    pub service_name: Option<String>,
    /// Which spans are exported (tracing env-filter syntax; independent of --log).
    #[arg(
        long = "otel-filter",
        env = "BMCFLEET_OTEL_FILTER",
        default_value = "info,bmcfleet_ipmi=debug,bmcfleet_redfish=debug,bmcfleet_amt=debug"
    )]
    pub filter: String,
}

impl Default for OtelArgs {
    fn default() -> Self {
        OtelArgs { endpoint: None, protocol: OtlpProtocol::HttpProtobuf, service_name: None, filter: "info".into() }
    }
}

/// The gateway's default `--metrics-addr`.
pub const GATEWAY_METRICS_ADDR: &str = "0.0.0.0:9090";
/// The worker's default `--metrics-addr`: another port than the gateway's,
/// so a gateway and a worker started with their defaults on one host both
/// serve their metrics (issue 34). A service sets it on its command with
/// [`METRICS_ADDR_ARG`]: `#[command(mut_arg(METRICS_ADDR_ARG, ...))]`.
pub const WORKER_METRICS_ADDR: &str = "0.0.0.0:9091";
/// The id of [`MetricsArgs::addr`], for a service to set its own default.
pub const METRICS_ADDR_ARG: &str = "metrics_addr";

/// The HTTP endpoint serving `/metrics`, `/healthz` and `/readyz`.
#[derive(Args, Debug, Clone)]
pub struct MetricsArgs {
    /// Address of the metrics and health HTTP server (port 0: any free port,
    /// logged at start; `off`: no endpoint). Failing to bind stops the process.
    #[arg(
        id = "metrics_addr",
        long = "metrics-addr",
        env = "BMCFLEET_METRICS_ADDR",
        default_value = GATEWAY_METRICS_ADDR,
        value_parser = metrics_addr
    )]
    pub addr: MetricsAddr,
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
        #[command(flatten)]
        otel: OtelArgs,
        #[command(flatten)]
        metrics: MetricsArgs,
    }

    #[test]
    fn otel_and_metrics() {
        let t = T::try_parse_from(["t"]).unwrap();
        assert!(t.otel.endpoint.is_none(), "export is off by default");
        assert_eq!(t.otel.protocol, OtlpProtocol::HttpProtobuf);
        assert_eq!(t.metrics.addr.0.unwrap().port(), 9090);
        let t = T::try_parse_from([
            "t",
            "--otlp-endpoint",
            "http://127.0.0.1:4317",
            "--otlp-protocol",
            "grpc",
            "--metrics-addr",
            "127.0.0.1:0",
        ])
        .unwrap();
        assert_eq!(t.otel.protocol, OtlpProtocol::Grpc);
        assert_eq!(t.metrics.addr.0.unwrap().port(), 0);
        assert!(T::try_parse_from(["t", "--otlp-endpoint", "127.0.0.1:4317"]).is_err());
        assert!(T::try_parse_from(["t", "--otlp-protocol", "http/json"]).is_err());
        assert!(T::try_parse_from(["t", "--metrics-addr", "9090"]).is_err());
    }

    #[test]
    fn parsers() {
        assert!(duration("15").is_err());
        assert!(positive_duration("0s").is_err());
        assert_eq!(metrics_addr("off").unwrap(), MetricsAddr(None));
        assert_eq!(metrics_addr("127.0.0.1:0").unwrap(), MetricsAddr(Some("127.0.0.1:0".parse().unwrap())));
        assert!(metrics_addr("localhost:9090").unwrap_err().contains("IP:PORT"));
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
