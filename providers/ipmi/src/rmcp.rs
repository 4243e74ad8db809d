//! RMCP+ transport: one authenticated IPMI 2.0 session per BMC, owned by a
//! dedicated OS thread.
//!
//! # What ipmi-rs does and what this module adds
//! [`ipmi_rs::rmcp::Rmcp`] performs the RMCP+ handshake (Open Session,
//! RAKP 1–4, cipher suite 3: RAKP-HMAC-SHA1, HMAC-SHA1-96, AES-CBC-128) and
//! encrypts/authenticates each message. It is blocking (a std `UdpSocket`
//! with a read timeout), so every session lives on its own thread
//! (`ipmi-session <addr>`) and the async side only exchanges messages with
//! it over channels: the async executor never blocks.
//!
//! On top of ipmi-rs this module provides:
//! - **a presence probe** ([`crate::probe`]) before each handshake: deadline-
//!   bounded retransmits, and refusal of BMCs without IPMI 2.0 (ipmi-rs would
//!   silently fall back to an IPMI 1.5 session);
//! - **Set Session Privilege Level** (App 0x3B, Administrator) right after
//!   the handshake: ipmi-rs never raises the privilege, and chassis control
//!   answers 0xD4 (insufficient privilege) without it;
//! - **retransmits**: an idempotent request ([`Retry::Safe`]) is sent up to
//!   `retries + 1` times, one `attempt_timeout` apart, then the session is
//!   re-established once and the request sent again, all bounded by the
//!   deadline. A non-idempotent request ([`Retry::Once`]) is sent once: ipmi-rs
//!   gives every send a new IPMB sequence number, so a BMC cannot recognise a
//!   retransmit as a duplicate, and a second power cycle must never happen;
//! - **reply matching**: ipmi-rs returns whatever datagram arrives next, so a
//!   late reply to an earlier request could be taken for the current one.
//!   Replies whose netfn/cmd do not match are discarded, and a session on
//!   which a reply may still be in flight (a request was retransmitted or
//!   never answered) is closed and replaced before the next request;
//! - **keep-alive**: an idle session sends Get Device ID every
//!   `keepalive_interval` so the BMC does not expire it;
//! - **Close Session** (App 0x3C) on close/drop: ipmi-rs has none and keeps
//!   the session id private, so the handle comes from Get Session Info
//!   (App 0x3D, "current session") and the session is closed by handle;
//! - **no panics escape**: ipmi-rs unwraps socket errors on send, unwraps a
//!   RAKP 4 decode, and has a `todo!()` on session sequence wrap. Every call
//!   into it runs under [`std::panic::catch_unwind`]; a panic drops the
//!   session and becomes a typed error (`Unreachable` when it was a refused
//!   socket send, `Internal` otherwise). The thread keeps serving.
//!
//! # Deadlines
//! The async caller never waits past the deadline it passes. The session
//! thread checks the deadline between receives; one blocking receive inside
//! ipmi-rs can outlast it by at most `attempt_timeout` (ipmi-rs fixes the
//! socket timeout when the session is created), after which the thread
//! serves the next queued request.
//!
//! # Known gaps (ipmi-rs 0.6.0)
//! - Cipher suite 17 (RAKP-HMAC-SHA256, HMAC-SHA256-128, AES-CBC-128) is not
//!   offered: ipmi-rs hard-wires suite 3 and exposes none of its crypto
//!   state. OpenIPMI's `ipmi_sim` does not support suite 17 either, so it
//!   could not be tested here. A BMC that refuses suite 3 fails the handshake
//!   with `unsupported` and the open-session status in the message.
//! - RAKP 1 asks for Administrator with username+privilege lookup, so only
//!   users with the Administrator privilege can log in.
//! - The session socket is bound to `[::]` (dual stack): hosts with IPv6
//!   disabled cannot open sessions.

use crate::error::{TransportError, TransportErrorKind};
use crate::probe;
use crate::transport::{Request, Response, Retry, Transport};
use async_trait::async_trait;
use bmcfleet_schema::Secret;
use ipmi_rs::connection::{IpmiConnection, LogicalUnit, Message, RequestTargetAddress};
use ipmi_rs::rmcp::{
    ActivationError, RakpMessage2ErrorStatusCode, RakpMessage2ParseError, RakpMessage4ParseError, Rmcp,
    RmcpIpmiError, RmcpIpmiReceiveError, V2_0ActivationError,
};
use std::io::ErrorKind;
use std::net::SocketAddr;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant as StdInstant};
use tokio::sync::oneshot;
use tokio::time::Instant;

