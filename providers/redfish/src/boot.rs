//! Boot override: `Boot.BootSourceOverride{Target,Enabled,Mode}` on the
//! ComputerSystem, validated against the BMC's allowable values before
//! anything is sent, PATCHed with `If-Match` when the BMC gives an ETag,
//! then read back.

use crate::error::{err, status_error, unsupported};
use crate::json::{allowable, norm_path, str_of};
use crate::session::RedfishSession;
use crate::transport::Resource;
use bmcfleet_provider::{Applies, BootControl, Ctx, Result};
use bmcfleet_schema::{BootDevice, BootDeviceRequest, ErrorCode};
use reqwest::{Method, StatusCode};
use serde_json::{json, Map, Value};

/// The Redfish `BootSourceOverrideTarget` for a device.
pub(crate) fn target_for(device: BootDevice) -> Result<Option<&'static str>> {
    Ok(match device {
        BootDevice::Pxe => Some("Pxe"),
        BootDevice::Disk => Some("Hdd"),
        BootDevice::Cdrom => Some("Cd"),
        BootDevice::Bios => Some("BiosSetup"),
        BootDevice::Http => Some("UefiHttp"),
        BootDevice::None => None,
        BootDevice::Safe => {
            return Err(unsupported("Redfish has no `safe` boot override (it is an IPMI boot flag)"));
        }
        BootDevice::Other => {
            return Err(crate::error::invalid("`other` is a boot device the BMC reports, not one to set"))
        }
    })
}

/// The device for a Redfish target we read back.
pub(crate) fn device_for(target: &str) -> BootDevice {
    match target {
        "None" => BootDevice::None,
        "Pxe" => BootDevice::Pxe,
        "Hdd" => BootDevice::Disk,
        "Cd" => BootDevice::Cdrom,
        "BiosSetup" => BootDevice::Bios,
        "UefiHttp" => BootDevice::Http,
        other => {
            // Reported readably (`other`) rather than failing the read.
            tracing::debug!(target = other, "The BMC's boot override target has no bmcfleet name; reporting `other`.");
            BootDevice::Other
        }
    }
}

/// Build the PATCH body for `req` against the system's `Boot` object.
pub(crate) fn patch_body(req: &BootDeviceRequest, boot: &Value) -> Result<Value> {
    let mut b = Map::new();
    match target_for(req.device)? {
        None => {
            b.insert("BootSourceOverrideEnabled".into(), json!("Disabled"));
        }
        Some(target) => {
            let modelled = boot.get("BootSourceOverrideMode").is_some();
            let mode = if req.efi { "UEFI" } else { "Legacy" };
            if modelled && !req.efi && uefi_only(target) {
                return Err(unsupported(format!(
                    "boot override target {target} exists in UEFI mode only: ask for it in UEFI mode (--efi)"
                )));
            }
            if let Some(list) = allowable(boot, "BootSourceOverrideTarget") {
                if !allowed_in_mode(
                    &list,
                    target,
                    modelled.then(|| str_of(boot, "BootSourceOverrideMode")).flatten(),
                    mode,
                ) {
                    return Err(unsupported(format!(
                        "the BMC does not allow boot override target {target} in {mode} mode (allowed: {})",
                        list.join(", ")
                    )));
                }
            }
            let enabled = if req.persistent { "Continuous" } else { "Once" };
            if let Some(list) = allowable(boot, "BootSourceOverrideEnabled") {
                if !list.iter().any(|v| v == enabled) {
                    return Err(unsupported(format!(
                        "the BMC does not allow BootSourceOverrideEnabled={enabled} (allowed: {}){}",
                        list.join(", "),
                        if req.persistent { "; persistent boot override is not available" } else { "" }
                    )));
                }
            }
            b.insert("BootSourceOverrideTarget".into(), json!(target));
            b.insert("BootSourceOverrideEnabled".into(), json!(enabled));
            // Only BMCs that model the mode get it (others reject unknown
            // properties), and only when it must change: some (HPE iLO 5)
            // answer 400 to any PATCH carrying it, since the mode follows
            // the firmware's boot mode.
            if boot.get("BootSourceOverrideMode").is_some() {
                let mode = if req.efi { "UEFI" } else { "Legacy" };
                if let Some(list) = allowable(boot, "BootSourceOverrideMode") {
                    if !list.iter().any(|v| v == mode) {
                        return Err(unsupported(format!(
                            "the BMC does not allow BootSourceOverrideMode={mode} (allowed: {})",
                            list.join(", ")
                        )));
                    }
                }
                if str_of(boot, "BootSourceOverrideMode") != Some(mode) {
                    b.insert("BootSourceOverrideMode".into(), json!(mode));
                }
            }
        }
    }
    Ok(json!({ "Boot": Value::Object(b) }))
}

