//! Shared helpers for the integration tests.
#![allow(dead_code)]

use bmcfleet_ipmi::{IpmiConfig, IpmiConnector, IpmiSession, RmcpConfig, RmcpTransport};
use bmcfleet_provider::{Ctx, Power};
use bmcfleet_schema::PowerOp;
use bmcfleet_testing::ipmi::IpmiSim;
use std::time::Duration;

/// Short retransmit timers so fault tests finish quickly; loopback answers
/// in well under a millisecond.
pub fn connector() -> IpmiConnector {
    connector_with_keepalive(Duration::from_secs(10))
}

/// [`connector`] with sessions that send a keep-alive after `idle`.
pub fn connector_with_keepalive(idle: Duration) -> IpmiConnector {
    IpmiConnector::new(IpmiConfig {
        rmcp: RmcpConfig {
            attempt_timeout: Duration::from_millis(300),
            retries: 2,
            keepalive_interval: idle,
            ..Default::default()
        }
        .into(),
        ..Default::default()
    })
}

pub fn ctx() -> Ctx {
    Ctx::with_timeout(Duration::from_secs(20))
}

pub fn start_sim() -> IpmiSim {
    IpmiSim::start().expect("start ipmi_sim (apt-get install openipmi)")
}

pub async fn open(sim: &IpmiSim) -> IpmiSession<RmcpTransport> {
    connector().open(&ctx(), &sim.target(), &sim.credentials()).await.expect("open an IPMI session")
}

/// [`open`] a session and power the machine on (`ipmi_sim` starts off).
pub async fn open_powered_on(sim: &IpmiSim) -> IpmiSession<RmcpTransport> {
    let mut session = open(sim).await;
    Power::power(&mut session, &ctx(), PowerOp::On).await.expect("power on");
    session
}

/// One row of `ipmitool user list`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolUser {
    pub id: u8,
    pub name: String,
    pub ipmi_msg: bool,
    pub privilege: String,
}

/// Parses `ipmitool user list 1`: `ID Name Callin LinkAuth IPMIMsg Priv`.
pub fn ipmitool_users(sim: &IpmiSim) -> Vec<ToolUser> {
    let out = sim.ipmitool(&["user", "list", "1"]).expect("ipmitool user list");
    out.lines()
        .skip(1)
        .filter_map(|line| {
            let id: u8 = line.get(..4)?.trim().parse().ok()?;
            let name = line.get(4..21)?.trim().to_string();
            let cols: Vec<&str> = line.get(21..)?.split_whitespace().collect();
            Some(ToolUser {
                id,
                name,
                ipmi_msg: cols.get(2) == Some(&"true"),
                privilege: cols.get(3..).map(|c| c.join(" ")).unwrap_or_default(),
            })
        })
        .collect()
}

/// The value of `Key : value` in ipmitool's output.
pub fn field(output: &str, key: &str) -> Option<String> {
    output.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        (k.trim() == key).then(|| v.trim().to_string())
    })
}
