//! Inventory: the ComputerSystem's identity, the BMC firmware version from
//! its Manager, a few facts from the service root, and the typed
//! components (issues 19 and 20), each found through the links the BMC
//! gives (never a guessed path):
//!
//! | section | read from |
//! |---|---|
//! | processors | system `Processors` |
//! | memory | system `Memory` (empty slots, `Status.State: Absent`, left out) |
//! | drives | system `Storage` → each `Drives` link; `SimpleStorage` `Devices` when `Storage` has none |
//! | nics | system `EthernetInterfaces`; chassis `NetworkAdapters` (model, firmware) |
//! | power_supplies | chassis `PowerSubsystem` → `PowerSupplies`, else the older `Power.PowerSupplies` |
//! | firmware | service root `UpdateService` → `FirmwareInventory` |
//!
//! The chassis are the system's `Links.Chassis`, else the service's Chassis
//! collection (at most [`MAX_CHASSIS`]). A collection the BMC does not
//! link, or answers 404/405/501 for, is no components; one it answers
//! another error for (5xx, not JSON, too large, forbidden) makes its
//! section `unread`, so drift does not take it for components removed.
//! Timeouts, lost connections and the send gate's refusal fail the read.
//! Members are taken as given when expanded, otherwise read one by one:
//! at most [`MAX_COMPONENTS`](bmcfleet_schema::components::MAX_COMPONENTS)
//! per collection and [`MAX_READS`] resources per inventory, and the
//! members of one collection (held until they are converted) in one
//! answer's worth of bytes (a section a budget cuts short is `unread`);
//! the result is bounded by
//! [`bmcfleet_schema::components::bound`].

use crate::event_log::health as parse_health;
use crate::json::{last_segment, link, links, members, norm_path, str_of};
use crate::power::parse_power_state;
use crate::session::RedfishSession;
use crate::transport::Transport;
use bmcfleet_provider::{Ctx, Inventory, ProviderError, Result};
use bmcfleet_schema::components::{self, Drive, Firmware, MemoryModule, Nic, PowerSupply, Processor, Section};
use bmcfleet_schema::{ErrorCode, Health, Inventory as InventoryData};
use serde_json::Value;

/// Chassis whose power supplies and network adapters are read.
pub(crate) const MAX_CHASSIS: usize = 8;
/// Storage subsystems whose drives are read.
const MAX_STORAGE: usize = 32;
/// Resources read per inventory for the components (collections and members).
pub(crate) const MAX_READS: usize = 768;

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
        for (k, v) in [("vendor", &root.vendor), ("product", &root.product), ("redfish_version", &root.redfish_version)]
        {
            if let Some(v) = v {
                inv.extra.push((k.to_owned(), v.clone()));
            }
        }
        let (chassis_coll, update_service) = (root.chassis.clone(), root.update_service.clone());
        let mut walk = Walk { t: &mut self.transport, ctx, reads: 0 };
        walk.components(&system.body, chassis_coll.as_deref(), update_service.as_deref(), &mut inv).await?;
        components::bound(&mut inv);
        Ok(inv)
    }
}

/// Why a read stopped.
enum Stop {
    /// The section cannot be read this time (it becomes `unread`).
    Section,
    /// The whole inventory fails.
    Fatal(ProviderError),
}

type Step<T> = std::result::Result<T, Stop>;

/// The component walk of one inventory read, with its request budget.
struct Walk<'a> {
    t: &'a mut Transport,
    ctx: &'a Ctx,
    reads: usize,
}

/// A resource of a collection given whole (expanded), not just its link.
fn expanded(item: &Value) -> bool {
    item.as_object().is_some_and(|o| o.keys().any(|k| k != "@odata.id"))
}

/// `Status.State` says the thing is not there (an empty slot or bay).
fn absent(v: &Value) -> bool {
    matches!(v.get("Status").and_then(|s| str_of(s, "State")), Some("Absent"))
}

