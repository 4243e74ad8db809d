//! One health verdict per machine (issue 37): `ok`, `warning` or
//! `critical`, with the reasons, rolled up from what the BMC says in three
//! places: its sensors (a reading past a threshold, or a sensor the BMC
//! itself marks unhealthy), its event log (warning and critical entries of
//! the recent window, from a bounded read of the newest entries) and its
//! own health rollup (Redfish `Status.HealthRollup` / `Status.Health` of
//! the systems and chassis; IPMI keeps none: its sensors' states and the
//! SEL are its whole word).
//!
//! This module is the one place the verdict is decided ([`verdict`]); the
//! worker's fleet-state poll gathers the inputs and keeps the result in
//! the machine's state record ([`crate::state::MachineState::health`]).

use crate::result::{EventLogEntry, Health, SensorReading};
use serde::{Deserialize, Serialize};

/// The most reasons a verdict keeps (the worst first): a record stays small
/// whatever a BMC reports.
pub const MAX_REASONS: usize = 8;

/// The longest reason kept (characters; BMC text is cut).
pub const MAX_REASON_CHARS: usize = 200;

/// How many of the newest event log entries a health check reads.
pub const LOG_ENTRIES: u32 = 50;

/// The default window of event log entries that count (`--health-log-window`).
pub const LOG_WINDOW: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

/// A machine's health verdict, as its state record carries it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HealthSummary {
    /// The worst of what was read.
    pub status: Health,
    /// Why it is not `ok` (the worst first, at most [`MAX_REASONS`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reasons: Vec<String>,
    /// The sources that could not be read this time and why
    /// (`event_log: unsupported ...`): the verdict stands on the others.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unread: Vec<String>,
    /// When the check ran (ms since the epoch).
    pub checked_ms: u64,
}

/// One resource's health as the BMC rolls it up (Redfish: a system or a
/// chassis, its `Status.Health` and `Status.HealthRollup`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourceHealth {
    /// What it is, for the reason (`system 437XR1138R2`, `chassis 1U`).
    pub resource: String,
    /// The resource's own health.
    pub health: Option<Health>,
    /// The resource with everything it contains.
    pub rollup: Option<Health>,
}

/// What one health check read: each source `Ok` (what it said) or `Err`
/// (why it could not be read, e.g. `unsupported`).
#[derive(Clone, Debug, Default)]
pub struct HealthInputs {
    pub sensors: Option<Result<Vec<SensorReading>, String>>,
    pub log: Option<Result<Vec<EventLogEntry>, String>>,
    pub rollup: Option<Result<Vec<ResourceHealth>, String>>,
}

fn name(h: Health) -> &'static str {
    match h {
        Health::Ok => "ok",
        Health::Warning => "warning",
        Health::Critical => "critical",
    }
}

impl Health {
    pub fn as_str(self) -> &'static str {
        name(self)
    }
}

fn cut(s: &str) -> String {
    let s = s.trim();
    if s.chars().count() <= MAX_REASON_CHARS {
        return s.to_owned();
    }
    let mut out: String = s.chars().take(MAX_REASON_CHARS - 1).collect();
    out.push('…');
    out
}

fn number(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v:.2}")
    }
}

/// A sensor's health: the worse of the BMC's own word and its reading
/// against its thresholds (`None`: neither says).
pub fn sensor_health(s: &SensorReading) -> Option<(Health, Option<String>)> {
    let crossed = s.value.map(|v| s.thresholds.health(v)).filter(|h| *h > Health::Ok);
    let why = crossed.and_then(|h| {
        let v = s.value?;
        let t = &s.thresholds;
        let side = |lower: Option<f64>, upper: Option<f64>| match (lower, upper) {
            (Some(l), _) if v <= l => Some(format!("at or below {}", number(l))),
            (_, Some(u)) if v >= u => Some(format!("at or above {}", number(u))),
            _ => None,
        };
        match h {
            Health::Critical => side(t.lower_critical, t.upper_critical).map(|s| format!("critical threshold: {s}")),
            _ => side(t.lower_warning, t.upper_warning).map(|s| format!("warning threshold: {s}")),
        }
    });
    let worst = crossed.max(s.health)?;
    Some((worst, why))
}

