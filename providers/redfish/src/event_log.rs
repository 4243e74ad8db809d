//! The event log: the LogServices the BMC links from the ComputerSystem
//! and from the Manager (`LogServices` → members → `Entries`), discovered
//! each time, never guessed, and told apart by what the BMC advertises
//! about each, never by its name or order ([`LogKind`]): a service's
//! `LogEntryType` (`Event`/`SEL`: the event log; `OEM`, `Multiple`, `CXL`:
//! another log), its `LogService.CollectDiagnosticData` action or
//! `LogPurposes` `Diagnostic` (a dump service), else its entries'
//! `DiagnosticDataType`/`OEMDiagnosticDataType` (dumps, crash data),
//! `EntryType` `Oem` and `OemRecordFormat` (journals, host logs) or
//! `EntryType` `SEL`/`Event`.
//!
//! A read covers the event log unless the action asks for other logs
//! ([`LogSet`]); entries are merged newest first (by `Created`; entries
//! without a time keep their log's order after the timed ones). A clear
//! POSTs `LogService.ClearLog` to the event log only: to the services that
//! advertise `LogEntryType` `Event`/`SEL`, else to the one service whose
//! entries are event records; never to a diagnostic, OEM or unclassified
//! service, and when several unadvertised services hold event records
//! (bmcweb's `EventLog` and `PostCodes`) nothing is cleared
//! (`unsupported`, naming them).
//!
//! An action may name the services (`log_ids`: a LogService's `Id`, or its
//! path where two share an `Id`, as bmcweb's System and BMC `Dump` do):
//! exactly those are read, or cleared. Every name is resolved and checked
//! before anything is sent ([`named_clear_targets`]): a name no service of
//! the System or Manager has is `target_not_found`, naming the services
//! that exist; a diagnostic data service (dumps, crash data) is never
//! cleared by `event_log clear`, named or not (`unsupported`); a service
//! must advertise `LogService.ClearLog`, and when its action points to an
//! `@Redfish.ActionInfo`, that ActionInfo must require no parameter.
//!
//! Every clear is verified: the service's `Entries` are counted before the
//! `ClearLog` and read again after it; a log that still holds as many
//! entries (more than the one a BMC may write to record the clear) is
//! `bmc_error`, never a success.

use crate::discovery::action_of;
use crate::error::{err, unsupported};
use crate::json::{link, members, str_of, string_of};
use crate::session::RedfishSession;
use bmcfleet_provider::{Ctx, EventLog, Result};
use bmcfleet_schema::{components, ErrorCode, EventLog as EventLogData, EventLogEntry, Health, LogSet};
use serde_json::{json, Value};

/// The most entries read from one log (following `Members@odata.nextLink`).
const MAX_ENTRIES_PER_LOG: usize = 5000;
/// The longest entry message kept, in characters.
const MAX_ENTRY_MESSAGE: usize = 1024;
/// The most pages read from one log: a BMC whose `Members@odata.nextLink`
/// leads on and on (back to the same page, say) is not followed until the
/// action's deadline. A page without members ends the log too.
const MAX_PAGES_PER_LOG: usize = 256;
/// The most LogServices read from one owner (the ComputerSystem, the Manager).
const MAX_LOG_SERVICES: usize = 16;

/// A Redfish `Severity` / `Health` as ours.
pub(crate) fn health(s: &str) -> Option<Health> {
    match s {
        "OK" => Some(Health::Ok),
        "Warning" => Some(Health::Warning),
        "Critical" => Some(Health::Critical),
        _ => None,
    }
}

/// One `LogEntry` (v1.x) as an entry of the log named `log`. The BMC's
/// text is clipped (the message to [`MAX_ENTRY_MESSAGE`] characters, the
/// rest to [`components::MAX_TEXT`]) and its control characters replaced:
/// it goes into the batch's status record and logs.
pub(crate) fn entry(log: &str, v: &Value) -> EventLogEntry {
    let s = |k: &str| str_of(v, k).map(str::trim).filter(|x| !x.is_empty()).map(str::to_owned);
    let sensor =
        v.get("SensorNumber").and_then(Value::as_u64).map(|n| n.to_string()).or_else(|| {
            link(v, "OriginOfCondition").or_else(|| v.get("Links").and_then(|l| link(l, "OriginOfCondition")))
        });
    let message = s("Message").or_else(|| s("MessageId")).unwrap_or_default();
    EventLogEntry {
        id: components::clip(&s("Id").unwrap_or_default()),
        time: s("Created").as_deref().map(components::clip),
        severity: s("Severity").as_deref().and_then(health),
        sensor: sensor.as_deref().map(components::clip),
        kind: s("SensorType").or_else(|| s("EntryType")).as_deref().map(components::clip),
        message: message.chars().take(MAX_ENTRY_MESSAGE).map(|c| if c.is_control() { ' ' } else { c }).collect(),
        raw: None,
        log: Some(components::clip(log)),
    }
}

