//! `AmtFixtureServer`: an in-test Intel AMT peer.
//!
//! No AMT emulator exists, so this server plays one from real captures
//! (`<fixtures>/amt/`, see its SOURCES.md). It listens on a free loopback
//! port, enforces HTTP Digest exactly as AMT does (see [`DigestMode`]),
//! routes each SOAP request by action URI + ResourceURI + selectors, checks
//! the request body (PowerState value, ManagedElement reference, boot
//! source InstanceID, role…), answers with the captured envelopes (or
//! spec-built ones where no capture exists: see the table below), keeps
//! power and boot state, and records every request. 401 pages reuse the
//! captured AMT 15 body and header layout; the simulated AMT's modelled
//! rules (available power transitions, one-time boot consumption, option
//! conflicts with a forced boot source) follow the Intel AMT SDK.
//!
//! ```no_run
//! # async fn demo() {
//! use bmcfleet_testing::amt::{AmtEvent, AmtFixtureServer, ServerOptions};
//! let server = AmtFixtureServer::start_for_test(ServerOptions::default()).await;
//! let target = server.target(); // BmcTarget with inline credentials (and CA when TLS)
//! // … run the provider against `target` …
//! assert!(server.events().iter().any(|e| matches!(e, AmtEvent::Booted { .. })));
//! # }
//! ```
//!
//! # Where each answer comes from
//!
//! | request                                           | answer |
//! |---------------------------------------------------|--------|
//! | Get `AMT_GeneralSettings`                         | captured `amt/general/get.xml` |
//! | Get `AMT_BootCapabilities`                        | captured `amt/boot/capabilities/get.xml` |
//! | Get `AMT_BootSettingData`                         | captured `amt/boot/settingdata/get.xml`, values from state |
//! | Put `AMT_BootSettingData`                         | spec-built PutResponse (DSP0226 §7.5): the captured instance with the new values |
//! | Enumerate `CIM_AssociatedPowerManagementService`  | captured `enumerate.xml` (its context is honoured) |
//! | Pull `CIM_AssociatedPowerManagementService`       | captured `pull.xml`, `PowerState`/`AvailableRequestedPowerStates` from state |
//! | `RequestPowerStateChange`                         | captured response; `ReturnValue` 2 for a transition AMT does not offer in the current state |
//! | `ChangeBootOrder`, `SetBootConfigRole`            | captured responses |
//! | Enumerate/Pull `CIM_SoftwareIdentity`, `CIM_ComputerSystemPackage`, `CIM_OrderedComponent`; Get `CIM_Chassis` | spec-built (Intel AMT SDK class reference), AMT 15.0.23 values; `CIM_OrderedComponent` lists the captured `CIM_BootSourceSetting` InstanceIDs |
//! | unknown ResourceURI                               | captured `faults/DestinationUnreachable.xml` (HTTP 400) |
//! | unknown action, bad selectors, bad body, missing header | spec-built DSP0226 faults (`wsa:ActionNotSupported`, `wsman:InvalidSelectors`, `wsman:InvalidParameter`, `wxf:InvalidRepresentation`, `wsa:MessageInformationHeaderRequired`, `wsen:InvalidEnumerationContext`) |
//! | 401                                               | captured AMT 15 page and header layout, fresh nonce |
//!
//! Spec-built answers follow DMTF DSP0226 (WS-Management), DSP0227 (CIM
//! binding) and the Intel AMT SDK class reference, in AMT's envelope layout.
//!
//! Failure behaviours are injected per operation with
//! [`AmtFixtureServer::inject`]: faults (captured or spec-built), method
//! return values, malformed XML, stalls, raw captured HTTP transcripts.

mod auth;
mod device;
mod fixtures;
pub mod http;
mod soap;
mod tls;

pub use auth::{DigestMode, DigestSummary};
pub use device::{CHASSIS_MANUFACTURER, CHASSIS_MODEL, CHASSIS_SERIAL, PLATFORM_GUID};
pub use fixtures::{fixtures_root, workspace_root, ENV as FIXTURES_ENV};
pub use tls::unrelated_ca_pem;

use auth::{AuthResult, DigestServer};
use bmcfleet_provider::ResolvedCredentials;
use bmcfleet_schema::{BmcTarget, Credentials, Protocol, Secret, TlsOptions};
use device::{Device, Reply};
use http::{Framing, Transcript};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;
use tokio::sync::watch;

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    /// The fixtures folder is absent: tests should skip, saying this.
    #[error("AMT fixtures missing: {0}")]
    FixturesMissing(String),
    #[error("cannot read fixture {0}: {1}")]
    FixtureFile(String, String),
    #[error("a captured fixture is unusable: {0}")]
    FixtureContent(String),
    #[error("test TLS setup failed: {0}")]
    Tls(String),
    #[error("cannot listen on loopback: {0}")]
    Bind(std::io::Error),
}

