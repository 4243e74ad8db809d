//! One HTTP POST to `/wsman`, authenticated with Digest, bounded by the
//! action deadline.
//!
//! # Authentication rounds
//!
//! A request first goes out with the cached nonce (next `nc`), or without
//! credentials when we have none. On a 401 the new challenge is adopted and
//! the request is sent once more. A 401 to credentials computed from a
//! challenge received *during this exchange* is final ([`AmtError::AuthFailed`]),
//! unless it says `stale=true` (the nonce expired in between), which is
//! allowed twice. So a wrong password costs exactly two requests and never
//! loops.

use crate::digest::{Challenge, ChallengeError, DigestState};
use crate::error::AmtError;
use crate::tls::{self, Trust};
use bmcfleet_schema::Secret;
use reqwest::header::{HeaderValue, AUTHORIZATION, CONTENT_TYPE, WWW_AUTHENTICATE};
use std::time::Duration;
use tokio::time::Instant;

/// The request-target every WS-Man call goes to (and the Digest `uri`).
pub const WSMAN_PATH: &str = "/wsman";
/// Stale-nonce re-challenges allowed within one exchange.
const MAX_STALE_ROUNDS: u32 = 2;

/// Transport knobs (see [`crate::AmtConfig`]).
#[derive(Clone, Debug)]
pub struct TransportOptions {
    pub connect_timeout: Duration,
    pub max_response_bytes: usize,
    /// A host name and the addresses to connect to for it (resolved and
    /// checked by the worker): the name is not looked up again.
    pub pinned: Option<(String, Vec<std::net::SocketAddr>)>,
}

/// A non-401 answer.
#[derive(Debug)]
pub struct HttpReply {
    pub status: u16,
    pub body: Vec<u8>,
}

/// HTTP(S) to one AMT, with its Digest state.
pub struct Transport {
    client: reqwest::Client,
    /// `http(s)://host:port/wsman`.
    url: String,
    username: String,
    /// Only handed to the Digest computation.
    password: Secret,
    /// Current challenge and nonce count, reused across calls.
    digest: DigestState,
    max_response_bytes: usize,
    /// The certificate the AMT presented (TLS only).
    served: std::sync::Arc<bmcfleet_provider::tls::ServedCertificate>,
}

