//! Parameters of the BMC network source capability.

use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NetworkSourceOp {
    /// Read the current source and addresses.
    Get,
    Dhcp,
    Static(StaticIpv4),
}

#[serde_with::skip_serializing_none]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StaticIpv4 {
    pub address: std::net::Ipv4Addr,
    pub netmask: std::net::Ipv4Addr,
    pub gateway: Option<std::net::Ipv4Addr>,
}
