//! One-time boot device selection (AMT "boot options").
//!
//! # Setting the next boot
//!
//! Following the Intel AMT SDK ("Set SOL/Storage Redirection and other Boot
//! Options", "Set or Disable Boot Configuration Settings for the Next Boot"):
//!
//! 1. Get `AMT_BootCapabilities`; refuse devices the firmware does not offer.
//! 2. Get `AMT_BootSettingData` and Put it back with every boot option
//!    zeroed (`false`/`0`: no IDE-R, SOL, BIOS pause, lock, reflash…) except
//!    `BIOSSetup` (device `bios`) or `UseSafeMode` (device `safe`). Identity
//!    and read-only status properties are sent back unchanged.
//! 3. `CIM_BootConfigSetting.ChangeBootOrder` on `Intel(r) AMT: Boot
//!    Configuration 0` with the `CIM_BootSourceSetting` EPR: `Intel(r) AMT:
//!    Force PXE Boot`, `… Force Hard-drive Boot`, `… Force CD/DVD Boot`; with
//!    no source for `bios` (then this step runs *before* the Put, since AMT
//!    refuses some options while a source is set).
//! 4. `CIM_BootService.SetBootConfigRole` with that configuration and
//!    `Role=1` (IsNextSingleUse).
//!
//! The power action that follows (a separate batch action) makes the host
//! boot with these settings; AMT then clears them (back to IsNotNext).
//! Persistent boot devices do not exist in AMT and are refused with
//! `unsupported`. The `efi` flag is accepted but has no effect: the force-boot
//! sources boot in whatever mode the platform firmware runs.
//!
//! # Reading it back
//!
//! `AMT_BootSettingData` (`BIOSSetup`, `UseSafeMode`) plus the
//! `CIM_OrderedComponent` associations of the boot configuration: the
//! `CIM_BootSourceSetting` with the lowest non-zero `AssignedSequence` is the
//! forced source. Read-back always reports `persistent: false, efi: false`.

use crate::error::AmtError;
use crate::wsman::client::WsmanClient;
use crate::wsman::request::{is_safe_name, Property};
use crate::wsman::response::{epr_resource_uri, epr_selectors, prop, prop_bool};
use crate::wsman::{names, ns, Epr, Param};
use crate::xml::Element;
use bmcfleet_provider::Ctx;
use bmcfleet_schema::{BootDevice, BootDeviceRequest};

/// `AMT_BootSettingData` properties sent back as read (identity, status,
/// read-only capability flags, the write-only RSE password).
const KEEP_AS_READ: &[&str] = &[
    "InstanceID",
    "ElementName",
    "OwningEntity",
    "BIOSLastStatus",
    "BootguardStatus",
    "OptionsCleared",
    "UefiBootNumberOfParams",
    "UefiBootParametersArray",
    "RPEEnabled",
    "SecureBootControlEnabled",
    "UEFIHTTPSBootEnabled",
    "UEFILocalPBABootEnabled",
    "WinREBootEnabled",
    "RSEPassword",
];

/// `SetBootConfigRole` role: the configuration is used for the next boot only.
pub const ROLE_IS_NEXT_SINGLE_USE: u32 = 1;

/// What a bmcfleet boot device means in AMT.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Plan {
    /// `CIM_BootSourceSetting` InstanceID, `None` for no forced source.
    pub source: Option<&'static str>,
    pub bios_setup: bool,
    pub safe_mode: bool,
    /// The `AMT_BootCapabilities` flag that must be true.
    pub capability: &'static str,
}

pub fn plan(device: BootDevice) -> Result<Plan, AmtError> {
    let p = |source, bios_setup, safe_mode, capability| Plan { source, bios_setup, safe_mode, capability };
    Ok(match device {
        BootDevice::Pxe => p(Some(names::SOURCE_PXE), false, false, "ForcePXEBoot"),
        BootDevice::Disk => p(Some(names::SOURCE_HDD), false, false, "ForceHardDriveBoot"),
        BootDevice::Cdrom => p(Some(names::SOURCE_CD), false, false, "ForceCDorDVDBoot"),
        BootDevice::Bios => p(None, true, false, "BIOSSetup"),
        BootDevice::Safe => p(Some(names::SOURCE_HDD), false, true, "ForceHardDriveSafeModeBoot"),
        BootDevice::None | BootDevice::Other => {
            return Err(AmtError::Config(format!("boot device `{device:?}` can only be read, not set").to_lowercase()));
        }
        BootDevice::Http => return Err(AmtError::Unsupported("Intel AMT has no UEFI HTTP boot source".into())),
    })
}

