//! One BMC on the wire: datagram in, at most one reply out.
//!
//! [`Bmc::on_datagram`] is the whole protocol engine (synchronous, no
//! socket); [`serve`] is the tokio task that feeds it from one UDP socket and
//! sends what it returns after the configured latency. The command
//! semantics are [`crate::ipmi::spec_bmc`]'s `handle`; this module adds only
//! what belongs to the LAN channel and its sessions: Get Channel
//! Authentication Capabilities, Get Channel Cipher Suites, Get System GUID,
//! Close Session and Get Session Info.

use super::crypto::{self, CipherSuite, SessionKeys, AES_BLOCK};
use super::session::{Active, Handshake, Phase, SeqWindow, Session, Sessions, PRIV_ADMIN, PRIV_USER};
use super::wire::{self, Datagram, Protection, Request, Rmcpp, BMC_ADDR};
use super::{LanFaults, LanStats};
use crate::ipmi::spec_bmc::{handle, Fault, SpecHandle, SpecState, LAN_CHANNEL};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::net::UdpSocket;

/// RMCP+ status codes (§13.24).
pub mod status {
    pub const OK: u8 = 0x00;
    pub const INSUFFICIENT_RESOURCES: u8 = 0x01;
    pub const INVALID_SESSION_ID: u8 = 0x02;
    pub const INVALID_AUTH_ALGORITHM: u8 = 0x04;
    pub const INVALID_INTEGRITY_ALGORITHM: u8 = 0x05;
    pub const INVALID_ROLE: u8 = 0x09;
    pub const UNAUTHORIZED_ROLE: u8 = 0x0A;
    pub const INVALID_NAME_LENGTH: u8 = 0x0C;
    pub const UNAUTHORIZED_NAME: u8 = 0x0D;
    pub const INVALID_INTEGRITY_CHECK_VALUE: u8 = 0x0F;
    pub const INVALID_CONFIDENTIALITY_ALGORITHM: u8 = 0x10;
    pub const NO_CIPHER_SUITE_MATCH: u8 = 0x11;
    pub const ILLEGAL_PARAMETER: u8 = 0x12;
}

const NETFN_APP: u8 = 0x06;
const CMD_GET_SYSTEM_GUID: u8 = 0x37;
const CMD_GET_CHANNEL_AUTH_CAPS: u8 = 0x38;
const CMD_CLOSE_SESSION: u8 = 0x3C;
const CMD_GET_SESSION_INFO: u8 = 0x3D;
const CMD_ACTIVATE_PAYLOAD: u8 = 0x48;
const CMD_DEACTIVATE_PAYLOAD: u8 = 0x49;
const CMD_GET_CHANNEL_CIPHER_SUITES: u8 = 0x54;

const CC_OK: u8 = 0x00;
const CC_INVALID_SESSION_ID: u8 = 0x87;
const CC_INVALID_SESSION_HANDLE: u8 = 0x88;
const CC_BAD_LENGTH: u8 = 0xC7;
const CC_INVALID_FIELD: u8 = 0xCC;
const CC_NO_PRIVILEGE: u8 = 0xD4;

/// Per-BMC settings that tests may change while the BMC runs.
#[derive(Clone, Debug)]
pub(crate) struct Settings {
    pub suites: Vec<u8>,
    pub latency: Duration,
    pub session_limit: usize,
    pub idle_timeout: Duration,
}

/// Sessions, settings and counters: everything a datagram may change.
#[derive(Debug)]
pub(crate) struct Core {
    pub settings: Settings,
    pub sessions: Sessions,
    /// The counters of [`LanStats`]; its session counts are taken from
    /// `sessions` when [`Bmc::stats`] reads them.
    pub counters: LanStats,
}

impl Core {
    fn expire(&mut self, now: Instant) {
        let n = self.sessions.expire(now, self.settings.idle_timeout);
        self.counters.expired_sessions += n as u64;
    }
}

/// A reply ready to send.
#[derive(Debug)]
pub(crate) struct Outgoing {
    pub bytes: Vec<u8>,
    pub delay: Duration,
    pub copies: u8,
}

/// One simulated BMC: its address, identity, machine state and sessions.
#[derive(Debug)]
pub(crate) struct Bmc {
    pub addr: SocketAddr,
    pub guid: [u8; 16],
    pub spec: SpecHandle,
    /// Faults are a lock of their own so a test holding the guard never
    /// blocks behind (or deadlocks with) the session table.
    pub faults: Mutex<LanFaults>,
    pub core: Mutex<Core>,
    /// Serial over LAN (`sol.rs`); locked after `core` when both are.
    pub sol: Mutex<super::sol::SolState>,
    /// The BMC's socket, for packets it sends on its own (SOL output).
    pub socket: std::sync::OnceLock<Arc<UdpSocket>>,
}

/// What the reply to a datagram looks like before faults are applied.
struct Reply {
    bytes: Vec<u8>,
    /// Whether the wrong-session-id fault was spent on it.
    used_wrong_sid: bool,
}

/// The per-datagram view of the fault knobs taken before the work starts.
struct Pending {
    wrong_sid: bool,
    refused_suites: Vec<u8>,
    answer_with_suite: Option<u8>,
    /// This RAKP 1's reply carries a random the BMC then replaces.
    supersede_rakp2: bool,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panicking test thread must not take the BMC down with it.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The remote console session id a reply carries (the wrong-session-id
/// fault flips its bits).
fn reply_sidm(sidm: u32, wrong: bool) -> u32 {
    if wrong {
        !sidm
    } else {
        sidm
    }
}

impl Bmc {
    pub fn core(&self) -> MutexGuard<'_, Core> {
        lock(&self.core)
    }

    pub fn faults(&self) -> MutexGuard<'_, LanFaults> {
        lock(&self.faults)
    }

