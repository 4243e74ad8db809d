//! RMCP+ transport: IPMI 2.0 sessions written from the specification, all of
//! a worker's sessions multiplexed over a few shared tokio UDP sockets.
//!
//! # Shape
//! - [`RmcpSockets`] (`mux`): a small fixed set of UDP sockets per address
//!   family, shared by every session of a connector; one receive task per
//!   socket routes datagrams by (peer, our session id). No thread and no
//!   socket per BMC; a live session is a route, a bounded queue and its
//!   state (keys, sequence numbers).
//! - `wire`: framing of RMCP+ packets, the handshake payloads and IPMI LAN
//!   messages; `crypto`: cipher suites 1, 2, 3 and 17 on RustCrypto.
//! - [`RmcpTransport`] (this module): the session — probe, handshake,
//!   privilege, requests with retransmits and reply matching, keep-alive,
//!   Close Session.
//!
//! # A session's life
//! 1. **Probe**: session-less Get Channel Authentication Capabilities
//!    ([`crate::probe`]) on a short-lived connected socket (a closed port is
//!    refused at once; at most [`MAX_CONCURRENT_PROBES`] at a time per
//!    connector, so descriptors stay bounded, each for one round of
//!    attempts before a silent BMC's probe goes back in line). BMCs without IPMI 2.0 are
//!    refused: bmcfleet never opens an IPMI 1.5 session.
//! 2. **Handshake** (§13.17–13.23): Open Session with each cipher suite of
//!    the configured order ([`RmcpConfig::cipher_suites`], default 17 then
//!    3) until the BMC accepts one; a BMC that refuses a suite with an
//!    algorithm or cipher-suite status moves on to the next. A BMC that
//!    answers with other algorithms than proposed (pyghmi, VirtualBMC:
//!    suite 3 to any proposal) is followed only into a suite the list
//!    allows; otherwise that proposal counts as refused. RAKP 1 asks for
//!    the configured [`Privilege`] with username+privilege lookup, then —
//!    if the BMC has no entry for that name at exactly that privilege —
//!    with name-only lookup (what ipmitool and FreeIPMI use); the
//!    BMC's RAKP 2 code is verified (a wrong password is `auth_failed`
//!    before anything else is sent), RAKP 3 proves ours, RAKP 4's integrity
//!    check value is verified. Each handshake message is retransmitted on
//!    loss within the deadline.
//! 3. **Set Session Privilege Level** to the configured level (sessions
//!    start at User).
//! 4. **Requests**: every message is authenticated (HMAC-SHA1-96 or
//!    HMAC-SHA256-128) and encrypted (AES-CBC-128) as the suite says; a
//!    reply is believed only after its AuthCode checks out, and the
//!    encryption/authentication flags must be the session's (no downgrade).
//!    Replies are matched by IPMB sequence number, netfn and command; the
//!    BMC's session sequence numbers must be new (a 32-entry window:
//!    duplicates and replays are dropped). An idempotent request
//!    ([`Retry::Safe`]) is retransmitted `retries` times, `attempt_timeout`
//!    apart, with the same IPMB sequence number (so the BMC can recognise a
//!    duplicate), then the session is re-established once and the request
//!    sent again, all within the deadline. A non-idempotent request
//!    ([`Retry::Once`]) is sent exactly once: a missing reply is `timeout`
//!    with its effect unknown.
//! 5. **Keep-alive**: a timer task per session sends Get Device ID after
//!    `keepalive_interval` idle (skipped while a request is in flight);
//!    an unanswered keep-alive drops the session (the next request opens a
//!    new one).
//! 6. **Close Session** (App 0x3C, our BMC session id) on `close()` or drop.
//!
//! Every send — request, retransmit, keep-alive, re-established session,
//! Close Session — first asks the worker's fence ([`SendGate`]): a worker
//! that lost a BMC's lease sends nothing more to it.
//!
//! A BMC is untrusted: every length and field of what it sends is checked
//! (`wire`), a datagram from another address never reaches the session,
//! unverifiable datagrams are dropped (counted in
//! [`RmcpSockets::dropped`]), and nothing it sends can panic the worker.

mod crypto;
mod mux;
pub(crate) mod sol;
mod wire;

pub use crypto::CipherSuite;
pub use mux::RmcpSockets;

use crate::error::{TransportError, TransportErrorKind};
use crate::probe;
use crate::transport::{Request, Response, Retry, Transport};
use async_trait::async_trait;
use bmcfleet_provider::SendGate;
use bmcfleet_schema::Secret;
use crypto::{kuid, random16, SessionKeys};
use mux::Endpoint;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;
use tokio::sync::Mutex;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// Concurrent presence probes per connector (each holds one socket briefly).
pub const MAX_CONCURRENT_PROBES: usize = 256;

/// A session privilege level (the schema's, so a machine's option is used as is).
pub use bmcfleet_schema::IpmiPrivilege as Privilege;

