//! One BMC's RMCP+ sessions: the handshake phases (§13.17–§13.20), the
//! active session's keys and privilege, sequence number windows, handles,
//! idle expiry and the session limit.
//!
//! Pure state: no sockets, no clock of its own (`now` is passed in), so the
//! server decides and this module remembers.

use super::crypto::{CipherSuite, Digest, Exchange, SessionKeys};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// Privilege levels.
pub const PRIV_USER: u8 = 2;
pub const PRIV_ADMIN: u8 = 4;

/// Inbound session sequence numbers: each number is accepted once, when at
/// most [`SeqWindow::AHEAD`] above the highest accepted so far, or among the
/// [`SeqWindow::BEHIND`] below it and not seen yet. 0 is never valid in a
/// session. The window sizes are ours: the spec asks for a sliding window
/// that rejects replays and stale numbers, not for these exact widths.
#[derive(Clone, Copy, Debug, Default)]
pub struct SeqWindow {
    highest: u32,
    /// Bit i set: `highest - i` was accepted (bit 0 is `highest`).
    seen: u32,
}

impl SeqWindow {
    pub const AHEAD: u32 = 32;
    pub const BEHIND: u32 = 31;

    /// Whether `seq` is acceptable; records it when it is.
    pub fn accept(&mut self, seq: u32) -> bool {
        if seq == 0 {
            return false;
        }
        if seq > self.highest {
            let ahead = seq - self.highest;
            if ahead > Self::AHEAD {
                return false;
            }
            self.seen = if ahead >= 32 { 0 } else { self.seen << ahead };
            self.seen |= 1;
            self.highest = seq;
            return true;
        }
        let behind = self.highest - seq;
        if behind > Self::BEHIND || self.seen & (1 << behind) != 0 {
            return false;
        }
        self.seen |= 1 << behind;
        true
    }
}

/// What RAKP 1 established, kept until RAKP 3 arrives.
#[derive(Clone, Debug)]
pub struct Handshake {
    pub rm: [u8; 16],
    pub rc: [u8; 16],
    /// RAKP 1's whole role byte.
    pub role: u8,
    pub username: [u8; 16],
    pub username_len: u8,
    pub user_id: u8,
    /// Kuid: the user's password as stored (20 bytes, zero padded).
    pub kuid: [u8; 20],
}

impl Handshake {
    pub fn username(&self) -> &[u8] {
        &self.username[..usize::from(self.username_len)]
    }

    /// The requested maximum privilege (role bits 3:0).
    pub fn privilege(&self) -> u8 {
        self.role & 0x0F
    }

    /// The RAKP inputs of this handshake, for the session `sidm`/`sidc`
    /// under authentication algorithm `auth`, as the BMC `guid` sees them.
    pub fn exchange<'a>(&'a self, auth: u8, sidm: u32, sidc: u32, guid: &'a [u8; 16]) -> Exchange<'a> {
        Exchange {
            auth,
            kuid: &self.kuid,
            sidm,
            sidc,
            rm: &self.rm,
            rc: &self.rc,
            guid,
            role: self.role,
            username: self.username(),
        }
    }
}

/// An active session.
#[derive(Clone, Debug)]
pub struct Active {
    pub keys: SessionKeys,
    /// Current operating privilege (starts at User or the role if lower,
    /// raised with Set Session Privilege Level).
    pub privilege: u8,
    /// The role granted in RAKP 1: the ceiling of Set Session Privilege Level.
    pub limit: u8,
    pub user_id: u8,
    /// Separate windows and counters for authenticated and unauthenticated
    /// packets (two sequence number spaces).
    pub inbound_auth: SeqWindow,
    pub inbound_plain: SeqWindow,
    pub outbound_auth: u32,
    pub outbound_plain: u32,
    /// RAKP 3's code and our RAKP 4 ICV, to answer a retransmitted RAKP 3
    /// (its RAKP 4 was lost) without a second handshake.
    pub rakp3_code: Digest,
    pub rakp4_icv: Digest,
}

impl Active {
    /// The next outbound sequence number of the given space.
    pub fn next_outbound(&mut self, authenticated: bool) -> u32 {
        let counter = if authenticated { &mut self.outbound_auth } else { &mut self.outbound_plain };
        *counter = counter.wrapping_add(1).max(1);
        *counter
    }
}

/// Where a session is in its life.
#[derive(Clone, Debug)]
pub enum Phase {
    /// Open Session Response sent; RAKP 1 expected.
    Opened,
    /// RAKP 2 sent; RAKP 3 expected.
    Rakp2Sent(Box<Handshake>),
    Active(Box<Active>),
}

#[derive(Clone, Debug)]
pub struct Session {
    /// SIDc: ours, carried by every inbound packet of the session.
    pub sidc: u32,
    /// SIDm: the remote console's, carried by every reply.
    pub sidm: u32,
    pub suite: CipherSuite,
    /// The maximum privilege agreed in Open Session (0 requested: the
    /// highest, Administrator).
    pub max_privilege: u8,
    pub phase: Phase,
    pub handle: u8,
    pub peer: SocketAddr,
    pub last_activity: Instant,
}

