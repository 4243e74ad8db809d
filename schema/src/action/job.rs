//! What a worker receives on a job subject ([`Job`]), the secret action
//! parameters the gateway seals into it, and the hex helpers they use.

use super::*;
use crate::secret::Secret;
use serde::{Deserialize, Serialize};

/// What a worker receives on a job subject: the batch as admitted.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Job {
    /// The batch, with its id always set.
    pub batch: Batch,
    pub id: BatchId,
    /// Where the batch goes: the machine's registered target as the gateway
    /// found it, or the ad hoc target. A worker re-reads a machine's target
    /// from its own copy of the registry and never trusts this one for it.
    pub target: BmcTarget,
    /// Unix milliseconds at admission.
    pub admitted_at_ms: u64,
    /// Unix milliseconds after which no further action starts.
    pub deadline_at_ms: u64,
    /// The tenant the batch belongs to (its events go to its subject).
    #[serde(default = "crate::machine::default_tenant")]
    pub tenant: String,
    /// Secrets taken out of the actions by the gateway (new users'
    /// passwords, media URLs with credentials or signed queries, raw
    /// requests' data and bodies), each
    /// sealed to the workers' key and bound to its batch, action and field;
    /// the actions hold a placeholder in their place.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sealed_params: Vec<SealedParam>,
    /// Admitted for an operator (a client of the gateway's own NATS
    /// account), not through a tenant's account. The operator's own
    /// batches (tenant `default`) hold no tenant's share of a worker's
    /// slots; a batch of the `default` account's producers does, like any
    /// tenant's. (A job queued before this field existed reads `false`.)
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub by_operator: bool,
    /// The gateway wrote no `queued` status record for this batch: it is a
    /// machine's batch of a rollout, whose own record holds the machine's
    /// queued state (in flight). The worker creates the status record at
    /// its claim, without reading it first; a record already there (a
    /// redelivery, or the rollout's driver cancelled the batch before any
    /// worker claimed it) is read and handled as for any batch. See
    /// docs/BATCHES.md, "Messages of one rollout machine".
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub record_at_claim: bool,
}

/// One secret action parameter, sealed (see [`Job::sealed_params`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SealedParam {
    /// Index of the action in the batch.
    pub action: u32,
    pub field: ParamField,
    pub sealed: SealedCredentials,
}

/// Which parameter of an action a [`SealedParam`] replaces.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ParamField {
    /// `user.create.password` or `user.update.password`.
    Password,
    /// `virtual_media.insert.url` or `firmware_update.image_uri`.
    Url,
    /// A raw request's data: `raw.ipmi.data` (as hex) or `raw.redfish.body`
    /// (as JSON).
    Raw,
    /// `bmc_cert_replace.private_key_pem`.
    PrivateKey,
}

impl ParamField {
    pub fn as_str(self) -> &'static str {
        match self {
            ParamField::Password => "password",
            ParamField::Url => "url",
            ParamField::Raw => "raw",
            ParamField::PrivateKey => "private_key",
        }
    }
}

/// Lower-case hex of `bytes` (hashes, digests, raw records and data).
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

fn from_hex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len()).step_by(2).map(|i| text.get(i..i + 2).and_then(|h| u8::from_str_radix(h, 16).ok())).collect()
}

impl Action {
    /// The secret parameter this action carries, if any: (field, value).
    /// A media URL counts when it has user info or a query string; a raw
    /// request's data or body always does.
    pub fn secret_param(&self) -> Option<(ParamField, String)> {
        match self {
            Action::Raw(RawRequest::Ipmi(r)) if !r.data.is_empty() => Some((ParamField::Raw, hex(&r.data))),
            Action::Raw(RawRequest::Redfish(RawRedfish { body: Some(body), .. })) => {
                Some((ParamField::Raw, body.to_string()))
            }
            Action::User(UserOp::Create(u)) => Some((ParamField::Password, u.password.expose().to_owned())),
            Action::BmcCertReplace(r) => Some((ParamField::PrivateKey, r.private_key_pem.expose().to_owned())),
            Action::User(UserOp::Update(UserUpdate { password: Some(p), .. })) => {
                Some((ParamField::Password, p.expose().to_owned()))
            }
            Action::VirtualMedia(VirtualMediaOp::Insert { url, .. })
            | Action::FirmwareUpdate(FirmwareUpdate { image_uri: Some(url), .. }) => {
                let u = url::Url::parse(url).ok()?;
                (!u.username().is_empty() || u.password().is_some() || u.query().is_some())
                    .then(|| (ParamField::Url, url.clone()))
            }
            _ => None,
        }
    }

