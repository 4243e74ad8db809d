//! The small HTTP/1.1 (+TLS) server the harness servers share.

use super::HarnessError;
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio::task::{JoinHandle, JoinSet};

/// Largest request body the harness reads.
const MAX_REQUEST_BODY: usize = 4 * 1024 * 1024;

/// A request as the harness handlers see it, and as the mockup records it
/// (public there as [`RecordedRequest`](super::RecordedRequest)).
#[derive(Clone, Debug)]
pub struct HttpRequest {
    pub method: String,
    /// Path without the query (recorded with any trailing `/` removed).
    pub path: String,
    pub query: Option<String>,
    /// Header names lower-cased.
    pub headers: Vec<(String, String)>,
    pub body: Bytes,
}

impl HttpRequest {
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers.iter().find(|(k, _)| *k == name).map(|(_, v)| v.as_str())
    }
}

#[derive(Clone, Debug)]
pub(crate) struct HttpResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Bytes,
    /// After `body`, send nothing more and never end the response (with a
    /// larger `content-length`: an answer that stalls part way).
    pub stall: bool,
}

impl HttpResponse {
    pub fn json(status: u16, v: &serde_json::Value) -> HttpResponse {
        HttpResponse {
            status,
            headers: vec![("content-type".into(), "application/json".into())],
            body: Bytes::from(serde_json::to_vec(v).unwrap_or_default()),
            stall: false,
        }
    }

    pub fn empty(status: u16) -> HttpResponse {
        HttpResponse { status, headers: Vec::new(), body: Bytes::new(), stall: false }
    }

    pub fn with_header(mut self, k: &str, v: impl Into<String>) -> HttpResponse {
        self.headers.push((k.to_ascii_lowercase(), v.into()));
        self
    }
}

pub(crate) type BoxFuture = Pin<Box<dyn Future<Output = HttpResponse> + Send>>;
pub(crate) type Handler = Arc<dyn Fn(HttpRequest) -> BoxFuture + Send + Sync>;

/// A running server; stops (and drops every open connection) on `Drop`.
pub(crate) struct Running {
    pub addr: SocketAddr,
    task: JoinHandle<()>,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub(crate) async fn start(tls: Option<Arc<rustls::ServerConfig>>, handler: Handler) -> Result<Running, HarnessError> {
    let listener =
        TcpListener::bind("127.0.0.1:0").await.map_err(|e| HarnessError::io("binding a loopback port", e))?;
    let addr = listener.local_addr().map_err(|e| HarnessError::io("reading the bound address", e))?;
    let acceptor = tls.map(tokio_rustls::TlsAcceptor::from);
    let task = tokio::spawn(async move {
        let mut conns = JoinSet::new();
        loop {
            let Ok((stream, _)) = listener.accept().await else { continue };
            let acceptor = acceptor.clone();
            let handler = handler.clone();
            conns.spawn(async move {
                match acceptor {
                    Some(acc) => {
                        if let Ok(s) = acc.accept(stream).await {
                            serve(TokioIo::new(s), handler).await;
                        }
                    }
                    None => serve(TokioIo::new(stream), handler).await,
                }
            });
            while conns.try_join_next().is_some() {}
        }
    });
    Ok(Running { addr, task })
}

async fn serve<I>(io: I, handler: Handler)
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let svc = service_fn(move |req: hyper::Request<Incoming>| {
        let handler = handler.clone();
        async move { Ok::<_, Infallible>(handle(req, handler).await) }
    });
    let _ = hyper::server::conn::http1::Builder::new().serve_connection(io, svc).await;
}

async fn handle(req: hyper::Request<Incoming>, handler: Handler) -> hyper::Response<Body> {
    let (parts, body) = req.into_parts();
    let body = match Limited::new(body, MAX_REQUEST_BODY).collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => {
            return response(HttpResponse::json(
                413,
                &serde_json::json!({"error": {"message": "request body too large"}}),
            ));
        }
    };
    let req = HttpRequest {
        method: parts.method.as_str().to_owned(),
        path: parts.uri.path().to_owned(),
        query: parts.uri.query().map(str::to_owned),
        headers: parts
            .headers
            .iter()
            .map(|(k, v)| (k.as_str().to_ascii_lowercase(), String::from_utf8_lossy(v.as_bytes()).into_owned()))
            .collect(),
        body,
    };
    response(handler(req).await)
}

fn response(r: HttpResponse) -> hyper::Response<Body> {
    let mut b = hyper::Response::builder().status(r.status);
    for (k, v) in &r.headers {
        b = b.header(k.as_str(), v.as_str());
    }
    let body = if r.stall { Body::Stalled(Some(r.body)) } else { Body::Full(Full::new(r.body)) };
    b.body(body).unwrap_or_else(|_| {
        let mut resp = hyper::Response::new(Body::Full(Full::new(Bytes::from_static(b"bad harness response"))));
        *resp.status_mut() = hyper::StatusCode::INTERNAL_SERVER_ERROR;
        resp
    })
}

/// A response body: whole, or its first bytes and then nothing, forever.
enum Body {
    Full(Full<Bytes>),
    Stalled(Option<Bytes>),
}

impl hyper::body::Body for Body {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, Infallible>>> {
        match self.get_mut() {
            Body::Full(full) => Pin::new(full).poll_frame(cx),
            Body::Stalled(first) => match first.take() {
                Some(bytes) => std::task::Poll::Ready(Some(Ok(hyper::body::Frame::data(bytes)))),
                None => std::task::Poll::Pending,
            },
        }
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        match self {
            Body::Full(full) => full.size_hint(),
            Body::Stalled(_) => hyper::body::SizeHint::default(),
        }
    }
}
