//! `bmc-ipmi-fleet`: N simulated IPMI 2.0 / RMCP+ BMCs on loopback UDP
//! ports, for benchmarks and demos (`bmcfleet_testing::ipmi::lan`).
//!
//! Prints `ready <first_port> <count>` on stdout once every socket is bound
//! (ports are `first_port..first_port+count` with `--base-port`; without
//! it the OS picks them and the full list goes to stderr), then serves until
//! SIGINT or SIGTERM.

use bmcfleet_testing::ipmi::lan::{self, LanConfig, LanFleet};
use clap::Parser;
use std::io::Write;
use std::net::IpAddr;
use std::time::Duration;

#[derive(Debug, Parser)]
#[command(name = "bmc-ipmi-fleet", about = "Simulated IPMI 2.0 / RMCP+ BMCs on loopback UDP ports")]
struct Args {
    /// Number of BMCs.
    #[arg(long, env = "BMC_IPMI_FLEET_COUNT", default_value_t = 1)]
    count: usize,
    /// First UDP port (BMC i listens on base+i); OS-chosen ports if unset.
    #[arg(long, env = "BMC_IPMI_FLEET_BASE_PORT")]
    base_port: Option<u16>,
    /// Address to listen on.
    #[arg(long, env = "BMC_IPMI_FLEET_IP", default_value = "127.0.0.1")]
    ip: IpAddr,
    /// Delay before every reply (e.g. 20ms).
    #[arg(long, env = "BMC_IPMI_FLEET_LATENCY", default_value = "0s", value_parser = humantime::parse_duration)]
    latency: Duration,
    /// Offered cipher suites (of 1, 2, 3, 17).
    #[arg(long, env = "BMC_IPMI_FLEET_SUITES", value_delimiter = ',', default_value = "3,17")]
    suites: Vec<u8>,
    /// User name of the account in slot 2.
    #[arg(long, env = "BMC_IPMI_FLEET_USER", default_value = "admin")]
    user: String,
    /// Its password (at most 20 bytes).
    #[arg(long, env = "BMC_IPMI_FLEET_PASSWORD", default_value = "password", hide_env_values = true)]
    password: String,
    /// Its privilege limit: 1 callback, 2 user, 3 operator, 4 administrator.
    #[arg(long, env = "BMC_IPMI_FLEET_PRIVILEGE", default_value_t = 4, value_parser = clap::value_parser!(u8).range(1..=4))]
    privilege: u8,
    /// Sessions each BMC holds at once.
    #[arg(long, env = "BMC_IPMI_FLEET_SESSION_LIMIT", default_value_t = 32)]
    session_limit: usize,
    /// Idle time after which a session is gone (e.g. 60s).
    #[arg(long, env = "BMC_IPMI_FLEET_IDLE_TIMEOUT", default_value = "60s", value_parser = humantime::parse_duration)]
    idle_timeout: Duration,
    /// Worker threads serving the sockets.
    #[arg(long, env = "BMC_IPMI_FLEET_THREADS", default_value_t = 2)]
    threads: usize,
    /// Host console output per BMC (bytes/s, numbered lines), written
    /// every 100 ms while a console holds the BMC's SOL and its backlog is
    /// under 4 KiB (0: none).
    #[arg(long, env = "BMC_IPMI_FLEET_SOL_OUTPUT", default_value_t = 0)]
    sol_output: u64,
}

/// Writes `per_tick` bytes of numbered lines to every active SOL console each 100 ms.
async fn host_output(fleet: &LanFleet, per_tick: usize) {
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    let mut line = vec![0u64; fleet.len()];
    // Lines cut at exactly `per_tick` bytes: the rest goes first next time.
    let mut rest: Vec<Vec<u8>> = vec![Vec::new(); fleet.len()];
    loop {
        tick.tick().await;
        for (i, bmc) in fleet.bmcs().iter().enumerate() {
            if !bmc.sol_active() || bmc.sol_backlog() >= 4096 {
                continue;
            }
            let mut out = std::mem::take(&mut rest[i]);
            while out.len() < per_tick {
                out.extend_from_slice(format!("bmc {i} line {}\r\n", line[i]).as_bytes());
                line[i] += 1;
            }
            rest[i] = out.split_off(per_tick);
            bmc.sol_write(&out);
        }
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    anyhow::ensure!(args.password.len() <= 20, "the password must be at most 20 bytes");
    let mut config = LanConfig {
        count: args.count,
        ip: args.ip,
        base_port: args.base_port,
        latency: args.latency,
        cipher_suites: args.suites,
        session_limit: args.session_limit,
        idle_timeout: args.idle_timeout,
        worker_threads: args.threads,
        ..LanConfig::default()
    };
    config.state.users[1] = lan::user(&args.user, &args.password, args.privilege);
    // Started (and, when a port is taken, dropped) off the async context:
    // the fleet owns a runtime, which may not be dropped inside another.
    let fleet = std::thread::spawn(move || LanFleet::start(config))
        .join()
        .map_err(|_| anyhow::anyhow!("starting the BMCs panicked"))?
        .map_err(|e| anyhow::anyhow!("binding the BMCs' sockets: {e}"))?;
    let first = fleet.bmcs().first().map_or(0, |b| b.port());
    if args.base_port.is_none() && fleet.len() > 1 {
        let ports: Vec<String> = fleet.bmcs().iter().map(|b| b.port().to_string()).collect();
        eprintln!("ports {}", ports.join(","));
    }
    let mut out = std::io::stdout().lock();
    writeln!(out, "ready {first} {}", fleet.len())?;
    out.flush()?;
    drop(out);

    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let per_tick = (args.sol_output / 10) as usize;
    let output = async {
        if per_tick == 0 {
            std::future::pending::<()>().await
        } else {
            host_output(&fleet, per_tick).await
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
        _ = output => {}
    }
    drop(fleet);
    Ok(())
}
