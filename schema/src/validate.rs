//! Admission checks. Everything a gateway refuses is refused here, with a
//! typed code, before anything is stored.

use crate::action::*;
use crate::codec::Encoding;
use crate::error::{ErrorBody, ErrorCode};
use std::time::Duration;

/// What a value of this module refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// A credential name outside [`credential_name`]'s rule.
    CredentialName,
    /// A `--allow-firmware-update` value that does not parse.
    FirmwareUpdatePolicy,
    /// The firmware update policy does not allow the tenant.
    FirmwareUpdateDenied,
}

impl crate::error::Coded for ErrorKind {
    fn code(self) -> ErrorCode {
        match self {
            ErrorKind::CredentialName | ErrorKind::FirmwareUpdatePolicy => ErrorCode::InvalidField,
            ErrorKind::FirmwareUpdateDenied => ErrorCode::FirmwareUpdateDisabled,
        }
    }
}

pub type Error = crate::error::Error<ErrorKind>;

/// The one rule for credential names, wherever one is given (a batch's
/// `{"ref": …}`, `bmcctl cred`): a key the credentials KV bucket can hold.
pub fn credential_name(name: &str) -> Result<(), Error> {
    let ok = !name.is_empty()
        && name.len() <= 128
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_./".contains(&b))
        && !name.starts_with('.')
        && !name.ends_with('.')
        && !name.contains("..");
    if ok {
        Ok(())
    } else {
        Err(Error::new(
            ErrorKind::CredentialName,
            "credential names are 1-128 characters of [A-Za-z0-9-_./], not starting or ending with `.` and without `..`",
        ))
    }
}

/// Configurable bounds on what a batch may ask.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Most actions in one batch (default 64).
    pub max_actions: usize,
    /// Largest encoded submit message in bytes (default 256 KiB).
    pub max_message_bytes: usize,
    /// Largest IPMI raw data (default 255 bytes: one IPMI message).
    pub max_raw_ipmi_bytes: usize,
    /// Largest Redfish raw JSON body when encoded (default 64 KiB).
    pub max_raw_body_bytes: usize,
    /// Deadline applied when the batch has none (default 10 min).
    pub default_deadline: Duration,
    /// Longest deadline a batch may ask for (default 24 h).
    pub max_deadline: Duration,
    /// Whether inline credentials are accepted (default no; a gateway
    /// accepts them only when it can seal them for the workers).
    pub allow_inline_credentials: bool,
    /// The workers' public xkey (`X...`): pre-sealed credentials must be
    /// sealed to it. `None` refuses `sealed` credentials.
    pub sealing_key: Option<String>,
    /// Which raw passthrough requests are allowed.
    pub raw_policy: crate::RawPolicy,
    /// Whether the `sim` protocol is accepted (test deployments only).
    pub allow_sim: bool,
    /// Which addresses a batch may name itself (default: none).
    pub ad_hoc: crate::machine::AdHocPolicy,
    /// Which tenants may update firmware (default: none).
    pub firmware_update: FirmwareUpdatePolicy,
}

/// Which tenants' batches may carry `firmware_update`
/// (`--allow-firmware-update` of the gateway and of the worker): `off`
/// (the default), `all`, or a comma-separated list of tenant names. A bare
/// flag (or `true`/`1` in the environment) means `all`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum FirmwareUpdatePolicy {
    #[default]
    Off,
    All,
    Tenants(std::collections::BTreeSet<String>),
}

impl FirmwareUpdatePolicy {
    /// Parse a flag value.
    pub fn parse(text: &str) -> Result<FirmwareUpdatePolicy, Error> {
        let t = text.trim();
        match t.to_ascii_lowercase().as_str() {
            "off" | "false" | "0" | "no" | "none" => return Ok(FirmwareUpdatePolicy::Off),
            "all" | "true" | "1" | "yes" | "on" => return Ok(FirmwareUpdatePolicy::All),
            _ => {}
        }
        let mut tenants = std::collections::BTreeSet::new();
        for name in t.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            if !crate::machine::valid_name(name) {
                return Err(Error::new(
                    ErrorKind::FirmwareUpdatePolicy,
                    format!(
                        "`{name}` is not a tenant name ({}); give off, all or tenant names",
                        crate::machine::NAME_RULE
                    ),
                ));
            }
            tenants.insert(name.to_owned());
        }
        if tenants.is_empty() {
            return Err(Error::new(
                ErrorKind::FirmwareUpdatePolicy,
                "give off, all or a comma-separated list of tenants",
            ));
        }
        Ok(FirmwareUpdatePolicy::Tenants(tenants))
    }

    /// Whether a batch of `tenant` may update firmware; `Err` says why not.
    pub fn check(&self, tenant: &str) -> Result<(), Error> {
        let denied = |why: String| Err(Error::new(ErrorKind::FirmwareUpdateDenied, why));
        match self {
            FirmwareUpdatePolicy::All => Ok(()),
            FirmwareUpdatePolicy::Tenants(t) if t.contains(tenant) => Ok(()),
            FirmwareUpdatePolicy::Off => {
                denied("firmware updates are off in this deployment (--allow-firmware-update)".into())
            }
            FirmwareUpdatePolicy::Tenants(_) => {
                denied(format!("firmware updates are not allowed for tenant `{tenant}` (--allow-firmware-update)"))
            }
        }
    }

    /// For the start-up log.
    pub fn describe(&self) -> String {
        match self {
            FirmwareUpdatePolicy::Off => "off".into(),
            FirmwareUpdatePolicy::All => "all".into(),
            FirmwareUpdatePolicy::Tenants(t) => t.iter().cloned().collect::<Vec<_>>().join(","),
        }
    }
}

