//! Tracing set-up for the binaries: structured logs (JSON or pretty) and,
//! when an OTLP endpoint is configured, span export over OTLP (gRPC or
//! HTTP/protobuf). W3C trace context (`traceparent`, `tracestate`) travels in
//! NATS headers: [`set_parent`] continues a producer's trace, [`trace_headers`]
//! hands the current span's context on.
//!
//! With no endpoint configured no OpenTelemetry layer is installed at all, so
//! spans cost what plain `tracing` spans cost; trace headers are then passed
//! through unchanged, so a trace still connects across processes that do export.

use crate::config::{LogArgs, LogFormat, OtelArgs, OtlpProtocol};
use async_nats::HeaderMap;
use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use opentelemetry_sdk::Resource;
use std::time::Duration;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

/// The W3C trace-context headers carried on requests, jobs and events.
pub const TRACE_HEADERS: [&str; 2] = ["traceparent", "tracestate"];

/// Longest `tracestate` passed on (what W3C Trace Context asks every
/// vendor to propagate at least); a longer one is dropped.
pub const MAX_TRACESTATE: usize = 512;

/// The value of trace header `name` as it may be read and passed on, or
/// `None`: a `traceparent` of the W3C shape (lower-case hex fields joined
/// by `-`, 55 to 128 characters), a `tracestate` of at most
/// [`MAX_TRACESTATE`] bytes. These headers come from producers and go with
/// the job and every event of its batch: unchecked, a producer could attach
/// up to the server's 64 KiB header limit of its own to each (headers do
/// not count against --max-message-bytes), and a final event made too
/// large by them could never be published.
fn trace_header<'a>(name: &str, value: &'a str) -> Option<&'a str> {
    let ok = match name {
        "traceparent" => {
            (55..=128).contains(&value.len())
                && value.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b) || b == b'-')
        }
        "tracestate" => value.len() <= MAX_TRACESTATE && value.bytes().all(|b| (0x20..0x7f).contains(&b)),
        _ => false,
    };
    ok.then_some(value)
}

/// The installed telemetry; [`Telemetry::shutdown`] flushes exported spans.
#[must_use = "call shutdown() before exiting so buffered spans are exported"]
pub struct Telemetry {
    /// Present only when spans are exported.
    provider: Option<SdkTracerProvider>,
}

impl Telemetry {
    /// Whether spans are exported over OTLP.
    pub fn exporting(&self) -> bool {
        self.provider.is_some()
    }

    /// Export what is buffered and stop the exporter (bounded by `timeout`).
    pub async fn shutdown(self, timeout: Duration) {
        let Some(provider) = self.provider else { return };
        // The batch exporter blocks while it flushes: keep that off the async workers.
        let done = tokio::task::spawn_blocking(move || provider.shutdown_with_timeout(timeout)).await;
        match done {
            Ok(Ok(())) => {}
            Ok(Err(e)) => eprintln!("OpenTelemetry: flushing spans at shutdown failed: {e}"),
            Err(e) => eprintln!("OpenTelemetry: the flush task failed: {e}"),
        }
    }
}

/// What could not be set up (`init`, `runtime::init_logging`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// `--log` is not a valid filter.
    LogFilter,
    /// `--otel-filter` is not a valid filter.
    OtelFilter,
    /// The OTLP exporter cannot be built for the endpoint.
    Exporter,
    /// The global subscriber cannot be installed (one is already).
    Subscriber,
}

pub type Error = bmcfleet_schema::error::Error<ErrorKind>;

/// The `--log` filter.
pub(crate) fn log_filter(log: &LogArgs) -> Result<EnvFilter, Error> {
    EnvFilter::try_new(&log.log)
        .map_err(|e| Error::with_source(ErrorKind::LogFilter, format!("invalid log filter `{}`", log.log), e))
}

fn exporter(otel: &OtelArgs, endpoint: &str) -> Result<opentelemetry_otlp::SpanExporter, Error> {
    use opentelemetry_otlp::{Protocol, SpanExporter, WithExportConfig};
    // reqwest is built with rustls and no default crypto provider; another
    // part of the process may have installed one already, which is fine.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let built = match otel.protocol {
        OtlpProtocol::HttpProtobuf => SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpBinary)
            // OTEL_EXPORTER_OTLP_ENDPOINT is a base URL: the signal path is appended (OTLP spec).
            .with_endpoint(format!("{}/v1/traces", endpoint.trim_end_matches('/')))
            .build(),
        OtlpProtocol::Grpc => SpanExporter::builder().with_tonic().with_endpoint(endpoint).build(),
    };
    built.map_err(|e| {
        Error::with_source(ErrorKind::Exporter, format!("cannot set up the OTLP exporter for {endpoint}"), e)
    })
}