impl Walk<'_> {
    /// One resource: `None` when the BMC does not have it (404, 405, 501).
    async fn get(&mut self, path: &str) -> Step<Option<Value>> {
        if self.reads >= MAX_READS {
            tracing::debug!(bmc = %self.t.bmc(), path, "Inventory read budget spent.");
            return Err(Stop::Section);
        }
        self.reads += 1;
        match self.t.get(self.ctx, path).await {
            Ok(r) => Ok(Some(r.body)),
            Err(e) => match e.code {
                ErrorCode::TargetNotFound | ErrorCode::Unsupported => Ok(None),
                ErrorCode::BmcError | ErrorCode::ProtocolError | ErrorCode::PermissionDenied => {
                    tracing::debug!(bmc = %self.t.bmc(), path, error = %e, "Inventory resource unreadable; its section is left unread.");
                    Err(Stop::Section)
                }
                _ => Err(Stop::Fatal(e)),
            },
        }
    }

    /// The members read since `start` and kept together stay within one
    /// answer's worth ([`Transport::kept_within`]); past it, the section is
    /// left unread.
    fn kept_within(&self, start: u64, what: &str) -> Step<()> {
        self.t.kept_within(start, what).map_err(|e| {
            tracing::debug!(bmc = %self.t.bmc(), error = %e, "Inventory collection too large to keep; its section is left unread.");
            Stop::Section
        })
    }

    /// The resources of a collection (expanded members as given, others read).
    async fn members(&mut self, collection: &str) -> Step<Vec<Value>> {
        let Some(coll) = self.get(collection).await? else { return Ok(Vec::new()) };
        let items: Vec<Value> = coll.get("Members").and_then(Value::as_array).cloned().unwrap_or_default();
        let mut out = Vec::new();
        let start = self.t.received();
        for item in items.into_iter().take(components::MAX_COMPONENTS) {
            if expanded(&item) {
                out.push(item);
            } else if let Some(p) = item.get("@odata.id").and_then(Value::as_str) {
                if let Some(body) = self.get(&norm_path(p)).await? {
                    out.push(body);
                }
                self.kept_within(start, collection)?;
            }
        }
        Ok(out)
    }

    /// The members of `resource[key]`'s collection (none without the link).
    async fn linked(&mut self, resource: &Value, key: &str) -> Step<Vec<Value>> {
        match link(resource, key) {
            Some(p) => self.members(&p).await,
            None => Ok(Vec::new()),
        }
    }

    async fn components(
        &mut self,
        system: &Value,
        chassis_coll: Option<&str>,
        update_service: Option<&str>,
        inv: &mut InventoryData,
    ) -> Result<()> {
        let unread = &mut inv.unread;
        let mut keep = |s: Section, r: Step<()>| -> Result<()> {
            match r {
                Ok(()) => Ok(()),
                Err(Stop::Section) => {
                    unread.push(s);
                    Ok(())
                }
                Err(Stop::Fatal(e)) => Err(e),
            }
        };
        let r = self
            .linked(system, "Processors")
            .await
            .map(|v| inv.processors = v.iter().filter(|p| !absent(p)).map(processor).collect());
        keep(Section::Processors, r)?;
        let r = self
            .linked(system, "Memory")
            .await
            .map(|v| inv.memory = v.iter().filter(|m| !absent(m)).map(memory).collect());
        keep(Section::Memory, r)?;
        let r = self.drives(system).await.map(|d| inv.drives = d);
        keep(Section::Drives, r)?;
        let r = self
            .linked(system, "EthernetInterfaces")
            .await
            .map(|v| inv.nics = v.iter().filter(|n| !absent(n)).map(ethernet_interface).collect());
        keep(Section::Nics, r)?;

        let chassis = self.chassis(system, chassis_coll).await;
        let chassis = match chassis {
            Ok(c) => c,
            Err(Stop::Fatal(e)) => return Err(e),
            Err(Stop::Section) => {
                keep(Section::PowerSupplies, Err(Stop::Section))?;
                Vec::new()
            }
        };
        let mut psu_failed = false;
        for c in &chassis {
            match self.power_supplies(c).await {
                Ok(p) => inv.power_supplies.extend(p),
                Err(Stop::Section) => psu_failed = true,
                Err(Stop::Fatal(e)) => return Err(e),
            }
            let r = self
                .linked(c, "NetworkAdapters")
                .await
                .map(|v| inv.nics.extend(v.iter().filter(|n| !absent(n)).map(network_adapter)));
            keep(Section::Nics, r)?;
        }
        if psu_failed {
            keep(Section::PowerSupplies, Err(Stop::Section))?;
        }

        let r = self.firmware(update_service).await.map(|f| inv.firmware = f);
        keep(Section::Firmware, r)?;
        Ok(())
    }

    /// The system's chassis: `Links.Chassis`, else the Chassis collection.
    async fn chassis(&mut self, system: &Value, collection: Option<&str>) -> Step<Vec<Value>> {
        let mut paths = system.get("Links").map(|l| links(l, "Chassis")).unwrap_or_default();
        if paths.is_empty() {
            if let Some(coll) = collection {
                if let Some(body) = self.get(coll).await? {
                    paths = members(&body);
                }
            }
        }
        let mut out = Vec::new();
        let start = self.t.received();
        for p in paths.into_iter().take(MAX_CHASSIS) {
            if let Some(c) = self.get(&p).await? {
                out.push(c);
            }
            self.kept_within(start, "the chassis")?;
        }
        Ok(out)
    }

    async fn power_supplies(&mut self, chassis: &Value) -> Step<Vec<PowerSupply>> {
        if let Some(sub) = link(chassis, "PowerSubsystem") {
            if let Some(body) = self.get(&sub).await? {
                if link(&body, "PowerSupplies").is_some() {
                    let v = self.linked(&body, "PowerSupplies").await?;
                    return Ok(v.iter().filter(|p| !absent(p)).enumerate().map(|(i, p)| power_supply(p, i)).collect());
                }
            }
        }
        let Some(power) = link(chassis, "Power") else { return Ok(Vec::new()) };
        let Some(body) = self.get(&power).await? else { return Ok(Vec::new()) };
        let list = body.get("PowerSupplies").and_then(Value::as_array).cloned().unwrap_or_default();
        Ok(list
            .iter()
            .take(components::MAX_COMPONENTS)
            .filter(|p| !absent(p))
            .enumerate()
            .map(|(i, p)| power_supply(p, i))
            .collect())
    }

    /// `Storage` drives; `SimpleStorage` devices when `Storage` gives none.
    async fn drives(&mut self, system: &Value) -> Step<Vec<Drive>> {
        let mut out = Vec::new();
        let storage = match link(system, "Storage") {
            Some(p) => self.members(&p).await,
            None => Ok(Vec::new()),
        };
        let storage_failed = storage.is_err();
        match storage {
            Ok(subsystems) => {
                for s in subsystems.iter().take(MAX_STORAGE) {
                    for p in links(s, "Drives").into_iter().take(components::MAX_COMPONENTS) {
                        if let Some(d) = self.get(&p).await? {
                            if !absent(&d) {
                                out.push(drive(&d));
                            }
                        }
                    }
                }
            }
            Err(Stop::Fatal(e)) => return Err(Stop::Fatal(e)),
            Err(Stop::Section) => {}
        }
        if out.is_empty() && link(system, "SimpleStorage").is_some() {
            let simple = self.linked(system, "SimpleStorage").await?;
            for s in simple.iter().take(MAX_STORAGE) {
                out.extend(simple_storage(s));
            }
        }
        if storage_failed && out.is_empty() {
            return Err(Stop::Section);
        }
        Ok(out)
    }

    async fn firmware(&mut self, update_service: Option<&str>) -> Step<Vec<Firmware>> {
        let Some(us) = update_service else { return Ok(Vec::new()) };
        let Some(body) = self.get(us).await? else { return Ok(Vec::new()) };
        let v = self.linked(&body, "FirmwareInventory").await?;
        Ok(v.iter().map(firmware).collect())
    }
}

