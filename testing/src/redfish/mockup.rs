//! [`MockupServer`]: Redfish mockups served over HTTPS, with state.
//!
//! Resources are JSON objects keyed by their `@odata.id`: loaded from a
//! vendor mockup directory (every `*.json` carrying an `@odata.id`), from
//! single files, or built in the test from the specification. The server
//! then behaves like a small BMC:
//!
//! - **auth**: the service root is open; everything else needs HTTP Basic
//!   or an `X-Auth-Token` from the emulated SessionService (POST
//!   `/redfish/v1/SessionService/Sessions`, DELETE the session to log out);
//! - **GET** returns the resource (with an `ETag` header when it has an
//!   `@odata.etag`);
//! - **PATCH** checks `If-Match` against the ETag (`412` on mismatch, `428`
//!   when required and missing), checks values against sibling
//!   `@Redfish.AllowableValues` (`400`), refuses properties marked read-only
//!   ([`MockupBuilder::read_only`]) with the vendor's own `400` body,
//!   merges, bumps the ETag;
//! - **POST** to an action `target` checks parameters against the action's
//!   allowable values and applies `ComputerSystem.Reset` (PowerState, and
//!   what waits in the system's `@Redfish.Settings` object),
//!   `LogService.ClearLog` (empties the Entries), `VirtualMedia.InsertMedia`/`EjectMedia` (and HPE iLO's OEM equivalents); POST to a collection creates
//!   a member (`201` + `Location`); **DELETE** removes a member;
//! - passwords sent in PATCH/POST are never stored in resources;
//! - **UpdateService** ([`MockupBuilder::update_service`]): `SimpleUpdate`
//!   starts an update that runs as a Task in the TaskService for a set
//!   time, its `PercentComplete` growing with the time passed, ending
//!   `Completed` or (configured) `Exception` part way; its Task Monitor
//!   answers `202` while it runs; with [`MockupBuilder::multipart_push`]
//!   the UpdateService also advertises `MultipartHttpPushUri`
//!   ([`MULTIPART_PUSH`]), which takes a `multipart/form-data` POST (parts
//!   `UpdateParameters`, JSON, and `UpdateFile`), records what it received
//!   ([`PushReceived`]: bytes, SHA-256, file name, `Targets`, apply time)
//!   and runs it as an update task like SimpleUpdate;
//! - **CertificateService** ([`MockupBuilder::certificate_service`]), after
//!   DSP0266 and bmcweb: the service root links it, the Manager's
//!   `NetworkProtocol` links `HTTPS.Certificates` with the certificate the
//!   server presents (`CertificateString`), and, when asked for,
//!   `CertificateService.ReplaceCertificate` (with its ActionInfo, every
//!   parameter required, `CertificateType` PEM) takes the private key and
//!   certificate in one PEM `CertificateString` for that `CertificateUri`
//!   and swaps the certificate the TLS server presents from the next
//!   handshake on (a key that does not match is refused, nothing changed);
//! - **faults** ([`Fault`]) answer before all of that: a status with a
//!   body, malformed bytes, a hang, or "accept as a task" (`202` + a Task
//!   Monitor that answers `202` N times, then the final Task).
//!
//! Every request is recorded ([`RecordedRequest`]) so tests can assert the
//! paths, reset types, bodies and headers a provider used.

use super::server::{self, HttpRequest, HttpResponse, Running};
use super::{credentials, loopback_target, HarnessError, TestPki};
use base64::Engine;
use bmcfleet_provider::ResolvedCredentials;
use bmcfleet_schema::BmcTarget;
use bytes::Bytes;
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

const SESSIONS: &str = "/redfish/v1/SessionService/Sessions";
const SESSION_SERVICE: &str = "/redfish/v1/SessionService";
const MONITORS: &str = "/redfish/v1/TaskService/TaskMonitors";
const TASK_SERVICE: &str = "/redfish/v1/TaskService";
const TASKS: &str = "/redfish/v1/TaskService/Tasks";
const UPDATE_SERVICE: &str = "/redfish/v1/UpdateService";
/// The mockup's SimpleUpdate action target.
pub const SIMPLE_UPDATE: &str = "/redfish/v1/UpdateService/Actions/UpdateService.SimpleUpdate";
/// The mockup's `MultipartHttpPushUri` ([`MockupBuilder::multipart_push`]).
pub const MULTIPART_PUSH: &str = "/redfish/v1/UpdateService/upload";

/// The mockup's CertificateService ([`MockupBuilder::certificate_service`]).
pub const CERTIFICATE_SERVICE: &str = "/redfish/v1/CertificateService";
/// Its ReplaceCertificate action target.
pub const REPLACE_CERTIFICATE: &str = "/redfish/v1/CertificateService/Actions/CertificateService.ReplaceCertificate";
const REPLACE_CERTIFICATE_INFO: &str = "/redfish/v1/CertificateService/ReplaceCertificateActionInfo";

/// What one multipart push delivered, read by the mockup's own parser.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PushReceived {
    /// Bytes of the `UpdateFile` part.
    pub bytes: usize,
    /// Lower-case hex SHA-256 of the `UpdateFile` part.
    pub sha256: String,
    /// The `UpdateFile` part's `filename`.
    pub filename: Option<String>,
    /// The `UpdateFile` part's content type.
    pub file_content_type: Option<String>,
    /// The `UpdateParameters` part's content type.
    pub parameters_content_type: Option<String>,
    /// `UpdateParameters` as sent.
    pub parameters: Value,
}

/// How the mockup's UpdateService runs an update
/// ([`MockupBuilder::update_service`]).
#[derive(Clone, Debug)]
pub struct UpdateBehaviour {
    /// Time from the request to 100 %.
    pub duration: std::time::Duration,
    /// End in `Exception` (with a message) once this percentage is reached.
    pub fail_at: Option<u8>,
}

impl UpdateBehaviour {
    /// An update that completes after `duration`.
    pub fn completes_after(duration: std::time::Duration) -> Self {
        UpdateBehaviour { duration, fail_at: None }
    }

    /// An update that fails once `percent` of `duration` has passed.
    pub fn fails_at(duration: std::time::Duration, percent: u8) -> Self {
        UpdateBehaviour { duration, fail_at: Some(percent) }
    }
}

/// One update the mockup's UpdateService runs.
struct Update {
    id: u64,
    started: std::time::Instant,
    image: String,
    /// Where it was requested (the task's `Payload.TargetUri`).
    target: &'static str,
}

fn norm(p: &str) -> String {
    let t = p.trim_end_matches('/');
    if t.is_empty() {
        "/".to_owned()
    } else {
        t.to_owned()
    }
}

/// One request the server received: the request as the server read it,
/// its method upper-cased and its path without a trailing `/`.
pub use super::server::HttpRequest as RecordedRequest;

impl RecordedRequest {
    /// The body as JSON (`None` when empty or not JSON).
    pub fn json(&self) -> Option<Value> {
        serde_json::from_slice(&self.body).ok()
    }

    pub fn is(&self, method: &str, path: &str) -> bool {
        self.method.eq_ignore_ascii_case(method) && self.path == norm(path)
    }
}

#[derive(Clone, Debug)]
enum FaultKind {
    Respond {
        status: u16,
        headers: Vec<(String, String)>,
        body: Bytes,
    },
    Hang,
    /// `200`, a `content-length` 1 MiB larger than the body, this many
    /// bytes of it, then nothing.
    Stall(usize),
    Task {
        polls: usize,
        final_state: String,
        messages: Vec<String>,
    },
}