/// tracing-subscriber's JSON span fields, except that a field recorded on a
/// span after it was created is appended to the span's stored JSON object.
/// The stock formatter parses that object and writes it anew for every
/// `Span::record`: a batch records about eight fields after the fact
/// (provider, outcome, error code, duration, state), and that re-parsing
/// was ~9 % of a busy worker's CPU. A field recorded a second time joins
/// the stored object only through a merge (the rare case: the object is
/// parsed and written anew, the later value winning), so that the object
/// stays free of duplicate keys and [`JsonEvents`] can write it as it is.
#[derive(Debug, Default)]
pub struct AppendJsonFields;

impl<'w> tracing_subscriber::fmt::FormatFields<'w> for AppendJsonFields {
    fn format_fields<R: tracing_subscriber::field::RecordFields>(
        &self,
        mut writer: tracing_subscriber::fmt::format::Writer<'w>,
        fields: R,
    ) -> std::fmt::Result {
        use tracing_subscriber::field::VisitOutput;
        let mut visitor = tracing_subscriber::fmt::format::JsonVisitor::new(&mut writer);
        fields.record(&mut visitor);
        visitor.finish()
    }

    fn add_fields(
        &self,
        current: &'w mut tracing_subscriber::fmt::FormattedFields<Self>,
        fields: &tracing::span::Record<'_>,
    ) -> std::fmt::Result {
        if current.is_empty() {
            return self.format_fields(current.as_writer(), fields);
        }
        let mut added = String::new();
        self.format_fields(tracing_subscriber::fmt::format::Writer::new(&mut added), fields)?;
        // `{"a":1}` and `{"b":2}` make `{"a":1,"b":2}`.
        let Some(tail) = added.strip_prefix('{') else { return Err(std::fmt::Error) };
        if !current.fields.ends_with('}') {
            return Err(std::fmt::Error);
        }
        if tail == "}" {
            return Ok(());
        }
        let mut again = KeyIn { json: &current.fields, found: false };
        fields.record(&mut again);
        if again.found {
            // A field recorded again (or a value that merely looks like one
            // of its keys): merge, the later value winning.
            let mut merged: serde_json::Map<String, serde_json::Value> =
                serde_json::from_str(&current.fields).map_err(|_| std::fmt::Error)?;
            let later: serde_json::Map<String, serde_json::Value> =
                serde_json::from_str(&added).map_err(|_| std::fmt::Error)?;
            merged.extend(later);
            current.fields = serde_json::to_string(&merged).map_err(|_| std::fmt::Error)?;
            return Ok(());
        }
        current.fields.pop();
        if !current.fields.ends_with('{') {
            current.fields.push(',');
        }
        current.fields.push_str(tail);
        Ok(())
    }
}

/// Whether any field of a span record already stands as a key (`"name":`)
/// in `json`, its name as [`JsonVisitor`] writes it (`r#type` as `type`).
/// Searched in place: this runs for every `Span::record`.
///
/// [`JsonVisitor`]: tracing_subscriber::fmt::format::JsonVisitor
struct KeyIn<'a> {
    json: &'a str,
    found: bool,
}

impl tracing::field::Visit for KeyIn<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, _: &dyn std::fmt::Debug) {
        let name = field.name();
        let name = name.strip_prefix("r#").unwrap_or(name);
        self.found |= self
            .json
            .match_indices(name)
            .any(|(at, _)| self.json[..at].ends_with('"') && self.json[at + name.len()..].starts_with("\":"));
    }
}

/// tracing-subscriber's JSON event format with flattened event fields
/// (`{"timestamp", "level", the event's fields, "target", "span",
/// "spans"}`, the same values), except that each span's stored JSON object
/// ([`AppendJsonFields`]) is written as it is, with its `"name"` added,
/// instead of being parsed and serialized anew for every span of every
/// event; that was most of a busy worker's log formatting (two events per
/// batch, three spans each). Event fields keep their order; `message`
/// comes first as written at the call site.
#[derive(Debug, Default)]
pub struct JsonEvents;

