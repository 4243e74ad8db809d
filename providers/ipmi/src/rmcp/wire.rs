//! RMCP+ framing (IPMI v2.0 §13.6, §13.8, §13.17–13.22): session packets,
//! the handshake payloads and the IPMI LAN message inside. Pure functions;
//! everything that comes from the BMC is bounds-checked and a malformed
//! datagram is an `Err`, never a panic.

use super::crypto::{CipherSuite, SessionKeys, AES_BLOCK};

/// RMCP header: version 6, reserved, sequence 0xFF (no ACK), class IPMI.
const RMCP_HEADER: [u8; 4] = [0x06, 0x00, 0xFF, 0x07];
/// Session header auth type / format: RMCP+.
const FORMAT_RMCP_PLUS: u8 = 0x06;
const ENCRYPTED: u8 = 0x80;
const AUTHENTICATED: u8 = 0x40;
/// Offset of the payload in an RMCP+ packet (RMCP 4 + session header 12).
const PAYLOAD_AT: usize = 16;

/// Payload types (§13.27.3).
pub(crate) const PT_IPMI: u8 = 0x00;
/// Serial over LAN (§15.9, §24).
pub(crate) const PT_SOL: u8 = 0x01;
pub(crate) const PT_OPEN_SESSION_REQUEST: u8 = 0x10;
pub(crate) const PT_OPEN_SESSION_RESPONSE: u8 = 0x11;
pub(crate) const PT_RAKP1: u8 = 0x12;
pub(crate) const PT_RAKP2: u8 = 0x13;
pub(crate) const PT_RAKP3: u8 = 0x14;
pub(crate) const PT_RAKP4: u8 = 0x15;

const BMC_ADDR: u8 = 0x20;
const CONSOLE_SWID: u8 = 0x81;

/// Where a received datagram belongs (read without any key).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Route {
    /// IPMI 1.5 framing (session-less replies such as the probe's).
    Sessionless,
    /// An RMCP+ packet for this remote console session id (ours); `None`
    /// when a handshake reply is too short to carry it (an error status).
    Session(Option<u32>),
    /// Anything else (ASF, another class, garbage).
    Other,
}

/// Reads the routing key of a datagram.
pub(crate) fn route(pkt: &[u8]) -> Route {
    if pkt.len() < 5 || pkt[0] != 0x06 || pkt[3] & 0x1F != 0x07 {
        return Route::Other;
    }
    match pkt[4] {
        FORMAT_RMCP_PLUS => {
            let Some(header) = pkt.get(4..PAYLOAD_AT) else { return Route::Other };
            let payload_type = header[1] & 0x3F;
            let sid = u32::from_le_bytes([header[2], header[3], header[4], header[5]]);
            if sid != 0 {
                return Route::Session(Some(sid));
            }
            match payload_type {
                // The console session id sits at bytes 5..8 of these payloads.
                PT_OPEN_SESSION_RESPONSE | PT_RAKP2 | PT_RAKP4 => Route::Session(
                    pkt.get(PAYLOAD_AT + 4..PAYLOAD_AT + 8).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])),
                ),
                _ => Route::Other,
            }
        }
        _ => Route::Sessionless,
    }
}

/// An unauthenticated pre-session packet (session id 0, sequence 0).
pub(crate) fn presession(payload_type: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(PAYLOAD_AT + payload.len());
    out.extend_from_slice(&RMCP_HEADER);
    out.push(FORMAT_RMCP_PLUS);
    out.push(payload_type);
    out.extend_from_slice(&[0; 8]);
    out.extend_from_slice(&(payload.len() as u16).to_le_bytes());
    out.extend_from_slice(payload);
    out
}

/// Reads a pre-session reply of `payload_type`; `None` if it is not one.
pub(crate) fn presession_payload(pkt: &[u8], payload_type: u8) -> Option<&[u8]> {
    if pkt.len() < PAYLOAD_AT || pkt[4] != FORMAT_RMCP_PLUS || pkt[5] & 0x3F != payload_type {
        return None;
    }
    let len = usize::from(u16::from_le_bytes([pkt[14], pkt[15]]));
    pkt.get(PAYLOAD_AT..PAYLOAD_AT + len)
}