    pub fn sol(&self) -> MutexGuard<'_, super::sol::SolState> {
        lock(&self.sol)
    }

    pub fn stats(&self, now: Instant) -> LanStats {
        let mut core = self.core();
        core.expire(now);
        LanStats {
            active_sessions: core.sessions.active_count(),
            pending_sessions: core.sessions.len() - core.sessions.active_count(),
            ..core.counters.clone()
        }
    }

    /// A BMC restart: every session (and handshake in progress) is gone.
    pub fn forget_sessions(&self) {
        let mut core = self.core();
        let n = core.sessions.clear();
        core.counters.forgotten_sessions += n as u64;
    }

    /// Handles one datagram from `peer`; returns what to send back, if
    /// anything, with the delay and copies the faults ask for.
    pub fn on_datagram(&self, pkt: &[u8], peer: SocketAddr, now: Instant) -> Option<Outgoing> {
        let datagram = wire::parse(pkt);
        let pending = {
            let mut f = self.faults();
            if f.ignore_requests > 0 {
                f.ignore_requests -= 1;
                return None;
            }
            let opening =
                matches!(&datagram, Some(Datagram::Rmcpp(p)) if p.payload_type == wire::PAYLOAD_OPEN_SESSION_REQUEST);
            let rakp1 = matches!(&datagram, Some(Datagram::Rmcpp(p)) if p.payload_type == wire::PAYLOAD_RAKP1);
            let supersede_rakp2 = rakp1 && f.superseded_rakp2 > 0;
            if supersede_rakp2 {
                f.superseded_rakp2 -= 1;
            }
            Pending {
                wrong_sid: f.wrong_session_id > 0,
                refused_suites: if opening { f.refused_suites.clone() } else { Vec::new() },
                answer_with_suite: f.answer_with_suite,
                supersede_rakp2,
            }
        };
        let (reply, latency) = {
            let mut core = self.core();
            core.expire(now);
            let reply = match datagram {
                Some(d) => self.dispatch(&mut core, d, peer, now, &pending),
                None => None,
            };
            match &reply {
                Some(_) => core.counters.replies += 1,
                None => core.counters.discarded += 1,
            }
            (reply?, core.settings.latency)
        };
        let mut f = self.faults();
        if reply.used_wrong_sid {
            f.wrong_session_id = f.wrong_session_id.saturating_sub(1);
        }
        if f.drop_replies > 0 {
            f.drop_replies -= 1;
            return None;
        }
        let copies = if f.duplicate_replies > 0 {
            f.duplicate_replies -= 1;
            2
        } else {
            1
        };
        let delay = latency + f.delay_next_reply.take().unwrap_or_default();
        Some(Outgoing { bytes: reply.bytes, delay, copies })
    }

    fn dispatch(&self, core: &mut Core, d: Datagram<'_>, peer: SocketAddr, now: Instant, f: &Pending) -> Option<Reply> {
        let plain = |bytes| Some(Reply { bytes, used_wrong_sid: false });
        match d {
            Datagram::AsfPing { rmcp_seq, tag } => plain(wire::asf_pong(rmcp_seq, tag)),
            Datagram::Ipmi15 { session_seq, session_id, message } => {
                if session_id != 0 || session_seq != 0 {
                    return None; // IPMI 1.5 sessions are not implemented.
                }
                let rq = wire::parse_request(message).filter(|rq| rq.rs_addr == BMC_ADDR)?;
                let (cc, data) = self.sessionless(core, &rq)?;
                plain(wire::ipmi15(&wire::encode_response(&rq, cc, &data)))
            }
            Datagram::Rmcpp(p) => match p.payload_type {
                wire::PAYLOAD_IPMI if p.session_id == 0 => {
                    if p.authenticated || p.encrypted || !p.has_no_trailer() || p.seq != 0 {
                        return None;
                    }
                    let rq = wire::parse_request(p.payload).filter(|rq| rq.rs_addr == BMC_ADDR)?;
                    let (cc, data) = self.sessionless(core, &rq)?;
                    let msg = wire::encode_response(&rq, cc, &data);
                    plain(wire::rmcpp(wire::PAYLOAD_IPMI, 0, 0, &msg, None))
                }
                wire::PAYLOAD_IPMI | super::sol::PAYLOAD_SOL => self.in_session(core, &p, now, f.wrong_sid),
                wire::PAYLOAD_OPEN_SESSION_REQUEST => self.open_session(core, &p, peer, now, f),
                wire::PAYLOAD_RAKP1 => self.rakp1(core, &p, now, f.wrong_sid, f.supersede_rakp2),
                wire::PAYLOAD_RAKP3 => self.rakp3(core, &p, now, f.wrong_sid),
                _ => None,
            },
        }
    }

    /// Commands answered outside a session: capabilities, cipher
    /// suites and the GUID. Anything else is ignored, as before a session.
    fn sessionless(&self, core: &mut Core, rq: &Request<'_>) -> Option<(u8, Vec<u8>)> {
        *core.counters.requests.entry((rq.netfn, rq.cmd)).or_default() += 1;
        match (rq.netfn, rq.cmd) {
            (NETFN_APP, CMD_GET_CHANNEL_AUTH_CAPS) => Some(self.auth_caps(rq.data)),
            (NETFN_APP, CMD_GET_CHANNEL_CIPHER_SUITES) => Some(cipher_suites(&core.settings.suites, rq.data)),
            (NETFN_APP, CMD_GET_SYSTEM_GUID) => Some((CC_OK, self.guid.to_vec())),
            _ => None,
        }
    }

    /// Get Channel Authentication Capabilities (§22.13). RMCP+ only: no
    /// IPMI 1.5 authentication type is offered; with bit 7 of the channel
    /// byte the IPMI 2.0 extended data says "IPMI 2.0 supported".
    fn auth_caps(&self, d: &[u8]) -> (u8, Vec<u8>) {
        if d.len() != 2 {
            return (CC_BAD_LENGTH, vec![]);
        }
        let extended = d[0] & 0x80 != 0;
        let channel = d[0] & 0x0F;
        if (channel != 0x0E && channel != LAN_CHANNEL) || !(1..=5).contains(&(d[1] & 0x0F)) {
            return (CC_INVALID_FIELD, vec![]);
        }
        let null_user = self.spec.update(|s| s.users.first().is_some_and(|u| u.enabled && u.name.is_empty()));
        // Byte 3: bit 7 extended data present, no 1.5 auth types.
        // Byte 4: KG default (bit 5 = 0), per-message and user-level
        // authentication enabled (bits 4, 3 = 0), non-null user names
        // enabled (bit 2), null user names if slot 1 is enabled (bit 1).
        let anonymous = 0x04 | if null_user { 0x02 } else { 0x00 };
        let ext = if extended { 0x02 } else { 0x00 };
        (CC_OK, vec![LAN_CHANNEL, if extended { 0x80 } else { 0x00 }, anonymous, ext, 0, 0, 0, 0])
    }

    /// Open Session Request → Response (§13.17, §13.18).
    fn open_session(
        &self,
        core: &mut Core,
        p: &Rmcpp<'_>,
        peer: SocketAddr,
        now: Instant,
        f: &Pending,
    ) -> Option<Reply> {
        if p.session_id != 0 || p.seq != 0 || p.authenticated || p.encrypted || !p.has_no_trailer() {
            return None;
        }
        let d = p.payload;
        if d.len() < 32 {
            return None;
        }
        core.counters.open_session_requests += 1;
        let tag = d[0];
        let requested = d[1] & 0x0F;
        let sidm = u32::from_le_bytes([d[4], d[5], d[6], d[7]]);
        let refuse = |core: &mut Core, status: u8| {
            core.counters.refused_handshakes += 1;
            let sid = reply_sidm(sidm, f.wrong_sid).to_le_bytes();
            let payload = [tag, status, 0, 0, sid[0], sid[1], sid[2], sid[3]];
            Some(Reply {
                bytes: wire::rmcpp(wire::PAYLOAD_OPEN_SESSION_RESPONSE, 0, 0, &payload, None),
                used_wrong_sid: f.wrong_sid,
            })
        };
        // Three algorithm payloads: type 0/1/2, two reserved, length 8,
        // algorithm (bits 5:0), three reserved.
        let records = [&d[8..16], &d[16..24], &d[24..32]];
        for (kind, r) in records.iter().enumerate() {
            if usize::from(r[0]) != kind || r[3] != 8 {
                return refuse(core, status::ILLEGAL_PARAMETER);
            }
        }
        let (auth, integrity, confidentiality) = (d[12] & 0x3F, d[20] & 0x3F, d[28] & 0x3F);
        if sidm == 0 {
            return refuse(core, status::INVALID_SESSION_ID);
        }
        if requested > PRIV_ADMIN {
            return refuse(core, status::INVALID_ROLE);
        }
        let offered: Vec<CipherSuite> = core
            .settings
            .suites
            .iter()
            .filter(|id| !f.refused_suites.contains(id))
            .filter_map(|id| CipherSuite::by_id(*id))
            .collect();
        // An algorithm no implemented suite uses is invalid; implemented
        // algorithms in a combination this BMC does not offer are "no
        // cipher suite match".
        if !crypto::SUITES.iter().any(|s| s.auth == auth) {
            return refuse(core, status::INVALID_AUTH_ALGORITHM);
        }
        if !crypto::SUITES.iter().any(|s| s.integrity == integrity) {
            return refuse(core, status::INVALID_INTEGRITY_ALGORITHM);
        }
        if !crypto::SUITES.iter().any(|s| s.confidentiality == confidentiality) {
            return refuse(core, status::INVALID_CONFIDENTIALITY_ALGORITHM);
        }
        let answered = f.answer_with_suite.and_then(CipherSuite::by_id);
        let Some(suite) = answered.or_else(|| {
            offered
                .iter()
                .copied()
                .find(|s| s.auth == auth && s.integrity == integrity && s.confidentiality == confidentiality)
        }) else {
            return refuse(core, status::NO_CIPHER_SUITE_MATCH);
        };
        let max_privilege = if requested == 0 { PRIV_ADMIN } else { requested };
        let sidc = match core.sessions.find_opened(sidm, peer) {
            Some(s) if s.suite == suite && s.max_privilege == max_privilege => s.sidc,
            _ => {
                // Session handles are one byte: never more than 255.
                if core.sessions.len() >= core.settings.session_limit.min(255) {
                    return refuse(core, status::INSUFFICIENT_RESOURCES);
                }
                core.sessions.open(sidm, suite, max_privilege, peer, now, crypto::random_nonzero_u32).sidc
            }
        };
        let mut payload = vec![tag, status::OK, max_privilege, 0];
        payload.extend_from_slice(&reply_sidm(sidm, f.wrong_sid).to_le_bytes());
        payload.extend_from_slice(&sidc.to_le_bytes());
        for (kind, alg) in [suite.auth, suite.integrity, suite.confidentiality].into_iter().enumerate() {
            payload.extend_from_slice(&[kind as u8, 0, 0, 8, alg, 0, 0, 0]);
        }
        Some(Reply {
            bytes: wire::rmcpp(wire::PAYLOAD_OPEN_SESSION_RESPONSE, 0, 0, &payload, None),
            used_wrong_sid: f.wrong_sid,
        })
    }

    /// RAKP Message 1 → 2 (§13.20, §13.21): user lookup, role checks,
    /// managed system random number and key exchange authentication code.
    fn rakp1(&self, core: &mut Core, p: &Rmcpp<'_>, now: Instant, wrong_sid: bool, supersede: bool) -> Option<Reply> {
        if p.session_id != 0 || p.authenticated || p.encrypted || !p.has_no_trailer() {
            return None;
        }
        let d = p.payload;
        if d.len() < 28 {
            return None;
        }
        let tag = d[0];
        let sidc = u32::from_le_bytes([d[4], d[5], d[6], d[7]]);
        let rm: [u8; 16] = d[8..24].try_into().ok()?;
        let role = d[24];
        let ulen = usize::from(d[27]);
        let error = |core: &mut Core, sidm: u32, status: u8| {
            core.counters.refused_handshakes += 1;
            let sid = reply_sidm(sidm, wrong_sid).to_le_bytes();
            let payload = [tag, status, 0, 0, sid[0], sid[1], sid[2], sid[3]];
            Some(Reply { bytes: wire::rmcpp(wire::PAYLOAD_RAKP2, 0, 0, &payload, None), used_wrong_sid: wrong_sid })
        };
        let Some(session) = core.sessions.get(sidc).filter(|s| matches!(s.phase, Phase::Opened | Phase::Rakp2Sent(_)))
        else {
            return error(core, 0, status::INVALID_SESSION_ID);
        };
        let (sidm, max_privilege) = (session.sidm, session.max_privilege);
        let fail = |core: &mut Core, status: u8| {
            // A refused RAKP 1 ends the session: its slot is free again.
            core.sessions.remove(sidc);
            error(core, sidm, status)
        };
        if ulen > 16 {
            return fail(core, status::INVALID_NAME_LENGTH);
        }
        let Some(name) = d.get(28..28 + ulen) else { return fail(core, status::INVALID_NAME_LENGTH) };
        let privilege = role & 0x0F;
        if !(1..=PRIV_ADMIN).contains(&privilege) || privilege > max_privilege || role & 0xE0 != 0 {
            return fail(core, status::INVALID_ROLE);
        }
        let name_only = role & 0x10 != 0;
        let user = self.spec.update(|s| lookup_user(s, name, privilege, name_only));
        let (user_id, kuid) = match user {
            Ok(u) => u,
            Err(status) => return fail(core, status),
        };
        let mut rc = [0u8; 16];
        crypto::random(&mut rc);
        let mut username = [0u8; 16];
        username[..ulen].copy_from_slice(name);
        let mut hs = Handshake { rm, rc, role, username, username_len: ulen as u8, user_id, kuid };
        let code = hs.exchange(session.suite.auth, sidm, sidc, &self.guid).rakp2_code();
        let mut payload = vec![tag, status::OK, 0, 0];
        payload.extend_from_slice(&reply_sidm(sidm, wrong_sid).to_le_bytes());
        payload.extend_from_slice(&rc);
        payload.extend_from_slice(&self.guid);
        payload.extend_from_slice(code.as_slice());
        if supersede {
            // A retransmitted RAKP 1 that crossed this reply would have
            // replaced the random the console is about to prove.
            crypto::random(&mut hs.rc);
        }
        let session = core.sessions.get_mut(sidc)?;
        session.phase = Phase::Rakp2Sent(Box::new(hs));
        session.last_activity = now;
        Some(Reply { bytes: wire::rmcpp(wire::PAYLOAD_RAKP2, 0, 0, &payload, None), used_wrong_sid: wrong_sid })
    }

    /// RAKP Message 3 → 4 (§13.22, §13.23): checks the console's code,
    /// derives SIK/K1/K2 and activates the session.
    fn rakp3(&self, core: &mut Core, p: &Rmcpp<'_>, now: Instant, wrong_sid: bool) -> Option<Reply> {
        if p.session_id != 0 || p.authenticated || p.encrypted || !p.has_no_trailer() {
            return None;
        }
        let d = p.payload;
        if d.len() < 8 {
            return None;
        }
        let (tag, console_status) = (d[0], d[1]);
        let sidc = u32::from_le_bytes([d[4], d[5], d[6], d[7]]);
        let code = &d[8..];
        let rakp4 = |sidm: u32, status: u8, icv: &[u8]| {
            let mut payload = vec![tag, status, 0, 0];
            payload.extend_from_slice(&reply_sidm(sidm, wrong_sid).to_le_bytes());
            payload.extend_from_slice(icv);
            Some(Reply { bytes: wire::rmcpp(wire::PAYLOAD_RAKP4, 0, 0, &payload, None), used_wrong_sid: wrong_sid })
        };
        let Some(session) = core.sessions.get_mut(sidc) else {
            core.counters.refused_handshakes += 1;
            return rakp4(0, status::INVALID_SESSION_ID, &[]);
        };
        let sidm = session.sidm;
        let hs = match &session.phase {
            Phase::Rakp2Sent(hs) => hs.clone(),
            Phase::Active(a)
                if console_status == 0
                    && crypto::verify(&a.rakp3_code, code)
                    && a.rakp3_code.as_slice().len() == code.len() =>
            {
                // RAKP 4 was lost and the console asks again.
                let icv = a.rakp4_icv;
                return rakp4(sidm, status::OK, icv.as_slice());
            }
            _ => {
                core.counters.refused_handshakes += 1;
                return rakp4(sidm, status::INVALID_SESSION_ID, &[]);
            }
        };
        if console_status != status::OK {
            // The console gave up (e.g. RAKP 2's code did not verify with
            // its password): no answer, the session is released.
            core.sessions.remove(sidc);
            core.counters.refused_handshakes += 1;
            return None;
        }
        let suite = session.suite;
        let x = hs.exchange(suite.auth, sidm, sidc, &self.guid);
        let expected = x.rakp3_code();
        if code.len() != expected.as_slice().len() || !crypto::verify(&expected, code) {
            core.sessions.remove(sidc);
            core.counters.refused_handshakes += 1;
            return rakp4(sidm, status::INVALID_INTEGRITY_CHECK_VALUE, &[]);
        }
        let sik = x.sik();
        let icv = x.rakp4_icv(&sik);
        let privilege = hs.privilege();
        session.phase = Phase::Active(Box::new(Active {
            keys: SessionKeys::derive(suite.auth, &sik),
            // A session starts at User, or at its role when that is
            // lower (Callback), and is raised with Set Session Privilege
            // Level (§22.18).
            privilege: privilege.min(PRIV_USER),
            limit: privilege,
            user_id: hs.user_id,
            inbound_auth: SeqWindow::default(),
            inbound_plain: SeqWindow::default(),
            outbound_auth: 0,
            outbound_plain: 0,
            rakp3_code: expected,
            rakp4_icv: icv,
        }));
        session.last_activity = now;
        core.counters.handshakes += 1;
        rakp4(sidm, status::OK, icv.as_slice())
    }

    /// An IPMI payload inside an active session: every field verified
    /// (flags as negotiated, trailer, ICV, sequence window, confidentiality
    /// pad, checksums); anything wrong is dropped without an answer.
    fn in_session(&self, core: &mut Core, p: &Rmcpp<'_>, now: Instant, wrong_sid: bool) -> Option<Reply> {
        let sidc = p.session_id;
        let session = core.sessions.get_mut(sidc)?;
        let suite = session.suite;
        let active = session.active_mut()?;
        if p.authenticated != (suite.integrity != 0) || p.encrypted != (suite.confidentiality != 0) {
            return None;
        }
        if p.authenticated {
            let (covered, icv) = p.trailer(suite.icv_len())?;
            if !crypto::verify(&active.keys.icv(suite.integrity, covered), icv) {
                return None;
            }
        } else if !p.has_no_trailer() {
            return None;
        }
        let window = if p.authenticated { &mut active.inbound_auth } else { &mut active.inbound_plain };
        if !window.accept(p.seq) {
            return None;
        }
        let message = if p.encrypted { active.keys.decrypt(p.payload)? } else { p.payload.to_vec() };
        if p.payload_type == super::sol::PAYLOAD_SOL {
            session.last_activity = now;
            let reply = self.sol_inbound(core, sidc, &message)?;
            let (bytes, _) = super::sol::seal(core, sidc, super::sol::PAYLOAD_SOL, &reply)?;
            return Some(Reply { bytes, used_wrong_sid: false });
        }
        let rq = wire::parse_request(&message).filter(|rq| rq.rs_addr == BMC_ADDR)?;
        session.last_activity = now;
        *core.counters.requests.entry((rq.netfn, rq.cmd)).or_default() += 1;

        let (cc, data, close) = self.session_command(core, sidc, &rq)?;
        let session = core.sessions.get_mut(sidc)?;
        let sidm = session.sidm;
        let active = session.active_mut()?;
        let msg = wire::encode_response(&rq, cc, &data);
        let authenticated = suite.integrity != 0;
        let seq = active.next_outbound(authenticated);
        let payload = if suite.confidentiality != 0 {
            let mut iv = [0u8; AES_BLOCK];
            crypto::random(&mut iv);
            active.keys.encrypt(iv, &msg)
        } else {
            msg
        };
        let protection =
            Protection { keys: &active.keys, integrity: suite.integrity, encrypted: suite.confidentiality != 0 };
        let bytes = wire::rmcpp(wire::PAYLOAD_IPMI, reply_sidm(sidm, wrong_sid), seq, &payload, Some(protection));
        if close {
            core.sessions.remove(sidc);
            core.counters.closed_sessions += 1;
        }
        Some(Reply { bytes, used_wrong_sid: wrong_sid })
    }

    /// Runs one in-session command; the third value says the session closes
    /// once the reply is built. `None`: no reply (an injected NoReply).
    fn session_command(&self, core: &mut Core, sidc: u32, rq: &Request<'_>) -> Option<(u8, Vec<u8>, bool)> {
        let session = core.sessions.get(sidc)?;
        let active = session.active()?;
        let (privilege, limit) = (active.privilege, active.limit);
        let injected = self.spec.update(|s| s.take_fault(rq.netfn, rq.cmd));
        match injected {
            Some(Fault::NoReply) => return None,
            Some(Fault::CompletionCode(cc)) => return Some((cc, vec![], false)),
            None => {}
        }
        let d = rq.data;
        match (rq.netfn, rq.cmd) {
            (NETFN_APP, CMD_GET_CHANNEL_AUTH_CAPS) => {
                let (cc, data) = self.auth_caps(d);
                Some((cc, data, false))
            }
            (NETFN_APP, CMD_GET_CHANNEL_CIPHER_SUITES) => {
                let (cc, data) = cipher_suites(&core.settings.suites, d);
                Some((cc, data, false))
            }
            (NETFN_APP, CMD_GET_SYSTEM_GUID) => Some((CC_OK, self.guid.to_vec(), false)),
            (NETFN_APP, CMD_CLOSE_SESSION) => Some(close_session(core, sidc, privilege, d)),
            (NETFN_APP, CMD_ACTIVATE_PAYLOAD) => {
                let (cc, data) = self.sol_activate(core, sidc, d);
                Some((cc, data, false))
            }
            (NETFN_APP, CMD_DEACTIVATE_PAYLOAD) => {
                let (cc, data) = self.sol_deactivate_payload(core, d);
                Some((cc, data, false))
            }
            (NETFN_APP, CMD_GET_SESSION_INFO) => {
                let (cc, data) = session_info(core, sidc, d);
                Some((cc, data, false))
            }
            (netfn, cmd) => {
                // The session's privilege is the machine's while the
                // command runs, so handle()'s 0xD4 checks and Set Session
                // Privilege Level apply per session.
                let (cc, data, new_privilege) = self.spec.update(|s| {
                    let saved = (s.session_privilege, s.privilege_limit);
                    s.session_privilege = privilege;
                    s.privilege_limit = limit;
                    let (cc, data) = handle(s, netfn, cmd, d);
                    let new_privilege = s.session_privilege;
                    (s.session_privilege, s.privilege_limit) = saved;
                    (cc, data, new_privilege)
                });
                if let Some(a) = core.sessions.get_mut(sidc).and_then(Session::active_mut) {
                    a.privilege = new_privilege;
                }
                Some((cc, data, false))
            }
        }
    }
}

