//! The `sim` provider: executes every action by forwarding it to a
//! `bmc-sim` server over one TCP connection per session
//! ([`bmcfleet_provider::ActionExecutor`]: no per-capability code).

use crate::proto::{Call, Request, Response};
use async_trait::async_trait;
use bmcfleet_provider::{
    ActionExecutor, BmcSession, Capability, Connector, Ctx, ProviderError, ResolvedCredentials, Result,
};
use bmcfleet_schema::{Action, ActionData, BmcKey, BmcTarget, ErrorCode, Secret};
use std::net::SocketAddr;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;

/// Opens sessions to a `bmc-sim` server.
#[derive(Clone, Debug)]
pub struct SimConnector {
    endpoint: SocketAddr,
}

impl SimConnector {
    pub fn new(endpoint: SocketAddr) -> Self {
        SimConnector { endpoint }
    }
}

/// Every capability that serves actions: the simulator executes actions
/// itself; it has no serial console.
const CAPS: &[Capability] = &[
    Capability::Power,
    Capability::BootDevice,
    Capability::Users,
    Capability::BmcReset,
    Capability::NetworkSource,
    Capability::Raw,
    Capability::VirtualMedia,
    Capability::Inventory,
    Capability::EventLog,
    Capability::Sensors,
    Capability::Bios,
    Capability::SecureBoot,
    Capability::FirmwareUpdate,
    Capability::Identify,
    Capability::PowerCapping,
    Capability::BmcClock,
    // Routed like every action; the simulator answers `unsupported` for
    // what it does not model (certificates, NTP servers).
    Capability::BmcCertificates,
];

#[async_trait]
impl Connector for SimConnector {
    fn protocol(&self) -> &'static str {
        "sim"
    }

    fn declared_capabilities(&self) -> &'static [Capability] {
        CAPS
    }

    async fn connect(&self, ctx: &Ctx, target: &BmcTarget, creds: &ResolvedCredentials) -> Result<Box<dyn BmcSession>> {
        let remaining = ctx.remaining()?;
        let stream = tokio::time::timeout(remaining, TcpStream::connect(self.endpoint))
            .await
            .map_err(|_| ProviderError::new(ErrorCode::Timeout, "connecting to the simulator timed out"))?
            .map_err(|e| {
                if bmcfleet_provider::is_descriptor_exhaustion(&e) {
                    return ProviderError::worker_exhausted(
                        format_args!("connecting to the simulator at {}", self.endpoint),
                        &e,
                    );
                }
                ProviderError::new(ErrorCode::Unreachable, format!("simulator at {}: {e}", self.endpoint))
            })?;
        let _ = stream.set_nodelay(true);
        let (read, write) = stream.into_split();
        let mut session = SimSession {
            key: target.address.key(),
            host: target.address.host_string(),
            username: creds.username.clone(),
            password: creds.password.clone(),
            read: BufReader::new(read),
            write,
            healthy: true,
        };
        session.call(ctx, None).await?;
        Ok(Box::new(session))
    }
}

/// One connection to the simulator for one BMC.
pub struct SimSession {
    key: BmcKey,
    host: String,
    username: String,
    password: Secret,
    read: BufReader<OwnedReadHalf>,
    write: OwnedWriteHalf,
    healthy: bool,
}

impl SimSession {
    async fn call(&mut self, ctx: &Ctx, action: Option<Action>) -> Result<Option<ActionData>> {
        if !self.healthy {
            return Err(ProviderError::new(ErrorCode::Unreachable, "session is broken; reconnect"));
        }
        // Plan mode: an action that only reads is sent; one that changes
        // state is recorded and not sent (the simulator speaks whole actions).
        let planned = action.as_ref().map(|a| {
            let request = bmcfleet_provider::PlannedRequest::Sim { action: a.kind().to_owned(), params: a.loggable() };
            if bmcfleet_schema::plan::reads_only(a) {
                bmcfleet_provider::Outgoing::read(request)
            } else {
                bmcfleet_provider::Outgoing::change(request)
            }
        });
        let req = Request {
            bmc: self.key.to_string(),
            host: self.host.clone(),
            username: self.username.clone(),
            password: self.password.clone(),
            call: ctx.call.as_ref().map(|c| Call {
                batch: c.batch,
                index: c.index,
                delivery: c.delivery,
                worker: c.worker.clone(),
            }),
            action,
        };
        let mut line = serde_json::to_vec(&req).map_err(|e| ProviderError::new(ErrorCode::Internal, e.to_string()))?;
        line.push(b'\n');
        let remaining = ctx.remaining()?;
        // The worker's fence, immediately before the line leaves.
        match planned {
            Some(out) => ctx.sending_request(|| out).await?,
            None => ctx.sending().await?,
        };
        let exchange = async {
            self.write.write_all(&line).await?;
            let mut buf = String::new();
            let n = self.read.read_line(&mut buf).await?;
            Ok::<_, std::io::Error>((n, buf))
        };
        let (n, buf) = match tokio::time::timeout(remaining, exchange).await {
            Err(_) => {
                self.healthy = false;
                return Err(ProviderError::new(ErrorCode::Timeout, "the simulated BMC did not answer in time"));
            }
            Ok(Err(e)) => {
                self.healthy = false;
                return Err(ProviderError::new(ErrorCode::Unreachable, format!("simulator connection: {e}")));
            }
            Ok(Ok(x)) => x,
        };
        if n == 0 {
            self.healthy = false;
            return Err(ProviderError::new(ErrorCode::Unreachable, "the simulated BMC closed the connection"));
        }
        match serde_json::from_str::<Response>(&buf) {
            Ok(Response::Ok(data)) => Ok(data),
            Ok(Response::Err(e)) => Err(ProviderError::new(e.code, e.message)),
            Err(e) => {
                self.healthy = false;
                Err(ProviderError::new(ErrorCode::ProtocolError, format!("bad simulator reply: {e}")))
            }
        }
    }
}

/// No capability accessor: the simulator executes actions itself (`actions`).
impl bmcfleet_provider::Offer for SimSession {}

#[async_trait]
impl BmcSession for SimSession {
    fn provider(&self) -> &'static str {
        "sim"
    }
    /// The simulator speaks actions on its wire: every capability, no per-capability code.
    fn actions(&mut self) -> Option<&mut dyn ActionExecutor> {
        Some(self)
    }
    fn is_healthy(&self) -> bool {
        self.healthy
    }
    async fn close(&mut self) {
        let _ = self.write.shutdown().await;
    }
}

#[async_trait]
impl ActionExecutor for SimSession {
    async fn execute(&mut self, ctx: &Ctx, action: &Action) -> Result<Option<ActionData>> {
        self.call(ctx, Some(action.clone())).await
    }
}
