//! The BMC's HTTPS certificate.
//!
//! Read: the certificate the BMC presented on the session's own TLS
//! handshake (every Redfish session is HTTPS), described from its DER; the
//! Redfish Certificate resource of the HTTPS service
//! (`Managers/<id>/NetworkProtocol` → `HTTPS.Certificates`) is named where
//! the BMC links one and its `CertificateString` is the served certificate.
//!
//! Replace: only through `CertificateService.ReplaceCertificate`, and only
//! where the service root links a CertificateService advertising it (its
//! `@Redfish.ActionInfo`, when linked, must require nothing else than
//! `CertificateString`, `CertificateType` and `CertificateUri`, and allow
//! `PEM`), on the HTTPS certificate the NetworkProtocol resource links
//! (the one the BMC serves, when it links several). `CertificateString` is
//! the private key and the certificate in one PEM text (what bmcweb and the
//! DMTF mockups take for an HTTPS certificate). Before anything is sent:
//! the certificate and key are parsed, and a machine pinned by
//! `tls.pin_sha256` must already accept the new fingerprint (else it would
//! be unreachable afterwards). After the POST the change is read back on a
//! fresh connection pinned to the new certificate's SHA-256 (the BMC
//! restarts its web server: read again `state_poll_interval` apart while
//! the action has time); it succeeds only when the BMC serves exactly the
//! new certificate. The session is then spent (its connection pinned the
//! old certificate): the worker reconnects with the registry's pins.

use crate::discovery::{action_info_values, action_of, required_unsent};
use crate::error::{err, invalid, unsupported};
use crate::json::{allowable, link, members, str_of};
use crate::session::RedfishSession;
use bmcfleet_provider::tls::{check_private_key, describe_certificate, first_certificate, sha256, ServedCertificate};
use bmcfleet_provider::{BmcCertificates, Ctx, Outgoing, PlannedRequest, Result};
use bmcfleet_schema::{hex, BmcCertReplace, BmcCertificate, ErrorCode, TlsOptions};
use serde_json::json;
use std::sync::Arc;

const ROOT: &str = "/redfish/v1";
const REPLACE: &str = "#CertificateService.ReplaceCertificate";
/// The parameters bmcfleet sends with ReplaceCertificate.
const SENT: [&str; 3] = ["CertificateString", "CertificateType", "CertificateUri"];
/// Most members of the HTTPS certificate collection read to find the served one.
const MAX_CERTIFICATES: usize = 8;

fn described(der: &[u8]) -> Result<BmcCertificate> {
    describe_certificate(der, "tls_handshake")
        .map_err(|why| err(ErrorCode::ProtocolError, format!("the BMC's TLS certificate: {why}")))
}

impl RedfishSession {
    /// The DER of the certificate the BMC presented to this session.
    fn served_der(&self) -> Result<Vec<u8>> {
        self.served.get().ok_or_else(|| err(ErrorCode::Internal, "no TLS handshake with the BMC was seen"))
    }

    /// The Certificate resource of the HTTPS service the BMC serves `der`
    /// from: `Ok(None)` when the BMC links none (or several, none of which
    /// holds `der`).
    async fn https_certificate(&mut self, ctx: &Ctx, der: &[u8]) -> Result<Option<String>> {
        let Some(manager) = self.manager_path().map(str::to_owned) else { return Ok(None) };
        let m = self.transport.get(ctx, &manager).await?;
        let Some(np) = link(&m.body, "NetworkProtocol") else { return Ok(None) };
        let np = self.transport.get_linked(ctx, &np, "the Manager's NetworkProtocol").await?;
        let Some(coll) = np.body.get("HTTPS").and_then(|h| link(h, "Certificates")) else { return Ok(None) };
        let coll = self.transport.get_linked(ctx, &coll, "the HTTPS certificate collection").await?;
        let list = members(&coll.body);
        let mut candidates = Vec::new();
        for uri in list.iter().take(MAX_CERTIFICATES) {
            let c = self.transport.get(ctx, uri).await?;
            let holds = str_of(&c.body, "CertificateString").and_then(|pem| first_certificate(pem).ok());
            match holds {
                Some(d) if d == der => return Ok(Some(uri.clone())),
                Some(_) => {}
                None => candidates.push(uri.clone()),
            }
        }
        // A BMC that does not show the certificate's text: its only one.
        Ok((list.len() == 1 && candidates.len() == 1).then(|| candidates.remove(0)))
    }

