//! [`AmtConnector`]: opens [`AmtSession`]s.
//!
//! # Transport selection
//!
//! AMT listens on 16992 (HTTP) and 16993 (TLS). `BmcTarget` has no scheme,
//! so the port and the TLS options decide:
//!
//! | address port | `tls.ca_pem` / `tls.insecure` | transport                 |
//! |--------------|-------------------------------|---------------------------|
//! | none         | neither                       | HTTP on 16992             |
//! | none         | either                        | HTTPS on 16993            |
//! | 16992        | neither                       | HTTP                      |
//! | 16992        | either                        | refused (`invalid_field`) |
//! | 16993        | neither                       | refused: TLS needs a CA or an explicit `insecure` |
//! | 16993        | either                        | HTTPS                     |
//! | other        | neither / either              | HTTP / HTTPS              |
//!
//! With both options set, `ca_pem` wins (verification is kept).
//! [`AmtConfig::require_tls`] refuses plain HTTP altogether.

use crate::config::AmtConfig;
use crate::error::AmtError;
use crate::session::AmtSession;
use crate::tls::Trust;
use crate::transport::{Transport, TransportOptions, WSMAN_PATH};
use crate::wsman::client::WsmanClient;
use async_trait::async_trait;
use bmcfleet_provider::{BmcSession, Capability, Connector, Ctx, ProviderError, ResolvedCredentials};
use bmcfleet_schema::BmcTarget;

pub const HTTP_PORT: u16 = 16992;
pub const TLS_PORT: u16 = 16993;

/// The `amt` provider.
#[derive(Clone, Debug, Default)]
pub struct AmtConnector {
    config: AmtConfig,
}

impl AmtConnector {
    pub fn new(config: AmtConfig) -> Self {
        AmtConnector { config }
    }

    /// Open a session without the `dyn` box (tests, direct users).
    pub async fn open(
        &self,
        ctx: &Ctx,
        target: &BmcTarget,
        credentials: &ResolvedCredentials,
    ) -> Result<AmtSession, ProviderError> {
        ctx.remaining()?;
        let (url, trust) = endpoint(target, self.config.require_tls)?;
        let pinned = (target.address.ip().is_none() && !target.options.resolved.is_empty()).then(|| {
            (
                target.address.host_string(),
                target.options.resolved.iter().map(|ip| std::net::SocketAddr::new(*ip, 0)).collect(),
            )
        });
        let opts = TransportOptions {
            connect_timeout: self.config.connect_timeout,
            max_response_bytes: self.config.max_response_bytes,
            pinned,
        };
        let transport = Transport::new(url, &trust, credentials.username.clone(), credentials.password.clone(), &opts)?;
        let mut client = WsmanClient::new(transport, target.address.to_string());
        // Probe: reachability, TLS trust, credentials and "is this AMT" in one call.
        client.get(ctx, "AMT_GeneralSettings", &[]).await.map_err(|e| {
            tracing::info!(bmc = %target.address, error = %e, "AMT connect failed.");
            ProviderError::from(e)
        })?;
        tracing::debug!(bmc = %target.address, "AMT session open.");
        Ok(AmtSession::new(client))
    }
}

