//! [`RedfishConnector`]: builds a per-BMC HTTPS client (its own TLS trust),
//! logs in and discovers the service.

use crate::config::RedfishConfig;
use crate::discovery::Service;
use crate::error::err;
use crate::session::RedfishSession;
use crate::tls::{client_config, SystemRoots};
use crate::transport::{AnswerMemory, Transport};
use bmcfleet_provider::tls::ServedCertificate;
use bmcfleet_provider::{BmcSession, Capability, Connector, Ctx, ResolvedCredentials, Result};
use bmcfleet_schema::{BmcTarget, ErrorCode, Protocol, TlsOptions};
use reqwest::header::{HeaderMap, HeaderValue, ACCEPT};
use std::sync::Arc;
use std::time::Duration;

/// Opens Redfish sessions over HTTPS (default port 443).
#[derive(Debug)]
pub struct RedfishConnector {
    config: Arc<RedfishConfig>,
    /// Bytes of BMC answers all sessions opened here hold at once
    /// (`max_buffered_bytes`).
    memory: AnswerMemory,
    /// The host trust store, read once and shared by every BMC without its own CA.
    system_roots: SystemRoots,
}

impl Default for RedfishConnector {
    fn default() -> Self {
        RedfishConnector::new(RedfishConfig::default())
    }
}

impl RedfishConnector {
    pub fn new(config: RedfishConfig) -> Self {
        let memory = AnswerMemory::new(config.max_buffered_bytes);
        RedfishConnector { config: Arc::new(config), memory, system_roots: SystemRoots::default() }
    }

    pub fn config(&self) -> &RedfishConfig {
        &self.config
    }

    /// Bytes of BMC answers this connector's sessions hold now (being read,
    /// or read and not yet dropped), of `max_buffered_bytes`.
    pub fn answer_bytes_held(&self) -> usize {
        self.memory.held()
    }

    /// Like [`Connector::connect`], returning the concrete session type.
    pub async fn open(
        &self,
        ctx: &Ctx,
        target: &BmcTarget,
        credentials: &ResolvedCredentials,
    ) -> Result<RedfishSession> {
        if !matches!(target.protocol, Protocol::Redfish | Protocol::Auto) {
            return Err(err(
                ErrorCode::UnsupportedProtocol,
                format!("the redfish connector cannot open a {} target", target.protocol),
            ));
        }
        let served = Arc::new(ServedCertificate::default());
        let http = self.http_client(target, &target.tls, served.clone())?;
        let base = format!("https://{}", target.address.authority(443));
        let mut transport = Transport::new(
            http,
            base,
            target.address.to_string(),
            credentials,
            self.config.clone(),
            self.memory.clone(),
            target.options.redfish.auth,
        );
        let root = transport.service_root(ctx).await?;
        transport.login(ctx, &root).await?;
        let service = match Service::discover(&mut transport, ctx, &root, target.system_id.as_deref()).await {
            Ok(s) => s,
            Err(e) => {
                transport.logout().await;
                return Err(e);
            }
        };
        Ok(RedfishSession {
            transport,
            service,
            bmc_address: target.address.clone(),
            needs_reconnect: false,
            served,
            probe: Probe { connector: self.clone_for_probe(), target: probe_target(target) },
        })
    }

    /// The HTTPS client of one BMC: `tls` its trust (the target's, or a
    /// pin to the certificate a replacement installed), every certificate
    /// the BMC presents noted in `served`.
    pub(crate) fn http_client(
        &self,
        target: &BmcTarget,
        tls: &TlsOptions,
        served: Arc<ServedCertificate>,
    ) -> Result<reqwest::Client> {
        let tls = client_config(tls, &self.system_roots, served)?;
        let mut headers = HeaderMap::new();
        headers.insert(ACCEPT, HeaderValue::from_static("application/json"));
        headers.insert("OData-Version", HeaderValue::from_static("4.0"));
        let mut builder = reqwest::Client::builder();
        if let (Some(host), false) =
            (target.address.ip().is_none().then(|| target.address.host_string()), target.options.resolved.is_empty())
        {
            // Connect to what the worker resolved and checked; never look the name up again.
            let addrs: Vec<std::net::SocketAddr> =
                target.options.resolved.iter().map(|ip| std::net::SocketAddr::new(*ip, 0)).collect();
            builder = builder.resolve_to_addrs(&host, &addrs);
        }
        builder
            .tls_backend_preconfigured(tls)
            .https_only(true)
            .http1_only()
            .redirect(reqwest::redirect::Policy::none())
            .retry(reqwest::retry::never())
            .no_proxy()
            .connect_timeout(self.config.connect_timeout)
            .pool_idle_timeout(Duration::from_secs(30))
            .pool_max_idle_per_host(2)
            .tcp_nodelay(true)
            .user_agent(self.config.user_agent.clone())
            .default_headers(headers)
            .build()
            .map_err(|e| err(ErrorCode::Internal, format!("building the HTTPS client: {e}")))
    }

    /// What a session keeps of its connector to open a probe connection
    /// (configuration; the host trust store is not needed: a probe pins).
    fn clone_for_probe(&self) -> RedfishConnector {
        RedfishConnector {
            config: self.config.clone(),
            memory: self.memory.clone(),
            system_roots: SystemRoots::default(),
        }
    }
}

/// The target as a probe needs it: address, TLS and resolved addresses;
/// no credentials (a probe reads the unauthenticated service root).
fn probe_target(target: &BmcTarget) -> BmcTarget {
    BmcTarget { credentials: bmcfleet_schema::Credentials::Ref(String::new()), ..target.clone() }
}

/// A connection of its own to the session's BMC, opened after the BMC's
/// certificate changed (the session's connection pins the old one).
#[derive(Debug)]
pub(crate) struct Probe {
    pub connector: RedfishConnector,
    pub target: BmcTarget,
}

#[async_trait::async_trait]
impl Connector for RedfishConnector {
    fn protocol(&self) -> &'static str {
        "redfish"
    }

    fn declared_capabilities(&self) -> &'static [Capability] {
        <RedfishSession as bmcfleet_provider::Offer>::offered()
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
