//! The simulated AMT behind the fixture server: request routing, body
//! checks, power/boot state, and which response each request gets.
//!
//! The provenance of every answer is tabled in the `testing` module docs.
//!
//! # Modelled AMT rules
//!
//! - `AvailableRequestedPowerStates` is the captured list while on, `[2]`
//!   while off; anything else gets `ReturnValue` 2 (what AMT answers, e.g.
//!   to a reset of a powered-off host).
//! - A boot (power on, cycle, reset) uses the boot configuration when
//!   `SetBootConfigRole(1)` armed it, then clears it (source, role and
//!   options), like AMT's IsNextSingleUse.
//! - `BIOSSetup`/`UseIDER`/`UseSOL` cannot be combined with a forced boot
//!   source (Intel AMT SDK, AMT_BootSettingData): a Put setting them while a
//!   source is selected is refused with `wxf:InvalidRepresentation`, a
//!   `ChangeBootOrder` to a source while they are set returns 36.

use super::fixtures::Fixtures;
use super::soap::{
    amt_envelope, amt_message_id, child_text, fault_envelope, read_epr, replace_values, Reject, SoapRequest,
};
use super::{AmtEvent, BootState, Class, Injection, Op, RecordedRequest};
use bmcfleet_amt::wsman::{names, ns};
use bmcfleet_amt::xml::{self, Element};
use std::collections::HashMap;

/// AMT_BootSettingData properties a Put cannot change.
const READ_ONLY: &[&str] = &[
    "InstanceID",
    "ElementName",
    "OwningEntity",
    "BIOSLastStatus",
    "BootguardStatus",
    "OptionsCleared",
    "UefiBootNumberOfParams",
    "RPEEnabled",
    "SecureBootControlEnabled",
    "UEFIHTTPSBootEnabled",
    "UEFILocalPBABootEnabled",
    "WinREBootEnabled",
];
/// Options that reset after a boot (IsNextSingleUse).
const ONE_TIME_OPTIONS: &[&str] = &[
    "BIOSPause",
    "BIOSSetup",
    "BootMediaIndex",
    "ConfigurationDataReset",
    "FirmwareVerbosity",
    "ForcedProgressEvents",
    "IDERBootDevice",
    "LockKeyboard",
    "LockPowerButton",
    "LockResetButton",
    "LockSleepButton",
    "ReflashBIOS",
    "SecureErase",
    "UseIDER",
    "UseSOL",
    "UseSafeMode",
    "UserPasswordBypass",
    "PlatformErase",
];

/// `CIM_SoftwareIdentity` instances of the simulated AMT 15.0.23.1706.
const SOFTWARE: &[(&str, &str)] = &[
    ("Flash", "15.0.23"),
    ("Netstack", "15.0.23"),
    ("AMTApps", "15.0.23"),
    ("AMT", "15.0.23"),
    ("Sku", "16392"),
    ("VendorID", "8086"),
    ("Build Number", "1706"),
    ("Recovery Version", "15.0.23"),
    ("Recovery Build Num", "1706"),
    ("Legacy Mode", "False"),
    ("AMT FW Core Version", "15.0.23.1706"),
];

pub const CHASSIS_MANUFACTURER: &str = "Intel Corporation";
pub const CHASSIS_MODEL: &str = "NUC11TNHi5";
pub const CHASSIS_SERIAL: &str = "BTTN12345678";
pub const PLATFORM_GUID: &str = "4C4C4544-0036-4810-8051-B4C04F4E3232";

/// What the server sends for one request.
#[derive(Clone, Debug)]
pub(crate) enum Reply {
    /// A SOAP envelope (chunked, AMT headers).
    Soap { status: u16, body: String },
    /// A captured HTTP response, byte for byte.
    Raw(Vec<u8>),
    /// A non-SOAP HTTP error.
    Http(u16),
    /// Never answer.
    Stall,
    /// Head and the first chunk of this body, then nothing.
    StallMidBody(String),
}

impl Reply {
    pub fn status(&self) -> u16 {
        match self {
            Reply::Soap { status, .. } => *status,
            Reply::Raw(b) => super::http::Transcript::parse(b).map(|t| t.status).unwrap_or(0),
            Reply::Http(s) => *s,
            Reply::Stall | Reply::StallMidBody(_) => 0,
        }
    }
}

