//! The providers this worker can use, by protocol, and what each offers.

use bmcfleet_provider::{Capability, Connector};
use bmcfleet_schema::Protocol;
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Order in which `protocol: auto` probes providers.
pub const AUTO_ORDER: [Protocol; 3] = [Protocol::Redfish, Protocol::Ipmi, Protocol::Amt];

/// The provider table: one connector per protocol this worker speaks.
#[derive(Clone, Default)]
pub struct Providers {
    connectors: BTreeMap<&'static str, Arc<dyn Connector>>,
}

/// What a worker reports about one provider.
#[derive(Clone, Debug, Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct ProviderInfo {
    pub protocol: String,
    pub capabilities: Vec<String>,
}

impl Providers {
    pub fn with(mut self, connector: Arc<dyn Connector>) -> Self {
        self.connectors.insert(connector.protocol(), connector);
        self
    }

    pub fn get(&self, protocol: Protocol) -> Option<Arc<dyn Connector>> {
        self.connectors.get(protocol.as_str()).cloned()
    }

    /// Connectors `auto` tries, in order: the machine's preference list
    /// when it has one, else [`AUTO_ORDER`]; protocols this worker has no
    /// provider for are left out.
    pub fn auto(&self, preference: &[Protocol]) -> Vec<Arc<dyn Connector>> {
        let order = if preference.is_empty() { &AUTO_ORDER[..] } else { preference };
        order.iter().filter_map(|p| self.get(*p)).collect()
    }

    pub fn describe(&self) -> Vec<ProviderInfo> {
        self.connectors
            .values()
            .map(|c| ProviderInfo {
                protocol: c.protocol().to_owned(),
                capabilities: c.declared_capabilities().iter().map(|c: &Capability| c.as_str().to_owned()).collect(),
            })
            .collect()
    }
}
