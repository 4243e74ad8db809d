//! Virtual media: the ComputerSystem's `VirtualMedia` collection (Redfish
//! 1.11+, iDRAC 17G, sushy-emulator), else the Manager's (Lenovo XCC,
//! older iDRAC, Supermicro). Standard `InsertMedia` / `EjectMedia` actions
//! when the device offers them, else a vendor's OEM actions (HPE iLO's
//! `#HpeiLOVirtualMedia.InsertVirtualMedia` / `EjectVirtualMedia`), and a
//! PATCH of `Image`/`Inserted` only as the last resort (only the properties
//! the device shows; on a `400`, once more with `Image` alone).
//!
//! Insert is idempotent: the same image already inserted is a no-op, a
//! different one is ejected first.

use crate::error::{err, unsupported};
use crate::json::{allowable, members, norm_path, str_of};
use crate::session::RedfishSession;
use crate::transport::Resource;
use bmcfleet_provider::{Ctx, Result, VirtualMedia};
use bmcfleet_schema::{ErrorCode, MediaKind, NoChange};
use reqwest::{Method, StatusCode};
use serde_json::{json, Map, Value};

/// Media types that serve a kind, best first.
fn wanted_types(kind: MediaKind) -> &'static [&'static str] {
    match kind {
        MediaKind::Cd => &["CD", "DVD"],
        MediaKind::Usb => &["USBStick", "Floppy"],
    }
}

/// Whether a device serves `kind`: by its `MediaTypes`; a device that
/// lists none (older firmware) by its id or name, the only thing it says.
pub(crate) fn serves(device: &Value, kind: MediaKind) -> bool {
    match device.get("MediaTypes").and_then(Value::as_array) {
        Some(types) => types.iter().any(|m| m.as_str().is_some_and(|m| wanted_types(kind).contains(&m))),
        None => {
            let words: &[&str] = match kind {
                MediaKind::Cd => &["cd", "dvd"],
                MediaKind::Usb => &["usb", "floppy", "removable"],
            };
            let id = format!("{} {}", str_of(device, "Id").unwrap_or(""), str_of(device, "Name").unwrap_or(""))
                .to_ascii_lowercase();
            words.iter().any(|w| id.contains(w))
        }
    }
}

/// How well a device's `MediaTypes` fit `kind` (lower is better: the
/// first wanted type before the second, typed devices before untyped).
fn fit(device: &Value, kind: MediaKind) -> usize {
    let types = device.get("MediaTypes").and_then(Value::as_array);
    wanted_types(kind)
        .iter()
        .position(|t| types.is_some_and(|l| l.iter().any(|m| m.as_str() == Some(*t))))
        .unwrap_or(wanted_types(kind).len())
}

/// Whether a device advertises any media action (standard or OEM): then
/// its actions are what it can do, and a PATCH is not its interface.
fn has_media_actions(device: &Value) -> bool {
    action_target(device, "#VirtualMedia.InsertMedia").is_some()
        || action_target(device, "#VirtualMedia.EjectMedia").is_some()
        || oem_action_target(device, ".InsertVirtualMedia").is_some()
        || oem_action_target(device, ".EjectVirtualMedia").is_some()
}

/// Whether a device can take an image: it advertises `InsertMedia` (or
/// its vendor's insert action), or it advertises no media action at all
/// (its `Image`/`Inserted` are PATCHed). A slot that offers `EjectMedia`
/// but no insert (bmcweb's proxy slots) cannot.
pub(crate) fn can_insert(device: &Value) -> bool {
    action_target(device, "#VirtualMedia.InsertMedia").is_some()
        || oem_action_target(device, ".InsertVirtualMedia").is_some()
        || !has_media_actions(device)
}

/// Whether a device can give its image up: `EjectMedia` (or the vendor's
/// eject), or no media action at all (PATCH).
pub(crate) fn can_eject(device: &Value) -> bool {
    action_target(device, "#VirtualMedia.EjectMedia").is_some()
        || oem_action_target(device, ".EjectVirtualMedia").is_some()
        || !has_media_actions(device)
}

