//! An in-test OTLP/HTTP collector: accepts `POST /v1/traces` with protobuf
//! bodies (decoded with `opentelemetry-proto`), keeps every span, and answers
//! like a real collector. The processes under test export to
//! [`OtlpCollector::endpoint`] with `--otlp-endpoint`.

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

/// The collector; stops when dropped.
pub struct OtlpCollector {
    pub addr: SocketAddr,
    spans: Arc<Mutex<Vec<Span>>>,
    /// Raw request bodies as received (for redaction checks over everything exported).
    raw: Arc<Mutex<Vec<Bytes>>>,
    task: tokio::task::JoinHandle<()>,
}

impl OtlpCollector {
    /// Listen on a free loopback port.
    pub async fn start() -> OtlpCollector {
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
                            let (status, reply) = if path != "/v1/traces" {
                                (404, Bytes::new())
                            } else {
                                match ExportTraceServiceRequest::decode(body.clone()) {
                                    Ok(decoded) => {
                                        raw.lock().unwrap().push(body);
                                        spans.lock().unwrap().extend(spans_of(&decoded));
                                        (200, Bytes::from(ExportTraceServiceResponse::default().encode_to_vec()))
                                    }
                                    Err(_) => (400, Bytes::new()),
                                }
                            };
                            let resp = hyper::Response::builder()
                                .status(status)
                                .header("content-type", "application/x-protobuf")
                                .body(Full::new(reply))
                                .unwrap();
                            Ok::<_, std::convert::Infallible>(resp)
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
                });
            }
        });
        OtlpCollector { addr, spans, raw, task }
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
