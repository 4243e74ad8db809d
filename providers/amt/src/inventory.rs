//! Inventory: what AMT knows about itself and the platform.
//!
//! | source                                   | field                                  |
//! |------------------------------------------|----------------------------------------|
//! | `AMT_GeneralSettings` (required)         | extra: `amt_hostname`, `amt_domain`, `amt_digest_realm`, `amt_network_enabled` … |
//! | `CIM_SoftwareIdentity` `InstanceID=AMT`  | `firmware_version` (`Build Number` appended) |
//! | other `CIM_SoftwareIdentity`             | extra: `amt_sw_<InstanceID>` = `VersionString` |
//! | `CIM_ComputerSystemPackage`              | extra: `platform_guid`; its `Antecedent` selects the chassis |
//! | `CIM_Chassis`                            | `manufacturer`, `model`, `serial`      |
//! | `CIM_AssociatedPowerManagementService`   | `power_state`, extra `amt_power_state` |
//!
//! Only `AMT_GeneralSettings` is required: a WS-Man fault on any other class
//! (older firmware lacks some) leaves its fields empty. Transport and
//! authentication errors always fail the action.
//! What the AMT wrote is bounded like every provider's inventory
//! ([`bmcfleet_schema::components::bound`]; at most `MAX_SOFTWARE` software
//! identities).

use crate::error::AmtError;
use crate::power;
use crate::wsman::client::WsmanClient;
use crate::wsman::response::{epr_selectors, prop};
use bmcfleet_provider::Ctx;
use bmcfleet_schema::Inventory;

/// Most `CIM_SoftwareIdentity` versions kept as `amt_sw_*` extras (an AMT
/// has about ten), so that the extras after them fit in
/// [`bmcfleet_schema::components::MAX_EXTRA`].
const MAX_SOFTWARE: usize = 32;

/// `AMT_GeneralSettings` properties copied to `extra`.
const GENERAL: &[(&str, &str)] = &[
    ("HostName", "amt_hostname"),
    ("DomainName", "amt_domain"),
    ("HostOSFQDN", "amt_host_os_fqdn"),
    ("DigestRealm", "amt_digest_realm"),
    ("AMTNetworkEnabled", "amt_network_enabled"),
    ("NetworkInterfaceEnabled", "amt_network_interface_enabled"),
    ("PowerSource", "amt_power_source"),
    ("WsmanOnlyMode", "amt_wsman_only_mode"),
];

fn non_empty(s: Option<&str>) -> Option<String> {
    s.map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned)
}

/// `Ok(None)` for a WS-Man fault or failed method: the class is optional.
fn optional<T>(what: &str, bmc: &str, r: Result<T, AmtError>) -> Result<Option<T>, AmtError> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(e @ (AmtError::Fault(_) | AmtError::ReturnValue(_) | AmtError::Protocol(_))) => {
            tracing::debug!(bmc, class = what, error = %e, "Optional inventory class unavailable.");
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

pub async fn inventory(client: &mut WsmanClient, ctx: &Ctx) -> Result<Inventory, AmtError> {
    let bmc = client.bmc().to_owned();
    let mut inv = Inventory::default();

    let general = client.get(ctx, "AMT_GeneralSettings", &[]).await?;
    for (property, key) in GENERAL {
        if let Some(v) = non_empty(prop(&general, property)) {
            inv.extra.push(((*key).to_owned(), v));
        }
    }

    let sw = client.enumerate(ctx, "CIM_SoftwareIdentity").await;
    if let Some(items) = optional("CIM_SoftwareIdentity", &bmc, sw)? {
        let version_of = |id: &str| {
            items.iter().find(|i| prop(i, "InstanceID") == Some(id)).and_then(|i| non_empty(prop(i, "VersionString")))
        };
        inv.firmware_version = version_of("AMT").map(|v| match version_of("Build Number") {
            Some(b) if !v.ends_with(&b) => format!("{v}.{b}"),
            _ => v,
        });
        for i in items.iter().filter(|i| prop(i, "InstanceID").is_some()).take(MAX_SOFTWARE) {
            if let (Some(id), Some(v)) = (non_empty(prop(i, "InstanceID")), non_empty(prop(i, "VersionString"))) {
                let key: String =
                    id.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '_' }).collect();
                inv.extra.push((format!("amt_sw_{key}"), v));
            }
        }
    }

    let pkg = client.enumerate(ctx, "CIM_ComputerSystemPackage").await;
    let mut chassis_selectors =
        vec![("CreationClassName".to_owned(), "CIM_Chassis".to_owned()), ("Tag".to_owned(), "CIM_Chassis".to_owned())];
    if let Some(items) = optional("CIM_ComputerSystemPackage", &bmc, pkg)? {
        if let Some(p) = items.first() {
            if let Some(guid) = non_empty(prop(p, "PlatformGUID")) {
                inv.extra.push(("platform_guid".into(), guid));
            }
            if let Some(a) = p.child_local("Antecedent") {
                let sels = epr_selectors(a);
                if !sels.is_empty() {
                    chassis_selectors = sels;
                }
            }
        }
    }
    let sel_refs: Vec<(&str, &str)> = chassis_selectors.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let chassis = client.get(ctx, "CIM_Chassis", &sel_refs).await;
    if let Some(c) = optional("CIM_Chassis", &bmc, chassis)? {
        inv.manufacturer = non_empty(prop(&c, "Manufacturer"));
        inv.model = non_empty(prop(&c, "Model"));
        inv.serial = non_empty(prop(&c, "SerialNumber"));
        if let Some(v) = non_empty(prop(&c, "Version")) {
            inv.extra.push(("chassis_version".into(), v));
        }
    }

    let st = power::status(client, ctx).await;
    if let Some(st) = optional("CIM_AssociatedPowerManagementService", &bmc, st)? {
        inv.power_state = Some(st.mapped());
        inv.extra.push(("amt_power_state".into(), format!("{} ({})", st.state, power::describe(st.state))));
    }
    // What the AMT wrote is bounded like every provider's inventory: so
    // many extras, so many characters each, no control characters.
    bmcfleet_schema::components::bound(&mut inv);
    Ok(inv)
}
