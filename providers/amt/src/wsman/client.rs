//! The WS-Man client: requests in, instances out, faults as [`AmtError`].
//!
//! Every call runs in a `wsman` tracing span with `bmc`, `action` (e.g.
//! `Get AMT_GeneralSettings`) and `outcome` (`ok` or the error code).
//! Bodies and credentials are never logged.

use crate::digest::random_hex;
use crate::error::AmtError;
use crate::transport::Transport;
use crate::wsman::request::Property;
use crate::wsman::{ns, Envelope, Param, Request, ReturnValue};
use crate::xml::Element;
use bmcfleet_provider::Ctx;
use std::time::Duration;
use tracing::Instrument;

/// Longest `wsman:OperationTimeout` we ask for, whatever the deadline.
const MAX_OPERATION_TIMEOUT: Duration = Duration::from_secs(60);
/// Pull rounds before an enumeration is declared runaway.
const MAX_PULLS: usize = 64;
/// Most response bytes one enumeration may take in all (AMT's are a few
/// KiB): the items of every page are kept until the last one, so pages are
/// bounded in total, not only one by one.
const MAX_ENUMERATION_BYTES: usize = 4 * 1024 * 1024;

pub struct WsmanClient {
    transport: Transport,
    /// The BMC address, for spans and messages.
    bmc: String,
    /// False after an error that makes the connection suspect.
    healthy: bool,
    /// Response bytes received so far (bounds an enumeration's pages in total).
    received: usize,
}

/// A `wsa:MessageID` (`uuid:` + random version-4 UUID).
fn message_id() -> String {
    let h = random_hex(16);
    let variant = ['8', '9', 'a', 'b'][usize::from(h.as_bytes()[16] % 4)];
    format!("uuid:{}-{}-4{}-{}{}-{}", &h[0..8], &h[8..12], &h[13..16], variant, &h[17..20], &h[20..32])
}

impl WsmanClient {
    pub fn new(transport: Transport, bmc: String) -> Self {
        WsmanClient { transport, bmc, healthy: true, received: 0 }
    }

    pub fn is_healthy(&self) -> bool {
        self.healthy
    }

    /// The transport (what TLS it speaks, the certificate it was shown).
    pub fn transport(&self) -> &Transport {
        &self.transport
    }

    pub fn bmc(&self) -> &str {
        &self.bmc
    }

    /// Send one request and return the (non-fault) envelope.
    pub async fn call(&mut self, ctx: &Ctx, req: &Request) -> Result<Envelope, AmtError> {
        let action = req.describe();
        let span = tracing::info_span!(
            "wsman",
            bmc = %self.bmc,
            protocol = "amt",
            action = %action,
            outcome = tracing::field::Empty
        );
        async {
            let result = self.call_inner(ctx, req).await;
            let outcome = match &result {
                Ok(_) => "ok",
                Err(e) => e.code().as_str(),
            };
            tracing::Span::current().record("outcome", outcome);
            match &result {
                Ok(_) => tracing::debug!(outcome, "WS-Man call succeeded."),
                Err(e) => tracing::debug!(outcome, error = %e, "WS-Man call failed."),
            }
            result
        }
        .instrument(span)
        .await
        .map_err(|e| self.note(e))
    }

    fn note(&mut self, e: AmtError) -> AmtError {
        if e.breaks_session() {
            self.healthy = false;
        }
        e
    }

    async fn call_inner(&mut self, ctx: &Ctx, req: &Request) -> Result<Envelope, AmtError> {
        let remaining = ctx.remaining().map_err(|_| AmtError::DeadlineExceeded)?;
        let body = req.to_xml(&message_id(), remaining.min(MAX_OPERATION_TIMEOUT));
        let sent_before = ctx.sending_request(|| req.planned()).await.map_err(AmtError::Fenced)?;
        let reply = self.transport.post(ctx.deadline, body).await.map_err(|e| match e {
            // An earlier request of this action went out: the action as a
            // whole may have taken (partial) effect.
            AmtError::ConnectFailed(m) if sent_before => AmtError::Unreachable(m),
            e => e,
        })?;
        self.received = self.received.saturating_add(reply.body.len());
        read_reply(&req.describe(), reply.status, &reply.body)
    }

