//! Building request envelopes.
//!
//! Every envelope has the header AMT requires (DSP0226 §5): `wsa:Action`,
//! `wsa:To`, `wsman:ResourceURI`, `wsa:MessageID`, `wsa:ReplyTo` (anonymous)
//! and `wsman:OperationTimeout` derived from the caller's deadline, plus a
//! `wsman:SelectorSet` when the instance needs selecting. Prefixes are fixed
//! (`s`, `a`, `w`, `n`, `h`); all values are written as escaped text or
//! attribute values, never spliced into markup.

use super::ns;
use crate::xml::XmlWriter;
use std::time::Duration;

/// A WS-Addressing endpoint reference to a CIM instance, as passed in a
/// method parameter (`ManagedElement`, `Source`, `BootConfigSetting`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Epr {
    pub resource_uri: String,
    pub selectors: Vec<(String, String)>,
}

impl Epr {
    pub fn new(resource_uri: impl Into<String>, selectors: &[(&str, &str)]) -> Self {
        Epr {
            resource_uri: resource_uri.into(),
            selectors: selectors.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect(),
        }
    }
}

/// One input parameter of an extrinsic method.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Param {
    Value { name: &'static str, value: String },
    Ref { name: &'static str, epr: Epr },
}

/// One property of an instance sent with Put; arrays repeat the name,
/// `None` is sent as `xsi:nil="true"`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Property {
    pub name: String,
    pub value: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Body {
    /// Get (and anything else without a body).
    Empty,
    /// An Enumerate without filter.
    Enumerate,
    Pull {
        context: String,
        max_elements: u32,
    },
    /// `<h:{method}_INPUT>` in the resource's namespace.
    Invoke {
        method: &'static str,
        params: Vec<Param>,
    },
    /// `<h:{class}>` with the instance's properties, in the resource's namespace.
    Put {
        class: String,
        properties: Vec<Property>,
    },
}

/// One WS-Man request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    pub action: String,
    pub resource_uri: String,
    pub selectors: Vec<(String, String)>,
    pub body: Body,
}

/// Whether `name` may be written as an element name. Put round-trips
/// property names read from the BMC; anything unusual is refused rather
/// than written.
pub fn is_safe_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
        && name.len() <= 128
}

/// `xs:duration` for `wsman:OperationTimeout`, at least one second.
pub fn xs_duration(d: Duration) -> String {
    let d = d.max(Duration::from_secs(1));
    format!("PT{}.{:03}S", d.as_secs(), d.subsec_millis())
}

impl Request {
    pub fn get(resource_uri: impl Into<String>, selectors: &[(&str, &str)]) -> Self {
        Request {
            action: ns::ACTION_GET.into(),
            resource_uri: resource_uri.into(),
            selectors: own(selectors),
            body: Body::Empty,
        }
    }

    pub fn put(
        resource_uri: impl Into<String>,
        selectors: &[(&str, &str)],
        class: &str,
        properties: Vec<Property>,
    ) -> Self {
        Request {
            action: ns::ACTION_PUT.into(),
            resource_uri: resource_uri.into(),
            selectors: own(selectors),
            body: Body::Put { class: class.into(), properties },
        }
    }

    pub fn enumerate(resource_uri: impl Into<String>) -> Self {
        Request {
            action: ns::ACTION_ENUMERATE.into(),
            resource_uri: resource_uri.into(),
            selectors: Vec::new(),
            body: Body::Enumerate,
        }
    }

    pub fn pull(resource_uri: impl Into<String>, context: impl Into<String>) -> Self {
        Request {
            action: ns::ACTION_PULL.into(),
            resource_uri: resource_uri.into(),
            selectors: Vec::new(),
            body: Body::Pull { context: context.into(), max_elements: 999 },
        }
    }

    pub fn invoke(
        resource_uri: impl Into<String>,
        selectors: &[(&str, &str)],
        method: &'static str,
        params: Vec<Param>,
    ) -> Self {
        let resource_uri = resource_uri.into();
        Request {
            action: ns::method_action(&resource_uri, method),
            resource_uri,
            selectors: own(selectors),
            body: Body::Invoke { method, params },
        }
    }

