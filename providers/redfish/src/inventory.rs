//! Inventory: the ComputerSystem's identity, the BMC firmware version from
//! its Manager, and a few facts from the service root.

use crate::json::str_of;
use crate::power::parse_power_state;
use crate::session::RedfishSession;
use bmcfleet_provider::{Ctx, Inventory, Result};
use bmcfleet_schema::Inventory as InventoryData;
use serde_json::Value;

pub(crate) fn from_resources(system: &Value, manager: Option<&Value>) -> InventoryData {
    let s = |v: &Value, k: &str| str_of(v, k).map(str::trim).filter(|x| !x.is_empty()).map(str::to_owned);
    let mut extra = Vec::new();
    let mut add = |name: &str, value: Option<String>| {
        if let Some(v) = value {
            extra.push((name.to_owned(), v));
        }
    };
    add("system_id", s(system, "Id"));
    add("uuid", s(system, "UUID"));
    add("sku", s(system, "SKU"));
    add("part_number", s(system, "PartNumber"));
    add("bios_version", s(system, "BiosVersion"));
    add("health", system.get("Status").and_then(|st| s(st, "Health")));
    add(
        "cpu_count",
        system.get("ProcessorSummary").and_then(|p| p.get("Count")).and_then(Value::as_u64).map(|n| n.to_string()),
    );
    add(
        "memory_gib",
        system
            .get("MemorySummary")
            .and_then(|m| m.get("TotalSystemMemoryGiB"))
            .and_then(Value::as_f64)
            .map(|n| n.to_string()),
    );
    if let Some(m) = manager {
        add("bmc_model", s(m, "Model"));
    }
    InventoryData {
        manufacturer: s(system, "Manufacturer"),
        model: s(system, "Model"),
        serial: s(system, "SerialNumber"),
        firmware_version: manager.and_then(|m| s(m, "FirmwareVersion")),
        power_state: Some(parse_power_state(system)),
        extra,
        ..Default::default()
    }
}

#[async_trait::async_trait]
impl Inventory for RedfishSession {
    async fn inventory(&mut self, ctx: &Ctx) -> Result<InventoryData> {
        let path = self.service.system.path.clone();
        let system = self.transport.get(ctx, &path).await?;
        let manager = match self.service.manager.as_ref().map(|m| m.path.clone()) {
            Some(p) => match self.transport.get(ctx, &p).await {
                Ok(r) => Some(r.body),
                Err(e) => {
                    tracing::debug!(bmc = %self.transport.bmc(), error = %e, "Manager unreadable for inventory.");
                    None
                }
            },
            None => None,
        };
        let mut inv = from_resources(&system.body, manager.as_ref());
        let root = &self.service.root;
        for (k, v) in [("vendor", &root.vendor), ("product", &root.product), ("redfish_version", &root.redfish_version)] {
            if let Some(v) = v {
                inv.extra.push((k.to_owned(), v.clone()));
            }
        }
        Ok(inv)
    }
}