/// RAKP 1 user lookup (§13.20): name-only (role bit 4) takes the first
/// enabled entry with that name; username/privilege lookup takes the first
/// one whose privilege limit is the requested role. Returns the user id and
/// Kuid, or the RAKP 2 status.
fn lookup_user(s: &SpecState, name: &[u8], privilege: u8, name_only: bool) -> Result<(u8, [u8; 20]), u8> {
    let usable = |u: &&crate::ipmi::SpecUser| {
        u.enabled && u.ipmi_messaging && (1..=PRIV_ADMIN).contains(&u.privilege) && u.name.as_bytes() == name
    };
    let candidates: Vec<(u8, &crate::ipmi::SpecUser)> =
        s.users.iter().enumerate().filter(|(_, u)| usable(u)).map(|(i, u)| (i as u8 + 1, u)).collect();
    if candidates.is_empty() {
        return Err(status::UNAUTHORIZED_NAME);
    }
    let found = if name_only {
        candidates.first().copied()
    } else {
        candidates.iter().copied().find(|(_, u)| u.privilege == privilege)
    };
    match found {
        Some((id, u)) if privilege <= u.privilege => Ok((id, u.password)),
        Some(_) => Err(status::UNAUTHORIZED_ROLE),
        None if candidates.iter().all(|(_, u)| u.privilege < privilege) => Err(status::UNAUTHORIZED_ROLE),
        None => Err(status::UNAUTHORIZED_NAME),
    }
}