/// Timing and security choices of an RMCP+ session.
#[derive(Clone, Debug)]
pub struct RmcpConfig {
    /// How long to wait for a reply before retransmitting. The IPMI spec
    /// suggests retrying after about a second on a LAN.
    pub attempt_timeout: Duration,
    /// Retransmits of an idempotent request on one session before it is
    /// re-established.
    pub retries: u32,
    /// Idle time after which the session sends a keep-alive. BMCs expire idle
    /// sessions after 30–60 s (`ipmi_sim`: about 30 s).
    pub keepalive_interval: Duration,
    /// Cipher suites to offer, in this order (default 17, then 3).
    pub cipher_suites: Vec<CipherSuite>,
    /// The privilege the session logs in with and raises itself to.
    pub privilege: Privilege,
}

impl Default for RmcpConfig {
    fn default() -> Self {
        RmcpConfig {
            attempt_timeout: Duration::from_secs(1),
            retries: 2,
            keepalive_interval: Duration::from_secs(10),
            cipher_suites: vec![CipherSuite::S17, CipherSuite::S3],
            privilege: Privilege::Administrator,
        }
    }
}

const NETFN_APP: u8 = 0x06;
const CMD_GET_DEVICE_ID: u8 = 0x01;
const CMD_COLD_RESET: u8 = 0x02;
const CMD_WARM_RESET: u8 = 0x03;
const CMD_SET_SESSION_PRIVILEGE: u8 = 0x3B;
const CMD_CLOSE_SESSION: u8 = 0x3C;

/// Counters shared by a transport, its keep-alive task and tests.
#[derive(Debug, Default)]
struct Stats {
    handshakes: AtomicU64,
    keepalives: AtomicU64,
    /// False after a fatal transport error, true again after a success.
    unhealthy: AtomicBool,
    /// Id of the cipher suite of the current session (0: none yet).
    suite: AtomicU8,
    /// Id of the suite proposed when the BMC answered with the other
    /// (allowed) suite of [`Stats::suite`] instead (0: it took the proposal).
    proposed: AtomicU8,
}

/// An RMCP+ session to one BMC; see the module docs.
pub struct RmcpTransport {
    engine: Arc<Mutex<Engine>>,
    stats: Arc<Stats>,
    keepalive: JoinHandle<()>,
    /// Set by `close()`: later calls fail with `Closed`.
    closed: bool,
    peer: SocketAddr,
    privilege: Privilege,
}

impl RmcpTransport {
    /// Opens an authenticated session to `peer` over `sockets`, failing
    /// with a typed error (auth, unreachable, unsupported, permission) if
    /// that is not possible before `deadline`.
    pub async fn connect(
        sockets: &RmcpSockets,
        peer: SocketAddr,
        username: String,
        password: Secret,
        config: impl Into<Arc<RmcpConfig>>,
        deadline: Instant,
        gate: Option<Arc<dyn SendGate>>,
    ) -> Result<RmcpTransport, TransportError> {
        let stats = Arc::new(Stats::default());
        let config: Arc<RmcpConfig> = config.into();
        let privilege = config.privilege;
        let mut engine = Engine {
            peer,
            sockets: sockets.clone(),
            username,
            password,
            config,
            session: None,
            stats: stats.clone(),
            gate,
        };
        engine.establish(deadline).await?;
        let interval = engine.config.keepalive_interval;
        let engine = Arc::new(Mutex::new(engine));
        let keepalive = tokio::spawn(keepalive(Arc::downgrade(&engine), interval));
        Ok(RmcpTransport { engine, stats, keepalive, closed: false, peer, privilege })
    }

    /// How many RMCP+ handshakes this transport has done.
    pub fn handshakes(&self) -> u64 {
        self.stats.handshakes.load(Ordering::Relaxed)
    }

    /// How many keep-alives the BMC has answered.
    pub fn keepalives(&self) -> u64 {
        self.stats.keepalives.load(Ordering::Relaxed)
    }

    /// The cipher suite of the current (or last) session.
    pub fn cipher_suite(&self) -> Option<CipherSuite> {
        CipherSuite::from_id(self.stats.suite.load(Ordering::Relaxed))
    }

    /// When the BMC answered a proposal with another suite of the
    /// machine's list (and the session uses that one): the suite proposed.
    /// `None` when the BMC took the suite proposed.
    pub fn answered_other_than(&self) -> Option<CipherSuite> {
        CipherSuite::from_id(self.stats.proposed.load(Ordering::Relaxed))
    }

    /// The privilege the session runs at.
    pub fn privilege(&self) -> Privilege {
        self.privilege
    }

    /// The BMC's socket address.
    pub fn peer(&self) -> SocketAddr {
        self.peer
    }

    /// Takes the established session out of this transport for a payload
    /// of its own (SOL): the keep-alive stops and the transport is closed
    /// without a Close Session (the new owner closes the session).
    async fn detach(mut self) -> Result<Detached, TransportError> {
        self.keepalive.abort();
        self.closed = true;
        let mut engine = self.engine.lock().await;
        let session = engine
            .session
            .take()
            .ok_or_else(|| engine.error(TransportErrorKind::Closed, "no established session to carry the payload"))?;
        Ok(Detached {
            session,
            gate: engine.gate.clone(),
            config: engine.config.clone(),
            peer: engine.peer,
            suite: self.cipher_suite(),
        })
    }
}

