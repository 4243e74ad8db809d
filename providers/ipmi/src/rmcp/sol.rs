//! Serial over LAN (IPMI v2.0 chapter 15 and §24.1–24.3): payload type 1 on
//! an established RMCP+ session.
//!
//! [`SolSession::open`] takes an [`RmcpTransport`]'s session (suite 17 or
//! 3: SOL packets are authenticated and encrypted exactly as the session
//! negotiated), activates payload instance 1 (Activate Payload, app 0x48)
//! and hands the session to one task that owns it from then on:
//!
//! - **Output** (BMC → us): every SOL packet with a sequence number is
//!   acknowledged with the count of characters accepted (all of them: the
//!   data goes to a bounded queue of [`SolEvent`]s); a retransmitted packet
//!   (the same sequence number again, our ack was lost) is acknowledged
//!   again and not delivered twice. A BMC that waits for each ack (the
//!   protocol: one packet in flight) gets it at once. Packets arriving in
//!   a burst (more already queued: a BMC sending without waiting) are
//!   acknowledged by one ack of the latest, at most one per [`ACK_EVERY`]:
//!   every packet we send spends a session sequence number, and a BMC
//!   accepts numbers only within a window above the last one it *received*
//!   (32 on common BMCs); thousands of acks it drops unread while it
//!   floods would put every later packet of ours (typed input, keep-alive)
//!   beyond that window, silently discarded for the rest of the session. When the reader is slow and the queue
//!   is full, data is dropped and counted, and a [`SolEvent::Lost`] with
//!   the count comes before the next data that fits: memory stays bounded
//!   whatever the BMC sends.
//! - **Input** (us → BMC): at most one packet in flight (sequence numbers
//!   1..=15, wrapping; 0 is an ack-only packet), at most the BMC's inbound
//!   payload size (from the activation reply) and 255 characters. A
//!   partial accept resends the rest in the next packet; a NACK (the BMC
//!   cannot take characters now) resends after the ack timeout; a packet
//!   without any answer is retransmitted unchanged up to
//!   [`SolOptions::retries`] times, then the session ends as
//!   [`SolEnd::Unresponsive`].
//! - **Break**: a packet with the generate-break operation bit.
//! - **End**: the BMC's "SOL deactivating" status bit ends the output
//!   stream with [`SolEnd::Deactivated`]; [`SolSession::close`] (or
//!   dropping the session) sends Deactivate Payload (app 0x49) and Close
//!   Session. Every send asks the worker's fence first; a fenced session
//!   ends as [`SolEnd::Fenced`] without another word to the BMC.
//! - **Already active**: Activate Payload's completion code 0x80 is
//!   [`SolError::AlreadyActive`] unless [`SolOptions::take_over`] is set,
//!   in which case the other session's instance is deactivated (Deactivate
//!   Payload) and activation retried once.
//!
//! Keep-alive: Get Device ID when nothing was sent for the session's
//! keep-alive interval. Nothing here logs character data.

use super::crypto::random16;
use super::{wire, Detached, RmcpTransport, Session, CMD_CLOSE_SESSION, CMD_GET_DEVICE_ID, NETFN_APP};
use crate::error::{completion_code_meaning, TransportError, TransportErrorKind};
use crate::transport::{Request, Response, Retry, Transport};
use bmcfleet_provider::SendGate;
use std::collections::VecDeque;
use std::fmt;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use wire::SolPacket;

/// The SOL payload instance bmcfleet uses (the one every BMC offers).
pub const SOL_INSTANCE: u8 = 1;
const CMD_ACTIVATE_PAYLOAD: u8 = 0x48;
const CMD_DEACTIVATE_PAYLOAD: u8 = 0x49;
const NETFN_TRANSPORT: u8 = 0x0C;
const CMD_GET_SOL_CONFIG: u8 = 0x22;
/// Channel number meaning "the channel this request arrives on".
const CURRENT_CHANNEL: u8 = 0x0E;
/// Input bytes held by the task beyond the packet in flight.
const PENDING_INPUT: usize = 4096;
/// Characters in one SOL packet at most (the accepted-count field is a byte).
const MAX_CHARS: usize = 255;
/// Least time between two acks of a burst of BMC packets (see the module
/// docs): at most 50 a second while a BMC sends without waiting for them,
/// far under the 32 numbers of a BMC's sequence window per read it misses.
pub const ACK_EVERY: Duration = Duration::from_millis(20);

