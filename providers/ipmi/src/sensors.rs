//! Sensors: the SDR repository (Get SDR Repository Info, Reserve SDR
//! Repository, Get SDR in 16-byte pieces) for full sensor records of
//! threshold sensors, then Get Sensor Reading (sensor/event 0x2D) for each.
//!
//! ipmi-rs parses full sensor records but keeps the converted values and
//! the raw thresholds private (only a display string comes out), so the
//! record fields this needs and the linearisation (IPMI v2.0 §36.3:
//! `y = L[(M·x + B·10^Bexp)·10^Rexp]`) are decoded here. Sensors owned by
//! another controller or LUN need bridging and are skipped, as are compact
//! and event-only records (discrete sensors, no thresholds or units to
//! convert with).

use crate::cmd;
use crate::error::completion_code_error;
use crate::session::{protocol, IpmiSession};
use crate::transport::Transport;
use async_trait::async_trait;
use bmcfleet_provider::{Ctx, Result, Sensors};
use bmcfleet_schema::{Health, SensorKind, SensorReading, Thresholds};

/// The most SDR records walked (a loop guard).
const MAX_RECORDS: usize = 1024;
/// Get SDR piece size: small enough for every BMC's buffer.
const PIECE: u8 = 16;

/// What a full sensor record (type 0x01) says about a threshold sensor.
#[derive(Clone, Debug, PartialEq)]
pub struct FullSensor {
    pub number: u8,
    pub name: String,
    pub sensor_type: u8,
    units1: u8,
    base_unit: u8,
    linearization: u8,
    m: i16,
    b: i16,
    b_exp: i8,
    r_exp: i8,
    /// Readable threshold mask: bit 0 lower non-critical .. bit 5 upper non-recoverable.
    readable: u8,
    /// Raw thresholds in the same bit order.
    raw_thresholds: [u8; 6],
}

fn signed10(ls: u8, ms: u8) -> i16 {
    let v = i16::from(ls) | (i16::from(ms >> 6) << 8);
    if v & 0x200 != 0 {
        v - 0x400
    } else {
        v
    }
}

fn signed4(v: u8) -> i8 {
    let v = (v & 0x0F) as i8;
    if v & 0x08 != 0 {
        v - 16
    } else {
        v
    }
}

/// A full sensor record (with its 5-byte header) of a threshold sensor
/// (event/reading type 0x01) owned by the BMC (0x20, LUN 0); `None` for
/// anything else.
pub fn decode_full_sensor(record: &[u8]) -> Option<FullSensor> {
    if record.get(3) != Some(&0x01) || record.len() < 48 {
        return None;
    }
    let b = |i: usize| record[i - 1]; // the specification counts bytes from 1
    if b(6) != 0x20 || b(7) & 0x03 != 0 || b(14) != 0x01 {
        return None;
    }
    let id_len = usize::from(b(48) & 0x1F);
    // The BMC's bytes, shown as they are elsewhere: no control characters
    // (`components::clip`, as every provider's sensor and inventory text).
    let name = record
        .get(48..48 + id_len)
        .map(|n| bmcfleet_schema::components::clip(String::from_utf8_lossy(n).trim()).trim().to_owned())
        .unwrap_or_default();
    Some(FullSensor {
        number: b(8),
        name: if name.is_empty() { format!("sensor 0x{:02x}", b(8)) } else { name },
        sensor_type: b(13),
        units1: b(21),
        base_unit: b(22),
        linearization: b(24) & 0x7F,
        m: signed10(b(25), b(26)),
        b: signed10(b(27), b(28)),
        r_exp: signed4(b(30) >> 4),
        b_exp: signed4(b(30)),
        readable: b(19) & 0x3F,
        // 37..42: UNR, UC, UNC, LNR, LC, LNC → bit order LNC..UNR.
        raw_thresholds: [b(42), b(41), b(40), b(39), b(38), b(37)],
    })
}

impl FullSensor {
    /// A raw reading in the sensor's unit; `None` when it has no analog reading
    /// or an OEM non-linear conversion.
    pub fn convert(&self, raw: u8) -> Option<f64> {
        let x = match self.units1 >> 6 {
            0 => f64::from(raw),
            1 => f64::from(raw as i8) + if (raw as i8) < 0 { 1.0 } else { 0.0 },
            2 => f64::from(raw as i8),
            _ => return None,
        };
        let y =
            (f64::from(self.m) * x + f64::from(self.b) * 10f64.powi(self.b_exp.into())) * 10f64.powi(self.r_exp.into());
        let v = match self.linearization {
            0 => y,
            1 => y.ln(),
            2 => y.log10(),
            3 => y.log2(),
            4 => y.exp(),
            5 => 10f64.powf(y),
            6 => 2f64.powf(y),
            7 => 1.0 / y,
            8 => y * y,
            9 => y * y * y,
            10 => y.sqrt(),
            11 => y.cbrt(),
            _ => return None,
        };
        // Readings are at most 8-bit resolution: round away float noise.
        Some((v * 1e6).round() / 1e6)
    }

