//! Discovery's Redfish probe (docs/BMCCTL.md "Discovery"): one
//! unauthenticated `GET /redfish/v1/` over TLS to an address that is not a
//! registered machine. The certificate is not verified (nothing is trusted
//! or sent on it) but its SHA-256 is recorded, for the proposed record's
//! `tls.pin_sha256`. No credential is ever sent: the client has no
//! authentication configured, no `Authorization` header, follows no
//! redirect and uses no proxy; an answer is read only up to
//! [`MAX_ROOT_BYTES`].

use bmcfleet_provider::tls::{crypto_provider, recording_certificate};
use bmcfleet_schema::discover::Found;
use bmcfleet_schema::Protocol;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

/// The most of a service root read (real ones are a few KiB).
pub const MAX_ROOT_BYTES: usize = 256 * 1024;

/// Probe `ip:port` for a Redfish service; `None` when nothing there
/// answers as one (closed port, no TLS, not a service root) within `timeout`.
pub async fn discover(ip: IpAddr, port: u16, timeout: Duration) -> Option<Found> {
    match tokio::time::timeout(timeout, fetch(SocketAddr::new(ip, port), timeout)).await {
        Ok(Ok(found)) => found,
        Ok(Err(why)) => {
            tracing::debug!(%ip, port, error = %why, "Discovery: no Redfish service.");
            None
        }
        Err(_) => None,
    }
}

async fn fetch(addr: SocketAddr, timeout: Duration) -> Result<Option<Found>, String> {
    let provider = crypto_provider();
    let (verifier, record) = recording_certificate(&provider);
    let mut tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| e.to_string())?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    tls.alpn_protocols = vec![b"http/1.1".to_vec()];
    let http = reqwest::Client::builder()
        .tls_backend_preconfigured(tls)
        .https_only(true)
        .http1_only()
        .redirect(reqwest::redirect::Policy::none())
        .retry(reqwest::retry::never())
        .no_proxy()
        .connect_timeout(timeout)
        .pool_max_idle_per_host(0)
        .user_agent(concat!("bmcfleet-discovery/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| e.to_string())?;
    let url = format!("https://{addr}/redfish/v1/");
    let mut response =
        http.get(&url).header(reqwest::header::ACCEPT, "application/json").send().await.map_err(|e| e.to_string())?;
    if !response.status().is_success() {
        return Err(format!("service root answered {}", response.status()));
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| e.to_string())? {
        if body.len() + chunk.len() > MAX_ROOT_BYTES {
            return Err(format!("service root larger than {MAX_ROOT_BYTES} bytes"));
        }
        body.extend_from_slice(&chunk);
    }
    let root: serde_json::Value = serde_json::from_slice(&body).map_err(|e| format!("not JSON: {e}"))?;
    Ok(read_root(addr, &root, record.sha256_hex()))
}

/// What a service root says, if it is one: a `RedfishVersion`, or an
/// `@odata.type` of `#ServiceRoot.…`.
pub fn read_root(addr: SocketAddr, root: &serde_json::Value, pin_sha256: Option<String>) -> Option<Found> {
    let text = |key: &str| root.get(key).and_then(|v| v.as_str()).map(short).filter(|s| !s.is_empty());
    let is_root = root.get("RedfishVersion").is_some_and(|v| v.is_string())
        || text("@odata.type").is_some_and(|t| t.starts_with("#ServiceRoot."));
    if !is_root {
        return None;
    }
    // `Vendor` (Redfish 1.5+), else the first `Oem` key (`Dell`, `Hpe`, `Supermicro`, ...).
    let vendor = text("Vendor")
        .or_else(|| root.get("Oem").and_then(|o| o.as_object()).and_then(|o| o.keys().next()).map(|k| short(k)));
    Some(Found {
        address: addr.ip(),
        port: addr.port(),
        protocol: Protocol::Redfish,
        vendor,
        product: text("Product"),
        version: text("RedfishVersion"),
        uuid: text("UUID"),
        pin_sha256,
        asf: None,
    })
}

/// An untrusted string as a report may carry it: printable, at most 128 characters.
fn short(s: &str) -> String {
    s.chars().filter(|c| !c.is_control()).take(128).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_service_root_is_read_and_anything_else_is_not() {
        let addr: SocketAddr = "127.0.0.1:443".parse().unwrap();
        let root = serde_json::json!({
            "@odata.type": "#ServiceRoot.v1_11_0", "RedfishVersion": "1.11.0", "Vendor": "Dell",
            "Product": "Integrated Dell Remote Access Controller", "UUID": "4c4c4544", "Oem": {"Dell": {}}
        });
        let f = read_root(addr, &root, Some("ab".repeat(32))).unwrap();
        assert_eq!(f.vendor.as_deref(), Some("Dell"));
        assert_eq!(f.product.as_deref(), Some("Integrated Dell Remote Access Controller"));
        assert_eq!(f.version.as_deref(), Some("1.11.0"));
        let old = serde_json::json!({"@odata.type": "#ServiceRoot.v1_0_2", "Oem": {"Hpe": {}}});
        assert_eq!(read_root(addr, &old, None).unwrap().vendor.as_deref(), Some("Hpe"));
        assert_eq!(read_root(addr, &serde_json::json!({"status": "ok"}), None), None);
        let noisy = serde_json::json!({"RedfishVersion": "1.0\n\u{1b}[31m", "Vendor": "x".repeat(500)});
        let f = read_root(addr, &noisy, None).unwrap();
        assert_eq!(f.version.as_deref(), Some("1.0[31m"));
        assert_eq!(f.vendor.unwrap().len(), 128);
    }
}