impl<S> tracing_subscriber::fmt::FormatEvent<S, AppendJsonFields> for JsonEvents
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    fn format_event(
        &self,
        ctx: &tracing_subscriber::fmt::FmtContext<'_, S, AppendJsonFields>,
        mut writer: tracing_subscriber::fmt::format::Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> std::fmt::Result {
        use tracing_subscriber::fmt::time::FormatTime;
        let meta = event.metadata();
        let mut out = String::with_capacity(512);
        out.push_str("{\"timestamp\":\"");
        tracing_subscriber::fmt::time::SystemTime
            .format_time(&mut tracing_subscriber::fmt::format::Writer::new(&mut out))?;
        out.push_str("\",\"level\":\"");
        out.push_str(meta.level().as_str());
        out.push('"');
        event.record(&mut EventFields(&mut out));
        out.push_str(",\"target\":");
        push_json_str(&mut out, meta.target());
        let current = event.parent().and_then(|id| ctx.span(id)).or_else(|| ctx.lookup_current());
        if let Some(span) = &current {
            out.push_str(",\"span\":");
            push_span(&mut out, span);
            out.push_str(",\"spans\":[");
            if let Some(leaf) = ctx.lookup_current() {
                for (i, span) in leaf.scope().from_root().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    push_span(&mut out, &span);
                }
            }
            out.push(']');
        }
        out.push('}');
        writeln!(writer, "{out}")
    }
}

/// `"text"` with JSON escapes.
fn push_json_str(out: &mut String, text: &str) {
    // Serializing a `&str` into a `String` cannot fail.
    out.push_str(&serde_json::to_string(text).unwrap_or_default());
}

/// A span's stored fields with its name: `{"a":1,"name":"work"}`.
fn push_span<R: for<'a> tracing_subscriber::registry::LookupSpan<'a>>(
    out: &mut String,
    span: &tracing_subscriber::registry::SpanRef<'_, R>,
) {
    let extensions = span.extensions();
    let stored = extensions
        .get::<tracing_subscriber::fmt::FormattedFields<AppendJsonFields>>()
        .map(|f| f.fields.as_str().trim())
        .unwrap_or("");
    match stored.strip_suffix('}').filter(|body| body.starts_with('{')) {
        Some("{") => out.push('{'),
        Some(body) => {
            out.push_str(body);
            out.push(',');
        }
        None if stored.is_empty() => out.push('{'),
        // Not an object: said so, as the stock formatter does.
        None => out.push_str("{\"field_error\":\"field was no a valid object\","),
    }
    out.push_str("\"name\":");
    push_json_str(out, span.metadata().name());
    out.push('}');
}

/// Writes an event's fields as `,"name":value` in the order they come.
struct EventFields<'a>(&'a mut String);

impl EventFields<'_> {
    fn key(&mut self, field: &tracing::field::Field) {
        let name = field.name();
        self.0.push(',');
        push_json_str(self.0, name.strip_prefix("r#").unwrap_or(name));
        self.0.push(':');
    }
}

impl tracing::field::Visit for EventFields<'_> {
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        self.key(field);
        push_json_str(self.0, value);
    }

    fn record_bool(&mut self, field: &tracing::field::Field, value: bool) {
        self.key(field);
        self.0.push_str(if value { "true" } else { "false" });
    }

    fn record_i64(&mut self, field: &tracing::field::Field, value: i64) {
        self.key(field);
        self.0.push_str(&value.to_string());
    }

    fn record_u64(&mut self, field: &tracing::field::Field, value: u64) {
        self.key(field);
        self.0.push_str(&value.to_string());
    }

    fn record_f64(&mut self, field: &tracing::field::Field, value: f64) {
        self.key(field);
        self.0.push_str(&serde_json::Value::from(value).to_string());
    }

    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.key(field);
        push_json_str(self.0, &format!("{value:?}"));
    }
}

/// async-nats logs every message it reads, payload included, at trace level
/// (a producer's submit request with an inline password, a credential read
/// from the bucket): such events are dropped unless the filter names
/// `async_nats` explicitly. Other levels are left to the filter.
pub fn keeps(filter: &str, meta: &tracing::Metadata<'_>) -> bool {
    filter.contains("async_nats")
        || !(*meta.level() == tracing::Level::TRACE && meta.target().starts_with("async_nats"))
}