/// Timing of one RMCP+ session.
#[derive(Clone, Debug)]
pub struct RmcpConfig {
    /// How long to wait for a reply before retransmitting (and the socket
    /// read timeout inside ipmi-rs). The IPMI spec suggests retrying after
    /// about a second on a LAN.
    pub attempt_timeout: Duration,
    /// Retransmits of an idempotent request on one session before it is
    /// re-established.
    pub retries: u32,
    /// Idle time after which the session sends a keep-alive. BMCs expire idle
    /// sessions after 30–60 s (`ipmi_sim`: about 30 s).
    pub keepalive_interval: Duration,
}

impl Default for RmcpConfig {
    fn default() -> Self {
        RmcpConfig {
            attempt_timeout: Duration::from_secs(1),
            retries: 2,
            keepalive_interval: Duration::from_secs(10),
        }
    }
}

const NETFN_APP: u8 = 0x06;
const CMD_GET_DEVICE_ID: u8 = 0x01;
const CMD_COLD_RESET: u8 = 0x02;
const CMD_WARM_RESET: u8 = 0x03;
const CMD_SET_SESSION_PRIVILEGE: u8 = 0x3B;
const CMD_CLOSE_SESSION: u8 = 0x3C;
const CMD_GET_SESSION_INFO: u8 = 0x3D;
const PRIV_ADMIN: u8 = 0x04;

/// Work for the session thread.
enum Job {
    Connect { deadline: StdInstant, reply: oneshot::Sender<Result<(), TransportError>> },
    Call { request: Request, deadline: StdInstant, reply: oneshot::Sender<Result<Response, TransportError>> },
    Close { reply: oneshot::Sender<()> },
}

/// An RMCP+ session to one BMC; see the module docs.
pub struct RmcpTransport {
    /// Requests to the session thread; dropping it ends the thread (which
    /// closes the BMC session first).
    jobs: mpsc::Sender<Job>,
    /// False after a fatal transport error, true again after a success.
    healthy: Arc<AtomicBool>,
    /// Completed RMCP+ handshakes (session establishments), for tests and
    /// metrics: a batch of N calls should cost one.
    handshakes: Arc<AtomicU64>,
    /// Keep-alives answered by the BMC.
    keepalives: Arc<AtomicU64>,
    /// Set by `close()`: later calls fail with `Closed`.
    closed: bool,
    peer: SocketAddr,
}

impl RmcpTransport {
    /// Opens an authenticated session to `peer`, failing with a typed error
    /// (auth, unreachable, unsupported) if that is not possible before
    /// `deadline`.
    pub async fn connect(
        peer: SocketAddr,
        username: String,
        password: Secret,
        config: RmcpConfig,
        deadline: Instant,
        gate: Option<Arc<dyn bmcfleet_provider::SendGate>>,
    ) -> Result<RmcpTransport, TransportError> {
        let (jobs, rx) = mpsc::channel();
        let healthy = Arc::new(AtomicBool::new(true));
        let handshakes = Arc::new(AtomicU64::new(0));
        let keepalives = Arc::new(AtomicU64::new(0));
        let engine = Engine {
            peer,
            username,
            password,
            config,
            session: None,
            handshakes: handshakes.clone(),
            keepalives: keepalives.clone(),
            gate,
        };
        std::thread::Builder::new()
            .name(format!("ipmi-session {peer}"))
            .stack_size(256 * 1024)
            .spawn(move || run(engine, rx))
            .map_err(|e| TransportError::new(TransportErrorKind::Internal, format!("cannot start session thread: {e}")))?;

        let transport = RmcpTransport { jobs, healthy, handshakes, keepalives, closed: false, peer };
        let (reply, wait) = oneshot::channel();
        transport.submit(Job::Connect { deadline: thread_deadline(deadline), reply })?;
        match tokio::time::timeout_at(deadline, wait).await {
            Ok(Ok(Ok(()))) => Ok(transport),
            Ok(Ok(Err(e))) => Err(e),
            Ok(Err(_)) => Err(thread_gone(peer)),
            Err(_) => Err(TransportError::new(
                TransportErrorKind::Unreachable,
                format!("{peer}: no session could be opened before the deadline"),
            )),
        }
    }

