//! The system event log: Get SEL Info (storage 0x40), Get SEL Entry (0x43)
//! walked from the first record, Reserve SEL (0x42) and Clear SEL (0x47).
//!
//! Records are parsed by `ipmi_rs::storage::sel::Entry` (record types,
//! generator, sensor type, event type and offset, and the event text of
//! the IPMI tables); what it lacks and is done here: the timestamp as RFC
//! 3339 (it hides the seconds), a severity for threshold events, and the
//! raw record. The SEL can only be walked forwards, so "newest first" reads
//! every record and pages the reversed list.

use crate::cmd;
use crate::error::completion_code_error;
use crate::session::{protocol, IpmiSession};
use crate::transport::Transport;
use async_trait::async_trait;
use bmcfleet_provider::{Ctx, EventLog, Result};
use bmcfleet_schema::{EventLog as EventLogData, EventLogEntry, Health};
use ipmi_rs::storage::sel::{Entry, EventDirection};

/// The most records one read walks (a full SEL holds a few thousand; a
/// walk that goes past this has met a BMC whose next-record ids loop).
const MAX_RECORDS: usize = 8192;

/// How many times Clear SEL's status is polled (100 ms apart) before the
/// erase is reported as not finished.
const CLEAR_POLLS: u32 = 50;

/// Decodes Get SEL Info: the number of entries.
pub fn sel_entries(info: &[u8]) -> Option<u16> {
    Some(u16::from_le_bytes([*info.get(1)?, *info.get(2)?]))
}

/// Decodes a Get SEL Entry response: the next record id and the 16-byte record.
pub fn sel_entry_response(data: &[u8]) -> Option<(u16, &[u8])> {
    let next = u16::from_le_bytes([*data.first()?, *data.get(1)?]);
    let record = data.get(2..18)?;
    Some((next, record))
}

/// A SEL timestamp as RFC 3339: `None` for "unspecified" (0xFFFFFFFF) and
/// for times counted from the BMC's initialisation (up to 0x20000000, IPMI
/// v2.0 §37.1) rather than from the epoch.
pub fn sel_time(ts: u32) -> Option<String> {
    if ts == 0xFFFF_FFFF || ts <= 0x2000_0000 {
        return None;
    }
    time::OffsetDateTime::from_unix_timestamp(i64::from(ts))
        .ok()?
        .format(&time::format_description::well_known::Rfc3339)
        .ok()
}

/// The severity of a threshold event (event/reading type 0x01, §42.1):
/// non-critical offsets (0, 1, 6, 7) are warnings, the others critical; a
/// deassertion is back to ok. Discrete events say nothing: `None`.
pub fn threshold_severity(event_type: u8, offset: u8, direction: EventDirection) -> Option<Health> {
    if event_type != 0x01 {
        return None;
    }
    Some(match (direction, offset & 0x0F) {
        (EventDirection::Deassert, _) => Health::Ok,
        (_, 0 | 1 | 6 | 7) => Health::Warning,
        (_, 2..=5 | 8..=0x0B) => Health::Critical,
        _ => return None,
    })
}

/// Why a SEL record cannot be decoded (after `ipmi_rs`'s `ParseEntryError`,
/// which is not a `std::error::Error`: its debug text is the message).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// Shorter than a record.
    Truncated,
    /// A record type IPMI does not define.
    UnknownType,
    /// A field with a value IPMI does not allow (a channel number).
    Invalid,
}

pub type Error = bmcfleet_schema::error::Error<ErrorKind>;