    /// The secret strings of this action, as a BMC might echo them back in
    /// an error: a user's password; a media URL's password, user info,
    /// query string and each query parameter's value (and the whole URL),
    /// each as written in the URL and decoded (a BMC quotes what it
    /// decoded: `p%40ss` is the password `p@ss`; a query value's `+` may be
    /// read as a space). The worker removes them, and their percent-encoded
    /// forms, from every message a BMC sends back before it is logged or stored.
    pub fn secret_values(&self) -> Vec<String> {
        let Some((field, value)) = self.secret_param() else { return vec![] };
        match field {
            ParamField::Password => vec![value],
            // The whole key, and each line of its base64 body (a BMC may
            // quote a line of what it could not parse).
            ParamField::PrivateKey => {
                let mut out = vec![value.clone()];
                out.extend(
                    value
                        .lines()
                        .map(str::trim)
                        .filter(|l| l.len() >= 16 && !l.starts_with("-----"))
                        .map(str::to_owned),
                );
                out
            }
            // Request bytes and JSON, not strings a BMC would echo (and
            // scrubbing short hex runs would mangle its messages).
            ParamField::Raw => vec![],
            ParamField::Url => {
                let mut out = vec![value.clone()];
                let mut add = |s: &str| {
                    for form in [s.to_owned(), crate::secret::percent_decoded(s)] {
                        if !out.contains(&form) {
                            out.push(form);
                        }
                    }
                };
                add(&value);
                if let Ok(u) = url::Url::parse(&value) {
                    add(u.as_str());
                    if let Some(password) = u.password() {
                        add(password);
                        add(&format!("{}:{password}", u.username()));
                    }
                    if !u.username().is_empty() {
                        add(&format!("{}:", u.username()));
                    }
                    if let Some(query) = u.query() {
                        add(query);
                        for pair in query.split('&') {
                            add(pair.split_once('=').map_or(pair, |(_, v)| v));
                        }
                        for (_, v) in u.query_pairs() {
                            add(&v);
                        }
                    }
                }
                out
            }
        }
    }

    /// Put `value` back as the `field` parameter (the worker, after opening it).
    /// `false` when the action has no such parameter.
    pub fn set_secret_param(&mut self, field: ParamField, value: String) -> bool {
        match (self, field) {
            (Action::User(UserOp::Create(u)), ParamField::Password) => u.password = Secret::new(value),
            (Action::User(UserOp::Update(UserUpdate { password: Some(p), .. })), ParamField::Password) => {
                *p = Secret::new(value)
            }
            (Action::BmcCertReplace(r), ParamField::PrivateKey) => r.private_key_pem = Secret::new(value),
            (Action::VirtualMedia(VirtualMediaOp::Insert { url, .. }), ParamField::Url) => *url = value,
            (Action::FirmwareUpdate(FirmwareUpdate { image_uri: Some(u), .. }), ParamField::Url) => *u = value,
            (Action::Raw(RawRequest::Ipmi(r)), ParamField::Raw) => match from_hex(&value) {
                Some(data) => r.data = data,
                None => return false,
            },
            (Action::Raw(RawRequest::Redfish(r)), ParamField::Raw) => match serde_json::from_str(&value) {
                Ok(body) => r.body = Some(body),
                Err(_) => return false,
            },
            _ => return false,
        }
        true
    }