/// Choices of an SOL session.
#[derive(Clone, Debug)]
pub struct SolOptions {
    /// Deactivate another session's SOL instance when it holds the payload
    /// (only when an operator asked for it).
    pub take_over: bool,
    /// Output events queued for the reader before data is dropped (each
    /// holds at most one packet's characters, ≤ 255 bytes).
    pub output_queue: usize,
    /// Input writes queued before [`SolSession::send`] waits.
    pub input_queue: usize,
    /// How long to wait for the BMC's acknowledgement of a packet.
    pub ack_timeout: Duration,
    /// Retransmits of an unanswered packet before the session is given up.
    pub retries: u32,
    /// Resends of a NACKed packet (the BMC's buffer is full, or the host
    /// holds the line) before the session is given up.
    pub nack_retries: u32,
    /// Read the SOL bit rate (Get SOL Configuration Parameters 6, else 5)
    /// before activating, for [`SolSession::bit_rate`]: what bounds the
    /// output a gap can have cost. A BMC that does not answer costs up to
    /// the session's request timeout, so only when asked.
    pub read_bit_rate: bool,
}

impl Default for SolOptions {
    fn default() -> Self {
        SolOptions {
            take_over: false,
            output_queue: 256,
            input_queue: 64,
            ack_timeout: Duration::from_millis(500),
            retries: 6,
            nack_retries: 120,
            read_bit_rate: false,
        }
    }
}

/// Why an SOL session could not be opened or used.
#[derive(Debug, thiserror::Error)]
pub enum SolError {
    /// Another session holds SOL instance 1 (completion code 0x80).
    #[error("{peer}: SOL is already active on another session (take over only when the operator asks)")]
    AlreadyActive { peer: SocketAddr },
    /// The BMC has SOL disabled, or the user may not use it.
    #[error("{peer}: the BMC refused to activate SOL: completion code 0x{cc:02X} ({meaning})")]
    Refused { peer: SocketAddr, cc: u8, meaning: &'static str },
    /// The session to the BMC failed.
    #[error(transparent)]
    Transport(#[from] TransportError),
    /// The session has ended (see the reason).
    #[error("the SOL session has ended: {0}")]
    Ended(SolEnd),
}

impl From<SolError> for bmcfleet_provider::ProviderError {
    fn from(e: SolError) -> Self {
        use bmcfleet_schema::ErrorCode;
        let code = match &e {
            SolError::AlreadyActive { .. } => ErrorCode::Conflict,
            SolError::Refused { cc: 0x82, .. } => ErrorCode::Conflict,
            SolError::Refused { .. } => ErrorCode::Unsupported,
            SolError::Transport(t) => return t.clone().into(),
            SolError::Ended(SolEnd::Fenced) => ErrorCode::Interrupted,
            SolError::Ended(SolEnd::Unresponsive) => ErrorCode::Timeout,
            SolError::Ended(_) => ErrorCode::Unavailable,
        };
        bmcfleet_provider::ProviderError::new(code, e.to_string())
    }
}

/// Why an SOL session's output ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SolEnd {
    /// We deactivated the payload (close or drop).
    Closed,
    /// The BMC set "SOL deactivating" (another session took over, SOL was
    /// disabled, the BMC is going away).
    Deactivated,
    /// The BMC stopped acknowledging packets or answering requests.
    Unresponsive,
    /// This worker no longer holds the BMC's lease: nothing more was sent.
    Fenced,
    /// The session failed otherwise.
    Failed(String),
}

impl fmt::Display for SolEnd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SolEnd::Closed => f.write_str("closed by this side (payload deactivated)"),
            SolEnd::Deactivated => f.write_str("the BMC deactivated SOL"),
            SolEnd::Unresponsive => f.write_str("the BMC stopped acknowledging SOL packets"),
            SolEnd::Fenced => f.write_str("this worker no longer holds the BMC's lease"),
            SolEnd::Failed(why) => write!(f, "failed: {why}"),
        }
    }
}

/// What the BMC's side of the console produced, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SolEvent {
    /// Characters from the host's serial port.
    Data(Vec<u8>),
    /// Characters dropped here because the reader was behind (bounded
    /// output queue); they fell between the previous and the next data.
    Lost(u64),
    /// The BMC detected a break from the host.
    BreakDetected,
    /// The BMC reported a transmit overrun: it dropped characters itself.
    Overrun,
}

/// The BMC's SOL configuration (Get SOL Configuration Parameters, §26.3).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SolConfiguration {
    /// Parameter 1, SOL Enable.
    pub enabled: bool,
    /// Parameter 6, volatile bit rate (bits/s), if set and known.
    pub bit_rate: Option<u32>,
    /// Parameter 5, non-volatile bit rate (bits/s), if set and known.
    pub non_volatile_bit_rate: Option<u32>,
}

