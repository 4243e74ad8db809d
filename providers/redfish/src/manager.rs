//! Manager capabilities: BMC reset (`Manager.Reset`) and the BMC's own
//! network source (`Manager.EthernetInterfaces`: DHCPv4 / static IPv4).

use crate::discovery::ManagerInfo;
use crate::error::{err, unsupported};
use crate::json::{members, str_of};
use crate::session::RedfishSession;
use crate::transport::Resource;
use bmcfleet_provider::{BmcReset, Ctx, NetworkSource, Result};
use bmcfleet_schema::{BmcResetKind, ErrorCode, Host, NetworkSourceOp, StaticIpv4};
use serde_json::{json, Value};
use std::net::Ipv4Addr;

/// Reset type for a BMC reset: warm → GracefulRestart, cold → ForceRestart,
/// each falling back to the other (both reboot the BMC; firmware such as
/// iDRAC offers only GracefulRestart).
pub(crate) fn bmc_reset_type(kind: BmcResetKind, reset: &crate::discovery::ResetAction) -> Result<&'static str> {
    let prefs: &[&'static str] = match kind {
        BmcResetKind::Warm => &["GracefulRestart", "ForceRestart"],
        BmcResetKind::Cold => &["ForceRestart", "GracefulRestart"],
    };
    reset.pick(prefs).ok_or_else(|| {
        unsupported(format!("the BMC allows no restart through Manager.Reset (allows: {})", reset.describe_allowed()))
    })
}

fn ipv4(v: &Value, key: &str) -> Option<Ipv4Addr> {
    str_of(v, key)?.parse().ok()
}

fn first_address(v: &Value, key: &str) -> Option<StaticIpv4> {
    let list = v.get(key)?.as_array()?;
    list.iter().find_map(|a| {
        Some(StaticIpv4 {
            address: ipv4(a, "Address")?,
            netmask: ipv4(a, "SubnetMask")?,
            gateway: ipv4(a, "Gateway").filter(|g| !g.is_unspecified()),
        })
    })
}

/// The network source an EthernetInterface reports.
pub(crate) fn read_source(iface: &Value) -> Result<NetworkSourceOp> {
    let dhcp = iface.get("DHCPv4").and_then(|d| d.get("DHCPEnabled")).and_then(Value::as_bool).or_else(|| {
        let origin = iface.get("IPv4Addresses")?.as_array()?.first()?.get("AddressOrigin")?.as_str()?;
        Some(origin == "DHCP")
    });
    if dhcp == Some(true) {
        return Ok(NetworkSourceOp::Dhcp);
    }
    first_address(iface, "IPv4StaticAddresses")
        .or_else(|| first_address(iface, "IPv4Addresses"))
        .map(NetworkSourceOp::Static)
        .ok_or_else(|| err(ErrorCode::ProtocolError, "the interface reports neither DHCP nor a static IPv4 address"))
}

/// The PATCH that sets `op` on an interface shaped like `iface`.
pub(crate) fn source_body(iface: &Value, op: &NetworkSourceOp) -> Result<Value> {
    let modern = iface.get("DHCPv4").is_some();
    Ok(match op {
        NetworkSourceOp::Get => return Err(err(ErrorCode::Internal, "get is not a change")),
        NetworkSourceOp::Dhcp if modern => json!({"DHCPv4": {"DHCPEnabled": true}}),
        NetworkSourceOp::Dhcp => json!({"IPv4Addresses": [{"AddressOrigin": "DHCP"}]}),
        NetworkSourceOp::Static(s) => {
            let mut addr = json!({"Address": s.address.to_string(), "SubnetMask": s.netmask.to_string()});
            if let Some(g) = s.gateway {
                addr["Gateway"] = json!(g.to_string());
            }
            if iface.get("IPv4StaticAddresses").is_some() || (modern && iface.get("IPv4Addresses").is_none()) {
                json!({"DHCPv4": {"DHCPEnabled": false}, "IPv4StaticAddresses": [addr]})
            } else if modern {
                json!({"DHCPv4": {"DHCPEnabled": false}, "IPv4Addresses": [addr]})
            } else {
                addr["AddressOrigin"] = json!("Static");
                json!({"IPv4Addresses": [addr]})
            }
        }
    })
}