/// An established session taken out of its transport ([`RmcpTransport::detach`]).
struct Detached {
    session: Session,
    gate: Option<Arc<dyn SendGate>>,
    config: Arc<RmcpConfig>,
    peer: SocketAddr,
    suite: Option<CipherSuite>,
}

impl Drop for RmcpTransport {
    fn drop(&mut self) {
        self.keepalive.abort();
        if self.closed {
            return;
        }
        // Close the BMC session in the background: a dropped session must
        // not hold one of the BMC's few session slots until it expires.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let engine = self.engine.clone();
            runtime.spawn(async move { engine.lock().await.close_session().await });
        }
    }
}

#[async_trait]
impl Transport for RmcpTransport {
    async fn call(&mut self, deadline: Instant, request: &Request) -> Result<Response, TransportError> {
        if self.closed {
            return Err(TransportError::new(TransportErrorKind::Closed, format!("{}: session closed", self.peer)));
        }
        let result =
            tokio::time::timeout_at(deadline, async { self.engine.lock().await.call(request, deadline).await })
                .await
                .unwrap_or_else(|_| {
                    Err(TransportError::new(
                        TransportErrorKind::DeadlineExceeded,
                        format!("{}: the deadline passed before the BMC answered", self.peer),
                    ))
                });
        match &result {
            Ok(_) => self.stats.unhealthy.store(false, Ordering::Relaxed),
            Err(e) if e.is_fatal() => self.stats.unhealthy.store(true, Ordering::Relaxed),
            Err(_) => {}
        }
        result
    }

    fn is_healthy(&self) -> bool {
        !self.closed && !self.stats.unhealthy.load(Ordering::Relaxed)
    }

    fn privilege(&self) -> Privilege {
        self.privilege
    }

    fn cipher_suite(&self) -> Option<u8> {
        RmcpTransport::cipher_suite(self).map(CipherSuite::id)
    }

    async fn close(&mut self) {
        if self.closed {
            return;
        }
        self.closed = true;
        self.keepalive.abort();
        // Close Session is one short exchange; don't hang a worker on a dead BMC.
        let _ = tokio::time::timeout(Duration::from_secs(3), async { self.engine.lock().await.close_session().await })
            .await;
    }
}

/// Sends keep-alives while the session idles; ends with the transport.
async fn keepalive(engine: Weak<Mutex<Engine>>, interval: Duration) {
    let mut due = Instant::now() + interval;
    loop {
        tokio::time::sleep_until(due).await;
        let Some(engine) = engine.upgrade() else { return };
        // A request in flight is activity enough.
        let Ok(mut engine) = engine.try_lock() else {
            due = Instant::now() + interval;
            continue;
        };
        due = match engine.session.as_ref().map(|s| s.last_used + interval) {
            Some(at) if at > Instant::now() => at,
            Some(_) => {
                // Boxed: this task lives as long as the session, and its
                // size between keep-alives should not be the exchange's.
                Box::pin(engine.keepalive()).await;
                Instant::now() + interval
            }
            None => Instant::now() + interval,
        };
    }
}

/// The BMC's session sequence numbers seen (§6.12.13: a sliding window; a
/// number seen before or too far behind is refused).
#[derive(Debug, Default)]
struct Window {
    top: u32,
    seen: u32,
}

impl Window {
    fn accept(&mut self, seq: u32) -> bool {
        if seq == 0 {
            return false;
        }
        if self.top == 0 || seq > self.top {
            let shift = seq - self.top;
            self.seen = if self.top == 0 || shift >= 32 { 1 } else { (self.seen << shift) | 1 };
            self.top = seq;
            return true;
        }
        let back = self.top - seq;
        if back >= 32 || self.seen & (1 << back) != 0 {
            return false;
        }
        self.seen |= 1 << back;
        true
    }
}

/// An established session.
struct Session {
    endpoint: Endpoint,
    bmc_sid: u32,
    keys: SessionKeys,
    /// Our last session sequence number.
    out_seq: u32,
    window: Window,
    /// Our last IPMB request sequence number (6 bits).
    rq_seq: u8,
    last_used: Instant,
}

/// How one request/response exchange ended.
enum Exchange {
    Reply(Response),
    NoReply,
    /// The socket refused to send (no route to the BMC).
    Refused,
    /// Fenced off before the first send: the request was not sent.
    Fenced,
}

/// A handshake step's failure.
enum Handshake {
    /// The BMC refused this cipher suite: try the next one.
    SuiteRefused(String),
    /// RAKP 2 "unauthorized name": no user entry for this lookup.
    UnknownName(String),
    /// RAKP 3 refused for its integrity check although RAKP 2 proved that
    /// both sides share the password: the BMC answered a retransmitted
    /// RAKP 1 with another random than the reply we used (a reply that
    /// crossed a retransmit). A fresh handshake may succeed.
    Superseded(TransportError),
    Failed(TransportError),
}