impl std::str::FromStr for FirmwareUpdatePolicy {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        FirmwareUpdatePolicy::parse(s)
    }
}

/// Refuses the batch's firmware updates unless `policy` allows its tenant
/// (the gateway, once the tenant is known; the worker before sending).
pub fn check_firmware_updates(
    batch: &Batch,
    tenant: &str,
    policy: &FirmwareUpdatePolicy,
) -> Result<(), ValidationError> {
    for (i, action) in batch.actions.iter().enumerate() {
        if matches!(action, Action::FirmwareUpdate(_)) {
            policy
                .check(tenant)
                .map_err(|why| ValidationError::new(why.code(), format!("actions[{i}]: {why}; nothing was sent")))?;
        }
    }
    Ok(())
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_actions: 64,
            max_message_bytes: 256 * 1024,
            max_raw_ipmi_bytes: 255,
            max_raw_body_bytes: 64 * 1024,
            default_deadline: Duration::from_secs(600),
            max_deadline: Duration::from_secs(24 * 3600),
            allow_inline_credentials: false,
            sealing_key: None,
            raw_policy: crate::RawPolicy::default(),
            allow_sim: false,
            ad_hoc: crate::machine::AdHocPolicy::default(),
            firmware_update: FirmwareUpdatePolicy::Off,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct ValidationError {
    pub code: ErrorCode,
    pub message: String,
}

impl ValidationError {
    fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ValidationError { code, message: message.into() }
    }
}

impl From<ValidationError> for ErrorBody {
    fn from(e: ValidationError) -> Self {
        ErrorBody::new(e.code, e.message)
    }
}

/// Decode and validate a submitted batch.
pub fn decode_batch(bytes: &[u8], encoding: Encoding, limits: &Limits) -> Result<Batch, ValidationError> {
    if bytes.len() > limits.max_message_bytes {
        return Err(ValidationError::new(
            ErrorCode::TooLarge,
            format!("message is {} bytes; the limit is {}", bytes.len(), limits.max_message_bytes),
        ));
    }
    if bytes.is_empty() {
        return Err(ValidationError::new(ErrorCode::Malformed, "empty message: expected a batch"));
    }
    let mut batch: Batch = encoding.decode(bytes).map_err(|e| {
        let msg = e.to_string();
        // serde names an unparsable address through our AddressError text.
        let code = if msg.contains("invalid BMC address") { ErrorCode::InvalidAddress } else { ErrorCode::Malformed };
        ValidationError::new(code, msg)
    })?;
    canonicalize(&mut batch)?;
    validate(&batch, limits)?;
    Ok(batch)
}

/// Raw Redfish paths in their one canonical spelling: what the raw policy
/// matches is exactly what is stored and sent.
fn canonicalize(batch: &mut Batch) -> Result<(), ValidationError> {
    for (i, action) in batch.actions.iter_mut().enumerate() {
        if let Action::Raw(RawRequest::Redfish(r)) = action {
            r.path = crate::raw_policy::canonical_redfish_path(&r.path)
                // Shown without its query, as logs show it (it may carry a token).
                .map_err(|why| {
                    field(format!(
                        "actions[{i}]: raw Redfish path {:?} is not a plain resource path: {why}",
                        crate::raw_policy::without_query(&r.path)
                    ))
                })?;
        }
    }
    Ok(())
}

fn field(msg: impl Into<String>) -> ValidationError {
    ValidationError::new(ErrorCode::InvalidField, msg)
}

fn non_empty_name(what: &str, index: usize, name: &str) -> Result<(), ValidationError> {
    if name.trim().is_empty() {
        return Err(field(format!("actions[{index}]: {what} needs a non-empty user name")));
    }
    if name.len() > 64 || name.chars().any(|c| c.is_control()) {
        return Err(field(format!("actions[{index}]: user name must be at most 64 printable characters")));
    }
    Ok(())
}

fn forbidden(msg: impl Into<String>) -> ValidationError {
    ValidationError::new(ErrorCode::TargetForbidden, msg)
}

/// An ad hoc target: allowed ranges (literal addresses here; the worker
/// checks again after resolving a name), the producer's own credentials
/// only, and no weakening of TLS verification.
fn ad_hoc(target: &BmcTarget, limits: &Limits) -> Result<(), ValidationError> {
    if limits.ad_hoc.is_off() {
        return Err(forbidden(
            "ad hoc targets are off in this deployment: name a registered machine ({\"machine\": \"NAME\"})",
        ));
    }
    if let Some(ip) = target.address.ip() {
        limits.ad_hoc.check(ip).map_err(|why| ValidationError::new(why.code(), format!("bmc.address: {why}")))?;
    }
    if let Some(why) = crate::machine::ad_hoc_refusal(target) {
        return Err(forbidden(why));
    }
    match &target.credentials {
        // Already refused by `ad_hoc_refusal`; kept closed here too.
        Credentials::Ref(_) => {
            return Err(forbidden("bmc.credentials.ref: a named credential needs a registered machine"))
        }
        Credentials::Inline { username, .. } => {
            if !limits.allow_inline_credentials {
                return Err(ValidationError::new(
                    ErrorCode::InlineCredentialsDisabled,
                    "this deployment accepts no inline credentials: name a registered machine",
                ));
            }
            if username.is_empty() {
                return Err(field("bmc.credentials.inline.username is empty"));
            }
        }
        Credentials::Sealed(s) => {
            let Some(key) = &limits.sealing_key else {
                return Err(ValidationError::new(
                    ErrorCode::InlineCredentialsDisabled,
                    "this deployment accepts no sealed credentials: name a registered machine",
                ));
            };
            if &s.key != key {
                return Err(field(format!("bmc.credentials.sealed.key must be the workers' public key {key}")));
            }
            if s.username.is_empty() {
                return Err(field("bmc.credentials.sealed.username is empty"));
            }
            if s.sealed.is_empty() || s.sealed.len() > 4096 || !s.sender.starts_with('X') || s.sender.len() != 56 {
                return Err(field(
                    "bmc.credentials.sealed needs a sender public key (X...) and a sealed box of at most 4 KiB",
                ));
            }
        }
    }
    check_target(target, limits)
}