/// Get Channel Cipher Suites (§22.15): 16 bytes of record data per list
/// index; fewer than 16 (or none) marks the end.
fn cipher_suites(suites: &[u8], d: &[u8]) -> (u8, Vec<u8>) {
    if d.len() != 3 {
        return (CC_BAD_LENGTH, vec![]);
    }
    let channel = d[0] & 0x0F;
    if (channel != 0x0E && channel != LAN_CHANNEL) || d[1] > 1 {
        return (CC_INVALID_FIELD, vec![]);
    }
    let offered: Vec<CipherSuite> = suites.iter().filter_map(|id| CipherSuite::by_id(*id)).collect();
    let data: Vec<u8> = if d[2] & 0x80 != 0 {
        offered.iter().flat_map(|s| s.record()).collect()
    } else {
        // By algorithm: each supported algorithm once, tagged as in a record.
        let mut algs: Vec<u8> = Vec::new();
        for s in &offered {
            for a in [s.auth, 0x40 | s.integrity, 0x80 | s.confidentiality] {
                if !algs.contains(&a) {
                    algs.push(a);
                }
            }
        }
        algs
    };
    let index = usize::from(d[2] & 0x3F);
    let mut out = vec![LAN_CHANNEL];
    out.extend(data.iter().skip(index * 16).take(16));
    (CC_OK, out)
}