pub(crate) struct Device {
    fixtures: Fixtures,
    pub power: u16,
    /// AMT_BootSettingData properties in document order (arrays repeat).
    settings: Vec<(String, String)>,
    /// Forced boot source (`CIM_BootSourceSetting` InstanceID).
    source: Option<String>,
    /// `SetBootConfigRole(1)` armed the configuration for the next boot.
    role_next: bool,
    /// InstanceIDs of the captured `CIM_BootSourceSetting` instances.
    sources: Vec<String>,
    /// Captured power-association enumeration context.
    power_context: String,
    /// Open enumeration contexts.
    contexts: HashMap<String, Class>,
    serial: u64,
    pub events: Vec<AmtEvent>,
    pub injections: Vec<(Op, Injection)>,
}

fn ok(body: String) -> Reply {
    Reply::Soap { status: 200, body }
}

impl Device {
    pub fn new(fixtures: Fixtures, power: u16) -> Result<Device, String> {
        let settings_doc =
            bmcfleet_amt::wsman::Envelope::parse(&fixtures.boot_setting_data_get).map_err(|e| e.to_string())?;
        let inst = settings_doc.body_element("AMT_BootSettingData").ok_or("no AMT_BootSettingData in the capture")?;
        let settings = inst.children.iter().map(|c| (c.name.clone(), c.text_trim().to_owned())).collect();
        let src = bmcfleet_amt::wsman::Envelope::parse(&fixtures.boot_source_pull).map_err(|e| e.to_string())?;
        let sources = src
            .pull_page()
            .ok_or("no PullResponse in the boot source capture")?
            .items
            .iter()
            .filter_map(|i| i.child_text("InstanceID").map(str::to_owned))
            .collect();
        let en = bmcfleet_amt::wsman::Envelope::parse(&fixtures.power_assoc_enumerate).map_err(|e| e.to_string())?;
        let power_context = en.enumeration_context().ok_or("no context in the enumerate capture")?;
        // Every capture must be well-formed before the server starts.
        for doc in [
            &fixtures.general_get,
            &fixtures.boot_capabilities_get,
            &fixtures.power_assoc_pull,
            &fixtures.request_power_state_change,
            &fixtures.change_boot_order,
            &fixtures.set_boot_config_role,
            &fixtures.fault_destination_unreachable,
        ] {
            bmcfleet_amt::wsman::Envelope::parse(doc).map_err(|e| e.to_string())?;
        }
        Ok(Device {
            fixtures,
            power,
            settings,
            source: None,
            role_next: false,
            sources,
            power_context,
            contexts: HashMap::new(),
            serial: 0x3000,
            events: Vec::new(),
            injections: Vec::new(),
        })
    }

    fn setting(&self, name: &str) -> Option<&str> {
        self.settings.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }

    fn flag(&self, name: &str) -> bool {
        self.setting(name) == Some("true")
    }

    pub fn boot_state(&self) -> BootState {
        BootState {
            source: self.source.clone(),
            role_next: self.role_next,
            bios_setup: self.flag("BIOSSetup"),
            safe_mode: self.flag("UseSafeMode"),
        }
    }

    fn message_id(&mut self) -> String {
        self.serial += 1;
        amt_message_id(self.serial)
    }

    fn fault(&mut self, relates_to: &str, subcode: (&str, &str), reason: &str) -> Reply {
        let id = self.message_id();
        Reply::Soap { status: 400, body: fault_envelope(&id, relates_to, subcode, reason, None) }
    }

    /// What AMT offers from the current power state.
    pub fn available(&self) -> Vec<u16> {
        match self.power {
            2 => vec![10, 8, 5, 11, 4, 7, 14, 12],
            3 | 4 => vec![2, 8, 10],
            _ => vec![2],
        }
    }

