//! A TCP relay on loopback that a test can pause: while paused it moves no
//! byte in either direction but keeps every connection open, as a network
//! partition does (no reset, no FIN). On resume, what was held is delivered.
//! Used to cut a worker off from nats-server while the worker keeps running.

use std::net::SocketAddr;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// A running relay; dropping it stops accepting (open connections end when
/// either side closes).
pub struct PausableProxy {
    addr: SocketAddr,
    paused: Arc<watch::Sender<bool>>,
    task: tokio::task::JoinHandle<()>,
}

impl PausableProxy {
    /// Relay `127.0.0.1:<free port>` → `target`.
    pub async fn start(target: SocketAddr) -> PausableProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind relay");
        let addr = listener.local_addr().expect("relay address");
        let paused = Arc::new(watch::channel(false).0);
        let task = {
            let paused = paused.clone();
            tokio::spawn(async move {
                while let Ok((client, _)) = listener.accept().await {
                    let Ok(server) = TcpStream::connect(target).await else { continue };
                    let _ = (client.set_nodelay(true), server.set_nodelay(true));
                    let (cr, cw) = client.into_split();
                    let (sr, sw) = server.into_split();
                    tokio::spawn(pipe(cr, sw, paused.subscribe()));
                    tokio::spawn(pipe(sr, cw, paused.subscribe()));
                }
            })
        };
        PausableProxy { addr, paused, task }
    }

    /// `nats://` URL of the relay.
    pub fn url(&self) -> String {
        format!("nats://{}", self.addr)
    }

    /// Stop moving bytes (connections stay open).
    pub fn pause(&self) {
        self.paused.send_replace(true);
    }

    /// Move bytes again, starting with what was held.
    pub fn resume(&self) {
        self.paused.send_replace(false);
    }
}

impl Drop for PausableProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Copy one direction; while paused, neither read nor write.
async fn pipe(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut paused: watch::Receiver<bool>,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        if paused.wait_for(|p| !*p).await.is_err() {
            return;
        }
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        // Bytes read just before a pause are held until the resume too.
        if paused.wait_for(|p| !*p).await.is_err() {
            return;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
