//! The worker's RMCP+ sockets: a small fixed set of UDP sockets per address
//! family, shared by every session, with one receive task each that hands
//! datagrams to sessions by (remote address, our session id).
//!
//! - **No socket and no thread per BMC.** A session is an [`Endpoint`]: a
//!   route in its socket's table and a bounded queue (a [`Mailbox`]: about
//!   a hundred bytes while empty, which is most of a live session's time).
//!   Sessions are spread over the sockets round-robin.
//! - **No head-of-line blocking.** The receive task never waits for a
//!   session: it reads the routing key without any crypto
//!   ([`super::wire::route`]) and offers it to the session's queue; a
//!   full queue drops the datagram (a flooding BMC only loses its own
//!   replies). Decryption and integrity checks run in the session's task.
//! - **Routing.** An RMCP+ packet carries our (remote console) session id:
//!   in its header once the session is active, inside the payload during
//!   the handshake. Session ids are random, non-zero and unique per socket.
//!   A datagram whose id names no session of that peer is dropped; a
//!   handshake error reply too short to carry the id goes to every
//!   handshake route of that peer, which check the message tag. IPMI
//!   1.5-framed (session-less) replies go to the peer's session-less route.
//!   A datagram from any other address than the session's peer never
//!   reaches the session.
//! - **No overrun of the kernel's receive buffer.** A socket asks for a
//!   [`RECV_BUFFER`] receive buffer (the kernel caps it at
//!   `net.core.rmem_max`) and admits at most one outstanding request per
//!   [`TRUESIZE`] bytes of what it got: a session reserves a slot
//!   ([`Endpoint::reserve`]) before it sends and gives it back when its
//!   next datagram arrives or its wait ends. Replies beyond the buffer
//!   would be dropped by the kernel, and a dropped reply to a request that
//!   is never retransmitted (power cycle) leaves its outcome unknown; a
//!   queue for a slot only delays a send (slots are granted first come,
//!   first served, and held no longer than one attempt's timeout).
//! - **Lifetime.** The sockets are bound on first use (inside the runtime)
//!   and closed, with their tasks, when the last [`RmcpSockets`] clone is
//!   dropped. Dropping an [`Endpoint`] removes its route.

use super::crypto::random_u32;
use super::wire::{route, Route};
use smallvec::SmallVec;
use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::net::UdpSocket;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// Datagrams queued per session before the receive task drops more.
const QUEUE: usize = 16;
/// Largest datagram read; IPMI messages over LAN are far smaller.
const MAX_DATAGRAM: usize = 2048;
/// Receive buffer asked for per socket (bytes); Linux caps it at
/// `net.core.rmem_max` (4 MiB on common distributions, 208 KiB on some).
pub(crate) const RECV_BUFFER: usize = 4 << 20;
/// Receive-buffer bytes budgeted per outstanding request: the kernel
/// charges a datagram's buffer (`truesize`), not its length, against the
/// receive buffer: under 1 KiB for an RMCP+ reply on loopback and common
/// NICs; twice that leaves room for stray and late datagrams.
pub(crate) const TRUESIZE: usize = 2048;
/// Outstanding requests per socket whatever its buffer.
const MIN_WINDOW: usize = 16;
/// Session-less route id (probe replies).
pub(crate) const SESSIONLESS: u32 = 0;

/// The shared sockets; cheap to clone.
#[derive(Clone)]
pub struct RmcpSockets {
    inner: Arc<Inner>,
}

struct Inner {
    per_family: usize,
    v4: tokio::sync::OnceCell<Vec<Arc<Shared>>>,
    v6: tokio::sync::OnceCell<Vec<Arc<Shared>>>,
    next: AtomicUsize,
    tasks: Mutex<Vec<JoinHandle<()>>>,
    /// Presence probes in flight (each holds a socket briefly).
    probes: Arc<tokio::sync::Semaphore>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        for task in self.tasks.get_mut().unwrap_or_else(|p| p.into_inner()).drain(..) {
            task.abort();
        }
    }
}

/// Each peer's routes: (our session id, its queue). One route (a BMC's
/// live session) is held in the table itself, with no allocation of its
/// own; a peer's second route (a probe or handshake beside it) spills to
/// the heap until it goes.
type Routes = HashMap<SocketAddr, SmallVec<[(u32, Arc<Mailbox>); 1]>>;

/// A session's queue of datagrams: at most [`QUEUE`], filled by the receive
/// task without ever waiting, emptied by the session. Nothing is allocated
/// while it is empty.
#[derive(Default)]
struct Mailbox {
    queue: Mutex<VecDeque<Vec<u8>>>,
    ready: Notify,
}