/// An injected behaviour for matching requests, checked before anything else.
#[derive(Clone, Debug)]
pub struct Fault {
    /// `None`: any method.
    method: Option<String>,
    path: String,
    /// `None`: forever.
    remaining: Option<usize>,
    /// Matching requests to let through before the fault applies.
    skip: usize,
    kind: FaultKind,
}

impl Fault {
    fn new(method: &str, path: &str, kind: FaultKind) -> Fault {
        let method = (method != "*").then(|| method.to_ascii_uppercase());
        Fault { method, path: norm(path), remaining: None, skip: 0, kind }
    }

    /// Answer `status` with a Redfish error body (`error.message` names the fault).
    /// `method` `"*"` matches any method.
    pub fn status(method: &str, path: &str, status: u16) -> Fault {
        let body = json!({"error": {"code": "Base.1.0.GeneralError",
            "message": format!("injected fault: HTTP {status}"),
            "@Message.ExtendedInfo": [{"MessageId": "Base.1.0.GeneralError", "Message": format!("injected HTTP {status} for {path}")}]}});
        Fault::new(
            method,
            path,
            FaultKind::Respond {
                status,
                headers: vec![("content-type".into(), "application/json".into())],
                body: Bytes::from(serde_json::to_vec(&body).unwrap_or_default()),
            },
        )
    }

    /// Replace the body with this JSON (e.g. a captured vendor error body).
    pub fn json(mut self, body: &Value) -> Fault {
        if let FaultKind::Respond { body: b, .. } = &mut self.kind {
            *b = Bytes::from(serde_json::to_vec(body).unwrap_or_default());
        }
        self
    }

    /// Replace the body with raw bytes (e.g. malformed JSON).
    pub fn raw(mut self, body: impl Into<Bytes>) -> Fault {
        if let FaultKind::Respond { body: b, .. } = &mut self.kind {
            *b = body.into();
        }
        self
    }

    pub fn header(mut self, name: &str, value: &str) -> Fault {
        if let FaultKind::Respond { headers, .. } = &mut self.kind {
            headers.retain(|(k, _)| !k.eq_ignore_ascii_case(name));
            headers.push((name.to_ascii_lowercase(), value.to_owned()));
        }
        self
    }

    /// Accept the connection and the request, never answer.
    pub fn hang(method: &str, path: &str) -> Fault {
        Fault::new(method, path, FaultKind::Hang)
    }

    /// Answer `200` announcing a body 1 MiB longer than it sends: `sent`
    /// bytes of it, then nothing more, never ending the answer.
    pub fn stall(method: &str, path: &str, sent: usize) -> Fault {
        Fault::new(method, path, FaultKind::Stall(sent))
    }

    /// Process the request normally, then answer `202 Accepted` with a Task
    /// Monitor that answers `202` `polls` times and then the final Task in
    /// `final_state` (`Completed`, `Exception`, ...). `usize::MAX` polls: never done.
    pub fn task(method: &str, path: &str, polls: usize, final_state: &str) -> Fault {
        Fault::new(method, path, FaultKind::Task { polls, final_state: final_state.to_owned(), messages: Vec::new() })
    }

    /// A message the final Task carries.
    pub fn task_message(mut self, message: &str) -> Fault {
        if let FaultKind::Task { messages, .. } = &mut self.kind {
            messages.push(message.to_owned());
        }
        self
    }

    /// Let the first `n` matching requests through (served normally).
    pub fn after(mut self, n: usize) -> Fault {
        self.skip = n;
        self
    }

    /// Apply to the next `n` matching requests only.
    pub fn times(mut self, n: usize) -> Fault {
        self.remaining = Some(n);
        self
    }

    fn matches(&self, method: &str, path: &str) -> bool {
        self.remaining != Some(0)
            && self.path == path
            && self.method.as_deref().is_none_or(|m| m.eq_ignore_ascii_case(method))
    }
}

struct Monitor {
    polls_left: usize,
    final_state: String,
    messages: Vec<String>,
    id: String,
}

struct State {
    resources: BTreeMap<String, Value>,
    requests: Vec<RecordedRequest>,
    faults: Vec<Fault>,
    rules: Rules,
    /// token → session path
    tokens: BTreeMap<String, String>,
    monitors: BTreeMap<String, Monitor>,
    counter: u64,
    update: Option<UpdateBehaviour>,
    updates: Vec<Update>,
    /// Every multipart push received (accepted or not).
    pushes: Vec<PushReceived>,
    /// The certificate the TLS server presents.
    served: Arc<super::ServedCert>,
    /// The HTTPS Certificate resource, with a CertificateService.
    https_certificate: Option<String>,
}

/// The account the mockup accepts and how it treats requests: set on the
/// builder, kept by the running server.
struct Rules {
    username: String,
    password: String,
    /// Emulate the SessionService.
    sessions: bool,
    /// Accept HTTP Basic.
    basic: bool,
    require_if_match: bool,
    /// Check values against `@Redfish.AllowableValues`.
    validate: bool,
    denied: Vec<(String, String)>,
    /// (path, property pointer, vendor error body): a PATCH carrying the
    /// property is refused with that 400 body, as the vendor's BMC does.
    read_only: Vec<(String, String, Value)>,
    /// (path, mode → boot targets): the system's
    /// `BootSourceOverrideTarget@Redfish.AllowableValues` follows its
    /// `BootSourceOverrideMode`, as sushy-emulator's does (UefiHttp only in UEFI).
    mode_targets: Vec<(String, BTreeMap<String, Vec<String>>)>,
}

/// Builds a [`MockupServer`].
pub struct MockupBuilder {
    resources: BTreeMap<String, Value>,
    rules: Rules,
    pki: Option<TestPki>,
    update: Option<UpdateBehaviour>,
    push: bool,
    /// A CertificateService: `Some(advertises ReplaceCertificate)`.
    certificates: Option<bool>,
}

fn read_json(file: &Path) -> Result<Value, HarnessError> {
    let text = std::fs::read(file).map_err(|e| HarnessError::io(format!("reading {}", file.display()), e))?;
    serde_json::from_slice(&text).map_err(|e| HarnessError::Fixture(format!("{} is not JSON: {e}", file.display())))
}

fn collect_json(dir: &Path, out: &mut Vec<std::path::PathBuf>) -> Result<(), HarnessError> {
    let entries = std::fs::read_dir(dir).map_err(|e| HarnessError::io(format!("listing {}", dir.display()), e))?;
    for entry in entries {
        let p = entry.map_err(|e| HarnessError::io(format!("listing {}", dir.display()), e))?.path();
        if p.is_dir() {
            collect_json(&p, out)?;
        } else if p.extension().is_some_and(|e| e == "json") {
            out.push(p);
        }
    }
    Ok(())
}

impl Default for MockupBuilder {
    fn default() -> Self {
        MockupBuilder {
            resources: BTreeMap::new(),
            rules: Rules {
                username: "admin".into(),
                password: "password".into(),
                sessions: true,
                basic: true,
                require_if_match: false,
                validate: true,
                denied: Vec::new(),
                read_only: Vec::new(),
                mode_targets: Vec::new(),
            },
            pki: None,
            update: None,
            push: false,
            certificates: None,
        }
    }
}