/// The CIM/AMT classes the server knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Class {
    GeneralSettings,
    BootCapabilities,
    BootSettingData,
    AssociatedPowerManagementService,
    SoftwareIdentity,
    ComputerSystemPackage,
    Chassis,
    OrderedComponent,
    PowerManagementService,
    BootConfigSetting,
    BootService,
}

impl Class {
    const ALL: [Class; 11] = [
        Class::GeneralSettings,
        Class::BootCapabilities,
        Class::BootSettingData,
        Class::AssociatedPowerManagementService,
        Class::SoftwareIdentity,
        Class::ComputerSystemPackage,
        Class::Chassis,
        Class::OrderedComponent,
        Class::PowerManagementService,
        Class::BootConfigSetting,
        Class::BootService,
    ];

    /// The class name (`AMT_GeneralSettings`, `CIM_Chassis`…).
    pub fn name(self) -> &'static str {
        match self {
            Class::GeneralSettings => "AMT_GeneralSettings",
            Class::BootCapabilities => "AMT_BootCapabilities",
            Class::BootSettingData => "AMT_BootSettingData",
            Class::AssociatedPowerManagementService => "CIM_AssociatedPowerManagementService",
            Class::SoftwareIdentity => "CIM_SoftwareIdentity",
            Class::ComputerSystemPackage => "CIM_ComputerSystemPackage",
            Class::Chassis => "CIM_Chassis",
            Class::OrderedComponent => "CIM_OrderedComponent",
            Class::PowerManagementService => "CIM_PowerManagementService",
            Class::BootConfigSetting => "CIM_BootConfigSetting",
            Class::BootService => "CIM_BootService",
        }
    }

    pub fn uri(self) -> String {
        bmcfleet_amt::wsman::ns::class_uri(self.name())
    }

    pub fn from_uri(uri: &str) -> Option<Class> {
        Class::ALL.into_iter().find(|c| c.uri() == uri)
    }
}

/// One operation the server understands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    Get(Class),
    Put(Class),
    Enumerate(Class),
    Pull(Class),
    RequestPowerStateChange,
    ChangeBootOrder,
    SetBootConfigRole,
}

/// Namespace of an injected fault subcode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultNs {
    /// `wsa:` (WS-Addressing)
    Addressing,
    /// `wsman:` (DSP0226)
    WsMan,
    /// `wsen:` (WS-Enumeration)
    Enumeration,
    /// `wxf:` (WS-Transfer)
    Transfer,
}

impl FaultNs {
    fn uri(self) -> &'static str {
        use bmcfleet_amt::wsman::ns;
        match self {
            FaultNs::Addressing => ns::WSA,
            FaultNs::WsMan => ns::WSMAN,
            FaultNs::Enumeration => ns::WSEN,
            FaultNs::Transfer => ns::WXF,
        }
    }
}

/// A behaviour for the next request of one [`Op`] (after authentication).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Injection {
    /// The captured `wsa:DestinationUnreachable` fault, HTTP 400.
    DestinationUnreachable,
    /// A captured HTTP response transcript replayed byte for byte; the path
    /// is relative to `amt/` (e.g. `http/amt15-400-chunked-fault-AlreadyExists.http`).
    Transcript(String),
    /// A spec-built fault with this subcode and reason, HTTP 400.
    Fault { namespace: FaultNs, subcode: String, reason: String },
    /// The captured method response with this `ReturnValue` (methods only).
    ReturnValue(u32),
    /// The normal answer cut in half: not well-formed XML, HTTP 200.
    MalformedXml,
    /// An HTML page with HTTP 200 instead of SOAP.
    NotSoap,
    /// Read the request and never answer (until the client hangs up).
    Stall,
    /// Send the head and the first chunk, then never finish.
    StallMidBody,
    /// This HTTP status with an empty body.
    HttpStatus(u16),
    /// A PullResponse (Pull only) holding `items` empty instances of the
    /// class and a context to pull from again, without EndOfSequence.
    PullPage { items: usize },
    /// This document, as it is, with HTTP 200 (what a hostile AMT may write).
    Document(String),
}

