//! The operations HTTP endpoint of the gateway and the worker:
//! - `GET /metrics`: the process's Prometheus registry (OpenMetrics text);
//! - `GET /healthz`: 200 while the process runs;
//! - `GET /readyz`: 200 when the process's readiness check passes, else 503.
//!
//! The registry is handed in (no global state). Binding port 0 picks a free
//! port; the bound address is logged as `Metrics listening on <addr>.`

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use prometheus_client::registry::Registry;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Answers `/readyz`: true when the process can do its work.
pub type Readiness = Arc<dyn Fn() -> bool + Send + Sync>;

/// The readiness of a gateway or worker: connected to NATS (and the
/// connection holds) while its main loop runs.
#[derive(Default)]
pub struct Ready {
    client: std::sync::OnceLock<async_nats::Client>,
    running: std::sync::atomic::AtomicBool,
}

impl Ready {
    pub fn new() -> Arc<Ready> {
        Arc::default()
    }

    /// The check `/readyz` answers with.
    pub fn check(self: &Arc<Self>) -> Readiness {
        let me = self.clone();
        Arc::new(move || {
            me.running.load(std::sync::atomic::Ordering::SeqCst)
                && me.client.get().is_some_and(|c| c.connection_state() == async_nats::connection::State::Connected)
        })
    }

    /// The NATS connection whose state counts (set once, when connected).
    pub fn connected(&self, client: &async_nats::Client) {
        let _ = self.client.set(client.clone());
    }

    /// Whether the main loop runs.
    pub fn running(&self, running: bool) {
        self.running.store(running, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Content type of the OpenMetrics text exposition `prometheus-client` writes.
pub const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// A running endpoint; stops on [`Server::stop`] (or when dropped with its task aborted).
pub struct Server {
    /// The bound address (the real port when 0 was asked for).
    pub addr: SocketAddr,
    stop: CancellationToken,
    task: JoinHandle<()>,
}

/// The metrics endpoint could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("cannot serve /metrics, /healthz and /readyz on {addr}: {source} (choose another --metrics-addr, port 0 for any free port, or `off`)")]
    Bind { addr: SocketAddr, source: std::io::Error },
}

struct State {
    registry: Registry,
    ready: Readiness,
}

impl Server {
    /// Bind `addr` and serve until [`Server::stop`].
    pub async fn start(addr: SocketAddr, registry: Registry, ready: Readiness) -> Result<Server, ServeError> {
        let listener = TcpListener::bind(addr).await.map_err(|source| ServeError::Bind { addr, source })?;
        let addr = listener.local_addr().map_err(|source| ServeError::Bind { addr, source })?;
        tracing::info!(addr = %addr, "Metrics listening on {addr}.");
        let stop = CancellationToken::new();
        let state = Arc::new(State { registry, ready });
        let task = tokio::spawn(accept(listener, state, stop.clone()));
        Ok(Server { addr, stop, task })
    }

    /// Stop accepting; open connections finish their current request.
    pub async fn stop(self) {
        self.stop.cancel();
        let _ = self.task.await;
    }
}

async fn accept(listener: TcpListener, state: Arc<State>, stop: CancellationToken) {
    loop {
        let (stream, _) = tokio::select! {
            _ = stop.cancelled() => return,
            r = listener.accept() => match r {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!(error = %e, "Metrics endpoint: accept failed.");
                    continue;
                }
            },
        };
        let state = state.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let state = state.clone();
                async move { Ok::<_, Infallible>(respond(&state, &req)) }
            });
            let conn = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service);
            tokio::pin!(conn);
            tokio::select! {
                r = conn.as_mut() => if let Err(e) = r {
                    tracing::debug!(error = %e, "Metrics endpoint: connection error.");
                },
                _ = stop.cancelled() => {
                    conn.as_mut().graceful_shutdown();
                    let _ = conn.await;
                }
            }
        });
    }
}

fn text(status: StatusCode, content_type: &str, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(body.into()));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(http::header::CONTENT_TYPE, http::HeaderValue::from_str(content_type).expect("static content type"));
    r
}