    /// Where to POST ReplaceCertificate, checked against what the BMC
    /// advertises; `unsupported` (nothing sent) otherwise.
    async fn replace_target(&mut self, ctx: &Ctx) -> Result<String> {
        let root = self.transport.get(ctx, ROOT).await?;
        let svc = link(&root.body, "CertificateService")
            .ok_or_else(|| unsupported("the BMC has no CertificateService; nothing was sent"))?;
        let svc = self.transport.get_linked(ctx, &svc, "the CertificateService").await?;
        let (target, _, info) = action_of(&svc.body, REPLACE).ok_or_else(|| {
            unsupported("the BMC's CertificateService does not advertise CertificateService.ReplaceCertificate; nothing was sent")
        })?;
        let mut types = allowable(&svc.body["Actions"][REPLACE], "CertificateType");
        if let Some(info) = info {
            // An ActionInfo the BMC links but does not serve says nothing
            // of what the action takes: nothing is sent on a guess.
            let info = match self.transport.get(ctx, &info).await {
                Ok(r) => r.body,
                Err(e) if e.status.is_some() => {
                    return Err(unsupported(format!(
                        "the @Redfish.ActionInfo of CertificateService.ReplaceCertificate is unreadable ({}); \
                         nothing was sent",
                        e.message
                    )))
                }
                Err(e) => return Err(e),
            };
            let required = required_unsent(&info, &SENT);
            if !required.is_empty() {
                return Err(unsupported(format!(
                    "CertificateService.ReplaceCertificate requires {} (its @Redfish.ActionInfo), which bmcfleet \
                     does not send; nothing was sent",
                    required.join(", ")
                )));
            }
            types = types.or_else(|| action_info_values(&info, "CertificateType"));
        }
        if let Some(types) = types.filter(|t| !t.iter().any(|x| x == "PEM")) {
            return Err(unsupported(format!(
                "CertificateService.ReplaceCertificate takes CertificateType {}, not PEM; nothing was sent",
                if types.is_empty() { "none".into() } else { types.join(", ") }
            )));
        }
        Ok(target)
    }

    /// Read the new certificate back: a fresh connection pinned to `pin`
    /// reads the service root, again `state_poll_interval` apart while the
    /// action has time (the BMC restarts its web server). The certificate
    /// it served, or why the change does not show.
    async fn served_after(&mut self, ctx: &Ctx, pin: [u8; 32]) -> Result<Vec<u8>> {
        let tls = TlsOptions { pin_sha256: Some(hex(&pin)), ..TlsOptions::default() };
        let seen = Arc::new(ServedCertificate::default());
        let http = self.probe.connector.http_client(&self.probe.target, &tls, seen.clone())?;
        let url = format!("https://{}{ROOT}", self.probe.target.address.authority(443));
        let config = self.probe.connector.config().clone();
        loop {
            let budget = ctx.remaining()?.min(config.request_timeout);
            ctx.sending_request(|| {
                Outgoing::read(PlannedRequest::Redfish { method: "GET".into(), path: ROOT.into(), body: None })
            })
            .await?;
            let last = match http.get(&url).timeout(budget).send().await {
                Ok(_) => return seen.get().ok_or_else(|| err(ErrorCode::Internal, "no TLS handshake was seen")),
                Err(e) => match seen.get() {
                    Some(der) if sha256(&der) != pin => {
                        format!("it still serves the certificate with SHA-256 {}", hex(&sha256(&der)))
                    }
                    _ => format!("its HTTPS service does not answer ({})", crate::error::error_chain(&e)),
                },
            };
            let wait = config.state_poll_interval;
            if ctx.remaining().map_or(true, |left| left <= wait + config.connect_timeout.min(wait * 4)) {
                return Err(err(
                    ErrorCode::BmcError,
                    format!("the BMC accepted ReplaceCertificate but does not serve the new certificate: {last}"),
                ));
            }
            tokio::time::sleep(wait).await;
        }
    }
}