impl Session {
    pub fn active(&self) -> Option<&Active> {
        match &self.phase {
            Phase::Active(a) => Some(a),
            _ => None,
        }
    }

    pub fn active_mut(&mut self) -> Option<&mut Active> {
        match &mut self.phase {
            Phase::Active(a) => Some(a),
            _ => None,
        }
    }
}

/// The session table of one BMC.
#[derive(Debug, Default)]
pub struct Sessions {
    by_sidc: HashMap<u32, Session>,
    last_handle: u8,
}

impl Sessions {
    /// Sessions in any phase (they all hold a slot of the session limit).
    pub fn len(&self) -> usize {
        self.by_sidc.len()
    }

    pub fn active_count(&self) -> usize {
        self.by_sidc.values().filter(|s| s.active().is_some()).count()
    }

    /// Drops sessions idle for longer than `timeout`; returns how many.
    pub fn expire(&mut self, now: Instant, timeout: Duration) -> usize {
        let before = self.by_sidc.len();
        self.by_sidc.retain(|_, s| now.saturating_duration_since(s.last_activity) <= timeout);
        before - self.by_sidc.len()
    }

    /// Forgets every session (a BMC restart).
    pub fn clear(&mut self) -> usize {
        let n = self.by_sidc.len();
        self.by_sidc.clear();
        n
    }

    pub fn get(&self, sidc: u32) -> Option<&Session> {
        self.by_sidc.get(&sidc)
    }

    pub fn get_mut(&mut self, sidc: u32) -> Option<&mut Session> {
        self.by_sidc.get_mut(&sidc)
    }

    pub fn remove(&mut self, sidc: u32) -> Option<Session> {
        self.by_sidc.remove(&sidc)
    }

    /// A session still waiting for RAKP 1 that this console opened with
    /// this SIDm (a retransmitted Open Session Request).
    pub fn find_opened(&self, sidm: u32, peer: SocketAddr) -> Option<&Session> {
        self.by_sidc.values().find(|s| s.sidm == sidm && s.peer == peer && matches!(s.phase, Phase::Opened))
    }

    pub fn by_handle(&self, handle: u8) -> Option<&Session> {
        self.by_sidc.values().find(|s| s.handle == handle && s.active().is_some())
    }

    /// The `n`th (1-based) active session, in handle order.
    pub fn nth_active(&self, n: usize) -> Option<&Session> {
        let mut active: Vec<&Session> = self.by_sidc.values().filter(|s| s.active().is_some()).collect();
        active.sort_by_key(|s| s.handle);
        active.get(n.checked_sub(1)?).copied()
    }

    /// Opens a session with a fresh SIDc and handle.
    pub fn open(
        &mut self,
        sidm: u32,
        suite: CipherSuite,
        max_privilege: u8,
        peer: SocketAddr,
        now: Instant,
        mut random_sid: impl FnMut() -> u32,
    ) -> &Session {
        let sidc = loop {
            let id = random_sid();
            if id != 0 && !self.by_sidc.contains_key(&id) {
                break id;
            }
        };
        let handle = loop {
            self.last_handle = self.last_handle.wrapping_add(1).max(1);
            let h = self.last_handle;
            if !self.by_sidc.values().any(|s| s.handle == h) {
                break h;
            }
        };
        let session =
            Session { sidc, sidm, suite, max_privilege, phase: Phase::Opened, handle, peer, last_activity: now };
        self.by_sidc.entry(sidc).or_insert(session)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_accepts_each_number_once() {
        let mut w = SeqWindow::default();
        assert!(!w.accept(0));
        assert!(w.accept(1));
        assert!(!w.accept(1), "replay");
        assert!(w.accept(3));
        assert!(w.accept(2), "late but unseen");
        assert!(!w.accept(2));
        assert!(w.accept(3 + SeqWindow::AHEAD));
        assert!(!w.accept(3 + 2 * SeqWindow::AHEAD + 1), "too far ahead");
        assert!(!w.accept(1), "too old");
        assert!(w.accept(3 + SeqWindow::AHEAD - SeqWindow::BEHIND));
    }

    #[test]
    fn first_number_must_be_near_one() {
        let mut w = SeqWindow::default();
        assert!(!w.accept(1000));
        assert!(w.accept(SeqWindow::AHEAD));
    }

    #[test]
    fn expiry_and_handles() {
        let peer: SocketAddr = "127.0.0.1:9".parse().unwrap();
        let suite = CipherSuite::by_id(17).unwrap();
        let t0 = Instant::now();
        let mut s = Sessions::default();
        let mut next = 0u32;
        let mut ids = || {
            next += 1;
            next
        };
        let a = s.open(10, suite, 4, peer, t0, &mut ids).sidc;
        let b = s.open(11, suite, 4, peer, t0 + Duration::from_secs(5), &mut ids).sidc;
        assert_ne!(s.get(a).unwrap().handle, s.get(b).unwrap().handle);
        assert_eq!(s.find_opened(10, peer).map(|x| x.sidc), Some(a));
        assert_eq!(s.expire(t0 + Duration::from_secs(7), Duration::from_secs(6)), 1);
        assert!(s.get(a).is_none() && s.get(b).is_some());
        assert_eq!(s.clear(), 1);
        assert_eq!(s.len(), 0);
    }
}