    /// Short, low-cardinality name for spans and messages: `Get AMT_GeneralSettings`,
    /// `CIM_PowerManagementService.RequestPowerStateChange`.
    pub fn describe(&self) -> String {
        let class = self.resource_uri.rsplit('/').next().unwrap_or(&self.resource_uri);
        match &self.body {
            Body::Invoke { method, .. } => format!("{class}.{method}"),
            _ => {
                let verb = self.action.rsplit('/').next().unwrap_or(&self.action);
                format!("{verb} {class}")
            }
        }
    }

    /// Whether the request only reads (Get, Enumerate, Pull, Identify):
    /// anything else (Put, Create, Delete, an extrinsic method) may change
    /// state, and plan mode records it instead of sending it.
    pub fn reads_only(&self) -> bool {
        self.action == ns::ACTION_GET
            || self.action == ns::ACTION_ENUMERATE
            || self.action == ns::ACTION_PULL
            || self.action.ends_with("/Identify")
    }

    /// The request as plan mode records it: action, resource URI,
    /// selectors, and a Put's properties or a method's parameters by name
    /// (password-like ones and URL credentials redacted; an enumeration
    /// context, which differs on every call, left out).
    pub fn planned(&self) -> bmcfleet_provider::Outgoing {
        use bmcfleet_schema::plan::{redact_text, secret_key, REDACTED};
        let shown = |name: &str, value: &str| {
            if secret_key(name) {
                REDACTED.to_owned()
            } else {
                redact_text(value)
            }
        };
        let mut body = std::collections::BTreeMap::new();
        match &self.body {
            Body::Put { properties, .. } => {
                for p in properties {
                    let v = p.value.as_deref().map_or_else(|| "nil".to_owned(), |v| shown(&p.name, v));
                    body.entry(p.name.clone())
                        .and_modify(|all: &mut String| {
                            all.push_str(", ");
                            all.push_str(&v)
                        })
                        .or_insert(v);
                }
            }
            Body::Invoke { params, .. } => {
                for p in params {
                    match p {
                        Param::Value { name, value } => {
                            body.insert((*name).to_owned(), shown(name, value));
                        }
                        Param::Ref { name, epr } => {
                            let mut v = epr.resource_uri.rsplit('/').next().unwrap_or(&epr.resource_uri).to_owned();
                            for (k, sel) in &epr.selectors {
                                v.push_str(&format!(" {k}={sel}"));
                            }
                            body.insert((*name).to_owned(), redact_text(&v));
                        }
                    }
                }
            }
            Body::Empty | Body::Enumerate | Body::Pull { .. } => {}
        }
        let request = bmcfleet_provider::PlannedRequest::Wsman {
            action: self.action.clone(),
            resource_uri: self.resource_uri.clone(),
            selectors: self.selectors.iter().map(|(k, v)| (k.clone(), redact_text(v))).collect(),
            body,
        };
        if self.reads_only() {
            bmcfleet_provider::Outgoing::read(request)
        } else {
            bmcfleet_provider::Outgoing::change(request)
        }
    }

    /// The whole envelope.
    pub fn to_xml(&self, message_id: &str, timeout: Duration) -> Vec<u8> {
        let mut w = XmlWriter::new();
        w.decl();
        w.start("s:Envelope", &[("xmlns:s", ns::SOAP), ("xmlns:a", ns::WSA), ("xmlns:w", ns::WSMAN)]);
        w.start("s:Header", &[]);
        w.text_element("a:Action", &[("s:mustUnderstand", "true")], &self.action);
        w.text_element("a:To", &[("s:mustUnderstand", "true")], "/wsman");
        w.text_element("w:ResourceURI", &[("s:mustUnderstand", "true")], &self.resource_uri);
        w.text_element("a:MessageID", &[("s:mustUnderstand", "true")], message_id);
        w.start("a:ReplyTo", &[]);
        w.text_element("a:Address", &[], ns::ANONYMOUS);
        w.end("a:ReplyTo");
        w.text_element("w:OperationTimeout", &[], &xs_duration(timeout));
        write_selectors(&mut w, &self.selectors);
        w.end("s:Header");
        self.write_body(&mut w);
        w.end("s:Envelope");
        w.into_bytes()
    }

