//! Typed components of a machine's [`Inventory`](crate::Inventory)
//! (issues 19 and 20): processors, memory, drives, NICs, power supplies,
//! firmware versions and the IPMI FRU.
//!
//! Everything here comes from a BMC, which may be hostile: [`bound`] caps
//! every list ([`MAX_COMPONENTS`] per section, [`MAX_MACS`] per NIC),
//! truncates every string ([`MAX_TEXT`] characters), makes component ids
//! unique, and drops components from the largest sections until the
//! encoded record fits [`MAX_ENCODED`] (those sections are then listed in
//! `truncated`). Providers call it before returning, and the worker again
//! before it stores a record.
//!
//! [`component_drift`] compares two inventories component by component,
//! keyed `<section>.<id>` (a component added or removed) and
//! `<section>.<id>.<field>` (one of its fields changed); firmware versions
//! are keyed `firmware.<id>` alone. Health, link status and link speed are
//! state, not inventory: they are stored, never compared.

use crate::result::{Health, Inventory};
use crate::state::{ChangeKind, InventoryChange};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Components kept per section; the rest are dropped (and the section listed in `truncated`).
pub const MAX_COMPONENTS: usize = 1024;
/// Characters kept of any string a BMC supplies.
pub const MAX_TEXT: usize = 128;
/// MAC addresses kept per NIC.
pub const MAX_MACS: usize = 16;
/// `extra` pairs kept.
pub const MAX_EXTRA: usize = 64;
/// Largest encoded (JSON) inventory record.
pub const MAX_ENCODED: usize = 64 * 1024;

/// A section of the component inventory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Section {
    Processors,
    Memory,
    Drives,
    Nics,
    PowerSupplies,
    Firmware,
    Fru,
}

impl Section {
    pub const ALL: [Section; 7] = [
        Section::Processors,
        Section::Memory,
        Section::Drives,
        Section::Nics,
        Section::PowerSupplies,
        Section::Firmware,
        Section::Fru,
    ];

    /// The wire name (`power_supplies`), also the first part of a drift key.
    pub fn as_str(self) -> &'static str {
        match self {
            Section::Processors => "processors",
            Section::Memory => "memory",
            Section::Drives => "drives",
            Section::Nics => "nics",
            Section::PowerSupplies => "power_supplies",
            Section::Firmware => "firmware",
            Section::Fru => "fru",
        }
    }
}

/// A CPU socket.
#[serde_with::skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Processor {
    pub id: String,
    pub model: Option<String>,
    pub manufacturer: Option<String>,
    pub cores: Option<u32>,
    pub threads: Option<u32>,
    pub max_speed_mhz: Option<u32>,
    pub health: Option<Health>,
}

/// A memory module (an empty slot is not one).
#[serde_with::skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryModule {
    pub id: String,
    pub capacity_mib: Option<u64>,
    /// `DDR4`, `DDR5`, ... (Redfish `MemoryDeviceType`, else `MemoryType`).
    pub memory_type: Option<String>,
    pub speed_mhz: Option<u32>,
    pub manufacturer: Option<String>,
    pub part_number: Option<String>,
    pub serial: Option<String>,
    pub health: Option<Health>,
}

/// A disk (Redfish `Drive`, or a `SimpleStorage` device).
#[serde_with::skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Drive {
    pub id: String,
    pub model: Option<String>,
    pub manufacturer: Option<String>,
    pub serial: Option<String>,
    pub capacity_bytes: Option<u64>,
    /// `HDD`, `SSD`, `SMR`.
    pub media_type: Option<String>,
    /// `SATA`, `SAS`, `NVMe`, ...
    pub protocol: Option<String>,
    pub firmware_version: Option<String>,
    pub health: Option<Health>,
}

/// A network interface or adapter.
#[serde_with::skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Nic {
    pub id: String,
    /// Lower-case, colon-separated.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mac_addresses: Vec<String>,
    pub speed_mbps: Option<u32>,
    /// `LinkUp`, `LinkDown`, `NoLink`.
    pub link_status: Option<String>,
    pub model: Option<String>,
    pub manufacturer: Option<String>,
    pub firmware_version: Option<String>,
    pub health: Option<Health>,
}

