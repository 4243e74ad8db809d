//! The identify light: the ComputerSystem's `LocationIndicatorActive`
//! (Redfish 2020.3 on), or `IndicatorLED` (deprecated, older services).
//!
//! The provider acts only on the property the ComputerSystem actually has
//! (`LocationIndicatorActive` first where both are), only with a value the
//! BMC allows (`IndicatorLED@Redfish.AllowableValues`), PATCHes it with the
//! resource's ETag, and succeeds when the property reads back as asked.
//! `LocationIndicatorActive` is a boolean: `on` and `blink` both set it
//! true (the BMC shows the light in its own pattern). Redfish has no timed
//! identify: `seconds` is `unsupported` here, nothing is sent.

use crate::error::{err, unsupported};
use crate::json::{allowable, str_of};
use crate::session::RedfishSession;
use bmcfleet_provider::{Ctx, Identify, Result};
use bmcfleet_schema::{ErrorCode, IdentifyLight, IdentifySet, IdentifyState};
use serde_json::{json, Value};

const LIA: &str = "LocationIndicatorActive";
const LED: &str = "IndicatorLED";

/// The identify state of a ComputerSystem; `None` when it has neither property.
pub(crate) fn state(system: &Value) -> Option<IdentifyState> {
    if let Some(on) = system.get(LIA).and_then(Value::as_bool) {
        let light = Some(if on { IdentifyLight::On } else { IdentifyLight::Off });
        return Some(IdentifyState { light, source: LIA.into(), ..Default::default() });
    }
    let led = str_of(system, LED)?;
    let light = led_light(led);
    Some(IdentifyState {
        light,
        source: LED.into(),
        note: light.is_none().then(|| format!("the BMC reports IndicatorLED {led:?}")),
        ..Default::default()
    })
}

fn led_light(v: &str) -> Option<IdentifyLight> {
    match v {
        "Lit" => Some(IdentifyLight::On),
        "Blinking" => Some(IdentifyLight::Blink),
        "Off" => Some(IdentifyLight::Off),
        _ => None,
    }
}

fn led_value(light: IdentifyLight) -> &'static str {
    match light {
        IdentifyLight::On => "Lit",
        IdentifyLight::Blink => "Blinking",
        IdentifyLight::Off => "Off",
    }
}

/// The property and value to write for `light` on this system, or why not.
pub(crate) fn change(system: &Value, light: IdentifyLight) -> Result<(&'static str, Value)> {
    if system.get(LIA).is_some_and(Value::is_boolean) {
        return Ok((LIA, json!(light != IdentifyLight::Off)));
    }
    if system.get(LED).is_some_and(Value::is_string) {
        let value = led_value(light);
        if let Some(list) = allowable(system, LED).filter(|l| !l.iter().any(|x| x == value)) {
            return Err(unsupported(format!(
                "the BMC does not offer IndicatorLED {value} (it offers {})",
                list.join(", ")
            )));
        }
        return Ok((LED, json!(value)));
    }
    Err(unsupported("the ComputerSystem has neither LocationIndicatorActive nor IndicatorLED"))
}

impl RedfishSession {
    async fn system_resource(&mut self, ctx: &Ctx) -> Result<crate::transport::Resource> {
        let path = self.service.system.path.clone();
        self.transport.get(ctx, &path).await
    }
}

#[async_trait::async_trait]
impl Identify for RedfishSession {
    async fn identify(&mut self, ctx: &Ctx) -> Result<IdentifyState> {
        let system = self.system_resource(ctx).await?;
        state(&system.body)
            .ok_or_else(|| unsupported("the ComputerSystem has neither LocationIndicatorActive nor IndicatorLED"))
    }

    async fn set_identify(&mut self, ctx: &Ctx, set: &IdentifySet) -> Result<IdentifyState> {
        if set.seconds.is_some() {
            return Err(unsupported(
                "Redfish has no timed identify (LocationIndicatorActive and IndicatorLED stay as set): turn the light on, then off",
            ));
        }
        let system = self.system_resource(ctx).await?;
        let path = system.path.clone();
        let (property, value) = change(&system.body, set.light)?;
        if system.body.get(property) != Some(&value) {
            self.patch_with_etag(ctx, system, &json!({ property: value.clone() })).await?;
        }
        let after = self.transport.read_back(ctx, &path, |r| r.body.get(property) == Some(&value)).await?;
        let got = after.body.get(property).cloned().unwrap_or(Value::Null);
        if got != value {
            return Err(err(
                ErrorCode::BmcError,
                format!("the BMC accepted {property} {value} but {path} reads back {got}"),
            ));
        }
        let mut s = state(&after.body).unwrap_or_default();
        if property == LIA && set.light == IdentifyLight::Blink {
            s.note =
                Some("LocationIndicatorActive has no blink setting: the BMC shows the light in its own pattern".into());
        }
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acts_only_on_the_property_the_system_has() {
        let both = json!({"LocationIndicatorActive": false, "IndicatorLED": "Off"});
        assert_eq!(change(&both, IdentifyLight::Blink).unwrap(), (LIA, json!(true)));
        let led = json!({"IndicatorLED": "Off", "IndicatorLED@Redfish.AllowableValues": ["Lit", "Off"]});
        assert_eq!(change(&led, IdentifyLight::On).unwrap(), (LED, json!("Lit")));
        let refused = change(&led, IdentifyLight::Blink).unwrap_err();
        assert_eq!(refused.code, ErrorCode::Unsupported);
        assert!(refused.message.contains("Lit, Off"), "{}", refused.message);
        assert_eq!(change(&json!({}), IdentifyLight::Off).unwrap_err().code, ErrorCode::Unsupported);
        // A null LocationIndicatorActive is not a property to write.
        assert_eq!(
            change(&json!({"LocationIndicatorActive": null, "IndicatorLED": "Lit"}), IdentifyLight::Off).unwrap().0,
            LED
        );
        assert_eq!(state(&json!({"IndicatorLED": "Unknown"})).unwrap().light, None);
        assert_eq!(state(&json!({"IndicatorLED": "Blinking"})).unwrap().light, Some(IdentifyLight::Blink));
    }
}
