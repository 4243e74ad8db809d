//! A TCP server that accepts connections and never answers: the hung BMC.

use super::HarnessError;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// Accepts on 127.0.0.1 and holds every connection open, silent, until dropped.
pub struct SilentServer {
    addr: SocketAddr,
    accepted: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl SilentServer {
    pub async fn start() -> Result<SilentServer, HarnessError> {
        let listener =
            TcpListener::bind("127.0.0.1:0").await.map_err(|e| HarnessError::io("binding a loopback port", e))?;
        let addr = listener.local_addr().map_err(|e| HarnessError::io("reading the bound address", e))?;
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = accepted.clone();
        let task = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((stream, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                held.push(stream);
            }
        });
        Ok(SilentServer { addr, accepted, task })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }
}

impl Drop for SilentServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}