/// Newest first: entries with a parsable `time` by time, descending; the
/// others after them in the order given.
pub(crate) fn newest_first(entries: &mut [EventLogEntry]) {
    let key = |e: &EventLogEntry| {
        e.time
            .as_deref()
            .and_then(|t| time::OffsetDateTime::parse(t, &time::format_description::well_known::Rfc3339).ok())
    };
    // A stable sort: equal times keep the log's order, reversed below.
    entries.reverse();
    entries.sort_by_key(|e| std::cmp::Reverse(key(e)));
}

impl RedfishSession {
    /// Every LogService: (path, resource).
    async fn log_services(&mut self, ctx: &Ctx) -> Result<Vec<(String, Value)>> {
        let mut owners = vec![self.service.system.path.clone()];
        owners.extend(self.service.manager.as_ref().map(|m| m.path.clone()));
        let mut out = Vec::new();
        for owner in owners {
            let Ok(r) = self.transport.get(ctx, &owner).await else { continue };
            let Some(coll) = link(&r.body, "LogServices") else { continue };
            let coll = self.transport.get_linked(ctx, &coll, "LogServices").await?;
            for path in members(&coll.body).into_iter().take(MAX_LOG_SERVICES) {
                let svc = self.transport.get(ctx, &path).await?;
                out.push((path, svc.body));
            }
        }
        if out.is_empty() {
            return Err(unsupported("the BMC links no LogService from its ComputerSystem or Manager"));
        }
        Ok(out)
    }

    /// Every LogService with what it is: from what the service advertises,
    /// else from the first entries of its first page (a few GETs at most).
    async fn classified_log_services(&mut self, ctx: &Ctx) -> Result<Vec<LogService>> {
        let mut out = Vec::new();
        for (path, body) in self.log_services(ctx).await? {
            let id = string_of(&body, "Id").unwrap_or_else(|| crate::json::last_segment(&path).to_owned());
            let (kind, advertised) = match service_kind(&body) {
                Some(k) => (k, true),
                None => (self.kind_from_entries(ctx, &body).await, false),
            };
            tracing::debug!(bmc = %self.transport.bmc(), log = %id, %path, ?kind, advertised, "Log service classified.");
            out.push(LogService { id, path, body, kind, advertised });
        }
        Ok(out)
    }

    /// What a service that does not say what it is holds, from the entries
    /// of its first page (expanded members, else the first few fetched):
    /// [`LogKind::Unknown`] when it has none or they cannot be read.
    async fn kind_from_entries(&mut self, ctx: &Ctx, svc: &Value) -> LogKind {
        let Some(page) = link(svc, "Entries") else { return LogKind::Unknown };
        let Ok(coll) = self.transport.get(ctx, &page).await else { return LogKind::Unknown };
        let items = coll.body.get("Members").and_then(Value::as_array).cloned().unwrap_or_default();
        let mut entries = Vec::new();
        for item in items.into_iter().take(MAX_CLASSIFY_ENTRIES) {
            if item.get("Id").is_some() {
                entries.push(item);
            } else if let Some(p) = item.get("@odata.id").and_then(Value::as_str) {
                if let Ok(r) = self.transport.get(ctx, &crate::json::norm_path(p)).await {
                    entries.push(r.body);
                }
            }
        }
        kind_of_entries(&entries)
    }

