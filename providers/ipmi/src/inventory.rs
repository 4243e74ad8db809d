//! Inventory: Get Device ID, chassis status and the FRU of device 0
//! (chassis, board and product areas, typed as [`Fru`]).

use crate::cmd;
use crate::error::completion_code_error;
use crate::fru;
use crate::session::{protocol, IpmiSession};
use crate::transport::Transport;
use async_trait::async_trait;
use bmcfleet_provider::{Ctx, Inventory, Result};
use bmcfleet_schema::components::Fru;
use bmcfleet_schema::{Inventory as InventoryData, PowerState};

impl<T: Transport> IpmiSession<T> {
    /// Reads `len` bytes of FRU device 0 from `offset`, in chunks the BMC
    /// accepts (32 bytes, smaller when it says the request is too large).
    async fn read_fru(&mut self, ctx: &Ctx, offset: usize, len: usize, words: bool) -> Result<Vec<u8>> {
        let unit = if words { 2 } else { 1 };
        let mut out = Vec::with_capacity(len);
        let mut chunk: usize = 32;
        while out.len() < len {
            let at = (offset + out.len()) / unit;
            let want = (len - out.len()).min(chunk).div_ceil(unit);
            let at16 = u16::try_from(at).map_err(|_| protocol(cmd::READ_FRU.id, "offset past 64 KiB"))?;
            let [lo, hi] = at16.to_le_bytes();
            let response = self.send(ctx, &cmd::READ_FRU, vec![0, lo, hi, want as u8]).await?;
            match response.cc {
                0 => {}
                0xC7..=0xCA if chunk > 8 => {
                    chunk /= 2;
                    continue;
                }
                cc => return Err(completion_code_error(cmd::READ_FRU.id, cc, cmd::READ_FRU.specific)),
            }
            let count = usize::from(*response.data.first().unwrap_or(&0)) * unit;
            let bytes = response.data.get(1..1 + count).unwrap_or(&[]);
            if bytes.is_empty() {
                return Err(protocol(cmd::READ_FRU.id, "the BMC returned no data"));
            }
            out.extend_from_slice(bytes);
        }
        out.truncate(len);
        Ok(out)
    }

    /// Chassis, board and product info of FRU device 0 (a problem with one
    /// area is noted in `extra` as `fru_error`). A BMC without FRU data
    /// yields nothing.
    async fn fru_info(&mut self, ctx: &Ctx, extra: &mut Vec<(String, String)>) -> Result<Option<Fru>> {
        let info = self.send(ctx, &cmd::GET_FRU_INFO, vec![0]).await?;
        if info.cc != 0 || info.data.len() < 3 {
            return Ok(None);
        }
        let size = usize::from(u16::from_le_bytes([info.data[0], info.data[1]]));
        let words = info.data[2] & 0x01 != 0;
        let header = match fru::parse_header(&self.read_fru(ctx, 0, 8.min(size), words).await?) {
            Ok(h) => h,
            Err(e) => {
                extra.push(("fru_error".into(), e.to_string()));
                return Ok(None);
            }
        };
        let mut out = Fru::default();
        for (offset, area_kind) in [(header.chassis, 0), (header.board, 1), (header.product, 2)] {
            let Some(offset) = offset.filter(|o| o + 2 <= size) else {
                continue;
            };
            let len = match fru::area_len(&self.read_fru(ctx, offset, 2, words).await?) {
                Ok(len) if offset + len <= size => len,
                Ok(_) => {
                    extra.push(("fru_error".into(), "FRU area runs past the FRU size".into()));
                    continue;
                }
                Err(e) => {
                    extra.push(("fru_error".into(), e.to_string()));
                    continue;
                }
            };
            let area = self.read_fru(ctx, offset, len, words).await?;
            let parsed = match area_kind {
                0 => fru::parse_chassis(&area).map(|c| {
                    out.chassis_type = c.kind;
                    out.chassis_part_number = c.part_number;
                    out.chassis_serial = c.serial;
                }),
                1 => fru::parse_board(&area).map(|b| {
                    out.board_manufacturer = b.manufacturer;
                    out.board_product = b.product;
                    out.board_serial = b.serial;
                    out.board_part_number = b.part_number;
                }),
                _ => fru::parse_product(&area).map(|p| {
                    out.product_manufacturer = p.manufacturer;
                    out.product_name = p.name;
                    out.product_part_number = p.part_number;
                    out.product_version = p.version;
                    out.product_serial = p.serial;
                    out.asset_tag = p.asset_tag;
                }),
            };
            if let Err(e) = parsed {
                extra.push(("fru_error".into(), e.to_string()));
            }
        }
        Ok((out != Fru::default()).then_some(out))
    }
}

#[async_trait]
impl<T: Transport> Inventory for IpmiSession<T> {
    /// Get Device ID (app 0x01), Get Chassis Status (chassis 0x01), and FRU
    /// device 0 via Get FRU Inventory Area Info (storage 0x10) and Read FRU
    /// Data (storage 0x11): chassis, board and product info areas. Chassis status and
    /// FRU are optional: a BMC that refuses them still yields an inventory.
    async fn inventory(&mut self, ctx: &Ctx) -> Result<InventoryData> {
        let data = self.exec(ctx, &cmd::GET_DEVICE_ID, vec![]).await?;
        let device = ipmi_rs::app::DeviceId::from_data(&data)
            .ok_or_else(|| protocol(cmd::GET_DEVICE_ID.id, "response too short"))?;
        let mut extra: Vec<(String, String)> = vec![
            ("device_id".into(), device.device_id.to_string()),
            ("device_revision".into(), device.device_revision.to_string()),
            ("ipmi_version".into(), format!("{}.{}", device.major_version, device.minor_version)),
            ("manufacturer_id".into(), device.manufacturer_id.to_string()),
            ("product_id".into(), device.product_id.to_string()),
        ];
        if let Some(aux) = device.aux_revision {
            extra.push(("aux_firmware_revision".into(), bmcfleet_provider::hex(&aux)));
        }

        let mut power_state = None;
        let status = self.send(ctx, &cmd::GET_CHASSIS_STATUS, vec![]).await?;
        if let Some(s) = (status.cc == 0).then(|| cmd::decode_chassis_status(&status.data)).flatten() {
            power_state = Some(if s.power_on { PowerState::On } else { PowerState::Off });
            extra.push(("power_restore_policy".into(), cmd::restore_policy_name(s.restore_policy).into()));
            extra.push(("power_fault".into(), s.power_fault.to_string()));
            extra.push(("power_overload".into(), s.power_overload.to_string()));
            extra.push(("chassis_intrusion".into(), (s.misc & 0x01 != 0).to_string()));
        }

        let fru = if device.fru_inventory_support { self.fru_info(ctx, &mut extra).await? } else { None };
        let f = fru.clone().unwrap_or_default();
        let mut inv = InventoryData {
            manufacturer: f.product_manufacturer.or(f.board_manufacturer),
            model: f.product_name.or(f.board_product),
            serial: f.product_serial.or(f.board_serial),
            firmware_version: cmd::firmware_revision(&data),
            power_state,
            extra,
            fru,
            ..Default::default()
        };
        bmcfleet_schema::components::bound(&mut inv);
        Ok(inv)
    }
}