    fn write_body(&self, w: &mut XmlWriter) {
        match &self.body {
            Body::Empty => w.empty("s:Body", &[]),
            Body::Enumerate => {
                w.start("s:Body", &[]);
                w.empty("n:Enumerate", &[("xmlns:n", ns::WSEN)]);
                w.end("s:Body");
            }
            Body::Pull { context, max_elements } => {
                w.start("s:Body", &[]);
                w.start("n:Pull", &[("xmlns:n", ns::WSEN)]);
                w.text_element("n:EnumerationContext", &[], context);
                w.text_element("n:MaxElements", &[], &max_elements.to_string());
                w.end("n:Pull");
                w.end("s:Body");
            }
            Body::Invoke { method, params } => {
                w.start("s:Body", &[]);
                let root = format!("h:{method}_INPUT");
                if params.is_empty() {
                    w.empty(&root, &[("xmlns:h", &self.resource_uri)]);
                } else {
                    w.start(&root, &[("xmlns:h", &self.resource_uri)]);
                    for p in params {
                        match p {
                            Param::Value { name, value } => w.text_element(&format!("h:{name}"), &[], value),
                            Param::Ref { name, epr } => {
                                let el = format!("h:{name}");
                                w.start(&el, &[]);
                                write_epr_content(w, epr);
                                w.end(&el);
                            }
                        }
                    }
                    w.end(&root);
                }
                w.end("s:Body");
            }
            Body::Put { class, properties } => {
                w.start("s:Body", &[]);
                let root = format!("h:{class}");
                w.start(&root, &[("xmlns:h", &self.resource_uri), ("xmlns:xsi", ns::XSI)]);
                for p in properties {
                    let el = format!("h:{}", p.name);
                    match &p.value {
                        Some(v) => w.text_element(&el, &[], v),
                        None => w.empty(&el, &[("xsi:nil", "true")]),
                    }
                }
                w.end(&root);
                w.end("s:Body");
            }
        }
    }
}

fn own(selectors: &[(&str, &str)]) -> Vec<(String, String)> {
    selectors.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
}

fn write_selectors(w: &mut XmlWriter, selectors: &[(String, String)]) {
    if selectors.is_empty() {
        return;
    }
    w.start("w:SelectorSet", &[]);
    for (name, value) in selectors {
        w.text_element("w:Selector", &[("Name", name)], value);
    }
    w.end("w:SelectorSet");
}

