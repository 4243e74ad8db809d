//! Datagram layouts (IPMI v2.0 chapter 13): RMCP, ASF presence ping/pong,
//! the IPMI 1.5 session header (auth type none only), the IPMI 2.0/RMCP+
//! session header and trailer, and the IPMI LAN message with its two
//! checksums.
//!
//! Parsing never panics on short or inconsistent input: anything that does
//! not parse is `None`, and the server drops it silently (a BMC never
//! answers garbage).

use super::crypto::SessionKeys;

pub const RMCP_VERSION: u8 = 0x06;
pub const CLASS_ASF: u8 = 0x06;
pub const CLASS_IPMI: u8 = 0x07;
/// ASF's IANA enterprise number, 4542, most significant byte first.
pub const ASF_IANA: [u8; 4] = [0x00, 0x00, 0x11, 0xBE];
const ASF_PING: u8 = 0x80;
const ASF_PONG: u8 = 0x40;

pub const AUTH_TYPE_NONE: u8 = 0x00;
pub const AUTH_TYPE_RMCPP: u8 = 0x06;

/// RMCP+ payload types.
pub const PAYLOAD_IPMI: u8 = 0x00;
pub const PAYLOAD_OPEN_SESSION_REQUEST: u8 = 0x10;
pub const PAYLOAD_OPEN_SESSION_RESPONSE: u8 = 0x11;
pub const PAYLOAD_RAKP1: u8 = 0x12;
pub const PAYLOAD_RAKP2: u8 = 0x13;
pub const PAYLOAD_RAKP3: u8 = 0x14;
pub const PAYLOAD_RAKP4: u8 = 0x15;

/// The "next header" byte of the session trailer.
const NEXT_HEADER: u8 = 0x07;
/// The BMC's slave address (responder of every request).
pub const BMC_ADDR: u8 = 0x20;

/// A datagram the server understands.
#[derive(Debug, PartialEq, Eq)]
pub enum Datagram<'a> {
    /// ASF Presence Ping.
    AsfPing { rmcp_seq: u8, tag: u8 },
    /// IPMI 1.5 framing with authentication type none (session-less).
    Ipmi15 { session_seq: u32, session_id: u32, message: &'a [u8] },
    /// IPMI 2.0 / RMCP+ framing.
    Rmcpp(Rmcpp<'a>),
}

/// An RMCP+ packet as received; the trailer is checked later, once the
/// session (and so the integrity algorithm) is known.
#[derive(Debug, PartialEq, Eq)]
pub struct Rmcpp<'a> {
    pub encrypted: bool,
    pub authenticated: bool,
    pub payload_type: u8,
    pub session_id: u32,
    pub seq: u32,
    pub payload: &'a [u8],
    /// From the auth type byte to the end of the datagram.
    session_part: &'a [u8],
    /// Offset of the first byte after the payload within `session_part`.
    payload_end: usize,
}

impl<'a> Rmcpp<'a> {
    /// Whether nothing follows the payload (an unauthenticated packet).
    pub fn has_no_trailer(&self) -> bool {
        self.payload_end == self.session_part.len()
    }

    /// Checks the session trailer of an authenticated packet: integrity pad
    /// of 0xFF bytes making the covered range a multiple of 4, pad length,
    /// next header 07h, and an `icv_len`-byte integrity check value. Returns
    /// the covered bytes (auth type through next header) and the ICV.
    pub fn trailer(&self, icv_len: usize) -> Option<(&'a [u8], &'a [u8])> {
        let rest = &self.session_part[self.payload_end..];
        if icv_len == 0 || rest.len() < 2 + icv_len {
            return None;
        }
        let pad = rest.len() - 2 - icv_len;
        if pad > 3 || rest[..pad].iter().any(|b| *b != 0xFF) || usize::from(rest[pad]) != pad {
            return None;
        }
        if rest[pad + 1] != NEXT_HEADER {
            return None;
        }
        let covered_len = self.payload_end + pad + 2;
        if !covered_len.is_multiple_of(4) {
            return None;
        }
        Some((&self.session_part[..covered_len], &self.session_part[covered_len..]))
    }
}