    /// Replace the secret parameter by what logs may show (`[sealed]` for a
    /// password, the URL without credentials and query, nothing of a raw
    /// request's data or body).
    pub fn hide_secret_param(&mut self) {
        let Some((field, value)) = self.secret_param() else { return };
        let shown = match field {
            ParamField::Url => loggable_url(&value),
            ParamField::Password | ParamField::PrivateKey => "[sealed]".into(),
            // Nothing of the request's data stays: the worker puts it back.
            ParamField::Raw => {
                match self {
                    Action::Raw(RawRequest::Ipmi(r)) => r.data.clear(),
                    Action::Raw(RawRequest::Redfish(r)) => r.body = None,
                    _ => {}
                }
                return;
            }
        };
        self.set_secret_param(field, shown);
    }
}

impl Job {
    /// The ordering key: the machine's, or the ad hoc address's.
    pub fn key(&self) -> BmcKey {
        ordering_key(self.batch.machine.as_deref(), &self.target.address)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_certificates_private_key_is_a_secret_parameter() {
        let key = "-----BEGIN PRIVATE KEY-----\nMIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQg\n-----END PRIVATE KEY-----\n";
        let original = Action::BmcCertReplace(BmcCertReplace {
            certificate_pem: "-----BEGIN CERTIFICATE-----\nMAMCAQA=\n-----END CERTIFICATE-----\n".into(),
            private_key_pem: Secret::new(key),
        });
        let (field, value) = original.secret_param().expect("the key is sealed");
        assert_eq!((field, value.as_str()), (ParamField::PrivateKey, key));
        // A BMC quoting a line of the key has it scrubbed too.
        assert!(original.secret_values().iter().any(|v| v == "MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQg"));
        let mut hidden = original.clone();
        hidden.hide_secret_param();
        let shown = format!("{hidden:?} {} {}", hidden.loggable(), serde_json::to_string(&hidden).unwrap());
        assert!(!shown.contains("MIGHAgEA"), "{shown}");
        assert!(hidden.set_secret_param(field, value), "put back");
        assert_eq!(hidden, original);
        assert!(!format!("{original:?}").contains("MIGHAgEA"), "Debug never shows the key");
        assert!(!original.loggable().contains("MIGHAgEA"));
        assert_eq!(crate::plan::redact_text(key), crate::plan::REDACTED);
    }

    #[test]
    fn raw_request_data_is_a_secret_parameter() {
        // What the gateway seals and hides, and the worker puts back whole.
        let ipmi = Action::Raw(RawRequest::Ipmi(RawIpmi { netfn: 0x30, cmd: 1, data: vec![0xde, 0xad, 0x00, 0x0f] }));
        let redfish = Action::Raw(RawRequest::Redfish(RawRedfish {
            method: HttpMethod::Patch,
            path: "/redfish/v1/AccountService/Accounts/3".into(),
            body: Some(serde_json::json!({"Password": "p4ss", "Nested": [1, {"a": null}]})),
        }));
        for original in [ipmi, redfish] {
            let (field, value) = original.secret_param().expect("a secret parameter");
            assert_eq!(field, ParamField::Raw);
            assert!(original.secret_values().is_empty(), "request bytes are not scrubbed from BMC messages");
            let mut hidden = original.clone();
            hidden.hide_secret_param();
            let stored = serde_json::to_string(&hidden).unwrap();
            assert!(!stored.contains("p4ss") && !stored.contains("222") && !stored.contains("dead"), "{stored}");
            assert_eq!(hidden.secret_param(), None, "nothing of it stays");
            assert!(hidden.set_secret_param(field, value), "put back");
            assert_eq!(hidden, original);
        }
        let mut bad = Action::Raw(RawRequest::Ipmi(RawIpmi { netfn: 0x30, cmd: 1, data: vec![] }));
        assert_eq!(bad.secret_param(), None, "no data, nothing to seal");
        assert!(!bad.set_secret_param(ParamField::Raw, "0g".into()), "not hex");
    }
}