impl From<TransportError> for Handshake {
    fn from(e: TransportError) -> Self {
        Handshake::Failed(e)
    }
}

/// The state behind one transport (locked per request).
struct Engine {
    peer: SocketAddr,
    sockets: RmcpSockets,
    username: String,
    password: Secret,
    /// Shared by the sessions with the same settings.
    config: Arc<RmcpConfig>,
    session: Option<Session>,
    stats: Arc<Stats>,
    /// The worker's fence, asked before everything this session sends;
    /// none outside the worker.
    gate: Option<Arc<dyn SendGate>>,
}

fn rmcp_status(status: u8) -> &'static str {
    match status {
        0x01 => "insufficient resources to create a session",
        0x02 => "invalid session id",
        0x03 => "invalid payload type",
        0x04 => "invalid authentication algorithm",
        0x05 => "invalid integrity algorithm",
        0x06 => "no matching authentication payload",
        0x07 => "no matching integrity payload",
        0x08 => "inactive session id",
        0x09 => "invalid role",
        0x0A => "unauthorized role or privilege level requested",
        0x0B => "insufficient resources to create a session at the requested role",
        0x0C => "invalid name length",
        0x0D => "unauthorized name",
        0x0E => "unauthorized GUID",
        0x0F => "invalid integrity check value",
        0x10 => "invalid confidentiality algorithm",
        0x11 => "no cipher suite match with proposed security algorithms",
        0x12 => "illegal or unrecognized parameter",
        _ => "reserved status code",
    }
}

impl Engine {
    fn may_send(&self) -> bool {
        self.gate.as_ref().is_none_or(|g| g.holds())
    }

    fn error(&self, kind: TransportErrorKind, what: impl std::fmt::Display) -> TransportError {
        TransportError::new(kind, format!("{}: {what}", self.peer))
    }

    fn fenced(&self) -> TransportError {
        self.error(TransportErrorKind::Closed, "this worker no longer holds the BMC's lease")
    }

    /// Probe, then a handshake with each configured suite until one is accepted.
    async fn establish(&mut self, deadline: Instant) -> Result<(), TransportError> {
        if !self.may_send() {
            return Err(self.fenced());
        }
        // A probe holds one of the connector's probe slots for one round
        // of attempts at most: a BMC that stays silent goes back in line
        // behind the others (the slots are handed out first come, first
        // served), so silent BMCs, however many, never keep an answering
        // one from its probe until their deadlines.
        let round = self.config.attempt_timeout * (self.config.retries + 1);
        let caps = loop {
            let _slot = self.sockets.probe_slot().await;
            let round_end = (Instant::now() + round).min(deadline);
            match probe::channel_auth_caps_async(self.peer, round_end, self.config.attempt_timeout).await {
                Err(e)
                    if e.kind == TransportErrorKind::Unreachable
                        && round_end < deadline
                        && Instant::now() >= round_end =>
                {
                    continue
                }
                other => break other?,
            }
        };
        if !caps.ipmi20 {
            return Err(self.error(
                TransportErrorKind::Unsupported,
                "the BMC does not offer IPMI 2.0 / RMCP+ sessions (IPMI 1.5 is refused)",
            ));
        }
        let mut refusals = Vec::new();
        let config = self.config.clone();
        for &suite in &config.cipher_suites {
            // Username+privilege lookup first (it tells apart entries that
            // share a name); a BMC that finds no entry for that pair
            // ("unauthorized name") is asked again with name-only lookup,
            // where any user whose limit reaches the privilege qualifies.
            let attempt = match self.handshake_anew(suite, false, deadline).await {
                Err(Handshake::UnknownName(_)) => self.handshake_anew(suite, true, deadline).await,
                other => other,
            };
            match attempt {
                Ok(session) => {
                    let used = session.keys.suite;
                    self.stats.handshakes.fetch_add(1, Ordering::Relaxed);
                    self.stats.suite.store(used.id(), Ordering::Relaxed);
                    self.stats.proposed.store(if used == suite { 0 } else { suite.id() }, Ordering::Relaxed);
                    self.session = Some(session);
                    if let Err(e) = self.raise_privilege(deadline).await {
                        self.close_session().await;
                        return Err(e);
                    }
                    tracing::debug!(bmc = %self.peer, channel = caps.channel, suite = used.id(), proposed = suite.id(),
                        privilege = %self.config.privilege, "RMCP+ session established.");
                    return Ok(());
                }
                Err(Handshake::SuiteRefused(why)) => {
                    tracing::debug!(bmc = %self.peer, suite = suite.id(), why, "Cipher suite refused; trying the next.");
                    refusals.push(format!("{suite}: {why}"));
                }
                Err(Handshake::Failed(e) | Handshake::Superseded(e)) => return Err(e),
                Err(Handshake::UnknownName(why)) => {
                    return Err(self.error(
                        TransportErrorKind::AuthFailed,
                        format!("the BMC does not know this user name ({why})"),
                    ))
                }
            }
        }
        Err(self.error(
            TransportErrorKind::Unsupported,
            format!("the BMC accepts none of the cipher suites offered ({})", refusals.join("; ")),
        ))
    }