impl MockupBuilder {
    /// Load every `*.json` under `dir` (recursively) that has an
    /// `@odata.id`. When two files claim one id, the first in path order
    /// wins; use [`MockupBuilder::file`] to choose the other.
    pub fn dir(mut self, dir: impl AsRef<Path>) -> Result<Self, HarnessError> {
        let mut files = Vec::new();
        collect_json(dir.as_ref(), &mut files)?;
        files.sort();
        for f in files {
            let v = read_json(&f)?;
            if let Some(id) = v.get("@odata.id").and_then(Value::as_str) {
                self.resources.entry(norm(id)).or_insert(v);
            }
        }
        Ok(self)
    }

    /// Load (and override with) one file, served at its `@odata.id`.
    pub fn file(mut self, file: impl AsRef<Path>) -> Result<Self, HarnessError> {
        let v = read_json(file.as_ref())?;
        let id = v
            .get("@odata.id")
            .and_then(Value::as_str)
            .ok_or_else(|| HarnessError::Fixture(format!("{} has no @odata.id", file.as_ref().display())))?;
        self.resources.insert(norm(id), v);
        Ok(self)
    }

    /// Serve a file at `path` whatever its `@odata.id`.
    pub fn file_at(mut self, path: &str, file: impl AsRef<Path>) -> Result<Self, HarnessError> {
        let v = read_json(file.as_ref())?;
        self.resources.insert(norm(path), v);
        Ok(self)
    }

    /// Add or replace a resource (spec-built responders).
    pub fn resource(mut self, path: &str, value: Value) -> Self {
        let mut value = value;
        if value.get("@odata.id").is_none() {
            value["@odata.id"] = json!(path);
        }
        self.resources.insert(norm(path), value);
        self
    }

    /// The one account the server accepts (default `admin` / `password`).
    pub fn credentials(mut self, username: &str, password: &str) -> Self {
        self.rules.username = username.into();
        self.rules.password = password.into();
        self
    }

    setters! {
        /// Emulate the SessionService (default on). Off: POSTs to the sessions
        /// collection get `404`, like a BMC without sessions.
        sessions(rules.sessions: bool);
        /// Accept HTTP Basic (default on).
        basic_auth(rules.basic: bool);
        /// Answer `428` to a PATCH without `If-Match` on a resource with an ETag.
        require_if_match(rules.require_if_match: bool);
        /// Check PATCH values and action parameters against the advertised
        /// `@Redfish.AllowableValues` (default on). Turn off to emulate firmware
        /// whose advertised lists are wrong but which accepts the standard values
        /// (Supermicro X12 lists `GracefulShutdownGracefulRestart` as one value).
        validate_allowable(rules.validate: bool);
        /// Also advertise `MultipartHttpPushUri` ([`MULTIPART_PUSH`]) on the
        /// UpdateService (with [`MockupBuilder::update_service`]); without it
        /// the BMC takes SimpleUpdate only.
        multipart_push(push: bool);
    }

    /// Answer `405 Method Not Allowed` to `method` on `path`.
    pub fn deny(mut self, method: &str, path: &str) -> Self {
        self.rules.denied.push((method.to_ascii_uppercase(), norm(path)));
        self
    }

    /// Make the boot targets `path` allows depend on its boot mode, as
    /// BMCs do that list UEFI targets only in UEFI mode: `per_mode` maps
    /// each `BootSourceOverrideMode` to its targets. The resource's list is
    /// set to that of its current mode now and after every PATCH; a PATCH
    /// carrying a mode is checked against the list of that mode.
    pub fn boot_targets_per_mode(mut self, path: &str, per_mode: &[(&str, &[&str])]) -> Self {
        let path = norm(path);
        let map: BTreeMap<String, Vec<String>> =
            per_mode.iter().map(|(m, t)| (m.to_string(), t.iter().map(|x| x.to_string()).collect())).collect();
        if let Some(r) = self.resources.get_mut(&path) {
            render_mode_targets(r, &map);
        }
        self.rules.mode_targets.push((path, map));
        self
    }

    /// Refuse a PATCH of `path` that carries the property at `pointer`
    /// (`/Boot/BootSourceOverrideMode`) with `400` and the vendor's own
    /// error `body`, the way a BMC refuses a property its firmware owns.
    pub fn read_only(mut self, path: &str, pointer: &str, body: Value) -> Self {
        self.rules.read_only.push((norm(path), pointer.to_owned(), body));
        self
    }

    /// Serve an UpdateService with `SimpleUpdate` (HTTP, HTTPS) and a
    /// TaskService whose update tasks behave as `behaviour` says; the
    /// service root links both.
    pub fn update_service(mut self, behaviour: UpdateBehaviour) -> Self {
        self.update = Some(behaviour);
        self
    }

    /// A CertificateService and the HTTPS certificate collection of the
    /// Manager's NetworkProtocol (created when the mockup has none);
    /// `replace`: the service advertises ReplaceCertificate (see the module docs).
    pub fn certificate_service(mut self, replace: bool) -> Self {
        self.certificates = Some(replace);
        self
    }

    /// Link the CertificateService and the HTTPS certificate collection;
    /// answer the Certificate resource's path.
    fn add_certificates(&mut self, replace: bool, cert_pem: &str) -> Option<String> {
        let manager = self
            .resources
            .iter()
            .find(|(_, r)| r.get("@odata.type").and_then(Value::as_str).is_some_and(|t| t.contains("#Manager.")))
            .map(|(p, _)| p.clone())?;
        let linked = self.resources.get(&manager).and_then(|m| m["NetworkProtocol"]["@odata.id"].as_str()).map(norm);
        let np = match linked {
            Some(p) if self.resources.contains_key(&p) => p,
            linked => {
                // Linked but not captured, or not linked: built after DSP0268.
                let p = linked.unwrap_or_else(|| format!("{manager}/NetworkProtocol"));
                self.resources.insert(
                    p.clone(),
                    json!({"@odata.id": p, "@odata.type": "#ManagerNetworkProtocol.v1_9_0.ManagerNetworkProtocol",
                           "Id": "NetworkProtocol", "Name": "Manager Network Protocol"}),
                );
                if let Some(m) = self.resources.get_mut(&manager) {
                    m["NetworkProtocol"] = json!({"@odata.id": p});
                }
                p
            }
        };
        let coll = format!("{np}/HTTPS/Certificates");
        let cert = format!("{coll}/1");
        if let Some(r) = self.resources.get_mut(&np) {
            r["HTTPS"]["Certificates"] = json!({"@odata.id": coll});
            if r["HTTPS"].get("ProtocolEnabled").is_none() {
                r["HTTPS"]["ProtocolEnabled"] = json!(true);
                r["HTTPS"]["Port"] = json!(443);
            }
        }
        self.resources.insert(
            coll.clone(),
            json!({"@odata.id": coll, "@odata.type": "#CertificateCollection.CertificateCollection",
                   "Name": "HTTPS Certificates Collection", "Members": [{"@odata.id": cert}], "Members@odata.count": 1}),
        );
        self.resources.insert(
            cert.clone(),
            json!({"@odata.id": cert, "@odata.type": "#Certificate.v1_5_0.Certificate", "Id": "1",
                   "Name": "HTTPS Certificate", "CertificateType": "PEM", "CertificateString": cert_pem}),
        );
        let mut service = json!({"@odata.id": CERTIFICATE_SERVICE, "@odata.type": "#CertificateService.v1_0_4.CertificateService",
                                 "Id": "CertificateService", "Name": "Certificate Service", "Actions": {}});
        if replace {
            service["Actions"]["#CertificateService.ReplaceCertificate"] = json!({
                "target": REPLACE_CERTIFICATE, "@Redfish.ActionInfo": REPLACE_CERTIFICATE_INFO});
            self.resources.insert(
                REPLACE_CERTIFICATE_INFO.into(),
                json!({"@odata.id": REPLACE_CERTIFICATE_INFO, "@odata.type": "#ActionInfo.v1_1_2.ActionInfo",
                       "Id": "ReplaceCertificateActionInfo", "Name": "Replace Certificate Action Info",
                       "Parameters": [
                           {"Name": "CertificateString", "Required": true, "DataType": "String"},
                           {"Name": "CertificateType", "Required": true, "DataType": "String", "AllowableValues": ["PEM"]},
                           {"Name": "CertificateUri", "Required": true, "DataType": "Object", "ObjectDataType": "#Certificate.v1_0_0.Certificate"}]}),
            );
        }
        self.resources.insert(CERTIFICATE_SERVICE.into(), service);
        if let Some(root) = self.resources.get_mut("/redfish/v1") {
            root["CertificateService"] = json!({"@odata.id": CERTIFICATE_SERVICE});
        }
        Some(cert)
    }

