//! Service discovery, done once per session: the service root, the
//! ComputerSystem to drive (by `system_id` when the BMC exposes several),
//! its Manager, and what their actions allow.
//!
//! Only *structure* is cached (paths, action targets, allowable values).
//! State (power, boot override, media) is read fresh for every action.

use crate::error::{err, invalid};
use crate::json::{allowable, last_segment, link, links, members, norm_path, str_of, string_of};
use crate::transport::Transport;
use bmcfleet_provider::{Ctx, Result};
use bmcfleet_schema::ErrorCode;
use serde_json::Value;

/// Every `ResetType` DSP0266 defines. Used to split values that some
/// firmware concatenates (a Supermicro X12 lists
/// `"GracefulShutdownGracefulRestart"` as one value).
pub(crate) const RESET_TYPES: [&str; 12] = [
    "On",
    "ForceOff",
    "GracefulShutdown",
    "GracefulRestart",
    "ForceRestart",
    "Nmi",
    "ForceOn",
    "PushPowerButton",
    "PowerCycle",
    "Suspend",
    "Pause",
    "Resume",
];

/// An action and the values its `ResetType` may take.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResetAction {
    /// Where to POST.
    pub target: String,
    /// `None` when the BMC does not say (then the standard value is sent
    /// and the BMC decides).
    pub allowed: Option<Vec<String>>,
}