/// The Put body: the instance as read, options zeroed, the plan applied.
pub fn settings_for(instance: &Element, plan: &Plan) -> Result<Vec<Property>, AmtError> {
    let mut out = Vec::with_capacity(instance.children.len());
    for c in &instance.children {
        if !is_safe_name(&c.name) {
            return Err(AmtError::Protocol(format!("AMT_BootSettingData has an unusable property name `{}`", c.name)));
        }
        let value = if c.is_nil() {
            None
        } else {
            let v = c.text_trim();
            Some(match c.name.as_str() {
                "BIOSSetup" => plan.bios_setup.to_string(),
                "UseSafeMode" => plan.safe_mode.to_string(),
                n if KEEP_AS_READ.contains(&n) => v.to_owned(),
                _ if v == "true" || v == "false" => "false".to_owned(),
                _ if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) => "0".to_owned(),
                _ => v.to_owned(),
            })
        };
        out.push(Property { name: c.name.clone(), value });
    }
    if !out.iter().any(|p| p.name == "InstanceID") {
        return Err(AmtError::Protocol("AMT_BootSettingData has no InstanceID".into()));
    }
    Ok(out)
}

fn boot_config_epr() -> Epr {
    Epr::new(ns::cim("CIM_BootConfigSetting"), &[("InstanceID", names::BOOT_CONFIG)])
}

async fn change_boot_order(client: &mut WsmanClient, ctx: &Ctx, source: Option<&str>) -> Result<(), AmtError> {
    let params = match source {
        Some(s) => {
            vec![Param::Ref { name: "Source", epr: Epr::new(ns::cim("CIM_BootSourceSetting"), &[("InstanceID", s)]) }]
        }
        None => Vec::new(),
    };
    client.invoke(ctx, "CIM_BootConfigSetting", &[("InstanceID", names::BOOT_CONFIG)], "ChangeBootOrder", params).await
}

async fn set_boot_config_role(client: &mut WsmanClient, ctx: &Ctx) -> Result<(), AmtError> {
    client
        .invoke_service(
            ctx,
            "CIM_BootService",
            names::BOOT_SERVICE,
            "SetBootConfigRole",
            vec![
                Param::Ref { name: "BootConfigSetting", epr: boot_config_epr() },
                Param::Value { name: "Role", value: ROLE_IS_NEXT_SINGLE_USE.to_string() },
            ],
        )
        .await
}

pub async fn set(client: &mut WsmanClient, ctx: &Ctx, req: &BootDeviceRequest) -> Result<(), AmtError> {
    if req.persistent {
        return Err(AmtError::Unsupported(
            "AMT only offers one-time boot overrides (IsNextSingleUse): it clears them after the next boot. \
             Set a persistent boot order in the platform firmware, or repeat the one-time override before each boot"
                .into(),
        ));
    }
    let plan = plan(req.device)?;
    let caps = client.get(ctx, "AMT_BootCapabilities", &[]).await?;
    if prop_bool(&caps, plan.capability) != Some(true) {
        return Err(AmtError::Unsupported(format!(
            "this AMT does not offer a {:?} boot (AMT_BootCapabilities.{} is not true)",
            req.device, plan.capability
        )));
    }
    let current = client.get(ctx, "AMT_BootSettingData", &[]).await?;
    let settings = settings_for(&current, &plan)?;
    if plan.source.is_none() {
        change_boot_order(client, ctx, None).await?;
        client.put(ctx, "AMT_BootSettingData", &[], settings).await?;
    } else {
        client.put(ctx, "AMT_BootSettingData", &[], settings).await?;
        change_boot_order(client, ctx, plan.source).await?;
    }
    set_boot_config_role(client, ctx).await?;
    tracing::debug!(bmc = %client.bmc(), device = ?req.device, "AMT one-time boot override set.");
    Ok(())
}

/// The forced boot source from `CIM_OrderedComponent` instances.
pub fn forced_source(ordered: &[Element]) -> Option<String> {
    ordered
        .iter()
        .filter_map(|oc| {
            let group = oc.child_local("GroupComponent")?;
            let part = oc.child_local("PartComponent")?;
            let in_config = epr_selectors(group).iter().any(|(k, v)| k == "InstanceID" && v == names::BOOT_CONFIG);
            let is_source = epr_resource_uri(part).is_some_and(|u| u.ends_with("/CIM_BootSourceSetting"));
            let seq: u32 = prop(oc, "AssignedSequence")?.parse().ok()?;
            let id = epr_selectors(part).into_iter().find(|(k, _)| k == "InstanceID")?.1;
            (in_config && is_source && seq > 0).then_some((seq, id))
        })
        .min_by_key(|(seq, _)| *seq)
        .map(|(_, id)| id)
}