impl Transport {
    pub fn new(
        url: String,
        trust: &Trust,
        username: String,
        password: Secret,
        opts: &TransportOptions,
    ) -> Result<Transport, AmtError> {
        // Always hand reqwest a preconfigured rustls config: it must never
        // look for a process-wide crypto provider.
        let served = std::sync::Arc::new(bmcfleet_provider::tls::ServedCertificate::default());
        let tls = tls::client_config(trust, served.clone())?;
        let mut builder = reqwest::Client::builder();
        if let Some((host, addrs)) = &opts.pinned {
            builder = builder.resolve_to_addrs(host, addrs);
        }
        let client = builder
            .no_proxy()
            .http1_only()
            .tls_backend_preconfigured(tls)
            .https_only(matches!(trust, Trust::CaPem(_) | Trust::Insecure))
            .connect_timeout(opts.connect_timeout)
            .pool_max_idle_per_host(1)
            .pool_idle_timeout(Duration::from_secs(20))
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("bmcfleet-amt/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| AmtError::Config(format!("HTTP client setup failed: {}", chain(&e))))?;
        Ok(Transport {
            client,
            url,
            username,
            password,
            digest: DigestState::default(),
            max_response_bytes: opts.max_response_bytes,
            served,
        })
    }

    /// The DER of the certificate the AMT presented on the last handshake
    /// (`None` over plain HTTP, or before any).
    pub fn served_certificate(&self) -> Option<Vec<u8>> {
        self.served.get()
    }

    /// Whether the transport speaks HTTPS.
    pub fn is_tls(&self) -> bool {
        self.url.starts_with("https://")
    }

    /// POST `body`; the whole exchange (all rounds, body read) ends by `deadline`.
    pub async fn post(&mut self, deadline: Instant, body: Vec<u8>) -> Result<HttpReply, AmtError> {
        match tokio::time::timeout_at(deadline, self.exchange(body)).await {
            Ok(r) => r,
            Err(_) => Err(AmtError::Timeout("the BMC did not answer completely within the action deadline".into())),
        }
    }

    async fn exchange(&mut self, body: Vec<u8>) -> Result<HttpReply, AmtError> {
        let mut fresh = false;
        let mut stale_rounds = 0;
        loop {
            let auth = self.digest.authorization("POST", WSMAN_PATH, &self.username, &self.password);
            let sent_credentials = auth.is_some();
            let mut req = self
                .client
                .post(&self.url)
                .header(CONTENT_TYPE, "application/soap+xml;charset=UTF-8")
                .body(body.clone());
            if let Some(a) = auth {
                let v = HeaderValue::from_str(&a).map_err(|_| {
                    AmtError::Protocol("the Digest challenge holds characters unusable in a header".into())
                })?;
                req = req.header(AUTHORIZATION, v);
            }
            let resp = req.send().await.map_err(map_reqwest)?;
            let status = resp.status().as_u16();
            if status != 401 {
                let body = self.read_body(resp).await?;
                return Ok(HttpReply { status, body });
            }
            let values: Vec<&str> =
                resp.headers().get_all(WWW_AUTHENTICATE).iter().filter_map(|v| v.to_str().ok()).collect();
            let challenge = Challenge::select(values).map_err(|e| match e {
                ChallengeError::Missing => AmtError::AuthFailed(e.to_string()),
                ChallengeError::Unsupported(_) => AmtError::Protocol(e.to_string()),
            })?;
            drop(resp);
            if sent_credentials && fresh {
                if challenge.stale && stale_rounds < MAX_STALE_ROUNDS {
                    stale_rounds += 1;
                    tracing::debug!(stale_rounds, "Digest nonce went stale; answering the new challenge.");
                    self.digest.set_challenge(challenge);
                    continue;
                }
                self.digest.clear();
                return Err(AmtError::AuthFailed(format!(
                    "the BMC rejected the credentials of user `{}` (401 to a fresh {} challenge)",
                    self.username,
                    challenge.algorithm.as_str()
                )));
            }
            tracing::debug!(
                cached_nonce = sent_credentials,
                stale = challenge.stale,
                algorithm = challenge.algorithm.as_str(),
                "Digest challenge received."
            );
            self.digest.set_challenge(challenge);
            fresh = true;
        }
    }

    async fn read_body(&self, mut resp: reqwest::Response) -> Result<Vec<u8>, AmtError> {
        let mut buf = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(map_reqwest)? {
            if buf.len() + chunk.len() > self.max_response_bytes {
                return Err(AmtError::Protocol(format!(
                    "the response is larger than {} bytes",
                    self.max_response_bytes
                )));
            }
            buf.extend_from_slice(&chunk);
        }
        Ok(buf)
    }
}

/// An error and all its sources, `: `-joined (reqwest's own text is terse).
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let t = c.to_string();
        if !s.contains(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        cur = c.source();
    }
    s
}

/// The rustls error behind a failed request, if any. `io::Error` hides its
/// inner error from `source()` (and hyper nests io errors), so look inside
/// those too.
fn find_rustls<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a rustls::Error> {
    let mut todo: Vec<&'a (dyn std::error::Error + 'static)> = vec![e];
    let mut steps = 0;
    while let Some(c) = todo.pop() {
        steps += 1;
        if steps > 32 {
            break;
        }
        if let Some(r) = c.downcast_ref::<rustls::Error>() {
            return Some(r);
        }
        if let Some(inner) = c.downcast_ref::<std::io::Error>().and_then(|io| io.get_ref()) {
            todo.push(inner);
        }
        if let Some(s) = c.source() {
            todo.push(s);
        }
    }
    None
}

fn io_kind(e: &(dyn std::error::Error + 'static)) -> Option<std::io::ErrorKind> {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cur {
        if let Some(io) = c.downcast_ref::<std::io::Error>() {
            return Some(io.kind());
        }
        cur = c.source();
    }
    None
}

fn map_reqwest(e: reqwest::Error) -> AmtError {
    if let Some(io) = bmcfleet_provider::descriptor_exhaustion(&e) {
        return AmtError::WorkerExhausted(io.to_string());
    }
    if let Some(t) = find_rustls(&e) {
        let hint = match t {
            rustls::Error::InvalidCertificate(_) => {
                "; give the BMC's CA certificate in tls.ca_pem (or opt in to tls.insecure)"
            }
            _ => "",
        };
        return AmtError::Tls(format!("{t}{hint}"));
    }
    let text = chain(&e);
    if e.is_timeout() {
        return AmtError::Timeout(format!("the BMC did not answer in time: {text}"));
    }
    if e.is_connect() {
        // No connection, so no request.
        return AmtError::ConnectFailed(text);
    }
    if e.is_body() || e.is_decode() {
        use std::io::ErrorKind::*;
        return match io_kind(&e) {
            Some(ConnectionReset | ConnectionAborted | BrokenPipe | UnexpectedEof) => AmtError::Unreachable(text),
            _ => AmtError::Protocol(format!("reading the response failed: {text}")),
        };
    }
    AmtError::Unreachable(text)
}