/// The `/wsman` URL and certificate trust for a target (table in the module docs).
pub fn endpoint(target: &BmcTarget, require_tls: bool) -> Result<(String, Trust), AmtError> {
    let tls_opts = &target.tls;
    let pins = tls_opts.pins().map_err(AmtError::Config)?;
    let pin = (!pins.is_empty()).then_some(pins);
    let wants_tls = tls_opts.ca_pem.is_some() || tls_opts.insecure || pin.is_some();
    let port = target.address.port;
    let tls = match port {
        Some(HTTP_PORT) if wants_tls => {
            return Err(AmtError::Config(format!(
                "port {HTTP_PORT} is AMT's plain-HTTP port; TLS options need port {TLS_PORT}"
            )))
        }
        Some(TLS_PORT) if !wants_tls => {
            return Err(AmtError::Config(format!(
                "AMT TLS (port {TLS_PORT}) needs the BMC's CA in tls.ca_pem, or an explicit tls.insecure"
            )))
        }
        _ => wants_tls,
    };
    if !tls && (require_tls || !tls_opts.allow_plain_http) {
        let why = if require_tls {
            "this worker requires TLS for AMT"
        } else {
            "AMT over plain HTTP lets an observer record the Digest exchange"
        };
        return Err(AmtError::Config(format!(
            "{why}: give the machine tls.ca_pem (or tls.pin_sha256) and use port 16993, or allow plain HTTP for this machine (tls.allow_plain_http)"
        )));
    }
    let (scheme, default_port) = if tls { ("https", TLS_PORT) } else { ("http", HTTP_PORT) };
    let url = format!("{scheme}://{}{WSMAN_PATH}", target.address.authority(default_port));
    let trust = match (&tls_opts.ca_pem, pin, tls) {
        (_, _, false) => Trust::Nothing,
        (_, Some(sha256), true) => Trust::Pinned(sha256),
        (Some(pem), None, true) => Trust::CaPem(pem.clone()),
        (None, None, true) => Trust::Insecure,
    };
    Ok((url, trust))
}

#[async_trait]
impl Connector for AmtConnector {
    fn protocol(&self) -> &'static str {
        "amt"
    }

    fn declared_capabilities(&self) -> &'static [Capability] {
        <crate::AmtSession as bmcfleet_provider::Offer>::offered()
    }

    async fn connect(
        &self,
        ctx: &Ctx,
        target: &BmcTarget,
        credentials: &ResolvedCredentials,
    ) -> Result<Box<dyn BmcSession>, ProviderError> {
        Ok(Box::new(self.open(ctx, target, credentials).await?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bmcfleet_schema::{Credentials, Protocol, TlsOptions};

    fn target(addr: &str, ca: Option<&str>, insecure: bool) -> BmcTarget {
        BmcTarget {
            address: addr.parse().unwrap(),
            protocol: Protocol::Amt,
            credentials: Credentials::Ref("x".into()),
            tls: TlsOptions { insecure, ca_pem: ca.map(str::to_owned), pin_sha256: None, allow_plain_http: true },
            system_id: None,
            options: Default::default(),
        }
    }

    #[test]
    fn transport_selection_table() {
        let e = |a, ca, ins| endpoint(&target(a, ca, ins), false);
        assert_eq!(e("10.0.0.5", None, false).unwrap(), ("http://10.0.0.5:16992/wsman".into(), Trust::Nothing));
        assert_eq!(e("10.0.0.5", None, true).unwrap(), ("https://10.0.0.5:16993/wsman".into(), Trust::Insecure));
        assert_eq!(
            e("10.0.0.5", Some("P"), true).unwrap(),
            ("https://10.0.0.5:16993/wsman".into(), Trust::CaPem("P".into()))
        );
        assert_eq!(e("10.0.0.5:16992", None, false).unwrap().0, "http://10.0.0.5:16992/wsman");
        assert!(matches!(e("10.0.0.5:16992", Some("P"), false), Err(AmtError::Config(_))));
        assert!(matches!(e("10.0.0.5:16993", None, false), Err(AmtError::Config(_))));
        assert_eq!(e("[fe80::1]:8443", Some("P"), false).unwrap().0, "https://[fe80::1]:8443/wsman");
        assert_eq!(e("nuc-3.lab:8080", None, false).unwrap().0, "http://nuc-3.lab:8080/wsman");
        assert!(matches!(endpoint(&target("10.0.0.5", None, false), true), Err(AmtError::Config(_))));
        assert!(endpoint(&target("10.0.0.5", None, true), true).is_ok());
        // Plain HTTP only where the machine's record allows it.
        let mut strict = target("10.0.0.5", None, false);
        strict.tls.allow_plain_http = false;
        let e = endpoint(&strict, false).unwrap_err();
        assert!(e.to_string().contains("allow_plain_http"), "{e}");
        strict.tls.insecure = true;
        assert_eq!(endpoint(&strict, false).unwrap().1, Trust::Insecure);
    }
}