/// A power supply unit.
#[serde_with::skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PowerSupply {
    pub id: String,
    pub model: Option<String>,
    pub manufacturer: Option<String>,
    pub serial: Option<String>,
    pub part_number: Option<String>,
    pub capacity_w: Option<u32>,
    pub firmware_version: Option<String>,
    pub health: Option<Health>,
}

/// One firmware component (Redfish `UpdateService/FirmwareInventory`).
#[serde_with::skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Firmware {
    pub id: String,
    pub name: Option<String>,
    pub version: Option<String>,
    pub updateable: Option<bool>,
    /// What the component is, in the BMC's words (`BMC image`, `Host
    /// image`): BMCs that name every component alike (bmcweb: "Software
    /// Inventory") tell them apart here and by `related`.
    pub description: Option<String>,
    /// The vendor's id of the software (`SoftwareId`).
    pub software_id: Option<String>,
    /// The resources the component belongs to (`RelatedItem` links: the
    /// Manager, the system's Bios, a drive), at most [`MAX_RELATED`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub related: Vec<String>,
}

/// The most `related` links kept per firmware component.
pub const MAX_RELATED: usize = 8;

/// IPMI FRU device 0: the chassis, board and product info areas.
#[serde_with::skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fru {
    /// SMBIOS chassis type name (`Rack Mount Chassis`, ...).
    pub chassis_type: Option<String>,
    pub chassis_part_number: Option<String>,
    pub chassis_serial: Option<String>,
    pub board_manufacturer: Option<String>,
    pub board_product: Option<String>,
    pub board_serial: Option<String>,
    pub board_part_number: Option<String>,
    pub product_manufacturer: Option<String>,
    pub product_name: Option<String>,
    pub product_part_number: Option<String>,
    pub product_version: Option<String>,
    pub product_serial: Option<String>,
    pub asset_tag: Option<String>,
}

