//! The BMC itself: cold/warm reset and its LAN configuration (network source).

use crate::cmd;
use crate::session::{invalid, protocol, IpmiSession};
use crate::transport::Transport;
use async_trait::async_trait;
use bmcfleet_provider::{BmcReset, Ctx, NetworkSource, Result};
use bmcfleet_schema::{BmcResetKind, ErrorCode, NetworkSourceOp, StaticIpv4};
use std::net::Ipv4Addr;

#[async_trait]
impl<T: Transport> BmcReset for IpmiSession<T> {
    /// Cold Reset (app 0x02) or Warm Reset (app 0x03). The transport drops
    /// its session afterwards (the BMC forgets all sessions).
    async fn reset_bmc(&mut self, ctx: &Ctx, kind: BmcResetKind) -> Result<()> {
        let command = match kind {
            BmcResetKind::Cold => &cmd::COLD_RESET,
            BmcResetKind::Warm => &cmd::WARM_RESET,
        };
        self.exec(ctx, command, vec![]).await?;
        Ok(())
    }
}

impl<T: Transport> IpmiSession<T> {
    async fn lan_param(&mut self, ctx: &Ctx, channel: u8, param: u8, len: usize) -> Result<Vec<u8>> {
        let data = self.exec(ctx, &cmd::GET_LAN_CONFIG, cmd::encode_get_lan_param(channel, param)).await?;
        cmd::lan_param_value(&data, len)
            .map(<[u8]>::to_vec)
            .map_err(|e| protocol(cmd::GET_LAN_CONFIG.id, format!("parameter {param}: {e}")))
    }

    async fn set_lan_param(&mut self, ctx: &Ctx, channel: u8, param: u8, value: &[u8]) -> Result<()> {
        self.exec(ctx, &cmd::SET_LAN_CONFIG, cmd::encode_set_lan_param(channel, param, value)).await?;
        Ok(())
    }

    /// Writes LAN parameters inside a set-in-progress bracket when the BMC
    /// supports parameter 0 (23.2): set in progress, the writes, commit
    /// write, set complete. On a BMC with rollback (ipmi_sim) "set complete"
    /// without "commit write" discards the writes, so a failure part-way
    /// leaves the old configuration in place.
    async fn set_lan_params(&mut self, ctx: &Ctx, channel: u8, params: &[(u8, Vec<u8>)]) -> Result<()> {
        let locked = match self.set_lan_param(ctx, channel, cmd::LAN_SET_IN_PROGRESS, &[0x01]).await {
            Ok(()) => true,
            Err(e) if matches!(e.code, ErrorCode::Unsupported | ErrorCode::InvalidField) => false,
            Err(e) => return Err(e),
        };
        let mut result = Ok(());
        for (param, value) in params {
            result = self.set_lan_param(ctx, channel, *param, value).await;
            if result.is_err() {
                break;
            }
        }
        if locked {
            if result.is_ok() {
                // Commit write is optional in the spec: a BMC without it
                // applies the values at "set complete".
                match self.set_lan_param(ctx, channel, cmd::LAN_SET_IN_PROGRESS, &[0x02]).await {
                    Err(e) if !matches!(e.code, ErrorCode::Unsupported | ErrorCode::InvalidField) => result = Err(e),
                    _ => {}
                }
            }
            // Set complete releases the lock whatever happened above.
            let complete = self.set_lan_param(ctx, channel, cmd::LAN_SET_IN_PROGRESS, &[0x00]).await;
            result = result.and(complete);
        }
        result
    }
}