/// The pretty (text) log format: one line per event, its fields'
/// control characters escaped ([`EscapedFields`]), colours only on a
/// terminal (`ansi`).
fn pretty<S, W>(writer: W, ansi: bool) -> impl Layer<S>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    W: for<'w> tracing_subscriber::fmt::MakeWriter<'w> + Send + Sync + 'static,
{
    tracing_subscriber::fmt::layer().compact().fmt_fields(EscapedFields).with_ansi(ansi).with_writer(writer)
}

/// The pretty format's fields, written as tracing-subscriber writes them
/// but with every control character escaped (`\n`, `\r`, `\t`, `\u{1b}`):
/// a field's value can be a BMC's text (an error it sent, a path it
/// linked), and a line break in it would otherwise start a line that reads
/// like another event. (String values are already escaped; values logged
/// with `%`, through `Display`, were not.)
pub struct EscapedFields;

impl<'w> tracing_subscriber::fmt::FormatFields<'w> for EscapedFields {
    fn format_fields<R: tracing_subscriber::field::RecordFields>(
        &self,
        mut writer: tracing_subscriber::fmt::format::Writer<'w>,
        fields: R,
    ) -> std::fmt::Result {
        let mut escaping = Escaping(&mut writer);
        tracing_subscriber::fmt::format::DefaultFields::new()
            .format_fields(tracing_subscriber::fmt::format::Writer::new(&mut escaping), fields)
    }
}

/// Writes through to `0` with control characters escaped.
struct Escaping<'a, W: std::fmt::Write>(&'a mut W);

impl<W: std::fmt::Write> std::fmt::Write for Escaping<'_, W> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        // Most text holds no control character: C0 and DEL are single
        // bytes, and every C1 character's UTF-8 starts with 0xC2.
        if !s.bytes().any(|b| b < 0x20 || b == 0x7F || b == 0xC2) {
            return self.0.write_str(s);
        }
        let mut rest = s;
        while let Some((at, c)) = rest.char_indices().find(|(_, c)| c.is_control()) {
            self.0.write_str(&rest[..at])?;
            match c {
                '\n' => self.0.write_str("\\n")?,
                '\r' => self.0.write_str("\\r")?,
                '\t' => self.0.write_str("\\t")?,
                c => write!(self.0, "\\u{{{:x}}}", u32::from(c))?,
            }
            rest = &rest[at + c.len_utf8()..];
        }
        self.0.write_str(rest)
    }
}

/// Install the global subscriber (call once, from `main`, inside the Tokio
/// runtime). `service` is the default `service.name`.
pub fn init(log: &LogArgs, otel: &OtelArgs, service: &str) -> Result<Telemetry, Error> {
    let filter = log_filter(log)?;
    let log_filter = log.log.clone();
    let fmt = match log.log_format {
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .fmt_fields(AppendJsonFields)
            .event_format(JsonEvents)
            .with_writer(std::io::stderr)
            .boxed(),
        LogFormat::Pretty => pretty(std::io::stderr, std::io::IsTerminal::is_terminal(&std::io::stderr())).boxed(),
    }
    .with_filter(filter)
    .with_filter(tracing_subscriber::filter::filter_fn(move |meta| keeps(&log_filter, meta)));
    let (layer, provider) = match otel.endpoint.as_deref().filter(|e| !e.is_empty()) {
        None => (None, None),
        Some(endpoint) => {
            let span_filter = EnvFilter::try_new(&otel.filter).map_err(|e| {
                Error::with_source(ErrorKind::OtelFilter, format!("invalid OpenTelemetry filter `{}`", otel.filter), e)
            })?;
            let name = otel.service_name.clone().filter(|s| !s.is_empty()).unwrap_or_else(|| service.to_owned());
            let provider = SdkTracerProvider::builder()
                .with_batch_exporter(exporter(otel, endpoint)?)
                .with_resource(Resource::builder().with_service_name(name).build())
                .build();
            let tracer = provider.tracer("bmcfleet");
            let otel_filter = otel.filter.clone();
            let layer = tracing_opentelemetry::layer()
                .with_tracer(tracer)
                .with_filter(span_filter)
                .with_filter(tracing_subscriber::filter::filter_fn(move |meta| keeps(&otel_filter, meta)));
            (Some(layer), Some(provider))
        }
    };
    tracing_subscriber::registry()
        .with(fmt)
        .with(layer)
        .try_init()
        .map_err(|e| Error::with_source(ErrorKind::Subscriber, "", e))?;
    if let (Some(endpoint), true) = (&otel.endpoint, provider.is_some()) {
        tracing::info!(endpoint = %endpoint, protocol = ?otel.protocol, "Exporting spans over OTLP.");
    }
    Ok(Telemetry { provider })
}