    /// Use this certificate authority (default: a fresh one).
    pub fn pki(mut self, pki: TestPki) -> Self {
        self.pki = Some(pki);
        self
    }

    pub async fn start(mut self) -> Result<MockupServer, HarnessError> {
        if self.rules.sessions {
            self.resources.entry(SESSION_SERVICE.into()).or_insert_with(|| {
                json!({"@odata.id": SESSION_SERVICE, "@odata.type": "#SessionService.v1_1_8.SessionService",
                       "Id": "SessionService", "ServiceEnabled": true, "SessionTimeout": 30,
                       "Sessions": {"@odata.id": SESSIONS}})
            });
            self.resources.entry(SESSIONS.into()).or_insert_with(|| {
                json!({"@odata.id": SESSIONS, "@odata.type": "#SessionCollection.SessionCollection",
                       "Name": "Session Collection", "Members": [], "Members@odata.count": 0})
            });
        }
        if self.update.is_some() {
            if let Some(root) = self.resources.get_mut("/redfish/v1") {
                root["UpdateService"] = json!({"@odata.id": UPDATE_SERVICE});
                root["Tasks"] = json!({"@odata.id": TASK_SERVICE});
            }
            let mut service = json!({"@odata.id": UPDATE_SERVICE, "@odata.type": "#UpdateService.v1_11_0.UpdateService", "Id": "UpdateService",
                       "ServiceEnabled": true,
                       "FirmwareInventory": {"@odata.id": "/redfish/v1/UpdateService/FirmwareInventory"},
                       "Actions": {"#UpdateService.SimpleUpdate": {"target": SIMPLE_UPDATE,
                           "TransferProtocol@Redfish.AllowableValues": ["HTTP", "HTTPS"]}}});
            if self.push {
                service["MultipartHttpPushUri"] = json!(MULTIPART_PUSH);
            }
            self.resources.insert(UPDATE_SERVICE.into(), service);
            self.resources.insert(
                TASK_SERVICE.into(),
                json!({"@odata.id": TASK_SERVICE, "@odata.type": "#TaskService.v1_2_0.TaskService", "Id": "TaskService",
                       "ServiceEnabled": true, "Tasks": {"@odata.id": TASKS}}),
            );
            self.resources.insert(TASKS.into(), json!({"@odata.id": TASKS, "Members": [], "Members@odata.count": 0}));
        }
        let pki = match self.pki.take() {
            Some(p) => p,
            None => TestPki::generate()?,
        };
        let https_certificate = match self.certificates {
            Some(replace) => self.add_certificates(replace, &pki.cert_pem),
            None => None,
        };
        let (tls, served) = pki.swappable_server_config()?;
        let (username, password) = (self.rules.username.clone(), self.rules.password.clone());
        let state = Arc::new(Mutex::new(State {
            resources: self.resources,
            requests: Vec::new(),
            faults: Vec::new(),
            rules: self.rules,
            tokens: BTreeMap::new(),
            monitors: BTreeMap::new(),
            counter: 0,
            update: self.update,
            updates: Vec::new(),
            pushes: Vec::new(),
            served: served.clone(),
            https_certificate,
        }));
        let shared = state.clone();
        let handler: server::Handler = Arc::new(move |req| {
            let state = shared.clone();
            Box::pin(async move {
                let outcome = lock(&state).handle(req);
                match outcome {
                    Some(r) => r,
                    None => std::future::pending().await,
                }
            })
        });
        let running = server::start(Some(tls), handler).await?;
        Ok(MockupServer { running, state, pki, username, password, served })
    }
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    state.lock().unwrap_or_else(|p| p.into_inner())
}

fn redfish_error(status: u16, id: &str, message: &str) -> HttpResponse {
    HttpResponse::json(
        status,
        &json!({"error": {"code": format!("Base.1.8.{id}"), "message": message,
            "@Message.ExtendedInfo": [{"MessageId": format!("Base.1.8.{id}"), "Message": message, "Severity": "Critical"}]}}),
    )
}

/// Replace every `Password` value by `null` (BMCs never return passwords).
fn strip_passwords(v: &mut Value) {
    if let Some(o) = v.as_object_mut() {
        for (k, val) in o.iter_mut() {
            if k == "Password" {
                *val = Value::Null;
            } else {
                strip_passwords(val);
            }
        }
    }
}