impl Mailbox {
    fn queue(&self) -> MutexGuard<'_, VecDeque<Vec<u8>>> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues a copy of `datagram`; false (dropped) when the queue is full.
    fn offer(&self, datagram: &[u8]) -> bool {
        {
            let mut queue = self.queue();
            if queue.len() >= QUEUE {
                return false;
            }
            queue.push_back(datagram.to_vec());
        }
        // Stores a wake-up when the session is not waiting yet: none is lost.
        self.ready.notify_one();
        true
    }

    fn take(&self) -> Option<Vec<u8>> {
        let mut queue = self.queue();
        let datagram = queue.pop_front();
        if queue.is_empty() && queue.capacity() > 0 {
            // Emptied: the buffer goes, so a session idling for minutes
            // keeps none. The price is one small allocation for the next
            // datagram, paid per reply (a send costs far more).
            *queue = VecDeque::new();
        }
        datagram
    }
}

/// One socket and its routing table.
struct Shared {
    socket: UdpSocket,
    routes: Mutex<Routes>,
    /// Datagrams dropped: no route, or the session's queue was full.
    dropped: AtomicU64,
    /// Slots for outstanding requests (see the module doc).
    window: Arc<tokio::sync::Semaphore>,
}

impl Shared {
    fn routes(&self) -> MutexGuard<'_, Routes> {
        self.routes.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn dispatch(&self, datagram: &[u8], from: SocketAddr) {
        let routes = self.routes();
        let Some(peer) = routes.get(&from) else {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let mut delivered = false;
        let mut deliver = |mailbox: &Arc<Mailbox>| delivered |= mailbox.offer(datagram);
        match route(datagram) {
            Route::Sessionless => peer.iter().filter(|(id, _)| *id == SESSIONLESS).for_each(|(_, tx)| deliver(tx)),
            Route::Session(Some(id)) if id != SESSIONLESS => {
                peer.iter().filter(|(i, _)| *i == id).for_each(|(_, tx)| deliver(tx))
            }
            Route::Session(_) => peer.iter().filter(|(id, _)| *id != SESSIONLESS).for_each(|(_, tx)| deliver(tx)),
            Route::Other => {}
        }
        if !delivered {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl std::fmt::Debug for RmcpSockets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RmcpSockets").field("per_family", &self.inner.per_family).finish_non_exhaustive()
    }
}

impl Default for RmcpSockets {
    fn default() -> Self {
        RmcpSockets::new(4)
    }
}

impl RmcpSockets {
    /// Up to `per_family` sockets for IPv4 peers and as many for IPv6 peers
    /// (bound on first use).
    pub fn new(per_family: usize) -> Self {
        RmcpSockets {
            inner: Arc::new(Inner {
                per_family: per_family.max(1),
                v4: Default::default(),
                v6: Default::default(),
                next: AtomicUsize::new(0),
                tasks: Mutex::new(Vec::new()),
                probes: Arc::new(tokio::sync::Semaphore::new(super::MAX_CONCURRENT_PROBES)),
            }),
        }
    }

    /// How many sockets are open (both families).
    pub fn open_sockets(&self) -> usize {
        self.inner.v4.get().map_or(0, Vec::len) + self.inner.v6.get().map_or(0, Vec::len)
    }

    /// How many sessions (routes) are registered.
    pub fn routes(&self) -> usize {
        [self.inner.v4.get(), self.inner.v6.get()]
            .into_iter()
            .flatten()
            .flatten()
            .map(|s| s.routes().values().map(|list| list.len()).sum::<usize>())
            .sum()
    }

    /// Datagrams dropped so far (no route, or a full session queue).
    pub fn dropped(&self) -> u64 {
        [self.inner.v4.get(), self.inner.v6.get()]
            .into_iter()
            .flatten()
            .flatten()
            .map(|s| s.dropped.load(Ordering::Relaxed))
            .sum()
    }

    async fn family(&self, peer: SocketAddr) -> io::Result<&Vec<Arc<Shared>>> {
        let (cell, any) = if peer.is_ipv4() {
            (&self.inner.v4, SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0)))
        } else {
            (&self.inner.v6, SocketAddr::from((Ipv6Addr::UNSPECIFIED, 0)))
        };
        cell.get_or_try_init(|| async {
            let mut sockets = Vec::with_capacity(self.inner.per_family);
            for _ in 0..self.inner.per_family {
                let (socket, buffer) = bind(any)?;
                let shared = Arc::new(Shared {
                    socket,
                    routes: Mutex::new(HashMap::new()),
                    dropped: AtomicU64::new(0),
                    window: Arc::new(tokio::sync::Semaphore::new(window(buffer))),
                });
                let task = tokio::spawn(receive(shared.clone()));
                self.inner.tasks.lock().unwrap_or_else(|p| p.into_inner()).push(task);
                sockets.push(shared);
            }
            Ok(sockets)
        })
        .await
    }

