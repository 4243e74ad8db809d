//! [`IpmiConnector`]: opens RMCP+ sessions for the worker.

use crate::cmd;
use crate::config::IpmiConfig;
use crate::rmcp::sol::{SolOptions, SolSession};
use crate::rmcp::{CipherSuite, RmcpConfig, RmcpSockets, RmcpTransport};
use crate::session::IpmiSession;
use async_trait::async_trait;
use bmcfleet_provider::{BmcSession, Capability, Connector, Ctx, ProviderError, ResolvedCredentials, Result};
use bmcfleet_schema::{BmcTarget, ErrorCode, IpmiOptions, Protocol};
use std::net::SocketAddr;
use std::sync::Arc;
use tracing::Instrument;

/// The IPMI-over-LAN port (RMCP, UDP).
pub const DEFAULT_PORT: u16 = 623;

/// Opens IPMI 2.0 (RMCP+) sessions. Clones share the sockets every session
/// is multiplexed over (see [`RmcpSockets`]).
#[derive(Clone, Debug, Default)]
pub struct IpmiConnector {
    config: IpmiConfig,
    sockets: RmcpSockets,
}

impl IpmiConnector {
    pub fn new(config: IpmiConfig) -> Self {
        let sockets = RmcpSockets::new(config.sockets);
        IpmiConnector { config, sockets }
    }

    /// The shared sockets (open sockets, sessions, dropped datagrams).
    pub fn sockets(&self) -> &RmcpSockets {
        &self.sockets
    }

    /// Like [`Connector::connect`], returning the concrete session (tests and
    /// tools use it to read [`RmcpTransport::handshakes`]).
    pub async fn open(
        &self,
        ctx: &Ctx,
        target: &BmcTarget,
        credentials: &ResolvedCredentials,
    ) -> Result<IpmiSession<RmcpTransport>> {
        if !matches!(target.protocol, Protocol::Ipmi | Protocol::Auto) {
            return Err(ProviderError::new(
                ErrorCode::UnsupportedProtocol,
                format!("the IPMI provider cannot speak {}", target.protocol),
            ));
        }
        cmd::validate_user_name(&credentials.username)
            .map_err(|e| ProviderError::new(ErrorCode::InvalidField, format!("credentials: {e}")))?;
        cmd::validate_password(credentials.password.expose())
            .map_err(|e| ProviderError::new(ErrorCode::InvalidField, format!("credentials: {e}")))?;

        let bmc = target.address.to_string();
        let span = tracing::debug_span!("ipmi_connect", bmc = %bmc, protocol = "ipmi");
        async {
            // An address the worker already resolved and checked is used as is: no second lookup.
            let pinned = target.options.resolved.iter().find(|ip| ip.is_ipv4()).or(target.options.resolved.first());
            let peer = match pinned {
                Some(ip) => SocketAddr::new(*ip, target.address.port.unwrap_or(DEFAULT_PORT)),
                None => resolve(ctx, &target.address.authority(DEFAULT_PORT)).await?,
            };
            // The worker's fence, before the handshake's first packet.
            ctx.sending().await?;
            let transport = RmcpTransport::connect(
                &self.sockets,
                peer,
                credentials.username.clone(),
                credentials.password.clone(),
                rmcp_config(&self.config.rmcp, &target.options.ipmi)?,
                ctx.deadline,
                ctx.send_gate(),
            )
            .await?;
            if let (Some(proposed), Some(used)) = (transport.answered_other_than(), transport.cipher_suite()) {
                ctx.quirk(
                    "ipmi_cipher_suite_answered_other",
                    &format!("The BMC answered the proposal of {proposed} with {used}, which the machine's list allows (as pyghmi and VirtualBMC do); the session uses {used}."),
                );
            }
            let session = IpmiSession::new(transport, bmc.clone()).with_verify(self.config.verify);
            Ok(match self.config.channel {
                Some(channel) => session.with_channel(channel),
                None => session,
            })
        }
        .instrument(span)
        .await
    }
}