fn text(v: &Value, k: &str) -> Option<String> {
    str_of(v, k).map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned)
}

/// A non-negative number (integers, or floats some BMCs send for them).
fn uint(v: &Value, k: &str) -> Option<u64> {
    let n = v.get(k)?;
    n.as_u64()
        .or_else(|| n.as_f64().filter(|f| f.is_finite() && *f >= 0.0 && *f < u64::MAX as f64).map(|f| f.round() as u64))
}

fn u32_of(v: &Value, k: &str) -> Option<u32> {
    uint(v, k).and_then(|n| u32::try_from(n).ok())
}

fn status_health(v: &Value) -> Option<Health> {
    v.get("Status").and_then(|s| str_of(s, "Health")).and_then(parse_health)
}

/// The resource's `Id`, else the last segment of its `@odata.id`.
fn id_of(v: &Value) -> String {
    text(v, "Id").or_else(|| str_of(v, "@odata.id").map(|p| last_segment(&norm_path(p)).to_owned())).unwrap_or_default()
}

pub(crate) fn processor(v: &Value) -> Processor {
    Processor {
        id: id_of(v),
        model: text(v, "Model"),
        manufacturer: text(v, "Manufacturer"),
        cores: u32_of(v, "TotalCores"),
        threads: u32_of(v, "TotalThreads"),
        max_speed_mhz: u32_of(v, "MaxSpeedMHz"),
        health: status_health(v),
    }
}