    /// How many RMCP+ handshakes this transport has done.
    pub fn handshakes(&self) -> u64 {
        self.handshakes.load(Ordering::Relaxed)
    }

    /// How many keep-alives the BMC has answered.
    pub fn keepalives(&self) -> u64 {
        self.keepalives.load(Ordering::Relaxed)
    }

    /// The BMC's socket address.
    pub fn peer(&self) -> SocketAddr {
        self.peer
    }

    fn submit(&self, job: Job) -> Result<(), TransportError> {
        self.jobs.send(job).map_err(|_| thread_gone(self.peer))
    }
}

/// The session thread aims to finish slightly before the caller's deadline
/// so its typed error (not the caller's timer) reports what happened.
fn thread_deadline(deadline: Instant) -> StdInstant {
    let deadline = deadline.into_std();
    let margin = deadline
        .saturating_duration_since(StdInstant::now())
        .mul_f64(0.05)
        .min(Duration::from_millis(50));
    deadline - margin
}

fn thread_gone(peer: SocketAddr) -> TransportError {
    TransportError::new(TransportErrorKind::Closed, format!("{peer}: the IPMI session thread has stopped"))
}

#[async_trait]
impl Transport for RmcpTransport {
    async fn call(&mut self, deadline: Instant, request: &Request) -> Result<Response, TransportError> {
        if self.closed {
            return Err(TransportError::new(TransportErrorKind::Closed, format!("{}: session closed", self.peer)));
        }
        let (reply, wait) = oneshot::channel();
        self.submit(Job::Call { request: request.clone(), deadline: thread_deadline(deadline), reply })?;
        let result = match tokio::time::timeout_at(deadline, wait).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(thread_gone(self.peer)),
            Err(_) => Err(TransportError::new(
                TransportErrorKind::DeadlineExceeded,
                format!("{}: the deadline passed before the BMC answered", self.peer),
            )),
        };
        match &result {
            Ok(_) => self.healthy.store(true, Ordering::Relaxed),
            Err(e) if e.is_fatal() => self.healthy.store(false, Ordering::Relaxed),
            Err(_) => {}
        }
        result
    }

    fn is_healthy(&self) -> bool {
        !self.closed && self.healthy.load(Ordering::Relaxed)
    }

    async fn close(&mut self) {
        if self.closed {
            return;
        }
        self.closed = true;
        let (reply, wait) = oneshot::channel();
        if self.submit(Job::Close { reply }).is_ok() {
            // Close Session is two short exchanges; don't hang a worker on a dead BMC.
            let _ = tokio::time::timeout(Duration::from_secs(3), wait).await;
        }
    }
}

/// The session thread's main loop.
fn run(mut engine: Engine, jobs: mpsc::Receiver<Job>) {
    loop {
        let job = match engine.keepalive_due() {
            Some(due) => match jobs.recv_timeout(due.saturating_duration_since(StdInstant::now())) {
                Ok(job) => job,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    engine.guarded(|e| {
                        e.keepalive();
                        Ok(())
                    })
                    .ok();
                    continue;
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            },
            None => match jobs.recv() {
                Ok(job) => job,
                Err(_) => break,
            },
        };
        match job {
            Job::Connect { deadline, reply } => {
                let result = engine.guarded(|e| e.ensure_session(deadline));
                let _ = reply.send(result);
            }
            Job::Call { request, deadline, reply } => {
                let result = engine.guarded(|e| e.call(&request, deadline));
                let _ = reply.send(result);
            }
            Job::Close { reply } => {
                let _ = engine.guarded(|e| {
                    e.close_session();
                    Ok(())
                });
                let _ = reply.send(());
                return;
            }
        }
    }
    let _ = engine.guarded(|e| {
        e.close_session();
        Ok(())
    });
}

/// An established RMCP+ session.
struct Session {
    rmcp: Rmcp,
    /// The BMC's (managed system) session id, for Close Session.
    id: Option<u32>,
    last_used: StdInstant,
    /// A reply to an earlier request may still arrive on this socket: replace
    /// the session before the next request.
    dirty: bool,
}

