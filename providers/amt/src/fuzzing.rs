//! Entry point for the `wsman_xml` fuzz target (`fuzz/`) and for the corpus
//! replay test (`tests/tests/fuzz_corpus.rs`). Not a public API.
//!
//! [`wsman_xml`] hands the bytes to the same code a WS-Man reply reaches in
//! production: [`read_reply`] (UTF-8, XML tree, SOAP envelope, fault
//! mapping, HTTP status), then everything the capabilities read from an
//! envelope: enumeration contexts and pull pages, `ReturnValue`s, the power
//! state, the forced boot source and device, the Put body rebuilt from a
//! read `AMT_BootSettingData` (which must stay well-formed XML), and the
//! Digest `WWW-Authenticate` parser on the same text.
//!
//! Input layout: `[status_selector, body…]`.

use crate::boot::{self, device_of, forced_source, settings_for};
use crate::digest::{parse_auth_header, Challenge};
use crate::power::{self, status_from};
use crate::wsman::client::read_reply;
use crate::wsman::response::{epr_resource_uri, epr_selectors, prop_bool, props};
use crate::wsman::Request;
use crate::{xml, AmtError};
use bmcfleet_schema::BootDevice;
use std::time::Duration;

const STATUSES: [u16; 8] = [200, 200, 200, 400, 401, 500, 503, 204];

/// One fuzz input: see the module docs for the layout.
pub fn wsman_xml(data: &[u8]) {
    let [selector, body @ ..] = data else { return };
    let status = STATUSES[usize::from(selector % 8)];
    match read_reply("fuzz", status, body) {
        Ok(env) => envelope(&env),
        Err(AmtError::Fault(f)) => {
            let _ = (f.classify(), f.name().to_string(), f.to_string());
        }
        Err(e) => {
            let _ = (e.code(), e.retryable(), e.breaks_session(), e.to_string());
        }
    }
    if let Ok(text) = std::str::from_utf8(body) {
        let _ = parse_auth_header(text);
        let _ = Challenge::select([text]);
    }
}

fn envelope(env: &crate::wsman::Envelope) {
    let _ = env.enumeration_context();
    for method in ["RequestPowerStateChange", "ChangeBootOrder", "SetBootConfigRole"] {
        let _ = env.return_value(method);
    }
    let items = env.pull_page().map(|p| p.items).unwrap_or_default();
    if let Ok(st) = status_from(&items) {
        let _ = (st.mapped(), power::describe(st.state));
    }
    let source = forced_source(&items);
    for el in items.iter().chain(env.body.children.iter()) {
        let _ = device_of(el, source.as_deref());
        let _ = (prop_bool(el, "BIOSSetup"), props(el, "AvailableRequestedPowerStates"));
        let _ = (epr_selectors(el), epr_resource_uri(el));
        for device in [BootDevice::Pxe, BootDevice::Bios, BootDevice::Safe] {
            let plan = boot::plan(device).expect("a settable device");
            if let Ok(properties) = settings_for(el, &plan) {
                // What we send back must be well-formed whatever the BMC said.
                let req = Request::put(
                    "http://intel.com/wbem/wscim/1/amt-schema/1/AMT_BootSettingData",
                    &[],
                    &el.name,
                    properties,
                );
                let out = String::from_utf8(req.to_xml("uuid:fuzz", Duration::from_secs(10))).expect("UTF-8 request");
                if let Err(e) = xml::parse(&out) {
                    panic!("Put body built from a BMC instance is not well-formed ({e}): {out}");
                }
            }
        }
    }
}
