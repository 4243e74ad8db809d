//! Discovery's AMT probe (docs/BMCCTL.md "Discovery"): one unauthenticated
//! `GET /` to a port of an address that is not a registered machine, over
//! TLS first (16993) and plain HTTP when the port does not speak TLS
//! (16992). AMT answers every request with a `Server: Intel(R) Active
//! Management Technology <version>` banner (a 401 Digest challenge at
//! least); a port that answers anything else, or nothing, is not AMT. The
//! challenge is never answered: no credential is sent. The TLS
//! certificate is not verified, its SHA-256 is recorded.

use bmcfleet_provider::tls::{crypto_provider, recording_certificate};
use bmcfleet_schema::discover::Found;
use bmcfleet_schema::Protocol;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

/// The banner AMT answers with (before its version).
pub const BANNER: &str = "Intel(R) Active Management Technology";

/// Probe `ip:port` for Intel AMT; `None` when nothing there answers as AMT within `timeout`.
pub async fn discover(ip: IpAddr, port: u16, timeout: Duration) -> Option<Found> {
    let addr = SocketAddr::new(ip, port);
    let deadline = tokio::time::Instant::now() + timeout;
    // Half the time for TLS: a plain HTTP server may wait for the end of a
    // request head that a TLS ClientHello never brings.
    let tls = tokio::time::timeout(timeout / 2, get(addr, true, timeout)).await;
    match tls {
        Ok(Ok((server, pin))) => found(addr, &server, pin),
        // A refused port is not worth a second connection.
        Ok(Err(Failure::Connect)) => None,
        Ok(Err(Failure::Other)) | Err(_) => match tokio::time::timeout_at(deadline, get(addr, false, timeout)).await {
            Ok(Ok((server, _))) => found(addr, &server, None),
            _ => None,
        },
    }
}

enum Failure {
    /// Nothing accepted the connection.
    Connect,
    /// Something did, but not as AMT over this scheme.
    Other,
}

async fn get(addr: SocketAddr, tls: bool, timeout: Duration) -> Result<(String, Option<String>), Failure> {
    let provider = crypto_provider();
    let (verifier, record) = recording_certificate(&provider);
    let mut builder = reqwest::Client::builder()
        .http1_only()
        .redirect(reqwest::redirect::Policy::none())
        .retry(reqwest::retry::never())
        .no_proxy()
        .connect_timeout(timeout)
        .pool_max_idle_per_host(0)
        .user_agent(concat!("bmcfleet-discovery/", env!("CARGO_PKG_VERSION")));
    // A TLS configuration even for plain HTTP: the client refuses to be
    // built without one (no process-wide crypto provider is installed).
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|_| Failure::Other)?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    builder = builder.tls_backend_preconfigured(config).https_only(tls);
    let http = builder.build().map_err(|_| Failure::Other)?;
    let url = format!("{}://{addr}/", if tls { "https" } else { "http" });
    let response = http.get(&url).send().await.map_err(|e| {
        tracing::debug!(%addr, tls, error = %e, "Discovery: no AMT answer.");
        if e.is_connect() && record.sha256().is_none() && !tls_failure(&e) {
            Failure::Connect
        } else {
            Failure::Other
        }
    })?;
    let server = response
        .headers()
        .get(reqwest::header::SERVER)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .chars()
        .filter(|c| !c.is_control())
        .take(128)
        .collect();
    Ok((server, record.sha256_hex()))
}

/// Whether a connect error is the TLS handshake's (a plain HTTP port), not the TCP connection's.
fn tls_failure(e: &reqwest::Error) -> bool {
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        if s.downcast_ref::<rustls::Error>().is_some() {
            return true;
        }
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            return !matches!(
                io.kind(),
                std::io::ErrorKind::ConnectionRefused
                    | std::io::ErrorKind::TimedOut
                    | std::io::ErrorKind::HostUnreachable
            );
        }
        source = s.source();
    }
    false
}

fn found(addr: SocketAddr, server: &str, pin_sha256: Option<String>) -> Option<Found> {
    let version = server.strip_prefix(BANNER)?.trim();
    Some(Found {
        address: addr.ip(),
        port: addr.port(),
        protocol: Protocol::Amt,
        vendor: Some("Intel".into()),
        product: Some(BANNER.into()),
        version: (!version.is_empty()).then(|| version.to_owned()),
        uuid: None,
        pin_sha256,
        asf: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_amt_banner_is_amt() {
        let addr: SocketAddr = "127.0.0.1:16993".parse().unwrap();
        let f = found(addr, "Intel(R) Active Management Technology 15.0.23.1706", None).unwrap();
        assert_eq!(f.version.as_deref(), Some("15.0.23.1706"));
        assert_eq!(f.protocol, Protocol::Amt);
        assert!(found(addr, "nginx/1.25", None).is_none());
        assert!(found(addr, "", None).is_none());
    }
}