pub(crate) fn memory(v: &Value) -> MemoryModule {
    MemoryModule {
        id: id_of(v),
        capacity_mib: uint(v, "CapacityMiB"),
        memory_type: text(v, "MemoryDeviceType").or_else(|| text(v, "MemoryType")),
        speed_mhz: u32_of(v, "OperatingSpeedMhz"),
        manufacturer: text(v, "Manufacturer"),
        part_number: text(v, "PartNumber"),
        serial: text(v, "SerialNumber"),
        health: status_health(v),
    }
}

pub(crate) fn drive(v: &Value) -> Drive {
    Drive {
        id: id_of(v),
        model: text(v, "Model"),
        manufacturer: text(v, "Manufacturer"),
        serial: text(v, "SerialNumber"),
        capacity_bytes: uint(v, "CapacityBytes"),
        media_type: text(v, "MediaType"),
        protocol: text(v, "Protocol"),
        firmware_version: text(v, "Revision"),
        health: status_health(v),
    }
}

/// The devices of a `SimpleStorage` resource, ids `<storage id>.<name>`.
pub(crate) fn simple_storage(v: &Value) -> Vec<Drive> {
    let sid = id_of(v);
    let devices = v.get("Devices").and_then(Value::as_array).cloned().unwrap_or_default();
    devices
        .iter()
        .take(components::MAX_COMPONENTS)
        .enumerate()
        .filter(|(_, d)| !absent(d))
        .map(|(i, d)| Drive {
            id: format!("{sid}.{}", text(d, "Name").unwrap_or_else(|| i.to_string())),
            model: text(d, "Model"),
            manufacturer: text(d, "Manufacturer"),
            capacity_bytes: uint(d, "CapacityBytes"),
            health: status_health(d),
            ..Drive::default()
        })
        .collect()
}

/// A MAC address as `aa:bb:cc:dd:ee:ff` (lower case; `-` separators too).
fn mac(s: &str) -> Option<String> {
    let hex: String = s.trim().chars().filter(|c| !matches!(c, ':' | '-' | '.')).collect();
    (hex.len() == 12 && hex.chars().all(|c| c.is_ascii_hexdigit())).then(|| {
        let hex = hex.to_ascii_lowercase();
        (0..6).map(|i| &hex[2 * i..2 * i + 2]).collect::<Vec<_>>().join(":")
    })
}

pub(crate) fn ethernet_interface(v: &Value) -> Nic {
    let mut macs = Vec::new();
    for k in ["MACAddress", "PermanentMACAddress"] {
        if let Some(m) = str_of(v, k).and_then(mac) {
            if !macs.contains(&m) {
                macs.push(m);
            }
        }
    }
    Nic {
        id: id_of(v),
        mac_addresses: macs,
        speed_mbps: u32_of(v, "SpeedMbps"),
        link_status: text(v, "LinkStatus"),
        health: status_health(v),
        ..Nic::default()
    }
}

pub(crate) fn network_adapter(v: &Value) -> Nic {
    let firmware = v
        .get("Controllers")
        .and_then(Value::as_array)
        .and_then(|c| c.iter().find_map(|c| text(c, "FirmwarePackageVersion")));
    Nic {
        id: id_of(v),
        model: text(v, "Model"),
        manufacturer: text(v, "Manufacturer"),
        firmware_version: firmware,
        health: status_health(v),
        ..Nic::default()
    }
}

/// A PowerSupply resource, or an entry of the older `Power.PowerSupplies`
/// (id: `Id`, else `MemberId`, else `Name`, else its position).
pub(crate) fn power_supply(v: &Value, index: usize) -> PowerSupply {
    let id =
        text(v, "Id").or_else(|| text(v, "MemberId")).or_else(|| text(v, "Name")).unwrap_or_else(|| index.to_string());
    PowerSupply {
        id,
        model: text(v, "Model"),
        manufacturer: text(v, "Manufacturer"),
        serial: text(v, "SerialNumber"),
        part_number: text(v, "PartNumber"),
        capacity_w: u32_of(v, "PowerCapacityWatts"),
        firmware_version: text(v, "FirmwareVersion"),
        health: status_health(v),
    }
}

