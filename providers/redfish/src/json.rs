//! Small readers for Redfish JSON: links, members, annotations.

use serde_json::Value;

/// The most JSON values one answer may hold (arrays, objects, strings,
/// numbers, literals alike). Real Redfish documents hold far fewer: a BIOS
/// attribute registry or an expanded event log, tens of thousands. Parsed,
/// a value costs 32 bytes and more, so an answer of millions of tiny values
/// (`[0,0,0,…]`, 2 bytes each) would grow a few MiB into hundreds: it is
/// refused before it is parsed.
pub(crate) const MAX_VALUES: usize = 500_000;

/// What one parsed JSON value is charged against the worker's answer
/// memory ((`RedfishConfig::max_buffered_bytes`)): a `serde_json`
/// value is 32 bytes, and map entries, keys and vector slack add to it.
pub(crate) const PARSED_VALUE_BYTES: usize = 48;

/// `body` parsed as JSON, unless it holds more than [`MAX_VALUES`] values
/// (counted without parsing: one for the document and one for every `[`,
/// `,` and `:` outside a string, which counts every element and member
/// value, and the keys after an object's first; `Err` says why).
pub(crate) fn parse(body: &[u8]) -> Result<Value, Unparsed> {
    parse_counted(body, value_count(body))
}

/// [`parse`] of a body whose values were counted already
/// ([`value_count`]: the transport counts them as the answer arrives).
pub(crate) fn parse_counted(body: &[u8], values: usize) -> Result<Value, Unparsed> {
    if values > MAX_VALUES {
        return Err(Unparsed::TooMany(values));
    }
    serde_json::from_slice(body).map_err(Unparsed::Invalid)
}

/// Why a body was not parsed; reads after "the BMC's answer".
#[derive(Debug)]
pub(crate) enum Unparsed {
    TooMany(usize),
    Invalid(serde_json::Error),
}

impl std::fmt::Display for Unparsed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unparsed::TooMany(n) => write!(f, "holds {n} JSON values, more than {MAX_VALUES}: refused unparsed"),
            Unparsed::Invalid(e) => write!(f, "is not valid JSON ({e})"),
        }
    }
}

/// How many values `body` holds, if it is JSON (an upper bound otherwise).
pub(crate) fn value_count(body: &[u8]) -> usize {
    let (mut count, mut in_string, mut escaped) = (1, false, false);
    for &b in body {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b',' | b':' => count += 1,
            _ => {}
        }
    }
    count
}

/// Normalise an `@odata.id` / action target: the fragment and a trailing
/// `/` are dropped (except for `/`). An absolute URL is kept whole: the
/// transport resolves every link against the BMC's base and refuses one that
/// leaves it (`protocol_error`, nothing sent), so a hostile BMC's link to
/// another host fails instead of being quietly rewritten onto the BMC.
pub(crate) fn norm_path(p: &str) -> String {
    let p = p.trim();
    let p = p.split('#').next().unwrap_or(p);
    let trimmed = p.trim_end_matches('/');
    if trimmed.is_empty() {
        "/".to_owned()
    } else {
        trimmed.to_owned()
    }
}

/// `v[key]["@odata.id"]`, normalised.
pub(crate) fn link(v: &Value, key: &str) -> Option<String> {
    v.get(key)?.get("@odata.id")?.as_str().map(norm_path)
}

/// The `@odata.id` of every entry in `v[key]` (an array of links).
pub(crate) fn links(v: &Value, key: &str) -> Vec<String> {
    v.get(key)
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(|m| m.get("@odata.id")?.as_str().map(norm_path)).collect())
        .unwrap_or_default()
}

/// The `Members` of a collection.
pub(crate) fn members(v: &Value) -> Vec<String> {
    links(v, "Members")
}

pub(crate) fn str_of<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

pub(crate) fn string_of(v: &Value, key: &str) -> Option<String> {
    str_of(v, key).map(str::to_owned)
}

/// `v["{prop}@Redfish.AllowableValues"]`, when the BMC advertises it.
pub(crate) fn allowable(v: &Value, prop: &str) -> Option<Vec<String>> {
    let list = v.get(format!("{prop}@Redfish.AllowableValues"))?.as_array()?;
    Some(list.iter().filter_map(Value::as_str).map(str::to_owned).collect())
}

/// The last path segment (a resource's id as it appears in its URI).
pub(crate) fn last_segment(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_answer_of_millions_of_tiny_values_is_refused_unparsed() {
        let tiny = format!("[{}0]", "0,".repeat(MAX_VALUES + 1));
        let e = parse(tiny.as_bytes()).unwrap_err().to_string();
        assert!(e.contains("more than 500000: refused unparsed"), "{e}");
        let keys: String = (0..MAX_VALUES + 1).map(|i| format!("\"{i}\":{{}},")).collect();
        assert!(matches!(parse(format!("{{{keys}\"x\":1}}").as_bytes()), Err(Unparsed::TooMany(_))));
        // Commas, colons and brackets inside strings are text, not values.
        let text = format!("{{\"Message\": \"{}\", \"esc\": \"a\\\"[,:\"}}", ",:[".repeat(MAX_VALUES));
        assert_eq!(parse(text.as_bytes()).unwrap()["esc"], "a\"[,:");
        // The object, its members' values and keys after the first, the array's elements.
        assert_eq!(value_count(br#"{"a":[1,2,{"b":null}],"c":"x,y"}"#), 8);
        assert!(matches!(parse(b"not json"), Err(Unparsed::Invalid(_))));
    }

    #[test]
    fn normalises_paths() {
        assert_eq!(norm_path("/redfish/v1/"), "/redfish/v1");
        // Kept whole: the transport decides whether it stays on the BMC.
        assert_eq!(norm_path("https://10.0.0.1/redfish/v1/Systems/1/"), "https://10.0.0.1/redfish/v1/Systems/1");
        assert_eq!(norm_path("/redfish/v1/Chassis/1/Thermal#/Fans/0"), "/redfish/v1/Chassis/1/Thermal");
        assert_eq!(norm_path("/"), "/");
    }

    #[test]
    fn reads_links_and_annotations() {
        let v = json!({"Systems": {"@odata.id": "/redfish/v1/Systems/"},
                       "Members": [{"@odata.id": "/a"}, {"@odata.id": "/b/"}],
                       "ResetType@Redfish.AllowableValues": ["On", "ForceOff"]});
        assert_eq!(link(&v, "Systems").unwrap(), "/redfish/v1/Systems");
        assert_eq!(members(&v), vec!["/a", "/b"]);
        assert_eq!(allowable(&v, "ResetType").unwrap(), vec!["On", "ForceOff"]);
        assert_eq!(last_segment("/redfish/v1/Systems/System.Embedded.1"), "System.Embedded.1");
    }
}