struct HeaderExtractor<'a>(&'a HeaderMap);

impl Extractor for HeaderExtractor<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| trace_header(key, v.as_str()))
    }
    fn keys(&self) -> Vec<&str> {
        TRACE_HEADERS.iter().copied().filter(|k| self.get(k).is_some()).collect()
    }
}

struct HeaderInjector<'a>(&'a mut HeaderMap);

impl Injector for HeaderInjector<'_> {
    fn set(&mut self, key: &str, value: String) {
        self.0.insert(key, value.as_str());
    }
}

/// The remote trace context in `headers` (W3C `traceparent`/`tracestate`),
/// if there is a valid one.
pub fn extract(headers: Option<&HeaderMap>) -> Option<opentelemetry::Context> {
    let cx = TraceContextPropagator::new().extract(&HeaderExtractor(headers?));
    cx.span().span_context().is_valid().then_some(cx)
}

/// Make `span` a child of the trace in `headers` (no-op without one, or when
/// spans are not exported).
pub fn set_parent(span: &tracing::Span, headers: Option<&HeaderMap>) {
    if let Some(cx) = extract(headers) {
        let _ = span.set_parent(cx);
    }
}

/// The trace context to send on: `span`'s own when spans are exported,
/// otherwise the trace headers of `incoming` unchanged (so the trace still
/// connects across processes that do export), those of their W3C shape and
/// size only ([`trace_header`]; a `tracestate` only with its `traceparent`).
pub fn trace_headers(span: &tracing::Span, incoming: Option<&HeaderMap>) -> HeaderMap {
    let mut out = HeaderMap::new();
    let cx = span.context();
    if cx.span().span_context().is_valid() {
        TraceContextPropagator::new().inject_context(&cx, &mut HeaderInjector(&mut out));
    } else if let Some(h) = incoming {
        // A tracestate belongs to its traceparent: without one, neither.
        let valid = |name: &str| h.get(name).and_then(|v| trace_header(name, v.as_str()));
        if let Some(parent) = valid("traceparent") {
            out.insert("traceparent", parent);
            if let Some(state) = valid("tracestate") {
                out.insert("tracestate", state);
            }
        }
    }
    out
}

/// Copy `from`'s entries into `into` (trace headers onto a message's own).
pub fn merge(into: &mut HeaderMap, from: &HeaderMap) {
    for (name, values) in from.iter() {
        for v in values {
            into.insert(name.clone(), v.clone());
        }
    }
}

/// A fresh W3C `traceparent` (sampled) for a producer starting a trace, and its trace id.
pub fn new_traceparent() -> (String, String) {
    use opentelemetry_sdk::trace::{IdGenerator, RandomIdGenerator};
    let ids = RandomIdGenerator::default();
    let trace_id = ids.new_trace_id().to_string();
    (format!("00-{trace_id}-{}-01", ids.new_span_id()), trace_id)
}

