//! SOAP on the server side: reading requests, rewriting captured
//! responses, and building the responses no capture exists for.

use bmcfleet_amt::wsman::{ns, response};
use bmcfleet_amt::xml::{self, Element, XmlWriter};
use quick_xml::events::{BytesText, Event};
use quick_xml::reader::Reader;

/// The WS-Man addressing of one request, namespace-resolved.
#[derive(Clone, Debug)]
pub struct SoapRequest {
    pub action: String,
    pub resource_uri: String,
    pub message_id: String,
    pub to: String,
    pub selectors: Vec<(String, String)>,
    /// The `s:Body` element.
    pub body: Element,
}

impl SoapRequest {
    /// Parse and check the header elements AMT requires.
    pub fn parse(body: &[u8]) -> Result<SoapRequest, Reject> {
        let text = std::str::from_utf8(body).map_err(|_| Reject::Malformed("request is not UTF-8".into()))?;
        let env = xml::parse(text).map_err(|e| Reject::Malformed(e.to_string()))?;
        if !env.is(ns::SOAP, "Envelope") {
            return Err(Reject::Malformed("not a SOAP 1.2 Envelope".into()));
        }
        let header = env.child(ns::SOAP, "Header").ok_or(Reject::MissingHeader("s:Header"))?;
        let need = |ns: &str, name: &'static str| -> Result<String, Reject> {
            header
                .child(ns, name)
                .map(|e| e.text_trim().to_owned())
                .filter(|t| !t.is_empty())
                .ok_or(Reject::MissingHeader(name))
        };
        let action = need(ns::WSA, "Action")?;
        let to = need(ns::WSA, "To")?;
        let resource_uri = need(ns::WSMAN, "ResourceURI")?;
        let message_id = need(ns::WSA, "MessageID")?;
        let reply_to = header.child(ns::WSA, "ReplyTo").and_then(|r| r.child(ns::WSA, "Address"));
        if reply_to.map(Element::text_trim) != Some(ns::ANONYMOUS) {
            return Err(Reject::MissingHeader("ReplyTo/Address (anonymous)"));
        }
        let selectors = header
            .child(ns::WSMAN, "SelectorSet")
            .map(|set| {
                set.children
                    .iter()
                    .filter(|s| s.is(ns::WSMAN, "Selector"))
                    .map(|s| (s.attr("Name").unwrap_or_default().to_owned(), s.text_trim().to_owned()))
                    .collect()
            })
            .unwrap_or_default();
        let body = env.child(ns::SOAP, "Body").cloned().ok_or(Reject::MissingHeader("s:Body"))?;
        Ok(SoapRequest { action, resource_uri, message_id, to, selectors, body })
    }

    /// The first element inside the body.
    pub fn payload(&self) -> Option<&Element> {
        self.body.children.first()
    }
}

/// Why a request was refused before reaching an operation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reject {
    Malformed(String),
    MissingHeader(&'static str),
}

/// An EPR parameter, read: `(resource URI, selectors)`; `None` without `wsa:Address`.
pub fn read_epr(e: &Element) -> Option<(String, Vec<(String, String)>)> {
    e.child(ns::WSA, "Address")?;
    Some((response::epr_resource_uri(e)?.to_owned(), response::epr_selectors(e)))
}

/// A MessageID in AMT's style (`uuid:00000000-8086-8086-8086-…`).
pub fn amt_message_id(n: u64) -> String {
    format!("uuid:00000000-8086-8086-8086-{n:012X}")
}

/// A response envelope in AMT's layout (`a:`…`i:` prefixes), for answers
/// that no capture exists for. `body` writes the body content; its own
/// elements must declare their namespace (or use the `g:`/`h:` prefixes
/// bound here to `g_ns`/`h_ns`).
pub fn amt_envelope(
    message_id: &str,
    action: &str,
    resource_uri: Option<&str>,
    relates_to: &str,
    g_ns: &str,
    h_ns: &str,
    body: impl FnOnce(&mut XmlWriter),
) -> String {
    let mut w = XmlWriter::new();
    w.decl();
    w.start(
        "a:Envelope",
        &[
            ("xmlns:a", ns::SOAP),
            ("xmlns:b", ns::WSA),
            ("xmlns:c", ns::WSMAN),
            ("xmlns:d", "http://schemas.xmlsoap.org/ws/2005/02/trust"),
            ("xmlns:e", "http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-wssecurity-secext-1.0.xsd"),
            ("xmlns:f", "http://schemas.dmtf.org/wbem/wsman/1/cimbinding.xsd"),
            ("xmlns:g", g_ns),
            ("xmlns:h", h_ns),
            ("xmlns:xsi", ns::XSI),
        ],
    );
    w.start("a:Header", &[]);
    w.text_element("b:To", &[], ns::ANONYMOUS);
    w.text_element("b:RelatesTo", &[], relates_to);
    w.text_element("b:Action", &[("a:mustUnderstand", "true")], action);
    w.text_element("b:MessageID", &[], message_id);
    if let Some(r) = resource_uri {
        w.text_element("c:ResourceURI", &[], r);
    }
    w.end("a:Header");
    w.start("a:Body", &[]);
    body(&mut w);
    w.end("a:Body");
    w.end("a:Envelope");
    w.into_string()
}