    /// Read the entries of these services, newest first, paged.
    async fn read_services(
        &mut self,
        ctx: &Ctx,
        services: Vec<LogService>,
        limit: u32,
        offset: u32,
    ) -> Result<EventLogData> {
        let mut all = Vec::new();
        let mut failures = Vec::new();
        let mut read = 0;
        for svc in services {
            let name = svc.id;
            let Some(mut page) = link(&svc.body, "Entries") else { continue };
            let mut got = 0;
            let mut pages = 0;
            loop {
                // One log the BMC cannot serve does not hide the others.
                let coll = match self.transport.get(ctx, &page).await {
                    Ok(c) => c,
                    Err(e) if got == 0 && !e.retryable => {
                        tracing::debug!(bmc = %self.transport.bmc(), log = %name, error = %e, "Log entries unreadable; skipping this log.");
                        failures.push(e);
                        break;
                    }
                    Err(e) => return Err(e),
                };
                if got == 0 {
                    read += 1;
                }
                pages += 1;
                let items = coll.body.get("Members").and_then(Value::as_array).cloned().unwrap_or_default();
                let more = !items.is_empty() && pages < MAX_PAGES_PER_LOG;
                for item in items.into_iter().take(MAX_ENTRIES_PER_LOG.saturating_sub(got)) {
                    // Members are usually expanded; a bare link is fetched.
                    let body = if item.get("Id").is_some() {
                        item
                    } else if let Some(p) = item.get("@odata.id").and_then(Value::as_str) {
                        self.transport.get(ctx, &crate::json::norm_path(p)).await?.body
                    } else {
                        continue;
                    };
                    all.push(entry(&name, &body));
                    got += 1;
                }
                match str_of(&coll.body, "Members@odata.nextLink") {
                    Some(next) if more && got < MAX_ENTRIES_PER_LOG => page = crate::json::norm_path(next),
                    _ => break,
                }
            }
        }
        if read == 0 {
            if let Some(e) = failures.into_iter().next() {
                return Err(e);
            }
        }
        newest_first(&mut all);
        let total = u32::try_from(all.len()).ok();
        let entries = all.into_iter().skip(offset as usize).take(limit as usize).collect();
        Ok(EventLogData { total, entries })
    }
}

/// The most entries of a service's first page looked at to tell what it
/// holds when the service itself does not say.
const MAX_CLASSIFY_ENTRIES: usize = 8;

/// What a log holds, as the BMC advertises it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LogKind {
    /// System events: `LogEntryType` `Event`/`SEL`, or entries of `EntryType`
    /// `SEL`/`Event` that carry nothing of the kinds below.
    Event,
    /// Diagnostic data (BMC and host dumps, crash dumps, fault logs with
    /// data): `CollectDiagnosticData`, `LogPurposes` `Diagnostic`, entries
    /// with `DiagnosticDataType`/`OEMDiagnosticDataType`.
    Diagnostic,
    /// Another log: `LogEntryType` `OEM`/`Multiple`/`CXL`, entries of
    /// `EntryType` `Oem`/`CXL` or with an `OemRecordFormat` (journals, host
    /// console logs).
    Other,
    /// Says nothing (no `LogEntryType`, no entries to look at).
    Unknown,
}

/// A LogService and what it is.
pub(crate) struct LogService {
    pub id: String,
    /// Where the BMC serves it (its `@odata.id`, normalised).
    pub path: String,
    pub body: Value,
    pub kind: LogKind,
    /// Whether the service itself says so (else its entries told).
    pub advertised: bool,
}

/// What a LogService says it is, if it says.
pub(crate) fn service_kind(svc: &Value) -> Option<LogKind> {
    let actions = svc.get("Actions");
    if actions.and_then(|a| a.get("#LogService.CollectDiagnosticData")).is_some() {
        return Some(LogKind::Diagnostic);
    }
    let purposes = svc.get("LogPurposes").and_then(Value::as_array);
    if purposes.is_some_and(|p| p.iter().any(|x| x.as_str() == Some("Diagnostic"))) {
        return Some(LogKind::Diagnostic);
    }
    match str_of(svc, "LogEntryType")? {
        "Event" | "SEL" => Some(LogKind::Event),
        _ => Some(LogKind::Other),
    }
}

/// What one entry is.
pub(crate) fn entry_kind(e: &Value) -> LogKind {
    if e.get("DiagnosticDataType").is_some() || e.get("OEMDiagnosticDataType").is_some() {
        return LogKind::Diagnostic;
    }
    if e.get("OemRecordFormat").is_some() {
        return LogKind::Other;
    }
    match str_of(e, "EntryType") {
        Some("Event" | "SEL") => LogKind::Event,
        Some(_) => LogKind::Other,
        None => LogKind::Unknown,
    }
}