#[async_trait::async_trait]
impl BmcCertificates for RedfishSession {
    async fn bmc_certificate(&mut self, ctx: &Ctx) -> Result<BmcCertificate> {
        // The session's connection may be new since login: a request on it
        // makes sure the certificate noted is the one it serves now.
        self.transport.get(ctx, ROOT).await?;
        let der = self.served_der()?;
        let mut c = described(&der)?;
        c.uri = match self.https_certificate(ctx, &der).await {
            Ok(uri) => uri,
            Err(e) if e.code == ErrorCode::Unsupported => None,
            Err(e) => return Err(e),
        };
        Ok(c)
    }

    async fn replace_bmc_certificate(&mut self, ctx: &Ctx, replace: &BmcCertReplace) -> Result<BmcCertificate> {
        let leaf =
            first_certificate(&replace.certificate_pem).map_err(|why| invalid(format!("{why}; nothing was sent")))?;
        check_private_key(replace.private_key_pem.expose())
            .map_err(|why| invalid(format!("{why}; nothing was sent")))?;
        let wanted = describe_certificate(&leaf, "tls_handshake")
            .map_err(|why| invalid(format!("the new certificate: {why}; nothing was sent")))?;
        let pin = sha256(&leaf);
        let pins = self.probe.target.tls.pins().map_err(invalid)?;
        if !pins.is_empty() && !pins.contains(&pin) {
            return Err(invalid(format!(
                "the machine is pinned (tls.pin_sha256) and its record does not accept the new certificate \
                 (SHA-256 {}): add it to tls.pin_sha256 first (`bmcctl bmc-cert replace` does), else the machine \
                 would be unreachable afterwards; nothing was sent",
                wanted.sha256
            ))
            .not_sent());
        }
        // Which certificate first: a service that offers ReplaceCertificate
        // for other certificates (virtual media's, LDAP's) but links no
        // HTTPS one is not sent anything.
        let served = self.served_der()?;
        let uri = self.https_certificate(ctx, &served).await?.ok_or_else(|| {
            unsupported(
                "the BMC links no HTTPS certificate to replace (Manager NetworkProtocol HTTPS.Certificates, or \
                 several none of which is the one it serves); nothing was sent",
            )
        })?;
        let target = self.replace_target(ctx).await?;
        // Key and certificate in one PEM text; the plan and every log show
        // neither (a PEM private key is redacted wherever a string is shown).
        let mut text = replace.private_key_pem.expose().trim_end().to_owned();
        text.push('\n');
        text.push_str(replace.certificate_pem.trim_start());
        let body = json!({"CertificateString": text, "CertificateType": "PEM", "CertificateUri": {"@odata.id": uri}});
        self.transport.post(ctx, &target, &body).await?;
        // The session's connection pins the old certificate: spent.
        self.needs_reconnect = true;
        let now = self.served_after(ctx, pin).await?;
        let mut c = described(&now)?;
        if c.sha256 != wanted.sha256 {
            return Err(err(
                ErrorCode::BmcError,
                format!(
                    "the BMC serves the certificate with SHA-256 {} after ReplaceCertificate, not {}",
                    c.sha256, wanted.sha256
                ),
            ));
        }
        c.uri = Some(uri);
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replace_sends_only_what_the_bmc_takes() {
        assert_eq!(SENT, ["CertificateString", "CertificateType", "CertificateUri"]);
        let info = json!({"Parameters": [{"Name": "CertificateString", "Required": true},
            {"Name": "Password", "Required": true}]});
        assert_eq!(required_unsent(&info, &SENT), ["Password"]);
    }
}