#[cfg(test)]
mod tests {
    #[test]
    fn async_nats_payload_traces_are_dropped() {
        use tracing::callsite::Identifier;
        use tracing::metadata::Kind;
        struct Cs;
        impl tracing::callsite::Callsite for Cs {
            fn set_interest(&self, _: tracing::subscriber::Interest) {}
            fn metadata(&self) -> &tracing::Metadata<'_> {
                unimplemented!()
            }
        }
        static CS: Cs = Cs;
        let meta = |level, target| {
            tracing::Metadata::new(
                "e",
                target,
                level,
                None,
                None,
                None,
                tracing::field::FieldSet::new(&[], Identifier(&CS)),
                Kind::EVENT,
            )
        };
        assert!(!super::keeps("trace", &meta(tracing::Level::TRACE, "async_nats::connection")));
        assert!(super::keeps("trace", &meta(tracing::Level::DEBUG, "async_nats::connection")));
        assert!(super::keeps("trace", &meta(tracing::Level::TRACE, "bmcfleet_worker")));
        assert!(super::keeps("info,async_nats=trace", &meta(tracing::Level::TRACE, "async_nats::connection")));
    }

    use super::*;

    #[test]
    fn only_w3c_sized_trace_headers_are_passed_on() {
        let parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        let mut incoming = HeaderMap::new();
        incoming.insert("traceparent", parent);
        incoming.insert("tracestate", "vendor=abc");
        let out = trace_headers(&tracing::Span::none(), Some(&incoming));
        assert_eq!(out.get("traceparent").map(|v| v.as_str()), Some(parent));
        assert_eq!(out.get("tracestate").map(|v| v.as_str()), Some("vendor=abc"));
        let long = format!("vendor={}", "x".repeat(MAX_TRACESTATE));
        for (name, value) in [
            ("tracestate", long.as_str()),
            ("traceparent", "00-ZZ-1"),
            ("traceparent", &format!("00-{}-b7ad6b7169203331-01", "0".repeat(200))),
        ] {
            let mut h = incoming.clone();
            h.insert(name, value);
            let out = trace_headers(&tracing::Span::none(), Some(&h));
            assert!(out.get(name).is_none(), "{name} {} bytes passed on", value.len());
            if name == "traceparent" {
                assert!(out.is_empty(), "a tracestate without its traceparent");
            }
            assert!(extract(Some(&h)).is_none() || name == "tracestate", "{name} read");
        }
        assert!(extract(Some(&incoming)).is_some());
    }

    /// Spans with fields recorded at creation, later, twice, with quotes
    /// and braces in values, a span without fields, events inside and
    /// outside spans, with an explicit parent, every field type.
    fn log_some_spans() {
        let empty = tracing::info_span!("no_fields", later = tracing::field::Empty);
        let span = tracing::info_span!(parent: &empty, "work", batch = "b1", provider = tracing::field::Empty, outcome = tracing::field::Empty, ms = tracing::field::Empty);
        span.record("provider", "ipmi");
        span.record("outcome", "ok \"quoted\", {braced}");
        span.record("ms", 12u64);
        span.record("outcome", "ok");
        empty.record("later", true);
        span.in_scope(|| tracing::info!(n = 1, "inside"));
        tracing::warn!(text = "a \"b\"\n", signed = -3i64, float = 1.5f64, nan = f64::NAN, flag = false, debug = ?Some(1), r#type = "t", "outside {}", 7);
        let other = tracing::info_span!("other", id = 9u64, fake = "\"ms\":3");
        other.record("id", 10u64);
        tracing::info!(parent: &other, "explicit parent, no current span");
        let _entered = other.enter();
        span.in_scope(|| tracing::error!(error = %std::io::Error::other("boom"), "nested"));
    }

    /// The lines `log_some_spans` writes through `layer`, as JSON values
    /// without their timestamps, and the raw text.
    fn logged<L>(layer: impl FnOnce(bmcfleet_testing::LogCapture) -> L) -> (Vec<serde_json::Value>, String)
    where
        L: tracing_subscriber::Layer<tracing_subscriber::Registry> + Send + Sync,
    {
        let out = bmcfleet_testing::LogCapture::default();
        let subscriber = tracing_subscriber::registry().with(layer(out.clone()));
        tracing::subscriber::with_default(subscriber, log_some_spans);
        let text = out.text();
        let lines = text
            .lines()
            .map(|line| {
                let mut v: serde_json::Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
                assert!(v["timestamp"].as_str().is_some_and(|t| t.ends_with('Z')), "{line}");
                v.as_object_mut().expect("an object").remove("timestamp");
                v
            })
            .collect();
        (lines, text)
    }

    #[test]
    fn json_events_write_what_the_stock_json_format_writes() {
        let (stock, _) = logged(|out| {
            tracing_subscriber::fmt::layer().json().flatten_event(true).fmt_fields(AppendJsonFields).with_writer(out)
        });
        let (ours, text) = logged(|out| {
            tracing_subscriber::fmt::layer().fmt_fields(AppendJsonFields).event_format(JsonEvents).with_writer(out)
        });
        assert_eq!(stock.len(), 4, "{stock:?}");
        assert_eq!(ours, stock, "{text}");
        // No key twice in a span's object, though `outcome` and `id` were
        // recorded twice: `outcome` once in "span" and once in "spans",
        // `id` once in "span" (no current span, so "spans" is empty).
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0].matches("\"outcome\":").count(), 2, "{}", lines[0]);
        assert_eq!(lines[2].matches("\"id\":").count(), 1, "{}", lines[2]);
        assert_eq!(ours[2]["span"]["id"], 10, "the later record wins: {}", lines[2]);
    }

    /// A BMC's text reaches log fields (its error messages, the paths it
    /// links): with a line break in it, it must not start a line of its
    /// own that reads like another event of the log.
    #[test]
    fn a_bmc_s_text_cannot_forge_a_pretty_log_line() {
        let out = bmcfleet_testing::LogCapture::default();
        let subscriber = tracing_subscriber::registry().with(pretty(out.clone(), false));
        let forged = "refused\n2026-12-05T00:00:00.000000Z  INFO bmc_worker: Batch finished. state=Succeeded";
        tracing::subscriber::with_default(subscriber, || {
            let span = tracing::info_span!(
                "redfish.http",
                path = "/redfish/v1/Systems/1\r\nWARN forged",
                outcome = tracing::field::Empty
            );
            span.record("outcome", "bad\u{1b}[31mred\u{7}");
            tracing::info!(c1 = %"next\u{85}line", latin = %"café ©", "C1 controls too; other text as it is.");
            span.in_scope(|| tracing::warn!(error = %forged, text = "tab\there", "The BMC refused the request."));
        });
        let text = out.text();
        assert_eq!(text.lines().count(), 2, "{text}");
        assert!(text.contains("c1=next\\u{85}line latin=café ©"), "{text}");
        assert!(!text.contains('\r') && !text.contains('\u{1b}') && !text.contains('\u{7}'), "{text:?}");
        for escaped in ["refused\\n2026-12-05", "Systems/1\\r\\nWARN", "bad\\u{1b}[31mred\\u{7}", "tab\\there"] {
            assert!(text.contains(escaped), "{escaped} in {text}");
        }
        assert!(text.contains("The BMC refused the request."), "{text}");
    }

    #[test]
    fn fields_recorded_later_join_the_span_s_json_object() {
        let out = bmcfleet_testing::LogCapture::default();
        let layer = tracing_subscriber::fmt::layer()
            .fmt_fields(AppendJsonFields)
            .event_format(JsonEvents)
            .with_writer(out.clone());
        let subscriber = tracing_subscriber::registry().with(layer);
        tracing::subscriber::with_default(subscriber, log_some_spans);
        let text = out.text();
        let line: serde_json::Value =
            serde_json::from_str(text.lines().next().expect("one line")).unwrap_or_else(|e| panic!("{e}: {text}"));
        let span = &line["span"];
        assert_eq!(
            (span["name"].as_str(), span["batch"].as_str(), span["provider"].as_str()),
            (Some("work"), Some("b1"), Some("ipmi")),
            "{line}"
        );
        assert_eq!(
            (span["ms"].as_u64(), span["outcome"].as_str()),
            (Some(12), Some("ok")),
            "the later record wins: {line}"
        );
        assert_eq!(line["spans"][0]["later"], true, "a span created without fields: {line}");
        assert_eq!(line["n"], 1, "{line}");
    }

    #[test]
    fn traceparent_round_trip() {
        let (tp, trace_id) = new_traceparent();
        assert_eq!(tp.len(), 55, "{tp}");
        let mut h = HeaderMap::new();
        h.insert("traceparent", tp.as_str());
        h.insert("tracestate", "vendor=x");
        let cx = extract(Some(&h)).expect("valid context");
        assert_eq!(cx.span().span_context().trace_id().to_string(), trace_id);
        assert!(cx.span().span_context().is_remote());
        // Without an exporting subscriber the incoming headers pass through.
        let out = trace_headers(&tracing::Span::none(), Some(&h));
        assert_eq!(out.get("traceparent").map(|v| v.as_str()), Some(tp.as_str()));
        assert_eq!(out.get("tracestate").map(|v| v.as_str()), Some("vendor=x"));
    }

    #[test]
    fn invalid_traceparent_is_ignored() {
        let mut h = HeaderMap::new();
        h.insert("traceparent", "00-00000000000000000000000000000000-0000000000000000-01");
        assert!(extract(Some(&h)).is_none());
        assert!(extract(None).is_none());
        assert_ne!(new_traceparent().1, new_traceparent().1);
    }
}