/// One 16-byte SEL record as an entry.
pub fn decode_sel_record(record: &[u8]) -> std::result::Result<EventLogEntry, Error> {
    use ipmi_rs::storage::sel::ParseEntryError;
    let entry = Entry::parse(record).map_err(|e| {
        let kind = match e {
            ParseEntryError::NotEnoughData => ErrorKind::Truncated,
            ParseEntryError::UnknownRecordType(_) => ErrorKind::UnknownType,
            ParseEntryError::InvalidChannel(_) => ErrorKind::Invalid,
        };
        Error::new(kind, format!("SEL record: {e:?}"))
    })?;
    let raw = bmcfleet_provider::hex(record);
    let id = format!("{:04x}", u16::from_le_bytes([record[0], record[1]]));
    let ts = u32::from_le_bytes([record[3], record[4], record[5], record[6]]);
    struct Description<'a>(&'a Entry);
    impl std::fmt::Display for Description<'_> {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            self.0.event_description(f)
        }
    }
    Ok(match &entry {
        Entry::System { sensor_type, sensor_number, event_direction, event_type, event_data, .. } => {
            let kind = ipmi_rs::storage::sdr::SensorType::from(*sensor_type).to_string();
            let what = Description(&entry).to_string();
            let what = if what.trim().is_empty() {
                format!("event type 0x{event_type:02x} offset {}", event_data.offset)
            } else {
                what
            };
            let dir = match event_direction {
                EventDirection::Assert => "asserted",
                EventDirection::Deassert => "deasserted",
            };
            EventLogEntry {
                id,
                time: sel_time(ts),
                severity: threshold_severity(*event_type, event_data.offset, *event_direction),
                sensor: Some(format!("0x{sensor_number:02x}")),
                kind: Some(kind),
                message: format!("{what} ({dir})"),
                raw: Some(raw),
                log: None,
            }
        }
        Entry::OemTimestamped { ty, manufacturer_id, .. } => EventLogEntry {
            id,
            time: sel_time(ts),
            kind: Some(format!("OEM 0x{ty:02x}")),
            message: format!("OEM record (manufacturer {manufacturer_id})"),
            raw: Some(raw),
            ..EventLogEntry::default()
        },
        Entry::OemNotTimestamped { ty, .. } => EventLogEntry {
            id,
            kind: Some(format!("OEM 0x{ty:02x}")),
            message: "OEM record".into(),
            raw: Some(raw),
            ..EventLogEntry::default()
        },
    })
}

impl<T: Transport> IpmiSession<T> {
    /// Every SEL record, oldest first.
    async fn sel_records(&mut self, ctx: &Ctx) -> Result<(u16, Vec<EventLogEntry>)> {
        let info = self.exec(ctx, &cmd::GET_SEL_INFO, vec![]).await?;
        let count = sel_entries(&info).ok_or_else(|| protocol(cmd::GET_SEL_INFO.id, "response too short"))?;
        let mut out = Vec::with_capacity(usize::from(count));
        if count == 0 {
            return Ok((0, out));
        }
        let mut id: u16 = 0x0000;
        loop {
            // Reservation 0 and the whole record (0xFF bytes from offset 0).
            let [lo, hi] = id.to_le_bytes();
            let r = self.send(ctx, &cmd::GET_SEL_ENTRY, vec![0, 0, lo, hi, 0, 0xFF]).await?;
            match r.cc {
                0 => {}
                // Requested record not present: the log changed under the walk, or it is empty.
                0xCB if !out.is_empty() || id == 0 => break,
                cc => return Err(completion_code_error(cmd::GET_SEL_ENTRY.id, cc, cmd::GET_SEL_ENTRY.specific)),
            }
            let (next, record) = sel_entry_response(&r.data)
                .ok_or_else(|| protocol(cmd::GET_SEL_ENTRY.id, "response shorter than a record"))?;
            out.push(decode_sel_record(record).unwrap_or_else(|why| EventLogEntry {
                id: format!("{:04x}", u16::from_le_bytes([record[0], record[1]])),
                message: why.to_string(),
                raw: Some(bmcfleet_provider::hex(record)),
                ..EventLogEntry::default()
            }));
            if next == 0xFFFF || out.len() >= MAX_RECORDS || next == id {
                break;
            }
            id = next;
        }
        Ok((count, out))
    }
}

#[async_trait]
impl<T: Transport> EventLog for IpmiSession<T> {
    async fn read_event_log(&mut self, ctx: &Ctx, limit: u32, offset: u32) -> Result<EventLogData> {
        let (count, records) = self.sel_records(ctx).await?;
        // Each entry names its log, the name an action gives it (`log_ids: ["sel"]`).
        let entries = records
            .into_iter()
            .rev()
            .skip(offset as usize)
            .take(limit as usize)
            .map(|e| EventLogEntry { log: Some(bmcfleet_provider::SEL_LOG_ID.into()), ..e })
            .collect();
        Ok(EventLogData { total: Some(u32::from(count)), entries })
    }