/// Milliseconds since the epoch of an RFC 3339 time (`Z` or a `±hh:mm`
/// offset); `None` when it does not parse.
pub fn rfc3339_ms(time: &str) -> Option<u64> {
    let t = time.trim();
    let (base, offset_s): (&str, i64) = if let Some(b) = t.strip_suffix('Z').or_else(|| t.strip_suffix('z')) {
        (b, 0)
    } else if t.len() > 6 && matches!(&t[t.len() - 6..t.len() - 5], "+" | "-") && &t[t.len() - 3..t.len() - 2] == ":" {
        let (b, off) = t.split_at(t.len() - 6);
        let sign = if off.starts_with('-') { -1 } else { 1 };
        let hh: i64 = off[1..3].parse().ok()?;
        let mm: i64 = off[4..6].parse().ok()?;
        (b, sign * (hh * 3600 + mm * 60))
    } else {
        return None;
    };
    let local = humantime::parse_rfc3339_weak(base).ok()?;
    let ms = local.duration_since(std::time::UNIX_EPOCH).ok()?.as_millis() as i64 - offset_s * 1000;
    u64::try_from(ms).ok()
}

/// The verdict on what one check read, at `now_ms`: the worst health of
/// the sensors, of the event log entries of the last `window` (entries
/// without a time, or from the future by more than the window, do not
/// count: a SEL written before the BMC's clock was set says nothing of
/// when) and of the BMC's rollup. `None` when no source could be read.
pub fn verdict(inputs: &HealthInputs, now_ms: u64, window: std::time::Duration) -> Option<HealthSummary> {
    let mut found: Vec<(Health, String)> = Vec::new();
    let mut unread = Vec::new();
    let mut read_any = false;
    match &inputs.sensors {
        Some(Ok(sensors)) => {
            read_any = true;
            for s in sensors {
                let Some((h, why)) = sensor_health(s) else { continue };
                if h == Health::Ok {
                    continue;
                }
                let reading = match (s.value, &s.unit) {
                    (Some(v), Some(u)) => format!(", reads {} {u}", number(v)),
                    (Some(v), None) => format!(", reads {}", number(v)),
                    _ => String::new(),
                };
                let why = why.map(|w| format!(" ({w})")).unwrap_or_default();
                found.push((h, cut(&format!("sensor {} {}{reading}{why}", s.name, name(h)))));
            }
        }
        Some(Err(e)) => unread.push(cut(&format!("sensors: {e}"))),
        None => {}
    }
    match &inputs.log {
        Some(Ok(entries)) => {
            read_any = true;
            let window_ms = window.as_millis() as u64;
            let mut per: [(usize, Option<&EventLogEntry>); 2] = [(0, None), (0, None)];
            for e in entries {
                let Some(sev @ (Health::Warning | Health::Critical)) = e.severity else { continue };
                let Some(at) = e.time.as_deref().and_then(rfc3339_ms) else { continue };
                if now_ms.saturating_sub(at) > window_ms || at.saturating_sub(now_ms) > window_ms {
                    continue;
                }
                let slot = &mut per[usize::from(sev == Health::Critical)];
                slot.0 += 1;
                // Newest first: the first seen is the latest.
                slot.1.get_or_insert(e);
            }
            for (sev, (count, latest)) in [(Health::Warning, per[0]), (Health::Critical, per[1])] {
                let Some(latest) = latest else { continue };
                let hours = window.as_secs_f64() / 3600.0;
                let at = latest.time.as_deref().unwrap_or("?");
                found.push((
                    sev,
                    cut(&format!(
                        "event log: {count} {} entr{} in the last {}h, latest at {at}: {}",
                        name(sev),
                        if count == 1 { "y" } else { "ies" },
                        number(hours),
                        latest.message
                    )),
                ));
            }
        }
        Some(Err(e)) => unread.push(cut(&format!("event_log: {e}"))),
        None => {}
    }
    match &inputs.rollup {
        Some(Ok(resources)) => {
            read_any = true;
            for r in resources {
                for (what, h) in [("HealthRollup", r.rollup), ("Health", r.health)] {
                    if let Some(h) = h.filter(|h| *h > Health::Ok) {
                        found.push((h, cut(&format!("BMC rollup: {} {what} {}", r.resource, name(h)))));
                    }
                }
            }
        }
        Some(Err(e)) => unread.push(cut(&format!("rollup: {e}"))),
        None => {}
    }
    if !read_any {
        return None;
    }
    // Worst first; a stable order otherwise (the order read).
    found.sort_by_key(|f| std::cmp::Reverse(f.0));
    let status = found.first().map(|f| f.0).unwrap_or(Health::Ok);
    let more = found.len().saturating_sub(MAX_REASONS);
    let mut reasons: Vec<String> = found.into_iter().take(MAX_REASONS).map(|f| f.1).collect();
    if more > 0 {
        reasons.pop();
        reasons.push(format!("and {} more", more + 1));
    }
    Some(HealthSummary { status, reasons, unread, checked_ms: now_ms })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::result::{SensorKind, Thresholds};

    const H: u64 = 3_600_000;

    fn sensor(name: &str, value: f64, thresholds: Thresholds, health: Option<Health>) -> SensorReading {
        SensorReading {
            name: name.into(),
            kind: SensorKind::Fan,
            value: Some(value),
            unit: Some("RPM".into()),
            thresholds,
            health,
        }
    }

    fn entry(time: Option<&str>, severity: Option<Health>, message: &str) -> EventLogEntry {
        EventLogEntry {
            id: "1".into(),
            time: time.map(str::to_owned),
            severity,
            message: message.into(),
            ..Default::default()
        }
    }

    #[test]
    fn rfc3339_with_zone_or_offset() {
        assert_eq!(rfc3339_ms("1970-01-01T01:00:00Z"), Some(H));
        assert_eq!(rfc3339_ms("1970-01-01T02:00:00+01:00"), Some(H));
        assert_eq!(rfc3339_ms("1970-01-01T00:30:00-00:30"), Some(H));
        assert_eq!(rfc3339_ms("1970-01-01T01:00:00.500Z"), Some(H + 500));
        assert_eq!(rfc3339_ms("yesterday"), None);
        assert_eq!(rfc3339_ms("1970-01-01T01:00:00"), None, "no zone: not a time we can place");
    }

    #[test]
    fn a_crossed_threshold_is_the_verdict_with_its_reason() {
        let low = Thresholds { lower_critical: Some(500.0), lower_warning: Some(800.0), ..Default::default() };
        let inputs = HealthInputs {
            sensors: Some(Ok(vec![
                sensor("Fan 1", 750.0, low.clone(), None),
                sensor("Fan 2", 4000.0, low.clone(), None),
            ])),
            ..Default::default()
        };
        let v = verdict(&inputs, 0, LOG_WINDOW).unwrap();
        assert_eq!(v.status, Health::Warning);
        assert_eq!(v.reasons, ["sensor Fan 1 warning, reads 750 RPM (warning threshold: at or below 800)"]);
        let inputs =
            HealthInputs { sensors: Some(Ok(vec![sensor("Fan 1", 400.0, low.clone(), None)])), ..Default::default() };
        let v = verdict(&inputs, 0, LOG_WINDOW).unwrap();
        assert_eq!(v.status, Health::Critical);
        assert!(v.reasons[0].contains("critical threshold: at or below 500"), "{v:?}");
        // The BMC's own word counts even within thresholds; within them and
        // healthy is ok.
        let inputs = HealthInputs {
            sensors: Some(Ok(vec![sensor("PSU", 1.0, Thresholds::default(), Some(Health::Critical))])),
            ..Default::default()
        };
        assert_eq!(verdict(&inputs, 0, LOG_WINDOW).unwrap().status, Health::Critical);
        let inputs = HealthInputs {
            sensors: Some(Ok(vec![sensor("Fan 1", 4000.0, low, Some(Health::Ok))])),
            ..Default::default()
        };
        let v = verdict(&inputs, 0, LOG_WINDOW).unwrap();
        assert_eq!((v.status, v.reasons.len()), (Health::Ok, 0));
    }

    #[test]
    fn only_recent_timed_warning_and_critical_entries_count() {
        let now = 48 * H;
        let log = vec![
            entry(Some("1970-01-02T23:00:00Z"), Some(Health::Critical), "PSU 1 failed"),
            entry(Some("1970-01-02T22:00:00Z"), Some(Health::Critical), "PSU 1 degraded"),
            entry(Some("1970-01-02T21:00:00Z"), Some(Health::Ok), "PSU 1 ok"),
            entry(Some("1970-01-01T01:00:00Z"), Some(Health::Warning), "old: outside the window"),
            entry(None, Some(Health::Critical), "no time: unplaceable"),
            entry(Some("1970-01-02T20:00:00Z"), None, "no severity"),
        ];
        let v = verdict(&HealthInputs { log: Some(Ok(log)), ..Default::default() }, now, LOG_WINDOW).unwrap();
        assert_eq!(v.status, Health::Critical);
        assert_eq!(
            v.reasons,
            ["event log: 2 critical entries in the last 24h, latest at 1970-01-02T23:00:00Z: PSU 1 failed"]
        );
        // Past the window, the same log is ok.
        let later = now + 25 * H;
        let log = vec![entry(Some("1970-01-02T23:00:00Z"), Some(Health::Critical), "PSU 1 failed")];
        let v = verdict(&HealthInputs { log: Some(Ok(log)), ..Default::default() }, later, LOG_WINDOW).unwrap();
        assert_eq!(v.status, Health::Ok);
    }

    #[test]
    fn the_bmc_rollup_counts_and_unread_sources_are_said() {
        let inputs = HealthInputs {
            rollup: Some(Ok(vec![
                ResourceHealth {
                    resource: "system 1".into(),
                    health: Some(Health::Ok),
                    rollup: Some(Health::Critical),
                },
                ResourceHealth { resource: "chassis 1".into(), health: Some(Health::Warning), rollup: None },
            ])),
            log: Some(Err("unsupported: no log".into())),
            ..Default::default()
        };
        let v = verdict(&inputs, 0, LOG_WINDOW).unwrap();
        assert_eq!(v.status, Health::Critical);
        assert_eq!(v.reasons, ["BMC rollup: system 1 HealthRollup critical", "BMC rollup: chassis 1 Health warning"]);
        assert_eq!(v.unread, ["event_log: unsupported: no log"]);
        // Nothing read: no verdict (never `ok` for want of looking).
        let nothing = HealthInputs { sensors: Some(Err("timeout".into())), ..Default::default() };
        assert_eq!(verdict(&nothing, 0, LOG_WINDOW), None);
        assert_eq!(verdict(&HealthInputs::default(), 0, LOG_WINDOW), None);
    }

    #[test]
    fn reasons_are_bounded() {
        let sensors = (0..50)
            .map(|i| sensor(&format!("S{i} {}", "x".repeat(400)), 1.0, Thresholds::default(), Some(Health::Warning)))
            .collect();
        let v = verdict(&HealthInputs { sensors: Some(Ok(sensors)), ..Default::default() }, 0, LOG_WINDOW).unwrap();
        assert_eq!(v.reasons.len(), MAX_REASONS);
        assert_eq!(v.reasons.last().unwrap(), "and 43 more");
        assert!(v.reasons.iter().all(|r| r.chars().count() <= MAX_REASON_CHARS));
    }
}
