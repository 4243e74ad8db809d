//! Small readers for Redfish JSON: links, members, annotations.

use serde_json::Value;

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