/// The device an insert of `kind` goes to: among the devices that serve
/// the kind and can insert, an empty one before one holding another
/// image (which would be ejected first), best `MediaTypes` fit first,
/// then the BMC's order.
pub(crate) fn choose_device(devices: &[Resource], kind: MediaKind) -> Option<usize> {
    (0..devices.len())
        .filter(|&i| serves(&devices[i].body, kind) && can_insert(&devices[i].body))
        .min_by_key(|&i| (is_inserted(&devices[i].body), fit(&devices[i].body, kind), i))
}

fn action_target(device: &Value, name: &str) -> Option<String> {
    device.get("Actions")?.get(name)?.get("target")?.as_str().map(norm_path)
}

/// The target of a vendor's virtual-media action whose name ends with
/// `suffix` (`.InsertVirtualMedia`, `.EjectVirtualMedia`): under
/// `Actions.Oem` (where the standard puts OEM actions) or under
/// `Oem.<vendor>.Actions` (where HPE iLO puts them).
fn oem_action_target(device: &Value, suffix: &str) -> Option<String> {
    let standard = device.get("Actions").and_then(|a| a.get("Oem")).and_then(Value::as_object);
    let vendors = device
        .get("Oem")
        .and_then(Value::as_object)
        .into_iter()
        .flat_map(|o| o.values())
        .filter_map(|v| v.get("Actions").and_then(Value::as_object));
    standard.into_iter().chain(vendors).flat_map(|actions| actions.iter()).find_map(|(name, a)| {
        name.ends_with(suffix).then(|| a.get("target").and_then(Value::as_str).map(norm_path)).flatten()
    })
}

/// The PATCH that inserts or ejects when the device has no action: only
/// the properties the device itself shows (a BMC refuses ones its schema
/// lacks); `Image` always.
fn media_patch(device: &Value, image: Value, inserted: bool) -> Value {
    let mut m = Map::new();
    m.insert("Image".into(), image);
    if device.get("Inserted").is_some() {
        m.insert("Inserted".into(), json!(inserted));
    }
    if inserted && device.get("WriteProtected").is_some() {
        m.insert("WriteProtected".into(), json!(true));
    }
    Value::Object(m)
}

fn is_inserted(device: &Value) -> bool {
    device.get("Inserted").and_then(Value::as_bool).unwrap_or(false)
        || str_of(device, "Image").is_some_and(|i| !i.is_empty() && i != "None")
}

fn protocol_for(url: &str) -> Option<&'static str> {
    let scheme = url.split(':').next()?.to_ascii_lowercase();
    Some(match scheme.as_str() {
        "http" => "HTTP",
        "https" => "HTTPS",
        "nfs" => "NFS",
        "cifs" | "smb" => "CIFS",
        _ => return None,
    })
}

/// The InsertMedia body: the DSP0266 parameters, plus TransferProtocolType /
/// TransferMethod when the action advertises them (some BMCs require them,
/// others reject parameters they do not know).
pub(crate) fn insert_body(url: &str, action: &Value, force_protocol: bool, force_method: bool) -> Result<Value> {
    let mut m = Map::new();
    m.insert("Image".into(), json!(url));
    m.insert("Inserted".into(), json!(true));
    m.insert("WriteProtected".into(), json!(true));
    let protocols = allowable(action, "TransferProtocolType");
    if protocols.is_some() || force_protocol {
        let p = protocol_for(url).ok_or_else(|| {
            unsupported(format!("cannot tell the transfer protocol of the image URL scheme in {}", redact(url)))
        })?;
        if let Some(list) = &protocols {
            if !list.iter().any(|x| x == p) {
                return Err(unsupported(format!("the BMC cannot fetch media over {p} (allowed: {})", list.join(", "))));
            }
        }
        m.insert("TransferProtocolType".into(), json!(p));
    }
    let methods = allowable(action, "TransferMethod");
    if methods.is_some() || force_method {
        let chosen = match &methods {
            Some(l) if !l.iter().any(|x| x == "Stream") => l.first().cloned().unwrap_or_else(|| "Stream".into()),
            _ => "Stream".into(),
        };
        m.insert("TransferMethod".into(), json!(chosen));
    }
    Ok(Value::Object(m))
}

/// The URL without credentials, for messages and logs.
pub(crate) fn redact(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut u) => {
            if !u.username().is_empty() || u.password().is_some() {
                let _ = u.set_username("");
                let _ = u.set_password(None);
            }
            u.set_query(None);
            u.to_string()
        }
        Err(_) => "(unparsable URL)".to_owned(),
    }
}