/// The blocking side: owns the ipmi-rs connection.
struct Engine {
    peer: SocketAddr,
    username: String,
    password: Secret,
    config: RmcpConfig,
    session: Option<Session>,
    handshakes: Arc<AtomicU64>,
    keepalives: Arc<AtomicU64>,
    /// The worker's fence, asked before what the thread sends on its own
    /// (keep-alives, a re-established session, Close Session) and before
    /// each request it sends; none outside the worker.
    gate: Option<Arc<dyn bmcfleet_provider::SendGate>>,
}

/// How one request/response exchange ended.
enum Exchange {
    Reply(Response),
    NoReply,
    Refused,
}

impl Engine {
    /// Runs `f`, turning a panic inside ipmi-rs into a typed error and
    /// dropping the (possibly inconsistent) session.
    fn guarded<T>(&mut self, f: impl FnOnce(&mut Engine) -> Result<T, TransportError>) -> Result<T, TransportError> {
        match catch_unwind(AssertUnwindSafe(|| f(self))) {
            Ok(result) => result,
            Err(payload) => {
                // Drop the session without talking to it: its state is unknown.
                let _ = catch_unwind(AssertUnwindSafe(|| self.session = None));
                let what = payload
                    .downcast_ref::<String>()
                    .map(String::as_str)
                    .or_else(|| payload.downcast_ref::<&str>().copied())
                    .unwrap_or("non-string panic payload");
                tracing::warn!(bmc = %self.peer, panic = what, "ipmi-rs panicked; session dropped.");
                if what.contains("ConnectionRefused") {
                    Err(TransportError::new(
                        TransportErrorKind::Unreachable,
                        format!("{}: connection refused (the BMC stopped listening)", self.peer),
                    ))
                } else {
                    Err(TransportError::new(
                        TransportErrorKind::Internal,
                        format!("{}: the IPMI library panicked: {what}", self.peer),
                    ))
                }
            }
        }
    }

    fn keepalive_due(&self) -> Option<StdInstant> {
        self.session.as_ref().map(|s| s.last_used + self.config.keepalive_interval)
    }

    /// Sends a Get Device ID on an idle session; drops the session when the
    /// BMC does not answer (the next call re-establishes it).
    /// Whether the worker still holds the BMC's lease (always, outside the worker).
    fn may_send(&self) -> bool {
        holds(&self.gate)
    }

    fn keepalive(&mut self) {
        if !self.may_send() {
            // Fenced off: forget the session without a word to the BMC.
            self.session = None;
            return;
        }
        let deadline = StdInstant::now() + self.config.attempt_timeout * (self.config.retries + 1);
        let Some(session) = self.session.as_mut() else { return };
        if session.dirty {
            self.close_session();
            return;
        }
        let request = Request { netfn: NETFN_APP, cmd: CMD_GET_DEVICE_ID, data: vec![], retry: Retry::Safe };
        match exchange(session, &self.config, &request, deadline, &self.gate) {
            Exchange::Reply(_) => {
                session.last_used = StdInstant::now();
                self.keepalives.fetch_add(1, Ordering::Relaxed);
                tracing::trace!(bmc = %self.peer, "IPMI keep-alive answered.");
            }
            _ => {
                tracing::debug!(bmc = %self.peer, "IPMI keep-alive unanswered; session dropped.");
                self.session = None;
            }
        }
    }

    /// Makes sure a clean session exists, establishing one if needed.
    fn ensure_session(&mut self, deadline: StdInstant) -> Result<(), TransportError> {
        if self.session.as_ref().is_some_and(|s| s.dirty) {
            self.close_session();
        }
        if self.session.is_none() {
            self.establish(deadline)?;
        }
        Ok(())
    }

