//! Session-less presence and capability probe: IPMI 1.5-framed *Get
//! Channel Authentication Capabilities* (App netfn 0x06, cmd 0x38).
//!
//! Sent before every RMCP+ handshake, for two reasons ipmi-rs cannot cover:
//! - it has per-attempt timeouts and retransmits bounded by the caller's
//!   deadline (ipmi-rs's handshake sends each message once), so "nobody
//!   answers" becomes a clean `Unreachable` within the deadline;
//! - it refuses BMCs that do not offer IPMI 2.0 / RMCP+: ipmi-rs would
//!   silently fall back to an IPMI 1.5 session (MD5 or clear-text password
//!   authentication, no encryption), which bmcfleet never uses.
//!
//! The harness (`bmcfleet_testing::ipmi::IpmiSim`) uses the same probe to wait until a
//! freshly started simulator answers.

use crate::error::{TransportError, TransportErrorKind};
use std::io::ErrorKind;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// What the BMC said about its LAN channel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AuthCaps {
    /// The channel number the request arrived on.
    pub channel: u8,
    /// The BMC accepts IPMI 2.0 (RMCP+) sessions.
    pub ipmi20: bool,
    /// The BMC accepts IPMI 1.5 sessions.
    pub ipmi15: bool,
}

const NETFN_APP: u8 = 0x06;
const CMD_GET_CHANNEL_AUTH_CAPS: u8 = 0x38;
const BMC_ADDR: u8 = 0x20;
const REMOTE_SWID: u8 = 0x81;
const PRIV_ADMIN: u8 = 0x04;

fn checksum(bytes: &[u8]) -> u8 {
    bytes.iter().fold(0u8, |a, b| a.wrapping_add(*b)).wrapping_neg()
}

/// Builds the RMCP/IPMI 1.5 session-less datagram.
fn encode(rq_seq: u8, extended: bool) -> Vec<u8> {
    let channel = if extended { 0x8E } else { 0x0E };
    let mut msg = vec![BMC_ADDR, NETFN_APP << 2];
    msg.push(checksum(&msg));
    let body_start = msg.len();
    msg.extend_from_slice(&[REMOTE_SWID, (rq_seq & 0x3F) << 2, CMD_GET_CHANNEL_AUTH_CAPS, channel, PRIV_ADMIN]);
    msg.push(checksum(&msg[body_start..]));

    // RMCP header: version 6, reserved, sequence 0xFF (no ack), class IPMI.
    let mut out = vec![0x06, 0x00, 0xFF, 0x07];
    // IPMI 1.5 session header: auth type none, sequence 0, session id 0.
    out.push(0x00);
    out.extend_from_slice(&[0; 8]);
    out.push(msg.len() as u8);
    out.extend_from_slice(&msg);
    out
}

/// What is wrong with a reply to the probe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplyErrorKind {
    /// Shorter than its headers or its length field say.
    Truncated,
    /// RMCP+ framing where IPMI 1.5 session-less framing was asked for.
    Framing,
    /// A message checksum that does not add up.
    Checksum,
}

pub type ReplyError = bmcfleet_schema::error::Error<ReplyErrorKind>;

/// Parses a reply; `Ok(None)` means "not the reply to this request".
pub(crate) fn decode(rq_seq: u8, pkt: &[u8]) -> Result<Option<(u8, Vec<u8>)>, ReplyError> {
    let truncated = |why: &str| ReplyError::new(ReplyErrorKind::Truncated, why);
    if pkt.len() < 4 || pkt[0] != 0x06 || pkt[3] & 0x1F != 0x07 {
        return Ok(None); // not RMCP/IPMI (e.g. an ASF pong)
    }
    let auth_type = *pkt.get(4).ok_or_else(|| truncated("truncated session header"))?;
    let len_at = match auth_type {
        0x00 => 13,
        0x06 => {
            return Err(ReplyError::new(
                ReplyErrorKind::Framing,
                "RMCP+ framed reply to a session-less IPMI 1.5 request",
            ))
        }
        _ => 29,
    };
    let len = *pkt.get(len_at).ok_or_else(|| truncated("truncated session header"))? as usize;
    let msg =
        pkt.get(len_at + 1..len_at + 1 + len).ok_or_else(|| truncated("message shorter than its length field"))?;
    if msg.len() < 8 {
        return Err(truncated("IPMI message too short"));
    }
    if checksum(&msg[..2]) != msg[2] || checksum(&msg[3..msg.len() - 1]) != msg[msg.len() - 1] {
        return Err(ReplyError::new(ReplyErrorKind::Checksum, "IPMI message checksum mismatch"));
    }
    let netfn = msg[1] >> 2;
    let seq = msg[4] >> 2;
    if netfn != NETFN_APP | 1 || msg[5] != CMD_GET_CHANNEL_AUTH_CAPS || seq != rq_seq & 0x3F {
        return Ok(None);
    }
    Ok(Some((msg[6], msg[7..msg.len() - 1].to_vec())))
}

