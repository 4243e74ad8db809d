//! [`RedfishSession`]: one authenticated conversation with one BMC, with the
//! service structure discovered at connect time. The capability traits are
//! implemented in their own modules (`power.rs`, `boot.rs`, ...).

use crate::discovery::{ResetAction, Service};
use crate::transport::{AuthKind, Transport};
use bmcfleet_provider::BmcSession;
use bmcfleet_schema::BmcAddress;

/// An open Redfish session. Obtain one with
/// [`RedfishConnector::open`](crate::RedfishConnector::open) (concrete type,
/// for tests and tools) or through [`bmcfleet_provider::Connector::connect`].
pub struct RedfishSession {
    pub(crate) transport: Transport,
    pub(crate) service: Service,
    /// The target address: network changes that touch it end the session.
    pub(crate) bmc_address: BmcAddress,
    /// Set after a BMC reset or a change of the BMC's own address: the
    /// session token (and maybe the address) is gone, so the worker should
    /// reconnect instead of reusing this session.
    pub(crate) needs_reconnect: bool,
    /// The certificate the BMC presented on this session's connection.
    pub(crate) served: std::sync::Arc<bmcfleet_provider::tls::ServedCertificate>,
    /// How to open a connection of its own (a certificate's read-back).
    pub(crate) probe: crate::connector::Probe,
}

impl RedfishSession {
    /// How this session authenticates (`Session` token or HTTP `Basic`).
    pub fn auth_kind(&self) -> Option<AuthKind> {
        self.transport.auth_kind()
    }

    /// The ComputerSystem this session drives (`@odata.id`).
    pub fn system_path(&self) -> &str {
        &self.service.system.path
    }

    /// The ComputerSystem's `Id`.
    pub fn system_id(&self) -> &str {
        &self.service.system.id
    }

    /// The Manager this session uses for BMC capabilities, if the BMC has one.
    pub fn manager_path(&self) -> Option<&str> {
        self.service.manager.as_ref().map(|m| m.path.as_str())
    }

    /// `Vendor` from the service root (or its first `Oem` key).
    pub fn vendor(&self) -> Option<&str> {
        self.service.root.vendor.as_deref()
    }

    /// The system's `ComputerSystem.Reset` action as discovered (target and
    /// allowable reset types after normalisation).
    pub fn system_reset(&self) -> Option<&ResetAction> {
        self.service.system.reset.as_ref()
    }
}

#[async_trait::async_trait]
impl BmcSession for RedfishSession {
    fn provider(&self) -> &'static str {
        "redfish"
    }

    fn is_healthy(&self) -> bool {
        !self.transport.is_broken() && !self.needs_reconnect
    }

    async fn close(&mut self) {
        self.transport.logout().await;
    }
}