    fn establish(&mut self, deadline: StdInstant) -> Result<(), TransportError> {
        let peer = self.peer;
        let caps = probe::channel_auth_caps(peer, deadline, self.config.attempt_timeout)?;
        if !caps.ipmi20 {
            return Err(TransportError::new(
                TransportErrorKind::Unsupported,
                format!("{peer}: the BMC does not offer IPMI 2.0 / RMCP+ sessions (IPMI 1.5 is refused)"),
            ));
        }

        let rmcp = loop {
            let mut rmcp = Rmcp::new(peer, self.config.attempt_timeout)
                .map_err(|e| crate::error::socket_error(peer, &e))?;
            match rmcp.activate(true, Some(&self.username), Some(self.password.expose().as_bytes())) {
                Ok(()) => break rmcp,
                Err(e) => {
                    let (kind, message) = classify_activation(&e);
                    let retry = kind == TransportErrorKind::Timeout && StdInstant::now() < deadline;
                    tracing::debug!(bmc = %peer, error = %message, retry, "RMCP+ handshake failed.");
                    if !retry {
                        let kind = if kind == TransportErrorKind::Timeout { TransportErrorKind::Unreachable } else { kind };
                        return Err(TransportError::new(kind, format!("{peer}: {message}")));
                    }
                }
            }
        };
        self.handshakes.fetch_add(1, Ordering::Relaxed);
        let id = session_id_from_debug(&format!("{rmcp:?}"));
        let mut session = Session { rmcp, id, last_used: StdInstant::now(), dirty: false };

        // ipmi-rs leaves the session at the BMC's default (User) privilege.
        let raise = Request {
            netfn: NETFN_APP,
            cmd: CMD_SET_SESSION_PRIVILEGE,
            data: vec![PRIV_ADMIN],
            retry: Retry::Safe,
        };
        match exchange(&mut session, &self.config, &raise, deadline, &self.gate) {
            Exchange::Reply(r) if r.cc == 0 => {}
            Exchange::Reply(r) => {
                let meaning = match r.cc {
                    0x80 => "the requested level is not available for this user",
                    0x81 => "the requested level exceeds the user's or channel's privilege limit",
                    0x82 => "cannot disable user-level authentication",
                    _ => crate::error::completion_code_meaning(r.cc),
                };
                return Err(TransportError::new(
                    TransportErrorKind::PermissionDenied,
                    format!(
                        "{peer}: Set Session Privilege Level (Administrator) failed: completion code 0x{:02X} ({meaning})",
                        r.cc
                    ),
                ));
            }
            Exchange::NoReply => {
                return Err(TransportError::new(
                    TransportErrorKind::Unreachable,
                    format!("{peer}: no reply to Set Session Privilege Level after the handshake"),
                ))
            }
            Exchange::Refused => return Err(refused(peer)),
        }
        tracing::debug!(bmc = %peer, channel = caps.channel, "RMCP+ session established (cipher suite 3, Administrator).");
        self.session = Some(session);
        Ok(())
    }

    fn call(&mut self, request: &Request, deadline: StdInstant) -> Result<Response, TransportError> {
        let peer = self.peer;
        if StdInstant::now() >= deadline {
            return Err(TransportError::new(
                TransportErrorKind::DeadlineExceeded,
                format!("{peer}: the deadline passed before the request was sent"),
            )
            .not_sent());
        }
        let mut fresh = false;
        let mut sent = false;
        loop {
            if !self.may_send() {
                let e = TransportError::new(TransportErrorKind::Closed, format!("{peer}: this worker no longer holds the BMC's lease"));
                return Err(if sent { e } else { e.not_sent() });
            }
            if self.session.as_ref().is_none_or(|s| s.dirty) {
                // No session, so this request has not been sent (yet).
                self.ensure_session(deadline).map_err(|e| if sent { e } else { e.not_sent() })?;
                fresh = true;
            }
            let session = self.session.as_mut().expect("session established above");
            sent = true;
            match exchange(session, &self.config, request, deadline, &self.gate) {
                Exchange::Reply(response) => {
                    session.last_used = StdInstant::now();
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
                    return Err(refused(peer));
                }
                Exchange::NoReply => {
                    // The BMC may have expired or forgotten this session
                    // (restart): re-establish once for idempotent requests.
                    self.session = None;
                    if request.retry == Retry::Safe && !fresh && StdInstant::now() < deadline {
                        tracing::debug!(bmc = %peer, "No reply on an established session; re-establishing.");
                        continue;
                    }
                    let note = match request.retry {
                        Retry::Safe => "",
                        Retry::Once => "; it was sent once (not idempotent) and may or may not have taken effect",
                    };
                    return Err(TransportError::new(
                        TransportErrorKind::Timeout,
                        format!(
                            "{peer}: no reply to netfn 0x{:02X} cmd 0x{:02X}{note}",
                            request.netfn, request.cmd
                        ),
                    ));
                }
            }
        }
    }