fn io_error(addr: SocketAddr, e: &std::io::Error) -> TransportError {
    let kind = TransportErrorKind::Unreachable;
    match e.kind() {
        ErrorKind::ConnectionRefused => {
            TransportError::new(kind, format!("{addr}: connection refused (nothing listens on this UDP port)"))
        }
        _ => TransportError::new(kind, format!("{addr}: {e}")),
    }
}

/// What one received datagram means for the probe.
enum Step {
    /// Not the reply to this request.
    Ignore,
    /// Ask again (without the IPMI 2.0 extended bit).
    Retry,
    Done(Result<AuthCaps, TransportError>),
}

fn interpret(addr: SocketAddr, rq_seq: u8, datagram: &[u8], extended: &mut bool) -> Step {
    let (cc, data) = match decode(rq_seq, datagram) {
        Ok(Some(reply)) => reply,
        Ok(None) => return Step::Ignore,
        Err(why) => {
            return Step::Done(Err(TransportError::new(TransportErrorKind::Protocol, format!("{addr}: {why}"))))
        }
    };
    if cc == 0xCC && *extended {
        // An IPMI 1.5-only BMC rejects the "IPMI 2.0 extended data" bit.
        *extended = false;
        return Step::Retry;
    }
    if cc != 0 {
        return Step::Done(Err(TransportError::new(
            TransportErrorKind::Protocol,
            format!("{addr}: Get Channel Authentication Capabilities failed with completion code 0x{cc:02X}"),
        )));
    }
    if data.len() < 4 {
        return Step::Done(Err(TransportError::new(
            TransportErrorKind::Protocol,
            format!("{addr}: Get Channel Authentication Capabilities reply too short"),
        )));
    }
    let ext = data[1] & 0x80 != 0;
    Step::Done(Ok(AuthCaps {
        channel: data[0] & 0x0F,
        ipmi20: ext && data[3] & 0x02 != 0,
        ipmi15: !ext || data[3] & 0x01 != 0,
    }))
}

fn wildcard(addr: SocketAddr) -> SocketAddr {
    if addr.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" }.parse().expect("valid wildcard address")
}

/// The async probe of the RMCP+ transport: like [`channel_auth_caps`] on a
/// short-lived connected tokio socket (connected, so a closed port is
/// reported by the kernel at once instead of after every retransmit).
pub(crate) async fn channel_auth_caps_async(
    addr: SocketAddr,
    deadline: tokio::time::Instant,
    attempt_timeout: Duration,
) -> Result<AuthCaps, TransportError> {
    let socket = tokio::net::UdpSocket::bind(wildcard(addr)).await.map_err(|e| crate::error::socket_error(addr, &e))?;
    socket.connect(addr).await.map_err(|e| io_error(addr, &e))?;
    let mut extended = true;
    let mut rq_seq: u8 = 1;
    let mut buf = [0u8; 512];
    while tokio::time::Instant::now() < deadline {
        socket.send(&encode(rq_seq, extended)).await.map_err(|e| io_error(addr, &e))?;
        let attempt_end = (tokio::time::Instant::now() + attempt_timeout).min(deadline);
        loop {
            let n = match tokio::time::timeout_at(attempt_end, socket.recv(&mut buf)).await {
                Err(_) => break,
                Ok(Ok(n)) => n,
                Ok(Err(e)) if e.kind() == ErrorKind::Interrupted => continue,
                Ok(Err(e)) => return Err(io_error(addr, &e)),
            };
            match interpret(addr, rq_seq, &buf[..n], &mut extended) {
                Step::Ignore => continue,
                Step::Retry => break,
                Step::Done(result) => return result,
            }
        }
        rq_seq = (rq_seq % 0x3F) + 1;
    }
    Err(TransportError::new(TransportErrorKind::Unreachable, format!("{addr}: no reply from the BMC")))
}

