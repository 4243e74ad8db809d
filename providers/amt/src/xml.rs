//! A small namespace-aware XML tree over `quick-xml`, and an escaping writer.
//!
//! WS-Man envelopes are small (a few KiB) and we need random access to them
//! (header, body, fault, nested references), so responses are read into an
//! [`Element`] tree. Every element and attribute name is resolved to its
//! namespace URI while reading: prefixes (`a:`, `g:`, `h:` …) are
//! meaningless and differ between firmware versions.
//!
//! Requests are written with [`XmlWriter`], which only ever hands values to
//! `quick-xml` as text or attribute values, so they are always escaped.

use quick_xml::events::{BytesDecl, BytesEnd, BytesStart, BytesText, Event};
use quick_xml::name::{QName, ResolveResult};
use quick_xml::reader::NsReader;
use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;

/// Deepest element nesting accepted (a WS-Man envelope needs about 10).
const MAX_DEPTH: usize = 64;
/// Most elements and attributes (together) accepted in one document: each
/// is a few bytes of the answer and dozens of bytes of tree.
const MAX_ELEMENTS: usize = 200_000;

/// Why a document could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("malformed XML: {0}")]
pub struct XmlError(pub String);

/// One attribute, its name resolved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attr {
    /// Namespace URI; `None` for unprefixed attributes (they are in no namespace).
    /// Shared with every name of the document in that namespace.
    pub ns: Option<Arc<str>>,
    pub name: String,
    pub value: String,
}

/// One element with its namespace resolved.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Element {
    /// Namespace URI, `None` when the element is in no namespace. Shared
    /// with every name of the document in that namespace: a BMC's long
    /// namespace name is held once, not once per element and attribute.
    pub ns: Option<Arc<str>>,
    /// Local name.
    pub name: String,
    pub attrs: Vec<Attr>,
    pub children: Vec<Element>,
    /// Character data directly inside this element (entities resolved).
    pub text: String,
    /// When the text is a `prefix:local` QName whose prefix was in scope,
    /// its resolved form (SOAP fault codes are QNames in text).
    pub text_qname: Option<(Arc<str>, String)>,
}

impl Element {
    pub fn is(&self, ns: &str, name: &str) -> bool {
        self.name == name && self.ns.as_deref() == Some(ns)
    }

    /// First child with this namespace and local name.
    pub fn child(&self, ns: &str, name: &str) -> Option<&Element> {
        self.children.iter().find(|c| c.is(ns, name))
    }

    /// First child with this local name, whatever its namespace.
    pub fn child_local(&self, name: &str) -> Option<&Element> {
        self.children.iter().find(|c| c.name == name)
    }

    /// All children with this local name, whatever their namespace.
    pub fn children_local<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Element> + 'a {
        self.children.iter().filter(move |c| c.name == name)
    }

    /// Value of an unqualified attribute.
    pub fn attr(&self, name: &str) -> Option<&str> {
        self.attrs.iter().find(|a| a.ns.is_none() && a.name == name).map(|a| a.value.as_str())
    }

    /// Text with XML whitespace trimmed.
    pub fn text_trim(&self) -> &str {
        self.text.trim_matches(|c| matches!(c, ' ' | '\t' | '\r' | '\n'))
    }

    /// Trimmed text of the first child with this local name.
    pub fn child_text(&self, name: &str) -> Option<&str> {
        self.child_local(name).map(Element::text_trim)
    }

    /// Whether `xsi:nil="true"` is set.
    pub fn is_nil(&self) -> bool {
        self.attrs
            .iter()
            .any(|a| a.ns.as_deref() == Some(crate::wsman::ns::XSI) && a.name == "nil" && a.value.trim() == "true")
    }
}

fn err(msg: impl fmt::Display) -> XmlError {
    XmlError(msg.to_string())
}

/// The namespace names of one document, each held once: a name is bound
/// once (up to a few KiB of the document) and may be in scope for every
/// element, attribute and QName text that follows (a few bytes each).
#[derive(Default)]
struct Names(HashSet<Arc<str>>);

impl Names {
    fn get(&mut self, ns: &str) -> Arc<str> {
        if let Some(held) = self.0.get(ns) {
            return held.clone();
        }
        let held: Arc<str> = Arc::from(ns);
        self.0.insert(held.clone());
        held
    }
}