/// Bit rate codes of SOL parameters 5 and 6 (§26.3 table 26-5).
pub fn bit_rate(code: u8) -> Option<u32> {
    match code & 0x0F {
        0x06 => Some(9_600),
        0x07 => Some(19_200),
        0x08 => Some(38_400),
        0x09 => Some(57_600),
        0x0A => Some(115_200),
        _ => None,
    }
}

/// Reads SOL Enable and the bit rates (Get SOL Configuration Parameters,
/// transport 0x0C / 0x22, current channel). A parameter the BMC does not
/// support (completion code 0x80) reads as `None`.
pub async fn sol_configuration<T: Transport + ?Sized>(
    transport: &mut T,
    deadline: Instant,
) -> Result<SolConfiguration, TransportError> {
    async fn param<T: Transport + ?Sized>(
        t: &mut T,
        deadline: Instant,
        selector: u8,
    ) -> Result<Option<u8>, TransportError> {
        let request = Request {
            netfn: NETFN_TRANSPORT,
            cmd: CMD_GET_SOL_CONFIG,
            data: vec![CURRENT_CHANNEL, selector, 0, 0],
            retry: Retry::Safe,
        };
        let Response { cc, data } = t.call(deadline, &request).await?;
        match cc {
            0 => data.get(1).copied().map(Some).ok_or_else(|| {
                TransportError::new(
                    TransportErrorKind::Protocol,
                    format!("Get SOL Configuration Parameters {selector}: reply without parameter data"),
                )
            }),
            0x80 => Ok(None),
            cc => Err(TransportError::new(
                TransportErrorKind::Protocol,
                format!(
                    "Get SOL Configuration Parameters {selector}: completion code 0x{cc:02X} ({})",
                    completion_code_meaning(cc)
                ),
            )),
        }
    }
    let enabled = param(transport, deadline, 1).await?.is_some_and(|b| b & 1 == 1);
    let non_volatile_bit_rate = param(transport, deadline, 5).await?.and_then(bit_rate);
    let bit_rate = param(transport, deadline, 6).await?.and_then(bit_rate);
    Ok(SolConfiguration { enabled, bit_rate, non_volatile_bit_rate })
}

/// Counters of one SOL session (read with [`SolSession::stats`]).
#[derive(Debug, Default)]
struct Counters {
    received: AtomicU64,
    sent: AtomicU64,
    lost: AtomicU64,
    retransmits: AtomicU64,
    nacks: AtomicU64,
    duplicates: AtomicU64,
    discarded: AtomicU64,
}

/// A snapshot of an SOL session's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SolStats {
    /// Characters received from the BMC (delivered or lost).
    pub received: u64,
    /// Characters the BMC accepted from us.
    pub sent: u64,
    /// Characters dropped because the reader was behind.
    pub lost: u64,
    /// Our packets retransmitted for a missing acknowledgement.
    pub retransmits: u64,
    /// Our packets the BMC NACKed.
    pub nacks: u64,
    /// The BMC's packets received again (our ack was lost): acked, not delivered.
    pub duplicates: u64,
    /// Datagrams refused (integrity, replay, malformed SOL header).
    pub discarded: u64,
}

enum Command {
    Send(Vec<u8>),
    Break(oneshot::Sender<()>),
    Close,
}

/// An active SOL session; see the module docs.
pub struct SolSession {
    commands: mpsc::Sender<Command>,
    events: mpsc::Receiver<SolEvent>,
    end: Arc<Mutex<Option<SolEnd>>>,
    counters: Arc<Counters>,
    task: Option<JoinHandle<()>>,
    peer: SocketAddr,
    max_chars: usize,
    bit_rate: Option<u32>,
}

impl SolSession {
    /// Activates SOL on `transport`'s session (which it takes over).
    pub async fn open(
        mut transport: RmcpTransport,
        options: SolOptions,
        deadline: Instant,
    ) -> Result<SolSession, SolError> {
        // The line's bit rate, when asked for: volatile (parameter 6), else
        // non-volatile (5). Not knowing it is no reason to refuse the console.
        let bit_rate = if options.read_bit_rate {
            match sol_configuration(&mut transport, deadline).await {
                Ok(c) => c.bit_rate.or(c.non_volatile_bit_rate),
                Err(e) => {
                    tracing::debug!(error = %e, "Cannot read the SOL bit rate.");
                    None
                }
            }
        } else {
            None
        };
        let Detached { session, gate, config, peer, suite } = transport.detach().await?;
        let (events_tx, events) = mpsc::channel(options.output_queue.max(1));
        let (commands, commands_rx) = mpsc::channel(options.input_queue.max(1));
        let counters = Arc::new(Counters::default());
        let mut worker = Worker {
            session,
            gate,
            peer,
            attempt_timeout: config.attempt_timeout,
            request_retries: config.retries,
            keepalive: config.keepalive_interval,
            options,
            events: events_tx,
            counters: counters.clone(),
            tx_seq: 0,
            inflight: None,
            pending: VecDeque::new(),
            breaks: Vec::new(),
            rx_last: None,
            max_chars: MAX_CHARS,
            loss_pending: 0,
            last_send: Instant::now(),
            end: None,
            ack_due: None,
            last_ack: Instant::now(),
            sync: true,
        };
        let encrypted = suite.is_some_and(|s| s.encrypts());
        let authenticated = suite.is_some_and(|s| s.icv_len() > 0);
        match worker.activate(encrypted, authenticated, deadline).await {
            Ok(()) => {}
            Err(e) => {
                worker.close_session().await;
                return Err(e);
            }
        }
        let max_chars = worker.max_chars;
        let end = Arc::new(Mutex::new(None));
        let task = tokio::spawn(worker.run(commands_rx, end.clone()));
        tracing::debug!(bmc = %peer, max_chars, "SOL payload activated.");
        Ok(SolSession { commands, events, end, counters, task: Some(task), peer, max_chars, bit_rate })
    }