impl IpmiConnector {
    /// Opens a session to the machine's BMC (as [`IpmiConnector::open`]:
    /// fenced, the machine's suites and privilege) and activates Serial
    /// over LAN on it. *Already active* is `conflict` unless
    /// `options.take_over`.
    pub async fn open_console(
        &self,
        ctx: &Ctx,
        target: &BmcTarget,
        credentials: &ResolvedCredentials,
        options: SolOptions,
    ) -> Result<SolSession> {
        let session = self.open(ctx, target, credentials).await?;
        Ok(SolSession::open(session.into_transport(), options, ctx.deadline).await?)
    }
}

/// The session settings for one machine: the worker's, with the machine's
/// cipher-suite order and privilege where it names them (the worker's own,
/// shared, where it names neither).
fn rmcp_config(base: &Arc<RmcpConfig>, options: &IpmiOptions) -> Result<Arc<RmcpConfig>> {
    options.validate().map_err(|e| ProviderError::new(ErrorCode::InvalidField, e))?;
    if options.cipher_suites.is_empty() && options.privilege.is_none() {
        return Ok(base.clone());
    }
    let mut config = RmcpConfig::clone(base);
    if !options.cipher_suites.is_empty() {
        config.cipher_suites = options.cipher_suites.iter().filter_map(|id| CipherSuite::from_id(*id)).collect();
    }
    if let Some(privilege) = options.privilege {
        config.privilege = privilege;
    }
    Ok(Arc::new(config))
}

async fn resolve(ctx: &Ctx, authority: &str) -> Result<SocketAddr> {
    let lookup = tokio::net::lookup_host(authority.to_owned());
    let addrs = tokio::time::timeout_at(ctx.deadline, lookup)
        .await
        .map_err(|_| ProviderError::new(ErrorCode::DeadlineExceeded, format!("resolving {authority} took too long")))?
        .map_err(|e| ProviderError::new(ErrorCode::Unreachable, format!("cannot resolve {authority}: {e}")))?;
    let addrs: Vec<SocketAddr> = addrs.collect();
    addrs
        .iter()
        .find(|a| a.is_ipv4())
        .or_else(|| addrs.first())
        .copied()
        .ok_or_else(|| ProviderError::new(ErrorCode::Unreachable, format!("{authority} resolves to no address")))
}

#[async_trait]
impl Connector for IpmiConnector {
    fn protocol(&self) -> &'static str {
        "ipmi"
    }

    fn declared_capabilities(&self) -> &'static [Capability] {
        crate::CAPABILITIES
    }

    async fn connect(
        &self,
        ctx: &Ctx,
        target: &BmcTarget,
        credentials: &ResolvedCredentials,
    ) -> Result<Box<dyn BmcSession>> {
        Ok(Box::new(self.open(ctx, target, credentials).await?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bmcfleet_schema::IpmiPrivilege;

    #[test]
    fn a_machine_overrides_the_workers_suites_and_privilege_where_it_names_them() {
        let base = Arc::new(RmcpConfig::default());
        let same = rmcp_config(&base, &IpmiOptions::default()).unwrap();
        assert!(Arc::ptr_eq(&same, &base), "no copy per session without settings of the machine's own");
        assert_eq!(
            (same.cipher_suites.clone(), same.privilege),
            (vec![CipherSuite::S17, CipherSuite::S3], IpmiPrivilege::Administrator)
        );
        let options = IpmiOptions { cipher_suites: vec![3], privilege: Some(IpmiPrivilege::User) };
        let mine = rmcp_config(&base, &options).unwrap();
        assert_eq!((mine.cipher_suites.clone(), mine.privilege), (vec![CipherSuite::S3], IpmiPrivilege::User));
        let weak = IpmiOptions { cipher_suites: vec![1], privilege: None };
        assert_eq!(
            rmcp_config(&base, &weak).unwrap_err().code,
            ErrorCode::InvalidField,
            "the registry's rule holds here too"
        );
    }
}