fn owned_ns(names: &mut Names, r: &ResolveResult<'_>) -> Result<Option<Arc<str>>, XmlError> {
    match r {
        ResolveResult::Bound(ns) => Ok(Some(names.get(ns.into_inner()))),
        ResolveResult::Unbound => Ok(None),
        ResolveResult::Unknown(p) => Err(err(format_args!("undeclared namespace prefix `{p}`"))),
    }
}

fn predefined_entity(name: &str) -> Option<char> {
    Some(match name {
        "lt" => '<',
        "gt" => '>',
        "amp" => '&',
        "apos" => '\'',
        "quot" => '"',
        _ => return None,
    })
}

fn looks_like_qname(s: &str) -> Option<(&str, &str)> {
    let (p, l) = s.split_once(':')?;
    let ok = |x: &str| {
        !x.is_empty()
            && x.chars().next().is_some_and(|c| c.is_alphabetic() || c == '_')
            && x.chars().all(|c| c.is_alphanumeric() || matches!(c, '_' | '-' | '.'))
    };
    (ok(p) && ok(l)).then_some((p, l))
}

/// Parse a whole document into its root element.
///
/// Refuses DTDs (SOAP forbids them, and they are the usual entity-expansion
/// vector), undeclared prefixes, mismatched end tags and unknown entities.
pub fn parse(input: &str) -> Result<Element, XmlError> {
    let input = input.strip_prefix('\u{feff}').unwrap_or(input);
    let mut reader = NsReader::from_str(input);
    reader.config_mut().check_end_names = true;
    let mut stack: Vec<Element> = Vec::new();
    let mut root: Option<Element> = None;
    let mut count = 0usize;
    let mut names = Names::default();

    loop {
        let (resolved, event) = reader.read_resolved_event().map_err(err)?;
        match event {
            Event::Start(ref e) | Event::Empty(ref e) => {
                if root.is_some() {
                    return Err(err("content after the root element"));
                }
                count += 1;
                if count > MAX_ELEMENTS {
                    return Err(err("too many elements"));
                }
                if stack.len() >= MAX_DEPTH {
                    return Err(err("elements nested too deeply"));
                }
                let ns = owned_ns(&mut names, &resolved)?;
                let name = e.local_name().into_inner().to_owned();
                let mut attrs = Vec::new();
                for a in e.attributes() {
                    let a = a.map_err(err)?;
                    if a.key.0 == "xmlns" || a.key.0.starts_with("xmlns:") {
                        continue;
                    }
                    count += 1;
                    if count > MAX_ELEMENTS {
                        return Err(err("too many elements and attributes"));
                    }
                    let (ans, local) = reader.resolver().resolve_attribute(a.key);
                    let value = a.normalized_value(quick_xml::XmlVersion::Implicit1_0).map_err(err)?.into_owned();
                    attrs.push(Attr { ns: owned_ns(&mut names, &ans)?, name: local.into_inner().to_owned(), value });
                }
                let el = Element { ns, name, attrs, ..Element::default() };
                if matches!(event, Event::Empty(_)) {
                    attach(&mut stack, &mut root, el);
                } else {
                    stack.push(el);
                }
            }
            Event::End(_) => {
                let mut el = stack.pop().ok_or_else(|| err("unexpected end tag"))?;
                // Resolve a QName in text while this element's bindings are in scope.
                if let Some((p, l)) = looks_like_qname(el.text_trim()) {
                    if let (ResolveResult::Bound(ns), _) = reader.resolver().resolve(QName(&format!("{p}:{l}")), true) {
                        el.text_qname = Some((names.get(ns.into_inner()), l.to_owned()));
                    }
                }
                attach(&mut stack, &mut root, el);
            }
            Event::Text(t) => {
                let content = t.xml10_content();
                match stack.last_mut() {
                    Some(top) => top.text.push_str(&content),
                    None if content.trim().is_empty() => {}
                    None => return Err(err("text outside the root element")),
                }
            }
            Event::CData(c) => {
                let s = c.xml10_content();
                match stack.last_mut() {
                    Some(top) => top.text.push_str(&s),
                    None => return Err(err("CDATA outside the root element")),
                }
            }
            Event::GeneralRef(r) => {
                let ch = match r.resolve_char_ref().map_err(err)? {
                    Some(c) => c,
                    None => predefined_entity(&r).ok_or_else(|| err(format_args!("unknown entity `&{};`", &*r)))?,
                };
                match stack.last_mut() {
                    Some(top) => top.text.push(ch),
                    None => return Err(err("reference outside the root element")),
                }
            }
            Event::DocType(_) => return Err(err("DTDs are not allowed")),
            Event::Decl(_) | Event::PI(_) | Event::Comment(_) => {}
            Event::Eof => break,
        }
    }
    if !stack.is_empty() {
        return Err(err("document ended inside an element"));
    }
    root.ok_or_else(|| err("no root element"))
}