/// What the simulated AMT did, in order (for sequence assertions).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AmtEvent {
    BootSettingsPut {
        bios_setup: bool,
        safe_mode: bool,
        use_ider: bool,
        use_sol: bool,
    },
    /// `ChangeBootOrder` accepted; `None` cleared the forced source.
    BootOrderChanged {
        source: Option<String>,
    },
    BootConfigRoleSet {
        role: u32,
    },
    /// `RequestPowerStateChange` (accepted when `return_value` is 0).
    PowerStateChange {
        requested: u16,
        return_value: u32,
    },
    /// The host booted (power on, cycle, reset); `source` is the forced
    /// boot source used, `None` for the default boot order.
    Booted {
        source: Option<String>,
        bios_setup: bool,
        safe_mode: bool,
    },
}

/// The simulated boot configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BootState {
    pub source: Option<String>,
    /// Armed for the next boot (`SetBootConfigRole` 1).
    pub role_next: bool,
    pub bios_setup: bool,
    pub safe_mode: bool,
}

/// One HTTP request as the server saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordedRequest {
    pub method: String,
    pub path: String,
    /// Digest credentials sent (the response hash is not kept).
    pub digest: Option<DigestSummary>,
    /// HTTP status answered (0 when the server stalled).
    pub status: u16,
    pub action: Option<String>,
    pub resource_uri: Option<String>,
    pub selectors: Vec<(String, String)>,
    /// The operation it was routed to.
    pub op: Option<Op>,
}

/// Server settings.
#[derive(Clone, Debug)]
pub struct ServerOptions {
    pub username: String,
    pub password: String,
    /// AMT realms look like `Digest:<32 hex>`; defaults to the captured one.
    pub realm: String,
    pub digest: DigestMode,
    /// Serve TLS with a generated CA-signed certificate.
    pub tls: bool,
    /// Initial `PowerState` (2 = on, 8 = off).
    pub power_state: u16,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            username: "admin".into(),
            password: "P@ssw0rd-AMT1".into(),
            realm: "Digest:F3EB554784E729164447A89F60B641C5".into(),
            digest: DigestMode::Md5,
            tls: false,
            power_state: 2,
        }
    }
}

struct Inner {
    device: Device,
    digest: DigestServer,
    requests: Vec<RecordedRequest>,
}

/// Shared between the server handle and the connection tasks.
struct Shared {
    inner: Mutex<Inner>,
    /// HTML body of the captured AMT 15 401 page.
    unauthorized_html: Vec<u8>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panicking test thread must not wedge the server for the others.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// What a connection does next.
enum Outcome {
    Send { bytes: Vec<u8>, close: bool },
    Stall { first: Vec<u8> },
}

pub struct AmtFixtureServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    shutdown: watch::Sender<bool>,
    accept_task: Option<tokio::task::JoinHandle<()>>,
    ca_pem: Option<String>,
    options: ServerOptions,
    fixtures_dir: PathBuf,
}

impl AmtFixtureServer {
    /// Start on `127.0.0.1:0`.
    pub async fn start(options: ServerOptions) -> Result<AmtFixtureServer, HarnessError> {
        let root = fixtures_root()?;
        let fx = fixtures::Fixtures::load(&root)?;
        let unauthorized_html = Transcript::parse(&fx.http_401_amt15)
            .map_err(|e| HarnessError::FixtureContent(format!("amt15 401 transcript: {e}")))?
            .body;
        let device = Device::new(fx, options.power_state).map_err(HarnessError::FixtureContent)?;
        let digest = DigestServer::new(
            options.realm.clone(),
            options.username.clone(),
            options.password.clone(),
            options.digest,
        );
        let shared =
            Arc::new(Shared { inner: Mutex::new(Inner { device, digest, requests: Vec::new() }), unauthorized_html });
        let tls = if options.tls { Some(tls::generate()?) } else { None };
        let listener = TcpListener::bind("127.0.0.1:0").await.map_err(HarnessError::Bind)?;
        let addr = listener.local_addr().map_err(HarnessError::Bind)?;
        let (tx, rx) = watch::channel(false);
        let acceptor = tls.as_ref().map(|t| tokio_rustls::TlsAcceptor::from(t.server_config.clone()));
        let accept_task = tokio::spawn(accept_loop(listener, acceptor, shared.clone(), rx));
        Ok(AmtFixtureServer {
            addr,
            shared,
            shutdown: tx,
            accept_task: Some(accept_task),
            ca_pem: tls.map(|t| t.ca_pem),
            options,
            fixtures_dir: root,
        })
    }