    /// The next event of the console's output, in order; `None` once the
    /// session has ended ([`SolSession::end_reason`] says why).
    pub async fn recv(&mut self) -> Option<SolEvent> {
        self.events.recv().await
    }

    /// Why the session ended, once it has.
    pub fn end_reason(&self) -> Option<SolEnd> {
        self.end.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn ended(&self) -> SolError {
        SolError::Ended(self.end_reason().unwrap_or(SolEnd::Failed("the SOL task is gone".into())))
    }

    /// Queues characters for the host's serial port, in order; waits while
    /// the input queue is full.
    pub async fn send(&self, bytes: &[u8]) -> Result<(), SolError> {
        for chunk in bytes.chunks(MAX_CHARS) {
            self.commands.send(Command::Send(chunk.to_vec())).await.map_err(|_| self.ended())?;
        }
        Ok(())
    }

    /// Sends a break to the host's serial port (after the characters queued
    /// before it) and waits until the BMC acknowledged it.
    pub async fn send_break(&self) -> Result<(), SolError> {
        let (done, acked) = oneshot::channel();
        self.commands.send(Command::Break(done)).await.map_err(|_| self.ended())?;
        acked.await.map_err(|_| self.ended())
    }

    /// Deactivates the payload and closes the RMCP+ session; returns why
    /// the session ended (`Closed`, or what ended it before).
    pub async fn close(mut self) -> SolEnd {
        let _ = self.commands.send(Command::Close).await;
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
        self.end_reason().unwrap_or(SolEnd::Closed)
    }

    /// The session's counters.
    pub fn stats(&self) -> SolStats {
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        SolStats {
            received: get(&c.received),
            sent: get(&c.sent),
            lost: get(&c.lost),
            retransmits: get(&c.retransmits),
            nacks: get(&c.nacks),
            duplicates: get(&c.duplicates),
            discarded: get(&c.discarded),
        }
    }

    /// Characters per SOL packet we send (from the BMC's activation reply).
    pub fn max_chars(&self) -> usize {
        self.max_chars
    }

    /// The BMC's socket address.
    pub fn peer(&self) -> SocketAddr {
        self.peer
    }

    /// The SOL line's bit rate as the BMC reported it before activation
    /// (only with [`SolOptions::read_bit_rate`]; `None` when not read, not
    /// set or not a rate of the spec's table).
    pub fn bit_rate(&self) -> Option<u32> {
        self.bit_rate
    }
}

impl Drop for SolSession {
    fn drop(&mut self) {
        // The task sees the command channel close and deactivates the
        // payload and closes the session on its own.
        let _ = self.commands.try_send(Command::Close);
    }
}

/// Our packet waiting for the BMC's acknowledgement.
struct Inflight {
    seq: u8,
    data: Vec<u8>,
    op: u8,
    due: Instant,
    retransmits: u32,
    nacks: u32,
    /// NACKed since the last send: the next send is not a retransmit.
    nacked: bool,
    /// Breaks carried by this packet, told when it is acknowledged.
    breaks: Vec<oneshot::Sender<()>>,
}

/// The task owning an SOL session.
struct Worker {
    session: Session,
    gate: Option<Arc<dyn SendGate>>,
    peer: SocketAddr,
    attempt_timeout: Duration,
    request_retries: u32,
    keepalive: Duration,
    options: SolOptions,
    events: mpsc::Sender<SolEvent>,
    counters: Arc<Counters>,
    /// Our last SOL packet sequence number (1..=15; 0 before the first).
    tx_seq: u8,
    inflight: Option<Inflight>,
    pending: VecDeque<u8>,
    /// Breaks asked for, to go with the next packet.
    breaks: Vec<oneshot::Sender<()>>,
    /// The BMC's last packet: its sequence number and the count we accepted.
    rx_last: Option<(u8, u8)>,
    max_chars: usize,
    /// Characters dropped since the last [`SolEvent::Lost`].
    loss_pending: u64,
    last_send: Instant,
    end: Option<SolEnd>,
    /// The BMC's latest packet not acknowledged yet (sequence number, count).
    ack_due: Option<(u8, u8)>,
    /// When the last ack was sent.
    last_ack: Instant,
    /// The first packet after activation carries no characters: some BMCs
    /// (ipmi_sim) keep the last console packet's sequence number across
    /// activations and take a new session's first packet with the same
    /// number for a retransmission of the old one (forwarding only the
    /// characters beyond its old count). An empty packet is harmless
    /// either way, and the data after it has a number the BMC did not see
    /// last.
    sync: bool,
}

enum Step {
    Datagram(Option<Vec<u8>>),
    Command(Option<Command>),
}

impl Worker {
    fn may_send(&self) -> bool {
        self.gate.as_ref().is_none_or(|g| g.holds())
    }

