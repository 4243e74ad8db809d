//! Raw passthrough: one Redfish request under `/redfish/v1`, bounded, on
//! the session's authentication. HTTP errors map to typed errors like every
//! other action; a `202` is returned as is (not followed), so a caller can
//! see the task monitor in the answer. Raw requests are never retried.

use crate::error::{invalid, protocol};
use crate::session::RedfishSession;
use bmcfleet_provider::{Ctx, Raw, Result};
use bmcfleet_schema::{HttpMethod, RawRedfish, RawRequest, RawResponse};
use reqwest::Method;
use serde_json::json;

/// The path that is sent: the canonical spelling
/// (`bmcfleet_schema::raw_policy::canonical_redfish_path`), the very one
/// the raw policy matched (it matches canonical paths only), whatever
/// another spelling would mean to this BMC. A BMC's own spelling (a
/// trailing slash, `/redfish/v1/Systems/`) is sent canonical; a path that
/// has no canonical spelling is refused.
pub(crate) fn canonical_path(path: &str) -> Result<String> {
    bmcfleet_schema::raw_policy::canonical_redfish_path(path).map_err(|why| {
        // Named without its query (it may carry a token).
        let shown = crate::transport::shown_path(path);
        invalid(format!("raw Redfish path {shown:?} is not a plain resource path: {why}"))
    })
}

fn method_of(m: HttpMethod) -> Method {
    match m {
        HttpMethod::Get => Method::GET,
        HttpMethod::Post => Method::POST,
        HttpMethod::Patch => Method::PATCH,
        HttpMethod::Put => Method::PUT,
        HttpMethod::Delete => Method::DELETE,
    }
}

impl RedfishSession {
    async fn raw_redfish(&mut self, ctx: &Ctx, req: &RawRedfish) -> Result<RawResponse> {
        let path = canonical_path(&req.path)?;
        let max = self.transport.config().max_raw_body_bytes;
        if let Some(body) = &req.body {
            let n = serde_json::to_vec(body).map(|v| v.len()).unwrap_or(usize::MAX);
            if n > max {
                return Err(invalid(format!("raw Redfish body is {n} bytes; the limit is {max}")));
            }
        }
        let method = method_of(req.method);
        if matches!(method, Method::GET | Method::DELETE) && req.body.is_some() {
            return Err(invalid(format!("a raw {method} takes no body")));
        }
        // Never the query (it may carry a token): not in the log, not in an error the worker logs.
        let shown = crate::transport::shown_path(&path);
        tracing::info!(bmc = %self.transport.bmc(), %method, path = %shown, "Raw Redfish request.");
        let reply = self.transport.exchange(ctx, method.clone(), &path, req.body.as_ref(), None).await?;
        if !reply.status.is_success() {
            return Err(crate::error::status_error(method.as_str(), shown, reply.status, &reply.body));
        }
        let body = if reply.body.iter().all(u8::is_ascii_whitespace) {
            None
        } else {
            match reply.parse() {
                Ok(v) => Some(v),
                Err(e) if reply.header("content-type").is_some_and(|c| c.contains("json")) => {
                    return Err(protocol(format!("{method} {shown}: the BMC's answer {e}")));
                }
                Err(_) => Some(json!(String::from_utf8_lossy(&reply.body))),
            }
        };
        let body = match (body, reply.location()) {
            (None, Some(loc)) => Some(json!({ "Location": loc })),
            (b, _) => b,
        };
        Ok(RawResponse { status: reply.status.as_u16(), data: Vec::new(), body })
    }
}

#[async_trait::async_trait]
impl Raw for RedfishSession {
    async fn raw(&mut self, ctx: &Ctx, req: &RawRequest) -> Result<RawResponse> {
        match req {
            RawRequest::Redfish(r) => self.raw_redfish(ctx, r).await,
            RawRequest::Ipmi(_) => {
                Err(invalid("the redfish provider cannot send a raw IPMI request; use protocol ipmi"))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths() {
        for ok in [
            "/redfish/v1",
            "/redfish/v1/Systems",
            "/redfish/v1/Systems?$expand=.",
            "/redfish/v1/Managers/iDRAC.Embedded.1",
        ] {
            assert_eq!(canonical_path(ok).unwrap(), ok);
        }
        // Other spellings are sent canonical: the path the raw policy matched.
        for (given, sent) in [
            ("/redfish/v1/", "/redfish/v1"),
            ("/redfish/v1/Systems/system/", "/redfish/v1/Systems/system"),
            ("/redfish/v1//Managers/bmc/", "/redfish/v1/Managers/bmc"),
            ("/redfish/v1/Update%53ervice", "/redfish/v1/UpdateService"),
        ] {
            assert_eq!(canonical_path(given).unwrap(), sent, "{given}");
        }
        for bad in [
            "/redfish/v10",
            "/etc/passwd",
            "/redfish/v1/../x",
            "/redfish/v1/a b",
            "/redfish/v1/%2e%2e/x",
            "/redfish/v1/x#y",
            "http://evil/redfish/v1",
            "/redfish/v1/Systems;jsessionid=1",
        ] {
            assert!(canonical_path(bad).is_err(), "{bad}");
        }
    }
}