    /// [`start`](Self::start), panicking with the reason when the server
    /// cannot start (the fixtures are part of the repository).
    pub async fn start_for_test(options: ServerOptions) -> AmtFixtureServer {
        Self::start(options).await.unwrap_or_else(|e| panic!("AmtFixtureServer failed to start: {e}"))
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The fixtures folder in use.
    pub fn fixtures_dir(&self) -> &std::path::Path {
        &self.fixtures_dir
    }

    /// PEM of the CA that signed the TLS certificate (TLS mode only).
    pub fn ca_pem(&self) -> Option<&str> {
        self.ca_pem.as_deref()
    }

    /// A target for this server: `127.0.0.1:<port>`, protocol `amt`, inline
    /// credentials, and `tls.ca_pem` in TLS mode (`tls.allow_plain_http` in HTTP mode).
    pub fn target(&self) -> BmcTarget {
        BmcTarget {
            address: format!("127.0.0.1:{}", self.addr.port()).parse().expect("loopback address parses"),
            protocol: Protocol::Amt,
            credentials: Credentials::Inline {
                username: self.options.username.clone(),
                password: Secret::new(self.options.password.clone()),
            },
            // Plain HTTP is what an operator must allow for the machine.
            tls: TlsOptions {
                insecure: false,
                allow_plain_http: self.ca_pem.is_none(),
                ca_pem: self.ca_pem.clone(),
                pin_sha256: None,
            },
            system_id: None,
            options: Default::default(),
        }
    }

    /// The credentials the server accepts, as the worker would resolve them.
    pub fn credentials(&self) -> ResolvedCredentials {
        ResolvedCredentials {
            username: self.options.username.clone(),
            password: Secret::new(self.options.password.clone()),
        }
    }

    /// Current `PowerState` (CIM value: 2 on, 8 off…).
    pub fn power_state(&self) -> u16 {
        self.shared.lock().device.power
    }

    pub fn set_power_state(&self, value: u16) {
        self.shared.lock().device.power = value;
    }

    pub fn boot_state(&self) -> BootState {
        self.shared.lock().device.boot_state()
    }

    /// What the simulated AMT did, in order.
    pub fn events(&self) -> Vec<AmtEvent> {
        self.shared.lock().device.events.clone()
    }

    /// Every HTTP request received, in order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared.lock().requests.clone()
    }

    /// The operations of the authenticated requests, in order.
    pub fn ops(&self) -> Vec<Op> {
        self.shared.lock().requests.iter().filter_map(|r| r.op).collect()
    }

    /// Forget recorded requests and events.
    pub fn clear_log(&self) {
        let mut g = self.shared.lock();
        g.requests.clear();
        g.device.events.clear();
    }

    /// Expire every nonce issued so far: the next request using one gets
    /// `401` with `stale="true"`.
    pub fn expire_nonces(&self) {
        self.shared.lock().digest.expire_all();
    }

    /// Forget every nonce issued so far (a firmware restart): the next
    /// request using one gets `401` with `stale="false"`.
    pub fn forget_nonces(&self) {
        self.shared.lock().digest.forget_all();
    }

    /// Apply `injection` to the next request routed to `op` (once; several
    /// injections for one op apply in order).
    pub fn inject(&self, op: Op, injection: Injection) {
        self.shared.lock().device.injections.push((op, injection));
    }

    /// Stop accepting and end every connection (also done on drop).
    pub async fn shutdown(mut self) {
        let _ = self.shutdown.send(true);
        if let Some(t) = self.accept_task.take() {
            let _ = t.await;
        }
    }
}

impl Drop for AmtFixtureServer {
    fn drop(&mut self) {
        let _ = self.shutdown.send(true);
    }
}

async fn accept_loop(
    listener: TcpListener,
    acceptor: Option<tokio_rustls::TlsAcceptor>,
    shared: Arc<Shared>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        let (tcp, _) = tokio::select! {
            r = listener.accept() => match r {
                Ok(c) => c,
                Err(_) => continue,
            },
            _ = shutdown.changed() => return,
        };
        let shared = shared.clone();
        let rx = shutdown.clone();
        let acceptor = acceptor.clone();
        tokio::spawn(async move {
            match acceptor {
                None => serve_connection(tcp, shared, rx).await,
                Some(a) => {
                    // A client that distrusts the certificate aborts here.
                    if let Ok(tls) = a.accept(tcp).await {
                        serve_connection(tls, shared, rx).await;
                    }
                }
            }
        });
    }
}