    /// Sends one payload of the session (IPMI or SOL).
    async fn send_payload(&mut self, payload_type: u8, message: &[u8]) -> Result<(), SolEnd> {
        self.session.endpoint.reserve().await;
        if !self.may_send() {
            return Err(SolEnd::Fenced);
        }
        let seq =
            self.session.out_seq.checked_add(1).ok_or_else(|| {
                SolEnd::Failed("the session's sequence numbers are exhausted; open a new session".into())
            })?;
        self.session.out_seq = seq;
        let packet =
            wire::payload_packet(&self.session.keys, payload_type, self.session.bmc_sid, seq, message, random16());
        self.session
            .endpoint
            .send(&packet)
            .await
            .map_err(|e| SolEnd::Failed(format!("{}: cannot send: {e}", self.peer)))?;
        self.last_send = Instant::now();
        Ok(())
    }

    /// Verifies and opens a datagram of this session (`None`: discarded).
    fn open(&mut self, datagram: &[u8]) -> Option<wire::Inbound> {
        let inbound = match wire::open_session_packet(&self.session.keys, datagram) {
            Ok(i) if i.session_id == self.session.endpoint.id() => i,
            Ok(_) => return None,
            Err(why) => {
                tracing::debug!(bmc = %self.peer, why, "Discarded an RMCP+ datagram on an SOL session.");
                self.counters.discarded.fetch_add(1, Ordering::Relaxed);
                return None;
            }
        };
        if !self.session.window.accept(inbound.seq) {
            self.counters.discarded.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        Some(inbound)
    }

    /// One IPMI request on the SOL session; SOL packets arriving meanwhile
    /// are handled as usual. Sent `sends` times at most.
    async fn request(
        &mut self,
        netfn: u8,
        cmd: u8,
        data: &[u8],
        sends: u32,
        deadline: Instant,
    ) -> Result<Response, SolEnd> {
        self.session.rq_seq = self.session.rq_seq % 0x3F + 1;
        let message = wire::ipmi_request(netfn, cmd, self.session.rq_seq, data);
        let wait = if sends <= 1 { self.attempt_timeout * (self.request_retries + 1) } else { self.attempt_timeout };
        for _ in 0..sends.max(1) {
            if Instant::now() >= deadline {
                break;
            }
            self.send_payload(wire::PT_IPMI, &message).await?;
            let attempt_end = (Instant::now() + wait).min(deadline);
            while let Some(datagram) = self.session.endpoint.recv(attempt_end).await {
                let Some(inbound) = self.open(&datagram) else { continue };
                if inbound.payload_type == wire::PT_SOL {
                    self.on_sol(&inbound.message).await?;
                    self.send_due_ack().await?;
                    continue;
                }
                match wire::ipmi_reply(&inbound.message) {
                    Ok(r) if r.rq_seq == self.session.rq_seq && r.netfn == netfn | 1 && r.cmd == cmd => {
                        return Ok(Response { cc: r.cc, data: r.data });
                    }
                    Ok(_) => {}
                    Err(why) => tracing::debug!(bmc = %self.peer, why, "Discarded a malformed IPMI reply."),
                }
            }
        }
        Err(SolEnd::Unresponsive)
    }

    fn unanswered(&self, what: &str, end: SolEnd) -> SolError {
        match end {
            SolEnd::Unresponsive => SolError::Transport(TransportError::new(
                TransportErrorKind::Timeout,
                format!("{}: no reply to {what}", self.peer),
            )),
            other => SolError::Ended(other),
        }
    }

    /// Activate Payload (§24.1), with take-over when asked.
    async fn activate(&mut self, encrypted: bool, authenticated: bool, deadline: Instant) -> Result<(), SolError> {
        // Auxiliary byte 1: encryption, authentication as the session has
        // them; serial/modem alerts deferred while SOL is active (01b).
        let aux = if encrypted { 0x80 } else { 0 } | if authenticated { 0x40 } else { 0 } | 0x10;
        let data = [wire::PT_SOL, SOL_INSTANCE, aux, 0, 0, 0];
        let mut took_over = false;
        loop {
            // Sent once: a retransmitted activation would find its own
            // instance active.
            let reply = self
                .request(NETFN_APP, CMD_ACTIVATE_PAYLOAD, &data, 1, deadline)
                .await
                .map_err(|e| self.unanswered("Activate Payload", e))?;
            match reply.cc {
                0 => return self.activated(&reply.data),
                0x80 if self.options.take_over && !took_over => {
                    took_over = true;
                    tracing::info!(bmc = %self.peer, "SOL is active on another session; taking it over as asked.");
                    let r = self
                        .request(
                            NETFN_APP,
                            CMD_DEACTIVATE_PAYLOAD,
                            &[wire::PT_SOL, SOL_INSTANCE, 0, 0, 0, 0],
                            1,
                            deadline,
                        )
                        .await
                        .map_err(|e| self.unanswered("Deactivate Payload", e))?;
                    if r.cc != 0 && r.cc != 0x80 {
                        return Err(SolError::Refused {
                            peer: self.peer,
                            cc: r.cc,
                            meaning: "the other session's SOL could not be deactivated",
                        });
                    }
                }
                0x80 => return Err(SolError::AlreadyActive { peer: self.peer }),
                cc => {
                    let meaning = match cc {
                        0x81 => "SOL is disabled",
                        0x82 => "payload activation limit reached",
                        0x83 => "cannot activate the payload with encryption",
                        0x84 => "cannot activate the payload without encryption",
                        other => completion_code_meaning(other),
                    };
                    return Err(SolError::Refused { peer: self.peer, cc, meaning });
                }
            }
        }
    }

    /// Reads the activation reply (§24.1 table 24-2): the BMC's inbound
    /// payload size bounds what we put in one packet.
    fn activated(&mut self, data: &[u8]) -> Result<(), SolError> {
        let protocol = |what: &str| {
            SolError::Transport(TransportError::new(TransportErrorKind::Protocol, format!("{}: {what}", self.peer)))
        };
        let Some(sizes) = data.get(4..8) else {
            return Err(protocol("Activate Payload reply too short"));
        };
        let inbound = usize::from(u16::from_le_bytes([sizes[0], sizes[1]]));
        if inbound <= 4 {
            return Err(protocol("the BMC accepts no SOL character data (inbound payload size)"));
        }
        self.max_chars = (inbound - 4).min(MAX_CHARS);
        if let Some(port) = data.get(8..10).map(|p| u16::from_le_bytes([p[0], p[1]])) {
            if port != self.peer.port() && port != 623 {
                tracing::debug!(bmc = %self.peer, port, "The BMC names another SOL port; staying on the session's.");
            }
        }
        Ok(())
    }

    /// Handles one SOL packet from the BMC.
    async fn on_sol(&mut self, message: &[u8]) -> Result<(), SolEnd> {
        let packet = match SolPacket::parse(message) {
            Ok(p) => p,
            Err(why) => {
                tracing::debug!(bmc = %self.peer, why, "Discarded a malformed SOL packet.");
                self.counters.discarded.fetch_add(1, Ordering::Relaxed);
                return Ok(());
            }
        };
        // The acknowledgement of our packet in flight.
        if packet.ack_seq != 0 {
            if let Some(inflight) = self.inflight.as_mut().filter(|i| i.seq == packet.ack_seq) {
                // An ack accepting none of the characters is a NACK in
                // effect: paced and bounded the same way, so a BMC that
                // never accepts cannot keep us resending forever.
                let refused = packet.accepted == 0 && !inflight.data.is_empty();
                if packet.op & wire::SOL_ST_NACK != 0 || refused {
                    self.counters.nacks.fetch_add(1, Ordering::Relaxed);
                    inflight.nacks += 1;
                    inflight.nacked = true;
                    if inflight.nacks > self.options.nack_retries {
                        return Err(SolEnd::Unresponsive);
                    }
                    inflight.due = Instant::now() + self.options.ack_timeout;
                } else if let Some(done) = self.inflight.take() {
                    let accepted = usize::from(packet.accepted).min(done.data.len());
                    self.counters.sent.fetch_add(accepted as u64, Ordering::Relaxed);
                    // The rest goes first in the next packet.
                    for &b in done.data[accepted..].iter().rev() {
                        self.pending.push_front(b);
                    }
                    for told in done.breaks {
                        let _ = told.send(());
                    }
                }
            }
        }
        // Character data: ack it (again, for a retransmission).
        if packet.seq != 0 {
            let count = packet.data.len().min(MAX_CHARS) as u8;
            match self.rx_last {
                Some((seq, accepted)) if seq == packet.seq => {
                    self.counters.duplicates.fetch_add(1, Ordering::Relaxed);
                    self.ack_due = Some((seq, accepted));
                }
                _ => {
                    self.rx_last = Some((packet.seq, count));
                    self.counters.received.fetch_add(packet.data.len() as u64, Ordering::Relaxed);
                    self.ack_due = Some((packet.seq, count));
                    if !packet.data.is_empty() {
                        self.deliver(SolEvent::Data(packet.data));
                    }
                    if packet.op & wire::SOL_ST_BREAK != 0 {
                        self.deliver(SolEvent::BreakDetected);
                    }
                    if packet.op & wire::SOL_ST_OVERRUN != 0 {
                        self.deliver(SolEvent::Overrun);
                    }
                }
            }
        }
        if packet.op & wire::SOL_ST_DEACTIVATING != 0 {
            self.end = Some(SolEnd::Deactivated);
        }
        Ok(())
    }

    async fn ack(&mut self, seq: u8, accepted: u8) -> Result<(), SolEnd> {
        let ack = SolPacket { seq: 0, ack_seq: seq, accepted, op: 0, data: Vec::new() };
        self.send_payload(wire::PT_SOL, &ack.encode()).await
    }

    /// When the due ack goes out (`None`: none is due).
    fn ack_at(&self) -> Option<Instant> {
        self.ack_due.map(
            |_| {
                if self.session.endpoint.has_queued() {
                    self.last_ack + ACK_EVERY
                } else {
                    Instant::now()
                }
            },
        )
    }

    /// Sends the due ack: at once when nothing else is queued (the BMC is
    /// waiting for it), else once [`ACK_EVERY`] has passed since the last.
    async fn send_due_ack(&mut self) -> Result<(), SolEnd> {
        let Some((seq, count)) = self.ack_due else { return Ok(()) };
        if self.ack_at().is_some_and(|at| at <= Instant::now()) {
            self.ack_due = None;
            self.last_ack = Instant::now();
            self.ack(seq, count).await?;
        }
        Ok(())
    }

    /// Queues an event for the reader, or counts it lost when the reader
    /// is behind (a [`SolEvent::Lost`] goes first once there is room).
    fn deliver(&mut self, event: SolEvent) {
        let size = |e: &SolEvent| match e {
            SolEvent::Data(d) => d.len() as u64,
            _ => 0,
        };
        if self.loss_pending > 0 {
            match self.events.try_send(SolEvent::Lost(self.loss_pending)) {
                Ok(()) => self.loss_pending = 0,
                Err(mpsc::error::TrySendError::Full(_)) => {
                    self.loss_pending += size(&event);
                    self.counters.lost.fetch_add(size(&event), Ordering::Relaxed);
                    return;
                }
                Err(mpsc::error::TrySendError::Closed(_)) => return,
            }
        }
        if let Err(mpsc::error::TrySendError::Full(event)) = self.events.try_send(event) {
            self.loss_pending += size(&event);
            self.counters.lost.fetch_add(size(&event), Ordering::Relaxed);
        }
    }

    /// Sends the next packet when none is in flight and there is input.
    async fn send_next(&mut self) -> Result<(), SolEnd> {
        if self.inflight.is_some() || (self.pending.is_empty() && self.breaks.is_empty() && !self.sync) {
            return Ok(());
        }
        self.sync = false;
        let take = self.pending.len().min(self.max_chars);
        let data: Vec<u8> = self.pending.drain(..take).collect();
        let breaks = std::mem::take(&mut self.breaks);
        let op = if breaks.is_empty() { 0 } else { wire::SOL_OP_BREAK };
        self.tx_seq = self.tx_seq % 15 + 1;
        let packet = SolPacket { seq: self.tx_seq, ack_seq: 0, accepted: 0, op, data };
        self.send_payload(wire::PT_SOL, &packet.encode()).await?;
        self.inflight = Some(Inflight {
            seq: packet.seq,
            data: packet.data,
            op,
            due: Instant::now() + self.options.ack_timeout,
            retransmits: 0,
            nacks: 0,
            nacked: false,
            breaks,
        });
        Ok(())
    }

    /// The ack timeout of the packet in flight, or the keep-alive.
    async fn on_timer(&mut self) -> Result<(), SolEnd> {
        let now = Instant::now();
        if let Some(inflight) = self.inflight.as_mut() {
            if now < inflight.due {
                return Ok(());
            }
            if !inflight.nacked {
                inflight.retransmits += 1;
                if inflight.retransmits > self.options.retries {
                    return Err(SolEnd::Unresponsive);
                }
                self.counters.retransmits.fetch_add(1, Ordering::Relaxed);
            }
            // A NACKed packet is offered again as it was; its next answer decides.
            inflight.nacked = false;
            inflight.due = now + self.options.ack_timeout;
            let packet =
                SolPacket { seq: inflight.seq, ack_seq: 0, accepted: 0, op: inflight.op, data: inflight.data.clone() };
            return self.send_payload(wire::PT_SOL, &packet.encode()).await;
        }
        if now >= self.last_send + self.keepalive {
            let deadline = now + self.attempt_timeout * (self.request_retries + 1);
            self.request(NETFN_APP, CMD_GET_DEVICE_ID, &[], self.request_retries + 1, deadline).await?;
        }
        Ok(())
    }

    fn next_timer(&self) -> Instant {
        let timer = match &self.inflight {
            Some(i) => i.due,
            None => self.last_send + self.keepalive,
        };
        self.ack_at().map_or(timer, |at| at.min(timer))
    }

    async fn run(mut self, mut commands: mpsc::Receiver<Command>, end: Arc<Mutex<Option<SolEnd>>>) {
        let reason = loop {
            if let Some(reason) = self.end.take() {
                break reason;
            }
            if let Err(reason) = self.send_next().await {
                break reason;
            }
            let timer = self.next_timer();
            let room = self.pending.len() < PENDING_INPUT;
            let step = tokio::select! {
                datagram = self.session.endpoint.recv(timer) => Step::Datagram(datagram),
                command = commands.recv(), if room => Step::Command(command),
            };
            let result = match step {
                Step::Datagram(Some(datagram)) => match self.open(&datagram) {
                    Some(inbound) if inbound.payload_type == wire::PT_SOL => self.on_sol(&inbound.message).await,
                    // A late IPMI reply (keep-alive retransmit): nothing to do.
                    _ => Ok(()),
                },
                // Timers run below, after every step.
                Step::Datagram(None) => Ok(()),
                Step::Command(Some(Command::Send(bytes))) => {
                    self.pending.extend(bytes);
                    Ok(())
                }
                Step::Command(Some(Command::Break(done))) => {
                    self.breaks.push(done);
                    Ok(())
                }
                Step::Command(Some(Command::Close) | None) => Err(SolEnd::Closed),
            };
            if let Err(reason) = result {
                break reason;
            }
            // Acks and timers after every step, not only when the BMC is
            // quiet: a BMC that never stops sending must not hold back the
            // retransmission of typed input (nor its acks).
            if let Err(reason) = self.send_due_ack().await {
                break reason;
            }
            if Instant::now() >= self.next_timer() {
                if let Err(reason) = self.on_timer().await {
                    break reason;
                }
            }
        };
        tracing::debug!(bmc = %self.peer, reason = %reason, "SOL session ending.");
        match reason {
            SolEnd::Fenced => {}
            SolEnd::Deactivated => self.close_session().await,
            _ => {
                let deadline = Instant::now() + self.attempt_timeout * 2;
                let data = [wire::PT_SOL, SOL_INSTANCE, 0, 0, 0, 0];
                match self.request(NETFN_APP, CMD_DEACTIVATE_PAYLOAD, &data, 2, deadline).await {
                    Ok(r) => tracing::debug!(bmc = %self.peer, cc = r.cc, "SOL payload deactivated."),
                    Err(e) => tracing::debug!(bmc = %self.peer, reason = %e, "No reply to Deactivate Payload."),
                }
                self.close_session().await;
            }
        }
        *end.lock().unwrap_or_else(|p| p.into_inner()) = Some(reason);
        // Dropping the worker closes the event queue: the reader sees the end.
    }

    /// Close Session, best effort.
    async fn close_session(&mut self) {
        if !self.may_send() {
            return;
        }
        let deadline = Instant::now() + self.attempt_timeout * 2;
        let sid = self.session.bmc_sid.to_le_bytes();
        let _ = self.request(NETFN_APP, CMD_CLOSE_SESSION, &sid, 1, deadline).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bit_rate_codes() {
        assert_eq!(bit_rate(0x0A), Some(115_200));
        assert_eq!(bit_rate(0x06), Some(9_600));
        assert_eq!(bit_rate(0x00), None);
        assert_eq!(bit_rate(0x0F), None);
    }
}