/// Close Session (§22.19): by SIDc, or by handle when the id is 0. Closing
/// another session takes Administrator.
fn close_session(core: &mut Core, own: u32, privilege: u8, d: &[u8]) -> (u8, Vec<u8>, bool) {
    if d.len() < 4 {
        return (CC_BAD_LENGTH, vec![], false);
    }
    let id = u32::from_le_bytes([d[0], d[1], d[2], d[3]]);
    let target = if id == 0 {
        let Some(&handle) = d.get(4) else { return (CC_BAD_LENGTH, vec![], false) };
        match core.sessions.by_handle(handle) {
            Some(s) => s.sidc,
            None => return (CC_INVALID_SESSION_HANDLE, vec![], false),
        }
    } else if core.sessions.get(id).is_some_and(|s| s.active().is_some()) {
        id
    } else {
        return (CC_INVALID_SESSION_ID, vec![], false);
    };
    if target == own {
        return (CC_OK, vec![], true);
    }
    if privilege < PRIV_ADMIN {
        return (CC_NO_PRIVILEGE, vec![], false);
    }
    core.sessions.remove(target);
    core.counters.closed_sessions += 1;
    (CC_OK, vec![], false)
}

/// Get Session Info (§22.20): the current session (index 0), the Nth
/// active one, or one by handle (FEh) or id (FFh).
fn session_info(core: &Core, own: u32, d: &[u8]) -> (u8, Vec<u8>) {
    let Some(&index) = d.first() else { return (CC_BAD_LENGTH, vec![]) };
    let session = match index {
        0 => core.sessions.get(own),
        0xFE => match d.get(1) {
            Some(h) => core.sessions.by_handle(*h),
            None => return (CC_BAD_LENGTH, vec![]),
        },
        0xFF => match d.get(1..5) {
            Some(id) => core.sessions.get(u32::from_le_bytes([id[0], id[1], id[2], id[3]])),
            None => return (CC_BAD_LENGTH, vec![]),
        },
        n @ 1..=0x3F => core.sessions.nth_active(usize::from(n)),
        _ => return (CC_INVALID_FIELD, vec![]),
    };
    let possible = core.settings.session_limit.min(0x3F) as u8;
    let active = core.sessions.active_count().min(0x3F) as u8;
    let Some((s, a)) = session.and_then(|s| s.active().map(|a| (s, a))) else {
        return (CC_OK, vec![0, possible, active]);
    };
    let mut out = vec![s.handle, possible, active, a.user_id & 0x3F, a.privilege & 0x0F, 0x10 | LAN_CHANNEL];
    match s.peer {
        SocketAddr::V4(v4) => out.extend_from_slice(&v4.ip().octets()),
        SocketAddr::V6(_) => out.extend_from_slice(&[0; 4]),
    }
    out.extend_from_slice(&[0; 6]); // MAC address: not known over UDP
    out.extend_from_slice(&s.peer.port().to_le_bytes());
    (CC_OK, out)
}

/// Serves one BMC's socket until the task is dropped.
pub(crate) async fn serve(bmc: Arc<Bmc>, socket: Arc<UdpSocket>) {
    let _ = bmc.socket.set(socket.clone());
    // On the heap so the task's future stays small (thousands of them).
    let mut buf = vec![0u8; 1024];
    loop {
        // An SOL packet in flight is resent when its ack is overdue: wait
        // for a datagram no longer than that (no timer otherwise: thousands
        // of idle BMCs cost nothing).
        let received = match bmc.sol_retry_in() {
            Some(wait) => match tokio::time::timeout(wait, socket.recv_from(&mut buf)).await {
                Ok(r) => r,
                Err(_) => {
                    bmc.sol_retry();
                    continue;
                }
            },
            None => socket.recv_from(&mut buf).await,
        };
        let (n, peer) = match received {
            Ok(x) => x,
            Err(_) => {
                // e.g. an ICMP error surfaced on the socket; keep serving.
                tokio::task::yield_now().await;
                continue;
            }
        };
        let Some(out) = bmc.on_datagram(&buf[..n], peer, Instant::now()) else { continue };
        if out.delay.is_zero() {
            send(&socket, &out, peer).await;
        } else {
            let socket = socket.clone();
            tokio::spawn(async move {
                tokio::time::sleep(out.delay).await;
                send(&socket, &out, peer).await;
            });
        }
    }
}

async fn send(socket: &UdpSocket, out: &Outgoing, peer: SocketAddr) {
    for _ in 0..out.copies {
        // A refused send (the console went away) is a lost datagram, as
        // on a real network.
        let _ = socket.send_to(&out.bytes, peer).await;
    }
}

#[cfg(test)]
mod tests {
    //! The engine driven datagram by datagram with a minimal RMCP+ console
    //! written here (the third-party proof is in
    //! `testing/tests/ipmi_lan_responder.rs`; this covers what those clients
    //! cannot be made to send).
    use super::*;
    use crate::ipmi::lan::crypto::Exchange;
    use crate::ipmi::lan::user;
    use crate::ipmi::spec_bmc::SpecHandle;

    const PEER: &str = "127.0.0.1:40000";

    fn bmc(suites: &[u8]) -> Bmc {
        let spec = SpecHandle::default();
        spec.update(|s| {
            s.users[2] = user("oper", "operpass", 3);
            s.users[3] = user("admin", "other", 2); // same name, User limit
        });
        Bmc {
            addr: "127.0.0.1:623".parse().unwrap(),
            guid: [0x47; 16],
            spec,
            faults: Mutex::new(LanFaults::default()),
            core: Mutex::new(Core {
                settings: Settings {
                    suites: suites.to_vec(),
                    latency: Duration::ZERO,
                    session_limit: 4,
                    idle_timeout: Duration::from_secs(60),
                },
                sessions: Sessions::default(),
                counters: LanStats::default(),
            }),
            sol: Mutex::default(),
            socket: Default::default(),
        }
    }

    fn send(bmc: &Bmc, pkt: &[u8], now: Instant) -> Option<Vec<u8>> {
        bmc.on_datagram(pkt, PEER.parse().unwrap(), now).map(|o| o.bytes)
    }

    /// The payload of an unauthenticated RMCP+ reply.
    fn payload(reply: &[u8]) -> Vec<u8> {
        match wire::parse(reply) {
            Some(Datagram::Rmcpp(p)) => p.payload.to_vec(),
            other => panic!("not an RMCP+ reply: {other:?}"),
        }
    }

    fn open_request(sidm: u32, privilege: u8, algs: [u8; 3]) -> Vec<u8> {
        let mut d = vec![0x21, privilege, 0, 0];
        d.extend_from_slice(&sidm.to_le_bytes());
        for (kind, alg) in algs.into_iter().enumerate() {
            d.extend_from_slice(&[kind as u8, 0, 0, 8, alg, 0, 0, 0]);
        }
        wire::rmcpp(wire::PAYLOAD_OPEN_SESSION_REQUEST, 0, 0, &d, None)
    }

    fn rakp1_request(sidc: u32, rm: &[u8; 16], role: u8, name: &[u8]) -> Vec<u8> {
        let mut d = vec![0x22, 0, 0, 0];
        d.extend_from_slice(&sidc.to_le_bytes());
        d.extend_from_slice(rm);
        d.extend_from_slice(&[role, 0, 0, name.len() as u8]);
        d.extend_from_slice(name);
        wire::rmcpp(wire::PAYLOAD_RAKP1, 0, 0, &d, None)
    }

