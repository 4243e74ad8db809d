//! An in-test OTLP collector, over HTTP/protobuf (`POST /v1/traces`) or gRPC
//! (HTTP/2, `TraceService/Export` with length-prefixed protobuf frames and a
//! `grpc-status` trailer), decoding with `opentelemetry-proto`, keeping every
//! span and answering like a real collector. The processes under test export
//! to [`OtlpCollector::endpoint`] with `--otlp-endpoint`.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use opentelemetry_proto::tonic::collector::trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue};
use prost::Message;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One received span, flattened for assertions.
#[derive(Clone, Debug)]
pub struct Span {
    /// `service.name` of the exporting process.
    pub service: String,
    pub name: String,
    /// Lower-case hex, as in `traceparent`.
    pub trace_id: String,
    pub span_id: String,
    /// Empty for a root span.
    pub parent_span_id: String,
    pub attributes: BTreeMap<String, String>,
    /// Span events (tracing events inside the span): name and attributes.
    pub events: Vec<(String, BTreeMap<String, String>)>,
}

impl Span {
    pub fn attr(&self, key: &str) -> Option<&str> {
        self.attributes.get(key).map(String::as_str)
    }
}

fn text(v: &Option<AnyValue>) -> String {
    match v.as_ref().and_then(|v| v.value.as_ref()) {
        Some(Value::StringValue(s)) => s.clone(),
        Some(Value::IntValue(i)) => i.to_string(),
        Some(Value::DoubleValue(d)) => d.to_string(),
        Some(Value::BoolValue(b)) => b.to_string(),
        Some(Value::BytesValue(b)) => String::from_utf8_lossy(b).into_owned(),
        Some(other) => format!("{other:?}"),
        None => String::new(),
    }
}

fn attrs(kvs: &[KeyValue]) -> BTreeMap<String, String> {
    kvs.iter().map(|kv| (kv.key.clone(), text(&kv.value))).collect()
}