/// Checks of a target wherever it came from (ad hoc, or a machine record).
pub fn check_target(target: &BmcTarget, limits: &Limits) -> Result<(), ValidationError> {
    if target.protocol == Protocol::Sim && !limits.allow_sim {
        return Err(field("protocol `sim` is for test deployments and is disabled here"));
    }
    if let Some(sys) = &target.system_id {
        if sys.is_empty() || sys.len() > 128 || sys.contains('/') {
            return Err(field("bmc.system_id must be 1-128 characters without `/`"));
        }
    }
    Ok(())
}

/// Check a decoded batch against the limits.
pub fn validate(batch: &Batch, limits: &Limits) -> Result<(), ValidationError> {
    if batch.actions.is_empty() {
        return Err(ValidationError::new(ErrorCode::EmptyBatch, "the batch has no actions"));
    }
    if batch.actions.len() > limits.max_actions {
        return Err(ValidationError::new(
            ErrorCode::TooManyActions,
            format!("the batch has {} actions; the limit is {}", batch.actions.len(), limits.max_actions),
        ));
    }
    match (&batch.machine, &batch.bmc) {
        (Some(name), None) => {
            if !crate::machine::valid_name(name) {
                return Err(field(format!("machine: names are {}", crate::machine::NAME_RULE)));
            }
        }
        (None, Some(target)) => ad_hoc(target, limits)?,
        _ => return Err(field("give exactly one of `machine` (a registered machine) and `bmc` (an ad hoc target)")),
    }
    if let Some(d) = batch.deadline {
        if d.is_zero() || d > limits.max_deadline {
            return Err(field(format!(
                "deadline must be between 1ms and {}",
                crate::duration::format(limits.max_deadline)
            )));
        }
    }
    for (i, action) in batch.actions.iter().enumerate() {
        match action {
            Action::User(UserOp::Create(spec)) => {
                non_empty_name("user create", i, &spec.name)?;
                if spec.password.is_empty() {
                    return Err(field(format!("actions[{i}]: user create needs a password")));
                }
            }
            Action::User(UserOp::Update(u)) => {
                non_empty_name("user update", i, &u.name)?;
                if u.password.is_none() && u.role.is_none() && u.enabled.is_none() {
                    return Err(field(format!(
                        "actions[{i}]: user update changes nothing (give password, role or enabled)"
                    )));
                }
            }
            Action::User(UserOp::Delete { name }) => non_empty_name("user delete", i, name)?,
            Action::BootDevice(req) if matches!(req.device, BootDevice::None | BootDevice::Other) => {
                let name = if req.device == BootDevice::None { "none" } else { "other" };
                return Err(field(format!("actions[{i}]: boot device `{name}` can only be read, not set")));
            }
            Action::Raw(RawRequest::Ipmi(r)) => {
                if r.data.len() > limits.max_raw_ipmi_bytes {
                    return Err(field(format!(
                        "actions[{i}]: raw IPMI data is {} bytes; the limit is {}",
                        r.data.len(),
                        limits.max_raw_ipmi_bytes
                    )));
                }
                if r.netfn > 0x3f || r.netfn % 2 == 1 {
                    return Err(field(format!(
                        "actions[{i}]: raw IPMI netfn must be an even request netfn (0x00-0x3E)"
                    )));
                }
            }
            Action::Raw(RawRequest::Redfish(r)) => {
                if !(r.path == "/redfish/v1" || r.path.starts_with("/redfish/v1/")) || r.path.contains("..") {
                    return Err(field(format!("actions[{i}]: raw Redfish path must be under /redfish/v1")));
                }
                if let Some(body) = &r.body {
                    let json = serde_json::to_vec(body).unwrap_or_default();
                    let n = if json.is_empty() { usize::MAX } else { json.len() };
                    if n > limits.max_raw_body_bytes {
                        return Err(field(format!(
                            "actions[{i}]: raw Redfish body is {n} bytes; the limit is {}",
                            limits.max_raw_body_bytes
                        )));
                    }
                    // The body travels sealed as JSON text, which the worker
                    // reads back (at most 128 levels deep, as a JSON submit).
                    if serde_json::from_slice::<serde_json::Value>(&json).is_err() {
                        return Err(field(format!(
                            "actions[{i}]: raw Redfish body is nested more than 128 levels deep"
                        )));
                    }
                }
            }
            Action::VirtualMedia(VirtualMediaOp::Insert { url, .. }) => {
                // What the BMC is told to fetch, as an image_uri is: bounded,
                // one token (nothing a BMC or a log could split), a host.
                if url.len() > crate::action::MAX_IMAGE_URI || url.chars().any(|c| c.is_control() || c.is_whitespace())
                {
                    return Err(field(format!(
                        "actions[{i}]: virtual media url: at most {} characters, no spaces or control characters",
                        crate::action::MAX_IMAGE_URI
                    )));
                }
                let u = url::Url::parse(url).map_err(|e| field(format!("actions[{i}]: virtual media url: {e}")))?;
                if !matches!(u.scheme(), "http" | "https" | "nfs" | "cifs" | "smb") {
                    return Err(field(format!(
                        "actions[{i}]: virtual media url scheme must be http, https, nfs, cifs or smb"
                    )));
                }
                if u.host_str().is_none_or(str::is_empty) {
                    return Err(field(format!("actions[{i}]: virtual media url names no host")));
                }
            }
            Action::PowerSettle(p) => p.validate().map_err(|why| field(format!("actions[{i}]: {why}")))?,
            Action::FirmwareUpdate(u) => u.validate().map_err(|why| field(format!("actions[{i}]: {why}")))?,
            Action::Identify(set) => set.validate().map_err(|why| field(format!("actions[{i}]: {why}")))?,
            Action::PowerLimitSet(set) => set.validate().map_err(|why| field(format!("actions[{i}]: {why}")))?,
            Action::NtpSet(set) => set.validate().map_err(|why| field(format!("actions[{i}]: {why}")))?,
            Action::BmcCertReplace(r) => r.validate().map_err(|why| field(format!("actions[{i}]: {why}")))?,
            Action::EventLog(EventLogOp::Read { limit: Some(l), .. }) if *l == 0 || *l > EventLogOp::MAX_LIMIT => {
                return Err(field(format!(
                    "actions[{i}]: event_log read limit must be 1 to {}",
                    EventLogOp::MAX_LIMIT
                )));
            }
            Action::EventLog(op) => {
                op.check_log_ids().map_err(|why| field(format!("actions[{i}]: event_log: {why}")))?
            }
            Action::BiosSet(b) => {
                if b.attributes.is_empty() {
                    return Err(field(format!("actions[{i}]: bios_set changes nothing (give attributes)")));
                }
                for (name, value) in &b.attributes {
                    if name.is_empty() || name.to_ascii_lowercase().contains("password") {
                        return Err(field(format!("actions[{i}]: bios_set: `{name}` is not accepted (BIOS passwords are not set through bios_set)")));
                    }
                    if !(value.is_string() || value.is_number() || value.is_boolean()) {
                        return Err(field(format!(
                            "actions[{i}]: bios_set: `{name}` must be a string, number or boolean"
                        )));
                    }
                }
            }
            Action::NetworkSource(NetworkSourceOp::Static(s)) => {
                let m = u32::from(s.netmask);
                if m.leading_ones() + m.trailing_zeros() != 32 {
                    return Err(field(format!("actions[{i}]: netmask {} is not contiguous", s.netmask)));
                }
            }
            _ => {}
        }
        if let Action::Raw(raw) = action {
            limits
                .raw_policy
                .check(raw.into())
                .map_err(|why| ValidationError::new(why.code(), format!("actions[{i}]: {why}")))?;
        }
        if action.is_destructive() {
            limits
                .raw_policy
                .check(action.into())
                .map_err(|why| ValidationError::new(why.code(), format!("actions[{i}]: {why}")))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn firmware_updates_are_checked_and_allowed_per_tenant() {
        let parse = |json: &str| serde_json::from_str::<Action>(json).unwrap();
        let ok = parse(
            r#"{"firmware_update": {"image_uri": "https://repo.example/bios.bin", "targets": ["/redfish/v1/UpdateService/FirmwareInventory/BIOS"], "transfer_protocol": "https", "apply_time": "on_reset"}}"#,
        );
        let Action::FirmwareUpdate(u) = &ok else { panic!("{ok:?}") };
        assert!(u.validate().is_ok());
        assert!(!ok.is_idempotent() && ok.watches_task() && !ok.is_destructive());
        for (uri, targets) in [
            ("file:///etc/passwd", vec![]),
            ("https://repo.example/a b.bin", vec![]),
            ("not a url", vec![]),
            ("https://repo.example/x.bin", vec!["/redfish/v1/../x".to_owned()]),
            ("https://repo.example/x.bin", vec!["/other".to_owned()]),
            ("https://repo.example/x.bin", vec!["/redfish/v1/UpdateService?x=1".to_owned()]),
        ] {
            let u = FirmwareUpdate { image_uri: Some(uri.into()), targets, ..FirmwareUpdate::default() };
            assert!(u.validate().is_err(), "{u:?}");
        }
        // A pushed image is a plain file name of the worker's image directory.
        let push = |name: &str| FirmwareUpdate { image_file: Some(name.into()), ..FirmwareUpdate::default() };
        for good in ["bios-2.1.bin", "BMC_fw+2.4~rc1.bin", "a", &"x".repeat(255)] {
            assert!(push(good).validate().is_ok(), "{good}");
        }
        for bad in [
            "",
            "../etc/passwd",
            "..",
            ".",
            ".hidden",
            "a/b",
            "a\\b",
            "a\0b",
            "a\nb",
            "a b",
            "bios\u{202e}.bin",
            "é.bin",
            &"x".repeat(256),
            "/etc/passwd",
        ] {
            let e = push(bad).validate().unwrap_err();
            assert!(e.contains("image_file"), "{bad:?}: {e}");
        }
        let sha = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";
        assert!(FirmwareUpdate { sha256: Some(sha.to_uppercase()), ..push("x.bin") }.validate().is_ok());
        for (u, says) in [
            (FirmwareUpdate { sha256: Some("abc".into()), ..push("x.bin") }, "64 hexadecimal"),
            (
                FirmwareUpdate { image_uri: Some("https://repo.example/x.bin".into()), ..push("x.bin") },
                "exclude each other",
            ),
            (
                FirmwareUpdate { transfer_protocol: Some(TransferProtocol::Https), ..push("x.bin") },
                "only with image_uri",
            ),
            (
                FirmwareUpdate {
                    image_uri: Some("https://repo.example/x.bin".into()),
                    sha256: Some(sha.into()),
                    ..FirmwareUpdate::default()
                },
                "only with image_file",
            ),
            (FirmwareUpdate::default(), "needs image_uri"),
        ] {
            assert!(u.validate().unwrap_err().contains(says), "{u:?}");
        }
        let pushed = Action::FirmwareUpdate(FirmwareUpdate { sha256: Some(sha.into()), ..push("bios-2.1.bin") });
        assert!(pushed.loggable().contains("push file=bios-2.1.bin sha256=9f86"), "{}", pushed.loggable());
        assert!(pushed.secret_param().is_none());
        // A URI with credentials is a secret parameter, hidden in logs.
        let secret = Action::FirmwareUpdate(FirmwareUpdate {
            image_uri: Some("https://u:pw@repo.example/x.bin?sig=S1G".into()),
            ..FirmwareUpdate::default()
        });
        assert_eq!(secret.secret_param().map(|p| p.0), Some(ParamField::Url));
        assert!(!secret.loggable().contains("S1G") && !secret.loggable().contains("pw@"), "{}", secret.loggable());
        let batch = Batch {
            plan: false,
            events: Default::default(),
            id: None,
            machine: Some("m".into()),
            bmc: None,
            actions: vec![Action::Inventory, ok],
            on_error: OnError::Stop,
            deadline: None,
        };
        let off = check_firmware_updates(&batch, "t1", &FirmwareUpdatePolicy::default()).unwrap_err();
        assert_eq!(off.code, ErrorCode::FirmwareUpdateDisabled);
        assert!(off.message.starts_with("actions[1]: firmware updates are off"), "{}", off.message);
        let some = FirmwareUpdatePolicy::parse("t1, t2").unwrap();
        assert!(check_firmware_updates(&batch, "t1", &some).is_ok());
        assert_eq!(check_firmware_updates(&batch, "t3", &some).unwrap_err().code, ErrorCode::FirmwareUpdateDisabled);
        assert!(check_firmware_updates(&batch, "t3", &FirmwareUpdatePolicy::parse("true").unwrap()).is_ok());
        assert_eq!(FirmwareUpdatePolicy::parse("off").unwrap(), FirmwareUpdatePolicy::Off);
        assert_eq!(FirmwareUpdatePolicy::parse("Bad_Tenant").unwrap_err().kind(), ErrorKind::FirmwareUpdatePolicy);
        assert_eq!(some.check("t3").unwrap_err().kind(), ErrorKind::FirmwareUpdateDenied);
        let plain = Batch { actions: vec![Action::Inventory], ..batch };
        assert!(
            check_firmware_updates(&plain, "t3", &FirmwareUpdatePolicy::Off).is_ok(),
            "other actions need no permission"
        );
    }

    #[test]
    fn power_settle_is_checked_at_admission() {
        let parse = |json: &str| serde_json::from_str::<Action>(json).unwrap();
        let ok = parse(r#"{"power_settle": {"op": "soft_off", "settle": "5m", "escalate_after": "2m"}}"#);
        let Action::PowerSettle(p) = &ok else { panic!("{ok:?}") };
        assert_eq!(
            (p.settle, p.escalate_after),
            (Some(std::time::Duration::from_secs(300)), Some(std::time::Duration::from_secs(120)))
        );
        assert!(p.validate().is_ok());
        assert_eq!(ok.kind(), "power_soft_off", "the same action name as a plain soft off");
        for (json, says) in [
            (r#"{"power_settle": {"op": "status"}}"#, "changes no power state"),
            (r#"{"power_settle": {"op": "on", "escalate_after": "1m"}}"#, "only with op soft_off"),
            (r#"{"power_settle": {"op": "on", "settle": "2h"}}"#, "at most 1h"),
            (r#"{"power_settle": {"op": "on", "settle": "0s"}}"#, "more than 0s"),
        ] {
            let Action::PowerSettle(p) = parse(json) else { panic!() };
            assert!(p.validate().unwrap_err().contains(says), "{json}");
        }
        assert!(
            serde_json::from_str::<Action>(r#"{"power_settle": {"op": "on", "settle": "5"}}"#).is_err(),
            "durations need a unit"
        );
        assert!(
            serde_json::from_str::<Action>(r#"{"power_settle": {"op": "on", "wait": "5s"}}"#).is_err(),
            "unknown fields"
        );
    }

    #[test]
    fn read_only_boot_devices_cannot_be_set() {
        for device in ["none", "other"] {
            let json = format!(r#"{{"machine":"m1","actions":[{{"boot_device":{{"device":"{device}"}}}}]}}"#);
            let batch: crate::Batch = serde_json::from_str(&json).unwrap();
            let e = validate(&batch, &Limits::default()).unwrap_err();
            assert!(e.to_string().contains(&format!("`{device}` can only be read")), "{e}");
        }
    }

    fn json(s: &str) -> Result<Batch, ValidationError> {
        decode_batch(s.as_bytes(), Encoding::Json, &Limits::default())
    }

    fn code(s: &str) -> ErrorCode {
        json(s).unwrap_err().code
    }

    const OK: &str = r#"{"machine":"m1","actions":["inventory"]}"#;

    /// A deployment that allows ad hoc targets in 10.0.0.0/8.
    fn ad_hoc_limits() -> Limits {
        Limits {
            ad_hoc: crate::machine::AdHocPolicy::parse("10.0.0.0/8").unwrap(),
            allow_inline_credentials: true,
            ..Limits::default()
        }
    }

    const INLINE: &str = r#"{"inline":{"username":"a","password":"p"}}"#;

    fn ad_hoc(target: &str) -> Result<Batch, ValidationError> {
        let s = format!(r#"{{"bmc":{target},"actions":["inventory"]}}"#);
        decode_batch(s.as_bytes(), Encoding::Json, &ad_hoc_limits())
    }

    #[test]
    fn accepts_a_valid_batch() {
        json(OK).unwrap();
    }

    #[test]
    fn one_rule_for_credential_names() {
        for ok in ["rack12-bmc", "site/fra1/r12", "a", "A_b.c-d", &"x".repeat(128)] {
            credential_name(ok).unwrap_or_else(|e| panic!("{ok}: {e}"));
        }
        for bad in ["", ".hidden", "trailing.", "a..b", "sp ace", "star*", &"x".repeat(129)] {
            assert!(credential_name(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn typed_errors() {
        assert_eq!(code(r#"{"machine":"m1","actions":[]}"#), ErrorCode::EmptyBatch);
        assert_eq!(
            code(r#"{"bmc":{"address":"10.0.0.300","credentials":{"ref":"r"}},"actions":["inventory"]}"#),
            ErrorCode::InvalidAddress
        );
        assert_eq!(code(r#"{"machine":"Rack 12","actions":["inventory"]}"#), ErrorCode::InvalidField);
        assert_eq!(code(r#"{"actions":["inventory"]}"#), ErrorCode::InvalidField);
        assert_eq!(code(r#"{"machine":"m1","actions":["inventory"],"x":1}"#), ErrorCode::Malformed);
        assert_eq!(code("{not json"), ErrorCode::Malformed);
        assert_eq!(code(""), ErrorCode::Malformed);
        assert_eq!(
            code(r#"{"machine":"m1","actions":[{"user":{"update":{"name":"","enabled":true}}}]}"#),
            ErrorCode::InvalidField
        );
        assert_eq!(code(r#"{"machine":"m1","actions":[{"user":{"update":{"enabled":true}}}]}"#), ErrorCode::Malformed);
        assert_eq!(
            code(r#"{"machine":"m1","actions":[{"raw":{"redfish":{"method":"GET","path":"/etc/passwd"}}}]}"#),
            ErrorCode::InvalidField
        );
        assert_eq!(code(r#"{"machine":"m1","actions":["inventory"],"deadline":"30"}"#), ErrorCode::Malformed);
        assert_eq!(
            ad_hoc(&format!(r#"{{"address":"10.0.0.1","protocol":"sim","credentials":{INLINE}}}"#)).unwrap_err().code,
            ErrorCode::InvalidField
        );
    }

    #[test]
    fn too_many_actions_and_too_large() {
        let actions = vec!["\"inventory\""; 65].join(",");
        let s = format!(r#"{{"machine":"m1","actions":[{actions}]}}"#);
        assert_eq!(code(&s), ErrorCode::TooManyActions);
        let limits = Limits { max_message_bytes: 10, ..Limits::default() };
        assert_eq!(decode_batch(OK.as_bytes(), Encoding::Json, &limits).unwrap_err().code, ErrorCode::TooLarge);
    }

    #[test]
    fn a_refused_raw_path_never_echoes_its_query() {
        // Logs show raw Redfish paths without their query (it may carry a
        // token); a refusal is logged by the gateway too.
        for path in ["/redfish/v1/Systems/../x?access_token=T0KEN", "/etc/passwd?access_token=T0KEN"] {
            let s =
                format!(r#"{{"machine":"m1","actions":[{{"raw":{{"redfish":{{"method":"GET","path":"{path}"}}}}}}]}}"#);
            let e = json(&s).unwrap_err();
            assert_eq!(e.code, ErrorCode::InvalidField, "{e}");
            assert!(
                !e.message.contains("T0KEN")
                    && e.message.contains("/redfish/v1/Systems/../x") == path.starts_with("/redfish"),
                "{e}"
            );
        }
        let t = FirmwareUpdate {
            image_uri: Some("https://repo.example/x.bin".into()),
            targets: vec!["/redfish/v1/../x?access_token=T0KEN".into()],
            ..FirmwareUpdate::default()
        };
        let e = t.validate().unwrap_err();
        assert!(!e.contains("T0KEN") && e.contains("firmware_update.targets"), "{e}");
    }

    #[test]
    fn deeply_nested_messagepack_is_refused_not_a_crash() {
        // A raw Redfish body (any JSON value) nested 1,000 arrays deep, in
        // MessagePack (JSON stops at 128 levels): 1 KiB that must not
        // overflow the stack of the gateway thread decoding it.
        let batch = |depth: usize| {
            let mut m = vec![0x82];
            let s = |m: &mut Vec<u8>, t: &str| {
                m.push(0xa0 | t.len() as u8);
                m.extend_from_slice(t.as_bytes());
            };
            s(&mut m, "machine");
            s(&mut m, "m1");
            s(&mut m, "actions");
            m.extend([0x91, 0x81]);
            s(&mut m, "raw");
            m.push(0x81);
            s(&mut m, "redfish");
            m.push(0x83);
            for t in ["method", "PATCH", "path", "/redfish/v1/Systems/1", "body"] {
                s(&mut m, t);
            }
            m.extend(std::iter::repeat_n(0x91, depth));
            m.push(0xc0);
            m
        };
        let decode = |m: Vec<u8>| {
            std::thread::Builder::new()
                .stack_size(2 << 20) // a tokio worker thread's
                .spawn(move || decode_batch(&m, Encoding::MessagePack, &Limits::default()).map(|_| ()))
                .unwrap()
                .join()
                .unwrap()
        };
        assert_eq!(decode(batch(1000)).unwrap_err().code, ErrorCode::Malformed);
        decode(batch(120)).expect("as deep as JSON allows");
        // Decodable, but deeper than the JSON the body is sealed as can be read back.
        assert_eq!(decode(batch(200)).unwrap_err().code, ErrorCode::InvalidField);
    }

    #[test]
    fn ad_hoc_targets_are_off_by_default_and_bounded_when_on() {
        let s = format!(r#"{{"bmc":{{"address":"10.0.0.1","credentials":{INLINE}}},"actions":["inventory"]}}"#);
        let e =
            decode_batch(s.as_bytes(), Encoding::Json, &Limits { allow_inline_credentials: true, ..Limits::default() })
                .unwrap_err();
        assert_eq!(e.code, ErrorCode::TargetForbidden, "{e}");
        ad_hoc(&format!(r#"{{"address":"10.0.0.1","credentials":{INLINE}}}"#)).unwrap();
        // Hostnames pass here; the worker checks what they resolve to.
        ad_hoc(&format!(r#"{{"address":"bmc1.example","credentials":{INLINE}}}"#)).unwrap();
        for (target, says) in [
            (r#"{"address":"10.0.0.1","credentials":{"ref":"rack12"}}"#.to_owned(), "named credential"),
            (format!(r#"{{"address":"192.168.1.1","credentials":{INLINE}}}"#), "outside"),
            (format!(r#"{{"address":"127.0.0.1","credentials":{INLINE}}}"#), "outside"),
            (format!(r#"{{"address":"[::ffff:127.0.0.1]:443","credentials":{INLINE}}}"#), "outside"),
            (format!(r#"{{"address":"10.0.0.1","credentials":{INLINE},"tls":{{"insecure":true}}}}"#), "bmc.tls"),
            (format!(r#"{{"address":"10.0.0.1","credentials":{INLINE},"tls":{{"ca_pem":"x"}}}}"#), "bmc.tls"),
            (
                format!(
                    r#"{{"address":"10.0.0.1","credentials":{INLINE},"tls":{{"pin_sha256":"{}"}}}}"#,
                    "ab".repeat(32)
                ),
                "bmc.tls",
            ),
        ] {
            let e = ad_hoc(&target).unwrap_err();
            assert_eq!(e.code, ErrorCode::TargetForbidden, "{target}: {e}");
            assert!(e.message.contains(says), "{target}: {e}");
        }
        let both = r#"{"machine":"m1","bmc":{"address":"10.0.0.1","credentials":{"ref":"r"}},"actions":["inventory"]}"#;
        assert_eq!(code(both), ErrorCode::InvalidField);
    }

    #[test]
    fn inline_credentials_are_refused_by_default() {
        let s = format!(r#"{{"bmc":{{"address":"10.0.0.1","credentials":{INLINE}}},"actions":["inventory"]}}"#);
        let limits = Limits { allow_inline_credentials: false, ..ad_hoc_limits() };
        assert_eq!(
            decode_batch(s.as_bytes(), Encoding::Json, &limits).unwrap_err().code,
            ErrorCode::InlineCredentialsDisabled
        );
        decode_batch(s.as_bytes(), Encoding::Json, &ad_hoc_limits()).unwrap();
    }

    #[test]
    fn sealed_credentials_must_be_sealed_to_the_workers_key() {
        let key = format!("X{}", "A".repeat(55));
        let other = format!("X{}", "B".repeat(55));
        let s = |k: &str| {
            format!(
                r#"{{"bmc":{{"address":"10.0.0.1","credentials":{{"sealed":{{"username":"a","key":"{k}","sender":"{other}","sealed":"eGt2MQ=="}}}}}},"actions":["inventory"]}}"#
            )
        };
        let refusing = ad_hoc_limits();
        assert_eq!(
            decode_batch(s(&key).as_bytes(), Encoding::Json, &refusing).unwrap_err().code,
            ErrorCode::InlineCredentialsDisabled
        );
        let limits = Limits { sealing_key: Some(key.clone()), ..ad_hoc_limits() };
        decode_batch(s(&key).as_bytes(), Encoding::Json, &limits).unwrap();
        let e = decode_batch(s(&other).as_bytes(), Encoding::Json, &limits).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidField);
        assert!(e.message.contains(&key), "{e}");
    }

    #[test]
    fn a_virtual_media_url_is_one_bounded_token_naming_a_host() {
        let insert = |url: &str| {
            format!(
                r#"{{"machine":"m1","actions":[{{"virtual_media":{{"insert":{{"url":{},"media":"cd"}}}}}}]}}"#,
                serde_json::json!(url)
            )
        };
        json(&insert("https://img.example/boot.iso")).unwrap();
        json(&insert("nfs://10.0.0.9/export/boot.iso")).unwrap();
        let long = format!("https://img.example/{}.iso", "a".repeat(2100));
        for bad in [
            "https://img.example/a b.iso",
            "https://img.example/a\nInjected: 1",
            "https://img.example/\u{7}.iso",
            long.as_str(),
            "nfs:///export/boot.iso",
            "ftp://img.example/x.iso",
        ] {
            assert_eq!(code(&insert(bad)), ErrorCode::InvalidField, "{bad:?}");
        }
    }

    #[test]
    fn raw_policy_is_enforced_at_admission() {
        let ipmi = |netfn: u8| {
            format!(r#"{{"machine":"m1","actions":["inventory",{{"raw":{{"ipmi":{{"netfn":{netfn},"cmd":1}}}}}}]}}"#)
        };
        json(&ipmi(6)).unwrap();
        let e = json(&ipmi(8)).unwrap_err();
        assert_eq!(e.code, ErrorCode::RawNotAllowed);
        assert!(e.message.starts_with("actions[1]") && e.message.contains("deny ipmi:netfn=0x08-0x09"), "{e}");
        let limits = Limits { raw_policy: crate::RawPolicy::off(), ..Limits::default() };
        assert_eq!(
            decode_batch(ipmi(6).as_bytes(), Encoding::Json, &limits).unwrap_err().code,
            ErrorCode::RawNotAllowed
        );
        let upd = r#"{"machine":"m1","actions":[{"raw":{"redfish":{"method":"POST","path":"/redfish/v1/UpdateService/Actions/UpdateService.SimpleUpdate","body":{}}}}]}"#;
        assert_eq!(code(upd), ErrorCode::RawNotAllowed);
        // A destructive action the default denies is denied spelled as a raw request too.
        let clear_sel =
            r#"{"machine":"m1","actions":[{"raw":{"ipmi":{"netfn":10,"cmd":71,"data":[0,0,67,76,82,170]}}}]}"#;
        assert_eq!(code(clear_sel), ErrorCode::RawNotAllowed);
        let clear_log = r#"{"machine":"m1","actions":[{"raw":{"redfish":{"method":"POST","path":"/redfish/v1/Systems/1/LogServices/SEL/Actions/LogService.ClearLog","body":{}}}}]}"#;
        assert_eq!(code(clear_log), ErrorCode::RawNotAllowed);
    }

    #[test]
    fn destructive_actions_and_bios_sets_at_admission() {
        let batch = |action: &str| format!(r#"{{"machine":"m1","actions":[{action}]}}"#);
        for a in [
            r#"{"event_log":"clear"}"#,
            r#"{"event_log":{"clear":{"log_ids":["EventLog"]}}}"#,
            r#""bios_reset""#,
            r#"{"secure_boot_reset_keys":"delete_pk"}"#,
        ] {
            let e = json(&batch(a)).unwrap_err();
            assert_eq!(e.code, ErrorCode::RawNotAllowed, "{a}");
            assert!(e.message.contains("deny action:*"), "{e}");
        }
        let limits = Limits {
            raw_policy: crate::RawPolicy::parse("allow action:event_log_clear; default").unwrap(),
            ..Limits::default()
        };
        decode_batch(batch(r#"{"event_log":"clear"}"#).as_bytes(), Encoding::Json, &limits).unwrap();
        decode_batch(batch(r#"{"event_log":{"clear":{"log_ids":["EventLog"]}}}"#).as_bytes(), Encoding::Json, &limits)
            .unwrap();
        for bad in [
            r#"{"event_log":{"clear":{"log_ids":[""]}}}"#,
            r#"{"event_log":{"clear":{"log_ids":["a","a"]}}}"#,
            r#"{"event_log":{"read":{"logs":"all","log_ids":["EventLog"]}}}"#,
        ] {
            let e = decode_batch(batch(bad).as_bytes(), Encoding::Json, &limits).unwrap_err();
            assert_eq!(e.code, ErrorCode::InvalidField, "{bad}: {e}");
        }
        assert_eq!(
            decode_batch(batch(r#""bios_reset""#).as_bytes(), Encoding::Json, &limits).unwrap_err().code,
            ErrorCode::RawNotAllowed
        );
        json(&batch(r#"{"event_log":{"read":{"limit":10}}}"#)).unwrap();
        assert_eq!(code(&batch(r#"{"event_log":{"read":{"limit":0}}}"#)), ErrorCode::InvalidField);
        assert_eq!(code(&batch(r#"{"event_log":{"read":{"limit":1001}}}"#)), ErrorCode::InvalidField);

        json(&batch(r#"{"bios_set":{"attributes":{"BootMode":"Uefi","Cores":4}}}"#)).unwrap();
        for bad in [
            r#"{"bios_set":{"attributes":{}}}"#,
            r#"{"bios_set":{"attributes":{"AdminPassword":"x"}}}"#,
            r#"{"bios_set":{"attributes":{"A":[1]}}}"#,
        ] {
            assert_eq!(code(&batch(bad)), ErrorCode::InvalidField, "{bad}");
        }
    }
}