async fn serve_connection<S: AsyncRead + AsyncWrite + Unpin>(
    stream: S,
    shared: Arc<Shared>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut conn = BufReader::new(stream);
    loop {
        let req = tokio::select! {
            r = http::read_request(&mut conn) => r,
            _ = shutdown.changed() => return,
        };
        let req = match req {
            Ok(Some(r)) => r,
            Ok(None) => return,
            Err(_) => {
                let bytes =
                    http::render(400, "Bad Request", &[("Connection", "close".into())], b"", Framing::ContentLength);
                let _ = http::write_all(conn.get_mut(), &bytes).await;
                return;
            }
        };
        match process(&shared, &req) {
            Outcome::Send { bytes, close } => {
                if http::write_all(conn.get_mut(), &bytes).await.is_err() {
                    return;
                }
                if close || req.wants_close() {
                    let _ = conn.get_mut().shutdown().await;
                    return;
                }
            }
            Outcome::Stall { first } => {
                if !first.is_empty() && http::write_all(conn.get_mut(), &first).await.is_err() {
                    return;
                }
                tokio::select! {
                    _ = http::until_closed(&mut conn) => {}
                    _ = shutdown.changed() => {}
                }
                return;
            }
        }
    }
}

fn soap_headers(close: bool) -> Vec<(&'static str, String)> {
    let mut h = vec![
        ("Date", http::http_date()),
        ("Server", http::AMT_SERVER.to_owned()),
        ("X-Frame-Options", "DENY".to_owned()),
        ("Content-Type", "application/soap+xml; charset=UTF-8".to_owned()),
    ];
    if close {
        h.push(("Connection", "close".to_owned()));
    }
    h
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        404 => "Not Found",
        405 => "Method Not Allowed",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Status",
    }
}

fn process(shared: &Shared, req: &http::HttpRequest) -> Outcome {
    let mut g = shared.lock();
    let mut record = RecordedRequest {
        method: req.method.clone(),
        path: req.target.clone(),
        digest: None,
        status: 0,
        action: None,
        resource_uri: None,
        selectors: Vec::new(),
        op: None,
    };
    if req.target != bmcfleet_amt::WSMAN_PATH || req.method != "POST" {
        let status = if req.target != bmcfleet_amt::WSMAN_PATH { 404 } else { 405 };
        record.status = status;
        g.requests.push(record);
        let bytes =
            http::render(status, reason(status), &[("Server", http::AMT_SERVER.into())], b"", Framing::ContentLength);
        return Outcome::Send { bytes, close: true };
    }
    match g.digest.check(&req.method, &req.target, req.header("authorization")) {
        AuthResult::Challenge { stale, seen } => {
            record.digest = seen;
            record.status = 401;
            g.requests.push(record);
            let mut headers: Vec<(&str, String)> =
                g.digest.challenge(stale).into_iter().map(|c| ("WWW-Authenticate", c)).collect();
            headers.push(("Content-Type", "text/html".into()));
            headers.push(("Server", http::AMT_SERVER.into()));
            headers.push(("Connection", "close".into()));
            let bytes = http::render(401, "Unauthorized", &headers, &shared.unauthorized_html, Framing::ContentLength);
            return Outcome::Send { bytes, close: true };
        }
        AuthResult::Ok(summary) => record.digest = Some(summary),
    }
    let Inner { device, requests, .. } = &mut *g;
    let reply = device.handle(&req.body, &mut record);
    record.status = reply.status();
    requests.push(record);
    match reply {
        Reply::Soap { status, body } => {
            let close = status >= 400;
            let bytes = http::render(status, reason(status), &soap_headers(close), body.as_bytes(), Framing::Chunked);
            Outcome::Send { bytes, close }
        }
        Reply::Raw(bytes) => {
            let close = Transcript::parse(&bytes)
                .map(|t| t.header("Connection").is_some_and(|c| c.eq_ignore_ascii_case("close")))
                .unwrap_or(true);
            Outcome::Send { bytes, close }
        }
        Reply::Http(status) => {
            let bytes = http::render(
                status,
                reason(status),
                &[("Server", http::AMT_SERVER.into()), ("Connection", "close".into())],
                b"",
                Framing::ContentLength,
            );
            Outcome::Send { bytes, close: true }
        }
        Reply::Stall => Outcome::Stall { first: Vec::new() },
        Reply::StallMidBody(body) => {
            let full = http::render(200, "OK", &soap_headers(false), body.as_bytes(), Framing::Chunked);
            // Everything up to and including the first chunk.
            let head_end = full.windows(4).position(|w| w == b"\r\n\r\n").map_or(full.len(), |p| p + 4);
            let first_chunk = (body.len().min(http::AMT_CHUNK)) + 4 + 2 + 2;
            let cut = (head_end + first_chunk).min(full.len());
            Outcome::Stall { first: full[..cut].to_vec() }
        }
    }
}