impl ResetAction {
    /// The first of `prefs` the BMC allows (or `prefs[0]` if it does not say).
    pub fn pick(&self, prefs: &[&'static str]) -> Option<&'static str> {
        match &self.allowed {
            None => prefs.first().copied(),
            Some(list) => prefs.iter().copied().find(|p| list.iter().any(|a| a == p)),
        }
    }

    pub fn allows(&self, value: &str) -> bool {
        self.allowed.as_ref().is_none_or(|l| l.iter().any(|a| a == value))
    }

    pub fn describe_allowed(&self) -> String {
        match &self.allowed {
            None => "not advertised".to_owned(),
            Some(l) if l.is_empty() => "none".to_owned(),
            Some(l) => l.join(", "),
        }
    }
}

/// Split allowable values into known `ResetType`s where a value is a
/// concatenation of several; keep unknown vendor values as they are.
pub(crate) fn normalise_reset_types(values: Vec<String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut add = |v: &str| {
        if !out.iter().any(|o| o == v) {
            out.push(v.to_owned());
        }
    };
    for v in values {
        let v = v.trim();
        if RESET_TYPES.contains(&v) {
            add(v);
        } else if let Some(parts) = split_known(v) {
            tracing::debug!(value = %v, "Split a concatenated ResetType allowable value.");
            for p in parts {
                add(p);
            }
        } else {
            add(v);
        }
    }
    out
}

fn split_known(mut s: &str) -> Option<Vec<&'static str>> {
    let mut parts = Vec::new();
    while !s.is_empty() {
        // Longest match first so `ForceOn` never steals from `ForceOff` etc.
        let next = RESET_TYPES.iter().filter(|t| s.starts_with(**t)).max_by_key(|t| t.len())?;
        parts.push(*next);
        s = &s[next.len()..];
    }
    (parts.len() > 1).then_some(parts)
}

#[derive(Clone, Debug, Default)]
pub(crate) struct RootInfo {
    pub vendor: Option<String>,
    pub product: Option<String>,
    pub redfish_version: Option<String>,
    pub systems: Option<String>,
    pub managers: Option<String>,
    pub account_service: Option<String>,
    pub chassis: Option<String>,
    pub update_service: Option<String>,
}

#[derive(Clone, Debug)]
pub(crate) struct SystemInfo {
    pub path: String,
    pub id: String,
    pub reset: Option<ResetAction>,
    pub virtual_media: Option<String>,
}

#[derive(Clone, Debug)]
pub(crate) struct ManagerInfo {
    pub path: String,
    pub reset: Option<ResetAction>,
    pub virtual_media: Option<String>,
    pub ethernet_interfaces: Option<String>,
}

/// What one session knows about its BMC's structure.
#[derive(Clone, Debug)]
pub(crate) struct Service {
    pub root: RootInfo,
    pub system: SystemInfo,
    pub manager: Option<ManagerInfo>,
}

impl RootInfo {
    /// What the service root says (vendor, links), as read.
    pub fn from_root(root: &Value) -> RootInfo {
        RootInfo {
            vendor: string_of(root, "Vendor")
                .or_else(|| root.get("Oem").and_then(Value::as_object).and_then(|o| o.keys().next().cloned())),
            product: string_of(root, "Product"),
            redfish_version: string_of(root, "RedfishVersion"),
            systems: link(root, "Systems"),
            managers: link(root, "Managers"),
            account_service: link(root, "AccountService"),
            chassis: link(root, "Chassis"),
            update_service: link(root, "UpdateService"),
        }
    }
}

impl Service {
    pub async fn discover(t: &mut Transport, ctx: &Ctx, root: &Value, system_id: Option<&str>) -> Result<Service> {
        let root_info = RootInfo::from_root(root);
        let systems = root_info
            .systems
            .clone()
            .ok_or_else(|| err(ErrorCode::Unsupported, "the service root links no Systems collection"))?;
        let system = choose_system(t, ctx, &systems, system_id).await?;
        let system_info = SystemInfo {
            path: system.0.clone(),
            id: string_of(&system.1, "Id").unwrap_or_else(|| last_segment(&system.0).to_owned()),
            reset: reset_action(t, ctx, &system.1, "#ComputerSystem.Reset").await,
            virtual_media: link(&system.1, "VirtualMedia"),
        };
        let manager = choose_manager(t, ctx, &system, root_info.managers.as_deref()).await;
        let manager = match manager {
            Some((path, body)) => Some(ManagerInfo {
                reset: reset_action(t, ctx, &body, "#Manager.Reset").await,
                virtual_media: link(&body, "VirtualMedia"),
                ethernet_interfaces: link(&body, "EthernetInterfaces"),
                path,
            }),
            None => None,
        };
        tracing::debug!(
            bmc = %t.bmc(),
            system = %system_info.path,
            manager = manager.as_ref().map(|m| m.path.as_str()).unwrap_or("-"),
            vendor = root_info.vendor.as_deref().unwrap_or("-"),
            "Redfish service discovered."
        );
        Ok(Service { root: root_info, system: system_info, manager })
    }
}

async fn choose_system(
    t: &mut Transport,
    ctx: &Ctx,
    collection: &str,
    wanted: Option<&str>,
) -> Result<(String, Value)> {
    let coll = t.get(ctx, collection).await?;
    let paths = members(&coll.body);
    let ids: Vec<&str> = paths.iter().map(|p| last_segment(p)).collect();
    match wanted {
        None => match paths.len() {
            0 => Err(err(ErrorCode::TargetNotFound, format!("{collection} lists no ComputerSystem"))),
            1 => {
                let r = t.get(ctx, &paths[0]).await?;
                Ok((paths[0].clone(), r.body))
            }
            n => Err(invalid(format!(
                "the BMC exposes {n} systems ({}); set bmc.system_id to choose one",
                ids.join(", ")
            ))),
        },
        Some(want) => {
            let want_path = norm_path(want);
            if let Some(p) = paths.iter().find(|p| last_segment(p) == want || **p == want_path) {
                let r = t.get(ctx, p).await?;
                return Ok((p.clone(), r.body));
            }
            // Match on what the members say about themselves (Id, Name, UUID).
            for p in &paths {
                let r = t.get(ctx, p).await?;
                let hit = ["Id", "Name"].iter().any(|k| str_of(&r.body, k) == Some(want))
                    || str_of(&r.body, "UUID").is_some_and(|u| u.eq_ignore_ascii_case(want));
                if hit {
                    return Ok((p.clone(), r.body));
                }
            }
            Err(err(
                ErrorCode::TargetNotFound,
                format!("no system `{want}` on this BMC; it exposes: {}", ids.join(", ")),
            ))
        }
    }
}

/// The system's manager: the first of `Links.ManagedBy` that answers, else
/// the Managers collection member that says it manages this system
/// (`ManagerForServers`), else the collection's BMC when it has exactly
/// one. `None` when the BMC exposes no manager, or several BMCs of which
/// none is linked to this system: which one manages it is not guessed
/// (manager capabilities then report `unsupported`, nothing sent).
async fn choose_manager(
    t: &mut Transport,
    ctx: &Ctx,
    system: &(String, Value),
    managers: Option<&str>,
) -> Option<(String, Value)> {
    let managed_by = system.1.get("Links").map(|l| links(l, "ManagedBy")).unwrap_or_default();
    for p in &managed_by {
        match t.get(ctx, p).await {
            Ok(r) => return Some((p.clone(), r.body)),
            Err(e) => tracing::debug!(bmc = %t.bmc(), manager = %p, error = %e, "ManagedBy link unreadable."),
        }
    }
    let coll = t.get(ctx, managers?).await.ok()?;
    let mut bmcs = Vec::new();
    for p in members(&coll.body) {
        let Ok(r) = t.get(ctx, &p).await else { continue };
        let serves = r.body.get("Links").map(|l| links(l, "ManagerForServers")).unwrap_or_default();
        if serves.contains(&system.0) {
            return Some((p, r.body));
        }
        if str_of(&r.body, "ManagerType").is_none_or(|k| k == "BMC") {
            bmcs.push((p, r.body));
        }
    }
    if bmcs.len() > 1 {
        tracing::debug!(bmc = %t.bmc(), managers = bmcs.len(), "Several BMC managers, none linked to the system: none chosen.");
        return None;
    }
    bmcs.pop()
}

/// `Actions[name]` with its ResetType allowable values, inline or through
/// `@Redfish.ActionInfo`.
async fn reset_action(t: &mut Transport, ctx: &Ctx, resource: &Value, name: &str) -> Option<ResetAction> {
    let (target, mut allowed, info) = action_of(resource, name)?;
    if allowed.is_none() {
        if let Some(info) = info {
            match t.get(ctx, &info).await {
                Ok(r) => allowed = action_info_allowed(&r.body),
                Err(e) => tracing::debug!(bmc = %t.bmc(), %info, error = %e, "ActionInfo unreadable."),
            }
        }
    }
    Some(ResetAction { target, allowed: allowed.map(normalise_reset_types) })
}

/// `Actions[name]` of a resource: its target, its inline `ResetType`
/// allowable values, and its `@Redfish.ActionInfo` link.
pub(crate) fn action_of(resource: &Value, name: &str) -> Option<(String, Option<Vec<String>>, Option<String>)> {
    let action = resource.get("Actions")?.get(name)?;
    let target = norm_path(str_of(action, "target")?);
    let info = str_of(action, "@Redfish.ActionInfo").map(norm_path);
    Some((target, allowable(action, "ResetType"), info))
}

/// The `ResetType` allowable values an ActionInfo resource lists.
pub(crate) fn action_info_allowed(info: &Value) -> Option<Vec<String>> {
    action_info_values(info, "ResetType")
}

/// The allowable values an ActionInfo resource lists for `param`.
pub(crate) fn action_info_values(info: &Value, param: &str) -> Option<Vec<String>> {
    info.get("Parameters")
        .and_then(Value::as_array)
        .and_then(|ps| ps.iter().find(|p| str_of(p, "Name") == Some(param)))
        .and_then(|p| p.get("AllowableValues"))
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).map(str::to_owned).collect())
}