pub(crate) fn firmware(v: &Value) -> Firmware {
    Firmware {
        id: id_of(v),
        name: text(v, "Name"),
        version: text(v, "Version"),
        updateable: v.get("Updateable").and_then(Value::as_bool),
        description: text(v, "Description"),
        software_id: text(v, "SoftwareId"),
        related: crate::json::links(v, "RelatedItem").into_iter().take(components::MAX_RELATED).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn components_decode_from_the_dmtf_shapes() {
        // Shapes of Processor v1.x, Memory v1.x, Drive v1.x, SimpleStorage,
        // EthernetInterface, NetworkAdapter, PowerSupply and SoftwareInventory.
        let p = processor(
            &json!({"@odata.id": "/redfish/v1/Systems/1/Processors/CPU1", "Model": " Multi-Core Intel(R) Xeon(R) processor 7xxx Series ",
            "Manufacturer": "Intel(R) Corporation", "TotalCores": 8, "TotalThreads": 16, "MaxSpeedMHz": 3700, "Status": {"Health": "OK"}}),
        );
        assert_eq!(
            (p.id.as_str(), p.model.as_deref(), p.cores, p.threads, p.max_speed_mhz, p.health),
            (
                "CPU1",
                Some("Multi-Core Intel(R) Xeon(R) processor 7xxx Series"),
                Some(8),
                Some(16),
                Some(3700),
                Some(Health::Ok)
            )
        );
        let m = memory(
            &json!({"Id": "DIMM1", "CapacityMiB": 32768, "MemoryDeviceType": "DDR4", "MemoryType": "DRAM", "OperatingSpeedMhz": 2400,
            "Manufacturer": "Contoso", "PartNumber": "M393A4K40BB1", "SerialNumber": "12345678", "Status": {"Health": "Warning"}}),
        );
        assert_eq!(
            (m.capacity_mib, m.memory_type.as_deref(), m.speed_mhz, m.health),
            (Some(32768), Some("DDR4"), Some(2400), Some(Health::Warning))
        );
        let d = drive(
            &json!({"Id": "Disk.Bay.0", "Model": "PM883", "CapacityBytes": 960197124096u64, "MediaType": "SSD", "Protocol": "SATA", "Revision": "HXT7404Q"}),
        );
        assert_eq!(
            (d.capacity_bytes, d.protocol.as_deref(), d.firmware_version.as_deref()),
            (Some(960_197_124_096), Some("SATA"), Some("HXT7404Q"))
        );
        let s = simple_storage(
            &json!({"Id": "1", "Devices": [{"Name": "SATA Bay 1", "Model": "Contoso 8000", "CapacityBytes": 8000000000000u64},
            {"Name": "SATA Bay 2", "Status": {"State": "Absent"}}, {"Model": "nameless"}]}),
        );
        assert_eq!(s.iter().map(|d| d.id.as_str()).collect::<Vec<_>>(), ["1.SATA Bay 1", "1.2"]);
        let n = ethernet_interface(
            &json!({"Id": "12446A3B0411", "MACAddress": "12-44-6A-3B-04-11", "PermanentMACAddress": "12:44:6a:3b:04:11", "SpeedMbps": 1000, "LinkStatus": "LinkUp"}),
        );
        assert_eq!(
            (n.mac_addresses.clone(), n.speed_mbps, n.link_status.as_deref()),
            (vec!["12:44:6a:3b:04:11".to_owned()], Some(1000), Some("LinkUp"))
        );
        assert!(ethernet_interface(&json!({"Id": "x", "MACAddress": "not a mac"})).mac_addresses.is_empty());
        let a = network_adapter(
            &json!({"Id": "NIC.Slot.1", "Model": "X710", "Controllers": [{"FirmwarePackageVersion": "9.20"}]}),
        );
        assert_eq!((a.model.as_deref(), a.firmware_version.as_deref()), (Some("X710"), Some("9.20")));
        let ps = power_supply(
            &json!({"MemberId": "0", "Name": "Power Supply Bay 1", "Model": "499253-B21", "PowerCapacityWatts": 800.0, "FirmwareVersion": "1.00"}),
            3,
        );
        assert_eq!((ps.id.as_str(), ps.capacity_w, ps.firmware_version.as_deref()), ("0", Some(800), Some("1.00")));
        assert_eq!(power_supply(&json!({}), 3).id, "3");
        let f = firmware(
            &json!({"Id": "BMC", "Name": "Contoso BMC Firmware", "Version": "1.45.455b66-rev4", "Updateable": true}),
        );
        assert_eq!((f.id.as_str(), f.version.as_deref(), f.updateable), ("BMC", Some("1.45.455b66-rev4"), Some(true)));
        assert_eq!(uint(&json!({"n": -1}), "n"), None);
        assert_eq!(u32_of(&json!({"n": 1u64 << 40}), "n"), None);
    }
}