    /// Answer one authenticated POST /wsman body.
    pub fn handle(&mut self, body: &[u8], record: &mut RecordedRequest) -> Reply {
        let req = match SoapRequest::parse(body) {
            Ok(r) => r,
            Err(Reject::MissingHeader(h)) => {
                return self.fault(
                    "",
                    (ns::WSA, "MessageInformationHeaderRequired"),
                    &format!("A required header ({h}) is missing."),
                )
            }
            Err(Reject::Malformed(m)) => {
                return self.fault(
                    "",
                    (ns::WSMAN, "SchemaValidationError"),
                    &format!("The supplied SOAP request is invalid: {m}"),
                )
            }
        };
        record.action = Some(req.action.clone());
        record.resource_uri = Some(req.resource_uri.clone());
        record.selectors = req.selectors.clone();
        if req.to != "/wsman" && !req.to.ends_with("/wsman") {
            return self.fault(
                &req.message_id,
                (ns::WSA, "DestinationUnreachable"),
                "The wsa:To address is not /wsman.",
            );
        }
        let op = match self.route(&req) {
            Ok(op) => op,
            Err(reply) => return reply,
        };
        record.op = Some(op);
        if let Some(pos) = self.injections.iter().position(|(o, _)| *o == op) {
            let (_, inj) = self.injections.remove(pos);
            return self.inject(&req, op, inj);
        }
        self.dispatch(&req, op)
    }

    /// Map action + ResourceURI + selectors to an operation.
    fn route(&mut self, req: &SoapRequest) -> Result<Op, Reply> {
        let Some(class) = Class::from_uri(&req.resource_uri) else {
            return Err(Reply::Soap { status: 400, body: self.fixtures.fault_destination_unreachable.clone() });
        };
        let verb = if req.action == ns::ACTION_GET {
            Some(Op::Get(class))
        } else if req.action == ns::ACTION_PUT {
            Some(Op::Put(class))
        } else if req.action == ns::ACTION_ENUMERATE {
            Some(Op::Enumerate(class))
        } else if req.action == ns::ACTION_PULL {
            Some(Op::Pull(class))
        } else {
            None
        };
        let method = req.action.strip_prefix(&format!("{}/", req.resource_uri));
        let op = match (verb, method) {
            (
                Some(
                    op @ Op::Get(
                        Class::GeneralSettings | Class::BootCapabilities | Class::BootSettingData | Class::Chassis,
                    ),
                ),
                _,
            ) => op,
            (Some(op @ Op::Put(Class::BootSettingData)), _) => op,
            (
                Some(
                    op @ (Op::Enumerate(
                        Class::AssociatedPowerManagementService
                        | Class::SoftwareIdentity
                        | Class::ComputerSystemPackage
                        | Class::OrderedComponent,
                    )
                    | Op::Pull(
                        Class::AssociatedPowerManagementService
                        | Class::SoftwareIdentity
                        | Class::ComputerSystemPackage
                        | Class::OrderedComponent,
                    )),
                ),
                _,
            ) => op,
            (None, Some("RequestPowerStateChange")) if class == Class::PowerManagementService => {
                Op::RequestPowerStateChange
            }
            (None, Some("ChangeBootOrder")) if class == Class::BootConfigSetting => Op::ChangeBootOrder,
            (None, Some("SetBootConfigRole")) if class == Class::BootService => Op::SetBootConfigRole,
            _ => {
                return Err(self.fault(
                    &req.message_id,
                    (ns::WSA, "ActionNotSupported"),
                    &format!("The action {} is not supported by {}.", req.action, class.name()),
                ))
            }
        };
        let required: &[(&str, &str)] = match op {
            Op::Get(Class::Chassis) => &[("CreationClassName", "CIM_Chassis"), ("Tag", "CIM_Chassis")],
            Op::RequestPowerStateChange => &[
                ("CreationClassName", "CIM_PowerManagementService"),
                ("Name", names::POWER_SERVICE),
                ("SystemCreationClassName", "CIM_ComputerSystem"),
                ("SystemName", names::AMT_SYSTEM),
            ],
            Op::ChangeBootOrder => &[("InstanceID", names::BOOT_CONFIG)],
            Op::SetBootConfigRole => &[
                ("CreationClassName", "CIM_BootService"),
                ("Name", names::BOOT_SERVICE),
                ("SystemCreationClassName", "CIM_ComputerSystem"),
                ("SystemName", names::AMT_SYSTEM),
            ],
            _ => &[],
        };
        let mut got: Vec<(&str, &str)> = req.selectors.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let mut want = required.to_vec();
        got.sort_unstable();
        want.sort_unstable();
        if got != want {
            return Err(self.fault(
                &req.message_id,
                (ns::WSMAN, "InvalidSelectors"),
                &format!("The selectors for {} are invalid: expected {want:?}, got {got:?}.", class.name()),
            ));
        }
        Ok(op)
    }