/// Boot override targets that exist in UEFI mode only (Redfish
/// `BootSource`: UEFI device paths, shell, HTTP boot, BootNext).
fn uefi_only(target: &str) -> bool {
    matches!(target, "UefiTarget" | "UefiShell" | "UefiHttp" | "UefiBootNext")
}

/// Whether `target` is allowed in the mode asked for (`mode`), judged from
/// the BMC's list, which describes its current mode (`current`, where the
/// BMC models one). BMCs list UEFI-only targets in UEFI mode only
/// (sushy-emulator: `Pxe, Cd, Hdd` in Legacy, `+ UefiHttp` in UEFI), so a
/// change to UEFI mode allows them although the Legacy list lacks them:
/// target and mode then go in one PATCH, and the read-back decides. A
/// change to Legacy mode never allows a UEFI-only target.
fn allowed_in_mode(list: &[String], target: &str, current: Option<&str>, mode: &str) -> bool {
    if list.iter().any(|v| v == target) {
        return current.is_none() || !(mode == "Legacy" && uefi_only(target));
    }
    current == Some("Legacy") && mode == "UEFI" && uefi_only(target)
}

/// Read the override as bmcfleet sees it.
pub(crate) fn read_override(system: &Value) -> BootDeviceRequest {
    let boot = system.get("Boot").cloned().unwrap_or(Value::Null);
    let enabled = str_of(&boot, "BootSourceOverrideEnabled").unwrap_or("Disabled");
    let target = str_of(&boot, "BootSourceOverrideTarget").unwrap_or("None");
    let device = if enabled == "Disabled" { BootDevice::None } else { device_for(target) };
    BootDeviceRequest {
        device,
        persistent: enabled == "Continuous",
        efi: str_of(&boot, "BootSourceOverrideMode") == Some("UEFI"),
    }
}

/// The PATCH that puts a resource's override back as it is now
/// (`BootSourceOverrideTarget`/`Enabled`, the properties it shows).
fn previous_override(resource: &Value) -> Value {
    let boot = resource.get("Boot").cloned().unwrap_or(Value::Null);
    let mut b = Map::new();
    for key in ["BootSourceOverrideTarget", "BootSourceOverrideEnabled"] {
        if let Some(v) = str_of(&boot, key) {
            b.insert(key.into(), json!(v));
        }
    }
    json!({ "Boot": Value::Object(b) })
}

/// A resource's boot mode before a change (where it models one).
fn previous_mode(resource: &Value) -> Option<String> {
    resource.get("Boot").and_then(|b| str_of(b, "BootSourceOverrideMode")).map(str::to_owned)
}

/// The mode a refused PATCH carried, when the refusal is a 400 that names
/// `BootSourceOverrideMode` (in its text, arguments or related properties).
fn refused_mode(e: &bmcfleet_provider::ProviderError, body: &Value) -> Option<String> {
    let mode = str_of(&body["Boot"], "BootSourceOverrideMode")?;
    (e.status == Some(400) && e.message.contains("BootSourceOverrideMode")).then(|| mode.to_owned())
}

/// Which boot override property read back otherwise than it was written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadBackKind {
    Target,
    Mode,
    Enabled,
}

/// A boot override the BMC accepted but does not read back.
pub type ReadBackError = bmcfleet_schema::error::Error<ReadBackKind>;

