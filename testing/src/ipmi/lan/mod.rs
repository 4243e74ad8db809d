//! A wire-level IPMI 2.0 / RMCP+ responder: many simulated BMCs on loopback
//! UDP ports, each speaking the LAN protocol to real clients (`ipmitool -I
//! lanplus`, FreeIPMI, bmcfleet's own provider) over [`SpecBmc`]'s command
//! semantics and a [`SpecHandle`] per BMC.
//!
//! # What is implemented (IPMI v2.0 rev 1.1, errata for SHA-256)
//! - RMCP and ASF Presence Ping → Pong (chapter 13).
//! - Session-less, in IPMI 1.5 framing with auth type none or in
//!   RMCP+ framing with session id 0: Get Channel Authentication
//!   Capabilities (§22.13; IPMI 2.0 extended data when the request sets
//!   channel bit 7), Get Channel Cipher Suites (§22.15, App 0x54) listing
//!   the offered suites, Get System GUID (§22.14).
//! - RMCP+ session setup (§13.17–§13.23): Open Session Request/Response
//!   (requested maximum privilege, 0 = highest; status 0x11 when the
//!   proposed algorithms form no offered suite, 0x04/0x05/0x10 for an
//!   algorithm no suite here uses, 0x01 beyond the session limit), RAKP 1–4
//!   with name-only and username/privilege lookup (RAKP 1 role bit 4),
//!   0x09 for a reserved role or one above the Open Session maximum, 0x0A
//!   for a role above the user's limit, 0x0D for an unknown, disabled or
//!   messaging-disabled user, 0x0F when RAKP 3's code is wrong.
//! - Cipher suites 1, 2, 3 (RAKP-HMAC-SHA1, HMAC-SHA1-96, AES-CBC-128) and
//!   17 (RAKP-HMAC-SHA256, HMAC-SHA256-128, AES-CBC-128), see [`crypto`];
//!   suite 0 (and every MD5/RC4 suite) is refused.
//! - Sessions: payloads protected as negotiated, session trailer and
//!   integrity pad checked, ICV verified (a bad one: dropped silently),
//!   inbound sequence numbers in a sliding window per sequence space,
//!   outbound counters, Set Session Privilege Level bounded by the RAKP
//!   role, Close Session (App 0x3C, own session, or another by id or handle
//!   as Administrator), Get Session Info (App 0x3D), idle expiry and a
//!   session limit. Each session's privilege is applied to
//!   [`SpecState::session_privilege`]/`privilege_limit` while its request
//!   runs, so `handle`'s 0xD4 checks hold per session. Replies mirror the
//!   request's rqSeq, netfn (+1), LUNs and command.
//! - Serial over LAN (payload type 1, `sol.rs`): Activate/Deactivate
//!   Payload, acked console packets, numbered host output, break, and SOL
//!   faults ([`SolFaults`]: lost acks, NACKs, partial accepts, duplicated
//!   output, flooding, BMC-initiated deactivation). Proven with bmcfleet's
//!   own SOL (`providers/ipmi/tests/sol_responder.rs`) only: no
//!   third-party SOL client is run against it yet.
//! - Faults per BMC at run time ([`LanFaults`], [`LanBmc::forget_sessions`]),
//!   and [`SpecHandle::inject`]'s per-command faults. Counters for
//!   assertions ([`LanStats`]).
//!
//! Section numbers are those of IPMI v2.0 rev 1.1.
//!
//! # Proven with
//! Third-party clients, in `testing/tests/ipmi_lan_responder.rs`:
//! - ipmitool 1.8.19 `-I lanplus`: `-C 17`, `-C 3`, `-C 2`, `-C 1` (power
//!   status/on, `bootdev pxe` read back as boot flags parameter 5, `mc
//!   info`, `raw`), no `-C` at all (it reads Get Channel Cipher Suites and
//!   picks 17, or 3 where only 3 is offered), `-L OPERATOR` with an
//!   operator account (and its refusal at Administrator), wrong passwords
//!   (ipmitool's "RAKP 2 HMAC is invalid"), unknown and disabled users,
//!   refused suites (0, 1, 3 or 17 where not offered), dropped, duplicated
//!   and late replies, a wrong console session id, a BMC restart under an
//!   open `ipmitool shell` session; every run closes its session.
//! - FreeIPMI 1.6.10: `ipmipower -D LAN_2_0 -I 17|3` (`--stat`, `--on`,
//!   `--off`), a fan-out over 200 BMCs of one fleet and over 200 of a
//!   10,000-BMC fleet, `ipmi-raw`, `ipmi-config --commit -e
//!   Chassis_Boot_Flags:Boot_Device=PXE` and `--checkout`. None of them
//!   needs `-W opensesspriv` (PEERS.md's workaround for `ipmi_sim`): this
//!   responder accepts Open Session's "highest privilege" (0) request, which
//!   FreeIPMI sends without the flag, and keys the exchange on RAKP 1's role
//!   as the spec says.
//! - bmcfleet's own session-less probe (`bmcfleet_ipmi::probe`).
//!
//! The engine's corner cases (replays, bad ICVs, every RAKP status, session
//! limit, idle expiry, Close Session by handle...) are unit tests in
//! `server.rs` with a console written from the same spec text: they check
//! the engine's decisions, not interoperability.
//!
//! # Not implemented
//! IPMI 1.5 sessions (MD2/MD5/straight password; session-less 1.5 requests
//! are answered), a BMC key (KG: Kuid is always the key; two-key login is
//! reported off), cipher suites with MD5, RC4 or RAKP-none, OEM payloads,
//! payload types other than IPMI and SOL, RMCP ACKs for ASF messages with a sequence
//! number other than 255, per-channel privilege limits beyond the user's,
//! bridging (Send Message), IPv6 peers in Get Session Info. SpecState's
//! `calls` log is not written (a fleet would grow it without bound): use
//! [`LanStats::requests`].
//!
//! # Scale
//! One tokio task per socket on a runtime the fleet owns (2 worker threads
//! by default), no thread per port; a BMC costs its socket, a 1 KiB receive
//! buffer, its [`SpecState`] and its sessions. 10,000 BMCs in one process
//! work (the soft fd limit must allow them). Latency is a tokio timer per
//! reply.
//!
//! ```no_run
//! use bmcfleet_testing::ipmi::lan::{LanConfig, LanFleet};
//! let fleet = LanFleet::start(LanConfig { count: 3, ..LanConfig::default() }).unwrap();
//! let bmc = fleet.bmc(0);
//! println!("ipmitool -I lanplus -C 17 -H 127.0.0.1 -p {} -U admin -P password power on", bmc.port());
//! assert!(!bmc.handle().snapshot().power_on);
//! ```
//!
//! [`SpecBmc`]: super::SpecBmc