    /// Closes the BMC session (best effort): Close Session by session id,
    /// or by handle (from Get Session Info) when the id is unknown.
    fn close_session(&mut self) {
        let Some(mut session) = self.session.take() else { return };
        if !self.may_send() {
            tracing::debug!(bmc = %self.peer, "Not closing the IPMI session: this worker no longer holds the BMC's lease.");
            return;
        }
        let deadline = StdInstant::now() + self.config.attempt_timeout * 2;
        let data = match session.id {
            Some(id) => id.to_le_bytes().to_vec(),
            None => {
                let info =
                    Request { netfn: NETFN_APP, cmd: CMD_GET_SESSION_INFO, data: vec![0x00], retry: Retry::Safe };
                match exchange(&mut session, &self.config, &info, deadline, &self.gate) {
                    Exchange::Reply(r) if r.cc == 0 && !r.data.is_empty() => vec![0, 0, 0, 0, r.data[0]],
                    _ => {
                        tracing::debug!(bmc = %self.peer, "Get Session Info failed; leaving the session to expire.");
                        return;
                    }
                }
            }
        };
        let close = Request { netfn: NETFN_APP, cmd: CMD_CLOSE_SESSION, data, retry: Retry::Once };
        match exchange(&mut session, &self.config, &close, deadline, &self.gate) {
            Exchange::Reply(r) if r.cc == 0 => tracing::debug!(bmc = %self.peer, "IPMI session closed."),
            Exchange::Reply(r) => {
                tracing::debug!(bmc = %self.peer, cc = r.cc, "Close Session refused; leaving the session to expire.")
            }
            // The BMC may drop the session before replying.
            _ => tracing::debug!(bmc = %self.peer, "No reply to Close Session."),
        }
    }
}

/// Finds `session_id: N` (the field of ipmi-rs's private v2.0 session
/// state, not `remote_console_session_id`/`managed_system_session_id`) in
/// the `Debug` text of an active [`Rmcp`].
fn session_id_from_debug(debug: &str) -> Option<u32> {
    const KEY: &str = "session_id: ";
    let mut found = None;
    for (at, _) in debug.match_indices(KEY) {
        let standalone = debug[..at].ends_with(' ') || debug[..at].ends_with('{');
        if !standalone {
            continue;
        }
        let digits: String = debug[at + KEY.len()..].chars().take_while(char::is_ascii_digit).collect();
        match (found, digits.parse::<u32>()) {
            (None, Ok(id)) if id != 0 => found = Some(id),
            // Ambiguous: do not guess.
            (Some(_), Ok(_)) => return None,
            _ => {}
        }
    }
    found
}

fn refused(peer: SocketAddr) -> TransportError {
    TransportError::new(
        TransportErrorKind::Unreachable,
        format!("{peer}: connection refused (the BMC stopped listening)"),
    )
}

/// Sends `request` (retransmitting when it is idempotent) and waits for the
/// matching reply.
/// Whether the worker's fence (if any) still lets requests leave.
fn holds(gate: &Option<Arc<dyn bmcfleet_provider::SendGate>>) -> bool {
    gate.as_ref().is_none_or(|g| g.holds())
}