/// What a log holds, from some of its entries: anything diagnostic makes
/// it diagnostic, anything else not an event makes it another log; event
/// records only make it an event log.
pub(crate) fn kind_of_entries(entries: &[Value]) -> LogKind {
    let kinds: Vec<LogKind> = entries.iter().map(entry_kind).collect();
    if kinds.contains(&LogKind::Diagnostic) {
        LogKind::Diagnostic
    } else if kinds.contains(&LogKind::Other) {
        LogKind::Other
    } else if kinds.contains(&LogKind::Event) && !kinds.contains(&LogKind::Unknown) {
        LogKind::Event
    } else {
        LogKind::Unknown
    }
}

/// The services that make up the event log: those advertising it, else
/// those whose entries are event records (and, for a read, those that say
/// nothing and hold nothing: reading them costs nothing).
pub(crate) fn event_log_services(services: &[LogService], for_clear: bool) -> Vec<usize> {
    let advertised: Vec<usize> =
        (0..services.len()).filter(|&i| services[i].advertised && services[i].kind == LogKind::Event).collect();
    if !advertised.is_empty() {
        return advertised;
    }
    (0..services.len())
        .filter(|&i| match services[i].kind {
            LogKind::Event => true,
            LogKind::Unknown => !for_clear,
            _ => false,
        })
        .collect()
}

/// The `ClearLog` targets of the event log (service index, target), or
/// why nothing is cleared.
pub(crate) fn clear_targets(services: &[LogService]) -> Result<Vec<(usize, String)>> {
    let event = event_log_services(services, true);
    let targets: Vec<(usize, String)> =
        event.iter().filter_map(|&i| action_of(&services[i].body, "#LogService.ClearLog").map(|a| (i, a.0))).collect();
    let advertised = event.iter().any(|&i| services[i].advertised);
    let others: Vec<String> = (0..services.len())
        .filter(|&i| {
            action_of(&services[i].body, "#LogService.ClearLog").is_some() && !targets.iter().any(|t| t.0 == i)
        })
        .map(|i| format!("{} ({})", services[i].id, format!("{:?}", services[i].kind).to_lowercase()))
        .collect();
    if targets.is_empty() {
        return Err(unsupported(format!(
            "no event log of this BMC offers LogService.ClearLog{}",
            if others.is_empty() {
                String::new()
            } else {
                format!("; the other logs are never cleared by event_log clear: {}", others.join(", "))
            }
        )));
    }
    if !advertised && targets.len() > 1 {
        let names: Vec<&str> = targets.iter().map(|t| services[t.0].id.as_str()).collect();
        return Err(unsupported(format!(
            "nothing cleared: {} LogServices hold event records and none advertises LogEntryType Event or SEL \
             ({}), so which one is the event log is not known; name the one meant: \
             event_log clear with log_ids (bmcctl event-log clear --log ID)",
            names.len(),
            names.join(", ")
        )));
    }
    Ok(targets)
}

/// The services these names designate, in the order named: each name is a
/// service's `Id` or its path. A name no service has, or an `Id` two
/// services share, names nothing: nothing is read or cleared.
pub(crate) fn named_services(services: &[LogService], ids: &[String]) -> Result<Vec<usize>> {
    let mut out = Vec::new();
    for name in ids {
        let wanted = crate::json::norm_path(name);
        let by_path: Vec<usize> = (0..services.len()).filter(|&i| services[i].path == wanted).collect();
        let found = if by_path.is_empty() {
            (0..services.len()).filter(|&i| services[i].id == *name).collect()
        } else {
            by_path
        };
        match found.as_slice() {
            [i] => {
                if !out.contains(i) {
                    out.push(*i);
                }
            }
            [] => {
                return Err(err(
                    ErrorCode::TargetNotFound,
                    format!(
                        "no LogService of this BMC is named `{name}`; nothing was done. Its LogServices: {}",
                        described(services, 0..services.len())
                    ),
                ))
            }
            several => {
                return Err(err(
                    ErrorCode::InvalidField,
                    format!(
                        "`{name}` is the Id of {} LogServices ({}); name the one meant by its path; nothing was done",
                        several.len(),
                        several.iter().map(|&i| services[i].path.as_str()).collect::<Vec<_>>().join(", ")
                    ),
                ))
            }
        }
    }
    Ok(out)
}

