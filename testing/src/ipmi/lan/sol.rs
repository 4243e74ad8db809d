//! Serial over LAN in the wire-level responder (IPMI v2.0 §15.9, §24.1,
//! §24.2): Activate/Deactivate Payload (type 1, instance 1, one session at
//! a time: 0x80 when another holds it), console packets acknowledged with
//! their accepted character count (a repeated sequence number is a
//! retransmission: acked again, not delivered twice), break, and the host's
//! output sent to the console in numbered packets, one in flight until
//! acked. For what `ipmi_sim` cannot be made to do, faults
//! ([`SolFaults`]): ignore console packets (no ack: the console must
//! retransmit), NACK them, accept only part, send output packets twice (a
//! BMC retransmitting after a lost ack), flood (send every output packet
//! without waiting for acks), and a BMC-initiated "SOL deactivating".
//!
//! Not modelled: the BMC's own retransmission timer (output waits for the
//! console's ack), CTS/DCD/ring, character accumulation intervals, SOL
//! configuration parameters beyond what `SpecState` answers.

use super::crypto::{self, AES_BLOCK};
use super::server::{Bmc, Core};
use super::wire::{self, Protection};
use std::collections::VecDeque;

/// SOL payload type.
pub(crate) const PAYLOAD_SOL: u8 = 0x01;
const SOL_INSTANCE: u8 = 1;
/// Inbound payload size the BMC announces (96 characters a packet).
const INBOUND_SIZE: u16 = 100;
/// Characters per output packet.
const OUTPUT_CHUNK: usize = 64;
const ST_NACK: u8 = 0x40;
const ST_DEACTIVATING: u8 = 0x10;
const OP_BREAK: u8 = 0x10;

/// SOL fault knobs (see the module docs).
#[derive(Clone, Debug, Default)]
pub struct SolFaults {
    /// The next N console packets with characters are neither executed nor acked.
    pub ignore_console_packets: u32,
    /// The next N console packets are NACKed.
    pub nack_console_packets: u32,
    /// Accept at most this many characters of each console packet.
    pub accept_at_most: Option<u8>,
    /// The next N output packets are sent twice (as a BMC retransmits
    /// after a lost ack: same SOL sequence number, new session sequence number).
    pub duplicate_output: u32,
    /// Send all queued output at once, without waiting for acks.
    pub flood: bool,
}

/// One BMC's SOL state.
#[derive(Debug, Default)]
pub(crate) struct SolState {
    /// The session (SIDc) holding the payload.
    pub active: Option<u32>,
    /// What consoles typed, as the host's serial port got it.
    pub host_received: Vec<u8>,
    pub breaks: u32,
    /// Console packets seen again (same sequence number as the last).
    pub console_retransmits: u32,
    pub activations: u32,
    pub faults: SolFaults,
    last_console: Option<(u8, u8)>,
    outbound: VecDeque<u8>,
    inflight: Option<(u8, Vec<u8>)>,
    /// When the packet in flight was last sent, and how often it was resent.
    inflight_sent: Option<(std::time::Instant, u32)>,
    bmc_seq: u8,
}

/// A BMC resends an output packet not acknowledged within this long (the
/// SOL retry interval, IPMI 2.0 table 26-5, parameter 4)...
pub(crate) const SOL_RETRY_INTERVAL: std::time::Duration = std::time::Duration::from_millis(500);
/// ...at most this many times, then drops it (a console that went away).
const SOL_RETRIES: u32 = 7;

impl SolState {
    /// Host output queued and not yet sent.
    pub(crate) fn backlog(&self) -> usize {
        self.outbound.len()
    }
}

/// Seals `msg` as a packet of `payload_type` on session `sidc`; with its peer.
pub(crate) fn seal(
    core: &mut Core,
    sidc: u32,
    payload_type: u8,
    msg: &[u8],
) -> Option<(Vec<u8>, std::net::SocketAddr)> {
    let session = core.sessions.get_mut(sidc)?;
    let (suite, sidm, peer) = (session.suite, session.sidm, session.peer);
    let active = session.active_mut()?;
    let authenticated = suite.integrity != 0;
    let seq = active.next_outbound(authenticated);
    let payload = if suite.confidentiality != 0 {
        let mut iv = [0u8; AES_BLOCK];
        crypto::random(&mut iv);
        active.keys.encrypt(iv, msg)
    } else {
        msg.to_vec()
    };
    let protection =
        Protection { keys: &active.keys, integrity: suite.integrity, encrypted: suite.confidentiality != 0 };
    Some((wire::rmcpp(payload_type, sidm, seq, &payload, Some(protection)), peer))
}

