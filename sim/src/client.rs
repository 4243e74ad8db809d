//! The `sim` provider: implements every capability by forwarding the
//! action to a `bmc-sim` server over one TCP connection per session.

use crate::proto::{Call, Request, Response};
use async_trait::async_trait;
use bmcfleet_provider::{
    BmcReset, BmcSession, BootControl, Capability, Connector, Ctx, Inventory, NetworkSource, Power,
    ProviderError, Raw, ResolvedCredentials, Result, Users, VirtualMedia,
};
use bmcfleet_schema::{
    Action, ActionData, BmcKey, BmcResetKind, BmcTarget, BootDeviceRequest, ErrorCode, Inventory as InventoryData,
    MediaKind, NetworkSourceOp, PowerOp, PowerState, RawRequest, RawResponse, Secret, StaticIpv4, UserInfo, UserOp,
    UserSpec, UserUpdate, VirtualMediaOp,
};
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

const CAPS: &[Capability] = &Capability::ALL;

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
            .map_err(|e| ProviderError::new(ErrorCode::Unreachable, format!("simulator at {}: {e}", self.endpoint)))?;
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

fn unexpected(what: &str) -> ProviderError {
    ProviderError::new(ErrorCode::ProtocolError, format!("the simulator returned no {what}"))
}

#[async_trait]
impl BmcSession for SimSession {
    fn provider(&self) -> &'static str {
        "sim"
    }
    fn power(&mut self) -> Option<&mut dyn Power> {
        Some(self)
    }
    fn boot(&mut self) -> Option<&mut dyn BootControl> {
        Some(self)
    }
    fn users(&mut self) -> Option<&mut dyn Users> {
        Some(self)
    }
    fn bmc_reset(&mut self) -> Option<&mut dyn BmcReset> {
        Some(self)
    }
    fn network_source(&mut self) -> Option<&mut dyn NetworkSource> {
        Some(self)
    }
    fn raw(&mut self) -> Option<&mut dyn Raw> {
        Some(self)
    }
    fn virtual_media(&mut self) -> Option<&mut dyn VirtualMedia> {
        Some(self)
    }
    fn inventory(&mut self) -> Option<&mut dyn Inventory> {
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
impl Power for SimSession {
    async fn power(&mut self, ctx: &Ctx, op: PowerOp) -> Result<Option<PowerState>> {
        match self.call(ctx, Some(Action::Power(op))).await? {
            Some(ActionData::PowerState(s)) => Ok(Some(s)),
            _ => Ok(None),
        }
    }
}

#[async_trait]
impl BootControl for SimSession {
    async fn set_boot_device(&mut self, ctx: &Ctx, req: &BootDeviceRequest) -> Result<()> {
        self.call(ctx, Some(Action::BootDevice(req.clone()))).await.map(drop)
    }
    async fn boot_device(&mut self, ctx: &Ctx) -> Result<BootDeviceRequest> {
        match self.call(ctx, Some(Action::GetBootDevice)).await? {
            Some(ActionData::BootDevice(b)) => Ok(b),
            _ => Err(unexpected("boot device")),
        }
    }
}

#[async_trait]
impl Users for SimSession {
    async fn list_users(&mut self, ctx: &Ctx) -> Result<Vec<UserInfo>> {
        match self.call(ctx, Some(Action::User(UserOp::List))).await? {
            Some(ActionData::Users(u)) => Ok(u),
            _ => Err(unexpected("user list")),
        }
    }
    async fn create_user(&mut self, ctx: &Ctx, spec: &UserSpec) -> Result<UserInfo> {
        match self.call(ctx, Some(Action::User(UserOp::Create(spec.clone())))).await? {
            Some(ActionData::Users(mut u)) if !u.is_empty() => Ok(u.remove(0)),
            _ => Err(unexpected("created user")),
        }
    }
    async fn update_user(&mut self, ctx: &Ctx, update: &UserUpdate) -> Result<UserInfo> {
        match self.call(ctx, Some(Action::User(UserOp::Update(update.clone())))).await? {
            Some(ActionData::Users(mut u)) if !u.is_empty() => Ok(u.remove(0)),
            _ => Err(unexpected("updated user")),
        }
    }
    async fn delete_user(&mut self, ctx: &Ctx, name: &str) -> Result<()> {
        self.call(ctx, Some(Action::User(UserOp::Delete { name: name.into() }))).await.map(drop)
    }
}

#[async_trait]
impl BmcReset for SimSession {
    async fn reset_bmc(&mut self, ctx: &Ctx, kind: BmcResetKind) -> Result<()> {
        self.call(ctx, Some(Action::BmcReset(kind))).await.map(drop)
    }
}

#[async_trait]
impl NetworkSource for SimSession {
    async fn network_source(&mut self, ctx: &Ctx) -> Result<NetworkSourceOp> {
        match self.call(ctx, Some(Action::NetworkSource(NetworkSourceOp::Get))).await? {
            Some(ActionData::NetworkSource(n)) => Ok(n),
            _ => Err(unexpected("network source")),
        }
    }
    async fn set_dhcp(&mut self, ctx: &Ctx) -> Result<()> {
        self.call(ctx, Some(Action::NetworkSource(NetworkSourceOp::Dhcp))).await.map(drop)
    }
    async fn set_static(&mut self, ctx: &Ctx, addr: &StaticIpv4) -> Result<()> {
        self.call(ctx, Some(Action::NetworkSource(NetworkSourceOp::Static(addr.clone())))).await.map(drop)
    }
}

#[async_trait]
impl Raw for SimSession {
    async fn raw(&mut self, ctx: &Ctx, req: &RawRequest) -> Result<RawResponse> {
        match self.call(ctx, Some(Action::Raw(req.clone()))).await? {
            Some(ActionData::Raw(r)) => Ok(r),
            _ => Err(unexpected("raw response")),
        }
    }
}

#[async_trait]
impl VirtualMedia for SimSession {
    async fn insert_media(&mut self, ctx: &Ctx, url: &str, media: MediaKind) -> Result<()> {
        self.call(ctx, Some(Action::VirtualMedia(VirtualMediaOp::Insert { url: url.into(), media }))).await.map(drop)
    }
    async fn eject_media(&mut self, ctx: &Ctx, media: MediaKind) -> Result<()> {
        self.call(ctx, Some(Action::VirtualMedia(VirtualMediaOp::Eject { media }))).await.map(drop)
    }
}

#[async_trait]
impl Inventory for SimSession {
    async fn inventory(&mut self, ctx: &Ctx) -> Result<InventoryData> {
        match self.call(ctx, Some(Action::Inventory)).await? {
            Some(ActionData::Inventory(i)) => Ok(i),
            _ => Err(unexpected("inventory")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::{SimConfig, SimServer};
    use bmcfleet_provider::capabilities;
    use bmcfleet_schema::{Credentials, Protocol, TlsOptions};
    use std::time::Duration;

    fn target(host: &str) -> BmcTarget {
        BmcTarget {
            address: host.parse().unwrap(),
            protocol: Protocol::Sim,
            credentials: Credentials::Ref("x".into()),
            tls: TlsOptions::default(),
            system_id: None,
        }
    }

    fn creds(pw: &str) -> ResolvedCredentials {
        ResolvedCredentials { username: "admin".into(), password: pw.into() }
    }

    #[tokio::test]
    async fn declared_capabilities_match_the_session() {
        let sim = SimServer::start(SimConfig::default()).await.unwrap();
        let c = SimConnector::new(sim.addr());
        let mut s = c.connect(&Ctx::with_timeout(Duration::from_secs(5)), &target("10.0.0.1"), &creds("pw")).await.unwrap();
        assert_eq!(capabilities(s.as_mut()), c.declared_capabilities());
    }

    #[tokio::test]
    async fn power_state_is_kept_and_faults_are_typed() {
        let sim = SimServer::start(SimConfig::default()).await.unwrap();
        let c = SimConnector::new(sim.addr());
        let ctx = Ctx::with_timeout(Duration::from_secs(5));
        let mut s = c.connect(&ctx, &target("10.0.0.1"), &creds("pw")).await.unwrap();
        s.power().unwrap().power(&ctx, PowerOp::On).await.unwrap();
        assert_eq!(s.power().unwrap().power(&ctx, PowerOp::Status).await.unwrap(), Some(PowerState::On));
        assert_eq!(sim.power("v4-10-0-0-1"), Some(PowerState::On));
        let missing = UserUpdate { name: "ghost".into(), password: None, role: None, enabled: Some(true) };
        assert_eq!(s.users().unwrap().update_user(&ctx, &missing).await.unwrap_err().code, ErrorCode::TargetNotFound);

        let err = c.connect(&ctx, &target("10.0.0.2"), &creds("wrong")).await.err().unwrap();
        assert_eq!(err.code, ErrorCode::AuthFailed);

        let short = Ctx::with_timeout(Duration::from_millis(200));
        let hung = c.connect(&short, &target("hang-2.example"), &creds("pw")).await;
        assert_eq!(hung.err().unwrap().code, ErrorCode::Timeout);
    }
}