    /// Waits for one of the connector's probe slots.
    pub(crate) async fn probe_slot(&self) -> Option<tokio::sync::OwnedSemaphorePermit> {
        self.inner.probes.clone().acquire_owned().await.ok()
    }

    /// A new endpoint for a session with `peer`: a fresh unique session id
    /// (or the session-less route when `sessionless`).
    pub(crate) async fn endpoint(&self, peer: SocketAddr, sessionless: bool) -> io::Result<Endpoint> {
        let sockets = self.family(peer).await?;
        let shared = sockets[self.inner.next.fetch_add(1, Ordering::Relaxed) % sockets.len()].clone();
        let mailbox = Arc::new(Mailbox::default());
        let id = {
            let mut routes = shared.routes();
            let peer_routes = routes.entry(peer).or_default();
            let id = if sessionless {
                SESSIONLESS
            } else {
                loop {
                    let id = random_u32();
                    if !peer_routes.iter().any(|(i, _)| *i == id) {
                        break id;
                    }
                }
            };
            peer_routes.push((id, mailbox.clone()));
            id
        };
        Ok(Endpoint { shared, peer, id, mailbox, slot: None })
    }
}

/// A non-blocking UDP socket on `addr` with the largest receive buffer up
/// to [`RECV_BUFFER`] the kernel grants, and that buffer's size.
fn bind(addr: SocketAddr) -> io::Result<(UdpSocket, usize)> {
    use socket2::{Domain, Protocol, Socket, Type};
    let socket = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    if let Err(e) = socket.set_recv_buffer_size(RECV_BUFFER) {
        tracing::debug!(error = %e, "Could not enlarge an RMCP+ socket's receive buffer.");
    }
    socket.bind(&addr.into())?;
    socket.set_nonblocking(true)?;
    // Linux reports twice what it grants (the other half is its overhead
    // allowance); the budget below counts truesize, which includes it.
    let buffer = socket.recv_buffer_size()?;
    if buffer < RECV_BUFFER {
        tracing::info!(
            granted = buffer,
            asked = RECV_BUFFER,
            window = window(buffer),
            "RMCP+ socket receive buffer capped by net.core.rmem_max; fewer requests will be outstanding per socket."
        );
    }
    Ok((UdpSocket::from_std(socket.into())?, buffer))
}

/// Outstanding requests a socket admits with a `buffer`-byte receive buffer.
fn window(buffer: usize) -> usize {
    (buffer / TRUESIZE).max(MIN_WINDOW)
}

async fn receive(shared: Arc<Shared>) {
    let mut buf = vec![0u8; MAX_DATAGRAM];
    loop {
        match shared.socket.recv_from(&mut buf).await {
            Ok((n, from)) => shared.dispatch(&buf[..n], from),
            // ICMP errors of earlier sends (Linux reports them on some
            // unconnected sockets too), interrupted calls: keep serving.
            Err(e) => tracing::trace!(error = %e, "RMCP+ socket receive error."),
        }
    }
}

/// One session's (or one probe's) place on a shared socket.
pub(crate) struct Endpoint {
    shared: Arc<Shared>,
    peer: SocketAddr,
    id: u32,
    mailbox: Arc<Mailbox>,
    /// The socket slot this endpoint holds while a reply is due.
    slot: Option<tokio::sync::OwnedSemaphorePermit>,
}

impl Endpoint {
    /// Our (remote console) session id.
    pub(crate) fn id(&self) -> u32 {
        self.id
    }

    /// Waits for a slot for one outstanding request on this endpoint's
    /// socket (kept if already held). Call before the last check that
    /// decides to send, so that waiting never separates the two.
    pub(crate) async fn reserve(&mut self) {
        if self.slot.is_none() {
            // The semaphore is never closed.
            self.slot = self.shared.window.clone().acquire_owned().await.ok();
        }
    }

    pub(crate) async fn send(&self, datagram: &[u8]) -> io::Result<()> {
        self.shared.socket.send_to(datagram, self.peer).await.map(|_| ())
    }

