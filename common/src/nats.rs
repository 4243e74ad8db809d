//! Connecting to NATS with the configured credentials and TLS.

use crate::config::NatsArgs;
use async_nats::ConnectOptions;
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("cannot read NATS credentials file {path}: {source}")]
    Creds { path: String, source: std::io::Error },
    #[error("invalid NATS server address `{url}`: {source}")]
    Url { url: String, source: std::io::Error },
    #[error("cannot connect to NATS at {url}: {source}")]
    Connect { url: String, source: async_nats::ConnectError },
    #[error("NATS at {url} did not answer within {timeout:?}")]
    Timeout { url: String, timeout: Duration },
}

/// Connect, with reconnects forever after the first success.
pub async fn connect(args: &NatsArgs, name: &str) -> Result<async_nats::Client, ConnectError> {
    let mut opts = match &args.creds {
        Some(path) => ConnectOptions::with_credentials_file(path)
            .await
            .map_err(|source| ConnectError::Creds { path: path.display().to_string(), source })?,
        None => ConnectOptions::new(),
    };
    if let (Some(user), Some(password)) = (&args.user, &args.password) {
        opts = opts.user_and_password(user.clone(), password.expose().to_owned());
    }
    if let Some(ca) = &args.tls_ca {
        opts = opts.add_root_certificates(ca.clone()).require_tls(true);
    }
    if let (Some(cert), Some(key)) = (&args.tls_cert, &args.tls_key) {
        opts = opts.add_client_certificate(cert.clone(), key.clone()).require_tls(true);
    }
    opts = opts.name(name).connection_timeout(args.connect_timeout).max_reconnects(None).event_callback(
        |event| async move {
            match event {
                async_nats::Event::Connected => tracing::info!("Connected to NATS."),
                async_nats::Event::Disconnected => tracing::warn!("Disconnected from NATS; reconnecting."),
                other => tracing::info!(event = %other, "NATS event."),
            }
        },
    );
    let url = args.url.clone();
    let servers = server_addrs(&url)?;
    match tokio::time::timeout(args.connect_timeout, opts.connect(servers)).await {
        Ok(Ok(client)) => Ok(client),
        Ok(Err(source)) => Err(ConnectError::Connect { url, source }),
        Err(_) => Err(ConnectError::Timeout { url, timeout: args.connect_timeout }),
    }
}

/// Split a comma-separated list of NATS URLs into server addresses, so a
/// client can start from any node of a cluster.
pub fn server_addrs(urls: &str) -> Result<Vec<async_nats::ServerAddr>, ConnectError> {
    urls.split(',')
        .map(str::trim)
        .filter(|u| !u.is_empty())
        .map(|u| u.parse::<async_nats::ServerAddr>().map_err(|source| ConnectError::Url { url: u.to_owned(), source }))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_comma_separated_list_is_every_server() {
        let got = server_addrs("nats://127.0.0.1:4222, 127.0.0.1:4223,tls://a.example:4224").unwrap();
        let ports: Vec<u16> = got.iter().map(|a| a.port()).collect();
        assert_eq!(ports, vec![4222, 4223, 4224]);
        assert!(got[2].tls_required());
        assert!(server_addrs("nats://bad host:1").is_err());
    }
}