impl RedfishSession {
    /// Every virtual media device of the system's collection and the
    /// manager's (each read once).
    async fn media_devices(&mut self, ctx: &Ctx) -> Result<Vec<Resource>> {
        let mut collections = Vec::new();
        if let Some(p) = &self.service.system.virtual_media {
            collections.push(p.clone());
        }
        if let Some(p) = self.service.manager.as_ref().and_then(|m| m.virtual_media.clone()) {
            if !collections.contains(&p) {
                collections.push(p);
            }
        }
        if collections.is_empty() {
            return Err(unsupported("neither the system nor its manager exposes VirtualMedia"));
        }
        let mut devices = Vec::new();
        let mut last_err = None;
        let start = self.transport.received();
        for c in &collections {
            let list = match self.transport.get(ctx, c).await {
                Ok(l) => l,
                Err(e) if e.code == ErrorCode::TargetNotFound => {
                    last_err = Some(e);
                    continue;
                }
                Err(e) => return Err(e),
            };
            for m in members(&list.body) {
                match self.transport.get(ctx, &m).await {
                    Ok(d) => devices.push(d),
                    Err(e) if e.code == ErrorCode::TargetNotFound => {
                        tracing::debug!(bmc = %self.transport.bmc(), device = %m, "Listed media device unreadable; skipped.");
                    }
                    Err(e) => return Err(e),
                }
                self.transport.kept_within(start, &format!("the media devices of {c}"))?;
            }
        }
        if devices.is_empty() {
            if let Some(e) = last_err {
                return Err(unsupported(format!(
                    "the BMC's VirtualMedia collection is not implemented ({})",
                    e.message
                )));
            }
        }
        Ok(devices)
    }

    async fn eject_device(&mut self, ctx: &Ctx, device: Resource) -> Result<()> {
        if let Some(target) = action_target(&device.body, "#VirtualMedia.EjectMedia") {
            tracing::info!(bmc = %self.transport.bmc(), device = %device.path, "Ejecting virtual media.");
            self.transport.post(ctx, &target, &json!({})).await?;
            Ok(())
        } else if let Some(target) = oem_action_target(&device.body, ".EjectVirtualMedia") {
            tracing::info!(bmc = %self.transport.bmc(), device = %device.path, "Ejecting virtual media (OEM action).");
            self.transport.post(ctx, &target, &json!({})).await?;
            Ok(())
        } else if has_media_actions(&device.body) {
            Err(unsupported(format!("{} advertises no EjectMedia: its media cannot be ejected", device.path)))
        } else {
            tracing::info!(bmc = %self.transport.bmc(), device = %device.path, "Ejecting virtual media (PATCH).");
            let body = media_patch(&device.body, Value::Null, false);
            self.patch_media(ctx, device, body).await
        }
    }

    /// PATCH a media device (the last resort); on a `400`, once more with
    /// `Image` alone.
    async fn patch_media(&mut self, ctx: &Ctx, device: Resource, body: Value) -> Result<()> {
        let path = device.path.clone();
        match self.patch_with_etag(ctx, device, &body).await {
            Err(e) if e.status == Some(400) && body.as_object().is_some_and(|m| m.len() > 1) => {
                // Not the BMC's words: they may quote the image URL sent, credentials and all.
                tracing::info!(bmc = %self.transport.bmc(), device = %path, status = 400, code = %e.code, "The BMC refused the media PATCH; once more with Image alone.");
                let fresh = self.transport.get(ctx, &path).await?;
                self.patch_with_etag(ctx, fresh, &json!({"Image": body["Image"].clone()})).await
            }
            other => other,
        }
    }
}