    fn inject(&mut self, req: &SoapRequest, op: Op, inj: Injection) -> Reply {
        match inj {
            Injection::DestinationUnreachable => {
                Reply::Soap { status: 400, body: self.fixtures.fault_destination_unreachable.clone() }
            }
            Injection::Transcript(rel) => match self.fixtures.read(&rel) {
                Ok(b) => Reply::Raw(b),
                Err(_) => Reply::Http(500),
            },
            Injection::Fault { namespace, subcode, reason } => {
                self.fault(&req.message_id, (namespace.uri(), subcode.as_str()), &reason)
            }
            Injection::PullPage { items } => {
                let Op::Pull(class) = op else { return Reply::Http(500) };
                self.pull_response(&req.message_id, class, &(0..items).map(|_| Vec::new()).collect::<Vec<_>>(), true)
            }
            Injection::ReturnValue(v) => {
                let doc = match op {
                    Op::RequestPowerStateChange => self.fixtures.request_power_state_change.clone(),
                    Op::ChangeBootOrder => self.fixtures.change_boot_order.clone(),
                    Op::SetBootConfigRole => self.fixtures.set_boot_config_role.clone(),
                    _ => return Reply::Http(500),
                };
                match replace_values(&doc, "ReturnValue", &[v.to_string()]) {
                    Ok(b) => ok(b),
                    Err(_) => Reply::Http(500),
                }
            }
            Injection::MalformedXml => {
                // A captured answer cut short, as a truncated or garbled reply looks.
                let body = self.dispatch_body(req, op);
                ok(body[..body.len() / 2].to_owned() + "<unclosed")
            }
            Injection::NotSoap => ok("<html><body>Intel(R) AMT</body></html>".into()),
            Injection::Stall => Reply::Stall,
            Injection::StallMidBody => Reply::StallMidBody(self.dispatch_body(req, op)),
            Injection::HttpStatus(s) => Reply::Http(s),
            Injection::Document(body) => ok(body),
        }
    }

    fn dispatch_body(&mut self, req: &SoapRequest, op: Op) -> String {
        match self.dispatch(req, op) {
            Reply::Soap { body, .. } => body,
            _ => self.fixtures.general_get.clone(),
        }
    }

    fn dispatch(&mut self, req: &SoapRequest, op: Op) -> Reply {
        let result = match op {
            Op::Get(Class::GeneralSettings) => Ok(ok(self.fixtures.general_get.clone())),
            Op::Get(Class::BootCapabilities) => Ok(ok(self.fixtures.boot_capabilities_get.clone())),
            Op::Get(Class::BootSettingData) => self.settings_doc(None).map(ok),
            Op::Put(Class::BootSettingData) => self.put_settings(req),
            Op::Get(Class::Chassis) => Ok(ok(self.chassis(req))),
            Op::Enumerate(class) => Ok(ok(self.enumerate(req, class))),
            Op::Pull(class) => self.pull(req, class),
            Op::RequestPowerStateChange => self.request_power_state_change(req),
            Op::ChangeBootOrder => self.change_boot_order(req),
            Op::SetBootConfigRole => self.set_boot_config_role(req),
            _ => Ok(Reply::Http(500)),
        };
        result.unwrap_or_else(|e| e)
    }