pub mod crypto;
mod server;
mod session;
mod sol;
mod wire;

pub use sol::SolFaults;

pub use server::status;

use super::spec_bmc::{SpecHandle, SpecState, SpecUser};
use server::{Bmc, Core, Settings};
use session::Sessions;
use std::collections::BTreeMap;
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How a fleet is started.
#[derive(Clone, Debug)]
pub struct LanConfig {
    /// Number of BMCs.
    pub count: usize,
    /// Where they listen: 127.0.0.1 unless changed.
    pub ip: IpAddr,
    /// `Some(p)`: BMC `i` on port `p + i` (start fails if one is taken);
    /// `None`: ports chosen by the OS.
    pub base_port: Option<u16>,
    /// Delay before every reply (a tokio timer, not a blocked thread).
    pub latency: Duration,
    /// Cipher suites offered, in preference order: any of 1, 2, 3, 17.
    pub cipher_suites: Vec<u8>,
    /// Sessions (in any phase) a BMC holds at once (at most 255); Open
    /// Session answers 0x01 beyond it.
    pub session_limit: usize,
    /// A session without a valid packet for this long is gone.
    pub idle_timeout: Duration,
    /// Every BMC starts from a copy of this (users, power, LAN, FRU).
    pub state: SpecState,
    /// Worker threads of the fleet's runtime.
    pub worker_threads: usize,
}

impl Default for LanConfig {
    fn default() -> Self {
        LanConfig {
            count: 1,
            ip: IpAddr::V4(Ipv4Addr::LOCALHOST),
            base_port: None,
            latency: Duration::ZERO,
            cipher_suites: vec![3, 17],
            session_limit: 32,
            idle_timeout: Duration::from_secs(60),
            state: SpecState::default(),
            worker_threads: 2,
        }
    }
}

impl LanConfig {
    /// Puts an enabled user with IPMI messaging in slot `id` (2..=10).
    pub fn with_user(mut self, id: u8, name: &str, password: &str, privilege: u8) -> Self {
        assert!((2..=super::MAX_USERS).contains(&id), "user id {id} is not 2..={}", super::MAX_USERS);
        self.state.users[usize::from(id) - 1] = user(name, password, privilege);
        self
    }
}

/// An enabled user allowed IPMI messaging (so it may open sessions) with
/// this privilege limit (1 callback .. 4 administrator). Passwords longer
/// than 20 bytes are cut.
pub fn user(name: &str, password: &str, privilege: u8) -> SpecUser {
    let mut pw = [0u8; 20];
    let n = password.len().min(20);
    pw[..n].copy_from_slice(&password.as_bytes()[..n]);
    SpecUser { name: name.to_string(), password: pw, enabled: true, privilege, ipmi_messaging: true }
}