fn u32_le(b: &[u8]) -> u32 {
    u32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

/// Classifies a datagram; `None` for anything else (RMCP ACKs, other
/// classes, IPMI 1.5 sessions with authentication, OEM payloads).
pub fn parse(pkt: &[u8]) -> Option<Datagram<'_>> {
    if pkt.len() < 4 || pkt[0] != RMCP_VERSION || pkt[3] & 0x80 != 0 {
        return None;
    }
    match pkt[3] & 0x1F {
        CLASS_ASF => {
            // IANA (4), message type, tag, reserved, data length.
            let asf = pkt.get(4..12)?;
            (asf[..4] == ASF_IANA && asf[4] == ASF_PING).then_some(Datagram::AsfPing { rmcp_seq: pkt[2], tag: asf[5] })
        }
        CLASS_IPMI => match *pkt.get(4)? {
            AUTH_TYPE_NONE => {
                let h = pkt.get(4..14)?;
                let len = usize::from(h[9]);
                let message = pkt.get(14..14 + len)?;
                Some(Datagram::Ipmi15 { session_seq: u32_le(&h[1..5]), session_id: u32_le(&h[5..9]), message })
            }
            AUTH_TYPE_RMCPP => {
                let s = &pkt[4..];
                let h = s.get(..12)?;
                let payload_type = h[1] & 0x3F;
                if payload_type == 0x02 {
                    return None; // OEM explicit payloads: not implemented.
                }
                let len = usize::from(u16::from_le_bytes([h[10], h[11]]));
                let payload = s.get(12..12 + len)?;
                Some(Datagram::Rmcpp(Rmcpp {
                    encrypted: h[1] & 0x80 != 0,
                    authenticated: h[1] & 0x40 != 0,
                    payload_type,
                    session_id: u32_le(&h[2..6]),
                    seq: u32_le(&h[6..10]),
                    payload,
                    session_part: s,
                    payload_end: 12 + len,
                }))
            }
            _ => None,
        },
        _ => None,
    }
}

/// ASF Presence Pong: IPMI supported, ASF version 1.0, no interactions.
pub fn asf_pong(rmcp_seq: u8, tag: u8) -> Vec<u8> {
    let mut out = vec![RMCP_VERSION, 0x00, rmcp_seq, CLASS_ASF];
    out.extend_from_slice(&ASF_IANA);
    out.extend_from_slice(&[ASF_PONG, tag, 0x00, 0x10]);
    out.extend_from_slice(&ASF_IANA);
    out.extend_from_slice(&[0, 0, 0, 0]); // OEM-defined
    out.push(0x81); // supported entities: IPMI, ASF 1.0
    out.push(0x00); // supported interactions
    out.extend_from_slice(&[0; 6]);
    out
}

/// An IPMI 1.5 session-less datagram (auth type none, sequence and session
/// id 0) carrying `message`.
pub fn ipmi15(message: &[u8]) -> Vec<u8> {
    let mut out = vec![RMCP_VERSION, 0x00, 0xFF, CLASS_IPMI, AUTH_TYPE_NONE];
    out.extend_from_slice(&[0; 8]);
    out.push(message.len() as u8);
    out.extend_from_slice(message);
    out
}

/// How an outbound RMCP+ packet is protected.
pub struct Protection<'a> {
    pub keys: &'a SessionKeys,
    /// Integrity algorithm (0: none, no trailer).
    pub integrity: u8,
    /// Whether `payload` is already the AES-CBC-128 field.
    pub encrypted: bool,
}

/// An RMCP+ datagram. `payload` is sent as given (already encrypted when
/// `protection.encrypted`); with an integrity algorithm the trailer (pad,
/// pad length, next header, ICV) is appended.
pub fn rmcpp(
    payload_type: u8,
    session_id: u32,
    seq: u32,
    payload: &[u8],
    protection: Option<Protection<'_>>,
) -> Vec<u8> {
    let mut flags = payload_type;
    let integrity = protection.as_ref().map_or(0, |p| p.integrity);
    if protection.as_ref().is_some_and(|p| p.encrypted) {
        flags |= 0x80;
    }
    if integrity != 0 {
        flags |= 0x40;
    }
    let mut out = vec![RMCP_VERSION, 0x00, 0xFF, CLASS_IPMI, AUTH_TYPE_RMCPP, flags];
    out.extend_from_slice(&session_id.to_le_bytes());
    out.extend_from_slice(&seq.to_le_bytes());
    out.extend_from_slice(&(payload.len() as u16).to_le_bytes());
    out.extend_from_slice(payload);
    if let Some(p) = protection.filter(|p| p.integrity != 0) {
        // Covered range: auth type (offset 4) through next header.
        let pad = (4 - (out.len() - 4 + 2) % 4) % 4;
        out.extend(std::iter::repeat_n(0xFF, pad));
        out.push(pad as u8);
        out.push(NEXT_HEADER);
        let icv = p.keys.icv(p.integrity, &out[4..]);
        out.extend_from_slice(icv.as_slice());
    }
    out
}

/// IPMI two's-complement checksum.
pub fn checksum(bytes: &[u8]) -> u8 {
    bytes.iter().fold(0u8, |a, b| a.wrapping_add(*b)).wrapping_neg()
}

/// An IPMI LAN request message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request<'a> {
    pub rs_addr: u8,
    pub netfn: u8,
    pub rs_lun: u8,
    pub rq_addr: u8,
    pub rq_seq: u8,
    pub rq_lun: u8,
    pub cmd: u8,
    pub data: &'a [u8],
}

/// Parses a request; `None` when short, a checksum is wrong or the netfn
/// is a response netfn.
pub fn parse_request(msg: &[u8]) -> Option<Request<'_>> {
    if msg.len() < 7 || checksum(&msg[..2]) != msg[2] || checksum(&msg[3..msg.len() - 1]) != msg[msg.len() - 1] {
        return None;
    }
    let netfn = msg[1] >> 2;
    if netfn & 1 != 0 {
        return None;
    }
    Some(Request {
        rs_addr: msg[0],
        netfn,
        rs_lun: msg[1] & 0x03,
        rq_addr: msg[3],
        rq_seq: msg[4] >> 2,
        rq_lun: msg[4] & 0x03,
        cmd: msg[5],
        data: &msg[6..msg.len() - 1],
    })
}