/// The interface that carries `bmc_ip` if any does, else the first enabled
/// one with an IPv4 address, else the first.
pub(crate) fn choose_interface(ifaces: &[Resource], bmc_ip: Option<Ipv4Addr>) -> Option<usize> {
    let carries = |r: &Resource, ip: Ipv4Addr| {
        ["IPv4Addresses", "IPv4StaticAddresses"].iter().any(|k| {
            r.body.get(*k).and_then(Value::as_array).is_some_and(|l| l.iter().any(|a| ipv4(a, "Address") == Some(ip)))
        })
    };
    if let Some(ip) = bmc_ip {
        if let Some(i) = ifaces.iter().position(|r| carries(r, ip)) {
            return Some(i);
        }
    }
    ifaces
        .iter()
        .position(|r| {
            r.body.get("InterfaceEnabled").and_then(Value::as_bool) != Some(false)
                && r.body.get("IPv4Addresses").and_then(Value::as_array).is_some_and(|l| !l.is_empty())
        })
        .or(if ifaces.is_empty() { None } else { Some(0) })
}

impl RedfishSession {
    fn manager(&self, what: &str) -> Result<ManagerInfo> {
        self.service
            .manager
            .clone()
            .ok_or_else(|| unsupported(format!("the BMC exposes no Manager resource: {what} is not available")))
    }

    /// The interface to manage and whether it carries the address we talk to.
    async fn bmc_interface(&mut self, ctx: &Ctx) -> Result<(Resource, bool)> {
        let mgr = self.manager("network source")?;
        let coll = mgr.ethernet_interfaces.ok_or_else(|| {
            unsupported(format!("manager {} exposes no EthernetInterfaces: network source is not available", mgr.path))
        })?;
        let list = self.transport.get_linked(ctx, &coll, "an EthernetInterfaces collection").await?;
        let mut ifaces = Vec::new();
        let start = self.transport.received();
        for m in members(&list.body) {
            match self.transport.get(ctx, &m).await {
                Ok(r) => ifaces.push(r),
                Err(e) if e.code == ErrorCode::TargetNotFound => continue,
                Err(e) => return Err(e),
            }
            self.transport.kept_within(start, &format!("the Ethernet interfaces of {coll}"))?;
        }
        let ip = match &self.bmc_address.host {
            Host::V4(ip) => Some(*ip),
            _ => None,
        };
        let i = choose_interface(&ifaces, ip)
            .ok_or_else(|| unsupported(format!("manager {} lists no Ethernet interface", mgr.path)))?;
        let iface = ifaces.swap_remove(i);
        let carries = ip.is_some_and(|ip| {
            ["IPv4Addresses", "IPv4StaticAddresses"].iter().any(|k| {
                iface
                    .body
                    .get(*k)
                    .and_then(Value::as_array)
                    .is_some_and(|l| l.iter().any(|a| ipv4(a, "Address") == Some(ip)))
            })
        });
        Ok((iface, carries))
    }

    async fn set_source(&mut self, ctx: &Ctx, op: NetworkSourceOp) -> Result<()> {
        let (iface, carries) = self.bmc_interface(ctx).await?;
        let body = source_body(&iface.body, &op)?;
        tracing::info!(bmc = %self.transport.bmc(), interface = %iface.path, source = if matches!(op, NetworkSourceOp::Dhcp) { "dhcp" } else { "static" }, "Changing the BMC network source.");
        let result = self.patch_with_etag(ctx, iface, &body).await;
        if carries {
            // The address this session talks to may be about to change.
            self.needs_reconnect = true;
        }
        result
    }
}

#[async_trait::async_trait]
impl BmcReset for RedfishSession {
    async fn reset_bmc(&mut self, ctx: &Ctx, kind: BmcResetKind) -> Result<()> {
        let mgr = self.manager("BMC reset")?;
        let reset =
            mgr.reset.ok_or_else(|| unsupported(format!("manager {} has no Manager.Reset action", mgr.path)))?;
        let t = bmc_reset_type(kind, &reset)?;
        tracing::info!(bmc = %self.transport.bmc(), reset_type = t, "Sending Manager.Reset.");
        self.transport.post(ctx, &reset.target, &json!({ "ResetType": t })).await?;
        // The BMC reboots: its sessions die with it.
        self.needs_reconnect = true;
        Ok(())
    }
}