/// An IPMI payload packet of an active session: encrypted and
/// authenticated as the suite says.
pub(crate) fn session_packet(
    keys: &SessionKeys,
    bmc_sid: u32,
    seq: u32,
    message: &[u8],
    iv: [u8; AES_BLOCK],
) -> Vec<u8> {
    payload_packet(keys, PT_IPMI, bmc_sid, seq, message, iv)
}

/// A packet of `payload_type` (IPMI or SOL) of an active session:
/// encrypted and authenticated as the suite says.
pub(crate) fn payload_packet(
    keys: &SessionKeys,
    payload_type: u8,
    bmc_sid: u32,
    seq: u32,
    message: &[u8],
    iv: [u8; AES_BLOCK],
) -> Vec<u8> {
    let suite = keys.suite;
    let payload = if suite.encrypts() { keys.encrypt(message, iv) } else { message.to_vec() };
    let mut flags = payload_type & 0x3F;
    if suite.encrypts() {
        flags |= ENCRYPTED;
    }
    if suite.icv_len() > 0 {
        flags |= AUTHENTICATED;
    }
    let mut out = Vec::with_capacity(PAYLOAD_AT + payload.len() + 8 + suite.icv_len());
    out.extend_from_slice(&RMCP_HEADER);
    out.push(FORMAT_RMCP_PLUS);
    out.push(flags);
    out.extend_from_slice(&bmc_sid.to_le_bytes());
    out.extend_from_slice(&seq.to_le_bytes());
    out.extend_from_slice(&(payload.len() as u16).to_le_bytes());
    out.extend_from_slice(&payload);
    if suite.icv_len() > 0 {
        // Integrity pad: AuthType..NextHeader is a multiple of 4 bytes.
        let pad = (4 - (out.len() - 4 + 2) % 4) % 4;
        out.extend(std::iter::repeat_n(0xFF, pad));
        out.push(pad as u8);
        out.push(0x07); // next header
        let code = keys.auth_code(&out[4..]);
        out.extend_from_slice(&code);
    }
    out
}

/// A verified, decrypted IPMI payload of an active session.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Inbound {
    /// [`PT_IPMI`] or [`PT_SOL`].
    pub payload_type: u8,
    pub session_id: u32,
    pub seq: u32,
    pub message: Vec<u8>,
}

/// Checks and opens an IPMI payload packet: framing, AuthCode (before
/// anything else is believed), then decryption. The flags must be what the
/// suite demands: a BMC cannot downgrade a reply to unauthenticated.
pub(crate) fn open_session_packet(keys: &SessionKeys, pkt: &[u8]) -> Result<Inbound, &'static str> {
    let suite = keys.suite;
    if pkt.len() < PAYLOAD_AT || pkt[4] != FORMAT_RMCP_PLUS {
        return Err("not an RMCP+ packet");
    }
    let flags = pkt[5];
    let payload_type = flags & 0x3F;
    if payload_type != PT_IPMI && payload_type != PT_SOL {
        return Err("neither an IPMI nor an SOL payload");
    }
    if (flags & ENCRYPTED != 0) != suite.encrypts() || (flags & AUTHENTICATED != 0) != (suite.icv_len() > 0) {
        return Err("encryption/authentication flags differ from the session's cipher suite");
    }
    let session_id = u32::from_le_bytes([pkt[6], pkt[7], pkt[8], pkt[9]]);
    let seq = u32::from_le_bytes([pkt[10], pkt[11], pkt[12], pkt[13]]);
    let len = usize::from(u16::from_le_bytes([pkt[14], pkt[15]]));
    let end = PAYLOAD_AT.checked_add(len).ok_or("length overflow")?;
    let payload = pkt.get(PAYLOAD_AT..end).ok_or("payload shorter than its length field")?;
    if suite.icv_len() > 0 {
        let icv = suite.icv_len();
        if pkt.len() < end + 2 + icv {
            return Err("no room for the session trailer");
        }
        let (signed, code) = pkt.split_at(pkt.len() - icv);
        if !keys.check_auth_code(&signed[4..], code) {
            return Err("integrity check failed");
        }
        let pad = usize::from(signed[signed.len() - 2]);
        if signed[signed.len() - 1] != 0x07 || end + pad + 2 != signed.len() || pad > 3 {
            return Err("malformed session trailer");
        }
    } else if pkt.len() != end {
        return Err("trailing bytes after the payload");
    }
    let message =
        if suite.encrypts() { keys.decrypt(payload).ok_or("payload does not decrypt")? } else { payload.to_vec() };
    Ok(Inbound { payload_type, session_id, seq, message })
}