/// Compare what we asked with what the BMC reads back.
fn verify(sent: &Value, system: &Value) -> std::result::Result<(), ReadBackError> {
    let boot = system.get("Boot").cloned().unwrap_or(Value::Null);
    let sent = &sent["Boot"];
    for (key, kind) in
        [("BootSourceOverrideTarget", ReadBackKind::Target), ("BootSourceOverrideMode", ReadBackKind::Mode)]
    {
        if let Some(want) = str_of(sent, key) {
            let got = str_of(&boot, key).unwrap_or("(absent)");
            if got != want {
                return Err(ReadBackError::new(kind, format!("{key} reads back {got}, not {want}")));
            }
        }
    }
    let got = str_of(&boot, "BootSourceOverrideEnabled").unwrap_or("(absent)");
    match str_of(sent, "BootSourceOverrideEnabled") {
        Some(want) if want == got => {}
        // Some BMCs (sushy-emulator, libvirt-backed ones) store every
        // override as Continuous: stronger than asked, not wrong.
        Some("Once") if got == "Continuous" => {
            tracing::debug!("Boot override asked Once, reads back Continuous.");
        }
        Some(want) => {
            return Err(ReadBackError::new(
                ReadBackKind::Enabled,
                format!("BootSourceOverrideEnabled reads back {got}, not {want}"),
            ))
        }
        None => {}
    }
    Ok(())
}

impl RedfishSession {
    /// PATCH with the resource's ETag; on `412` (someone changed it since
    /// we read it) read it again and retry once: a PATCH of the same values
    /// is idempotent. A `202` is followed to completion.
    pub(crate) async fn patch_with_etag(&mut self, ctx: &Ctx, current: Resource, body: &Value) -> Result<()> {
        let path = current.path.clone();
        let mut reply = self.transport.exchange(ctx, Method::PATCH, &path, Some(body), current.etag.as_deref()).await?;
        if reply.status == StatusCode::PRECONDITION_FAILED && current.etag.is_some() {
            tracing::info!(bmc = %self.transport.bmc(), %path, "ETag went stale; reading again and retrying the PATCH once.");
            let fresh = self.transport.get(ctx, &path).await?;
            reply = self.transport.exchange(ctx, Method::PATCH, &path, Some(body), fresh.etag.as_deref()).await?;
        }
        if reply.status == StatusCode::PRECONDITION_REQUIRED && current.etag.is_none() {
            let e = status_error("PATCH", &path, reply.status, &reply.body);
            return Err(err(ErrorCode::BmcError, format!("{}; the BMC gave no ETag on GET to send back", e.message)));
        }
        self.transport.complete(ctx, &Method::PATCH, &path, reply).await?;
        Ok(())
    }
}

/// The settings object of a resource (`@Redfish.Settings.SettingsObject`),
/// where BMCs such as Nokia's and Dell iDRAC 10 take changes to a
/// read-only live resource; they apply at the next reset.
pub(crate) fn settings_object(resource: &Value) -> Option<String> {
    resource.get("@Redfish.Settings")?.get("SettingsObject")?.get("@odata.id")?.as_str().map(norm_path)
}

/// `OnReset` when the resource's settings offer it as an apply time.
pub(crate) fn on_reset_apply_time(resource: &Value) -> Option<&'static str> {
    let times = resource.get("@Redfish.Settings")?.get("SupportedApplyTimes")?.as_array()?;
    times.iter().any(|t| t.as_str() == Some("OnReset")).then_some("OnReset")
}

/// The Boot object a change is checked against: the settings object's
/// (pending) values over the live ones, with the allowable values of both.
fn merged_boot(live: &Value, pending: Option<&Value>) -> Value {
    let mut out = live.as_object().cloned().unwrap_or_default();
    if let Some(p) = pending.and_then(Value::as_object) {
        for (k, v) in p {
            if k.ends_with("@Redfish.AllowableValues") && out.contains_key(k) {
                // Allowed where either side allows it.
                let mut list: Vec<Value> = out[k].as_array().cloned().unwrap_or_default();
                for x in v.as_array().into_iter().flatten() {
                    if !list.contains(x) {
                        list.push(x.clone());
                    }
                }
                out.insert(k.clone(), Value::Array(list));
            } else {
                out.insert(k.clone(), v.clone());
            }
        }
    }
    Value::Object(out)
}