/// One request and its reply, with retransmits for an idempotent request;
/// each retransmit asks the worker's fence first (`gate`).
fn exchange(
    session: &mut Session,
    config: &RmcpConfig,
    request: &Request,
    deadline: StdInstant,
    gate: &Option<Arc<dyn bmcfleet_provider::SendGate>>,
) -> Exchange {
    let (sends, wait) = match request.retry {
        Retry::Safe => (config.retries + 1, config.attempt_timeout),
        Retry::Once => (1, config.attempt_timeout * (config.retries + 1)),
    };
    let expected_netfn = request.netfn | 1;
    for attempt in 0..sends {
        let now = StdInstant::now();
        if now >= deadline {
            break;
        }
        if attempt > 0 && !holds(gate) {
            break; // fenced off: no retransmit
        }
        if attempt > 0 || session.dirty {
            // More than one reply may now arrive.
            session.dirty = true;
        }
        let mut message = ipmi_rs::connection::Request::new(
            Message::new_raw(request.netfn, request.cmd, request.data.clone()),
            RequestTargetAddress::Bmc(LogicalUnit::Zero),
        );
        if let Err(e) = session.rmcp.send(&mut message) {
            tracing::debug!(error = ?e, "RMCP+ send failed.");
            return Exchange::Refused;
        }
        let attempt_end = (now + wait).min(deadline);
        while StdInstant::now() < attempt_end {
            match session.rmcp.recv() {
                Ok(reply) if reply.netfn_raw() == expected_netfn && reply.cmd() == request.cmd => {
                    return Exchange::Reply(Response { cc: reply.cc(), data: reply.data().to_vec() });
                }
                Ok(reply) => {
                    tracing::debug!(netfn = reply.netfn_raw(), cmd = reply.cmd(), "Discarded a stale IPMI reply.");
                }
                Err(RmcpIpmiError::Receive(RmcpIpmiReceiveError::Io(e))) => match e.kind() {
                    ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted => {}
                    ErrorKind::ConnectionRefused => return Exchange::Refused,
                    _ => {
                        tracing::debug!(error = %e, "RMCP+ receive failed.");
                        return Exchange::Refused;
                    }
                },
                Err(e) => {
                    // A datagram that does not decrypt/authenticate or is not IPMI.
                    tracing::debug!(error = ?e, "Discarded an undecodable datagram.");
                }
            }
        }
    }
    session.dirty = true;
    Exchange::NoReply
}

/// Maps an ipmi-rs handshake failure to a kind and a message.
/// `Timeout` here means "a handshake message got no reply": worth retrying.
fn classify_activation(e: &ActivationError) -> (TransportErrorKind, String) {
    use TransportErrorKind as K;
    let io_kind = |e: &std::io::Error| match e.kind() {
        ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted => K::Timeout,
        _ => K::Unreachable,
    };
    let recv_kind = |e: &RmcpIpmiReceiveError| match e {
        RmcpIpmiReceiveError::Io(e) => io_kind(e),
        _ => K::Protocol,
    };
    match e {
        ActivationError::BindSocket(e) => (K::Unreachable, format!("cannot open a UDP socket: {e}")),
        ActivationError::PingSend(e) | ActivationError::PongReceive(e) => {
            (io_kind(e), format!("no answer to the RMCP presence ping: {e}"))
        }
        ActivationError::PongRead => (K::Protocol, "malformed RMCP presence pong".into()),
        ActivationError::IpmiNotSupported => (K::Unsupported, "the host does not support IPMI over RMCP".into()),
        ActivationError::NoSupportedIpmiLANVersions | ActivationError::V1_5(_) => {
            (K::Unsupported, "the BMC does not offer IPMI 2.0 / RMCP+ sessions".into())
        }
        ActivationError::GetChannelAuthenticationCapabilities(e) => match e {
            ipmi_rs::IpmiError::Connection(RmcpIpmiError::Receive(r)) => {
                (recv_kind(r), "no reply to Get Channel Authentication Capabilities".into())
            }
            other => (K::Protocol, format!("Get Channel Authentication Capabilities failed: {other:?}")),
        },
        ActivationError::RmcpError(e) => (K::Protocol, format!("malformed RMCP header: {e:?}")),
        ActivationError::V2_0(e) => classify_v2(e, recv_kind),
    }
}