    /// Sends a handshake message and waits for the reply `parse` accepts,
    /// retransmitting on loss. A reply with another message tag than the
    /// request's (its first byte) is not ours: it is passed over unparsed.
    async fn presession<T>(
        &self,
        endpoint: &mut Endpoint,
        payload_type: u8,
        payload: &[u8],
        reply_type: u8,
        deadline: Instant,
        mut parse: impl FnMut(&[u8]) -> Result<T, &'static str>,
    ) -> Result<T, TransportError> {
        let packet = wire::presession(payload_type, payload);
        let tag = payload.first();
        let mut discarded = None;
        for _ in 0..=self.config.retries {
            if Instant::now() >= deadline {
                break;
            }
            endpoint.reserve().await;
            if !self.may_send() {
                return Err(self.fenced());
            }
            endpoint.send(&packet).await.map_err(|e| {
                self.error(TransportErrorKind::Unreachable, format!("cannot send a handshake message: {e}"))
            })?;
            let attempt_end = (Instant::now() + self.config.attempt_timeout).min(deadline);
            while let Some(datagram) = endpoint.recv(attempt_end).await {
                let Some(reply) = wire::presession_payload(&datagram, reply_type) else { continue };
                if reply.first() != tag {
                    continue;
                }
                match parse(reply) {
                    Ok(v) => return Ok(v),
                    Err(why) => {
                        tracing::debug!(bmc = %self.peer, why, "Discarded a handshake datagram.");
                        discarded = Some(why);
                    }
                }
            }
        }
        Err(match discarded {
            Some(why) => self.error(
                TransportErrorKind::Protocol,
                format!("no valid answer during the RMCP+ handshake (the BMC's last: {why})"),
            ),
            None => self.error(TransportErrorKind::Unreachable, "the BMC stopped answering during the RMCP+ handshake"),
        })
    }

    /// A handshake, and a second one from Open Session when the first was
    /// [`Handshake::Superseded`] (a second such refusal is a failure).
    async fn handshake_anew(
        &mut self,
        suite: CipherSuite,
        name_only: bool,
        deadline: Instant,
    ) -> Result<Session, Handshake> {
        match self.handshake(suite, name_only, deadline).await {
            Err(Handshake::Superseded(e)) => {
                tracing::debug!(bmc = %self.peer, error = %e, "RAKP 3 refused after a verified RAKP 2; handshaking again.");
                match self.handshake(suite, name_only, deadline).await {
                    Err(Handshake::Superseded(e)) => Err(Handshake::Failed(e)),
                    other => other,
                }
            }
            other => other,
        }
    }