/// `wsa:Address` + `wsa:ReferenceParameters` (DSP0227 §8: an EPR as a
/// method parameter).
fn write_epr_content(w: &mut XmlWriter, epr: &Epr) {
    w.text_element("a:Address", &[], ns::ANONYMOUS);
    w.start("a:ReferenceParameters", &[]);
    w.text_element("w:ResourceURI", &[], &epr.resource_uri);
    write_selectors(w, &epr.selectors);
    w.end("a:ReferenceParameters");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::xml;

    fn body_root(bytes: &[u8]) -> xml::Element {
        let env = xml::parse(std::str::from_utf8(bytes).unwrap()).unwrap();
        let body = env.child(ns::SOAP, "Body").unwrap().clone();
        body.children.into_iter().next().unwrap()
    }

    #[test]
    fn header_has_what_amt_requires() {
        let r = Request::get(ns::amt("AMT_GeneralSettings"), &[]);
        let x = r.to_xml("uuid:1", Duration::from_millis(2500));
        let env = xml::parse(std::str::from_utf8(&x).unwrap()).unwrap();
        assert!(env.is(ns::SOAP, "Envelope"));
        let h = env.child(ns::SOAP, "Header").unwrap();
        assert_eq!(h.child(ns::WSA, "Action").unwrap().text, ns::ACTION_GET);
        assert_eq!(h.child(ns::WSA, "To").unwrap().text, "/wsman");
        assert_eq!(h.child(ns::WSMAN, "ResourceURI").unwrap().text, ns::amt("AMT_GeneralSettings"));
        assert_eq!(h.child(ns::WSA, "MessageID").unwrap().text, "uuid:1");
        assert_eq!(h.child(ns::WSA, "ReplyTo").unwrap().child(ns::WSA, "Address").unwrap().text, ns::ANONYMOUS);
        assert_eq!(h.child(ns::WSMAN, "OperationTimeout").unwrap().text, "PT2.500S");
        assert!(h.child(ns::WSMAN, "SelectorSet").is_none());
        assert!(env.child(ns::SOAP, "Body").unwrap().children.is_empty());
        assert_eq!(r.describe(), "Get AMT_GeneralSettings");
    }

    /// Namespace-equivalent to the captured request body
    /// (`requests/RequestPowerStateChange_INPUT.body.xml`), apart from the
    /// EPR address, for which we send DSP0226's anonymous role.
    #[test]
    fn request_power_state_change_body() {
        let uri = ns::cim("CIM_PowerManagementService");
        let r = Request::invoke(
            &uri,
            &[("Name", "Intel(r) AMT Power Management Service")],
            "RequestPowerStateChange",
            vec![
                Param::Value { name: "PowerState", value: "8".into() },
                Param::Ref {
                    name: "ManagedElement",
                    epr: Epr::new(
                        ns::cim("CIM_ComputerSystem"),
                        &[("CreationClassName", "CIM_ComputerSystem"), ("Name", "ManagedSystem")],
                    ),
                },
            ],
        );
        assert_eq!(r.action, format!("{uri}/RequestPowerStateChange"));
        assert_eq!(r.describe(), "CIM_PowerManagementService.RequestPowerStateChange");
        let root = body_root(&r.to_xml("uuid:2", Duration::from_secs(5)));
        assert!(root.is(&uri, "RequestPowerStateChange_INPUT"));
        assert_eq!(root.child(&uri, "PowerState").unwrap().text, "8");
        let me = root.child(&uri, "ManagedElement").unwrap();
        let rp = me.child(ns::WSA, "ReferenceParameters").unwrap();
        assert_eq!(rp.child(ns::WSMAN, "ResourceURI").unwrap().text, ns::cim("CIM_ComputerSystem"));
        let sels: Vec<_> = rp
            .child(ns::WSMAN, "SelectorSet")
            .unwrap()
            .children
            .iter()
            .map(|s| (s.attr("Name").unwrap().to_owned(), s.text.clone()))
            .collect();
        assert_eq!(
            sels,
            vec![
                ("CreationClassName".to_owned(), "CIM_ComputerSystem".to_owned()),
                ("Name".into(), "ManagedSystem".into())
            ]
        );
    }

    #[test]
    fn selector_values_are_escaped() {
        let r = Request::get(ns::cim("CIM_X"), &[("InstanceID", "a</w:Selector><x/>&\"")]);
        let x = String::from_utf8(r.to_xml("m", Duration::from_secs(1))).unwrap();
        assert!(!x.contains("<x/>"));
        let env = xml::parse(&x).unwrap();
        let sel = &env.child(ns::SOAP, "Header").unwrap().child(ns::WSMAN, "SelectorSet").unwrap().children[0];
        assert_eq!(sel.text, "a</w:Selector><x/>&\"");
    }

    #[test]
    fn put_writes_nil_and_arrays() {
        let uri = ns::amt("AMT_BootSettingData");
        let r = Request::put(
            &uri,
            &[],
            "AMT_BootSettingData",
            vec![
                Property { name: "BIOSLastStatus".into(), value: Some("2".into()) },
                Property { name: "BIOSLastStatus".into(), value: Some("0".into()) },
                Property { name: "RSEPassword".into(), value: None },
            ],
        );
        let root = body_root(&r.to_xml("m", Duration::from_secs(1)));
        assert!(root.is(&uri, "AMT_BootSettingData"));
        assert_eq!(root.children_local("BIOSLastStatus").count(), 2);
        assert!(root.child(&uri, "RSEPassword").unwrap().is_nil());
    }

    #[test]
    fn safe_names() {
        assert!(is_safe_name("BIOSPause"));
        assert!(is_safe_name("UEFI_x.1-2"));
        for bad in ["", "1a", "a b", "a\"", "a>", "a:b", "a/b"] {
            assert!(!is_safe_name(bad), "{bad}");
        }
    }
}
