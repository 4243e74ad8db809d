//! `bmc-gateway`: parse configuration, then hand over to [`bmcfleet_gateway::run`].

use bmcfleet_gateway::Config;
use clap::{CommandFactory, Parser};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let config = Config::parse();
    // Cross-flag checks fail like parse errors: a clear message and exit code 2.
    if let Err(e) = config.validate() {
        Config::command().error(clap::error::ErrorKind::ArgumentConflict, e).exit();
    }
    let telemetry = bmcfleet_common::telemetry::init(&config.log, &config.otel, "bmc-gateway").map_err(anyhow::Error::msg)?;
    let result = bmcfleet_gateway::run(config, bmcfleet_common::runtime::shutdown_signal()).await;
    telemetry.shutdown(std::time::Duration::from_secs(5)).await;
    result
}
