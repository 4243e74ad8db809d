//! `bmc-worker`: parse configuration, then hand over to [`bmcfleet_worker::run`].

use bmcfleet_common::runtime;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let (config, telemetry) = runtime::start::<bmcfleet_worker::Config>("bmc-worker").map_err(anyhow::Error::msg)?;
    let result = bmcfleet_worker::run(config, runtime::shutdown_signal()).await;
    telemetry.shutdown(std::time::Duration::from_secs(5)).await;
    result
}
