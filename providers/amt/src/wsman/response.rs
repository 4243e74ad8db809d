//! Reading response envelopes.

use super::fault::Fault;
use super::ns;
use crate::xml::{self, Element, XmlError};

/// A parsed SOAP 1.2 envelope.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Envelope {
    /// `wsa:Action` of the header, when present.
    pub action: Option<String>,
    /// `wsman:ResourceURI` of the header, when present.
    pub resource_uri: Option<String>,
    /// The `s:Body` element.
    pub body: Element,
}

/// What a response holds that it should not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// A `ReturnValue` that is not an unsigned number.
    ReturnValue,
}

pub type Error = bmcfleet_schema::error::Error<ErrorKind>;

/// One page of an enumeration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PullPage {
    pub items: Vec<Element>,
    /// Context for the next Pull, absent at the end.
    pub context: Option<String>,
    pub end_of_sequence: bool,
}

impl Envelope {
    /// Parse a document that must be a SOAP 1.2 envelope with a body.
    pub fn parse(text: &str) -> Result<Envelope, XmlError> {
        let root = xml::parse(text)?;
        if !root.is(ns::SOAP, "Envelope") {
            return Err(XmlError(format!(
                "expected a SOAP 1.2 Envelope, found `{}` in namespace `{}`",
                root.name,
                root.ns.as_deref().unwrap_or("")
            )));
        }
        let header = root.child(ns::SOAP, "Header");
        let action = header.and_then(|h| h.child(ns::WSA, "Action")).map(|a| a.text_trim().to_owned());
        let resource_uri = header.and_then(|h| h.child(ns::WSMAN, "ResourceURI")).map(|a| a.text_trim().to_owned());
        let body = root
            .children
            .into_iter()
            .find(|c| c.is(ns::SOAP, "Body"))
            .ok_or_else(|| XmlError("SOAP envelope without a Body".into()))?;
        Ok(Envelope { action, resource_uri, body })
    }

    /// The SOAP fault in the body, if this is a fault envelope.
    pub fn fault(&self) -> Option<Fault> {
        self.body.child(ns::SOAP, "Fault").map(Fault::from_element)
    }

    /// The first body element with this local name (class instances are in
    /// their resource URI's namespace, which callers need not repeat).
    pub fn body_element(&self, local_name: &str) -> Option<&Element> {
        self.body.child_local(local_name)
    }

    /// `EnumerationContext` of an EnumerateResponse.
    pub fn enumeration_context(&self) -> Option<String> {
        let r = self.body.child(ns::WSEN, "EnumerateResponse")?;
        r.child(ns::WSEN, "EnumerationContext").map(|c| c.text_trim().to_owned())
    }

    /// Items of a PullResponse.
    pub fn pull_page(&self) -> Option<PullPage> {
        let r = self.body.child(ns::WSEN, "PullResponse")?;
        let items = r.child(ns::WSEN, "Items").map(|i| i.children.clone()).unwrap_or_default();
        Some(PullPage {
            items,
            context: r.child(ns::WSEN, "EnumerationContext").map(|c| c.text_trim().to_owned()),
            end_of_sequence: r.child(ns::WSEN, "EndOfSequence").is_some(),
        })
    }

    /// `ReturnValue` of `<method>_OUTPUT`: `None` when the element is missing,
    /// `Some(Err(_))` when it is not a number (the text names the value).
    pub fn return_value(&self, method: &str) -> Option<Result<u32, Error>> {
        let out = self.body_element(&format!("{method}_OUTPUT"))?;
        let rv = out.child_local("ReturnValue")?;
        let text = rv.text_trim();
        Some(
            text.parse::<u32>()
                .map_err(|_| Error::new(ErrorKind::ReturnValue, format!("ReturnValue `{text}` is not a number"))),
        )
    }
}

/// Trimmed text of a property of an instance.
pub fn prop<'a>(instance: &'a Element, name: &str) -> Option<&'a str> {
    instance.child_text(name)
}

/// All values of a (possibly array) property.
pub fn props<'a>(instance: &'a Element, name: &'a str) -> Vec<&'a str> {
    instance.children_local(name).map(Element::text_trim).collect()
}

/// `true`/`false` property.
pub fn prop_bool(instance: &Element, name: &str) -> Option<bool> {
    match prop(instance, name)? {
        "true" | "1" => Some(true),
        "false" | "0" => Some(false),
        _ => None,
    }
}

/// Selectors of an EPR element (`<x:Foo><a:Address/><a:ReferenceParameters>…`).
pub fn epr_selectors(epr: &Element) -> Vec<(String, String)> {
    epr.child(ns::WSA, "ReferenceParameters")
        .and_then(|rp| rp.child(ns::WSMAN, "SelectorSet"))
        .map(|set| {
            set.children
                .iter()
                .filter(|s| s.is(ns::WSMAN, "Selector"))
                .map(|s| (s.attr("Name").unwrap_or_default().to_owned(), s.text_trim().to_owned()))
                .collect()
        })
        .unwrap_or_default()
}

/// Resource URI of an EPR element.
pub fn epr_resource_uri(epr: &Element) -> Option<&str> {
    epr.child(ns::WSA, "ReferenceParameters")?.child(ns::WSMAN, "ResourceURI").map(Element::text_trim)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_non_envelopes() {
        assert!(Envelope::parse("<html><body>hi</body></html>").is_err());
        assert!(Envelope::parse(
            r#"<s:Envelope xmlns:s="http://schemas.xmlsoap.org/soap/envelope/"><s:Body/></s:Envelope>"#
        )
        .is_err());
        assert!(Envelope::parse(
            r#"<s:Envelope xmlns:s="http://www.w3.org/2003/05/soap-envelope"><s:Header/></s:Envelope>"#
        )
        .is_err());
        let ok =
            Envelope::parse(r#"<s:Envelope xmlns:s="http://www.w3.org/2003/05/soap-envelope"><s:Body/></s:Envelope>"#)
                .unwrap();
        assert!(ok.fault().is_none());
        assert!(ok.return_value("X").is_none());
        let out = |rv: &str| {
            Envelope::parse(&format!(
                r#"<s:Envelope xmlns:s="http://www.w3.org/2003/05/soap-envelope"><s:Body><X_OUTPUT><ReturnValue>{rv}</ReturnValue></X_OUTPUT></s:Body></s:Envelope>"#
            ))
            .unwrap()
        };
        assert_eq!(out(" 2 ").return_value("X").map(Result::ok), Some(Some(2)));
        let e = out("-1").return_value("X").unwrap().unwrap_err();
        assert_eq!((e.kind(), e.to_string().as_str()), (ErrorKind::ReturnValue, "ReturnValue `-1` is not a number"));
    }
}