    fn rakp3_request(sidc: u32, status: u8, code: &[u8]) -> Vec<u8> {
        let mut d = vec![0x23, status, 0, 0];
        d.extend_from_slice(&sidc.to_le_bytes());
        d.extend_from_slice(code);
        wire::rmcpp(wire::PAYLOAD_RAKP3, 0, 0, &d, None)
    }

    /// A remote console with an active session.
    struct Console {
        suite: CipherSuite,
        sidm: u32,
        sidc: u32,
        keys: SessionKeys,
        seq: u32,
        rq_seq: u8,
    }

    /// A BMC offering `suites` and an administrator session with it under `suite`, now.
    fn admin_session(suites: &[u8], suite: u8) -> (Bmc, Instant, Console) {
        let b = bmc(suites);
        let now = Instant::now();
        let c = login(&b, suite, 0x14, "admin", "password", now).unwrap();
        (b, now, c)
    }

    /// Open Session status, or RAKP 2 status, or RAKP 4 status, or a session.
    fn login(bmc: &Bmc, suite: u8, role: u8, name: &str, password: &str, now: Instant) -> Result<Console, (u8, u8)> {
        let s = CipherSuite::by_id(suite).unwrap();
        let sidm = 0x0A0B0C0D;
        let rs = payload(&send(bmc, &open_request(sidm, 0, [s.auth, s.integrity, s.confidentiality]), now).unwrap());
        if rs[1] != 0 {
            return Err((0x11, rs[1]));
        }
        let sidc = u32::from_le_bytes(rs[8..12].try_into().unwrap());
        let rm = [0x5A; 16];
        let rs = payload(&send(bmc, &rakp1_request(sidc, &rm, role, name.as_bytes()), now).unwrap());
        if rs[1] != 0 {
            return Err((0x13, rs[1]));
        }
        assert_eq!(u32::from_le_bytes(rs[4..8].try_into().unwrap()), sidm);
        let rc: [u8; 16] = rs[8..24].try_into().unwrap();
        let guid: [u8; 16] = rs[24..40].try_into().unwrap();
        let mut kuid = [0u8; 20];
        kuid[..password.len()].copy_from_slice(password.as_bytes());
        let x = Exchange {
            auth: s.auth,
            kuid: &kuid,
            sidm,
            sidc,
            rm: &rm,
            rc: &rc,
            guid: &guid,
            role,
            username: name.as_bytes(),
        };
        // The console checks RAKP 2 (a wrong password fails here) but
        // sends RAKP 3 anyway, to see the BMC's side.
        let rakp2_ok = crypto::verify(&x.rakp2_code(), &rs[40..]);
        let rs = payload(&send(bmc, &rakp3_request(sidc, 0, x.rakp3_code().as_slice()), now).unwrap());
        if rs[1] != 0 {
            assert!(!rakp2_ok);
            return Err((0x15, rs[1]));
        }
        let sik = x.sik();
        assert_eq!(&rs[8..], x.rakp4_icv(&sik).as_slice());
        Ok(Console { suite: s, sidm, sidc, keys: SessionKeys::derive(s.auth, &sik), seq: 0, rq_seq: 0 })
    }

    impl Console {
        /// A protected request datagram.
        fn packet(&mut self, netfn: u8, cmd: u8, data: &[u8]) -> Vec<u8> {
            self.seq += 1;
            self.rq_seq = (self.rq_seq + 1) & 0x3F;
            let mut msg = vec![BMC_ADDR, netfn << 2];
            msg.push(wire::checksum(&msg));
            msg.extend_from_slice(&[0x81, self.rq_seq << 2, cmd]);
            msg.extend_from_slice(data);
            let sum = wire::checksum(&msg[3..]);
            msg.push(sum);
            let encrypted = self.suite.confidentiality != 0;
            let payload = if encrypted { self.keys.encrypt([0x33; 16], &msg) } else { msg };
            let protection = Protection { keys: &self.keys, integrity: self.suite.integrity, encrypted };
            wire::rmcpp(wire::PAYLOAD_IPMI, self.sidc, self.seq, &payload, Some(protection))
        }

        /// Verifies and opens a reply: (cc, data).
        fn open_reply(&self, reply: &[u8]) -> (u8, Vec<u8>) {
            let Some(Datagram::Rmcpp(p)) = wire::parse(reply) else { panic!("not RMCP+") };
            assert_eq!(p.session_id, self.sidm);
            if self.suite.integrity != 0 {
                let (covered, icv) = p.trailer(self.suite.icv_len()).expect("trailer");
                assert!(crypto::verify(&self.keys.icv(self.suite.integrity, covered), icv), "reply ICV");
            }
            let msg = if p.encrypted { self.keys.decrypt(p.payload).expect("decrypt") } else { p.payload.to_vec() };
            assert_eq!(msg[4] >> 2, self.rq_seq, "rqSeq mirrored");
            (msg[6], msg[7..msg.len() - 1].to_vec())
        }

        fn call(&mut self, bmc: &Bmc, netfn: u8, cmd: u8, data: &[u8], now: Instant) -> Option<(u8, Vec<u8>)> {
            let pkt = self.packet(netfn, cmd, data);
            send(bmc, &pkt, now).map(|r| self.open_reply(&r))
        }
    }

    #[test]
    fn sessions_under_each_suite_start_at_user_and_raise_to_admin() {
        for suite in [1, 2, 3, 17] {
            let (b, now, mut c) = admin_session(&[1, 2, 3, 17], suite);
            assert_eq!(c.call(&b, 0x00, 0x02, &[0x01], now), Some((0xD4, vec![])), "User may not power on");
            assert_eq!(c.call(&b, 0x06, 0x3B, &[0x04], now), Some((0x00, vec![0x04])));
            assert_eq!(c.call(&b, 0x00, 0x02, &[0x01], now), Some((0x00, vec![])));
            assert!(b.spec.snapshot().power_on, "suite {suite}");
            // The machine's own privilege fields are left as they were.
            assert_eq!(b.spec.snapshot().session_privilege, 4);
            let stats = b.stats(now);
            assert_eq!((stats.handshakes, stats.active_sessions), (1, 1));
            assert_eq!(c.call(&b, 0x06, 0x3C, &c.sidc.to_le_bytes(), now), Some((0x00, vec![])));
            assert_eq!(b.stats(now).active_sessions, 0);
        }
    }

    #[test]
    fn replays_bad_icvs_and_unprotected_packets_are_dropped() {
        let (b, now, mut c) = admin_session(&[17], 17);
        let pkt = c.packet(0x06, 0x01, &[]);
        assert!(send(&b, &pkt, now).is_some());
        assert!(send(&b, &pkt, now).is_none(), "replay");
        let mut bad = c.packet(0x06, 0x01, &[]);
        let last = bad.len() - 1;
        bad[last] ^= 0x01;
        assert!(send(&b, &bad, now).is_none(), "bad ICV");
        // The same request sent in the clear inside an encrypted session.
        c.seq += 1;
        let clear = wire::rmcpp(wire::PAYLOAD_IPMI, c.sidc, c.seq, &[0x20, 0x18, 0xC8, 0x81, 0x04, 0x01, 0x7A], None);
        assert!(send(&b, &clear, now).is_none(), "unprotected");
        // Unknown session id.
        let mut other = c.packet(0x06, 0x01, &[]);
        other[6] ^= 0xFF;
        assert!(send(&b, &other, now).is_none());
        assert!(c.call(&b, 0x06, 0x01, &[], now).is_some(), "the session still works");
        assert_eq!(b.stats(now).discarded, 4);
    }

