//! FRU information parsing (Platform Management FRU Information Storage
//! Definition v1.0): common header, chassis info area, board info area,
//! product info area. Every area's checksum is verified and every field
//! is read within its area's declared length.

/// Fields of the chassis info area (section 10).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ChassisInfo {
    /// SMBIOS chassis type name (`Rack Mount Chassis`), or `0x..` when unknown.
    pub kind: Option<String>,
    pub part_number: Option<String>,
    pub serial: Option<String>,
}

/// An info area whose fields are all type/length-encoded, declared in the
/// order the spec lists them, which is the order they are read in.
macro_rules! text_area {
    ($(#[$doc:meta])* $name:ident { $($field:ident),+ $(,)? }) => {
        $(#[$doc])*
        #[derive(Clone, Debug, Default, PartialEq, Eq)]
        pub struct $name {
            $(pub $field: Option<String>,)+
        }

        impl $name {
            /// From the area's fields, in order (a missing one is `None`).
            fn from_fields(fields: Vec<Option<String>>) -> $name {
                let mut f = fields.into_iter();
                $name { $($field: f.next().flatten(),)+ }
            }
        }
    };
}

text_area! {
    /// Fields of the board info area (section 11).
    BoardInfo { manufacturer, product, serial, part_number }
}

text_area! {
    /// Fields of the product info area (section 12).
    ProductInfo { manufacturer, name, part_number, version, serial, asset_tag }
}

/// What is wrong with FRU data read from the BMC.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// Shorter than its header or its declared lengths say.
    Truncated,
    /// A header or area whose checksum does not add up.
    Checksum,
    /// A format version this decoder does not know, or a zero length.
    Version,
}

pub type Error = bmcfleet_schema::error::Error<ErrorKind>;

fn error(kind: ErrorKind, why: impl Into<String>) -> Error {
    Error::new(kind, why)
}

/// Offsets (in bytes) of the areas named by the common header (section 8).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CommonHeader {
    pub chassis: Option<usize>,
    pub board: Option<usize>,
    pub product: Option<usize>,
}

fn checksum_ok(bytes: &[u8]) -> bool {
    bytes.iter().fold(0u8, |a, b| a.wrapping_add(*b)) == 0
}

pub fn parse_header(bytes: &[u8]) -> Result<CommonHeader, Error> {
    if bytes.len() < 8 {
        return Err(error(ErrorKind::Truncated, "FRU common header is shorter than 8 bytes"));
    }
    let header = &bytes[..8];
    if header[0] & 0x0F != 0x01 {
        return Err(error(ErrorKind::Version, format!("unknown FRU format version {}", header[0] & 0x0F)));
    }
    if !checksum_ok(header) {
        return Err(error(ErrorKind::Checksum, "FRU common header checksum mismatch"));
    }
    let offset = |b: u8| (b != 0).then_some(usize::from(b) * 8);
    Ok(CommonHeader { chassis: offset(header[2]), board: offset(header[3]), product: offset(header[4]) })
}

/// The length in bytes of an area from its first two bytes.
pub fn area_len(first_two: &[u8]) -> Result<usize, Error> {
    match first_two {
        [version, len, ..] if version & 0x0F == 0x01 && *len > 0 => Ok(usize::from(*len) * 8),
        [_, _, ..] => Err(error(ErrorKind::Version, "FRU area has an unknown version or zero length")),
        _ => Err(error(ErrorKind::Truncated, "FRU area is truncated")),
    }
}

/// Decodes one type/length-prefixed field; returns the value (if any) and
/// the bytes consumed, or `None` at the end-of-fields marker (0xC1).
fn field(bytes: &[u8]) -> Result<Option<(Option<String>, usize)>, Error> {
    let tl =
        *bytes.first().ok_or_else(|| error(ErrorKind::Truncated, "FRU area ends without the end-of-fields marker"))?;
    if tl == 0xC1 {
        return Ok(None);
    }
    let len = usize::from(tl & 0x3F);
    let raw = bytes.get(1..1 + len).ok_or_else(|| error(ErrorKind::Truncated, "FRU field runs past its area"))?;
    let text = match tl >> 6 {
        0b11 => String::from_utf8_lossy(raw).into_owned(),
        0b10 => six_bit_ascii(raw),
        0b01 => raw
            .iter()
            .flat_map(|b| [b >> 4, b & 0x0F])
            .map(|n| match n {
                0..=9 => char::from(b'0' + n),
                0xA => ' ',
                0xB => '-',
                0xC => '.',
                _ => '?',
            })
            .collect(),
        _ => bmcfleet_provider::hex(raw),
    };
    let text = text.trim_matches(|c: char| c == '\0' || c.is_whitespace()).to_string();
    Ok(Some(((!text.is_empty()).then_some(text), 1 + len)))
}

