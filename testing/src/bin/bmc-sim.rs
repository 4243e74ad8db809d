//! `bmc-sim`: run the simulated BMC fleet as a server (demo and manual tests).

use anyhow::Context;
use bmcfleet_testing::{SimConfig, SimServer};
use clap::Parser;
use std::net::SocketAddr;
use std::time::Duration;

/// A deterministic simulated BMC fleet for bmcfleet demos and tests.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// Address to listen on (loopback).
    #[arg(long, env = "BMC_SIM_LISTEN", default_value = "127.0.0.1:7623")]
    listen: SocketAddr,
    /// Time every action takes, e.g. `5ms`.
    #[arg(long, env = "BMC_SIM_LATENCY", default_value = "0s", value_parser = parse_duration)]
    latency: Duration,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    Ok(bmcfleet_schema::duration::parse(s)?)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let server = SimServer::start(SimConfig { listen: args.listen, latency: args.latency, ..SimConfig::default() })
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    println!("bmc-sim listening on {}", server.addr());
    let mut seen = 0;
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => break,
            _ = tick.tick() => {
                let log = server.log();
                for e in &log[seen..] {
                    println!("bmc-sim: {} {} ok={}", e.bmc, e.action, e.ok);
                }
                seen = log.len();
            }
        }
    }
    Ok(())
}
