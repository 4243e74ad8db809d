//! The worker's RMCP+ sockets: a small fixed set of UDP sockets per address
//! family, shared by every session, with one receive task each that hands
//! datagrams to sessions by (remote address, our session id).
//!
//! - **No socket and no thread per BMC.** A session is an [`Endpoint`]: a
//!   route in its socket's table and a bounded queue. Sessions are spread
//!   over the sockets round-robin.
//! - **No head-of-line blocking.** The receive task never waits for a
//!   session: it reads the routing key without any crypto
//!   ([`super::wire::route`]) and `try_send`s into the session's queue; a
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
//! - **Lifetime.** The sockets are bound on first use (inside the runtime)
//!   and closed, with their tasks, when the last [`RmcpSockets`] clone is
//!   dropped. Dropping an [`Endpoint`] removes its route.

use super::crypto::random_u32;
use super::wire::{route, Route};
use std::collections::HashMap;
use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::net::UdpSocket;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// Datagrams queued per session before the receive task drops more.
const QUEUE: usize = 16;
/// Largest datagram read; IPMI messages over LAN are far smaller.
const MAX_DATAGRAM: usize = 2048;
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

/// A peer's routes: (our session id, queue, handshake in progress).
type Routes = HashMap<SocketAddr, Vec<(u32, mpsc::Sender<Vec<u8>>)>>;

/// One socket and its routing table.
struct Shared {
    socket: UdpSocket,
    routes: Mutex<Routes>,
    /// Datagrams dropped: no route, or the session's queue was full.
    dropped: AtomicU64,
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
        let mut deliver = |tx: &mpsc::Sender<Vec<u8>>| delivered |= tx.try_send(datagram.to_vec()).is_ok();
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
            .map(|s| s.routes().values().map(Vec::len).sum::<usize>())
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
                let shared = Arc::new(Shared {
                    socket: bind(any)?,
                    routes: Mutex::new(HashMap::new()),
                    dropped: AtomicU64::new(0),
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
        let (tx, rx) = mpsc::channel(QUEUE);
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
            peer_routes.push((id, tx));
            id
        };
        Ok(Endpoint { shared, peer, id, rx })
    }
}

fn bind(addr: SocketAddr) -> io::Result<UdpSocket> {
    let socket = std::net::UdpSocket::bind(addr)?;
    socket.set_nonblocking(true)?;
    UdpSocket::from_std(socket)
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
    rx: mpsc::Receiver<Vec<u8>>,
}

impl Endpoint {
    /// Our (remote console) session id.
    pub(crate) fn id(&self) -> u32 {
        self.id
    }

    pub(crate) async fn send(&self, datagram: &[u8]) -> io::Result<()> {
        self.shared.socket.send_to(datagram, self.peer).await.map(|_| ())
    }

    /// The next datagram for this endpoint, or `None` at `until`.
    pub(crate) async fn recv(&mut self, until: Instant) -> Option<Vec<u8>> {
        tokio::time::timeout_at(until, self.rx.recv()).await.ok().flatten()
    }

    /// Discards whatever is queued (late replies of an earlier exchange).
    pub(crate) fn drain(&mut self) {
        while self.rx.try_recv().is_ok() {}
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        let mut routes = self.shared.routes();
        if let Some(list) = routes.get_mut(&self.peer) {
            if let Some(at) = list.iter().position(|(id, _)| *id == self.id) {
                list.swap_remove(at);
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

    #[tokio::test]
    async fn datagrams_reach_only_their_session_and_routes_go_away_with_it() {
        let sockets = RmcpSockets::new(2);
        let bmc = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let peer = bmc.local_addr().unwrap();
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
        let to_b = wire::presession(wire::PT_RAKP2, &[1, 0, 0, 0, b.id().to_le_bytes()[0], b.id().to_le_bytes()[1], b.id().to_le_bytes()[2], b.id().to_le_bytes()[3]]);
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
        let stranger = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        stranger.send_to(&to_b, from["b"]).await.unwrap();
        assert_eq!(b.recv(soon()).await, None);
        assert!(sockets.dropped() >= 1);
        drop(a);
        drop(b);
        drop(probe);
        assert_eq!(sockets.routes(), 0);
    }

    #[tokio::test]
    async fn a_full_queue_drops_instead_of_blocking_others() {
        let sockets = RmcpSockets::new(1);
        let flood = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let calm = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let slow = sockets.endpoint(flood.local_addr().unwrap(), true).await.unwrap();
        let mut fast = sockets.endpoint(calm.local_addr().unwrap(), true).await.unwrap();
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