fn classify_v2(
    e: &V2_0ActivationError,
    recv_kind: impl Fn(&RmcpIpmiReceiveError) -> TransportErrorKind,
) -> (TransportErrorKind, String) {
    use TransportErrorKind as K;
    use V2_0ActivationError as A;
    match e {
        A::OpenSessionResponseReceive(r) | A::RakpMessage2Receive(r) | A::RakpMessage4Receive(r) => {
            (recv_kind(r), "a handshake message got no reply".into())
        }
        A::Io(e) => (K::Unreachable, format!("handshake I/O error: {e}")),
        A::OpenSessionRequestSend(e) | A::SendRakpMessage1(e) | A::RakpMessage3Send(e) => {
            (K::Unreachable, format!("cannot send a handshake message: {e:?}"))
        }
        A::OpenSessionResponseParse(ipmi_rs::rmcp::ParseSessionResponseError::HaveErrorCode(status)) => {
            let status = format!("{status:?}");
            if status.contains("InsufficientResources") {
                (K::Busy, format!("the BMC has no free session slot (Open Session status {status})"))
            } else {
                (
                    K::Unsupported,
                    format!(
                        "the BMC refused the RMCP+ Open Session request ({status}); bmcfleet offers cipher suite 3 \
                         (RAKP-HMAC-SHA1, HMAC-SHA1-96, AES-CBC-128) only"
                    ),
                )
            }
        }
        A::RakpMessage2Parse(RakpMessage2ParseError::ErrorStatusCode(status)) => match status {
            RakpMessage2ErrorStatusCode::UnauthorizedName => {
                (K::AuthFailed, "the BMC does not know this user name (RAKP status: unauthorized name)".into())
            }
            RakpMessage2ErrorStatusCode::InvalidRole
            | RakpMessage2ErrorStatusCode::UnauthorizedRoleOrPrivilegeLevelRequested => (
                K::PermissionDenied,
                format!("the user may not log in with Administrator privilege (RAKP status {status:?})"),
            ),
            RakpMessage2ErrorStatusCode::InsufficientResourcesToCreateSessionAtRequestedRole => {
                (K::Busy, "the BMC has no free session slot (RAKP status: insufficient resources)".into())
            }
            other => (K::Protocol, format!("RAKP message 2 error status {other:?}")),
        },
        A::ServerAuthenticationFailed => {
            (K::AuthFailed, "wrong password (the BMC's RAKP 2 key exchange code does not match)".into())
        }
        A::RakpMessage4InvalidIntegrityCheckValue => {
            (K::AuthFailed, "the BMC's RAKP 4 integrity check failed (password or BMC key mismatch)".into())
        }
        A::RakpMessage4Parse(RakpMessage4ParseError::ErrorStatusCode(status)) => {
            (K::AuthFailed, format!("the BMC rejected the RAKP 3 proof (status {status:?})"))
        }
        other => (K::Protocol, format!("RMCP+ handshake failed: {other:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn engine() -> Engine {
        Engine {
            peer: "127.0.0.1:9".parse().unwrap(),
            username: "admin".into(),
            password: Secret::new("password"),
            config: RmcpConfig::default(),
            session: None,
            handshakes: Arc::default(),
            keepalives: Arc::default(),
            gate: None,
        }
    }

    #[test]
    fn panics_become_typed_errors_and_the_engine_lives_on() {
        let mut e = engine();
        // What ipmi-rs's `.unwrap()` on a refused socket send looks like.
        let err = e
            .guarded::<()>(|_| panic!("called `Result::unwrap()` on an `Err` value: Io(Os {{ code: 111, kind: ConnectionRefused }})"))
            .unwrap_err();
        assert_eq!(err.kind, TransportErrorKind::Unreachable);
        let err = e.guarded::<()>(|_| panic!("not yet implemented: Handle wrapping session number")).unwrap_err();
        assert_eq!(err.kind, TransportErrorKind::Internal);
        assert!(err.message.contains("wrapping session number"), "{err}");
        assert_eq!(e.guarded(|_| Ok(7)).unwrap(), 7);
    }

    #[test]
    fn thread_deadline_is_slightly_earlier() {
        let deadline = Instant::now() + Duration::from_secs(10);
        let inner = thread_deadline(deadline);
        let outer = deadline.into_std();
        assert!(inner < outer && outer - inner <= Duration::from_millis(50));
    }

    #[test]
    fn session_id_is_read_from_the_state_field_only() {
        let debug = "Rmcp { active_state: Some(RmcpWithState(V2_0(State { socket: RmcpIpmiSocket { buffer: [0] }, \
                     session_id: 2, session_sequence_number: 5, state: CryptoState { password: \"<redacted>\" } }))) }";
        assert_eq!(session_id_from_debug(debug), Some(2));
        assert_eq!(session_id_from_debug("Rmcp { remote_console_session_id: 7 }"), None);
        assert_eq!(session_id_from_debug("A { session_id: 1 } B { session_id: 2 }"), None);
        assert_eq!(session_id_from_debug("no state"), None);
    }
}