    #[test]
    fn open_session_statuses() {
        let b = bmc(&[3, 17]);
        let now = Instant::now();
        let status =
            |algs: [u8; 3], privilege: u8| payload(&send(&b, &open_request(7, privilege, algs), now).unwrap())[1];
        assert_eq!(status([0, 0, 0], 0), status::INVALID_AUTH_ALGORITHM, "suite 0");
        assert_eq!(status([2, 2, 0], 0), status::INVALID_AUTH_ALGORITHM, "MD5");
        assert_eq!(status([1, 2, 0], 0), status::INVALID_INTEGRITY_ALGORITHM);
        assert_eq!(status([1, 1, 2], 0), status::INVALID_CONFIDENTIALITY_ALGORITHM);
        assert_eq!(status([1, 1, 0], 0), status::NO_CIPHER_SUITE_MATCH, "suite 2 not offered");
        assert_eq!(status([3, 4, 1], 5), status::INVALID_ROLE);
        assert_eq!(status([3, 4, 1], 0), status::OK);
        let rs = payload(&send(&b, &open_request(8, 3, [3, 4, 1]), now).unwrap());
        assert_eq!((rs[1], rs[2]), (0, 3), "the requested maximum is kept");
        assert_eq!(&rs[12..], &[0, 0, 0, 8, 3, 0, 0, 0, 1, 0, 0, 8, 4, 0, 0, 0, 2, 0, 0, 8, 1, 0, 0, 0]);
        // A retransmitted request gets the same session.
        let again = payload(&send(&b, &open_request(8, 3, [3, 4, 1]), now).unwrap());
        assert_eq!(again[8..12], rs[8..12]);
        // Limit 4: two opened so far (SIDm 7 and 8).
        let open = |sidm: u32| payload(&send(&b, &open_request(sidm, 0, [3, 4, 1]), now).unwrap())[1];
        assert_eq!(open(10), status::OK);
        assert_eq!(open(11), status::OK);
        assert_eq!(open(12), status::INSUFFICIENT_RESOURCES);
        assert_eq!(b.stats(now).pending_sessions, 4);
        // Idle pending sessions expire and free their slots.
        let later = now + Duration::from_secs(61);
        assert_eq!(payload(&send(&b, &open_request(9, 0, [3, 4, 1]), later).unwrap())[1], status::OK);
        assert_eq!(b.stats(later).expired_sessions, 4);
    }

    #[test]
    fn rakp_statuses() {
        let b = bmc(&[17]);
        let now = Instant::now();
        let err = |role: u8, name: &str, password: &str| login(&b, 17, role, name, password, now).err();
        assert_eq!(err(0x10, "admin", "password"), Some((0x13, status::INVALID_ROLE)), "role 0");
        assert_eq!(err(0x15, "admin", "password"), Some((0x13, status::INVALID_ROLE)), "OEM role");
        assert_eq!(err(0x14, "nobody", "x"), Some((0x13, status::UNAUTHORIZED_NAME)));
        assert_eq!(err(0x14, "oper", "operpass"), Some((0x13, status::UNAUTHORIZED_ROLE)), "name-only");
        assert_eq!(err(0x04, "oper", "operpass"), Some((0x13, status::UNAUTHORIZED_ROLE)), "name+privilege");
        assert!(err(0x13, "oper", "operpass").is_none());
        assert!(err(0x03, "oper", "operpass").is_none(), "name+privilege, exact role");
        // Username/privilege lookup: "admin" at User is slot 4 with its own
        // password; at Operator no entry matches.
        assert!(err(0x02, "admin", "other").is_none());
        assert_eq!(err(0x02, "admin", "password"), Some((0x15, status::INVALID_INTEGRITY_CHECK_VALUE)));
        assert_eq!(err(0x03, "admin", "password"), Some((0x13, status::UNAUTHORIZED_NAME)));
        assert_eq!(err(0x14, "admin", "wrong"), Some((0x15, status::INVALID_INTEGRITY_CHECK_VALUE)));
        b.spec.update(|s| s.users[2].ipmi_messaging = false);
        assert_eq!(err(0x13, "oper", "operpass"), Some((0x13, status::UNAUTHORIZED_NAME)), "no IPMI messaging");
        // Name longer than 16 bytes.
        let rs = payload(&send(&b, &open_request(1, 0, [3, 4, 1]), now).unwrap());
        let sidc = u32::from_le_bytes(rs[8..12].try_into().unwrap());
        let rs = payload(&send(&b, &rakp1_request(sidc, &[0; 16], 0x14, &[b'a'; 17]), now).unwrap());
        assert_eq!(rs[1], status::INVALID_NAME_LENGTH);
        // Role above the Open Session maximum.
        let rs = payload(&send(&b, &open_request(2, 3, [3, 4, 1]), now).unwrap());
        let sidc = u32::from_le_bytes(rs[8..12].try_into().unwrap());
        let rs = payload(&send(&b, &rakp1_request(sidc, &[0; 16], 0x14, b"admin"), now).unwrap());
        assert_eq!(rs[1], status::INVALID_ROLE);
        // Refused handshakes leave no session behind.
        let stats = b.stats(now);
        assert_eq!(stats.pending_sessions, 0, "{stats:?}");
    }

    #[test]
    fn restart_forgets_sessions_and_handshakes() {
        let (b, now, mut c) = admin_session(&[17], 17);
        let rs = payload(&send(&b, &open_request(5, 0, [3, 4, 1]), now).unwrap());
        let pending = u32::from_le_bytes(rs[8..12].try_into().unwrap());
        b.forget_sessions();
        assert!(c.call(&b, 0x06, 0x01, &[], now).is_none());
        let rs = payload(&send(&b, &rakp1_request(pending, &[0; 16], 0x14, b"admin"), now).unwrap());
        assert_eq!(rs[1], status::INVALID_SESSION_ID);
        let rs = payload(&send(&b, &rakp3_request(c.sidc, 0, &[0; 32]), now).unwrap());
        assert_eq!(rs[1], status::INVALID_SESSION_ID);
        assert_eq!(b.stats(now).forgotten_sessions, 2);
        assert!(login(&b, 17, 0x14, "admin", "password", now).is_ok(), "new sessions work");
    }

    #[test]
    fn idle_sessions_expire() {
        let b = bmc(&[3]);
        let now = Instant::now();
        b.core().settings.idle_timeout = Duration::from_secs(5);
        let mut c = login(&b, 3, 0x14, "admin", "password", now).unwrap();
        assert!(c.call(&b, 0x06, 0x01, &[], now + Duration::from_secs(4)).is_some());
        assert!(c.call(&b, 0x06, 0x01, &[], now + Duration::from_secs(8)).is_some(), "activity kept it");
        assert!(c.call(&b, 0x06, 0x01, &[], now + Duration::from_secs(14)).is_none());
        assert_eq!(b.stats(now + Duration::from_secs(14)).expired_sessions, 1);
    }

