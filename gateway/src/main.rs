//! `bmc-gateway`: parse configuration, then hand over to [`bmcfleet_gateway::run`].

use bmcfleet_gateway::Config;
use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let config = Config::parse();
    bmcfleet_common::runtime::init_logging(&config.log).map_err(anyhow::Error::msg)?;
    bmcfleet_gateway::run(config, bmcfleet_common::runtime::shutdown_signal()).await
}
