//! Serial over LAN against `bmcfleet_testing::ipmi::LanFleet`, the
//! wire-level spec responder (SOL in `testing/src/ipmi/lan/sol.rs`), for
//! what `ipmi_sim` cannot be made to do: cipher suite 17, lost acks
//! (retransmission), NACKs, partial accepts, duplicated BMC packets, the
//! BMC's "SOL deactivating", take-over between our own sessions, and a
//! flooding BMC against a reader that does not read.

use bmcfleet_ipmi::{
    CipherSuite, RmcpConfig, RmcpSockets, RmcpTransport, SolEnd, SolError, SolEvent, SolOptions, SolSession,
};
use bmcfleet_schema::Secret;
use bmcfleet_testing::ipmi::{LanBmc, LanConfig, LanFleet};
use std::time::Duration;
use tokio::time::Instant;

const WAIT: Duration = Duration::from_secs(20);

/// One test of this file at a time: the flood test accounts for every
/// datagram of a 1,024-packet burst, which holds only while the kernel
/// does not drop datagrams for a starved reader, and the other tests
/// running beside it on two cores made it drop some (3 runs in 12).
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn transport(sockets: &RmcpSockets, bmc: &LanBmc) -> RmcpTransport {
    let config = RmcpConfig { attempt_timeout: Duration::from_millis(300), ..Default::default() };
    RmcpTransport::connect(
        sockets,
        bmc.addr(),
        "admin".into(),
        Secret::new("password"),
        config,
        Instant::now() + WAIT,
        None,
    )
    .await
    .expect("RMCP+ session")
}

fn options() -> SolOptions {
    SolOptions { ack_timeout: Duration::from_millis(100), ..Default::default() }
}

async fn open(sockets: &RmcpSockets, bmc: &LanBmc, options: SolOptions) -> Result<SolSession, SolError> {
    SolSession::open(transport(sockets, bmc).await, options, Instant::now() + WAIT).await
}

