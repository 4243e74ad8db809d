//! The host's serial port behind an `ipmi_sim` SOL line: `ipmi_sim` with
//! `sol "tcp:127.0.0.1:PORT" 115200` in its lan.conf connects to this TCP
//! listener (and reconnects when the connection drops); what SOL clients
//! type arrives here, and what the test writes here is the host's console
//! output.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

#[derive(Default)]
struct State {
    received: Vec<u8>,
    connection: Option<TcpStream>,
    connections: u32,
    closed: bool,
}

#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    changed: Condvar,
}

impl Shared {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A loopback TCP listener playing the host's serial port; see the module docs.
pub struct SerialHost {
    port: u16,
    shared: Arc<Shared>,
}

impl SerialHost {
    /// Listens on a free loopback port.
    pub fn start() -> io::Result<SerialHost> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let port = listener.local_addr()?.port();
        let shared = Arc::new(Shared::default());
        let accept = shared.clone();
        thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                if accept.state().closed {
                    return;
                }
                let Ok(reader) = stream.try_clone() else { continue };
                {
                    let mut state = accept.state();
                    state.connection = Some(stream);
                    state.connections += 1;
                }
                accept.changed.notify_all();
                let read = accept.clone();
                thread::spawn(move || pump(reader, read));
            }
        });
        Ok(SerialHost { port, shared })
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The lan.conf line that points `ipmi_sim`'s SOL at this port.
    pub fn lan_conf_line(&self) -> String {
        format!("sol \"tcp:127.0.0.1:{}\" 115200", self.port)
    }

    /// Waits until `ipmi_sim` is connected.
    pub fn wait_connected(&self, timeout: Duration) -> bool {
        self.wait(timeout, |s| s.connection.is_some())
    }

    /// How many times `ipmi_sim` has connected.
    pub fn connections(&self) -> u32 {
        self.shared.state().connections
    }

    /// Waits until `ipmi_sim` has connected more than `n` times and is connected.
    pub fn wait_reconnected(&self, n: u32, timeout: Duration) -> bool {
        self.wait(timeout, |s| s.connections > n && s.connection.is_some())
    }

    /// Writes `bytes` as the host's console output (false: not connected).
    pub fn write(&self, bytes: &[u8]) -> bool {
        let stream = self.shared.state().connection.as_ref().and_then(|c| c.try_clone().ok());
        stream.is_some_and(|mut s| s.write_all(bytes).is_ok())
    }

    /// Everything received from SOL clients so far.
    pub fn received(&self) -> Vec<u8> {
        self.shared.state().received.clone()
    }

    /// Waits until at least `n` bytes were received; returns them.
    pub fn wait_received(&self, n: usize, timeout: Duration) -> Vec<u8> {
        self.wait(timeout, |s| s.received.len() >= n);
        self.received()
    }

    /// Waits until the received bytes contain `needle`.
    pub fn wait_for(&self, needle: &[u8], timeout: Duration) -> bool {
        self.wait(timeout, |s| s.received.windows(needle.len().max(1)).any(|w| w == needle))
    }

    fn wait(&self, timeout: Duration, mut cond: impl FnMut(&State) -> bool) -> bool {
        let deadline = Instant::now() + timeout;
        let mut state = self.shared.state();
        loop {
            if cond(&state) {
                return true;
            }
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            state = self.shared.changed.wait_timeout(state, deadline - now).unwrap_or_else(|p| p.into_inner()).0;
        }
    }
}

impl Drop for SerialHost {
    fn drop(&mut self) {
        let mut state = self.shared.state();
        state.closed = true;
        if let Some(c) = state.connection.take() {
            let _ = c.shutdown(Shutdown::Both);
        }
        drop(state);
        // Wakes the accept loop so that it sees `closed`.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

fn pump(mut reader: TcpStream, shared: Arc<Shared>) {
    let mut buf = [0u8; 4096];
    loop {
        match reader.read(&mut buf) {
            Ok(0) | Err(_) => {
                let mut state = shared.state();
                if state.connection.as_ref().and_then(|c| c.peer_addr().ok()) == reader.peer_addr().ok() {
                    state.connection = None;
                }
                drop(state);
                shared.changed.notify_all();
                return;
            }
            Ok(n) => {
                shared.state().received.extend_from_slice(&buf[..n]);
                shared.changed.notify_all();
            }
        }
    }
}