    /// The captured AMT_BootSettingData envelope with the current values
    /// (and another Action for a PutResponse).
    fn settings_doc(&self, action: Option<&str>) -> Result<String, Reply> {
        let mut doc = self.fixtures.boot_setting_data_get.clone();
        let mut names: Vec<&str> = Vec::new();
        for (k, _) in &self.settings {
            if !names.contains(&k.as_str()) {
                names.push(k);
            }
        }
        for n in names {
            let values: Vec<String> = self.settings.iter().filter(|(k, _)| k == n).map(|(_, v)| v.clone()).collect();
            doc = replace_values(&doc, n, &values).map_err(|_| Reply::Http(500))?;
        }
        if let Some(a) = action {
            doc = replace_values(&doc, "Action", &[a.to_owned()]).map_err(|_| Reply::Http(500))?;
        }
        Ok(doc)
    }

    fn invalid_parameter(&mut self, req: &SoapRequest, why: String) -> Reply {
        self.fault(&req.message_id, (ns::WSMAN, "InvalidParameter"), &why)
    }

    fn put_settings(&mut self, req: &SoapRequest) -> Result<Reply, Reply> {
        let uri = ns::amt("AMT_BootSettingData");
        let bad = |this: &mut Self, why: String| this.fault(&req.message_id, (ns::WXF, "InvalidRepresentation"), &why);
        let Some(inst) = req.payload().filter(|p| p.is(&uri, "AMT_BootSettingData")) else {
            return Err(bad(self, "The body is not an AMT_BootSettingData instance.".into()));
        };
        if child_text(inst, "InstanceID") != Some(names::BOOT_SETTING_DATA) {
            return Err(bad(self, "InstanceID must be `Intel(r) AMT:BootSettingData 0`.".into()));
        }
        let mut new = self.settings.clone();
        for c in &inst.children {
            if c.ns.as_deref() != Some(uri.as_str()) {
                return Err(bad(self, format!("Property {} is not in the AMT_BootSettingData namespace.", c.name)));
            }
            let Some(old) = self.setting(&c.name) else {
                return Err(bad(self, format!("Unknown property {}.", c.name)));
            };
            let v = c.text_trim();
            if (old == "true" || old == "false") && v != "true" && v != "false" {
                return Err(bad(self, format!("Property {} must be a boolean, got `{v}`.", c.name)));
            }
            if READ_ONLY.contains(&c.name.as_str()) || c.is_nil() {
                continue;
            }
            if let Some(slot) = new.iter_mut().find(|(k, _)| *k == c.name) {
                slot.1 = v.to_owned();
            }
        }
        let on = |k: &str| new.iter().any(|(n, v)| n == k && v == "true");
        if self.source.is_some() && (on("BIOSSetup") || on("UseIDER") || on("UseSOL")) {
            return Err(bad(
                self,
                "BIOSSetup, UseIDER and UseSOL cannot be set while a boot source is selected.".into(),
            ));
        }
        let any = ONE_TIME_OPTIONS.iter().any(|o| on(o));
        if let Some(slot) = new.iter_mut().find(|(k, _)| k == "OptionsCleared") {
            slot.1 = (!any).to_string();
        }
        self.settings = new;
        self.events.push(AmtEvent::BootSettingsPut {
            bios_setup: self.flag("BIOSSetup"),
            safe_mode: self.flag("UseSafeMode"),
            use_ider: self.flag("UseIDER"),
            use_sol: self.flag("UseSOL"),
        });
        self.settings_doc(Some("http://schemas.xmlsoap.org/ws/2004/09/transfer/PutResponse")).map(ok)
    }

    fn chassis(&mut self, req: &SoapRequest) -> String {
        let id = self.message_id();
        let uri = ns::cim("CIM_Chassis");
        amt_envelope(
            &id,
            "http://schemas.xmlsoap.org/ws/2004/09/transfer/GetResponse",
            Some(&uri),
            &req.message_id,
            &uri,
            ns::WSMAN,
            |w| {
                w.start("g:CIM_Chassis", &[]);
                for (k, v) in [
                    ("ChassisPackageType", "0"),
                    ("CreationClassName", "CIM_Chassis"),
                    ("ElementName", "Managed System Chassis"),
                    ("Manufacturer", CHASSIS_MANUFACTURER),
                    ("Model", CHASSIS_MODEL),
                    ("OperationalStatus", "0"),
                    ("PackageType", "3"),
                    ("SerialNumber", CHASSIS_SERIAL),
                    ("Tag", "CIM_Chassis"),
                    ("Version", "M11904-404"),
                ] {
                    w.text_element(&format!("g:{k}"), &[], v);
                }
                w.end("g:CIM_Chassis");
            },
        )
    }