fn attach(stack: &mut [Element], root: &mut Option<Element>, el: Element) {
    match stack.last_mut() {
        Some(parent) => parent.children.push(el),
        None => *root = Some(el),
    }
}

/// Writes XML through `quick-xml` events: names are ours (static), every
/// value goes through `quick-xml`'s escaping.
pub struct XmlWriter {
    w: quick_xml::Writer<Vec<u8>>,
}

impl Default for XmlWriter {
    fn default() -> Self {
        Self::new()
    }
}

impl XmlWriter {
    pub fn new() -> Self {
        XmlWriter { w: quick_xml::Writer::new(Vec::with_capacity(2048)) }
    }

    fn write(&mut self, e: Event<'_>) {
        // Writing into a Vec cannot fail.
        self.w.write_event(e).expect("writing XML into memory");
    }

    pub fn decl(&mut self) {
        self.write(Event::Decl(BytesDecl::new("1.0", Some("UTF-8"), None)));
    }

    /// `<name attrs…>`; attribute values are escaped.
    pub fn start(&mut self, name: &str, attrs: &[(&str, &str)]) {
        self.write(Event::Start(tag(name, attrs)));
    }

    pub fn end(&mut self, name: &str) {
        self.write(Event::End(BytesEnd::new(name)));
    }

    /// `<name attrs…/>`.
    pub fn empty(&mut self, name: &str, attrs: &[(&str, &str)]) {
        self.write(Event::Empty(tag(name, attrs)));
    }

    /// Escaped character data.
    pub fn text(&mut self, text: &str) {
        self.write(Event::Text(BytesText::new(text)));
    }

    /// `<name attrs…>text</name>` with `text` escaped.
    pub fn text_element(&mut self, name: &str, attrs: &[(&str, &str)], text: &str) {
        self.start(name, attrs);
        self.text(text);
        self.end(name);
    }

    pub fn into_bytes(self) -> Vec<u8> {
        self.w.into_inner()
    }

    pub fn into_string(self) -> String {
        // Only &str ever went in.
        String::from_utf8(self.into_bytes()).expect("XML written from &str is UTF-8")
    }
}