/// `Id (kind, path)` of these services, for an operator choosing a name.
fn described(services: &[LogService], which: impl IntoIterator<Item = usize>) -> String {
    which
        .into_iter()
        .map(|i| {
            let s = &services[i];
            format!("{} ({}, {})", s.id, format!("{:?}", s.kind).to_lowercase(), s.path)
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// The `ClearLog` targets of the named services (`(service index,
/// target, ActionInfo)`), or why nothing is cleared: every name is checked
/// before anything is sent.
pub(crate) fn named_clear_targets(
    services: &[LogService],
    ids: &[String],
) -> Result<Vec<(usize, String, Option<String>)>> {
    let mut out = Vec::new();
    for i in named_services(services, ids)? {
        let s = &services[i];
        if s.kind == LogKind::Diagnostic {
            return Err(unsupported(format!(
                "{} ({}) holds diagnostic data (dumps, crash data: it offers CollectDiagnosticData, or says \
                 LogPurposes Diagnostic, or its entries carry DiagnosticDataType): event_log clear never clears \
                 it, named or not; nothing was cleared",
                s.id, s.path
            )));
        }
        let Some((target, _, info)) = action_of(&s.body, "#LogService.ClearLog") else {
            return Err(unsupported(format!(
                "{} ({}) does not offer LogService.ClearLog; nothing was cleared",
                s.id, s.path
            )));
        };
        out.push((i, target, info));
    }
    Ok(out)
}

/// How many entries a log's collection says it holds (`Members@odata.count`,
/// else its first page's members).
fn entry_count(coll: &Value) -> Option<u64> {
    coll.get("Members@odata.count")
        .and_then(Value::as_u64)
        .or_else(|| coll.get("Members").and_then(Value::as_array).map(|m| m.len() as u64))
}

impl RedfishSession {
    /// `ClearLog` of one service, verified: its entries counted before and
    /// after (a service without `Entries` is read again instead).
    async fn clear_verified(&mut self, ctx: &Ctx, svc: &LogService, target: &str) -> Result<()> {
        let entries = link(&svc.body, "Entries");
        let before = match &entries {
            Some(p) => entry_count(&self.transport.get(ctx, p).await?.body),
            None => None,
        };
        tracing::info!(bmc = %self.transport.bmc(), log = %svc.id, path = %svc.path, "Clearing a log.");
        self.transport.post(ctx, target, &json!({})).await?;
        let Some(p) = entries else {
            self.transport.get(ctx, &svc.path).await?;
            return Ok(());
        };
        let after = entry_count(&self.transport.get(ctx, &p).await?.body);
        match (before, after) {
            // A BMC may record the clear itself: one entry is a cleared log.
            (Some(b), Some(a)) if a > 1 && a >= b => Err(err(
                ErrorCode::BmcError,
                format!(
                    "the BMC accepted LogService.ClearLog of {} but the log still holds {a} entries ({b} before): \
                     not cleared",
                    svc.id
                ),
            )),
            _ => Ok(()),
        }
    }
}

#[async_trait::async_trait]
impl EventLog for RedfishSession {
    async fn read_event_log(&mut self, ctx: &Ctx, limit: u32, offset: u32) -> Result<EventLogData> {
        self.read_logs(ctx, limit, offset, LogSet::Event).await
    }

    async fn read_logs(&mut self, ctx: &Ctx, limit: u32, offset: u32, logs: LogSet) -> Result<EventLogData> {
        let mut services = self.classified_log_services(ctx).await?;
        let event = event_log_services(&services, false);
        let mut i = 0;
        services.retain(|_| {
            let keep = match logs {
                LogSet::Event => event.contains(&i),
                LogSet::Other => !event.contains(&i),
                LogSet::All => true,
            };
            i += 1;
            keep
        });
        if services.is_empty() && logs == LogSet::Event {
            return Err(unsupported(
                "no LogService of this BMC is an event log (LogEntryType Event or SEL, or event entries)",
            ));
        }
        self.read_services(ctx, services, limit, offset).await
    }

    async fn clear_event_log(&mut self, ctx: &Ctx) -> Result<()> {
        let services = self.classified_log_services(ctx).await?;
        for (i, target) in clear_targets(&services)? {
            self.clear_verified(ctx, &services[i], &target).await?;
        }
        Ok(())
    }

    async fn read_named_logs(&mut self, ctx: &Ctx, limit: u32, offset: u32, ids: &[String]) -> Result<EventLogData> {
        let services = self.classified_log_services(ctx).await?;
        let named = named_services(&services, ids)?;
        let chosen = services.into_iter().enumerate().filter(|(i, _)| named.contains(i)).map(|(_, s)| s).collect();
        self.read_services(ctx, chosen, limit, offset).await
    }

    async fn clear_named_logs(&mut self, ctx: &Ctx, ids: &[String]) -> Result<()> {
        let services = self.classified_log_services(ctx).await?;
        let targets = named_clear_targets(&services, ids)?;
        // Every ActionInfo is read before the first ClearLog is sent.
        for (i, _, info) in &targets {
            let Some(info) = info else { continue };
            // ClearLog takes no parameter: one the BMC requires is not sent.
            let required = crate::discovery::required_unsent(&self.transport.get(ctx, info).await?.body, &[]);
            if !required.is_empty() {
                return Err(unsupported(format!(
                    "LogService.ClearLog of {} requires {} (its @Redfish.ActionInfo), which event_log clear does \
                     not send; nothing was cleared",
                    services[*i].id,
                    required.join(", ")
                )));
            }
        }
        for (i, target, _) in &targets {
            self.clear_verified(ctx, &services[*i], target).await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_entries_decode_and_merge_newest_first() {
        // DMTF LogEntry v1.x examples (SEL and event entries).
        let a = json!({"@odata.id": "/redfish/v1/Managers/BMC/LogServices/SEL/Entries/1", "Id": "1", "EntryType": "SEL",
            "Severity": "Critical", "Created": "2024-01-01T10:00:00+01:00", "SensorType": "Temperature", "SensorNumber": 48,
            "Message": "Temperature upper critical going high", "MessageId": "Event.1.0.TempHigh"});
        let b = json!({"Id": "7", "EntryType": "Event", "Severity": "Warning", "Created": "2024-01-01T09:30:00Z", "MessageId": "Base.1.0.Warn",
            "Links": {"OriginOfCondition": {"@odata.id": "/redfish/v1/Chassis/1/Thermal"}}});
        let c = json!({"Id": "8", "Severity": "OK", "Message": "no time"});
        let mut all = vec![entry("SEL", &a), entry("Log1", &b), entry("Log1", &c)];
        assert_eq!(all[0].severity, Some(Health::Critical));
        assert_eq!((all[0].sensor.as_deref(), all[0].kind.as_deref()), (Some("48"), Some("Temperature")));
        assert_eq!(all[1].message, "Base.1.0.Warn", "the MessageId when there is no Message");
        assert_eq!(all[1].sensor.as_deref(), Some("/redfish/v1/Chassis/1/Thermal"));
        newest_first(&mut all);
        // 09:30Z is newer than 10:00+01:00 (09:00Z).
        let ids: Vec<&str> = all.iter().map(|e| e.id.as_str()).collect();
        assert_eq!(ids, ["7", "1", "8"]);
        assert_eq!(health("Unknown"), None);
    }

    #[test]
    fn a_hostile_entry_is_clipped() {
        // Text a BMC writes goes into the batch's status record: one entry
        // of megabytes (or with forged log lines) must not go in whole.
        let huge = "x".repeat(1 << 20);
        let e = entry(
            &huge,
            &json!({"Id": huge, "Created": huge, "SensorType": huge, "SensorNumber": 1, "Message": format!("fan ok\n2026-01-01 INFO forged{huge}")}),
        );
        assert!(e.message.chars().count() <= MAX_ENTRY_MESSAGE, "{} characters", e.message.len());
        assert!(e.message.starts_with("fan ok ") && !e.message.chars().any(char::is_control), "{}", &e.message[..40]);
        for s in [Some(&e.id), e.time.as_ref(), e.kind.as_ref(), e.log.as_ref()] {
            assert!(s.unwrap().chars().count() <= bmcfleet_schema::components::MAX_TEXT);
        }
    }
}