impl Bmc {
    fn send_now(&self, bytes: &[u8], peer: std::net::SocketAddr) {
        if let Some(socket) = self.socket.get() {
            // Lost like on a network when the socket buffer is full.
            let _ = socket.try_send_to(bytes, peer);
        }
    }

    /// Activate Payload (app 0x48).
    pub(crate) fn sol_activate(&self, core: &mut Core, sidc: u32, d: &[u8]) -> (u8, Vec<u8>) {
        if d.len() < 6 {
            return (0xC7, vec![]);
        }
        if d[0] != PAYLOAD_SOL || d[1] != SOL_INSTANCE {
            return (0xCC, vec![]);
        }
        let mut sol = self.sol();
        if sol.active.is_some_and(|other| core.sessions.get(other).is_some()) {
            return (0x80, vec![]);
        }
        *sol = SolState {
            active: Some(sidc),
            host_received: std::mem::take(&mut sol.host_received),
            breaks: sol.breaks,
            console_retransmits: sol.console_retransmits,
            activations: sol.activations + 1,
            faults: sol.faults.clone(),
            outbound: std::mem::take(&mut sol.outbound),
            ..SolState::default()
        };
        let mut data = vec![0, 0, 0, 0];
        data.extend_from_slice(&INBOUND_SIZE.to_le_bytes());
        data.extend_from_slice(&(OUTPUT_CHUNK as u16 + 4).to_le_bytes());
        data.extend_from_slice(&self.addr.port().to_le_bytes());
        data.extend_from_slice(&0xFFFFu16.to_le_bytes());
        (0, data)
    }

    /// Deactivate Payload (app 0x49): any session may deactivate the
    /// instance (an operator's take-over); the holder is told.
    pub(crate) fn sol_deactivate_payload(&self, core: &mut Core, d: &[u8]) -> (u8, Vec<u8>) {
        if d.len() < 6 {
            return (0xC7, vec![]);
        }
        if d[0] != PAYLOAD_SOL || d[1] != SOL_INSTANCE {
            return (0xCC, vec![]);
        }
        let holder = self.sol().active.take();
        match holder {
            None => (0x80, vec![]),
            Some(holder) => {
                if let Some((bytes, peer)) = seal(core, holder, PAYLOAD_SOL, &[0, 0, 0, ST_DEACTIVATING]) {
                    self.send_now(&bytes, peer);
                }
                (0, vec![])
            }
        }
    }

    /// BMC-initiated deactivation: the holder gets "SOL deactivating".
    pub(crate) fn sol_deactivate_now(&self) {
        let mut core = self.core();
        let _ = self.sol_deactivate_payload(&mut core, &[PAYLOAD_SOL, SOL_INSTANCE, 0, 0, 0, 0]);
    }

    /// A console's SOL packet on session `sidc`: the reply's SOL payload, if any.
    pub(crate) fn sol_inbound(&self, core: &mut Core, sidc: u32, m: &[u8]) -> Option<Vec<u8>> {
        let reply = {
            let mut sol = self.sol();
            if sol.active != Some(sidc) || m.len() < 4 || m[0] > 15 || m[1] > 15 {
                return None;
            }
            let (seq, ack_seq, accepted, op) = (m[0], m[1], m[2], m[3]);
            let data = &m[4..];
            // The console's ack of our output packet.
            if ack_seq != 0 {
                if let Some((s, sent)) = sol.inflight.take() {
                    if s == ack_seq {
                        let taken = usize::from(accepted).min(sent.len());
                        for &b in sent[taken..].iter().rev() {
                            sol.outbound.push_front(b);
                        }
                    } else {
                        sol.inflight = Some((s, sent));
                    }
                }
            }
            if seq == 0 {
                None
            } else if sol.faults.ignore_console_packets > 0 && !data.is_empty() {
                sol.faults.ignore_console_packets -= 1;
                return None;
            } else if sol.faults.nack_console_packets > 0 && !data.is_empty() {
                sol.faults.nack_console_packets -= 1;
                Some(vec![0, seq, 0, ST_NACK])
            } else if let Some((last, count)) = sol.last_console.filter(|(last, _)| *last == seq) {
                sol.console_retransmits += 1;
                Some(vec![0, last, count, 0])
            } else {
                let take = data.len().min(usize::from(sol.faults.accept_at_most.unwrap_or(u8::MAX)));
                sol.host_received.extend_from_slice(&data[..take]);
                if op & OP_BREAK != 0 {
                    sol.breaks += 1;
                }
                sol.last_console = Some((seq, take as u8));
                Some(vec![0, seq, take as u8, 0])
            }
        };
        self.sol_pump(core);
        reply
    }

