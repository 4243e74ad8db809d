//! `bmc-gateway`: parse configuration, then hand over to [`bmcfleet_gateway::run`].

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    bmcfleet_common::runtime::serve::<bmcfleet_gateway::Config, _, _>("bmc-gateway", bmcfleet_gateway::run).await
}