impl Fru {
    /// Its fields by name, in order (for drift and display).
    pub fn fields(&self) -> [(&'static str, &Option<String>); 13] {
        [
            ("chassis_type", &self.chassis_type),
            ("chassis_part_number", &self.chassis_part_number),
            ("chassis_serial", &self.chassis_serial),
            ("board_manufacturer", &self.board_manufacturer),
            ("board_product", &self.board_product),
            ("board_serial", &self.board_serial),
            ("board_part_number", &self.board_part_number),
            ("product_manufacturer", &self.product_manufacturer),
            ("product_name", &self.product_name),
            ("product_part_number", &self.product_part_number),
            ("product_version", &self.product_version),
            ("product_serial", &self.product_serial),
            ("asset_tag", &self.asset_tag),
        ]
    }

    fn fields_mut(&mut self) -> [&mut Option<String>; 13] {
        [
            &mut self.chassis_type,
            &mut self.chassis_part_number,
            &mut self.chassis_serial,
            &mut self.board_manufacturer,
            &mut self.board_product,
            &mut self.board_serial,
            &mut self.board_part_number,
            &mut self.product_manufacturer,
            &mut self.product_name,
            &mut self.product_part_number,
            &mut self.product_version,
            &mut self.product_serial,
            &mut self.asset_tag,
        ]
    }
}

/// What drift and bounding need of a component.
pub trait Component {
    fn id(&self) -> &str;
    fn id_mut(&mut self) -> &mut String;
    /// The compared fields, by name, as text (`None`: absent).
    fn compared(&self) -> Vec<(&'static str, Option<String>)>;
    /// Every string field, for truncation.
    fn strings(&mut self) -> Vec<&mut Option<String>>;
    /// A short description for an added or removed component.
    fn summary(&self) -> String {
        let parts: Vec<String> = self.compared().into_iter().filter_map(|(_, v)| v).take(3).collect();
        if parts.is_empty() {
            "present".to_owned()
        } else {
            parts.join(" ")
        }
    }
}

fn text<T: ToString>(v: &Option<T>) -> Option<String> {
    v.as_ref().map(ToString::to_string)
}

macro_rules! id_of {
    () => {
        fn id(&self) -> &str {
            &self.id
        }
        fn id_mut(&mut self) -> &mut String {
            &mut self.id
        }
    };
}

impl Component for Processor {
    id_of!();
    fn compared(&self) -> Vec<(&'static str, Option<String>)> {
        vec![
            ("model", self.model.clone()),
            ("manufacturer", self.manufacturer.clone()),
            ("cores", text(&self.cores)),
            ("threads", text(&self.threads)),
            ("max_speed_mhz", text(&self.max_speed_mhz)),
        ]
    }
    fn strings(&mut self) -> Vec<&mut Option<String>> {
        vec![&mut self.model, &mut self.manufacturer]
    }
}

impl Component for MemoryModule {
    id_of!();
    fn compared(&self) -> Vec<(&'static str, Option<String>)> {
        vec![
            ("capacity_mib", text(&self.capacity_mib)),
            ("memory_type", self.memory_type.clone()),
            ("speed_mhz", text(&self.speed_mhz)),
            ("manufacturer", self.manufacturer.clone()),
            ("part_number", self.part_number.clone()),
            ("serial", self.serial.clone()),
        ]
    }
    fn strings(&mut self) -> Vec<&mut Option<String>> {
        vec![&mut self.memory_type, &mut self.manufacturer, &mut self.part_number, &mut self.serial]
    }
    fn summary(&self) -> String {
        let size = self.capacity_mib.map(|m| format!("{m} MiB"));
        [size, self.memory_type.clone(), self.serial.clone()].into_iter().flatten().collect::<Vec<_>>().join(" ")
    }
}

impl Component for Drive {
    id_of!();
    fn compared(&self) -> Vec<(&'static str, Option<String>)> {
        vec![
            ("model", self.model.clone()),
            ("serial", self.serial.clone()),
            ("capacity_bytes", text(&self.capacity_bytes)),
            ("manufacturer", self.manufacturer.clone()),
            ("media_type", self.media_type.clone()),
            ("protocol", self.protocol.clone()),
            ("firmware_version", self.firmware_version.clone()),
        ]
    }
    fn strings(&mut self) -> Vec<&mut Option<String>> {
        vec![
            &mut self.model,
            &mut self.manufacturer,
            &mut self.serial,
            &mut self.media_type,
            &mut self.protocol,
            &mut self.firmware_version,
        ]
    }
}

impl Component for Nic {
    id_of!();
    fn compared(&self) -> Vec<(&'static str, Option<String>)> {
        let macs = (!self.mac_addresses.is_empty()).then(|| self.mac_addresses.join(","));
        vec![
            ("mac_addresses", macs),
            ("model", self.model.clone()),
            ("manufacturer", self.manufacturer.clone()),
            ("firmware_version", self.firmware_version.clone()),
        ]
    }
    fn strings(&mut self) -> Vec<&mut Option<String>> {
        vec![&mut self.link_status, &mut self.model, &mut self.manufacturer, &mut self.firmware_version]
    }
}

impl Component for PowerSupply {
    id_of!();
    fn compared(&self) -> Vec<(&'static str, Option<String>)> {
        vec![
            ("model", self.model.clone()),
            ("serial", self.serial.clone()),
            ("capacity_w", text(&self.capacity_w)),
            ("manufacturer", self.manufacturer.clone()),
            ("part_number", self.part_number.clone()),
            ("firmware_version", self.firmware_version.clone()),
        ]
    }
    fn strings(&mut self) -> Vec<&mut Option<String>> {
        vec![
            &mut self.model,
            &mut self.manufacturer,
            &mut self.serial,
            &mut self.part_number,
            &mut self.firmware_version,
        ]
    }
}

impl Component for Firmware {
    id_of!();
    fn compared(&self) -> Vec<(&'static str, Option<String>)> {
        vec![("name", self.name.clone()), ("updateable", text(&self.updateable))]
    }
    fn strings(&mut self) -> Vec<&mut Option<String>> {
        self.related.truncate(MAX_RELATED);
        for r in &mut self.related {
            if r.chars().count() > MAX_TEXT || r.chars().any(char::is_control) {
                *r = clip(r);
            }
        }
        vec![&mut self.name, &mut self.version, &mut self.description, &mut self.software_id]
    }
}

/// `s` cut to [`MAX_TEXT`] characters, control characters replaced.
pub fn clip(s: &str) -> String {
    s.chars().take(MAX_TEXT).map(|c| if c.is_control() { ' ' } else { c }).collect()
}

fn clip_opt(s: &mut Option<String>) {
    if let Some(v) = s {
        if v.chars().count() > MAX_TEXT || v.chars().any(char::is_control) {
            *v = clip(v);
        }
    }
}

/// Caps the list, clips its strings, and makes ids unique (a repeated id
/// gets `#2`, `#3`, ...; an empty one its position). True when members
/// were dropped.
fn bound_list<C: Component>(list: &mut Vec<C>) -> bool {
    let cut = list.len() > MAX_COMPONENTS;
    list.truncate(MAX_COMPONENTS);
    let mut used = std::collections::HashSet::with_capacity(list.len());
    for (i, c) in list.iter_mut().enumerate() {
        let mut id = clip(c.id().trim());
        if id.is_empty() {
            id = i.to_string();
        }
        let mut unique = id.clone();
        let mut n = 2;
        while used.contains(&unique) {
            unique = format!("{id}#{n}");
            n += 1;
        }
        used.insert(unique.clone());
        *c.id_mut() = unique;
        for s in c.strings() {
            clip_opt(s);
        }
    }
    cut
}

fn encoded_len(inv: &Inventory) -> usize {
    serde_json::to_vec(inv).map(|v| v.len()).unwrap_or(usize::MAX)
}

/// Bounds a BMC-supplied inventory in place (see the module doc). Idempotent.
pub fn bound(inv: &mut Inventory) {
    for s in [&mut inv.manufacturer, &mut inv.model, &mut inv.serial, &mut inv.firmware_version] {
        clip_opt(s);
    }
    inv.extra.truncate(MAX_EXTRA);
    for (k, v) in &mut inv.extra {
        *k = clip(k);
        *v = clip(v);
    }
    let mut cut = Vec::new();
    let mut mark = |s: Section, c: bool| {
        if c {
            cut.push(s);
        }
    };
    mark(Section::Processors, bound_list(&mut inv.processors));
    mark(Section::Memory, bound_list(&mut inv.memory));
    mark(Section::Drives, bound_list(&mut inv.drives));
    mark(Section::Nics, bound_list(&mut inv.nics));
    mark(Section::PowerSupplies, bound_list(&mut inv.power_supplies));
    mark(Section::Firmware, bound_list(&mut inv.firmware));
    for nic in &mut inv.nics {
        nic.mac_addresses.truncate(MAX_MACS);
        for m in &mut nic.mac_addresses {
            *m = clip(m);
        }
    }
    if let Some(fru) = &mut inv.fru {
        for f in fru.fields_mut() {
            clip_opt(f);
        }
    }
    // Too big encoded: halve the largest section until it fits.
    while encoded_len(inv) > MAX_ENCODED {
        let lens = [
            (inv.processors.len(), Section::Processors),
            (inv.memory.len(), Section::Memory),
            (inv.drives.len(), Section::Drives),
            (inv.nics.len(), Section::Nics),
            (inv.power_supplies.len(), Section::PowerSupplies),
            (inv.firmware.len(), Section::Firmware),
        ];
        let (n, section) = lens.into_iter().max_by_key(|(n, _)| *n).unwrap_or((0, Section::Firmware));
        if n == 0 {
            inv.extra.clear();
            break;
        }
        let keep = n / 2;
        match section {
            Section::Processors => inv.processors.truncate(keep),
            Section::Memory => inv.memory.truncate(keep),
            Section::Drives => inv.drives.truncate(keep),
            Section::Nics => inv.nics.truncate(keep),
            Section::PowerSupplies => inv.power_supplies.truncate(keep),
            Section::Firmware | Section::Fru => inv.firmware.truncate(keep),
        }
        cut.push(section);
    }
    inv.truncated.extend(cut);
    inv.truncated.sort();
    inv.truncated.dedup();
    inv.unread.sort();
    inv.unread.dedup();
}

impl Inventory {
    /// Whether the inventory carries any typed component.
    pub fn has_components(&self) -> bool {
        !(self.processors.is_empty()
            && self.memory.is_empty()
            && self.drives.is_empty()
            && self.nics.is_empty()
            && self.power_supplies.is_empty()
            && self.firmware.is_empty()
            && self.fru.is_none())
    }

