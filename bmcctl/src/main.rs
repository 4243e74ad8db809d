//! `bmcctl`: parse, set up telemetry, run the command (see the library).

use bmcfleet_common::config::{LogArgs, LogFormat};
use clap::Parser;
use std::process::ExitCode;
use std::time::Duration;
use tracing::Instrument;

#[tokio::main]
async fn main() -> ExitCode {
    let cli = bmcctl::cli::Cli::parse();
    // Spans are exported only when an OTLP endpoint is configured; logs go to stderr at `warn`.
    let log = LogArgs { log_format: LogFormat::Pretty, log: "warn".into() };
    let telemetry = match bmcfleet_common::telemetry::init(&log, &cli.otel, "bmcctl") {
        Ok(t) => t,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let span = tracing::info_span!("bmcctl.request", otel.kind = "client");
    let result = bmcctl::run(cli).instrument(span).await;
    telemetry.shutdown(Duration::from_secs(5)).await;
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {}", bmcctl::output::error::line(&e));
            ExitCode::from(if e.downcast_ref::<bmcctl::Usage>().is_some() { 2 } else { 3 })
        }
    }
}