/// An element's start tag with its attributes (values escaped on write).
fn tag<'a>(name: &'a str, attrs: &[(&'a str, &'a str)]) -> BytesStart<'a> {
    let mut s = BytesStart::new(name);
    for a in attrs {
        s.push_attribute(*a);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_namespaces_not_prefixes() {
        let doc = r#"<a:E xmlns:a="urn:x" xmlns="urn:d"><b xmlns:q="urn:q" q:at="1" plain="2">t</b><a:c/></a:E>"#;
        let root = parse(doc).unwrap();
        assert!(root.is("urn:x", "E"));
        let b = root.child("urn:d", "b").unwrap();
        assert_eq!(b.text, "t");
        assert_eq!(b.attr("plain"), Some("2"));
        assert_eq!(b.attrs.iter().find(|a| a.name == "at").unwrap().ns.as_deref(), Some("urn:q"));
        assert!(root.child("urn:x", "c").is_some());
    }

    #[test]
    fn entities_and_char_refs_resolve() {
        let root = parse("<r>a &amp; b &lt;c&gt; &#x41;&#66; &quot;&apos;</r>").unwrap();
        assert_eq!(root.text, "a & b <c> AB \"'");
    }

    #[test]
    fn qname_text_is_resolved_in_scope() {
        let root = parse(r#"<r xmlns:p="urn:p"><v>p:Sender</v><w>nope:X</w></r>"#).unwrap();
        assert_eq!(root.children[0].text_qname, Some(("urn:p".into(), "Sender".into())));
        assert_eq!(root.children[1].text_qname, None);
    }

    #[test]
    fn rejects_bad_documents() {
        for bad in [
            "",
            "<a>",
            "<a></b>",
            "<a><b></a>",
            "<p:a/>",
            "<a>&ent;</a>",
            "<!DOCTYPE a [<!ENTITY x \"y\">]><a>&x;</a>",
            "<a/><b/>",
            "not xml at all",
            "<a attr=\"unterminated></a>",
        ] {
            assert!(parse(bad).is_err(), "accepted {bad:?}");
        }
        let deep = "<a>".repeat(MAX_DEPTH + 1) + &"</a>".repeat(MAX_DEPTH + 1);
        assert!(parse(&deep).is_err());
    }

    /// The bytes of namespace names a tree holds: each distinct
    /// allocation once (names shared between elements count once).
    fn namespace_bytes(e: &Element, seen: &mut std::collections::HashSet<usize>) -> usize {
        let names =
            e.ns.iter()
                .chain(e.attrs.iter().filter_map(|a| a.ns.as_ref()))
                .chain(e.text_qname.iter().map(|(ns, _)| ns));
        let own: usize = names.filter(|n| seen.insert(n.as_ptr() as usize)).map(|n| n.len()).sum();
        own + e.children.iter().map(|c| namespace_bytes(c, seen)).sum::<usize>()
    }

    #[test]
    fn a_long_namespace_name_is_not_copied_into_every_element_and_attribute() {
        // 4 KiB namespace names, then 10,000 elements in the default
        // namespace, each with an attribute and a QName text in the prefixed
        // one: 230 KiB of document. A copy of the name per element,
        // attribute and QName is 120 MiB of tree (4 MiB of answer, gigabytes).
        let long = |c: char| format!("urn:{}", c.to_string().repeat(4 * 1024));
        let mut doc = format!(r#"<r xmlns="{}" xmlns:p="{}">"#, long('d'), long('p'));
        for i in 0..10_000 {
            doc.push_str(&format!(r#"<a p:n="{i}">p:v</a>"#));
        }
        doc.push_str("</r>");
        let root = parse(&doc).expect("a well-formed document");
        assert_eq!(root.children.len(), 10_000);
        let last = &root.children[9_999];
        assert!(last.is(&long('d'), "a"));
        assert_eq!(last.attrs[0].ns.as_deref(), Some(long('p').as_str()));
        assert_eq!(last.text_qname.as_ref().map(|(ns, l)| (&**ns, l.as_str())), Some((long('p').as_str(), "v")));
        let held = namespace_bytes(&root, &mut Default::default());
        assert!(
            held <= doc.len(),
            "a {} byte document read into a tree holding {held} bytes of namespace names",
            doc.len()
        );
    }

    #[test]
    fn attributes_count_toward_the_document_limit() {
        // An attribute is a few bytes of document and a few dozen of tree,
        // like an element: 300,000 of them on one element (2.3 MiB, under
        // the 4 MiB answer limit) are refused like as many elements.
        let mut doc = String::from("<r");
        for i in 0..300_000 {
            doc.push_str(&format!(" a{i}=\"\""));
        }
        doc.push_str("/>");
        let e = parse(&doc).map(|r| r.attrs.len()).expect_err("300,000 attributes");
        assert!(e.0.contains("too many"), "{e}");
    }

    #[test]
    fn writer_escapes_text_and_attributes() {
        let mut w = XmlWriter::new();
        w.text_element("Selector", &[("Name", "a\"b<c&")], "x</w:Selector><evil/>&");
        let s = w.into_string();
        assert!(!s.contains("<evil/>"), "{s}");
        let back = parse(&s).unwrap();
        assert_eq!(back.text, "x</w:Selector><evil/>&");
        assert_eq!(back.attr("Name"), Some("a\"b<c&"));
    }
}