    pub fn kind(&self) -> SensorKind {
        match (self.sensor_type, self.base_unit) {
            (0x01, _) => SensorKind::Temperature,
            (0x04, _) => SensorKind::Fan,
            (0x02, _) => SensorKind::Voltage,
            (_, 6) => SensorKind::Power,
            _ => SensorKind::Other,
        }
    }

    /// The unit, spelled as Redfish does (UCUM).
    pub fn unit(&self) -> Option<String> {
        if self.units1 & 0x01 != 0 {
            return Some("%".into());
        }
        Some(
            match self.base_unit {
                1 => "Cel",
                2 => "[degF]",
                3 => "K",
                4 => "V",
                5 => "A",
                6 => "W",
                7 => "J",
                18 => "RPM",
                19 => "Hz",
                _ => return None,
            }
            .into(),
        )
    }

    pub fn thresholds(&self) -> Thresholds {
        let t =
            |bit: usize| (self.readable & (1 << bit) != 0).then(|| self.convert(self.raw_thresholds[bit])).flatten();
        // Non-recoverable thresholds count as critical where there is no critical one.
        Thresholds {
            lower_warning: t(0),
            lower_critical: t(1).or(t(2)),
            upper_warning: t(3),
            upper_critical: t(4).or(t(5)),
        }
    }
}

/// A Get Sensor Reading response: the raw reading (`None` when scanning is
/// disabled or the reading unavailable) and the threshold health.
pub fn decode_reading(data: &[u8]) -> Option<(Option<u8>, Option<Health>)> {
    let raw = *data.first()?;
    let flags = *data.get(1)?;
    let available = flags & 0x40 != 0 && flags & 0x20 == 0;
    if !available {
        return Some((None, None));
    }
    let health = data.get(2).map(|s| match s & 0x3F {
        s if s & 0b110110 != 0 => Health::Critical,
        s if s & 0b001001 != 0 => Health::Warning,
        _ => Health::Ok,
    });
    Some((Some(raw), health))
}

impl<T: Transport> IpmiSession<T> {
    /// Every SDR record (header included) of the repository.
    async fn sdr_records(&mut self, ctx: &Ctx) -> Result<Vec<Vec<u8>>> {
        let info = self.exec(ctx, &cmd::GET_SDR_REPO_INFO, vec![]).await?;
        let count = info.get(1..3).map(|c| u16::from_le_bytes([c[0], c[1]])).unwrap_or(0);
        let mut out = Vec::new();
        if count == 0 {
            return Ok(out);
        }
        let reserve = |r: Vec<u8>| -> Result<[u8; 2]> {
            match r.as_slice() {
                [lo, hi, ..] => Ok([*lo, *hi]),
                _ => Err(protocol(cmd::RESERVE_SDR_REPO.id, "response too short")),
            }
        };
        let mut res = reserve(self.exec(ctx, &cmd::RESERVE_SDR_REPO, vec![]).await?)?;
        let mut id: u16 = 0;
        let mut retries = 0;
        'records: while out.len() < MAX_RECORDS {
            let mut record = Vec::new();
            let mut next = 0xFFFF;
            let mut want = 5usize;
            while record.len() < want {
                let take = (want - record.len()).min(usize::from(PIECE)) as u8;
                let [lo, hi] = id.to_le_bytes();
                let r = self.send(ctx, &cmd::GET_SDR, vec![res[0], res[1], lo, hi, record.len() as u8, take]).await?;
                match r.cc {
                    0 => {}
                    // Reservation cancelled (the repository changed): reserve again, reread the record.
                    0xC5 if retries < 3 => {
                        retries += 1;
                        res = reserve(self.exec(ctx, &cmd::RESERVE_SDR_REPO, vec![]).await?)?;
                        continue 'records;
                    }
                    cc => return Err(completion_code_error(cmd::GET_SDR.id, cc, cmd::GET_SDR.specific)),
                }
                let (n, bytes) = match r.data.as_slice() {
                    [lo, hi, rest @ ..] if !rest.is_empty() => (u16::from_le_bytes([*lo, *hi]), rest),
                    _ => return Err(protocol(cmd::GET_SDR.id, "response without record data")),
                };
                next = n;
                record.extend_from_slice(bytes);
                if record.len() >= 5 {
                    want = 5 + usize::from(record[4]);
                }
            }
            record.truncate(want);
            out.push(record);
            if next == 0xFFFF || next == id {
                break;
            }
            id = next;
        }
        Ok(out)
    }
}

