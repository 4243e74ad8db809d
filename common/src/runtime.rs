//! Logging, shutdown and clocks.

use crate::config::{LogArgs, LogFormat, ServiceConfig};
use crate::telemetry::Telemetry;
use std::time::{SystemTime, UNIX_EPOCH};
use tracing_subscriber::EnvFilter;

/// Install the global tracing subscriber (call once, from `main`).
pub fn init_logging(args: &LogArgs) -> Result<(), String> {
    let filter = EnvFilter::try_new(&args.log).map_err(|e| format!("invalid log filter `{}`: {e}", args.log))?;
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    let result = match args.log_format {
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
        LogFormat::Pretty => builder.compact().try_init(),
    };
    result.map_err(|e| e.to_string())
}

/// A binary's start: parse the flags and environment (a bad value, or a
/// failed cross-flag check, prints a clear message and exits with code 2,
/// like every clap error), then install logging and tracing for `service`.
pub fn start<C: ServiceConfig>(service: &str) -> Result<(C, Telemetry), String> {
    let config = C::parse();
    if let Err(e) = config.validate() {
        C::command().error(clap::error::ErrorKind::ArgumentConflict, e).exit();
    }
    let process = config.process();
    let telemetry = crate::telemetry::init(&process.log, &process.otel, service)?;
    Ok((config, telemetry))
}

/// Resolves on SIGINT or SIGTERM.
pub async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// Unix time in milliseconds.
pub fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}