/// Packed 6-bit ASCII (FRU spec section 13.2): 4 characters per 3 bytes.
fn six_bit_ascii(raw: &[u8]) -> String {
    let mut bits: u32 = 0;
    let mut nbits = 0;
    let mut out = String::new();
    for b in raw {
        bits |= u32::from(*b) << nbits;
        nbits += 8;
        while nbits >= 6 {
            out.push(char::from(0x20 + (bits & 0x3F) as u8));
            bits >>= 6;
            nbits -= 6;
        }
    }
    out
}

/// Reads the fields of an area starting at `start` (after the fixed bytes).
fn fields(area: &[u8], start: usize) -> Result<Vec<Option<String>>, Error> {
    if !checksum_ok(area) {
        return Err(error(ErrorKind::Checksum, "FRU area checksum mismatch"));
    }
    let mut out = Vec::new();
    let mut at = start;
    while let Some((value, used)) = field(area.get(at..).unwrap_or(&[]))? {
        out.push(value);
        at += used;
    }
    Ok(out)
}

/// The SMBIOS chassis type names (SMBIOS 3.x, table "System Enclosure or
/// Chassis Types"), which the FRU spec's chassis type byte uses.
fn chassis_type(t: u8) -> String {
    const NAMES: [&str; 36] = [
        "Other",
        "Unknown",
        "Desktop",
        "Low Profile Desktop",
        "Pizza Box",
        "Mini Tower",
        "Tower",
        "Portable",
        "Laptop",
        "Notebook",
        "Hand Held",
        "Docking Station",
        "All in One",
        "Sub Notebook",
        "Space-saving",
        "Lunch Box",
        "Main Server Chassis",
        "Expansion Chassis",
        "SubChassis",
        "Bus Expansion Chassis",
        "Peripheral Chassis",
        "RAID Chassis",
        "Rack Mount Chassis",
        "Sealed-case PC",
        "Multi-system Chassis",
        "Compact PCI",
        "Advanced TCA",
        "Blade",
        "Blade Enclosure",
        "Tablet",
        "Convertible",
        "Detachable",
        "IoT Gateway",
        "Embedded PC",
        "Mini PC",
        "Stick PC",
    ];
    match usize::from(t).checked_sub(1).and_then(|i| NAMES.get(i)) {
        Some(name) => (*name).to_owned(),
        None => format!("0x{t:02x}"),
    }
}

/// Parses a complete chassis info area (its declared length).
pub fn parse_chassis(area: &[u8]) -> Result<ChassisInfo, Error> {
    // version, length, chassis type.
    let kind = area.get(2).copied().ok_or_else(|| error(ErrorKind::Truncated, "FRU chassis area is truncated"))?;
    let mut f = fields(area, 3)?.into_iter();
    Ok(ChassisInfo { kind: Some(chassis_type(kind)), part_number: f.next().flatten(), serial: f.next().flatten() })
}

/// Parses a complete board info area (its declared length).
pub fn parse_board(area: &[u8]) -> Result<BoardInfo, Error> {
    // version, length, language, 3-byte manufacturing date.
    Ok(BoardInfo::from_fields(fields(area, 6)?))
}