fn merge(target: &mut Value, patch: &Value, by_member: bool) {
    match (target.as_object_mut(), patch.as_object()) {
        (Some(t), Some(p)) => {
            for (k, v) in p {
                match t.get_mut(k) {
                    Some(existing) if existing.is_object() && v.is_object() => merge(existing, v, by_member),
                    // DSP0266 (PATCH on array properties): an array of
                    // objects is updated member by member (`{}` leaves a
                    // member as it is); members the request does not reach
                    // are kept. Arrays of values are replaced.
                    Some(Value::Array(existing))
                        if by_member
                            && v.as_array().is_some_and(|a| !a.is_empty() && a.iter().all(Value::is_object))
                            && existing.iter().all(Value::is_object) =>
                    {
                        for (i, member) in v.as_array().into_iter().flatten().enumerate() {
                            match existing.get_mut(i) {
                                Some(e) => merge(e, member, by_member),
                                None => existing.push(member.clone()),
                            }
                        }
                    }
                    _ => {
                        t.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        _ => *target = patch.clone(),
    }
}

/// Set `resource`'s boot target list to the one of its current boot mode.
fn render_mode_targets(resource: &mut Value, per_mode: &BTreeMap<String, Vec<String>>) {
    let mode = resource.pointer("/Boot/BootSourceOverrideMode").and_then(Value::as_str).map(str::to_owned);
    if let (Some(list), Some(boot)) =
        (mode.and_then(|m| per_mode.get(&m)), resource.get_mut("Boot").and_then(Value::as_object_mut))
    {
        boot.insert("BootSourceOverrideTarget@Redfish.AllowableValues".into(), json!(list));
    }
}

/// Check string values of `patch` against `Prop@Redfish.AllowableValues`
/// siblings in `resource`, recursively.
fn check_allowable(resource: &Value, patch: &Value) -> Result<(), String> {
    let Some(p) = patch.as_object() else { return Ok(()) };
    for (k, v) in p {
        if v.is_object() {
            if let Some(sub) = resource.get(k) {
                check_allowable(sub, v)?;
            }
        } else if let Some(s) = v.as_str() {
            if let Some(list) = resource.get(format!("{k}@Redfish.AllowableValues")).and_then(Value::as_array) {
                if !list.iter().any(|a| a.as_str() == Some(s)) {
                    return Err(format!("The value {s} for the property {k} is not in the list of acceptable values."));
                }
            }
        }
    }
    Ok(())
}

impl State {
    fn next(&mut self) -> u64 {
        self.counter += 1;
        self.counter
    }

    fn bump_etag(&mut self, path: &str) {
        let n = self.next();
        if let Some(r) = self.resources.get_mut(path) {
            if r.get("@odata.etag").is_some() {
                r["@odata.etag"] = json!(format!("W/\"mock-{n}\""));
            }
        }
    }

    fn authorized(&self, req: &HttpRequest) -> bool {
        if let Some(token) = req.header("x-auth-token") {
            return self.tokens.contains_key(token);
        }
        if !self.rules.basic {
            return false;
        }
        let Some(h) = req.header("authorization") else { return false };
        let Some(b64) = h.strip_prefix("Basic ").or_else(|| h.strip_prefix("basic ")) else { return false };
        let Ok(raw) = base64::engine::general_purpose::STANDARD.decode(b64.trim()) else { return false };
        let Ok(pair) = String::from_utf8(raw) else { return false };
        pair.split_once(':').is_some_and(|(u, p)| u == self.rules.username && p == self.rules.password)
    }

    /// `None`: hang.
    fn handle(&mut self, req: HttpRequest) -> Option<HttpResponse> {
        let path = norm(&req.path);
        let method = req.method.to_ascii_uppercase();
        self.requests.push(RecordedRequest { method: method.clone(), path: path.clone(), ..req.clone() });

        let mut as_task = None;
        let fault = self.faults.iter_mut().find(|f| f.matches(&method, &path)).and_then(|f| {
            if f.skip > 0 {
                f.skip -= 1;
                None
            } else {
                Some(f)
            }
        });
        if let Some(f) = fault {
            if let Some(n) = &mut f.remaining {
                *n -= 1;
            }
            match f.kind.clone() {
                FaultKind::Respond { status, headers, body } => {
                    return Some(HttpResponse { status, headers, body, stall: false })
                }
                FaultKind::Hang => return None,
                FaultKind::Stall(sent) => {
                    let mut body = b"{\"Padding\": \"".to_vec();
                    body.resize(sent.max(body.len()), b'x');
                    return Some(HttpResponse {
                        status: 200,
                        headers: vec![
                            ("content-type".into(), "application/json".into()),
                            ("content-length".into(), (body.len() + (1 << 20)).to_string()),
                        ],
                        body: Bytes::from(body),
                        stall: true,
                    });
                }
                FaultKind::Task { polls, final_state, messages } => as_task = Some((polls, final_state, messages)),
            }
        }

        let open = method == "GET" && (path == "/redfish/v1" || path == "/redfish" || path == "/");
        let login = method == "POST" && path == SESSIONS && self.rules.sessions;
        if !open && !login && !self.authorized(&req) {
            return Some(
                redfish_error(401, "NoValidSession", "There is no valid session established with the implementation.")
                    .with_header("www-authenticate", "Basic realm=\"mockup\""),
            );
        }
        if self.rules.denied.iter().any(|(m, p)| *m == method && *p == path) {
            return Some(redfish_error(405, "OperationNotAllowed", &format!("{method} is not allowed on {path}")));
        }
        if let Some(resp) = self.monitor(&method, &path) {
            return Some(resp);
        }
        if let Some(resp) = self.update_task(&method, &path) {
            return Some(resp);
        }
        if method == "POST" && path == MULTIPART_PUSH && self.update.is_some() {
            return Some(self.multipart_push(&req));
        }

        let body: Option<Value> = if req.body.iter().all(u8::is_ascii_whitespace) {
            None
        } else {
            match serde_json::from_slice(&req.body) {
                Ok(v) => Some(v),
                Err(_) => {
                    return Some(redfish_error(400, "MalformedJSON", "The request body submitted was malformed JSON."))
                }
            }
        };

        let resp = match method.as_str() {
            "GET" => self.get(&path),
            "PATCH" => self.patch(&path, &req, body),
            "POST" if login => self.login(body),
            "POST" => self.post(&path, body),
            "DELETE" => self.delete(&path),
            _ => redfish_error(405, "OperationNotAllowed", &format!("{method} is not allowed on {path}")),
        };
        if let Some((polls, final_state, messages)) = as_task {
            if (200..300).contains(&resp.status) {
                let n = self.next();
                let loc = format!("{MONITORS}/{n}");
                self.monitors
                    .insert(loc.clone(), Monitor { polls_left: polls, final_state, messages, id: n.to_string() });
                let task = json!({"@odata.id": format!("/redfish/v1/TaskService/Tasks/{n}"), "Id": n.to_string(),
                                  "TaskState": "Running", "TaskMonitor": loc});
                return Some(HttpResponse::json(202, &task).with_header("location", loc));
            }
        }
        Some(resp)
    }

    fn monitor(&mut self, method: &str, path: &str) -> Option<HttpResponse> {
        let m = self.monitors.get_mut(path)?;
        if method != "GET" {
            return Some(redfish_error(405, "OperationNotAllowed", "task monitors only answer GET"));
        }
        let task_path = format!("/redfish/v1/TaskService/Tasks/{}", m.id);
        if m.polls_left > 0 {
            m.polls_left -= 1;
            return Some(HttpResponse::json(
                202,
                &json!({"@odata.id": task_path, "Id": m.id, "TaskState": "Running", "PercentComplete": 50}),
            ));
        }
        let status = if m.final_state == "Completed" { "OK" } else { "Critical" };
        let messages: Vec<Value> =
            m.messages.iter().map(|t| json!({"MessageId": "Task.1.0.Info", "Message": t})).collect();
        Some(HttpResponse::json(
            200,
            &json!({"@odata.id": task_path, "Id": m.id, "TaskState": m.final_state, "TaskStatus": status,
                    "PercentComplete": 100, "Messages": messages}),
        ))
    }

    fn get(&self, path: &str) -> HttpResponse {
        match self.resources.get(path) {
            Some(v) => {
                let mut r = HttpResponse::json(200, v);
                if let Some(tag) = v.get("@odata.etag").and_then(Value::as_str) {
                    r = r.with_header("etag", tag);
                }
                r
            }
            None => {
                redfish_error(404, "ResourceMissingAtURI", &format!("The resource at the URI {path} was not found."))
            }
        }
    }

    fn patch(&mut self, path: &str, req: &HttpRequest, body: Option<Value>) -> HttpResponse {
        let Some(current) = self.resources.get(path) else {
            return redfish_error(
                404,
                "ResourceMissingAtURI",
                &format!("The resource at the URI {path} was not found."),
            );
        };
        let Some(body) = body.filter(Value::is_object) else {
            return redfish_error(400, "MalformedJSON", "PATCH needs a JSON object.");
        };
        if let Some(tag) = current.get("@odata.etag").and_then(Value::as_str) {
            match req.header("if-match") {
                Some(m) if m == tag || m == "*" => {}
                Some(_) => {
                    return redfish_error(
                        412,
                        "PreconditionFailed",
                        "The ETag supplied did not match the ETag required to change this resource.",
                    )
                }
                None if self.rules.require_if_match => {
                    return redfish_error(
                        428,
                        "PreconditionRequired",
                        "A precondition header or annotation is required to change this resource.",
                    )
                }
                None => {}
            }
        }
        if let Some((_, _, refusal)) =
            self.rules.read_only.iter().find(|(p, pointer, _)| p == path && body.pointer(pointer).is_some())
        {
            return HttpResponse::json(400, refusal);
        }
        let per_mode = self.rules.mode_targets.iter().find(|(p, _)| p == path).map(|(_, m)| m.clone());
        if self.rules.validate {
            // A PATCH that changes the boot mode is judged by that mode's targets.
            let mut judged = current.clone();
            if let (Some(map), Some(mode)) = (&per_mode, body.pointer("/Boot/BootSourceOverrideMode")) {
                if let Some(b) = judged.get_mut("Boot").and_then(Value::as_object_mut) {
                    b.insert("BootSourceOverrideMode".into(), mode.clone());
                }
                render_mode_targets(&mut judged, map);
            }
            if let Err(why) = check_allowable(&judged, &body) {
                return redfish_error(400, "PropertyValueNotInList", &why);
            }
        }
        let mut stored = body;
        strip_passwords(&mut stored);
        if let Some(r) = self.resources.get_mut(path) {
            merge(r, &stored, true);
            if let Some(map) = &per_mode {
                render_mode_targets(r, map);
            }
        }
        self.bump_etag(path);
        HttpResponse::empty(204)
    }

    fn login(&mut self, body: Option<Value>) -> HttpResponse {
        let body = body.unwrap_or(Value::Null);
        let user = body.get("UserName").and_then(Value::as_str);
        let pass = body.get("Password").and_then(Value::as_str);
        if user != Some(self.rules.username.as_str()) || pass != Some(self.rules.password.as_str()) {
            return redfish_error(401, "InsufficientPrivilege", "Invalid username or password.");
        }
        let n = self.next();
        let token =
            format!("{:016x}{:016x}", n.wrapping_mul(0x9e37_79b9_7f4a_7c15), std::process::id() as u64 ^ n << 32);
        let loc = format!("{SESSIONS}/{n}");
        self.tokens.insert(token.clone(), loc.clone());
        let session = json!({"@odata.id": loc, "@odata.type": "#Session.v1_3_0.Session", "Id": n.to_string(),
                             "Name": "User Session", "UserName": self.rules.username});
        self.resources.insert(loc.clone(), session.clone());
        if let Some(coll) = self.resources.get_mut(SESSIONS) {
            add_member(coll, &loc);
        }
        HttpResponse::json(201, &session).with_header("x-auth-token", token).with_header("location", loc)
    }

    fn find_action(&self, path: &str) -> Option<(String, String, Value)> {
        for (rpath, r) in &self.resources {
            let empty = Map::new();
            let actions = r.get("Actions").and_then(Value::as_object).unwrap_or(&empty);
            let mut candidates: Vec<(&String, &Value)> = actions.iter().collect();
            if let Some(oem) = actions.get("Oem").and_then(Value::as_object) {
                candidates.extend(oem.iter());
            }
            // Where HPE iLO puts its OEM actions: `Oem.Hpe.Actions`.
            for vendor in r.get("Oem").and_then(Value::as_object).into_iter().flat_map(|o| o.values()) {
                if let Some(a) = vendor.get("Actions").and_then(Value::as_object) {
                    candidates.extend(a.iter());
                }
            }
            for (name, a) in candidates {
                if a.get("target").and_then(Value::as_str).map(norm).as_deref() == Some(path) {
                    return Some((rpath.clone(), name.trim_start_matches('#').to_owned(), a.clone()));
                }
            }
        }
        None
    }

    /// `CertificateService.ReplaceCertificate`: the key and certificate in
    /// one PEM `CertificateString`, for the HTTPS certificate's URI.
    fn replace_certificate(&mut self, params: &Map<String, Value>) -> HttpResponse {
        let Some(uri) = self.https_certificate.clone() else {
            return redfish_error(404, "ResourceMissingAtURI", "no CertificateService");
        };
        let missing =
            ["CertificateString", "CertificateType", "CertificateUri"].into_iter().find(|k| !params.contains_key(*k));
        if let Some(k) = missing {
            return redfish_error(
                400,
                "ActionParameterMissing",
                &format!("The action ReplaceCertificate requires the parameter {k}."),
            );
        }
        if params["CertificateType"] != json!("PEM") {
            return redfish_error(400, "ActionParameterValueNotInList", "CertificateType must be PEM.");
        }
        if params["CertificateUri"]["@odata.id"].as_str().map(norm).as_deref() != Some(uri.as_str()) {
            return redfish_error(400, "ActionParameterValueError", "CertificateUri names no replaceable certificate.");
        }
        let text = params["CertificateString"].as_str().unwrap_or_default();
        // The certificate blocks only (the key stays out of the resource).
        let certs: String = text
            .split_inclusive("-----END CERTIFICATE-----")
            .filter_map(|part| part.find("-----BEGIN CERTIFICATE-----").map(|i| format!("{}\n", &part[i..])))
            .collect();
        if let Err(e) = self.served.replace(&certs, text) {
            return redfish_error(
                400,
                "ActionParameterValueError",
                &format!("The certificate or key is not usable: {e}"),
            );
        }
        if let Some(r) = self.resources.get_mut(&uri) {
            r["CertificateString"] = json!(certs);
        }
        self.bump_etag(&uri);
        HttpResponse::json(200, &self.resources.get(&uri).cloned().unwrap_or_default())
    }

    /// Start an update (`SimpleUpdate`): a Task and its monitor.
    fn simple_update(&mut self, params: &Map<String, Value>) -> HttpResponse {
        let Some(image) = params.get("ImageURI").and_then(Value::as_str) else {
            return redfish_error(
                400,
                "ActionParameterMissing",
                "The action SimpleUpdate requires the parameter ImageURI.",
            );
        };
        let image = image.to_owned();
        self.start_update(image, SIMPLE_UPDATE)
    }

    /// A multipart HTTP push (DSP0266): parse the form, record it, start
    /// its update task. The push URI is served only when advertised.
    fn multipart_push(&mut self, req: &HttpRequest) -> HttpResponse {
        let advertised = self
            .resources
            .get(UPDATE_SERVICE)
            .and_then(|s| s.get("MultipartHttpPushUri"))
            .and_then(Value::as_str)
            .map(norm);
        if advertised.as_deref() != Some(MULTIPART_PUSH) {
            return redfish_error(405, "OperationNotAllowed", "This service takes no multipart HTTP push.");
        }
        let parts = match super::multipart::boundary(req.header("content-type").unwrap_or(""))
            .and_then(|b| super::multipart::parse(&req.body, &b))
        {
            Ok(p) => p,
            Err(why) => {
                return redfish_error(400, "MalformedMultipart", &format!("The multipart request is malformed: {why}."))
            }
        };
        let (Some(params), Some(file)) =
            (parts.iter().find(|p| p.name == "UpdateParameters"), parts.iter().find(|p| p.name == "UpdateFile"))
        else {
            return redfish_error(
                400,
                "ActionParameterMissing",
                "A multipart push needs the parts UpdateParameters and UpdateFile.",
            );
        };
        let Ok(parameters) = serde_json::from_slice::<Value>(&params.data) else {
            return redfish_error(400, "MalformedJSON", "The UpdateParameters part is not JSON.");
        };
        let sha256 = super::sha256_hex(&file.data);
        self.pushes.push(PushReceived {
            bytes: file.data.len(),
            sha256,
            filename: file.filename.clone(),
            file_content_type: file.content_type.clone(),
            parameters_content_type: params.content_type.clone(),
            parameters: parameters.clone(),
        });
        if !parameters.is_object() || parameters.get("Targets").is_some_and(|t| !t.is_array()) {
            return redfish_error(
                400,
                "PropertyValueTypeError",
                "UpdateParameters must be an object whose Targets is an array.",
            );
        }
        let image = file.filename.clone().unwrap_or_else(|| "the image".into());
        self.start_update(image, MULTIPART_PUSH)
    }

    /// A running update task for `image` requested at `target`: `202` with its monitor.
    fn start_update(&mut self, image: String, target: &'static str) -> HttpResponse {
        let id = self.next();
        self.updates.push(Update { id, started: std::time::Instant::now(), image, target });
        let task = format!("{TASKS}/{id}");
        if let Some(c) = self.resources.get_mut(TASKS) {
            add_member(c, &task);
        }
        let (body, _) = self.update_view(id).unwrap_or((Value::Null, false));
        HttpResponse::json(202, &body).with_header("location", format!("{MONITORS}/u{id}"))
    }

    /// The Task of update `id` as it is now, and whether it ended.
    fn update_view(&self, id: u64) -> Option<(Value, bool)> {
        let u = self.updates.iter().find(|u| u.id == id)?;
        let b = self.update.as_ref()?;
        let elapsed = u.started.elapsed().as_secs_f64();
        let mut percent = ((elapsed / b.duration.as_secs_f64().max(0.001)) * 100.0).min(100.0) as u8;
        let (state, status, messages) = match b.fail_at {
            Some(f) if percent >= f => {
                percent = f;
                (
                    "Exception",
                    "Critical",
                    vec![
                        json!({"MessageId": "Update.1.0.ApplyFailed", "Message": format!("Flashing {} failed at {f}%: image verification error", u.image)}),
                    ],
                )
            }
            _ if percent >= 100 => (
                "Completed",
                "OK",
                vec![
                    json!({"MessageId": "Update.1.0.UpdateSuccessful", "Message": "The update completed successfully."}),
                ],
            ),
            _ => ("Running", "OK", vec![]),
        };
        let body = json!({"@odata.id": format!("{TASKS}/{id}"), "@odata.type": "#Task.v1_7_0.Task", "Id": id.to_string(),
                          "Name": "Firmware update", "TaskState": state, "TaskStatus": status, "PercentComplete": percent,
                          "TaskMonitor": format!("{MONITORS}/u{id}"),
                          "Payload": {"TargetUri": u.target, "HttpOperation": "POST"},
                          "Messages": messages});
        Some((body, state != "Running"))
    }

    /// GET of an update's Task (`200`) or its monitor (`202` while it runs).
    fn update_task(&self, method: &str, path: &str) -> Option<HttpResponse> {
        let (id, monitor) = if let Some(n) = path.strip_prefix(&format!("{MONITORS}/u")) {
            (n.parse::<u64>().ok()?, true)
        } else {
            (path.strip_prefix(&format!("{TASKS}/"))?.parse::<u64>().ok()?, false)
        };
        let (body, ended) = self.update_view(id)?;
        if method != "GET" {
            return Some(redfish_error(405, "OperationNotAllowed", "tasks only answer GET here"));
        }
        Some(HttpResponse::json(if monitor && !ended { 202 } else { 200 }, &body))
    }

    fn post(&mut self, path: &str, body: Option<Value>) -> HttpResponse {
        if let Some((owner, name, action)) = self.find_action(path) {
            let body = body.unwrap_or_else(|| json!({}));
            let Some(params) = body.as_object() else {
                return redfish_error(400, "MalformedJSON", "Action parameters must be a JSON object.");
            };
            for (k, v) in params.iter().filter(|_| self.rules.validate) {
                if let (Some(s), Some(list)) =
                    (v.as_str(), action.get(format!("{k}@Redfish.AllowableValues")).and_then(Value::as_array))
                {
                    if !list.iter().any(|a| a.as_str() == Some(s)) {
                        return redfish_error(
                            400,
                            "ActionParameterValueNotInList",
                            &format!("The value {s} for the parameter {k} in the action {name} is not in the list of acceptable values."),
                        );
                    }
                }
            }
            if name == "UpdateService.SimpleUpdate" && self.update.is_some() {
                return self.simple_update(params);
            }
            if name == "CertificateService.ReplaceCertificate" {
                return self.replace_certificate(params);
            }
            return self.apply_action(&owner, &name, params);
        }
        if self.resources.get(path).is_some_and(|r| r.get("Members").is_some_and(Value::is_array)) {
            return self.create_member(path, body);
        }
        if self.resources.contains_key(path) {
            return redfish_error(405, "OperationNotAllowed", &format!("POST is not allowed on {path}"));
        }
        redfish_error(404, "ResourceMissingAtURI", &format!("The resource at the URI {path} was not found."))
    }

    fn apply_action(&mut self, owner: &str, name: &str, params: &Map<String, Value>) -> HttpResponse {
        let get = |k: &str| params.get(k).cloned();
        let Some(r) = self.resources.get_mut(owner) else {
            return redfish_error(404, "ResourceMissingAtURI", "the action's resource vanished");
        };
        if name.ends_with(".Reset") && get("ResetType").is_none() && name != "Manager.ResetToDefaults" {
            return redfish_error(
                400,
                "ActionParameterMissing",
                &format!("The action {name} requires the parameter ResetType to be present in the request body."),
            );
        }
        match name {
            "ComputerSystem.Reset" => {
                let t = get("ResetType").and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default();
                let now = r.get("PowerState").and_then(Value::as_str).unwrap_or("Off").to_owned();
                let next = match t.as_str() {
                    "On" | "ForceOn" | "ForceRestart" | "GracefulRestart" | "PowerCycle" => "On",
                    "ForceOff" | "GracefulShutdown" => "Off",
                    "PushPowerButton" if now == "On" => "Off",
                    "PushPowerButton" => "On",
                    _ => now.as_str(),
                }
                .to_owned();
                r["PowerState"] = json!(next);
                // A reset applies what waits in the system's settings object
                // (`@Redfish.Settings`), as a BMC does at the next boot.
                let settings = r
                    .get("@Redfish.Settings")
                    .and_then(|x| x.get("SettingsObject"))
                    .and_then(|x| x.get("@odata.id"))
                    .and_then(Value::as_str)
                    .map(norm);
                if let Some(pending) = settings.and_then(|sd| self.resources.get(&sd).cloned()) {
                    if let (Some(r), Some(boot)) =
                        (self.resources.get_mut(owner), pending.get("Boot").and_then(Value::as_object))
                    {
                        for (k, v) in boot.iter().filter(|(k, _)| !k.contains('@')) {
                            r["Boot"][k] = v.clone();
                        }
                    }
                }
            }
            // HPE iLO's OEM actions do what the standard ones do.
            "VirtualMedia.InsertMedia" | "HpeiLOVirtualMedia.InsertVirtualMedia" => {
                let Some(image) = get("Image") else {
                    return redfish_error(
                        400,
                        "ActionParameterMissing",
                        "The action InsertMedia requires the parameter Image.",
                    );
                };
                r["Image"] = image;
                r["Inserted"] = get("Inserted").unwrap_or(json!(true));
                r["WriteProtected"] = get("WriteProtected").unwrap_or(json!(true));
            }
            // Empties the service's Entries collection.
            "LogService.ClearLog" => {
                let entries = r.get("Entries").and_then(|e| e.get("@odata.id")).and_then(Value::as_str).map(norm);
                if let Some(coll) = entries.and_then(|p| self.resources.get_mut(&p)) {
                    let gone = members(coll);
                    coll["Members"] = json!([]);
                    coll["Members@odata.count"] = json!(0);
                    for m in gone {
                        self.resources.remove(&m);
                    }
                }
                return HttpResponse::empty(204);
            }
            "VirtualMedia.EjectMedia" | "HpeiLOVirtualMedia.EjectVirtualMedia" => {
                r["Image"] = Value::Null;
                r["Inserted"] = json!(false);
            }
            _ => {}
        }
        self.bump_etag(owner);
        HttpResponse::empty(204)
    }

    fn create_member(&mut self, coll: &str, body: Option<Value>) -> HttpResponse {
        let Some(mut body) = body.filter(Value::is_object) else {
            return redfish_error(400, "MalformedJSON", "POST to a collection needs a JSON object.");
        };
        let existing = self.resources.get(coll).map(members).unwrap_or_default();
        let next =
            existing.iter().filter_map(|m| m.rsplit('/').next().unwrap_or(m).parse::<u64>().ok()).max().unwrap_or(0)
                + 1;
        let path = format!("{coll}/{next}");
        strip_passwords(&mut body);
        body["@odata.id"] = json!(path);
        body["Id"] = json!(next.to_string());
        self.resources.insert(path.clone(), body.clone());
        if let Some(c) = self.resources.get_mut(coll) {
            add_member(c, &path);
        }
        HttpResponse::json(201, &body).with_header("location", path)
    }

    fn delete(&mut self, path: &str) -> HttpResponse {
        if self.resources.remove(path).is_none() {
            return redfish_error(
                404,
                "ResourceMissingAtURI",
                &format!("The resource at the URI {path} was not found."),
            );
        }
        self.tokens.retain(|_, loc| loc != path);
        for r in self.resources.values_mut() {
            remove_member(r, path);
        }
        HttpResponse::empty(204)
    }
}

fn add_member(coll: &mut Value, path: &str) {
    if let Some(m) = coll.get_mut("Members").and_then(Value::as_array_mut) {
        m.push(json!({"@odata.id": path}));
        let n = m.len();
        coll["Members@odata.count"] = json!(n);
    }
}

fn remove_member(coll: &mut Value, path: &str) {
    let Some(m) = coll.get_mut("Members").and_then(Value::as_array_mut) else { return };
    let before = m.len();
    m.retain(|x| x.get("@odata.id").and_then(Value::as_str).map(norm).as_deref() != Some(path));
    if m.len() != before {
        let n = m.len();
        coll["Members@odata.count"] = json!(n);
    }
}

/// A running mockup BMC on `https://127.0.0.1:PORT`; stops on `Drop`.
pub struct MockupServer {
    running: Running,
    state: Arc<Mutex<State>>,
    pki: TestPki,
    username: String,
    password: String,
    served: Arc<super::ServedCert>,
}

impl MockupServer {
    pub fn builder() -> MockupBuilder {
        MockupBuilder::default()
    }

    /// The DMTF public rackmount mockup with one Manager (`BMC`) and a
    /// CertificateService that advertises ReplaceCertificate: the BMC
    /// whose HTTPS certificate the certificate tests read and replace.
    pub async fn with_certificate_service() -> Result<MockupServer, HarnessError> {
        MockupServer::builder()
            .dir(super::fixtures::mockup_dir("dmtf-public-rackmount1"))?
            .resource("/redfish/v1/Managers", json!({"Members": [{"@odata.id": "/redfish/v1/Managers/BMC"}]}))
            .certificate_service(true)
            .start()
            .await
    }

    pub fn addr(&self) -> SocketAddr {
        self.running.addr
    }

    pub fn base_url(&self) -> String {
        format!("https://127.0.0.1:{}", self.running.addr.port())
    }

    /// The DER of the certificate the server presents now.
    pub fn served_certificate(&self) -> Vec<u8> {
        self.served.der()
    }

    /// The CA that signed the server certificate.
    pub fn ca_pem(&self) -> &str {
        &self.pki.ca_pem
    }

    /// A target for this server: inline credentials, its CA as `tls.ca_pem`.
    pub fn target(&self) -> BmcTarget {
        loopback_target(self.running.addr, &self.username, &self.password, &self.pki.ca_pem)
    }

    pub fn credentials(&self) -> ResolvedCredentials {
        credentials(&self.username, &self.password)
    }

    /// Every request so far, in arrival order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        lock(&self.state).requests.clone()
    }

    /// Requests with this method and path.
    pub fn requests_to(&self, method: &str, path: &str) -> Vec<RecordedRequest> {
        self.requests().into_iter().filter(|r| r.is(method, path)).collect()
    }

    /// Requests that changed something (neither GET nor HEAD).
    pub fn writes(&self) -> Vec<RecordedRequest> {
        self.requests().into_iter().filter(|r| r.method != "GET" && r.method != "HEAD").collect()
    }

    pub fn clear_requests(&self) {
        lock(&self.state).requests.clear();
    }

    /// The current state of a resource.
    pub fn resource(&self, path: &str) -> Option<Value> {
        lock(&self.state).resources.get(&norm(path)).cloned()
    }

    pub fn set_resource(&self, path: &str, value: Value) {
        lock(&self.state).resources.insert(norm(path), value);
    }

    /// Merge `patch` into a resource (test setup; no ETag bump, nothing recorded).
    pub fn merge_resource(&self, path: &str, patch: &Value) {
        // A test's change of a resource: arrays are replaced whole (a PATCH
        // from a client updates arrays of objects member by member).
        if let Some(r) = lock(&self.state).resources.get_mut(&norm(path)) {
            merge(r, patch, false);
        }
    }

    /// How many update requests (`POST` to the SimpleUpdate target) arrived.
    pub fn update_requests(&self) -> usize {
        self.requests_to("POST", SIMPLE_UPDATE).len()
    }

    /// Every multipart push received, in order.
    pub fn pushes(&self) -> Vec<PushReceived> {
        lock(&self.state).pushes.clone()
    }

    /// How many multipart push requests (`POST` to [`MULTIPART_PUSH`]) arrived.
    pub fn push_requests(&self) -> usize {
        self.requests_to("POST", MULTIPART_PUSH).len()
    }

    pub fn push_fault(&self, fault: Fault) {
        lock(&self.state).faults.push(fault);
    }

    pub fn clear_faults(&self) {
        lock(&self.state).faults.clear();
    }

    /// Forget every session token (as a BMC does when sessions time out).
    pub fn expire_sessions(&self) {
        lock(&self.state).tokens.clear();
    }

    /// Session tokens currently valid.
    pub fn active_sessions(&self) -> usize {
        lock(&self.state).tokens.len()
    }
}

/// The `@odata.id`s of a collection's `Members` (the double's own reading,
/// independent of the provider's parser).
fn members(v: &Value) -> Vec<String> {
    v.get("Members")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter().filter_map(|m| m.get("@odata.id")?.as_str().map(|s| s.trim_end_matches('/').to_owned())).collect()
        })
        .unwrap_or_default()
}