#[async_trait::async_trait]
impl BootControl for RedfishSession {
    /// PATCH the system's `Boot` (or its settings object, when the system
    /// has one: the change then applies at the next reset), then read it
    /// back from where it was written.
    async fn set_boot_device(&mut self, ctx: &Ctx, req: &BootDeviceRequest) -> Result<Applies> {
        let path = self.service.system.path.clone();
        let system = self.transport.get(ctx, &path).await?;
        let live =
            system.body.get("Boot").cloned().ok_or_else(|| {
                unsupported(format!("system {path} has no Boot object: boot override is not available"))
            })?;
        let apply_time = on_reset_apply_time(&system.body);
        let (target, boot, applies) = match settings_object(&system.body) {
            Some(settings) => {
                let pending = self.transport.get(ctx, &settings).await?;
                let boot = merged_boot(&live, pending.body.get("Boot"));
                (pending, boot, Applies::OnReset)
            }
            None => (system, live, Applies::Now),
        };
        let written_to = target.path.clone();
        // What the override is before the change: put back if the change
        // cannot be made whole (the device would be set in the wrong mode).
        let previous = previous_override(&target.body);
        let target_before = target.body.clone();
        let mut body = patch_body(req, &boot)?;
        if applies == Applies::OnReset {
            if let (Some(at), Some(b)) = (apply_time, body.as_object_mut()) {
                b.insert("@Redfish.SettingsApplyTime".into(), json!({"ApplyTime": at}));
            }
        }
        tracing::info!(
            bmc = %self.transport.bmc(), device = ?req.device, persistent = req.persistent, efi = req.efi, resource = %written_to,
            "Setting the boot override."
        );
        let mut mode_refused = None;
        if let Err(e) = self.patch_with_etag(ctx, target, &body).await {
            // A 400 naming the mode: the BMC will not change it. Once more without it.
            let Some(mode) = refused_mode(&e, &body) else { return Err(e) };
            tracing::info!(bmc = %self.transport.bmc(), %mode, error = %e, "The BMC refused BootSourceOverrideMode; setting the device without it.");
            if let Some(b) = body.get_mut("Boot").and_then(Value::as_object_mut) {
                b.remove("BootSourceOverrideMode");
            }
            let target = self.transport.get(ctx, &written_to).await?;
            self.patch_with_etag(ctx, target, &body).await?;
            mode_refused = Some(mode);
        }
        let after = self.transport.get(ctx, &written_to).await?;
        if let Err(why) = verify(&body, &after.body) {
            let why = format!("the BMC accepted the boot override but {why} (read back from {written_to})");
            // A mode changed along with a target the BMC did not keep: the
            // system would boot in another mode than before, which nobody
            // asked for on its own. Put target, enablement and mode back.
            let Some(mode) =
                previous_mode(&target_before).filter(|_| body["Boot"].get("BootSourceOverrideMode").is_some())
            else {
                return Err(err(ErrorCode::BmcError, why));
            };
            let mut restore = previous.clone();
            restore["Boot"]["BootSourceOverrideMode"] = json!(mode);
            tracing::info!(bmc = %self.transport.bmc(), resource = %written_to, "The boot override did not read back; restoring the previous one with its mode.");
            let fresh = self.transport.get(ctx, &written_to).await?;
            return match self.patch_with_etag(ctx, fresh, &restore).await {
                Ok(()) => Err(err(
                    ErrorCode::BmcError,
                    format!("{why}; the previous boot override (mode {mode}) was restored"),
                )),
                Err(e) => Err(err(
                    ErrorCode::BmcError,
                    format!("{why}; restoring the previous boot override (mode {mode}) failed: {}", e.message),
                )),
            };
        }
        if let Some(want) = mode_refused {
            let got = after
                .body
                .get("Boot")
                .and_then(|b| str_of(b, "BootSourceOverrideMode"))
                .unwrap_or("(absent)")
                .to_owned();
            if got != want {
                // Half of the change is in (the device, not the mode): undo it.
                tracing::info!(bmc = %self.transport.bmc(), resource = %written_to, "The BMC keeps another boot mode; restoring the previous override.");
                let fresh = self.transport.get(ctx, &written_to).await?;
                let why = format!(
                    "the BMC refused BootSourceOverrideMode {want} and keeps {got} (on this BMC the mode follows the \
                     firmware's boot mode: change that in the BIOS settings)"
                );
                return match self.patch_with_etag(ctx, fresh, &previous).await {
                    Ok(()) => {
                        Err(unsupported(format!("nothing changed: {why}; the previous boot override was restored")))
                    }
                    Err(e) => Err(err(
                        ErrorCode::BmcError,
                        format!(
                            "{why}; the boot device is set for the next boot in mode {got} and restoring the previous \
                             override failed: {}",
                            e.message
                        ),
                    )),
                };
            }
        }
        if applies == Applies::OnReset {
            tracing::info!(bmc = %self.transport.bmc(), settings = %written_to, "Boot override stored in the settings object: it applies at the next reset.");
        }
        Ok(applies)
    }