#[async_trait]
impl<T: Transport> Sensors for IpmiSession<T> {
    async fn sensors(&mut self, ctx: &Ctx) -> Result<Vec<SensorReading>> {
        let records = self.sdr_records(ctx).await?;
        let mut out = Vec::new();
        for sensor in records.iter().filter_map(|r| decode_full_sensor(r)) {
            let r = self.send(ctx, &cmd::GET_SENSOR_READING, vec![sensor.number]).await?;
            let (raw, status) = if r.cc == 0 { decode_reading(&r.data).unwrap_or((None, None)) } else { (None, None) };
            let value = raw.and_then(|x| sensor.convert(x));
            let thresholds = sensor.thresholds();
            let health = status.or_else(|| value.map(|v| thresholds.health(v)));
            out.push(SensorReading {
                name: sensor.name.clone(),
                kind: sensor.kind(),
                value,
                unit: sensor.unit(),
                thresholds,
                health,
            });
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        s.split_whitespace().map(|b| u8::from_str_radix(b.trim_start_matches("0x"), 16).unwrap()).collect()
    }

    /// The VCore record of tests/ipmi_sim/bmc.emu.in: voltage, M=2, R=-2,
    /// readable lower/upper critical (raw 50/70), id "VCore".
    const VCORE: &str = "0x00 0x00 0x51 0x01 0x30 0x20 0x00 0x50 0x07 0x01 0x7f 0x68 0x02 0x01 0x00 0x00 0x00 0x00 0x12 0x12 0x00 0x04 0x00 0x00 0x02 0x00 0x00 0x00 0x00 0xe0 0x00 0x3c 0x00 0x00 0xff 0x00 0x00 0x46 0x00 0x00 0x32 0x00 0x02 0x02 0x00 0x00 0x00 0xc5 0x56 0x43 0x6f 0x72 0x65";

    #[test]
    fn a_full_sensor_record_decodes_and_linearises() {
        let s = decode_full_sensor(&hex(VCORE)).unwrap();
        assert_eq!(
            (s.number, s.name.as_str(), s.kind(), s.unit().as_deref()),
            (0x50, "VCore", SensorKind::Voltage, Some("V"))
        );
        assert_eq!(s.convert(60), Some(1.2));
        assert_eq!(
            s.thresholds(),
            Thresholds { lower_critical: Some(1.0), upper_critical: Some(1.4), ..Thresholds::default() }
        );
        // Signed fields: M = -3 (10-bit), B = 5, B exp 1, R exp -1, 2's complement reading.
        assert_eq!((signed10(0xFD, 0xC0), signed4(0x0F), signed4(0x07)), (-3, -1, 7));
        let mut t = s.clone();
        (t.m, t.b, t.b_exp, t.r_exp, t.units1) = (-3, 5, 1, -1, 0x80);
        assert_eq!(t.convert(0xFE), Some(5.6), "(-3·-2 + 5·10)·0.1");
        t.linearization = 0x70;
        assert_eq!(t.convert(1), None, "OEM non-linear");
        // Not a BMC-owned threshold sensor: skipped.
        let mut other = hex(VCORE);
        other[13] = 0x6F;
        assert_eq!(decode_full_sensor(&other), None);
        assert_eq!(decode_full_sensor(&hex(VCORE)[..20]), None);
    }

    #[test]
    fn a_hostile_sensor_name_has_no_control_characters() {
        // The ID string is the BMC's bytes; the name goes into the batch's
        // status record and bmcctl's tables (an escape sequence there
        // rewrites the operator's terminal, a line break forges a row).
        let mut record = hex(VCORE);
        record.truncate(47);
        let id = b"Fan1\n\x1b[2J\x1b]0;x\x07\r";
        record.push(0xC0 | id.len() as u8);
        record.extend_from_slice(id);
        let s = decode_full_sensor(&record).unwrap();
        assert!(!s.name.chars().any(char::is_control), "{:?}", s.name);
        assert!(s.name.starts_with("Fan1 "), "{:?}", s.name);
    }

    #[test]
    fn readings_decode() {
        assert_eq!(decode_reading(&[60, 0xC0, 0x00]), Some((Some(60), Some(Health::Ok))));
        assert_eq!(
            decode_reading(&[15, 0xC0, 0x01]),
            Some((Some(15), Some(Health::Warning))),
            "below lower non-critical"
        );
        assert_eq!(decode_reading(&[99, 0xC0, 0x18]), Some((Some(99), Some(Health::Critical))), "above upper critical");
        assert_eq!(decode_reading(&[0, 0xE0]), Some((None, None)), "reading unavailable");
        assert_eq!(decode_reading(&[0, 0x80]), Some((None, None)), "scanning disabled");
        assert_eq!(decode_reading(&[]), None);
    }
}