#[async_trait::async_trait]
impl VirtualMedia for RedfishSession {
    async fn insert_media(&mut self, ctx: &Ctx, url: &str, media: MediaKind) -> Result<Option<NoChange>> {
        let mut devices = self.media_devices(ctx).await?;
        if let Some(d) = devices
            .iter()
            .find(|d| serves(&d.body, media) && str_of(&d.body, "Image") == Some(url) && is_inserted(&d.body))
        {
            tracing::debug!(bmc = %self.transport.bmc(), device = %d.path, "The image is already inserted.");
            return Ok(Some(NoChange::AlreadyInserted));
        }
        let Some(i) = choose_device(&devices, media) else {
            let kind: Vec<&str> = devices.iter().filter(|d| serves(&d.body, media)).map(|d| d.path.as_str()).collect();
            return Err(unsupported(if kind.is_empty() {
                format!("the BMC has no virtual media device for {media:?} media")
            } else {
                format!("no virtual media device for {media:?} media advertises InsertMedia ({})", kind.join(", "))
            }));
        };
        let mut device = devices.swap_remove(i);
        if is_inserted(&device.body) {
            let path = device.path.clone();
            self.eject_device(ctx, device).await?;
            device = self.transport.get(ctx, &path).await?;
        }
        let path = device.path.clone();
        match device.body.get("Actions").and_then(|a| a.get("#VirtualMedia.InsertMedia")).cloned() {
            Some(action) => {
                let target = action_target(&device.body, "#VirtualMedia.InsertMedia")
                    .ok_or_else(|| err(ErrorCode::ProtocolError, format!("{path}: InsertMedia has no target")))?;
                let body = insert_body(url, &action, false, false)?;
                tracing::info!(bmc = %self.transport.bmc(), device = %path, image = %redact(url), "Inserting virtual media.");
                let reply = self.transport.exchange(ctx, Method::POST, &target, Some(&body), None).await?;
                // Some BMCs demand parameters they do not advertise; a 400
                // naming them means nothing was done, so resend once with them.
                let reply = if reply.status == StatusCode::BAD_REQUEST {
                    let text = crate::error::bmc_messages(&reply.body).unwrap_or_default();
                    let need_protocol =
                        text.contains("TransferProtocolType") && body.get("TransferProtocolType").is_none();
                    let need_method = text.contains("TransferMethod") && body.get("TransferMethod").is_none();
                    if need_protocol || need_method {
                        tracing::info!(bmc = %self.transport.bmc(), "The BMC requires transfer parameters; resending InsertMedia with them.");
                        let body = insert_body(url, &action, need_protocol, need_method)?;
                        self.transport.exchange(ctx, Method::POST, &target, Some(&body), None).await?
                    } else {
                        reply
                    }
                } else {
                    reply
                };
                self.transport.complete(ctx, &Method::POST, &target, reply).await?;
            }
            None => match oem_action_target(&device.body, ".InsertVirtualMedia") {
                Some(target) => {
                    tracing::info!(bmc = %self.transport.bmc(), device = %path, image = %redact(url), "Inserting virtual media (OEM action).");
                    self.transport.post(ctx, &target, &json!({"Image": url})).await?;
                }
                None => {
                    tracing::info!(bmc = %self.transport.bmc(), device = %path, image = %redact(url), "Inserting virtual media (PATCH).");
                    let body = media_patch(&device.body, json!(url), true);
                    self.patch_media(ctx, device, body).await?;
                }
            },
        }
        // The insert is done when the device reads back inserted (a BMC's
        // acknowledgement alone is not the effect), with this image when it
        // names one.
        let after = self
            .transport
            .read_back(ctx, &path, |r| is_inserted(&r.body) && str_of(&r.body, "Image").is_none_or(|img| img == url))
            .await?;
        match str_of(&after.body, "Image") {
            Some(img) if img != url && is_inserted(&after.body) => Err(err(
                ErrorCode::BmcError,
                format!("the BMC accepted the media insert but {path} reports another image"),
            )),
            _ if !is_inserted(&after.body) => Err(err(
                ErrorCode::BmcError,
                format!("the BMC accepted the media insert but {path} does not read back inserted"),
            )),
            _ => Ok(None),
        }
    }

