//! BIOS settings: the ComputerSystem's `Bios` resource, its settings
//! object (`@Redfish.Settings`: where changes wait for the next reset) and
//! its attribute registry (`AttributeRegistry` named in the Bios resource,
//! found through `/redfish/v1/Registries` → the registry file's `Location`
//! URIs). A `bios_set` is checked against the registry when the BMC offers
//! one (unknown attribute, read-only, not an allowed value, out of bounds,
//! wrong type), else against the current attributes (unknown name, wrong
//! JSON type), before anything is written.

use crate::boot::{on_reset_apply_time, settings_object};
use crate::discovery::action_of;
use crate::error::{invalid, unsupported};
use crate::json::{link, members, norm_path, str_of};
use crate::session::RedfishSession;
use bmcfleet_provider::{Bios, Ctx, Result};
use bmcfleet_schema::{Bios as BiosData, BiosAttribute, BiosPending, BiosSet};
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;

/// The most registry files looked at for the BIOS attribute registry.
const MAX_REGISTRY_FILES: usize = 64;

/// One `RegistryEntries.Attributes[]` entry.
pub(crate) fn registry_attribute(v: &Value) -> Option<BiosAttribute> {
    Some(BiosAttribute {
        name: str_of(v, "AttributeName")?.to_owned(),
        kind: str_of(v, "Type").unwrap_or("String").to_owned(),
        read_only: v.get("ReadOnly").and_then(Value::as_bool).unwrap_or(false)
            || v.get("Immutable").and_then(Value::as_bool).unwrap_or(false),
        allowed: v
            .get("Value")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(|x| str_of(x, "ValueName").map(str::to_owned)).collect())
            .unwrap_or_default(),
        lower_bound: v.get("LowerBound").and_then(Value::as_i64),
        upper_bound: v.get("UpperBound").and_then(Value::as_i64),
        max_length: v.get("MaxLength").and_then(Value::as_u64),
    })
}