fn checksum(bytes: &[u8]) -> u8 {
    bytes.iter().fold(0u8, |a, b| a.wrapping_add(*b)).wrapping_neg()
}

/// An IPMI request message to the BMC (IPMB 0x20, LUN 0) from software id 0x81.
pub(crate) fn ipmi_request(netfn: u8, cmd: u8, rq_seq: u8, data: &[u8]) -> Vec<u8> {
    let mut m = Vec::with_capacity(7 + data.len());
    m.extend_from_slice(&[BMC_ADDR, netfn << 2]);
    m.push(checksum(&m));
    m.extend_from_slice(&[CONSOLE_SWID, (rq_seq & 0x3F) << 2, cmd]);
    m.extend_from_slice(data);
    m.push(checksum(&m[3..]));
    m
}

/// An IPMI response message.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Reply {
    pub netfn: u8,
    pub cmd: u8,
    pub rq_seq: u8,
    pub cc: u8,
    pub data: Vec<u8>,
}

/// Parses an IPMI response message (checksums included).
pub(crate) fn ipmi_reply(m: &[u8]) -> Result<Reply, &'static str> {
    if m.len() < 8 {
        return Err("IPMI message too short");
    }
    if checksum(&m[..2]) != m[2] || checksum(&m[3..m.len() - 1]) != m[m.len() - 1] {
        return Err("IPMI message checksum mismatch");
    }
    if m[0] != CONSOLE_SWID {
        return Err("IPMI response not addressed to this console");
    }
    Ok(Reply { netfn: m[1] >> 2, cmd: m[5], rq_seq: m[4] >> 2, cc: m[6], data: m[7..m.len() - 1].to_vec() })
}

/// An SOL payload (§15.9, table 15-2/15-3): the 4-byte header and the
/// character data. Bytes 0..4 are: packet sequence number (bits 3:0, 0 for
/// an ack-only or status packet), acknowledged/NACKed packet sequence
/// number (0: none), accepted character count, operation (console to BMC)
/// or status (BMC to console).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SolPacket {
    pub seq: u8,
    pub ack_seq: u8,
    pub accepted: u8,
    pub op: u8,
    pub data: Vec<u8>,
}

/// Console → BMC operation bits (table 15-2, byte 4).
pub(crate) const SOL_OP_BREAK: u8 = 0x10;
/// BMC → console status bits (table 15-3, byte 4).
pub(crate) const SOL_ST_NACK: u8 = 0x40;
pub(crate) const SOL_ST_DEACTIVATING: u8 = 0x10;
pub(crate) const SOL_ST_OVERRUN: u8 = 0x08;
pub(crate) const SOL_ST_BREAK: u8 = 0x04;

impl SolPacket {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut m = Vec::with_capacity(4 + self.data.len());
        m.extend_from_slice(&[self.seq & 0x0F, self.ack_seq & 0x0F, self.accepted, self.op]);
        m.extend_from_slice(&self.data);
        m
    }

    /// Parses a BMC's SOL payload; anything shorter than the header, or
    /// with sequence numbers outside 0..=15, is refused.
    pub(crate) fn parse(m: &[u8]) -> Result<SolPacket, &'static str> {
        let Some(h) = m.get(..4) else { return Err("SOL packet shorter than its header") };
        if h[0] > 0x0F || h[1] > 0x0F {
            return Err("SOL sequence number out of range");
        }
        if h[0] == 0 && m.len() > 4 {
            return Err("SOL character data without a packet sequence number");
        }
        Ok(SolPacket { seq: h[0], ack_seq: h[1], accepted: h[2], op: h[3], data: m[4..].to_vec() })
    }
}

