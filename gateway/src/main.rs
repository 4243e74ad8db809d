//! `bmc-gateway`: parse configuration, then hand over to [`bmcfleet_gateway::run`].

use bmcfleet_common::runtime;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let (config, telemetry) = runtime::start::<bmcfleet_gateway::Config>("bmc-gateway").map_err(anyhow::Error::msg)?;
    let result = bmcfleet_gateway::run(config, runtime::shutdown_signal()).await;
    telemetry.shutdown(std::time::Duration::from_secs(5)).await;
    result
}