pub async fn get(client: &mut WsmanClient, ctx: &Ctx) -> Result<BootDeviceRequest, AmtError> {
    let settings = client.get(ctx, "AMT_BootSettingData", &[]).await?;
    let ordered = client.enumerate(ctx, "CIM_OrderedComponent").await?;
    let source = forced_source(&ordered);
    let device = device_of(&settings, source.as_deref());
    if let (BootDevice::None, Some(other)) = (device, source.as_deref()) {
        tracing::debug!(bmc = %client.bmc(), source = other, "Boot source without a bmcfleet name.");
    }
    Ok(BootDeviceRequest { device, persistent: false, efi: false })
}

/// The one-time boot device that `AMT_BootSettingData` and the forced boot
/// source (see [`forced_source`]) stand for.
pub fn device_of(settings: &Element, source: Option<&str>) -> BootDevice {
    match source {
        Some(names::SOURCE_PXE) => BootDevice::Pxe,
        Some(names::SOURCE_CD) => BootDevice::Cdrom,
        Some(names::SOURCE_HDD) if prop_bool(settings, "UseSafeMode") == Some(true) => BootDevice::Safe,
        Some(names::SOURCE_HDD) => BootDevice::Disk,
        Some(_) => BootDevice::None,
        None if prop_bool(settings, "BIOSSetup") == Some(true) => BootDevice::Bios,
        None => BootDevice::None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::xml;

    const SETTINGS: &str = r#"<g:AMT_BootSettingData xmlns:g="urn:x" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance">
        <g:BIOSLastStatus>2</g:BIOSLastStatus><g:BIOSLastStatus>0</g:BIOSLastStatus>
        <g:BIOSPause>true</g:BIOSPause><g:BIOSSetup>false</g:BIOSSetup><g:BootMediaIndex>1</g:BootMediaIndex>
        <g:ElementName>Intel(r) AMT Boot Configuration Settings</g:ElementName>
        <g:InstanceID>Intel(r) AMT:BootSettingData 0</g:InstanceID><g:OwningEntity>Intel(r) AMT</g:OwningEntity>
        <g:RPEEnabled>true</g:RPEEnabled><g:UseSOL>true</g:UseSOL><g:UseSafeMode>false</g:UseSafeMode>
        <g:RSEPassword xsi:nil="true"/><g:NewFlag>true</g:NewFlag></g:AMT_BootSettingData>"#;

    fn value<'a>(props: &'a [Property], name: &str) -> Vec<Option<&'a str>> {
        props.iter().filter(|p| p.name == name).map(|p| p.value.as_deref()).collect()
    }

    #[test]
    fn settings_zero_options_and_keep_identity() {
        let inst = xml::parse(SETTINGS).unwrap();
        let props = settings_for(&inst, &plan(BootDevice::Pxe).unwrap()).unwrap();
        assert_eq!(value(&props, "BIOSLastStatus"), vec![Some("2"), Some("0")]);
        assert_eq!(value(&props, "BIOSPause"), vec![Some("false")]);
        assert_eq!(value(&props, "UseSOL"), vec![Some("false")]);
        assert_eq!(value(&props, "NewFlag"), vec![Some("false")]);
        assert_eq!(value(&props, "BootMediaIndex"), vec![Some("0")]);
        assert_eq!(value(&props, "RPEEnabled"), vec![Some("true")]);
        assert_eq!(value(&props, "InstanceID"), vec![Some("Intel(r) AMT:BootSettingData 0")]);
        assert_eq!(value(&props, "RSEPassword"), vec![None]);
        let bios = settings_for(&inst, &plan(BootDevice::Bios).unwrap()).unwrap();
        assert_eq!(value(&bios, "BIOSSetup"), vec![Some("true")]);
        let safe = settings_for(&inst, &plan(BootDevice::Safe).unwrap()).unwrap();
        assert_eq!(value(&safe, "UseSafeMode"), vec![Some("true")]);
        assert!(plan(BootDevice::None).is_err());
    }

    #[test]
    fn refuses_odd_property_names() {
        let mut inst = xml::parse(SETTINGS).unwrap();
        inst.children[0].name = "a\"><evil".into();
        assert!(settings_for(&inst, &plan(BootDevice::Pxe).unwrap()).is_err());
    }
}