/// Injected misbehaviour of one BMC; counts are decremented as they fire.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LanFaults {
    /// The next N datagrams are ignored: not executed, not answered.
    pub ignore_requests: u32,
    /// The next N replies are not sent (the request was executed).
    pub drop_replies: u32,
    /// The next N replies are sent twice.
    pub duplicate_replies: u32,
    /// Added once, to the next reply's latency (a late reply).
    pub delay_next_reply: Option<Duration>,
    /// The next N replies carrying a remote console session id (Open
    /// Session Response, RAKP 2/4, session packets) carry its complement.
    pub wrong_session_id: u32,
    /// Suites refused at Open Session (status 0x11) although offered.
    pub refused_suites: Vec<u8>,
    /// Every Open Session is answered with status 0 and this suite's
    /// algorithms, whatever was proposed (what pyghmi's BMC, and so
    /// VirtualBMC, does with suite 3); the session then runs that suite.
    pub answer_with_suite: Option<u8>,
    /// The next N RAKP 2 replies carry a managed-system random that the BMC
    /// then replaces, as when a retransmitted RAKP 1 crossed the first
    /// reply: the console's RAKP 3 proof no longer matches (status 0x0F).
    pub superseded_rakp2: u32,
}

/// What a BMC has seen, for assertions.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LanStats {
    pub open_session_requests: u64,
    /// RAKP 3 verified, session activated.
    pub handshakes: u64,
    /// Open Session or RAKP answered with a non-zero status, or given up by
    /// the console.
    pub refused_handshakes: u64,
    pub active_sessions: usize,
    /// Sessions between Open Session and RAKP 3.
    pub pending_sessions: usize,
    /// IPMI requests by (netfn, cmd), session-less ones included.
    pub requests: BTreeMap<(u8, u8), u64>,
    /// Datagrams dropped without an answer (malformed, bad ICV, replayed,
    /// unknown session...).
    pub discarded: u64,
    /// Replies built (before drop/duplicate faults).
    pub replies: u64,
    pub closed_sessions: u64,
    pub expired_sessions: u64,
    pub forgotten_sessions: u64,
}

impl LanStats {
    /// Requests seen with this netfn/cmd.
    pub fn requests_for(&self, netfn: u8, cmd: u8) -> u64 {
        self.requests.get(&(netfn, cmd)).copied().unwrap_or(0)
    }
}

/// One BMC of a fleet (cheap to clone).
#[derive(Clone, Debug)]
pub struct LanBmc(Arc<Bmc>);

impl LanBmc {
    pub fn addr(&self) -> SocketAddr {
        self.0.addr
    }

    pub fn port(&self) -> u16 {
        self.0.addr.port()
    }

    /// The machine state (power, boot flags, users...).
    pub fn handle(&self) -> SpecHandle {
        self.0.spec.clone()
    }

    /// The GUID used in RAKP and answered by Get System GUID.
    pub fn guid(&self) -> [u8; 16] {
        self.0.guid
    }

    /// The fault knobs: `bmc.faults().drop_replies = 2;`. Do not hold the
    /// guard across a client call (the BMC waits for it).
    pub fn faults(&self) -> MutexGuard<'_, LanFaults> {
        self.0.faults()
    }

    /// A BMC restart: every session and handshake is forgotten; their
    /// further packets are dropped (no keys to answer with) and their RAKP
    /// messages answered "invalid session ID".
    pub fn forget_sessions(&self) {
        self.0.forget_sessions()
    }

    pub fn stats(&self) -> LanStats {
        self.0.stats(Instant::now())
    }

    /// SOL: the host writes `bytes` to its serial port (sent to the
    /// console holding the payload, if any).
    pub fn sol_write(&self, bytes: &[u8]) {
        self.0.sol_write(bytes)
    }

    /// SOL: what consoles typed, as the host's serial port got it.
    pub fn sol_received(&self) -> Vec<u8> {
        self.0.sol().host_received.clone()
    }

    /// SOL: breaks received, console retransmissions seen, activations.
    pub fn sol_counts(&self) -> (u32, u32, u32) {
        let sol = self.0.sol();
        (sol.breaks, sol.console_retransmits, sol.activations)
    }

    /// SOL: whether a session holds the payload.
    pub fn sol_active(&self) -> bool {
        self.0.sol().active.is_some()
    }

    /// SOL: host output queued and not yet sent to the console.
    pub fn sol_backlog(&self) -> usize {
        self.0.sol().backlog()
    }

    /// SOL fault knobs (do not hold the guard across a client call).
    pub fn sol_faults(&self, f: impl FnOnce(&mut SolFaults)) {
        f(&mut self.0.sol().faults)
    }

    /// SOL: the BMC deactivates the payload itself ("SOL deactivating").
    pub fn sol_deactivate(&self) {
        self.0.sol_deactivate_now()
    }

    pub fn active_sessions(&self) -> usize {
        self.stats().active_sessions
    }

    /// Changes the offered cipher suites (from the next Open Session on).
    pub fn set_cipher_suites(&self, suites: &[u8]) -> io::Result<()> {
        validate_suites(suites)?;
        self.0.core().settings.suites = suites.to_vec();
        Ok(())
    }

    pub fn set_latency(&self, latency: Duration) {
        self.0.core().settings.latency = latency;
    }

    pub fn set_session_limit(&self, limit: usize) {
        self.0.core().settings.session_limit = limit;
    }

    pub fn set_idle_timeout(&self, timeout: Duration) {
        self.0.core().settings.idle_timeout = timeout;
    }
}