#[async_trait]
impl<T: Transport> NetworkSource for IpmiSession<T> {
    /// Get LAN Configuration Parameters (transport 0x02): parameter 4 (IP
    /// address source); for a static source also 3 (address), 6 (netmask)
    /// and 12 (default gateway; 0.0.0.0 reads as none). Sources "BIOS or
    /// system software" and "other BMC protocol" read as DHCP (dynamic);
    /// "unspecified" reads as static.
    async fn network_source(&mut self, ctx: &Ctx) -> Result<NetworkSourceOp> {
        let channel = self.channel(ctx).await?;
        let source = self.lan_param(ctx, channel, cmd::LAN_IP_SOURCE, 1).await?[0];
        if cmd::ip_source_is_dynamic(source) {
            return Ok(NetworkSourceOp::Dhcp);
        }
        let address = cmd::ipv4(&self.lan_param(ctx, channel, cmd::LAN_IP_ADDRESS, 4).await?);
        let netmask = cmd::ipv4(&self.lan_param(ctx, channel, cmd::LAN_SUBNET_MASK, 4).await?);
        let gateway = cmd::ipv4(&self.lan_param(ctx, channel, cmd::LAN_DEFAULT_GATEWAY, 4).await?);
        Ok(NetworkSourceOp::Static(StaticIpv4 {
            address,
            netmask,
            gateway: (!gateway.is_unspecified()).then_some(gateway),
        }))
    }

    /// Set LAN Configuration Parameters (transport 0x01): parameter 4 = DHCP.
    async fn set_dhcp(&mut self, ctx: &Ctx) -> Result<()> {
        let channel = self.channel(ctx).await?;
        self.set_lan_params(ctx, channel, &[(cmd::LAN_IP_SOURCE, vec![cmd::IP_SOURCE_DHCP])]).await
    }

    /// Set LAN Configuration Parameters: parameter 4 = static, then 3, 6 and
    /// (when given) 12. A missing gateway leaves the BMC's unchanged.
    async fn set_static(&mut self, ctx: &Ctx, addr: &StaticIpv4) -> Result<()> {
        validate_static(addr)?;
        let channel = self.channel(ctx).await?;
        let mut params = vec![
            (cmd::LAN_IP_SOURCE, vec![cmd::IP_SOURCE_STATIC]),
            (cmd::LAN_IP_ADDRESS, addr.address.octets().to_vec()),
            (cmd::LAN_SUBNET_MASK, addr.netmask.octets().to_vec()),
        ];
        if let Some(gw) = addr.gateway {
            params.push((cmd::LAN_DEFAULT_GATEWAY, gw.octets().to_vec()));
        }
        self.set_lan_params(ctx, channel, &params).await
    }
}

fn validate_static(addr: &StaticIpv4) -> Result<()> {
    let mask = u32::from(addr.netmask);
    if mask == 0 || mask.leading_ones() + mask.trailing_zeros() != 32 {
        return Err(invalid(format!("netmask {} is not a contiguous prefix", addr.netmask)));
    }
    let bad = |ip: Ipv4Addr| ip.is_unspecified() || ip.is_broadcast() || ip.is_multicast();
    if bad(addr.address) {
        return Err(invalid(format!("{} is not a usable host address", addr.address)));
    }
    if let Some(gw) = addr.gateway {
        if bad(gw) {
            return Err(invalid(format!("{gw} is not a usable gateway address")));
        }
        if u32::from(gw) & mask != u32::from(addr.address) & mask {
            return Err(invalid(format!("gateway {gw} is outside {}/{}", addr.address, mask.leading_ones())));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn static_address_validation() {
        let ok = StaticIpv4 {
            address: "192.0.2.10".parse().unwrap(),
            netmask: "255.255.255.0".parse().unwrap(),
            gateway: Some("192.0.2.1".parse().unwrap()),
        };
        assert!(validate_static(&ok).is_ok());
        let mut bad = ok.clone();
        bad.netmask = "255.0.255.0".parse().unwrap();
        assert_eq!(validate_static(&bad).unwrap_err().code, ErrorCode::InvalidField);
        let mut bad = ok.clone();
        bad.gateway = Some("198.51.100.1".parse().unwrap());
        assert!(validate_static(&bad).is_err());
        let mut bad = ok;
        bad.address = Ipv4Addr::UNSPECIFIED;
        assert!(validate_static(&bad).is_err());
    }
}
