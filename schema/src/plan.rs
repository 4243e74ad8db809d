//! Plan mode (`Batch::plan`): what a batch *would* send, per action, without
//! changing anything on the BMC.
//!
//! A planned action runs on the same code path as an executed one; every
//! request passes the provider's send seam (`Ctx::sending_request`), which
//! in plan mode sends a reading request (recorded in [`ActionPlan::reads`])
//! and records the first state-changing one ([`ActionPlan::change`]) instead
//! of sending it: the action stops there. See `docs/PLAN_MODE.md`.
//!
//! Nothing secret is in a plan: request bodies lose password-like fields,
//! URL credentials and queries; IPMI data of a password command and the
//! data or body of a raw request are never shown.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The most reads one action's plan lists; further reads are counted in
/// [`ActionPlan::reads_omitted`] (an inventory walk reads hundreds).
pub const MAX_PLAN_READS: usize = 32;

/// The longest text one field of a planned request keeps (a body, a path).
pub const MAX_PLAN_TEXT: usize = 2048;

/// What is shown in place of a secret.
pub const REDACTED: &str = "[redacted]";

/// One request as a provider was about to send it (secrets already removed).
#[serde_with::skip_serializing_none]
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "protocol", rename_all = "snake_case")]
pub enum PlannedRequest {
    /// An HTTP request to a Redfish service: the path without its query.
    Redfish {
        method: String,
        path: String,
        /// The JSON body, password-like fields and URL credentials redacted.
        body: Option<serde_json::Value>,
    },
    /// One IPMI request (IPMB 0x20, LUN 0).
    Ipmi {
        netfn: u8,
        cmd: u8,
        /// The command's name, when bmcfleet knows it.
        name: Option<String>,
        /// Request data in lower-case hex, or `[redacted]` (a password, a raw request's data).
        data: String,
    },
    /// One WS-Management request (Intel AMT).
    Wsman {
        /// The WS-Addressing action URI (`…/transfer/Get`, `…/RequestPowerStateChange`).
        action: String,
        resource_uri: String,
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        selectors: BTreeMap<String, String>,
        /// The body's properties or method parameters (name → value), secrets redacted.
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        body: BTreeMap<String, String>,
    },
    /// A request to the test simulator (`bmc-sim`), which speaks actions.
    Sim {
        /// [`crate::Action::kind`].
        action: String,
        /// [`crate::Action::loggable`].
        params: String,
    },
}

impl PlannedRequest {
    /// One line: `POST /redfish/v1/…`, `ipmi netfn 0x00 cmd 0x02 (Chassis Control) data 01`.
    pub fn describe(&self) -> String {
        match self {
            PlannedRequest::Redfish { method, path, body } => match body {
                Some(b) => format!("{method} {path} {b}"),
                None => format!("{method} {path}"),
            },
            PlannedRequest::Ipmi { netfn, cmd, name, data } => format!(
                "IPMI netfn 0x{netfn:02x} cmd 0x{cmd:02x}{} data [{data}]",
                name.as_deref().map(|n| format!(" ({n})")).unwrap_or_default()
            ),
            PlannedRequest::Wsman { action, resource_uri, selectors, body } => {
                let mut s = format!("WS-Man {} {}", short_uri(action), short_uri(resource_uri));
                for (k, v) in selectors {
                    s.push_str(&format!(" {k}={v}"));
                }
                if !body.is_empty() {
                    let props: Vec<String> = body.iter().map(|(k, v)| format!("{k}={v}")).collect();
                    s.push_str(&format!(" {{{}}}", props.join(", ")));
                }
                s
            }
            PlannedRequest::Sim { action, params } if params.is_empty() => format!("sim {action}"),
            PlannedRequest::Sim { action, params } => format!("sim {action} {params}"),
        }
    }

    /// Every string of the request (what the worker scrubs of the action's
    /// secrets before the plan is stored).
    pub fn strings_mut(&mut self, f: &mut dyn FnMut(&mut String)) {
        fn walk(v: &mut serde_json::Value, f: &mut dyn FnMut(&mut String)) {
            match v {
                serde_json::Value::String(s) => f(s),
                serde_json::Value::Array(items) => items.iter_mut().for_each(|i| walk(i, f)),
                serde_json::Value::Object(map) => map.values_mut().for_each(|i| walk(i, f)),
                _ => {}
            }
        }
        match self {
            PlannedRequest::Redfish { method, path, body } => {
                f(method);
                f(path);
                if let Some(b) = body {
                    walk(b, f);
                }
            }
            PlannedRequest::Ipmi { name, data, .. } => {
                if let Some(n) = name {
                    f(n);
                }
                f(data);
            }
            PlannedRequest::Wsman { action, resource_uri, selectors, body } => {
                f(action);
                f(resource_uri);
                selectors.values_mut().for_each(&mut *f);
                body.values_mut().for_each(f);
            }
            PlannedRequest::Sim { action, params } => {
                f(action);
                f(params);
            }
        }
    }