/// Open Session Request (§13.17).
pub(crate) fn open_session_request(tag: u8, privilege: u8, console_sid: u32, suite: CipherSuite) -> Vec<u8> {
    let mut p = vec![tag, privilege, 0, 0];
    p.extend_from_slice(&console_sid.to_le_bytes());
    for (kind, alg) in [(0u8, suite.auth_alg()), (1, suite.integrity_alg()), (2, suite.confidentiality_alg())] {
        p.extend_from_slice(&[kind, 0, 0, 8, alg, 0, 0, 0]);
    }
    p
}

/// What an Open Session Response says.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum OpenSession {
    Ok {
        bmc_sid: u32,
        privilege: u8,
        algorithms: Algorithms,
    },
    /// A non-zero RMCP+ status code (§13.24).
    Refused(u8),
}

/// The head every session set-up reply shares (Open Session Response §13.18,
/// RAKP 2 §13.21, RAKP 4 §13.23): the message tag we sent, a status, and
/// from byte 4 our console session id. Returns (from the enclosing
/// function) a malformed or misaddressed reply's error; evaluates to
/// `Err(status)` when the BMC refused, `Ok(p)` for status 0, at least `min`
/// bytes and our session.
macro_rules! setup_reply {
    ($p:expr, $tag:expr, $console_sid:expr, $min:expr, $what:literal) => {{
        let p: &[u8] = $p;
        if p.len() < 2 {
            return Err(concat!($what, " too short"));
        }
        if p[0] != $tag {
            return Err(concat!($what, " with another message tag"));
        }
        if p[1] != 0 {
            Err(p[1])
        } else if p.len() < $min {
            return Err(concat!($what, " too short"));
        } else if u32::from_le_bytes([p[4], p[5], p[6], p[7]]) != $console_sid {
            return Err(concat!($what, " for another session"));
        } else {
            Ok(p)
        }
    }};
}

/// The Open Session Response's answer (status 0): the BMC's session id,
/// the privilege it grants, and the algorithms it chose. Which of our
/// suites those form, if any, and whether the machine allows it, is the
/// session's decision ([`CipherSuite::from_algorithms`]): a BMC may answer a
/// proposal with other algorithms (pyghmi, VirtualBMC: suite 3 to any).
pub(crate) fn open_session_response(p: &[u8], tag: u8, console_sid: u32) -> Result<OpenSession, &'static str> {
    let p = match setup_reply!(p, tag, console_sid, 36, "Open Session Response") {
        Ok(p) => p,
        Err(status) => return Ok(OpenSession::Refused(status)),
    };
    let bmc_sid = u32::from_le_bytes([p[8], p[9], p[10], p[11]]);
    if bmc_sid == 0 {
        return Err("the BMC assigned session id 0");
    }
    if [p[12], p[20], p[28]] != [0, 1, 2] {
        return Err("the BMC's algorithm payloads are not authentication, integrity, confidentiality");
    }
    let algorithms = Algorithms { auth: p[16] & 0x3F, integrity: p[24] & 0x3F, confidentiality: p[32] & 0x3F };
    Ok(OpenSession::Ok { bmc_sid, privilege: p[2] & 0x0F, algorithms })
}

/// The algorithms of an Open Session Response (§13.28 numbers).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Algorithms {
    pub auth: u8,
    pub integrity: u8,
    pub confidentiality: u8,
}

impl std::fmt::Display for Algorithms {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "authentication {}, integrity {}, confidentiality {}",
            self.auth, self.integrity, self.confidentiality
        )
    }
}

/// RAKP Message 1 (§13.20).
pub(crate) fn rakp1(tag: u8, bmc_sid: u32, console_random: &[u8; 16], role: u8, user: &[u8]) -> Vec<u8> {
    let mut p = vec![tag, 0, 0, 0];
    p.extend_from_slice(&bmc_sid.to_le_bytes());
    p.extend_from_slice(console_random);
    p.extend_from_slice(&[role, 0, 0, user.len() as u8]);
    p.extend_from_slice(user);
    p
}