    /// Sections this read could not get are taken from `previous` (the last
    /// stored record), so a BMC error for one collection neither loses
    /// what was known nor shows as components removed.
    pub fn keep_unread_from(&mut self, previous: &Inventory) {
        let unread = std::mem::take(&mut self.unread);
        for s in unread {
            if previous.unread.contains(&s) {
                self.unread.push(s);
                continue;
            }
            match s {
                Section::Processors => self.processors = previous.processors.clone(),
                Section::Memory => self.memory = previous.memory.clone(),
                Section::Drives => self.drives = previous.drives.clone(),
                Section::Nics => self.nics = previous.nics.clone(),
                Section::PowerSupplies => self.power_supplies = previous.power_supplies.clone(),
                Section::Firmware => self.firmware = previous.firmware.clone(),
                Section::Fru => self.fru = previous.fru.clone(),
            }
            if previous.truncated.contains(&s) && !self.truncated.contains(&s) {
                self.truncated.push(s);
            }
        }
    }
}

fn diff_list<C: Component>(section: Section, before: &[C], after: &[C], partial: bool, out: &mut Vec<InventoryChange>) {
    let old: BTreeMap<&str, &C> = before.iter().map(|c| (c.id(), c)).collect();
    let new: BTreeMap<&str, &C> = after.iter().map(|c| (c.id(), c)).collect();
    let name = section.as_str();
    let keys: std::collections::BTreeSet<&str> = old.keys().chain(new.keys()).copied().collect();
    for id in keys {
        match (old.get(id), new.get(id)) {
            // A truncated section's missing members may only have been cut.
            (Some(_), None) | (None, Some(_)) if partial => {}
            (Some(a), None) => out.push(InventoryChange::removed(format!("{name}.{id}"), a.summary())),
            (None, Some(b)) => out.push(InventoryChange::added(format!("{name}.{id}"), b.summary())),
            (Some(a), Some(b)) => {
                for ((field, x), (_, y)) in a.compared().into_iter().zip(b.compared()) {
                    if x != y {
                        out.push(InventoryChange {
                            field: format!("{name}.{id}.{field}"),
                            from: x,
                            to: y,
                            change: ChangeKind::Changed,
                        });
                    }
                }
            }
            (None, None) => {}
        }
    }
}

/// The component changes between two inventories (see the module doc).
/// Sections unread in either are skipped; in a truncated section only
/// components present in both are compared.
pub fn component_drift(before: &Inventory, after: &Inventory) -> Vec<InventoryChange> {
    let mut out = Vec::new();
    let skip = |s: Section| before.unread.contains(&s) || after.unread.contains(&s);
    let partial = |s: Section| before.truncated.contains(&s) || after.truncated.contains(&s);
    if !skip(Section::Processors) {
        diff_list(Section::Processors, &before.processors, &after.processors, partial(Section::Processors), &mut out);
    }
    if !skip(Section::Memory) {
        diff_list(Section::Memory, &before.memory, &after.memory, partial(Section::Memory), &mut out);
    }
    if !skip(Section::Drives) {
        diff_list(Section::Drives, &before.drives, &after.drives, partial(Section::Drives), &mut out);
    }
    if !skip(Section::Nics) {
        diff_list(Section::Nics, &before.nics, &after.nics, partial(Section::Nics), &mut out);
    }
    if !skip(Section::PowerSupplies) {
        diff_list(
            Section::PowerSupplies,
            &before.power_supplies,
            &after.power_supplies,
            partial(Section::PowerSupplies),
            &mut out,
        );
    }
    if !skip(Section::Firmware) {
        // The version is the firmware's identity for drift: `firmware.<id>`.
        let old: BTreeMap<&str, &Firmware> = before.firmware.iter().map(|f| (f.id.as_str(), f)).collect();
        let new: BTreeMap<&str, &Firmware> = after.firmware.iter().map(|f| (f.id.as_str(), f)).collect();
        let partial = partial(Section::Firmware);
        for id in old.keys().chain(new.keys()).copied().collect::<std::collections::BTreeSet<_>>() {
            let key = format!("firmware.{id}");
            match (old.get(id), new.get(id)) {
                (Some(_), None) | (None, Some(_)) if partial => {}
                (Some(a), None) => out.push(InventoryChange {
                    field: key,
                    from: a.version.clone(),
                    to: None,
                    change: ChangeKind::Removed,
                }),
                (None, Some(b)) => out.push(InventoryChange {
                    field: key,
                    from: None,
                    to: b.version.clone(),
                    change: ChangeKind::Added,
                }),
                (Some(a), Some(b)) => {
                    if a.version != b.version {
                        out.push(InventoryChange {
                            field: key,
                            from: a.version.clone(),
                            to: b.version.clone(),
                            change: ChangeKind::Changed,
                        });
                    }
                    diff_list(Section::Firmware, std::slice::from_ref(*a), std::slice::from_ref(*b), true, &mut out);
                }
                (None, None) => {}
            }
        }
    }
    if !skip(Section::Fru) {
        match (&before.fru, &after.fru) {
            (Some(a), Some(b)) => {
                for ((field, x), (_, y)) in a.fields().into_iter().zip(b.fields()) {
                    if x != y {
                        out.push(InventoryChange {
                            field: format!("fru.{field}"),
                            from: x.clone(),
                            to: y.clone(),
                            change: ChangeKind::Changed,
                        });
                    }
                }
            }
            (None, Some(b)) => out.push(InventoryChange::added("fru".into(), fru_summary(b))),
            (Some(a), None) => out.push(InventoryChange::removed("fru".into(), fru_summary(a))),
            (None, None) => {}
        }
    }
    out
}

fn fru_summary(f: &Fru) -> String {
    let parts: Vec<&str> =
        [&f.product_name, &f.product_serial, &f.board_serial].into_iter().flatten().map(String::as_str).collect();
    if parts.is_empty() {
        "present".to_owned()
    } else {
        parts.join(" ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inv() -> Inventory {
        Inventory {
            processors: vec![Processor {
                id: "CPU1".into(),
                model: Some("Xeon 6338".into()),
                cores: Some(32),
                threads: Some(64),
                health: Some(Health::Ok),
                ..Default::default()
            }],
            memory: vec![
                MemoryModule {
                    id: "DIMM1".into(),
                    capacity_mib: Some(16384),
                    memory_type: Some("DDR4".into()),
                    serial: Some("M1".into()),
                    ..Default::default()
                },
                MemoryModule {
                    id: "DIMM2".into(),
                    capacity_mib: Some(16384),
                    memory_type: Some("DDR4".into()),
                    serial: Some("M2".into()),
                    ..Default::default()
                },
            ],
            drives: vec![Drive {
                id: "Disk.Bay.0".into(),
                model: Some("PM883".into()),
                serial: Some("S1".into()),
                capacity_bytes: Some(960_197_124_096),
                ..Default::default()
            }],
            nics: vec![Nic {
                id: "NIC.1".into(),
                mac_addresses: vec!["00:11:22:33:44:55".into()],
                speed_mbps: Some(10_000),
                link_status: Some("LinkUp".into()),
                ..Default::default()
            }],
            power_supplies: vec![PowerSupply {
                id: "PSU1".into(),
                model: Some("PWS-1K".into()),
                capacity_w: Some(1000),
                ..Default::default()
            }],
            firmware: vec![
                Firmware {
                    id: "BMC".into(),
                    name: Some("BMC Firmware".into()),
                    version: Some("1.00".into()),
                    updateable: Some(true),
                    ..Default::default()
                },
                Firmware {
                    id: "BIOS".into(),
                    name: Some("BIOS".into()),
                    version: Some("2.1".into()),
                    updateable: Some(true),
                    ..Default::default()
                },
            ],
            fru: Some(Fru { board_serial: Some("B1".into()), product_name: Some("X1".into()), ..Default::default() }),
            ..Default::default()
        }
    }

    fn keys(d: &[InventoryChange]) -> Vec<&str> {
        d.iter().map(|c| c.field.as_str()).collect()
    }

    #[test]
    fn drift_names_components_and_fields() {
        let a = inv();
        assert!(component_drift(&a, &a).is_empty());
        let mut b = a.clone();
        b.memory[0].capacity_mib = Some(32768);
        b.memory.remove(1);
        b.drives.push(Drive { id: "Disk.Bay.1".into(), model: Some("PM883".into()), ..Default::default() });
        b.firmware[0].version = Some("1.10".into());
        b.fru.as_mut().unwrap().board_serial = Some("B2".into());
        // State, not inventory: not compared.
        b.processors[0].health = Some(Health::Critical);
        b.nics[0].link_status = Some("LinkDown".into());
        b.nics[0].speed_mbps = None;
        let d = component_drift(&a, &b);
        assert_eq!(
            keys(&d),
            ["memory.DIMM1.capacity_mib", "memory.DIMM2", "drives.Disk.Bay.1", "firmware.BMC", "fru.board_serial"],
            "{d:?}"
        );
        assert_eq!(
            (d[0].from.as_deref(), d[0].to.as_deref(), d[0].change),
            (Some("16384"), Some("32768"), ChangeKind::Changed)
        );
        assert_eq!(
            (d[1].from.as_deref(), d[1].to.as_deref(), d[1].change),
            (Some("16384 MiB DDR4 M2"), None, ChangeKind::Removed)
        );
        assert_eq!((d[2].from.as_deref(), d[2].change), (None, ChangeKind::Added));
        assert_eq!((d[3].from.as_deref(), d[3].to.as_deref()), (Some("1.00"), Some("1.10")));
    }

    #[test]
    fn unread_and_truncated_sections_are_not_drift() {
        let a = inv();
        let mut b = a.clone();
        b.memory.clear();
        b.unread.push(Section::Memory);
        b.firmware.clear();
        b.unread.push(Section::Firmware);
        assert!(component_drift(&a, &b).is_empty(), "an unread section is not removed components");
        // The worker keeps what was known, so the next read compares with it.
        b.keep_unread_from(&a);
        assert_eq!((b.memory.len(), b.firmware.len(), b.unread.len()), (2, 2, 0));
        let mut c = a.clone();
        c.truncated.push(Section::Memory);
        c.memory.truncate(1);
        c.memory[0].serial = Some("M9".into());
        assert_eq!(keys(&component_drift(&a, &c)), ["memory.DIMM1.serial"]);
    }

    #[test]
    fn hostile_inventories_are_bounded() {
        let mut i = Inventory::default();
        let long = "x".repeat(10_000);
        i.model = Some(long.clone());
        i.drives = (0..5000)
            .map(|n| Drive {
                id: if n % 2 == 0 { "d".into() } else { String::new() },
                model: Some(long.clone()),
                serial: Some(format!("S\u{7}{n}")),
                ..Default::default()
            })
            .collect();
        i.nics = vec![Nic { id: "n".into(), mac_addresses: vec!["aa".into(); 100], ..Default::default() }];
        i.extra = (0..1000).map(|n| (n.to_string(), long.clone())).collect();
        bound(&mut i);
        assert_eq!(i.model.as_ref().unwrap().chars().count(), MAX_TEXT);
        assert!(encoded_len(&i) <= MAX_ENCODED, "{}", encoded_len(&i));
        assert!(!i.drives.is_empty() && i.drives.len() <= MAX_COMPONENTS);
        assert_eq!(i.truncated, vec![Section::Drives]);
        assert_eq!(i.nics[0].mac_addresses.len(), MAX_MACS);
        let ids: std::collections::BTreeSet<&str> = i.drives.iter().map(|d| d.id.as_str()).collect();
        assert_eq!(ids.len(), i.drives.len(), "ids made unique");
        assert_eq!((i.drives[0].id.as_str(), i.drives[1].id.as_str(), i.drives[2].id.as_str()), ("d", "1", "d#2"));
        assert!(!i.drives[0].serial.as_ref().unwrap().contains('\u{7}'));
        let again = i.clone();
        bound(&mut i);
        assert_eq!(i, again, "idempotent");
    }

    #[test]
    fn old_records_decode_and_new_ones_round_trip() {
        let old = serde_json::json!({"manufacturer": "Contoso", "firmware_version": "1.0", "extra": [["bios", "2"]]});
        let i: Inventory = serde_json::from_value(old).unwrap();
        assert!(!i.has_components() && i.unread.is_empty());
        let new = inv();
        let mp = rmp_serde::to_vec_named(&new).unwrap();
        assert_eq!(rmp_serde::from_slice::<Inventory>(&mp).unwrap(), new);
        let json = serde_json::to_value(&new).unwrap();
        assert_eq!(
            json["firmware"][0],
            serde_json::json!({"id": "BMC", "name": "BMC Firmware", "version": "1.00", "updateable": true})
        );
        assert_eq!(serde_json::from_value::<Inventory>(json).unwrap(), new);
    }
}