/// Polls state another task changes, against a deadline.
async fn eventually(mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + WAIT;
    while Instant::now() < deadline {
        if cond() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    cond()
}

async fn read_output(sol: &mut SolSession, n: usize) -> Vec<u8> {
    let mut out = Vec::new();
    while out.len() < n {
        match tokio::time::timeout(WAIT, sol.recv()).await {
            Ok(Some(SolEvent::Data(d))) => out.extend_from_slice(&d),
            Ok(Some(other)) => panic!("unexpected console event {other:?}"),
            Ok(None) => panic!("console ended: {:?}", sol.end_reason()),
            Err(_) => break,
        }
    }
    out
}

fn pattern(n: usize, salt: u8) -> Vec<u8> {
    (0..n).map(|i| b'!' + ((i * 7 + usize::from(salt)) % 90) as u8).collect()
}

fn fleet() -> LanFleet {
    LanFleet::start(LanConfig::default()).expect("responder")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn suite_17_sol_survives_lost_acks_nacks_partial_accepts_and_duplicates() {
    let _serial = SERIAL.lock().await;
    let fleet = fleet();
    let bmc = fleet.bmc(0);
    let sockets = RmcpSockets::new(1);
    let t = transport(&sockets, bmc).await;
    assert_eq!(t.cipher_suite(), Some(CipherSuite::S17));
    let mut sol = SolSession::open(t, options(), Instant::now() + WAIT).await.expect("SOL activated");
    assert_eq!(sol.max_chars(), 96, "from the activation reply's inbound payload size");
    let mut typed = Vec::new();

    // The BMC ignores two packets: retransmitted, delivered once.
    bmc.sol_faults(|f| f.ignore_console_packets = 2);
    let input = pattern(300, 1);
    sol.send(&input).await.unwrap();
    typed.extend_from_slice(&input);
    assert!(eventually(|| bmc.sol_received() == typed).await, "got {:?}", bmc.sol_received().len());
    assert_eq!(sol.stats().retransmits, 2);

    // NACKs: resent, delivered once.
    bmc.sol_faults(|f| f.nack_console_packets = 3);
    let input = pattern(250, 2);
    sol.send(&input).await.unwrap();
    typed.extend_from_slice(&input);
    assert!(eventually(|| bmc.sol_received() == typed).await);
    assert_eq!(sol.stats().nacks, 3);

    // Partial accepts: the rest goes in the next packets, in order.
    bmc.sol_faults(|f| f.accept_at_most = Some(10));
    let input = pattern(500, 3);
    sol.send(&input).await.unwrap();
    typed.extend_from_slice(&input);
    assert!(eventually(|| bmc.sol_received() == typed).await);
    bmc.sol_faults(|f| f.accept_at_most = None);
    // The BMC has it all; the session counts it once the last ack is in.
    assert!(eventually(|| sol.stats().sent == typed.len() as u64).await, "{:?}", sol.stats());

    // The BMC sends packets twice (as after a lost ack): delivered once.
    bmc.sol_faults(|f| f.duplicate_output = 5);
    let output = pattern(2000, 4);
    bmc.sol_write(&output);
    let read = read_output(&mut sol, output.len()).await;
    assert!(read == output, "{} bytes read for {} written, or out of order", read.len(), output.len());
    assert_eq!(sol.stats().duplicates, 5);
    assert_eq!(sol.stats().received, output.len() as u64);

    sol.send_break().await.unwrap();
    assert_eq!(bmc.sol_counts().0, 1, "one break");
    assert_eq!(sol.close().await, SolEnd::Closed);
    assert!(eventually(|| !bmc.sol_active()).await, "deactivated on close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unanswering_bmc_ends_the_session_after_bounded_retransmits() {
    let _serial = SERIAL.lock().await;
    let fleet = fleet();
    let bmc = fleet.bmc(0);
    let sockets = RmcpSockets::new(1);
    let mut sol = open(&sockets, bmc, SolOptions { retries: 3, ..options() }).await.unwrap();
    bmc.sol_faults(|f| f.ignore_console_packets = 1000);
    sol.send(b"into the void").await.unwrap();
    assert_eq!(tokio::time::timeout(WAIT, sol.recv()).await.expect("the stream ends"), None);
    assert_eq!(sol.end_reason(), Some(SolEnd::Unresponsive));
    assert_eq!(sol.stats().retransmits, 3);
    assert!(matches!(sol.send(b"x").await, Err(SolError::Ended(SolEnd::Unresponsive))));
    bmc.sol_faults(|f| f.ignore_console_packets = 0);

    // A BMC that acks but never accepts a character: bounded like NACKs.
    let mut sol = open(&sockets, bmc, SolOptions { nack_retries: 3, take_over: true, ..options() }).await.unwrap();
    bmc.sol_faults(|f| f.accept_at_most = Some(0));
    sol.send(b"refused").await.unwrap();
    assert_eq!(tokio::time::timeout(WAIT, sol.recv()).await.expect("the stream ends"), None);
    assert_eq!(sol.end_reason(), Some(SolEnd::Unresponsive));
    assert_eq!(sol.stats().nacks, 4, "three resends, then given up");
    assert_eq!(sol.stats().sent, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bmcs_deactivation_ends_the_stream_and_take_over_is_explicit() {
    let _serial = SERIAL.lock().await;
    let fleet = fleet();
    let bmc = fleet.bmc(0);
    let sockets = RmcpSockets::new(1);
    let mut first = open(&sockets, bmc, options()).await.unwrap();
    match open(&sockets, bmc, options()).await {
        Err(SolError::AlreadyActive { .. }) => {}
        Err(e) => panic!("expected AlreadyActive, got {e}"),
        Ok(_) => panic!("a second activation without take-over"),
    }
    assert!(bmc.sol_active());
    // Take-over: the first session is told "SOL deactivating".
    let mut second = open(&sockets, bmc, SolOptions { take_over: true, ..options() }).await.expect("take-over");
    assert_eq!(tokio::time::timeout(WAIT, first.recv()).await.unwrap(), None);
    assert_eq!(first.end_reason(), Some(SolEnd::Deactivated));
    bmc.sol_write(b"to the second");
    assert_eq!(read_output(&mut second, 13).await, b"to the second");
    // The BMC deactivates on its own.
    bmc.sol_deactivate();
    assert_eq!(tokio::time::timeout(WAIT, second.recv()).await.unwrap(), None);
    assert_eq!(second.end_reason(), Some(SolEnd::Deactivated));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flooding_bmc_costs_a_bounded_queue_and_reports_its_loss() {
    let _serial = SERIAL.lock().await;
    let fleet = fleet();
    let bmc = fleet.bmc(0);
    let sockets = RmcpSockets::new(1);
    let queue = 4;
    let mut sol = open(&sockets, bmc, SolOptions { output_queue: queue, ..options() }).await.unwrap();
    bmc.sol_faults(|f| f.flood = true);
    // 1,024 packets of 64 characters sent without waiting for acks; the
    // reader does not read.
    let total = 64 * 1024;
    let dropped_before = sockets.dropped();
    bmc.sol_write(&pattern(total, 5));
    // Every packet is accounted for: received by the session, or dropped
    // at the shared socket's bounded per-session queue.
    assert!(
        eventually(|| sol.stats().received + 64 * (sockets.dropped() - dropped_before) >= total as u64).await,
        "{:?}, {} dropped at the socket",
        sol.stats(),
        sockets.dropped()
    );
    let stats = sol.stats();
    assert!(stats.lost > 0, "{stats:?}");
    // Drain: at most `queue` events were held; the loss is reported in order.
    let mut data = 0u64;
    let mut lost = 0u64;
    let mut events = 0;
    while let Ok(Some(event)) = tokio::time::timeout(Duration::from_millis(200), sol.recv()).await {
        events += 1;
        match event {
            SolEvent::Data(d) => data += d.len() as u64,
            SolEvent::Lost(n) => lost += n,
            other => panic!("{other:?}"),
        }
        if events == queue {
            break;
        }
    }
    assert!(data <= (queue * 64) as u64, "{data} bytes held for a reader that did not read");
    // The loss not yet reported goes before the next data.
    bmc.sol_faults(|f| f.flood = false);
    bmc.sol_write(b"after");
    // What the flood left unacknowledged (its last packet, when the socket
    // dropped it) the BMC resends first, as a BMC does; then "after".
    let mut tail = Vec::new();
    while !tail.ends_with(b"after") {
        match tokio::time::timeout(WAIT, sol.recv()).await.unwrap().unwrap() {
            SolEvent::Lost(n) => lost += n,
            SolEvent::Data(d) => tail.extend_from_slice(&d),
            other => panic!("{other:?}"),
        }
    }
    assert!(tail.ends_with(b"after"));
    assert_eq!(lost, stats.lost, "every dropped byte reported");
    sol.close().await;
}

/// A worker's fence as a switch: open, or closed (the lease is gone).
#[derive(Debug)]
struct SwitchGate(std::sync::atomic::AtomicBool);

#[async_trait::async_trait]
impl bmcfleet_provider::SendGate for SwitchGate {
    async fn admit(&self, _for_action: bool) -> bmcfleet_provider::Result<()> {
        if self.holds() {
            Ok(())
        } else {
            Err(bmcfleet_provider::ProviderError::new(bmcfleet_schema::ErrorCode::Interrupted, "fenced").not_sent())
        }
    }

    fn holds(&self) -> bool {
        self.0.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn for_session(self: std::sync::Arc<Self>) -> std::sync::Arc<dyn bmcfleet_provider::SendGate> {
        self
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_session_sends_nothing_more_and_ends() {
    let _serial = SERIAL.lock().await;
    let fleet = fleet();
    let bmc = fleet.bmc(0);
    let sockets = RmcpSockets::new(1);
    let gate = std::sync::Arc::new(SwitchGate(true.into()));
    let config = RmcpConfig { attempt_timeout: Duration::from_millis(300), ..Default::default() };
    let t = RmcpTransport::connect(
        &sockets,
        bmc.addr(),
        "admin".into(),
        Secret::new("password"),
        config,
        Instant::now() + WAIT,
        Some(gate.clone()),
    )
    .await
    .unwrap();
    let mut sol = SolSession::open(t, options(), Instant::now() + WAIT).await.unwrap();
    sol.send(b"before").await.unwrap();
    assert!(eventually(|| bmc.sol_received() == b"before").await);
    let requests = bmc.stats().requests.values().sum::<u64>();
    gate.0.store(false, std::sync::atomic::Ordering::SeqCst);
    sol.send(b"after").await.unwrap();
    assert_eq!(tokio::time::timeout(WAIT, sol.recv()).await.unwrap(), None);
    assert_eq!(sol.end_reason(), Some(SolEnd::Fenced));
    assert_eq!(bmc.sol_received(), b"before", "nothing typed after the fence");
    assert!(bmc.sol_active(), "no Deactivate Payload from a fenced worker (its successor takes over)");
    assert_eq!(bmc.stats().requests.values().sum::<u64>(), requests, "no IPMI request either");
}