#[async_trait::async_trait]
impl NetworkSource for RedfishSession {
    async fn network_source(&mut self, ctx: &Ctx) -> Result<NetworkSourceOp> {
        let (iface, _) = self.bmc_interface(ctx).await?;
        read_source(&iface.body)
    }

    async fn set_dhcp(&mut self, ctx: &Ctx) -> Result<()> {
        self.set_source(ctx, NetworkSourceOp::Dhcp).await
    }

    async fn set_static(&mut self, ctx: &Ctx, addr: &StaticIpv4) -> Result<()> {
        self.set_source(ctx, NetworkSourceOp::Static(addr.clone())).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::discovery::ResetAction;

    #[test]
    fn bmc_reset_falls_back() {
        let dell = ResetAction { target: "/t".into(), allowed: Some(vec!["GracefulRestart".into()]) };
        assert_eq!(bmc_reset_type(BmcResetKind::Cold, &dell).unwrap(), "GracefulRestart");
        let dmtf =
            ResetAction { target: "/t".into(), allowed: Some(vec!["ForceRestart".into(), "GracefulRestart".into()]) };
        assert_eq!(bmc_reset_type(BmcResetKind::Cold, &dmtf).unwrap(), "ForceRestart");
        assert_eq!(bmc_reset_type(BmcResetKind::Warm, &dmtf).unwrap(), "GracefulRestart");
    }

    #[test]
    fn reads_and_writes_sources() {
        let modern = json!({"DHCPv4": {"DHCPEnabled": false},
            "IPv4Addresses": [{"Address": "10.0.0.5", "SubnetMask": "255.255.255.0", "Gateway": "10.0.0.1", "AddressOrigin": "Static"}],
            "IPv4StaticAddresses": [{"Address": "10.0.0.5", "SubnetMask": "255.255.255.0", "Gateway": "10.0.0.1"}]});
        assert_eq!(
            read_source(&modern).unwrap(),
            NetworkSourceOp::Static(StaticIpv4 {
                address: "10.0.0.5".parse().unwrap(),
                netmask: "255.255.255.0".parse().unwrap(),
                gateway: Some("10.0.0.1".parse().unwrap())
            })
        );
        assert_eq!(source_body(&modern, &NetworkSourceOp::Dhcp).unwrap(), json!({"DHCPv4": {"DHCPEnabled": true}}));
        let s =
            StaticIpv4 { address: "10.0.0.9".parse().unwrap(), netmask: "255.255.0.0".parse().unwrap(), gateway: None };
        assert_eq!(
            source_body(&modern, &NetworkSourceOp::Static(s.clone())).unwrap(),
            json!({"DHCPv4": {"DHCPEnabled": false}, "IPv4StaticAddresses": [{"Address": "10.0.0.9", "SubnetMask": "255.255.0.0"}]})
        );
        let legacy =
            json!({"IPv4Addresses": [{"Address": "10.0.0.5", "SubnetMask": "255.0.0.0", "AddressOrigin": "DHCP"}]});
        assert_eq!(read_source(&legacy).unwrap(), NetworkSourceOp::Dhcp);
        assert_eq!(
            source_body(&legacy, &NetworkSourceOp::Static(s)).unwrap(),
            json!({"IPv4Addresses": [{"Address": "10.0.0.9", "SubnetMask": "255.255.0.0", "AddressOrigin": "Static"}]})
        );
    }

    #[test]
    fn chooses_the_interface_carrying_the_bmc_address() {
        let r = |p: &str, ip: &str, enabled: bool| Resource {
            path: p.into(),
            body: json!({"InterfaceEnabled": enabled, "IPv4Addresses": [{"Address": ip, "SubnetMask": "255.255.255.0"}]}),
            etag: None,
        };
        let list = vec![r("/a", "192.0.2.1", false), r("/b", "198.51.100.7", true), r("/c", "203.0.113.9", true)];
        assert_eq!(choose_interface(&list, Some("203.0.113.9".parse().unwrap())), Some(2));
        assert_eq!(choose_interface(&list, Some("127.0.0.1".parse().unwrap())), Some(1));
        assert_eq!(choose_interface(&[], None), None);
    }
}