    /// Reserve SEL, Clear SEL "initiate erase" with the reservation, then
    /// Clear SEL "get status" until the erase is complete.
    async fn clear_event_log(&mut self, ctx: &Ctx) -> Result<()> {
        let reservation = self.exec(ctx, &cmd::RESERVE_SEL, vec![]).await?;
        let [lo, hi] = match reservation.as_slice() {
            [lo, hi, ..] => [*lo, *hi],
            _ => return Err(protocol(cmd::RESERVE_SEL.id, "response too short")),
        };
        let mut action = 0xAA; // initiate erase
        for _ in 0..CLEAR_POLLS {
            let status = self.exec(ctx, &cmd::CLEAR_SEL, vec![lo, hi, b'C', b'L', b'R', action]).await?;
            match status.first().map(|s| s & 0x0F) {
                Some(1) => return Ok(()),
                Some(_) => {}
                None => return Err(protocol(cmd::CLEAR_SEL.id, "no erasure progress in the response")),
            }
            action = 0x00; // get erasure status
            let pause = std::time::Duration::from_millis(100);
            if ctx.remaining()? < pause {
                break;
            }
            tokio::time::sleep(pause).await;
        }
        Err(protocol(cmd::CLEAR_SEL.id, "the BMC did not report the erase complete"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_threshold_system_record_decodes() {
        // IPMI v2.0 §32.1: record 0x0042, system event, 2024-01-01T00:00:00Z,
        // generator 0x20 (BMC) LUN 0 channel 0, EvM rev 0x04, sensor type
        // temperature (0x01) number 0x30, threshold (0x01) asserted, offset
        // 0x09 (upper critical going high), data 2/3 unspecified.
        let ts = 1_704_067_200u32.to_le_bytes();
        let rec = [0x42, 0x00, 0x02, ts[0], ts[1], ts[2], ts[3], 0x20, 0x00, 0x04, 0x01, 0x30, 0x01, 0x09, 0xFF, 0xFF];
        let e = decode_sel_record(&rec).unwrap();
        assert_eq!(e.id, "0042");
        assert_eq!(e.time.as_deref(), Some("2024-01-01T00:00:00Z"));
        assert_eq!(e.severity, Some(Health::Critical));
        assert_eq!(e.sensor.as_deref(), Some("0x30"));
        assert_eq!(e.kind.as_deref(), Some("Temperature"));
        assert!(e.message.ends_with("(asserted)"), "{}", e.message);
        let hex = bmcfleet_provider::hex(&rec);
        assert_eq!(e.raw.as_deref(), Some(hex.as_str()));
        assert!(hex.starts_with("420002") && hex.ends_with("20000401300109ffff"), "{hex}");

        // Deasserted upper non-critical: back to ok; a pre-init timestamp has no time.
        let rec = [0x43, 0x00, 0x02, 0x10, 0, 0, 0, 0x20, 0x00, 0x04, 0x01, 0x30, 0x81, 0x07, 0xFF, 0xFF];
        let e = decode_sel_record(&rec).unwrap();
        assert_eq!((e.severity, e.time), (Some(Health::Ok), None));
        assert!(e.message.ends_with("(deasserted)"));

        // A discrete (sensor-specific 0x6F) event has no severity.
        let rec = [0x44, 0x00, 0x02, ts[0], ts[1], ts[2], ts[3], 0x20, 0x00, 0x04, 0x08, 0x01, 0x6F, 0x01, 0xFF, 0xFF];
        let e = decode_sel_record(&rec).unwrap();
        assert_eq!((e.severity, e.kind.as_deref()), (None, Some("Power Supply")));
    }

    #[test]
    fn oem_records_and_responses() {
        let rec = [0x01, 0x00, 0xC1, 0, 0, 0, 0x70, 0x57, 0x01, 0x00, 1, 2, 3, 4, 5, 6];
        let e = decode_sel_record(&rec).unwrap();
        assert_eq!(e.kind.as_deref(), Some("OEM 0xc1"));
        assert_eq!(e.message, "OEM record (manufacturer 343)");
        assert_eq!(decode_sel_record(&rec[..10]).unwrap_err().kind(), ErrorKind::Truncated);
        let unknown = decode_sel_record(&[0x01, 0x00, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]).unwrap_err();
        assert_eq!(unknown.kind(), ErrorKind::UnknownType, "record type 0x10 is unknown");
        assert_eq!(unknown.to_string(), "SEL record: UnknownRecordType(16)");

        // Get SEL Info: version 0x51, 3 entries, ...
        assert_eq!(sel_entries(&[0x51, 0x03, 0x00, 0xFF, 0xFF]), Some(3));
        assert_eq!(sel_entries(&[0x51]), None);
        let mut resp = vec![0xFF, 0xFF];
        resp.extend_from_slice(&rec);
        assert_eq!(sel_entry_response(&resp), Some((0xFFFF, &rec[..])));
        assert_eq!(sel_entry_response(&resp[..10]), None);
    }
}