    #[test]
    fn privileges_are_per_session_and_sessions_are_listed_and_closed() {
        let (b, now, mut admin) = admin_session(&[17], 17);
        let mut oper = login(&b, 17, 0x13, "oper", "operpass", now).unwrap();
        assert_eq!(admin.call(&b, 0x06, 0x3B, &[0x04], now).unwrap().0, 0x00);
        assert_eq!(oper.call(&b, 0x06, 0x3B, &[0x04], now).unwrap().0, 0x81, "above the role");
        assert_eq!(oper.call(&b, 0x06, 0x3B, &[0x03], now).unwrap(), (0x00, vec![0x03]));
        assert_eq!(oper.call(&b, 0x06, 0x03, &[], now).unwrap().0, 0xD4, "warm reset: admin only");
        assert_eq!(admin.call(&b, 0x06, 0x03, &[], now).unwrap().0, 0x00);
        // Get Session Info: current, Nth, by handle.
        let (cc, me) = oper.call(&b, 0x06, 0x3D, &[0x00], now).unwrap();
        assert_eq!(cc, 0);
        assert_eq!(
            (me[1], me[2], me[3], me[4], me[5]),
            (4, 2, 3, 3, 0x11),
            "limit, active, user 3, operator, RMCP+ ch 1"
        );
        assert_eq!(&me[6..10], &[127, 0, 0, 1]);
        assert_eq!(u16::from_le_bytes([me[16], me[17]]), 40000);
        let (_, second) = admin.call(&b, 0x06, 0x3D, &[0x02], now).unwrap();
        assert_eq!(second[0], me[0]);
        let (_, none) = admin.call(&b, 0x06, 0x3D, &[0x03], now).unwrap();
        assert_eq!(none, vec![0, 4, 2]);
        // Closing another session takes Administrator; by handle then.
        assert_eq!(oper.call(&b, 0x06, 0x3C, &admin.sidc.to_le_bytes(), now).unwrap().0, 0xD4);
        assert_eq!(admin.call(&b, 0x06, 0x3C, &[0, 0, 0, 0, 0x77], now).unwrap().0, 0x88);
        assert_eq!(admin.call(&b, 0x06, 0x3C, &[1, 2, 3, 4], now).unwrap().0, 0x87);
        assert_eq!(admin.call(&b, 0x06, 0x3C, &[0, 0, 0, 0, me[0]], now).unwrap().0, 0x00);
        assert!(oper.call(&b, 0x06, 0x01, &[], now).is_none(), "closed");
        assert_eq!(b.stats(now).active_sessions, 1);
    }

    #[test]
    fn retransmitted_rakp3_gets_the_same_rakp4() {
        let b = bmc(&[17]);
        let now = Instant::now();
        let sidm = 3;
        let rs = payload(&send(&b, &open_request(sidm, 0, [3, 4, 1]), now).unwrap());
        let sidc = u32::from_le_bytes(rs[8..12].try_into().unwrap());
        let rm = [1; 16];
        let rs = payload(&send(&b, &rakp1_request(sidc, &rm, 0x14, b"admin"), now).unwrap());
        let (rc, guid): ([u8; 16], [u8; 16]) = (rs[8..24].try_into().unwrap(), rs[24..40].try_into().unwrap());
        let x = Exchange {
            auth: 3,
            kuid: b"password",
            sidm,
            sidc,
            rm: &rm,
            rc: &rc,
            guid: &guid,
            role: 0x14,
            username: b"admin",
        };
        let first = send(&b, &rakp3_request(sidc, 0, x.rakp3_code().as_slice()), now).unwrap();
        let again = send(&b, &rakp3_request(sidc, 0, x.rakp3_code().as_slice()), now).unwrap();
        assert_eq!(payload(&first), payload(&again));
        assert_eq!(b.stats(now).handshakes, 1);
        // A console that gives up (RAKP 3 with an error status) frees its
        // session without an answer.
        let rs = payload(&send(&b, &open_request(4, 0, [3, 4, 1]), now).unwrap());
        let sidc = u32::from_le_bytes(rs[8..12].try_into().unwrap());
        send(&b, &rakp1_request(sidc, &rm, 0x14, b"admin"), now).unwrap();
        assert!(send(&b, &rakp3_request(sidc, 0x0F, &[]), now).is_none());
        assert_eq!(b.stats(now).pending_sessions, 0);
    }

    #[test]
    fn faults_shape_the_replies() {
        let (b, now, mut c) = admin_session(&[17], 17);
        let peer: SocketAddr = PEER.parse().unwrap();
        b.faults().wrong_session_id = 1;
        let out = b.on_datagram(&c.packet(0x06, 0x01, &[]), peer, now).unwrap();
        let Some(Datagram::Rmcpp(p)) = wire::parse(&out.bytes) else { panic!() };
        assert_eq!(p.session_id, !c.sidm);
        assert_eq!(b.faults().wrong_session_id, 0);
        b.faults().duplicate_replies = 1;
        b.faults().delay_next_reply = Some(Duration::from_millis(250));
        let out = b.on_datagram(&c.packet(0x06, 0x01, &[]), peer, now).unwrap();
        assert_eq!((out.copies, out.delay), (2, Duration::from_millis(250)));
        b.core().settings.latency = Duration::from_millis(20);
        let out = b.on_datagram(&c.packet(0x06, 0x01, &[]), peer, now).unwrap();
        assert_eq!((out.copies, out.delay), (1, Duration::from_millis(20)));
        assert_eq!(c.call(&b, 0x06, 0x3B, &[0x04], now).unwrap().0, 0x00);
        b.faults().drop_replies = 1;
        assert!(c.call(&b, 0x00, 0x02, &[0x05], now).is_none());
        assert_eq!(b.spec.snapshot().soft_offs, 1, "executed, reply dropped");
        b.faults().ignore_requests = 1;
        assert!(c.call(&b, 0x06, 0x01, &[], now).is_none());
        b.spec.inject(0x06, 0x01, Fault::CompletionCode(0xC0));
        assert_eq!(c.call(&b, 0x06, 0x01, &[], now), Some((0xC0, vec![])));
        b.spec.inject(0x06, 0x01, Fault::NoReply);
        assert!(c.call(&b, 0x06, 0x01, &[], now).is_none());
        assert!(c.call(&b, 0x06, 0x01, &[], now).is_some());
    }

    #[test]
    fn sessionless_commands_in_both_framings() {
        let b = bmc(&[1, 2, 3, 17]);
        let now = Instant::now();
        let msg = |cmd: u8, data: &[u8]| {
            let mut m = vec![BMC_ADDR, 0x06 << 2];
            m.push(wire::checksum(&m));
            m.extend_from_slice(&[0x81, 0x08, cmd]);
            m.extend_from_slice(data);
            let c = wire::checksum(&m[3..]);
            m.push(c);
            m
        };
        let reply_data = |reply: Vec<u8>| -> Vec<u8> {
            let m = match wire::parse(&reply) {
                Some(Datagram::Ipmi15 { message, .. }) => message.to_vec(),
                Some(Datagram::Rmcpp(p)) => p.payload.to_vec(),
                other => panic!("{other:?}"),
            };
            m[6..m.len() - 1].to_vec()
        };
        let caps = reply_data(send(&b, &wire::ipmi15(&msg(0x38, &[0x8E, 0x04])), now).unwrap());
        assert_eq!(caps, vec![0x00, 0x01, 0x80, 0x04, 0x02, 0, 0, 0, 0]);
        let caps15 = reply_data(send(&b, &wire::ipmi15(&msg(0x38, &[0x0E, 0x04])), now).unwrap());
        assert_eq!(caps15[2..5], [0x00, 0x04, 0x00]);
        // Cipher suites 1, 2, 3, 17: 20 bytes of records over two pages.
        let get = |index: u8| {
            let pkt = wire::rmcpp(wire::PAYLOAD_IPMI, 0, 0, &msg(0x54, &[0x0E, 0x00, 0x80 | index]), None);
            reply_data(send(&b, &pkt, now).unwrap())
        };
        let (p0, p1, p2) = (get(0), get(1), get(2));
        assert_eq!((p0.len(), p1.len(), p2.len()), (18, 6, 2));
        assert_eq!(&p0[..7], &[0x00, 0x01, 0xC0, 0x01, 0x01, 0x40, 0x80]);
        assert_eq!(&p1[2..], &[0xC0, 0x11, 0x03, 0x44, 0x81][1..]);
        let guid = reply_data(send(&b, &wire::ipmi15(&msg(0x37, &[])), now).unwrap());
        assert_eq!(&guid[1..], &[0x47; 16]);
        // Other commands are not answered outside a session.
        assert!(send(&b, &wire::ipmi15(&msg(0x01, &[])), now).is_none());
        // ASF ping.
        let ping = [0x06, 0x00, 0xFF, 0x06, 0x00, 0x00, 0x11, 0xBE, 0x80, 0x09, 0x00, 0x00];
        assert_eq!(send(&b, &ping, now).unwrap(), wire::asf_pong(0xFF, 0x09));
    }
}