    /// Sends queued output: one packet in flight, or everything when flooding.
    pub(crate) fn sol_pump(&self, core: &mut Core) {
        let mut sends = Vec::new();
        {
            let mut sol = self.sol();
            let Some(sidc) = sol.active else { return };
            while !sol.outbound.is_empty() && (sol.inflight.is_none() || sol.faults.flood) {
                let n = sol.outbound.len().min(OUTPUT_CHUNK);
                let data: Vec<u8> = sol.outbound.drain(..n).collect();
                sol.bmc_seq = sol.bmc_seq % 15 + 1;
                let mut msg = vec![sol.bmc_seq, 0, 0, 0];
                msg.extend_from_slice(&data);
                sol.inflight = Some((sol.bmc_seq, data));
                sol.inflight_sent = Some((std::time::Instant::now(), 0));
                let copies = if sol.faults.duplicate_output > 0 {
                    sol.faults.duplicate_output -= 1;
                    2
                } else {
                    1
                };
                // A retransmission is a new RMCP+ packet (its own session
                // sequence number) with the same SOL sequence number.
                for _ in 0..copies {
                    sends.extend(seal(core, sidc, PAYLOAD_SOL, &msg));
                }
            }
        }
        for (bytes, peer) in sends {
            self.send_now(&bytes, peer);
        }
    }

    /// How long until the packet in flight is resent (`None`: nothing in
    /// flight, or flooding: a flood never waits for acks).
    pub(crate) fn sol_retry_in(&self) -> Option<std::time::Duration> {
        let sol = self.sol();
        if sol.faults.flood || sol.inflight.is_none() {
            return None;
        }
        let (sent, _) = sol.inflight_sent?;
        Some((sent + SOL_RETRY_INTERVAL).saturating_duration_since(std::time::Instant::now()))
    }

    /// Resends the packet in flight when its ack is overdue, as a BMC does
    /// (same SOL sequence number, a new RMCP+ packet); after
    /// [`SOL_RETRIES`] it is dropped and the next output goes.
    pub(crate) fn sol_retry(&self) {
        let mut core = self.core();
        let mut sends = Vec::new();
        {
            let mut sol = self.sol();
            let (Some(sidc), Some((seq, data)), Some((sent, tries))) =
                (sol.active, sol.inflight.clone(), sol.inflight_sent)
            else {
                return;
            };
            if sol.faults.flood || sent.elapsed() < SOL_RETRY_INTERVAL {
                return;
            }
            if tries >= SOL_RETRIES {
                sol.inflight = None;
                sol.inflight_sent = None;
            } else {
                sol.inflight_sent = Some((std::time::Instant::now(), tries + 1));
                let mut msg = vec![seq, 0, 0, 0];
                msg.extend_from_slice(&data);
                sends.extend(seal(&mut core, sidc, PAYLOAD_SOL, &msg));
            }
        }
        for (bytes, peer) in sends {
            self.send_now(&bytes, peer);
        }
        self.sol_pump(&mut core);
    }

    /// The host writes to its serial port.
    pub(crate) fn sol_write(&self, bytes: &[u8]) {
        let mut core = self.core();
        self.sol().outbound.extend(bytes);
        self.sol_pump(&mut core);
    }
}