    /// Ejects every device of that kind holding media (whichever slot it
    /// is in); `not_inserted` when none does.
    async fn eject_media(&mut self, ctx: &Ctx, media: MediaKind) -> Result<Option<NoChange>> {
        let devices = self.media_devices(ctx).await?;
        let (holding, _): (Vec<Resource>, Vec<Resource>) =
            devices.into_iter().filter(|d| serves(&d.body, media)).partition(|d| is_inserted(&d.body));
        if holding.is_empty() {
            tracing::debug!(bmc = %self.transport.bmc(), "Nothing inserted; nothing to eject.");
            return Ok(Some(NoChange::NotInserted));
        }
        if let Some(d) = holding.iter().find(|d| !can_eject(&d.body)) {
            // Checked before anything is sent: all or nothing.
            return Err(unsupported(format!("{} holds media but advertises no EjectMedia", d.path)));
        }
        for device in holding {
            let path = device.path.clone();
            self.eject_device(ctx, device).await?;
            // Done when the device reads back empty, not when the BMC says so.
            let after = self.transport.read_back(ctx, &path, |r| !is_inserted(&r.body)).await?;
            if is_inserted(&after.body) {
                return Err(err(
                    ErrorCode::BmcError,
                    format!("the BMC accepted the media eject but {path} still reads back inserted"),
                ));
            }
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dev(id: &str, types: Option<&[&str]>) -> Resource {
        let mut body = json!({"Id": id, "Name": id});
        if let Some(t) = types {
            body["MediaTypes"] = json!(t);
        }
        Resource { path: format!("/vm/{id}"), body, etag: None }
    }

    #[test]
    fn chooses_by_media_types_then_names() {
        let sushy = vec![dev("Cd", Some(&["CD", "DVD"])), dev("Floppy", Some(&["Floppy", "USBStick"]))];
        assert_eq!(choose_device(&sushy, MediaKind::Cd), Some(0));
        assert_eq!(choose_device(&sushy, MediaKind::Usb), Some(1));
        let unnamed = vec![dev("RemovableDisk", None), dev("CD1", None)];
        // bmcweb: proxy slots (EjectMedia only) first, then a legacy slot that can insert.
        let mut slots = vec![dev("Slot_0", Some(&["CD", "USBStick"])), dev("Slot_2", Some(&["CD", "USBStick"]))];
        slots[0].body["Actions"] =
            json!({"#VirtualMedia.EjectMedia": {"target": "/vm/Slot_0/Actions/VirtualMedia.EjectMedia"}});
        slots[1].body["Actions"] =
            json!({"#VirtualMedia.InsertMedia": {"target": "/vm/Slot_2/Actions/VirtualMedia.InsertMedia"}});
        assert_eq!(choose_device(&slots, MediaKind::Cd), Some(1), "by what a slot can do, not by order");
        slots[1].body["Inserted"] = json!(true);
        let mut free = dev("Slot_3", Some(&["CD", "USBStick"]));
        free.body["Actions"] = slots[1].body["Actions"].clone();
        slots.push(free);
        assert_eq!(choose_device(&slots, MediaKind::Cd), Some(2), "an empty slot before one holding another image");
        assert_eq!(choose_device(&unnamed, MediaKind::Cd), Some(1));
        assert_eq!(choose_device(&unnamed, MediaKind::Usb), Some(0));
        assert_eq!(choose_device(&[dev("CD", Some(&["CD"]))], MediaKind::Usb), None);
    }

    #[test]
    fn insert_body_follows_advertised_parameters() {
        // iDRAC 17G (fixture virtualmedia_1.json).
        let idrac = json!({"TransferProtocolType@Redfish.AllowableValues": ["CIFS", "HTTP", "HTTPS", "NFS"],
                           "TransferMethod@Redfish.AllowableValues": ["Stream"]});
        assert_eq!(
            insert_body("http://10.1.1.1/a.iso", &idrac, false, false).unwrap(),
            json!({"Image": "http://10.1.1.1/a.iso", "Inserted": true, "WriteProtected": true,
                   "TransferProtocolType": "HTTP", "TransferMethod": "Stream"})
        );
        assert_eq!(
            insert_body("http://10.1.1.1/a.iso", &json!({}), false, false).unwrap(),
            json!({"Image": "http://10.1.1.1/a.iso", "Inserted": true, "WriteProtected": true})
        );
        assert_eq!(
            insert_body("nfs://10.1.1.1/a.iso", &json!({}), true, false).unwrap()["TransferProtocolType"],
            "NFS"
        );
        let https_only = json!({"TransferProtocolType@Redfish.AllowableValues": ["HTTPS"]});
        assert_eq!(insert_body("http://h/a.iso", &https_only, false, false).unwrap_err().code, ErrorCode::Unsupported);
    }

    #[test]
    fn redacts_credentials() {
        assert_eq!(redact("http://u:p@host/a.iso?token=x"), "http://host/a.iso");
    }
}