    /// The next datagram for this endpoint, or `None` at `until`.
    /// Gives back the endpoint's slot.
    pub(crate) async fn recv(&mut self, until: Instant) -> Option<Vec<u8>> {
        let datagram = loop {
            if let Some(datagram) = self.mailbox.take() {
                break Some(datagram);
            }
            // A wake-up stored by an earlier offer whose datagram was
            // already taken only turns the loop once more.
            if tokio::time::timeout_at(until, self.mailbox.ready.notified()).await.is_err() {
                break self.mailbox.take();
            }
        };
        self.slot = None;
        datagram
    }

    /// Whether datagrams are queued for this endpoint right now.
    pub(crate) fn has_queued(&self) -> bool {
        !self.mailbox.queue().is_empty()
    }

    /// Discards whatever is queued (late replies of an earlier exchange).
    pub(crate) fn drain(&mut self) {
        while self.mailbox.take().is_some() {}
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        let mut routes = self.shared.routes();
        if let Some(list) = routes.get_mut(&self.peer) {
            if let Some(at) = list.iter().position(|(id, _)| *id == self.id) {
                list.swap_remove(at);
                // Back inline once one route is left.
                list.shrink_to_fit();
            }
            if list.is_empty() {
                routes.remove(&self.peer);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rmcp::wire;
    use std::time::Duration;

    /// A loopback socket standing in for a BMC (or another sender), and its address.
    async fn loopback() -> (UdpSocket, SocketAddr) {
        let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let addr = socket.local_addr().unwrap();
        (socket, addr)
    }

    #[tokio::test]
    async fn a_socket_admits_no_more_outstanding_requests_than_its_receive_buffer_holds() {
        // Polled once, outside tokio's cooperative budget (thousands of
        // polls in one task would otherwise be told to yield).
        use futures::FutureExt as _;
        let sockets = RmcpSockets::new(1);
        let (_bmc, peer) = loopback().await;
        let mut first = sockets.endpoint(peer, false).await.unwrap();
        let shared = first.shared.clone();
        // The buffer asked for, or what net.core.rmem_max allows.
        let rmem_max: usize = std::fs::read_to_string("/proc/sys/net/core/rmem_max").unwrap().trim().parse().unwrap();
        let granted = socket2::SockRef::from(&shared.socket).recv_buffer_size().unwrap();
        assert!(granted >= RECV_BUFFER.min(rmem_max), "granted {granted} bytes (rmem_max {rmem_max})");
        let slots = shared.window.available_permits();
        assert_eq!(slots, window(granted));
        assert!(slots * TRUESIZE <= granted.max(MIN_WINDOW * TRUESIZE), "{slots} slots for {granted} bytes");

        // Every slot taken...
        tokio::task::unconstrained(first.reserve()).now_or_never().expect("a free slot");
        tokio::task::unconstrained(first.reserve()).now_or_never().expect("a held slot is kept, not taken twice");
        let mut holders = Vec::new();
        for _ in 1..slots {
            let mut e = sockets.endpoint(peer, false).await.unwrap();
            tokio::task::unconstrained(e.reserve()).now_or_never().expect("a free slot");
            holders.push(e);
        }
        // ...the next session waits to send...
        let mut waiting = sockets.endpoint(peer, false).await.unwrap();
        assert!(
            tokio::task::unconstrained(waiting.reserve()).now_or_never().is_none(),
            "more requests outstanding than the buffer holds"
        );
        // ...until a holder's wait for its reply ends.
        assert!(first.recv(Instant::now()).await.is_none());
        tokio::task::unconstrained(waiting.reserve()).now_or_never().expect("the slot given back");
        // Dropping an endpoint gives its slot back too.
        let mut last = sockets.endpoint(peer, false).await.unwrap();
        assert!(tokio::task::unconstrained(last.reserve()).now_or_never().is_none());
        drop(holders.pop());
        tokio::task::unconstrained(last.reserve()).now_or_never().expect("the dropped endpoint's slot");
    }

    #[tokio::test]
    async fn datagrams_reach_only_their_session_and_routes_go_away_with_it() {
        let sockets = RmcpSockets::new(2);
        let (bmc, peer) = loopback().await;
        let mut a = sockets.endpoint(peer, false).await.unwrap();
        let mut b = sockets.endpoint(peer, false).await.unwrap();
        let mut probe = sockets.endpoint(peer, true).await.unwrap();
        assert_eq!(sockets.open_sockets(), 2);
        assert_eq!(sockets.routes(), 3);
        assert_ne!(a.id(), b.id());

        // Learn each endpoint's source address from a datagram it sends.
        let mut buf = [0u8; 64];
        let mut from = HashMap::new();
        for (name, e) in [("a", &a), ("b", &b), ("p", &probe)] {
            e.send(name.as_bytes()).await.unwrap();
            let (n, src) = bmc.recv_from(&mut buf).await.unwrap();
            from.insert(name, src);
            assert_eq!(&buf[..n], name.as_bytes());
        }
        let soon = || Instant::now() + Duration::from_millis(200);
        let to_b = wire::presession(
            wire::PT_RAKP2,
            &[
                1,
                0,
                0,
                0,
                b.id().to_le_bytes()[0],
                b.id().to_le_bytes()[1],
                b.id().to_le_bytes()[2],
                b.id().to_le_bytes()[3],
            ],
        );
        bmc.send_to(&to_b, from["b"]).await.unwrap();
        assert_eq!(b.recv(soon()).await.as_deref(), Some(&to_b[..]));
        // An error reply too short to name the session: every handshake route of the peer on that socket.
        let short = wire::presession(wire::PT_RAKP2, &[1, 0x0D]);
        bmc.send_to(&short, from["a"]).await.unwrap();
        assert_eq!(a.recv(soon()).await.as_deref(), Some(&short[..]));
        // Session-less (IPMI 1.5) replies go to the probe only.
        let v15 = [0x06, 0, 0xFF, 0x07, 0x00, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        bmc.send_to(&v15, from["p"]).await.unwrap();
        assert_eq!(probe.recv(soon()).await.as_deref(), Some(&v15[..]));
        // Another sender, same id: dropped.
        let (stranger, _) = loopback().await;
        stranger.send_to(&to_b, from["b"]).await.unwrap();
        assert_eq!(b.recv(soon()).await, None);
        assert!(sockets.dropped() >= 1);
        drop(a);
        drop(b);
        drop(probe);
        assert_eq!(sockets.routes(), 0);
    }

    #[tokio::test]
    async fn a_peer_with_one_session_keeps_its_route_inline() {
        let sockets = RmcpSockets::new(1);
        let (_bmc, peer) = loopback().await;
        let session = sockets.endpoint(peer, false).await.unwrap();
        let spilled = || session.shared.routes()[&peer].spilled();
        assert!(!spilled(), "one route: no allocation of its own");
        let probe = sockets.endpoint(peer, true).await.unwrap();
        assert!(spilled() && sockets.routes() == 2);
        drop(probe);
        assert!(!spilled(), "back inline when the second route goes");
        assert_eq!(session.shared.routes()[&peer][0].0, session.id());
    }

    #[test]
    fn a_mailbox_holds_at_most_its_queue_and_keeps_no_buffer_once_empty() {
        let mailbox = Mailbox::default();
        for i in 0..QUEUE {
            assert!(mailbox.offer(&[i as u8]), "datagram {i} refused");
        }
        assert!(!mailbox.offer(b"one more"), "a full queue takes no more");
        assert_eq!(mailbox.take().as_deref(), Some(&[0u8][..]), "first in, first out");
        assert!(mailbox.offer(b"room again"));
        while mailbox.take().is_some() {}
        assert_eq!(mailbox.queue().capacity(), 0, "an idle session keeps no buffer");
    }

    #[tokio::test]
    async fn a_datagram_offered_before_the_session_waits_is_not_missed() {
        let sockets = RmcpSockets::new(1);
        let (_bmc, peer) = loopback().await;
        let mut e = sockets.endpoint(peer, true).await.unwrap();
        e.mailbox.offer(b"early");
        assert_eq!(e.recv(Instant::now() + Duration::from_secs(5)).await.as_deref(), Some(&b"early"[..]));
        // The stored wake-up of that offer is spent or spurious: the next
        // wait ends at its deadline with nothing.
        assert_eq!(e.recv(Instant::now() + Duration::from_millis(50)).await, None);
    }

    #[tokio::test]
    async fn a_full_queue_drops_instead_of_blocking_others() {
        let sockets = RmcpSockets::new(1);
        let (flood, flood_addr) = loopback().await;
        let (calm, calm_addr) = loopback().await;
        let slow = sockets.endpoint(flood_addr, true).await.unwrap();
        let mut fast = sockets.endpoint(calm_addr, true).await.unwrap();
        slow.send(b"x").await.unwrap();
        let mut buf = [0u8; 8];
        let (_, ours) = flood.recv_from(&mut buf).await.unwrap();
        let v15 = [0x06, 0, 0xFF, 0x07, 0x00, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        for _ in 0..(QUEUE * 4) {
            flood.send_to(&v15, ours).await.unwrap();
        }
        calm.send_to(&v15, ours).await.unwrap();
        // The flooded endpoint never reads; the other still gets its reply.
        assert!(fast.recv(Instant::now() + Duration::from_secs(2)).await.is_some());
    }
}