    fn enumerate(&mut self, req: &SoapRequest, class: Class) -> String {
        if class == Class::AssociatedPowerManagementService {
            self.contexts.insert(self.power_context.clone(), class);
            return self.fixtures.power_assoc_enumerate.clone();
        }
        let id = self.message_id();
        let context = format!("{:08X}-0000-0000-0000-000000000000", self.serial);
        self.contexts.insert(context.clone(), class);
        amt_envelope(
            &id,
            "http://schemas.xmlsoap.org/ws/2004/09/enumeration/EnumerateResponse",
            Some(&class.uri()),
            &req.message_id,
            ns::WSEN,
            ns::WSMAN,
            |w| {
                w.start("g:EnumerateResponse", &[]);
                w.text_element("g:EnumerationContext", &[], &context);
                w.end("g:EnumerateResponse");
            },
        )
    }

    fn pull(&mut self, req: &SoapRequest, class: Class) -> Result<Reply, Reply> {
        let context = req
            .payload()
            .filter(|p| p.is(ns::WSEN, "Pull"))
            .and_then(|p| p.child(ns::WSEN, "EnumerationContext"))
            .map(|c| c.text_trim().to_owned())
            .unwrap_or_default();
        if self.contexts.get(&context) != Some(&class) {
            return Err(self.fault(
                &req.message_id,
                (ns::WSEN, "InvalidEnumerationContext"),
                "The supplied enumeration context is invalid.",
            ));
        }
        self.contexts.remove(&context);
        if class == Class::AssociatedPowerManagementService {
            let doc = replace_values(&self.fixtures.power_assoc_pull, "PowerState", &[self.power.to_string()])
                .and_then(|d| {
                    let avail: Vec<String> = self.available().iter().map(u16::to_string).collect();
                    replace_values(&d, "AvailableRequestedPowerStates", &avail)
                })
                .map_err(|_| Reply::Http(500))?;
            return Ok(ok(doc));
        }
        let items = self.items(class);
        Ok(self.pull_response(&req.message_id, class, &items, false))
    }

    /// A PullResponse (to the request `relates_to`) with `items` of
    /// `class`: the last page (`EndOfSequence`), or one with `more` to come
    /// (a new `EnumerationContext`).
    fn pull_response(&mut self, relates_to: &str, class: Class, items: &[Vec<Prop>], more: bool) -> Reply {
        let id = self.message_id();
        let uri = class.uri();
        ok(amt_envelope(
            &id,
            "http://schemas.xmlsoap.org/ws/2004/09/enumeration/PullResponse",
            Some(&uri),
            relates_to,
            ns::WSEN,
            &uri,
            |w| {
                w.start("g:PullResponse", &[]);
                if more {
                    w.text_element("g:EnumerationContext", &[], "more");
                }
                w.start("g:Items", &[]);
                for item in items {
                    write_item(w, class.name(), item);
                }
                w.end("g:Items");
                if !more {
                    w.empty("g:EndOfSequence", &[]);
                }
                w.end("g:PullResponse");
            },
        ))
    }