/// Flatten an export request into spans.
pub fn spans_of(req: &ExportTraceServiceRequest) -> Vec<Span> {
    let mut out = vec![];
    for rs in &req.resource_spans {
        let service = rs
            .resource
            .as_ref()
            .and_then(|r| r.attributes.iter().find(|kv| kv.key == "service.name"))
            .map(|kv| text(&kv.value))
            .unwrap_or_default();
        for ss in &rs.scope_spans {
            for s in &ss.spans {
                out.push(Span {
                    service: service.clone(),
                    name: s.name.clone(),
                    trace_id: hex(&s.trace_id),
                    span_id: hex(&s.span_id),
                    parent_span_id: hex(&s.parent_span_id),
                    attributes: attrs(&s.attributes),
                    events: s.events.iter().map(|e| (e.name.clone(), attrs(&e.attributes))).collect(),
                });
            }
        }
    }
    out
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

type ReplyBody = http_body_util::combinators::BoxBody<Bytes, std::convert::Infallible>;

/// The gRPC method the OTLP trace exporter calls.
const GRPC_EXPORT_PATH: &str = "/opentelemetry.proto.collector.trace.v1.TraceService/Export";

/// The one message of a unary gRPC request body: a 5-byte prefix (compressed
/// flag, big-endian length) and the protobuf. Compressed messages are refused
/// (the exporter does not compress unless configured to).
fn grpc_message(body: &Bytes) -> Option<Bytes> {
    let (&flag, rest) = body.split_first()?;
    let len = u32::from_be_bytes(rest.get(..4)?.try_into().ok()?) as usize;
    (flag == 0 && rest.len() == 4 + len).then(|| body.slice(5..5 + len))
}

/// A unary gRPC answer: HTTP 200, the framed response, `grpc-status` in the
/// trailers (0, or 3 INVALID_ARGUMENT when the request did not decode).
fn grpc_reply(ok: bool, message: Vec<u8>) -> hyper::Response<ReplyBody> {
    use hyper::body::Frame;
    let mut framed = Vec::with_capacity(5 + message.len());
    framed.push(0);
    framed.extend_from_slice(&(message.len() as u32).to_be_bytes());
    framed.extend_from_slice(&message);
    let mut trailers = hyper::HeaderMap::new();
    trailers.insert("grpc-status", if ok { "0" } else { "3" }.parse().unwrap());
    let mut frames = vec![];
    if ok {
        frames.push(Ok(Frame::data(Bytes::from(framed))));
    }
    frames.push(Ok(Frame::trailers(trailers)));
    let body = http_body_util::StreamBody::new(futures::stream::iter(frames)).boxed();
    hyper::Response::builder().status(200).header("content-type", "application/grpc").body(body).unwrap()
}

/// The collector; stops when dropped.
pub struct OtlpCollector {
    pub addr: SocketAddr,
    /// Speaks OTLP/gRPC (else OTLP/HTTP).
    pub grpc: bool,
    spans: Arc<Mutex<Vec<Span>>>,
    /// Raw request bodies as received (for redaction checks over everything exported).
    raw: Arc<Mutex<Vec<Bytes>>>,
    task: tokio::task::JoinHandle<()>,
}

impl OtlpCollector {
    /// OTLP/HTTP (protobuf) on a free loopback port.
    pub async fn start() -> OtlpCollector {
        Self::start_with(false).await
    }

    /// OTLP/gRPC on a free loopback port.
    pub async fn start_grpc() -> OtlpCollector {
        Self::start_with(true).await
    }

    async fn start_with(grpc: bool) -> OtlpCollector {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind collector");
        let addr = listener.local_addr().unwrap();
        let spans: Arc<Mutex<Vec<Span>>> = Arc::default();
        let raw: Arc<Mutex<Vec<Bytes>>> = Arc::default();
        let (s, r) = (spans.clone(), raw.clone());
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else { continue };
                let (spans, raw) = (s.clone(), r.clone());
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                        let (spans, raw) = (spans.clone(), raw.clone());
                        async move {
                            let path = req.uri().path().to_owned();
                            let body = req.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
                            let keep = |message: Bytes| match ExportTraceServiceRequest::decode(message.clone()) {
                                Ok(decoded) => {
                                    raw.lock().unwrap().push(message);
                                    spans.lock().unwrap().extend(spans_of(&decoded));
                                    true
                                }
                                Err(_) => false,
                            };
                            let reply = ExportTraceServiceResponse::default().encode_to_vec();
                            Ok::<_, std::convert::Infallible>(if grpc {
                                grpc_reply(path == GRPC_EXPORT_PATH && grpc_message(&body).is_some_and(keep), reply)
                            } else {
                                let status = if path != "/v1/traces" {
                                    404
                                } else if keep(body) {
                                    200
                                } else {
                                    400
                                };
                                let body: ReplyBody =
                                    Full::new(if status == 200 { Bytes::from(reply) } else { Bytes::new() })
                                        .map_err(|never| match never {})
                                        .boxed();
                                hyper::Response::builder()
                                    .status(status)
                                    .header("content-type", "application/x-protobuf")
                                    .body(body)
                                    .unwrap()
                            })
                        }
                    });
                    let io = TokioIo::new(stream);
                    if grpc {
                        let _ = hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
                            .serve_connection(io, service)
                            .await;
                    } else {
                        let _ = hyper::server::conn::http1::Builder::new().serve_connection(io, service).await;
                    }
                });
            }
        });
        OtlpCollector { addr, grpc, spans, raw, task }
    }

    /// The `--otlp-protocol` value for this collector.
    pub fn protocol(&self) -> &'static str {
        if self.grpc {
            "grpc"
        } else {
            "http/protobuf"
        }
    }

    /// The base URL to give `--otlp-endpoint`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn spans(&self) -> Vec<Span> {
        self.spans.lock().unwrap().clone()
    }

    /// Every export body received so far.
    pub fn raw_bodies(&self) -> Vec<Bytes> {
        self.raw.lock().unwrap().clone()
    }

    /// Wait until `check` accepts the spans of `trace_id`, or panic with what arrived.
    pub async fn wait_trace(&self, trace_id: &str, timeout: Duration, check: impl Fn(&[Span]) -> bool) -> Vec<Span> {
        let end = tokio::time::Instant::now() + timeout;
        loop {
            let spans: Vec<Span> = self.spans().into_iter().filter(|s| s.trace_id == trace_id).collect();
            if check(&spans) {
                return spans;
            }
            if tokio::time::Instant::now() > end {
                let names: Vec<String> = spans.iter().map(|s| format!("{}:{}", s.service, s.name)).collect();
                panic!("trace {trace_id} incomplete after {timeout:?}; spans: {names:?}; all services seen: {:?}", {
                    let mut v: Vec<String> = self.spans().iter().map(|s| s.service.clone()).collect();
                    v.dedup();
                    v
                });
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for OtlpCollector {
    fn drop(&mut self) {
        self.task.abort();
    }
}