    /// One handshake proposing `proposed`. The BMC may answer with other
    /// algorithms (pyghmi and VirtualBMC answer suite 3 to any proposal, as
    /// some vendors' BMCs do): a suite the machine's list allows is used,
    /// anything else is this proposal refused (the next suite of the list
    /// is proposed). Never weaker than the list: a suite outside it (none
    /// integrity, RAKP none, unknown numbers) is never used.
    async fn handshake(
        &mut self,
        proposed: CipherSuite,
        name_only: bool,
        deadline: Instant,
    ) -> Result<Session, Handshake> {
        let mut endpoint =
            self.sockets.endpoint(self.peer, false).await.map_err(|e| crate::error::socket_error(self.peer, &e))?;
        let console_sid = endpoint.id();
        // RAKP 1 role byte: the privilege, bit 4 set for name-only lookup.
        let role = self.config.privilege.level() | if name_only { 0x10 } else { 0 };
        let user = self.username.as_bytes().to_vec();
        let kuid = kuid(self.password.expose().as_bytes());

        // Open Session.
        let open = wire::open_session_request(1, role, console_sid, proposed);
        let opened = self
            .presession(
                &mut endpoint,
                wire::PT_OPEN_SESSION_REQUEST,
                &open,
                wire::PT_OPEN_SESSION_RESPONSE,
                deadline,
                |p| wire::open_session_response(p, 1, console_sid),
            )
            .await?;
        let (bmc_sid, suite) = match opened {
            wire::OpenSession::Ok { bmc_sid, algorithms, .. } => match CipherSuite::from_algorithms(algorithms) {
                Some(suite) if suite == proposed => (bmc_sid, suite),
                Some(suite) if self.config.cipher_suites.contains(&suite) => {
                    tracing::debug!(bmc = %self.peer, proposed = proposed.id(), answered = suite.id(),
                        "The BMC answered with another cipher suite of the machine's list; using it.");
                    (bmc_sid, suite)
                }
                other => {
                    let what = match other {
                        Some(suite) => format!("{suite}, which this machine's list does not allow"),
                        None => format!("{algorithms}, which form no suite bmcfleet uses"),
                    };
                    return Err(Handshake::SuiteRefused(format!("the BMC answered with {what}")));
                }
            },
            wire::OpenSession::Refused(status) => {
                let why = format!("Open Session status 0x{status:02X} ({})", rmcp_status(status));
                return Err(match status {
                    0x03..=0x07 | 0x10 | 0x11 | 0x12 => Handshake::SuiteRefused(why),
                    0x01 | 0x0B => Handshake::Failed(
                        self.error(TransportErrorKind::Busy, format!("the BMC has no free session slot ({why})")),
                    ),
                    0x09 | 0x0A => Handshake::Failed(self.error(
                        TransportErrorKind::PermissionDenied,
                        format!("the BMC refuses the {} privilege ({why})", self.config.privilege),
                    )),
                    _ => Handshake::Failed(
                        self.error(TransportErrorKind::Protocol, format!("the BMC refused the RMCP+ session ({why})")),
                    ),
                });
            }
        };

        let hash = suite.hash();

        // RAKP 1 / 2.
        let rm = random16();
        let rakp1 = wire::rakp1(2, bmc_sid, &rm, role, &user);
        let rakp2 = self
            .presession(&mut endpoint, wire::PT_RAKP1, &rakp1, wire::PT_RAKP2, deadline, |p| {
                wire::rakp2(p, 2, console_sid)
            })
            .await?;
        let (rc, guid, code) = match rakp2 {
            wire::Rakp2::Ok { bmc_random, bmc_guid, auth_code } => (bmc_random, bmc_guid, auth_code),
            wire::Rakp2::Refused(status) => {
                let why = format!("RAKP 2 status 0x{status:02X} ({})", rmcp_status(status));
                let (kind, what) = match status {
                    0x0D | 0x0C => return Err(Handshake::UnknownName(why)),
                    0x09 | 0x0A => (
                        TransportErrorKind::PermissionDenied,
                        format!("the user may not log in with the {} privilege ({why})", self.config.privilege),
                    ),
                    0x01 | 0x0B => (TransportErrorKind::Busy, format!("the BMC has no free session slot ({why})")),
                    _ => (TransportErrorKind::Protocol, format!("the BMC refused RAKP 1 ({why})")),
                };
                return Err(Handshake::Failed(self.error(kind, what)));
            }
        };
        let ulen = [user.len() as u8];
        let sids = (console_sid.to_le_bytes(), bmc_sid.to_le_bytes());
        if code.len() != hash.len()
            || !hash.verify(&kuid, &[&sids.0, &sids.1, &rm, &rc, &guid, &[role], &ulen, &user], &code)
        {
            return Err(Handshake::Failed(self.error(
                TransportErrorKind::AuthFailed,
                "wrong password (the BMC's RAKP 2 key exchange code does not match)",
            )));
        }

        // RAKP 3 / 4.
        let sik = hash.hmac(&kuid, &[&rm, &rc, &[role], &ulen, &user]);
        let proof = hash.hmac(&kuid, &[&rc, &sids.0, &[role], &ulen, &user]);
        let rakp3 = wire::rakp3(3, bmc_sid, &proof);
        let rakp4 = self
            .presession(&mut endpoint, wire::PT_RAKP3, &rakp3, wire::PT_RAKP4, deadline, |p| {
                wire::rakp4(p, 3, console_sid)
            })
            .await?;
        let icv = match rakp4 {
            Ok(icv) => icv,
            Err(status) => {
                let e = self.error(
                    TransportErrorKind::AuthFailed,
                    format!("the BMC rejected our RAKP 3 proof (status 0x{status:02X}, {})", rmcp_status(status)),
                );
                return Err(if status == 0x0F { Handshake::Superseded(e) } else { Handshake::Failed(e) });
            }
        };
        if icv.len() != suite.rakp4_icv_len() || !hash.verify(&sik, &[&rm, &sids.1, &guid], &icv) {
            return Err(Handshake::Failed(self.error(
                TransportErrorKind::AuthFailed,
                "the BMC's RAKP 4 integrity check failed (password or BMC key mismatch)",
            )));
        }
        Ok(Session {
            endpoint,
            bmc_sid,
            keys: SessionKeys::derive(suite, &sik),
            out_seq: 0,
            window: Window::default(),
            rq_seq: 0,
            last_used: Instant::now(),
        })
    }