/// A SOAP fault envelope as AMT writes them (DSP0226 §14). `subcode` is
/// `(namespace, local name)`.
pub fn fault_envelope(
    message_id: &str,
    relates_to: &str,
    subcode: (&str, &str),
    reason: &str,
    detail: Option<&str>,
) -> String {
    let action = if subcode.0 == ns::WSA {
        "http://schemas.xmlsoap.org/ws/2004/08/addressing/fault"
    } else {
        "http://schemas.dmtf.org/wbem/wsman/1/wsman/fault"
    };
    amt_envelope(message_id, action, None, relates_to, subcode.0, ns::WSMAN, |w| {
        w.start("a:Fault", &[]);
        w.start("a:Code", &[]);
        w.text_element("a:Value", &[], "a:Sender");
        w.start("a:Subcode", &[]);
        w.text_element("a:Value", &[], &format!("g:{}", subcode.1));
        w.end("a:Subcode");
        w.end("a:Code");
        w.start("a:Reason", &[]);
        w.text_element("a:Text", &[("xml:lang", "en-US")], reason);
        w.end("a:Reason");
        match detail {
            Some(d) => {
                w.start("a:Detail", &[]);
                w.text_element("h:FaultDetail", &[], d);
                w.end("a:Detail");
            }
            None => w.empty("a:Detail", &[]),
        }
        w.end("a:Fault");
    })
}

/// Replace the values of every element with local name `name` in a captured
/// document: the first occurrence becomes `values.len()` elements with the
/// same qualified name, later occurrences are dropped. Everything else is
/// copied event by event (so the capture's prefixes and layout survive).
pub fn replace_values(doc: &str, name: &str, values: &[String]) -> Result<String, String> {
    let mut reader = Reader::from_str(doc);
    let mut w = quick_xml::Writer::new(Vec::with_capacity(doc.len() + 64));
    let mut done = false;
    let mut skip_depth = 0usize;
    loop {
        let ev = match reader.read_event() {
            Ok(Event::Eof) => break,
            Ok(ev) => ev,
            Err(e) => return Err(format!("captured fixture is not well-formed XML: {e}")),
        };
        if skip_depth > 0 {
            match ev {
                Event::Start(_) => skip_depth += 1,
                Event::End(_) => skip_depth -= 1,
                _ => {}
            }
            continue;
        }
        match &ev {
            Event::Start(s) | Event::Empty(s) if s.local_name().into_inner() == name => {
                if matches!(ev, Event::Start(_)) {
                    skip_depth = 1;
                }
                if !done {
                    done = true;
                    let qname = s.name().into_inner().to_owned();
                    for v in values {
                        let start = quick_xml::events::BytesStart::new(qname.clone());
                        w.write_event(Event::Start(start)).expect("in-memory write");
                        w.write_event(Event::Text(BytesText::new(v))).expect("in-memory write");
                        w.write_event(Event::End(quick_xml::events::BytesEnd::new(qname.clone())))
                            .expect("in-memory write");
                    }
                }
            }
            _ => w.write_event(ev).expect("in-memory write"),
        }
    }
    Ok(String::from_utf8(w.into_inner()).expect("UTF-8 in, UTF-8 out"))
}

/// Typed request-body readers for the checks the server makes.
pub fn child_text<'a>(e: &'a Element, name: &str) -> Option<&'a str> {
    e.child_local(name).map(Element::text_trim)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replace_values_keeps_layout() {
        let doc = r#"<?xml version="1.0"?><a:E xmlns:a="urn:a"><a:X>1</a:X><a:Y>k</a:Y><a:X>2</a:X><a:X/></a:E>"#;
        let out = replace_values(doc, "X", &["9".into()]).unwrap();
        assert_eq!(out, r#"<?xml version="1.0"?><a:E xmlns:a="urn:a"><a:X>9</a:X><a:Y>k</a:Y></a:E>"#);
        let out = replace_values(doc, "Y", &["<&>".into(), "b".into()]).unwrap();
        let root = xml::parse(&out).unwrap();
        let ys: Vec<_> = root.children_local("Y").map(|e| e.text.clone()).collect();
        assert_eq!(ys, vec!["<&>".to_owned(), "b".into()]);
    }

    #[test]
    fn built_faults_read_back() {
        let f = fault_envelope("uuid:2", "uuid:1", (ns::WSMAN, "AccessDenied"), "no", Some("urn:detail"));
        let env = bmcfleet_amt::wsman::Envelope::parse(&f).unwrap();
        let fault = env.fault().unwrap();
        assert_eq!(fault.name().local, "AccessDenied");
        assert_eq!(fault.name().ns.as_deref(), Some(ns::WSMAN));
        assert_eq!(fault.detail.as_deref(), Some("urn:detail"));
    }
}