/// Asks the BMC at `addr` for its channel authentication capabilities,
/// retransmitting every `attempt_timeout` until `deadline`: the blocking
/// form of the async probe (for harnesses outside a runtime, or inside one:
/// it runs on a thread of its own).
pub fn channel_auth_caps(
    addr: SocketAddr,
    deadline: Instant,
    attempt_timeout: Duration,
) -> Result<AuthCaps, TransportError> {
    let deadline = tokio::time::Instant::from_std(deadline);
    std::thread::scope(|scope| {
        scope
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| crate::error::socket_error(addr, &e))?;
                runtime.block_on(channel_auth_caps_async(addr, deadline, attempt_timeout))
            })
            .join()
            .unwrap_or_else(|_| {
                Err(TransportError::new(TransportErrorKind::Internal, format!("{addr}: the probe thread panicked")))
            })
    })
}

/// RMCP/ASF presence ping (IPMI v2.0 §13.2.3, ASF 2.0 §3.2.4.1): RMCP
/// class ASF, IANA 4542, message type 0x80, `tag`, no data.
fn asf_ping(tag: u8) -> [u8; 12] {
    [0x06, 0x00, 0xFF, 0x06, 0x00, 0x00, 0x11, 0xBE, 0x80, tag, 0x00, 0x00]
}

/// A presence pong to the ping of `tag`: `Some(ipmi)` where `ipmi` is its
/// "IPMI supported" entity bit; `None` for anything else.
fn asf_pong(tag: u8, pkt: &[u8]) -> Option<bool> {
    let ok = pkt.len() >= 12 + 16
        && pkt[0] == 0x06
        && pkt[3] & 0x1F == 0x06
        && pkt[4..8] == [0x00, 0x00, 0x11, 0xBE]
        && pkt[8] == 0x40
        && pkt[9] == tag
        && usize::from(pkt[11]) >= 10;
    ok.then(|| pkt[12 + 8] & 0x80 != 0)
}

/// Whether `addr` answers an RMCP/ASF presence ping within `timeout`
/// (`Some(ipmi supported)`), on a short-lived connected socket.
pub async fn presence_ping(addr: SocketAddr, timeout: Duration) -> Option<bool> {
    let socket = tokio::net::UdpSocket::bind(wildcard(addr)).await.ok()?;
    socket.connect(addr).await.ok()?;
    let tag = 0x2A;
    socket.send(&asf_ping(tag)).await.ok()?;
    let deadline = tokio::time::Instant::now() + timeout;
    let mut buf = [0u8; 256];
    loop {
        match tokio::time::timeout_at(deadline, socket.recv(&mut buf)).await {
            Ok(Ok(n)) => {
                if let Some(ipmi) = asf_pong(tag, &buf[..n]) {
                    return Some(ipmi);
                }
            }
            Ok(Err(e)) if e.kind() == ErrorKind::Interrupted => continue,
            _ => return None,
        }
    }
}