    /// Set Session Privilege Level (sessions start at User).
    async fn raise_privilege(&mut self, deadline: Instant) -> Result<(), TransportError> {
        let level = self.config.privilege;
        if level == Privilege::User {
            return Ok(());
        }
        let raise =
            Request { netfn: NETFN_APP, cmd: CMD_SET_SESSION_PRIVILEGE, data: vec![level.level()], retry: Retry::Safe };
        match self.exchange(&raise, deadline).await {
            Exchange::Reply(r) if r.cc == 0 => Ok(()),
            Exchange::Reply(r) => {
                let meaning = match r.cc {
                    0x80 => "the requested level is not available for this user",
                    0x81 => "the requested level exceeds the user's or channel's privilege limit",
                    0x82 => "cannot disable user-level authentication",
                    _ => crate::error::completion_code_meaning(r.cc),
                };
                Err(self.error(
                    TransportErrorKind::PermissionDenied,
                    format!("Set Session Privilege Level ({level}) failed: completion code 0x{:02X} ({meaning})", r.cc),
                ))
            }
            Exchange::NoReply => Err(self
                .error(TransportErrorKind::Unreachable, "no reply to Set Session Privilege Level after the handshake")),
            Exchange::Refused => Err(self.error(TransportErrorKind::Unreachable, "the network refused the datagram")),
            Exchange::Fenced => Err(self.fenced()),
        }
    }

    /// One request and its matching reply, with retransmits for an
    /// idempotent request; each retransmit asks the worker's fence first.
    async fn exchange(&mut self, request: &Request, deadline: Instant) -> Exchange {
        let (sends, wait) = match request.retry {
            Retry::Safe => (self.config.retries + 1, self.config.attempt_timeout),
            Retry::Once => (1, self.config.attempt_timeout * (self.config.retries + 1)),
        };
        let gate = self.gate.clone();
        let peer = self.peer;
        let Some(session) = self.session.as_mut() else { return Exchange::NoReply };
        session.endpoint.drain();
        session.rq_seq = session.rq_seq % 0x3F + 1;
        let message = wire::ipmi_request(request.netfn, request.cmd, session.rq_seq, &request.data);
        for attempt in 0..sends {
            if Instant::now() >= deadline {
                break;
            }
            // A slot on the socket first, then the fence: nothing waits
            // between the check and the send.
            session.endpoint.reserve().await;
            if !gate.as_ref().is_none_or(|g| g.holds()) {
                if attempt == 0 {
                    return Exchange::Fenced;
                }
                break; // fenced off: no retransmit
            }
            let Some(seq) = session.out_seq.checked_add(1) else { break }; // wrapped: a new session is due
            session.out_seq = seq;
            let packet = wire::session_packet(&session.keys, session.bmc_sid, seq, &message, random16());
            if let Err(e) = session.endpoint.send(&packet).await {
                tracing::debug!(bmc = %peer, error = %e, "RMCP+ send failed.");
                return Exchange::Refused;
            }
            let attempt_end = (Instant::now() + wait).min(deadline);
            while let Some(datagram) = session.endpoint.recv(attempt_end).await {
                let inbound = match wire::open_session_packet(&session.keys, &datagram) {
                    Ok(i) if i.session_id == session.endpoint.id() && i.payload_type == wire::PT_IPMI => i,
                    Ok(_) => continue,
                    Err(why) => {
                        tracing::debug!(bmc = %peer, why, "Discarded an RMCP+ datagram.");
                        continue;
                    }
                };
                if !session.window.accept(inbound.seq) {
                    tracing::debug!(bmc = %peer, seq = inbound.seq, "Discarded a replayed or stale RMCP+ datagram.");
                    continue;
                }
                match wire::ipmi_reply(&inbound.message) {
                    Ok(r) if r.rq_seq == session.rq_seq && r.netfn == request.netfn | 1 && r.cmd == request.cmd => {
                        return Exchange::Reply(Response { cc: r.cc, data: r.data });
                    }
                    Ok(r) => {
                        tracing::debug!(bmc = %peer, netfn = r.netfn, cmd = r.cmd, rq_seq = r.rq_seq, "Discarded a stale IPMI reply.")
                    }
                    Err(why) => tracing::debug!(bmc = %peer, why, "Discarded a malformed IPMI reply."),
                }
            }
        }
        Exchange::NoReply
    }

    async fn call(&mut self, request: &Request, deadline: Instant) -> Result<Response, TransportError> {
        if Instant::now() >= deadline {
            return Err(self
                .error(TransportErrorKind::DeadlineExceeded, "the deadline passed before the request was sent")
                .not_sent());
        }
        let mut fresh = false;
        let mut sent = false;
        loop {
            if !self.may_send() {
                let e = self.fenced();
                return Err(if sent { e } else { e.not_sent() });
            }
            if self.session.is_none() {
                // No session, so this request has not been sent (yet).
                self.establish(deadline).await.map_err(|e| if sent { e } else { e.not_sent() })?;
                fresh = true;
            }
            match self.exchange(request, deadline).await {
                Exchange::Fenced => {
                    let e = self.fenced();
                    return Err(if sent { e } else { e.not_sent() });
                }
                Exchange::Reply(response) => {
                    if let Some(s) = self.session.as_mut() {
                        s.last_used = Instant::now();
                    }
                    if request.netfn == NETFN_APP
                        && matches!(request.cmd, CMD_COLD_RESET | CMD_WARM_RESET)
                        && response.cc == 0
                    {
                        // The BMC is restarting and forgets every session.
                        self.session = None;
                    }
                    return Ok(response);
                }
                Exchange::Refused => {
                    self.session = None;
                    return Err(self.error(TransportErrorKind::Unreachable, "the network refused the datagram"));
                }
                Exchange::NoReply => {
                    sent = true;
                    // The BMC may have expired or forgotten this session
                    // (restart): re-establish once for idempotent requests.
                    self.session = None;
                    if request.retry == Retry::Safe && !fresh && Instant::now() < deadline {
                        tracing::debug!(bmc = %self.peer, "No reply on an established session; re-establishing.");
                        continue;
                    }
                    let note = match request.retry {
                        Retry::Safe => "",
                        Retry::Once => "; it was sent once (not idempotent) and may or may not have taken effect",
                    };
                    return Err(self.error(
                        TransportErrorKind::Timeout,
                        format!("no reply to netfn 0x{:02X} cmd 0x{:02X}{note}", request.netfn, request.cmd),
                    ));
                }
            }
        }
    }