fn validate_suites(suites: &[u8]) -> io::Result<()> {
    if suites.is_empty() {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "at least one cipher suite must be offered"));
    }
    match suites.iter().find(|id| crypto::CipherSuite::by_id(**id).is_none()) {
        Some(id) => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("cipher suite {id} is not implemented (offer 1, 2, 3 or 17)"),
        )),
        None => Ok(()),
    }
}

/// A fleet of BMCs, serving until dropped.
pub struct LanFleet {
    /// Owns the sockets' tasks; shut down on drop.
    runtime: Option<tokio::runtime::Runtime>,
    bmcs: Vec<LanBmc>,
}

impl std::fmt::Debug for LanFleet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LanFleet").field("bmcs", &self.bmcs.len()).finish()
    }
}

impl LanFleet {
    /// Binds every socket and starts serving; the BMCs answer as soon as
    /// this returns. Callable from sync code and from inside a runtime.
    pub fn start(config: LanConfig) -> io::Result<LanFleet> {
        validate_suites(&config.cipher_suites)?;
        if let Some(base) = config.base_port {
            if usize::from(base) + config.count > usize::from(u16::MAX) + 1 || base == 0 {
                return Err(io::Error::new(io::ErrorKind::InvalidInput, "base port range out of bounds"));
            }
        }
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(config.worker_threads.max(1))
            .thread_name("bmc-ipmi-fleet")
            .enable_all()
            .build()?;
        let mut sockets = Vec::with_capacity(config.count);
        for i in 0..config.count {
            let port = config.base_port.map_or(0, |b| b + i as u16);
            let socket = std::net::UdpSocket::bind(SocketAddr::new(config.ip, port))
                .map_err(|e| io::Error::new(e.kind(), format!("binding {}:{port}: {e}", config.ip)))?;
            socket.set_nonblocking(true)?;
            sockets.push(socket);
        }
        let settings = Settings {
            suites: config.cipher_suites.clone(),
            latency: config.latency,
            session_limit: config.session_limit,
            idle_timeout: config.idle_timeout,
        };
        let mut bmcs = Vec::with_capacity(config.count);
        let _guard = runtime.enter();
        for socket in sockets {
            let addr = socket.local_addr()?;
            let spec = SpecHandle::default();
            spec.update(|s| *s = config.state.clone());
            let mut guid = [0u8; 16];
            crypto::random(&mut guid);
            let bmc = Arc::new(Bmc {
                addr,
                guid,
                spec,
                faults: Mutex::new(LanFaults::default()),
                core: Mutex::new(Core {
                    settings: settings.clone(),
                    sessions: Sessions::default(),
                    counters: LanStats::default(),
                }),
                sol: Mutex::default(),
                socket: Default::default(),
            });
            let socket = Arc::new(tokio::net::UdpSocket::from_std(socket)?);
            runtime.spawn(server::serve(bmc.clone(), socket));
            bmcs.push(LanBmc(bmc));
        }
        drop(_guard);
        Ok(LanFleet { runtime: Some(runtime), bmcs })
    }

    pub fn bmc(&self, i: usize) -> &LanBmc {
        &self.bmcs[i]
    }

    pub fn bmcs(&self) -> &[LanBmc] {
        &self.bmcs
    }

    pub fn len(&self) -> usize {
        self.bmcs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.bmcs.is_empty()
    }

    /// Stops serving and closes every socket (also what drop does).
    pub fn stop(&mut self) {
        let Some(runtime) = self.runtime.take() else { return };
        if tokio::runtime::Handle::try_current().is_ok() {
            // Blocking is not allowed inside a runtime: the tasks and their
            // sockets go away on the fleet's worker threads right after.
            runtime.shutdown_background();
        } else {
            runtime.shutdown_timeout(Duration::from_secs(5));
        }
    }
}

impl Drop for LanFleet {
    fn drop(&mut self) {
        self.stop();
    }
}