fn respond(state: &State, req: &Request<Incoming>) -> Response<Full<Bytes>> {
    const PLAIN: &str = "text/plain; charset=utf-8";
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return text(StatusCode::METHOD_NOT_ALLOWED, PLAIN, "only GET\n");
    }
    match req.uri().path() {
        "/metrics" => {
            let mut body = String::new();
            match prometheus_client::encoding::text::encode(&mut body, &state.registry) {
                Ok(()) => text(StatusCode::OK, OPENMETRICS, body),
                Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, PLAIN, format!("cannot encode metrics: {e}\n")),
            }
        }
        "/healthz" => text(StatusCode::OK, PLAIN, "ok\n"),
        "/readyz" if (state.ready)() => text(StatusCode::OK, PLAIN, "ready\n"),
        "/readyz" => text(StatusCode::SERVICE_UNAVAILABLE, PLAIN, "not ready\n"),
        _ => text(StatusCode::NOT_FOUND, PLAIN, "not found: try /metrics, /healthz or /readyz\n"),
    }
}

/// Start the endpoint, or log why it could not bind and go on without it
/// (metrics are not worth refusing to move BMC work for; the error is loud).
pub async fn start_unless_off(
    addr: Option<SocketAddr>,
    registry: Registry,
    ready: Readiness,
) -> Result<Option<Server>, ServeError> {
    match addr {
        None => {
            tracing::info!("Metrics and health endpoints are off (--metrics-addr off).");
            Ok(None)
        }
        Some(addr) => Server::start(addr, registry, ready).await.map(Some),
    }
}

/// Declares a service's metrics once: each field's type, initial value,
/// exported name and help text (its doc comment) in one place; the struct,
/// and `register` (every metric under `bmcfleet_` on the registry handed
/// in), are derived.
///
/// ```ignore
/// bmcfleet_common::metrics! {
///     /// Admission counters.
///     pub struct Metrics {
///         /// Batches admitted by the gateway.
///         admitted: Family<Admitted, Counter> = Family::default(), "batches_admitted";
///     }
/// }
/// ```
#[macro_export]
macro_rules! metrics {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $( $(#[doc = $doc:literal])+ $field:ident: $ty:ty = $init:expr, $metric:literal; )+
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone)]
        pub struct $name {
            $( $(#[doc = $doc])+ pub $field: $ty, )+
        }

        impl $name {
            /// Create the metrics and register them under `bmcfleet_`.
            pub fn register(registry: &mut prometheus_client::registry::Registry) -> $name {
                let m = $name { $( $field: $init, )+ };
                let r = registry.sub_registry_with_prefix("bmcfleet");
                $( r.register($metric, concat!($($doc),+).trim(), m.$field.clone()); )+
                m
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::metrics::counter::Counter;
    use std::sync::atomic::{AtomicBool, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn get(addr: SocketAddr, path: &str) -> String {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes()).await.unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        out
    }

    #[tokio::test]
    async fn serves_metrics_health_and_readiness() {
        let mut registry = Registry::default();
        let c: Counter = Counter::default();
        registry.register("bmcfleet_test", "A test counter", c.clone());
        c.inc_by(3);
        let ready = Arc::new(AtomicBool::new(false));
        let r = ready.clone();
        let server =
            Server::start("127.0.0.1:0".parse().unwrap(), registry, Arc::new(move || r.load(Ordering::SeqCst)))
                .await
                .unwrap();
        assert_ne!(server.addr.port(), 0);
        let m = get(server.addr, "/metrics").await;
        assert!(m.starts_with("HTTP/1.1 200"), "{m}");
        assert!(m.contains("bmcfleet_test_total 3"), "{m}");
        assert!(get(server.addr, "/healthz").await.starts_with("HTTP/1.1 200"));
        assert!(get(server.addr, "/readyz").await.starts_with("HTTP/1.1 503"));
        ready.store(true, Ordering::SeqCst);
        assert!(get(server.addr, "/readyz").await.starts_with("HTTP/1.1 200"));
        assert!(get(server.addr, "/nope").await.starts_with("HTTP/1.1 404"));
        server.stop().await;
    }
}