    fn items(&self, class: Class) -> Vec<Vec<Prop>> {
        let cs_epr = |w: &str| {
            Prop::Epr(
                w.to_owned(),
                ns::cim("CIM_ComputerSystem"),
                vec![
                    ("CreationClassName", "CIM_ComputerSystem".to_owned()),
                    ("Name", names::MANAGED_SYSTEM.to_owned()),
                ],
            )
        };
        match class {
            Class::SoftwareIdentity => SOFTWARE
                .iter()
                .map(|(id, v)| {
                    vec![
                        Prop::Text("InstanceID", (*id).to_owned()),
                        Prop::Text("IsEntity", "true".into()),
                        Prop::Text("VersionString", (*v).to_owned()),
                    ]
                })
                .collect(),
            Class::ComputerSystemPackage => vec![vec![
                Prop::Epr(
                    "Antecedent".into(),
                    ns::cim("CIM_Chassis"),
                    vec![("CreationClassName", "CIM_Chassis".into()), ("Tag", "CIM_Chassis".into())],
                ),
                cs_epr("Dependent"),
                Prop::Text("PlatformGUID", PLATFORM_GUID.into()),
            ]],
            Class::OrderedComponent => self
                .sources
                .iter()
                .map(|s| {
                    let seq = if self.source.as_deref() == Some(s.as_str()) { "1" } else { "0" };
                    vec![
                        Prop::Text("AssignedSequence", seq.into()),
                        Prop::Epr(
                            "GroupComponent".into(),
                            ns::cim("CIM_BootConfigSetting"),
                            vec![("InstanceID", names::BOOT_CONFIG.into())],
                        ),
                        Prop::Epr(
                            "PartComponent".into(),
                            ns::cim("CIM_BootSourceSetting"),
                            vec![("InstanceID", s.clone())],
                        ),
                    ]
                })
                .collect(),
            _ => Vec::new(),
        }
    }

    fn request_power_state_change(&mut self, req: &SoapRequest) -> Result<Reply, Reply> {
        let uri = ns::cim("CIM_PowerManagementService");
        let Some(input) = req.payload().filter(|p| p.is(&uri, "RequestPowerStateChange_INPUT")) else {
            return Err(self.invalid_parameter(req, "The body must be RequestPowerStateChange_INPUT.".into()));
        };
        let Some(value) = input.child(&uri, "PowerState").and_then(|p| p.text_trim().parse::<u16>().ok()) else {
            return Err(self.invalid_parameter(req, "PowerState is missing or not a number.".into()));
        };
        let me = input.child(&uri, "ManagedElement").and_then(read_epr);
        let mut want = vec![
            ("CreationClassName".to_owned(), "CIM_ComputerSystem".to_owned()),
            ("Name".to_owned(), names::MANAGED_SYSTEM.to_owned()),
        ];
        let ok_me = me.is_some_and(|(u, mut s)| {
            s.sort();
            want.sort();
            u == ns::cim("CIM_ComputerSystem") && s == want
        });
        if !ok_me {
            return Err(self.invalid_parameter(
                req,
                "ManagedElement must reference CIM_ComputerSystem Name=ManagedSystem.".into(),
            ));
        }
        let rv = if self.available().contains(&value) { 0 } else { 2 };
        self.events.push(AmtEvent::PowerStateChange { requested: value, return_value: rv });
        if rv == 0 {
            match value {
                2 | 5 | 10 | 14 => {
                    self.power = 2;
                    self.boot();
                }
                8 | 12 => self.power = 8,
                4 | 7 => self.power = value,
                _ => {} // NMI: no state change
            }
        }
        replace_values(&self.fixtures.request_power_state_change, "ReturnValue", &[rv.to_string()])
            .map(ok)
            .map_err(|_| Reply::Http(500))
    }

    /// The host boots: use the armed one-time configuration, then clear it.
    fn boot(&mut self) {
        if self.role_next {
            self.events.push(AmtEvent::Booted {
                source: self.source.clone(),
                bios_setup: self.flag("BIOSSetup"),
                safe_mode: self.flag("UseSafeMode"),
            });
            self.role_next = false;
            self.source = None;
            for (k, v) in &mut self.settings {
                if ONE_TIME_OPTIONS.contains(&k.as_str()) {
                    *v = if v == "true" || v == "false" { "false".into() } else { "0".into() };
                }
                if k == "OptionsCleared" {
                    *v = "true".into();
                }
            }
        } else {
            self.events.push(AmtEvent::Booted { source: None, bios_setup: false, safe_mode: false });
        }
    }