/// Discovery's IPMI probe (docs/BMCCTL.md "Discovery"): the session-less,
/// unauthenticated RMCP/ASF presence ping and *Get Channel Authentication
/// Capabilities*, each bounded by `timeout`; no session is opened and no
/// credential sent. Found when the capabilities are answered (the ping
/// alone is recorded, not enough: many NICs answer it without a BMC).
pub async fn discover(ip: std::net::IpAddr, port: u16, timeout: Duration) -> Option<bmcfleet_schema::discover::Found> {
    let addr = SocketAddr::new(ip, port);
    let asf = presence_ping(addr, timeout.min(Duration::from_millis(500))).await;
    let deadline = tokio::time::Instant::now() + timeout;
    let attempt = (timeout / 3).max(Duration::from_millis(50));
    let caps = match channel_auth_caps_async(addr, deadline, attempt).await {
        Ok(caps) => caps,
        Err(e) => {
            tracing::debug!(%addr, error = %e, "Discovery: no IPMI answer.");
            return None;
        }
    };
    let version = if caps.ipmi20 { "2.0" } else { "1.5" };
    Some(bmcfleet_schema::discover::Found {
        address: ip,
        port,
        protocol: bmcfleet_schema::Protocol::Ipmi,
        vendor: None,
        product: None,
        version: Some(version.into()),
        uuid: None,
        pin_sha256: None,
        asf: Some(asf.is_some()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;

    #[test]
    fn request_bytes_match_the_spec_layout() {
        let p = encode(1, true);
        assert_eq!(&p[..4], &[0x06, 0x00, 0xFF, 0x07]);
        assert_eq!(p[13] as usize, p.len() - 14);
        let msg = &p[14..];
        assert_eq!(msg, &[0x20, 0x18, 0xC8, 0x81, 0x04, 0x38, 0x8E, 0x04, checksum(&[0x81, 0x04, 0x38, 0x8E, 0x04])]);
    }

    fn reply(seq: u8, cc: u8, data: &[u8]) -> Vec<u8> {
        let mut msg = vec![0x81, 0x07 << 2];
        msg.push(checksum(&msg));
        msg.extend_from_slice(&[0x20, seq << 2, 0x38, cc]);
        msg.extend_from_slice(data);
        let c = checksum(&msg[3..]);
        msg.push(c);
        let mut p = vec![0x06, 0x00, 0xFF, 0x07, 0x00, 0, 0, 0, 0, 0, 0, 0, 0, msg.len() as u8];
        p.extend_from_slice(&msg);
        p
    }

    #[test]
    fn decodes_reply_and_ignores_other_sequences() {
        let p = reply(3, 0, &[1, 0x97, 0x04, 0x03, 0, 0, 0, 0]);
        assert_eq!(decode(3, &p).unwrap(), Some((0, vec![1, 0x97, 0x04, 0x03, 0, 0, 0, 0])));
        assert_eq!(decode(4, &p).unwrap(), None);
        let mut bad = p.clone();
        let last = bad.len() - 1;
        bad[last] ^= 1;
        assert_eq!(decode(3, &bad).unwrap_err().kind(), ReplyErrorKind::Checksum);
        assert_eq!(decode(3, &p[..p.len() - 2]).unwrap_err().kind(), ReplyErrorKind::Truncated);
        let mut plus = p.clone();
        plus[4] = 0x06;
        assert_eq!(decode(3, &plus).unwrap_err().kind(), ReplyErrorKind::Framing);
    }

    #[test]
    fn asf_pong_is_read_and_other_datagrams_are_not() {
        let mut pong = vec![0x06, 0x00, 0xFF, 0x06, 0x00, 0x00, 0x11, 0xBE, 0x40, 0x2A, 0x00, 0x10];
        pong.extend_from_slice(&[0x00, 0x00, 0x11, 0xBE, 0, 0, 0, 0, 0x81, 0x00, 0, 0, 0, 0, 0, 0]);
        assert_eq!(asf_pong(0x2A, &pong), Some(true));
        assert_eq!(asf_pong(0x2B, &pong), None, "another ping's tag");
        pong[20] = 0x01;
        assert_eq!(asf_pong(0x2A, &pong), Some(false), "no IPMI entity");
        assert_eq!(asf_pong(0x2A, &pong[..20]), None);
        assert_eq!(asf_pong(0x2A, &asf_ping(0x2A)), None, "a ping is no pong");
    }

    #[test]
    fn closed_port_is_unreachable_quickly() {
        let s = UdpSocket::bind("127.0.0.1:0").unwrap();
        let addr = s.local_addr().unwrap();
        drop(s);
        let start = Instant::now();
        let e = channel_auth_caps(addr, start + Duration::from_secs(5), Duration::from_millis(200)).unwrap_err();
        assert_eq!(e.kind, TransportErrorKind::Unreachable);
        assert!(start.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn silent_peer_is_unreachable_at_the_deadline() {
        let s = UdpSocket::bind("127.0.0.1:0").unwrap();
        let addr = s.local_addr().unwrap();
        let start = Instant::now();
        let e = channel_auth_caps(addr, start + Duration::from_millis(500), Duration::from_millis(100)).unwrap_err();
        assert_eq!(e.kind, TransportErrorKind::Unreachable);
        let took = start.elapsed();
        assert!(took >= Duration::from_millis(500) && took < Duration::from_millis(900), "{took:?}");
        // It retransmitted: several requests are queued on the silent socket.
        s.set_nonblocking(true).unwrap();
        let mut n = 0;
        let mut buf = [0u8; 64];
        while s.recv(&mut buf).is_ok() {
            n += 1;
        }
        assert!(n >= 4, "{n} requests");
    }
}