    async fn boot_device(&mut self, ctx: &Ctx) -> Result<BootDeviceRequest> {
        let path = self.service.system.path.clone();
        let system = self.transport.get(ctx, &path).await?;
        Ok(read_override(&system.body))
    }

    /// The live override, unless the system's settings object holds a
    /// different one: that one applies at the next reset (`OnReset`).
    async fn next_boot(&mut self, ctx: &Ctx) -> Result<(BootDeviceRequest, Applies)> {
        let path = self.service.system.path.clone();
        let system = self.transport.get(ctx, &path).await?;
        let live = read_override(&system.body);
        if let Some(settings) = settings_object(&system.body) {
            match self.transport.get(ctx, &settings).await {
                Ok(pending) => {
                    if let (Some(l), Some(p)) = (system.body.get("Boot"), pending.body.get("Boot")) {
                        let next = read_override(&json!({ "Boot": merged_boot(l, Some(p)) }));
                        if next != live {
                            return Ok((next, Applies::OnReset));
                        }
                    }
                }
                Err(e) => {
                    tracing::debug!(bmc = %self.transport.bmc(), %settings, error = %e, "Boot settings object unreadable; reporting the live override.");
                }
            }
        }
        Ok((live, Applies::Now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(device: BootDevice, persistent: bool, efi: bool) -> BootDeviceRequest {
        BootDeviceRequest { device, persistent, efi }
    }

    #[test]
    fn body_includes_mode_only_when_modelled() {
        let with_mode = json!({"BootSourceOverrideMode": "Legacy", "BootSourceOverrideTarget": "None"});
        assert_eq!(
            patch_body(&req(BootDevice::Pxe, false, true), &with_mode).unwrap(),
            json!({"Boot": {"BootSourceOverrideTarget": "Pxe", "BootSourceOverrideEnabled": "Once", "BootSourceOverrideMode": "UEFI"}})
        );
        let without = json!({"BootSourceOverrideTarget": "None"});
        assert_eq!(
            patch_body(&req(BootDevice::Disk, true, true), &without).unwrap(),
            json!({"Boot": {"BootSourceOverrideTarget": "Hdd", "BootSourceOverrideEnabled": "Continuous"}})
        );
    }

    #[test]
    fn validates_against_allowable_values() {
        // Lenovo XCC (fixture system.lenovo.json): Once/Disabled only.
        let lenovo = json!({"BootSourceOverrideEnabled@Redfish.AllowableValues": ["Once", "Disabled"],
                            "BootSourceOverrideTarget@Redfish.AllowableValues": ["None", "Pxe", "Cd", "Hdd", "BiosSetup"]});
        let e = patch_body(&req(BootDevice::Pxe, true, false), &lenovo).unwrap_err();
        assert_eq!(e.code, ErrorCode::Unsupported);
        assert!(e.message.contains("Continuous"), "{}", e.message);
        let sushy = json!({"BootSourceOverrideTarget@Redfish.AllowableValues": ["Pxe", "Cd", "Hdd"]});
        assert_eq!(patch_body(&req(BootDevice::Bios, false, false), &sushy).unwrap_err().code, ErrorCode::Unsupported);
        assert_eq!(patch_body(&req(BootDevice::Safe, false, false), &sushy).unwrap_err().code, ErrorCode::Unsupported);
        assert_eq!(
            patch_body(&req(BootDevice::None, false, false), &sushy).unwrap(),
            json!({"Boot": {"BootSourceOverrideEnabled": "Disabled"}})
        );
    }

    #[test]
    fn targets_are_judged_for_the_mode_asked_for() {
        // sushy-emulator in Legacy mode lists no UEFI target.
        let legacy = json!({"BootSourceOverrideMode": "Legacy", "BootSourceOverrideTarget": "Hdd",
                            "BootSourceOverrideTarget@Redfish.AllowableValues": ["Pxe", "Cd", "Hdd"]});
        assert_eq!(
            patch_body(&req(BootDevice::Http, false, true), &legacy).unwrap(),
            json!({"Boot": {"BootSourceOverrideTarget": "UefiHttp", "BootSourceOverrideEnabled": "Once", "BootSourceOverrideMode": "UEFI"}}),
            "target and mode in one PATCH"
        );
        // In Legacy mode a UEFI target is no target at all.
        let e = patch_body(&req(BootDevice::Http, false, false), &legacy).unwrap_err();
        assert!(e.code == ErrorCode::Unsupported && e.message.contains("UEFI mode only"), "{}", e.message);
        // Still refused: what the list lacks and no mode change explains.
        let e = patch_body(&req(BootDevice::Bios, false, true), &legacy).unwrap_err();
        assert!(e.message.contains("BiosSetup in UEFI mode (allowed: Pxe, Cd, Hdd)"), "{}", e.message);
        let uefi = json!({"BootSourceOverrideMode": "UEFI",
                          "BootSourceOverrideTarget@Redfish.AllowableValues": ["Pxe", "Cd", "Hdd"]});
        assert!(patch_body(&req(BootDevice::Http, false, true), &uefi).is_err(), "UEFI mode, not listed");
        // No mode modelled: the list alone.
        let plain = json!({"BootSourceOverrideTarget@Redfish.AllowableValues": ["Pxe", "UefiHttp"]});
        assert!(patch_body(&req(BootDevice::Http, false, false), &plain).is_ok());
    }

    #[test]
    fn reads_back() {
        let sys = json!({"Boot": {"BootSourceOverrideEnabled": "Once", "BootSourceOverrideTarget": "Pxe", "BootSourceOverrideMode": "UEFI"}});
        assert_eq!(read_override(&sys), req(BootDevice::Pxe, false, true));
        let off = json!({"Boot": {"BootSourceOverrideEnabled": "Disabled", "BootSourceOverrideTarget": "Hdd"}});
        assert_eq!(read_override(&off).device, BootDevice::None);
        let usb = json!({"Boot": {"BootSourceOverrideEnabled": "Once", "BootSourceOverrideTarget": "UsbCd"}});
        assert_eq!(read_override(&usb).device, BootDevice::Other, "reported readably, not a failed read");
        let http = json!({"Boot": {"BootSourceOverrideEnabled": "Once", "BootSourceOverrideTarget": "UefiHttp"}});
        assert_eq!(read_override(&http).device, BootDevice::Http);
    }

    #[test]
    fn verify_tolerates_once_stored_as_continuous() {
        let sent = json!({"Boot": {"BootSourceOverrideTarget": "Pxe", "BootSourceOverrideEnabled": "Once"}});
        let sushy = json!({"Boot": {"BootSourceOverrideTarget": "Pxe", "BootSourceOverrideEnabled": "Continuous"}});
        assert!(verify(&sent, &sushy).is_ok());
        let wrong = json!({"Boot": {"BootSourceOverrideTarget": "Hdd", "BootSourceOverrideEnabled": "Once"}});
        let e = verify(&sent, &wrong).unwrap_err();
        assert_eq!(
            (e.kind(), e.to_string().as_str()),
            (ReadBackKind::Target, "BootSourceOverrideTarget reads back Hdd, not Pxe")
        );
        let sent_c = json!({"Boot": {"BootSourceOverrideTarget": "Pxe", "BootSourceOverrideEnabled": "Continuous"}});
        let once = json!({"Boot": {"BootSourceOverrideTarget": "Pxe", "BootSourceOverrideEnabled": "Once"}});
        assert_eq!(verify(&sent_c, &once).unwrap_err().kind(), ReadBackKind::Enabled);
    }
}