    /// Get one instance of `class` (`AMT_…`/`CIM_…`).
    pub async fn get(&mut self, ctx: &Ctx, class: &str, selectors: &[(&str, &str)]) -> Result<Element, AmtError> {
        let req = Request::get(ns::class_uri(class), selectors);
        let env = self.call(ctx, &req).await?;
        env.body_element(class)
            .cloned()
            .ok_or_else(|| AmtError::Protocol(format!("{}: the response holds no {class} instance", req.describe())))
    }

    /// Put an instance of `class`; returns the instance the BMC answered with, if any.
    pub async fn put(
        &mut self,
        ctx: &Ctx,
        class: &str,
        selectors: &[(&str, &str)],
        properties: Vec<Property>,
    ) -> Result<Option<Element>, AmtError> {
        let req = Request::put(ns::class_uri(class), selectors, class, properties);
        let env = self.call(ctx, &req).await?;
        Ok(env.body_element(class).cloned())
    }

    /// Every instance of `class` (Enumerate, then Pull until EndOfSequence).
    pub async fn enumerate(&mut self, ctx: &Ctx, class: &str) -> Result<Vec<Element>, AmtError> {
        let uri = ns::class_uri(class);
        let req = Request::enumerate(&uri);
        let start = self.received;
        let env = self.call(ctx, &req).await?;
        let mut context = env
            .enumeration_context()
            .ok_or_else(|| AmtError::Protocol(format!("{}: no EnumerationContext", req.describe())))?;
        let mut items = Vec::new();
        for _ in 0..MAX_PULLS {
            let req = Request::pull(&uri, &context);
            let env = self.call(ctx, &req).await?;
            let page =
                env.pull_page().ok_or_else(|| AmtError::Protocol(format!("{}: no PullResponse", req.describe())))?;
            if self.received - start > MAX_ENUMERATION_BYTES {
                return Err(AmtError::Protocol(format!(
                    "{class}: the enumeration's answers exceed {MAX_ENUMERATION_BYTES} bytes in all; refused"
                )));
            }
            items.extend(page.items);
            if page.end_of_sequence {
                return Ok(items);
            }
            context = page.context.ok_or_else(|| {
                AmtError::Protocol(format!("{}: neither EndOfSequence nor a context", req.describe()))
            })?;
        }
        Err(AmtError::Protocol(format!("{class}: the enumeration did not end after {MAX_PULLS} pulls")))
    }

    /// Invoke `method` of an AMT service (a `CIM_Service` subclass, keyed by
    /// its class, `Name` and the AMT system that hosts it).
    pub async fn invoke_service(
        &mut self,
        ctx: &Ctx,
        class: &str,
        name: &str,
        method: &'static str,
        params: Vec<Param>,
    ) -> Result<(), AmtError> {
        let selectors = [
            ("CreationClassName", class),
            ("Name", name),
            ("SystemCreationClassName", "CIM_ComputerSystem"),
            ("SystemName", super::names::AMT_SYSTEM),
        ];
        self.invoke(ctx, class, &selectors, method, params).await
    }

    /// Invoke `class.method`; fails unless `ReturnValue` is 0 (or 4096, job started).
    pub async fn invoke(
        &mut self,
        ctx: &Ctx,
        class: &str,
        selectors: &[(&str, &str)],
        method: &'static str,
        params: Vec<Param>,
    ) -> Result<(), AmtError> {
        let req = Request::invoke(ns::class_uri(class), selectors, method, params);
        let env = self.call(ctx, &req).await?;
        let name = format!("{class}.{method}");
        match env.return_value(method) {
            None => Err(AmtError::Protocol(format!("{name}: the response holds no {method}_OUTPUT/ReturnValue"))),
            Some(Err(e)) => Err(AmtError::Protocol(format!("{name}: {e}"))),
            Some(Ok(v)) if ReturnValue::is_success(v) => Ok(()),
            Some(Ok(v)) => Err(AmtError::ReturnValue(ReturnValue { method: name, value: v })),
        }
    }
}