    /// The request without any data it carries (a raw request's): its body
    /// or data becomes `[redacted]`.
    pub fn without_data(&mut self) {
        match self {
            PlannedRequest::Redfish { body, .. } => {
                if body.is_some() {
                    *body = Some(serde_json::Value::String(REDACTED.into()));
                }
            }
            PlannedRequest::Ipmi { data, .. } => {
                if !data.is_empty() {
                    *data = REDACTED.into();
                }
            }
            PlannedRequest::Wsman { body, .. } => body.values_mut().for_each(|v| *v = REDACTED.into()),
            PlannedRequest::Sim { .. } => {}
        }
    }
}

/// The last segment of a URI (`…/CIM_BootConfigSetting` → `CIM_BootConfigSetting`).
fn short_uri(uri: &str) -> &str {
    uri.rsplit('/').next().filter(|s| !s.is_empty()).unwrap_or(uri)
}

/// What one action of a plan batch did and would do.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ActionPlan {
    /// The requests it sent to decide, in order (reading requests only; at
    /// most [`MAX_PLAN_READS`]). Session set-up (login, RMCP+ session) is not listed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reads: Vec<PlannedRequest>,
    /// Reads made beyond [`MAX_PLAN_READS`] (not listed).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub reads_omitted: u32,
    /// The first state-changing request, which was **not** sent: the action
    /// stopped there. `None`: the action changes nothing (it ran to its end
    /// with reads only, e.g. `power status`), or it failed before (see the
    /// action's error).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub change: Option<PlannedRequest>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl ActionPlan {
    /// A one-line summary, the same for the same plan on any machine of a
    /// fleet (what `bmcctl` groups by): the change, or `no change`.
    pub fn summary(&self) -> String {
        match &self.change {
            Some(c) => c.describe(),
            None => "no change".into(),
        }
    }

    /// Every string of the plan (see [`PlannedRequest::strings_mut`]).
    pub fn strings_mut(&mut self, f: &mut dyn FnMut(&mut String)) {
        for r in self.reads.iter_mut().chain(self.change.iter_mut()) {
            r.strings_mut(f);
        }
    }
}

/// What one machine's plan batch came to, in one line that is the same for
/// the same plan on any machine (what a fleet plan is grouped by): per
/// action, its planned change (`POST …`), `no change`, or its error code;
/// with several actions, each prefixed by its kind.
pub fn results_line(results: &[crate::ActionResult]) -> String {
    let many = results.len() > 1;
    let parts: Vec<String> = results
        .iter()
        .map(|r| {
            let what = match (&r.error, &r.plan) {
                (Some(e), _) => e.code.to_string(),
                (None, Some(p)) => p.summary(),
                (None, None) => "no plan (a worker without plan mode?)".to_owned(),
            };
            if many {
                format!("{}: {what}", r.action)
            } else {
                what
            }
        })
        .collect();
    parts.join("; ")
}

/// Whether `action` as a whole only reads (what the simulator's client,
/// which sends whole actions, decides plan mode by): a status, a listing, a
/// read. A raw request is never taken for a read here (its protocol's
/// transport judges the request itself).
pub fn reads_only(action: &crate::Action) -> bool {
    use crate::{Action, EventLogOp, NetworkSourceOp, PowerOp, UserOp};
    match action {
        Action::Power(op) => *op == PowerOp::Status,
        Action::PowerSettle(p) => p.op == PowerOp::Status,
        Action::GetBootDevice
        | Action::Inventory
        | Action::Sensors
        | Action::BiosGet
        | Action::SecureBootGet
        | Action::IdentifyGet
        | Action::PowerReading
        | Action::PowerLimitGet
        | Action::BmcClockGet
        | Action::NtpGet
        | Action::BmcCertGet
        | Action::User(UserOp::List)
        | Action::NetworkSource(NetworkSourceOp::Get)
        | Action::EventLog(EventLogOp::Read { .. }) => true,
        Action::BootDevice(_)
        | Action::User(_)
        | Action::BmcReset(_)
        | Action::NetworkSource(_)
        | Action::Raw(_)
        | Action::VirtualMedia(_)
        | Action::EventLog(_)
        | Action::BiosSet(_)
        | Action::BiosReset
        | Action::SecureBootSet(_)
        | Action::SecureBootResetKeys(_)
        | Action::FirmwareUpdate(_)
        | Action::Identify(_)
        | Action::PowerLimitSet(_)
        | Action::BmcClockSync
        | Action::NtpSet(_)
        | Action::BmcCertReplace(_) => false,
    }
}