/// The parameters an ActionInfo resource marks `Required` that are not
/// among those `sent`: an action the BMC would refuse (or read as
/// something else) is not sent.
pub(crate) fn required_unsent(info: &Value, sent: &[&str]) -> Vec<String> {
    info.get("Parameters")
        .and_then(Value::as_array)
        .map(|ps| {
            ps.iter()
                .filter(|p| p.get("Required").and_then(Value::as_bool) == Some(true))
                .filter_map(|p| str_of(p, "Name"))
                .filter(|n| !sent.contains(n))
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn splits_concatenated_reset_types() {
        // Supermicro X12 (fixture smc_1.14.0_systems_1.json).
        let got = normalise_reset_types(s(&[
            "On",
            "ForceOff",
            "GracefulShutdownGracefulRestart",
            "ForceRestart",
            "Nmi",
            "ForceOn",
        ]));
        assert_eq!(
            got,
            s(&["On", "ForceOff", "GracefulShutdown", "GracefulRestart", "ForceRestart", "Nmi", "ForceOn"])
        );
    }

    #[test]
    fn keeps_unknown_values() {
        assert_eq!(normalise_reset_types(s(&["OemBounce", "On", "On"])), s(&["OemBounce", "On"]));
    }

    #[test]
    fn pick_prefers_in_order() {
        let a = ResetAction { target: "/x".into(), allowed: Some(s(&["ForceOn", "ForceOff"])) };
        assert_eq!(a.pick(&["On", "ForceOn"]), Some("ForceOn"));
        assert_eq!(a.pick(&["PowerCycle"]), None);
        let open = ResetAction { target: "/x".into(), allowed: None };
        assert_eq!(open.pick(&["On", "ForceOn"]), Some("On"));
    }

    #[test]
    fn reads_actions_and_action_info() {
        let system = serde_json::json!({"Actions": {"#ComputerSystem.Reset": {
            "target": "https://bmc/redfish/v1/Systems/1/Actions/ComputerSystem.Reset/",
            "@Redfish.ActionInfo": "/redfish/v1/Systems/1/ResetActionInfo"}}});
        let (target, inline, info) = action_of(&system, "#ComputerSystem.Reset").unwrap();
        // An absolute target stays whole: the transport sends it only if it is on the BMC.
        assert_eq!(target, "https://bmc/redfish/v1/Systems/1/Actions/ComputerSystem.Reset");
        assert_eq!((inline, info.as_deref()), (None, Some("/redfish/v1/Systems/1/ResetActionInfo")));
        assert!(action_of(&system, "#Manager.Reset").is_none());
        let info = serde_json::json!({"Parameters": [{"Name": "Other"}, {"Name": "ResetType", "AllowableValues": ["On", 3, "ForceOff"]}]});
        assert_eq!(action_info_allowed(&info), Some(s(&["On", "ForceOff"])));
        assert_eq!(action_info_allowed(&serde_json::json!({"Parameters": {}})), None);
        let root = RootInfo::from_root(
            &serde_json::json!({"Oem": {"Supermicro": {}}, "Systems": {"@odata.id": "/redfish/v1/Systems/"}}),
        );
        assert_eq!(
            (root.vendor.as_deref(), root.systems.as_deref()),
            (Some("Supermicro"), Some("/redfish/v1/Systems"))
        );
    }
}