    /// Get Device ID on an idle session; an unanswered one drops the session.
    async fn keepalive(&mut self) {
        if !self.may_send() {
            // Fenced off: forget the session without a word to the BMC.
            self.session = None;
            return;
        }
        let deadline = Instant::now() + self.config.attempt_timeout * (self.config.retries + 1);
        let request = Request { netfn: NETFN_APP, cmd: CMD_GET_DEVICE_ID, data: vec![], retry: Retry::Safe };
        match self.exchange(&request, deadline).await {
            Exchange::Reply(_) => {
                if let Some(s) = self.session.as_mut() {
                    s.last_used = Instant::now();
                }
                self.stats.keepalives.fetch_add(1, Ordering::Relaxed);
                tracing::trace!(bmc = %self.peer, "IPMI keep-alive answered.");
            }
            _ => {
                tracing::debug!(bmc = %self.peer, "IPMI keep-alive unanswered; session dropped.");
                self.session = None;
            }
        }
    }

    /// Close Session (best effort); the session is gone afterwards either way.
    async fn close_session(&mut self) {
        let Some(bmc_sid) = self.session.as_ref().map(|s| s.bmc_sid) else { return };
        if !self.may_send() {
            tracing::debug!(bmc = %self.peer, "Not closing the IPMI session: this worker no longer holds the BMC's lease.");
            self.session = None;
            return;
        }
        let deadline = Instant::now() + self.config.attempt_timeout * 2;
        let close = Request {
            netfn: NETFN_APP,
            cmd: CMD_CLOSE_SESSION,
            data: bmc_sid.to_le_bytes().to_vec(),
            retry: Retry::Once,
        };
        match self.exchange(&close, deadline).await {
            Exchange::Reply(r) if r.cc == 0 => tracing::debug!(bmc = %self.peer, "IPMI session closed."),
            Exchange::Reply(r) => {
                tracing::debug!(bmc = %self.peer, cc = r.cc, "Close Session refused; leaving the session to expire.")
            }
            // The BMC may drop the session before replying.
            _ => tracing::debug!(bmc = %self.peer, "No reply to Close Session."),
        }
        self.session = None;
    }
}

/// Every parser of what a BMC sends on an RMCP+ session, fed arbitrary
/// bytes (the `ipmi_response` fuzz target): none may panic.
#[cfg(feature = "fuzzing")]
pub(crate) fn fuzz_wire(data: &[u8]) {
    let _ = wire::route(data);
    for suite in CipherSuite::ALL {
        let keys = SessionKeys::derive(suite, &[0x11; 20]);
        let _ = wire::open_session_packet(&keys, data);
        let _ = wire::open_session_response(data, data.first().copied().unwrap_or(0), 1);
        let _ = keys.decrypt(data);
    }
    for pt in [wire::PT_OPEN_SESSION_RESPONSE, wire::PT_RAKP2, wire::PT_RAKP4] {
        let _ = wire::presession_payload(data, pt);
    }
    let tag = data.first().copied().unwrap_or(0);
    let _ = wire::rakp2(data, tag, 1);
    let _ = wire::rakp4(data, tag, 1);
    let _ = wire::ipmi_reply(data);
    let _ = wire::SolPacket::parse(data);
    let mut window = Window::default();
    for chunk in data.chunks_exact(4) {
        let _ = window.accept(u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_refuses_replays_and_stale_numbers() {
        let mut w = Window::default();
        assert!(!w.accept(0));
        assert!(w.accept(5));
        assert!(!w.accept(5));
        assert!(w.accept(7));
        assert!(w.accept(6));
        assert!(!w.accept(6));
        assert!(w.accept(100));
        assert!(!w.accept(68));
        assert!(w.accept(69));
        assert!(w.accept(u32::MAX));
    }

    #[test]
    fn privilege_levels_order_like_their_numbers() {
        assert!(Privilege::User < Privilege::Operator && Privilege::Operator < Privilege::Administrator);
        assert_eq!([Privilege::User.level(), Privilege::Operator.level(), Privilege::Administrator.level()], [2, 3, 4]);
    }
}
