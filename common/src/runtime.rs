//! Logging, shutdown and clocks.

use crate::config::{LogArgs, LogFormat, ServiceConfig};
use crate::telemetry::Telemetry;
use std::time::{SystemTime, UNIX_EPOCH};

/// Install the global tracing subscriber (call once, from `main`).
pub fn init_logging(args: &LogArgs) -> Result<(), StartError> {
    let filter = crate::telemetry::log_filter(args)?;
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    let result = match args.log_format {
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
        LogFormat::Pretty => builder.compact().try_init(),
    };
    result.map_err(|e| StartError::with_source(crate::telemetry::ErrorKind::Subscriber, "", e))
}

/// A binary's start: parse the flags and environment (a bad value, or a
/// failed cross-flag check, prints a clear message and exits with code 2,
/// like every clap error), then install logging and tracing for `service`.
pub fn start<C: ServiceConfig>(service: &str) -> Result<(C, Telemetry), StartError> {
    let config = C::parse();
    if let Err(e) = config.validate() {
        e.exit();
    }
    let process = config.process();
    let telemetry = crate::telemetry::init(&process.log, &process.otel, service)?;
    Ok((config, telemetry))
}

/// Logging or telemetry could not be started (`start`, `init_logging`).
pub type StartError = crate::telemetry::Error;

/// What a service's `run` is handed to know when to stop: SIGINT or SIGTERM.
pub type Shutdown = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

/// The whole `main` of a service binary: [`start`], `run` until SIGINT or
/// SIGTERM, then flush telemetry (at most 5 s).
pub async fn serve<C, E, Fut>(service: &str, run: impl FnOnce(C, Shutdown) -> Fut) -> Result<(), E>
where
    C: ServiceConfig,
    E: From<StartError>,
    Fut: std::future::Future<Output = Result<(), E>>,
{
    let (config, telemetry) = start::<C>(service)?;
    let result = run(config, Box::pin(shutdown_signal())).await;
    telemetry.shutdown(std::time::Duration::from_secs(5)).await;
    result
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

/// The open-file limits after [`raise_fd_limit`]: (soft before, soft now, hard).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FdLimit {
    pub before: u64,
    pub now: u64,
    pub hard: u64,
}

/// Raise this process's soft limit on open files to its hard limit (every
/// BMC session and connection holds a descriptor).
pub fn raise_fd_limit() -> std::io::Result<FdLimit> {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let lim = getrlimit(Resource::Nofile);
    let (cur, max) = (lim.current, lim.maximum);
    let before = cur.unwrap_or(u64::MAX);
    if cur.is_some() && cur != max {
        setrlimit(Resource::Nofile, Rlimit { current: max, maximum: max })?;
    }
    let now = getrlimit(Resource::Nofile);
    Ok(FdLimit { before, now: now.current.unwrap_or(u64::MAX), hard: now.maximum.unwrap_or(u64::MAX) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_soft_open_files_limit_is_raised_to_the_hard_one() {
        let l = raise_fd_limit().unwrap();
        assert_eq!(l.now, l.hard);
        assert!(l.now >= l.before);
    }
}