    fn change_boot_order(&mut self, req: &SoapRequest) -> Result<Reply, Reply> {
        let uri = ns::cim("CIM_BootConfigSetting");
        let Some(input) = req.payload().filter(|p| p.is(&uri, "ChangeBootOrder_INPUT")) else {
            return Err(self.invalid_parameter(req, "The body must be ChangeBootOrder_INPUT.".into()));
        };
        let sources: Vec<&Element> = input.children.iter().filter(|c| c.is(&uri, "Source")).collect();
        if sources.len() != input.children.len() || sources.len() > 1 {
            return Err(self
                .invalid_parameter(req, "ChangeBootOrder takes at most one Source (AMT uses only the first).".into()));
        }
        let source = match sources.first() {
            None => None,
            Some(s) => {
                let Some((ruri, sels)) = read_epr(s) else {
                    return Err(self.invalid_parameter(req, "Source is not an endpoint reference.".into()));
                };
                let id = sels.iter().find(|(k, _)| k == "InstanceID").map(|(_, v)| v.clone());
                match id {
                    Some(id)
                        if ruri == ns::cim("CIM_BootSourceSetting")
                            && sels.len() == 1
                            && self.sources.contains(&id) =>
                    {
                        Some(id)
                    }
                    _ => {
                        return Err(self.invalid_parameter(
                            req,
                            format!(
                                "Source must reference one of the CIM_BootSourceSetting instances {:?}.",
                                self.sources
                            ),
                        ))
                    }
                }
            }
        };
        let rv = if source.is_some() && (self.flag("BIOSSetup") || self.flag("UseIDER") || self.flag("UseSOL")) {
            36
        } else {
            self.source = source.clone();
            self.events.push(AmtEvent::BootOrderChanged { source });
            0
        };
        replace_values(&self.fixtures.change_boot_order, "ReturnValue", &[rv.to_string()])
            .map(ok)
            .map_err(|_| Reply::Http(500))
    }

    fn set_boot_config_role(&mut self, req: &SoapRequest) -> Result<Reply, Reply> {
        let uri = ns::cim("CIM_BootService");
        let Some(input) = req.payload().filter(|p| p.is(&uri, "SetBootConfigRole_INPUT")) else {
            return Err(self.invalid_parameter(req, "The body must be SetBootConfigRole_INPUT.".into()));
        };
        let epr = input.child(&uri, "BootConfigSetting").and_then(read_epr);
        let epr_ok = epr.is_some_and(|(u, s)| {
            u == ns::cim("CIM_BootConfigSetting") && s == vec![("InstanceID".to_owned(), names::BOOT_CONFIG.to_owned())]
        });
        if !epr_ok {
            return Err(self.invalid_parameter(
                req,
                format!("BootConfigSetting must reference CIM_BootConfigSetting InstanceID={}.", names::BOOT_CONFIG),
            ));
        }
        let role = input.child(&uri, "Role").and_then(|r| r.text_trim().parse::<u32>().ok());
        let role = match role {
            Some(r @ (1 | 32768)) => r,
            other => {
                return Err(self.invalid_parameter(
                    req,
                    format!("Role {other:?} is not supported: AMT accepts 1 (IsNextSingleUse) and 32768 (IsNotNext)."),
                ))
            }
        };
        self.role_next = role == 1;
        self.events.push(AmtEvent::BootConfigRoleSet { role });
        Ok(ok(self.fixtures.set_boot_config_role.clone()))
    }
}

/// A property of a spec-built instance.
enum Prop {
    Text(&'static str, String),
    /// `(element, resource URI, selectors)`.
    Epr(String, String, Vec<(&'static str, String)>),
}

/// Write one instance as `<h:Class>` (h bound to the class URI).
fn write_item(w: &mut xml::XmlWriter, class: &str, props: &[Prop]) {
    let el = format!("h:{class}");
    w.start(&el, &[]);
    for p in props {
        match p {
            Prop::Text(k, v) => w.text_element(&format!("h:{k}"), &[], v),
            Prop::Epr(k, uri, sels) => {
                let e = format!("h:{k}");
                w.start(&e, &[]);
                w.text_element("b:Address", &[], ns::ANONYMOUS);
                w.start("b:ReferenceParameters", &[]);
                w.text_element("c:ResourceURI", &[], uri);
                w.start("c:SelectorSet", &[]);
                for (n, v) in sels {
                    w.text_element("c:Selector", &[("Name", n)], v);
                }
                w.end("c:SelectorSet");
                w.end("b:ReferenceParameters");
                w.end(&e);
            }
        }
    }
    w.end(&el);
}