/// What RAKP Message 2 says.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Rakp2 {
    Ok { bmc_random: [u8; 16], bmc_guid: [u8; 16], auth_code: Vec<u8> },
    Refused(u8),
}

pub(crate) fn rakp2(p: &[u8], tag: u8, console_sid: u32) -> Result<Rakp2, &'static str> {
    let p = match setup_reply!(p, tag, console_sid, 40, "RAKP 2") {
        Ok(p) => p,
        Err(status) => return Ok(Rakp2::Refused(status)),
    };
    let mut bmc_random = [0u8; 16];
    bmc_random.copy_from_slice(&p[8..24]);
    let mut bmc_guid = [0u8; 16];
    bmc_guid.copy_from_slice(&p[24..40]);
    Ok(Rakp2::Ok { bmc_random, bmc_guid, auth_code: p[40..].to_vec() })
}

/// RAKP Message 3 (§13.22), status 0.
pub(crate) fn rakp3(tag: u8, bmc_sid: u32, auth_code: &[u8]) -> Vec<u8> {
    let mut p = vec![tag, 0, 0, 0];
    p.extend_from_slice(&bmc_sid.to_le_bytes());
    p.extend_from_slice(auth_code);
    p
}

/// What RAKP Message 4 says: the integrity check value, or a status.
pub(crate) fn rakp4(p: &[u8], tag: u8, console_sid: u32) -> Result<Result<Vec<u8>, u8>, &'static str> {
    Ok(setup_reply!(p, tag, console_sid, 8, "RAKP 4").map(|p| p[8..].to_vec()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(suite: CipherSuite) -> SessionKeys {
        SessionKeys::derive(suite, &[0x5A; 20])
    }

    #[test]
    fn session_packets_round_trip_for_every_suite() {
        for suite in CipherSuite::ALL {
            let k = keys(suite);
            for n in [0usize, 1, 7, 8, 15, 16, 40] {
                let msg: Vec<u8> = (0..n as u8).collect();
                let pkt = session_packet(&k, 0x0102_0304, 9, &msg, [3; 16]);
                assert_eq!(route(&pkt), Route::Session(Some(0x0102_0304)));
                if suite.icv_len() > 0 {
                    assert_eq!((pkt.len() - 4 - suite.icv_len()) % 4, 0, "{suite} {n}");
                }
                let got = open_session_packet(&k, &pkt).unwrap();
                assert_eq!(
                    got,
                    Inbound { payload_type: PT_IPMI, session_id: 0x0102_0304, seq: 9, message: msg.clone() }
                );
                let sol = payload_packet(&k, PT_SOL, 7, 10, &msg, [4; 16]);
                let got = open_session_packet(&k, &sol).unwrap();
                assert_eq!(got, Inbound { payload_type: PT_SOL, session_id: 7, seq: 10, message: msg.clone() });
            }
        }
    }

    #[test]
    fn tampered_or_downgraded_packets_are_refused() {
        let k = keys(CipherSuite::S17);
        let pkt = session_packet(&k, 1, 2, b"hello", [0; 16]);
        for i in 4..pkt.len() {
            let mut bad = pkt.clone();
            bad[i] ^= 0x01;
            assert!(open_session_packet(&k, &bad).is_err(), "byte {i}");
        }
        // The same message without integrity/encryption (a downgrade).
        let plain = session_packet(&keys(CipherSuite::S1), 1, 2, b"hello", [0; 16]);
        assert!(open_session_packet(&k, &plain).is_err());
        // A packet signed with other keys.
        let other = SessionKeys::derive(CipherSuite::S17, &[0x5B; 20]);
        assert_eq!(
            open_session_packet(&k, &session_packet(&other, 1, 2, b"x", [0; 16])),
            Err("integrity check failed")
        );
        for n in 0..pkt.len() {
            assert!(open_session_packet(&k, &pkt[..n]).is_err());
        }
    }

    #[test]
    fn ipmi_messages_encode_and_parse() {
        let rq = ipmi_request(0x06, 0x01, 5, &[]);
        assert_eq!(rq, vec![0x20, 0x18, 0xC8, 0x81, 0x14, 0x01, 0x6A]);
        let mut reply = vec![0x81, 0x1C];
        reply.push(checksum(&reply));
        reply.extend_from_slice(&[0x20, 5 << 2, 0x01, 0x00, 0xAA]);
        reply.push(checksum(&reply[3..]));
        assert_eq!(ipmi_reply(&reply).unwrap(), Reply { netfn: 0x07, cmd: 0x01, rq_seq: 5, cc: 0, data: vec![0xAA] });
        let mut bad = reply.clone();
        bad[7] ^= 1;
        assert!(ipmi_reply(&bad).is_err());
        assert!(ipmi_reply(&reply[..5]).is_err());
    }

    #[test]
    fn sol_packets_encode_and_parse() {
        let p = SolPacket { seq: 15, ack_seq: 3, accepted: 2, op: SOL_OP_BREAK, data: b"ab".to_vec() };
        assert_eq!(p.encode(), vec![15, 3, 2, 0x10, b'a', b'b']);
        assert_eq!(SolPacket::parse(&p.encode()), Ok(p));
        assert!(SolPacket::parse(&[1, 0, 0]).is_err());
        assert!(SolPacket::parse(&[16, 0, 0, 0]).is_err());
        assert!(SolPacket::parse(&[1, 16, 0, 0]).is_err());
        assert!(SolPacket::parse(&[0, 1, 0, 0, b'x']).is_err(), "data needs a sequence number");
        assert_eq!(SolPacket::parse(&[0, 1, 4, 0]).unwrap().accepted, 4);
    }

    #[test]
    fn handshake_payloads() {
        let p = open_session_request(7, 4, 0xA0B0C0D0, CipherSuite::S17);
        assert_eq!(p.len(), 32);
        assert_eq!(&p[8..16], &[0, 0, 0, 8, 3, 0, 0, 0]);
        assert_eq!(&p[16..24], &[1, 0, 0, 8, 4, 0, 0, 0]);
        assert_eq!(&p[24..32], &[2, 0, 0, 8, 1, 0, 0, 0]);
        let mut resp = vec![7, 0, 4, 0];
        resp.extend_from_slice(&0xA0B0C0D0u32.to_le_bytes());
        resp.extend_from_slice(&0x11u32.to_le_bytes());
        resp.extend_from_slice(&p[8..32]);
        let s17 = Algorithms { auth: 3, integrity: 4, confidentiality: 1 };
        assert_eq!(
            open_session_response(&resp, 7, 0xA0B0C0D0),
            Ok(OpenSession::Ok { bmc_sid: 0x11, privilege: 4, algorithms: s17 })
        );
        assert_eq!(CipherSuite::from_algorithms(s17), Some(CipherSuite::S17));
        let mut swapped = resp.clone();
        swapped.swap(12, 20);
        assert!(open_session_response(&swapped, 7, 0xA0B0C0D0).is_err(), "payload types out of order");
        assert!(open_session_response(&resp, 7, 0xA0B0C0D1).is_err(), "another console session");
        assert_eq!(open_session_response(&[7, 0x11], 7, 1), Ok(OpenSession::Refused(0x11)));
        let pkt = presession(PT_OPEN_SESSION_RESPONSE, &resp);
        assert_eq!(route(&pkt), Route::Session(Some(0xA0B0C0D0)));
        assert_eq!(route(&presession(PT_OPEN_SESSION_RESPONSE, &[7, 0x11])), Route::Session(None));
        assert_eq!(presession_payload(&pkt, PT_OPEN_SESSION_RESPONSE), Some(&resp[..]));
        assert_eq!(route(&[0x06, 0, 0xFF, 0x07, 0x00, 0, 0]), Route::Sessionless);
        assert_eq!(route(&[0x06, 0, 0xFF, 0x06, 0x00]), Route::Other);
        assert_eq!(rakp4(&[1, 0x0F], 1, 2), Ok(Err(0x0F)));
    }
}
