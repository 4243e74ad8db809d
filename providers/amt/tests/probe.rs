//! Discovery's AMT probe against the AMT fixture server (plain HTTP and
//! TLS) and a port that is not AMT: found by its banner only, and the
//! Digest challenge is never answered.

use bmcfleet_testing::amt::{AmtFixtureServer, ServerOptions};
use std::time::Duration;

#[tokio::test]
async fn the_amt_banner_is_found_over_http_and_tls_without_credentials() {
    for tls in [false, true] {
        let server = AmtFixtureServer::start_for_test(ServerOptions { tls, ..ServerOptions::default() }).await;
        let addr = server.addr();
        let found = bmcfleet_amt::probe::discover(addr.ip(), addr.port(), Duration::from_secs(2))
            .await
            .unwrap_or_else(|| panic!("AMT (tls: {tls}) not found"));
        assert_eq!(found.version.as_deref(), Some("15.0.23.1706"));
        assert_eq!(found.pin_sha256.is_some(), tls, "the certificate is recorded over TLS only");
        assert!(!server.requests().is_empty());
        assert!(server.requests().iter().all(|r| r.digest.is_none()), "a credential was sent");
    }
}

#[tokio::test]
async fn a_port_that_is_not_amt_is_nothing() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            use tokio::io::AsyncWriteExt;
            let _ = s.write_all(b"HTTP/1.1 200 OK\r\nServer: nginx\r\nContent-Length: 0\r\n\r\n").await;
        }
    });
    assert!(bmcfleet_amt::probe::discover("127.0.0.1".parse().unwrap(), port, Duration::from_millis(500))
        .await
        .is_none());
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    assert!(bmcfleet_amt::probe::discover("127.0.0.1".parse().unwrap(), port, Duration::from_millis(500))
        .await
        .is_none());
}