/// Parses a complete product info area (its declared length).
pub fn parse_product(area: &[u8]) -> Result<ProductInfo, Error> {
    // version, length, language.
    Ok(ProductInfo::from_fields(fields(area, 3)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The FRU blob in tests/ipmi_sim/bmc.emu.in.
    pub(crate) const SIM_FRU: [u8; 136] = [
        0x01, 0x00, 0x01, 0x04, 0x0b, 0x00, 0x00, 0xef, 0x01, 0x03, 0x17, 0xc7, 0x43, 0x48, 0x2d, 0x50, 0x4e, 0x2d,
        0x37, 0xc7, 0x43, 0x48, 0x2d, 0x30, 0x30, 0x30, 0x31, 0xc1, 0x00, 0x00, 0x00, 0x63, 0x01, 0x07, 0x00, 0x00,
        0x00, 0x00, 0xc8, 0x62, 0x6d, 0x63, 0x66, 0x6c, 0x65, 0x65, 0x74, 0xcb, 0x53, 0x49, 0x4d, 0x2d, 0x42, 0x4f,
        0x41, 0x52, 0x44, 0x2d, 0x31, 0xc8, 0x42, 0x52, 0x44, 0x2d, 0x30, 0x30, 0x30, 0x31, 0xc9, 0x50, 0x4e, 0x2d,
        0x42, 0x52, 0x44, 0x2d, 0x34, 0x32, 0xc0, 0xc1, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x39, 0x01, 0x06,
        0x00, 0xc8, 0x62, 0x6d, 0x63, 0x66, 0x6c, 0x65, 0x65, 0x74, 0xc8, 0x49, 0x50, 0x4d, 0x49, 0x2d, 0x53, 0x49,
        0x4d, 0xc8, 0x4d, 0x4f, 0x44, 0x45, 0x4c, 0x2d, 0x58, 0x31, 0xc3, 0x31, 0x2e, 0x30, 0xc8, 0x50, 0x52, 0x44,
        0x2d, 0x30, 0x30, 0x30, 0x31, 0xc0, 0xc0, 0xc1, 0x00, 0xc4,
    ];

    /// The area of [`SIM_FRU`] at `offset` (its declared length), parsed.
    fn sim_area<T>(offset: usize, parse: fn(&[u8]) -> Result<T, Error>) -> T {
        let len = area_len(&SIM_FRU[offset..]).unwrap();
        parse(&SIM_FRU[offset..offset + len]).unwrap()
    }

    #[test]
    fn parses_the_simulator_fru() {
        let h = parse_header(&SIM_FRU).unwrap();
        assert_eq!(h, CommonHeader { chassis: Some(8), board: Some(32), product: Some(88) });
        let chassis = sim_area(8, parse_chassis);
        assert_eq!(
            chassis,
            ChassisInfo {
                kind: Some("Rack Mount Chassis".into()),
                part_number: Some("CH-PN-7".into()),
                serial: Some("CH-0001".into())
            }
        );
        let text = |s: &str| Some(s.to_owned());
        let board = sim_area(32, parse_board);
        assert_eq!(
            board,
            BoardInfo {
                manufacturer: text("bmcfleet"),
                product: text("SIM-BOARD-1"),
                serial: text("BRD-0001"),
                part_number: text("PN-BRD-42")
            }
        );
        let product = sim_area(88, parse_product);
        assert_eq!(
            product,
            ProductInfo {
                manufacturer: text("bmcfleet"),
                name: text("IPMI-SIM"),
                part_number: text("MODEL-X1"),
                version: text("1.0"),
                serial: text("PRD-0001"),
                asset_tag: None,
            }
        );
    }

    #[test]
    fn rejects_corruption() {
        let mut bad = SIM_FRU;
        bad[40] ^= 0x01;
        assert_eq!(parse_board(&bad[32..88]).unwrap_err().kind(), ErrorKind::Checksum);
        bad[12] ^= 0x01;
        assert_eq!(parse_chassis(&bad[8..32]).unwrap_err().kind(), ErrorKind::Checksum);
        bad[7] ^= 0x01;
        let e = parse_header(&bad).unwrap_err();
        assert_eq!((e.kind(), e.to_string().as_str()), (ErrorKind::Checksum, "FRU common header checksum mismatch"));
        assert_eq!(parse_header(&SIM_FRU[..7]).unwrap_err().kind(), ErrorKind::Truncated);
        assert_eq!(area_len(&[0x02, 0x01]).unwrap_err().kind(), ErrorKind::Version);
        // A field that claims more bytes than its area holds.
        let mut long = [0x01, 0x01, 0x17, 0xC5, 0x41, 0x42, 0x43, 0x00];
        long[7] = 0u8.wrapping_sub(long[..7].iter().fold(0u8, |a, b| a.wrapping_add(*b)));
        assert_eq!(parse_chassis(&long).unwrap_err().to_string(), "FRU field runs past its area");
        assert_eq!(chassis_type(0x17), "Rack Mount Chassis");
        assert_eq!(chassis_type(0), "0x00");
        assert_eq!(chassis_type(0xFF), "0xff");
    }

    #[test]
    fn other_encodings() {
        // "IPMI" in 6-bit ASCII: I=0x29 P=0x30 M=0x2D I=0x29.
        let packed = [0x29 | (0x30 << 6) as u8, (0x30 >> 2) | ((0x2D & 0x0F) << 4), (0x2D >> 4) | (0x29 << 2)];
        assert_eq!(six_bit_ascii(&packed), "IPMI");
        let (v, used) = field(&[0x42, 0x12, 0x3B]).unwrap().unwrap();
        assert_eq!((v.as_deref(), used), (Some("123-"), 3));
    }
}
