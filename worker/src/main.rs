//! `bmc-worker`: parse configuration, then hand over to [`bmcfleet_worker::run`].

use bmcfleet_worker::Config;
use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let config = Config::parse();
    bmcfleet_common::runtime::init_logging(&config.log).map_err(anyhow::Error::msg)?;
    bmcfleet_worker::run(config, bmcfleet_common::runtime::shutdown_signal()).await
}