/// The response to `rq`: addresses swapped, netfn + 1, the request's rqSeq,
/// LUNs and command mirrored, then the completion code and data.
pub fn encode_response(rq: &Request<'_>, cc: u8, data: &[u8]) -> Vec<u8> {
    let mut msg = vec![rq.rq_addr, ((rq.netfn | 1) << 2) | rq.rq_lun];
    msg.push(checksum(&msg));
    msg.extend_from_slice(&[rq.rs_addr, (rq.rq_seq << 2) | rq.rs_lun, rq.cmd, cc]);
    msg.extend_from_slice(data);
    let sum = checksum(&msg[3..]);
    msg.push(sum);
    msg
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ipmi::lan::crypto::{hmac, SessionKeys, AUTH_HMAC_SHA1, INTEGRITY_HMAC_SHA1_96};

    fn request(netfn: u8, cmd: u8, data: &[u8]) -> Vec<u8> {
        let mut msg = vec![BMC_ADDR, netfn << 2];
        msg.push(checksum(&msg));
        msg.extend_from_slice(&[0x81, 5 << 2, cmd]);
        msg.extend_from_slice(data);
        let c = checksum(&msg[3..]);
        msg.push(c);
        msg
    }

    #[test]
    fn request_and_response_mirror_sequence_and_command() {
        let raw = request(0x06, 0x01, &[]);
        let rq = parse_request(&raw).unwrap();
        assert_eq!((rq.netfn, rq.cmd, rq.rq_seq, rq.rq_addr), (0x06, 0x01, 5, 0x81));
        let rs = encode_response(&rq, 0x00, &[1, 2]);
        assert_eq!(rs[0], 0x81);
        assert_eq!(rs[1] >> 2, 0x07);
        assert_eq!(rs[3], BMC_ADDR);
        assert_eq!(rs[4] >> 2, 5);
        assert_eq!(&rs[5..9], &[0x01, 0x00, 1, 2]);
        assert_eq!(checksum(&rs[..2]), rs[2]);
        assert_eq!(checksum(&rs[3..rs.len() - 1]), rs[rs.len() - 1]);
        let mut bad = raw.clone();
        bad[6] ^= 1;
        assert_eq!(parse_request(&bad), None);
    }

    #[test]
    fn ping_pong() {
        let ping = [0x06, 0x00, 0xFF, 0x06, 0x00, 0x00, 0x11, 0xBE, 0x80, 0x2A, 0x00, 0x00];
        assert_eq!(parse(&ping), Some(Datagram::AsfPing { rmcp_seq: 0xFF, tag: 0x2A }));
        let pong = asf_pong(0xFF, 0x2A);
        assert_eq!(pong.len(), 28);
        assert_eq!(&pong[8..12], &[0x40, 0x2A, 0x00, 0x10]);
        assert_eq!(pong[20], 0x81);
    }

    #[test]
    fn authenticated_packet_round_trip_with_pad() {
        let sik = hmac(AUTH_HMAC_SHA1, b"k", &[b"s"]);
        let keys = SessionKeys::derive(AUTH_HMAC_SHA1, &sik);
        for len in 0..8 {
            let payload = vec![0xAB; len];
            let pkt = rmcpp(
                PAYLOAD_IPMI,
                7,
                9,
                &payload,
                Some(Protection { keys: &keys, integrity: INTEGRITY_HMAC_SHA1_96, encrypted: false }),
            );
            let Some(Datagram::Rmcpp(p)) = parse(&pkt) else { panic!("not RMCP+") };
            assert!(p.authenticated && !p.encrypted);
            assert_eq!((p.session_id, p.seq, p.payload), (7, 9, &payload[..]));
            let (covered, icv) = p.trailer(12).expect("trailer");
            assert_eq!(covered.len() % 4, 0);
            assert_eq!(keys.icv(INTEGRITY_HMAC_SHA1_96, covered).as_slice(), icv);
            // A wrong ICV length does not parse as a trailer of that length
            // with a valid pad.
            assert!(p.trailer(16).is_none() || p.trailer(16).unwrap().0.len() != covered.len());
        }
    }

    #[test]
    fn truncated_datagrams_do_not_parse() {
        let pkt = rmcpp(PAYLOAD_OPEN_SESSION_REQUEST, 0, 0, &[0; 32], None);
        for n in 0..pkt.len() {
            if let Some(Datagram::Rmcpp(p)) = parse(&pkt[..n]) {
                panic!("parsed a {n}-byte prefix: {p:?}");
            }
        }
        assert!(matches!(parse(&pkt), Some(Datagram::Rmcpp(p)) if p.has_no_trailer()));
    }
}