/// The envelope of an HTTP reply to `what` (a request's description), or
/// the error it stands for: a fault, a non-2xx status, a body that is not
/// a SOAP envelope. Pure: the fuzz target `wsman_xml` drives it directly.
pub fn read_reply(what: &str, status: u16, body: &[u8]) -> Result<Envelope, AmtError> {
    let ok_status = (200..300).contains(&status);
    let text = match std::str::from_utf8(body) {
        Ok(t) => t,
        Err(_) if ok_status => return Err(AmtError::Protocol(format!("{what}: the response is not UTF-8"))),
        Err(_) => return Err(AmtError::Http { status, message: "(binary body)".into() }),
    };
    match Envelope::parse(text) {
        Ok(env) => {
            if let Some(f) = env.fault() {
                return Err(AmtError::Fault(Box::new(f)));
            }
            if !ok_status {
                return Err(AmtError::Http { status, message: "a SOAP envelope without a fault".into() });
            }
            Ok(env)
        }
        Err(e) if ok_status => Err(AmtError::Protocol(format!("{what}: {e}"))),
        Err(_) => Err(AmtError::Http { status, message: snippet(text) }),
    }
}

/// The start of a non-XML error body, for messages.
fn snippet(text: &str) -> String {
    let t: String = text.chars().filter(|c| !c.is_control()).take(160).collect();
    if t.trim().is_empty() {
        "(empty body)".into()
    } else {
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_ids_are_v4_uuids() {
        let a = message_id();
        assert_eq!(a.len(), "uuid:".len() + 36);
        let parts: Vec<&str> = a["uuid:".len()..].split('-').collect();
        assert_eq!(parts.iter().map(|p| p.len()).collect::<Vec<_>>(), vec![8, 4, 4, 4, 12]);
        assert!(parts[2].starts_with('4'));
        assert_ne!(a, message_id());
    }

    const ENV: &str =
        r#"<s:Envelope xmlns:s="http://www.w3.org/2003/05/soap-envelope"><s:Body>BODY</s:Body></s:Envelope>"#;

    #[test]
    fn replies_map_to_envelopes_or_typed_errors() {
        let ok = ENV.replace("BODY", "<x:Y xmlns:x=\"urn:x\">1</x:Y>");
        assert!(read_reply("Get Y", 200, ok.as_bytes()).unwrap().body_element("Y").is_some());
        let fault = ENV.replace(
            "BODY",
            "<s:Fault><s:Code><s:Value>s:Sender</s:Value></s:Code><s:Reason><s:Text>no</s:Text></s:Reason></s:Fault>",
        );
        // A fault wins over the status, whatever it is.
        assert!(matches!(read_reply("Get Y", 400, fault.as_bytes()), Err(AmtError::Fault(_))));
        assert!(matches!(read_reply("Get Y", 200, fault.as_bytes()), Err(AmtError::Fault(_))));
        assert!(matches!(read_reply("Get Y", 500, ok.as_bytes()), Err(AmtError::Http { status: 500, .. })));
        assert!(matches!(read_reply("Get Y", 200, b"<html>"), Err(AmtError::Protocol(m)) if m.starts_with("Get Y: ")));
        assert!(matches!(read_reply("Get Y", 200, &[0xff, 0xfe]), Err(AmtError::Protocol(_))));
        match read_reply("Get Y", 503, b"\x01busy\n") {
            Err(AmtError::Http { status: 503, message }) => assert_eq!(message, "busy"),
            other => panic!("{other:?}"),
        }
        assert!(matches!(read_reply("Get Y", 401, &[0xff]), Err(AmtError::Http { status: 401, .. })));
    }
}