/// The registry's attributes by name.
pub(crate) fn registry_attributes(registry: &Value) -> BTreeMap<String, BiosAttribute> {
    registry
        .get("RegistryEntries")
        .and_then(|e| e.get("Attributes"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(registry_attribute)
        .map(|a| (a.name.clone(), a))
        .collect()
}

/// Why an attribute cannot be set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttributeErrorKind {
    /// Not an attribute of this system (nor of its registry).
    Unknown,
    /// The registry marks it read-only.
    ReadOnly,
    /// The value is not one the attribute takes (type, range, allowed values).
    Value,
    /// A password attribute: never set through `bios_set`.
    Password,
}

/// An attribute `bios_set` refuses before anything is sent.
pub type AttributeError = bmcfleet_schema::error::Error<AttributeErrorKind>;

/// Checks one attribute to set: against its registry entry when there is
/// a registry, else against the current value's JSON type.
pub(crate) fn check_attribute(
    name: &str,
    value: &Value,
    registry: Option<&BTreeMap<String, BiosAttribute>>,
    current: &Map<String, Value>,
) -> std::result::Result<(), AttributeError> {
    let no = |kind: AttributeErrorKind, why: String| Err(AttributeError::new(kind, why));
    let Some(registry) = registry else {
        return match current.get(name) {
            None => no(AttributeErrorKind::Unknown, format!("`{name}` is not a BIOS attribute of this system")),
            Some(cur) if !cur.is_null() && std::mem::discriminant(cur) != std::mem::discriminant(value) => {
                no(AttributeErrorKind::Value, format!("`{name}` takes a value like {cur}, not {value}"))
            }
            Some(_) => Ok(()),
        };
    };
    let Some(a) = registry.get(name) else {
        return no(AttributeErrorKind::Unknown, format!("`{name}` is not in the BIOS attribute registry"));
    };
    if a.read_only {
        return no(AttributeErrorKind::ReadOnly, format!("`{name}` is read-only"));
    }
    match a.kind.as_str() {
        "Enumeration" => match value.as_str() {
            Some(s) if a.allowed.is_empty() || a.allowed.iter().any(|x| x == s) => Ok(()),
            _ => {
                no(AttributeErrorKind::Value, format!("`{name}` must be one of {}, not {value}", a.allowed.join(", ")))
            }
        },
        "Integer" => match value.as_i64() {
            Some(n) if a.lower_bound.is_some_and(|l| n < l) || a.upper_bound.is_some_and(|u| n > u) => no(
                AttributeErrorKind::Value,
                format!(
                    "`{name}` must be from {} to {}, not {n}",
                    a.lower_bound.map(|l| l.to_string()).unwrap_or_else(|| "-".into()),
                    a.upper_bound.map(|u| u.to_string()).unwrap_or_else(|| "-".into())
                ),
            ),
            Some(_) => Ok(()),
            None => no(AttributeErrorKind::Value, format!("`{name}` takes an integer, not {value}")),
        },
        "Boolean" if !value.is_boolean() => {
            no(AttributeErrorKind::Value, format!("`{name}` takes true or false, not {value}"))
        }
        "String" => match value.as_str() {
            Some(s) if a.max_length.is_some_and(|m| s.chars().count() as u64 > m) => no(
                AttributeErrorKind::Value,
                format!("`{name}` takes at most {} characters", a.max_length.unwrap_or(0)),
            ),
            Some(_) => Ok(()),
            None => no(AttributeErrorKind::Value, format!("`{name}` takes a string, not {value}")),
        },
        "Password" => no(AttributeErrorKind::Password, format!("`{name}` is a password: not set through bios_set")),
        _ => Ok(()),
    }
}

impl RedfishSession {
    async fn bios_resource(&mut self, ctx: &Ctx) -> Result<crate::transport::Resource> {
        let system = self.transport.get(ctx, &self.service.system.path.clone()).await?;
        let path =
            link(&system.body, "Bios").ok_or_else(|| unsupported("the ComputerSystem links no Bios resource"))?;
        self.transport.get_linked(ctx, &path, "Bios").await
    }

    /// The attribute registry the Bios resource names, if the BMC serves it.
    async fn bios_registry(&mut self, ctx: &Ctx, bios: &Value) -> Option<Value> {
        let name = str_of(bios, "AttributeRegistry")?.to_owned();
        let root = self.transport.get(ctx, "/redfish/v1").await.ok()?;
        let coll = link(&root.body, "Registries")?;
        let files = members(&self.transport.get(ctx, &coll).await.ok()?.body);
        let mut fallback = None;
        for path in files.into_iter().take(MAX_REGISTRY_FILES) {
            let Ok(file) = self.transport.get(ctx, &path).await else { continue };
            let ids = [str_of(&file.body, "Id"), str_of(&file.body, "Registry")];
            let exact = ids.contains(&Some(name.as_str()));
            // Some BMCs name the file differently from the registry it holds
            // (sushy-emulator: file `BiosAttributeRegistry.v1_0_0`, registry `...P89.v1_0_0`).
            let likely = ids.iter().flatten().any(|i| i.contains("AttributeRegistry") || i.contains("BiosRegistry"));
            if !exact && !likely {
                continue;
            }
            for loc in file.body.get("Location").and_then(Value::as_array).into_iter().flatten() {
                let Some(uri) = str_of(loc, "Uri") else { continue };
                let Ok(reg) = self.transport.get(ctx, &norm_path(uri)).await else { continue };
                if exact || str_of(&reg.body, "Id") == Some(name.as_str()) {
                    return Some(reg.body);
                }
                fallback.get_or_insert(reg.body);
            }
        }
        fallback
    }
}

#[async_trait::async_trait]
impl Bios for RedfishSession {
    async fn bios(&mut self, ctx: &Ctx) -> Result<BiosData> {
        let bios = self.bios_resource(ctx).await?;
        let attributes: BTreeMap<String, Value> = bios
            .body
            .get("Attributes")
            .and_then(Value::as_object)
            .map(|m| m.clone().into_iter().collect())
            .unwrap_or_default();
        let mut pending = BTreeMap::new();
        if let Some(settings) = settings_object(&bios.body).filter(|p| *p != bios.path) {
            if let Ok(s) = self.transport.get(ctx, &settings).await {
                for (k, v) in s.body.get("Attributes").and_then(Value::as_object).into_iter().flatten() {
                    if attributes.get(k) != Some(v) {
                        pending.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        let registry = match self.bios_registry(ctx, &bios.body).await {
            Some(r) => registry_attributes(&r).into_values().filter(|a| attributes.contains_key(&a.name)).collect(),
            None => Vec::new(),
        };
        Ok(BiosData { attributes, pending, registry })
    }

    async fn set_bios(&mut self, ctx: &Ctx, set: &BiosSet) -> Result<BiosPending> {
        let bios = self.bios_resource(ctx).await?;
        let current = bios.body.get("Attributes").and_then(Value::as_object).cloned().unwrap_or_default();
        let registry =
            self.bios_registry(ctx, &bios.body).await.map(|r| registry_attributes(&r)).filter(|r| !r.is_empty());
        let problems: Vec<String> = set
            .attributes
            .iter()
            .filter_map(|(k, v)| check_attribute(k, v, registry.as_ref(), &current).err().map(|e| e.to_string()))
            .collect();
        if !problems.is_empty() {
            return Err(invalid(format!("bios_set: {}", problems.join("; "))));
        }
        let apply_time = on_reset_apply_time(&bios.body);
        let mut body = json!({"Attributes": set.attributes});
        if let Some(at) = apply_time {
            body["@Redfish.SettingsApplyTime"] = json!({"ApplyTime": at});
        }
        let target = match settings_object(&bios.body) {
            Some(path) if path != bios.path => self.transport.get(ctx, &path).await?,
            _ => bios,
        };
        self.patch_with_etag(ctx, target, &body).await?;
        Ok(BiosPending {
            attributes: set.attributes.clone(),
            apply_time: Some(apply_time.unwrap_or("OnReset").to_owned()),
        })
    }

    async fn reset_bios(&mut self, ctx: &Ctx) -> Result<()> {
        let bios = self.bios_resource(ctx).await?;
        let (target, _, info) = action_of(&bios.body, "#Bios.ResetBios")
            .ok_or_else(|| unsupported("the Bios resource offers no Bios.ResetBios"))?;
        // ResetBios takes no parameter: one its ActionInfo requires is not sent.
        if let Some(info) = info {
            let required = crate::discovery::required_unsent(&self.transport.get(ctx, &info).await?.body, &[]);
            if !required.is_empty() {
                return Err(unsupported(format!(
                    "Bios.ResetBios requires {} (its @Redfish.ActionInfo), which bmcfleet does not send; nothing was sent",
                    required.join(", ")
                )));
            }
        }
        self.transport.post(ctx, &target, &json!({})).await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn registry() -> BTreeMap<String, BiosAttribute> {
        // AttributeRegistry v1.x entries (DMTF schema shapes).
        registry_attributes(&json!({"RegistryEntries": {"Attributes": [
            {"AttributeName": "BootMode", "Type": "Enumeration", "ReadOnly": false, "Value": [{"ValueName": "Bios"}, {"ValueName": "Uefi"}]},
            {"AttributeName": "NumCores", "Type": "Integer", "LowerBound": 1, "UpperBound": 64},
            {"AttributeName": "SerialNumber", "Type": "String", "ReadOnly": true, "MaxLength": 16},
            {"AttributeName": "AssetTag", "Type": "String", "MaxLength": 4},
            {"AttributeName": "VtEnabled", "Type": "Boolean"},
            {"AttributeName": "AdminPwd", "Type": "Password"}]}}))
    }

    #[test]
    fn attributes_are_checked_against_the_registry() {
        let r = registry();
        let cur = Map::new();
        let check = |k: &str, v: Value| check_attribute(k, &v, Some(&r), &cur).map_err(|e| e.to_string());
        let kind = |k: &str, v: Value| check_attribute(k, &v, Some(&r), &cur).unwrap_err().kind();
        assert_eq!(kind("Nope", json!(1)), AttributeErrorKind::Unknown);
        assert_eq!(kind("SerialNumber", json!("x")), AttributeErrorKind::ReadOnly);
        assert_eq!(kind("NumCores", json!(65)), AttributeErrorKind::Value);
        assert_eq!(kind("AdminPwd", json!("x")), AttributeErrorKind::Password);
        assert!(check("BootMode", json!("Uefi")).is_ok());
        assert_eq!(
            check("BootMode", json!("Legacy")).unwrap_err(),
            "`BootMode` must be one of Bios, Uefi, not \"Legacy\""
        );
        assert_eq!(check("Nope", json!(1)).unwrap_err(), "`Nope` is not in the BIOS attribute registry");
        assert_eq!(check("SerialNumber", json!("x")).unwrap_err(), "`SerialNumber` is read-only");
        assert_eq!(check("NumCores", json!(65)).unwrap_err(), "`NumCores` must be from 1 to 64, not 65");
        assert!(check("NumCores", json!(8)).is_ok());
        assert!(check("NumCores", json!("8")).is_err());
        assert!(check("AssetTag", json!("toolong")).is_err());
        assert!(check("VtEnabled", json!(true)).is_ok() && check("VtEnabled", json!("yes")).is_err());
        assert!(check("AdminPwd", json!("x")).is_err());
    }

    #[test]
    fn without_a_registry_the_current_attributes_decide() {
        let cur: Map<String, Value> = json!({"BootMode": "Bios", "Cores": 4}).as_object().unwrap().clone();
        assert!(check_attribute("BootMode", &json!("Uefi"), None, &cur).is_ok());
        assert!(check_attribute("Cores", &json!("four"), None, &cur).is_err());
        assert!(check_attribute("Unknown", &json!(1), None, &cur).is_err());
    }
}