/// Whether a JSON object key names a secret (a password, a passphrase, a
/// token, a private key): its value is redacted in a plan.
pub fn secret_key(key: &str) -> bool {
    let k = key.to_ascii_lowercase();
    ["password", "passphrase", "passwd", "secret", "token", "privatekey", "credential"].iter().any(|s| k.contains(s))
}

/// A JSON body as a plan shows it: values of [`secret_key`]s are
/// `[redacted]`, every string that is a URL loses its credentials and query
/// ([`crate::loggable_url`]), long strings are cut.
pub fn redact_json(v: &serde_json::Value) -> serde_json::Value {
    match v {
        serde_json::Value::Object(map) => serde_json::Value::Object(
            map.iter()
                .map(|(k, v)| {
                    let shown = if secret_key(k) && !v.is_null() {
                        serde_json::Value::String(REDACTED.into())
                    } else {
                        redact_json(v)
                    };
                    (k.clone(), shown)
                })
                .collect(),
        ),
        serde_json::Value::Array(items) => serde_json::Value::Array(items.iter().map(redact_json).collect()),
        serde_json::Value::String(s) => serde_json::Value::String(redact_text(s)),
        other => other.clone(),
    }
}

/// A string as a plan shows it: a URL without credentials or query, cut at
/// [`MAX_PLAN_TEXT`].
pub fn redact_text(s: &str) -> String {
    // A PEM private key (a certificate replacement's key) is never shown.
    if s.contains("PRIVATE KEY-----") {
        return REDACTED.into();
    }
    let shown = if s.contains("://") { crate::loggable_url(s) } else { s.to_owned() };
    clip(shown)
}

fn clip(mut s: String) -> String {
    if s.len() > MAX_PLAN_TEXT {
        let mut cut = MAX_PLAN_TEXT;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
        s.push('…');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn bodies_lose_passwords_and_url_credentials() {
        let body = json!({
            "UserName": "ops",
            "Password": "hunter2",
            "Oem": {"Vendor": {"NewPassword": "s3cret", "Token": null}},
            "Image": "https://u:pw@repo.example/x.iso?sig=abc",
            "Targets": ["/redfish/v1/Systems/1"],
        });
        let shown = redact_json(&body);
        let text = shown.to_string();
        for secret in ["hunter2", "s3cret", "pw@", "sig=abc"] {
            assert!(!text.contains(secret), "{secret} in {text}");
        }
        assert_eq!(shown["UserName"], "ops");
        assert_eq!(shown["Password"], REDACTED);
        assert_eq!(shown["Oem"]["Vendor"]["Token"], serde_json::Value::Null, "nothing to hide");
        assert_eq!(shown["Targets"][0], "/redfish/v1/Systems/1");
    }

    #[test]
    fn a_plan_round_trips_and_summarises() {
        let plan = ActionPlan {
            reads: vec![PlannedRequest::Redfish {
                method: "GET".into(),
                path: "/redfish/v1/Systems/1".into(),
                body: None,
            }],
            reads_omitted: 0,
            change: Some(PlannedRequest::Ipmi {
                netfn: 0,
                cmd: 2,
                name: Some("Chassis Control".into()),
                data: "01".into(),
            }),
        };
        let json = serde_json::to_string(&plan).unwrap();
        assert_eq!(serde_json::from_str::<ActionPlan>(&json).unwrap(), plan);
        assert_eq!(plan.summary(), "IPMI netfn 0x00 cmd 0x02 (Chassis Control) data [01]");
        assert_eq!(ActionPlan::default().summary(), "no change");
        let mut raw = plan.change.clone().unwrap();
        raw.without_data();
        assert!(raw.describe().ends_with("data [[redacted]]"), "{}", raw.describe());
    }
}
